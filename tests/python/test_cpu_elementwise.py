"""Compiled CPU path, elementwise ops against numpy: arithmetic on odd sizes with
masks, comparisons and where, min/max with NaNs, math functions (ulp-bounded, with
special values), fma, umulhi, scalars and weak literals, 2-D/3-D grids."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import (ON_GPU, ODD_SIZES, assert_close, assert_fp32_quotient, assert_gpu_exp_f32, assert_poison, assert_ulp,
                         bf16_bits_to_f32, bf16_round, erf_ref, f32_to_bf16_bits, grid_for,
                         poisoned, run_interpreted, special_values)


# --- kernels shared by the tests (one compilation per dtype / FN) --------------------------
@tessera.kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@tessera.kernel
def unary_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, FN(x), mask=mask)


@tessera.kernel
def binary_kernel(x_ptr, y_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, FN(x, y), mask=mask)


@tessera.kernel
def ternary_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, FN(x, y, z), mask=mask)


def apply_unary(fn, x, out_dtype=None, block=128):
    out = poisoned(x.shape, out_dtype or x.dtype)
    unary_kernel[grid_for(x.size, block)](x, out, x.size, FN=fn, BLOCK=block)
    return out


def apply_binary(fn, x, y, out_dtype=None, block=128):
    out = poisoned(x.shape, out_dtype or x.dtype)
    binary_kernel[grid_for(x.size, block)](x, y, out, x.size, FN=fn, BLOCK=block)
    return out


# Combinators passed as FN (module level: a constexpr function is part of the key).
def op_add(a, b): return a + b
def op_sub(a, b): return a - b
def op_mul(a, b): return a * b
def op_truediv(a, b): return a / b
def op_neg(a): return -a
def op_pos(a): return +a
def op_lt(a, b): return a < b
def op_le(a, b): return a <= b
def op_gt(a, b): return a > b
def op_ge(a, b): return a >= b
def op_eq(a, b): return a == b
def op_ne(a, b): return a != b
def op_where_lt(a, b): return tl.where(a < b, a, b * 2)
def op_maximum(a, b): return tl.maximum(a, b)
def op_minimum(a, b): return tl.minimum(a, b)
def op_maximum_nan(a, b): return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
def op_minimum_nan(a, b): return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
def op_clamp(a, lo): return tl.clamp(a, lo, lo + 1.0)
def op_fdiv(a, b): return tl.fdiv(a, b)
def op_div_rn(a, b): return tl.div_rn(a, b)
def op_cdiv(a, b): return tl.cdiv(a, b)
def op_fma(a, b, c): return tl.fma(a, b, c)
def op_umulhi(a, b): return tl.umulhi(a, b)
def op_math_max(a, b): return tl.math.max(a, b)
def op_math_min(a, b): return tl.math.min(a, b)
def op_builtin_min(a, b): return min(a, b)
def op_builtin_max(a, b): return max(a, b)
def op_abs_builtin(a): return abs(a)


def _inputs(n, dtype, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = rng.standard_normal(n) * 10
        if positive:
            x = np.abs(x) + 0.5
        return x.astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = (1 if positive else max(info.min, -1000)), min(info.max, 1000)
    return rng.integers(lo, hi, n, endpoint=True).astype(dtype)


# --- vector add: sizes x blocks x dtypes --------------------------------------------------------
@pytest.mark.parametrize("n", ODD_SIZES)
@pytest.mark.parametrize("block", [16, 128, 1024])
def test_add_odd_sizes_and_masked_tail(n, block):
    x, y = _inputs(n, np.float32, 1), _inputs(n, np.float32, 2)
    out = poisoned(n + 37, np.float32)          # 37 past n must stay poisoned
    add_kernel[grid_for(n, block)](x, y, out, n, BLOCK=block)
    np.testing.assert_array_equal(out[:n], x + y)
    assert_poison(out[n:])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64, np.float16, np.float32, np.float64])
def test_add_every_dtype_wraps_or_rounds_like_numpy(dtype):
    n = 1000
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind == "f":
        x, y = _inputs(n, dtype, 4), _inputs(n, dtype, 5)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
        y = rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)
    out = poisoned(n, dtype)
    add_kernel[grid_for(n, 256)](x, y, out, n, BLOCK=256)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x + y)


def test_empty_grid_and_zero_n_write_nothing():
    x = np.ones(16, np.float32)
    out = poisoned(16, np.float32)
    add_kernel[(0,)](x, x, out, 16, BLOCK=16)
    assert_poison(out)
    add_kernel[(3,)](x, x, out, 0, BLOCK=16)
    assert_poison(out)


def test_grid_callable_with_meta():
    n = 4097
    x, y = _inputs(n, np.float32, 7), _inputs(n, np.float32, 8)
    out = poisoned(n, np.float32)
    add_kernel[lambda meta: (tessera.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, n, BLOCK=512)
    np.testing.assert_array_equal(out, x + y)


# --- arithmetic operators ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("fn,ref", [(op_add, np.add), (op_sub, np.subtract), (op_mul, np.multiply),
                                    (op_truediv, np.divide)])
def test_float_arithmetic_is_ieee_exact(dtype, fn, ref):
    n = 1000
    x, y = _inputs(n, dtype, 11), _inputs(n, dtype, 12)
    y[::7] = 0                                   # x / 0 -> +-inf, 0 / 0 -> nan
    x[::21] = 0
    out = apply_binary(fn, x, y, np.float32 if (fn is op_truediv and dtype == np.float16) else dtype)
    if fn is op_truediv and dtype in (np.float16, np.float32):
        return assert_fp32_quotient(out, x, y)                    # f16 / f16 computes in f32
    with np.errstate(all="ignore"):
        if fn is op_truediv and dtype == np.float16:
            # f16 / f16 computes in f32 (semantics.truediv_type)
            want = x.astype(np.float32) / y.astype(np.float32)
        else:
            want = ref(x, y)
    np.testing.assert_array_equal(out, want)


def test_unary_minus_plus_and_abs_builtin():
    x = special_values(np.float32)
    out = apply_unary(op_neg, x)
    np.testing.assert_array_equal(np.signbit(out[~np.isnan(x)]), ~np.signbit(x[~np.isnan(x)]))
    np.testing.assert_array_equal(out, -x)
    np.testing.assert_array_equal(apply_unary(op_pos, x), x)
    a = apply_unary(op_abs_builtin, x)
    np.testing.assert_array_equal(a, np.abs(x))
    assert not np.signbit(a).any() or np.isnan(a[np.signbit(a)]).all()
    i = np.array([-5, 0, 7, -2**31, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(apply_unary(op_neg, i), -i)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.uint8, np.float64])
def test_comparisons(dtype):
    n = 333
    x, y = _inputs(n, dtype, 13), _inputs(n, dtype, 14)
    y[::3] = x[::3]                               # equal lanes
    if np.dtype(dtype).kind == "f":
        x[::10] = np.nan
    for fn, ref in [(op_lt, np.less), (op_le, np.less_equal), (op_gt, np.greater),
                    (op_ge, np.greater_equal), (op_eq, np.equal), (op_ne, np.not_equal)]:
        out = apply_binary(fn, x, y, np.int8)     # i1 stored into int8
        np.testing.assert_array_equal(out, ref(x, y).astype(np.int8), err_msg=fn.__name__)


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_where(dtype):
    x, y = _inputs(1000, dtype, 15), _inputs(1000, dtype, 16)
    out = apply_binary(op_where_lt, x, y)
    np.testing.assert_array_equal(out, np.where(x < y, x, (y * 2).astype(dtype)))


def test_maximum_minimum_nan_handling():
    x = np.array([1, np.nan, np.nan, -0.0, 3, -np.inf, 5], np.float32)
    y = np.array([2, 1, np.nan, 0.0, np.nan, 7, np.inf], np.float32)
    np.testing.assert_array_equal(apply_binary(op_maximum, x, y), np.fmax(x, y))
    np.testing.assert_array_equal(apply_binary(op_minimum, x, y), np.fmin(x, y))
    np.testing.assert_array_equal(apply_binary(op_maximum_nan, x, y), np.maximum(x, y))
    np.testing.assert_array_equal(apply_binary(op_minimum_nan, x, y), np.minimum(x, y))
    np.testing.assert_array_equal(apply_binary(op_math_max, x, y), np.fmax(x, y))
    np.testing.assert_array_equal(apply_binary(op_math_min, x, y), np.fmin(x, y))


def test_propagate_nan_agrees_with_interpreter():
    x = np.array([1, np.nan, np.nan, -0.0, 3, -np.inf, 5, 2], np.float32)
    y = np.array([2, 1, np.nan, 0.0, np.nan, 7, np.inf, 1], np.float32)
    for fn in (op_maximum_nan, op_minimum_nan):
        out = apply_binary(fn, x, y)
        ref = poisoned(8, np.float32)
        run_interpreted(binary_kernel, (1,), x, y, ref, 8, FN=fn, BLOCK=8)
        np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.int64])
def test_maximum_minimum_integers_and_builtin_min_max(dtype):
    rng = np.random.default_rng(17)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 100, endpoint=True, dtype=dtype)
    y = rng.integers(info.min, info.max, 100, endpoint=True, dtype=dtype)
    np.testing.assert_array_equal(apply_binary(op_maximum, x, y), np.maximum(x, y))
    np.testing.assert_array_equal(apply_binary(op_minimum, x, y), np.minimum(x, y))
    np.testing.assert_array_equal(apply_binary(op_builtin_max, x, y), np.maximum(x, y))
    np.testing.assert_array_equal(apply_binary(op_builtin_min, x, y), np.minimum(x, y))


def test_clamp():
    x = np.linspace(-3, 3, 100).astype(np.float32)
    lo = np.full(100, -0.5, np.float32)
    np.testing.assert_array_equal(apply_binary(op_clamp, x, lo), np.clip(x, -0.5, 0.5))


@pytest.mark.parametrize("fn", [op_fdiv, op_div_rn])
def test_fdiv_div_rn(fn):
    x, y = _inputs(1000, np.float32, 18), _inputs(1000, np.float32, 19)
    out = apply_binary(fn, x, y)
    if fn is op_div_rn:
        np.testing.assert_array_equal(out, x / y)
    else:
        assert_ulp(out, x.astype(np.float64) / y, 2, what="fdiv")


def test_cdiv_integers():
    x = np.arange(0, 200, dtype=np.int32)
    y = np.full(200, 16, np.int32)
    y[1::2] = 7
    np.testing.assert_array_equal(apply_binary(op_cdiv, x, y), (x + y - 1) // y)


# --- math functions ---------------------------------------------------------------------------
def _ref_f64(name, x):
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        return {
            "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
            "sqrt_rn": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v), "sin": np.sin, "cos": np.cos,
            "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "erf": erf_ref, "tanh": np.tanh,
            "sigmoid": lambda v: np.where(v >= 0, 1 / (1 + np.exp(-np.abs(v))),
                                          np.exp(-np.abs(v)) / (1 + np.exp(-np.abs(v)))),
        }[name](x)


# Documented accuracy (compiler/codegen/common/vector_math.h): 2 ulp for f32 (4 for
# erf/tanh/sigmoid), 4 ulp for f64; sqrt, floor, ceil, abs are exact.
_EXACT = {"sqrt_rn", "abs", "floor", "ceil", "sqrt"}
_LOOSE = {"erf", "tanh", "sigmoid"}


def _max_ulp(name, dtype):
    if name in _EXACT:
        return 0
    if np.dtype(dtype) == np.float64:
        return 4
    if name == "rsqrt":
        return 2
    return 4 if name in _LOOSE else 2


def _math_inputs(name, dtype, n=4097):
    rng = np.random.default_rng(abs(hash(name)) % 1000)
    dtype = np.dtype(dtype)
    if name in ("exp", "exp2", "sigmoid", "tanh", "erf"):
        lim = 80.0 if dtype == np.float32 else 700.0
        x = rng.uniform(-lim, lim, n)
        x[: n // 2] = rng.uniform(-5, 5, n // 2)
        # results in the denormal range: exp/sigmoid of [-104, -87] (f32), [-745, -708] (f64)
        lo, hi = (-104.0, -87.0) if dtype == np.float32 else (-745.0, -708.0)
        x[n // 2: n // 2 + n // 8] = rng.uniform(lo, hi, n // 8) * (1.44 if name == "exp2" else 1.0)
    elif name in ("log", "log2", "sqrt", "sqrt_rn", "rsqrt"):
        x = np.exp(rng.uniform(-80, 80, n))
    elif name in ("sin", "cos"):
        x = rng.uniform(-10, 10, n)
        x[: n // 4] = rng.uniform(-1e4, 1e4, n // 4)
        x[n // 4: n // 2] = rng.uniform(-0.8, 0.8, n // 4)
    else:
        x = rng.uniform(-100, 100, n)
    special = special_values(dtype)
    with np.errstate(over="ignore"):
        return np.concatenate([x.astype(dtype), special])           # f16: large inputs become inf


# sin/cos reduce arguments with Cody-Waite only: vector_math.cpp documents them accurate up
# to these magnitudes (vector_math.h claims the whole domain).
TRIG_LIMIT = {np.dtype(np.float32): 2.0**18, np.dtype(np.float64): 2.0**40,
              np.dtype(np.float16): np.inf}


MATH_NAMES = ["exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "sin", "cos", "abs",
              "floor", "ceil", "erf", "tanh", "sigmoid"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", MATH_NAMES)
def test_math_function_ulp_and_special_values(name, dtype):
    x = _math_inputs(name, dtype)
    out = apply_unary(getattr(tl, name), x)
    want = _ref_f64(name, x)
    if ON_GPU and name == "exp" and np.dtype(dtype) == np.float32:
        return assert_gpu_exp_f32(out, x, want)                   # ex2.approx (docs/language.md)
    assert_ulp(out, want, _max_ulp(name, dtype), inputs=x, what=f"tl.{name} {np.dtype(dtype).name}")
    # signs of zero results of odd / sign-preserving functions
    if name in ("sin", "sqrt", "sqrt_rn", "floor", "ceil", "erf", "tanh"):
        z = np.array([0.0, -0.0], dtype)
        np.testing.assert_array_equal(np.signbit(apply_unary(getattr(tl, name), z)),
                                      np.signbit(_ref_f64(name, z)), err_msg=f"{name}(+-0)")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_huge_arguments(name, dtype):
    fi = np.finfo(dtype)
    with np.errstate(over="ignore"):
        x = np.geomspace(TRIG_LIMIT[np.dtype(dtype)], float(fi.max), 1000).astype(dtype)
    x = np.concatenate([x, -x])
    out = apply_unary(getattr(tl, name), x)
    assert_ulp(out, _ref_f64(name, x), 2 if dtype == np.float32 else 4, inputs=x, what=name)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "floor",
                                  "erf", "rsqrt", "exp2", "log2", "abs", "ceil"])
def test_math_function_fp16_computes_in_f32(name):
    x = _math_inputs(name, np.float16, 1000)
    out = apply_unary(getattr(tl, name), x)
    want = _ref_f64(name, x.astype(np.float32))
    # f32 result (within its ulp bound) rounded to f16: at most 1 f16 ulp off
    assert_ulp(out, want, 0 if name in _EXACT else 1, inputs=x, what=f"tl.{name} fp16")


@pytest.mark.parametrize("name", ["exp", "log", "sin", "sqrt", "floor"])
def test_math_function_bf16_via_casts(name):
    x = bf16_round(_math_inputs(name, np.float32, 500))
    bits = f32_to_bf16_bits(x)
    out = np.zeros(bits.size, np.uint16)
    bf16_unary_kernel[grid_for(bits.size, 128)](bits, out, bits.size, FN=getattr(tl, name), BLOCK=128)
    got = bf16_bits_to_f32(out)
    with np.errstate(over="ignore"):
        want = bf16_round(_ref_f64(name, x).astype(np.float32))
    d = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64)) >> 16
    finite = ~np.isnan(want)
    assert (d[finite] <= (0 if name in _EXACT else 1)).all(), (x[finite][d[finite] > 1], got[finite][d[finite] > 1])
    assert np.isnan(got[~finite]).all()


@tessera.kernel
def bf16_unary_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.bfloat16, bitcast=True)
    y = FN(x)
    tl.static_assert(y.dtype == tl.bfloat16)
    tl.store(out_ptr + offs, y.to(tl.uint16, bitcast=True), mask=mask)


def test_math_namespace_aliases():
    x = _math_inputs("exp", np.float32, 200)
    for name in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs", "floor",
                 "ceil", "erf", "tanh", "sigmoid"):
        assert getattr(tl.math, name) is getattr(tl, name)
    np.testing.assert_array_equal(apply_unary(tl.math.exp, x), apply_unary(tl.exp, x))


def test_math_on_integers_computes_in_f32():
    x = np.arange(1, 100, dtype=np.int32)
    out = apply_unary(tl.sqrt, x, np.float32)
    np.testing.assert_array_equal(out, np.sqrt(x.astype(np.float32)))


def test_abs_integers_and_min_value():
    x = np.array([-3, 0, 5, -128, 127], np.int8)
    np.testing.assert_array_equal(apply_unary(tl.abs, x), np.abs(x))
    u = np.array([0, 1, 255], np.uint8)
    np.testing.assert_array_equal(apply_unary(tl.abs, u), u)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fma_single_rounding(dtype):
    rng = np.random.default_rng(21)
    n = 1000
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    c = (-(a.astype(np.float64) * b)).astype(dtype)   # a*b + c cancels: only the fused product shows
    out = poisoned(n, dtype)
    ternary_kernel[grid_for(n, 256)](a, b, c, out, n, FN=op_fma, BLOCK=256)
    if dtype == np.float32:
        want = (a.astype(np.float64) * b + c).astype(np.float32)   # exact in f64, one rounding
        np.testing.assert_array_equal(out, want)
    else:
        import fractions
        want = np.array([float(fractions.Fraction(float(x)) * fractions.Fraction(float(y))
                               + fractions.Fraction(float(z))) for x, y, z in zip(a, b, c)])
        np.testing.assert_array_equal(out, want)
    assert (out != 0).sum() > n // 2          # not computed as (a*b rounded) + c == 0


def test_fma_tl_math_name():
    a = np.float32([1.5, 2, 3]); b = np.float32([2, 0.5, -1]); c = np.float32([1, 1, 3])
    out = poisoned(3, np.float32)
    ternary_kernel[(1,)](a, b, c, out, 3, FN=tl.math.fma, BLOCK=4)
    np.testing.assert_array_equal(out, a * b + c)


def _umulhi_inputs(dtype):
    rng = np.random.default_rng(22)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 300, endpoint=True, dtype=dtype)
    y = rng.integers(info.min, info.max, 300, endpoint=True, dtype=dtype)
    x[:4] = [info.max, info.min, info.max, -1 if info.min else 1]
    y[:4] = [info.max, info.min, info.min, info.max]
    return x, y


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_umulhi_is_unsigned_high_half(dtype):
    # Triton's tl.umulhi is the high half of the UNSIGNED product whatever the
    # signedness (semantic_ops.umulhi says so too).
    x, y = _umulhi_inputs(dtype)
    bits = np.dtype(dtype).itemsize * 8
    mask = (1 << bits) - 1
    want = np.array([((int(a) & mask) * (int(b) & mask)) >> bits for a, b in zip(x, y)],
                    dtype=np.uint64).astype(dtype)
    np.testing.assert_array_equal(apply_binary(op_umulhi, x, y), want)
    np.testing.assert_array_equal(apply_binary(tl.math.umulhi, x, y), want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_umulhi_signed_operands_agree_with_interpreter(dtype):
    x, y = _umulhi_inputs(dtype)
    out = apply_binary(op_umulhi, x, y)
    ref = poisoned(x.shape, dtype)
    run_interpreted(binary_kernel, grid_for(x.size, 128), x, y, ref, x.size, FN=op_umulhi, BLOCK=128)
    np.testing.assert_array_equal(out, ref)


# --- scalars, literals, fused chains ----------------------------------------------------------
@tessera.kernel
def axpb_kernel(x_ptr, out_ptr, a, b, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, a * x + b, mask=mask)


def test_runtime_scalar_arguments():
    x = _inputs(1000, np.float32, 23)
    out = poisoned(1000, np.float32)
    axpb_kernel[grid_for(1000, 128)](x, out, 2.5, -1.25, 1000, BLOCK=128)
    np.testing.assert_array_equal(out, np.float32(2.5) * x + np.float32(-1.25))
    # int scalars promote with the f32 tile: a (i32) * x (f32) -> f32
    axpb_kernel[grid_for(1000, 128)](x, out, 3, 7, 1000, BLOCK=128)
    np.testing.assert_array_equal(out, np.float32(3) * x + np.float32(7))


@tessera.kernel
def literal_promotion_kernel(i8_ptr, f16_ptr, out_i8, out_f32, out_f16, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(i8_ptr + offs)
    h = tl.load(f16_ptr + offs)
    tl.static_assert((a + 1).dtype == tl.int8)
    tl.static_assert((a * 1.5).dtype == tl.float32)
    tl.static_assert((h * 2).dtype == tl.float16)
    tl.store(out_i8 + offs, a * 3 + 100)            # weak literals wrap in int8
    tl.store(out_f32 + offs, a * 1.5)
    tl.store(out_f16 + offs, h * 2 + 0.5)


def test_weak_literal_promotion_and_wrapping():
    a = np.arange(-64, 64, dtype=np.int8)
    h = np.linspace(-4, 4, 128).astype(np.float16)
    o8, o32, o16 = poisoned(128, np.int8), poisoned(128, np.float32), poisoned(128, np.float16)
    literal_promotion_kernel[(1,)](a, h, o8, o32, o16, BLOCK=128)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(o8, (a * np.int8(3) + np.int8(100)).astype(np.int8))
    np.testing.assert_array_equal(o32, a.astype(np.float32) * np.float32(1.5))
    np.testing.assert_array_equal(o16, h * np.float16(2) + np.float16(0.5))


@tessera.kernel
def fused_chain_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    t = tl.exp(-x * x) * tl.sin(y) + tl.sqrt(tl.abs(y)) / (1.0 + x * x)
    t = tl.where(t > 0.1, t, tl.log(1.0 + tl.abs(t)))
    tl.store(out_ptr + offs, tl.maximum(t, -0.5) + y.to(tl.int32).to(tl.float32), mask=mask)


def test_long_fused_chain_matches_interpreter_and_numpy():
    n = 4097
    x, y = _inputs(n, np.float32, 24), _inputs(n, np.float32, 25)
    out = poisoned(n, np.float32)
    fused_chain_kernel[grid_for(n, 512)](x, y, out, n, BLOCK=512)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    t = np.exp(-xd * xd) * np.sin(yd) + np.sqrt(np.abs(yd)) / (1 + xd * xd)
    t = np.where(t > 0.1, t, np.log(1 + np.abs(t)))
    want = np.maximum(t, -0.5) + np.trunc(yd)
    assert_close(out, want, rtol=1e-5, atol=1e-5)
    ref = poisoned(n, np.float32)
    run_interpreted(fused_chain_kernel, grid_for(n, 512), x, y, ref, n, BLOCK=512)
    assert_close(out, ref, np.float32)                          # math within a few ulp


@tessera.kernel
def grid3d_kernel(out_ptr):
    x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    nx, ny, nz = tl.num_programs(0), tl.num_programs(1), tl.num_programs(2)
    idx = (z * ny + y) * nx + x
    tl.store(out_ptr + idx, idx * 1000 + nx * 100 + ny * 10 + nz)


def test_three_d_grid_program_ids():
    gx, gy, gz = 5, 3, 2
    out = poisoned(gx * gy * gz, np.int32)
    grid3d_kernel[(gx, gy, gz)](out)
    idx = np.arange(gx * gy * gz)
    np.testing.assert_array_equal(out, idx * 1000 + gx * 100 + gy * 10 + gz)


@tessera.kernel
def copy2d_kernel(src, dst, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_m + rn[None, :]
    tl.store(dst + offs, tl.load(src + offs, mask=mask) * 2 + 1, mask=mask)


@pytest.mark.parametrize("M,N", [(1, 1), (17, 33), (100, 7), (64, 64)])
def test_2d_grid_with_2d_masks(M, N):
    src = _inputs(M * N, np.float32, 26).reshape(M, N)
    dst = poisoned((M, N), np.float32)
    copy2d_kernel[(tessera.cdiv(M, 16), tessera.cdiv(N, 32))](src, dst, M, N, N, BM=16, BN=32)
    np.testing.assert_array_equal(dst, src * 2 + 1)


def test_full_zeros_and_like():
    out = poisoned(64, np.float32)
    full_kernel[(1,)](out, BLOCK=64)
    np.testing.assert_array_equal(out, np.full(64, 3.5 + 0 + 2, np.float32))


@tessera.kernel
def full_kernel(out_ptr, BLOCK: tl.constexpr):
    a = tl.full((BLOCK,), 3.5, tl.float32)
    z = tl.zeros((BLOCK,), tl.float32)
    zl = tl.zeros_like(a)
    fl = tl.full_like(a, 2)
    tl.static_assert(fl.dtype == tl.float32)
    tl.store(out_ptr + tl.arange(0, BLOCK), a + z + zl + fl)


# --- run-time scalar arguments of every kind ------------------------------------------------------
@tessera.kernel
def scalar_args_kernel(f_out, i_out, f32, f64, i8, u8, i16, i64_small, big, huge, flag, one):
    tl.static_assert(f32.dtype == tl.float32)               # Python float
    tl.static_assert(f64.dtype == tl.float64)               # np.float64
    tl.static_assert(i8.dtype == tl.int8)                   # np.int8
    tl.static_assert(u8.dtype == tl.uint8)                  # np.uint8
    tl.static_assert(i16.dtype == tl.int16)                 # np.int16
    tl.static_assert(i64_small.dtype == tl.int64)           # np.int64
    tl.static_assert(big.dtype == tl.int64)                 # Python int >= 2**31
    tl.static_assert(huge.dtype == tl.uint64)               # Python int >= 2**63
    tl.static_assert(flag.dtype == tl.int1)                 # bool
    tl.store(f_out + 0, f32.to(tl.float64))
    tl.store(f_out + 1, f64)
    tl.store(i_out + 0, i8.to(tl.int64))
    tl.store(i_out + 1, u8.to(tl.int64))
    tl.store(i_out + 2, i16.to(tl.int64))
    tl.store(i_out + 3, i64_small)
    tl.store(i_out + 4, big)
    tl.store(i_out + 5, huge.to(tl.int64, bitcast=True))
    tl.store(i_out + 6, flag.to(tl.int64))
    tl.store(i_out + 7, one + 41)                           # an int equal to 1 is specialized


def test_scalar_arguments_of_every_kind_are_packed_exactly():
    f_out, i_out = poisoned(2, np.float64), poisoned(8, np.int64)
    scalar_args_kernel[(1,)](f_out, i_out, 1.1, np.float64(0.1), np.int8(-7), np.uint8(250),
                             np.int16(-30000), np.int64(-5), 2**40 + 3, 2**64 - 2, True, 1)
    np.testing.assert_array_equal(f_out, [np.float64(np.float32(1.1)), 0.1])
    np.testing.assert_array_equal(i_out, [-7, 250, -30000, -5, 2**40 + 3, -2, 1, 42])
    # other values of the same kinds reuse the specialization
    scalar_args_kernel[(1,)](f_out, i_out, -2.5, np.float64(1e300), np.int8(127), np.uint8(0),
                             np.int16(5), np.int64(2**62), 2**33, 2**63, False, 1)
    np.testing.assert_array_equal(f_out, [-2.5, 1e300])
    np.testing.assert_array_equal(i_out, [127, 0, 5, 2**62, 2**33, -2**63, 0, 42])
