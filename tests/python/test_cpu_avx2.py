"""The AVX2 code path, tested on any x86-64 host: TESSERA_CPU=haswell compiles for an
AVX2 CPU (no AVX-512), which every AVX-512 host also runs. Masked loads and stores
take a different lowering there (compiler/codegen/x86/lane_masked_memory.cpp)."""
import numpy as np
import pytest

import tessera
import tessera.language as tl

from cpu_helpers import ALL_DTYPES, poisoned


@pytest.fixture(autouse=True)
def avx2_target(monkeypatch):
    monkeypatch.setenv("TESSERA_CPU", "haswell")


def test_the_target_is_haswell():
    c = tessera.compile(copy_masked, signature={"src": "*fp32", "dst": "*fp32", "n": "i32"},
                        constexprs={"BLOCK": 64}, target="cpu")
    asm = c.asm["asm"]
    assert "ymm" in asm and "zmm" not in asm
    assert "vmaskmov" in asm or "vpmaskmov" in asm


@tessera.kernel
def copy_masked(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n, other=7)
    tl.store(dst + offs, x, mask=offs < n)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 5, 17, 100])
def test_masked_copy_every_dtype(dtype, n):
    src = (np.arange(n) % 100).astype(dtype)
    # one guard element after the array: a lane past n must neither be read as data nor written
    dst = poisoned(n + 1, dtype)
    guard = dst[n:].copy()
    copy_masked[(tessera.cdiv(n, 32),)](src, dst, n, BLOCK=32)
    np.testing.assert_array_equal(dst[:n], src)
    np.testing.assert_array_equal(dst[n:].view(np.uint8), guard.view(np.uint8))


@tessera.kernel
def masked_row_max_sum(x_ptr, y_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)[:, None]
    rn = tl.arange(0, BN)[None, :]
    mask = (rm < M) & (rn < N)
    x = tl.load(x_ptr + rm * N + rn, mask=mask, other=1)
    y = tl.load(y_ptr + rm * N + rn, mask=mask, other=2)
    t = tl.maximum(y.to(tl.int16), x)
    tl.store(out_ptr + tl.arange(0, BM), tl.sum(t, axis=1))


@pytest.mark.parametrize("xt", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("yt", [np.int32, np.uint32])
@pytest.mark.parametrize("M,N", [(1, 1), (3, 13), (4, 16), (2, 5)])
def test_masks_with_constant_lanes(xt, yt, M, N):
    # N == 1 specializes `rn < N` to a constant mask with 15 false lanes: LLVM 19 turned
    # the false half of the int32 masked load into a plain load on AVX2 (wrong sums).
    rng = np.random.default_rng(M * 100 + N)
    x = rng.integers(0, 100, (M, N)).astype(xt)
    y = rng.integers(0, 2**15, (M, N)).astype(yt)
    out = poisoned(4, np.int32)
    masked_row_max_sum[(1,)](x, y, out, M, N, BM=4, BN=16)
    t = np.full((4, 16), 2, np.int64)
    t[:M, :N] = np.maximum(y.astype(np.int16), x)
    t[M:, :] = 2
    t[:, N:] = 2
    np.testing.assert_array_equal(out, t.sum(axis=1).astype(np.int32))


@tessera.kernel
def gather_scatter(src, dst, idx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    idx = tl.load(idx_ptr + offs, mask=m, other=0)
    v = tl.load(src + idx, mask=m, other=0)
    tl.store(dst + idx, v + 1, mask=m)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.float16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 16])
def test_gather_scatter_masked(dtype, n):
    idx = np.random.default_rng(n).permutation(16)[:n].astype(np.int32)
    src = np.arange(16).astype(dtype)
    dst = poisoned(16, dtype)
    before = dst.copy()
    gather_scatter[(1,)](src, dst, idx, n, BLOCK=16)
    expect = before.copy()
    expect[idx] = (src[idx] + 1).astype(dtype)
    np.testing.assert_array_equal(dst.view(np.uint8), expect.view(np.uint8))
