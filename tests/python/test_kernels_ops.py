"""tessera.kernels ops, forward and backward, against float64 torch references on odd
shapes (1 row, 17 / 33 / 4097 columns) in every dtype, on the CPU; torch.autograd.gradcheck
in float64; GPU variants (marked gpu) run the same cases on CUDA tensors."""
import math
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tessera.kernels as tk  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# Relative tolerances against the float64 reference (scaled by the reference's size):
# a few roundings of the output type, plus fp32 accumulation over up to 4097 terms.
TOL = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float64: 1e-10}
GRAD_TOL = {torch.float32: 5e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float64: 1e-9}
# Every dtype gets the odd shapes; fp32 also the long rows (4097 columns).
SHAPES = {"1x17": (1, 17), "2x3x33": (2, 3, 33)}
LONG = {"6x4097": (6, 4097)}


def _rope_tables(seq, half, dtype, gen):
    ang = torch.randn(seq, half, generator=gen, dtype=torch.float64)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _ref_rope(x, w, cos, sin, eps=1e-6):
    d = x.shape[-1]
    n = F.rms_norm(x, (d,), w, eps)
    n1, n2 = n[..., : d // 2], n[..., d // 2:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([n1 * c - n2 * s, n2 * c + n1 * s], -1)


def _targets(shape, gen):
    rows, n = math.prod(shape[:-1]), shape[-1]
    t = torch.randint(0, n, (rows,), generator=gen)
    if rows > 1:
        t[1] = -100  # one ignored row
    return t


class Case:
    """An op: make(shape, dtype, gen) -> inputs; run(*inputs) with tk; ref(*inputs) in torch."""

    def __init__(self, name, make, run, ref, long_ok=True, constant=(), before_relu=None):
        self.name, self.make, self.run, self.ref, self.long_ok = name, make, run, ref, long_ok
        self.constant = constant  # indices of float inputs that get no gradient (tables)
        # For ops ending in a ReLU: the reference without it. The ReLU's mask is then
        # tk's own output sign: a pre-activation within rounding of 0 takes either side
        # in fp32 vs float64 (a 4096-column layer norm gives ~1 such element per 10^6),
        # flipping its gradient and, through the row's sums, the whole row's.
        self.before_relu = before_relu


def _x(shape, dtype, gen, scale=1.0, shift=0.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype)


def _vec(n, dtype, gen):
    return _x((n,), dtype, gen)


def _rows2d(shape):
    return (math.prod(shape[:-1]), shape[-1])


CASES = [
    Case("layer_norm", lambda s, d, g: [_x(s, d, g, 2, 0.5), _vec(s[-1], d, g), _vec(s[-1], d, g)],
         lambda x, w, b: tk.layer_norm(x, w, b), lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)),
    Case("layer_norm_relu", lambda s, d, g: [_x(s, d, g), _vec(s[-1], d, g), _vec(s[-1], d, g)],
         lambda x, w, b: tk.layer_norm(x, w, b, relu=True),
         lambda x, w, b: F.relu(F.layer_norm(x, (x.shape[-1],), w, b)),
         before_relu=lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b)),
    Case("layer_norm_noaffine", lambda s, d, g: [_x(s, d, g)], lambda x: tk.layer_norm(x),
         lambda x: F.layer_norm(x, (x.shape[-1],))),
    Case("rms_norm", lambda s, d, g: [_x(s, d, g), _vec(s[-1], d, g)],
         lambda x, w: tk.rms_norm(x, w), lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6)),
    Case("residual_add_layer_norm", lambda s, d, g: [_x(s, d, g), _x(s, d, g), _vec(s[-1], d, g), _vec(s[-1], d, g)],
         lambda x, r, w, b: tk.residual_add_layer_norm(x, r, w, b),
         lambda x, r, w, b: (F.layer_norm(x + r, (x.shape[-1],), w, b), x + r)),
    Case("residual_add_rms_norm", lambda s, d, g: [_x(s, d, g), _x(s, d, g), _vec(s[-1], d, g)],
         lambda x, r, w: tk.residual_add_rms_norm(x, r, w),
         lambda x, r, w: (F.rms_norm(x + r, (x.shape[-1],), w, 1e-6), x + r)),
    Case("softmax", lambda s, d, g: [_x(s, d, g, 3)], lambda x: tk.softmax(x), lambda x: torch.softmax(x, -1)),
    Case("softmax_dim0", lambda s, d, g: [_x(s, d, g, 3)], lambda x: tk.softmax(x, 0), lambda x: torch.softmax(x, 0),
         long_ok=False),
    Case("log_softmax", lambda s, d, g: [_x(s, d, g, 3)], lambda x: tk.log_softmax(x),
         lambda x: torch.log_softmax(x, -1)),
    Case("cross_entropy", lambda s, d, g: [_x(_rows2d(s), d, g, 3), _targets(s, g)],
         lambda x, t: tk.cross_entropy(x, t), lambda x, t: F.cross_entropy(x, t)),
    Case("cross_entropy_sum_smoothing", lambda s, d, g: [_x(_rows2d(s), d, g, 3), _targets(s, g)],
         lambda x, t: tk.cross_entropy(x, t, reduction="sum", label_smoothing=0.1),
         lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.1), long_ok=False),
    Case("cross_entropy_none", lambda s, d, g: [_x(_rows2d(s), d, g, 3), _targets(s, g)],
         lambda x, t: tk.cross_entropy(x, t, reduction="none"),
         lambda x, t: F.cross_entropy(x, t, reduction="none"), long_ok=False),
    Case("add_relu", lambda s, d, g: [_x(s, d, g), _x(s, d, g)], tk.add_relu, lambda a, b: F.relu(a + b),
         before_relu=lambda a, b: a + b),
    Case("mul_tanh", lambda s, d, g: [_x(s, d, g), _x(s, d, g)], tk.mul_tanh, lambda a, b: torch.tanh(a * b)),
    Case("bias_gelu", lambda s, d, g: [_x(s, d, g, 2), _vec(s[-1], d, g)], tk.bias_gelu, lambda a, b: F.gelu(a + b)),
    Case("bias_gelu_tanh", lambda s, d, g: [_x(s, d, g, 2), _vec(s[-1], d, g)],
         lambda a, b: tk.bias_gelu(a, b, "tanh"), lambda a, b: F.gelu(a + b, approximate="tanh")),
    Case("swiglu", lambda s, d, g: [_x(s, d, g, 2), _x(s, d, g)], tk.swiglu, lambda a, b: F.silu(a) * b),
    Case("geglu", lambda s, d, g: [_x(s, d, g, 2), _x(s, d, g)], tk.geglu, lambda a, b: F.gelu(a) * b),
    Case("geglu_tanh", lambda s, d, g: [_x(s, d, g, 2), _x(s, d, g)], lambda a, b: tk.geglu(a, b, "tanh"),
         lambda a, b: F.gelu(a, approximate="tanh") * b, long_ok=False),
    Case("reduce_sum_squared_last", lambda s, d, g: [_x(s, d, g)], lambda x: tk.reduce_sum_squared(x, -1),
         lambda x: (x * x).sum(-1)),
    Case("reduce_sum_squared_dim0", lambda s, d, g: [_x(s, d, g)], lambda x: tk.reduce_sum_squared(x, 0),
         lambda x: (x * x).sum(0)),
    Case("reduce_mean_abs_dim0_keepdim", lambda s, d, g: [_x(s, d, g)], lambda x: tk.reduce_mean_abs(x, 0, True),
         lambda x: x.abs().mean(0, keepdim=True)),
    Case("reduce_mean_abs_last", lambda s, d, g: [_x(s, d, g)], lambda x: tk.reduce_mean_abs(x, -1),
         lambda x: x.abs().mean(-1), long_ok=False),
]

# Matmul-based and rotary ops take their own shapes (the inner dimension is the odd one).
MM_CASES = [
    Case("attention_score", lambda s, d, g: [_x((2, 3, 5, s), d, g), _x((2, 3, 9, s), d, g)],
         lambda q, k: tk.attention_score(q, k, 0.25), lambda q, k: q @ k.transpose(-1, -2) * 0.25),
    Case("linear_relu", lambda s, d, g: [_x((2, 5, s), d, g), _x((19, s), d, g, 0.3), _vec(19, d, g)],
         tk.linear_relu, lambda x, w, b: F.relu(F.linear(x, w, b)), before_relu=F.linear),
    Case("linear_gelu", lambda s, d, g: [_x((7, s), d, g), _x((19, s), d, g, 0.3), _vec(19, d, g)],
         tk.linear_gelu, lambda x, w, b: F.gelu(F.linear(x, w, b))),
    Case("linear_gelu_tanh_nobias", lambda s, d, g: [_x((7, s), d, g), _x((19, s), d, g, 0.3)],
         lambda x, w: tk.linear_gelu(x, w, approximate="tanh"),
         lambda x, w: F.gelu(F.linear(x, w), approximate="tanh")),
    Case("rms_norm_rope", lambda s, d, g: [_x((2, 5, 3, s), d, g), _vec(s, d, g), *_rope_tables(5, s // 2, d, g)],
         lambda x, w, c, sn: tk.rms_norm_rope(x, w, c, sn),
         lambda x, w, c, sn: _ref_rope(x, w, c, sn), constant=(2, 3)),
]
MM_SIZES = {"k17": 17, "k40": 40}  # rms_norm_rope needs an even head_dim: 17 -> 18
ALL_CASES = CASES + MM_CASES


def _as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def _close(got, want, tol, what):
    got = got.detach().double().cpu()
    want = want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item() if want.numel() else 0.0
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol * scale:.3g}"


def check_case(case, shape, dtype, device="cpu", backward=True):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{case.name} {shape}".encode()))  # the same data every run
    inputs = [t.to(device) for t in case.make(shape, dtype, gen)]
    fl = [t.is_floating_point() and i not in case.constant for i, t in enumerate(inputs)]
    xs = [t.clone().requires_grad_(backward and f) for t, f in zip(inputs, fl)]
    xr = [t.double().cpu().requires_grad_(backward) if f else t.cpu() for t, f in zip(inputs, fl)]
    ys = _as_tuple(case.run(*xs))
    if case.before_relu is not None:
        yr = (case.before_relu(*xr) * (ys[0].detach().cpu() > 0),)
    else:
        yr = _as_tuple(case.ref(*xr))
    for i, (y, r) in enumerate(zip(ys, yr)):
        assert y.dtype == dtype and y.device.type == torch.device(device).type
        _close(y, r, TOL[dtype], f"{case.name} output {i}")
    if not backward:
        return
    # Upstream gradients are rounded to the op's dtype for both sides.
    gs = [torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype) for y in ys]
    torch.autograd.backward(list(ys), [g.to(device) for g in gs])
    torch.autograd.backward(list(yr), [g.double() for g in gs])
    for i, (x, r) in enumerate(zip(xs, xr)):
        if x.requires_grad:
            assert x.grad is not None, f"{case.name}: no gradient for input {i}"
            assert x.grad.dtype == dtype
            _close(x.grad, r.grad, GRAD_TOL[dtype], f"{case.name} grad of input {i}")


def _dt_id(d):
    return str(d).replace("torch.", "")


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt_id)
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_forward_backward(case, shape, dtype):
    check_case(case, shape, dtype)


@pytest.mark.parametrize("case", [c for c in CASES if c.long_ok], ids=lambda c: c.name)
def test_op_long_rows_fp32(case):
    check_case(case, LONG["6x4097"], torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt_id)
@pytest.mark.parametrize("k", list(MM_SIZES.values()), ids=list(MM_SIZES))
@pytest.mark.parametrize("case", MM_CASES, ids=lambda c: c.name)
def test_matmul_and_rope_ops(case, k, dtype):
    if case.name == "rms_norm_rope":
        k += k % 2
    check_case(case, k, dtype)


# The GPU launch plans of the reductions (kernels/reduce.py: row slices whose partials
# the last slice to finish sums, the 1-D row kernel for the last dimension) run here on the CPU, on
# shapes tall enough to be sliced; column_sum finishes bias_gelu's and layer_norm's
# backward passes.
GPU_PLAN_CASES = ["reduce_sum_squared_last", "reduce_sum_squared_dim0", "reduce_mean_abs_dim0_keepdim",
                  "reduce_mean_abs_last", "bias_gelu", "layer_norm"]


@pytest.mark.parametrize("shape", [(2000, 33), (3, 700, 5), (1, 4097)], ids=["2000x33", "3x700x5", "1x4097"])
@pytest.mark.parametrize("name", GPU_PLAN_CASES)
def test_reduction_gpu_launch_plans_on_the_cpu(monkeypatch, name, shape):
    from tessera.kernels import activation as A
    from tessera.kernels import norm as N
    from tessera.kernels import reduce as R
    monkeypatch.setattr(R, "_gpu_plan", lambda x: True)
    monkeypatch.setattr(N, "CPU_SPLIT_COST_ELEMS", 0)  # every norm backward through its column sum
    # The backward plans keep their column sums' launches: plan again under the GPU plan (and after it).
    for plans in (N._BWD_PLANS, A._BWD_PLANS):
        plans.clear()
    case = next(c for c in ALL_CASES if c.name == name)
    check_case(case, shape, torch.float32)
    for plans in (N._BWD_PLANS, A._BWD_PLANS):
        plans.clear()


# Sizes past the CPU matmul's largest tile (128 x 128 x 128): several programs in each
# direction, several K steps with a masked tail, and the backward products' transposed
# operands (dW = dz^T @ x reads dz M-major; dk = ds^T @ q) on masked edges.
BIG_MM_CASES = [
    Case("attention_score_big", lambda s, d, g: [_x((2, 3, 140, 80), d, g), _x((2, 3, 150, 80), d, g)],
         lambda q, k: tk.attention_score(q, k), lambda q, k: q @ k.transpose(-1, -2) * 80 ** -0.5),
    Case("linear_relu_big", lambda s, d, g: [_x((3, 131, 200), d, g), _x((300, 200), d, g, 0.1), _vec(300, d, g)],
         tk.linear_relu, lambda x, w, b: F.relu(F.linear(x, w, b)), before_relu=F.linear),
    Case("linear_gelu_big", lambda s, d, g: [_x((393, 200), d, g), _x((300, 200), d, g, 0.1), _vec(300, d, g)],
         tk.linear_gelu, lambda x, w, b: F.gelu(F.linear(x, w, b))),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt_id)
@pytest.mark.parametrize("case", BIG_MM_CASES, ids=lambda c: c.name)
def test_matmul_ops_past_one_tile(case, dtype):
    check_case(case, None, dtype)


def _gradcheck_inputs(case):
    gen = torch.Generator().manual_seed(7)
    shape = 12 if case in MM_CASES else (3, 7)
    inputs = case.make(shape, torch.float64, gen)
    return [t.requires_grad_(t.is_floating_point() and i not in case.constant) for i, t in enumerate(inputs)]


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_gradcheck_float64(case):
    inputs = _gradcheck_inputs(case)
    if case.name == "add_relu":  # keep away from the kink at 0, where finite differences disagree
        inputs[0].data += torch.sign(inputs[0].data + inputs[1].data) * 0.2
    if case.name in ("layer_norm_relu", "linear_relu"):
        pytest.skip("ReLU kinks make finite differences unreliable; covered against float64 autograd")
    if case.name.startswith("reduce_mean_abs"):
        inputs[0].data += torch.sign(inputs[0].data) * 0.2
    assert torch.autograd.gradcheck(lambda *a: case.run(*a), inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------------------- numpy inputs

NP_DTYPES = ["float32", "float64", "float16"]


@pytest.mark.parametrize("np_dtype", NP_DTYPES)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_numpy_inputs_match_torch_path(case, np_dtype):
    """numpy in, numpy out; the same numbers as the torch CPU path."""
    tdt = getattr(torch, np_dtype)
    gen = torch.Generator().manual_seed(3)
    shape = 18 if case in MM_CASES else (3, 33)
    inputs = case.make(shape, tdt, gen)
    want = _as_tuple(case.run(*inputs))
    got = _as_tuple(case.run(*[t.numpy() for t in inputs]))
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == np.dtype(np_dtype)
        np.testing.assert_array_equal(g, w.numpy())


# --------------------------------------------------------------------------- GPU (the lead's round)

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=_dt_id)
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_gpu_op_forward_backward(case, dtype):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if case in MM_CASES:
        check_case(case, 40, dtype, device="cuda")
    else:
        for shape in list(SHAPES.values()) + ([LONG["6x4097"]] if case.long_ok else []):
            check_case(case, shape, dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in ALL_CASES if not c.name.startswith("cross_entropy")], ids=lambda c: c.name)
def test_gpu_cupy_arrays_match_torch_cuda(case):
    """CuPy in, CuPy out: the same numbers as the torch CUDA path (forward)."""
    cupy = pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gen = torch.Generator().manual_seed(5)
    inputs = [t.cuda() for t in case.make(40 if case in MM_CASES else (3, 33), torch.float32, gen)]
    want = _as_tuple(case.run(*inputs))
    got = _as_tuple(case.run(*[cupy.asarray(t) for t in inputs]))
    for g, w in zip(got, want):
        assert isinstance(g, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(g), w.cpu().numpy())


@pytest.mark.parametrize("rows", [0, 70])
def test_layer_norm_bias_without_weight_backward(rows):
    """A bias but no weight: dbias takes the partial rows' only columns; no rows: zero
    gradients for the parameters."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(rows, 40, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(40, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(40, generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(rows, 40, generator=g, dtype=torch.float64)
    want = torch.autograd.grad(F.layer_norm(x, (40,), None, b), (x, b), dy)
    got = torch.autograd.grad(tk.layer_norm(x, None, b), (x, b), dy)
    for gv, wv in zip(got, want):
        torch.testing.assert_close(gv, wv, rtol=1e-9, atol=1e-9)
    want = torch.autograd.grad(F.layer_norm(x, (40,), w, b), (x, w, b), dy)
    got = torch.autograd.grad(tk.layer_norm(x, w, b), (x, w, b), dy)
    for gv, wv in zip(got, want):
        torch.testing.assert_close(gv, wv, rtol=1e-9, atol=1e-9)
