"""rms_norm_rope: RMSNorm over each head vector, then the rotary embedding, in one
kernel per direction (the q/k path of a transformer with QK-norm).

x is (..., seq, heads, head_dim); cos and sin are (seq, head_dim / 2). The rotation is
the half-split ("NeoX") form: with n = rms_norm(x) * weight split into halves n1, n2,

    y1 = n1 * cos - n2 * sin,     y2 = n2 * cos + n1 * sin

Each program takes ROWS consecutive head vectors (a [ROWS, head_dim / 2] tile per
half); row r's position is (r // heads) % seq. The backward pass rotates dy back
(dn1 = dy1 cos + dy2 sin, dn2 = dy2 cos - dy1 sin) and runs the RMSNorm backward on
dn, summing dweight per program as norm.py does.
"""
from __future__ import annotations

import tessera
import tessera.language as tl

from . import _host as H
from .reduce import column_sum_run, column_sum_steps


@tessera.kernel
def _rms_rope_fwd_kernel(X, W, COS, SIN, Y, RSTD, stride_x, n_rows, n_heads, seq_len, half, eps,
                         HAS_W: tl.constexpr, ACC: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # Program p: head vectors p*ROWS .. p*ROWS + ROWS - 1, as [ROWS, BLOCK] halves.
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    # n_rows is an i32 (< 2^31): the position in 32-bit arithmetic (an i64 division
    # and remainder are ~4x the instructions).
    pos = ((tl.program_id(0) * ROWS + tl.arange(0, ROWS)) // n_heads) % seq_len
    c = tl.arange(0, BLOCK)
    m = (r[:, None] < n_rows) & (c[None, :] < half)
    xp = X + r[:, None] * stride_x + c[None, :]
    x1 = tl.load(xp, mask=m, other=0.0).to(ACC)
    x2 = tl.load(xp + half, mask=m, other=0.0).to(ACC)
    rstd = 1.0 / tl.sqrt(tl.sum(tl.fma(x1, x1, x2 * x2), axis=1) / (2 * half) + eps)
    cs = tl.load(COS + pos[:, None] * half + c[None, :], mask=m, other=0.0).to(ACC)
    sn = tl.load(SIN + pos[:, None] * half + c[None, :], mask=m, other=0.0).to(ACC)
    # The weight and the rotation first, rstd last (a per-row factor of both halves):
    # 4 multiplies and an FMA per pair of outputs fewer than normalizing first.
    if HAS_W:
        x1 = x1 * tl.load(W + c, mask=c < half, other=0.0).to(ACC)[None, :]
        x2 = x2 * tl.load(W + half + c, mask=c < half, other=0.0).to(ACC)[None, :]
    yp = Y + r[:, None] * (2 * half) + c[None, :]
    tl.store(yp, tl.fma(x1, cs, -(x2 * sn)) * rstd[:, None], mask=m)
    tl.store(yp + half, tl.fma(x2, cs, x1 * sn) * rstd[:, None], mask=m)
    tl.store(RSTD + r, rstd, mask=r < n_rows)


@tessera.kernel
def _rms_rope_bwd_group_loads(X, DY, RSTD, g, n_rows, stride_x, stride_dy, half, c, cm, ROWS: tl.constexpr):
    """Row group g's x and dy halves (as stored) and rstd; nothing read past n_rows."""
    r = g.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    m = (r[:, None] < n_rows) & cm[None, :]
    xp = X + r[:, None] * stride_x + c[None, :]
    dyp = DY + r[:, None] * stride_dy + c[None, :]
    return (tl.load(xp, mask=m, other=0.0), tl.load(xp + half, mask=m, other=0.0),
            tl.load(dyp, mask=m, other=0.0), tl.load(dyp + half, mask=m, other=0.0),
            tl.load(RSTD + r, mask=r < n_rows, other=0.0))


@tessera.kernel
def _rms_rope_bwd_kernel(X, W, COS, SIN, RSTD, DY, DX, DWp, stride_x, stride_dy, n_rows, n_heads, seq_len, half,
                         n_progs, HAS_W: tl.constexpr, PREFETCH: tl.constexpr, ACC: tl.constexpr, ROWS: tl.constexpr,
                         BLOCK: tl.constexpr, STAGES: tl.constexpr = 1):
    # Program p: row groups p, p + n_progs, ... of ROWS head vectors each. PREFETCH (the
    # GPU plan) issues the next group's loads of x, dy and rstd before this group's
    # arithmetic and stores, so they wait out one memory latency under this group's work.
    # STAGES > 1 (without PREFETCH): the compiler's stream ring keeps the next STAGES - 1
    # groups' loads in flight through shared memory (kernels/norm.py's walk has the same).
    tl.extra.cuda.gdc_launch_dependents()  # the column sum may start (reduce.py's gdc_wait)
    pid = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    cm = c < half
    if HAS_W:
        w1 = tl.load(W + c, mask=cm, other=0.0).to(ACC)[None, :]
        w2 = tl.load(W + half + c, mask=cm, other=0.0).to(ACC)[None, :]
    else:
        w1 = tl.where(cm, 1.0, 0.0).to(ACC)[None, :]
        w2 = w1
    dw1 = tl.zeros([ROWS, BLOCK], ACC)
    dw2 = tl.zeros([ROWS, BLOCK], ACC)
    n_groups = tl.cdiv(n_rows, ROWS)
    if PREFETCH:
        nx1, nx2, ndy1, ndy2, nrstd = _rms_rope_bwd_group_loads(X, DY, RSTD, pid, n_rows, stride_x, stride_dy, half,
                                                                c, cm, ROWS)
    for g in tl.range(pid, n_groups, n_progs, num_stages=STAGES):
        if PREFETCH:
            x1r, x2r, dy1r, dy2r, rstd_row = nx1, nx2, ndy1, ndy2, nrstd
            # Past the last group the row index is >= n_rows: the loads are masked off.
            nx1, nx2, ndy1, ndy2, nrstd = _rms_rope_bwd_group_loads(X, DY, RSTD, g + n_progs, n_rows, stride_x,
                                                                    stride_dy, half, c, cm, ROWS)
        else:
            x1r, x2r, dy1r, dy2r, rstd_row = _rms_rope_bwd_group_loads(X, DY, RSTD, g, n_rows, stride_x, stride_dy,
                                                                       half, c, cm, ROWS)
        r = g.to(tl.int64) * ROWS + tl.arange(0, ROWS)
        pos = ((g * ROWS + tl.arange(0, ROWS)) // n_heads) % seq_len  # 32-bit, as the forward
        m = (r[:, None] < n_rows) & cm[None, :]
        x1 = x1r.to(ACC)
        x2 = x2r.to(ACC)
        rstd = rstd_row[:, None]
        cs = tl.load(COS + pos[:, None] * half + c[None, :], mask=m, other=0.0).to(ACC)
        sn = tl.load(SIN + pos[:, None] * half + c[None, :], mask=m, other=0.0).to(ACC)
        dy1 = dy1r.to(ACC)
        dy2 = dy2r.to(ACC)
        dn1 = dy1 * cs + dy2 * sn
        dn2 = dy2 * cs - dy1 * sn
        xh1 = x1 * rstd
        xh2 = x2 * rstd
        g1 = dn1 * w1
        g2 = dn2 * w2
        # One row sum over both halves (one reduction where two were).
        c1 = (tl.sum(g1 * xh1 + g2 * xh2, axis=1) / (2 * half))[:, None]
        dxp = DX + r[:, None] * (2 * half) + c[None, :]
        tl.store(dxp, (g1 - xh1 * c1) * rstd, mask=m)
        tl.store(dxp + half, (g2 - xh2 * c1) * rstd, mask=m)
        dw1 += dn1 * xh1
        dw2 += dn2 * xh2
    if HAS_W:
        tl.store(DWp + pid * 2 * half + c, tl.sum(dw1, axis=0), mask=cm)
        tl.store(DWp + pid * 2 * half + half + c, tl.sum(dw2, axis=0), mask=cm)


def _rows_per_program(half_block):
    """Head vectors per program: a [ROWS, BLOCK] tile of ~2048 elements per half, so a
    GPU block moves a few KB instead of one 256-byte head (one program per head left
    the H100 at a fifth of its bandwidth). The backward walk's step, and the CPU's
    forward."""
    return max(1, min(32, 2048 // half_block))


# The GPU forward's head vectors per program: ~1024 elements per half (16 heads of 128),
# 4 warps. 65536x8x128 fp16, of a copy, 32 -> 16 heads: H100 0.929 -> 0.934-0.936, H200
# 0.875 -> 0.910 (more, smaller programs: the last wave's tail is shorter; 64 heads:
# 0.908 / 0.820; bench/results/memory_bound_configs_h100.md, memory_bound_configs_h200.md).
FWD_GPU_ELEMS_PER_HALF = 1024


def _fwd_rows_per_program(x, half_block):
    if not H.on_gpu(x):
        return _rows_per_program(half_block)
    return max(1, min(32, FWD_GPU_ELEMS_PER_HALF // half_block))


def _check(x, weight, cos, sin):
    H.check_float("rms_norm_rope", x)
    if x.ndim < 3:
        raise ValueError(f"tessera.kernels.rms_norm_rope: x must be (..., seq, heads, head_dim), got {tuple(x.shape)}")
    seq, heads, d = x.shape[-3:]
    if d % 2:
        raise ValueError(f"tessera.kernels.rms_norm_rope: head_dim must be even, got {d}")
    for name, t in (("weight", weight), ("cos", cos), ("sin", sin)):
        H.check_same("rms_norm_rope", x, t, name)
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (seq, d // 2):
            raise ValueError(f"tessera.kernels.rms_norm_rope: {name} has shape {tuple(t.shape)}, "
                             f"expected ({seq}, {d // 2})")
    if weight is not None and tuple(weight.shape) != (d,):
        raise ValueError(f"tessera.kernels.rms_norm_rope: weight has shape {tuple(weight.shape)}, expected ({d},)")
    return seq, heads, d


_PLANS = H.Plans()

# The backward's GPU plan (bench/bwd_profile.py --sweep): programs per multiprocessor
# and warps per program. H100, 65536x8x128 fp16: 4 per SM 0.720 of copy, 2 per SM
# 0.792 (8 warps 0.780, 16 warps 0.56; bench/results/bwd_sweep_h100_tkbwd_run1.log).
# 3 per SM (4 warps, 168 registers as ptxas chooses: maxnreg 168 lets three fit) 0.849,
# 2 per SM 0.840, 4 per SM (128 registers) 0.755 (bench/results/bwd_sweep_normbwd2_run1.log;
# run3: 0.817 / 0.823 / 0.729, so 2 and 3 are level within noise on the plans alone); the
# kernels alone with 3 (bench/kernels.py): 154 and 159 us, 0.94 and 0.91 of copy, where the
# lead's round with 2 had 162 us (another run).
BWD_PROGRAMS_PER_SM = 3
BWD_NUM_WARPS = 4
# Loading the next row group ahead: 0.830 -> 0.818 of copy on the H100 (2 programs of 4
# warps per SM; 8 warps 0.801; bench/results/bwd_sweep_normbwd_run1.log): off. 228
# registers a thread with it, 168 without (ptxas), so it only trades registers.
BWD_PREFETCH = False
# The stream ring (STAGES > 1) instead, on an H200: 0.822 of copy without (3 per SM), 0.726
# -0.831 with 2-4 stages at 1-3 per SM (bench/results/bwd_sweep_stream_ring_h200_run1.log):
# off. (A group's 26 KB a stage leaves room for fewer programs per SM.)
BWD_STAGES = 1


def _bwd_prefetch(x) -> bool:
    """The backward walk loads its next row group during this one on a GPU
    (BWD_PREFETCH); the CPU's does not. Tests patch it."""
    return BWD_PREFETCH and H.on_gpu(x)


def _bwd_launch_options(x) -> dict:
    """The backward's GPU warps, and a register cap when BWD_PROGRAMS_PER_SM programs
    would not fit a multiprocessor at ptxas's own count."""
    if not H.on_gpu(x):
        return {}
    maxnreg = H.max_registers(BWD_PROGRAMS_PER_SM, BWD_NUM_WARPS)
    return {"num_warps": BWD_NUM_WARPS, **({"maxnreg": maxnreg} if maxnreg is not None else {})}


def _plan(x, weight, cos, sin, backward_dy=None):
    """(heads, seq, half, rows, per, block, progs, the row strides of x and dy, the
    tables' contiguity, x's contiguity, the backward's column-sum launches) for one
    layout of the arguments (see H.Plans)."""
    seq, heads, d = _check(x, weight, cos, sin)
    xv = H.rows_view(x, d)
    rows = xv.shape[0]
    block = H.block_for(d // 2)
    per = _rows_per_program(block)
    progs = H.num_programs_for_partials(x, tessera.cdiv(rows, per), BWD_PROGRAMS_PER_SM)
    sdy = H.row_stride(H.rows_view(backward_dy, d)) if backward_dy is not None else 0
    direct = tuple(t is None or H.contiguous(t) is t for t in (weight, cos, sin))
    # The backward's dweight partials' column sum, kept with the plan (x: their device
    # and precision class).
    sum_steps = column_sum_steps(x, progs, d) if backward_dy is not None and weight is not None else None
    return heads, seq, d // 2, rows, per, block, progs, H.row_stride(xv), sdy, direct, xv is x, sum_steps


def _plan_for(x, weight, cos, sin, dy=None):
    key = (H.layout(x), H.layout(weight), H.layout(cos), H.layout(sin), H.layout(dy))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS.remember(key, _plan(x, weight, cos, sin, dy))
    return plan


def _tables(plan, weight, cos, sin, xv):
    w_direct, c_direct, s_direct = plan[9]
    w = xv if weight is None else (weight if w_direct else H.contiguous(weight))
    return w, (cos if c_direct else H.contiguous(cos)), (sin if s_direct else H.contiguous(sin))


def rms_norm_rope_forward(x, weight, cos, sin, eps):
    plan = _plan_for(x, weight, cos, sin)
    heads, seq, half, rows, _, block, _, sx, _, _, x_direct, _ = plan
    per = _fwd_rows_per_program(x, block)
    xv = x if x_direct else H.rows_view(x, 2 * half)
    y = H.empty(x, tuple(x.shape))  # contiguous: the (rows, head_dim) the kernel writes
    rstd = H.empty(x, (rows,), "acc")
    if rows and half:
        w, c, s = _tables(plan, weight, cos, sin, xv)
        _rms_rope_fwd_kernel[(tessera.cdiv(rows, per),)](
            xv, w, c, s, y, rstd, sx, rows, heads, seq, half, H.scalar(x, eps), HAS_W=weight is not None,
            ACC=H.acc_dtype(x), ROWS=per, BLOCK=block)
    return y, rstd


def rms_norm_rope_backward(x, weight, cos, sin, rstd, dy):
    plan = _plan_for(x, weight, cos, sin, dy)
    heads, seq, half, rows, per, block, progs, sx, sdy, _, x_direct, sum_steps = plan
    d = 2 * half
    xv = x if x_direct else H.rows_view(x, d)
    dyv = H.rows_view(dy, d)
    dx = H.empty(x, tuple(x.shape))
    dwp = H.empty(x, (progs, d), "acc") if weight is not None else dx
    if rows and d:
        w, c, s = _tables(plan, weight, cos, sin, xv)
        _rms_rope_bwd_kernel[(progs,)](xv, w, c, s, rstd, dyv, dx, dwp, sx, sdy, rows, heads, seq, half, progs,
                                       HAS_W=weight is not None, PREFETCH=_bwd_prefetch(x), ACC=H.acc_dtype(x),
                                       ROWS=per, BLOCK=block, STAGES=BWD_STAGES if H.on_gpu(x) else 1,
                                       **_bwd_launch_options(x))
    dw = column_sum_run(sum_steps, dwp, H.dtype_name(weight)) if weight is not None else None
    return dx, dw


def rms_norm_rope(x, weight, cos, sin, eps=1e-6):
    """RMSNorm over head_dim (times weight, may be None) then the rotary embedding, for
    x of shape (..., seq, heads, head_dim) and cos/sin of shape (seq, head_dim / 2).
    Apply it to q and to k."""
    AG = H.autograd()
    if AG.wants_grad(cos, sin):
        raise NotImplementedError("tessera.kernels.rms_norm_rope: cos and sin are constant tables; "
                                  "no gradient flows to them (pass tensors that do not require grad)")
    if AG.wants_grad(x, weight):
        return AG.RmsNormRope.apply(x, weight, cos, sin, eps)
    return rms_norm_rope_forward(x, weight, cos, sin, eps)[0]
