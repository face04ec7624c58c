"""FMA contraction on the GPU (compiler/codegen/nvptx/gpu_lowering.cpp): with
TESSERA_GPU_FP_FUSION=1 the kernel's own float a * b + c becomes one fma.rn (Triton's
enable_fp_fusion default); by default (and with 0) mul.rn + add.rn stay separately rounded;
fp16 (rounded after every op) never contracts, and the CPU never does. Checked in the PTX without a GPU, and on a GPU against the exactly rounded FMA."""
import numpy as np
import pytest

import tessera
import tessera.language as tl


def axpy(a_ptr, b_ptr, c_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m)
    y = a * tl.load(b_ptr + offs, mask=m) + tl.load(c_ptr + offs, mask=m)
    tl.store(y_ptr + offs, y, mask=m)


# (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (a tie, to even) to 1 + 2^-11 in f32, so
# a * b + c is 2^-24 in one FMA and 0 when the product is rounded first.
ABC = (1 + 2.0 ** -12, 1 + 2.0 ** -12, -(1 + 2.0 ** -11))


def _ptx(monkeypatch, dtype, fusion):
    if fusion is None:
        monkeypatch.delenv("TESSERA_GPU_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TESSERA_GPU_FP_FUSION", fusion)
    sig = {n: f"*{dtype}:16" for n in ("a_ptr", "b_ptr", "c_ptr", "y_ptr")} | {"n": "i32"}
    return tessera.compile(tessera.jit(axpy), sig, {"BLOCK": 128}, target="cuda:90a").asm["ptx"]


def test_fp32_multiply_add_contracts_with_fusion_on(monkeypatch):
    ptx = _ptx(monkeypatch, "fp32", "1")
    assert "fma.rn.f32" in ptx and "mul.rn.f32" not in ptx and "add.rn.f32" not in ptx


@pytest.mark.parametrize("fusion", [None, "0"])
def test_by_default_and_off_operations_stay_separately_rounded(monkeypatch, fusion):
    ptx = _ptx(monkeypatch, "fp32", fusion)
    assert "fma.rn.f32" not in ptx and "mul.rn.f32" in ptx and "add.rn.f32" in ptx


def test_fp16_rounds_after_every_op_and_never_contracts(monkeypatch):
    ptx = _ptx(monkeypatch, "fp16", "1")
    assert "fma.rn" not in ptx


def test_the_cpu_never_contracts():
    a, b, c = (np.full(256, v, np.float32) for v in ABC)
    y = np.empty(256, np.float32)
    tessera.jit(axpy)[(2,)](a, b, c, y, 256, BLOCK=128)
    np.testing.assert_array_equal(y, a * b + c)             # the product rounded first: exactly 0 here
    assert (y == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("fusion", ["1", "0"])
def test_gpu_results_match_the_chosen_rounding(monkeypatch, fusion):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setenv("TESSERA_GPU_FP_FUSION", fusion)
    a, b, c = (torch.full((256,), v, device="cuda") for v in ABC)
    y = torch.full((256,), float("nan"), device="cuda")
    tessera.jit(axpy)[(2,)](a, b, c, y, 256, BLOCK=128)
    torch.cuda.synchronize()
    want = 2.0 ** -24 if fusion == "1" else 0.0
    assert (y == want).all(), y[:4]
