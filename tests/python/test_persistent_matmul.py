"""bench/gpu_kernels.py's persistent matmul (grid smaller than the number of output tiles, each program
looping over tiles): on the CPU against numpy, compiled for sm_90a to TMA-filled wgmma
rings that ptxas assembles (no GPU needed), and on a GPU against float64 with rings of
2-4 stages whose K loops run a number of iterations that is not a multiple of the
stages (each tile's ring restarts its mbarrier phases). Outputs start as NaN."""
import os
import shutil
import sys

import numpy as np
import pytest

import tessera
from cpu_helpers import poisoned

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import gpu_kernels  # noqa: E402  (the benchmark's kernels: the same source runs in Triton there)

persistent_matmul = gpu_kernels.persistent_matmul_kernel.fn  # undecorated: a fresh kernel per test

PTXAS = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"


def launch(kernel, a, b, c, programs, **meta):
    M, K = a.shape
    N = b.shape[1]
    st = (lambda t, d: t.stride(d)) if hasattr(a, "stride") and callable(a.stride) else \
         (lambda t, d: t.strides[d] // t.itemsize)
    return kernel[(programs,)](a, b, c, M, N, K, st(a, 0), st(a, 1), st(b, 0), st(b, 1), st(c, 0), st(c, 1), **meta)


@pytest.mark.parametrize("M, N, K, programs", [(70, 50, 40, 3), (64, 64, 64, 16), (33, 97, 17, 1)])
def test_persistent_matmul_on_cpu(M, N, K, programs):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = poisoned((M, N), np.float32)
    launch(tessera.jit(persistent_matmul), a, b, c, programs, BM=16, BN=32, BK=16, GROUP_M=2)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_persistent_matmul_compiles_to_tma_wgmma_rings(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_TMA", "1")
    sig = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp16:16", "M": "i32", "N": "i32", "K": "i32",
           "s_am": "i32:16", "s_bk": "i32:16", "s_cm": "i32:16"}
    ck = tessera.compile(tessera.jit(persistent_matmul), sig,
                         {"s_ak": 1, "s_bn": 1, "s_cn": 1, "BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8},
                         target="cuda:90a", num_warps=8, num_stages=4)
    ptx = ck.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    assert "mma.sync" not in ptx
    if not shutil.which(PTXAS):
        pytest.skip("ptxas not installed")
    import subprocess
    (tmp_path / "k.ptx").write_text(ptx)
    r = subprocess.run([PTXAS, "-arch=sm_90a", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("tma", ["1", "0"])
@pytest.mark.parametrize("M, N, K, BM, BN, BK, num_warps, num_stages, programs", [
    (1000, 700, 333, 128, 128, 64, 8, 4, 7),     # 6 K steps per tile with 4 stages; M/N/K edges
    (512, 1024, 320, 128, 256, 64, 8, 3, 5),     # 5 K steps with 3 stages, m64n256
    (256, 256, 96, 64, 64, 32, 4, 2, 3),         # 3 K steps with 2 stages
])
def test_persistent_matmul_on_gpu(monkeypatch, tma, M, N, K, BM, BN, BK, num_warps, num_stages, programs):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setenv("TESSERA_TMA", tma)
    g = torch.Generator(device="cuda").manual_seed(1)
    # Row strides padded to 16 elements (the TMA's rule) so odd extents keep the TMA path.
    a = torch.randn(M, -(-K // 16) * 16, device="cuda", generator=g).half()[:, :K]
    b = torch.randn(K, -(-N // 16) * 16, device="cuda", generator=g).half()[:, :N]
    kernel = tessera.jit(persistent_matmul)
    for _ in range(2):                            # a second launch reuses the module
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        launch(kernel, a, b, c, programs, BM=BM, BN=BN, BK=BK, GROUP_M=4, num_warps=num_warps,
               num_stages=num_stages)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any(), "unwritten (NaN) outputs"
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4 * K ** 0.5)
