"""wgmma rings filled by the TMA (cp.async.bulk.tensor + mbarrier, sm_90a;
compiler/codegen/nvptx/tma_nvptx.cpp), checked on a GPU against a float64 reference.

Covers the two load forms the TMA path recognizes -- addresses recomputed from k with
bounds masks (bench/gpu_kernels.matmul_kernel) and block pointers with boundary_check --
across the ring formats: K-major A with 32/64/128-byte rows, N-major B in 64-column
blocks (1 to 4 boxes per stage), 2 to 4 stages (4: one wgmma group kept in flight),
M/N/K edges (out-of-bounds boxes zero-filled), K = 0 (the runtime's stand-in map),
padded row strides, and a row stride the TMA cannot take (cp.async instead).
Outputs start as NaN so unwritten elements fail.
"""
import pytest

import tessera
import tessera.language as tl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
DEV = "cuda"
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


from matmul_kernels import matmul as _mm  # noqa: E402


def _mm_block_ptr(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (s_am, s_ak), (tl.program_id(0) * BM, 0), (BM, BK), (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (s_bk, s_bn), (0, tl.program_id(1) * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_bp, boundary_check=(0, 1)), tl.load(b_bp, boundary_check=(0, 1)), acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(c_ptr, (M, N), (s_cm, s_cn), (tl.program_id(0) * BM, tl.program_id(1) * BN),
                             (BM, BN), (1, 0))
    tl.store(c_bp, acc, boundary_check=(0, 1))


def kernels(tma, monkeypatch):
    """Fresh kernels (their own specialization tables) compiled with TESSERA_TMA=tma."""
    monkeypatch.setenv("TESSERA_TMA", "1" if tma else "0")
    return tessera.jit(_mm), tessera.jit(_mm_block_ptr)


def run(kernel, a, b, BM, BN, BK, num_warps, num_stages):
    M, K = a.shape
    N = b.shape[1]
    c = torch.full((M, N), float("nan"), device=DEV)
    ck = kernel[(tessera.cdiv(M, BM), tessera.cdiv(N, BN))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=BM, BN=BN, BK=BK, num_warps=num_warps, num_stages=num_stages)
    torch.cuda.synchronize()
    return c, ck


def inputs(M, N, K, dtype, seed, lda=None, ldb=None):
    """A (M x K) and B (K x N) with row strides lda, ldb (default: K and N rounded up
    to 16 elements, the TMA's stride rule, so odd extents still take the TMA path)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    # (K = 0: lda 16, not torch's stride 1 of an empty dim, so A still has a tensor map:
    # the runtime's stand-in map over zeros.)
    a = torch.randn(M, lda or max(16, -(-K // 16) * 16), device=DEV, generator=g).to(dt)[:, :K]
    b = torch.randn(K, ldb or -(-N // 16) * 16, device=DEV, generator=g).to(dt)[:, :N]
    return a, b


def check(c, a, b):
    assert not torch.isnan(c).any(), "unwritten (NaN) outputs"
    ref = a.double() @ b.double()
    # f16/bf16 products are exact in fp32; only the summation order differs.
    torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4 * max(a.shape[1], 1) ** 0.5)


SHAPES = [  # M, N, K, BM, BN, BK, num_warps, num_stages
    (512, 384, 256, 128, 128, 64, 8, 3),    # A 128-byte rows, B two 64-column boxes
    (300, 200, 70, 64, 64, 32, 4, 3),       # K % BK = 6, M/N edges: out-of-bounds boxes read zeros
    (256, 512, 256, 128, 256, 64, 8, 4),    # m64n256, four B boxes, 4 stages (a wgmma group in flight)
    (128, 128, 48, 128, 128, 16, 8, 2),     # BK 16: 32-byte rows for A, 16-row B blocks
    (200, 136, 96, 64, 64, 32, 4, 3),       # A 64-byte rows; B one 64-column box
    (256, 256, 40, 64, 64, 32, 4, 4),       # fewer iterations (2) than stages ahead
    (1000, 520, 1000, 64, 128, 64, 4, 3),
    (128, 128, 0, 64, 64, 32, 4, 3)]        # K = 0: no iteration, C = 0 (A's map over nothing)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("form", ["addresses", "block_ptr"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,num_warps,num_stages", SHAPES)
def test_tma_ring_matches_reference(monkeypatch, dtype, form, M, N, K, BM, BN, BK, num_warps, num_stages):
    mm, mm_bp = kernels(True, monkeypatch)
    a, b = inputs(M, N, K, dtype, seed=M + 3 * K + num_stages)
    c, ck = run(mm if form == "addresses" else mm_bp, a, b, BM, BN, BK, num_warps, num_stages)
    check(c, a, b)
    if HOPPER:  # the ring really was TMA-filled
        assert ck.metadata.get("tensor_maps"), ck.metadata
        assert "cp.async.bulk.tensor" in ck.asm["ptx"]


@pytest.mark.parametrize("form", ["addresses", "block_ptr"])
def test_padded_row_strides(monkeypatch, form):
    # lda = K + 64, ldb = N + 16: the maps' row strides are not the extents.
    mm, mm_bp = kernels(True, monkeypatch)
    a, b = inputs(192, 160, 224, "fp16", seed=11, lda=224 + 64, ldb=160 + 16)
    c, ck = run(mm if form == "addresses" else mm_bp, a, b, 64, 64, 64, 4, 3)
    check(c, a, b)
    if HOPPER:
        assert ck.metadata.get("tensor_maps")


def test_row_stride_the_tma_cannot_take(monkeypatch):
    # lda = 204 elements (408 bytes: not a multiple of 16, so the specialization, which
    # proves divisibility by 8 or 16 elements, cannot promise the TMA's stride rule): no
    # tensor maps. (lda = 200, 400 bytes, takes the TMA since the launch tracks
    # divisibility by 8.)
    mm, _ = kernels(True, monkeypatch)
    a, b = inputs(128, 128, 200, "fp16", seed=5, lda=204)
    c, ck = run(mm, a, b, 64, 64, 32, 4, 3)
    check(c, a, b)
    assert not ck.metadata.get("tensor_maps")


def test_tma_and_cp_async_rings_agree(monkeypatch):
    # Same inputs through both rings: identical sums in the same order, so identical bits.
    a, b = inputs(384, 256, 320, "bf16", seed=21)
    mm_tma, _ = kernels(True, monkeypatch)
    c_tma, _ = run(mm_tma, a, b, 128, 128, 64, 8, 3)
    mm_cp, _ = kernels(False, monkeypatch)
    c_cp, ck = run(mm_cp, a, b, 128, 128, 64, 8, 3)
    assert not ck.metadata.get("tensor_maps")
    check(c_tma, a, b)
    assert torch.equal(c_tma, c_cp)


def test_tma_kernel_inside_an_outer_loop_of_launches(monkeypatch):
    # Many CTAs per SM over several waves, launched repeatedly: the mbarriers are
    # re-initialized per tile and their phases never leak between runs.
    mm, _ = kernels(True, monkeypatch)
    a, b = inputs(1024, 1024, 512, "fp16", seed=3)
    for _ in range(3):
        c, _ = run(mm, a, b, 128, 128, 64, 8, 4)
        check(c, a, b)
