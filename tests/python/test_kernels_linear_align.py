"""Issue 5's odd shapes: x @ W^T whose rows are 16-byte aligned without being multiples
of 16 elements (K = 1000: 2000-byte rows) and small-M products (17 rows). The launch's
divisibility-by-8 specialization (Python key, C++ fast-path key, cache key, Tile IR),
the plans _gpu_tiles makes (TMA / cp.async rings; split-K for small M), their PTX, and
(marked gpu) their results on CUDA: odd M/N/K, fp16/bf16, bias or not, relu/gelu,
inputs between NaN poison or one element into a buffer, deterministic split-K sums."""
import os
import re
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import tessera  # noqa: E402
import tessera.kernels as tk  # noqa: E402
import tessera.language as tl  # noqa: E402
from tessera import specialization as S  # noqa: E402
from tessera.kernels import linear as L  # noqa: E402
from ptxas_check import assemble, launch_signature  # noqa: E402

PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                  else None)
TOL = {torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _close(got, want, tol, what):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert not torch.isnan(got).any(), f"{what}: NaN in the result (a read outside the inputs?)"
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item()
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol * scale:.3g}"


# --------------------------------------------------------------------------- specialization

@pytest.mark.parametrize("value,cls", [(1000, 8), (1008, 16), (1001, 1), (1004, 1), (0, 16), (2, 1), (-8, 8),
                                       (-16, 16), (-4, 1), (2**40 + 8, 8), (2**40 + 16, 16), (2**63 + 8, 8)])
def test_integer_divisibility_class(value, cls):
    assert S.divisibility_class(value) == cls
    assert S.spec_of(value)[1] == cls


@tessera.kernel
def _row_sums(X, OUT, stride, BLOCK: tl.constexpr):
    """OUT[r] = sum of row r of X (rows of `stride` elements, all of them summed)."""
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + r * stride + offs, mask=offs < stride, other=0.0)
    tl.store(OUT + r, tl.sum(x, 0))


def _row_sums_of(stride, rows=5, offset=1):
    """_row_sums over rows x stride float32 values placed `offset` elements into a NaN
    buffer (NaN right after them too): a masked load that strays reads NaN."""
    buf = np.full(offset + rows * stride + 64, np.nan, np.float32)
    x = buf[offset:offset + rows * stride]
    x[:] = np.random.default_rng(stride).standard_normal(rows * stride, dtype=np.float32)
    out = np.full(rows, np.nan, np.float32)
    _row_sums[(rows,)](x, out, stride, BLOCK=1024)
    np.testing.assert_allclose(out, x.reshape(rows, stride).sum(axis=1, dtype=np.float64), rtol=1e-4, atol=1e-3)


def test_launch_keys_tell_divisible_by_8_from_not():
    # 1000 and 1016 are divisible by 8 (not 16), 1004 by 4 only, 1008 by 16: three
    # specializations, each in the Python table and the C++ launch path's, each with its
    # own cache key; 1016 and the second 1000 run the first's code from C++. A
    # specialization used for the wrong class would read the NaN after the last row.
    _row_sums._compiled.clear()
    for stride in (1000, 1016, 1004, 1008, 1000, 1004):
        _row_sums_of(stride)
    assert len(_row_sums._compiled) == _row_sums._fast_path_size() == 3
    cks = list(_row_sums._compiled.values())
    assert len({ck.cache_key for ck in cks}) == 3
    marks = sorted(re.search(r"%stride: i32( \{divisibility = (\d+)\})?", ck.asm["tir"]).group(2) or "none"
                   for ck in cks)
    assert marks == ["16", "8", "none"]


def test_do_not_specialize_drops_the_divisibility_by_8_mark():
    k = tessera.kernel(_row_sums.fn, do_not_specialize=["stride"])
    buf = np.ones(3000, np.float32)
    out = np.zeros(3, np.float32)
    ck = k[(3,)](buf, out, 1000, BLOCK=1024)
    assert re.search(r"%stride: i32( \{divisibility = \d+\})?", ck.asm["tir"]).group(1) is None
    np.testing.assert_array_equal(out, [1000.0] * 3)


# --------------------------------------------------------------------------- plans (no GPU needed)

def test_rows_aligned_is_what_the_launch_proves():
    assert L._rows_aligned((1000, 1, 1, 1000))          # 2000-byte rows: divisible by 8
    assert L._rows_aligned((1024, 1, 1, 1024))
    assert not L._rows_aligned((1004, 1, 1, 1004))      # 2008 bytes: the launch knows divisibility 1
    assert not L._rows_aligned((1000, 1, 1, 1030))     # one operand's rows unaligned


def test_gpu_tiles_for_aligned_odd_and_small_m_products():
    # 4097x1000 @ (1030x1000)^T: operand rows aligned now (ring-fed tiles); C's 1030-element
    # rows are not, so on an H100 128x128 tiles two per SM, warp-specialized; without the
    # TMA (sm_80) the wide tiles of aligned products.
    aligned = L._rows_aligned((1000, 1, 1, 1000))
    assert L._gpu_tiles("float16", 4097, 1030, 1000, 1, rows_aligned=aligned, tma=True) == \
        (128, 128, 64, {"num_warps": 8, "num_stages": 3, "persistent": 2, "warp_specialize": True})
    assert L._gpu_tiles("float16", 4097, 1030, 1000, 1, rows_aligned=aligned) == \
        L._gpu_tiles("float16", 4096, 1024, 1024, 1, rows_aligned=True)
    assert L._gpu_tiles("float16", 4097, 1032, 1000, 1, rows_aligned=aligned, tma=True) == \
        L._gpu_tiles("float16", 4096, 1024, 1024, 1, rows_aligned=True, tma=True)      # C's rows aligned
    assert L._gpu_tiles("float16", 4097, 1030, 1004, 1, rows_aligned=False, tma=True)[:2] == (128, 128)
    assert "persistent" not in L._gpu_tiles("float16", 4097, 1030, 1004, 1, rows_aligned=False, tma=True)[3]
    # 17 rows: one 64-row block, split so that about SMALL_M_PROGRAMS programs run.
    bm, bn, bk, warps, stages = L.SMALL_M_TILES
    small = L._gpu_tiles("bfloat16", 17, 2048, 1024, 1, rows_aligned=True, tma=True)
    assert small[:3] == (bm, bn, bk) and small[3]["num_warps"] == warps and small[3]["num_stages"] == stages
    assert tessera.cdiv(2048, bn) * small[3]["split_k"] <= L.SMALL_M_PROGRAMS
    assert tessera.cdiv(2048, bn) * small[3]["split_k"] > L.SMALL_M_PROGRAMS // 2
    assert "split_k" not in L._gpu_tiles("float16", 1, 64 * L.SMALL_M_PROGRAMS, 1024, 1)[3]  # enough tiles
    assert "split_k" not in L._gpu_tiles("float16", 17, 2048, 128, 1)[3]                   # two K steps: no split
    assert L._gpu_tiles("float16", L.SMALL_M + 1, 2048, 1024, 1)[0] == 128                  # past one row block
    assert L._gpu_tiles("float32", 17, 2048, 1024, 1)[0] == 128                             # tf32x3: mma.sync
    assert L._gpu_tiles("float16", 17, 2048, 1004, 1, rows_aligned=False)[0] == 128         # no ring
    assert L._gpu_tiles("float16", 17, 2048, 1024, 2)[0] == 128                             # batched


def test_small_m_plan_is_a_split_k_launch(monkeypatch):
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    like = torch.empty(1, dtype=torch.float16)
    kernel, grid, sizes, meta = L._matmul_plan((0, 1024, 1), (0, 1, 1024), 1, 17, 2048, 1024, like, like,
                                               L.ACT_GELU, None, True, None)
    splits = meta["SPLITS"]
    assert kernel is L._split_k_matmul_kernel and grid == (tessera.cdiv(2048, meta["BLOCK_N"]), splits, 1)
    # M N K, A's (row, col) strides, B's (W^T: K-major), K per part
    assert sizes == (17, 2048, 1024, 1024, 1, 1, 1024, tessera.cdiv(1024 // meta["BLOCK_K"], splits) * meta["BLOCK_K"])
    assert meta["ACT"] == L.ACT_GELU and meta["HAS_BIAS"] and meta["STORE_Z"] and not meta["A_MMAJOR"]


# --------------------------------------------------------------------------- split-K forward on the CPU

@pytest.mark.parametrize("m,k,n,splits", [(17, 1000, 130, 4), (1, 200, 70, 3), (40, 64, 33, 2), (17, 1024, 2048, 4)])
@pytest.mark.parametrize("act", [L.ACT_RELU, L.ACT_GELU, L.ACT_GELU_TANH])
def test_split_k_forward_on_the_cpu(m, k, n, splits, act):
    # The small-M plan's kernel with its fused epilogue (bias, Z, activation) compiled for
    # the CPU: parts with unequal and empty K ranges (1x200 in 3 parts of 2 K steps: 64,
    # 64, 72 -- k = 200 in steps of 32 -> 7 steps, parts of 3, 3, 1), partial row and
    # column tiles; its sums are the same bits however the programs arrive (threads).
    gen = torch.Generator().manual_seed(m + k + n + act)
    x, w, b = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) * k ** -0.5, torch.randn(n, generator=gen)
    tiles = (32, 64, 32, {"split_k": splits})
    y, z = L.matmul(x, w, (0, k, 1), (0, 1, k), 1, m, n, k, x, bias=b, act=act, store_z=True, tiles=tiles)
    pre = x.double() @ w.double().t() + b.double()
    want = {L.ACT_RELU: torch.relu(pre), L.ACT_GELU: F.gelu(pre), L.ACT_GELU_TANH: F.gelu(pre, approximate="tanh")}[act]
    _close(z[0], pre, TOL[torch.float32], "pre-activation")
    _close(y[0], want, TOL[torch.float32], "output")
    again, _ = L.matmul(x, w, (0, k, 1), (0, 1, k), 1, m, n, k, x, bias=b, act=act, store_z=True, tiles=tiles)
    assert torch.equal(y, again)
    assert int(L.H.arrival_counters(y, 1024).abs().sum()) == 0  # reset for the next launch


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_small_m_fast_path_on_the_cpu(dtype):
    # _linear_fast (the CUDA tensors' path) on CPU tensors takes the same plan: split-K
    # for 17 rows, the result the general path's.
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(17, 1000, generator=gen).to(dtype)
    w, b = (torch.randn(520, 1000, generator=gen) * 1000 ** -0.5).to(dtype), torch.randn(520, generator=gen).to(dtype)
    assert "split_k" in L._gpu_tiles(str(dtype)[6:], 17, 520, 1000, 1, rows_aligned=True)[3]
    for bias in (b, None):
        y = L._linear_fast(x, w, bias, L.ACT_GELU)
        pre = x.double() @ w.double().t() + (bias.double() if bias is not None else 0)
        _close(y, F.gelu(pre), TOL[dtype], f"fast path, bias {bias is not None}")


# --------------------------------------------------------------------------- PTX (no GPU needed)



def _linear_ptx(m, k, n, target="cuda:90a", tiles=None, dtype="fp16"):
    """The forward x @ W^T + b (relu) as _linear_fast launches it on an H100."""
    name = {"fp16": "float16", "bf16": "bfloat16"}[dtype]
    bm, bn, bk, opts = tiles or L._gpu_tiles(name, m, n, k, 1, rows_aligned=L._rows_aligned((k,)), tma=True)
    kernel, grid, extra, opts = L._gpu_launch(torch.empty(1), m, n, 1, bm, bn, opts)
    sizes = (m, n, k, 0, k, 1, 0, 1, k, m * n, 1.0) + extra
    meta = dict(A_MMAJOR=False, B_KMAJOR=True, ACT=L.ACT_RELU, HAS_BIAS=True, STORE_Z=False, SCALE=False,
                ACC=tl.float32, BATCHED=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
    sig, ce, o = launch_signature(kernel, [f"*{dtype}:16"] * 5, sizes, meta)
    return tessera.compile(kernel, sig, ce, target=target, **o)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_k_1000_rows_take_the_tma_ring(dtype):
    # 4097x1000 @ (1030x1000)^T: K = 1000 known divisible by 8, so both operands are
    # tensor maps (2000-byte row strides) and the ring is TMA-filled; K = 1004 (2008-byte
    # rows) the same tiles read with plain loads, no ring.
    ck = _linear_ptx(4097, 1000, 1030, dtype=dtype)
    ptx = ck.asm["ptx"]
    assert ck.metadata["tensor_maps"].count("|") == 2, ck.metadata.get("tensor_maps")
    assert "cp.async.bulk.tensor.2d" in ptx and "wgmma.mma_async" in ptx and "cp.async.cg" not in ptx
    tiles = L._gpu_tiles("float16", 4097, 1030, 1000, 1, rows_aligned=True, tma=True)
    unaligned = _linear_ptx(4097, 1004, 1030, tiles=tiles, dtype=dtype)
    assert not unaligned.metadata.get("tensor_maps") and "cp.async" not in unaligned.asm["ptx"]


def test_ptx_k_1000_rows_take_16_byte_cp_async_on_sm_80():
    # No TMA before Hopper: the cp.async ring, whose copies are 16 bytes when the rows'
    # alignment and K's mask (constant over runs of 8) allow; K = 1004: no ring at all.
    tiles = (128, 128, 64, {"num_warps": 8, "num_stages": 3})
    ptx = _linear_ptx(4097, 1000, 1030, target="cuda:80", tiles=tiles).asm["ptx"]
    assert "cp.async.cg.shared.global [%r" in ptx and ", 16" in ptx and "mma.sync" in ptx
    assert "cp.async.ca" not in ptx
    assert "cp.async" not in _linear_ptx(4097, 1004, 1030, target="cuda:80", tiles=tiles).asm["ptx"]


@pytest.mark.parametrize("dtype,n,b_kmajor", [("fp16", 2048, True), ("bf16", 2048, True), ("fp16", 1024, True),
                                               ("fp16", 1024, False)], ids=["fp16", "bf16", "fp16-8parts", "dx"])
def test_ptx_small_m_split_k_runs_wgmma_from_a_tma_ring(dtype, n, b_kmajor, tmp_path):
    # 17x1024 @ (n x 1024)^T as planned (n = 2048: 4 parts; 1024: 8 parts, summed in
    # 32-column slices), and the backward's dX = dz @ W (B N-major, 17x1024 from 2048):
    # 64-row wgmma over one warpgroup from a TMA ring (both operands tensor maps), the fp32
    # partial stored from the accumulator's registers, one arrival atomic, the parts summed
    # with 16-byte loads, no spills.
    name = {"fp16": "float16", "bf16": "bfloat16"}[dtype]
    m, k = (17, 1024) if b_kmajor else (17, 2048)
    b_strides = (0, 1, k) if b_kmajor else (0, n, 1)
    tiles = L._gpu_tiles(name, m, n, k, 1, rows_aligned=True, tma=True)
    like = torch.empty(1, dtype={"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])
    kernel, grid, sizes, meta = L._split_k_launch((0, k, 1), b_strides, m, n, k, like, tiles,
                                                  L.ACT_GELU if b_kmajor else L.ACT_NONE, b_kmajor)
    assert meta["SPLITS"] * meta["BLOCK_M"] * meta["SLICE_N"] <= 128 * 32 * meta["num_warps"]
    ptr = f"*{dtype}:16"
    sig, ce, o = launch_signature(kernel, [ptr] * 5 + ["*fp32:16", "*i32:16"], sizes, meta)
    ck = tessera.compile(kernel, sig, ce, target="cuda:90a", **o)
    ptx = ck.asm["ptx"]
    t = {"fp16": "f16", "bf16": "bf16"}[dtype]
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{tiles[1]}k16\.f32\.{t}\.{t}", ptx)
    assert ck.metadata["tensor_maps"].count("|") == 2 and "cp.async.cg" not in ptx
    assert len(re.findall(r"atom\.global\.acq_rel\.gpu\.add|atom\.global\.add", ptx)) == 1
    assert re.search(r"ld\.global\.v4\.f32", ptx) and re.search(r"st\.global\.v2\.f32", ptx)
    if PTXAS is not None:
        err = assemble(ptx, "90a", tmp_path, verbose=True)
        assert "0 bytes spill stores" in err, err


# --------------------------------------------------------------------------- on a GPU

def _skip_without_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def _poisoned(t, offset):
    """t copied to CUDA `offset` elements into a buffer of NaN (NaN after it too)."""
    buf = torch.full((offset + t.numel() + 256,), float("nan"), dtype=t.dtype, device="cuda")
    v = buf[offset:offset + t.numel()].view(t.shape)
    v.copy_(t)
    return v


ODD_SHAPES = [(4097, 1000, 1030), (17, 1024, 2048), (1, 1000, 2048), (64, 1000, 1030), (65, 1024, 2048),
              (33, 1000, 520), (17, 4104, 136), (3, 24, 1000)]
OPS = {"relu": (tk.linear_relu, F.relu), "gelu": (tk.linear_gelu, F.gelu),
       "gelu_tanh": (lambda x, w, b: tk.linear_gelu(x, w, b, approximate="tanh"),
                     lambda z: F.gelu(z, approximate="tanh"))}


@pytest.mark.gpu
@pytest.mark.parametrize("op,bias", [("relu", True), ("gelu", False), ("gelu_tanh", True)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("offset", [8, 1], ids=["aligned", "one_in"])
def test_linear_odd_and_small_m_on_gpu(shape, dtype, op, bias, offset):
    # Inputs between NaN poison, 8 elements (16 bytes: the TMA's case) or one element (2
    # bytes: the launch specializes the pointers as unaligned) into their buffers; the
    # plans _gpu_tiles picks for these shapes (wide tiles at K = 1000, split-K for <= 64
    # rows); any read outside the inputs turns the output into NaN.
    _skip_without_cuda()
    m, k, n = shape
    gen = torch.Generator().manual_seed(m + k + n)
    x, w, b = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) * k ** -0.5, torch.randn(n, generator=gen)
    xd, wd = _poisoned(x.to(dtype), offset), _poisoned(w.to(dtype), offset)
    bd = _poisoned(b.to(dtype), offset) if bias else None
    run, act = OPS[op]
    y = run(xd, wd, bd)
    pre = xd.double().cpu() @ wd.double().cpu().t() + (bd.double().cpu() if bias else 0)
    _close(y, act(pre), TOL[dtype], f"{op} {shape} {dtype} offset {offset}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_small_m_split_k_is_deterministic_on_gpu(dtype):
    # The parts are summed in one order whichever program arrives last: the same bits on
    # every call, and the general path (matmul's plan) gives the fast path's.
    _skip_without_cuda()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(17, 1024, generator=gen).to("cuda", dtype)
    w = (torch.randn(2048, 1024, generator=gen) * 1024 ** -0.5).to("cuda", dtype)
    b = torch.randn(2048, generator=gen).to("cuda", dtype)
    assert "split_k" in L._gpu_tiles(str(dtype)[6:], 17, 2048, 1024, 1, rows_aligned=True, tma=True)[3]
    first = tk.linear_gelu(x, w, b)
    for _ in range(20):
        assert torch.equal(tk.linear_gelu(x, w, b), first)
    assert torch.equal(L.linear_forward(x, w, b, L.ACT_GELU)[0], first)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(17, 1024, 2048), (4097, 1000, 1030)], ids=lambda s: "x".join(map(str, s)))
def test_linear_gelu_autograd_on_gpu(shape, dtype):
    # Training: the forward keeps the pre-activation (split-K's STORE_Z for 17 rows),
    # then the backward products; gradients against float64 torch.
    _skip_without_cuda()
    m, k, n = shape
    gen = torch.Generator().manual_seed(9)
    x, w, b = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) * k ** -0.5, torch.randn(n, generator=gen)
    leaves = [t.to("cuda", dtype).requires_grad_(True) for t in (x, w, b)]
    refs = [t.detach().cpu().double().requires_grad_(True) for t in leaves]
    y = tk.linear_gelu(*leaves)
    yr = F.gelu(F.linear(*refs))
    _close(y, yr, TOL[dtype], "output")
    g = torch.randn(y.shape, generator=gen).to(dtype)
    y.backward(g.cuda())
    yr.backward(g.double())
    for i, (t, r) in enumerate(zip(leaves, refs)):
        _close(t.grad, r.grad, {torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype], f"grad {i}")
