"""Philox 4x32-10 random numbers, written in the Tessera language and inlined by the code
generator for tl.randint / randint4x / rand / randn.

This follows triton/language/random.py (3.6) operation for operation, so the bits
match Triton's and the numpy interpreter's: the same round constants, the same key
schedule, the same uint -> float conversion (scale 4.6566127342e-10 after folding
negative values) and the same Box-Muller transform. Callers pass `seed` and `offset`
as tensors (a Python int seed becomes an i32 constant first, as tl.to_tensor would).

(Tried in session 10: each round's umulhi(B, c) and B * c as the halves of one 64-bit
product, one mul.wide.u32 on a GPU instead of mul.hi and mul.lo: 2 SASS instructions a
round fewer, but on an H200 softmax with dropout ran 0.868 / 0.848 of a copy (forward /
backward) against 0.91 / 0.92 with the two multiplies in the same session (not
investigated further): bench/results/kernels_cuda_float16_h200_widemul.md.)
"""
import tessera.language as tl


def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds: tl.constexpr):
    if c0.dtype == tl.uint32:
        PHILOX_KEY_A: tl.constexpr = 0x9E3779B9
        PHILOX_KEY_B: tl.constexpr = 0xBB67AE85
        PHILOX_ROUND_A: tl.constexpr = 0xD2511F53
        PHILOX_ROUND_B: tl.constexpr = 0xCD9E8D57
    else:
        tl.static_assert(c0.dtype == tl.uint64, "dtype not supported in philox_impl")
        PHILOX_KEY_A: tl.constexpr = 0x9E3779B97F4A7C15
        PHILOX_KEY_B: tl.constexpr = 0xBB67AE8584CAA73B
        PHILOX_ROUND_A: tl.constexpr = 0xD2E7470EE14C6C93
        PHILOX_ROUND_B: tl.constexpr = 0xCA5A826395121157
    for _ in tl.static_range(n_rounds):
        A = PHILOX_ROUND_A
        B = PHILOX_ROUND_B
        _c0, _c2 = c0, c2
        c0 = tl.umulhi(B, _c2) ^ c1 ^ k0
        c2 = tl.umulhi(A, _c0) ^ c3 ^ k1
        c1 = B * _c2
        c3 = A * _c0
        k0 = k0 + PHILOX_KEY_A
        k1 = k1 + PHILOX_KEY_B
    return c0, c1, c2, c3


def philox(seed, c0, c1, c2, c3, n_rounds: tl.constexpr):
    seed = seed.to(tl.uint64)
    if c0.dtype.primitive_bitwidth == 32:
        int_dtype = tl.uint32
        seed_hi = ((seed >> 32) & 0xffffffff).to(tl.uint32)
        seed_lo = (seed & 0xffffffff).to(tl.uint32)
    else:
        tl.static_assert(c0.dtype.primitive_bitwidth == 64, "bitwidth not supported in philox")
        int_dtype = tl.uint64
        seed_hi = tl.full((1, ), 0, dtype=int_dtype)
        seed_lo = seed
    c0 = c0.to(int_dtype, bitcast=True)
    c1 = c1.to(int_dtype, bitcast=True)
    c2 = c2.to(int_dtype, bitcast=True)
    c3 = c3.to(int_dtype, bitcast=True)
    return philox_impl(c0, c1, c2, c3, seed_lo, seed_hi, n_rounds)


def randint4x(seed, offset, n_rounds: tl.constexpr):
    # Triton 3.6: the counter is (offset's low 32 bits, its high 32 bits, 0, 0), so the
    # generator is always Philox 4x32 and 64-bit offsets do not wrap around.
    offset_lo = offset.to(tl.uint32)
    _0 = offset_lo * 0
    if offset.dtype.primitive_bitwidth > 32:
        offset_hi = (offset >> 32).to(tl.uint32)
    else:
        offset_hi = _0
    return philox(seed, offset_lo, offset_hi, _0, _0, n_rounds)


def randint(seed, offset, n_rounds: tl.constexpr):
    ret, _, _, _ = randint4x(seed, offset, n_rounds)
    return ret


def uint_to_uniform_float(x):
    # scale is ((2**23 - 1) / 2**23) * 2**(N_BITS - 1): the largest value with
    # MAX_INT * scale < 1.0 after float rounding
    if x.dtype == tl.uint32 or x.dtype == tl.int32:
        x = x.to(tl.int32, bitcast=True)
        scale = 4.6566127342e-10
    else:
        tl.static_assert(x.dtype == tl.uint64 or x.dtype == tl.int64)
        x = x.to(tl.int64, bitcast=True)
        scale = 1.0842020432385337e-19
    x = tl.where(x < 0, -x - 1, x)
    return x * scale


def rand(seed, offset, n_rounds: tl.constexpr):
    source = randint(seed, offset, n_rounds)
    return uint_to_uniform_float(source)


def pair_uniform_to_normal(u1, u2):
    """Box-Muller transform"""
    u1 = tl.maximum(1.0e-7, u1)
    th = 6.283185307179586 * u2
    r = tl.sqrt(-2.0 * tl.log(u1))
    return r * tl.cos(th), r * tl.sin(th)


def randn(seed, offset, n_rounds: tl.constexpr):
    i1, i2, _, _ = randint4x(seed, offset, n_rounds)
    u1 = uint_to_uniform_float(i1)
    u2 = uint_to_uniform_float(i2)
    n1, _ = pair_uniform_to_normal(u1, u2)
    return n1
