"""The matmul backwards' own GPU kernels (kernels/linear.py): linear's dW = dz^T @ x as a
split-K product (_split_k_matmul_kernel) and attention_score's dq and dk in one launch
(_score_backward_kernel). Their plans, the kernels compiled for the CPU against torch
(odd sizes, every masked edge), their PTX for sm_90a (no GPU needed), and the ops'
gradients on a GPU (`gpu` marker)."""
import importlib
import re

import pytest

import tessera
import tessera.kernels as tk
import tessera.language as tl
from ptxas_check import launch_signature  # noqa: E402
from ptxas_check import assemble_if_available  # noqa: E402

torch = pytest.importorskip("torch")

L = importlib.import_module("tessera.kernels.linear")
AT = importlib.import_module("tessera.kernels.attention")
H = importlib.import_module("tessera.kernels._host")

GRAD_TOL = {torch.float32: 5e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}
DTYPES, DTYPE_IDS = [torch.float16, torch.bfloat16, torch.float32], ["float16", "bfloat16", "float32"]


def _close(got, want, tol, what):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item()
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol * scale:.3g}"


def _counters_are_zero():
    return all(not (c.cpu() if H.is_torch(c) else torch.as_tensor(c)).any() for c in H._ARRIVAL_COUNTERS.values())


# --------------------------------------------------------------------------- plans

def test_weight_gradient_tiles():
    # dW = dz^T @ x (A M-major): (M, N, K) = (out_features, in_features, rows).
    dz_t = lambda rows, n: (0, 1, n)  # noqa: E731  (dz (rows, n) read transposed)
    x = lambda k: (0, k, 1)  # noqa: E731
    pick = L._weight_gradient_tiles
    wide = ((128, 256, 64, {"num_warps": 8, "num_stages": 4}), False)
    assert pick("float16", 4096, 4096, 8192, dz_t(8192, 4096), x(4096)) == wide       # 512 wide tiles
    assert pick("bfloat16", 2048, 2048, 4096, dz_t(4096, 2048), x(2048)) == wide      # 128
    split = pick("float16", 2048, 1024, 4096, dz_t(4096, 2048), x(1024))              # 64: split, if planned
    assert split == ((L.SPLIT_K_DW, True) if L.SPLIT_K_DW is not None else None)
    assert pick("float16", 512, 512, 4096, dz_t(4096, 512), x(512)) is None      # 8 wide tiles: too few even split
    assert pick("float16", 2048, 1024, 1024, dz_t(1024, 2048), x(1024)) is None   # 8 K steps per half
    assert pick("float32", 2048, 1024, 4096, dz_t(4096, 2048), x(1024)) is None   # tf32x3: mma.sync
    assert pick("float16", 2048, 1004, 4096, dz_t(4096, 2048), x(1004)) is None   # x's rows not 16-byte aligned
    assert pick("float16", 2048, 1024, 4096, (0, 2048, 1), x(1024)) is None       # A K-major: not dW's layout


def test_linear_backward_plans_split_k_on_a_gpu_only(monkeypatch):
    x, w, dz = torch.empty(4096, 1024, dtype=torch.float16), torch.empty(2048, 1024, dtype=torch.float16), \
        torch.empty(4096, 2048, dtype=torch.float16)
    assert L._linear_bwd_plan(x, w, dz, False).dw_launch.partial_elements == 0  # one program per tile
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(L, "SPLIT_K_DW", (128, 256, 64, {"num_warps": 8, "num_stages": 4}))
    plan = L._linear_bwd_plan(x, w, dz, False)
    kernel, grid, sizes, meta = plan.dw_launch.plan
    assert kernel is L._split_k_matmul_kernel and grid == (64, 2, 1) and plan.dw_launch.tiles == 64
    # M N K, A's (row, col) strides (dz^T: M-major), B's (x), then K per half: 32 steps of 64.
    assert sizes == (2048, 1024, 4096, 1, 2048, 1024, 1, 2048)
    assert meta["A_MMAJOR"] and not meta["B_KMAJOR"] and (meta["BLOCK_M"], meta["BLOCK_N"]) == (128, 256)
    assert plan.dw_launch.partial_elements == 2 * 2048 * 1024  # two halves of fp32 partials (H.split_scratch)


def test_score_backward_tiles():
    qs = ks = (2048 * 64, 64, 1)
    dss = (2048 * 2048, 2048, 1)
    bm, bk, warps, stages = AT.SCORE_BACKWARD_TILES
    assert AT._score_backward_tiles("float16", 64, qs, ks, dss) == (bm, 64, bk, {"num_warps": warps,
                                                                                "num_stages": stages})
    assert AT._score_backward_tiles("bfloat16", 48, (2048 * 48, 48, 1), (2048 * 48, 48, 1), dss)[1] == 64
    # rows of 40 elements: the launch knows divisibility by 16 only, no ring could take them
    assert AT._score_backward_tiles("float16", 40, (2048 * 40, 40, 1), (2048 * 40, 40, 1), dss) is None
    assert AT._score_backward_tiles("float16", 128, qs, ks, dss)[1] == 128
    assert AT._score_backward_tiles("float16", 256, qs, ks, dss) is None               # past one wgmma N
    assert AT._score_backward_tiles("float32", 64, qs, ks, dss) is None                # two tf32x3 matmuls
    assert AT._score_backward_tiles("float16", 64, qs, ks, (2048 * 2050, 2050, 1)) is None  # ds rows unaligned
    assert AT._score_backward_tiles("float16", 64, qs, ks, (2048 * 2048, 1, 2048)) is None  # ds transposed


def test_score_backward_flat_decision(monkeypatch):
    # The flat kernel: an sm_90 GPU, batches one after another, M and N multiples of the K
    # step (64), offsets within int32.
    bk = AT.SCORE_BACKWARD_FLAT_TILES[1]
    q = torch.empty(8, 2048, 64, dtype=torch.float16)
    qs = ks = (2048 * 64, 64, 1)
    dss = (2048 * 2048, 2048, 1)
    assert not AT._score_backward_flat(q, 8, 2048, 2048, bk, qs, ks, dss)        # a CPU tensor: no TMA
    monkeypatch.setattr(AT, "_has_tma", lambda like: True)
    assert AT._score_backward_flat(q, 8, 2048, 2048, bk, qs, ks, dss)
    assert AT._score_backward_flat(q, 3, 320, 192, bk, (320 * 64, 64, 1), (192 * 64, 64, 1), (320 * 192, 192, 1))
    assert not AT._score_backward_flat(q, 8, 2000, 2048, bk, qs, ks, dss)        # M not a multiple of 64
    assert not AT._score_backward_flat(q, 8, 2048, 2000, bk, qs, ks, dss)        # N
    assert not AT._score_backward_flat(q, 8, 2048, 2048, bk, qs, ks, (2048 * 4096, 2048, 1))  # ds batches apart
    assert not AT._score_backward_flat(q, 8, 2048, 2048, bk, (4096 * 64, 64, 1), ks, dss)     # q's
    assert AT._score_backward_flat(q, 1, 2048, 2048, bk, (4096 * 64, 64, 1), ks, dss)         # one batch: any
    assert not AT._score_backward_flat(q, 64, 8192, 8192, bk, (8192 * 64, 64, 1), (8192 * 64, 64, 1),
                                       (8192 * 8192, 8192, 1))                  # 2^32 elements of ds


# --------------------------------------------------------------------------- the kernels on the CPU

@pytest.mark.parametrize("rows,n,k", [(200, 70, 90), (256, 64, 128), (131, 33, 17)])
def test_split_k_kernel_on_the_cpu(rows, n, k):
    # dW = dz^T @ x with 32x64x32 tiles: both halves of each tile's K range, the K edge in
    # the second half (rows = 200: 7 steps, halves of 4 and 3), partial M and N tiles.
    gen = torch.Generator().manual_seed(rows + n + k)
    dz, x = torch.randn(rows, n, generator=gen), torch.randn(rows, k, generator=gen)
    zs, xs = dz.stride(), x.stride()
    kernel, grid, sizes, meta = L._split_k_launch((0, zs[1], zs[0]), (0,) + xs, n, k, rows, dz, (32, 64, 32, {}))
    dw = torch.full((n, k), float("nan"))
    kernel[grid](dz, x, dw, dw, dw, torch.empty(2, n, k), H.arrival_counters(dw, grid[0]), *sizes, **meta)
    _close(dw, dz.double().t() @ x.double(), 3e-5, f"split-K dW {rows}x{n}x{k}")
    assert _counters_are_zero()


@pytest.mark.parametrize("bm,rotate", [(32, True), (64, True), (32, False)], ids=["rotated", "rotated-2", "plain"])
@pytest.mark.parametrize("bt,m,n,d", [(2, 70, 50, 24), (3, 128, 64, 64), (1, 33, 97, 40), (2, 200, 90, 16)])
def test_score_backward_kernel_on_the_cpu(bt, m, n, d, bm, rotate):
    # dq and dk of one launch: a batch's dq row blocks, then its dk row blocks (32 or 64
    # rows each here, K steps of 32: a rotation by 1 or 2 K blocks per program), partial
    # row blocks and K steps on both sides (the rotation wraps over a partial last
    # block), D below its block, M != N.
    gen = torch.Generator().manual_seed(bt * m + n + d)
    q, k, ds = (torch.randn(bt, m, d, generator=gen), torch.randn(bt, n, d, generator=gen),
                torch.randn(bt, m, n, generator=gen))
    dq, dk = torch.full((bt, m, d), float("nan")), torch.full((bt, n, d), float("nan"))
    bd = tessera.next_power_of_2(d)
    AT._score_backward_kernel[(tessera.cdiv(m, bm) + tessera.cdiv(n, bm), 1, bt)](
        ds, q, k, dq, dk, m, n, d, ds.stride(0), ds.stride(1), q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        0.25, ACC=tl.float32, BLOCK_M=bm, BLOCK_D=bd, BLOCK_K=32, ROTATE=rotate)
    _close(dq, ds.double() @ k.double() * 0.25, 3e-5, "dq")
    _close(dk, ds.double().transpose(1, 2) @ q.double() * 0.25, 3e-5, "dk")


@pytest.mark.parametrize("ws", [True, False], ids=["ws", "plain"])
@pytest.mark.parametrize("bt,m,n,d,bm,lag", [(2, 128, 64, 24, 64, 0), (3, 64, 192, 64, 64, 2), (1, 96, 160, 40, 64, 5),
                                             (2, 256, 128, 16, 128, 7), (2, 64, 64, 32, 128, 4)])
def test_score_backward_flat_kernel_on_the_cpu(bt, m, n, d, bm, lag, ws):
    # The flat kernel (ds, q, k as 2-D arrays of all batches' rows; K steps of 32): M not
    # a multiple of the row block (96 rows in 64: the last dq program reads the next
    # batch's rows and stores none of them; 64 rows in 128), M != N, D below its block,
    # the dq programs LAG K steps behind (a lag past the K blocks wraps).
    gen = torch.Generator().manual_seed(bt * m + n + d + lag)
    q, k, ds = (torch.randn(bt, m, d, generator=gen), torch.randn(bt, n, d, generator=gen),
                torch.randn(bt, m, n, generator=gen))
    dq, dk = torch.full((bt, m, d), float("nan")), torch.full((bt, n, d), float("nan"))
    AT._score_backward_flat_kernel[(tessera.cdiv(m, bm) + tessera.cdiv(n, bm), 1, bt)](
        ds, q, k, dq, dk, m, n, d, ds.stride(1), q.stride(1), k.stride(1), 0.25, bt * m, bt * n, ACC=tl.float32,
        BLOCK_M=bm, BLOCK_D=tessera.next_power_of_2(d), BLOCK_K=32, WS=ws, LAG=lag)
    _close(dq, ds.double() @ k.double() * 0.25, 3e-5, "dq")
    _close(dk, ds.double().transpose(1, 2) @ q.double() * 0.25, 3e-5, "dk")


@pytest.mark.parametrize("bt,m,n,d,bm", [(2, 128, 64, 24, 64), (1, 96, 160, 40, 64), (2, 64, 64, 64, 128)])
def test_score_backward_flat_kernel_swapped_on_the_cpu(bt, m, n, d, bm):
    # SWAP (an experiment, bench/attention_score_gpu.py): both products computed transposed
    # (dq^T = k^T ds^T, dk^T = q^T ds) and the tiles transposed back in the epilogue.
    gen = torch.Generator().manual_seed(bt * m + n + d)
    q, k, ds = (torch.randn(bt, m, d, generator=gen), torch.randn(bt, n, d, generator=gen),
                torch.randn(bt, m, n, generator=gen))
    dq, dk = torch.full((bt, m, d), float("nan")), torch.full((bt, n, d), float("nan"))
    AT._score_backward_flat_kernel[(tessera.cdiv(m, bm) + tessera.cdiv(n, bm), 1, bt)](
        ds, q, k, dq, dk, m, n, d, ds.stride(1), q.stride(1), k.stride(1), 0.25, bt * m, bt * n, ACC=tl.float32,
        BLOCK_M=bm, BLOCK_D=tessera.next_power_of_2(d), BLOCK_K=32, WS=True, SWAP=True, num_warps=4)
    _close(dq, ds.double() @ k.double() * 0.25, 3e-5, "dq")
    _close(dk, ds.double().transpose(1, 2) @ q.double() * 0.25, 3e-5, "dk")


@pytest.mark.parametrize("side", ["dq", "dk"])
def test_score_backward_flat_kernel_one_side_on_the_cpu(side):
    # PROGRAM0 (the bench's cuts): a grid of one side's programs computes that side and
    # leaves the other output unwritten.
    bt, m, n, d, bm = 2, 128, 192, 32, 64
    gen = torch.Generator().manual_seed(7)
    q, k, ds = (torch.randn(bt, m, d, generator=gen), torch.randn(bt, n, d, generator=gen),
                torch.randn(bt, m, n, generator=gen))
    dq, dk = torch.full((bt, m, d), float("nan")), torch.full((bt, n, d), float("nan"))
    programs, first = (m // bm, 0) if side == "dq" else (n // bm, m // bm)
    AT._score_backward_flat_kernel[(programs, 1, bt)](
        ds, q, k, dq, dk, m, n, d, ds.stride(1), q.stride(1), k.stride(1), 0.25, bt * m, bt * n, ACC=tl.float32,
        BLOCK_M=bm, BLOCK_D=d, BLOCK_K=32, WS=False, PROGRAM0=first)
    done, untouched = (dq, dk) if side == "dq" else (dk, dq)
    ref = ds.double() @ k.double() * 0.25 if side == "dq" else ds.double().transpose(1, 2) @ q.double() * 0.25
    _close(done, ref, 3e-5, side)
    assert torch.isnan(untouched).all()


# --------------------------------------------------------------------------- PTX (no GPU needed)

def _assembled(ck, tmp_path):
    """The PTX, assembled by ptxas when installed (no register spills)."""
    ptx = ck.asm["ptx"]
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None:
        assert "0 bytes spill stores" in err, err
    return ptx




@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_split_k_dw_runs_wide_wgmma_from_a_tma_ring(dtype, monkeypatch, tmp_path):
    # dW at 2048x1024x4096 as linear_backward plans it on a GPU when split: 128x256 tiles,
    # TMA boxes of 64 columns for dz^T (M-major: imm-trans-a) and x (N-major: imm-trans-b),
    # one wgmma group in flight; the partial stored from the accumulator's registers
    # (8-byte pairs: 64 per thread), the two partials summed in 64-column slices of 16-byte
    # loads (4 slices, unrolled, x 2 partials x 8 per thread), no spills, and shared memory
    # the ring's 4 x 48 KB and its barriers only.
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(L, "SPLIT_K_DW", (128, 256, 64, {"num_warps": 8, "num_stages": 4}))
    plan = L._linear_bwd_plan(torch.empty(4096, 1024, dtype=tdt), torch.empty(2048, 1024, dtype=tdt),
                              torch.empty(4096, 2048, dtype=tdt), False)
    kernel, grid, sizes, meta = plan.dw_launch.plan
    ptr = f"*{dtype}:16"
    sig, ce, opts = launch_signature(kernel, {"A": ptr, "B": ptr, "BIAS": ptr, "C": ptr, "Z": ptr,
                                              "PART": "*fp32:16", "ARRIVED": "*i32:16"}, sizes, meta)
    ck = tessera.compile(kernel, sig, ce, target="cuda:90a", **opts)
    ptx = _assembled(ck, tmp_path)
    t = {"fp16": "f16", "bf16": "bf16"}[dtype]
    steps = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.{t}\.{t} .*, p, 1, 1, (\d), (\d);", ptx)
    assert steps == [("1", "1")] * 4, ptx
    assert ck.metadata["tensor_maps"].count("|") == 2 and "cp.async.cg" not in ptx
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d)", ptx)[0] == "1"
    assert len(re.findall(r"ld\.global\.v4\.f32", ptx)) == 64 and "ld.global.v2.f32" not in ptx
    assert len(re.findall(r"st\.global\.v2\.f32", ptx)) == 64       # this half's partial
    assert int(ck.metadata["shared"]) < 4 * 48 * 1024 + 1024
    assert len(re.findall(r"atom\.global\.acq_rel\.gpu\.add|atom\.global\.add", ptx)) == 1


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_score_backward_runs_both_products_on_wgmma(dtype, tmp_path):
    # One kernel, two branches: dq's ds tile K-major (imm-trans-a 0), dk's ds^T M-major
    # (1); k and q N-major (1); m64n64k16 over BLOCK_K 64 (4 per step); cp.async rings
    # (batched bases: no tensor map); the branches' rings share shared memory (one ring's
    # stages x (BLOCK_M + BLOCK_D) x 64 x 2 bytes).
    bm, bd, bk, opts = AT._score_backward_tiles(dtype.replace("fp", "float") if dtype == "fp16" else "bfloat16", 64,
                                               (2048 * 64, 64, 1), (2048 * 64, 64, 1), (2048 * 2048, 2048, 1))
    ptr = f"*{dtype}:16"
    sizes = (2048, 2048, 64, 2048 * 2048, 2048, 2048 * 64, 64, 2048 * 64, 64, 0.125)
    sig, ce, opts = launch_signature(AT._score_backward_kernel, {p: ptr for p in ("DS", "Q", "KEY", "DQ", "DK")}, sizes,
                                     dict(ACC=tl.float32, BLOCK_M=bm, BLOCK_D=bd, BLOCK_K=bk, **opts))
    ck = tessera.compile(AT._score_backward_kernel, sig, ce, target="cuda:90a", **opts)
    ptx = _assembled(ck, tmp_path)
    t = {"fp16": "f16", "bf16": "bf16"}[dtype]
    steps = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.{t}\.{t} .*, p, 1, 1, (\d), (\d);", ptx)
    assert steps == [("0", "1")] * 4 + [("1", "1")] * 4, ptx
    assert "cp.async.cg.shared.global" in ptx and not ck.metadata.get("tensor_maps") and "mma.sync" not in ptx
    assert int(ck.metadata["shared"]) == opts["num_stages"] * (bm + bd) * bk * 2


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_ptx_score_backward_flat_specializes_both_branches(dtype, tmp_path):
    # The shipped flat form: each branch's loop warp-specialized (a producer warpgroup
    # issues the ring's TMA copies: ds and k for dq, ds^T and q for dk, four tensor maps),
    # 16 consumer warps (four warpgroups of 64 rows: m64n64k16, dq's ds K-major, dk's ds^T
    # M-major), 640 threads, no cp.async, no spills; 4 stages of 256x64 + 64x64 tiles.
    bm, bk, warps, stages, lag = AT.SCORE_BACKWARD_FLAT_TILES
    ptr = f"*{dtype}:16"
    sizes = (2048, 2048, 64, 2048, 64, 64, 0.125, 8 * 2048, 8 * 2048)
    sig, ce, opts = launch_signature(AT._score_backward_flat_kernel, {p: ptr for p in ("DS", "Q", "KEY", "DQ", "DK")},
                                     sizes, dict(ACC=tl.float32, BLOCK_M=bm, BLOCK_D=64, BLOCK_K=bk, WS=True, LAG=lag,
                                                 num_warps=warps, num_stages=stages))
    ck = tessera.compile(AT._score_backward_flat_kernel, sig, ce, target="cuda:90a", **opts)
    ptx = _assembled(ck, tmp_path)
    t = {"fp16": "f16", "bf16": "bf16"}[dtype]
    steps = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.{t}\.{t} .*, p, 1, 1, (\d), (\d);", ptx)
    assert steps == [("0", "1")] * 4 + [("1", "1")] * 4, steps
    assert ck.metadata["threads"] == str(warps * 32 + 128) and len(ck.metadata["tensor_maps"].split("|")) == 5
    assert ptx.count("setmaxnreg.dec.sync.aligned.u32 40;") == 2 and "cp.async.cg" not in ptx
    # Copies a stage: dq's ds tile (256 rows of 64 columns: one box) and k's; dk's ds tile
    # (64 rows of 256 columns: four 128-byte-swizzled boxes of 64 columns) and q's.
    assert ptx.count("cp.async.bulk.tensor.2d") == 2 + 5 and "mma.sync" not in ptx
    assert int(ck.metadata["shared"]) >= stages * (bm + 64) * bk * 2


def test_ptx_score_backward_flat_swapped_runs_one_warpgroup_m64n256(tmp_path):
    # SWAP at 256 rows: the head dim is the MMA's M, so one consumer warpgroup issues
    # wgmma.m64n256k16 (4 a K step per branch: dq^T's B = ds^T K-major, dk^T's B = ds
    # N-major, A = k^T / q^T M-major) beside the producer warpgroup; 255 registers, no
    # spills (bench: 0.75 of a copy on an H200 against the shipped form's 0.81).
    sizes = (2048, 2048, 64, 2048, 64, 64, 0.125, 8 * 2048, 8 * 2048)
    ptrs = {p: "*fp16:16" for p in ("DS", "Q", "KEY", "DQ", "DK")}
    sig, ce, opts = launch_signature(AT._score_backward_flat_kernel, ptrs, sizes,
                                     dict(ACC=tl.float32, BLOCK_M=256, BLOCK_D=64, BLOCK_K=64, WS=True, SWAP=True,
                                          num_warps=4, num_stages=4))
    ck = tessera.compile(AT._score_backward_flat_kernel, sig, ce, target="cuda:90a", **opts)
    ptx = _assembled(ck, tmp_path)
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 8
    assert "mma.sync" not in ptx and ck.metadata["threads"] == "256"


@pytest.mark.parametrize("prefetch", [0, 4])
def test_ptx_score_backward_flat_l2_prefetch(prefetch, tmp_path):
    # L2_PREFETCH (tl.range's l2_prefetch; bench/attention_score_gpu.py --prefetch): each
    # branch's producer follows a stage's copies with an L2 prefetch of every box 4 K steps
    # on (dq: ds and k, 2; dk: ds^T's four boxes and q, 5); none in the shipped form.
    bm, bk, warps, stages, lag = AT.SCORE_BACKWARD_FLAT_TILES
    sizes = (2048, 2048, 64, 2048, 64, 64, 0.125, 8 * 2048, 8 * 2048)
    ptrs = {p: "*fp16:16" for p in ("DS", "Q", "KEY", "DQ", "DK")}
    sig, ce, opts = launch_signature(AT._score_backward_flat_kernel, ptrs, sizes,
                                     dict(ACC=tl.float32, BLOCK_M=bm, BLOCK_D=64, BLOCK_K=bk, WS=True, LAG=lag,
                                          L2_PREFETCH=prefetch, num_warps=warps, num_stages=stages))
    ck = tessera.compile(AT._score_backward_flat_kernel, sig, ce, target="cuda:90a", **opts)
    ptx = _assembled(ck, tmp_path)
    assert ptx.count("cp.async.bulk.prefetch.tensor.2d.L2.global.tile") == (2 + 5 if prefetch else 0)
    assert ptx.count("cp.async.bulk.tensor.2d") == 2 + 5


# --------------------------------------------------------------------------- the ops on a GPU

def _skip_without_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
@pytest.mark.parametrize("split", [False, True], ids=["shipped", "split"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rows,k,n", [(4096, 1024, 2048), (4100, 1008, 2050), (2048, 2048, 1536), (4096, 1024, 4096)])
def test_linear_backward_dw_on_gpu(rows, k, n, dtype, split, monkeypatch):
    # dW through the ops' autograd, as shipped and with split-K planned (SPLIT_K_DW): then
    # 2048x1024x4096 and 1536x2048x2048 split (64 and 48 wide tiles), 4100x1008x2050 too,
    # with partial M, N and K tiles (the second half masked); 4096 out-features (128 wide
    # tiles: 128x256, one program per tile) and fp32 never split.
    _skip_without_cuda()
    monkeypatch.setattr(L, "SPLIT_K_DW", (128, 256, 64, {"num_warps": 8, "num_stages": 4}) if split else None)
    monkeypatch.setattr(L, "_LINEAR_BWD_PLANS", H.Plans())
    gen = torch.Generator().manual_seed(rows + k + n)
    x = torch.randn(rows, k, generator=gen).to("cuda", dtype).requires_grad_(True)
    w = (torch.randn(n, k, generator=gen) * k ** -0.5).to("cuda", dtype).requires_grad_(True)
    b = torch.randn(n, generator=gen).to("cuda", dtype).requires_grad_(True)
    dy = torch.randn(rows, n, generator=gen).to("cuda", dtype)
    for _ in range(2):  # the second call reuses the plan and the counters (zero again after the first)
        y = tk.linear_relu(x, w, b)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
    xd, wd = x.detach().double(), w.detach().double()
    dz = dy.double() * (y.detach() > 0)  # the forward's own ReLU mask (a float64 one differs near 0)
    _close(dw, dz.t() @ xd, GRAD_TOL[dtype], f"dW {rows}x{k}x{n}")
    _close(dx, dz @ wd, GRAD_TOL[dtype], f"dX {rows}x{k}x{n}")
    _close(db, dz.sum(0), GRAD_TOL[dtype], "db")
    torch.cuda.synchronize()
    assert _counters_are_zero()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(8, 2048, 2048, 64), (3, 200, 336, 48), (2, 130, 80, 128), (1, 1, 32, 16),
                                   (2, 4, 64, 96, 32), (3, 200, 333, 40), (3, 320, 192, 64), (2, 2, 128, 448, 128),
                                   (1, 64, 64, 16), (4, 1024, 512, 48)], ids=lambda s: "x".join(map(str, s)))
def test_attention_score_backward_on_gpu(shape, dtype):
    # dq and dk in one launch (16-bit; fp32 the two matmuls): 8 heads of 2048, partial row
    # blocks on both sides, D of 48 and 32 (below their 64 block) and 128, a single query
    # row, two leading dimensions; rows of 333 and 40 elements take the two matmuls. On an
    # H100/H200, M and N multiples of 64 take the flat kernel (2048 x 2048, 320 x 192: M not
    # a multiple of its 256-row block, M != N; D 128 and 16; 1024 x 512).
    _skip_without_cuda()
    *lead, m, n, d = shape
    gen = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(*lead, m, d, generator=gen).to("cuda", dtype).requires_grad_(True)
    k = torch.randn(*lead, n, d, generator=gen).to("cuda", dtype).requires_grad_(True)
    ds = torch.randn(*lead, m, n, generator=gen).to("cuda", dtype)
    dq, dk = torch.autograd.grad(tk.attention_score(q, k), (q, k), ds)
    scale = d ** -0.5
    qd, kd, dsd = q.detach().double(), k.detach().double(), ds.double()
    _close(dq, dsd @ kd * scale, GRAD_TOL[dtype], f"dq {shape}")
    _close(dk, dsd.transpose(-1, -2) @ qd * scale, GRAD_TOL[dtype], f"dk {shape}")


@pytest.mark.parametrize("tma,shape", [(False, (2, 70, 96, 64)), (False, (1, 2, 3, 33, 48, 32)),
                                       (True, (2, 320, 192, 64)), (True, (1, 2, 3, 64, 128, 32)),
                                       (True, (2, 70, 96, 64))],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else ("sm90" if v else "sm80"))
def test_attention_score_backward_launches_the_fused_kernel(tma, shape, monkeypatch):
    # attention_score_backward's GPU plan run on the CPU (the launch's strides, grid and
    # tiles as on a GPU): float16 q, k, ds; leading dimensions collapsed into the batch.
    # With TMA (an sm_90 GPU) and M, N multiples of 64: the flat kernel and its tiles;
    # otherwise (70 x 96 on sm_90 too) the batched kernel.
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(AT, "_has_tma", lambda like: tma)
    *lead, m, n, d = shape
    gen = torch.Generator().manual_seed(m + n + d)
    q, k, ds = (torch.randn(*lead, m, d, generator=gen).half(), torch.randn(*lead, n, d, generator=gen).half(),
                torch.randn(*lead, m, n, generator=gen).half())
    flat = tma and m % 64 == 0 and n % 64 == 0
    kernel = AT._score_backward_flat_kernel if flat else AT._score_backward_kernel
    launched = []
    real = kernel.__class__.__getitem__

    def spy(kernel, grid):
        launched.append((kernel.__name__, grid))
        return real(kernel, grid)
    monkeypatch.setattr(kernel.__class__, "__getitem__", spy)
    dq, dk = AT.attention_score_backward(q, k, ds, 0.25)
    bm = (AT.SCORE_BACKWARD_FLAT_TILES if flat else AT.SCORE_BACKWARD_TILES)[0]
    batch = 1
    for v in lead:
        batch *= v
    assert launched == [(kernel.__name__, (-(-m // bm) + -(-n // bm), 1, batch))]
    _close(dq, ds.double() @ k.double() * 0.25, 4e-3, "dq")
    _close(dk, ds.double().transpose(-1, -2) @ q.double() * 0.25, 4e-3, "dk")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(8, 2048, 2048, 64), (3, 333, 208, 64), (2, 4, 100, 160, 32), (1, 1, 48, 16),
                                   (2, 2048, 1024, 64), (3, 320, 192, 64), (2, 64, 1088, 32)],
                         ids=lambda s: "x".join(map(str, s)))
def test_attention_score_writes_every_element_on_gpu(shape, dtype, monkeypatch):
    # The scores (on an H100/H200 the flat kernel's 64x128 tiles where M and N allow,
    # elsewhere the persistent matmul's; evict-first stores) and dq, dk
    # (the fused backward, K order rotated) into NaN-filled outputs: edge tiles with M and
    # N not multiples of the tiles (333 x 208: partial row blocks and K steps on both
    # sides, a rotation over 3 and 2 K blocks), two leading dimensions, one query row
    # block, M != N (the dq and dk programs' rotations of different lengths).
    _skip_without_cuda()
    real_empty, real_h_empty = torch.empty, L.H.empty

    def poisoned(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poisoned(real_empty(*a, **kw)))
    monkeypatch.setattr(L.H, "empty", lambda *a, **kw: poisoned(real_h_empty(*a, **kw)))
    *lead, m, n, d = shape
    gen = torch.Generator().manual_seed(sum(shape))
    q = torch.randn(*lead, m, d, generator=gen).to("cuda", dtype)
    k = torch.randn(*lead, n, d, generator=gen).to("cuda", dtype)
    ds = torch.randn(*lead, m, n, generator=gen).to("cuda", dtype)
    scale = d ** -0.5
    qd, kd, dsd = q.double(), k.double(), ds.double()
    with torch.no_grad():
        s = tk.attention_score(q, k)                                  # the fast path
    _close(s, qd @ kd.transpose(-1, -2) * scale, GRAD_TOL[dtype], f"scores {shape}")
    qg, kg = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    s2 = tk.attention_score(qg, kg)                                   # through autograd: matmul's plan
    torch.testing.assert_close(s2.detach(), s, rtol=0, atol=0)
    dq, dk = torch.autograd.grad(s2, (qg, kg), ds)
    _close(dq, dsd @ kd * scale, GRAD_TOL[dtype], f"dq {shape}")
    _close(dk, dsd.transpose(-1, -2) @ qd * scale, GRAD_TOL[dtype], f"dk {shape}")
