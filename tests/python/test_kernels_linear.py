"""linear_relu / linear_gelu / attention_score on shapes that cross tile edges (M = 1,
17, 4097 rows; K not a multiple of the 64-wide K tile; N not a multiple of 128),
forward and backward against float64 torch references, on the CPU and (marked gpu)
on CUDA; and, without a GPU, the PTX of kernels/linear.py's matmul kernel in the
configurations the host code launches on an H100 (tensor-core instructions fed by a
TMA or cp.async ring, 16-byte output stores)."""
import re
import shutil
import subprocess
import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tessera  # noqa: E402
import tessera.kernels as tk  # noqa: E402
import tessera.language as tl  # noqa: E402
from tessera.kernels import attention as AT  # noqa: E402
from tessera.kernels import linear as L  # noqa: E402

PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                  else None)
# Relative to the reference's largest magnitude: roundings of the output type plus
# fp32 accumulation (fp32 inputs run as three tf32 products, fp32-accurate).
TOL = {torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
GRAD_TOL = {torch.float32: 5e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}

# (rows, in_features K, out_features N): one row; 17 rows and K = 40 (one partial K
# tile); 4097 rows (one row into a new M tile) with K = 200 (three full K tiles and a
# partial one) and N = 130 (two columns into a new N tile); K = 17 (odd: no 16-byte
# rows, no cp.async ring).
LINEAR_SHAPES = [(1, 64, 19), (17, 40, 130), (4097, 200, 130), (33, 17, 64)]
LINEAR_OPS = {
    "relu": (tk.linear_relu, lambda x, w, b: F.relu(F.linear(x, w, b))),
    "gelu": (tk.linear_gelu, lambda x, w, b: F.gelu(F.linear(x, w, b))),
    "gelu_tanh": (lambda x, w, b: tk.linear_gelu(x, w, b, approximate="tanh"),
                  lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")),
}
# q (..., M, D), k (..., N, D): heads over two batch dims; 17 queries against 130 keys;
# D = 17 (odd) and D = 128 (two K tiles).
SCORE_SHAPES = [((2, 3, 130, 64), (2, 3, 77, 64)), ((1, 17, 17), (1, 130, 17)), ((4, 65, 128), (4, 257, 128))]


def _close(got, want, tol, what):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item() if want.numel() else 0.0
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol * scale:.3g}"


def _check(run, ref, inputs, dtype, device, backward=True):
    """run(*inputs on device, dtype) vs ref(*inputs in float64): output and, with
    backward, the gradient of every input for one random upstream gradient."""
    gen = torch.Generator().manual_seed(11)
    xs = [t.to(device=device, dtype=dtype).requires_grad_(backward) for t in inputs]
    xr = [t.double().requires_grad_(backward) for t in [x.detach().cpu() for x in xs]]
    y, yr = run(*xs), ref(*xr)
    assert y.dtype == dtype and y.device.type == torch.device(device).type
    _close(y, yr, TOL[dtype], "output")
    if not backward:
        return
    g = torch.randn(y.shape, generator=gen, dtype=torch.float64).to(dtype)
    y.backward(g.to(device))
    yr.backward(g.double())
    for i, (x, r) in enumerate(zip(xs, xr)):
        _close(x.grad, r.grad, GRAD_TOL[dtype], f"grad of input {i}")


def _linear_inputs(m, k, n, bias=True):
    gen = torch.Generator().manual_seed(m * 7919 + k * 31 + n)
    x = torch.randn(m, k, generator=gen, dtype=torch.float64)
    w = torch.randn(n, k, generator=gen, dtype=torch.float64) * k ** -0.5
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    return [x, w, b] if bias else [x, w]


def _score_inputs(qs, ks):
    gen = torch.Generator().manual_seed(sum(qs) + 3 * sum(ks))
    return [torch.randn(qs, generator=gen, dtype=torch.float64), torch.randn(ks, generator=gen, dtype=torch.float64)]


def _devices_and_dtypes():
    out = [("cpu", torch.float32)]
    out += [pytest.param("cuda", d, marks=pytest.mark.gpu, id=f"cuda-{str(d)[6:]}")
            for d in (torch.float16, torch.bfloat16, torch.float32)]
    return out


def _skip_without(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.parametrize("device,dtype", _devices_and_dtypes())
@pytest.mark.parametrize("shape", LINEAR_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", list(LINEAR_OPS))
def test_linear_forward_backward(op, shape, device, dtype):
    _skip_without(device)
    run, ref = LINEAR_OPS[op]
    _check(run, ref, _linear_inputs(*shape), dtype, device)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["relu", "gelu"])
def test_linear_wide_tiles_on_gpu(op, dtype):
    """Products large enough for _gpu_tiles' 128x256 tiles (4 stages, TMA-filled on
    sm_90a), with every edge: 4097 rows (one into a new row block), K = 1032 (a partial
    K tile), N = 2056 (a partial 256-column tile); dx = dz @ W takes the wide tiles
    too. Through autograd (the general path) and without grad (the CUDA fast path)."""
    _skip_without("cuda")
    m, k, n = 4097, 1032, 2056
    assert L._gpu_tiles("float16", m, n, k, 1)[:2] == (128, 256)
    assert L._gpu_tiles("float16", m, k, n, 1)[:2] == (128, 256)
    run, ref = LINEAR_OPS[op]
    inputs = _linear_inputs(m, k, n)
    # ReLU's gradient steps at 0: among 8.4M outputs a few pre-activations within the fp32
    # accumulation's error of 0 fall on the other side than in float64, each moving a
    # dx element by |dy * w| (up to ~0.5; seen: 0.15 in fp16). GELU's backward runs the
    # same two products and is checked.
    _check(run, ref, inputs, dtype, "cuda", backward=op != "relu")
    x, w, b = (t.to("cuda", dtype) for t in inputs)
    with torch.no_grad():
        _close(run(x, w, b), ref(*inputs), TOL[dtype], "output without grad")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("m,k,n", [(4096, 64, 2048), (1000, 48, 333)], ids=lambda v: str(v))
def test_linear_one_k_step_on_gpu(m, k, n, dtype):
    """K <= 64: _gpu_tiles' persistent 64x128 tiles, three CTAs per SM (the scores'
    choice), with partial row and column tiles (1000 x 333) and a K below its block."""
    _skip_without("cuda")
    assert L._gpu_tiles("float16", m, n, k, 1)[:2] == (64, 128)
    run, ref = LINEAR_OPS["gelu"]
    inputs = _linear_inputs(m, k, n)
    _check(run, ref, inputs, dtype, "cuda")
    x, w, b = (t.to("cuda", dtype) for t in inputs)
    with torch.no_grad():
        _close(run(x, w, b), ref(*inputs), TOL[dtype], "output without grad")


@pytest.mark.parametrize("device,dtype", _devices_and_dtypes())
def test_linear_without_bias_and_leading_dims(device, dtype):
    _skip_without(device)
    x, w = _linear_inputs(6 * 17, 72, 130, bias=False)
    _check(lambda a, b: tk.linear_relu(a.reshape(6, 17, 72), b), lambda a, b: F.relu(F.linear(a.reshape(6, 17, 72), b)),
           [x, w], dtype, device)


@pytest.mark.parametrize("device,dtype", _devices_and_dtypes())
def test_linear_strided_inputs_take_the_general_path(device, dtype):
    """Transposed x and weight views, an nn.Parameter weight, no grad: the same numbers
    as contiguous inputs (the CUDA fast path takes only contiguous tensors)."""
    _skip_without(device)
    x, w, b = (t.to(device=device, dtype=dtype) for t in _linear_inputs(130, 96, 70))
    want = tk.linear_gelu(x, w, b)
    xt = x.t().contiguous().t()
    wt = torch.nn.Parameter(w.t().contiguous().t(), requires_grad=False)
    assert not xt.is_contiguous() and not wt.is_contiguous()
    with torch.no_grad():
        got = tk.linear_gelu(xt, wt, b)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    _close(want, F.gelu(F.linear(x.double(), w.double(), b.double())), TOL[dtype], "output")


@pytest.mark.parametrize("device,dtype", _devices_and_dtypes())
@pytest.mark.parametrize("shapes", SCORE_SHAPES, ids=lambda s: f"{'x'.join(map(str, s[0]))}-{s[1][-2]}")
def test_attention_score_forward_backward(shapes, device, dtype):
    _skip_without(device)
    _check(lambda q, k: tk.attention_score(q, k), lambda q, k: q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5,
           _score_inputs(*shapes), dtype, device)


@pytest.mark.parametrize("device,dtype", _devices_and_dtypes())
def test_attention_score_scale_zero_and_one(device, dtype):
    _skip_without(device)
    q, k = (t.to(device=device, dtype=dtype) for t in _score_inputs((2, 17, 40), (2, 33, 40)))
    assert torch.count_nonzero(tk.attention_score(q, k, 0.0)) == 0
    _close(tk.attention_score(q, k, 1.0), q.double() @ k.double().transpose(-1, -2), TOL[dtype], "scale 1")


def test_fast_paths_match_the_general_path():
    """The host fast paths (taken for contiguous CUDA tensors) run here on CPU tensors:
    their launch arguments give the general path's numbers (within fp32 accumulation
    order: the fast paths use the GPU tiles), and anything unusual is left to the
    general path (None)."""
    for (m, k, n) in LINEAR_SHAPES:
        x, w, b = (t.float() for t in _linear_inputs(m, k, n))
        for act in (L.ACT_RELU, L.ACT_GELU, L.ACT_GELU_TANH):
            for bias in (b, None):
                want = L.linear_forward(x, w, bias, act)[0]
                _close(L._linear_fast(x, w, bias, act), want, TOL[torch.float32], f"linear {m}x{k}x{n} act {act}")
        x3 = x.reshape(1, m, k)
        _close(L._linear_fast(x3, w, b, L.ACT_RELU), L.linear_forward(x3, w, b, L.ACT_RELU)[0], 1e-5, "3-d x")
    for qs, ks in SCORE_SHAPES:
        q, k = (t.float() for t in _score_inputs(qs, ks))
        _close(AT._attention_score_fast(q, k, 0.3), AT.attention_score_forward(q, k, 0.3), TOL[torch.float32],
               f"attention_score {qs} {ks}")
    x, w, b = (t.float() for t in _linear_inputs(17, 40, 19))
    assert L._linear_fast(x.t().contiguous().t(), w, b, L.ACT_RELU) is None  # strided
    assert L._linear_fast(x, w.double(), b, L.ACT_RELU) is None  # mixed dtypes
    assert L._linear_fast(x.double(), w.double(), b.double(), L.ACT_RELU) is None  # fp64: small tiles
    assert L._linear_fast(x, w, b[:5], L.ACT_RELU) is None  # bad bias: the general path reports it
    assert L._linear_fast(x, w[:, :7], b, L.ACT_RELU) is None
    q, k = (t.float() for t in _score_inputs((2, 17, 40), (2, 33, 40)))
    assert AT._attention_score_fast(q, k[:, :, :8].contiguous(), 1.0) is None  # D mismatch
    assert AT._attention_score_fast(q, k[:1], 1.0) is None  # batch mismatch
    assert AT._attention_score_fast(q.transpose(1, 2), k, 1.0) is None


# --------------------------------------------------------------------------- persistent kernel

# (batch, M, K, N, A M-major, B K-major): linear's x @ W^T, dX = dZ W (N-major B) and dW
# = dZ^T X (M-major A), and batched scores; every edge (partial row, column and K tiles).
PERSISTENT_PRODUCTS = [(1, 97, 70, 45, False, True), (1, 97, 70, 45, False, False), (1, 45, 70, 97, True, False),
                       (3, 40, 33, 50, False, True)]


# (batch, M, K, N, A M-major, B K-major), activation: _persistent_product's ragged cases for
# the persistent kernel's GPU variants (test_warp_specialize.py, test_ping_pong.py): odd and
# even tile counts per program, M and N not multiples of the tile, bias-free N = 520, a
# transposed shape, a full 2048^2 product, N-major B (dX = dZ W), K = 200 (400-byte rows: a
# multiple of 8 elements only, which the launch also specializes on).
RAGGED_PRODUCTS = [((1, 4097, 80, 1030, False, True), act) for act in (L.ACT_RELU, L.ACT_GELU, L.ACT_NONE)] + [
    ((1, 300, 48, 520, False, True), L.ACT_RELU),
    ((1, 1030, 64, 4097, False, True), L.ACT_GELU),
    ((1, 2048, 1024, 2048, False, True), L.ACT_RELU),
    ((1, 4097, 80, 1030, False, False), L.ACT_NONE),
    ((1, 1000, 200, 1030, False, True), L.ACT_RELU)]


def _persistent_product(device, dtype, batch, m, k, n, a_mmajor, b_kmajor, tiles, act=L.ACT_NONE):
    """(C from the persistent kernel through L.matmul's plan, float64 reference)."""
    gen = torch.Generator().manual_seed(m + 7 * k + 13 * n + batch)
    a = torch.randn(batch, k, m, generator=gen).transpose(1, 2) if a_mmajor else torch.randn(batch, m, k, generator=gen)
    b = torch.randn(batch, n, k, generator=gen).transpose(1, 2) if b_kmajor else torch.randn(batch, k, n, generator=gen)
    bias = torch.randn(n, generator=gen) if act != L.ACT_NONE else None
    ad, bd = a.to(device, dtype), b.to(device, dtype)
    biasd = bias.to(device, dtype) if bias is not None else None
    c, _ = L.matmul(ad, bd, ad.stride(), bd.stride(), batch, m, n, k, ad, bias=biasd, act=act, tiles=tiles)
    want = a.double() @ b.double() + (bias.double() if bias is not None else 0)
    want = {L.ACT_NONE: want, L.ACT_RELU: torch.relu(want), L.ACT_GELU: F.gelu(want)}[act]
    return c, want


@pytest.mark.parametrize("product", PERSISTENT_PRODUCTS, ids=lambda p: "b{}_{}x{}x{}_am{:d}_bk{:d}".format(*p))
def test_persistent_kernel_on_the_cpu(product, monkeypatch):
    # _persistent_matmul_kernel compiled for the CPU (L.matmul's GPU plan, with 4 "SMs"):
    # 4 or 8 programs over 12-36 tiles of 32x16x16, each program's flat loop crossing
    # tiles (and batches) with the accumulator reset.
    assert L._sm_count(torch.empty(1)) == 4
    kernel, grid, extra, _ = L._gpu_launch(torch.empty(1), 97, 45, 1, 32, 16, {"persistent": 2})
    assert kernel is L._persistent_matmul_kernel and grid == (8, 1, 1) and extra == (1,)
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(L, "_sm_count", lambda like: 4)
    for per_sm, act in ((1, L.ACT_NONE), (2, L.ACT_RELU)):
        c, want = _persistent_product("cpu", torch.float32, *product, (32, 16, 16, {"persistent": per_sm}), act)
        _close(c, want, TOL[torch.float32], f"persistent x{per_sm}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["float16", "bfloat16", "float32"])
def test_persistent_kernel_on_gpu(dtype):
    # More tiles than programs (297 tiles of 128x128 for 4097x1030, 180 for the 4 heads
    # of 513x1030): programs take 2-3 tiles each across masked row, column and K edges
    # (K = 200: three full K tiles and a partial one), in every layout and with each
    # ring depth the sweep tries; fp32 runs tf32x3 from the cp.async ring.
    _skip_without("cuda")
    # 4+ stages keep a wgmma group in flight (waited for in the epilogue's branch).
    for per_sm, stages, bn, bk in ((1, 4, 128, 64), (2, 2, 128, 64), (1, 3, 256, 64), (1, 6, 256, 32)):
        if dtype == torch.float32 and bn == 256:
            continue
        tiles = (128, bn, 32 if dtype == torch.float32 else bk, {"num_warps": 8, "num_stages": stages,
                                                                "persistent": per_sm})
        for product in [(1, 4097, 200, 1030, False, True), (1, 4097, 200, 1030, False, False),
                        (1, 1030, 200, 4097, True, False), (4, 513, 64, 1030, False, True)]:
            for act in (L.ACT_NONE, L.ACT_GELU) if product[0] == 1 and product[5] else (L.ACT_NONE,):
                c, want = _persistent_product("cuda", dtype, *product, tiles, act)
                _close(c, want, TOL[dtype], f"persistent x{per_sm} s{stages} 128x{bn} {product} act {act}")


# --------------------------------------------------------------------------- PTX (no GPU needed)

def _compiled(case, dtype="fp16", act=L.ACT_RELU, rows=1024):
    """kernels/linear.py's matmul kernel compiled for sm_90a as the host code launches it
    on a GPU for `case` (the strides equal to 1 specialize as constants, as a launch
    does), with the tiles _gpu_tiles picks for a rows x 1024 output (K 1024): 128x128
    for 1024 rows, 128x256 (4 stages) from 16384 rows on; dW's M-major A 128x128, 4
    stages. attention_score's q k^T is the one batched product (8 heads)."""
    unit = {"fwd": ("s_ak", "s_bk"), "dx": ("s_ak", "s_bn"), "dw": ("s_am", "s_bn"), "score": ("s_ak", "s_bk")}[case]
    name = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[dtype]
    bm, bn, bk, opts = L._gpu_tiles(name, rows, 1024, 1024, 8 if case == "score" else 1, a_mmajor=case == "dw")
    sig = {p: f"*{dtype}:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn", "s_cb")
                if p not in unit})
    sig["scale"] = "fp32"
    ce = {p: 1 for p in unit}
    ce.update(A_MMAJOR=case == "dw", B_KMAJOR=case in ("fwd", "score"), ACT=act if case == "fwd" else L.ACT_NONE,
              HAS_BIAS=case == "fwd", STORE_Z=False, SCALE=case == "score", ACC=tl.float32,
              BATCHED=case == "score", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=L.GROUP_M)
    return tessera.compile(L._matmul_kernel, sig, ce, target="cuda:90a", **opts)


def _ptx(case, dtype="fp16", act=L.ACT_RELU):
    return _compiled(case, dtype, act).asm["ptx"]


def _k_loop(ptx, ring="cp.async.wait_group"):
    """The PTX between the K loop's first and last `ring` wait (its body)."""
    lines = ptx.splitlines()
    waits = [i for i, ln in enumerate(lines) if ring in ln]
    assert waits, f"no {ring}"
    return "\n".join(lines[waits[0]:waits[-1] + 1])


def _wgmma_steps(ptx, dtype, n=128):
    # 128xNx64 over two warpgroups: 4 wgmma m64nNk16 per K step, operands in shared
    # memory; the two flags are imm-trans-a / imm-trans-b.
    t = {"fp16": "f16", "bf16": "bf16"}[dtype]
    return re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k16\.f32\.{t}\.{t} .*, p, 1, 1, (\d), (\d);", ptx)


# Tensor maps per case (tma_nvptx.cpp's spec: parameter count | per load: base parameter,
# element bytes, swizzle, box inner x outer, extents inner x outer, row stride; i<n> =
# the n-th parameter: A B BIAS C Z M N K s_ab 0..8, then the strides that are not 1).
# fwd: A = x, box 64 (K) x 128 (M) over K x M, rows s_am; B = W as stored, box 64 (K)
# x BLOCK_N (N) over K x N, rows s_bn. dx = dz @ W: B is N-major, 64-column boxes (two
# or four per stage) over N x K, rows s_bk. dw = dz^T @ x: A is M-major, two 64-row
# boxes over M x K.
TMA_MAPS = {"fwd": "14|0:2:128:64:128:i7:i5:i9|1:2:128:64:{n}:i7:i6:i11",
            "dx": "14|0:2:128:64:128:i7:i5:i9|1:2:128:64:64:i6:i7:i11",
            "dw": "14|0:2:128:64:64:i5:i7:i9|1:2:128:64:64:i6:i7:i11"}


def test_gpu_plans_pick_the_tiles_of_their_layouts(monkeypatch):
    # linear's products as _matmul_plan plans them on a GPU (the layout decides what
    # _gpu_tiles is told): x @ W^T and dX wide, dW (M-major A) 4 stages, K = 1004 (rows
    # not provably 16-byte aligned: no ring) the narrow tile.
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    like = torch.empty(1, dtype=torch.float16)

    def tiles(m, k, n, a_strides, b_strides):
        kernel, grid, sizes, meta = L._matmul_plan(a_strides, b_strides, 1, m, n, k, like, None, L.ACT_NONE, None,
                                                   False, None)
        assert kernel is L._matmul_kernel and grid == (-(-m // meta["BLOCK_M"]) * -(-n // meta["BLOCK_N"]), 1, 1)
        return meta["BLOCK_M"], meta["BLOCK_N"], meta["num_stages"], meta["GROUP_M"]
    assert tiles(4096, 1024, 2048, (0, 1024, 1), (0, 1, 1024)) == (128, 256, 4, L.GROUP_M)   # x @ W^T
    assert tiles(4096, 2048, 1024, (0, 2048, 1), (0, 1024, 1)) == (128, 256, 4, L.GROUP_M)   # dz @ W
    assert tiles(2048, 4096, 1024, (0, 1, 2048), (0, 1024, 1)) == (128, 128, 4, L.GROUP_M)   # dz^T @ x
    # K = 1000: 2000-byte rows, proved 16-byte aligned by the launch's divisibility by 8
    assert tiles(4097, 1000, 1030, (0, 1000, 1), (0, 1, 1000)) == (128, 256, 4, L.GROUP_M)
    assert tiles(4097, 1004, 1030, (0, 1004, 1), (0, 1, 1004)) == (128, 128, 3, L.GROUP_M)  # 2008: not


def test_gpu_tiles_per_product():
    # (BLOCK_M, BLOCK_N, num_stages) for 16-bit products of one batch: 128x256 from about
    # a wave of such tiles on, dW (M-major A) 128x128 with 4 stages; batched, fp32, small
    # products and rows not 16-byte aligned 128x128 with 3 stages.
    def pick(*args, **kw):
        bm, bn, bk, opts = L._gpu_tiles(*args, **kw)
        return bm, bn, bk, opts.get("num_stages")
    assert pick("float16", 4096, 2048, 1024, 1) == (128, 256, 64, 4)
    assert pick("bfloat16", 4096, 1024, 2048, 1) == (128, 256, 64, 4)       # 128 such tiles
    assert pick("float16", 4096, 768, 2048, 1) == (128, 128, 64, 3)         # 96 such tiles
    assert pick("float16", 2048, 1024, 4096, 1, a_mmajor=True) == (128, 128, 64, 4)
    assert pick("float16", 16384, 4096, 1024, 1, a_mmajor=True) == (128, 128, 64, 4)
    assert pick("float16", 2048, 2048, 64, 8) == (64, 128, 64, 2)           # batched scores: persistent
    assert L._gpu_tiles("float16", 2048, 2048, 64, 8)[3] == {"num_warps": 4, "num_stages": 2, "persistent": 3}
    assert L._gpu_tiles("bfloat16", 4096, 2048, 40, 1)[3]["persistent"] == 3   # one K step
    assert "persistent" not in L._gpu_tiles("float16", 4096, 2048, 128, 1)[3]
    assert "persistent" not in L._gpu_tiles("float16", 4096, 2048, 0, 1)[3]     # K = 0: no step, no epilogue
    assert pick("float16", 2048, 2048, 72, 8) == (128, 128, 64, 3)          # two K steps: one tile per CTA
    assert pick("float16", 2048, 2048, 64, 8, rows_aligned=False) == (128, 128, 64, 3)
    assert pick("float32", 2048, 2048, 64, 8) == (128, 128, 32, 3)
    assert pick("float16", 4097, 1030, 1000, 1, rows_aligned=False) == (128, 128, 64, 3)  # no ring
    assert pick("float32", 4096, 2048, 1024, 1) == (128, 128, 32, 3)
    assert pick("float64", 4096, 2048, 1024, 1) == (L.BM, L.BN, L.BK, None)


@pytest.mark.parametrize("rows", [1024, 16384])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("case", ["fwd", "dx", "dw"])
def test_ptx_unbatched_16bit_products_run_wgmma_from_a_tma_ring(case, dtype, rows):
    # linear's three products (one batch): the operand tiles are affine in bare
    # parameters, so the ring is filled by cp.async.bulk.tensor from the host's tensor
    # maps, one thread per stage, with no per-element address or cp.async. 4 stages
    # (128x256 tiles from 16384 rows on; dW always) keep one wgmma group in flight.
    n = 256 if rows == 16384 and case != "dw" else 128
    in_flight = "1" if n == 256 or case == "dw" else "0"
    ck = _compiled(case, dtype, rows=rows)
    ptx = ck.asm["ptx"]
    want = ("1" if case == "dw" else "0", "1" if case in ("dx", "dw") else "0")
    assert _wgmma_steps(ptx, dtype, n) == [want] * 4, ptx
    assert ck.metadata["tensor_maps"] == TMA_MAPS[case].format(n=n)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.cg" not in ptx and "mma.sync" not in ptx
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ptx)[0] == in_flight
    body = _k_loop(ptx, "mbarrier.try_wait")
    assert "ld.global" not in body and "bar.sync" not in body, body
    # The 16-bit output leaves through shared memory: 16-byte stores, 8 per thread per 128 columns.
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == 8 * n // 128, ptx
    assert not re.search(r"st\.global\.b32", ptx)


def _compiled_persistent(case, dtype="fp16", act=L.ACT_RELU, bn=256, stages=3, bk=64, bm=128, warps=8, stream=False):
    """_persistent_matmul_kernel for sm_90a as _compiled compiles _matmul_kernel (K 1024
    for linear's products, or 64 for the scores)."""
    ck = _compiled(case, dtype, act, rows=16384)  # the same signature and constexprs, plus `batches`
    unit = {"fwd": ("s_ak", "s_bk"), "dx": ("s_ak", "s_bn"), "dw": ("s_am", "s_bn"), "score": ("s_ak", "s_bk")}[case]
    sig = {p: f"*{dtype}:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn", "s_cb")
                if p not in unit})
    sig.update(scale="fp32", batches="i32")
    ce = {p: 1 for p in unit}
    ce.update(A_MMAJOR=case == "dw", B_KMAJOR=case in ("fwd", "score"), ACT=act if case == "fwd" else L.ACT_NONE,
              HAS_BIAS=case == "fwd", STORE_Z=False, SCALE=case == "score", ACC=tl.float32,
              BATCHED=case == "score", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=L.GROUP_M, STREAM_C=stream)
    del ck
    return tessera.compile(L._persistent_matmul_kernel, sig, ce, target="cuda:90a", num_warps=warps,
                           num_stages=stages)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_scores_stream_their_output_from_the_persistent_kernel(dtype, tmp_path):
    # q k^T as _attention_score_fast launches it at 8x2048x2048x64 (_gpu_tiles' K <= 64
    # tiles, STREAM_C): each 64x128 tile leaves through shared memory in 16-byte
    # evict-first stores (16 KB over 128 threads: 8 each), inside the tile loop; the ring
    # and the conversion buffer leave room for three CTAs per SM (227 KB on an H100).
    # linear's outputs keep plain stores (STREAM_C false).
    from ptxas_check import assemble
    bm, bn, bk, opts = L._gpu_tiles(dtype.replace("fp16", "float16").replace("bf16", "bfloat16"), 2048, 2048, 64, 8)
    ck = _compiled_persistent("score", dtype, bn=bn, bk=bk, bm=bm, warps=opts["num_warps"],
                              stages=opts["num_stages"], stream=True)
    ptx = ck.asm["ptx"]
    assert len(re.findall(r"st\.global\.cs\.v4\.b32", ptx)) == 8 and "st.global.v4" not in ptx, ptx
    assert opts["persistent"] * (int(ck.metadata["shared"]) + 1024) <= 227 * 1024
    assert "0 bytes spill stores" in assemble(ptx, "90a", tmp_path, verbose=True)
    plain = _compiled_persistent("fwd", dtype, bn=bn, bk=bk, bm=bm, warps=opts["num_warps"], stages=opts["num_stages"])
    assert "st.global.cs" not in plain.asm["ptx"] and len(re.findall(r"st\.global\.v4\.b32", plain.asm["ptx"])) == 8


@pytest.mark.parametrize("case", ["fwd", "dx", "dw", "score"])
def test_ptx_persistent_ring_runs_across_tiles(case):
    # One ring for all of a program's tiles: its barriers are made once (TMA: `stages`
    # full and empty mbarriers) and torn down after the last tile; every tile's stores
    # sit inside the loop (their block branches back to it, before the ring's teardown),
    # so the next tile's copies already in flight overlap them. The accumulator stays in
    # wgmma registers across the reset (no layout conversion through shared memory: the
    # only shared stores are the output's), and the loop divides by a runtime value only
    # for the tile's coordinates (current and S-1 ahead).
    bn = 128 if case == "dw" else 256
    ck = _compiled_persistent(case, bn=bn)
    ptx = ck.asm["ptx"]
    want = ("1" if case == "dw" else "0", "1" if case in ("dx", "dw") else "0")
    assert _wgmma_steps(ptx, "fp16", bn) == [want] * 4, ptx
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ptx) == ["0"]
    if case == "score":  # batched: the cp.async ring
        assert "cp.async.cg.shared.global" in ptx and not ck.metadata.get("tensor_maps")
        teardown = ptx.rindex("cp.async.wait_group 0;")
    else:
        assert ck.metadata["tensor_maps"] == TMA_MAPS[case].format(n=bn).replace("14|", "15|")
        assert len(re.findall(r"mbarrier\.init", ptx)) == 6 and len(re.findall(r"mbarrier\.inval", ptx)) == 6
        teardown = ptx.index("mbarrier.inval")
    stores = [m.start() for m in re.finditer(r"st\.global\.v4\.b32", ptx)]
    assert len(stores) == 8 * bn // 128 and stores[-1] < teardown, ptx
    back = re.search(r"bra\.uni\s+(\$L__BB\d+_\d+);", ptx[stores[-1]:teardown])
    assert back and ptx.index(back.group(1) + ":") < stores[0], ptx
    # (the bias is loaded in the accumulator's layout: no st.shared for it)
    assert len(re.findall(r"st\.shared", ptx)) == 32 * bn // 128, ptx
    loop = ptx[ptx.index(back.group(1) + ":"):teardown]
    assert len(re.findall(r"(?:div|rem)\.[su]32", loop)) == (4 if case == "score" else 2), loop


@pytest.mark.parametrize("case,bn,bk,stages", [("fwd", 128, 64, 4), ("fwd", 256, 32, 6), ("dw", 128, 64, 4),
                                                ("score", 128, 64, 4)])
def test_ptx_persistent_ring_keeps_a_wgmma_group_in_flight(case, bn, bk, stages):
    # From 4 stages the persistent loop's wgmma group stays in flight like a plain K
    # loop's (wait_group 1 after each step); the epilogue's branch waits for it (wait 0)
    # before reading the accumulator, and the loop's exit drains the last one. ptxas
    # keeps them asynchronous (no serialization warning).
    ck = _compiled_persistent(case, bn=bn, bk=bk, stages=stages)
    ptx = ck.asm["ptx"]
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ptx) == ["1", "0", "0"], ptx
    wait0 = ptx.index("wgmma.wait_group.sync.aligned 0")
    stores = [m.start() for m in re.finditer(r"st\.global\.v4\.b32", ptx)]
    assert ptx.index("wgmma.wait_group.sync.aligned 1") < wait0 < stores[0], ptx
    assert ptx.rindex("wgmma.wait_group.sync.aligned 0") > stores[-1]
    if PTXAS is not None:
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "k.ptx")
            with open(src, "w") as fh:
                fh.write(ptx)
            r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", src, "-o", os.path.join(d, "k.cubin")],
                               capture_output=True, text=True)
        assert r.returncode == 0 and "serialized" not in r.stderr and " 0 bytes spill stores" in r.stderr, r.stderr


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_batched_scores_run_wgmma_from_a_cp_async_ring(dtype):
    # q k^T over 8 heads: the batch offset makes each CTA's base its own (no tensor map
    # for it), so the ring is filled by cp.async with the same wgmma.
    ck = _compiled("score", dtype)
    ptx = ck.asm["ptx"]
    assert _wgmma_steps(ptx, dtype) == [("0", "0")] * 4, ptx
    assert not ck.metadata.get("tensor_maps") and "cp.async.bulk" not in ptx
    body = _k_loop(ptx)
    assert "cp.async.cg.shared.global" in body and "ld.global" not in body, body
    assert len(re.findall(r"st\.global\.v4\.b32", ptx)) == 8, ptx


def test_ptx_fp32_runs_tf32x3_mma_sync_from_a_cp_async_ring():
    # fp32: tf32x3 (three m16n8k8 tf32 products per fragment pair); no wgmma for 32-bit operands.
    f32 = _ptx("fwd", "fp32")
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32", f32)) == 192, f32
    assert "ld.global" not in _k_loop(f32)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")
@pytest.mark.parametrize("case,dtype,act,rows", [("fwd", "fp16", L.ACT_RELU, 1024), ("fwd", "bf16", L.ACT_GELU, 1024),
                                                 ("dx", "fp16", L.ACT_NONE, 1024), ("dw", "fp16", L.ACT_NONE, 1024),
                                                 ("fwd", "fp32", L.ACT_RELU, 1024), ("score", "fp16", L.ACT_NONE, 1024),
                                                 ("fwd", "fp16", L.ACT_GELU, 16384),
                                                 ("fwd", "fp16", L.ACT_GELU_TANH, 16384),
                                                 ("dw", "bf16", L.ACT_NONE, 16384),
                                                 ("persistent fwd", "fp16", L.ACT_GELU, 256),
                                                 ("persistent score", "bf16", L.ACT_NONE, 128)])
def test_ptx_assembles_without_spills(case, dtype, act, rows, tmp_path):
    src = tmp_path / "k.ptx"
    # (persistent: rows is BLOCK_N; the scores' 128x128 s2 is what _gpu_tiles picks for K 64)
    ck = (_compiled_persistent(case.split()[1], dtype, act, bn=rows, stages=3 if rows == 256 else 2)
          if case.startswith("persistent") else _compiled(case, dtype, act, rows))
    src.write_text(ck.asm["ptx"])
    r = subprocess.run([PTXAS, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert " 0 bytes spill stores" in r.stderr, r.stderr
