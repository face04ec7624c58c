"""Two NVPTX lowering choices around tensor-core dots (sm_90a PTX, no GPU needed; the
`gpu` tests run the same kernels against torch):
- a 2-D load combined elementwise with a dot's accumulator (a residual added in the
  epilogue) is loaded in the accumulator's layout (gpu_lowering.cpp plan_load_layouts),
  not converted through shared memory;
- the two branches of an `if` outside any loop share their shared memory (lower_if):
  a kernel whose branches each run a pipelined K loop needs the larger ring, not both."""
import re

import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble_if_available  # noqa: E402

torch = pytest.importorskip("torch")



@tessera.kernel
def _matmul_plus_residual(A, B, R, C, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(B + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    offs = rm[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    acc += tl.load(R + offs, mask=mask, other=0.0)
    tl.store(C + offs, acc, mask=mask)


@tessera.kernel
def _one_product(A, B, C, D, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program t < cdiv(M, BLOCK_M): rows of C = A @ B; the others: rows of D = A^T @ B'
    (A read M-major, the contraction over A's M rows) -- two K loops in two branches."""
    t = tl.program_id(0)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if t < tl.cdiv(M, BLOCK_M):
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        rm = t * BLOCK_M + tl.arange(0, BLOCK_M)
        for k in range(0, K, BLOCK_K):
            a = tl.load(A + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0.0)
            b = tl.load(B + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        ri = (t - tl.cdiv(M, BLOCK_M)) * BLOCK_M + tl.arange(0, BLOCK_M)
        for m in range(0, M, BLOCK_K):
            a = tl.trans(tl.load(A + (m + rk)[:, None] * K + ri[None, :],
                                 mask=((m + rk)[:, None] < M) & (ri[None, :] < K), other=0.0))
            b = tl.load(B + (m + rk)[:, None] * N + rn[None, :], mask=((m + rk)[:, None] < M) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(D + ri[:, None] * N + rn[None, :], acc, mask=(ri[:, None] < K) & (rn[None, :] < N))


@tessera.kernel
def _one_of_two_products(A, B, C, D, M, N, K, LOOPED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    """_one_product, or (LOOPED) the same twice in a loop."""
    if LOOPED:
        for _ in range(0, 2):
            _one_product(A, B, C, D, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        _one_product(A, B, C, D, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)


def _ptx(ck, tmp_path):
    ptx = ck.asm["ptx"]
    assemble_if_available(ptx, "90a", tmp_path)
    return ptx


def test_residual_is_loaded_in_the_accumulator_layout(tmp_path):
    # 128x128 fp32 accumulator over 8 warps (wgmma, rows per warp): each thread owns 64
    # elements as 32 pairs of adjacent columns, and loads the fp32 residual as those 32
    # pairs (8-byte loads); shared memory is the ring's 3 stages of 2 x 16 KB only (a
    # conversion would add a 64 KB buffer).
    ck = tessera.compile(_matmul_plus_residual, "*fp16:16,*fp16:16,*fp32:16,*fp32:16,i32:16,i32:16,i32:16",
                         dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64), target="cuda:90a", num_warps=8, num_stages=3)
    ptx = _ptx(ck, tmp_path)
    assert "wgmma.mma_async" in ptx
    assert len(re.findall(r"ld\.global(\.nc)?\.v2\.f32", ptx)) == 32, ptx
    assert int(ck.metadata["shared"]) < 3 * 32 * 1024 + 1024


@pytest.mark.parametrize("looped", [False, True])
def test_if_branches_share_shared_memory_outside_loops(looped, tmp_path):
    # Each branch pipelines its K loop in a 2-stage ring of 2 x 16 KB (128x64 A, 64x128
    # B, fp16) feeding wgmma: outside a loop the else branch's ring starts where the then
    # branch's did; in a loop (one iteration's then branch, the next one's else) they
    # stay apart.
    ck = tessera.compile(_one_of_two_products, "*fp16:16,*fp16:16,*fp32:16,*fp32:16,i32:16,i32:16,i32:16",
                         dict(LOOPED=looped, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64), target="cuda:90a", num_warps=8,
                         num_stages=2)
    ptx = _ptx(ck, tmp_path)
    assert len(re.findall(r"wgmma\.mma_async", ptx)) == 8 and "mma.sync" not in ptx
    ring = 2 * 2 * 16 * 1024
    shared = int(ck.metadata["shared"])
    assert (2 * ring <= shared) if looped else (ring <= shared < ring + 1024), shared


def _skip_without_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
def test_residual_epilogue_on_gpu():
    _skip_without_cuda()
    m, n, k = 300, 260, 200
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(m, k, generator=g).half().cuda(), torch.randn(k, n, generator=g).half().cuda())
    r = torch.randn(m, n, generator=g).cuda()
    c = torch.empty(m, n, device="cuda")
    _matmul_plus_residual[(tessera.cdiv(m, 128), tessera.cdiv(n, 128), 1)](a, b, r, c, m, n, k, BLOCK_M=128,
                                                                         BLOCK_N=128, BLOCK_K=64, num_warps=8,
                                                                         num_stages=3)
    want = a.double() @ b.double() + r.double()
    assert (c.double() - want).abs().max().item() < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("looped", [False, True])
def test_branches_sharing_shared_memory_on_gpu(looped):
    _skip_without_cuda()
    m, n, k = 300, 128, 200
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(m, k, generator=g).half().cuda(), torch.randn(max(m, k), n, generator=g).half().cuda()
    c, d = torch.empty(m, n, device="cuda"), torch.empty(k, n, device="cuda")
    grid = (tessera.cdiv(m, 128) + tessera.cdiv(k, 128), 1, 1)
    _one_of_two_products[grid](a, b, c, d, m, n, k, LOOPED=looped, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                               num_warps=8, num_stages=2)
    assert (c.double() - a.double() @ b[:k].double()).abs().max().item() < 1e-2
    assert (d.double() - a.double().t() @ b[:m].double()).abs().max().item() < 1e-2
