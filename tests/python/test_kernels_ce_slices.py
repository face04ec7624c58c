"""cross_entropy's sliced forward (kernels/softmax_ce.py: rows longer than CE_ONE_CHUNK
classes): a program per (row, slice) storing the slice's max and sum of exponentials,
then the merge launch (log-sum-exp, the target's logit, the loss reduction). Against
torch in fp64, bit-identical runs, every output and partial written (poisoned arrays),
the arrival counter back at zero; the same on a GPU (the `gpu` marker)."""
import importlib

import numpy as np
import pytest

import tessera.kernels as tk

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

H = importlib.import_module("tessera.kernels._host")
S = importlib.import_module("tessera.kernels.softmax_ce")


def _case(rows, n, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + rows + n)
    x = torch.randn(rows, n, generator=g) * 3
    t = torch.randint(0, n, (rows,), generator=g)
    t[1::5] = -100  # ignored rows: no loss, not counted by the mean
    if rows > 3:
        t[3] = n - 1  # the last column (the last, partial slice)
    return x.to(device, dtype), t.to(device)


def _counters_are_zero():
    return all(not np.asarray(c.cpu() if H.is_torch(c) else c).any() for c in H._ARRIVAL_COUNTERS.values())


def _check_against_torch(x, t, rtol, atol):
    xd, tc = x.double().cpu(), t.cpu()
    for reduction in ("mean", "sum", "none"):
        for smoothing in (0.0, 0.1):
            got = tk.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
            want = F.cross_entropy(xd, tc, reduction=reduction, label_smoothing=smoothing)
            assert got.dtype == x.dtype and got.shape == want.shape
            if x.dtype != torch.float32:  # the reference rounded as the result is
                want = want.to(x.dtype).double()
            torch.testing.assert_close(got.double().cpu(), want, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{reduction}, smoothing {smoothing}: {m}")


def _check_bits_repeat(x, t):
    for reduction in ("mean", "sum", "none"):
        runs = [tk.cross_entropy(x, t, reduction=reduction, label_smoothing=0.1) for _ in range(8)]
        assert all(torch.equal(r, runs[0]) for r in runs), reduction


def test_slicing_covers_the_row_and_the_rows():
    for rows in (1, 2, 31, 32, 33, 4096, 65537, 10 ** 6):
        for n in (8193, 32000, 50257, 256 * 4096, 256 * 4096 + 1, 3 * 10 ** 6):
            chunks, slices, step, group_rows, groups = S._slicing(rows, n)
            width = chunks * S.CE_SLICE
            assert slices <= S.CE_MAX_SLICES and (slices - 1) * width < n <= slices * width
            assert step * H.block_for(slices, 1 << 30) <= max(S.CE_MERGE_TILE, H.block_for(slices, 1 << 30))
            assert group_rows % step == 0 and groups <= S.CE_MAX_GROUPS
            assert (groups - 1) * group_rows < rows <= groups * group_rows


@pytest.mark.parametrize("rows,n", [(1, 8193), (1, 32000), (7, 9000), (33, 32000), (5, 50257)])
def test_sliced_forward_matches_torch(rows, n):
    x, t = _case(rows, n, "cpu")
    _check_against_torch(x, t, rtol=1e-5, atol=1e-6)
    _check_bits_repeat(x, t)
    assert _counters_are_zero()


@pytest.mark.parametrize("rows,n", [(1, 17), (33, 4096), (7, 1000), (300, 8192)])
def test_reducing_forward_of_short_rows_as_slices(monkeypatch, rows, n):
    # On fast-memory GPUs (CE_SLICED_REDUCE_FAST_MEMORY) a 'mean' or 'sum' of rows held
    # whole runs as CE_SLICE-wide slices and the merge; 'none' keeps the row kernel. The same
    # plan on the CPU, against torch.
    monkeypatch.setattr(S.H, "fast_memory", lambda x: True)
    S._CE_PLANS.clear()
    try:
        x, t = _case(rows, n, "cpu")
        assert S._ce_plan(x, t, 0.0, "mean").slices == -(-n // S.CE_SLICE) and S._ce_plan(x, t, 0.0, "none").slices == 0
        _check_against_torch(x, t, rtol=1e-5, atol=1e-6)
        _check_bits_repeat(x, t)
        assert _counters_are_zero()
        monkeypatch.setattr(S, "CE_SLICED_REDUCE_FAST_MEMORY", False)
        assert S._ce_plan(x, t, 0.0, "mean").slices == 0
    finally:
        S._CE_PLANS.clear()


def test_sliced_forward_backward_and_far_logits():
    # Logits far from 0 (the slices' maxima keep exp in range) and their gradient.
    x, t = _case(6, 20000, "cpu")
    x = (x + 300).requires_grad_(True)
    xr = x.detach().double().requires_grad_(True)
    loss = tk.cross_entropy(x, t, label_smoothing=0.05)
    ref = F.cross_entropy(xr, t, label_smoothing=0.05)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("max_slices,n", [(2, 32000), (1, 9000), (3, 50257)])
def test_slices_of_several_chunks(monkeypatch, max_slices, n):
    # Rows longer than CE_MAX_SLICES slices walk each slice in CE_SLICE chunks (the
    # online log-sum-exp); made reachable here by allowing fewer slices.
    monkeypatch.setattr(S, "CE_MAX_SLICES", max_slices)
    S._CE_PLANS.clear()
    try:
        chunks, slices, *_ = S._slicing(9, n)
        assert chunks > 1 and slices <= max_slices
        x, t = _case(9, n, "cpu")
        x[2, 5] = float("nan")  # a NaN logit: that row's loss is NaN
        x[4, : chunks * S.CE_SLICE + 10] = -float("inf")  # a slice of -inf logits adds nothing
        t[4] = n - 1
        _check_against_torch(x, t, rtol=1e-5, atol=1e-6)
        assert torch.isnan(tk.cross_entropy(x, t, reduction="none")[2])
    finally:
        S._CE_PLANS.clear()


def _unaligned_views(device, dtype=torch.float32):
    """(name, logits, target): rows whose starts are not 16-byte aligned (the realigned
    slices) and an aligned stride on a misaligned base, next to their contiguous copies."""
    g = torch.Generator().manual_seed(11)
    flat = torch.randn(6 * 32000 + 16, generator=g).to(device, dtype)
    wide = torch.randn(5, 32011, generator=g).to(device, dtype)
    gpt2 = torch.randn(5, 50257, generator=g).to(device, dtype)
    t5 = torch.tensor([0, 31999, -100, 17, 4100], device=device)
    return [("base 3 elements past a boundary", flat[3:3 + 6 * 32000].view(6, 32000),
             torch.tensor([0, 31999, -100, 4095, 4096, 12], device=device)),
            ("base 1 element past, odd stride", flat[1:1 + 5 * 32011].view(5, 32011)[:, :32000], t5),
            ("column view, stride 32011", wide[:, 5:32005], t5),
            ("odd vocabulary", gpt2, torch.tensor([50256, 0, -100, 8191, 8192], device=device))]


def _check_unaligned(device, dtype=torch.float32, rtol=1e-5, atol=1e-6):
    # The library's plan (realigned on a GPU only) and a realigned one on either device.
    for name, x, t in _unaligned_views(device, dtype):
        for reduction in ("mean", "none"):
            for smoothing in (0.0, 0.1):
                got = tk.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
                want = tk.cross_entropy(x.contiguous(), t, reduction=reduction, label_smoothing=smoothing)
                ref = F.cross_entropy(x.double().cpu(), t.cpu(), reduction=reduction, label_smoothing=smoothing)
                torch.testing.assert_close(got.double().cpu(), ref if dtype == torch.float32 else
                                           ref.to(dtype).double(), rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
                torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
                plan = S._ce_plan(x, t, smoothing, reduction, realign=True)
                assert plan.slice_kw["REALIGN"] or name.startswith("base 3"), name  # (16-byte row strides)
                out, _, lse = S._ce_forward_with(plan, x, t, -100)
                _, _, want_lse = S.cross_entropy_forward(x.contiguous(), t, -100, smoothing, reduction)
                torch.testing.assert_close(out.double().cpu(), ref, rtol=rtol, atol=atol,
                                           msg=lambda m: f"{name}, realigned: {m}")
                torch.testing.assert_close(lse, want_lse, rtol=1e-5, atol=1e-5)


def test_sliced_forward_of_unaligned_rows():
    _check_unaligned("cpu")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("n", [4097, 9000, 12281, 12285, 12287, 50257])
def test_realigned_rows_of_every_lead(dtype, n):
    # 8 rows of n classes: every lead (the row start's distance past a 16-byte
    # boundary) of VEC = 2, 4 or 8; the row's last column in the last slice or, when
    # the realigned positions end just past a slice (12287 fp32: 12290 > 3 * 4096),
    # in the one before it; targets on the first and last columns. Forward and backward
    # realigned (as on a GPU) on the CPU: as torch, and as not realigned.
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(8, n, generator=g) * 2).to(dtype)
    t = torch.tensor([n - 1, 0, n - 1, 5, -100, n - 2, 0, n - 1])
    rtol = 2e-3 if dtype == torch.float16 else 1e-5
    for reduction in ("none", "mean"):
        for smoothing in (0.0, 0.1):
            want = F.cross_entropy(x.double(), t, reduction=reduction, label_smoothing=smoothing)
            plain = S._ce_plan(x, t, smoothing, reduction, realign=False)
            plan = S._ce_plan(x, t, smoothing, reduction, realign=True)
            assert plan.bwd_realigned_kw is not None and (n <= S.CE_ONE_CHUNK or plan.slice_kw["REALIGN"])
            out, scale, lse = S._ce_forward_with(plan, x, t, -100)
            torch.testing.assert_close(out.double(), want if reduction == "none" else want.to(out.dtype).double(),
                                       rtol=rtol, atol=rtol)
            dloss = torch.randn(8, generator=g) if reduction == "none" else torch.tensor(1.5)
            dx = S._ce_backward_with(plan, x, t, lse, dloss, scale, -100)
            dx_plain = S._ce_backward_with(plain, x, t, lse, dloss, scale, -100)
            # The same arithmetic per logit, other accesses: the same bits (the CPU's exp
            # does not depend on the tile's shape, tests/python/test_cpu_exp_accuracy.py).
            torch.testing.assert_close(dx, dx_plain, rtol=0, atol=0)
            xr = x.double().clone().requires_grad_(True)
            (F.cross_entropy(xr, t, reduction=reduction, label_smoothing=smoothing) * dloss.double()).sum().backward()
            torch.testing.assert_close(dx.double(), xr.grad, rtol=rtol, atol=1e-3 if dtype == torch.float16 else 1e-7)


@pytest.mark.parametrize("n", [32000, 50257])
def test_slices_of_minus_infinity(n):
    # A whole slice of -inf logits adds nothing (not NaN: _max_or_zero), as torch's;
    # a NaN among -infs still makes the row NaN.
    x, t = _case(4, n, "cpu", seed=2)
    x[0, :8200] = -float("inf")
    x[1, -9000:] = -float("inf")
    x[2, 100:5000] = -float("inf")
    t[:3] = torch.tensor([9000, 5, 99])
    x[3, :4500] = -float("inf")
    x[3, 7] = float("nan")
    got = tk.cross_entropy(x, t, reduction="none")
    want = F.cross_entropy(x.double(), t, reduction="none")
    torch.testing.assert_close(got[:3].double(), want[:3], rtol=1e-5, atol=1e-6)
    assert torch.isnan(got[3])


def _check_poisoned(monkeypatch, device):
    # The plan's allocators hand out NaN-filled arrays: an output element or a slice's
    # partial that no program wrote would turn up as a NaN (or a different loss).
    x, t = _case(37, 32000, device, seed=5)
    S._CE_PLANS.clear()
    try:
        for reduction in ("mean", "none"):
            want_out, want_scale, want_lse = S.cross_entropy_forward(x, t, -100, 0.1, reduction)
            plan = S._ce_plan_for(x, t, 0.1, reduction)
            for name in ("new_work", "new_lse", "new_out", "new_part"):
                make = getattr(plan, name)
                monkeypatch.setattr(plan, name, lambda make=make: make().fill_(float("nan")))
            out, scale, lse = S.cross_entropy_forward(x, t, -100, 0.1, reduction)
            assert torch.equal(out, want_out) and torch.equal(lse, want_lse), reduction
            assert not torch.isnan(lse).any()
            if scale is not None:
                assert torch.equal(scale[:1], want_scale[:1])
    finally:
        S._CE_PLANS.clear()
    if device == "cuda":
        torch.cuda.synchronize()
    assert _counters_are_zero()


def test_sliced_forward_writes_every_output_and_partial(monkeypatch):
    _check_poisoned(monkeypatch, "cpu")


# The backward's launches of rows longer than CE_ONE_CHUNK: a program per row walking it
# (the CPU's default), or a program per (row, slice) (the GPU's, CE_BWD_SLICE):
# (positions per program, tile, warps, evict-first stores).
ROW_WALK = (1 << 30, 2048, 8, False)
BWD_SLICES = [(4096, 4096, 4, False), (8192, 2048, 8, True), (2048, 2048, 4, False), (16384, 4096, 4, False)]


def _check_sliced_backward(device, dtype, rows, n, realign):
    # Every slicing gives the row walk's bits (the same arithmetic per logit), into a
    # NaN-poisoned dlogits (an element no program wrote would stay NaN), near torch.
    g = torch.Generator().manual_seed(rows + n)
    x = (torch.randn(rows, n, generator=g) * 2).to(device, dtype)
    t = torch.randint(0, n, (rows,), generator=g)
    t[0], t[-1] = n - 1, 0
    if rows > 2:
        t[1] = -100
    t = t.to(device)
    for reduction, smoothing in (("mean", 0.0), ("none", 0.1)):
        walk = S._ce_plan(x, t, smoothing, reduction, realign=realign, bwd_slice=ROW_WALK)
        out, scale, lse = S._ce_forward_with(walk, x, t, -100)
        dloss = torch.tensor(1.5, device=device) if scale is not None else torch.randn(rows, generator=g).to(device)
        want = S._ce_backward_with(walk, x, t, lse, dloss, scale, -100)
        assert walk.bwd_kw[1] == 1
        for bwd_slice in BWD_SLICES + [None]:
            plan = S._ce_plan(x, t, smoothing, reduction, realign=realign, bwd_slice=bwd_slice)
            assert (plan.bwd_realigned_kw is not None) == (realign and n % 16 != 0)
            kw, slices, span = plan.bwd_realigned_kw or plan.bwd_kw
            if bwd_slice is not None or device == "cuda":  # (the CPU's default: the row walk)
                assert slices == -(-(n + (kw["VEC"] - 1)) // span) and span % kw["BLOCK"] == 0
            make = plan.new_dx
            plan.new_dx = lambda make=make: make().fill_(float("nan"))
            got = S._ce_backward_with(plan, x, t, lse, dloss, scale, -100)
            assert not torch.isnan(got).any(), (bwd_slice, reduction)
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"{bwd_slice}, {reduction}: {m}")
        xr = x.double().cpu().requires_grad_(True)
        ref = F.cross_entropy(xr, t.cpu(), reduction=reduction, label_smoothing=smoothing)
        (ref * dloss.double().cpu()).sum().backward()
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
        torch.testing.assert_close(want.double().cpu(), xr.grad, rtol=tol, atol=tol * 1e-3 if dtype ==
                                   torch.float32 else tol / 2)


@pytest.mark.parametrize("realign", [False, True])
@pytest.mark.parametrize("rows,n", [(3, 9000), (8, 50257), (2, 32000)])  # (8 rows of 50257: every lead)
def test_sliced_backward_matches_the_row_walk(rows, n, realign):
    _check_sliced_backward("cpu", torch.float32, rows, n, realign)


def test_sliced_backward_keeps_short_rows_whole_and_checks_its_tiles():
    # Rows held whole by the forward (n <= CE_ONE_CHUNK) keep one program a row; a slice
    # that is not whole tiles (the kernel's 16-byte access hint) is refused.
    x, t = _case(3, 4097, "cpu")
    plan = S._ce_plan(x, t, 0.0, "mean", realign=True, bwd_slice=BWD_SLICES[0])
    assert plan.bwd_kw[1] == 1 and plan.bwd_realigned_kw[1] == 1
    x, t = _case(3, 9000, "cpu")
    for bad in ((3000, 2048, 4, False), (4096, 1000, 4, False), (4096, 8, 4, False)):
        with pytest.raises(ValueError, match="backward slices"):
            S._ce_plan(x, t, 0.0, "mean", bwd_slice=bad)


# ------------------------------------------------------------------------------ GPU

def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 1025, 4096])
@pytest.mark.parametrize("n", [17, 4097, 32000, 50257])
def test_cross_entropy_vocabularies_on_the_gpu(rows, n):
    # One row, rows not a multiple of the merge's steps or groups, ignored rows; the
    # rows held whole (17, 4097) and the sliced ones (32000, 50257): fp32 near torch in
    # fp64, fp16 and bf16 near it rounded to the dtype; the same bits every run.
    _gpu()
    x, t = _case(rows, n, "cuda")
    _check_against_torch(x, t, rtol=2e-5, atol=1e-5)
    _check_bits_repeat(x, t)
    for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)):
        xh = x.to(dtype)
        _check_against_torch(xh, t, rtol=tol, atol=tol)
        _check_bits_repeat(xh, t)
    torch.cuda.synchronize()
    assert _counters_are_zero()


@pytest.mark.gpu
def test_reducing_forward_of_short_rows_as_slices_on_the_gpu(monkeypatch):
    # The H200's plan for short rows on whichever GPU runs the tests.
    _gpu()
    monkeypatch.setattr(S.H, "fast_memory", lambda x: True)
    S._CE_PLANS.clear()
    try:
        for rows, n in ((1, 17), (1025, 4096), (4096, 4097)):
            x, t = _case(rows, n, "cuda")
            for xx, tol in ((x, 2e-5), (x.half(), 2e-3)):
                _check_against_torch(xx, t, rtol=tol, atol=tol)
                _check_bits_repeat(xx, t)
        torch.cuda.synchronize()
        assert _counters_are_zero()
    finally:
        S._CE_PLANS.clear()


@pytest.mark.gpu
def test_sliced_forward_of_unaligned_rows_on_the_gpu():
    _gpu()
    _check_unaligned("cuda")
    _check_unaligned("cuda", torch.float16, rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
def test_sliced_forward_writes_every_output_and_partial_on_the_gpu(monkeypatch):
    _gpu()
    _check_poisoned(monkeypatch, "cuda")


@pytest.mark.gpu
def test_sliced_forward_is_two_gpu_kernels_and_its_gradient_matches():
    _gpu()
    from torch.profiler import ProfilerActivity, profile
    x, t = _case(2048, 50257, "cuda", dtype=torch.float16)
    tk.cross_entropy(x, t)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        tk.cross_entropy(x, t)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(names) == 2, names  # the slices, the merge (with the mean)
    # The backward of rows not 16-byte aligned walks them from their boundaries too.
    for dtype, atol in ((torch.float32, 1e-9), (torch.float16, 1e-6)):
        # Detached copies: x.to(float16) is x itself, and a grad-requiring x would make
        # xr = x.double() a non-leaf whose .grad stays None.
        xg = x.detach().to(dtype).requires_grad_(True)
        xr = x.detach().double().requires_grad_(True)
        tk.cross_entropy(xg, t, label_smoothing=0.1).backward()
        F.cross_entropy(xr, t, label_smoothing=0.1).backward()
        torch.testing.assert_close(xg.grad.double(), xr.grad, rtol=2e-3 if dtype == torch.float16 else 1e-4,
                                   atol=atol)
        assert S._ce_plan_for(xg, t, 0.1).bwd_realigned_kw is not None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows,n", [(3, 50257), (1025, 32000), (7, 9000), (2, 8193)])
def test_sliced_backward_on_the_gpu(dtype, rows, n):
    _gpu()
    for realign in (False, True):
        _check_sliced_backward("cuda", dtype, rows, n, realign)


@pytest.mark.parametrize("fast", [False, True], ids=["hbm3", "hbm3e"])
def test_slice_warps_per_memory_speed(monkeypatch, fast):
    # Two warps a slice of long rows on fast memory (the H200), four otherwise.
    monkeypatch.setattr(S.H, "fast_memory", lambda x: fast)
    x = torch.zeros(1, 1)
    for n in (32000, 50257):
        assert S._slice_warps(x, n) == (S.CE_SLICE_WARPS_FAST_MEMORY if fast else S.CE_SLICE_WARPS)
    assert S._slice_warps(x, 4096) == S.CE_SLICE_WARPS  # short rows as slices (a reducing forward)


@pytest.mark.parametrize("rows,n,shift", [(7, 9000, 0.0), (5, 50257, 0.0), (4, 32000, 300.0), (3, 20000, -80.0)])
def test_slices_with_fma_exponentials(rows, n, shift):
    # The GPU's slice terms 2^(x log2 e - m log2 e) (FMA_EXP), run on the CPU: near torch
    # in fp64 for every reduction and smoothing, logits far from 0 included (the rounding
    # of m log2 e is an ulp of the log-sum-exp), realigned rows or not.
    x, t = _case(rows, n, "cpu")
    x = x + shift
    xd, tc = x.double(), t
    for realign in (False, True):
        for reduction in ("mean", "none"):
            for smoothing in (0.0, 0.1):
                plan = S._ce_plan(x, t, smoothing, reduction, realign=realign)
                assert plan.slice_kw["FMA_EXP"] is False  # (the CPU's plan)
                plan.slice_kw["FMA_EXP"] = True
                out, _, lse = S._ce_forward_with(plan, x, t, -100)
                want = F.cross_entropy(xd, tc, reduction=reduction, label_smoothing=smoothing)
                torch.testing.assert_close(out.double(), want, rtol=2e-6, atol=2e-6 * (1 + abs(shift)))
                torch.testing.assert_close(lse.double(), torch.logsumexp(xd, 1), rtol=2e-7, atol=0)
