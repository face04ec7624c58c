"""cross_entropy's fast forward (kernels/softmax_ce.py _cross_entropy_fast): bound
launches under a plan keyed by the tensors' layouts, for torch CUDA tensors. Its calls
give the general path's bits (on the CPU through _fast_ce_plan(cpu=True), on a GPU through
tk.cross_entropy), write every output into poisoned arrays, keep no gradient-free
call's result in the scratch it reuses, and leave every layout it does not take to the
general path, which reports the errors."""
import importlib

import pytest

import tessera.kernels as tk

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

S = importlib.import_module("tessera.kernels.softmax_ce")

# (rows, classes): rows held whole, and rows sliced (over CE_ONE_CHUNK), aligned or not.
SHAPES = [(1, 17), (37, 4097), (5, 32000), (3, 50257)]


def _case(rows, n, device="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + rows * 7 + n)
    x = torch.randn(rows, n, generator=g) * 3
    t = torch.randint(0, n, (rows,), generator=g)
    t[1::4] = -100
    return x.to(device, dtype), t.to(device)


def _general(x, t, smoothing, reduction):
    S._CE_PLANS.clear()  # (the general plan is made afresh: nothing shared with the fast one)
    return S.cross_entropy_forward(x, t, -100, smoothing, reduction)


def _same(got, want):
    (o1, s1, l1), (o2, s2, l2) = got, want
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
    assert (s1 is None) == (s2 is None)
    if s1 is not None:
        assert torch.equal(s1[:1], s2[:1])  # (element 0: the backward's factor)


@pytest.mark.parametrize("rows,n", SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_fast_forward_gives_the_general_paths_bits(rows, n, reduction, smoothing):
    x, t = _case(rows, n)
    want = _general(x, t, smoothing, reduction)
    fast = S._fast_ce_plan(x, t, -100, smoothing, reduction, cpu=True)
    assert fast is not S._NOT_FAST
    for keep in (True, False):
        _same(fast(x, t, keep), want)


def test_fast_forward_writes_every_output(monkeypatch):
    # Poisoned allocators: an element no program wrote would stay NaN.
    for rows, n in SHAPES:
        x, t = _case(rows, n, seed=3)
        for reduction in ("mean", "none"):
            want = _general(x, t, 0.1, reduction)
            plan = S._ce_plan(x, t, 0.1, reduction)
            for name in ("new_work", "new_lse", "new_out", "new_part"):
                make = getattr(plan, name, None)  # (new_work: sliced rows only)
                if make is not None:
                    monkeypatch.setattr(plan, name, lambda make=make: make().fill_(float("nan")))
            monkeypatch.setattr(S, "_ce_plan", lambda *a, plan=plan, **k: plan)
            fast = S._fast_ce_plan(x, t, -100, 0.1, reduction, cpu=True)
            monkeypatch.undo()
            for keep in (True, False):
                got = fast(x, t, keep)
                assert not torch.isnan(got[2]).any()
                _same(got, want)


def test_gradient_free_calls_do_not_share_their_results():
    x, t = _case(5, 32000)
    fast = S._fast_ce_plan(x, t, -100, 0.0, "mean", cpu=True)
    first = fast(x, t, False)[0]
    kept = first.clone()
    second = fast(x * 2, t, False)[0]
    assert first is not second and torch.equal(first, kept) and not torch.equal(first, second)
    # Calls that keep (autograd's) get their own lse and scale every time.
    a, b = fast(x, t, True), fast(x, t, True)
    assert a[1] is not b[1] and a[2] is not b[2]


def test_layouts_the_fast_forward_leaves_to_the_general_path():
    x, t = _case(4, 100)
    assert S._fast_ce_plan(x, t, -100, 0.0, "mean") is S._NOT_FAST  # CPU tensors: the general path checks targets
    assert S._fast_ce_plan(x.t(), t, -100, 0.0, "mean", cpu=True) is S._NOT_FAST  # (100, 4): the wrong target length
    assert S._fast_ce_plan(x[:, ::2], t, -100, 0.0, "mean", cpu=True) is S._NOT_FAST  # columns not unit-strided
    assert S._fast_ce_plan(x, t.float(), -100, 0.0, "mean", cpu=True) is S._NOT_FAST  # float targets
    assert S._fast_ce_plan(x, t[None], -100, 0.0, "mean", cpu=True) is S._NOT_FAST  # 2-D targets
    assert S._fast_ce_plan(x[None], t, -100, 0.0, "mean", cpu=True) is S._NOT_FAST  # 3-D logits
    assert S._fast_ce_plan(x, t, -100, 0.0, "avg", cpu=True) is S._NOT_FAST  # an unknown reduction
    assert S._cross_entropy_fast(x.numpy(), t.numpy(), -100, 0.0, "mean", False) is None  # not torch
    # ... and the general path reports them as before.
    with pytest.raises(TypeError, match="target has dtype"):
        tk.cross_entropy(x, t.float())
    with pytest.raises(ValueError, match="reduction must be"):
        tk.cross_entropy(x, t, reduction="avg")


# ------------------------------------------------------------------------------ GPU

def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
@pytest.mark.parametrize("rows,n", SHAPES + [(2048, 50257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fast_forward_on_the_gpu(rows, n, dtype):
    # tk.cross_entropy on CUDA tensors takes the fast path: the general path's bits,
    # near torch in fp64, and gradients through the autograd path's fast forward.
    _gpu()
    x, t = _case(rows, n, "cuda", dtype)
    for reduction in ("mean", "none"):
        for smoothing in (0.0, 0.1):
            S._CE_PLANS.clear()
            got = tk.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
            fast = [v for k, v in S._CE_PLANS.items() if isinstance(k, tuple) and k[:1] == ("fast",)]
            assert len(fast) == 1 and fast[0] is not S._NOT_FAST
            want = S.cross_entropy_forward(x, t, -100, smoothing, reduction)[0]
            assert torch.equal(got, want.to(dtype)), (reduction, smoothing)
            ref = F.cross_entropy(x.double(), t, reduction=reduction, label_smoothing=smoothing)
            tol = 2e-5 if dtype == torch.float32 else 2e-3
            torch.testing.assert_close(got.double(), ref.to(dtype).double(), rtol=tol, atol=tol)
    xg = x.detach().clone().requires_grad_(True)
    xr = x.detach().double().requires_grad_(True)
    tk.cross_entropy(xg, t, label_smoothing=0.1).backward()
    F.cross_entropy(xr, t, label_smoothing=0.1).backward()
    torch.testing.assert_close(xg.grad.double(), xr.grad, rtol=2e-3 if dtype == torch.float16 else 1e-4,
                               atol=1e-6)
    torch.cuda.synchronize()
