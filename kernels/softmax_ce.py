"""softmax (optional fused dropout), log_softmax and cross_entropy, one fused kernel
per direction (two launches for a cross_entropy forward over a long vocabulary).

softmax/log_softmax: one program per row, the row held in registers (max, exp, sum,
scale: one read, one write). Dropout draws its mask from Philox as activation.py
does (one call per eight columns, so a dropout kernel's row tile is [BLOCK / 8, 8]);
the backward pass regenerates exactly the forward mask from the seed; nothing is
stored for it.

cross_entropy: rows up to CE_ONE_CHUNK classes are held whole by one program (max,
exp, sum: one exp per logit), then the target's logit is subtracted. Longer rows (a
language model's vocabulary) are split into CE_SLICE-wide slices, a program per
(row, slice) holding its slice as one tile (so a row's slices are all in flight at
once, as short rows are), each storing its slice's max m_k and sum s_k of exp(x - m_k);
a second small launch merges a row's slices in slice order (on GPUs with fast memory
the reducing forward of short rows runs this way too: CE_SLICED_REDUCE_FAST_MEMORY):

    M = max_k m_k,   lse = M + log(sum_k s_k * exp(m_k - M)),   loss = lse - x[target]

No probability tensor is ever stored. The loss reduction ('mean' over the non-ignored
rows, 'sum') is in the launch that ends with the rows' losses: programs sum whole row
groups (fixed by the row count), one partial per group, and the last program to finish
(an atomic counter) adds the partials in index order, so the result depends neither on
timing nor on how many programs ran (SMs, CPU threads). The backward kernel computes
dlogits = (exp(x - lse) - onehot) * dloss: a program per row for rows held whole (and
on the CPU), and on a GPU a program per (row, slice) of CE_BWD_SLICE positions for the
longer rows. On a GPU, rows the compiler cannot prove 16-byte aligned (GPT-2's 50257
classes, odd strides) are walked from each row's 16-byte boundary (_from_boundary in
the forward; the backward takes the row's partial first and last groups as a small
tile of their own, _row_edge_groups), so they too are read and written 16 bytes at a
time.
"""
from __future__ import annotations

import math

import numpy as np

import tessera
import tessera.language as tl

from . import _host as H
from .activation import _dropout_keep, _keep_from

CE_BLOCK = 2048  # vocabulary chunk per step of the cross-entropy backward's row walk (the CPU's)
CE_ONE_CHUNK = 8192  # the forward holds rows up to this many classes in one tile
# Longer rows are split into slices of this many classes, a program each, held as one
# tile of CE_SLICE_WARPS warps (32 logits per thread, as a 4096-class row's program:
# that kernel alone reads at copy speed on an H100). At 4096x32000 fp16 the program per
# row walking 16 chunks of 2048 reached 0.90 of copy alone, 0.835 with the fused mean;
# the slices with the merge 0.98 (2048x50257: 0.765 -> 0.98), 2048-class slices 0.955,
# 8 warps 0.93 (bench/results/kernels_cuda_float16_ce32k.md).
CE_SLICE = 4096
CE_SLICE_WARPS = 4
# On a GPU with fast memory (_host.fast_memory), the slices of rows longer than
# CE_ONE_CHUNK take 2 warps (64 logits a thread: each thread's share of the two block
# reductions spread over twice the logits; 9.25 sm_90a instructions a logit against
# 11.75 at 4 warps). H200, fp16, slices alone, of a copy, 4 -> 2 warps: 4096x32000 0.901
# -> 0.956, 2048x50257 (realigned) 0.907 -> 0.936; short rows as slices (16384x4096) stay
# at 4 (0.906 / 0.895): bench/results/memory_bound_configs_s11_fma_h200.md. (Before the
# FMA terms and the realigned slices' f32 merge, realigned rows lost at 2 warps: 0.846 ->
# 0.785, memory_bound_configs_s11_warps_h200.md.)
CE_SLICE_WARPS_FAST_MEMORY = 2
# Registers a thread of those 2-warp slices (16-bit logits, no label smoothing): ptxas
# gives the 4096-wide tile 96, so 10 programs of 2 warps fit an SM; at 80 (no spills) 12,
# and the slices, bound by how many bytes their resident programs keep in flight, read
# faster. H200, fp16, slices alone, of a copy, 96 -> 80: 2048x50257 0.926 -> 0.951
# (GPT-2's 13th slice of a row is 27% full, so a program slot there holds few bytes),
# 4096x32000 0.985 -> 0.999; 64 spills (0.61): bench/results/memory_bound_configs_h200_s14_ce_regs*.md.
# bf16 since session 15 (_slice_maxnreg).
CE_SLICE_MAXNREG_FAST_MEMORY = 80
# The slices' exponentials as 2^(x log2 e - m log2 e) on a GPU (_exp_of_difference_fma).
CE_SLICE_FMA_EXP = True
# At most this many slices per row (the merge holds a row's slices in one tile); longer
# rows give each slice several CE_SLICE-wide chunks, walked with an online log-sum-exp.
CE_MAX_SLICES = 256
# The merge's tile of (rows, slices) partials holds at most this many.
CE_MERGE_TILE = 2048
# The forward with a reduced loss ('mean', 'sum') runs this many warps per SM as
# programs that each walk a run of rows (32 warps: 8 programs of 4 warps, which
# their <= 64 registers per thread keep resident at once on an H100; 9 per SM measured
# the same), so the loss reduction's atomic and partial are per program: one per row
# cost 13 us of 60 on an H100 (16384x4096 fp16: memory_bound_configs_h100_cefuse_run1.md).
CE_WARPS_PER_SM = 32
# Partials the last program adds per tile (_sum_partials_when_last).
CE_LOSS_GROUP = 1024
# At most this many row groups, each summed into one partial by the program holding it
# (_row_groups): 16384 rows take 8 a group, and the last program adds the 2048 partials
# in one step of two 1024-wide tiles (8192 groups in four steps: +0.6 us on an H100,
# 16384x4096 fp16, where the whole forward takes 51.1 us and the row kernel alone
# 46.8 us; bench/results/kernels_cuda_float16_cefwd.md).
CE_MAX_GROUPS = 2048
# Warps of a forward row on a GPU. The kernel issues ~6 instructions per element plus
# ~100 per thread (two block reductions, the log), so fewer threads per row issue fewer
# in all; with the short ex2 (see _exp_of_difference) 4 and 8 both run at copy speed on
# an H100 (46.5 us for 16384x4096 fp16), 2 a little slower (47.3 us):
# bench/results/memory_bound_configs_h100.md.
CE_FWD_MAX_WARPS = 4
# A reducing forward ('mean', 'sum') of rows held whole, on a GPU whose memory streams at
# _host.FAST_MEMORY_GBPS or more: as the long rows' slices (one a row) and the merge, two
# launches, instead of programs walking runs of rows. H200, 16384x4096 fp16, of a copy:
# the walk 0.797, slices + merge 0.900 (8 warps 0.819); the rows alone (reduction 'none')
# 1.026 (bench/results/memory_bound_configs_ce_sliced_h200.md). The walk's rows wait on
# each other's reductions; a program per row lets the SM overlap them. (The H100 keeps
# the walk: 0.93 of a copy there.)
CE_SLICED_REDUCE_FAST_MEMORY = True
# (Tried in session 11: the merge in the slices' launch, each row group's last slice
# program to arrive at an atomic counter merging the group: the same bits, but every
# slice program then waits for its atomic's round trip, holding its SM slot with no
# loads in flight. H200, mean, of a copy, two launches -> one: 16384x4096 0.890 ->
# 0.699, 4096x32000 0.848 -> 0.676, 2048x50257 0.777 -> 0.634;
# bench/results/memory_bound_configs_ce_one_launch_h200.md.)
# Warps of a backward row on a GPU (bench/bwd_profile.py --sweep, H100, 16384x4096
# fp16: 4 warps 0.978 of copy, 8 warps 0.989, 16 warps 0.928).
CE_BWD_MAX_WARPS = 8
# The GPU backward of rows longer than CE_ONE_CHUNK: a program per (row, slice) of this
# many positions, as (positions, tile, warps, evict-first stores of dx). H100, fp16
# (bench/memory_bound_configs.py, bench/results/kernels_cuda_float16_bwd90.md): the
# program per row walking 2048-class chunks over 8 warps ran 4096x32000 at 0.94 of
# copy and 2048x50257 (realigned) at 0.87-0.88; slices of 4096 positions over 8 warps
# 0.99 both (2048 over 4 warps, 8192 over 8: 0.97-0.99); evict-first stores of dx
# gained nothing (0.98-0.99).
CE_BWD_SLICE = (4096, 4096, 8, False)


@tessera.kernel
def _softmax_fwd_kernel(X, Y, stride_x, n_cols, p, seed, keep_from,
                        LOG: tl.constexpr, DROPOUT: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if DROPOUT:  # the row as [BLOCK / 8, 8]: one Philox call per row of the tile
        g = tl.arange(0, BLOCK // 8)
        cols = 8 * g[:, None] + tl.arange(0, 8)[None, :]
        mask = cols < n_cols
        x = tl.load(X + row * stride_x + cols, mask=mask, other=-float("inf")).to(ACC)
        e = tl.exp(x - tl.max(tl.max(x, axis=1), axis=0))
        s = tl.sum(tl.sum(e, axis=1), axis=0)
        keep = _dropout_keep(seed, row * ((n_cols + 7) // 8) + g, keep_from)
        # 1/(s(1-p)) once per row: one multiply per element for the scale and the dropout
        # (by a selected factor, so that pairs of fp16 roundings stay one instruction on
        # the GPU, as activation.py's dropout).
        y = e * tl.where(keep, 1.0 / (s * (1.0 - p)), 0.0)
    else:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(X + row * stride_x + cols, mask=mask, other=-float("inf")).to(ACC)
        z = x - tl.max(x, axis=0)
        e = tl.exp(z)
        s = tl.sum(e, axis=0)
        if LOG:
            y = z - tl.log(s)
        else:
            y = e / s
    tl.store(Y + row * n_cols + cols, y, mask=mask)


@tessera.kernel
def _softmax_bwd_kernel(S, DY, DX, stride_s, stride_dy, n_cols, p, seed, keep_from,
                        LOG: tl.constexpr, DROPOUT: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # S is the forward output, or with dropout the forward *input* (the softmax is
    # recomputed, since the output lost the dropped values).
    row = tl.program_id(0).to(tl.int64)
    if DROPOUT:  # [BLOCK / 8, 8], as the forward
        g = tl.arange(0, BLOCK // 8)
        cols = 8 * g[:, None] + tl.arange(0, 8)[None, :]
    else:
        cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0).to(ACC)
    if DROPOUT:
        x = tl.load(S + row * stride_s + cols, mask=mask, other=-float("inf")).to(ACC)
        e = tl.exp(x - tl.max(tl.max(x, axis=1), axis=0))
        y = e * (1.0 / tl.sum(tl.sum(e, axis=1), axis=0))
        keep = _dropout_keep(seed, row * ((n_cols + 7) // 8) + g, keep_from)
        dy = tl.where(keep, dy * (1.0 / (1.0 - p)), 0.0)
        dx = y * (dy - tl.sum(tl.sum(dy * y, axis=1), axis=0))
    else:
        y = tl.load(S + row * stride_s + cols, mask=mask, other=0.0).to(ACC)
        if LOG:
            dx = dy - tl.exp(y) * tl.sum(dy, axis=0)
        else:
            dx = y * (dy - tl.sum(dy * y, axis=0))
    tl.store(DX + row * n_cols + cols, dx, mask=mask)


@tessera.kernel
def _exp_of_difference(x, m):
    """exp(x - m) for x <= m, as a term of a sum that holds exp(0) = 1. The clamp at
    e^-87 (> 2^-126) changes no such sum (terms that small vanish next to 1) and lets
    the GPU's ex2 skip its denormal handling (compiler/codegen/nvptx/gpu_lowering.cpp:
    4 instructions -> 1); on the CPU the clamped exp is as fast as the plain one (an
    exp2 of an FMA, one instruction fewer on the GPU, was ~20% slower there). A NaN
    logit stays NaN (propagate_nan), so its row's loss is NaN, as torch's."""
    return tl.exp(tl.maximum(x - m, -87.0, propagate_nan=tl.PropagateNan.ALL))


@tessera.kernel
def _exp_of_difference_fma(x, m):
    """_exp_of_difference's terms as 2^(x log2 e - m log2 e), the GPU's form for the long
    rows' slices: one FMA where x - m and its product with log2 e took two (cross_entropy's
    slices are bound by instruction issue on an H200: a read-only kernel there has ~16
    instructions a logit to spend at a copy's speed). The rounding of m log2 e is common to
    the slice's terms: the slice's sum carries a factor 2^d, |d| <= |m| log2 e 2^-24 (the
    log-sum-exp off by |m| 2^-24, an ulp of it), where x - m rounded each term apart. Not
    the CPU's: there the exp2 of an FMA ran ~20% slower than the clamped exp."""
    return tl.exp2(tl.maximum(tl.fma(x, 1.4426950408889634, -(m * 1.4426950408889634)), -126.0,
                              propagate_nan=tl.PropagateNan.ALL))


@tessera.kernel
def _slice_terms(x, m, FMA_EXP: tl.constexpr):
    """exp(x - m) of a slice's logits (m: the slice's max, or 0 for a slice of -inf
    only), in the form the target runs fastest (FMA_EXP: the GPU's)."""
    if FMA_EXP:
        return _exp_of_difference_fma(x, m)
    return _exp_of_difference(x, m)


@tessera.kernel
def _xent_row(x, x_t, n_cols, cols, smoothing, SMOOTH: tl.constexpr):
    """(log-sum-exp, loss) of one row held whole in the tile x (ACC, -inf past n_cols),
    from its target's logit x_t: one exp per element, as softmax."""
    m = tl.max(x, axis=0)
    lse = m + tl.log(tl.sum(_exp_of_difference(x, m), axis=0))
    loss = lse - x_t
    if SMOOTH:
        # torch's label smoothing: (1 - eps) * nll + eps * mean over classes of -log p.
        x_sum = tl.sum(tl.where(cols < n_cols, x, 0.0), axis=0)
        loss = (1.0 - smoothing) * loss + smoothing * (lse - x_sum / n_cols)
    return lse, loss


@tessera.kernel
def _xent_fwd_kernel(X, T, LOSS, LSE, PART, OUT, SCALE, ARRIVED, stride_x, n_rows, rows_per_program, n_cols,
                     ignore_index, smoothing, group_rows, n_groups, SMOOTH: tl.constexpr,
                     REDUCE: tl.constexpr, MEAN: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                     FINAL: tl.constexpr):
    # Rows of up to CE_ONE_CHUNK classes (BLOCK >= n_cols), each held whole.
    # Program p: rows p * rows_per_program .. (p + 1) * rows_per_program - 1 (a few
    # programs per SM or CPU thread, so the loss reduction's atomic is per program, not
    # per row). Without REDUCE, LOSS gets each row's loss. With it the rows form groups
    # of group_rows (a program holds whole groups): the program stores each group's loss
    # sum (in row order) into PART[group] and adds its count of non-ignored rows to the
    # arrival counter, and the last program to finish adds those (_sum_partials_when_last).
    # The groups depend on the shape alone, so the loss's bits do not depend on how many
    # programs there are (the GPU's SM count, CPU threads). (Loading the next row during
    # this one's reductions took 72 registers instead of 48 at 4096 classes and gained
    # nothing on an H100: bench/results/kernels_cuda_float16_cefwd.md. The compiler's
    # stream ring over this walk, on an H200: 0.793 of copy without, 0.764 / 0.734 / 0.666
    # with 2 / 3 / 4 stages: memory_bound_configs_ce_ring_h200.md; cp.async fills shared
    # memory through the L2 alone, so the target logit's load, which follows the row's,
    # no longer hits the L1; the target's logit picked from the row inside the max's
    # reduction (a pair reduction) instead of loaded: 0.546-0.616 with or without a ring,
    # memory_bound_configs_ce_from_row_h200.md.)
    first = tl.program_id(0) * rows_per_program
    end = tl.minimum(first + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK)
    total = tl.zeros([], ACC)  # the current group's loss sum
    counted = tl.zeros([], tl.int32)  # the program's non-ignored rows
    group = first // group_rows
    left = group_rows  # rows of the current group still to add
    for r in range(first, end):
        row = r.to(tl.int64)
        base = X + row * stride_x
        # The row's loads first, then the target's (its logit's address waits for it).
        x = tl.load(base + cols, mask=cols < n_cols, other=-float("inf")).to(ACC)
        t = tl.load(T + row)
        valid = t != ignore_index
        # A target outside [0, n_cols) (and not ignore_index) must not read another
        # column's logit: its loss is NaN (the host checks CPU targets and raises;
        # device targets are not copied back for a check, as torch's device-side
        # assert would stop the context).
        in_range = (t >= 0) & (t < n_cols)
        x_t = tl.load(base + tl.where(valid & in_range, t, 0)).to(ACC)
        lse, loss = _xent_row(x, x_t, n_cols, cols, smoothing, SMOOTH)
        loss = tl.where(valid, tl.where(in_range, loss, float("nan")), 0.0)
        tl.store(LSE + row, lse)
        if REDUCE:
            total += loss
            counted += tl.where(valid, 1, 0)
            left -= 1
            done = (left == 0) | (r + 1 == end)
            tl.store(PART + group, total, mask=done)
            total = tl.where(done, 0.0, total)
            group += tl.where(done, 1, 0)
            left = tl.where(done, group_rows, left)
        else:
            tl.store(LOSS + row, loss)
    if REDUCE:
        _sum_partials_when_last(PART, OUT, SCALE, ARRIVED, counted, n_groups, MEAN, ACC, FINAL)


@tessera.kernel
def _xent_slice_kernel(X, T, WORK, stride_x, n_cols, n_slices, n_units, misalign, SMOOTH: tl.constexpr,
                       ACC: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr, REALIGN: tl.constexpr,
                       VEC: tl.constexpr, FMA_EXP: tl.constexpr = False):
    """Program u = row * n_slices + k: slice k of the row (CHUNKS * BLOCK classes from
    column k * CHUNKS * BLOCK, with REALIGN from that position counted from the 16-byte
    boundary at or before the row's start, see _from_boundary). Stores the slice's max
    at WORK[u], its sum of exp(x - max) at WORK[n_units + u], with SMOOTH its sum of
    logits at WORK[2 * n_units + u]; the slice holding the row's target stores that
    logit at WORK[(2 or 3) * n_units + row] (no slice does for ignored or out-of-range
    targets: the merge does not read it then). misalign: X's address past a 16-byte
    boundary, in elements (REALIGN). FMA_EXP: the terms as _exp_of_difference_fma (GPUs)."""
    tl.extra.cuda.gdc_launch_dependents()  # the merge may start (its gdc_wait)
    unit = tl.program_id(0)
    row = unit // n_slices
    k = unit - row * n_slices
    first = k * (CHUNKS * BLOCK)
    base = X + row.to(tl.int64) * stride_x
    t = tl.load(T + row)
    lead = 0  # columns of the row's first 16 bytes before column 0 (REALIGN)
    if REALIGN:
        # The slice as one [BLOCK / VEC, VEC] tile: all its loads in flight at once.
        lead = _lead(row, stride_x, misalign, VEC)
        at, col, whole, partial, edge = _from_boundary(lead, first, n_cols, BLOCK, VEC)
        src = tl.multiple_of(X + (row.to(tl.int64) * stride_x - lead), 16)
        x = tl.load(src + at, mask=whole, other=-float("inf")).to(ACC)
        if edge:  # the row's partial first or last group of VEC
            # Merged in ACC (the + 0.0 keeps LLVM from moving the select before the
            # conversion): a merge of the 16-bit loads made every thread unpack its halves
            # into registers of their own before the branch, a PRMT a logit on every slice.
            x = tl.where(whole, x, tl.load(src + at, mask=partial, other=-float("inf")).to(ACC) + 0.0)
        in_row = (col >= 0) & (col < n_cols)
        m = tl.max(tl.max(x, axis=1), axis=0)
        s = tl.sum(tl.sum(_slice_terms(x, _max_or_zero(m), FMA_EXP), axis=1), axis=0)
        if SMOOTH:
            x_sum = tl.sum(tl.sum(tl.where(in_row, x, 0.0), axis=1), axis=0)
    elif CHUNKS == 1:
        # The slice as one tile: all its loads in flight at once, one exp per logit.
        c = tl.multiple_of(first + tl.arange(0, BLOCK), BLOCK)  # slices start at multiples of BLOCK: vector loads
        x = tl.load(base + c, mask=c < n_cols, other=-float("inf")).to(ACC)
        m = tl.max(x, axis=0)
        s = tl.sum(_slice_terms(x, _max_or_zero(m), FMA_EXP), axis=0)
        if SMOOTH:
            x_sum = tl.sum(tl.where(c < n_cols, x, 0.0), axis=0)
    else:
        # Rows of more than CE_MAX_SLICES * CE_SLICE classes: the slice in CHUNKS chunks,
        # an online log-sum-exp per lane. For a chunk x with running max m and sum s:
        #     m' = max(m, x);   s = s * exp(m - m') + exp(x - m')   (lanes still at -inf stay 0)
        # and at the end  M = max over lanes of m,  sum = sum over lanes of s * exp(m - M).
        cols = tl.arange(0, BLOCK)
        m_lane = tl.full([BLOCK], -float("inf"), ACC)
        s_lane = tl.zeros([BLOCK], ACC)
        x_lane = tl.zeros([BLOCK], ACC)
        for start in range(first, tl.minimum(first + CHUNKS * BLOCK, n_cols), BLOCK):
            c = tl.multiple_of(start + cols, BLOCK)
            mask = c < n_cols
            xc = tl.load(base + c, mask=mask, other=-float("inf")).to(ACC)
            # A NaN logit makes its lane's max and sum NaN, so the row's loss is NaN (as
            # torch's); a lane still at -inf (nothing seen but masked columns) sums 0.
            m_new = tl.maximum(m_lane, xc, propagate_nan=tl.PropagateNan.ALL)
            s_lane = tl.where(m_new == -float("inf"), 0.0,
                              s_lane * _exp_of_difference(m_lane, m_new) + _exp_of_difference(xc, m_new))
            m_lane = m_new
            if SMOOTH:
                x_lane += tl.where(mask, xc, 0.0)
        m = tl.max(m_lane, axis=0)
        s = tl.sum(s_lane * tl.exp(m_lane - _max_or_zero(m)), axis=0)
        if SMOOTH:
            x_sum = tl.sum(x_lane, axis=0)
    tl.store(WORK + unit, m)
    tl.store(WORK + n_units + unit, s)
    target_at = 2 * n_units
    if SMOOTH:
        tl.store(WORK + 2 * n_units + unit, x_sum)
        target_at = 3 * n_units
    holds = (t >= first - lead) & (t < first - lead + CHUNKS * BLOCK) & (t < n_cols)
    x_t = tl.load(base + tl.where(holds, t, 0), mask=holds, other=0.0).to(ACC)
    tl.store(WORK + target_at + row, x_t, mask=holds)


@tessera.kernel
def _max_or_zero(m):
    """The value a slice's terms exp(x - m) are taken against: its max m, or 0 for a
    slice of -inf logits only (or, realigned, of none of the row's), whose terms are
    then e^-87 each (the merge multiplies their sum by exp(-inf - M) = 0) instead of
    exp(-inf - -inf) = NaN. A NaN logit still makes its term NaN."""
    return tl.where(m == -float("inf"), 0.0, m)


@tessera.kernel
def _lead(row, stride, misalign, VEC: tl.constexpr):
    """Elements between the 16-byte boundary at or before the row's start and its start
    (VEC elements = 16 bytes; the array's base is `misalign` elements past a boundary)."""
    return ((row.to(tl.int64) * stride + misalign) % VEC).to(tl.int32)


@tessera.kernel
def _from_boundary(lead, first, n_cols, BLOCK: tl.constexpr, VEC: tl.constexpr):
    """Positions first .. first + BLOCK of a row counted from the 16-byte boundary `lead`
    elements before its start, as a [BLOCK / VEC, VEC] tile, for rows whose starts the
    compiler cannot prove aligned (odd vocabularies as GPT-2's 50257, odd strides):
    (at, col, whole, partial, edge): the positions, their columns (col = at - lead),
    the groups of VEC wholly inside the row (their mask is the group's alone: 16-byte
    accesses), the row's lanes in its partial first and last groups (element accesses),
    and whether this tile holds either of those (only then is `partial` worth an access).
    Example, fp16 (VEC 8), a row starting at element 8003 of a 16-byte aligned array,
    BLOCK 4096: lead 3; the tile at first 0 holds 3 lanes before the row, then columns
    0..4092 (group 0 partial: columns 0..4), the tile at first 4096 columns 4093..8188."""
    g = tl.arange(0, BLOCK // VEC)
    at = first + VEC * g[:, None] + tl.arange(0, VEC)[None, :]
    col = at - lead
    group_col = (first + VEC * g - lead)[:, None]  # each group's first column
    whole = (group_col >= 0) & (group_col + VEC <= n_cols)
    partial = ((group_col < 0) | (group_col + VEC > n_cols)) & (col >= 0) & (col < n_cols)
    # the tile holds column 0's group, or the last column's (position n_cols - 1 + lead)
    edge = (first == 0) | (first + BLOCK >= n_cols + lead)
    return at, col, whole, partial, edge


@tessera.kernel
def _xent_merge_kernel(T, WORK, LOSS, LSE, PART, OUT, SCALE, ARRIVED, n_rows, n_cols, n_slices, n_units,
                       ignore_index, smoothing, group_rows, n_groups, SMOOTH: tl.constexpr, REDUCE: tl.constexpr,
                       MEAN: tl.constexpr, ACC: tl.constexpr, ROWS: tl.constexpr, SLICES: tl.constexpr,
                       FINAL: tl.constexpr):
    """Program g merges rows g * group_rows onward (group_rows of them, ROWS a step)
    from _xent_slice_kernel's partials in WORK: each row's log-sum-exp into LSE and its
    loss into LOSS, or with REDUCE the group's loss sum into PART[g], the last program
    adding those (_sum_partials_when_last). The groups and the order of every sum depend
    on the shape alone: the same bits every run. It is launched with programmatic
    dependent launch (gdc_wait, sm_90+): it starts while the slices finish and waits here,
    before any access to memory, for their partials."""
    tl.extra.cuda.gdc_wait()
    g = tl.program_id(0)
    first = g * group_rows
    end = tl.minimum(first + group_rows, n_rows)
    rr = tl.arange(0, ROWS)
    kk = tl.arange(0, SLICES)
    total = tl.zeros([ROWS], ACC)
    counted = tl.zeros([ROWS], tl.int32)
    target_at = 2 * n_units
    if SMOOTH:
        target_at = 3 * n_units
    for start in range(first, end, ROWS):
        r = start + rr
        live = r < end
        u = r.to(tl.int64)[:, None] * n_slices + kk[None, :]
        um = live[:, None] & (kk[None, :] < n_slices)
        m = tl.load(WORK + u, mask=um, other=-float("inf"))
        s = tl.load(WORK + n_units + u, mask=um, other=0.0)
        t = tl.load(T + r, mask=live, other=ignore_index)
        valid = t != ignore_index
        in_range = (t >= 0) & (t < n_cols)
        # Loaded alongside t, not after it: a row whose target no slice held (ignored, out
        # of range) reads its never-written slot, and the where below drops that value.
        x_t = tl.load(WORK + target_at + r, mask=live, other=0.0)
        # Slices past the row's end (m = -inf) add 0; a NaN slice (a NaN logit) makes the
        # row NaN. Rows past `end` are never stored or added (M is -inf there).
        big = tl.max(m, axis=1)
        lse = big + tl.log(tl.sum(s * tl.exp(m - big[:, None]), axis=1))
        loss = lse - x_t
        if SMOOTH:
            x_sum = tl.sum(tl.load(WORK + 2 * n_units + u, mask=um, other=0.0), axis=1)
            loss = (1.0 - smoothing) * loss + smoothing * (lse - x_sum / n_cols)
        loss = tl.where(valid, tl.where(in_range, loss, float("nan")), 0.0)
        tl.store(LSE + r, lse, mask=live)
        if REDUCE:
            total += tl.where(live, loss, 0.0)
            counted += tl.where(live & valid, 1, 0)
        else:
            tl.store(LOSS + r, loss, mask=live)
    if REDUCE:
        tl.store(PART + g, tl.sum(total, axis=0))
        _sum_partials_when_last(PART, OUT, SCALE, ARRIVED, tl.sum(counted, axis=0), n_groups, MEAN, ACC, FINAL)


@tessera.kernel
def _sum_partials_when_last(PART, OUT, SCALE, ARRIVED, counted, n_groups, MEAN: tl.constexpr, ACC: tl.constexpr,
                            FINAL: tl.constexpr):
    """The last program to finish adds the groups' loss sums PART[0:n_groups] in index
    order (two FINAL-wide tiles a step) into OUT[0]: the sum, for MEAN over the count
    of non-ignored rows (0 counted gives 0/0 = nan, as torch), and stores SCALE[0], the
    factor each row's loss carries in OUT (1/count or 1; SCALE may be PART itself:
    it is stored after every partial is read). So the reduction costs no launch of its
    own.

    ARRIVED[0] (int64, zero before the launch) counts the programs done in its low 32
    bits and their non-ignored rows in the high ones: one atomic per program gives the
    last one both (the count is a whole number: its sum does not depend on the order;
    a second atomic for it made each program wait for two round trips). The last
    program resets it, so the next launch in stream order needs no memset. The atomic
    is acq_rel (on a GPU after a barrier: every thread's stores come first), and the
    last program reads the partials after it."""
    n = tl.num_programs(0)
    ticket = tl.atomic_add(ARRIVED, (counted.to(tl.int64) << 32) + 1, sem="acq_rel")
    if (ticket & 0xFFFFFFFF) == n - 1:
        g = tl.arange(0, FINAL)
        sums = tl.zeros([FINAL], ACC)
        for start in range(0, n_groups, 2 * FINAL):
            a = tl.load(PART + start + g, mask=start + g < n_groups, other=0.0)
            b = tl.load(PART + start + FINAL + g, mask=start + FINAL + g < n_groups, other=0.0)
            sums += a + b
        scale = 1.0
        if MEAN:
            scale = 1.0 / ((ticket >> 32) + counted).to(ACC)
        tl.store(OUT, tl.sum(sums, axis=0) * scale)
        tl.store(SCALE, scale)
        tl.store(ARRIVED, 0)


@tessera.kernel
def _xent_bwd_kernel(X, T, LSE, DLOSS, SCALE, DX, stride_x, stride_dloss, n_cols, n_slices, span, ignore_index,
                     smoothing, SMOOTH: tl.constexpr, HAS_SCALE: tl.constexpr, ACC: tl.constexpr,
                     BLOCK: tl.constexpr, REALIGN: tl.constexpr, VEC: tl.constexpr, STREAM: tl.constexpr = False):
    # Program u = row * n_slices + k: positions k * span .. (k + 1) * span - 1 of row
    # `row` (span a multiple of BLOCK, walked BLOCK at a time; one slice of a span past
    # the row's end: the whole row). Row r's loss gradient: DLOSS[r] (reduction
    # 'none'), or the reduced loss's gradient DLOSS[0] (stride 0) times SCALE[0]
    # (1/count for 'mean', 1 for 'sum').
    # REALIGN (X's rows as DX's: stride n_cols, both arrays 16-byte aligned, rows not
    # provably so): positions count from the row's 16-byte boundary (_from_boundary), so
    # its loads and stores are 16 bytes wide but for its partial first and last groups.
    # STREAM: dx is stored evict-first (st.global.cs: written once, read by the next
    # op's launch, and larger than the L2).
    unit = tl.program_id(0)
    row32 = unit // n_slices
    first = (unit - row32 * n_slices) * span
    row = row32.to(tl.int64)
    cols = tl.arange(0, BLOCK)
    t = tl.load(T + row)
    d = tl.load(DLOSS + row * stride_dloss).to(ACC)
    if HAS_SCALE:
        d = d * tl.load(SCALE)
    # Ignored rows get zero gradients; an out-of-range target NaN ones (its loss is NaN).
    d = tl.where(t != ignore_index, tl.where((t >= 0) & (t < n_cols), d, float("nan")), 0.0)
    lse = tl.load(LSE + row)
    if REALIGN:
        lead = _lead(row, n_cols, 0, VEC)
        src = tl.multiple_of(X + (row * n_cols - lead), 16)
        dst = tl.multiple_of(DX + (row * n_cols - lead), 16)
        end = tl.minimum(first + span, n_cols + lead)
        g = tl.arange(0, BLOCK // VEC)
        for at0 in range(first, end, BLOCK):
            # The groups of VEC wholly inside the row, 16 bytes a thread at a time.
            at = at0 + VEC * g[:, None] + tl.arange(0, VEC)[None, :]
            group_col = (at0 + VEC * g - lead)[:, None]
            whole = (group_col >= 0) & (group_col + VEC <= n_cols)
            x = tl.load(src + at, mask=whole, other=0.0).to(ACC)
            _store_dx(dst + at, _xent_grad(x, at - lead, t, lse, d, n_cols, smoothing, SMOOTH), whole, STREAM)
        if (first == 0) | (end == n_cols + lead):
            # The row's partial first and last groups, element by element, as a small
            # tile of their own: masked element accesses over the whole tile (the
            # forward's _from_boundary) took 128 registers a thread at 4096 positions
            # over 4 warps instead of 32, and ran at 0.79 of copy (0.99 aligned).
            p, c, m = _row_edge_groups(lead, first, end, n_cols, VEC)
            x = tl.load(src + p, mask=m, other=0.0).to(ACC)
            _store_dx(dst + p, _xent_grad(x, c, t, lse, d, n_cols, smoothing, SMOOTH), m, STREAM)
    else:
        for start in range(first, tl.minimum(first + span, n_cols), BLOCK):
            c = tl.multiple_of(start + cols, BLOCK)  # runs start at multiples of BLOCK: vector accesses
            mask = c < n_cols
            x = tl.load(X + row * stride_x + c, mask=mask, other=0.0).to(ACC)
            _store_dx(DX + row * n_cols + c, _xent_grad(x, c, t, lse, d, n_cols, smoothing, SMOOTH), mask, STREAM)


@tessera.kernel
def _row_edge_groups(lead, first, end, n_cols, VEC: tl.constexpr):
    """(positions, columns, mask) of the row's first and last groups of VEC positions
    counted from its 16-byte boundary `lead` elements before it, as a [2 * VEC] tile,
    masked to their columns inside the row, to groups not wholly inside it (those are
    the 16-byte accesses' own) and to positions first .. end - 1 (the program's).
    Example, fp16 (VEC 8), lead 3, 50257 columns: positions 0..7 are columns -3..4
    (columns 0..4 partial), the last group's positions 50256..50263 columns
    50253..50260 (columns 50253..50256 partial)."""
    e = tl.arange(0, 2 * VEC)
    last = (n_cols + lead - 1) // VEC * VEC  # the last group's first position
    p = tl.where(e < VEC, e, last + e - VEC)
    col = p - lead
    group_col = tl.where(e < VEC, 0, last) - lead
    partial = (group_col < 0) | (group_col + VEC > n_cols)
    mask = partial & (col >= 0) & (col < n_cols) & (p >= first) & (p < end) & ((e < VEC) | (last > 0))
    return p, col, mask


@tessera.kernel
def _store_dx(ptr, dx, mask, STREAM: tl.constexpr):
    if STREAM:
        tl.store(ptr, dx, mask=mask, cache_modifier=".cs")
    else:
        tl.store(ptr, dx, mask=mask)


@tessera.kernel
def _xent_grad(x, c, t, lse, d, n_cols, smoothing, SMOOTH: tl.constexpr):
    """dlogits of logits x in columns c of a row with target t, log-sum-exp lse and loss
    gradient d: (softmax - the (smoothed) one-hot target) * d."""
    g = tl.exp(x - lse)
    if SMOOTH:
        g = g - tl.where(c == t, 1.0 - smoothing, 0.0) - smoothing / n_cols
    else:
        g = tl.where(c == t, g - 1.0, g)
    return g * d


def _moveaxis(x, src, dst):
    if H.is_torch(x):
        return x.movedim(src, dst)
    if H.is_cupy(x):
        return H._cupy().moveaxis(x, src, dst)
    return np.moveaxis(x, src, dst)


def _last_dim(x, dim):
    nd = x.ndim
    d = dim + nd if dim < 0 else dim
    if not 0 <= d < max(nd, 1):
        raise ValueError(f"dim {dim} is out of range for {nd} dimensions")
    return d


def _softmax_block(n, p):
    """The row tile: the row rounded up to a power of two, at least 8 with dropout (its
    groups of eight columns)."""
    return max(H.block_for(n), 8) if p > 0 else H.block_for(n)


class _RowPlan:
    """A row kernel's launch over an input of one layout: `move` whether the reduced
    dimension d is moved last first, `direct` whether the input (after the move) is
    already the (rows, n) view, the row stride, the grid, the constexpr and launch
    keyword arguments, and the output's shapes."""
    __slots__ = ("d", "move", "direct", "rows", "n", "stride", "grid", "kw", "moved_shape", "p", "keep_from",
                 "new_out")


def _row_plan(x, dim, p, kw_of):
    plan = _RowPlan()
    plan.d = d = _last_dim(x, dim)
    plan.move = d != x.ndim - 1
    xm = _moveaxis(x, d, -1) if plan.move else x
    plan.n = n = xm.shape[-1]
    xv = H.rows_view(xm, n)
    plan.direct = xv is xm
    plan.rows = xv.shape[0]
    plan.stride = H.row_stride(xv) if plan.rows and n else 0
    plan.grid = (plan.rows,)
    plan.moved_shape = tuple(xm.shape)
    plan.new_out = H.allocator(x, plan.moved_shape)  # contiguous: the (rows, n) rows the kernel writes
    plan.p, plan.keep_from = H.scalar(x, p), _keep_from(p)
    plan.kw = kw_of(n) if plan.rows and n else None
    return plan


def _rows_of(plan, x, direct):
    """x (laid out as the plan's input, or as its gradient) as the kernel's rows;
    direct: x after the move already is that view."""
    xm = _moveaxis(x, plan.d, -1) if plan.move else x
    return xm if direct else H.rows_view(xm, plan.n)


def _unrows(plan, y):
    """The kernel's output (made in the moved shape) with the reduced dimension put back."""
    return _moveaxis(y, -1, plan.d) if plan.move else y


# Warps of a softmax row with dropout on a GPU, both directions (the Philox draws and the
# exp make these rows heavier than a plain softmax's: fewer threads a row issue fewer
# instructions in all, and more rows stay in flight). 16384x4096 fp16, of a copy, 4 / 8 /
# 16 warps: H200 forward 0.901 / 0.846 / 0.661, backward 0.952 / 0.903 / 0.751; H100
# forward 1.001 / 0.992 / 0.864, backward 1.007 / 1.008 / 0.985
# (bench/results/memory_bound_configs_ring_softmax_h200.md, _h100.md).
SOFTMAX_DROPOUT_MAX_WARPS = 4

_SOFTMAX_FWD_PLANS = H.Plans()
_SOFTMAX_BWD_PLANS = H.Plans()


def softmax_forward(x, dim, log, p, seed):
    key = (H.layout(x), dim, log, p)
    plan = _SOFTMAX_FWD_PLANS.get(key)
    if plan is None:
        H.check_float("log_softmax" if log else "softmax", x)
        plan = _SOFTMAX_FWD_PLANS.remember(key, _row_plan(x, dim, p, lambda n: dict(
            LOG=log, DROPOUT=p > 0, ACC=H.acc_dtype(x), BLOCK=_softmax_block(n, p),
            **H.row_launch_options(x, H.block_for(n), max_warps=SOFTMAX_DROPOUT_MAX_WARPS if p > 0 else 8))))
    xv = _rows_of(plan, x, plan.direct)
    y = plan.new_out()
    if plan.kw is not None:
        _softmax_fwd_kernel[plan.grid](xv, y, plan.stride, plan.n, plan.p, int(seed), plan.keep_from, **plan.kw)
    return _unrows(plan, y)


def softmax_backward(saved, dy, dim, log, p, seed):
    key = (H.layout(saved), H.layout(dy), dim, log, p)
    plan = _SOFTMAX_BWD_PLANS.get(key)
    if plan is None:
        plan = _row_plan(saved, dim, p, lambda n: dict(
            LOG=log, DROPOUT=p > 0, ACC=H.acc_dtype(saved), BLOCK=_softmax_block(n, p),
            **H.row_launch_options(saved, H.block_for(n), max_warps=SOFTMAX_DROPOUT_MAX_WARPS if p > 0 else 16)))
        dym = _moveaxis(dy, plan.d, -1) if plan.move else dy
        dyv = H.rows_view(dym, plan.n)
        plan = _SOFTMAX_BWD_PLANS.remember(key, (plan, dyv is dym, H.row_stride(dyv) if plan.kw is not None else 0))
    plan, dy_direct, dy_stride = plan
    sv = _rows_of(plan, saved, plan.direct)
    dyv = _rows_of(plan, dy, dy_direct)
    dx = plan.new_out()
    if plan.kw is not None:
        _softmax_bwd_kernel[plan.grid](sv, dyv, dx, plan.stride, dy_stride, plan.n, plan.p, int(seed),
                                       plan.keep_from, **plan.kw)
    return _unrows(plan, dx)


def softmax(x, dim=-1, dropout_p=0.0, seed=0):
    """Softmax over `dim`; with dropout_p > 0 the result goes through dropout (scaled by
    1/(1-p)) in the same kernel, its mask drawn from `seed` (the same seed gives the
    same mask, and the backward pass uses that mask)."""
    p = H.scalar_float("softmax", "dropout_p", dropout_p, 0.0, 1.0, hi_open=True)
    AG = H.autograd()
    if AG.wants_grad(x):
        return AG.Softmax.apply(x, (dim, False, p, int(seed)))
    return softmax_forward(x, dim, False, p, seed)


def log_softmax(x, dim=-1):
    """log(softmax(x)) over `dim`, computed as x - max - log(sum(exp(x - max)))."""
    AG = H.autograd()
    if AG.wants_grad(x):
        return AG.Softmax.apply(x, (dim, True, 0.0, 0))
    return softmax_forward(x, dim, True, 0.0, 0)


# --------------------------------------------------------------------------- cross entropy

def _aminmax(t):
    lo, hi = H.torch.aminmax(t)
    return int(lo), int(hi)


def _check_cpu_target_values(target, n, ignore_index):
    """A CPU torch target's values: in [0, n) or ignore_index, else IndexError. One
    reduction for the common case (every target in range); the exact check
    (ignore_index may be out of range) only when the extremes are out of range."""
    lo, hi = _aminmax(target)
    if (lo < 0 or hi >= n) and bool((((target < 0) | (target >= n)) & (target != ignore_index)).any()):
        raise IndexError(f"tessera.kernels.cross_entropy: target values must be in [0, {n}) "
                         f"or ignore_index={ignore_index}")


def _check_targets(logits, target, ignore_index, deferred=False):
    """target's type and values (on the CPU: every call). deferred: the caller checks a
    CPU torch target's values itself (cross_entropy_forward, after a reducing launch)."""
    n = logits.shape[-1]
    if H.is_torch(target):
        if target.dtype not in (H.torch.int64, H.torch.int32):
            raise TypeError(f"tessera.kernels.cross_entropy: target has dtype {target.dtype}; pass int64 or int32")
        if not deferred and not target.is_cuda and target.numel():
            _check_cpu_target_values(target, n, ignore_index)
    elif not H.is_cupy(target):
        target = np.asarray(target)
        if target.dtype not in (np.int64, np.int32):
            raise TypeError(f"tessera.kernels.cross_entropy: target has dtype {target.dtype}; pass int64 or int32")
        bad = ((target < 0) | (target >= n)) & (target != ignore_index)
        if bad.any():
            raise IndexError(f"tessera.kernels.cross_entropy: target values must be in [0, {n}) "
                             f"or ignore_index={ignore_index}")
    return target


def _fwd_programs_per_sm(warps, block, smooth, dtype):
    """Programs per SM of the reducing forward of rows held whole: CE_WARPS_PER_SM warps,
    fewer where the kernel's registers keep fewer blocks resident (an H100 SM has 65536
    registers: at 4 warps, 4096 classes' 48 registers per thread fit 10 blocks,
    smoothing's ~80 6, 64 logits per thread's 96 5, with smoothing 168 3).
    Every program must be resident from the start: rows are split evenly, so a program
    that waits for a free SM makes the launch take up to twice as long.
    test_kernels_last_arriver.py checks these counts against ptxas's register use."""
    per_sm = CE_WARPS_PER_SM // warps
    if block // (32 * warps) > 32:  # more than 32 logits per thread (8192 classes, 4 warps)
        per_sm = per_sm // 4 if smooth else per_sm // 2
    elif smooth:
        per_sm = per_sm * 5 // 8
    if dtype == "float64":  # fp64 rows: 2 to 4x the registers (96 to 255 at 4 warps)
        per_sm //= 4
    return max(1, per_sm)


def _final_block(logits, block):
    """Partials the last program adds per tile (two tiles a step): CE_LOSS_GROUP, on a
    GPU at most 8 per thread (1024 for 4 warps; a 1024-wide tile on one warp took 142
    registers)."""
    if not H.on_gpu(logits):
        return CE_LOSS_GROUP
    warps = H.row_launch_options(logits, block, max_warps=CE_FWD_MAX_WARPS)["num_warps"]
    return min(CE_LOSS_GROUP, 256 * warps)


def _row_groups(rows, programs, max_groups=None):
    """How the reducing forward splits `rows` over about `programs` programs:
    (group_rows, n_groups, rows_per_program, programs). Groups of group_rows rows
    (the last one shorter) are what the losses are summed over first, one partial
    each: their size depends on `rows` alone (at most CE_MAX_GROUPS groups, so the
    last program's sum stays short), so the loss's bits do not depend on `programs`.
    A program holds whole groups."""
    group_rows = -(-rows // (max_groups or CE_MAX_GROUPS))
    n_groups = -(-rows // group_rows)
    per_program = -(-n_groups // max(1, min(programs, n_groups)))
    rows_per_program = per_program * group_rows
    return group_rows, n_groups, rows_per_program, -(-rows // rows_per_program)


def _ce_block(n):
    """The whole row up to CE_ONE_CHUNK classes, else CE_BLOCK-wide chunks (the backward's)."""
    b = H.block_for(n, 1 << 30)
    return b if b <= CE_ONE_CHUNK else CE_BLOCK


def _misalignment(x):
    """Elements from the 16-byte boundary at or before x's data to it."""
    if H.is_torch(x):
        return x.data_ptr() % 16 // x.element_size()
    ptr = x.data.ptr if H.is_cupy(x) else x.__array_interface__["data"][0]
    return ptr % 16 // x.itemsize


def _slicing(rows, n, slice_block=None):
    """How the forward splits rows longer than CE_ONE_CHUNK classes: (chunks per slice,
    slices per row, merge rows per step, merge group rows, merge groups). Slices of
    one slice_block-wide tile (CE_SLICE), at most CE_MAX_SLICES per row (longer rows
    take several chunks a slice). The merge holds (rows, slices) tiles of at most
    CE_MERGE_TILE partials, 32 rows at most (so a 4096-row batch has 128 merge programs
    of one step each); its groups (at most CE_MAX_GROUPS, each summed into one partial)
    depend on the shape alone."""
    width = slice_block or CE_SLICE
    chunks = -(-n // (width * CE_MAX_SLICES))
    slices = -(-n // (width * chunks))
    step = max(1, min(32, CE_MERGE_TILE // H.block_for(slices, 1 << 30)))
    group_rows = step * -(-(-(-rows // step)) // CE_MAX_GROUPS)
    return chunks, slices, step, group_rows, -(-rows // group_rows)


def _slice_warps(logits, n):
    """Warps of a forward slice (CE_SLICE_WARPS; CE_SLICE_WARPS_FAST_MEMORY for rows
    longer than CE_ONE_CHUNK on a GPU with fast memory)."""
    if n > CE_ONE_CHUNK and H.fast_memory(logits):
        return CE_SLICE_WARPS_FAST_MEMORY
    return CE_SLICE_WARPS


def _slice_maxnreg(logits, n, slice_kw, smoothing):
    """CE_SLICE_MAXNREG_FAST_MEMORY for the fast-memory GPUs' 2-warp slices of 16-bit
    logits without label smoothing (the forms ptxas fits in it without spilling:
    test_kernels_gpu_ptx.py), else None. bf16 took it once its lanes widened from their
    words (compiler/codegen/nvptx/widen_bf16_words_nvptx.cpp): on an H200 2048x50257
    slices + merge 0.884-0.886 -> 0.896-0.899 of a copy (realigned rows: ptxas 96 -> 80
    registers, no spills), 4096x32000 0.973 -> 0.970 (aligned rows: 78 registers either
    way, so the same code; bench/results/memory_bound_configs_h200_s15_ce_bf16_cap{1,2}.md;
    the library op: kernels_cuda_bfloat16_h200_s15_ce_cap.md); before, it gained nothing
    (0.868 against 0.863-0.873)."""
    if (n > CE_ONE_CHUNK and H.fast_memory(logits) and slice_kw.get("num_warps") == CE_SLICE_WARPS_FAST_MEMORY
            and H.dtype_name(logits) in ("float16", "bfloat16") and not smoothing > 0):
        return CE_SLICE_MAXNREG_FAST_MEMORY
    return None


def _bwd_kws(logits, stride, n, block, smoothing, realign, bwd_slice=None):
    """The backward's launches: (plain, realigned or None), each (constexprs and launch
    options, slices per row, positions per slice) of _xent_bwd_kernel. The realigned
    walk (rows read and written from their 16-byte boundaries) needs rows not provably
    aligned, the logits' rows laid out as the gradient's (stride n) and, at the launch,
    both arrays 16-byte aligned (_ce_backward_with checks the logits'). bwd_slice:
    (positions per program, tile, warps, evict-first stores) for rows longer than
    CE_ONE_CHUNK (default on a GPU: CE_BWD_SLICE; None on the CPU: a program per row)."""
    on_gpu = H.on_gpu(logits)
    sliced = bwd_slice if bwd_slice is not None else (CE_BWD_SLICE if on_gpu else None)
    if n > CE_ONE_CHUNK and sliced is not None:
        span, block, warps, stream = sliced
        # The kernel's tiles start at multiples of the tile (its 16-byte access hint).
        if block < 16 or block & (block - 1) or span % block:
            raise ValueError(f"tessera.kernels.cross_entropy: backward slices of {span} positions in tiles of "
                             f"{block}: the tile must be a power of two >= 16 dividing the slice")
        opts = {"num_warps": warps} if on_gpu else {}
    else:
        span, stream = None, False
        opts = H.row_launch_options(logits, block, max_warps=CE_BWD_MAX_WARPS)
    vec = 16 // _element_size(logits)

    def kw(realigned):
        positions = n + (vec - 1 if realigned else 0)
        width = span or -(-positions // block) * block  # (no slices: the whole row)
        return (dict(SMOOTH=smoothing > 0, ACC=H.acc_dtype(logits), BLOCK=block, REALIGN=realigned,
                     VEC=vec if realigned else 1, STREAM=stream, **opts), -(-positions // width), width)
    if not (realign and stride == n and n % 16 != 0):
        return kw(False), None
    return kw(False), kw(True)


def _element_size(x):
    return x.element_size() if H.is_torch(x) else x.itemsize


class _CePlan:
    """cross_entropy's launches for one layout of (logits, target) and options."""
    __slots__ = ("rows", "n", "x_direct", "t_direct", "stride", "block", "one", "smoothing", "reduce", "mean",
                 "programs", "rows_per_program", "group_rows", "n_groups", "fwd_kw", "bwd_kw", "bwd_realigned_kw",
                 "new_dx", "new_lse", "new_out", "new_part", "new_scale", "slices", "units", "slice_kw", "merge_kw",
                 "new_work")


def _ce_plan(logits, target, smoothing, reduction, slice_block=None, slice_warps=None, realign=None,
             bwd_slice=None, sliced=None, slice_maxnreg=0):
    """slice_block, slice_warps: the slices' tile and warps for rows longer than
    CE_ONE_CHUNK (CE_SLICE, CE_SLICE_WARPS; bench/memory_bound_configs.py tries others);
    slice_maxnreg: their registers a thread (0: _slice_maxnreg's choice, None: ptxas's);
    bwd_slice: the backward's (positions per program, tile, warps, evict-first stores)
    for those rows (CE_BWD_SLICE on a GPU, a program per row on the CPU; see _bwd_kws);
    realign: whether rows not provably 16-byte aligned are read from their 16-byte
    boundaries (None: on a GPU; the CPU's code for its [BLOCK / VEC, VEC] tiles is 7x
    slower than for the plain row, 128x50257 fp32: 18 ms against 2.4). sliced: a reducing
    forward of rows held whole also runs as slices and the merge (the benchmark's)."""
    H.check_float("cross_entropy", logits)
    if logits.ndim != 2:
        raise ValueError(f"tessera.kernels.cross_entropy: logits must be (rows, classes), got {tuple(logits.shape)}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"tessera.kernels.cross_entropy: reduction must be 'mean', 'sum' or 'none', "
                         f"got {reduction!r}")
    rows, n = logits.shape
    if tuple(target.shape) != (rows,):
        raise ValueError(f"tessera.kernels.cross_entropy: target has shape {tuple(target.shape)}, expected ({rows},)")
    if rows and not n:
        raise ValueError(f"tessera.kernels.cross_entropy: logits have {rows} rows of 0 classes")
    plan = _CePlan()
    xv = H.rows_view(logits, n)
    plan.rows, plan.n, plan.x_direct, plan.t_direct = rows, n, xv is logits, H.contiguous(target) is target
    plan.stride = H.row_stride(xv) if rows and n else 0
    plan.smoothing = H.scalar(logits, smoothing)
    plan.reduce, plan.mean = reduction != "none", reduction == "mean"
    plan.programs, plan.rows_per_program, plan.group_rows, plan.n_groups = rows, 1, 1, rows
    plan.new_dx = H.allocator(logits, (rows, n))
    plan.new_lse = H.allocator(logits, (rows,), "acc")
    plan.new_out = H.allocator(logits, ()) if plan.reduce else H.allocator(logits, (rows,), "acc")
    plan.new_scale = H.allocator(logits, (1,), "acc")
    plan.new_part = H.allocator(logits, (0,), "acc")  # (no rows)
    plan.fwd_kw = plan.bwd_kw = plan.bwd_realigned_kw = plan.slice_kw = plan.merge_kw = None
    realign_any = H.on_gpu(logits) if realign is None else realign
    plan.slices = plan.units = 0
    if sliced is None:
        sliced = CE_SLICED_REDUCE_FAST_MEMORY and H.fast_memory(logits)
    if rows and (n > CE_ONE_CHUNK or (sliced and plan.reduce)):
        # Long rows: a program per (row, slice), then the merge (_xent_merge_kernel),
        # whose groups of rows carry the loss reduction.
        block = _ce_block(n)
        width = slice_block or CE_SLICE
        # Rows whose starts or ends the compiler cannot prove 16-byte aligned (a row
        # stride or a class count not a multiple of 16, as 50257) would be read an
        # element per instruction: their slices are counted from each row's 16-byte
        # boundary instead (_from_boundary), spanning VEC - 1 more positions.
        vec = 16 // _element_size(logits)
        realign = realign_any and (plan.stride % 16 != 0 or n % 16 != 0)
        chunks, plan.slices, step, plan.group_rows, plan.n_groups = _slicing(rows, n + (vec - 1) * realign, width)
        if realign and chunks > 1:  # (rows of over a million classes: chunked slices, unaligned)
            realign = False
            chunks, plan.slices, step, plan.group_rows, plan.n_groups = _slicing(rows, n, width)
        plan.units = rows * plan.slices
        plan.programs = plan.n_groups
        plan.slice_kw = dict(SMOOTH=smoothing > 0, ACC=H.acc_dtype(logits), BLOCK=width, CHUNKS=chunks,
                             REALIGN=realign, VEC=vec, FMA_EXP=CE_SLICE_FMA_EXP and H.on_gpu(logits),
                             **H.row_launch_options(logits, width, max_warps=slice_warps or _slice_warps(logits, n)))
        regs = _slice_maxnreg(logits, n, plan.slice_kw, smoothing) if slice_maxnreg == 0 else slice_maxnreg
        if regs:
            plan.slice_kw["maxnreg"] = regs
        plan.merge_kw = dict(SMOOTH=smoothing > 0, REDUCE=plan.reduce, MEAN=plan.mean, ACC=H.acc_dtype(logits),
                             ROWS=step, SLICES=H.block_for(plan.slices, 1 << 30), FINAL=_final_block(logits, 1024),
                             **H.row_launch_options(logits, 1024, max_warps=4))
        plan.bwd_kw, plan.bwd_realigned_kw = _bwd_kws(logits, plan.stride, n, block, smoothing, realign_any,
                                                      bwd_slice)
        # The slices' (max, sum[, logit sum]) and the targets' logits.
        plan.new_work = H.allocator(logits, ((3 if smoothing > 0 else 2) * plan.units + rows,), "acc")
        if plan.reduce:
            plan.new_part = H.allocator(logits, (plan.n_groups,), "acc")
    elif rows and n:
        # Rows up to CE_ONE_CHUNK classes are held whole (one pass, one exp per element).
        block = _ce_block(n)
        plan.fwd_kw = dict(SMOOTH=smoothing > 0, REDUCE=plan.reduce, MEAN=plan.mean,
                           ACC=H.acc_dtype(logits), BLOCK=block, FINAL=_final_block(logits, block),
                           **H.row_launch_options(logits, block, max_warps=CE_FWD_MAX_WARPS))
        plan.bwd_kw, plan.bwd_realigned_kw = _bwd_kws(logits, plan.stride, n, block, smoothing, realign_any)
        if plan.reduce:
            # Runs of rows per program (one per row without a reduction, as before): on
            # a GPU as many programs as stay resident at once, a few per CPU thread.
            progs = H.num_programs_for_partials(logits, rows, per_sm=_fwd_programs_per_sm(
                plan.fwd_kw.get("num_warps", 4), block, smoothing > 0, H.dtype_name(logits)))
            plan.group_rows, plan.n_groups, plan.rows_per_program, plan.programs = _row_groups(rows, progs)
            plan.new_part = H.allocator(logits, (plan.n_groups,), "acc")
    return plan


_CE_PLANS = H.Plans()


def _ce_plan_for(logits, target, smoothing, reduction="none"):
    key = (H.layout(logits), H.layout(target), smoothing, reduction)
    plan = _CE_PLANS.get(key)
    if plan is None:
        plan = _CE_PLANS.remember(key, _ce_plan(logits, target, smoothing, reduction))
    return plan


def cross_entropy_forward(logits, target, ignore_index, smoothing, reduction="none"):
    """(out, scale, lse) of (rows, vocab) logits, in one launch: out is the loss reduced
    over rows ('mean' over the non-ignored rows, 'sum'; 0-d, in the logits' dtype) and
    scale an array whose element 0 is the factor each row's loss carries in it (1/count
    or 1; the backward's), or for 'none' out holds the row losses and scale is None; lse
    the rows' log-sum-exps. out's rows, scale and lse are in the accumulation type."""
    # A CPU torch target's values are checked every call: with a reduction, after the
    # launch and only when the loss is NaN (the kernel gives an out-of-range target a NaN
    # loss and reads nothing for it): 0.2 us per call instead of the 2 us of a min/max.
    deferred = reduction != "none" and H.is_torch(target) and not target.is_cuda
    target = _check_targets(logits, target, ignore_index, deferred)
    plan = _ce_plan_for(logits, target, smoothing, reduction)
    return _ce_forward_with(plan, logits, target, ignore_index, deferred)


def _ce_forward_with(plan, logits, target, ignore_index, deferred=False):
    """cross_entropy_forward's launches under `plan` (checked arguments; deferred: check
    a CPU target's values when the reduced loss is NaN)."""
    xv = logits if plan.x_direct else H.rows_view(logits, plan.n)
    t = target if plan.t_direct else H.contiguous(target)
    lse = plan.new_lse()
    if plan.reduce:
        # The groups' loss sums (_sum_partials_when_last); no row losses.
        # The last program stores the scale at part[0] after reading every partial: one
        # array for both (an allocation is ~0.9 us of a CPU call's host time).
        loss = part = scale = plan.new_part()
        out = plan.new_out()
        arrived = H.arrival_counters(logits, 1, "int64")
    else:
        out = loss = part = plan.new_out()
        scale, arrived = lse, t  # not touched without REDUCE
    if plan.fwd_kw is not None or plan.slice_kw is not None:
        if plan.slice_kw is not None:
            work = plan.new_work()
            _xent_slice_kernel[(plan.units,)](xv, t, work, plan.stride, plan.n, plan.slices, plan.units,
                                              _misalignment(xv) if plan.slice_kw["REALIGN"] else 0, **plan.slice_kw)
            _xent_merge_kernel[(plan.programs,)](t, work, loss, lse, part, out, scale, arrived, plan.rows, plan.n,
                                                 plan.slices, plan.units, int(ignore_index), plan.smoothing,
                                                 plan.group_rows, plan.n_groups, **plan.merge_kw)
        else:
            _xent_fwd_kernel[(plan.programs,)](xv, t, loss, lse, part, out, scale, arrived, plan.stride, plan.rows,
                                               plan.rows_per_program, plan.n, int(ignore_index), plan.smoothing,
                                               plan.group_rows, plan.n_groups, **plan.fwd_kw)
        if deferred and math.isnan(out.item()):
            _check_cpu_target_values(target, plan.n, ignore_index)
    elif plan.reduce:  # no rows: the sum is 0, the mean 0/0
        out[...] = float("nan") if plan.mean else 0.0
        scale = plan.new_scale()
        scale[...] = float("inf") if plan.mean else 1.0
    return out, (scale if plan.reduce else None), lse


_NOT_FAST = object()  # a fast-plan key the general path keeps (it checks and reports)


def _cross_entropy_fast(logits, target, ignore_index, smoothing, reduction, keep):
    """cross_entropy_forward's (out, scale, lse) for torch CUDA logits and target whose
    layout the general path takes without copies, or None (the general path then checks,
    reports and launches). Per call: a plan lookup keyed by both tensors' shapes, strides,
    dtypes and devices and the options, the output's allocation and one or two bound
    launches (tessera's Kernel.bind). Not keep (no gradient wanted): lse and the group
    partials, whose element 0 the last merge program overwrites with the scale, come from
    scratch arrays kept per device and stream, since no backward reads them; keep: fresh
    ones, as the general path's. On an H200 the general path took ~30 us of host time per
    call at 16384x4096 fp16 and ~55 us at 2048x50257, about the kernels' 36 and 60 us, so
    that a busier host made the forward host-bound (bench/results/
    kernels_cuda_float16_h200_cefwd.md)."""
    T = H.torch
    if T is None or type(logits) is not T.Tensor or type(target) is not T.Tensor or not logits.is_cuda:
        return None
    # (In _CE_PLANS beside the plans it is made from: a test that clears those clears these.)
    key = ("fast", logits.shape, logits.stride(), logits.dtype, logits.get_device(), target.shape, target.stride(),
           target.dtype, target.get_device(), smoothing, reduction, ignore_index)
    fast = _CE_PLANS.get(key)
    if fast is None:
        fast = _CE_PLANS.remember(key, _fast_ce_plan(logits, target, ignore_index, smoothing, reduction))
    if fast is _NOT_FAST:
        return None
    return fast(logits, target, keep)


def _fast_ce_plan(logits, target, ignore_index, smoothing, reduction, cpu=False):
    """The call _cross_entropy_fast makes for this layout (see there), or _NOT_FAST. cpu:
    CPU tensors too (tests; the library's CPU calls keep the general path, which checks
    a CPU target's values every call)."""
    if logits.get_device() != target.get_device() or (logits.get_device() < 0 and not cpu):
        return _NOT_FAST
    try:
        _check_targets(logits, target, ignore_index)
        plan = _ce_plan(logits, target, smoothing, reduction)
    except (TypeError, ValueError, IndexError):
        return _NOT_FAST  # (the general path raises it again, with its message)
    if not (plan.x_direct and plan.t_direct and plan.rows and plan.n):
        return _NOT_FAST
    common = dict(n_cols=plan.n, ignore_index=int(ignore_index), smoothing=plan.smoothing,
                  group_rows=plan.group_rows, n_groups=plan.n_groups)
    if plan.slice_kw is not None:
        slices = _xent_slice_kernel.bind((plan.units,), stride_x=plan.stride, n_cols=plan.n, n_slices=plan.slices,
                                         n_units=plan.units, **plan.slice_kw)
        merge = _xent_merge_kernel.bind((plan.programs,), n_rows=plan.rows, n_slices=plan.slices,
                                        n_units=plan.units, **common, **plan.merge_kw)
        realign = plan.slice_kw["REALIGN"]
    else:
        slices = merge = None
        whole = _xent_fwd_kernel.bind((plan.programs,), stride_x=plan.stride, n_rows=plan.rows,
                                      rows_per_program=plan.rows_per_program, **common, **plan.fwd_kw)
    scratch = {}  # launch place (device, stream) -> (lse, part, work) of calls that keep none

    def call(x, t, keep):
        if keep:
            lse, part = plan.new_lse(), plan.new_part()
            work = plan.new_work() if slices is not None else None
        else:
            place = H.launch_place(x, "cross_entropy")
            bufs = scratch.get(place)
            if bufs is None:
                bufs = scratch[place] = (plan.new_lse(), plan.new_part(),
                                         plan.new_work() if slices is not None else None)
            lse, part, work = bufs
        out = plan.new_out()
        if plan.reduce:
            loss, scale, arrived = part, part, H.arrival_counters(x, 1, "int64")
        else:
            loss = part = out
            scale, arrived = lse, t  # not touched without REDUCE
        if slices is not None:
            slices(x, t, work, _misalignment(x) if realign else 0)
            merge(t, work, loss, lse, part, out, scale, arrived)
        else:
            whole(x, t, loss, lse, part, out, scale, arrived)
        return out, (scale if plan.reduce else None), lse
    return call


def cross_entropy_backward(logits, target, lse, dloss, scale, ignore_index, smoothing):
    """dlogits for the loss gradient dloss: per row (reduction 'none', scale None) or of
    the reduced loss (scale: the array cross_entropy_forward returned, the factor at 0)."""
    return _ce_backward_with(_ce_plan_for(logits, target, smoothing), logits, target, lse, dloss, scale, ignore_index)


def _ce_backward_with(plan, logits, target, lse, dloss, scale, ignore_index):
    """cross_entropy_backward's launch under `plan`."""
    xv = logits if plan.x_direct else H.rows_view(logits, plan.n)
    t = target if plan.t_direct else H.contiguous(target)
    dx = plan.new_dx()
    dl = H.contiguous(dloss)
    if plan.bwd_kw is not None:
        kw = plan.bwd_kw
        if plan.bwd_realigned_kw is not None and _misalignment(xv) == 0:
            kw = plan.bwd_realigned_kw
        kw, slices, span = kw
        _xent_bwd_kernel[(plan.rows * slices,)](
            xv, t, lse, dl, scale if scale is not None else lse, dx, plan.stride, 0 if scale is not None else 1,
            plan.n, slices, span, int(ignore_index), plan.smoothing, HAS_SCALE=scale is not None, **kw)
    return dx


def cross_entropy(logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of (rows, classes) logits against integer targets, as
    torch.nn.functional.cross_entropy: log-softmax and NLL fused, walking the classes in
    chunks, so no (rows, classes) probability tensor is kept. The per-row losses are in
    fp32 (fp64 for fp64 logits); reduction 'mean' averages over non-ignored rows."""
    smoothing = H.scalar_float("cross_entropy", "label_smoothing", label_smoothing, 0.0, 1.0)
    AG = H.autograd()
    if AG.wants_grad(logits):
        out = AG.CrossEntropy.apply(logits, target, (int(ignore_index), reduction, smoothing))
    else:
        fast = _cross_entropy_fast(logits, target, ignore_index, smoothing, reduction, False)
        out = fast[0] if fast is not None else \
            cross_entropy_forward(logits, target, ignore_index, smoothing, reduction)[0]
    if H.is_torch(out):
        return out.to(logits.dtype) if out.dtype != logits.dtype else out
    if H.is_cupy(out):
        return out.astype(logits.dtype)
    return np.asarray(out).astype(logits.dtype)  # a 0-d array for 'mean' and 'sum', as torch
