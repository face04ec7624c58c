"""The GPU back end's stream ring (compiler/codegen/nvptx/stream_ring_nvptx.cpp): a loop
without tl.dot that asks for tl.range(..., num_stages=S) loads the next S-1 iterations'
rows through per-thread shared-memory slots filled with cp.async. PTX checks run
everywhere (ptxas where installed); the GPU test compares every ring depth with numpy
on poisoned outputs; the CPU runs the same source with the hint ignored."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble_if_available


@tessera.kernel
def _row_walk(X, DY, R, OUT, SUMS, n_rows, n_cols, n_progs, OTHER: tl.constexpr, STAGES: tl.constexpr,
              BLOCK: tl.constexpr):
    # Program pid walks rows pid, pid + n_progs, ...: out = x * r[row] - sum(x * dy), and
    # the column sums of dy. dy's masked-off columns read OTHER; r's rows past the end
    # (r is masked by the row) read 2.0.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for r in tl.range(pid, n_rows, n_progs, num_stages=STAGES):
        row = r.to(tl.int64)
        x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * n_cols + cols, mask=mask, other=OTHER).to(tl.float32)
        rs = tl.load(R + row, mask=r < n_rows, other=2.0)
        s = tl.sum(x * dy, axis=0)
        tl.store(OUT + row * n_cols + cols, x * rs - s, mask=mask)
        acc += dy
    tl.store(SUMS + pid * BLOCK + cols, acc)


def _reference(x, dy, r, n_progs, other, block):
    n_rows, n_cols = x.shape
    dyp = np.full((n_rows, block), other, np.float32)
    dyp[:, :n_cols] = dy
    xp = np.zeros((n_rows, block), np.float32)
    xp[:, :n_cols] = x
    s = (xp * dyp).sum(axis=1, dtype=np.float64).astype(np.float32)
    out = x * r[:, None] - s[:, None]
    sums = np.stack([dyp[p::n_progs].sum(axis=0) for p in range(n_progs)])
    return out, sums


_SIG = dict(X="*fp16:16", DY="*fp16:16", R="*fp32:16", OUT="*fp32:16", SUMS="*fp32:16", n_rows="i32",
            n_cols="i32:16", n_progs="i32")


def _ptx(stages, block=4096, warps=16, other=0.0, sig=None):
    ck = tessera.compile(_row_walk, sig or _SIG, dict(OTHER=other, STAGES=stages, BLOCK=block), target="cuda:90a",
                         num_warps=warps)
    return ck.asm["ptx"], int(ck.metadata["shared"])


def _loop(ptx):
    """The loop's body: from the first wait on a group to the loop's back edge."""
    start = ptx.index("cp.async.wait_group")
    return ptx[ptx.rfind("$L__BB", 0, start):ptx.index("cp.async.wait_group 0")]


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_ptx_streams_every_load_of_the_loop(stages, tmp_path):
    ptx, shared = _ptx(stages)
    # x and dy: one 16-byte run a thread (4096 fp16 over 512 threads); r: a 4-byte slot.
    copies = re.findall(r"cp\.async\.(cg|ca)\.shared\.global \[%r\d+\], \[%rd\d+\], (\d+)", ptx)
    assert sorted(set(copies)) == [("ca", "4"), ("cg", "16")]
    assert len(copies) == 3 * stages  # the prologue's S-1 iterations and the loop's one
    assert ptx.count("cp.async.commit_group") == stages
    assert f"cp.async.wait_group {stages - 1};" in ptx and "cp.async.wait_group 0;" in ptx
    body = _loop(ptx)
    assert "ld.global" not in body and len(re.findall(r"ld\.shared\.v4\.b32", body)) == 2
    # Each thread reads back its own slots: no barrier beyond the row sum's two.
    assert body.count("bar.sync") == 2
    assert shared >= stages * (8192 + 8192 + 2048)
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None:
        assert "0 bytes spill stores" in err


def test_ptx_selects_a_nonzero_other_back_in(tmp_path):
    # A masked-off run is zero-filled (src-size 0); dy's other = 1.0 is selected back in.
    ptx, _ = _ptx(3, other=1.0)
    assert re.search(r"selp\.f32\s+%f\d+, %f\d+, 0f3F800000", _loop(ptx))
    assert "selp.f32" not in _loop(_ptx(3, other=0.0)[0]).split("bar.sync")[0]
    assemble_if_available(ptx, "90a", tmp_path)


def test_ptx_without_the_hint_or_with_one_stage_loads_from_global():
    for stages in (1, None):
        if stages is None:
            @tessera.kernel
            def plain(X, OUT, n_rows, n_cols, BLOCK: tl.constexpr):
                cols = tl.arange(0, BLOCK)
                for r in range(tl.program_id(0), n_rows, tl.num_programs(0)):
                    v = tl.load(X + r * n_cols + cols, mask=cols < n_cols)
                    tl.store(OUT + r * n_cols + cols, v, mask=cols < n_cols)
            ptx = tessera.compile(plain, "*fp16:16,*fp16:16,i32,i32:16", dict(BLOCK=1024), target="cuda:90a",
                                  num_stages=4).asm["ptx"]
        else:
            ptx = _ptx(stages)[0]
        assert "cp.async" not in ptx and "ld.global" in ptx


def test_ptx_keeps_narrow_and_dependent_loads_global(tmp_path):
    # n_cols not known to be a multiple of 8: x and dy's runs are one fp16 (2 bytes, below
    # cp.async's 4): they stay global loads; r (4 bytes) still takes the ring.
    ptx, _ = _ptx(3, sig=dict(_SIG, n_cols="i32"))
    body = _loop(ptx)
    assert "ld.global" in body and re.findall(r"cp\.async\.(?:cg|ca)\.shared\.global \[%r\d+\], \[%rd\d+\], (\d+)",
                                              ptx) == ["4"] * 3

    @tessera.kernel
    def gather(IDX, X, OUT, n_rows, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        for r in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=3):
            src = tl.load(IDX + r)  # streamed (4 bytes)
            v = tl.load(X + src * BLOCK + cols)  # its address needs the loaded index: not streamed
            tl.store(OUT + r * BLOCK + cols, v)
    ptx = tessera.compile(gather, "*i32:16,*fp32:16,*fp32:16,i32", dict(BLOCK=512), target="cuda:90a").asm["ptx"]
    assert ptx.count("cp.async.ca.shared.global") == 3 and "cp.async.cg" not in ptx
    assert "ld.global.v4.f32" in _loop(ptx)
    assemble_if_available(ptx, "90a", tmp_path)


def test_ptx_ring_shrinks_to_fit_shared_memory():
    # 16384 fp16 columns: a stage of x and dy is 64 KB (and r's 512 bytes), so 227 KB of
    # shared memory (less room for the row sum) holds three stages, not eight.
    sig = dict(_SIG)
    ptx, shared = _ptx(8, block=16384, warps=4, sig=sig)
    stages = ptx.count("cp.async.commit_group")
    assert stages == 3 and shared <= 227 * 1024


def test_row_walk_runs_on_the_cpu_with_the_hint_ignored():
    rng = np.random.default_rng(0)
    n_rows, n_cols, n_progs, block = 37, 200, 4, 256
    x = rng.standard_normal((n_rows, n_cols)).astype(np.float16)
    dy = rng.standard_normal((n_rows, n_cols)).astype(np.float16)
    r = rng.standard_normal(n_rows).astype(np.float32)
    out = np.full((n_rows, n_cols), np.nan, np.float32)
    sums = np.full((n_progs, block), np.nan, np.float32)
    _row_walk[(n_progs,)](x, dy, r, out, sums, n_rows, n_cols, n_progs, OTHER=1.0, STAGES=3, BLOCK=block)
    want_out, want_sums = _reference(x.astype(np.float32), dy.astype(np.float32), r, n_progs, 1.0, block)
    np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(sums, want_sums, rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_row_walk_on_gpu(stages):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(1)
    # Rows not a multiple of the programs (some walk one row fewer, one program none at
    # 2 rows), masked columns, 8 and 16 warps.
    for n_rows, n_cols, n_progs, block, warps in ((1000, 4000, 264, 4096, 16), (2, 4096, 3, 4096, 8),
                                                  (777, 1040, 132, 2048, 8)):
        x = rng.standard_normal((n_rows, n_cols)).astype(np.float16)
        dy = rng.standard_normal((n_rows, n_cols)).astype(np.float16)
        r = rng.standard_normal(n_rows).astype(np.float32)
        xt, dyt, rt = (torch.from_numpy(a).cuda() for a in (x, dy, r))
        out = torch.full((n_rows, n_cols), float("nan"), device="cuda")
        sums = torch.full((n_progs, block), float("nan"), device="cuda")
        for other in (0.0, 1.0):
            _row_walk[(n_progs,)](xt, dyt, rt, out, sums, n_rows, n_cols, n_progs, OTHER=other, STAGES=stages,
                                  BLOCK=block, num_warps=warps)
            want_out, want_sums = _reference(x.astype(np.float32), dy.astype(np.float32), r, n_progs, other, block)
            assert not torch.isnan(out).any() and not torch.isnan(sums).any()
            np.testing.assert_allclose(out.cpu().numpy(), want_out, rtol=1e-4, atol=2e-3)
            np.testing.assert_allclose(sums.cpu().numpy(), want_sums, rtol=1e-4, atol=2e-3)


def test_ptx_library_walks_take_the_ring(tmp_path):
    # The column reduction (reduce.py _GPU_DIM_STAGES) and the H200's norm backward plans
    # (norm.py BWD_GPU_PLANS_FAST_MEMORY) compile to rings: cp.async, the wait for the
    # stage, no global load of the walked rows in the loop.
    from tessera.kernels import norm as N
    from tessera.kernels import reduce as RD
    sig = "*fp16:16,*fp16:16,*fp32:16,*i32:16," + "i32:16," * 4 + "fp32,i32:16"  # stride_i == 1, as launched
    ck = tessera.compile(RD._reduce_dim_kernel, sig,
                         dict(stride_i=1, OP=RD.OP_MEAN_ABS, MEAN=True, ACC=tl.float32, BLOCK_R=16, BLOCK_I=64, UNROLL=4,
                              SPLIT_FINISH=True, BLOCK_S=64, STAGES=RD._GPU_DIM_STAGES), target="cuda:90a",
                         num_warps=RD._GPU_DIM_WARPS)
    ptx = ck.asm["ptx"]
    assert RD._GPU_DIM_STAGES == 2 and "cp.async.wait_group 1;" in ptx
    assert "ld.global" not in _loop(ptx)
    assemble_if_available(ptx, "90a", tmp_path)
    for form, (per_sm, warps, two_rows, stages) in N.BWD_GPU_PLANS_FAST_MEMORY.items():
        relu, rms = form.endswith("relu"), form == "rms_norm"
        ptx = tessera.compile(N._norm_bwd_kernel, "*fp16:16," * 6 + "*fp32:16," * 3 + "i32:16," * 6 + "i32",
                              dict(IS_RMS=rms, HAS_W=True, HAS_B=not rms, RELU=relu, HAS_DH=form == "residual",
                                   PREFETCH=False, PAIR_SUM=True, TWO_ROWS=two_rows, ACC=tl.float32, BLOCK=4096,
                                   STAGES=stages),
                              target="cuda:90a", num_warps=warps).asm["ptx"]
        assert stages >= 2 and f"cp.async.wait_group {stages - 1};" in ptx, form
        assert "ld.global" not in _loop(ptx), form
