"""tl.randint/randint4x/rand/randn: Philox 4x32 as in triton.language.random (3.x).

Bit-exact with Triton: the seed becomes uint64 (signed seeds sign-extend) and is
split into key (lo, hi) u32 halves; the offset's low 32 bits are counter word 0 and,
for 64-bit offsets, bits 32..63 (arithmetic shift for signed offsets) are word 1;
words 2 and 3 are 0. randint returns uint32 (word 0). rand maps a word x to
(x as int32, with x<0 -> -x-1) * 4.6566127342e-10 in float32; randn is Box-Muller
on words 0 and 1 (its log/sqrt/cos/sin are numpy's float32 functions, so randn
agrees with compiled code to a few ulp, not bitwise).
"""
from __future__ import annotations

import numpy as np

from ..language import dtypes as D
from ..language.semantics import SemanticError
from . import numerics as N
from .values import Tensor, to_tensor, unwrap

PHILOX_KEY_A = np.uint32(0x9E3779B9)
PHILOX_KEY_B = np.uint32(0xBB67AE85)
PHILOX_ROUND_A = np.uint32(0xD2511F53)
PHILOX_ROUND_B = np.uint32(0xCD9E8D57)
UNIFORM_SCALE = np.float32(4.6566127342e-10)


def _mulhi_lo(a: np.uint32, b: np.ndarray):
    p = np.uint64(a) * b.astype(np.uint64)
    return (p >> np.uint64(32)).astype(np.uint32), p.astype(np.uint32)


def philox4x32(c0, c1, c2, c3, k0, k1, n_rounds: int = 10):
    """Counters and keys as uint32 arrays (broadcast together); returns 4 uint32 arrays."""
    c0, c1, c2, c3, k0, k1 = np.broadcast_arrays(*(np.asarray(v, dtype=np.uint32)
                                                   for v in (c0, c1, c2, c3, k0, k1)))
    for _ in range(n_rounds):
        hi_b, lo_b = _mulhi_lo(PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhi_lo(PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = k0 + PHILOX_KEY_A
        k1 = k1 + PHILOX_KEY_B
    return c0, c1, c2, c3


def _philox_words(seed, offset, n_rounds, what):
    seed = to_tensor(seed, f"{what} seed")
    offset = to_tensor(offset, f"{what} offset")
    if not seed.dtype.is_int():
        raise SemanticError(f"{what}: the seed must be an integer, got {seed.dtype}")
    if not offset.dtype.is_int():
        raise SemanticError(f"{what}: the offset must be an integer, got {offset.dtype}")
    seed64 = N.cast_array(seed.data, seed.dtype, D.uint64)
    k0 = (seed64 & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    k1 = (seed64 >> np.uint64(32)).astype(np.uint32)
    c0 = N.cast_array(offset.data, offset.dtype, D.uint32)
    if offset.dtype.primitive_bitwidth > 32:
        c1 = (offset.data >> offset.data.dtype.type(32)).astype(np.uint32)
    else:
        c1 = np.zeros_like(c0)
    zero = np.zeros_like(c0)
    return philox4x32(c0, c1, zero, zero, k0, k1, int(unwrap(n_rounds)))


def uint_to_uniform_float(x: np.ndarray) -> np.ndarray:
    i = x.astype(np.uint32).view(np.int32)
    i = np.where(i < 0, -i - np.int32(1), i)            # int32 arithmetic, wraps like Triton
    return i.astype(np.float32) * UNIFORM_SCALE


class RandomOps:

    def randint4x(self, seed, offset, n_rounds=10):
        return tuple(Tensor(w, D.uint32) for w in _philox_words(seed, offset, n_rounds, "tl.randint4x"))

    def randint(self, seed, offset, n_rounds=10):
        return Tensor(_philox_words(seed, offset, n_rounds, "tl.randint")[0], D.uint32)

    def rand(self, seed, offset, n_rounds=10):
        w = _philox_words(seed, offset, n_rounds, "tl.rand")[0]
        return Tensor(uint_to_uniform_float(w), D.float32)

    def randn(self, seed, offset, n_rounds=10):
        w = _philox_words(seed, offset, n_rounds, "tl.randn")
        u1 = uint_to_uniform_float(w[0])
        u2 = uint_to_uniform_float(w[1])
        u1 = np.fmax(np.float32(1.0e-7), u1)
        th = np.float32(6.283185307179586) * u2
        r = np.sqrt(np.float32(-2.0) * np.log(u1))
        return Tensor(r * np.cos(th), D.float32)
