"""The GPU plans of the backward kernels run on the CPU: the norm walk that loads its
next row before reducing the current one (more rows than programs, a ragged last step,
every norm variant), against float64 torch references; and the program count of the
walk on a GPU is a whole number of waves of its multiprocessors."""
import pytest

import tessera.kernels as tk
from tessera.kernels import _host as H
from tessera.kernels import norm as N

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402


@pytest.fixture(params=[(True, True, True), (True, True, False), (True, False, True), (True, False, False),
                        (False, True, True)],
                ids=["two-rows", "one-row", "two-rows-two-sums", "one-row-two-sums", "two-rows-no-prefetch"])
def gpu_norm_plan(monkeypatch, request):
    """The norm backward's GPU walk on the CPU: loading the next step ahead, layer
    norm's two row sums as one pair reduction (or two), two rows a step (or one), the
    GPU's arithmetic (_bwd_no_select: layer norm's xhat unselected past n_cols, with and
    without the ReLU; dx in two FMAs, xhat in one); few
    programs, so each walks several steps, and some programs' last step has no next
    step (or, two rows a step, no second row)."""
    prefetch, pair_sum, two_rows = request.param
    monkeypatch.setattr(N, "_bwd_prefetch", lambda x: prefetch)
    monkeypatch.setattr(N, "_bwd_pair_sum", lambda x: pair_sum)
    monkeypatch.setattr(N, "_bwd_two_rows", lambda x, *a: two_rows)
    monkeypatch.setattr(N, "_bwd_no_select", lambda x, relu, stages: True)  # (no select past n_cols)
    monkeypatch.setattr(N, "_bwd_fma_dx", lambda x, relu, stages: True)  # (dx in two FMAs)
    monkeypatch.setattr(N, "_bwd_fma_xhat", lambda x, stages: True)  # (xhat in one FMA)
    monkeypatch.setattr(H, "num_programs_for_partials", lambda like, n_rows, per_sm=4: max(1, min(n_rows, 3)))
    monkeypatch.setattr(N, "CPU_SPLIT_COST_ELEMS", 0)  # (small CPU inputs would take one program)
    N._BWD_PLANS.clear()
    yield
    N._BWD_PLANS.clear()


def _grads(fn, inputs, grads):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    torch.autograd.backward(list(outs), list(grads[:len(outs)]))
    return [lf.grad for lf in leaves]


NORMS = {
    "layer_norm": (3, lambda x, r, w, b: tk.layer_norm(x, w, b),
                   lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b)),
    "layer_norm+relu": (3, lambda x, r, w, b: tk.layer_norm(x, w, b, relu=True),
                        lambda x, r, w, b: F.relu(F.layer_norm(x, (x.shape[-1],), w, b))),
    "rms_norm": (3, lambda x, r, w, b: tk.rms_norm(x, w), lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6)),
    "residual_add_layer_norm": (
        4, lambda x, r, w, b: tk.residual_add_layer_norm(x, r, w, b),
        lambda x, r, w, b: (F.layer_norm(x + r, (x.shape[-1],), w, b), x + r)),
    "residual_add_rms_norm": (
        4, lambda x, r, w, b: tk.residual_add_rms_norm(x, r, w),
        lambda x, r, w, b: (F.rms_norm(x + r, (x.shape[-1],), w, 1e-6), x + r)),
}


@pytest.mark.parametrize("rows", [1, 7, 10])
@pytest.mark.parametrize("name", list(NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_prefetching_norm_backward_matches_reference(gpu_norm_plan, name, rows, dtype):
    _, f_tk, f_ref = NORMS[name]
    g = torch.Generator().manual_seed(rows)
    cols = 33
    x, r = torch.randn(rows, cols, generator=g), torch.randn(rows, cols, generator=g)
    w, b = torch.randn(cols, generator=g), torch.randn(cols, generator=g)
    dy, dh = torch.randn(rows, cols, generator=g), torch.randn(rows, cols, generator=g)
    got = _grads(f_tk, [t.to(dtype) for t in (x, r, w, b)], [dy.to(dtype), dh.to(dtype)])
    want = _grads(f_ref, [t.double() for t in (x, r, w, b)], [dy.double(), dh.double()])
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for a, e in zip(got, want):
        if e is None:
            assert a is None
            continue
        torch.testing.assert_close(a.double(), e, rtol=tol, atol=tol * max(1.0, e.abs().max().item()))


def test_prefetching_norm_backward_gradcheck(gpu_norm_plan):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 17, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randn(9, 17, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(17, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(17, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: tk.residual_add_layer_norm(*a), (x, r, w, b))
    assert torch.autograd.gradcheck(lambda a, w_: tk.rms_norm(a, w_), (x, w))


def test_gpu_partials_programs_are_whole_waves(monkeypatch):
    class FakeCuda:  # a tensor-like on a GPU of 132 multiprocessors
        pass
    monkeypatch.setattr(H, "on_gpu", lambda like: True)
    monkeypatch.setattr(H, "gpu_multiprocessors", lambda like: 132)
    assert H.num_programs_for_partials(FakeCuda(), 16384) == 4 * 132
    assert H.num_programs_for_partials(FakeCuda(), 16384, per_sm=2) == 264
    assert H.num_programs_for_partials(FakeCuda(), 100) == 100


@pytest.mark.parametrize("prefetch", [True, False, "two-rows"], ids=["prefetch", "no-prefetch", "two-rows"])
@pytest.mark.parametrize("form", ["erf", "tanh", "dropout"])
@pytest.mark.parametrize("rows", [1, 9, 11, 12])
def test_bias_gelu_backward_row_groups(monkeypatch, prefetch, form, rows):
    # The bias-gradient backward's plans on the CPU: groups of 4 rows (a ragged last
    # group with 9 and 11 rows: 1 and 3 rows, so a step of two rows without its second),
    # with the GPU plan's next-row loads (PREFETCH), two rows a step, or neither.
    from tessera.kernels import activation as A
    monkeypatch.setattr(A, "_bias_bwd_prefetch", lambda a: bool(prefetch))
    monkeypatch.setattr(A, "_bias_bwd_two_rows", lambda a: prefetch == "two-rows")
    monkeypatch.setattr(A, "BIAS_BWD_CPU_ROWS", 4)
    A._BWD_PLANS.clear()
    try:
        g = torch.Generator().manual_seed(rows)
        x = torch.randn(rows, 37, generator=g, dtype=torch.float64)
        bias = torch.randn(37, generator=g, dtype=torch.float64)
        dy = torch.randn(rows, 37, generator=g, dtype=torch.float64)
        xr, br = x.clone().requires_grad_(True), bias.clone().requires_grad_(True)
        if form == "dropout":
            p = 0.25
            got = torch.autograd.grad(tk.gelu_dropout(xr, p, 11, bias=br), (xr, br), dy)
            keep = tk.gelu_dropout(torch.ones_like(x), p, 11, bias=torch.full_like(bias, 10.0)) != 0
            want = torch.autograd.grad(F.gelu(xr + br) * keep / (1 - p), (xr, br), dy)
        else:
            approx = "tanh" if form == "tanh" else "none"
            got = torch.autograd.grad(tk.bias_gelu(xr, br, approximate=approx), (xr, br), dy)
            want = torch.autograd.grad(F.gelu(xr + br, approximate=approx), (xr, br), dy)
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9)
    finally:
        A._BWD_PLANS.clear()


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "no-prefetch"])
@pytest.mark.parametrize("seq", [1, 40, 77])
def test_rms_norm_rope_backward_walk(monkeypatch, prefetch, seq):
    # The rope backward's walk on the CPU with 3 programs: several row groups each, a
    # ragged last group (3 heads: 120 or 231 rows in 32-row groups), loading the next group ahead (PREFETCH,
    # the GPU plan) or not.
    from tessera.kernels import rope as RP
    monkeypatch.setattr(RP, "_bwd_prefetch", lambda x: prefetch)
    monkeypatch.setattr(H, "num_programs_for_partials", lambda like, n_rows, per_sm=4: max(1, min(n_rows, 3)))
    RP._PLANS.clear()
    try:
        g = torch.Generator().manual_seed(seq)
        x = torch.randn(seq, 3, 64, generator=g, dtype=torch.float64)
        w = torch.randn(64, generator=g, dtype=torch.float64)
        ang = torch.randn(seq, 32, generator=g, dtype=torch.float64)
        cos, sin = ang.cos(), ang.sin()
        dy = torch.randn(seq, 3, 64, generator=g, dtype=torch.float64)

        def ref(a, wt):
            n = a * torch.rsqrt((a * a).mean(-1, keepdim=True) + 1e-6) * wt
            n1, n2 = n[..., :32], n[..., 32:]
            c, s = cos[:, None, :], sin[:, None, :]
            return torch.cat([n1 * c - n2 * s, n2 * c + n1 * s], -1)
        xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        want = torch.autograd.grad(ref(xr, wr), (xr, wr), dy)
        got = torch.autograd.grad(tk.rms_norm_rope(xr, wr, cos, sin), (xr, wr), dy)
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=1e-9, atol=1e-9)
    finally:
        RP._PLANS.clear()


@pytest.mark.parametrize("op", ["reduce_sum_squared", "reduce_mean_abs"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "long_rows"])
def test_last_dim_reduction_backward_row_kernel(op, layout):
    # dim=-1 backward runs one row per program in chunks of up to 4096 columns; a
    # transposed input has a row stride of 1 and a column stride that is not.
    g = torch.Generator().manual_seed(5)
    if layout == "transposed":
        x = torch.randn(40, 24, generator=g, dtype=torch.float64).t()
    elif layout == "long_rows":
        x = torch.randn(3, 9000, generator=g, dtype=torch.float64)
    else:
        x = torch.randn(24, 40, generator=g, dtype=torch.float64)
    x = x.requires_grad_(True)
    ref = (lambda a: (a * a).sum(-1)) if op == "reduce_sum_squared" else (lambda a: a.abs().mean(-1))
    dy = torch.randn(x.shape[0], generator=g, dtype=torch.float64)
    (got,) = torch.autograd.grad(getattr(tk, op)(x, -1), x, dy)
    (want,) = torch.autograd.grad(ref(x), x, dy)
    torch.testing.assert_close(got, want)
    assert torch.autograd.gradcheck(lambda a: getattr(tk, op)(a, -1), (x[:, :7].detach().requires_grad_(True),))


# --------------------------------------------------------------------------- GPU (the lead's round)
# Tall shapes on the GPU plans: more rows than the norm walk's programs (one per SM), so
# each program walks several rows with a ragged last step; bias_gelu's row groups of 128
# with a partial last group; the rope walk; the last-dimension reduction's row kernel.

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 1000), (300, 4096), (2000, 33)], ids=["1000x1000", "300x4096", "2000x33"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
def test_gpu_backward_plans_on_tall_shapes(shape, dtype):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from test_kernels_ops import ALL_CASES, check_case
    for name in ("layer_norm", "layer_norm_relu", "rms_norm", "residual_add_layer_norm", "residual_add_rms_norm",
                 "bias_gelu", "bias_gelu_tanh", "reduce_sum_squared_last", "reduce_mean_abs_last", "cross_entropy"):
        check_case(next(c for c in ALL_CASES if c.name == name), shape, dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1000, 1000), (301, 4096)], ids=["1000x1000", "301x4096"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
def test_gpu_norm_backward_two_rows_a_step(monkeypatch, shape, dtype):
    # The walk's two-rows-a-step alternative (off by default until timed) on the GPU: an
    # odd number of rows per program leaves some last steps without a second row.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from test_kernels_ops import ALL_CASES, check_case
    monkeypatch.setattr(N, "BWD_PLAN_OVERRIDE", (1, 16, True))
    N._BWD_PLANS.clear()
    try:
        for name in ("layer_norm", "layer_norm_relu", "rms_norm", "residual_add_layer_norm", "residual_add_rms_norm"):
            check_case(next(c for c in ALL_CASES if c.name == name), shape, dtype, device="cuda")
    finally:
        N._BWD_PLANS.clear()


# (rows per program, column block, warps, two rows a step, programs per SM under a
# register cap or None): the bias-gradient backward's GPU plans that bench/bwd_profile.py
# --sweep times (the default: 128 rows, two rows a step).
BIAS_GPU_PLANS = [(128, 512, 2, True, None), (64, 512, 2, False, None), (96, 512, 2, True, None),
                  (96, 512, 4, True, None), (128, 512, 4, True, None), (64, 512, 4, False, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("plan", BIAS_GPU_PLANS, ids=lambda p: "-".join(map(str, p)))
@pytest.mark.parametrize("shape", [(1, 4096), (301, 17), (300, 4097), (531, 2048)],
                         ids=["1x4096", "301x17", "300x4097", "531x2048"])
def test_gpu_bias_gelu_backward_plans(monkeypatch, plan, shape):
    # Each plan on one row, a short row, a row one past a power of two, and rows that
    # are not a multiple of the rows per program (odd too: a last step of two rows
    # without its second row).
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tessera.kernels import activation as A
    from test_kernels_ops import ALL_CASES, check_case
    rows, block, warps, two_rows, per_sm = plan
    for name, value in (("BIAS_BWD_ROWS", rows), ("BIAS_BWD_BLOCK", block), ("BIAS_BWD_WARPS", warps),
                        ("BIAS_BWD_TWO_ROWS", two_rows), ("BIAS_BWD_PER_SM", per_sm)):
        monkeypatch.setattr(A, name, value)
    A._BWD_PLANS.clear()
    try:
        for name in ("bias_gelu", "bias_gelu_tanh"):
            check_case(next(c for c in ALL_CASES if c.name == name), shape, torch.float16, device="cuda")
    finally:
        A._BWD_PLANS.clear()


@pytest.mark.gpu
def test_gpu_rms_norm_rope_backward_tall():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    g = torch.Generator().manual_seed(7)
    x = torch.randn(777, 8, 128, generator=g, dtype=torch.float64)
    w = torch.randn(128, generator=g, dtype=torch.float64)
    ang = torch.randn(777, 64, generator=g, dtype=torch.float64)
    cos, sin = ang.cos(), ang.sin()
    dy = torch.randn(777, 8, 128, generator=g, dtype=torch.float64)

    def ref(a, wt):
        n = a * torch.rsqrt((a * a).mean(-1, keepdim=True) + 1e-6) * wt
        n1, n2 = n[..., :64], n[..., 64:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([n1 * c - n2 * s, n2 * c + n1 * s], -1)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    want = torch.autograd.grad(ref(xr, wr), (xr, wr), dy)
    xc = x.float().cuda().requires_grad_(True)
    wc = w.float().cuda().requires_grad_(True)
    got = torch.autograd.grad(tk.rms_norm_rope(xc, wc, cos.float().cuda(), sin.float().cuda()), (xc, wc),
                              dy.float().cuda())
    for a, e in zip(got, want):
        torch.testing.assert_close(a.double().cpu(), e, rtol=1e-4, atol=1e-4 * e.abs().max().item())


NORM_FORMS = ("layer_norm", "layer_norm_relu", "layer_norm_noaffine", "rms_norm", "residual_add_layer_norm",
              "residual_add_rms_norm")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 4096), (301, 4096), (1000, 17), (300, 4097), (531, 2048)],
                         ids=["1x4096", "301x4096", "1000x17", "300x4097", "531x2048"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["float16", "float32"])
def test_gpu_norm_backward_default_plans_on_odd_shapes(shape, dtype):
    # The per-form GPU plans (BWD_GPU_PLANS: two register-capped programs per SM for
    # layer norm, two rows a step for RMS norm): one row, a ragged last step (rows not a
    # multiple of the programs), a short row, a row one past a power of two (the long-row
    # fallback), and a shorter block (fewer warps, so no register cap).
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from test_kernels_ops import ALL_CASES, check_case
    N._BWD_PLANS.clear()
    for name in NORM_FORMS:
        check_case(next(c for c in ALL_CASES if c.name == name), shape, dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [(2, 16, False, 1), (2, 8, False, 1), (1, 16, True, 1), (2, 8, True, 1),
                                  (2, 8, False, 2), (1, 16, True, 3), (2, 8, True, 4)],
                         ids=["2x16", "2x8", "1x16-two-rows", "2x8-two-rows", "2x8-ring2", "1x16-two-rows-ring3",
                              "2x8-two-rows-ring4"])
def test_gpu_norm_backward_every_plan_on_every_form(monkeypatch, plan):
    # Each plan on each form, including those the defaults do not pick (spilling under
    # the register cap: the ReLU and the residual's gradient at 2 x 16 warps, two rows
    # at 2 x 8), and with stream rings (the H200's plans).
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from test_kernels_ops import ALL_CASES, check_case
    monkeypatch.setattr(N, "BWD_PLAN_OVERRIDE", plan[:3])
    monkeypatch.setattr(N, "BWD_STAGES", plan[3])
    N._BWD_PLANS.clear()
    try:
        for shape in ((301, 4096), (7, 1000)):
            for name in NORM_FORMS:
                check_case(next(c for c in ALL_CASES if c.name == name), shape, torch.float16, device="cuda")
    finally:
        N._BWD_PLANS.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("per_sm", [2, 3, 4])
def test_gpu_rms_norm_rope_backward_programs_per_sm(monkeypatch, per_sm):
    # 3 and 4 programs per SM run under a register cap (168, 128 at 4 warps).
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tessera.kernels import rope as RP
    monkeypatch.setattr(RP, "BWD_PROGRAMS_PER_SM", per_sm)
    RP._PLANS.clear()
    try:
        test_gpu_rms_norm_rope_backward_tall()
    finally:
        RP._PLANS.clear()


def test_max_registers_for_programs_per_sm():
    assert H.max_registers(1, 16) is None  # one program: ptxas's own limit
    assert H.max_registers(2, 16) == 64
    assert H.max_registers(2, 8) == 128
    assert H.max_registers(3, 4) == 168
    assert H.max_registers(2, 4) is None  # 256 a thread would fit: no cap
    assert H.max_registers(3, 8) == 80  # 85 rounded down to ptxas's unit of 8


@pytest.mark.parametrize("fast", [False, True], ids=["hbm3", "hbm3e"])
def test_norm_backward_gpu_plan_per_form(monkeypatch, fast):
    # Per form, and per memory speed (the H200's plans keep more in flight: stream rings).
    monkeypatch.setattr(N, "BWD_PLAN_OVERRIDE", None)
    monkeypatch.setattr(N.H, "fast_memory", lambda x: fast)
    plans = N.BWD_GPU_PLANS_FAST_MEMORY if fast else N.BWD_GPU_PLANS
    x = torch.zeros(2, 4096)
    assert N._bwd_gpu_plan(x, False, False, False, 4096) == plans["layer_norm"]
    assert N._bwd_gpu_plan(x, False, True, False, 4096) == plans["layer_norm+relu"]
    assert N._bwd_gpu_plan(x, True, False, False, 4096) == plans["rms_norm"]
    assert N._bwd_gpu_plan(x, True, False, True, 4096) == plans["residual"]
    assert N._bwd_gpu_plan(x, False, False, False, 8192) == (1, 16, False, 1)  # long rows: one program per SM
    assert N._bwd_two_rows(x, True, False, False, 4096) is False  # the CPU walks one row a step
    monkeypatch.setattr(N, "BWD_PLAN_OVERRIDE", (2, 8, True))
    assert N._bwd_gpu_plan(x, True, False, False, 4096) == (2, 8, True, 1)
    monkeypatch.setattr(N, "BWD_STAGES", 3)
    assert N._bwd_gpu_plan(x, True, False, False, 4096) == (2, 8, True, 3)


def test_fast_memory_from_the_device_properties(monkeypatch):
    # Nominal bandwidth = 2 transfers a clock over the bus: the H100 SXM (2619 MHz, 5120
    # bits) 3352 GB/s, the H200 (3201 MHz, 6144 bits) 4917 GB/s. Never on the CPU.
    assert not H.fast_memory(torch.zeros(1))
    for khz, bits, fast in ((2619000, 5120, False), (3201000, 6144, True)):
        H._MEMORY_GBPS.clear()
        props = type("P", (), {"memory_clock_rate": khz, "memory_bus_width": bits})()
        monkeypatch.setattr(H.torch.cuda, "get_device_properties", lambda i, p=props: p)
        monkeypatch.setattr(H, "on_gpu", lambda x: True)
        t = torch.zeros(1)
        monkeypatch.setattr(type(t), "get_device", lambda self: 0)
        assert H.fast_memory(t) is fast
        H._MEMORY_GBPS.clear()


@pytest.mark.parametrize("fast", [False, True], ids=["hbm3", "hbm3e"])
def test_bias_gelu_backward_gpu_plan_per_memory_speed(monkeypatch, fast):
    # On a GPU the bias-gradient backward walks its rows through a stream ring, deeper on
    # fast memory (the H200: BIAS_BWD_STAGES_FAST_MEMORY) than elsewhere (BIAS_BWD_STAGES;
    # with 1 stage: two rows a step, the next rows' loads in registers). The plan alone.
    from tessera.kernels import activation as A
    monkeypatch.setattr(A.H, "on_gpu", lambda a: True)
    monkeypatch.setattr(A.H, "fast_memory", lambda a: fast)
    x, dy = torch.zeros(256, 4096, dtype=torch.float16), torch.zeros(256, 4096, dtype=torch.float16)
    bias = torch.zeros(4096, dtype=torch.float16)
    kw = A._ew_plan(A.GELU, x, bias, 0.0, A.BIAS, False, dy=dy).kw
    stages = A.BIAS_BWD_STAGES_FAST_MEMORY if fast else A.BIAS_BWD_STAGES
    assert A.BIAS_BWD_STAGES_FAST_MEMORY > A.BIAS_BWD_STAGES > 1
    assert kw["STAGES"] == stages and not kw["PREFETCH"] and not kw["TWO_ROWS"]
    monkeypatch.setattr(A, "BIAS_BWD_STAGES", 1)
    monkeypatch.setattr(A, "BIAS_BWD_STAGES_FAST_MEMORY", 1)
    kw = A._ew_plan(A.GELU, x, bias, 0.0, A.BIAS, False, dy=dy).kw
    assert kw["STAGES"] == 1 and kw["PREFETCH"] and kw["TWO_ROWS"]
    assert kw["BLOCK"] == A.BIAS_BWD_BLOCK and kw["num_warps"] == A.BIAS_BWD_WARPS
