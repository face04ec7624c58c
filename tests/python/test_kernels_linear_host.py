"""linear's host paths (kernels/linear.py): the bound launches (_Launch, Kernel.bind), the
fast forward path's plans, and the split-K partials kept per stream (H.split_scratch)
instead of allocated per call. CPU tests, and GPU ones (`gpu` marker) for the CUDA fast
path and the runtime's tensor-map cache (a new pointer or shape is encoded again)."""
import pytest
import torch
import torch.nn.functional as F

import tessera.kernels as tk
from tessera.kernels import _host as H
from tessera.kernels import attention as AT
from tessera.kernels import linear as L


def _inputs(m, k, n, dtype=torch.float32, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(n, k, generator=gen) * k ** -0.5
    b = torch.randn(n, generator=gen)
    return [t.to(device=device, dtype=dtype) for t in (x, w, b)]


def _count_empty(monkeypatch):
    """Records every H.empty call (shape, dtype) from here on."""
    calls = []
    real = H.empty

    def counting(like, shape, dtype=None):
        calls.append((tuple(shape), dtype))
        return real(like, shape, dtype)
    monkeypatch.setattr(H, "empty", counting)
    return calls


def test_split_k_partials_are_allocated_once_not_per_call(monkeypatch):
    m, k, n = 17, 128, 40
    x, w, b = _inputs(m, k, n)
    want = F.relu(F.linear(x.double(), w.double(), b.double()))
    monkeypatch.setattr(H, "_SCRATCH", {})
    calls = _count_empty(monkeypatch)
    tiles = (32, 32, 32, {"split_k": 2})  # (given tiles ask for the split on the CPU too)
    for i in range(5):
        c, _ = L.matmul(x, w, (0, k, 1), (0, 1, k), 1, m, n, k, x, bias=b, act=L.ACT_RELU, tiles=tiles)
        assert torch.allclose(c[0].double(), want, atol=3e-5), f"call {i}"
    partials = [c for c in calls if c[1] == "float32"]
    assert len(partials) == 1, partials  # the first call's scratch, reused by the next four
    assert partials[0][0][0] >= 2 * m * n
    assert [c for c in calls if c[1] is None] == [((1, m, n), None)] * 5  # the outputs, one per call


def test_split_scratch_grows_and_is_kept_per_thread_or_stream(monkeypatch):
    monkeypatch.setattr(H, "_SCRATCH", {})
    like = torch.empty(4)
    p1, c1 = H.split_scratch(like, 1000, 8)
    p2, c2 = H.split_scratch(like, 900, 8)
    assert p2 is p1 and c2 is c1 and p1.dtype == torch.float32 and c1.dtype == torch.int32
    p3, _ = H.split_scratch(like, (1 << 16) + 1, 8)  # larger than the first: a new, larger one
    assert p3 is not p1 and p3.shape[0] >= (1 << 16) + 1
    assert H.split_scratch(like, 10, 8)[0] is p3  # and it stays
    assert H.split_scratch(like, 10, 8, "float64")[0].dtype == torch.float64  # fp64 data: fp64 partials
    assert int(c1[:8].abs().sum()) == 0  # counters are zero between launches


def test_linear_backward_plans_launch_bound_products():
    x, w, b = _inputs(40, 24, 33)
    dz = torch.randn(40, 33)
    plan = L._linear_bwd_plan(x, w, dz, True)
    assert isinstance(plan.dx_launch, L._Launch) and isinstance(plan.dw_launch, L._Launch)
    x.requires_grad_(True)
    w.requires_grad_(True)
    b.requires_grad_(True)
    for _ in range(2):  # the second call: every launch on the bound plans' C++ path
        y = tk.linear_gelu(x, w, b)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dz)
        xr, wr, br = (t.detach().double().requires_grad_(True) for t in (x, w, b))
        ref = torch.autograd.grad(F.gelu(F.linear(xr, wr, br)), (xr, wr, br), dz.double())
        for got, want, name in zip((dx, dw, db), ref, ("dx", "dw", "db")):
            assert torch.allclose(got.double(), want, atol=1e-4), name


def test_fast_forward_plans_once_per_shape_and_leaves_the_rest_to_the_general_path(monkeypatch):
    monkeypatch.setattr(L, "_FAST_LINEAR_PLANS", H.Plans())
    x, w, b = _inputs(33, 40, 24)
    y1 = L._linear_fast(x, w, b, L.ACT_RELU)
    y2 = L._linear_fast(x * 2, w, b, L.ACT_RELU)  # same shapes: the same plan
    assert len(L._FAST_LINEAR_PLANS) == 1
    want = F.relu(F.linear(x.double(), w.double(), b.double()))
    assert torch.allclose(y1.double(), want, atol=3e-5)
    assert torch.allclose(y2.double(), F.relu(F.linear(2 * x.double(), w.double(), b.double())), atol=6e-5)
    # a strided x of the same shape: not fast (the general path copies it), the plan kept
    assert L._linear_fast(x.t().contiguous().t(), w, b, L.ACT_RELU) is None
    assert L._linear_fast(x, w, b, L.ACT_RELU) is not None
    # the pre-activation for autograd's GELU
    y, z = L._fast_linear(x, w, b, L.ACT_GELU, store_z=True)
    assert torch.allclose(z.double(), F.linear(x.double(), w.double(), b.double()), atol=3e-5)
    assert torch.allclose(y.double(), F.gelu(z.double()), atol=3e-5)
    # bad inputs keep the general path's messages
    with pytest.raises(ValueError, match=r"tessera.kernels.linear_relu: weight must be \(out_features, 40\)"):
        tk.linear_relu(x, w[:, :7].contiguous(), b)


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("m,k,n", [(17, 1024, 2048), (4096, 1024, 2048), (300, 256, 512)])
def test_cuda_fast_path_new_pointers_and_shapes(m, k, n):
    """The fast path and the runtime's tensor-map cache: each call's operands are new
    tensors (new addresses: the maps encoded again, or found for a repeated address),
    then another row count on the same kernel (new extents)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for seed, rows in ((1, m), (2, m), (3, m), (4, max(1, m // 2 + 3))):
        x, w, b = _inputs(rows, k, n, torch.float16, "cuda", seed)
        for op, ref in ((tk.linear_relu, lambda v: F.relu(v)), (tk.linear_gelu, lambda v: F.gelu(v))):
            for _ in range(2):
                y = op(x, w, b)
                want = ref(F.linear(x.double(), w.double(), b.double()))
                err = (y.double() - want).abs().max().item()
                assert err <= 4e-3 * max(1.0, want.abs().max().item()), (seed, rows, op.__name__, err)


@pytest.mark.gpu
def test_cuda_small_m_linear_allocates_only_its_output(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, w, b = _inputs(17, 1024, 2048, torch.float16, "cuda", 5)
    want = F.relu(F.linear(x.double(), w.double(), b.double()))
    tk.linear_relu(x, w, b)  # plans, compiles, makes the scratch
    calls = _count_empty(monkeypatch)
    for _ in range(3):
        y = tk.linear_relu(x, w, b)
        assert (y.double() - want).abs().max().item() <= 4e-3 * max(1.0, want.abs().max().item())
    assert calls == []  # y from the plan's allocator; partials and counters from H.split_scratch
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # another stream: its own scratch, same result
        y2 = tk.linear_relu(x, w, b)
    s.synchronize()
    assert (y2.double() - want).abs().max().item() <= 4e-3 * max(1.0, want.abs().max().item())


def test_attention_score_fast_path_keeps_one_plan_across_scales(monkeypatch):
    monkeypatch.setattr(AT, "_FAST_SCORE_PLANS", H.Plans())
    gen = torch.Generator().manual_seed(9)
    q, k = torch.randn(2, 17, 40, generator=gen), torch.randn(2, 33, 40, generator=gen)
    for scale in (0.5, 0.125, 1.0):  # scale is the bound launch's free scalar: no new plan
        got = AT._attention_score_fast(q, k, scale)
        want = q.double() @ k.double().transpose(-1, -2) * scale
        assert torch.allclose(got.double(), want, atol=1e-4), scale
    assert len(AT._FAST_SCORE_PLANS) == 1
    assert AT._attention_score_fast(q, k[:, :, :8].contiguous(), 1.0) is None  # D mismatch: the general path
    assert AT._attention_score_fast(q.transpose(1, 2), k, 1.0) is None
