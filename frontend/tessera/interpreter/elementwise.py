"""Elementwise and creation builtins: program ids, arange/full, where, min/max,
math functions, fma, umulhi, fdiv, cast."""
from __future__ import annotations

import math

import numpy as np

from ..language import dtypes as D
from ..language import semantics as S
from ..language.semantics import SemanticError
from . import numerics as N
from .values import Tensor, to_tensor, type_of, convert, unwrap, is_weak, arith


def _shape_list(shape, what: str) -> tuple:
    shape = unwrap(shape)
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    dims = tuple(int(unwrap(d)) for d in shape)
    for d in dims:
        if not S.is_power_of_two(d):
            raise SemanticError(f"{what}: shape {list(dims)} must contain powers of two")
    return dims


def _dtype_arg(dtype, what: str) -> D.dtype:
    dtype = unwrap(dtype)
    if isinstance(dtype, str):
        dtype = D.parse_signature_type(dtype)
    if not isinstance(dtype, D.dtype):
        raise SemanticError(f"{what}: expected a tl dtype, got {dtype!r}")
    return dtype


def _common_type(a, b):
    """The type two operands of a binary builtin are converted to (as arithmetic)."""
    ta, wa = type_of(a)
    tb, wb = type_of(b)
    return S.computation_type(ta, wa, tb, wb)


def _nan_mode(propagate_nan) -> bool:
    """True for tl.PropagateNan.ALL; None/NONE/False means IEEE minNum/maxNum."""
    p = unwrap(propagate_nan)
    if p is None or p is False:
        return False
    if p is True:
        return True
    if type(p) is int:  # tl.PropagateNan.NONE (0) / ALL (0xFFFF)
        return p != 0
    name = str(getattr(p, "name", p)).lower()
    if name.endswith("all"):
        return True
    if name.endswith("none") or name == "0":
        return False
    raise SemanticError(f"propagate_nan must be tl.PropagateNan.NONE or ALL, got {p!r}")


# Math functions: float in, same float type out; f16/bf16 computed in f32; integer
# inputs are converted to f32 first.
def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(x.dtype)


_MATH = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "sqrt_rn": np.sqrt, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "floor": np.floor,
    "ceil": np.ceil, "erf": _erf,
    "rsqrt": lambda x: np.asarray(1, x.dtype) / np.sqrt(x),
    # exp(-|x|) never overflows: for x << 0 the result is the (denormal) e/(1+e).
    "sigmoid": lambda x: np.where(x >= 0, np.asarray(1, x.dtype) / (np.asarray(1, x.dtype) + np.exp(-np.abs(x))),
                                  np.exp(-np.abs(x)) / (np.asarray(1, x.dtype) + np.exp(-np.abs(x)))),
}


class ElementwiseOps:
    pid: tuple
    grid: tuple

    # --- program and index space ---------------------------------------------------
    def program_id(self, axis):
        axis = int(unwrap(axis))
        if axis not in (0, 1, 2):
            raise SemanticError(f"tl.program_id: axis must be 0, 1 or 2, got {axis}")
        return Tensor(np.int32(self.pid[axis]), D.int32)

    def num_programs(self, axis):
        axis = int(unwrap(axis))
        if axis not in (0, 1, 2):
            raise SemanticError(f"tl.num_programs: axis must be 0, 1 or 2, got {axis}")
        return Tensor(np.int32(self.grid[axis]), D.int32)

    def arange(self, start, end):
        start, end = unwrap(start), unwrap(end)
        if not (isinstance(start, (int, np.integer)) and isinstance(end, (int, np.integer))):
            raise SemanticError("tl.arange: start and end must be constexpr integers")
        n = int(end) - int(start)
        if not S.is_power_of_two(n):
            raise SemanticError(f"tl.arange({start}, {end}): the length {n} must be a power of two")
        if not (-2**31 <= start and end <= 2**31):
            raise SemanticError(f"tl.arange({start}, {end}): the range must fit in int32")
        return Tensor(np.arange(start, end, dtype=np.int32), D.int32)

    def full(self, shape, value, dtype):
        dtype = _dtype_arg(dtype, "tl.full")
        dims = _shape_list(shape, "tl.full")
        v = convert(value, dtype)
        if not v.is_scalar():
            raise SemanticError(f"tl.full: the value must be a scalar, got shape {list(v.shape)}")
        return Tensor(np.full(dims, v.data, dtype=v.data.dtype), dtype)

    def zeros(self, shape, dtype):
        return self.full(shape, 0, dtype)

    def zeros_like(self, input):
        x = to_tensor(input)
        return Tensor(np.zeros(x.shape, dtype=x.data.dtype), x.dtype)

    def full_like(self, input, value, dtype=None):
        x = to_tensor(input)
        dtype = x.dtype if unwrap(dtype) is None else _dtype_arg(dtype, "tl.full_like")
        v = convert(value, dtype)
        return Tensor(np.full(x.shape, v.data, dtype=v.data.dtype), dtype)

    def cdiv(self, x, div):
        x, div = unwrap(x), unwrap(div)
        if is_weak(x) and is_weak(div) and not isinstance(x, float) and not isinstance(div, float):
            return -(-x // div)          # constexpr arithmetic, as in Triton
        return arith("floordiv", arith("sub", arith("add", x, div), 1), div)

    # --- selection and min/max ----------------------------------------------------------
    def where(self, condition, x, y):
        cond = to_tensor(condition, "tl.where condition")
        if not cond.dtype.is_bool():
            cond = Tensor(N.cast_array(cond.data, cond.dtype, D.int1), D.int1)
        x, y = unwrap(x), unwrap(y)
        tx = x.dtype if isinstance(x, Tensor) else None
        ty = y.dtype if isinstance(y, Tensor) else None
        if (tx is not None and tx.is_ptr()) or (ty is not None and ty.is_ptr()):
            if tx != ty or tx is None or ty is None:
                raise SemanticError(f"tl.where: both branches must be pointers of the same type, "
                                    f"got {tx} and {ty}")
            t = tx
        else:
            t = _common_type(x, y)
        a, b = convert(x, t), convert(y, t)
        shape = S.broadcast_shapes(S.broadcast_shapes(cond.shape, a.shape), b.shape)
        return Tensor(np.where(np.broadcast_to(cond.data, shape), np.broadcast_to(a.data, shape),
                               np.broadcast_to(b.data, shape)), t)

    def _min_max(self, x, y, propagate_nan, is_max: bool):
        t = _common_type(x, y)
        a, b = convert(x, t), convert(y, t)
        shape = S.broadcast_shapes(a.shape, b.shape)
        a, b = np.broadcast_to(a.data, shape), np.broadcast_to(b.data, shape)
        if t.is_floating():
            if _nan_mode(propagate_nan):
                fn = np.maximum if is_max else np.minimum      # NaN propagates
            else:
                fn = np.fmax if is_max else np.fmin            # IEEE maxNum/minNum
        else:
            fn = np.maximum if is_max else np.minimum          # by signedness of t
        return Tensor(fn(a, b), t)

    def maximum(self, x, y, propagate_nan=None):
        return self._min_max(x, y, propagate_nan, True)

    def minimum(self, x, y, propagate_nan=None):
        return self._min_max(x, y, propagate_nan, False)

    def clamp(self, x, min, max, propagate_nan=None):
        return self._min_max(self._min_max(x, min, propagate_nan, True), max, propagate_nan, False)

    # --- math --------------------------------------------------------------------------
    def _math(self, name, x):
        x = to_tensor(x, f"tl.{name}")
        if x.dtype.is_ptr():
            raise SemanticError(f"tl.{name} is not defined on pointers")
        if x.dtype.is_int():
            x = Tensor(N.cast_array(x.data, x.dtype, D.float32), D.float32)
        return Tensor(N.float_op(_MATH[name], x.dtype, x.data), x.dtype)

    def exp(self, x): return self._math("exp", x)
    def exp2(self, x): return self._math("exp2", x)
    def log(self, x): return self._math("log", x)
    def log2(self, x): return self._math("log2", x)
    def sqrt(self, x): return self._math("sqrt", x)
    def sqrt_rn(self, x): return self._math("sqrt_rn", x)
    def rsqrt(self, x): return self._math("rsqrt", x)
    def sin(self, x): return self._math("sin", x)
    def cos(self, x): return self._math("cos", x)
    def floor(self, x): return self._math("floor", x)
    def ceil(self, x): return self._math("ceil", x)
    def erf(self, x): return self._math("erf", x)
    def tanh(self, x): return self._math("tanh", x)
    def sigmoid(self, x): return self._math("sigmoid", x)

    def abs(self, x):
        x = to_tensor(x, "tl.abs")
        if x.dtype.is_ptr():
            raise SemanticError("tl.abs is not defined on pointers")
        if x.dtype.is_int_unsigned() or x.dtype.is_bool():
            return x
        return Tensor(np.abs(x.data), x.dtype)      # wraps for INT_MIN; clears the sign of floats

    def fma(self, x, y, z):
        # As Triton: x and y are promoted together, then the result with z.
        tx, wx = type_of(x)
        ty, wy = type_of(y)
        txy = S.computation_type(tx, wx, ty, wy)
        t = S.computation_type(txy, wx and wy, *type_of(z))
        if not t.is_floating():
            raise SemanticError(f"tl.fma needs floating-point operands, got {t}")
        a, b, c = convert(x, t), convert(y, t), convert(z, t)
        shape = S.broadcast_shapes(S.broadcast_shapes(a.shape, b.shape), c.shape)
        a, b, c = (np.broadcast_to(v.data, shape) for v in (a, b, c))
        return Tensor(N.fma(a, b, c, t), t)

    def umulhi(self, x, y):
        t = _common_type(x, y)
        if not (t.is_int() and t.primitive_bitwidth in (32, 64)):
            raise SemanticError(f"tl.umulhi needs 32- or 64-bit integer operands, got {t}")
        a, b = convert(x, t), convert(y, t)
        shape = S.broadcast_shapes(a.shape, b.shape)
        return Tensor(N.umulhi(np.broadcast_to(a.data, shape), np.broadcast_to(b.data, shape), t), t)

    def _float_div(self, name, x, y):
        t = _common_type(x, y)
        if not t.is_floating():
            raise SemanticError(f"tl.{name} needs floating-point operands, got {t}")
        a, b = convert(x, t), convert(y, t)
        shape = S.broadcast_shapes(a.shape, b.shape)
        return Tensor(N.float_op(np.true_divide, t, np.broadcast_to(a.data, shape),
                                 np.broadcast_to(b.data, shape)), t)

    def fdiv(self, x, y, ieee_rounding=False):
        return self._float_div("fdiv", x, y)

    def div_rn(self, x, y):
        return self._float_div("div_rn", x, y)

    def cast(self, input, dtype, fp_downcast_rounding=None, bitcast=False):
        x = to_tensor(input, "tl.cast")
        dst = _dtype_arg(dtype, "tl.cast")
        rounding = unwrap(fp_downcast_rounding) or "rtne"
        if rounding not in ("rtne", "rtz"):
            raise SemanticError(f"tl.cast: fp_downcast_rounding must be 'rtne' or 'rtz', got "
                                f"{rounding!r}")
        if unwrap(bitcast):
            return Tensor(N.bitcast_array(x.data, x.dtype, dst), dst)
        return Tensor(N.cast_array(x.data, x.dtype, dst, rounding), dst)
