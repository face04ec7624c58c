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

On a GPU, where each program is one thread block, few (outer, i-block) pairs would
leave most of the card idle (a 16384x4096 column sum has 64): `n` is then split in
SPLIT slices, one program each, that write fp32 partial sums; the last slice of each
column block to finish adds them up in the same launch. Reducing the last dimension (inner == 1, rows contiguous) takes
a 1-D kernel instead, one row per program, so its loads are wide vectors.
"""
from __future__ import annotations

import math

import tessera
import tessera.language as tl

from . import _host as H

OP_SUM, OP_SUM_SQUARED, OP_MEAN_ABS = 0, 1, 2


@tessera.kernel
def _reduce_tile(base, rows, end, stride_r, i, inner, OP: tl.constexpr, ACC: tl.constexpr):
    """x, x*x or |x| of the rows `rows` (those below `end`) of a column block, in ACC."""
    m = (rows[:, None] < end) & (i[None, :] < inner)
    x = tl.load(base + rows[:, None].to(tl.int64) * stride_r, mask=m, other=0.0).to(ACC)
    if OP == 1:
        x = x * x
    if OP == 2:
        x = tl.abs(x)
    return x


@tessera.kernel
def _reduce_dim_kernel(X, Y, PART, ARRIVED, n, inner, stride_o, stride_r, stride_i, inv_n, rows_per_split,
                       OP: tl.constexpr, MEAN: tl.constexpr, ACC: tl.constexpr, BLOCK_R: tl.constexpr,
                       BLOCK_I: tl.constexpr, UNROLL: tl.constexpr, SPLIT_FINISH: tl.constexpr,
                       BLOCK_S: tl.constexpr, STAGES: tl.constexpr = 1):
    # Program (o, i-block, s) reduces rows [s * rows_per_split, (s + 1) * rows_per_split):
    # with one slice (grid axis 2 of size 1) into Y[o, i-block]; with SPLIT_FINISH into
    # PART[s, o, i-block] (PART is (SPLIT, outer, inner)), the last slice of a column
    # block to finish then adding the SPLIT partials into Y (_finish_split).
    # UNROLL = 4 (the GPU plan) loads four row tiles per step, written as four loads
    # summed together: ptxas then issues the four before waiting on any. One [4 * BLOCK_R,
    # BLOCK_I] tile accumulated as is needs 4x the accumulator registers, and ptxas
    # waits for each load before issuing the next (one load in flight per thread).
    # STAGES > 1: the compiler's stream ring keeps the next STAGES - 1 steps' loads in
    # flight through shared memory.
    #
    # It is launched with programmatic dependent launch (gdc_wait, on sm_90+): the column
    # sums of the backward passes' partial rows start while the kernel that writes them
    # (which lets them, gdc_launch_dependents) finishes, and wait here, before any
    # access to memory, for its writes.
    tl.extra.cuda.gdc_wait()
    o = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    first = tl.program_id(2) * rows_per_split
    end = tl.minimum(n, first + rows_per_split)
    r = tl.arange(0, BLOCK_R)
    base = X + o * stride_o + i[None, :] * stride_i
    acc = tl.zeros([BLOCK_R, BLOCK_I], ACC)
    for start in tl.range(0, rows_per_split, BLOCK_R * UNROLL, num_stages=STAGES):
        rows = first + start + r
        x = _reduce_tile(base, rows, end, stride_r, i, inner, OP, ACC)
        if UNROLL == 4:
            x1 = _reduce_tile(base, rows + BLOCK_R, end, stride_r, i, inner, OP, ACC)
            x2 = _reduce_tile(base, rows + 2 * BLOCK_R, end, stride_r, i, inner, OP, ACC)
            x3 = _reduce_tile(base, rows + 3 * BLOCK_R, end, stride_r, i, inner, OP, ACC)
            x = (x + x1) + (x2 + x3)
        acc += x
    total = tl.sum(acc, axis=0)
    if SPLIT_FINISH:
        _finish_split(Y, PART, ARRIVED, total, o, i, inner, inv_n, MEAN, ACC, BLOCK_I, BLOCK_S)
    else:
        if MEAN:
            total = total * inv_n
        tl.store(Y + o * inner + i, total, mask=i < inner)


@tessera.kernel
def _finish_split(Y, PART, ARRIVED, total, o, i, inner, inv_n, MEAN: tl.constexpr, ACC: tl.constexpr,
                  BLOCK_I: tl.constexpr, BLOCK_S: tl.constexpr):
    """Slice s's column sums `total` into PART[s, o, i]; the last of the SPLIT slices of
    column block (o, i) to arrive sums PART[0:SPLIT, o, i] in slice order (the result
    does not depend on which slice is last) into Y[o, i]. One launch instead of a
    second one over the partials (~5 us on an H100 for a 16384x4096 column mean).

    ARRIVED[o * blocks + i-block] counts the slices done (int32, zero before the
    launch; the last resets it, so the next launch in stream order needs no memset).
    The barrier orders every thread's partial store before the count, whose atomic is
    acq_rel; the last slice's loads of the other partials come after its count."""
    split = tl.num_programs(2)
    plane = tl.num_programs(0).to(tl.int64) * inner  # elements of one slice's partials
    column = o * inner + i
    m = i < inner
    tl.store(PART + tl.program_id(2) * plane + column, total, mask=m)
    tl.debug_barrier()
    counter = ARRIVED + o * tl.num_programs(1) + tl.program_id(1)
    if tl.atomic_add(counter, 1, sem="acq_rel") == split - 1:
        s = tl.arange(0, BLOCK_S)
        sums = tl.zeros([BLOCK_S, BLOCK_I], ACC)
        for first in range(0, split, BLOCK_S):
            slices = first + s
            sums += tl.load(PART + slices[:, None].to(tl.int64) * plane + column[None, :],
                            mask=(slices[:, None] < split) & m[None, :], other=0.0)
        result = tl.sum(sums, axis=0)
        if MEAN:
            result = result * inv_n
        tl.store(Y + column, result, mask=m)
        tl.store(counter, 0)


@tessera.kernel
def _reduce_row_kernel(X, Y, n, stride_o, stride_r, inv_n,
                       OP: tl.constexpr, MEAN: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # inner == 1: program o reduces x[o, :] (stride_r is 1 for a contiguous row and
    # then specializes to a constant, so the loads are 16-byte vectors).
    o = tl.program_id(0).to(tl.int64)
    r = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], ACC)
    for start in range(0, n, BLOCK):
        # Runs of BLOCK starting at multiples of BLOCK: the compiler does not derive
        # that for a loop variable, and without it the loads are not 16-byte vectors.
        rows = tl.multiple_of(start + r, BLOCK)
        x = tl.load(X + o * stride_o + rows * stride_r, mask=rows < n, other=0.0).to(ACC)
        if OP == 1:
            x = x * x
        if OP == 2:
            x = tl.abs(x)
        acc += x
    total = tl.sum(acc, axis=0)
    if MEAN:
        total = total * inv_n
    tl.store(Y + o, total)


@tessera.kernel
def _reduce_dim_bwd_kernel(X, DY, DX, n, inner, stride_o, stride_r, stride_i, inv_n, rows_per_split,
                           OP: tl.constexpr, ACC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # dx = dy * 2x (sum of squares) or dy * sign(x) / n (mean of |x|); dx is contiguous.
    # Program (o, i-block, s) writes rows [s * rows_per_split, (s + 1) * rows_per_split).
    o = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    first = tl.program_id(2) * rows_per_split
    r = tl.arange(0, BLOCK_R)
    dy = tl.load(DY + o * inner + i, mask=i < inner, other=0.0).to(ACC)
    for start in range(0, rows_per_split, BLOCK_R):
        rows = (first + start + r).to(tl.int64)
        m = (rows[:, None] < n) & (i[None, :] < inner)
        x = tl.load(X + o * stride_o + rows[:, None] * stride_r + i[None, :] * stride_i, mask=m, other=0.0).to(ACC)
        if OP == 1:
            g = 2.0 * x * dy[None, :]
        else:
            g = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0)) * (dy * inv_n)[None, :]
        tl.store(DX + o * n * inner + rows[:, None] * inner + i[None, :], g, mask=m)


@tessera.kernel
def _reduce_row_bwd_kernel(X, DY, DX, n, stride_o, stride_r, inv_n,
                           OP: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # inner == 1 (the last dimension reduced): program o writes dx[o, :] = dy[o] * 2x or
    # dy[o] * sign(x) / n in chunks of BLOCK, 16-byte vectors as the forward's row
    # kernel (the (n, inner) tile kernel above would hold a [BLOCK_R, 1] column).
    o = tl.program_id(0).to(tl.int64)
    dy = tl.load(DY + o).to(ACC)
    r = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        cols = tl.multiple_of(start + r, BLOCK)
        m = cols < n
        x = tl.load(X + o * stride_o + cols * stride_r, mask=m, other=0.0).to(ACC)
        if OP == 1:
            g = 2.0 * x * dy
        else:
            g = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0)) * (dy * inv_n)
        tl.store(DX + o * n + cols, g, mask=m)


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
        size = math.prod(shape[k] for k in dims)
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
    """(BLOCK_R, BLOCK_I): a tile of up to 4096 elements, BLOCK_I up to 64 columns (on an
    H100 a 16384x4096 fp16 column mean took 57 us with 64, 58 with 128, 66 with 256)."""
    block_i = min(tessera.next_power_of_2(max(inner, 1)), 64)
    block_r = max(1, min(tessera.next_power_of_2(max(n, 1)), 4096 // block_i))
    return block_r, block_i


# On a GPU: at least this many programs (thread blocks) over the (outer, i-block, slice)
# grid, about 8 per SM of an H100 (the column mean above: 57 us with 1024, 63 with
# 2048, 71 with 4096); a slice keeps at least 4 tiles of rows.
_GPU_PROGRAMS = 1024
_MIN_TILES_PER_SLICE = 4
# Warps of the column kernel on a GPU: 2 gives each thread two 16-byte loads per row
# tile, 8 in flight per step (16384x4096 fp16 column mean on an H100: 0.0514 ms with 2
# warps, 0.0544 with 4, 0.0657 with 8; bench/results/memory_bound_configs_h100.md).
_GPU_DIM_WARPS = 2
# The column kernel's steps through the compiler's stream ring on a GPU (the next step's
# tiles in flight through shared memory). Column mean of 16384x4096 fp16, of a copy: H200
# 0.870 -> 0.954 with 2 stages (3: 0.948), H100 0.950 -> 0.949 (3: 0.913)
# (bench/results/memory_bound_configs_ring_softmax_h200.md, _h100.md).
_GPU_DIM_STAGES = 2


def _gpu_plan(x) -> bool:
    """Whether to launch as on a GPU (rows split into slices summed by a second launch).
    Tests set it to always-true to run that plan on the CPU too."""
    return H.on_gpu(x)


def _rows_per_split(like, programs, n, block_r):
    """Rows each program reduces: all of n on the CPU (a program per thread is enough
    there), or a multiple of block_r that brings a GPU launch to ~_GPU_PROGRAMS."""
    if not _gpu_plan(like) or programs >= _GPU_PROGRAMS:
        return max(n, 1)
    split = min(tessera.cdiv(_GPU_PROGRAMS, programs), max(1, n // (block_r * _MIN_TILES_PER_SLICE)))
    return tessera.cdiv(tessera.cdiv(n, split), block_r) * block_r


def _reduce_steps(x, outer, n, inner, s_o, s_r, s_i, op, mean_over=None):
    """The launch reducing x seen as (outer, n, inner) (divided by mean_over if given)
    into y (outer * inner elements): a list of one (kernel, grid, arguments after the
    arrays, keywords, whether it takes the partials and counters arrays, the slices'
    partials shape or None), as _run_steps runs it."""
    mean = mean_over is not None
    inv_n = H.scalar(x, 1.0 / max(mean_over or 1, 1))
    acc = H.acc_dtype(x)
    if inner == 1:  # a contiguous row per program: vector loads on both targets
        block = min(tessera.next_power_of_2(max(n, 1)), 4096)
        return [(_reduce_row_kernel, (outer,), (n, s_o, s_r, inv_n),
                 dict(OP=op, MEAN=mean, ACC=acc, BLOCK=block, **H.row_launch_options(x, block, max_warps=8)), False,
                 None)]
    block_r, block_i = _blocks(n, inner)
    programs = outer * tessera.cdiv(inner, block_i)
    rps = _rows_per_split(x, programs, n, block_r)
    split = tessera.cdiv(max(n, 1), rps)
    # The GPU plan steps over block_r rows as 4 tiles of block_r / 4 (see the kernel).
    unroll = 4 if _gpu_plan(x) and block_r >= 4 else 1
    tiles = dict(ACC=acc, BLOCK_R=block_r // unroll, BLOCK_I=block_i, UNROLL=unroll)
    if H.on_gpu(x):
        tiles["num_warps"] = _GPU_DIM_WARPS
        tiles["STAGES"] = _GPU_DIM_STAGES
    # With slices, the last slice of each column block to finish adds the partials (in
    # the accumulation type, which keeps x's precision class) in the same launch.
    grid = (outer, tessera.cdiv(inner, block_i), split)
    block_s = min(tessera.next_power_of_2(split), max(1, 4096 // block_i))
    return [(_reduce_dim_kernel, grid, (n, inner, s_o, s_r, s_i, inv_n, rps),
             dict(OP=op, MEAN=mean, SPLIT_FINISH=split > 1, BLOCK_S=block_s, **tiles), True,
             (split, outer * inner) if split > 1 else None)]


def _run_steps(steps, x, y):
    """Run _reduce_steps' launches: a column kernel with slices gets its partials'
    workspace (of the shape given) and arrival counters (one per column block)."""
    src = x
    for kernel, grid, args, kw, with_partials, partials_shape in steps:
        if with_partials:  # (a flag, not `kernel is _reduce_dim_kernel`: bench/host_time.py
            # --breakdown swaps the module's kernels for timing wrappers after plans exist)
            if partials_shape is None:  # one slice: no partials, no counters (Y stands in)
                kernel[grid](src, y, y, y, *args, **kw)
            else:
                kernel[grid](src, y, H.empty(x, partials_shape, "acc"), H.arrival_counters(x, grid[0] * grid[1]),
                             *args, **kw)
        else:
            kernel[grid](src, y, *args, **kw)


def _reduce(x, y, outer, n, inner, s_o, s_r, s_i, op, mean_over=None):
    """y (outer * inner elements) = the reduction of x seen as (outer, n, inner), divided
    by mean_over if given."""
    _run_steps(_reduce_steps(x, outer, n, inner, s_o, s_r, s_i, op, mean_over), x, y)


_DIM_PLANS = H.Plans()


def _dim_plan(x, dim, op, backward):
    """(copy: whether _as_3d copies x, out_shape, steps or the backward launch) for one
    layout of x (see H.Plans)."""
    xv, d, outer, n, inner, s_o, s_r, s_i = _as_3d(x, dim)
    out_shape = tuple(xv.shape[:d]) + tuple(xv.shape[d + 1:])
    if backward:
        launch = None
        if H.numel(xv) and inner == 1:
            block = min(tessera.next_power_of_2(max(n, 1)), 4096)
            launch = (_reduce_row_bwd_kernel, (outer,), (n, s_o, s_r, H.scalar(xv, 1.0 / max(n, 1))),
                      dict(OP=op, ACC=H.acc_dtype(xv), BLOCK=block, **H.row_launch_options(xv, block, max_warps=8)))
        elif H.numel(xv):
            block_r, block_i = _blocks(n, inner)
            rps = _rows_per_split(xv, outer * tessera.cdiv(inner, block_i), n, block_r)
            launch = (_reduce_dim_bwd_kernel, (outer, tessera.cdiv(inner, block_i), tessera.cdiv(max(n, 1), rps)),
                      (n, inner, s_o, s_r, s_i, H.scalar(xv, 1.0 / max(n, 1)), rps),
                      dict(OP=op, ACC=H.acc_dtype(xv), BLOCK_R=block_r, BLOCK_I=block_i))
        return xv is not x, d, launch
    steps = (_reduce_steps(xv, outer, n, inner, s_o, s_r, s_i, op, n if op == OP_MEAN_ABS else None)
             if outer * inner else [])
    return xv is not x, out_shape, steps


def _dim_plan_for(x, dim, op, backward):
    key = (H.layout(x), dim, op, backward, _gpu_plan(x))
    plan = _DIM_PLANS.get(key)
    if plan is None:
        plan = _DIM_PLANS.remember(key, _dim_plan(x, dim, op, backward))
    return plan


def reduce_dim(x, dim, op):
    copy, out_shape, steps = _dim_plan_for(x, dim, op, False)
    if copy:  # the outer dimensions do not collapse to one stride
        x = H.contiguous(x)
    y = H.empty(x, out_shape)
    _run_steps(steps, x, y)
    return y


def reduce_dim_backward(x, dy, dim, op):
    copy, _, launch = _dim_plan_for(x, dim, op, True)
    if copy:
        x = H.contiguous(x)
    dy = H.contiguous(dy)
    dx = H.empty(x, tuple(x.shape))
    if launch is not None:
        kernel, grid, args, kw = launch
        kernel[grid](x, dy, dx, *args, **kw)
    return dx


_COLUMN_SUM_PLANS = H.Plans()


def column_sum_steps(like, rows, cols):
    """The launches of column_sum for a contiguous (rows, cols) array of partials in
    like's accumulation type on like's device (like: the partials, or the tensor they
    were computed from), for a backward plan to keep (see column_sum_run)."""
    return _reduce_steps(like, 1, rows, cols, 0, cols, 1, OP_SUM) if cols else []


def column_sum_run(steps, partials, dtype=None):
    """column_sum with the launches from column_sum_steps: no key, no plan lookup."""
    out = H.empty(partials, (partials.shape[1],), dtype)
    _run_steps(steps, partials, out)
    return out


def column_sum(partials, dtype=None):
    """Sum of the rows of a contiguous 2-D array (the per-program partial dweight and
    dbias rows of a backward pass), cast to `dtype` (a dtype name) if given."""
    key = (H.layout(partials), dtype, _gpu_plan(partials))
    steps = _COLUMN_SUM_PLANS.get(key)
    if steps is None:
        steps = _COLUMN_SUM_PLANS.remember(key, column_sum_steps(partials, *partials.shape))
    return column_sum_run(steps, partials, dtype)


def _reduce_op(op_name, op, x, dim, keepdim):
    H.check_float(op_name, x)
    AG = H.autograd()
    if AG.wants_grad(x):
        y = AG.ReduceDim.apply(x, (dim, op))
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
