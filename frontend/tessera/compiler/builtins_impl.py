"""The code generator's implementation of every tessera.language builtin.

A call `tl.NAME(...)` inside a kernel is bound against the builtin's Python signature
(core.py) and lands in BUILTINS[NAME](cg, **arguments). Arguments arrive as the code
generator holds them: `Value`s, `BlockPointer`s, tuples, or plain Python objects
(constexprs are already unwrapped). Implementations check their arguments, raise
SemanticError for user mistakes, and call the Semantic layer.
"""
from __future__ import annotations

import builtins as py

from ..language import core
from ..language import dtypes as D
from ..language.extra import cuda as extra_cuda
from ..language.semantics import SemanticError
from . import stdlib_random
from .values import BlockPointer, Value, describe, is_number, is_runtime

BUILTINS = {}

# Tensor methods (x.sum(...), x.to(...), ...) -> builtin name; the tensor is the first
# argument.
TENSOR_METHODS = {name: name for name in (
    "sum", "max", "min", "argmax", "argmin", "xor_sum", "cumsum", "cumprod", "reduce",
    "associative_scan", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "sin", "cos",
    "abs", "floor", "ceil", "erf", "tanh", "sigmoid", "softmax", "trans", "permute", "reshape",
    "view", "broadcast_to", "expand_dims", "split", "join", "ravel", "gather", "fma", "umulhi", "cdiv",
    "cast", "clamp", "interleave", "flip", "sort", "topk", "histogram")}
TENSOR_METHODS["to"] = "cast"


def builtin_impl(*names):
    def register(fn):
        for n in names:
            BUILTINS[n] = fn
        return fn
    return register


# --------------------------------------------------------------------------- helpers

def _const_int(x, what):
    if isinstance(x, py.int) and not isinstance(x, py.bool):
        return x
    raise SemanticError(f"{what} must be a compile-time integer, got {describe(x)}")


def _dtype(x, what):
    if isinstance(x, D.dtype):
        return x
    raise SemanticError(f"{what} must be a tessera.language dtype (e.g. tl.float32), got {describe(x)}")


def _tensor(cg, x, what):
    if isinstance(x, Value):
        return x
    if is_number(x):
        return cg.sem.to_value(x)
    raise SemanticError(f"{what} expects a tensor, got {describe(x)}")


def _dims(dims, what):
    """*dims given either spread out or as one tuple/list."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    for d in dims:
        _const_int(d, f"{what} dimensions")
    return tuple(dims)


def _propagate_nan(x):
    if x is None or x is False:
        return False
    if x is True:
        return True
    value = getattr(x, "value", x)
    if isinstance(value, py.int):
        return value != 0
    raise SemanticError(f"propagate_nan must be tl.PropagateNan.NONE or ALL, got {describe(x)}")


# --------------------------------------------------------------------------- index space

def _make_axis_builtin(name):
    def impl(cg, axis):
        axis = _const_int(axis, f"tl.{name} axis")
        if axis not in (0, 1, 2):
            raise SemanticError(f"tl.{name} axis must be 0, 1 or 2, got {axis}")
        return getattr(cg.sem, name)(axis)
    BUILTINS[name] = impl


_make_axis_builtin("program_id")
_make_axis_builtin("num_programs")


@builtin_impl("arange")
def _arange(cg, start, end):
    return cg.sem.arange(start, end)


@builtin_impl("full")
def _full(cg, shape, value, dtype):
    return cg.sem.full(shape, value, _dtype(dtype, "tl.full dtype"))


@builtin_impl("zeros")
def _zeros(cg, shape, dtype):
    return cg.sem.full(shape, 0, _dtype(dtype, "tl.zeros dtype"))


@builtin_impl("zeros_like")
def _zeros_like(cg, input):
    x = _tensor(cg, input, "tl.zeros_like")
    return cg.sem.full(x.shape, 0, x.dtype)


@builtin_impl("full_like")
def _full_like(cg, input, value, dtype=None):
    x = _tensor(cg, input, "tl.full_like")
    return cg.sem.full(x.shape, value, x.dtype if dtype is None else _dtype(dtype, "tl.full_like dtype"))


@builtin_impl("cdiv")
def _cdiv(cg, x, div):
    if not is_runtime(x) and not is_runtime(div):
        return -(-x // div)
    return cg.sem.cdiv(x, div)


# --------------------------------------------------------------------------- memory

@builtin_impl("load")
def _load(cg, pointer, mask=None, other=None, boundary_check=(), padding_option="",
          cache_modifier="", eviction_policy="", volatile=False):
    return cg.sem.load(pointer, mask, other, boundary_check or (), padding_option or "")


@builtin_impl("store")
def _store(cg, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
    cg.sem.store(pointer, value, mask, boundary_check or (), cache_modifier or "")


@builtin_impl("make_block_ptr")
def _make_block_ptr(cg, base, shape, strides, offsets, block_shape, order):
    return cg.sem.make_block_ptr(base, shape, strides, offsets, block_shape, order)


@builtin_impl("advance")
def _advance(cg, base, offsets):
    return cg.sem.advance(base, offsets)


def _make_atomic(op):
    def impl(cg, pointer, val, mask=None, sem=None, scope=None):
        return cg.sem.atomic_rmw(op, pointer, val, mask)
    BUILTINS["atomic_" + op] = impl


for _op in ("add", "max", "min", "and", "or", "xor", "xchg"):
    _make_atomic(_op)


@builtin_impl("atomic_cas")
def _atomic_cas(cg, pointer, cmp, val, sem=None, scope=None):
    return cg.sem.atomic_cas(pointer, cmp, val)


# --------------------------------------------------------------------------- elementwise

@builtin_impl("where")
def _where(cg, condition, x, y):
    return cg.sem.where(condition, x, y)


@builtin_impl("maximum")
def _maximum(cg, x, y, propagate_nan=None):
    return cg.sem.maximum(x, y, _propagate_nan(propagate_nan))


@builtin_impl("minimum")
def _minimum(cg, x, y, propagate_nan=None):
    return cg.sem.minimum(x, y, _propagate_nan(propagate_nan))


@builtin_impl("clamp")
def _clamp(cg, x, min, max, propagate_nan=None):
    nan = _propagate_nan(propagate_nan)
    return cg.sem.minimum(cg.sem.maximum(x, min, nan), max, nan)


def _make_math(name, ir_name=None):
    def impl(cg, x):
        return cg.sem.math_unary(ir_name or name, x)
    BUILTINS[name] = impl


for _name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs", "floor",
              "ceil", "erf", "tanh", "sigmoid"):
    _make_math(_name)
_make_math("sqrt_rn", "sqrt")


@builtin_impl("fma")
def _fma(cg, x, y, z):
    return cg.sem.fma(x, y, z)


@builtin_impl("umulhi")
def _umulhi(cg, x, y):
    return cg.sem.umulhi(x, y)


@builtin_impl("fdiv")
def _fdiv(cg, x, y, ieee_rounding=False):
    return cg.sem.fdiv(x, y, ieee=bool(getattr(ieee_rounding, "value", ieee_rounding)))


@builtin_impl("div_rn")
def _div_rn(cg, x, y):
    return cg.sem.fdiv(x, y, "tl.div_rn")


@builtin_impl("cast")
def _cast(cg, input, dtype, fp_downcast_rounding=None, bitcast=False):
    dtype = _dtype(dtype, "the target type of a cast")
    if not (isinstance(input, Value) or is_number(input)):
        raise SemanticError(f"cannot cast {describe(input)} to {dtype.ir}")
    rounding = getattr(fp_downcast_rounding, "value", fp_downcast_rounding)
    return cg.sem.cast(input, dtype, bitcast=py.bool(bitcast), rounding=rounding)


@builtin_impl("softmax")
def _softmax(cg, x, ieee_rounding=False):
    # As Triton: z = x - max(x, 0); exp(z) / sum(exp(z), 0). Like Triton, max upcasts
    # 16-bit floats to f32, so the result of an f16 softmax is f32.
    x = _tensor(cg, x, "tl.softmax")
    if not x.dtype.is_floating():
        x = cg.sem.cast(x, D.float32)
    m = _max(cg, x, 0, keep_dims=True)
    num = cg.sem.math_unary("exp", cg.sem.sub(x, m))
    den = _sum(cg, num, 0, keep_dims=True)
    return cg.sem.fdiv(num, den)


# --------------------------------------------------------------------------- reductions

def _operands(cg, input, what):
    if isinstance(input, tuple):
        return [_tensor(cg, v, what) for v in input], True
    return [_tensor(cg, input, what)], False


def _user_combine(cg, combine_fn, what):
    if is_runtime(combine_fn) or not callable(combine_fn):
        raise SemanticError(f"{what} combine_fn must be a function, got {describe(combine_fn)}")

    def combine(lhs, rhs):
        out = cg.call_function(combine_fn, list(lhs) + list(rhs), {})  # a function or a @tessera.kernel
        return list(out) if isinstance(out, tuple) else [out]
    return combine


@builtin_impl("reduce")
def _reduce(cg, input, axis, combine_fn, keep_dims=False):
    vals, is_tuple = _operands(cg, input, "tl.reduce")
    res = cg.sem.reduce(vals, axis, _user_combine(cg, combine_fn, "tl.reduce"), py.bool(keep_dims))
    return tuple(res) if is_tuple else res[0]


@builtin_impl("associative_scan")
def _associative_scan(cg, input, axis, combine_fn, reverse=False):
    vals, is_tuple = _operands(cg, input, "tl.associative_scan")
    res = cg.sem.scan(vals, axis, _user_combine(cg, combine_fn, "tl.associative_scan"), py.bool(reverse))
    return tuple(res) if is_tuple else res[0]


def _pick_sum_dtype(in_dtype, dtype):
    # Triton (standard.py, _pick_sum_dtype): integers narrower than 32 bits accumulate
    # in i32/u32 with their signedness; int1 counts as unsigned (Triton lists it with
    # the unsigned types), so a sum of booleans is u32. Floats keep their type: an f16
    # sum accumulates and returns f16 (bf16 too; only cumsum widens bf16 to f32).
    if dtype is not None:
        return _dtype(dtype, "sum dtype")
    if (in_dtype.is_int_unsigned() or in_dtype.is_bool()) and in_dtype.primitive_bitwidth < 32:
        return D.uint32
    if in_dtype.is_int_signed() and in_dtype.primitive_bitwidth < 32:
        return D.int32
    return None


def _add_combine(cg):
    return lambda lhs, rhs: [cg.sem.add(lhs[0], rhs[0])]


@builtin_impl("sum")
def _sum(cg, input, axis=None, keep_dims=False, dtype=None):
    x = _tensor(cg, input, "tl.sum")
    out = _pick_sum_dtype(x.dtype, dtype)
    if out is not None:
        x = cg.sem.cast(x, out)
    return cg.sem.reduce([x], axis, _add_combine(cg), py.bool(keep_dims), "tl.sum")[0]


def _promote_for_minmax(cg, x, return_indices):
    # Triton: bf16 -> f32 always; without indices, anything narrower than 32 bits is
    # widened (floats to f32, integers to i32), so max of f16 returns f32.
    if x.dtype.is_bf16():
        x = cg.sem.cast(x, D.float32)
    if not return_indices and x.dtype.primitive_bitwidth < 32:
        x = cg.sem.cast(x, D.float32 if x.dtype.is_floating() else D.int32)
    return x


def _minmax(cg, input, axis, return_indices, tie_break_left, keep_dims, greater):
    what = "tl.max" if greater else "tl.min"
    x = _promote_for_minmax(cg, _tensor(cg, input, what), return_indices)
    if return_indices:
        v, i = cg.sem.reduce_with_indices(x, axis, greater, py.bool(tie_break_left), py.bool(keep_dims), what)
        return v, i
    op = cg.sem.maximum if greater else cg.sem.minimum
    return cg.sem.reduce([x], axis, lambda l, r: [op(l[0], r[0])], py.bool(keep_dims), what)[0]


@builtin_impl("max")
def _max(cg, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    return _minmax(cg, input, axis, return_indices, return_indices_tie_break_left, keep_dims, True)


@builtin_impl("min")
def _min(cg, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
    return _minmax(cg, input, axis, return_indices, return_indices_tie_break_left, keep_dims, False)


@builtin_impl("argmax")
def _argmax(cg, input, axis, tie_break_left=True, keep_dims=False):
    return _minmax(cg, input, axis, True, tie_break_left, keep_dims, True)[1]


@builtin_impl("argmin")
def _argmin(cg, input, axis, tie_break_left=True, keep_dims=False):
    return _minmax(cg, input, axis, True, tie_break_left, keep_dims, False)[1]


@builtin_impl("xor_sum")
def _xor_sum(cg, input, axis=None, keep_dims=False):
    x = _tensor(cg, input, "tl.xor_sum")
    if not x.dtype.is_int():
        raise SemanticError(f"tl.xor_sum needs integer elements, got {describe(x)}")
    return cg.sem.reduce([x], axis, lambda l, r: [cg.sem.xor(l[0], r[0])], py.bool(keep_dims),
                         "tl.xor_sum")[0]


@builtin_impl("cumsum")
def _cumsum(cg, input, axis=0, reverse=False, dtype=None):
    x = _tensor(cg, input, "tl.cumsum")
    if x.dtype.is_bf16():
        x = cg.sem.cast(x, D.float32)
    out = _pick_sum_dtype(x.dtype, dtype)
    if out is not None:
        x = cg.sem.cast(x, out)
    return cg.sem.scan([x], axis, _add_combine(cg), py.bool(reverse), "tl.cumsum")[0]


@builtin_impl("cumprod")
def _cumprod(cg, input, axis=0, reverse=False):
    x = _tensor(cg, input, "tl.cumprod")
    if x.dtype.is_bf16():
        x = cg.sem.cast(x, D.float32)
    return cg.sem.scan([x], axis, lambda l, r: [cg.sem.mul(l[0], r[0])], py.bool(reverse),
                       "tl.cumprod")[0]


# --------------------------------------------------------------------------- dot and shapes

_PRECISIONS = ("tf32", "tf32x3", "ieee")


@builtin_impl("dot")
def _dot(cg, input, other, acc=None, input_precision=None, allow_tf32=None,
         max_num_imprecise_acc=None, out_dtype=None):
    if input_precision is None:
        if allow_tf32 is False:
            input_precision = "ieee"
        else:
            # Triton's default for f32 operands is tf32 (options may say otherwise).
            input_precision = cg.options.get("default_dot_input_precision", "tf32")
    if input_precision not in _PRECISIONS:
        raise SemanticError(f"tl.dot input_precision must be one of {_PRECISIONS}, got {input_precision!r}")
    if out_dtype is not None:
        out_dtype = _dtype(out_dtype, "tl.dot out_dtype")
    return cg.sem.dot(input, other, acc, input_precision, out_dtype)


@builtin_impl("trans")
def _trans(cg, input, *dims):
    x = _tensor(cg, input, "tl.trans")
    dims = _dims(dims, "tl.trans")
    if not dims:
        if len(x.shape) != 2:
            raise SemanticError(f"tl.trans without dims needs a 2-D tile, got {describe(x)}; "
                                f"pass the permutation")
        dims = (1, 0)
    return cg.sem.permute(x, dims)


@builtin_impl("permute")
def _permute(cg, input, *dims):
    return cg.sem.permute(_tensor(cg, input, "tl.permute"), _dims(dims, "tl.permute"))


@builtin_impl("reshape")
def _reshape(cg, input, *shape, can_reorder=False):
    return cg.sem.reshape(input, _dims(shape, "tl.reshape"))


@builtin_impl("view")
def _view(cg, input, *shape):
    return cg.sem.reshape(input, _dims(shape, "tl.view"))


@builtin_impl("broadcast")
def _broadcast(cg, input, other):
    a, b = _tensor(cg, input, "tl.broadcast"), _tensor(cg, other, "tl.broadcast")
    return cg.sem.broadcast_pair(a, b)


@builtin_impl("broadcast_to")
def _broadcast_to(cg, input, *shape):
    shape = cg.sem.check_shape(_dims(shape, "tl.broadcast_to"), "tl.broadcast_to")
    return cg.sem.broadcast_to(_tensor(cg, input, "tl.broadcast_to"), shape, "the tensor")


@builtin_impl("expand_dims")
def _expand_dims(cg, input, axis):
    return cg.sem.expand_dims_multi(input, axis)


@builtin_impl("join")
def _join(cg, a, b):
    return cg.sem.join(a, b)


@builtin_impl("split")
def _split(cg, a):
    return cg.sem.split(a)


@builtin_impl("gather")
def _gather(cg, src, index, axis):
    return cg.sem.gather(src, index, _const_int(axis, "tl.gather axis"))


@builtin_impl("cluster_reduce_scatter")
def _cluster_reduce_scatter(cg, x, cluster_size):
    return cg.sem.cluster_reduce_scatter(x, cluster_size)


@builtin_impl("ravel")
def _ravel(cg, x):
    x = _tensor(cg, x, "tl.ravel")
    n = 1
    for d in x.shape:
        n *= d
    return cg.sem.reshape(x, (n,))


# --------------------------------------------------------------------------- random

def _random_args(cg, seed, offset, n_rounds, what):
    seed = cg.sem.to_value(seed) if is_number(seed) else seed
    offset = cg.sem.to_value(offset) if is_number(offset) else offset
    if not (isinstance(seed, Value) and not seed.shape and seed.dtype.is_int() and not seed.dtype.is_bool()):
        raise SemanticError(f"{what} seed must be an integer scalar, got {describe(seed)}")
    if not (isinstance(offset, Value) and offset.dtype.is_int()
            and offset.dtype.primitive_bitwidth in (32, 64)):
        raise SemanticError(f"{what} offsets must be 32- or 64-bit integers, got {describe(offset)}")
    _const_int(n_rounds, f"{what} n_rounds")
    return seed, offset


def _make_random(name):
    def impl(cg, seed, offset, n_rounds=10):
        seed, offset = _random_args(cg, seed, offset, n_rounds, f"tl.{name}")
        return cg.call_function(getattr(stdlib_random, name), [seed, offset, n_rounds], {})
    BUILTINS[name] = impl


for _name in ("randint", "randint4x", "rand", "randn"):
    _make_random(_name)


# --------------------------------------------------------------------------- compile time and debugging

@builtin_impl("static_assert")
def _static_assert(cg, cond, msg=""):
    if is_runtime(cond):
        raise SemanticError(f"tl.static_assert needs a compile-time condition, got {describe(cond)}; "
                            f"use tl.device_assert for run-time checks")
    if not cond:
        raise SemanticError("static_assert failed" + (f": {msg}" if msg else ""))


@builtin_impl("static_print")
def _static_print(cg, *values, sep=" ", end="\n", file=None, flush=False):
    py.print(*[describe(v) if is_runtime(v) else v for v in values], sep=sep, end=end, file=file, flush=flush)


@builtin_impl("device_print")
def _device_print(cg, prefix, *args, hex=False):
    if not isinstance(prefix, str):
        raise SemanticError(f"tl.device_print prefix must be a string, got {describe(prefix)}")
    if args and len(prefix) > 2 and not prefix.endswith(" "):
        prefix += " "  # as Triton
    cg.sem.device_print(prefix, args, py.bool(hex))


@builtin_impl("device_assert")
def _device_assert(cg, cond, msg=""):
    if not cg.options.get("debug", False):
        return
    if not isinstance(msg, str):
        raise SemanticError(f"tl.device_assert msg must be a string, got {describe(msg)}")
    if not is_runtime(cond):
        cond = cg.sem.const(py.bool(cond), D.int1)
    cg.sem.device_assert(cond, msg)


def _make_hint(name):
    def impl(cg, input, values):
        return cg.sem.hint(input, name, values, check=cg.options.get("debug", False))
    BUILTINS[name] = impl


for _name in ("multiple_of", "max_contiguous", "max_constancy"):
    _make_hint(_name)


@builtin_impl("assume")
def _assume(cg, cond):
    if not is_runtime(cond):
        if not cond:
            raise SemanticError("tl.assume(False): the condition is false at compile time")
        return
    cg.sem.assume(cond)


@builtin_impl("debug_barrier")
def _debug_barrier(cg):
    # A CTA barrier on the GPU (bar.sync, which also orders the threads' global and
    # shared memory accesses); nothing on the CPU, where a program is one thread.
    cg.sem.builder.create("barrier", [])
    return None


# --------------------------------------------------------------------------- tl.extra.cuda: grid dependency control

@builtin_impl("gdc_wait")
def _gdc_wait(cg):
    # griddepcontrol.wait on sm_90+, nothing elsewhere. Its presence makes the compiled
    # kernel a PDL launch (compiler/pipeline.cpp's metadata "pdl"); the passes keep it in
    # place relative to loads and stores (a side-effecting op).
    cg.sem.builder.create("gdc_wait", [])
    return None


@builtin_impl("gdc_launch_dependents")
def _gdc_launch_dependents(cg):
    # griddepcontrol.launch_dependents on sm_90+, nothing elsewhere.
    cg.sem.builder.create("gdc_launch_dependents", [])
    return None


from . import stdlib_shapes  # noqa: E402,F401  (registers interleave, cat, flip, sort, topk, histogram, swizzle2d)

# The modules that declare builtins: tl itself and tl.extra.cuda.
_BUILTIN_MODULES = (core, extra_cuda)


def check_complete():
    """Every builtin declared in core.py and tl.extra.cuda has an implementation
    (checked by the tests)."""
    declared = {getattr(m, n).__tessera_builtin__ for m in _BUILTIN_MODULES for n in dir(m)
                if core.is_builtin(getattr(m, n))}
    return sorted(declared - set(BUILTINS))


__all__ = ["BUILTINS", "TENSOR_METHODS", "check_complete", "BlockPointer"]
