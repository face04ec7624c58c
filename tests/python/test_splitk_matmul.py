"""bench/gpu_kernels.py's split-K matmul (each output tile's K steps shared by SPLIT_K
programs; the last to arrive sums the fp32 partials and resets the tile's counter):
on the CPU against numpy for step counts that SPLIT_K does not divide and for launches
that reuse the counters, compiled for sm_90a to TMA-filled wgmma rings plus one atomic
per program that ptxas assembles without spills, and on a GPU against float64. Outputs
start as NaN, so an unwritten tile shows."""
import os
import sys

import numpy as np
import pytest

import tessera
from cpu_helpers import poisoned
from ptxas_check import assemble

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpu_kernels  # noqa: E402  (the benchmark's kernels: the same source runs in Triton there)

splitk_matmul = gpu_kernels.splitk_matmul_kernel.fn  # undecorated: a fresh kernel per test



def launch(kernel, a, b, c, ws, count, BM, BN, split, **meta):
    M, K = a.shape
    N = b.shape[1]
    st = (lambda t, d: t.stride(d)) if hasattr(a, "stride") and callable(a.stride) else \
         (lambda t, d: t.strides[d] // t.itemsize)
    grid = (-(-M // BM) * -(-N // BN), split)
    return kernel[grid](a, b, c, ws, count, M, N, K, st(a, 0), st(a, 1), st(b, 0), st(b, 1), st(c, 0), st(c, 1),
                        BM=BM, BN=BN, SPLIT_K=split, **meta)


@pytest.mark.parametrize("M, N, K, BK, split", [
    (64, 128, 256, 16, 4),     # 16 K steps, 4 each
    (37, 200, 90, 16, 3),      # 6 steps in 3 splits; M, N and K edges
    (16, 64, 48, 16, 4),       # 3 steps in 4 splits: one split runs none (only zeros past K)
])
def test_splitk_matmul_on_cpu(M, N, K, BK, split):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    ws = np.empty((split, M, N), np.float32)
    count = np.zeros(-(-M // 16) * -(-N // 64), np.int32)
    kernel = tessera.jit(splitk_matmul)
    for _ in range(2):                            # the counters are back at zero for the second launch
        c = poisoned((M, N), np.float32)
        launch(kernel, a, b, c, ws, count, 16, 64, split, BK=BK, GROUP_M=2)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        assert not count.any(), "the last program of a tile did not reset its counter"


def test_splitk_matmul_compiles_to_tma_wgmma_rings(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_TMA", "1")
    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "ws_ptr": "*fp32:16",
           "count_ptr": "*i32:16", "M": "i32:16", "N": "i32:16", "K": "i32:16",
           "s_am": "i32:16", "s_bk": "i32:16", "s_cm": "i32:16"}
    ck = tessera.compile(tessera.jit(splitk_matmul), sig,
                         {"s_ak": 1, "s_bn": 1, "s_cn": 1, "BM": 64, "BN": 256, "BK": 64, "GROUP_M": 8,
                          "SPLIT_K": 4}, target="cuda:90a", num_warps=4, num_stages=4)
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    assert ptx.count("atom.global.add.u32") == 1   # one count per program, by one thread
    assert "fence.acq_rel.gpu" in ptx
    assert "ld.global.v4.f32" in ptx               # the partials are summed in 16-byte loads
    log = assemble(ptx, "90a", tmp_path, verbose=True)
    assert "0 bytes spill stores" in log, log


@pytest.mark.gpu
@pytest.mark.parametrize("tma", ["1", "0"])
@pytest.mark.parametrize("M, N, K, BM, BN, num_warps, split", [
    (64, 8192, 8192, 64, 256, 4, 4),     # the benchmark's shape
    (100, 1000, 1000, 128, 256, 8, 3),   # M, N and K edges; 16 K steps in 3 splits
    (16, 512, 320, 64, 128, 4, 8),       # 5 K steps in 8 splits: three run none
])
def test_splitk_matmul_on_gpu(monkeypatch, tma, M, N, K, BM, BN, num_warps, split):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setenv("TESSERA_TMA", tma)
    g = torch.Generator(device="cuda").manual_seed(1)
    # Row strides padded to 16 elements (the TMA's rule) so odd extents keep the TMA path.
    a = torch.randn(M, -(-K // 16) * 16, device="cuda", generator=g).half()[:, :K]
    b = torch.randn(K, -(-N // 16) * 16, device="cuda", generator=g).half()[:, :N]
    ws = torch.empty(split, M, N, device="cuda", dtype=torch.float32)
    count = torch.zeros(-(-M // BM) * -(-N // BN), device="cuda", dtype=torch.int32)
    kernel = tessera.jit(splitk_matmul)
    ref = a.double() @ b.double()
    for _ in range(3):                            # later launches rely on the counters' reset
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        launch(kernel, a, b, c, ws, count, BM, BN, split, BK=64, GROUP_M=8, num_warps=num_warps, num_stages=4)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any(), "unwritten (NaN) outputs"
        err = ((c.double() - ref).norm() / ref.norm()).item()
        assert err < 2e-3, err
        assert not count.any().item(), "a tile's counter was not reset"
