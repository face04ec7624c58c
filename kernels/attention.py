"""attention_score: batched q @ k^T * scale over the last two dimensions, forward and
backward. The forward is linear.py's strided matmul with B = k^T (a swap of k's two
strides) and the scale in its epilogue, its scores stored evict-first, or on sm_90 GPUs
_score_forward_flat_kernel (TMA loads, persistent, evict-first); the backward
computes dq = ds k * scale and dk = ds^T q * scale in one launch, reading ds from
memory about once: _score_backward_flat_kernel on sm_90 GPUs (TMA rings, a producer
warpgroup per branch), _score_backward_kernel elsewhere."""
from __future__ import annotations

import tessera
import tessera.language as tl

from . import _host as H
from .linear import (_NOT_FAST, ACT_NONE, _epilogue, _gpu_launch, _gpu_tiles, _has_tma, _operand_tiles, _sm_count,
                     matmul)


@tessera.kernel
def _score_product_tile(a_base, b_base, C, rm, rn, batch, M, N, K, s_am, s_ak, s_bk, s_bn, s_cb, scale, first_block,
                        A_MMAJOR: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, ROTATE: tl.constexpr):
    """One [BLOCK_M, BLOCK_N] tile of C[batch] = A[batch] @ B[batch] * scale (B N-major),
    for _score_backward_kernel (inlined into each of its two branches). ROTATE: the K
    steps start at K block `first_block` and wrap around (the sum is the same, in
    another order)."""
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    k_span = tl.cdiv(K, BLOCK_K) * BLOCK_K
    for k in range(0, K, BLOCK_K):
        if ROTATE:
            kr = k + first_block * BLOCK_K
            kr = tl.multiple_of(tl.where(kr >= k_span, kr - k_span, kr), BLOCK_K)
        else:
            kr = k
        a, b = _operand_tiles(a_base, b_base, rm, rn, kr + rk, M, N, K, s_am, s_ak, s_bk, s_bn, A_MMAJOR, False)
        acc = tl.dot(a, b, acc)
    _epilogue(acc, rm, rn, batch, M, N, s_cb, a_base, C, C, scale, 0, False, False, True, ACC)


@tessera.kernel
def _score_backward_kernel(DS, Q, KEY, DQ, DK, M, N, D, s_db, s_dm, s_qb, s_qm, s_kb, s_kn, scale,
                           ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_K: tl.constexpr,
                           ROTATE: tl.constexpr = True):
    """attention_score's backward in one launch: dq = ds @ k * scale and dk = ds^T @ q *
    scale, q (batch, M, D), k (batch, N, D), ds (batch, M, N), rows contiguous; grid
    (cdiv(M, BLOCK_M) + cdiv(N, BLOCK_M), 1, batch). A batch's programs are its dq
    row blocks, then its dk row blocks; CTAs start in grid order, x fastest, so the
    programs in flight are those of a few consecutive batches: the dq programs read
    the batch's ds along its rows, the dk programs along its columns, at about the same
    time. ROTATE (the default): dq program i starts its K steps (ds's column blocks) at
    block -i, dk program j its K steps (ds's row blocks) at block -j, both wrapping
    around, so that at step t every program of a batch reads a tile of the same
    anti-diagonal (row block + column block = t mod the blocks): dq program i reads ds
    tile (i, t - i) at the step dk program t - i reads it, and the second read hits the
    L2 -- ds leaves memory once. (Counted in BLOCK_K blocks: a program of BLOCK_M = R x
    BLOCK_K rows starts at -R x its index, and the two reads of a tile come within R
    steps of each other. Example, 8 x 2048 x 2048 at 128 x 64: 16 + 16 programs a batch,
    32 K steps each; dq program 3 starts at column block 26, dk program 3 at row block
    26; tile (6, 26) is read by dq program 3 at step 0 and by dk program 13 at step
    6 + 26 - 32 = 0.) In plain order the two reads of tile (i, j) came up to
    a whole batch apart, and with 8 heads of 2048 x 2048 (8 MB of ds each, a few batches
    in flight against 50 MB of L2) many second reads went to memory too. Two launches
    read all of ds twice from memory (64 MB each for 8 heads: 2x the bytes).
    dk's A operand is ds^T, M-major (wgmma's transposed A)."""
    batch = tl.program_id(2).to(tl.int64)
    t = tl.program_id(0)
    q_blocks = tl.cdiv(M, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    if t < q_blocks:
        # dq[b, m, :] = sum_n ds[b, m, n] k[b, n, :]: A = ds (K-major), B = k (N-major).
        rm = t * BLOCK_M + tl.arange(0, BLOCK_M)
        n_blocks = tl.cdiv(N, BLOCK_K)
        first = (n_blocks - (t * BLOCK_M // BLOCK_K) % n_blocks) % n_blocks
        _score_product_tile(DS + batch * s_db, KEY + batch * s_kb, DQ, rm, rd, batch, M, D, N, s_dm, 1, s_kn, 1,
                            M * D, scale, first, False, ACC, BLOCK_M, BLOCK_D, BLOCK_K, ROTATE)
    else:
        # dk[b, n, :] = sum_m ds[b, m, n] q[b, m, :]: A = ds^T (M-major), B = q (N-major).
        j = t - q_blocks
        rn = j * BLOCK_M + tl.arange(0, BLOCK_M)
        m_blocks = tl.cdiv(M, BLOCK_K)
        first = (m_blocks - (j * BLOCK_M // BLOCK_K) % m_blocks) % m_blocks
        _score_product_tile(DS + batch * s_db, Q + batch * s_qb, DK, rn, rd, batch, N, D, M, 1, s_dm, s_qm, 1,
                            N * D, scale, first, True, ACC, BLOCK_M, BLOCK_D, BLOCK_K, ROTATE)


@tessera.kernel
def _score_flat_tile(A, B, C, a0, b0, o0, rd, batch, M, N, K, a_rows, b_rows, s_a, s_b, s_cb, scale, first_block,
                     A_MMAJOR: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, WS: tl.constexpr, SWAP: tl.constexpr = False,
                     L2_PREFETCH: tl.constexpr = 0):
    """_score_product_tile with A and B read as 2-D arrays of every batch's rows (a_rows
    and b_rows of them, row strides s_a and s_b) from their bare parameters, each tile
    at a scalar row and column plus an arange, masked by those bounds: the form
    compiler/codegen/nvptx/tma_nvptx.cpp fills a ring from with TMA copies on sm_90a,
    so that WS (tl.range's warp_specialize) can give the copies to a producer warpgroup.
    Output rows o0 .. o0 + BLOCK_M of C[batch] (M rows, N columns), K the reduced length
    (a multiple of BLOCK_K: no K step reaches into the next batch); the K steps rotated
    as in _score_product_tile.
    Not A_MMAJOR (dq = ds @ k): A's rows a0 + i (a0 = batch * M + o0), columns k + j;
    A_MMAJOR (dk = ds^T @ q): A^T, A's rows a0 + k + j (a0 = batch * K), columns o0 + i;
    B's rows b0 + k + j (b0 = batch * K), columns rd.
    SWAP: the product computed transposed, C^T = B^T A^T (BLOCK_N = the head dim as the
    MMA's M: one warpgroup's wgmma.m64nBLOCK_M, so 4 warps), the tile transposed back in
    the epilogue. L2_PREFETCH: tl.range's l2_prefetch (the ring's boxes asked of the L2
    that many K steps before the ring copies them; 0: not)."""
    rk = tl.arange(0, BLOCK_K)
    ri = tl.arange(0, BLOCK_M)
    if SWAP:
        acc = tl.zeros([BLOCK_N, BLOCK_M], ACC)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WS, l2_prefetch=L2_PREFETCH):
        kr = k + first_block * BLOCK_K
        kr = tl.multiple_of(tl.where(kr >= K, kr - K, kr), BLOCK_K)
        if A_MMAJOR:
            ar = (a0 + kr) + rk
            ac = o0 + ri
            at = tl.load(A + ar[:, None] * s_a + ac[None, :], mask=(ar[:, None] < a_rows) & (ac[None, :] < M),
                         other=0.0)
            a = tl.trans(at)
        else:
            ar = a0 + ri
            ac = kr + rk
            a = tl.load(A + ar[:, None] * s_a + ac[None, :], mask=(ar[:, None] < a_rows) & (ac[None, :] < K),
                        other=0.0)
            at = tl.trans(a)
        br = (b0 + kr) + rk
        b = tl.load(B + br[:, None] * s_b + rd[None, :], mask=(br[:, None] < b_rows) & (rd[None, :] < N), other=0.0)
        if SWAP:
            acc = tl.dot(tl.trans(b), at, acc)
        else:
            acc = tl.dot(a, b, acc)
    if SWAP:
        _epilogue(tl.trans(acc), o0 + ri, rd, batch, M, N, s_cb, A, C, C, scale, 0, False, False, True, ACC)
    else:
        _epilogue(acc, o0 + ri, rd, batch, M, N, s_cb, A, C, C, scale, 0, False, False, True, ACC)


@tessera.kernel
def _score_backward_flat_kernel(DS, Q, KEY, DQ, DK, M, N, D, s_dm, s_qm, s_kn, scale, rows_q, rows_k,
                                ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                                BLOCK_K: tl.constexpr, WS: tl.constexpr, LAG: tl.constexpr = 0,
                                PROGRAM0: tl.constexpr = 0, SWAP: tl.constexpr = False,
                                L2_PREFETCH: tl.constexpr = 0):
    """_score_backward_kernel's two products (same grid: a batch's dq row blocks, then its
    dk row blocks; the same rotated K order) with ds, q and k read as 2-D arrays of all
    batches' rows (rows_q = batch x M rows of ds and q, rows_k = batch x N of k; batches
    contiguous, M and N multiples of BLOCK_K, offsets within int32: the host checks)
    through _score_flat_tile, so that on sm_90a the rings take TMA copies and WS gives
    them to a producer warpgroup (a specialized loop in each branch: a program runs one).
    LAG: the dq programs start LAG K steps behind the anti-diagonal (0: on it, the
    shipped choice), so that with LAG >= R = BLOCK_M / BLOCK_K every ds tile is read
    first by its dk program (BLOCK_K rows of BLOCK_M columns: 512-byte row pieces at
    256 x 64, against dq's 128-byte ones) and 1 .. 2R - 1 steps later by its dq program.
    On an H100 at 8 x 2048 x 2048 x 64 (bench/results/attention_score_bwd_flat_h100.md)
    that pays only while part of ds is still in the L2 from the previous call (the same
    ds again: LAG 4 0.915 of a copy, LAG 0 0.90); with a new ds each call, as in training,
    the second reads then miss the L2 more often (LAG 4 0.81-0.84, 8 0.64, LAG 0
    0.88-0.91), and L2 eviction hints on the copies did not change that (evict_first on
    every ds copy 0.905-0.912, on one side's only 0.77-0.80, evict_last 0.80).
    PROGRAM0: added to program_id(0) (0, the shipped choice; the bench's cuts run the dk
    programs alone as a grid of N / BLOCK_M programs from PROGRAM0 = M / BLOCK_M).
    SWAP: both products transposed (_score_flat_tile; one warpgroup's m64n256 wgmma at
    256 rows, 4 warps): 0.75 of a copy on an H200 against 0.81 (bench/results/
    attention_score_bwd_h200_s14.md), kept for the bench. L2_PREFETCH: each branch's
    ring asks the L2 for its ds (and k or q) boxes that many K steps ahead of its copies
    (tl.range's l2_prefetch): slower at every distance on both GPUs (bench/results/
    attention_score_bwd_s15_l2_prefetch.md), kept for the bench."""
    batch = tl.program_id(2).to(tl.int64)
    b32 = tl.program_id(2)
    t = tl.program_id(0) + PROGRAM0
    q_blocks = tl.cdiv(M, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    if t < q_blocks:
        n_blocks = tl.cdiv(N, BLOCK_K)
        first = (2 * n_blocks - (t * BLOCK_M // BLOCK_K) % n_blocks - LAG % n_blocks) % n_blocks
        _score_flat_tile(DS, KEY, DQ, b32 * M + t * BLOCK_M, b32 * N, t * BLOCK_M, rd, batch, M, D, N, rows_q,
                         rows_k, s_dm, s_kn, M * D, scale, first, False, ACC, BLOCK_M, BLOCK_D, BLOCK_K, WS, SWAP,
                         L2_PREFETCH)
    else:
        j = t - q_blocks
        m_blocks = tl.cdiv(M, BLOCK_K)
        first = (m_blocks - (j * BLOCK_M // BLOCK_K) % m_blocks) % m_blocks
        _score_flat_tile(DS, Q, DK, b32 * M, b32 * M, j * BLOCK_M, rd, batch, N, D, M, rows_q, rows_q, s_dm,
                         s_qm, N * D, scale, first, True, ACC, BLOCK_M, BLOCK_D, BLOCK_K, WS, SWAP, L2_PREFETCH)


@tessera.kernel
def _score_forward_flat_kernel(Q, KEY, S, M, N, D, rows_q, rows_k, scale, tiles, ACC: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                               WS: tl.constexpr, STREAM: tl.constexpr = False):
    """attention_score's forward on sm_90 GPUs: s = q k^T * scale with q, k and s read and
    written as 2-D arrays of all batches' rows (rows_q = batch x M rows of q and s, rows_k
    = batch x N of k; M a multiple of BLOCK_M and N of BLOCK_N, so that no tile crosses a
    batch: the host checks), on a persistent grid: program p takes output tiles p, p +
    programs, ... of `tiles` (batch-major, then row block, then column block), one K
    step each (D <= BLOCK_D). In this form every load is a TMA box of a bare parameter
    and the store a TMA store (compiler/codegen/nvptx/tma_nvptx.cpp,
    tma_store_nvptx.cpp), and WS gives the copies to a producer warp that runs ahead
    across tiles: the next tiles' q and k arrive while the consumers convert and send
    out this one. The batched matmul the other GPUs take (linear.py's persistent
    kernel with a batch offset in its bases) has only the cp.async ring and 16-byte
    st.global from registers; see SCORE_FORWARD_FLAT_TILES for what each measures."""
    n_blocks = N // BLOCK_N
    per_batch = (M // BLOCK_M) * n_blocks
    programs = tl.num_programs(0)
    first = tl.program_id(0)
    steps = tl.cdiv(tiles - first, programs)
    ri = tl.arange(0, BLOCK_M)
    rj = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    t = first
    for i in tl.range(0, steps, warp_specialize=WS):
        b = t // per_batch
        r = t % per_batch
        q0 = b * M + (r // n_blocks) * BLOCK_M  # the tile's first row of q and s
        c0 = (r % n_blocks) * BLOCK_N           # its first column of s (row of k[b])
        qr = q0 + ri
        kr = b * N + c0 + rj
        cols = c0 + rj
        a = tl.load(Q + qr[:, None] * D + rd[None, :], mask=(qr[:, None] < rows_q) & (rd[None, :] < D), other=0.0)
        kt = tl.load(KEY + kr[:, None] * D + rd[None, :], mask=(kr[:, None] < rows_k) & (rd[None, :] < D),
                     other=0.0)
        acc = tl.dot(a, tl.trans(kt), out_dtype=ACC) * scale
        out = S + qr[:, None] * N + cols[None, :]
        out_mask = (qr[:, None] < rows_q) & (cols[None, :] < N)
        if STREAM:  # evict-first (st.global.cs): the scores are larger than the L2 and read once
            tl.store(out, acc, mask=out_mask, cache_modifier=".cs")
        else:
            tl.store(out, acc, mask=out_mask)
        t += programs


def _batched(x, name):
    """x (..., R, C) as a (batch, R, C) view (copied if the leading dims do not collapse)."""
    if x.ndim < 2:
        raise ValueError(f"tessera.kernels.attention_score: {name} must have at least 2 dimensions")
    r, c = x.shape[-2:]
    try:
        v = x.reshape(-1, r, c)
    except (ValueError, RuntimeError):
        v = H.contiguous(x).reshape(-1, r, c)
    return v, H.strides(v)


_SCORE_PLANS = H.Plans()


def _score_views(key, arrays, check):
    """(batched views, their strides) of q, k (and ds): the views are the arrays
    themselves when they are 3-D already; `check` runs on a layout's first call."""
    plan = _SCORE_PLANS.get(key)
    if plan is None:
        if check is not None:
            check()
        views = [_batched(a, name) for a, name in zip(arrays, ("q", "k", "ds"))]
        plan = _SCORE_PLANS.remember(key, tuple((v is a, st) for (v, st), a in zip(views, arrays)))
    return [(a if same else _batched(a, name)[0], st) for (same, st), a, name in zip(plan, arrays, ("q", "k", "ds"))]


def _check_scores(q, k):
    H.check_float("attention_score", q)
    H.check_same("attention_score", q, k, "k")
    if q.ndim != k.ndim or tuple(q.shape[:-2]) != tuple(k.shape[:-2]) or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"tessera.kernels.attention_score: q {tuple(q.shape)} and k {tuple(k.shape)} must be "
                         f"(..., M, D) and (..., N, D) with the same leading dimensions")


# (BLOCK_M, BLOCK_N, num_warps, num_stages, CTAs per SM, WS, STREAM) of
# _score_forward_flat_kernel, the forward on sm_90 GPUs where _score_forward_flat_grid allows
# it. Kernel time at 8x2048x2048x64 fp16 (bench/attention_score_gpu.py --only fwd), of a copy
# of the same 71 MB (bench/results/attention_score_gpu_float16_8x2048x2048x64_fwd_{h200,h100}
# _s12*.md), H200 / H100:
# - 64x128 over 4 warps, 2 stages, 3 CTAs an SM, not specialized (TMA loads, the tile
#   stored through shared memory with 16-byte st.global), evict-first stores (.cs): 0.923 /
#   1.072 (_s12_cs); on the H200 above a fill of the output (0.887: torch's fill keeps its
#   lines in the L2); the same with plain stores 0.851-0.856 / 0.896-0.897; with .cs,
#   128x128 s2 2 CTAs 0.904 / 1.065, 64x64 s2 4 CTAs 0.815 / 1.069, 64x256 specialized
#   0.841 / 1.052;
# - specialized, TMA stores: 64x256 1 CTA 0.851 / 0.896, 64x128 s3 2 CTAs 0.842 / 0.894,
#   128x256 s3 0.839 / 0.913, 128x128 s4 0.822 / 0.890; 128x128 s2 2 CTAs not specialized
#   0.846 / 0.906;
# - the batched matmul the other GPUs keep (linear.py's persistent kernel, 64x128 s2 3 CTAs,
#   cp.async ring, .cs stores): 0.733 / 0.987-0.990;
# - cuBLAS's bmm 0.831 / 0.910; a write-only fill of the output 0.889 / 1.169 (the ceiling
#   of a product whose bytes are nearly all its output's: on the H200 a write stream is
#   slower than a copy, on the H100 faster).
SCORE_FORWARD_FLAT_TILES = (64, 128, 4, 2, 3, False, True)


def _score_forward_flat_grid(like, bt, m, n, d, qs, ks, name):
    """(grid, keywords) of _score_forward_flat_kernel for these operands, or None where
    the forward keeps the batched matmul: not an sm_90 GPU; not 16-bit; a head dim over
    64 (one TMA box of 128-byte rows: larger ones take no TMA) or not a multiple of 8
    (16-byte rows); q or k not (batch, rows, d) contiguous (the kernel's row stride is
    d); M or N not a multiple of the tile (a tile would cross a batch); an element offset
    of the 2-D views past int32 (the kernel's index arithmetic)."""
    bm, bn, warps, stages, per_sm, ws, stream = SCORE_FORWARD_FLAT_TILES
    if name not in ("float16", "bfloat16") or not 0 < d <= 64 or d % 8 or m % bm or n % bn or not bt:
        return None
    if qs[1:] != (d, 1) or ks[1:] != (d, 1) or (bt > 1 and (qs[0] != m * d or ks[0] != n * d)):
        return None
    if max(bt * m * n, bt * m * d, bt * n * d) >= 2 ** 31 or not _has_tma(like):
        return None
    tiles = (m // bm) * (n // bn) * bt
    return (min(tiles, per_sm * _sm_count(like)), 1, 1), dict(
        M=m, N=n, D=d, rows_q=bt * m, rows_k=bt * n, tiles=tiles, ACC=tl.float32, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_D=max(16, tessera.next_power_of_2(d)), WS=ws, STREAM=stream, num_warps=warps, num_stages=stages)


def attention_score_forward(q, k, scale):
    (qv, qs), (kv, ks) = _score_views((H.layout(q), H.layout(k)), (q, k), lambda: _check_scores(q, k))
    bt, m, d = qv.shape
    n = kv.shape[1]
    flat = _score_forward_flat_grid(q, bt, m, n, d, qs, ks, H.dtype_name(q)) if H.on_gpu(q) else None
    if flat is not None:
        grid, kw = flat
        s = H.empty(q, (bt, m, n))
        _score_forward_flat_kernel[grid](qv, kv, s, scale=H.scalar(q, scale), **kw)
    else:
        s, _ = matmul(qv, kv, qs, (ks[0], ks[2], ks[1]), bt, m, n, d, q, scale=scale, stream=True)
    return H.shaped(s, tuple(q.shape[:-1]) + (n,))


def _score_backward_tiles(dtype_name, d, qs, ks, dss):
    """(BLOCK_M, BLOCK_D, BLOCK_K, launch options) of _score_backward_kernel, or None
    where the two products run as two matmuls: the fused kernel takes 16-bit q, k, ds
    with contiguous rows whose strides are multiples of 16 elements (the cp.async ring's
    16-byte copies) and a head dim of at most 128 (one wgmma N). Tiles: see
    SCORE_BACKWARD_TILES."""
    if dtype_name not in ("float16", "bfloat16") or not 0 < d <= 128:
        return None
    if qs[2] != 1 or ks[2] != 1 or dss[2] != 1 or any(st % 16 for st in (qs[1], ks[1], dss[1])):
        return None
    bm, bk, warps, stages = SCORE_BACKWARD_TILES
    return bm, max(16, tessera.next_power_of_2(d)), bk, {"num_warps": warps, "num_stages": stages}


# (BLOCK_M, BLOCK_K, num_warps, num_stages) of _score_backward_kernel. Kernel time on an H100 at
# 8x2048x2048x64 fp16 (bench/attention_score_gpu.py, bench/results/kernels_cuda_float16_attn.md),
# of a copy of the byte model's 75 MB: with the K order rotated (ROTATE) 128x64 rows x K over 8
# warps, 4 stages, 0.887: 256 programs, all resident at once (two per SM), each ds tile read by
# its dq and dk programs at about the same step (one read from memory, one from the L2);
# 128x64 over 4 warps 0.83; 64x64 (512 programs, two waves) 0.60-0.75 at 3-6 stages, rotated or
# not (0.73 unrotated 6 stages, the earlier choice: the second read of ds often from memory);
# 128x64 in plain order 0.71, 128x128 (K) 0.67, 256x64 0.80.
# The two branches' rings share shared memory (lower_if): stages x (BLOCK_M + BLOCK_D) x
# BLOCK_K x 2 bytes, 96 KB here (two CTAs per SM). Session 8 (bench/results/
# kernels_cuda_float16_bwd90.md): 128x32 over 8 warps at 4-8 stages 0.70-0.79, 256x64 over
# 16 warps (one CTA per SM, wgmma; 256 rows over 8 warps fall back to mma.sync) 0.82-0.83;
# the operands read as 2-D arrays of all batches' rows from the bare parameters, so that the
# rings took TMA copies, 0.865-0.884 against this form's 0.875 (not kept). Nsight Compute on
# these tiles: 71.7 MB read from DRAM (ds once: the byte model), 66-69% of DRAM peak, 24% of
# the SM's warps active.
SCORE_BACKWARD_TILES = (128, 64, 8, 4)


# (BLOCK_M, BLOCK_K, num_warps, num_stages, LAG) of _score_backward_flat_kernel, the form taken
# on sm_90 GPUs where _score_backward_flat allows it (16-bit, D <= 128). H100, 8x2048x2048x64
# fp16, of a copy of the same 75.5 MB with a new ds each call (bench/attention_score_gpu.py
# --cold 4; bench/results/attention_score_bwd_flat_h100.md): 256x64 over 16 consumer warps and
# a producer warpgroup (one CTA an SM: 160 KB of rings), 4 stages, LAG 0: 0.86-0.91 over six
# runs, against 0.870-0.873 for the batched kernel's 128x64 (and the same ds again: 0.90 against
# 0.86-0.89). 256-row programs read k and q half as often as 128-row ones (each program reads
# all of its batch's k or q: 32 MB through the L2 instead of 64), which the batched kernel
# could not use (its cp.async ring over 16 warps: 0.82). Not specialized, the same tiles
# measure about the same; 128x64 specialized, two CTAs an SM (maxnreg 80), 0.83-0.85; 256x64
# at 3 stages 0.81, 256x32 at 8 stages 0.82. D = 128: 0.84 of a copy (batched kernel 0.67).
# On the H200 (0.74-0.85) the limit is the pairing itself, not the MMAs: a probe moving the
# same bytes in the same pattern with no MMA reads at 0.78-0.79 of a cudaMemcpy, one kind of
# program alone at 0.95-0.97, TMA-multicast pairs at 0.84-0.90 (bench/results/
# attention_bwd_memory_probe_h200_s15.md): the second L2 request for every ds line costs.
SCORE_BACKWARD_FLAT_TILES = (256, 64, 16, 4, 0)


def _score_backward_flat(like, bt, m, n, bk, qs, ks, dss):
    """Whether the backward takes _score_backward_flat_kernel: an sm_90 GPU (TMA rings,
    warp specialization), each operand's batches one after another (batch stride = rows
    x row stride), M and N multiples of BLOCK_K (no K step reaches into the next batch),
    and every element offset of the 2-D views within int32 (the kernel's index
    arithmetic). (The operands' dtype, head dim and row strides: _score_backward_tiles.)"""
    if not _has_tma(like) or m % bk or n % bk:
        return False
    if bt > 1 and (dss[0] != m * dss[1] or qs[0] != m * qs[1] or ks[0] != n * ks[1]):
        return False
    return max(bt * m * dss[1], bt * m * qs[1], bt * n * ks[1]) < 2 ** 31


def attention_score_backward(q, k, ds, scale):
    (qv, qs), (kv, ks), (dsv, dss) = _score_views((H.layout(q), H.layout(k), H.layout(ds)), (q, k, ds), None)
    bt, m, d = qv.shape
    n = kv.shape[1]
    name = H.dtype_name(q)
    tiles = _score_backward_tiles(name, d, qs, ks, dss) if H.on_gpu(q) and bt and m and n and \
        H.dtype_name(ds) == name else None
    if tiles is not None and _score_backward_flat(q, bt, m, n, SCORE_BACKWARD_FLAT_TILES[1], qs, ks, dss):
        bm, bk, warps, stages, lag = SCORE_BACKWARD_FLAT_TILES
        dq, dk = H.empty(q, (bt, m, d)), H.empty(q, (bt, n, d))
        _score_backward_flat_kernel[(tessera.cdiv(m, bm) + tessera.cdiv(n, bm), 1, bt)](
            dsv, qv, kv, dq, dk, m, n, d, dss[1], qs[1], ks[1], H.scalar(q, scale), bt * m, bt * n,
            ACC=H.acc_dtype(q), BLOCK_M=bm, BLOCK_D=tiles[1], BLOCK_K=bk, WS=True, LAG=lag, num_warps=warps,
            num_stages=stages)
        return H.shaped(dq, tuple(q.shape)), H.shaped(dk, tuple(k.shape))
    if tiles is not None:
        bm, bd, bk, opts = tiles
        dq, dk = H.empty(q, (bt, m, d)), H.empty(q, (bt, n, d))
        _score_backward_kernel[(tessera.cdiv(m, bm) + tessera.cdiv(n, bm), 1, bt)](
            dsv, qv, kv, dq, dk, m, n, d, dss[0], dss[1], qs[0], qs[1], ks[0], ks[1], H.scalar(q, scale),
            ACC=H.acc_dtype(q), BLOCK_M=bm, BLOCK_D=bd, BLOCK_K=bk, **opts)
        return H.shaped(dq, tuple(q.shape)), H.shaped(dk, tuple(k.shape))
    dq, _ = matmul(dsv, kv, dss, ks, bt, m, d, n, q, scale=scale)            # dq = ds @ k * scale
    dk, _ = matmul(dsv, qv, (dss[0], dss[2], dss[1]), qs, bt, n, d, m, q, scale=scale)  # dk = ds^T @ q * scale
    return H.shaped(dq, tuple(q.shape)), H.shaped(dk, tuple(k.shape))


def attention_score(q, k, scale=None):
    """q @ k^T * scale over the last two dimensions of q (..., M, D) and k (..., N, D);
    scale defaults to 1 / sqrt(D)."""
    if scale is None:
        scale = float(q.shape[-1]) ** -0.5
    AG = H.autograd()
    if AG.wants_grad(q, k):
        return AG.AttentionScore.apply(q, k, float(scale))
    s = _attention_score_fast(q, k, float(scale)) if getattr(q, "is_cuda", False) else None
    return s if s is not None else attention_score_forward(q, k, float(scale))


def _attention_score_fast(q, k, scale):
    """attention_score_forward for contiguous torch q (..., M, D) and k (..., N, D) of one
    float16/bfloat16/float32 dtype on one device, with the GPU tiles; None otherwise
    (the general path then checks and reports). Per call: a plan lookup keyed by the
    shapes, dtypes and devices, two contiguity checks, the allocation of s and a bound
    launch (scale its one free scalar). Called for CUDA tensors (the product is tens of
    microseconds, the general path's checks a good part of that in host time); tests
    call it on the CPU too."""
    T = H.torch
    if T is None or not isinstance(q, T.Tensor) or not isinstance(k, T.Tensor):
        return None
    key = (q.shape, k.shape, q.dtype, k.dtype, q.get_device(), k.get_device())
    plan = _FAST_SCORE_PLANS.get(key)
    if plan is None:
        plan = _FAST_SCORE_PLANS.remember(key, _fast_score_plan(q, k))
    if plan is _NOT_FAST or not (q.is_contiguous() and k.is_contiguous()):
        return None
    new_s, launch = plan
    s = new_s()
    launch(q, k, q, s, s, scale)
    return s


_FAST_SCORE_PLANS = H.Plans()


def _fast_score_plan(q, k):
    """(allocator of s, the bound launch taking A, B, BIAS, C, Z, scale) for these
    tensors' shapes, dtypes and devices, or _NOT_FAST."""
    T = H.torch
    dt = q.dtype
    if q.dim() < 2 or q.dim() != k.dim() or dt not in (T.float16, T.bfloat16, T.float32) or k.dtype != dt or \
            k.device != q.device:
        return _NOT_FAST
    qs, ks = q.shape, k.shape
    if qs[:-2] != ks[:-2] or qs[-1] != ks[-1]:
        return _NOT_FAST
    m, d, n = qs[-2], qs[-1], ks[-2]
    if m == 0 or d == 0 or n == 0 or q.numel() == 0:
        return _NOT_FAST
    bt = q.numel() // (m * d)
    flat = _score_forward_flat_grid(q, bt, m, n, d, (m * d, d, 1), (n * d, d, 1), H.dtype_name(q))
    if flat is not None:  # (the plan's tensors are contiguous: the call checks)
        grid, kw = flat
        bound = _score_forward_flat_kernel.bind(grid, **kw)
        return H.allocator(q, tuple(qs[:-1]) + (n,)), lambda a, b, _bias, c, _z, sc: bound(a, b, c, sc)
    bm, bn, bk, opts = _gpu_tiles(H.dtype_name(q), m, n, d, bt, rows_aligned=d % 16 == 0)
    kernel, grid, extra, opts = _gpu_launch(q, m, n, bt, bm, bn, opts)
    # A = q (bt, m, d) row-major; B = k^T: B[b, d, n] at k + b * n * d + n * d + d.
    sizes = dict(zip(("M", "N", "K", "s_ab", "s_am", "s_ak", "s_bb", "s_bk", "s_bn", "s_cb"),
                     (m, n, d, m * d, d, 1, n * d, 1, d, m * n)))
    if extra:
        sizes["batches"] = extra[0]
    launch = kernel.bind(grid, **sizes, A_MMAJOR=False, B_KMAJOR=d != 1, ACT=ACT_NONE, HAS_BIAS=False,
                         STORE_Z=False, SCALE=True, ACC=tl.float32, BATCHED=bt > 1, BLOCK_M=bm, BLOCK_N=bn,
                         BLOCK_K=bk, STREAM_C=True, **opts)
    return H.allocator(q, tuple(qs[:-1]) + (n,)), launch
