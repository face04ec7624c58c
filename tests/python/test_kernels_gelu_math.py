"""The GELU math of kernels/activation.py against float64: _normal_tail (Phi(-|x|), one
polynomial and one exp2), the erf-form forward and gradient built on it (bias_gelu,
gelu_dropout, geglu and the matmul epilogue), and the tanh form's gradient through one
exp2 and one division (the GPU's TANH_VIA_EXP). Dense x over [-12, 12] and the edges
(signed zeros, the clamp at |x| = 6, tiny values), on the CPU, the interpreter and (marked
gpu) a GPU, with NaN-poisoned outputs."""
import math

import pytest

import tessera
import tessera.language as tl
from tessera.kernels import activation as A

torch = pytest.importorskip("torch")

K = math.sqrt(2.0 / math.pi)


def _xs():
    return torch.cat([torch.linspace(-12, 12, 120_000),
                      torch.tensor([0.0, -0.0, 6.0, -6.0, 5.999, -6.001, 1e-30, -1e-30, 1e-3, -1e-3])])


@tessera.kernel
def _tail_of(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, A._normal_tail(tl.load(x + offs, mask=offs < n)), mask=offs < n)


def _tail_error(device):
    x = _xs()
    out = torch.full_like(x, float("nan"), device=device)
    _tail_of[(tessera.cdiv(x.numel(), 1024),)](x.to(device), out, x.numel(), BLOCK=1024)
    want = 0.5 * torch.special.erfc(x.double().abs() / math.sqrt(2.0))
    return (out.cpu().double() - want).abs().max().item()


def test_normal_tail_accuracy(monkeypatch):
    # The fit is within 2^-23.6 of Phi(-|x|) (absolute) with an exact exp2 and f32 FMAs.
    assert _tail_error("cpu") < 2 ** -23.3
    monkeypatch.setenv("TESSERA_INTERPRET", "1")
    assert _tail_error("cpu") < 2 ** -23.3


def _erf_gelu_grad_f64(x):
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2.0))
    return x * cdf, cdf + x * pdf


def _tanh_gelu_grad_f64(x):
    t = torch.tanh(K * (x + 0.044715 * x ** 3))
    return 0.5 * x * (1 + t), 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K * (1 + 3 * 0.044715 * x * x)


def _op_errors(device, approximate="none"):
    """bias_gelu's forward and gradient in f32 against float64, as |error| / max(1, |x|)."""
    import tessera.kernels as tk
    x = _xs().reshape(-1, 10).to(device).requires_grad_(True)
    bias = torch.zeros(10, device=device)
    y = tk.bias_gelu(x, bias, approximate=approximate)
    y.backward(torch.ones_like(y))
    xd = x.detach().cpu().double()
    f, g = (_erf_gelu_grad_f64 if approximate == "none" else _tanh_gelu_grad_f64)(xd)
    scale = xd.abs().clamp(min=1)
    return (((y.detach().cpu().double() - f).abs() / scale).max().item(),
            ((x.grad.cpu().double() - g).abs() / scale).max().item())


def test_erf_gelu_forward_and_gradient_f32():
    # f32 rounding of 1 - Phi and of x Phi, plus the fit: a few f32 ulp of max(1, |x|).
    fwd, grad = _op_errors("cpu")
    assert fwd < 1.6e-7  # (1.1e-7 measured)
    assert grad < 2.4e-7  # (1.4e-7)


def test_gelu_dropout_keeps_gelu_accuracy():
    # p = 0.5 with seed 1: kept elements are 2 gelu(x) (same error bound doubled), the rest
    # 0; the mask depends only on the seed and the position (read off an input of ones).
    import tessera.kernels as tk
    x = _xs()[:-10].reshape(-1, 8)
    y = tk.gelu_dropout(x, p=0.5, seed=1).double()
    kept = tk.gelu_dropout(torch.ones_like(x), p=0.5, seed=1) != 0
    assert (y[~kept] == 0).all()
    want = 2 * _erf_gelu_grad_f64(x.double())[0]
    assert 0.4 < kept.double().mean().item() < 0.6
    assert ((y - want).abs() / x.double().abs().clamp(min=1))[kept].max().item() < 5e-7


@tessera.kernel
def _tanh_grad_of(x, out, n, BLOCK: tl.constexpr):
    # The bias-gradient kernel's row step with TANH_VIA_EXP: dy = 1, no bias, no dropout.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    A._bias_act_row_grad(out, 0, n, offs, 0, 0, mask, tl.load(x + offs, mask=mask), tl.full((BLOCK,), 1.0, tl.float32),
                         0.0, 0.0, 0, 0, TANH=True, DROPOUT=False, ACC=tl.float32, TANH_VIA_EXP=True)


def _tanh_grad_error(device):
    x = _xs()
    out = torch.full_like(x, float("nan"), device=device)
    _tanh_grad_of[(tessera.cdiv(x.numel(), 1024),)](x.to(device), out, x.numel(), BLOCK=1024)
    want = _tanh_gelu_grad_f64(x.double())[1]
    return ((out.cpu().double() - want).abs() / x.double().abs().clamp(min=1)).max().item()


def test_tanh_gelu_gradient_through_exp2():
    # One exp2 and a division for s = 1 / (1 + e^-2u): within ~5 f32 ulp of max(1, |x|).
    assert _tanh_grad_error("cpu") < 6e-7  # (4.0e-7 measured)


@pytest.mark.gpu
def test_gelu_math_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    assert _tail_error("cuda") < 2 ** -22  # ex2.approx: 2 ulp relative
    fwd, grad = _op_errors("cuda")
    assert fwd < 5e-7 and grad < 6e-7
    fwd, grad = _op_errors("cuda", "tanh")
    assert fwd < 2e-6 and grad < 2e-6
    assert _tanh_grad_error("cuda") < 2e-6
