"""Row normalizations, one fused kernel per direction: layer_norm (optional fused
ReLU), rms_norm, and the residual_add_* forms that add a residual first and return
both the normalized rows and the new residual.

Forward: one program per row; the row stays in registers between the statistics
and the output (one read of x, one write of y). Mean and 1/std per row are kept for
the backward pass (4 bytes a row).

Backward: P programs (a few per CPU thread, 512 on a GPU) each walk rows pid, pid+P,
... computing dx row by row and summing dweight and dbias for their rows in
registers; each writes one partial row (dweight's columns, then dbias's), and one
column sum of the P partial rows gives both. With xhat = (x - mean) * rstd and
g = dy * w:

    dx = rstd * (g - mean(g * xhat) * xhat - mean(g))     (layer norm)
    dx = rstd * (g - mean(g * xhat) * xhat)               (RMS norm: no centring)

On an H100 (fp16 16384x4096 layer norm) this walk takes 0.238 ms with its column
sum, torch's two backward kernels 0.333 ms; a split plan (dx one row per program, as
the forward, plus a dweight/dbias column kernel) took 0.255 ms in the same run
(bench/results/bwd_profile_h100.log), so the walk stays. The GPU walk now loads its next
row while it reduces the current one (PREFETCH), layer norm's two row sums are one
reduction of a pair, and two programs share each SM (registers capped to fit both):
0.154 ms there, 0.913 of a copy of its bytes (bench/results/bwd_sweep_normbwd2_run1.log;
BWD_GPU_PLANS below).
"""
from __future__ import annotations

import tessera
import tessera.language as tl

from . import _host as H
from .reduce import column_sum_run, column_sum_steps


@tessera.kernel
def _norm_fwd_kernel(X, R, W, B, Y, HOUT, Mean, Rstd, stride_x, stride_r, stride_y, n_cols, eps,
                     IS_RMS: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     RELU: tl.constexpr, IO: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(ACC)
    if HAS_RES:
        # The new residual is rounded to the input type, and normalized as rounded,
        # so the forward output is exactly the normalization of the returned residual.
        h = (x + tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(ACC)).to(IO)
        tl.store(HOUT + row * n_cols + cols, h, mask=mask)
        x = h.to(ACC)
    if IS_RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(mask, x - mean, 0.0)
        tl.store(Mean + row, mean)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(Rstd + row, rstd)
    y = xc * rstd
    if HAS_W:
        y = y * tl.load(W + cols, mask=mask, other=0.0).to(ACC)
    if HAS_B:
        y = y + tl.load(B + cols, mask=mask, other=0.0).to(ACC)
    if RELU:
        y = tl.maximum(y, 0.0)
    tl.store(Y + row * stride_y + cols, y, mask=mask)


@tessera.kernel
def _norm_bwd_weights(W, B, cols, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr,
                      BLOCK: tl.constexpr):
    """weight and bias in the accumulation type (1 and 0 where absent)."""
    if HAS_W:
        w = tl.load(W + cols, mask=mask, other=0.0).to(ACC)
    else:
        w = tl.where(mask, 1.0, 0.0).to(ACC)
    if HAS_B:
        b = tl.load(B + cols, mask=mask, other=0.0).to(ACC)
    else:
        b = tl.zeros([BLOCK], ACC)
    return w, b


@tessera.kernel
def _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r, n_rows, stride_x, stride_dy, stride_dh, cols, mask,
                        IS_RMS: tl.constexpr, HAS_DH: tl.constexpr):
    """Row r's x, dy, dh (as stored) and mean, rstd; all masked off when r >= n_rows
    (a prefetch past a program's last row reads nothing)."""
    row = r.to(tl.int64)
    live = r < n_rows
    m = mask & live
    x = tl.load(X + row * stride_x + cols, mask=m, other=0.0)
    dy = tl.load(DY + row * stride_dy + cols, mask=m, other=0.0)
    dh = x
    if HAS_DH:
        dh = tl.load(DH + row * stride_dh + cols, mask=m, other=0.0)
    rstd = tl.load(Rstd + row, mask=live, other=0.0)
    mean = rstd
    if not IS_RMS:
        mean = tl.load(Mean + row, mask=live, other=0.0)
    return x, dy, dh, mean, rstd


@tessera.kernel  # a kernel, so the benchmark's Triton build of these sources can call it too
def _add_pair(a1, b1, a2, b2):
    return a1 + a2, b1 + b2


@tessera.kernel
def _add_four(a1, b1, c1, d1, a2, b2, c2, d2):
    return a1 + a2, b1 + b2, c1 + c2, d1 + d2


@tessera.kernel
def _norm_bwd_prep(x_raw, dy_raw, mean, rstd, w, b, mask, IS_RMS: tl.constexpr, RELU: tl.constexpr,
                   NO_SELECT: tl.constexpr, ACC: tl.constexpr, FMA_XHAT: tl.constexpr = False):
    """A row's xhat, dy (zero where the fused ReLU was off) and g = dy * w. NO_SELECT:
    xhat past n_cols left as computed (see below). FMA_XHAT (layer norm): xhat as
    x rstd - mean rstd, one FMA an element with the row's -mean rstd folded, where
    (x - mean) rstd takes an add and a multiply."""
    x = x_raw.to(ACC)
    if IS_RMS:
        xhat = x * rstd
    elif FMA_XHAT:
        xhat = tl.fma(x, rstd, -(mean * rstd))
        if not NO_SELECT:
            xhat = tl.where(mask, xhat, 0.0)
    elif NO_SELECT:
        # Past n_cols x and dy were loaded as 0, so xhat there (-mean * rstd, finite) only
        # meets zeros (g = dy * w in the sums, dy * xhat in dweight; dx is not stored
        # there): no per-element select. The GPU plan with the ReLU (2 x 8 warps) ran
        # 153 -> 147 us so (H100, 16384x4096 fp16); without the ReLU the same change cost
        # layer_norm (2 x 16 warps) 149 -> 160 us and residual_add_layer_norm (1 x 16)
        # 195 -> 231 us, as ptxas scheduled them (bench/results/
        # kernels_cuda_float16_normbwd2_run2/_run3.md). The CPU keeps the select.
        xhat = (x - mean) * rstd
    else:
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    dy = dy_raw.to(ACC)
    if RELU:
        dy = tl.where(xhat * w + b > 0, dy, 0.0)
    return xhat, dy, dy * w


@tessera.kernel
def _norm_bwd_dx(g, xhat, s1, s2, rstd, dh_raw, n_cols, IS_RMS: tl.constexpr, HAS_DH: tl.constexpr,
                 ACC: tl.constexpr, FMA_DX: tl.constexpr = False):
    """dx of a row from its sums s1 = sum(g * xhat), s2 = sum(g) (unused for RMS norm).
    FMA_DX (layer norm on a GPU): dx = g rstd - xhat (c1 rstd) - c2 rstd, two FMAs an
    element with the row's factors folded, where (g - (xhat c1 + c2)) rstd takes an FMA,
    an add and a multiply."""
    c1 = s1 / n_cols
    if IS_RMS:
        dx = (g - xhat * c1) * rstd
    elif FMA_DX:
        c1r = c1 * rstd
        c2r = (s2 / n_cols) * rstd
        dx = tl.fma(g, rstd, tl.fma(xhat, -c1r, -c2r))
    else:
        c2 = s2 / n_cols
        dx = (g - (xhat * c1 + c2)) * rstd
    if HAS_DH:
        dx += dh_raw.to(ACC)
    return dx


@tessera.kernel
def _norm_bwd_kernel(X, W, B, DY, DH, DX, Mean, Rstd, DWB, stride_x, stride_dy, stride_dh, stride_p,
                     n_rows, n_cols, n_progs,
                     IS_RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, RELU: tl.constexpr,
                     HAS_DH: tl.constexpr, PREFETCH: tl.constexpr, PAIR_SUM: tl.constexpr, TWO_ROWS: tl.constexpr,
                     ACC: tl.constexpr, BLOCK: tl.constexpr, STAGES: tl.constexpr = 1,
                     NO_SELECT: tl.constexpr = False, FMA_DX: tl.constexpr = False,
                     FMA_XHAT: tl.constexpr = False):
    # Program pid walks rows pid, pid + n_progs, ... and writes their dweight sum, then
    # their dbias sum, as row pid of DWB (row stride stride_p).
    #
    # PREFETCH (the GPU plan) keeps the loads of the program's next step in flight while
    # it computes this one: without it a program's loads wait for its block reductions
    # and its stores, DRAM idle in between. A 16-warp program of a 4096-column fp16 row
    # holds its dweight/dbias sums, weight and the rows (~90 registers a thread as ptxas
    # chooses; 64 fit with at most 48 bytes of spills, so two such programs share an SM
    # under the maxnreg launch option: BWD_GPU_PLANS). The rows ahead are carried as
    # stored (fp16 rows cost half the registers of fp32 ones). Carrying more than one
    # step ahead in rotating variables (next = after-next) did not help: the copy of a
    # register waits for its load, so the loop stalls there anyway (0.74 of copy where
    # one step ahead gives 0.83 on an H100, bench/results/bwd_sweep_normbwd_run1.log).
    #
    # STAGES > 1 (a GPU plan, without PREFETCH): the compiler's stream ring keeps the
    # loads of the next STAGES - 1 steps in flight through shared memory (cp.async into
    # each thread's own slots; tl.range's num_stages on a loop without tl.dot), so no
    # register carries them.
    #
    # NO_SELECT, FMA_XHAT, FMA_DX: _norm_bwd_prep's and _norm_bwd_dx's (the GPU's plans:
    # fewer instructions an element; see BWD_NO_SELECT, BWD_FMA_XHAT and BWD_FMA_DX).
    #
    # PAIR_SUM: layer norm's two row sums (of g * xhat and of g) as one reduction of a
    # pair, so a row crosses the warps once: 2 barriers a row instead of 4.
    # TWO_ROWS: a step is two rows, r and r + n_progs, whose sums are one reduction (of a
    # pair or four values: 2 barriers for both rows) and whose loads for the next step
    # are issued together: two rows in flight without rotating variables.
    tl.extra.cuda.gdc_launch_dependents()  # the column sums may start (reduce.py's gdc_wait)
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w, b = _norm_bwd_weights(W, B, cols, mask, HAS_W, HAS_B, ACC, BLOCK)
    dw_acc = tl.zeros([BLOCK], ACC)
    db_acc = tl.zeros([BLOCK], ACC)
    step = n_progs * (2 if TWO_ROWS else 1)
    if PREFETCH:
        xa, dya, dha, meana, rstda = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, pid, n_rows, stride_x, stride_dy,
                                                         stride_dh, cols, mask, IS_RMS, HAS_DH)
        if TWO_ROWS:
            xb, dyb, dhb, meanb, rstdb = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, pid + n_progs, n_rows, stride_x,
                                                             stride_dy, stride_dh, cols, mask, IS_RMS, HAS_DH)
    for r in tl.range(pid, n_rows, step, num_stages=STAGES):
        if PREFETCH:
            x_raw, dy_raw, dh_raw, mean, rstd = xa, dya, dha, meana, rstda
            xa, dya, dha, meana, rstda = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r + step, n_rows, stride_x,
                                                             stride_dy, stride_dh, cols, mask, IS_RMS, HAS_DH)
            if TWO_ROWS:
                x2_raw, dy2_raw, dh2_raw, mean2, rstd2 = xb, dyb, dhb, meanb, rstdb
                xb, dyb, dhb, meanb, rstdb = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r + step + n_progs, n_rows,
                                                                 stride_x, stride_dy, stride_dh, cols, mask, IS_RMS,
                                                                 HAS_DH)
        else:
            x_raw, dy_raw, dh_raw, mean, rstd = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r, n_rows, stride_x,
                                                                    stride_dy, stride_dh, cols, mask, IS_RMS, HAS_DH)
            if TWO_ROWS:
                x2_raw, dy2_raw, dh2_raw, mean2, rstd2 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r + n_progs,
                                                                             n_rows, stride_x, stride_dy, stride_dh,
                                                                             cols, mask, IS_RMS, HAS_DH)
        xhat, dy, g = _norm_bwd_prep(x_raw, dy_raw, mean, rstd, w, b, mask, IS_RMS, RELU, NO_SELECT, ACC, FMA_XHAT)
        if TWO_ROWS:
            # The second row past n_rows loaded zeros (and a zero rstd): its sums and
            # its dweight/dbias terms are 0; its store is masked off below.
            xhat2, dy2, g2 = _norm_bwd_prep(x2_raw, dy2_raw, mean2, rstd2, w, b, mask, IS_RMS, RELU, NO_SELECT,
                                            ACC, FMA_XHAT)
            if IS_RMS:
                s1, s1_2 = tl.reduce((g * xhat, g2 * xhat2), 0, _add_pair)
                s2, s2_2 = s1, s1_2
            elif PAIR_SUM:
                s1, s2, s1_2, s2_2 = tl.reduce((g * xhat, g, g2 * xhat2, g2), 0, _add_four)
            else:
                s1, s2 = tl.sum(g * xhat, axis=0), tl.sum(g, axis=0)
                s1_2, s2_2 = tl.sum(g2 * xhat2, axis=0), tl.sum(g2, axis=0)
        else:
            if IS_RMS:
                s1 = tl.sum(g * xhat, axis=0)
                s2 = s1
            elif PAIR_SUM:
                s1, s2 = tl.reduce((g * xhat, g), 0, _add_pair)
            else:
                s1, s2 = tl.sum(g * xhat, axis=0), tl.sum(g, axis=0)
        dx = _norm_bwd_dx(g, xhat, s1, s2, rstd, dh_raw, n_cols, IS_RMS, HAS_DH, ACC, FMA_DX)
        tl.store(DX + r.to(tl.int64) * n_cols + cols, dx, mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
        if TWO_ROWS:
            dx2 = _norm_bwd_dx(g2, xhat2, s1_2, s2_2, rstd2, dh2_raw, n_cols, IS_RMS, HAS_DH, ACC, FMA_DX)
            r2 = r + n_progs
            tl.store(DX + r2.to(tl.int64) * n_cols + cols, dx2, mask=mask & (r2 < n_rows))
            dw_acc += dy2 * xhat2
            db_acc += dy2
    if HAS_W:
        tl.store(DWB + pid * stride_p + cols, dw_acc, mask=mask)
    if HAS_B:
        tl.store(DWB + pid * stride_p + (n_cols if HAS_W else 0) + cols, db_acc, mask=mask)


def _io_type(x):
    return getattr(tl, H.dtype_name(x))


class _FwdPlan:
    """The forward launch for one layout of (x, residual, weight, bias) and options:
    checks done once (see H.Plans)."""
    __slots__ = ("rows", "n", "x_direct", "r_direct", "w_direct", "b_direct", "sx", "sr", "eps", "kw", "shape",
                 "new_out", "new_stat")


def _fwd_plan(op, x, residual, weight, bias, eps, is_rms, relu):
    H.check_float(op, x)
    n = x.shape[-1]
    for name, t in (("residual", residual), ("weight", weight), ("bias", bias)):
        H.check_same(op, x, t, name)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"tessera.kernels.{op}: {name} has shape {tuple(t.shape)}, expected ({n},)")
    if residual is not None and tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"tessera.kernels.{op}: residual has shape {tuple(residual.shape)}, x {tuple(x.shape)}")
    plan = _FwdPlan()
    xv = H.rows_view(x, n)
    rv = H.rows_view(residual, n) if residual is not None else xv
    plan.rows, plan.n, plan.shape = xv.shape[0], n, tuple(x.shape)
    plan.x_direct, plan.r_direct = xv is x, rv is residual
    plan.w_direct = weight is None or H.contiguous(weight) is weight
    plan.b_direct = bias is None or H.contiguous(bias) is bias
    plan.sx, plan.sr = H.row_stride(xv), H.row_stride(rv)
    plan.eps = H.scalar(x, eps)
    # y and h are made in x's shape (contiguous: the (rows, n) rows the kernel writes).
    plan.new_out, plan.new_stat = H.allocator(x, plan.shape), H.allocator(x, (plan.rows,), "acc")
    block = H.block_for(n)
    plan.kw = None if not (plan.rows and n) else dict(
        IS_RMS=is_rms, HAS_RES=residual is not None, HAS_W=weight is not None, HAS_B=bias is not None, RELU=relu,
        IO=_io_type(x), ACC=H.acc_dtype(x), BLOCK=block, **H.row_launch_options(x, block, max_warps=8))
    return plan


_FWD_PLANS = H.Plans()
_BWD_PLANS = H.Plans()

# The GPU plan of the backward walk (bench/bwd_profile.py --sweep measures the
# alternatives): programs per multiprocessor, the most warps per program, whether a
# program loads its next step ahead (PREFETCH), layer norm's two row sums as one pair
# reduction, and two rows a step. On an H100, 16384x4096 fp16, backward with its column
# sum, fraction of a copy of 3 (4 with the residual) row arrays:
#   bench/results/bwd_sweep_h100_tkbwd_run1.log: 512 programs without prefetch (the
#     older plan) 0.586; 132 programs, one row ahead 0.820 (264 programs: 0.769, as
#     ptxas's ~90 registers left room for one 16-warp program per SM: a second wave).
#   bench/results/bwd_sweep_normbwd_run1.log (one row a step, 16 warps): the pair sum
#     0.812 -> 0.825 (layer_norm), 0.692 -> 0.816 (+relu); 32 warps within 0.005 of 16.
#   bench/results/bwd_sweep_normbwd2_run1.log: two programs per SM, each held to half
#     the registers (the maxnreg launch option: 64 at 16 warps, 128 at 8) so both are
#     resident and one's block reductions overlap the other's loads:
#       layer_norm       1 x 16 warps 0.840, two rows 0.822 | 2 x 16 0.913, 2 x 8 0.863
#       layer_norm+relu  1 x 16 0.834, two rows 0.806       | 2 x 8 0.895, 2 x 16 0.822
#                        (48 bytes of spills at 64 registers)
#       rms_norm         1 x 16 0.862, two rows 0.930       | 2 x 8 0.921, 2 x 16 0.903
#       residual_add_layer_norm 1 x 16 0.949, two rows 0.879 | 2 x 8 0.736, 2 x 16 0.734
#                        (the residual's gradient: a fourth row array; 80 bytes of spills at 128)
#     A read-2-write-1 stream (torch.add) runs at 1.031 of the copy there, read 3 write 1
#     at 1.056: the byte mix itself is not below the copy. Two more runs of the sweep
#     (bwd_sweep_normbwd2_run2/run3.log) kept this order within ~1.5%; with the backward's
#     kernels alone (bench/kernels.py, kernels_cuda_float16_normbwd2_run2/_run3.md):
#     layer_norm 149 us (0.913), +relu 147 us (0.927), rms_norm 148-149 us (0.91-0.92).
#   On an H200 (session 9, bench/results/bwd_sweep_h200.log; its copy runs at 4.06 TB/s,
#   the H100's at 2.85): layer_norm 1 x 16 0.742, two rows 0.693 | 2 x 8 0.758, 2 x 16 0.788;
#   layer_norm+relu 0.718, 0.709 | 0.842, 0.739; rms_norm 0.772, two rows 0.816 | 2 x 8
#   0.904, 2 x 16 0.910; residual_add_layer_norm 0.850, 0.754 | 0.642, 0.647. RMS norm takes
#   2 x 8, within 1% of its H100 best (0.921 against 0.930) and 0.82 -> 0.90 on the H200;
#   session 10's H100 sweep: 2 x 8 0.912, 2 x 16 0.894 (bwd_sweep_stream_ring_h100_run1.log).
# The stream ring (STAGES > 1: the compiler loads the next steps through shared memory,
# no register prefetch) on an H200 (session 10, bwd_sweep_stream_ring_h200_run1/run2.log,
# best register-prefetch plan -> best ring plan): layer_norm 0.790 -> 0.889 (2 x 8, 2 or 3
# stages), rms_norm 0.919 -> 0.953 (1 x 16, two rows, 3 stages), residual_add_layer_norm
# 0.853 -> 0.935 (2 x 8, 2 stages; 3: 0.895-0.916), layer_norm+relu 0.845 -> 0.857 (2 x 8,
# 2 stages). On an H100 it gains nothing (bwd_sweep_stream_ring_h100_run1.log: layer_norm
# 0.900 -> 0.859 at best, rms_norm 0.912 -> 0.876, +relu 0.920 -> 0.829, residual 0.935 ->
# 0.944): there the register prefetch already keeps enough in flight for 2.9 TB/s. So
# the plans are per memory speed (_host.fast_memory).
# Per form: (programs per SM, warps at most, two rows a step, ring stages), for rows of
# up to BWD_PLAN_MAX_BLOCK columns; longer rows hold twice the registers a thread, so
# they take one program per SM, one row a step.
BWD_GPU_PLANS = {
    "layer_norm": (2, 16, False, 1),
    "layer_norm+relu": (2, 8, False, 1),
    "rms_norm": (2, 8, False, 1),
    "residual": (1, 16, False, 1),  # with the residual's gradient dh (layer or RMS norm)
}
BWD_GPU_PLANS_FAST_MEMORY = {
    "layer_norm": (2, 8, False, 2),
    "layer_norm+relu": (2, 8, False, 3),
    "rms_norm": (1, 16, True, 3),
    "residual": (2, 8, False, 2),
}
BWD_PLAN_MAX_BLOCK = 4096
BWD_PLAN_OVERRIDE = None  # (programs per SM, warps, two rows) for every form: the sweep's
BWD_PREFETCH = True
BWD_PAIR_SUM = True
BWD_STAGES = None  # with BWD_PLAN_OVERRIDE: the stream ring's stages (None: 1; the sweep's)
# Instruction cuts of the GPU's backward (bench/bwd_profile.py --sweep-parts norm times each
# off and on): BWD_NO_SELECT, the fused ReLU's xhat without the per-element select past
# n_cols (_norm_bwd_prep's NO_SELECT) under the stream ring too, where before only the
# register prefetch took it (masked-off ring slots read as zeros, as masked loads do);
# BWD_FMA_DX, layer norm's dx in two FMAs (_norm_bwd_dx) under the stream ring (the register
# prefetch's plans keep the three operations); BWD_FMA_DX_RELU, the same with the fused ReLU.
# On an H200 (bench/results/bwd_sweep_norm_cuts_h200_s12.log, the kernels alone, 2 x 8 warps,
# 2-stage ring): layer_norm 0.911 -> 0.920 of a copy with the FMAs; layer_norm+relu without
# either cut 0.880, no select 0.896, both 0.878, the FMAs alone 0.811 (ptxas schedules the
# ReLU's loop worse with them: 396 SASS instructions a row step against 451 without the
# cuts, yet slower; a second run, bwd_sweep_norm_cuts_h200_s12_run2.log: no select 0.895,
# both 0.868, neither 0.869, and 3 stages with no select 0.907; in bench/kernels.py 3 stages
# gave 0.888 (kernels_cuda_float16_h200_s12_relu_ring3.md) where 2 gave 0.894 in the full
# round: no better within the noise, so 2 stay). On an H100
# (bwd_sweep_norm_cuts_h100_s12.log), under the register prefetch and its register cap, the
# FMAs took layer_norm from 0.922 to 0.748 and the ReLU form from 0.952 to 0.511.
BWD_NO_SELECT = True
BWD_FMA_DX = True
BWD_FMA_DX_RELU = False
# Session 13 (bench/results/bwd_sweep_norm_cuts_h200_s13.log, the same sweep): BWD_NO_SELECT
# now covers plain layer norm under the ring too (392 -> 324 SASS instructions a row step
# with the FMA below: layer_norm 0.919 -> 0.925 of a copy), and BWD_FMA_XHAT, layer norm's
# xhat in one FMA (_norm_bwd_prep's FMA_XHAT) under the ring (401 -> 386 instructions with
# the ReLU): layer_norm 0.925 -> 0.926, layer_norm+relu 0.901 -> 0.904. Both within a
# percent: the ring's loop is no longer bound by instruction issue.
# Session 14: layer_norm+relu takes 3 ring stages on fast-memory GPUs (it had 2). With
# these cuts its sweeps favoured 3 in every run: 0.910 / 0.899 of a copy (s13), 0.909 /
# 0.898 and 0.912 / 0.899 (bench/results/bwd_sweep_norm_h200_s14_run1/run2.log).
BWD_FMA_XHAT = True

# On the CPU a small backward runs as one program: its one partial row is dweight and
# dbias themselves (when they are kept in the accumulation type, fp32 or fp64), so the
# column sum's launch and output are not needed. Splitting the rows over T threads
# saves (1 - 1/T) of the walk and costs the column sum and the pool's wake-up, ~5 us:
# the one-thread walk of about CPU_SPLIT_COST_ELEMS elements (~0.6 ns each). At 64x256
# fp32 on the 2-core Zen 4 (wall clock): one program 13.4 us, two threads' programs and
# the column sum 18.0 us; on one thread 13.1 against 16.6 us.
CPU_SPLIT_COST_ELEMS = 8192


def _one_program_backward(xin, n_elems) -> bool:
    """Whether the backward on xin (n_elems elements) runs as one program whose partial
    row is the gradients (see CPU_SPLIT_COST_ELEMS); 0 turns it off (tests)."""
    if H.on_gpu(xin) or H.dtype_name(xin) not in ("float32", "float64") or CPU_SPLIT_COST_ELEMS <= 0:
        return False
    threads = H.tessera_threads()
    return n_elems * (threads - 1) <= CPU_SPLIT_COST_ELEMS * threads


def _bwd_prefetch(x) -> bool:
    """Whether a backward program loads its next step ahead: BWD_PREFETCH on a GPU, not
    on the CPU (where the rows ahead would only cost registers). Tests patch it to run
    the GPU plan on the CPU."""
    return BWD_PREFETCH and H.on_gpu(x)


def _bwd_no_select(x, relu, stages) -> bool:
    """Whether layer norm's xhat is left unselected past n_cols (_norm_bwd_prep's
    NO_SELECT), on a GPU: the fused ReLU's under the register prefetch, and with
    BWD_NO_SELECT the fused ReLU's always and plain layer norm's under the stream ring
    (stages > 1). Not on the CPU. Tests patch it."""
    if not H.on_gpu(x):
        return False
    return relu and (_bwd_prefetch(x) and stages == 1 or BWD_NO_SELECT) or BWD_NO_SELECT and stages > 1


def _bwd_fma_dx(x, relu, stages) -> bool:
    """Whether layer norm's dx takes two FMAs (BWD_FMA_DX, BWD_FMA_DX_RELU): on a GPU,
    under the stream ring only (stages > 1). Tests patch it."""
    return H.on_gpu(x) and stages > 1 and (BWD_FMA_DX_RELU if relu else BWD_FMA_DX)


def _bwd_fma_xhat(x, stages) -> bool:
    """Whether layer norm's xhat takes one FMA (BWD_FMA_XHAT): on a GPU, under the stream
    ring only (as BWD_FMA_DX). Tests patch it."""
    return BWD_FMA_XHAT and H.on_gpu(x) and stages > 1


def _bwd_pair_sum(x) -> bool:
    """Layer norm's two row sums as one pair reduction: the GPU's plan (one crossing of
    the warps a row); the CPU keeps two sums. Tests patch it."""
    return BWD_PAIR_SUM and H.on_gpu(x)


def _bwd_gpu_plan(x, is_rms, relu, has_dh, block):
    """(programs per SM, warps at most, two rows a step, stream ring stages) of the GPU
    walk on x's GPU (BWD_GPU_PLANS, or BWD_GPU_PLANS_FAST_MEMORY)."""
    if BWD_PLAN_OVERRIDE is not None:
        return (*BWD_PLAN_OVERRIDE, BWD_STAGES or 1)
    if block > BWD_PLAN_MAX_BLOCK:
        return 1, 16, False, 1
    form = "residual" if has_dh else "rms_norm" if is_rms else "layer_norm+relu" if relu else "layer_norm"
    return (BWD_GPU_PLANS_FAST_MEMORY if H.fast_memory(x) else BWD_GPU_PLANS)[form]


def _bwd_two_rows(x, is_rms=False, has_dh=False, relu=False, block=0) -> bool:
    """Two rows a step on a GPU where the form's plan says so; one row otherwise and on
    the CPU. Tests patch it."""
    return H.on_gpu(x) and _bwd_gpu_plan(x, is_rms, relu, has_dh, block)[2]


def norm_forward(op, x, residual, weight, bias, eps, is_rms, relu, keep_stats=True):
    """(y, h, mean, rstd): y the output shaped as x; h the new residual (or None);
    mean/rstd per row in the accumulation type, for the backward pass (mean is rstd's
    array for RMS norm, which has no mean). keep_stats=False (no backward pass will
    read them): the kernel writes both into one array, one allocation fewer."""
    key = (op, H.layout(x), H.layout(residual), H.layout(weight), H.layout(bias), eps, is_rms, relu)
    plan = _FWD_PLANS.get(key)
    if plan is None:
        plan = _FWD_PLANS.remember(key, _fwd_plan(op, x, residual, weight, bias, eps, is_rms, relu))
    rows, n = plan.rows, plan.n
    xv = x if plan.x_direct else H.rows_view(x, n)
    y = plan.new_out()
    rstd = plan.new_stat()
    mean = rstd if is_rms or not keep_stats else plan.new_stat()
    h = None
    if residual is not None:
        rv = residual if plan.r_direct else H.rows_view(residual, n)
        h = plan.new_out()
    else:
        rv = xv
    if plan.kw is not None:
        w = xv if weight is None else (weight if plan.w_direct else H.contiguous(weight))
        b = xv if bias is None else (bias if plan.b_direct else H.contiguous(bias))
        _norm_fwd_kernel[(rows,)](xv, rv, w, b, y, h if h is not None else y, mean, rstd, plan.sx, plan.sr, n, n,
                                  plan.eps, **plan.kw)
    return y, h, mean, rstd


class _BwdPlan:
    __slots__ = ("rows", "n", "x_direct", "dy_direct", "dh_direct", "w_direct", "b_direct", "sx", "sdy", "sdh",
                 "width", "progs", "kw", "shape", "sum_steps", "grad_dtype", "new_dx", "new_partials", "sums_direct")


def _bwd_plan(xin, weight, bias, dy, dh, is_rms, relu):
    plan = _BwdPlan()
    n = xin.shape[-1]
    xv, dyv = H.rows_view(xin, n), H.rows_view(dy, n)
    dhv = H.rows_view(dh, n) if dh is not None else dyv
    plan.rows, plan.n, plan.shape = xv.shape[0], n, tuple(xin.shape)
    plan.x_direct, plan.dy_direct, plan.dh_direct = xv is xin, dyv is dy, dhv is dh
    plan.w_direct = weight is None or H.contiguous(weight) is weight
    plan.b_direct = bias is None or H.contiguous(bias) is bias
    plan.sx, plan.sdy, plan.sdh = H.row_stride(xv), H.row_stride(dyv), H.row_stride(dhv)
    has_w, has_b = weight is not None, bias is not None
    plan.width = n * (int(has_w) + int(has_b))  # a partial row: dweight, then dbias
    plan.grad_dtype = H.dtype_name(xin)
    # One program's partial row is the sums when they need no cast to the gradients' type.
    plan.sums_direct = _one_program_backward(xin, plan.rows * n)
    block = H.block_for(n)
    per_sm, max_warps, _, stages = (_bwd_gpu_plan(xin, is_rms, relu, dh is not None, block) if H.on_gpu(xin)
                                    else (1, 16, False, 1))  # (tl.range's num_stages means nothing on the CPU)
    plan.progs = 1 if plan.sums_direct else H.num_programs_for_partials(xin, plan.rows, per_sm)
    # The partials' column sum: its launches kept here (xin has the partials' device
    # and precision class), so a call does no column_sum plan lookup.
    plan.sum_steps = column_sum_steps(xin, plan.progs, plan.width)
    plan.new_dx = H.allocator(xin, plan.shape)  # contiguous: the (rows, n) rows the kernel writes
    plan.new_partials = H.allocator(xin, (plan.width,) if plan.sums_direct else (plan.progs, plan.width), "acc")
    plan.kw = None if not (plan.rows and n) else dict(
        IS_RMS=is_rms, HAS_W=has_w, HAS_B=has_b, RELU=relu, HAS_DH=dh is not None,
        PREFETCH=_bwd_prefetch(xin) and stages == 1, STAGES=stages,
        NO_SELECT=not is_rms and _bwd_no_select(xin, relu, stages),
        FMA_DX=not is_rms and _bwd_fma_dx(xin, relu, stages), FMA_XHAT=not is_rms and _bwd_fma_xhat(xin, stages),
        PAIR_SUM=_bwd_pair_sum(xin), TWO_ROWS=_bwd_two_rows(xin, is_rms, dh is not None, relu, block),
        ACC=H.acc_dtype(xin), BLOCK=block, **H.row_launch_options(xin, block, max_warps))
    if plan.kw is not None and "num_warps" in plan.kw:
        # Several programs per SM: ptxas keeps each to its share of the registers, so they
        # are resident together (see BWD_GPU_PLANS for the spills it costs).
        maxnreg = H.max_registers(per_sm, plan.kw["num_warps"])
        if maxnreg is not None:
            plan.kw["maxnreg"] = maxnreg
    return plan


def norm_backward(xin, weight, bias, mean, rstd, dy, dh, is_rms, relu):
    """(dx, dweight, dbias) of a forward pass whose normalized input was `xin` (x, or
    the new residual h); dh is the gradient reaching h directly (residual forms)."""
    key = (H.layout(xin), H.layout(weight), H.layout(bias), H.layout(dy), H.layout(dh), is_rms, relu)
    plan = _BWD_PLANS.get(key)
    if plan is None:
        plan = _BWD_PLANS.remember(key, _bwd_plan(xin, weight, bias, dy, dh, is_rms, relu))
    rows, n, width = plan.rows, plan.n, plan.width
    xv = xin if plan.x_direct else H.rows_view(xin, n)
    dyv = dy if plan.dy_direct else H.rows_view(dy, n)
    dhv = dyv if dh is None else (dh if plan.dh_direct else H.rows_view(dh, n))
    dx = plan.new_dx()
    has_w, has_b = weight is not None, bias is not None
    partials = plan.new_partials() if has_w or has_b else dx
    if plan.kw is not None:
        w = xv if weight is None else (weight if plan.w_direct else H.contiguous(weight))
        b = xv if bias is None else (bias if plan.b_direct else H.contiguous(bias))
        _norm_bwd_kernel[(plan.progs,)](
            xv, w, b, dyv, dhv, dx, mean, rstd, partials, plan.sx, plan.sdy, plan.sdh, width, rows, n, plan.progs,
            **plan.kw)
    dw = db = None
    if has_w or has_b:
        if plan.kw is not None:
            sums = partials if plan.sums_direct else column_sum_run(plan.sum_steps, partials, plan.grad_dtype)
        else:
            sums = H.zeros(xin, (width,))
        if has_w and has_b:
            dw, db = sums[:n], sums[n:]
        elif has_w:
            dw = sums
        else:
            db = sums
    return dx, dw, db


def _run(op, x, residual, weight, bias, eps, is_rms, relu):
    AG = H.autograd()
    if AG.wants_grad(x, residual, weight, bias):
        return AG.Norm.apply(x, residual, weight, bias, (op, eps, is_rms, relu))
    y, h, _, _ = norm_forward(op, x, residual, weight, bias, eps, is_rms, relu, keep_stats=False)
    return (y, h) if residual is not None else y


def layer_norm(x, weight=None, bias=None, eps=1e-5, relu=False):
    """LayerNorm over the last dimension, optionally followed by a fused ReLU."""
    return _run("layer_norm", x, None, weight, bias, eps, False, bool(relu))


def rms_norm(x, weight=None, eps=1e-6):
    """RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps) * weight."""
    return _run("rms_norm", x, None, weight, None, eps, True, False)


def residual_add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5):
    """h = x + residual; returns (layer_norm(h), h) from one pass over memory."""
    return _run("residual_add_layer_norm", x, residual, weight, bias, eps, False, False)


def residual_add_rms_norm(x, residual, weight=None, eps=1e-6):
    """h = x + residual; returns (rms_norm(h), h) from one pass over memory."""
    return _run("residual_add_rms_norm", x, residual, weight, None, eps, True, False)
