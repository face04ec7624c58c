"""Row normalizations, one fused kernel per direction: layer_norm (optional fused
ReLU), rms_norm, and the residual_add_* forms that add a residual first and return
both the normalized rows and the new residual.

Forward: one program per row; the row stays in registers between the statistics
and the output (one read of x, one write of y). Mean and 1/std per row are kept for
the backward pass (4 bytes a row).

Backward: P programs (a few per CPU thread, hundreds on a GPU) each walk rows
pid, pid+P, ... computing dx row by row and summing dweight and dbias for their
rows in registers; each writes one partial row, and a column sum of the P partial
rows gives dweight/dbias. With xhat = (x - mean) * rstd and g = dy * w:

    dx = rstd * (g - mean(g * xhat) * xhat - mean(g))     (layer norm)
    dx = rstd * (g - mean(g * xhat) * xhat)               (RMS norm: no centring)
"""
from __future__ import annotations

import tessera
import tessera.language as tl

from . import _host as H
from .reduce import column_sum


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
def _norm_bwd_kernel(X, W, B, DY, DH, DX, Mean, Rstd, DWp, DBp, stride_x, stride_dy, stride_dh,
                     n_rows, n_cols, n_progs,
                     IS_RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, RELU: tl.constexpr,
                     HAS_DH: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                     PREFETCH: tl.constexpr):
    # Program pid takes the groups of ROWS consecutive rows pid, pid + n_progs, ...: a
    # [ROWS, BLOCK] tile per step, so ROWS rows' loads are in flight before the step's
    # reductions wait on them (one row per step left a GPU latency-bound).
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
    w2 = w[None, :]
    b2 = b[None, :]
    dw_acc = tl.zeros([ROWS, BLOCK], ACC)
    db_acc = tl.zeros([ROWS, BLOCK], ACC)
    sub = tl.arange(0, ROWS)
    n_groups = tl.cdiv(n_rows, ROWS)
    if PREFETCH:  # the next group's x and dy load while this group's reductions run
        rows = pid.to(tl.int64) * ROWS + sub
        m2 = (rows < n_rows)[:, None] & mask[None, :]
        x_next = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=m2, other=0.0)
        dy_next = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=m2, other=0.0)
    for grp in range(pid, n_groups, n_progs):
        rows = grp.to(tl.int64) * ROWS + sub
        row_ok = rows < n_rows
        m2 = row_ok[:, None] & mask[None, :]
        if PREFETCH:
            x = x_next.to(ACC)
            dy = dy_next.to(ACC)
            nrows = rows + n_progs * ROWS
            nm2 = (nrows < n_rows)[:, None] & mask[None, :]
            x_next = tl.load(X + nrows[:, None] * stride_x + cols[None, :], mask=nm2, other=0.0)
            dy_next = tl.load(DY + nrows[:, None] * stride_dy + cols[None, :], mask=nm2, other=0.0)
        else:
            x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=m2, other=0.0).to(ACC)
            dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=m2, other=0.0).to(ACC)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)[:, None]
        if IS_RMS:
            xhat = x * rstd
        else:
            xhat = tl.where(m2, (x - tl.load(Mean + rows, mask=row_ok, other=0.0)[:, None]) * rstd, 0.0)
        if RELU:
            dy = tl.where(xhat * w2 + b2 > 0, dy, 0.0)
        g = dy * w2
        c1 = (tl.sum(g * xhat, axis=1) / n_cols)[:, None]
        if IS_RMS:
            dx = (g - xhat * c1) * rstd
        else:
            c2 = (tl.sum(g, axis=1) / n_cols)[:, None]
            dx = (g - (xhat * c1 + c2)) * rstd
        if HAS_DH:
            dx += tl.load(DH + rows[:, None] * stride_dh + cols[None, :], mask=m2, other=0.0).to(ACC)
        tl.store(DX + rows[:, None] * n_cols + cols[None, :], dx, mask=m2)
        dw_acc += dy * xhat
        db_acc += dy
    if HAS_W:
        tl.store(DWp + pid * n_cols + cols, tl.sum(dw_acc, axis=0), mask=mask)
    if HAS_B:
        tl.store(DBp + pid * n_cols + cols, tl.sum(db_acc, axis=0), mask=mask)


# GPU plan of the backward kernel (bwd_plan); the benchmark's sweeps override it.
GPU_BWD = {"programs": 264, "rows": 2, "max_warps": 16, "prefetch": False}


def bwd_plan(like, rows, block):
    """(programs, rows per step, launch options) of the backward kernel. On the CPU a
    few programs per thread, one row a step; on a GPU GPU_BWD (see its measurements)."""
    if not H.on_gpu(like):
        return H.num_programs_for_partials(like, rows), 1, {}
    per_step = max(1, min(GPU_BWD["rows"], tessera.next_power_of_2(max(rows, 1))))
    progs = max(1, min(GPU_BWD["programs"], tessera.cdiv(max(rows, 1), per_step)))
    return progs, per_step, H.row_launch_options(like, block, max_warps=GPU_BWD["max_warps"])


def _io_type(x):
    return getattr(tl, H.dtype_name(x))


def norm_forward(op, x, residual, weight, bias, eps, is_rms, relu):
    """(y, h, mean, rstd): y the output shaped as x; h the new residual (or None);
    mean/rstd per row in the accumulation type, for the backward pass."""
    H.check_float(op, x)
    n = x.shape[-1]
    for name, t in (("residual", residual), ("weight", weight), ("bias", bias)):
        H.check_same(op, x, t, name)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"tessera.kernels.{op}: {name} has shape {tuple(t.shape)}, expected ({n},)")
    if residual is not None and tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"tessera.kernels.{op}: residual has shape {tuple(residual.shape)}, x {tuple(x.shape)}")
    xv = H.rows_view(x, n)
    rv = H.rows_view(residual, n) if residual is not None else xv
    rows = xv.shape[0]
    y = H.empty(x, (rows, n))
    h = H.empty(x, (rows, n)) if residual is not None else None
    mean = H.empty(x, (rows,), "acc")
    rstd = H.empty(x, (rows,), "acc")
    w = H.contiguous(weight) if weight is not None else xv
    b = H.contiguous(bias) if bias is not None else xv
    if rows and n:
        _norm_fwd_kernel[(rows,)](
            xv, rv, w, b, y, h if h is not None else y, mean, rstd, H.row_stride(xv), H.row_stride(rv), n, n,
            H.scalar(x, eps), IS_RMS=is_rms, HAS_RES=residual is not None, HAS_W=weight is not None,
            HAS_B=bias is not None, RELU=relu, IO=_io_type(x), ACC=H.acc_dtype(x), BLOCK=H.block_for(n),
            **H.row_launch_options(x, H.block_for(n), max_warps=8))
    shape = tuple(x.shape)
    return y.reshape(shape), (h.reshape(shape) if h is not None else None), mean, rstd


def norm_backward(xin, weight, bias, mean, rstd, dy, dh, is_rms, relu):
    """(dx, dweight, dbias) of a forward pass whose normalized input was `xin` (x, or
    the new residual h); dh is the gradient reaching h directly (residual forms)."""
    n = xin.shape[-1]
    xv = H.rows_view(xin, n)
    dyv = H.rows_view(dy, n)
    dhv = H.rows_view(dh, n) if dh is not None else dyv
    rows = xv.shape[0]
    dx = H.empty(xin, (rows, n))
    block = H.block_for(n)
    progs, per_step, options = bwd_plan(xin, rows, block)
    dwp = H.empty(xin, (progs, n), "acc") if weight is not None else dx
    dbp = H.empty(xin, (progs, n), "acc") if bias is not None else dx
    w = H.contiguous(weight) if weight is not None else xv
    b = H.contiguous(bias) if bias is not None else xv
    if rows and n:
        _norm_bwd_kernel[(progs,)](
            xv, w, b, dyv, dhv, dx, mean, rstd, dwp, dbp, H.row_stride(xv), H.row_stride(dyv), H.row_stride(dhv),
            rows, n, progs, IS_RMS=is_rms, HAS_W=weight is not None, HAS_B=bias is not None, RELU=relu,
            HAS_DH=dh is not None, ACC=H.acc_dtype(xin), BLOCK=block, ROWS=per_step, PREFETCH=bool(H.on_gpu(xin) and GPU_BWD["prefetch"]), **options)
    dw = column_sum(dwp, H.dtype_name(weight)) if weight is not None else None
    db = column_sum(dbp, H.dtype_name(bias)) if bias is not None else None
    return dx.reshape(tuple(xin.shape)), dw, db


def _run(op, x, residual, weight, bias, eps, is_rms, relu):
    from . import autograd as AG
    if AG.wants_grad(x, residual, weight, bias):
        return AG.Norm.apply(op, x, residual, weight, bias, eps, is_rms, relu)
    y, h, _, _ = norm_forward(op, x, residual, weight, bias, eps, is_rms, relu)
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
