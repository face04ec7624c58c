"""Compiled CPU path, every element type: promotion of mixed-type arithmetic, casts
(saturating float->int, NaN->0, single rounding to f16/bf16), C-style integer // and %
with negatives, shifts, bitwise ops, comparisons across signedness, bool arrays, bf16
storage (uint16 arrays holding bf16 bits) and bf16 arithmetic."""
from fractions import Fraction

import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera.language import dtypes as D
from tessera.language import semantics as S
from cpu_helpers import (ON_GPU, ALL_DTYPES, assert_fp32_quotient, INT_DTYPES, bf16_bits_to_f32, bf16_round, f32_to_bf16_bits,
                         grid_for, poisoned, run_interpreted)

TL_OF = {np.dtype(n): D.NUMPY_TO_DTYPE[np.dtype(n).name] for n in ALL_DTYPES}


def tl_of(np_dtype):
    return TL_OF[np.dtype(np_dtype)]


def np_of(t):
    return np.dtype(D._NUMPY_NAMES[t.ir])


def sample(dtype, n=257, seed=0, full_range=True):
    """Values of `dtype` including its extremes and small negatives."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = (rng.standard_normal(n) * 100).astype(dtype)
        x[:6] = [0, -0.0, 1, -1, 0.5, -2.5]
        return x
    info = np.iinfo(dtype)
    lo, hi = (info.min, info.max) if full_range else (max(info.min, -100), min(info.max, 100))
    x = rng.integers(lo, hi, n, endpoint=True, dtype=dtype)
    x[:4] = [info.min, info.max, 0, 1]
    if info.min < 0:
        x[4:7] = [-1, -7, 7]
    return x


# --- promotion of mixed-type arithmetic -----------------------------------------------------
@tessera.kernel
def mixed_arith_kernel(x_ptr, y_ptr, add_ptr, sub_ptr, mul_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.static_assert((x + y).dtype == add_ptr.dtype.element_ty)
    tl.store(add_ptr + offs, x + y, mask=m)
    tl.store(sub_ptr + offs, x - y, mask=m)
    tl.store(mul_ptr + offs, x * y, mask=m)


PROMOTION_PAIRS = [
    (np.int8, np.int16), (np.int8, np.uint8), (np.uint8, np.int32), (np.int32, np.uint32),
    (np.int64, np.uint32), (np.uint64, np.int8), (np.int16, np.uint64), (np.int32, np.int64),
    (np.uint16, np.uint32), (np.int8, np.float16), (np.int64, np.float32), (np.uint32, np.float64),
    (np.float16, np.float32), (np.float16, np.float64), (np.float32, np.float64), (np.uint8, np.float16),
]


@pytest.mark.parametrize("a,b", PROMOTION_PAIRS, ids=lambda t: np.dtype(t).name)
def test_mixed_type_arithmetic_promotes_like_triton(a, b):
    ct = S.computation_type(tl_of(a), False, tl_of(b), False)
    out_np = np_of(ct)
    x, y = sample(a, seed=1, full_range=False), sample(b, seed=2, full_range=False)
    outs = [poisoned(x.size, out_np) for _ in range(3)]
    mixed_arith_kernel[grid_for(x.size, 64)](x, y, *outs, x.size, BLOCK=64)
    xc, yc = x.astype(out_np), y.astype(out_np)
    with np.errstate(all="ignore"):
        for got, want in zip(outs, (xc + yc, xc - yc, xc * yc)):
            np.testing.assert_array_equal(got, want)


@tessera.kernel
def store_converts_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


def test_store_converts_to_the_pointer_element_type():
    x = np.array([1.9, -1.9, 300.5, -300.5, np.nan, 1e10, -1e10, 0.0], np.float32)
    out = poisoned(8, np.int16)
    store_converts_kernel[(1,)](x, out, BLOCK=8)
    np.testing.assert_array_equal(out, [1, -1, 300, -300, 0, 32767, -32768, 0])


# --- casts ----------------------------------------------------------------------------------
@tessera.kernel
def cast_all_kernel(x_ptr, o_i8, o_i16, o_i32, o_i64, o_u8, o_u16, o_u32, o_u64, o_f16, o_f32,
                    o_f64, o_bf16, o_i1, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_i8 + offs, x.to(tl.int8), mask=m)
    tl.store(o_i16 + offs, x.to(tl.int16), mask=m)
    tl.store(o_i32 + offs, x.to(tl.int32), mask=m)
    tl.store(o_i64 + offs, x.to(tl.int64), mask=m)
    tl.store(o_u8 + offs, x.to(tl.uint8), mask=m)
    tl.store(o_u16 + offs, x.to(tl.uint16), mask=m)
    tl.store(o_u32 + offs, x.to(tl.uint32), mask=m)
    tl.store(o_u64 + offs, x.to(tl.uint64), mask=m)
    tl.store(o_f16 + offs, x.to(tl.float16), mask=m)
    tl.store(o_f32 + offs, x.to(tl.float32), mask=m)
    tl.store(o_f64 + offs, tl.cast(x, tl.float64), mask=m)
    tl.store(o_bf16 + offs, x.to(tl.bfloat16).to(tl.uint16, bitcast=True), mask=m)
    tl.store(o_i1 + offs, x.to(tl.int1), mask=m)


CAST_TARGETS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                np.float16, np.float32, np.float64]


def _round_exact(v: Fraction, np_dtype):
    """Round an exact rational to the nearest value of a float dtype (ties to even),
    overflowing to inf like IEEE."""
    np_dtype = np.dtype(np_dtype)
    if v == 0:
        return np_dtype.type(0)
    with np.errstate(over="ignore"):
        c = np_dtype.type(float(v))               # within one ulp (float() rounds once)
        cands = [c, np.nextafter(c, np_dtype.type(np.inf)), np.nextafter(c, np_dtype.type(-np.inf))]
    best = None
    for cand in cands:
        if not np.isfinite(cand):
            continue
        err = abs(Fraction(float(cand)) - v)
        even = (np.asarray(cand).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[np_dtype.itemsize]) & 1) == 0
        key = (err, not even)
        if best is None or key < best[0]:
            best = (key, cand)
    fi = np.finfo(np_dtype)
    # past max + half an ulp: infinity
    half_ulp = Fraction(float(fi.max)) - Fraction(float(np.nextafter(fi.max, np_dtype.type(0))))
    if abs(v) >= Fraction(float(fi.max)) + half_ulp / 2:
        return np_dtype.type(np.inf if v > 0 else -np.inf)
    return best[1]


def _round_bf16_exact(v: Fraction):
    """Nearest bf16 (ties to even) of an exact rational, as float32."""
    if v == 0:
        return np.float32(0)
    if abs(v) >= Fraction(2 - 2.0**-8) * 2**127:      # bf16 max + half an ulp: overflow
        return np.float32(np.inf if v > 0 else -np.inf)
    c = bf16_round(np.float32(float(v)))         # maybe double-rounded: fix with neighbours
    bits = f32_to_bf16_bits(c).astype(np.int64)
    best = None
    for b in (bits - 1, bits, bits + 1):
        cand = bf16_bits_to_f32(np.uint16(b & 0xFFFF))
        if not np.isfinite(cand):
            continue
        key = (abs(Fraction(float(cand)) - v), (int(b) & 1) == 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


def expected_cast(x, src, dst):
    """Reference conversion of numpy array x (dtype src) to dst, per docs/tile_ir.md."""
    src, dst = np.dtype(src), np.dtype(dst)
    if dst.kind in "iu":
        if src.kind in "iu":
            return x.astype(dst)                  # wrap / sign- or zero-extend
        info = np.iinfo(dst)
        out = []
        for v in x.astype(np.float64):
            if np.isnan(v):
                out.append(0)
            else:
                t = int(np.trunc(v)) if np.isfinite(v) else (info.max if v > 0 else info.min)
                out.append(min(max(t, info.min), info.max))
        return np.array(out, dtype=dst)
    if src.kind in "iu":
        return np.array([_round_exact(Fraction(int(v)), dst) for v in x], dtype=dst)
    with np.errstate(all="ignore"):
        return x.astype(dst)                      # numpy float->float rounds once (RNE)


def cast_sources(src):
    src = np.dtype(src)
    if src.kind == "f":
        fi = np.finfo(src)
        v = [0.0, -0.0, 0.4, 0.6, 1.5, 2.5, -0.6, -1.5, -2.7, 127.9, 128.0, -128.9, -129.0, 255.9, 256.0,
             32767.9, 65535.0, 65536.0, -32769.0, np.nan, -np.nan, np.inf, -np.inf, fi.max, -fi.max,
             fi.smallest_subnormal, 1e9, -1e9, 3e9, 4.3e9, -3e9, 1e19, 2e19, -1e19, 9.3e18,
             65519.0, 65520.0, 1.00390625, 1.01171875]
        with np.errstate(all="ignore"):
            x = np.array(v, np.float64).astype(src)
        if src == np.float64:
            # halfway cases that a float32 detour would round twice
            x = np.concatenate([x, [1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-11 + 2.0**-40,
                                    -(1 + 2.0**-8 + 2.0**-30), 2.0**-149 * 1.5, 65504 + 16 + 2.0**-20]])
        return x
    info = np.iinfo(src)
    v = [0, 1, -1, 2, 127, 128, 255, 256, -128, -129, 32767, 32768, 65535, 65536, -32769,
         2**24 + 1, 2**24 + 2**16 + 1, 2**31 - 1, -2**31, 2**32 - 1, 2**53 + 1, 2**63 - 1, -2**63,
         2**64 - 1, 2**63 + 2**39 + 1, 65519, 65520, info.min, info.max]
    v = [i for i in v if info.min <= i <= info.max]
    return np.array(v, dtype=src)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda t: np.dtype(t).name)
def test_cast_matrix(src):
    x = cast_sources(src)
    n = x.size
    outs = [poisoned(n, d) for d in CAST_TARGETS]
    bf = poisoned(n, np.uint16)
    b1 = np.full(n, 7, np.uint8).view(np.bool_)              # poisoned: 7 is no bool's byte
    cast_all_kernel[grid_for(n, 32)](x, *outs, bf, b1, n, BLOCK=32)
    failures = []
    for d, got in zip(CAST_TARGETS, outs):
        want = expected_cast(x, src, d)
        if not np.array_equal(got, want, equal_nan=np.dtype(d).kind == "f"):
            bad = np.flatnonzero(~((got == want) | (np.isnan(got) & np.isnan(want))
                                   if np.dtype(d).kind == "f" else got == want))
            failures.append(f"{np.dtype(src).name}->{np.dtype(d).name}: " + ", ".join(
                f"{x[i]!r}->{got[i]!r} (want {want[i]!r})" for i in bad[:4]))
        if np.dtype(d).kind == "f":
            z = (want == 0) & ~np.isnan(want)
            if not np.array_equal(np.signbit(got[z]), np.signbit(want[z])):
                failures.append(f"{np.dtype(src).name}->{np.dtype(d).name}: sign of zero")
    if np.dtype(src).kind == "f":
        want_bf = np.array([_round_bf16_exact(Fraction(float(v))) if np.isfinite(v) else np.float32(v)
                            for v in x.astype(np.float64)], np.float32)
    else:
        want_bf = np.array([_round_bf16_exact(Fraction(int(v))) for v in x], np.float32)
    got_bf = bf16_bits_to_f32(bf)
    bad = np.flatnonzero(~((got_bf == want_bf) | (np.isnan(got_bf) & np.isnan(want_bf))))
    if bad.size:
        failures.append(f"{np.dtype(src).name}->bf16: " + ", ".join(
            f"{x[i]!r}->{got_bf[i]!r} (want {want_bf[i]!r})" for i in bad[:4]))
    np.testing.assert_array_equal(b1.view(np.uint8), (x != 0).astype(np.uint8))
    assert not failures, "\n".join(failures)


@tessera.kernel
def bitcast_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x.to(out_ptr.dtype.element_ty, bitcast=True))


@pytest.mark.parametrize("src,dst", [(np.float32, np.int32), (np.uint32, np.float32),
                                     (np.float64, np.uint64), (np.int16, np.float16)])
def test_bitcast(src, dst):
    x = sample(src, 16, seed=3)
    out = poisoned(16, dst)
    bitcast_kernel[(1,)](x, out, BLOCK=16)
    np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))


# --- integer division, remainder, shifts, bitwise, comparisons --------------------------------
@tessera.kernel
def int_ops_kernel(x_ptr, y_ptr, div_ptr, mod_ptr, and_ptr, or_ptr, xor_ptr, not_ptr, shl_ptr,
                   shr_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(div_ptr + offs, x // y, mask=m)
    tl.store(mod_ptr + offs, x % y, mask=m)
    tl.store(and_ptr + offs, x & y, mask=m)
    tl.store(or_ptr + offs, x | y, mask=m)
    tl.store(xor_ptr + offs, x ^ y, mask=m)
    tl.store(not_ptr + offs, ~x, mask=m)
    s = (y & 7).to(x.dtype)                       # in-range shift amounts only
    tl.store(shl_ptr + offs, x << s, mask=m)
    tl.store(shr_ptr + offs, x >> s, mask=m)


def c_div_mod(x, y):
    q, r = [], []
    for a, b in zip(x.tolist(), y.tolist()):
        if b == 0:
            q.append(0), r.append(0)
            continue
        t = abs(a) // abs(b)
        t = t if (a < 0) == (b < 0) else -t
        q.append(t), r.append(a - t * b)
    return q, r


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda t: np.dtype(t).name)
def test_integer_ops_c_semantics(dtype):
    info = np.iinfo(dtype)
    x = sample(dtype, 300, seed=4)
    y = sample(dtype, 300, seed=5, full_range=False)
    x[:8] = np.array([7, -7 if info.min else 7, 7, -7 if info.min else 9, info.min, info.min, 0,
                      info.max], dtype=object).astype(dtype)
    y[:8] = np.array([2, 2, -2 if info.min else 3, -2 if info.min else 4, -1 if info.min else 1,
                      0, 0, info.max], dtype=object).astype(dtype)
    n = x.size
    outs = [poisoned(n, dtype) for _ in range(8)]
    int_ops_kernel[grid_for(n, 64)](x, y, *outs, n, BLOCK=64)
    bits = info.bits
    q, r = c_div_mod(x, y)
    wrap = lambda v: np.array([((int(i) - info.min) % (1 << bits)) + info.min for i in v], dtype=object).astype(dtype)
    np.testing.assert_array_equal(outs[0], wrap(q), err_msg="//")
    np.testing.assert_array_equal(outs[1], wrap(r), err_msg="%")
    np.testing.assert_array_equal(outs[2], x & y)
    np.testing.assert_array_equal(outs[3], x | y)
    np.testing.assert_array_equal(outs[4], x ^ y)
    np.testing.assert_array_equal(outs[5], ~x)
    s = (y & 7).astype(dtype)
    np.testing.assert_array_equal(outs[6], wrap([int(a) << int(b) for a, b in zip(x, s)]), err_msg="<<")
    np.testing.assert_array_equal(outs[7], np.array([int(a) >> int(b) for a, b in zip(x, s)],
                                                    dtype=object).astype(dtype), err_msg=">>")


@tessera.kernel
def float_mod_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) % tl.load(y_ptr + offs))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_remainder_is_fmod(dtype):
    with np.errstate(over="ignore"):                          # 1e10 is inf in f16
        x = np.array([7.5, -7.5, 7.5, -7.5, 1e10, 0.0, -0.0, np.inf, 3.0, np.nan, 5.0, 1.0], dtype)
    y = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 1.0, 1.0, 1.0, np.inf, 1.0, 0.0, 0.1], dtype)
    xp, yp = np.resize(x, 16), np.resize(y, 16)
    out = poisoned(16, dtype)
    float_mod_kernel[(1,)](xp, yp, out, BLOCK=16)
    with np.errstate(all="ignore"):
        want = np.fmod(xp, yp)
    np.testing.assert_array_equal(out, want)
    # The sign of a NaN is not specified (x86 gives -nan here, the GPU +nan).
    signed = ~np.isnan(want) if ON_GPU else np.ones(want.shape, bool)
    np.testing.assert_array_equal(np.signbit(out)[signed], np.signbit(want)[signed])


@tessera.kernel
def signedness_cmp_kernel(a_ptr, b_ptr, lt_ptr, eq_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(lt_ptr + offs, (a < b).to(tl.int8))
    tl.store(eq_ptr + offs, (a == b).to(tl.int8))


def test_comparison_across_signedness_promotes_to_unsigned():
    a = np.array([-1, 0, 5, -2**31, 3, 7, 0, 1], np.int32)
    b = np.array([1, 0, 4, 2**31, 3, 8, 2**32 - 1, 0], np.uint32)
    lt, eq = poisoned(8, np.int8), poisoned(8, np.int8)
    signedness_cmp_kernel[(1,)](a, b, lt, eq, BLOCK=8)
    au = a.astype(np.uint32)                        # i32 vs u32 -> u32 (Triton)
    np.testing.assert_array_equal(lt, (au < b).astype(np.int8))
    np.testing.assert_array_equal(eq, (au == b).astype(np.int8))


# --- bool arrays --------------------------------------------------------------------------------
@tessera.kernel
def bool_kernel(a_ptr, b_ptr, and_ptr, not_ptr, sum_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.static_assert(a.dtype == tl.int1)
    tl.store(and_ptr + offs, a & b)
    tl.store(not_ptr + offs, a == 0)
    tl.store(sum_ptr + offs, a.to(tl.int32) + b.to(tl.int32))


def test_bool_arrays_load_store():
    rng = np.random.default_rng(6)
    a, b = rng.random(32) < 0.5, rng.random(32) < 0.5
    o_and = np.full(32, 0xAB, np.uint8).view(np.bool_)
    o_not = np.full(32, 0xAB, np.uint8).view(np.bool_)
    o_sum = poisoned(32, np.int32)
    bool_kernel[(1,)](a, b, o_and, o_not, o_sum, BLOCK=32)
    np.testing.assert_array_equal(o_and.view(np.uint8), (a & b).astype(np.uint8))
    np.testing.assert_array_equal(o_not.view(np.uint8), (~a).astype(np.uint8))
    np.testing.assert_array_equal(o_sum, a.astype(np.int32) + b)


# --- fp16 and bf16 arithmetic ---------------------------------------------------------------------
@tessera.kernel
def bf16_arith_kernel(x_ptr, y_ptr, add_ptr, mul_ptr, div_ptr, mixed_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.bfloat16, bitcast=True)
    y = tl.load(y_ptr + offs, mask=m).to(tl.bfloat16, bitcast=True)
    tl.static_assert((x + y).dtype == tl.bfloat16)
    tl.static_assert((x / y).dtype == tl.float32)
    tl.static_assert((x + y.to(tl.float16)).dtype == tl.float32)
    tl.store(add_ptr + offs, (x + y).to(tl.uint16, bitcast=True), mask=m)
    tl.store(mul_ptr + offs, (x * y * x).to(tl.uint16, bitcast=True), mask=m)
    tl.store(div_ptr + offs, x / y, mask=m)
    tl.store(mixed_ptr + offs, x + y.to(tl.float16), mask=m)


def test_bf16_arithmetic_rounds_after_every_op():
    rng = np.random.default_rng(7)
    n = 1000
    x = bf16_round(rng.standard_normal(n).astype(np.float32) * 10)
    y = bf16_round(rng.standard_normal(n).astype(np.float32) * 10)
    xb, yb = f32_to_bf16_bits(x), f32_to_bf16_bits(y)
    add, mul = poisoned(n, np.uint16), poisoned(n, np.uint16)
    div, mixed = poisoned(n, np.float32), poisoned(n, np.float32)
    bf16_arith_kernel[grid_for(n, 128)](xb, yb, add, mul, div, mixed, n, BLOCK=128)
    np.testing.assert_array_equal(bf16_bits_to_f32(add), bf16_round(x + y))
    np.testing.assert_array_equal(bf16_bits_to_f32(mul), bf16_round(bf16_round(x * y) * x))
    assert_fp32_quotient(div, x, y, "bf16 / bf16 (computed in f32)")
    np.testing.assert_array_equal(mixed, x + y.astype(np.float16).astype(np.float32))


@tessera.kernel
def f16_chain_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x * y + x - y * y, mask=m)


def test_f16_chain_rounds_after_every_op():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(1000) * 30).astype(np.float16)
    y = (rng.standard_normal(1000) * 30).astype(np.float16)
    out = poisoned(1000, np.float16)
    f16_chain_kernel[grid_for(1000, 256)](x, y, out, 1000, BLOCK=256)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, x * y + x - y * y)   # numpy f16 also rounds per op


def test_bf16_casts_agree_with_interpreter():
    x = cast_sources(np.float64)
    n = x.size
    outs_c = [poisoned(n, d) for d in CAST_TARGETS] + [poisoned(n, np.uint16), np.zeros(n, np.bool_)]
    outs_i = [o.copy() for o in outs_c]
    cast_all_kernel[grid_for(n, 32)](x, *outs_c, n, BLOCK=32)
    run_interpreted(cast_all_kernel, grid_for(n, 32), x, *outs_i, n, BLOCK=32)
    for c, i in zip(outs_c, outs_i):
        np.testing.assert_array_equal(c, i)


@tessera.kernel
def rtz_downcast_kernel(x_ptr, h_ptr, b_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(h_ptr + offs, x.to(tl.float16, fp_downcast_rounding="rtz"))
    tl.store(b_ptr + offs, tl.cast(x, tl.bfloat16, fp_downcast_rounding="rtz").to(tl.uint16, bitcast=True))


def test_downcast_round_toward_zero():
    x = np.array([1 + 2**-11 + 2**-20, -(1 + 2**-11 + 2**-20), 70000.0, 1.99999, -3.3, 0.1, 65519.0, 1.0],
                 np.float32)
    h, b = poisoned(8, np.float16), poisoned(8, np.uint16)
    rtz_downcast_kernel[(1,)](x, h, b, BLOCK=8)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        want_h = x.astype(np.float16)
    toward_zero = np.abs(want_h.astype(np.float64)) > np.abs(x64)
    want_h[toward_zero] = np.nextafter(want_h[toward_zero], np.float16(0))
    np.testing.assert_array_equal(h, want_h)
    np.testing.assert_array_equal(b, (x.view(np.uint32) >> 16).astype(np.uint16))   # truncated bits
    hi, bi = poisoned(8, np.float16), poisoned(8, np.uint16)
    run_interpreted(rtz_downcast_kernel, (1,), x, hi, bi, BLOCK=8)          # the oracle agrees
    np.testing.assert_array_equal(hi, want_h)
    np.testing.assert_array_equal(bi, b)


@tessera.kernel
def rtz_from_f64_kernel(x_ptr, f_ptr, h_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(f_ptr + offs, x.to(tl.float32, fp_downcast_rounding="rtz"))
    tl.store(h_ptr + offs, x.to(tl.float16, fp_downcast_rounding="rtz"))


def test_downcast_round_toward_zero_from_f64():
    x = np.array([1 + 2**-24 + 2**-40, -(1 + 2**-30), 1e39, -1e39, 1 / 3, np.nan, np.inf, -0.0], np.float64)
    f, h = poisoned(8, np.float32), poisoned(8, np.float16)
    rtz_from_f64_kernel[(1,)](x, f, h, BLOCK=8)

    def toward_zero(v, dt):
        with np.errstate(over="ignore", invalid="ignore"):
            r = v.astype(dt)
            past = np.abs(r.astype(np.float64)) > np.abs(v)
        r[past] = np.nextafter(r[past], dt(0))
        return r
    np.testing.assert_array_equal(f, toward_zero(x, np.float32))
    np.testing.assert_array_equal(h, toward_zero(toward_zero(x, np.float32).astype(np.float64), np.float16))


def test_downcast_rounding_on_a_non_downcast_is_an_error():
    @tessera.kernel
    def upcast_rtz(x_ptr, y_ptr):
        x = tl.load(x_ptr)
        tl.store(y_ptr, x.to(tl.float64, fp_downcast_rounding="rtz"))

    with pytest.raises(tessera.CompilationError, match="float downcasts only") as e:
        upcast_rtz[(1,)](np.zeros(1, np.float32), np.zeros(1, np.float64))
    assert "upcast_rtz" in str(e.value) and 'fp_downcast_rounding="rtz"' in str(e.value)


def test_downcast_rounding_mode_must_be_known():
    @tessera.kernel
    def bad_mode(x_ptr, y_ptr):
        tl.store(y_ptr, tl.load(x_ptr).to(tl.float16, fp_downcast_rounding="up"))

    with pytest.raises(tessera.CompilationError, match="must be 'rtne' or 'rtz'"):
        bad_mode[(1,)](np.zeros(1, np.float32), np.zeros(1, np.float16))


@pytest.mark.skipif(ON_GPU, reason="CPU targets")
@pytest.mark.parametrize("cpu", ["haswell", "x86-64"])
def test_casts_and_16_bit_arithmetic_on_cpus_without_bf16_or_f16_instructions(cpu, monkeypatch):
    # An AVX2 CPU (haswell) has no bf16 instructions, and baseline x86-64 no F16C either:
    # LLVM then rounds a bfloat/half value it kept in a register through __truncsfbf2 /
    # __truncsfhf2 calls, which the kernel loader must resolve (a bf16 layer norm failed to
    # load on haswell). The same casts and per-op roundings as on the host, bit for bit.
    monkeypatch.setenv("TESSERA_CPU", cpu)
    for src in (np.float64, np.float32, np.float16, np.int64, np.uint8):
        test_cast_matrix(src)
    test_bf16_arithmetic_rounds_after_every_op()
    test_f16_chain_rounds_after_every_op()
    test_bf16_casts_agree_with_interpreter()
