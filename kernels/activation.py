"""Fused elementwise ops, one kernel per direction: add_relu, mul_tanh, bias_gelu
(erf and tanh forms), gelu_dropout, swiglu, geglu.

All share one forward and one backward kernel, specialized by the OP constexpr, except
the backward of gelu with a bias, whose kernel also sums the bias gradient over row
groups (_bias_act_bwd_kernel). The inputs are seen as (rows, columns): two same-shape
inputs are flattened into one row; a bias is the second input with a row stride of 0
(so it is re-read from cache for every row, never broadcast in memory). Values are
computed in fp32 (fp64 for fp64) and rounded once on the store.

Dropout draws its mask from Philox 4x32-10, whose one call (tl.randint4x) gives four
32-bit words, i.e. eight 16-bit draws: column `col` of row `row` takes half col % 2 of
word (col % 8) // 2 of the call with counter row * ceil(n_cols / 8) + col // 8, and
is kept when that 16-bit draw is >= keep_from = ceil(p * 2^16) (p resolved to 2^-16;
FlashAttention's dropout uses 8 bits). A dropout kernel holds its columns as a
[BLOCK / 8, 8] tile (row i: columns 8i..8i+7, one 16-byte fp16 vector), so a thread
draws once per eight elements instead of once per element. The backward kernel
regenerates the same mask from the seed; softmax_ce.py draws the same way, all through
_dropout_keep (a @tessera.kernel, so the benchmark's Triton build of these sources,
where it becomes @triton.jit, can call it too).
"""
from __future__ import annotations

import math

import tessera
import tessera.language as tl

from . import _host as H
from .reduce import column_sum_run, column_sum_steps

ADD_RELU, MUL_TANH, GELU, SWIGLU, GEGLU, RELU_OP = 0, 1, 2, 3, 4, 5
_NAMES = {ADD_RELU: "add_relu", MUL_TANH: "mul_tanh", GELU: "bias_gelu", SWIGLU: "swiglu", GEGLU: "geglu",
          RELU_OP: "relu"}

# bias_mode: how the second input b relates to a.
NO_B, SAME_SHAPE, BIAS = 0, 1, 2


@tessera.kernel
def _dropout_keep(seed, counter, keep_from):
    """The keep mask of a [G, 8] tile whose row i holds eight consecutive columns from a
    multiple of 8 and draws Philox call `counter[i]`: column j of a row takes 16-bit half
    j % 2 of word j // 2 and is kept when that half is >= keep_from (<= 65535). Shared
    by the forward and backward kernels here and in softmax_ce.py (inlined). The half is
    compared in the word's top 16 bits, against keep_from << 16: the high half (odd j)
    as the word itself (its low bits cannot lift it past a multiple of 2^16), the low
    half shifted up by 16, so a pair of columns costs one shift where extracting both
    halves cost two (a shift and a mask). The shift is (1 - (j & 1)) * 16: a `j % 2 ==
    0` select on the [1, 8] arange was lowered through shared memory behind a barrier on
    the GPU (48 instructions more per 16 elements), and `cols & 7` instead of the
    arange cost the CPU ~5%."""
    r0, r1, r2, r3 = tl.randint4x(seed, counter)
    j = tl.arange(0, 8)[None, :]
    w = tl.where(j < 2, r0[:, None], tl.where(j < 4, r1[:, None], tl.where(j < 6, r2[:, None], r3[:, None])))
    return (w << ((1 - (j & 1)) * 16)) >= (tl.cast(keep_from, tl.uint32) << 16)


@tessera.kernel
def _normal_tail(x):
    """Phi(-|x|) of f32 x (Phi the standard normal CDF): one polynomial q(a) = log2 Phi(-a)
    of a = min(|x|, 6) and one exp2 (an SFU instruction on a GPU). The erf form of GELU
    and its gradient take Phi from it: Phi(x) = 1 - Phi(-|x|) for x >= 0, Phi(-|x|)
    below, and erf(x / sqrt 2) = sign(x) (1 - 2 Phi(-|x|)). About 11 instructions where
    tl.erf takes ~20: it needs only the absolute accuracy 1 + erf has in f32, where tl.erf
    keeps a few ulp of erf near 0 (two polynomials and a select). Past |x| = 6, Phi(-6) =
    1e-9 is below what 1 - Phi resolves, and x Phi(x) below 6e-9 |x|.
    The fit: degree 7, near-minimax weighted by Phi(-a) (Lawson-iterated least squares on
    Chebyshev nodes in double, coefficients rounded to f32, Horner in f32 FMAs): within
    2^-23.6 of Phi(-a) (absolute) on [0, 6]; a GPU's ex2 adds 2 ulp (2^-23 at Phi = 1/2).
    (Degree 6: 2^-22.7, 8: 2^-24.3.)"""
    a = tl.minimum(tl.abs(x), 6.0)
    q = tl.fma(8.470112334180158e-06, a, -5.390323349274695e-05)
    q = tl.fma(q, a, -0.0004212376952636987)
    q = tl.fma(q, a, 0.00738927535712719)
    q = tl.fma(q, a, -0.05269111320376396)
    q = tl.fma(q, a, -0.4591531455516815)
    q = tl.fma(q, a, -1.1511108875274658)
    q = tl.fma(q, a, -0.9999998807907104)
    # q >= -31 here (the compiler's interval of the chain: [-35.8, -1]), so the GPU's ex2
    # takes its .ftz form without a clamp instruction (compiler/codegen/common/float_range.h).
    return tl.exp2(q)


@tessera.kernel
def _gelu(x):
    """GELU(x) = x Phi(x), erf form, of f32 (the matmul epilogue's, linear.py): x (1 -
    Phi(-x)) for x >= 0, x Phi(x) below, so the negative side keeps its relative accuracy.
    On an H100 the tl.erf form cost ~3 us per 128x256 tile beyond relu's epilogue, all
    while the tensor cores idle (bench/results/kernels_cuda_float16_pingpong.md)."""
    t = _normal_tail(x)
    return x * tl.where(x >= 0, 1.0 - t, t)


@tessera.kernel
def _gelu_erf_cdf_and_grad(x):
    """Phi(x) and gelu'(x) = Phi(x) + x phi(x) of the erf form: Phi from _normal_tail (f32;
    f64 through tl.erf), phi(x) one exp2 of an FMA with 1/sqrt(2 pi) folded into the
    exponent (clamped at -126, so the GPU's ex2 needs no denormal handling: phi < 2^-126
    only for |x| > 13.2, where x phi vanishes next to Phi anyway), and Phi + x phi one FMA.
    On an H200 the backward of bias_gelu is bound by instruction issue: its loop took 44.6
    sm_90a SASS instructions an element with 0.5 (1 + tl.erf) and exp(-x^2 / 2) / sqrt(2 pi),
    39.8 with the FMA forms (0.775 -> 0.86 of a copy,
    bench/results/kernels_cuda_float16_h200_final_subset.md), 30.9 with _normal_tail."""
    # (Literals, not module constants: the benchmark's Triton build of these sources takes
    # only constexpr globals.) -log2(e) / 2 and log2(1 / sqrt(2 pi)):
    if x.dtype == tl.float64:
        cdf = tl.fma(tl.erf(x * 0.7071067811865476), 0.5, 0.5)
    else:
        t = _normal_tail(x)
        cdf = tl.where(x >= 0, 1.0 - t, t)
    pdf = tl.exp2(tl.maximum(tl.fma(x * x, -0.7213475204444817, -1.3257480647361593), -126.0))
    return cdf, tl.fma(x, pdf, cdf)


@tessera.kernel
def _ew_fwd_kernel(A, B, Y, stride_a, stride_b, n_cols, p, seed, keep_from,
                   OP: tl.constexpr, TANH: tl.constexpr, HAS_B: tl.constexpr, DROPOUT: tl.constexpr,
                   ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1) * BLOCK
    if DROPOUT:  # [BLOCK / 8, 8]: one Philox call per row of the tile
        g = tl.arange(0, BLOCK // 8)
        cols = first + 8 * g[:, None] + tl.arange(0, 8)[None, :]
    else:
        cols = first + tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A + row * stride_a + cols, mask=mask, other=0.0).to(ACC)
    if HAS_B:
        b = tl.load(B + row * stride_b + cols, mask=mask, other=0.0).to(ACC)
    if OP == 0:
        y = tl.maximum(a + b, 0.0)
    if OP == 1:
        y = tl.tanh(a * b)
    if OP == 2 or OP == 4:
        x = a
        if OP == 2 and HAS_B:
            x = a + b
        if TANH:
            # 0.5 x (1 + tanh u) = x / (1 + e^(-2u)): one exp and one division, where
            # tanh costs about twice that (no cancellation: the denominator is >= 1).
            y = x / (1.0 + tl.exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)))
        else:
            hx = 0.5 * x  # 0.5 x (1 + erf) as one FMA: hx * erf + hx
            if DROPOUT and OP == 2:  # dropout's factor folded into hx: a multiply fewer
                hx = x * tl.where(_dropout_keep(seed, row * ((n_cols + 7) // 8) + first // 8 + g, keep_from),
                                  0.5 / (1.0 - p), 0.0)
            if ACC == tl.float64:
                y = tl.fma(hx, tl.erf(x * 0.7071067811865476), hx)
            else:  # hx erf + hx = |hx| erf(|x| / sqrt 2) + hx, erf(|x| / sqrt 2) = 1 - 2 Phi(-|x|)
                y = tl.fma(tl.abs(hx), tl.fma(_normal_tail(x), -2.0, 1.0), hx)
        if OP == 4:
            y = y * b
    if OP == 3:
        y = a * tl.sigmoid(a) * b
    if OP == 5:
        y = tl.maximum(a, 0.0)
    if DROPOUT and not (OP == 2 and not TANH):
        keep = _dropout_keep(seed, row * ((n_cols + 7) // 8) + first // 8 + g, keep_from)
        # y times a selected factor, not a selected y: LLVM moves a select of y past the
        # fp16 rounding (a 16-bit select between the roundings), so the GPU could not
        # round two values in one instruction (1.2 instructions per element more).
        # Dropped infinities become NaN, as in torch's dropout (which multiplies too).
        y = y * tl.where(keep, 1.0 / (1.0 - p), 0.0)
    tl.store(Y + row * n_cols + cols, y, mask=mask)


@tessera.kernel
def _ew_bwd_kernel(A, B, DY, DA, DB, stride_a, stride_b, stride_dy, n_cols, p, seed, keep_from,
                   OP: tl.constexpr, TANH: tl.constexpr, HAS_B: tl.constexpr, WRITE_DB: tl.constexpr,
                   DROPOUT: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1) * BLOCK
    if DROPOUT:  # [BLOCK / 8, 8]: one Philox call per row of the tile
        g = tl.arange(0, BLOCK // 8)
        cols = first + 8 * g[:, None] + tl.arange(0, 8)[None, :]
    else:
        cols = first + tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A + row * stride_a + cols, mask=mask, other=0.0).to(ACC)
    if HAS_B:
        b = tl.load(B + row * stride_b + cols, mask=mask, other=0.0).to(ACC)
    dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0).to(ACC)
    if DROPOUT:
        keep = _dropout_keep(seed, row * ((n_cols + 7) // 8) + first // 8 + g, keep_from)
        dy = tl.where(keep, dy * (1.0 / (1.0 - p)), 0.0)
    out = DA + row * n_cols + cols
    if OP == 0:
        g = tl.where(a + b > 0, dy, 0.0)
        tl.store(out, g, mask=mask)
        tl.store(DB + row * n_cols + cols, g, mask=mask)
    if OP == 1:
        t = tl.tanh(a * b)
        g = dy * (1.0 - t * t)
        tl.store(out, g * b, mask=mask)
        tl.store(DB + row * n_cols + cols, g * a, mask=mask)
    if OP == 2 or OP == 4:
        x = a
        if OP == 2 and HAS_B:
            x = a + b
        if TANH:
            t = tl.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
            gelu = 0.5 * x * (1.0 + t)
            dgelu = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
        else:
            cdf, dgelu = _gelu_erf_cdf_and_grad(x)
            gelu = x * cdf
        if OP == 2:
            tl.store(out, dy * dgelu, mask=mask)
        else:
            tl.store(out, dy * b * dgelu, mask=mask)
            tl.store(DB + row * n_cols + cols, dy * gelu, mask=mask)
    if OP == 3:
        sg = tl.sigmoid(a)
        tl.store(out, dy * b * sg * (1.0 + a * (1.0 - sg)), mask=mask)
        tl.store(DB + row * n_cols + cols, dy * a * sg, mask=mask)
    if OP == 5:
        tl.store(out, tl.where(a > 0, dy, 0.0), mask=mask)


@tessera.kernel
def _bias_act_row_loads(A, DY, row, stride_a, stride_dy, cols, mask):
    """One row's a and dy of a column block, as stored (a masked-off row reads nothing)."""
    return (tl.load(A + row * stride_a + cols, mask=mask, other=0.0),
            tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0))


@tessera.kernel
def _bias_act_row_grad(DA, row, n_cols, cols, g, first, mask, a_raw, dy_raw, b, p, seed, keep_from,
                       TANH: tl.constexpr, DROPOUT: tl.constexpr, ACC: tl.constexpr, TANH_VIA_EXP: tl.constexpr):
    """One row of _bias_act_bwd_kernel's column block: stores da = dy * gelu'(a + b)
    (after dropout's mask) and returns it, zero past the row's end, for the bias sums."""
    x = a_raw.to(ACC) + b
    dy = dy_raw.to(ACC)
    if DROPOUT:
        keep = _dropout_keep(seed, row * ((n_cols + 7) // 8) + first // 8 + g, keep_from)
        dy = tl.where(keep, dy * (1.0 / (1.0 - p)), 0.0)
    if TANH and TANH_VIA_EXP:
        # With s = (1 + tanh(u)) / 2 = 1 / (1 + e^-2u): 1 - tanh(u)^2 = 4 s (1 - s), so
        # dgelu = s + 2 x s (1 - s) u'. One exp2 and one division (x -> -inf: e^-2u = inf,
        # s = 0), the constants folded: e^-2u = 2^(x (C1 x^2 + C0)) and 2 u' = C2 + C3 x^2
        # (C0 = -2 k log2 e, C1 = 0.044715 C0, C2 = 2 k, C3 = 3 * 0.044715 C2, k = sqrt(2 /
        # pi)); the exponent is clamped at -126 (s = 1 there), so the GPU's ex2 needs no
        # denormal handling.
        x2 = x * x
        s = 1.0 / (1.0 + tl.exp2(tl.maximum(x * tl.fma(x2, -0.1029432395800235, -2.302208198144325), -126.0)))
        dgelu = tl.fma(tl.fma(-s, s, s), x * tl.fma(x2, 0.21406444881780076, 1.5957691216057308), s)
    elif TANH:
        t = tl.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
        dgelu = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    else:
        dgelu = _gelu_erf_cdf_and_grad(x)[1]
    da = tl.where(mask, dy * dgelu, 0.0)
    tl.store(DA + row * n_cols + cols, da, mask=mask)
    return da


@tessera.kernel
def _bias_act_bwd_kernel(A, B, DY, DA, DBP, stride_a, stride_dy, n_rows, n_cols, p, seed, keep_from,
                         TANH: tl.constexpr, DROPOUT: tl.constexpr, PREFETCH: tl.constexpr, ACC: tl.constexpr,
                         ROWS: tl.constexpr, BLOCK: tl.constexpr, TANH_VIA_EXP: tl.constexpr = False,
                         TWO_ROWS: tl.constexpr = False, STAGES: tl.constexpr = 1):
    # gelu(a + bias) (optionally then dropout) backward with the bias gradient fused:
    # program (i, j) writes da for rows [i * ROWS, (i + 1) * ROWS) of column block j and
    # the sum of those rows of da as row i of DBP (fp32 partials, one column sum away
    # from dbias). The unfused plan wrote da and read it back for the column sum: 4
    # passes over a (rows, cols) array where this makes 3, plus fp32 partials with
    # 1/ROWS as many elements.
    #
    # PREFETCH (the GPU plan) issues row i + 1's loads before row i's arithmetic and
    # store: without it a program's loads wait for its previous row's store (da may
    # alias a as far as the compiler knows), so each row costs a full memory latency.
    # TWO_ROWS (with PREFETCH; ROWS even) steps over rows i, i + 1 and issues the loads of
    # i + 2 and i + 3 first: two rows' loads in flight where PREFETCH alone has one
    # during the arithmetic, in separate registers (no copies waiting on a load).
    # STAGES > 1 (neither of those): the compiler's stream ring keeps the next STAGES - 1
    # rows' loads in flight through shared memory.
    tl.extra.cuda.gdc_launch_dependents()  # the column sum may start (reduce.py's gdc_wait)
    first = tl.program_id(1) * BLOCK
    if DROPOUT:
        g = tl.arange(0, BLOCK // 8)
        cols = first + 8 * g[:, None] + tl.arange(0, 8)[None, :]
    else:
        g = 0
        cols = first + tl.arange(0, BLOCK)
    cmask = cols < n_cols
    b = tl.load(B + cols, mask=cmask, other=0.0).to(ACC)
    acc = tl.zeros(cols.shape, ACC)
    r0 = tl.program_id(0) * ROWS
    if TWO_ROWS:
        a_next, dy_next = _bias_act_row_loads(A, DY, r0.to(tl.int64), stride_a, stride_dy, cols,
                                              cmask & (r0 < n_rows))
        a_next2, dy_next2 = _bias_act_row_loads(A, DY, r0.to(tl.int64) + 1, stride_a, stride_dy, cols,
                                                cmask & (r0 + 1 < n_rows))
        for i in range(0, ROWS, 2):
            r = r0 + i
            row = r.to(tl.int64)
            a_raw, dy_raw, a_raw2, dy_raw2 = a_next, dy_next, a_next2, dy_next2
            a_next, dy_next = _bias_act_row_loads(A, DY, row + 2, stride_a, stride_dy, cols,
                                                  cmask & (r + 2 < n_rows) & (i + 2 < ROWS))
            a_next2, dy_next2 = _bias_act_row_loads(A, DY, row + 3, stride_a, stride_dy, cols,
                                                    cmask & (r + 3 < n_rows) & (i + 3 < ROWS))
            acc += _bias_act_row_grad(DA, row, n_cols, cols, g, first, cmask & (r < n_rows), a_raw, dy_raw, b,
                                      p, seed, keep_from, TANH, DROPOUT, ACC, TANH_VIA_EXP)
            acc += _bias_act_row_grad(DA, row + 1, n_cols, cols, g, first, cmask & (r + 1 < n_rows), a_raw2,
                                      dy_raw2, b, p, seed, keep_from, TANH, DROPOUT, ACC, TANH_VIA_EXP)
    else:
        if PREFETCH:
            a_next, dy_next = _bias_act_row_loads(A, DY, r0.to(tl.int64), stride_a, stride_dy, cols,
                                                  cmask & (r0 < n_rows))
        for i in tl.range(0, ROWS, num_stages=STAGES):
            r = r0 + i
            row = r.to(tl.int64)
            mask = cmask & (r < n_rows)
            if PREFETCH:
                a_raw, dy_raw = a_next, dy_next
                a_next, dy_next = _bias_act_row_loads(A, DY, row + 1, stride_a, stride_dy, cols,
                                                      cmask & (r + 1 < n_rows) & (i + 1 < ROWS))
            else:
                a_raw, dy_raw = _bias_act_row_loads(A, DY, row, stride_a, stride_dy, cols, mask)
            acc += _bias_act_row_grad(DA, row, n_cols, cols, g, first, mask, a_raw, dy_raw, b, p, seed, keep_from,
                                      TANH, DROPOUT, ACC, TANH_VIA_EXP)
    tl.store(DBP + tl.program_id(0).to(tl.int64) * n_cols + cols, acc, mask=cmask)


def _keep_from(p):
    """Dropout's threshold on a 16-bit draw: P(draw >= it) = 1 - p, p resolved to 2^-16
    (softmax_ce.py uses it too)."""
    return min(math.ceil(p * 65536.0), 65535)


def _views(op, a, b, bias_mode):
    """(a rows view, b view or a, stride_b, rows, n_cols)."""
    name = _NAMES[op]
    H.check_float(name, a)
    if b is not None:
        H.check_same(name, a, b, "bias" if bias_mode == BIAS else "b")
    if bias_mode == SAME_SHAPE:
        if tuple(b.shape) != tuple(a.shape):
            raise ValueError(f"tessera.kernels.{name}: inputs have shapes {tuple(a.shape)} and {tuple(b.shape)}; "
                             f"they must match")
        if _is_contiguous(a) and _is_contiguous(b):  # one long row: no per-row programs
            n = max(H.numel(a), 1)
            av, bv = a.reshape(1, n), b.reshape(1, n)
            return av, bv, n, 1, n
        n = a.shape[-1] if a.ndim else 1
        av = H.rows_view(a if a.ndim else a.reshape(1), n)
        bv = H.rows_view(b if b.ndim else b.reshape(1), n)
        return av, bv, H.row_stride(bv), av.shape[0], n
    n = a.shape[-1] if a.ndim else 1
    av = H.rows_view(a if a.ndim else a.reshape(1), n)
    if bias_mode == BIAS:
        if tuple(b.shape) != (n,):
            raise ValueError(f"tessera.kernels.{name}: bias has shape {tuple(b.shape)}, expected ({n},)")
        return av, H.contiguous(b), 0, av.shape[0], n
    return av, av, 0, av.shape[0], n


def _is_contiguous(x):
    if H.is_torch(x):
        return x.is_contiguous()
    return bool(x.flags.c_contiguous)


def _grid(rows, n, cap=2048):
    block = max(min(H.block_for(n, 1 << 30), cap), 8)  # >= 8: dropout's groups of 8 columns
    return (rows, tessera.cdiv(n, block)), block


# The forward with dropout is bound by instruction issue on a GPU (Philox and erf, ~44
# instructions per element), where a wider block spreads each thread's fixed work over
# more elements: gelu_dropout 16384x4096 fp16 on an H100 ran 0.0989 ms with 4096-column
# blocks, 0.1049 with 2048 (bench/results/memory_bound_configs_h100.md). The CPU keeps 2048.
DROPOUT_FWD_BLOCK = 4096
# The backward's: 0.994 of copy with 2048, 1.013 with 4096 (H100, bench/bwd_profile.py --sweep).
DROPOUT_BWD_BLOCK = 4096
# The forward without dropout on a GPU: 4096-column blocks of 4 warps (32 elements a
# thread). bias_gelu (erf) 16384x4096 fp16, of a copy, 2048 -> 4096 columns: H100 0.971 ->
# 0.989, H200 0.864 -> 0.929 (there the erf's ~28 instructions an element near the issue
# rate: the wider block spreads a thread's fixed work over more elements); tanh form 0.976
# -> 0.993 and 0.972 -> 0.997; swiglu/geglu level (1.00-1.03) on both
# (bench/results/memory_bound_configs_ew_h100.md, memory_bound_configs_h200.md).
EW_FWD_GPU_BLOCK = 4096


# The bias-gradient backward (_bias_act_bwd_kernel): rows per program (each program
# writes one fp32 partial row, so the partials are 1/ROWS of da's size in fp32), the
# column block, and the GPU's warps (a warp per 256 columns). bias_gelu 16384x4096 fp16
# on an H100, fraction of a copy of 3 arrays (bench/results/bwd_sweep_h100_tkbwd_run1.log):
# the unfused plan 0.738; rows 16/32/64: 0.778/0.785/0.818 (64 also leaves 256 partial
# rows, one column-sum launch instead of two); 2048 columns, 8 warps 0.770, 4 warps 0.530.
# BIAS_BWD_PREFETCH (row i + 1's loads issued before row i's arithmetic, GPU only):
# 0.799 -> 0.894 of copy (rows 32: 0.853, 128: 0.779; 2048 columns with 8 warps 0.895,
# 512 with 2 warps 0.897; bench/results/bwd_sweep_normbwd_run1.log).
# GPU: 512-column blocks of 2 warps (bench/results/bwd_sweep_normbwd2_run1.log, same run:
# 1024 / 4 warps 0.895, 512 / 2 0.906; rows 32: 0.875, 128: 0.777; the run3 log has them
# the other way round, 0.894 / 0.883: level within noise; rows 48/96 and 256 columns of one
# warp 0.74-0.78); the CPU keeps 1024 (and 64 rows).
# GPU: 128 rows a program, two rows a step (TWO_ROWS below): bias_gelu 0.1546 -> 0.1502 ms
# (0.893 -> 0.920 of copy, kernel + column sum, CUDA events); bias_gelu_tanh 0.1548 ->
# 0.1562 ms (0.892 -> 0.885); torch.profiler's kernel time of the backward with it: 148 and
# 146 us, 0.919 and 0.928 of copy (bench/results/kernels_cuda_float16_biasbwd.md, one run).
# Two rows a step take 80 / 71 registers (erf / tanh form), so 12 / 14 programs of 2 warps
# fit an SM: 1024 programs of 128 rows are one wave, 2048 of 64 rows would not be (and
# capped at 64 registers the walk spills 92 bytes: 0.568); 96 rows: 0.882 / 0.859.
BIAS_BWD_ROWS = 128
BIAS_BWD_CPU_ROWS = 64
BIAS_BWD_BLOCK = 512
BIAS_BWD_CPU_BLOCK = 1024
BIAS_BWD_WARPS = 2  # of a BIAS_BWD_BLOCK-column block; narrower blocks get proportionally fewer
BIAS_BWD_PREFETCH = True
# GPU: the tanh form's derivative through one exp and one division (TANH_VIA_EXP)
# instead of tl.tanh (an accurate polynomial and exp, ~25 instructions): bias_gelu_tanh
# 0.884 -> 0.902 of copy at 512 columns (0.880 -> 0.898 at 1024), same run as above;
# run3: 0.875 -> 0.892 (1024: 0.876 -> 0.892).
BIAS_BWD_TANH_VIA_EXP = True
# GPU: two rows a step (TWO_ROWS, with PREFETCH and an even row count), and programs
# resident per SM under a register cap (None: as ptxas chooses; n: maxnreg from
# H.max_registers(n, warps); the sweep's capped plans were slower, 0.568-0.83).
BIAS_BWD_TWO_ROWS = True
BIAS_BWD_PER_SM = None
# The stream ring (STAGES > 1, without PREFETCH / TWO_ROWS) on an H200: bias_gelu 0.775 of
# copy with two rows a step, 0.705-0.745 with rings of 3-4 stages (512-2048 columns);
# tanh form 0.876 against 0.800-0.850 (bench/results/bwd_sweep_stream_ring_h200_run1.log),
# when they were bound by their arithmetic (~39 instructions an element). With
# _normal_tail (~31) and the tanh form's folded constants (~28), session 11, H200: two rows
# a step 0.832 / 0.923, a 3-stage ring over 512 columns 0.930 / 0.931 (2 stages 0.865 /
# 0.861, 4 stages 0.856 / 0.851; 1024 and 2048 columns at 3 stages 0.928-0.935;
# bench/results/bwd_sweep_bias_ring_h200_s11.log). On an H100 in the same session: two
# rows a step 0.927 / 0.911, a 2-stage ring 0.942 / 0.942 (3 stages 0.876 / 0.879;
# bwd_sweep_bias_ring_h100_s11.log). So a ring on both: 3 stages on fast memory
# (_host.fast_memory), 2 elsewhere.
BIAS_BWD_STAGES = 2
BIAS_BWD_STAGES_FAST_MEMORY = 3


def _bias_bwd_rows(a) -> int:
    """Rows per program of the bias-gradient backward (each writes one partial row)."""
    return BIAS_BWD_ROWS if H.on_gpu(a) else BIAS_BWD_CPU_ROWS


def _bias_bwd_prefetch(a) -> bool:
    """The bias-gradient backward loads row i + 1 during row i on a GPU
    (BIAS_BWD_PREFETCH); the CPU's loop does not. Tests patch it."""
    return BIAS_BWD_PREFETCH and H.on_gpu(a)


def _bias_bwd_two_rows(a) -> bool:
    """Two rows a step in the bias-gradient backward (BIAS_BWD_TWO_ROWS, GPU; with
    PREFETCH and an even row count). Tests patch it to run the CPU through it."""
    return BIAS_BWD_TWO_ROWS and H.on_gpu(a)


class _EwPlan:
    """One direction's launch for a layout of (a, b[, dy]) and options (see H.Plans).
    fast: every input is contiguous, so the kernel takes the arrays as they are (the
    views _views builds would only reshape them)."""
    __slots__ = ("fast", "rows", "n", "sa", "sb", "sdy", "grid", "kw", "shape", "p", "keep_from", "bias_groups",
                 "sum_steps", "bias_dtype", "new_out", "new_db", "new_parts", "sums_direct")


def _ew_plan(op, a, b, p, bias_mode, tanh, dy=None):
    av, bv, stride_b, rows, n = _views(op, a, b, bias_mode)
    plan = _EwPlan()
    plan.fast = _is_contiguous(a) and (b is None or _is_contiguous(b)) and (dy is None or _is_contiguous(dy))
    plan.rows, plan.n, plan.sa, plan.sb, plan.shape = rows, n, H.row_stride(av), stride_b, tuple(a.shape)
    plan.p, plan.keep_from = H.scalar(a, p), _keep_from(p)
    plan.sdy = H.row_stride(_dy_rows(dy, rows, n)) if dy is not None else 0
    plan.grid = plan.kw = None
    plan.new_out = H.allocator(a, plan.shape)  # the output, and da
    plan.new_db = H.allocator(a, tuple(b.shape)) if bias_mode == SAME_SHAPE else None
    plan.sums_direct = False
    if rows and H.numel(a):
        if H.on_gpu(a):
            cap = (DROPOUT_FWD_BLOCK if dy is None else DROPOUT_BWD_BLOCK) if p > 0 else \
                EW_FWD_GPU_BLOCK if dy is None else 2048
        else:
            cap = 2048
        plan.grid, block = _grid(rows, n, cap)
        plan.kw = dict(OP=op, TANH=tanh, HAS_B=bias_mode != NO_B, DROPOUT=p > 0, ACC=H.acc_dtype(a), BLOCK=block)
        if dy is not None and bias_mode == BIAS:
            # Row groups of BIAS_BWD_ROWS, column blocks of BIAS_BWD_BLOCK (8 elements a
            # thread with the GPU's warps).
            block = min(max(H.block_for(n, 1 << 30), 8), BIAS_BWD_BLOCK if H.on_gpu(a) else BIAS_BWD_CPU_BLOCK)
            group_rows = _bias_bwd_rows(a)
            plan.bias_groups = tessera.cdiv(rows, group_rows)
            plan.sum_steps = column_sum_steps(a, plan.bias_groups, n)  # a: the partials' device and precision
            plan.bias_dtype = H.dtype_name(b)
            # One row group's partial row is the bias gradient when it needs no cast.
            plan.sums_direct = plan.bias_groups == 1 and plan.bias_dtype in ("float32", "float64")
            plan.new_parts = H.allocator(a, (n,) if plan.sums_direct else (plan.bias_groups, n), "acc")
            plan.grid = (plan.bias_groups, tessera.cdiv(n, block))
            stages = (BIAS_BWD_STAGES_FAST_MEMORY if H.fast_memory(a) else BIAS_BWD_STAGES) if H.on_gpu(a) else 1
            plan.kw = dict(TANH=tanh, DROPOUT=p > 0, PREFETCH=_bias_bwd_prefetch(a) and stages == 1,
                           ACC=H.acc_dtype(a), ROWS=group_rows, BLOCK=block,
                           TANH_VIA_EXP=tanh and BIAS_BWD_TANH_VIA_EXP and H.on_gpu(a),
                           TWO_ROWS=_bias_bwd_two_rows(a) and group_rows % 2 == 0 and _bias_bwd_prefetch(a)
                           and stages == 1, STAGES=stages)
            if H.on_gpu(a):
                plan.kw["num_warps"] = max(1, BIAS_BWD_WARPS * block // BIAS_BWD_BLOCK)
                maxnreg = H.max_registers(BIAS_BWD_PER_SM, plan.kw["num_warps"]) if BIAS_BWD_PER_SM else None
                if maxnreg is not None:
                    plan.kw["maxnreg"] = maxnreg
        elif dy is not None:
            plan.kw["WRITE_DB"] = bias_mode == SAME_SHAPE
    return plan


def _dy_rows(dy, rows, n):
    return H.rows_view(dy.reshape(-1) if rows == 1 else dy, n) if dy.ndim else dy.reshape(1, 1)


_FWD_PLANS = H.Plans()
_BWD_PLANS = H.Plans()


def elementwise_forward(op, a, b, p, seed, bias_mode, tanh=False):
    key = (op, H.layout(a), H.layout(b), p, bias_mode, tanh)
    plan = _FWD_PLANS.get(key)
    if plan is None:
        plan = _FWD_PLANS.remember(key, _ew_plan(op, a, b, p, bias_mode, tanh))
    if plan.fast:  # a contiguous output of a's shape is the (rows, n) one the kernel writes
        av, bv = a, (a if b is None else b)
    else:
        av, bv = _views(op, a, b, bias_mode)[:2]
    y = plan.new_out()
    if plan.kw is not None:
        _ew_fwd_kernel[plan.grid](av, bv, y, plan.sa, plan.sb, plan.n, plan.p, int(seed), plan.keep_from, **plan.kw)
    return y


def elementwise_backward(op, a, b, dy, p, seed, bias_mode, tanh=False):
    """(da, db): db is the bias gradient (a column sum) in BIAS mode, None without b."""
    key = (op, H.layout(a), H.layout(b), H.layout(dy), p, bias_mode, tanh)
    plan = _BWD_PLANS.get(key)
    if plan is None:
        plan = _BWD_PLANS.remember(key, _ew_plan(op, a, b, p, bias_mode, tanh, dy))
    if plan.fast:
        av, bv, dyv = a, (a if b is None else b), dy
    else:
        av, bv = _views(op, a, b, bias_mode)[:2]
        dyv = _dy_rows(dy, plan.rows, plan.n)
    if bias_mode == BIAS:  # gelu(a + bias): da and the bias gradient's partials in one kernel
        da = plan.new_out()
        if plan.kw is None:
            return da, H.zeros(b, tuple(b.shape))
        parts = plan.new_parts()
        _bias_act_bwd_kernel[plan.grid](av, bv, dyv, da, parts, plan.sa, plan.sdy, plan.rows, plan.n, plan.p,
                                        int(seed), plan.keep_from, **plan.kw)
        return da, (parts if plan.sums_direct else column_sum_run(plan.sum_steps, parts, plan.bias_dtype))
    da = plan.new_out()
    db = plan.new_db() if bias_mode == SAME_SHAPE else da
    if plan.kw is not None:
        _ew_bwd_kernel[plan.grid](av, bv, dyv, da, db, plan.sa, plan.sb, plan.sdy, plan.n, plan.p, int(seed),
                                  plan.keep_from, **plan.kw)
    return da, (db if bias_mode == SAME_SHAPE else None)


def _run(op, a, b, p=0.0, seed=0, bias_mode=SAME_SHAPE, tanh=False):
    AG = H.autograd()
    if AG.wants_grad(a, b):
        return AG.Elementwise.apply(a, b, (op, tanh, p, seed, bias_mode))
    return elementwise_forward(op, a, b, p, seed, bias_mode, tanh)


def _approx(name, approximate):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"tessera.kernels.{name}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return approximate == "tanh"


def add_relu(a, b):
    """relu(a + b) for two same-shape inputs."""
    return _run(ADD_RELU, a, b)


def mul_tanh(a, b):
    """tanh(a * b) for two same-shape inputs."""
    return _run(MUL_TANH, a, b)


def bias_gelu(x, bias, approximate="none"):
    """gelu(x + bias), bias over the last dimension; approximate='tanh' for the tanh form."""
    return _run(GELU, x, bias, bias_mode=BIAS, tanh=_approx("bias_gelu", approximate))


def gelu_dropout(x, p=0.1, seed=0, bias=None, approximate="none"):
    """dropout(gelu(x [+ bias]), p): the mask comes from `seed` (same seed, same mask;
    the backward pass uses the forward's mask)."""
    p = H.scalar_float("gelu_dropout", "p", p, 0.0, 1.0, hi_open=True)
    return _run(GELU, x, bias, p, int(seed), BIAS if bias is not None else NO_B, _approx("gelu_dropout", approximate))


def swiglu(gate, up):
    """silu(gate) * up (the SwiGLU feed-forward gate) for two same-shape inputs."""
    return _run(SWIGLU, gate, up)


def geglu(gate, up, approximate="none"):
    """gelu(gate) * up (the GEGLU feed-forward gate) for two same-shape inputs."""
    return _run(GEGLU, gate, up, tanh=_approx("geglu", approximate))
