"""The maxnreg launch option (Triton's): a GPU kernel's registers a thread at most, as
PTX .maxnreg, part of the specialization key; accepted and without effect on the CPU."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble_if_available  # noqa: E402



@tessera.kernel
def _row_scale(X, Y, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(X + tl.program_id(0) * n + cols, mask=m, other=0.0)
    tl.store(Y + tl.program_id(0) * n + cols, x * (1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + 1e-6)), mask=m)


def _ptx(**options):
    return tessera.compile(_row_scale, "*fp32:16,*fp32:16,i32", {"BLOCK": 4096}, target="cuda:90a", num_warps=4,
                           **options).asm["ptx"]


def test_maxnreg_is_the_ptx_directive(tmp_path):
    assert ".maxnreg" not in _ptx()
    ptx = _ptx(maxnreg=40)
    assert re.search(r"\.maxnreg 40\b", ptx)
    # ptxas keeps to it (the kernel wants more: 32 row elements a thread)
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None:
        assert int(re.search(r"Used (\d+) registers", err).group(1)) <= 40


def test_maxnreg_on_the_cpu_runs_the_same_kernel():
    x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
    want = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6)
    for opts in ({}, {"maxnreg": 64}, {"maxnreg": 64}, {"maxnreg": None}):  # twice: the cached launch
        y = np.zeros_like(x)
        _row_scale[(3,)](x, y, 100, BLOCK=128, **opts)
        np.testing.assert_allclose(y, want, rtol=1e-5)


@pytest.mark.parametrize("bad", [0, 8, 256, -8, 64.0, "64", True])
def test_maxnreg_out_of_range_names_the_kernel(bad):
    x = np.zeros((1, 8), np.float32)
    with pytest.raises(ValueError, match="kernel _row_scale: maxnreg must be an integer from 16 to 255"):
        _row_scale[(1,)](x, np.zeros_like(x), 8, BLOCK=8, maxnreg=bad)


@pytest.mark.gpu
def test_gpu_maxnreg_launch_and_cached_launch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.randn(5, 4000, device="cuda")
    want = x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-6)
    cks = []
    for opts in ({"maxnreg": 40}, {"maxnreg": 40}, {}, {"maxnreg": 64}):
        y = torch.empty_like(x)
        cks.append(_row_scale[(5,)](x, y, 4000, BLOCK=4096, num_warps=4, **opts))
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    assert cks[0] is cks[1]  # the second launch found the first one's specialization
    assert ".maxnreg 40" in cks[0].asm["ptx"] and ".maxnreg" not in cks[2].asm["ptx"]
    assert ".maxnreg 64" in cks[3].asm["ptx"]


# --- The driver reports what it loaded (CompiledKernel.n_regs).

@tessera.jit
def _double_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)


_DOUBLE_SIG = {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16"}


@pytest.mark.gpu
def test_maxnreg_caps_the_loaded_kernels_registers():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.arange(128, device="cuda", dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    ck = _double_kernel[(1,)](x, y, BLOCK=128, maxnreg=24)
    torch.cuda.synchronize()
    assert torch.equal(y, 2 * x) and 0 < ck.n_regs <= 24
