"""tessera.kernels behaviour beyond the numbers: dropout masks reproducible from a seed
and shared by forward and backward, non-contiguous inputs, a large vocabulary in
cross_entropy, numpy-only use, and clear errors for bad input."""
import math

import numpy as np
import pytest

import tessera
import tessera.kernels as tk
import tessera.language as tl

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402


# --------------------------------------------------------------------------- dropout

@pytest.mark.parametrize("op", ["softmax", "gelu_dropout"])
def test_dropout_is_reproducible_from_the_seed(op):
    x = torch.randn(64, 97)
    run = (lambda s: tk.softmax(x, dropout_p=0.3, seed=s)) if op == "softmax" else \
        (lambda s: tk.gelu_dropout(x, 0.3, seed=s))
    a, b, c = run(11), run(11), run(12)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    dropped = (a == 0).double().mean().item()
    assert 0.26 < dropped < 0.34, dropped  # 6208 draws: p = 0.3 within a few sigma


@tessera.kernel
def _philox_words(out, seed, n):
    c = tl.program_id(0) * 64 + tl.arange(0, 64)
    r0, r1, r2, r3 = tl.randint4x(seed, c)
    for k, r in ((0, r0), (1, r1), (2, r2), (3, r3)):
        tl.store(out + 4 * c + k, r, mask=c < n)


@pytest.mark.parametrize("p", [1e-6, 0.3, 0.99999])
def test_dropout_mask_is_the_documented_draw(p):
    # kernels/activation.py's docstring: column col of row r is kept when 16-bit half
    # col % 2 of word (col % 8) // 2 of Philox call r * ceil(n / 8) + col // 8 is >=
    # ceil(p * 2^16) (at most 65535), for both ops (an all-ones input keeps gelu(1) and
    # softmax 1/n nonzero exactly where the mask keeps).
    rows, n, seed = 5, 37, 1234
    groups = -(-n // 8)
    words = np.zeros((rows * groups, 4), np.uint32)
    _philox_words[(tessera.cdiv(rows * groups, 64),)](words, seed, rows * groups)
    col = np.arange(n)
    word = words[(np.arange(rows)[:, None] * groups + col // 8), (col % 8) // 2]
    half = (word >> (16 * (col % 2)).astype(np.uint32)) & 0xFFFF
    want = half >= min(math.ceil(p * 65536), 65535)
    x = torch.ones(rows, n)
    assert np.array_equal((tk.gelu_dropout(x, p, seed=seed) != 0).numpy(), want)
    assert np.array_equal((tk.softmax(x, dropout_p=p, seed=seed) != 0).numpy(), want)


def test_softmax_dropout_values_and_backward_mask():
    x = torch.randn(33, 50, dtype=torch.float64, requires_grad=True)
    p = 0.25
    y = tk.softmax(x, dropout_p=p, seed=3)
    keep = y != 0
    s = torch.softmax(x.detach(), -1)
    torch.testing.assert_close(y.detach(), torch.where(keep, s / (1 - p), torch.zeros_like(s)))
    g = torch.randn_like(y)
    y.backward(g)
    # Reference: the same mask as a constant, through torch.autograd.
    xr = x.detach().clone().requires_grad_(True)
    yr = torch.where(keep, torch.softmax(xr, -1) / (1 - p), torch.zeros_like(s))
    yr.backward(g)
    torch.testing.assert_close(x.grad, xr.grad)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_dropout_backward_uses_the_forward_mask(approximate):
    x = torch.randn(17, 129, dtype=torch.float64, requires_grad=True)
    b = torch.randn(129, dtype=torch.float64, requires_grad=True)
    p = 0.4
    y = tk.gelu_dropout(x, p, seed=7, bias=b, approximate=approximate)
    keep = y != 0
    g = torch.randn_like(y)
    y.backward(g)
    xr, br = x.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    yr = torch.where(keep, F.gelu(xr + br, approximate=approximate) / (1 - p), torch.zeros_like(y))
    yr.backward(g)
    torch.testing.assert_close(y.detach(), yr.detach())
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(b.grad, br.grad)


def test_dropout_gradcheck_float64():
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: tk.softmax(t, dropout_p=0.5, seed=1), (x,))
    assert torch.autograd.gradcheck(lambda t: tk.gelu_dropout(t, 0.5, seed=1), (x,))


def test_dropout_p_out_of_range():
    with pytest.raises(ValueError, match="dropout_p"):
        tk.softmax(np.ones((2, 3), np.float32), dropout_p=1.0)
    with pytest.raises(ValueError, match="gelu_dropout"):
        tk.gelu_dropout(np.ones((2, 3), np.float32), p=-0.1)


# --------------------------------------------------------------------------- layouts

def test_non_contiguous_inputs():
    base = torch.randn(40, 66, dtype=torch.float64)
    xt = base.t()[:33]             # transposed and sliced: (33, 40), column stride 66
    w, b = torch.randn(40, dtype=torch.float64), torch.randn(40, dtype=torch.float64)
    torch.testing.assert_close(tk.layer_norm(xt, w, b), F.layer_norm(xt, (40,), w, b))
    xs = base[::2, ::3]            # strided rows and columns
    torch.testing.assert_close(tk.softmax(xs), torch.softmax(xs, -1))
    torch.testing.assert_close(tk.reduce_sum_squared(xs, 0), (xs * xs).sum(0))
    torch.testing.assert_close(tk.reduce_mean_abs(base.t(), 1), base.t().abs().mean(1))
    gate, up = base.chunk(2, dim=-1)  # row stride 66, 33 columns each
    torch.testing.assert_close(tk.swiglu(gate, up), F.silu(gate) * up)
    wt = torch.randn(20, 30, dtype=torch.float64).t()  # a (30, 20) weight, transposed in memory
    torch.testing.assert_close(tk.linear_relu(base[:, :20], wt), F.relu(base[:, :20] @ wt.t()))
    xn = np.asfortranarray(base.numpy())
    np.testing.assert_allclose(tk.rms_norm(xn), F.rms_norm(base, (66,), eps=1e-6).numpy(), rtol=1e-12, atol=1e-12)


def test_any_leading_dims_and_empty():
    x = torch.randn(2, 3, 4, 21)
    torch.testing.assert_close(tk.rms_norm(x), F.rms_norm(x, (21,), eps=1e-6))
    e = torch.empty(0, 21)
    assert tk.layer_norm(e).shape == (0, 21)
    assert tk.softmax(e).shape == (0, 21)


def test_reduce_any_dim_numpy():
    x = np.random.default_rng(0).standard_normal((3, 4, 5, 6)).astype(np.float32)
    for dim in range(-4, 4):
        np.testing.assert_allclose(tk.reduce_sum_squared(x, dim), (x.astype(np.float64) ** 2).sum(dim), rtol=1e-5)
        np.testing.assert_allclose(tk.reduce_mean_abs(x, dim, keepdim=True),
                                   np.abs(x.astype(np.float64)).mean(dim, keepdims=True), rtol=1e-5)


# --------------------------------------------------------------------------- cross entropy

def test_cross_entropy_large_vocabulary_chunked():
    """50257 classes: the forward's 13 slices (merged by their maxima), the backward's
    2048-wide chunks; logits far from 0 check that the maxima keep exp() in range."""
    logits = (torch.randn(3, 50257, dtype=torch.float32) * 4 + 200).requires_grad_(True)
    t = torch.tensor([0, 50256, 12345])
    loss = tk.cross_entropy(logits, t)
    ref_logits = logits.detach().double().requires_grad_(True)
    ref = F.cross_entropy(ref_logits, t)
    assert abs(loss.item() - ref.item()) < 1e-4 * max(1.0, abs(ref.item()))
    loss.backward()
    ref.backward()
    torch.testing.assert_close(logits.grad.double(), ref_logits.grad, atol=1e-7, rtol=1e-4)


def _check_cross_entropy_nan_row(n, device):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, n, generator=gen)
    t = torch.tensor([1, 2, 3, 4])
    x[1, 5] = float("nan")
    x[2, n - 1] = float("nan")
    got = tk.cross_entropy(x.to(device), t.to(device), reduction="none").cpu()
    want = F.cross_entropy(x, t, reduction="none")
    assert torch.isnan(got[1]) and torch.isnan(got[2])
    torch.testing.assert_close(got[[0, 3]], want[[0, 3]], rtol=1e-5, atol=1e-5)
    assert torch.isnan(tk.cross_entropy(x.to(device), t.to(device)).cpu())  # the mean over rows


@pytest.mark.parametrize("n", [37, 9000], ids=["one_chunk", "sliced"])
def test_cross_entropy_nan_logit_gives_a_nan_row(n):
    # The clamped exp of the forward kernels (softmax_ce._exp_of_difference) must not
    # turn a NaN into e^-87, and the chunked walk must not skip a lane whose first
    # value is NaN: that row's loss is NaN, the others are unchanged, as torch's.
    _check_cross_entropy_nan_row(n, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("n", [37, 9000], ids=["one_chunk", "sliced"])
def test_cross_entropy_nan_logit_gives_a_nan_row_on_the_gpu(n):
    # On the GPU the clamp is max.NaN.f32 and the exp ex2.approx.ftz (both keep NaN).
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check_cross_entropy_nan_row(n, "cuda")


def _check_out_of_range_targets_give_nan(device, n):
    # Device targets are not copied to the host for a check: an out-of-range one must
    # give a NaN loss (and NaN gradients), never another column's logit.
    logits = torch.randn(4, n, device=device, requires_grad=True)
    target = torch.tensor([1, n, -100, -3], device=device)   # row 1 and 3 out of range, row 2 ignored
    loss = tk.cross_entropy(logits, target, reduction="none")
    assert torch.isnan(loss[[1, 3]]).all() and loss[2].item() == 0.0
    ref = F.cross_entropy(logits[:1].double(), target[:1])
    torch.testing.assert_close(loss[0].double(), ref, rtol=1e-5, atol=1e-5)  # an fp32 loss
    assert torch.isnan(tk.cross_entropy(logits, target)).item()
    loss.sum().backward()
    g = logits.grad
    assert torch.isnan(g[[1, 3]]).all() and (g[2] == 0).all() and torch.isfinite(g[0]).all()


@pytest.mark.parametrize("n", [37, 9000], ids=["one_chunk", "sliced"])
def test_cross_entropy_kernel_guards_out_of_range_targets(n, monkeypatch):
    # On the CPU the host check raises first (below); bypass it to test the kernel's guard.
    from tessera.kernels import softmax_ce
    monkeypatch.setattr(softmax_ce, "_check_targets", lambda logits, target, ignore_index, deferred=False: target)
    monkeypatch.setattr(softmax_ce, "_check_cpu_target_values", lambda target, n, ignore_index: None)
    _check_out_of_range_targets_give_nan("cpu", n)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [37, 9000], ids=["one_chunk", "sliced"])
def test_cross_entropy_out_of_range_device_targets_give_nan(n):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check_out_of_range_targets_give_nan("cuda", n)


def test_cross_entropy_bad_targets():
    with pytest.raises(IndexError, match="cross_entropy: target values"):
        tk.cross_entropy(torch.randn(2, 5), torch.tensor([0, 5]))
    # With a reduction a CPU target's values are checked after the launch when the loss
    # is NaN: every reduction and grad mode still raises; a NaN from the logits, or a
    # mean over ignored rows only, does not.
    for reduction in ("mean", "sum", "none"):
        for grad in (False, True):
            x = torch.randn(3, 5, requires_grad=grad)
            with pytest.raises(IndexError, match="cross_entropy: target values"):
                tk.cross_entropy(x, torch.tensor([0, -1, 2]), reduction=reduction, label_smoothing=0.1)
    x = torch.randn(3, 5)
    x[1, 2] = float("nan")
    assert torch.isnan(tk.cross_entropy(x, torch.tensor([0, 1, 2])))
    assert torch.isnan(tk.cross_entropy(x, torch.full((3,), -7), ignore_index=-7))
    assert tk.cross_entropy(x, torch.full((3,), -7), ignore_index=-7, reduction="sum").item() == 0.0
    with pytest.raises(TypeError, match="int64 or int32"):
        tk.cross_entropy(np.zeros((2, 5), np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="reduction"):
        tk.cross_entropy(np.zeros((2, 5), np.float32), np.zeros(2, np.int64), reduction="avg")


def test_add_relu_backward_gives_both_inputs_the_output_sign_gradient():
    # The backward reads the saved output (relu tests its output, as torch's does) and
    # returns one gradient for both inputs: the same input twice gets it twice, and an
    # input without requires_grad gets none.
    g = torch.Generator().manual_seed(5)
    a = torch.randn(5, 33, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 33, generator=g, dtype=torch.float64)
    dy = torch.randn(5, 33, generator=g, dtype=torch.float64)
    (da,) = torch.autograd.grad(tk.add_relu(a, b), a, dy)
    torch.testing.assert_close(da, torch.where(a.detach() + b > 0, dy, 0.0))
    (dx,) = torch.autograd.grad(tk.add_relu(a, a), a, dy)
    torch.testing.assert_close(dx, torch.where(a.detach() > 0, 2 * dy, 0.0))
    h = torch.tensor([[0.5, -1.0, 2.0, 0.0]], dtype=torch.float16, requires_grad=True)
    z = torch.tensor([[-0.5, 0.5, 1.0, 0.0]], dtype=torch.float16, requires_grad=True)
    y = tk.add_relu(h, z)
    got = torch.autograd.grad(y, (h, z), torch.ones_like(y))
    want = torch.autograd.grad(F.relu(h + z), (h, z), torch.ones_like(y))
    for gt, wt in zip(got, want):
        torch.testing.assert_close(gt, wt)


# --------------------------------------------------------------------------- errors

def test_errors_name_the_op():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="layer_norm: x has dtype int32"):
        tk.layer_norm(np.ones((4, 8), np.int32))
    with pytest.raises(ValueError, match=r"layer_norm: weight has shape \(7,\), expected \(8,\)"):
        tk.layer_norm(x, np.ones(7, np.float32))
    with pytest.raises(TypeError, match="rms_norm: weight has dtype float64 but x has float32"):
        tk.rms_norm(x, np.ones(8, np.float64))
    with pytest.raises(ValueError, match="add_relu: inputs have shapes"):
        tk.add_relu(x, np.ones((4, 9), np.float32))
    with pytest.raises(TypeError, match="swiglu: b is a Tensor but x is a ndarray"):
        tk.swiglu(x, torch.ones(4, 8))
    with pytest.raises(ValueError, match="bias_gelu: approximate"):
        tk.bias_gelu(x, np.ones(8, np.float32), approximate="fast")
    with pytest.raises(ValueError, match="linear_relu: weight must be"):
        tk.linear_relu(x, np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="rms_norm_rope: head_dim must be even"):
        tk.rms_norm_rope(np.ones((2, 3, 5), np.float32), None, np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="numpy array, a torch tensor or a CuPy array"):
        tk.softmax([1.0, 2.0])
    with pytest.raises(ValueError, match="dim 3 is out of range"):
        tk.reduce_sum_squared(x, 3)


def test_residual_norm_with_one_output_unused():
    x, r = torch.randn(4, 24, dtype=torch.float64, requires_grad=True), torch.randn(4, 24, dtype=torch.float64)
    w = torch.randn(24, dtype=torch.float64, requires_grad=True)
    y, h = tk.residual_add_rms_norm(x, r, w)
    y.sum().backward()  # h unused
    xr = x.detach().clone().requires_grad_(True)
    wr = w.detach().clone().requires_grad_(True)
    F.rms_norm(xr + r, (24,), wr, 1e-6).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
    x.grad = None
    y, h = tk.residual_add_layer_norm(x, r)
    (2 * h).sum().backward()  # y unused: the gradient goes straight through the addition
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
