"""tessera.kernels' per-layout launch plans (kernels/_host.py Plans): a call reuses the
checks and launch arithmetic of an earlier call with the same layouts only; a new
shape, stride, dtype or array library gets its own plan, bad input fails on every
call, and results match the reference whichever plan ran."""
import numpy as np
import pytest

import tessera.kernels as tk
from tessera.kernels import _host as H

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402


def _ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def test_same_shape_different_strides_get_their_own_plans():
    # A (64, 48) contiguous input, then a transposed view of the same shape: the second
    # call must not reuse the first's "pass x as is" plan.
    w, b = torch.randn(48), torch.randn(48)
    a = torch.randn(64, 48)
    t = torch.randn(48, 64).t()
    assert a.shape == t.shape and a.stride() != t.stride()
    for x in (a, t, a, t):
        torch.testing.assert_close(tk.layer_norm(x, w, b), _ln(x, w, b), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(tk.softmax(x, dim=-1), torch.softmax(x, -1))
        torch.testing.assert_close(tk.softmax(x, dim=0), torch.softmax(x, 0))
        torch.testing.assert_close(tk.bias_gelu(x, b), F.gelu(x + b), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(tk.add_relu(x, a), F.relu(x + a))
        torch.testing.assert_close(tk.reduce_sum_squared(x, 0), (x * x).sum(0), rtol=1e-5, atol=1e-4)


def test_backward_plans_follow_the_gradient_layout():
    # The upstream gradient's layout is part of the backward plan's key: a contiguous
    # gradient, then a transposed one of the same shape.
    x = torch.randn(32, 40, dtype=torch.float64, requires_grad=True)
    w = torch.randn(40, dtype=torch.float64, requires_grad=True)
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    for g in (torch.randn(32, 40, dtype=torch.float64), torch.randn(40, 32, dtype=torch.float64).t()):
        for leaf in (x, w, xr, wr):
            leaf.grad = None
        tk.rms_norm(x, w).backward(g)
        F.rms_norm(xr, (40,), wr, 1e-6).backward(g)
        torch.testing.assert_close(x.grad, xr.grad)
        torch.testing.assert_close(w.grad, wr.grad)
        for leaf in (x, xr):
            leaf.grad = None
        tk.log_softmax(x).backward(g)
        torch.log_softmax(xr, -1).backward(g)
        torch.testing.assert_close(x.grad, xr.grad)


def test_dtype_and_library_changes_get_their_own_plans():
    x64 = torch.randn(16, 33, dtype=torch.float64)
    for x in (x64, x64.float(), x64.numpy(), x64.float().numpy(), x64):
        y = tk.softmax(x)
        want = torch.softmax(torch.as_tensor(x), -1)
        assert type(y) is type(x) and y.dtype == x.dtype
        np.testing.assert_allclose(np.asarray(y), want.numpy(), rtol=1e-5, atol=1e-6)


def test_bad_input_fails_on_every_call_not_only_the_first():
    x = torch.randn(8, 16)
    for _ in range(2):
        with pytest.raises(ValueError, match="layer_norm: weight has shape"):
            tk.layer_norm(x, torch.randn(15))
        with pytest.raises(TypeError, match="softmax: x has dtype int64"):
            tk.softmax(torch.ones(4, 4, dtype=torch.int64))
    # A good call in between does not let a bad one through afterwards.
    tk.layer_norm(x, torch.randn(16))
    with pytest.raises(ValueError, match="layer_norm: weight has shape"):
        tk.layer_norm(x, torch.randn(15))


def test_cross_entropy_targets_are_checked_on_every_cpu_call():
    logits = torch.randn(6, 10)
    good = torch.tensor([0, 1, 2, 3, 9, -100])
    torch.testing.assert_close(tk.cross_entropy(logits, good), F.cross_entropy(logits, good))
    # Same layout, values now out of range: the cached plan must not skip the check.
    with pytest.raises(IndexError, match="target values must be in"):
        tk.cross_entropy(logits, torch.tensor([0, 1, 2, 3, 10, -100]))
    with pytest.raises(IndexError, match="target values must be in"):
        tk.cross_entropy(logits, torch.tensor([0, 1, 2, 3, -1, 4]))


def test_plans_are_bounded():
    plans = H.Plans(limit=3)
    for i in range(10):
        plans.remember(i, str(i))
        assert len(plans) <= 3
    assert plans[9] == "9"


def test_many_shapes_stay_correct_past_the_plan_limit():
    # More distinct shapes than a plan cache holds: it is cleared and refilled.
    for n in range(1, 300, 1):
        x = torch.randn(2, n)
        torch.testing.assert_close(tk.softmax(x), torch.softmax(x, -1))


def test_layout_key():
    t = torch.zeros(3, 4)
    assert H.layout(t) == H.layout(torch.ones(3, 4))
    assert H.layout(t) != H.layout(t.t().contiguous().t())   # same shape, other strides
    assert H.layout(t) != H.layout(t.double())
    assert H.layout(t.numpy()) != H.layout(t)
    assert H.layout(None) is None
    assert H.layout([1.0, 2.0]) == (list, None)                # not an array: the op's checks raise
