"""Reductions over any one dimension: reduce_sum_squared (sum of x*x) and
reduce_mean_abs (mean of |x|), with their backward kernels; the plain column sum
here also finishes every backward pass that reduces over rows (dweight, dbias).

The input is seen as (outer, n, inner) — `n` the reduced dimension — through its
strides, so a transposed or sliced input needs no copy. Each program owns one
`outer` index and BLOCK_I consecutive `inner` indices and walks `n` in chunks of
BLOCK_R, accumulating a [BLOCK_R, BLOCK_I] tile that is summed once at the end:

    x: (outer=2, n=5, inner=3), dim=1       program (o, i-block) reads
        o=0: n0 [a b c]                     x[o, 0:BLOCK_R, i:i+BLOCK_I] per step
             n1 [d e f]   ->  out[0, :] = [a²+d²+..., b²+e²+..., c²+f²+...]
"""
from __future__ import annotations

import numpy as np

import tessera
import tessera.language as tl

from . import _host as H

OP_SUM, OP_SUM_SQUARED, OP_MEAN_ABS = 0, 1, 2


@tessera.kernel
def _reduce_dim_kernel(X, Y, n, inner, stride_o, stride_r, stride_i, inv_n,
                       OP: tl.constexpr, ACC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    r = tl.arange(0, BLOCK_R)
    base = X + o * stride_o + i[None, :] * stride_i
    acc = tl.zeros([BLOCK_R, BLOCK_I], ACC)
    for start in range(0, n, BLOCK_R):
        rows = start + r
        m = (rows[:, None] < n) & (i[None, :] < inner)
        x = tl.load(base + rows[:, None] * stride_r, mask=m, other=0.0).to(ACC)
        if OP == 1:
            x = x * x
        if OP == 2:
            x = tl.abs(x)
        acc += x
    total = tl.sum(acc, axis=0)
    if OP == 2:
        total = total * inv_n
    tl.store(Y + o * inner + i, total, mask=i < inner)


@tessera.kernel
def _reduce_dim_bwd_kernel(X, DY, DX, n, inner, stride_o, stride_r, stride_i, inv_n,
                           OP: tl.constexpr, ACC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # dx = dy * 2x (sum of squares) or dy * sign(x) / n (mean of |x|); dx is contiguous.
    o = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    r = tl.arange(0, BLOCK_R)
    dy = tl.load(DY + o * inner + i, mask=i < inner, other=0.0).to(ACC)
    for start in range(0, n, BLOCK_R):
        rows = start + r
        m = (rows[:, None] < n) & (i[None, :] < inner)
        x = tl.load(X + o * stride_o + rows[:, None] * stride_r + i[None, :] * stride_i, mask=m, other=0.0).to(ACC)
        if OP == 1:
            g = 2.0 * x * dy[None, :]
        else:
            g = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0)) * (dy * inv_n)[None, :]
        tl.store(DX + o * n * inner + rows[:, None] * inner + i[None, :], g, mask=m)


def _as_3d(x, dim):
    """(outer, n, inner) sizes and element strides of x reduced over `dim`; the outer
    dimensions must collapse to one stride, otherwise x is copied first."""
    nd = x.ndim
    if nd == 0:
        raise ValueError("cannot reduce a 0-d input")
    d = dim + nd if dim < 0 else dim
    if not 0 <= d < nd:
        raise ValueError(f"dim {dim} is out of range for {nd} dimensions")
    shape, st = tuple(x.shape), H.strides(x)
    inner_dims = list(range(d + 1, nd))
    outer_dims = list(range(d))

    def collapse(dims):
        if not dims:
            return 1, 0, True
        size = int(np.prod([shape[k] for k in dims]))
        # Collapsible when each dimension steps over the next one exactly (sizes 1 ignored).
        ok = all(shape[k + 1] == 1 or st[k] == st[k + 1] * shape[k + 1] for k in dims[:-1])
        return size, st[dims[-1]], ok

    inner, s_i, ok_i = collapse(inner_dims)
    outer, _, ok_o = collapse(outer_dims)
    s_o = st[outer_dims[-1]] if outer_dims else 0
    if not (ok_i and ok_o):
        x = H.contiguous(x)
        return _as_3d(x, d)
    return x, d, outer, shape[d], inner, s_o, st[d], s_i


def _blocks(n, inner):
    block_i = min(tessera.next_power_of_2(max(inner, 1)), 64)
    block_r = max(1, min(tessera.next_power_of_2(max(n, 1)), 4096 // block_i))
    return block_r, block_i


def reduce_dim(x, dim, op):
    x, d, outer, n, inner, s_o, s_r, s_i = _as_3d(x, dim)
    out_shape = tuple(x.shape[:d]) + tuple(x.shape[d + 1:])
    y = H.empty(x, out_shape)
    if outer * inner == 0:
        return y
    block_r, block_i = _blocks(n, inner)
    _reduce_dim_kernel[(outer, tessera.cdiv(inner, block_i))](
        x, y, n, inner, s_o, s_r, s_i, H.scalar(x, 1.0 / max(n, 1)), OP=op, ACC=H.acc_dtype(x),
        BLOCK_R=block_r, BLOCK_I=block_i)
    return y


def reduce_dim_backward(x, dy, dim, op):
    x, d, outer, n, inner, s_o, s_r, s_i = _as_3d(x, dim)
    dy = H.contiguous(dy)
    dx = H.empty(x, tuple(x.shape))
    if H.numel(dx):
        block_r, block_i = _blocks(n, inner)
        _reduce_dim_bwd_kernel[(outer, tessera.cdiv(inner, block_i))](
            x, dy, dx, n, inner, s_o, s_r, s_i, H.scalar(x, 1.0 / max(n, 1)), OP=op, ACC=H.acc_dtype(x),
            BLOCK_R=block_r, BLOCK_I=block_i)
    return dx


def column_sum(partials, dtype=None):
    """Sum of the rows of a contiguous 2-D array (the per-program partial dweight and
    dbias rows of a backward pass), cast to `dtype` (a dtype name) if given."""
    p, c = partials.shape
    out = H.empty(partials, (c,), dtype)
    block_r, block_i = _blocks(p, c)
    _reduce_dim_kernel[(1, tessera.cdiv(c, block_i))](
        partials, out, p, c, 0, c, 1, 1.0, OP=OP_SUM, ACC=H.acc_dtype(partials),
        BLOCK_R=block_r, BLOCK_I=block_i)
    return out


def _reduce_op(op_name, op, x, dim, keepdim):
    H.check_float(op_name, x)
    from . import autograd as AG
    if AG.wants_grad(x):
        y = AG.ReduceDim.apply(x, dim, op)
    else:
        y = reduce_dim(x, dim, op)
    if keepdim:
        d = dim + x.ndim if dim < 0 else dim
        y = y.reshape(tuple(x.shape[:d]) + (1,) + tuple(x.shape[d + 1:]))
    return y


def reduce_sum_squared(x, dim=-1, keepdim=False):
    """sum(x * x) over dimension `dim` (accumulated in fp32, fp64 for fp64 inputs)."""
    return _reduce_op("reduce_sum_squared", OP_SUM_SQUARED, x, dim, keepdim)


def reduce_mean_abs(x, dim=-1, keepdim=False):
    """mean(|x|) over dimension `dim`."""
    return _reduce_op("reduce_mean_abs", OP_MEAN_ABS, x, dim, keepdim)
