"""Interpreter values: `Tensor` (a numpy array plus its Tessera type) and the Python
operators on it, with the promotion and broadcasting rules of
tessera.language.semantics and the op semantics of docs/tile_ir.md."""
from __future__ import annotations

import numpy as np

from ..language import core
from ..language import dtypes as D
from ..language import semantics as S
from ..language.semantics import SemanticError
from . import numerics as N


class TileTruthValueError(TypeError):
    """`if`/`while`/`and`/`or` on a tile (not a scalar). Reductions catch it to rerun a
    combine function one element at a time."""


class Tensor(core.tensor):
    """A scalar (shape ()) or tile value inside an interpreted kernel."""

    __slots__ = ("data", "dtype")
    __array_ufunc__ = None      # numpy scalars/arrays defer to our reflected operators
    __hash__ = object.__hash__  # __eq__ builds a tensor; identity hashing stays usable

    def __init__(self, data, dtype: D.dtype):
        self.dtype = dtype
        self.data = np.asarray(data).astype(N.storage_dtype(dtype), copy=False)

    # --- shape -------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape)

    @property
    def numel(self) -> int:
        return int(self.data.size)

    @property
    def T(self):
        return core.trans(self)

    def is_scalar(self) -> bool:
        return self.data.ndim == 0

    def numpy(self) -> np.ndarray:
        """A copy of the values (bf16 as float32, pointers as uint64 addresses)."""
        return np.array(self.data)

    def __repr__(self):
        if self.is_scalar():
            return f"tensor({self.data.item()!r}, {self.dtype})"
        return f"tensor(shape={list(self.shape)}, dtype={self.dtype},\n{self.data})"

    # --- Python conversions (scalars only) ----------------------------------------
    def _scalar_value(self, what: str):
        if not self.is_scalar():
            raise TileTruthValueError(
                f"{what} of a tile of shape {list(self.shape)} is not defined: only scalars "
                f"can drive Python control flow. Reduce it first (tl.max, tl.sum, ...) or "
                f"use tl.where for elementwise choices")
        return self.data.item()

    def __bool__(self):
        return bool(self._scalar_value("the truth value"))

    def __index__(self):
        if not self.dtype.is_int():
            raise TypeError(f"a {self.dtype} scalar cannot be used as an index")
        return int(self._scalar_value("the integer value"))

    def __int__(self):
        return int(self._scalar_value("the integer value"))

    def __float__(self):
        return float(self._scalar_value("the float value"))

    def __iter__(self):
        raise TypeError("tiles are not iterable; use tl.split, reductions or indexing with None/:")

    # --- indexing: only None (new axis) and ':' ---------------------------------------
    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        np_index = []
        for item in index:
            item = unwrap(item)
            if item is None:
                np_index.append(None)
            elif isinstance(item, slice) and item == slice(None):
                np_index.append(slice(None))
            else:
                raise SemanticError(f"tile indexing accepts only None and ':' (as in x[:, None]), "
                                    f"got {item!r}")
        if len([i for i in np_index if i is not None]) > self.data.ndim:
            raise SemanticError(f"too many ':' for a tile of rank {self.data.ndim}")
        return Tensor(self.data[tuple(np_index)], self.dtype)

    def __setitem__(self, index, value):
        raise TypeError("tiles are immutable; build a new tile with tl.where")

    # --- conversions and members ------------------------------------------------------
    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        return core.cast(self, dtype, fp_downcast_rounding=fp_downcast_rounding, bitcast=bitcast)

    def __getattr__(self, name):
        # Tensor member functions of triton.language (x.sum(), x.reshape(...), ...).
        if name in MEMBER_BUILTINS:
            fn = getattr(core, name)
            return lambda *args, **kwargs: fn(self, *args, **kwargs)
        raise AttributeError(f"'{type(self).__name__}' has no attribute '{name}'")

    # --- operators -----------------------------------------------------------------
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return arith("mul", self, o)
    def __rmul__(self, o): return arith("mul", o, self)
    def __truediv__(self, o): return arith("truediv", self, o)
    def __rtruediv__(self, o): return arith("truediv", o, self)
    def __floordiv__(self, o): return arith("floordiv", self, o)
    def __rfloordiv__(self, o): return arith("floordiv", o, self)
    def __mod__(self, o): return arith("mod", self, o)
    def __rmod__(self, o): return arith("mod", o, self)
    def __and__(self, o): return bitwise("and", self, o)
    def __rand__(self, o): return bitwise("and", o, self)
    def __or__(self, o): return bitwise("or", self, o)
    def __ror__(self, o): return bitwise("or", o, self)
    def __xor__(self, o): return bitwise("xor", self, o)
    def __rxor__(self, o): return bitwise("xor", o, self)
    def __lshift__(self, o): return bitwise("shl", self, o)
    def __rlshift__(self, o): return bitwise("shl", o, self)
    def __rshift__(self, o): return bitwise("shr", self, o)
    def __rrshift__(self, o): return bitwise("shr", o, self)
    def __eq__(self, o): return compare("eq", self, o)
    def __ne__(self, o): return compare("ne", self, o)
    def __lt__(self, o): return compare("lt", self, o)
    def __le__(self, o): return compare("le", self, o)
    def __gt__(self, o): return compare("gt", self, o)
    def __ge__(self, o): return compare("ge", self, o)
    def __neg__(self): return negate(self)
    def __pos__(self): return self
    def __invert__(self): return invert(self)
    def __abs__(self): return core.abs(self)


# Builtins callable as methods, x.name(...) == tl.name(x, ...), as in triton.language.
MEMBER_BUILTINS = frozenset({
    "sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce", "associative_scan",
    "cumsum", "cumprod", "reshape", "view", "permute", "trans", "broadcast_to",
    "expand_dims", "ravel", "split", "join", "cast", "exp", "exp2", "log", "log2", "sqrt",
    "sqrt_rn", "rsqrt", "sin", "cos", "abs", "floor", "ceil", "erf", "tanh", "sigmoid",
    "softmax", "cdiv", "fma", "umulhi", "fdiv", "div_rn", "multiple_of", "max_contiguous",
    "max_constancy", "interleave", "flip", "sort", "topk", "histogram", "gather",
})


# --- turning operands into tensors ------------------------------------------------------
def unwrap(x):
    while isinstance(x, core.constexpr):
        x = x.value
    return x


def is_weak(x) -> bool:
    """Python literals and constexprs are "weak" operands (semantics.py)."""
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def dtype_of_numpy(dt: np.dtype) -> D.dtype:
    if dt.name in D.NUMPY_TO_DTYPE:
        return D.NUMPY_TO_DTYPE[dt.name]
    if dt.name == "bfloat16":  # ml_dtypes
        return D.bfloat16
    raise SemanticError(f"numpy type {dt} has no Tessera equivalent")


def to_tensor(x, what: str = "operand") -> Tensor:
    """Any kernel value -> Tensor (Python literals take semantics.literal_type)."""
    x = unwrap(x)
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.generic):
        return Tensor(np.asarray(x), dtype_of_numpy(x.dtype))
    if is_weak(x):
        t = S.literal_type(x)
        return Tensor(N.python_constant(x, t), t)
    raise SemanticError(f"{what}: cannot use a value of Python type {type(x).__name__} in a kernel")


def type_of(x):
    """(dtype, is_weak) of an operand."""
    x = unwrap(x)
    if isinstance(x, Tensor):
        return x.dtype, False
    if is_weak(x):
        return S.literal_type(x), True
    return to_tensor(x).dtype, False


def convert(x, t: D.dtype) -> Tensor:
    """An operand converted to t: weak literals exactly from their Python value,
    tensors by the cast op."""
    x = unwrap(x)
    if is_weak(x):
        return Tensor(N.python_constant(x, t), t)
    x = to_tensor(x)
    if x.dtype == t and x.dtype.is_ptr() == t.is_ptr():
        return x
    return Tensor(N.cast_array(x.data, x.dtype, t), t)


def broadcast_pair(a: Tensor, b: Tensor):
    shape = S.broadcast_shapes(a.shape, b.shape)
    return np.broadcast_to(a.data, shape), np.broadcast_to(b.data, shape)


def broadcast_to_shape(x: Tensor, shape: tuple, what: str) -> np.ndarray:
    """Broadcast x to exactly `shape` (x may not be larger)."""
    if S.broadcast_shapes(x.shape, shape) != tuple(shape):
        raise SemanticError(f"{what}: shape {list(x.shape)} cannot be broadcast to {list(shape)}")
    return np.broadcast_to(x.data, shape)


# --- arithmetic ----------------------------------------------------------------------------
def _pointer_offset(ptr: Tensor, off, negate_offset: bool) -> Tensor:
    """addptr: ptr + off * sizeof(element); signed offsets sign-extend, unsigned zero-extend."""
    off = to_tensor(off, "pointer offset")
    if not off.dtype.is_int():
        raise SemanticError(f"a pointer offset must be an integer, got {off.dtype}")
    wide = off.data.astype(np.int64 if off.dtype.is_int_signed() else np.uint64).astype(np.uint64)
    if negate_offset:
        wide = np.uint64(0) - wide
    size = np.uint64(ptr.dtype.element_ty.itemsize)
    p, w = broadcast_pair(ptr, Tensor(wide, D.uint64))
    return Tensor(p + w * size, ptr.dtype)


def _is_ptr(x) -> bool:
    return isinstance(x, Tensor) and x.dtype.is_ptr()


def add(a, b):
    a, b = unwrap(a), unwrap(b)
    if _is_ptr(a) or _is_ptr(b):
        if _is_ptr(a) and _is_ptr(b):
            raise SemanticError("cannot add two pointers")
        return _pointer_offset(a, b, False) if _is_ptr(a) else _pointer_offset(b, a, False)
    return arith("add", a, b)


def sub(a, b):
    a, b = unwrap(a), unwrap(b)
    if _is_ptr(a):
        if _is_ptr(b):
            raise SemanticError("cannot subtract two pointers; bitcast them to tl.int64 first")
        return _pointer_offset(a, b, True)
    if _is_ptr(b):
        raise SemanticError("cannot subtract a pointer from a number")
    return arith("sub", a, b)


def _int_compute(op, x, y, t: D.dtype):
    """Integer add/sub/mul/div/rem/shifts with wrapping; i1 computes modulo 2."""
    if t.is_bool():
        x, y = x.astype(np.uint8), y.astype(np.uint8)
    if op == "add":
        r = x + y
    elif op == "sub":
        r = x - y
    elif op == "mul":
        r = x * y
    elif op in ("floordiv", "mod"):
        q, rem = N.int_div_trunc(x, y, t.is_int_signed())
        r = q if op == "floordiv" else rem
    elif op == "shl":
        r = np.left_shift(x, y)
    elif op == "shr":
        r = np.right_shift(x, y)   # arithmetic for signed numpy types, logical for unsigned
    else:
        raise AssertionError(op)
    if t.is_bool():
        return (r & 1) != 0
    return np.asarray(r).astype(N.storage_dtype(t), copy=False)


_FLOAT_FNS = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
              "truediv": np.true_divide, "mod": np.fmod}


def arith(op, a, b):
    """+ - * / // % on numbers (pointers are handled by add/sub)."""
    a, b = unwrap(a), unwrap(b)
    if _is_ptr(a) or _is_ptr(b):
        raise SemanticError(f"operator {_SYMBOL[op]} is not defined on pointers")
    ta, wa = type_of(a)
    tb, wb = type_of(b)
    if op == "truediv":
        t = S.truediv_type(ta, wa, tb, wb)
    else:
        t = S.computation_type(ta, wa, tb, wb, div_or_mod=op in ("floordiv", "mod"))
    if op == "floordiv" and t.is_floating():
        raise SemanticError(f"operator // needs integer operands, got {ta} and {tb}; "
                            f"use tl.floor(a / b) for floats")
    x, y = broadcast_pair(convert(a, t), convert(b, t))
    if t.is_floating():
        return Tensor(N.float_op(_FLOAT_FNS[op], t, x, y), t)
    return Tensor(_int_compute(op, x, y, t), t)


_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
           "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}


def bitwise(op, a, b):
    a, b = unwrap(a), unwrap(b)
    ta, wa = type_of(a)
    tb, wb = type_of(b)
    t = S.bitwise_type(ta, wa, tb, wb, _SYMBOL[op])
    x, y = broadcast_pair(convert(a, t), convert(b, t))
    if op in ("shl", "shr"):
        return Tensor(_int_compute(op, x, y, t), t)
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    return Tensor(fn(x, y), t)


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def compare(pred, a, b):
    """Comparisons yield i1; floats are ordered except `!=` (true if either is NaN)."""
    a, b = unwrap(a), unwrap(b)
    if _is_ptr(a) and _is_ptr(b):
        x, y = broadcast_pair(a, b)
        return Tensor(_CMP[pred](x, y), D.int1)
    ta, wa = type_of(a)
    tb, wb = type_of(b)
    t = S.computation_type(ta, wa, tb, wb)
    x, y = broadcast_pair(convert(a, t), convert(b, t))
    return Tensor(_CMP[pred](x, y), D.int1)


def negate(x):
    x = to_tensor(x)
    if x.dtype.is_ptr():
        raise SemanticError("cannot negate a pointer")
    if x.dtype.is_bool():
        return x                                  # -x == x modulo 2
    return Tensor(np.negative(x.data), x.dtype)   # `neg`: -0.0 for floats, wraps for ints


def invert(x):
    x = to_tensor(x)
    if not x.dtype.is_int():
        raise SemanticError(f"operator ~ needs an integer operand, got {x.dtype}")
    if x.dtype.is_bool():
        return Tensor(~x.data, x.dtype)
    return Tensor(np.invert(x.data), x.dtype)
