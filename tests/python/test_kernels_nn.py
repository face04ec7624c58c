"""tk.nn modules are drop-in replacements for their torch counterparts: same
parameters and state_dict, same outputs and gradients."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import tessera.kernels as tk  # noqa: E402

PAIRS = [
    ("FusedLayerNorm", lambda: nn.LayerNorm(37), lambda: tk.nn.FusedLayerNorm(37), (5, 37)),
    ("FusedLayerNorm2d", lambda: nn.LayerNorm((3, 7)), lambda: tk.nn.FusedLayerNorm((3, 7)), (4, 3, 7)),
    ("FusedLayerNormReLU", lambda: nn.Sequential(nn.LayerNorm(37), nn.ReLU()),
     lambda: nn.Sequential(tk.nn.FusedLayerNorm(37, relu=True)), (5, 37)),
    ("FusedRMSNorm", lambda: nn.RMSNorm(37, eps=1e-6), lambda: tk.nn.FusedRMSNorm(37, eps=1e-6), (2, 5, 37)),
    ("FusedRMSNorm_default_eps", lambda: nn.RMSNorm(37), lambda: tk.nn.FusedRMSNorm(37), (5, 37)),
    ("FusedLinearReLU", lambda: nn.Sequential(nn.Linear(37, 19), nn.ReLU()),
     lambda: nn.Sequential(tk.nn.FusedLinearReLU(37, 19)), (2, 5, 37)),
    ("FusedLinearGELU", lambda: nn.Sequential(nn.Linear(37, 19), nn.GELU("tanh")),
     lambda: nn.Sequential(tk.nn.FusedLinearGELU(37, 19, approximate="tanh")), (5, 37)),
    ("FusedSoftmax", lambda: nn.Softmax(-1), lambda: tk.nn.FusedSoftmax(-1), (5, 37)),
    ("FusedLogSoftmax", lambda: nn.LogSoftmax(1), lambda: tk.nn.FusedLogSoftmax(1), (5, 37)),
    ("FusedGELUDropout_eval", lambda: nn.GELU(), lambda: tk.nn.FusedGELUDropout(0.5).eval(), (5, 37)),
    ("FusedSwiGLU", None, lambda: tk.nn.FusedSwiGLU(), (5, 38)),
    ("FusedGEGLU", None, lambda: tk.nn.FusedGEGLU(), (5, 38)),
]


class _GLU(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = act

    def forward(self, x):
        a, b = x.chunk(2, -1)
        return self.act(a) * b


@pytest.mark.parametrize("name,make_ref,make_tk,shape", PAIRS, ids=[p[0] for p in PAIRS])
def test_module_matches_torch(name, make_ref, make_tk, shape):
    torch.manual_seed(0)
    ref = make_ref() if make_ref else _GLU(nn.SiLU() if "Swi" in name else nn.GELU())
    mod = make_tk()
    mod.load_state_dict(ref.state_dict())  # same parameter names and shapes
    ref, mod = ref.double(), mod.double()
    for p in ref.parameters():  # non-trivial affine parameters
        p.data.normal_()
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    y, yr = mod(x), ref(xr)
    torch.testing.assert_close(y, yr)
    g = torch.randn_like(y)
    y.backward(g)
    yr.backward(g)
    torch.testing.assert_close(x.grad, xr.grad)
    for (n1, p1), (n2, p2) in zip(mod.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p1.grad, p2.grad, msg=f"grad of {n1}")


def test_residual_modules():
    torch.manual_seed(1)
    ln, rms = tk.nn.FusedResidualLayerNorm(24), tk.nn.FusedResidualRMSNorm(24, eps=1e-6)
    x, r = torch.randn(3, 24), torch.randn(3, 24)
    y, h = ln(x, r)
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y, nn.functional.layer_norm(x + r, (24,), ln.weight, ln.bias))
    y, h = rms(x, r)
    torch.testing.assert_close(y, nn.functional.rms_norm(x + r, (24,), rms.weight, 1e-6))


def test_cross_entropy_loss_module():
    torch.manual_seed(2)
    logits, t = torch.randn(6, 11, requires_grad=True), torch.randint(0, 11, (6,))
    for kw in ({}, {"reduction": "sum"}, {"label_smoothing": 0.2}, {"ignore_index": 3}):
        torch.testing.assert_close(tk.nn.FusedCrossEntropyLoss(**kw)(logits, t), nn.CrossEntropyLoss(**kw)(logits, t))
    img, ti = torch.randn(2, 5, 3, 4), torch.randint(0, 5, (2, 3, 4))  # (N, C, d1, d2) as torch
    torch.testing.assert_close(tk.nn.FusedCrossEntropyLoss()(img, ti), nn.CrossEntropyLoss()(img, ti))


def test_training_dropout_follows_torch_manual_seed():
    mod = tk.nn.FusedGELUDropout(0.3)
    x = torch.randn(8, 64)
    torch.manual_seed(5)
    a = mod(x)
    torch.manual_seed(5)
    b = mod(x)
    assert torch.equal(a, b)
    assert (a == 0).any()
    sm = tk.nn.FusedSoftmax(dropout_p=0.2)
    torch.manual_seed(6)
    assert (sm(x) == 0).any()
    assert not (sm.eval()(x) == 0).any()


def test_bf16_module():
    mod = tk.nn.FusedLayerNorm(64).to(torch.bfloat16)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    y = mod(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), nn.functional.layer_norm(x.float(), (64,)), atol=3e-2, rtol=3e-2)
