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
rows while it reduces the current one (PREFETCH) with one program per SM: 0.170 ms there
(bench/results/bwd_sweep_h100_tkbwd_run1.log).
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


@tessera.kernel
def _norm_bwd_kernel(X, W, B, DY, DH, DX, Mean, Rstd, DWB, stride_x, stride_dy, stride_dh, stride_p,
                     n_rows, n_cols, n_progs,
                     IS_RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, RELU: tl.constexpr,
                     HAS_DH: tl.constexpr, PREFETCH: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # Program pid walks rows pid, pid + n_progs, ... and writes their dweight sum, then
    # their dbias sum, as row pid of DWB (row stride stride_p).
    #
    # PREFETCH = d > 0 (the GPU plan) keeps the loads of the program's next d rows in
    # flight while it computes this one: a 16-warp program of a 4096-column fp16 row
    # needs ~100 registers a thread (its dweight/dbias sums, weight, bias, the row), so
    # one program fits a multiprocessor, and without prefetching its loads wait for its
    # two block reductions and its stores, DRAM idle in between. Row r's loads are
    # issued at step r - d; the d rows ahead are carried as p1 (next) .. p3, as stored
    # (fp16 rows cost half the registers of fp32 ones).
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if HAS_W:
        w = tl.load(W + cols, mask=mask, other=0.0).to(ACC)
    else:
        w = tl.where(mask, 1.0, 0.0).to(ACC)
    if HAS_B:
        b = tl.load(B + cols, mask=mask, other=0.0).to(ACC)
    else:
        b = tl.zeros([BLOCK], ACC)
    dw_acc = tl.zeros([BLOCK], ACC)
    db_acc = tl.zeros([BLOCK], ACC)
    x1, dy1, dh1, mean1, rstd1 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, pid, n_rows, stride_x, stride_dy,
                                                     stride_dh, cols, mask, IS_RMS, HAS_DH)
    x2, dy2, dh2, mean2, rstd2 = x1, dy1, dh1, mean1, rstd1
    x3, dy3, dh3, mean3, rstd3 = x1, dy1, dh1, mean1, rstd1
    if PREFETCH >= 2:
        x2, dy2, dh2, mean2, rstd2 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, pid + n_progs, n_rows, stride_x,
                                                         stride_dy, stride_dh, cols, mask, IS_RMS, HAS_DH)
    if PREFETCH >= 3:
        x3, dy3, dh3, mean3, rstd3 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, pid + 2 * n_progs, n_rows,
                                                         stride_x, stride_dy, stride_dh, cols, mask, IS_RMS, HAS_DH)
    for r in range(pid, n_rows, n_progs):
        if PREFETCH == 0:
            x_raw, dy_raw, dh_raw, mean, rstd = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r, n_rows, stride_x,
                                                                    stride_dy, stride_dh, cols, mask, IS_RMS, HAS_DH)
        else:
            x_raw, dy_raw, dh_raw, mean, rstd = x1, dy1, dh1, mean1, rstd1
            if PREFETCH == 1:
                x1, dy1, dh1, mean1, rstd1 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r + n_progs, n_rows,
                                                                 stride_x, stride_dy, stride_dh, cols, mask, IS_RMS,
                                                                 HAS_DH)
            if PREFETCH == 2:
                x1, dy1, dh1, mean1, rstd1 = x2, dy2, dh2, mean2, rstd2
                x2, dy2, dh2, mean2, rstd2 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r + 2 * n_progs, n_rows,
                                                                 stride_x, stride_dy, stride_dh, cols, mask, IS_RMS,
                                                                 HAS_DH)
            if PREFETCH == 3:
                x1, dy1, dh1, mean1, rstd1 = x2, dy2, dh2, mean2, rstd2
                x2, dy2, dh2, mean2, rstd2 = x3, dy3, dh3, mean3, rstd3
                x3, dy3, dh3, mean3, rstd3 = _norm_bwd_row_loads(X, DY, DH, Mean, Rstd, r + 3 * n_progs, n_rows,
                                                                 stride_x, stride_dy, stride_dh, cols, mask, IS_RMS,
                                                                 HAS_DH)
        row = r.to(tl.int64)
        x = x_raw.to(ACC)
        if IS_RMS:
            xhat = x * rstd
        else:
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        dy = dy_raw.to(ACC)
        if RELU:
            dy = tl.where(xhat * w + b > 0, dy, 0.0)
        g = dy * w
        c1 = tl.sum(g * xhat, axis=0) / n_cols
        if IS_RMS:
            dx = (g - xhat * c1) * rstd
        else:
            c2 = tl.sum(g, axis=0) / n_cols
            dx = (g - (xhat * c1 + c2)) * rstd
        if HAS_DH:
            dx += dh_raw.to(ACC)
        tl.store(DX + row * n_cols + cols, dx, mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
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
# alternatives): programs per multiprocessor, the most warps per program, and how
# many rows ahead a program loads (PREFETCH; the fused-ReLU form its own). On an H100,
# 16384x4096 fp16 (bench/results/bwd_sweep_h100_tkbwd_run1.log; backward with its
# column sum, fraction of a copy of 3 (4 with the residual) row arrays):
#   layer_norm   512 programs, no prefetch (the old plan) 0.586;  132, prefetch 1: 0.820
#                (2: 0.811, 3: 0.658; 264 programs: 0.769; 32 warps: the same as 16)
#   +relu        0.462 -> 0.742 with prefetch 3 (1: 0.698)
#   residual LN  0.720 -> 0.840;  rms_norm 0.836 -> 0.841 (flat: prefetch does not help it)
# ptxas gives the 16-warp walk 76-128 registers a thread, so one program fits an SM
# and one program per SM is the whole grid: more programs queue in waves.
BWD_PROGRAMS_PER_SM = 1
BWD_MAX_WARPS = 16
BWD_PREFETCH = 1
BWD_PREFETCH_RELU = 3

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


def _bwd_prefetch(x, relu=False) -> int:
    """Rows a backward program loads ahead: BWD_PREFETCH(_RELU) on a GPU, none on the
    CPU (where the rows ahead would only cost registers). Tests patch it to run the
    GPU plan on the CPU."""
    if not H.on_gpu(x):
        return 0
    return BWD_PREFETCH_RELU if relu else BWD_PREFETCH


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
    plan.progs = 1 if plan.sums_direct else H.num_programs_for_partials(xin, plan.rows, BWD_PROGRAMS_PER_SM)
    # The partials' column sum: its launches kept here (xin has the partials' device
    # and precision class), so a call does no column_sum plan lookup.
    plan.sum_steps = column_sum_steps(xin, plan.progs, plan.width)
    plan.new_dx = H.allocator(xin, plan.shape)  # contiguous: the (rows, n) rows the kernel writes
    plan.new_partials = H.allocator(xin, (plan.width,) if plan.sums_direct else (plan.progs, plan.width), "acc")
    block = H.block_for(n)
    plan.kw = None if not (plan.rows and n) else dict(
        IS_RMS=is_rms, HAS_W=has_w, HAS_B=has_b, RELU=relu, HAS_DH=dh is not None, PREFETCH=_bwd_prefetch(xin, relu),
        ACC=H.acc_dtype(xin), BLOCK=block, **H.row_launch_options(xin, block, BWD_MAX_WARPS))
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
