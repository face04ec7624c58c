"""Bit-exact numeric primitives of the interpreter: how each Tessera type is held in
numpy, rounding to bf16/f16, the `cast` op, C integer division, fma and umulhi.

Storage: i1 -> numpy bool; f16 -> float16; bf16 -> float32 arrays whose values are
always bf16-representable; pointers -> uint64 byte addresses; other types -> the
numpy type of the same name. Every function here takes and returns storage arrays.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..language import dtypes as D
from ..language.semantics import SemanticError


# --- storage and memory layouts ------------------------------------------------
def storage_dtype(t: D.dtype) -> np.dtype:
    """The numpy dtype holding values of `t` inside the interpreter."""
    if t.is_ptr():
        return np.dtype(np.uint64)
    if t.is_bf16():
        return np.dtype(np.float32)
    return t.to_numpy()


def memory_dtype(t: D.dtype) -> np.dtype:
    """The numpy dtype of one element of `t` in memory (i1 is a byte, bf16 16 bits)."""
    if t.is_ptr():
        return np.dtype(np.uint64)
    if t.is_bf16():
        return np.dtype(np.uint16)
    if t.is_bool():
        return np.dtype(np.uint8)
    return t.to_numpy()


def uint_dtype(bits: int) -> np.dtype:
    return np.dtype({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits])


def to_memory(values: np.ndarray, t: D.dtype) -> np.ndarray:
    """Storage array -> the array of in-memory elements (same shape)."""
    if t.is_bf16():
        return f32_to_bf16_bits(values)
    if t.is_bool():
        return values.astype(np.uint8)
    return values.astype(memory_dtype(t), copy=False)


def from_memory(raw: np.ndarray, t: D.dtype) -> np.ndarray:
    """Inverse of to_memory."""
    if t.is_bf16():
        return bf16_bits_to_f32(raw)
    if t.is_bool():
        return raw != 0
    return raw.astype(storage_dtype(t), copy=False)


# --- rounding to the 16-bit float formats ----------------------------------------
def f32_to_bf16_bits(x) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even; NaNs stay (quiet) NaNs."""
    b = np.asarray(x, dtype=np.float32, order="C").view(np.uint32)
    is_nan = (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = (b + (np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    quiet_nan = (b >> np.uint32(16)) | np.uint32(0x40)
    return np.where(is_nan, quiet_nan, rounded).astype(np.uint16)


def bf16_bits_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding to odd: a later round-to-nearest-even to a format
    with at most 22 significand bits (bf16, f16) then equals a single correct
    rounding of the float64 value (no double-rounding error)."""
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    x = x.reshape(-1)
    f = x.astype(np.float32)
    back = f.astype(np.float64)
    inexact = (back != x) & np.isfinite(x)
    bits = f.view(np.uint32).copy()
    toward_zero = inexact & (np.abs(back) > np.abs(x))
    bits[toward_zero] -= np.uint32(1)           # one ulp smaller magnitude (inf -> max finite)
    bits[inexact] |= np.uint32(1)
    return bits.view(np.float32).reshape(shape)


def round_to_bf16(x) -> np.ndarray:
    """Any float array -> float32 array of bf16 values (correctly rounded, RNE)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        x = f64_to_f32_round_to_odd(x)
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def round_float(x, t: D.dtype) -> np.ndarray:
    """Round a float32/float64 array to float type `t` (RNE) and return its storage."""
    x = np.asarray(x)
    if t.is_bf16():
        return round_to_bf16(x)
    return x.astype(storage_dtype(t))


def compute_dtype(t: D.dtype) -> np.dtype:
    """Float arithmetic on f16/bf16 is done in f32 and rounded (as the compiled path)."""
    return np.dtype(np.float64) if t.is_fp64() else np.dtype(np.float32)


def float_op(fn, t: D.dtype, *args) -> np.ndarray:
    """Apply numpy `fn` to float storage arrays of type t, rounding once to t."""
    ct = compute_dtype(t)
    return round_float(fn(*(np.asarray(a).astype(ct, copy=False) for a in args)), t)


# --- casts -------------------------------------------------------------------------
def _step_toward_zero(r: np.ndarray, t: D.dtype) -> np.ndarray:
    """One ulp of type t toward zero (for round-toward-zero downcasts)."""
    if t.is_bf16():
        return bf16_bits_to_f32(f32_to_bf16_bits(r) - np.uint16(1))
    ut = uint_dtype(t.primitive_bitwidth)
    return (np.asarray(r, order="C").view(ut) - ut.type(1)).view(r.dtype)


def _int_to_float_exact(x: np.ndarray, t: D.dtype) -> np.ndarray:
    """Integer array -> float type t with one correct rounding (RNE), also for 64-bit
    integers whose conversion through float64 would round twice."""
    ct = storage_dtype(t)
    if t.is_fp64() or t.is_fp32():
        return x.astype(ct)                       # a single hardware conversion
    if t.is_fp16():
        return x.astype(np.float64).astype(np.float16)  # |x| >= 2**53 overflows anyway
    # bf16: integers below 2**24 are exact in f32; larger ones are rounded exactly in Python.
    out = x.astype(np.float32)
    big = np.abs(x.astype(np.float64)) >= 2.0 ** 24
    out = out.reshape(-1).copy()
    flat = x.reshape(-1)
    for i in np.flatnonzero(big.reshape(-1)):
        out[i] = _round_int_to_precision(int(flat[i]), 8)
    return round_to_bf16(out.reshape(x.shape))


def _round_int_to_precision(n: int, precision: int) -> float:
    sign = -1.0 if n < 0 else 1.0
    n = abs(n)
    shift = n.bit_length() - precision
    if shift <= 0:
        return sign * float(n)
    q, r = n >> shift, n & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return sign * float(q << shift)


def _float_to_int(x: np.ndarray, t: D.dtype) -> np.ndarray:
    """Truncate toward zero, saturate to t's range, NaN -> 0 (docs/tile_ir.md)."""
    nt = storage_dtype(t)
    info = np.iinfo(nt)
    xf = x.astype(np.float64)
    tr = np.trunc(xf)
    nan = np.isnan(xf)
    # 2**(bits-1) (signed) or 2**bits (unsigned): exact in float64, the first value
    # that does not fit.
    too_big = tr >= 2.0 ** (t.primitive_bitwidth - (1 if t.is_int_signed() else 0))
    too_small = tr < float(info.min)
    ok = ~(nan | too_big | too_small)
    out = np.zeros(x.shape, dtype=nt)
    out[ok] = tr[ok].astype(nt)
    out[too_big] = info.max
    out[too_small] = info.min
    return out


def _float_to_float(x: np.ndarray, src: D.dtype, dst: D.dtype, rounding: str) -> np.ndarray:
    if dst.primitive_bitwidth >= src.primitive_bitwidth and not (src.is_fp16() and dst.is_bf16()) \
            and not (src.is_bf16() and dst.is_fp16()):
        return x.astype(storage_dtype(dst))      # widening is exact
    r = round_float(x, dst)
    if rounding == "rtz":
        x64 = x.astype(np.float64)
        r64 = r.astype(np.float64)
        fix = np.isfinite(x64) & (np.abs(r64) > np.abs(x64))
        if fix.any():
            r = np.where(fix, _step_toward_zero(r, dst), r)
    return r


def cast_array(x: np.ndarray, src: D.dtype, dst: D.dtype, rounding: str = "rtne") -> np.ndarray:
    """The `cast` op of docs/tile_ir.md on storage arrays (value conversion)."""
    x = np.asarray(x)
    if src == dst and src.is_ptr() == dst.is_ptr():
        return x
    if dst.is_ptr() or src.is_ptr():
        # ptr <-> ptr keeps the address; ptr <-> 64-bit int reinterprets it.
        if dst.is_ptr() and src.is_ptr():
            return x
        other = dst if src.is_ptr() else src
        if not (other.is_int() and other.primitive_bitwidth == 64):
            raise SemanticError(f"cannot cast between {src} and {dst}: pointers convert only "
                                f"to/from 64-bit integers")
        return x.view(storage_dtype(dst))
    if dst.is_bool():
        return x != 0
    if dst.is_int():
        if src.is_floating():
            return _float_to_int(x, dst)
        return x.astype(storage_dtype(dst))      # sext/zext by source type, or truncate
    # dst is a float type
    if src.is_int():
        if src.is_bool():
            return x.astype(storage_dtype(dst))
        return _int_to_float_exact(x, dst)
    return _float_to_float(x, src, dst, rounding)


def raw_bits(x: np.ndarray, t: D.dtype) -> np.ndarray:
    """The bit pattern of each element as an unsigned integer of t's width."""
    if t.is_bool():
        return x.astype(np.uint8)
    if t.is_bf16():
        return f32_to_bf16_bits(x)
    return np.asarray(x, order="C").view(uint_dtype(t.primitive_bitwidth))


def from_raw_bits(bits: np.ndarray, t: D.dtype) -> np.ndarray:
    if t.is_bool():
        return bits != 0
    if t.is_bf16():
        return bf16_bits_to_f32(bits)
    return np.asarray(bits, order="C").view(storage_dtype(t))


def bitcast_array(x: np.ndarray, src: D.dtype, dst: D.dtype) -> np.ndarray:
    if src.primitive_bitwidth != dst.primitive_bitwidth:
        raise SemanticError(f"cannot bitcast {src} to {dst}: they have different bit widths "
                            f"({src.primitive_bitwidth} vs {dst.primitive_bitwidth})")
    return from_raw_bits(raw_bits(np.asarray(x), src), dst)


def python_constant(value, t: D.dtype) -> np.ndarray:
    """A Python bool/int/float converted to type t as a 0-d storage array, exactly
    from its Python value (one rounding). Integers wrap modulo 2**bits (semantics.py
    has no range check; see the package docs)."""
    if t.is_ptr():
        raise SemanticError(f"cannot use the Python value {value!r} as a {t}")
    if isinstance(value, bool):
        value = int(value)
    if t.is_bool():
        return np.asarray(value != 0)
    if isinstance(value, float):
        if t.is_int():   # only explicit conversions (tl.full, stores) get here: the cast op
            return _float_to_int(np.asarray(value, dtype=np.float64), t)
        if t.is_bf16():
            return round_to_bf16(np.float64(value))
        return np.asarray(value).astype(storage_dtype(t))
    # int
    if t.is_int():
        bits = t.primitive_bitwidth
        v = value & ((1 << bits) - 1)
        if t.is_int_signed() and v >= 1 << (bits - 1):
            v -= 1 << bits
        return np.asarray(v, dtype=storage_dtype(t))
    if -2**63 <= value < 2**63:
        return _int_to_float_exact(np.asarray(value, dtype=np.int64), t)
    if 0 <= value < 2**64:
        return _int_to_float_exact(np.asarray(value, dtype=np.uint64), t)
    return round_float(np.float64(float(value)), t)


# --- integer arithmetic with C semantics -------------------------------------------
def int_div_trunc(a: np.ndarray, b: np.ndarray, signed: bool):
    """Quotient and remainder truncating toward zero; division by zero yields 0 for
    both (docs/tile_ir.md: undefined, the CPU path yields 0); MIN // -1 wraps."""
    zero = b == 0
    bs = np.where(zero, b.dtype.type(1), b)
    q = np.floor_divide(a, bs)
    if signed:
        r = a - q * bs
        q = q + ((r != 0) & ((a < 0) != (bs < 0))).astype(q.dtype)
    r = a - q * bs
    return np.where(zero, q.dtype.type(0), q), np.where(zero, r.dtype.type(0), r)


def umulhi(a: np.ndarray, b: np.ndarray, t: D.dtype) -> np.ndarray:
    """High half of the full 2*bits product of the operands taken as UNSIGNED
    integers, whatever t's signedness: tl.umulhi is Triton's mulhiui."""
    bits = t.primitive_bitwidth
    if bits <= 32:
        ut = np.dtype(f"uint{bits}")
        p = a.view(ut).astype(np.uint64) * b.view(ut).astype(np.uint64)
        return (p >> np.uint64(bits)).astype(ut).view(storage_dtype(t))
    ua, ub = a.astype(np.uint64), b.astype(np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    al, ah, bl, bh = ua & m32, ua >> s32, ub & m32, ub >> s32
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> s32) + (lh & m32) + (hl & m32)
    hi = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    return hi.view(storage_dtype(t))


# --- fused multiply-add ------------------------------------------------------------
def _fma_f64_round_to_odd(a, b, c) -> np.ndarray:
    """a*b + c for float32-or-narrower inputs, rounded to odd in float64: the product
    is exact in float64, TwoSum recovers the addition's error."""
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    p = a * b
    s = p + c
    bp = s - c
    err = (p - bp) + (c - (s - bp))
    inexact = (err != 0) & np.isfinite(s)
    if inexact.any():
        s = np.array(s, copy=True).reshape(-1)
        flat_err = np.broadcast_to(err, inexact.shape).reshape(-1)
        idx = np.flatnonzero(inexact.reshape(-1))
        bits = s.view(np.uint64)
        even = (bits[idx] & np.uint64(1)) == 0
        step = idx[even]
        s[step] = np.nextafter(s[step], np.where(flat_err[step] > 0, np.inf, -np.inf))
        s = s.reshape(inexact.shape)
    return s


def _fma_f64_exact(a, b, c) -> np.ndarray:
    def one(x, y, z):
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            return x * y + z
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            return x * y + z        # the sign of zero, as IEEE fma
        try:
            return float(exact)     # correctly rounded
        except OverflowError:
            return math.copysign(math.inf, exact)
    out = np.frompyfunc(one, 3, 1)(a, b, c)
    return np.asarray(out, dtype=np.float64)


def fma(a, b, c, t: D.dtype) -> np.ndarray:
    """a*b+c with one rounding for f32/f64; f16/bf16 as an f32 fma then rounded to t
    (the compiled path computes f16/bf16 math in f32)."""
    if t.is_fp64():
        return _fma_f64_exact(a, b, c)
    # Round-to-odd at 53 bits then round-to-nearest-even at 24 is one correct rounding.
    r32 = np.asarray(_fma_f64_round_to_odd(a, b, c)).astype(np.float32)
    return r32 if t.is_fp32() else round_float(r32, t)
