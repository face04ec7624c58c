"""fp32 matmuls with tf32 inputs on a GPU, checked against a float64 reference: NT
(x @ W^T, W stored N x K -- both operands K-major, so on sm_90a wgmma.m64nNk8 tf32 reads
them from a TMA- or cp.async-filled ring; lower_dot_wgmma_nvptx.cpp) and NN (B row-major,
N contiguous: tf32 wgmma cannot transpose a shared-memory operand, so C^T = B^T A^T with
B^T's fragments in registers; lower_dot_wgmma_swapped_nvptx.cpp), with
odd extents whose edge tiles are masked (out-of-bounds boxes zero-filled), padded row
strides, 2 to 4 stages, 32/64/128-byte rows, and the "ieee" / "tf32x3" precisions
(mma.sync / FMA, unchanged). Outputs start as NaN so unwritten elements fail.
The PTX checks without a GPU are in test_gpu_tf32_wgmma_compile.py."""
import pytest

import tessera
from matmul_kernels import matmul

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
DEV = "cuda"
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def inputs(M, N, K, seed, ld=None):
    """A (M x K) and W (N x K) with row stride ld (default: K rounded up to 16 elements,
    which the launch's specialization proves 16-byte aligned, so odd K still takes the TMA)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    ld = ld or -(-max(K, 16) // 16) * 16
    a = torch.randn(M, ld, device=DEV, generator=g)[:, :K]
    w = torch.randn(N, ld, device=DEV, generator=g)[:, :K]
    return a, w


def run(layout, a, w, BM, BN, BK, num_warps, num_stages, prec="tf32", monkeypatch=None, tma="1"):
    if monkeypatch is not None:
        monkeypatch.setenv("TESSERA_TMA", tma)
    kernel = tessera.jit(matmul)  # fresh specializations (TESSERA_TMA)
    M, K = a.shape
    N = w.shape[0]
    # NT: B = W^T as it is (read along W's rows); NN: B row-major K x N.
    b = w.t() if layout == "NT" else w.t().contiguous()
    c = torch.full((M, N), float("nan"), device=DEV)
    ck = kernel[(tessera.cdiv(M, BM), tessera.cdiv(N, BN))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=BM, BN=BN, BK=BK, PREC=prec, B_ROWS_ALONG_K=layout == "NT", num_warps=num_warps, num_stages=num_stages)
    torch.cuda.synchronize()
    return c, ck


def check(c, a, w, prec="tf32"):
    assert not torch.isnan(c).any(), "unwritten (NaN) outputs"
    a64, w64 = a.double(), w.double()
    ref = a64 @ w64.t()
    err = (c.double() - ref).abs()
    # tf32 keeps 10 mantissa bits: each operand off by < 2^-10 relative (truncated by
    # wgmma, rounded by mma.sync's cvt.rna), each product by < 2^-9 -- so every element
    # is within 4e-3 of the sum of |products| (plus fp32 accumulation). tf32x3 and ieee
    # are fp32-accurate.
    scale = a64.abs() @ w64.abs().t()
    bound = (4e-3 if prec == "tf32" else 1e-5) * scale + 1e-5
    assert (err <= bound).all(), f"max error {err.max().item():.3e}, worst ratio {(err / bound).max().item():.2f}"
    if prec == "tf32" and ref.norm() > 0:  # (K = 0: all zeros, checked above)
        assert (err.norm() / ref.norm()).item() < 3e-3  # bench_gpu.py's tf32 tolerance


SHAPES = [  # M, N, K, BM, BN, BK, num_warps, num_stages
    (256, 256, 256, 128, 128, 32, 8, 3),    # m64n128k8 per warpgroup, 128-byte rows
    (200, 184, 300, 128, 128, 32, 8, 3),    # M, N, K edges: masked tiles, zero-filled boxes
    (333, 257, 129, 64, 64, 32, 4, 2),      # one warpgroup, 2 stages, K = 4 * 32 + 1
    (130, 520, 1000, 128, 256, 32, 8, 4),   # m64n256k8, 4 stages (a wgmma group in flight)
    (96, 80, 72, 64, 32, 16, 4, 3),         # 64-byte rows (BK 16), n32
    (64, 48, 40, 64, 16, 8, 4, 3),          # 32-byte rows (BK 8), n16
    (257, 129, 0, 128, 128, 32, 8, 3),      # K = 0: the accumulator's zeros
]


@pytest.mark.parametrize("M,N,K,BM,BN,BK,num_warps,num_stages", SHAPES)
def test_nt_tf32_matches_reference(monkeypatch, M, N, K, BM, BN, BK, num_warps, num_stages):
    a, w = inputs(M, N, K, seed=M + 7 * K)
    c, ck = run("NT", a, w, BM, BN, BK, num_warps, num_stages, monkeypatch=monkeypatch)
    check(c, a, w)
    if HOPPER:  # wgmma tf32 from a TMA ring
        ptx = ck.asm["ptx"]
        assert f"wgmma.mma_async.sync.aligned.m64n{BN}k8.f32.tf32.tf32" in ptx
        assert "mma.sync" not in ptx
        assert ck.metadata.get("tensor_maps")


@pytest.mark.parametrize("M,N,K", [(200, 184, 300), (256, 512, 128)])
def test_nt_tf32_cp_async_ring(monkeypatch, M, N, K):
    # TESSERA_TMA=0: the same wgmma, fed by cp.async.
    a, w = inputs(M, N, K, seed=3 * M + K)
    c, ck = run("NT", a, w, 128, 128, 32, 8, 3, monkeypatch=monkeypatch, tma="0")
    check(c, a, w)
    if HOPPER:
        assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ck.asm["ptx"]
        assert not ck.metadata.get("tensor_maps")


def test_nt_tf32_padded_row_strides(monkeypatch):
    a, w = inputs(192, 160, 224, seed=11, ld=224 + 48)  # the maps' row stride is not K
    c, ck = run("NT", a, w, 128, 128, 32, 8, 3, monkeypatch=monkeypatch)
    check(c, a, w)
    if HOPPER:
        assert ck.metadata.get("tensor_maps")


def test_nt_tf32_row_stride_the_tma_cannot_take(monkeypatch):
    # Rows of 260 elements (1040 bytes): 16-byte aligned, but the specialization only marks
    # strides divisible by 16 elements, so nothing proves the TMA's rule -- cp.async ring,
    # still wgmma.
    a, w = inputs(192, 160, 224, seed=13, ld=260)
    c, ck = run("NT", a, w, 128, 128, 32, 8, 3, monkeypatch=monkeypatch)
    check(c, a, w)
    if HOPPER:
        assert not ck.metadata.get("tensor_maps")
        assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ck.asm["ptx"]


NN_SHAPES = [  # M, N, K, BM, BN, BK, num_warps, num_stages; BN = 16 x num_warps: swapped wgmma
    (256, 256, 256, 256, 128, 32, 8, 4),    # m64n256k8, k-step groups in flight
    (200, 184, 300, 128, 128, 32, 8, 3),    # M, N, K edges: masked tiles, zero-filled boxes
    (333, 257, 129, 64, 64, 32, 4, 2),      # one warpgroup, 2 stages, K = 4 * 32 + 1
    (130, 520, 1000, 256, 128, 32, 8, 4),   # partial M tile of n256, many K iterations
    (96, 80, 72, 32, 64, 16, 4, 3),         # 64-byte A rows (BK 16), n32
    (40, 100, 44, 16, 64, 8, 4, 3),         # 32-byte A rows (BK 8), n16
    (257, 129, 0, 256, 128, 32, 8, 4),      # K = 0: the loop never runs, the zeros
    (300, 200, 256, 128, 128, 32, 4, 3),    # BN != 16 x warps: mma.sync, B through registers
]


@pytest.mark.parametrize("M,N,K,BM,BN,BK,num_warps,num_stages", NN_SHAPES)
def test_nn_tf32_matches_reference(monkeypatch, M, N, K, BM, BN, BK, num_warps, num_stages):
    # B N-contiguous: tf32 wgmma cannot transpose a shared-memory operand, so C^T = B^T A^T
    # with B^T's fragments loaded from the ring into registers.
    a, w = inputs(M, N, K, seed=M + 5 * K)
    c, ck = run("NN", a, w, BM, BN, BK, num_warps, num_stages, monkeypatch=monkeypatch)
    check(c, a, w)
    if HOPPER:
        ptx = ck.asm["ptx"]
        if BN == 16 * num_warps:
            assert f"wgmma.mma_async.sync.aligned.m64n{BM}k8.f32.tf32.tf32" in ptx and "mma.sync" not in ptx
            # B's row stride is N: the TMA where the specialization proves its bytes a multiple
            # of 16 (it tracks divisibility by 8 and 16 elements), else cp.async.
            assert bool(ck.metadata.get("tensor_maps")) == (N % 8 == 0)
        else:
            assert "wgmma" not in ptx and "mma.sync.aligned.m16n8k8" in ptx


@pytest.mark.parametrize("K", [32, 64, 96, 200, 2080])
@pytest.mark.parametrize("tma", ["1", "0"])
def test_nn_tf32_iteration_counts(monkeypatch, K, tma):
    # The benchmark's NN config (256x128x32, 8 warps, 4 stages: a wgmma group in flight
    # across iterations) at 1, 2, 3, 7 and 65 K steps, many CTAs, from both rings.
    a, w = inputs(512, 384, K, seed=K + 31)
    c, _ = run("NN", a, w, 256, 128, 32, 8, 4, monkeypatch=monkeypatch, tma=tma)
    check(c, a, w)


@pytest.mark.parametrize("M,N,K", [(200, 184, 300), (256, 512, 128)])
def test_nn_tf32_cp_async_ring(monkeypatch, M, N, K):
    # TESSERA_TMA=0: B's column blocks filled by cp.async, the same swapped wgmma.
    a, w = inputs(M, N, K, seed=5 * M + K)
    c, ck = run("NN", a, w, 256, 128, 32, 8, 4, monkeypatch=monkeypatch, tma="0")
    check(c, a, w)
    if HOPPER:
        assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in ck.asm["ptx"]
        assert not ck.metadata.get("tensor_maps")


def test_nn_tf32_padded_row_strides(monkeypatch):
    # A's and B's row strides are not K and N (B's map: stride s_bk).
    M, N, K = 192, 160, 224
    g = torch.Generator(device=DEV).manual_seed(23)
    a = torch.randn(M, K + 48, device=DEV, generator=g)[:, :K]
    b = torch.randn(K, N + 32, device=DEV, generator=g)[:, :N]
    c = torch.full((M, N), float("nan"), device=DEV)
    ck = tessera.jit(matmul)[(tessera.cdiv(M, 256), tessera.cdiv(N, 128))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=256, BN=128, BK=32, PREC="tf32", num_warps=8, num_stages=4)
    torch.cuda.synchronize()
    check(c, a, b.t())
    if HOPPER:
        assert ck.metadata.get("tensor_maps")


@pytest.mark.parametrize("layout", ["NT", "NN"])
@pytest.mark.parametrize("prec", ["ieee", "tf32x3"])
def test_other_precisions_keep_fp32_accuracy(monkeypatch, layout, prec):
    a, w = inputs(200, 184, 300, seed=17)
    c, ck = run(layout, a, w, 128, 128, 32, 8, 3, prec=prec, monkeypatch=monkeypatch)
    check(c, a, w, prec)
    assert "wgmma" not in ck.asm["ptx"]
