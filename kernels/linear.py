"""Matmuls with fused epilogues: linear_relu / linear_gelu (x @ W^T + b, then the
activation, applied to the accumulator tile before it is stored: the pre-activation
never goes to memory unless the backward pass needs it), and the product that
attention.py's attention_score (batched q @ k^T * scale) runs.

One batched, strided tile kernel serves every product of both directions (a second
copy, _matmul_kernel_cpu, written the way the x86 back end compiles best); a
transposed operand is only a swap of its two strides:

    C[b, m, n] = act(scale * sum_k A[b, m, k] * B[b, k, n] + bias[n])
    linear:  A = x (M, K), B = W^T, i.e. B[k, n] at W + n * W.stride(0) + k * W.stride(1)
    scores:  A = q (Bt, M, D), B = k^T (same trick on k)
"""
from __future__ import annotations

import tessera
import tessera.language as tl

from . import _host as H
from .activation import GELU, NO_B, RELU_OP, _gelu, elementwise_backward
from .reduce import column_sum_run, column_sum_steps

ACT_NONE, ACT_RELU, ACT_GELU, ACT_GELU_TANH = 0, 1, 2, 3
BM, BN, BK = 64, 64, 32
# The GPU grid's row blocks per group (_grouped_tile). 1 (row blocks in turn, column
# blocks fastest): with A and W in L2 (50 MB on an H100) grouping bought nothing at
# 4096x1024x2048 and its backward products, and GROUP_M 8 was 0-3% slower
# (bench/results/kernels_cuda_float16_linear2.md).
GROUP_M = 1


@tessera.kernel
def _epilogue(acc, rm, rn, batch, M, N, s_cb, BIAS, C, Z, scale, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
              STORE_Z: tl.constexpr, SCALE: tl.constexpr, ACC: tl.constexpr, STREAM_C: tl.constexpr = False):
    """Both matmul kernels' epilogue, inlined into each: scale, bias, the pre-activation
    Z if asked, the activation, the store of C (batch, M, N) contiguous. A kernel (not a
    plain function) so that bench/kernels.py's Triton build of this file, where
    @tessera.kernel becomes @triton.jit, can call it too. STREAM_C: C is stored with
    st.global.cs (evict-first: attention scores, larger than the L2 and read once)."""
    if SCALE:
        acc = acc * scale
    if HAS_BIAS:
        acc += tl.load(BIAS + rn, mask=rn < N, other=0.0).to(ACC)[None, :]
    out_mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = batch * s_cb + rm[:, None] * N + rn[None, :]
    if STORE_Z:
        tl.store(Z + offs, acc, mask=out_mask)
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    if ACT == 2:
        if ACC == tl.float64:  # (float64 products: GELU to float64's precision)
            half = 0.5 * acc  # 0.5 acc (1 + erf) as one FMA: half * erf + half
            acc = tl.fma(half, tl.erf(acc * 0.7071067811865476), half)
        else:
            acc = _gelu(acc)
    if ACT == 3:
        acc = 0.5 * acc * (1.0 + tl.tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)))
    if STREAM_C:
        tl.store(C + offs, acc, mask=out_mask, cache_modifier=".cs")
    else:
        tl.store(C + offs, acc, mask=out_mask)


@tessera.kernel
def _grouped_tile(t, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Output tile t of the GPU grid as (row block, column block): groups of GROUP_M row
    blocks walked column by column, so that the CTAs running at once share their A rows
    and B columns in L2 (GROUP_M 1: column blocks fastest)."""
    if GROUP_M == 1:  # one division (the general form's four compute the same)
        pid_m = t // tl.cdiv(N, BLOCK_N)
        pid_n = t % tl.cdiv(N, BLOCK_N)
    else:
        n_m = tl.cdiv(M, BLOCK_M)
        per_group = GROUP_M * tl.cdiv(N, BLOCK_N)
        first_m = (t // per_group) * GROUP_M
        rows_in_group = tl.minimum(n_m - first_m, GROUP_M)
        pid_m = first_m + (t % per_group) % rows_in_group
        pid_n = (t % per_group) // rows_in_group
    return pid_m, pid_n


@tessera.kernel
def _tile_operands(A, B, s_ab, s_bb, pid_m, pid_n, batch, BATCHED: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A program's row, column and K indices and its batch's A and B (inlined into both
    matmul kernels): unbatched, the bare parameters, which the TMA's tensor maps are made from."""
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if BATCHED:
        a_base = A + batch * s_ab
        b_base = B + batch * s_bb
    else:
        a_base = A
        b_base = B
    return rm, rn, rk, a_base, b_base


@tessera.kernel
def _operand_tiles(a_base, b_base, rm, rn, kk, M, N, K, s_am, s_ak, s_bk, s_bn, A_MMAJOR: tl.constexpr,
                   B_KMAJOR: tl.constexpr):
    """The A [BLOCK_M, BLOCK_K] and B [BLOCK_K, BLOCK_N] tiles at K indices kk (inlined
    into both GPU kernels), each loaded along its contiguous dimension and masked by
    its own indices: the form the TMA (and the cp.async ring) take."""
    if A_MMAJOR:
        # A[m, k] contiguous along m (dz^T in dW = dz^T @ x): the [BLOCK_K, BLOCK_M]
        # tile along its rows, transposed for the dot (wgmma reads it M-major).
        a = tl.trans(tl.load(a_base + kk[:, None] * s_ak + rm[None, :] * s_am,
                             mask=(kk[:, None] < K) & (rm[None, :] < M), other=0.0))
    else:
        a = tl.load(a_base + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
    if B_KMAJOR:
        # B[k, n] contiguous along k (a row-major W read as W^T): the [BLOCK_N,
        # BLOCK_K] tile along its rows, transposed for the dot.
        b = tl.trans(tl.load(b_base + rn[:, None] * s_bn + kk[None, :] * s_bk,
                             mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0))
    else:
        b = tl.load(b_base + kk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
    return a, b


@tessera.kernel
def _matmul_kernel(A, B, BIAS, C, Z, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, scale,
                   A_MMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                   STORE_Z: tl.constexpr, SCALE: tl.constexpr, ACC: tl.constexpr, BATCHED: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   STREAM_C: tl.constexpr = False):
    """The GPU kernel; grid (tiles of C, 1, batch) in grouped order (_grouped_tile).
    Every operand tile is written as `base + row * stride + col` over an index that
    starts at a scalar, masked by `index < bound` with the same index, and the K index
    kk = k + rk is recomputed each step (no pointer tiles carried around the loop): the
    form compiler/codegen/nvptx/tma_nvptx.cpp turns into TMA copies on sm_90a (one
    thread per stage, no per-element addresses) and the cp.async ring elsewhere. An
    unbatched product (BATCHED false) keeps the bases the bare parameters, which the
    TMA's tensor maps are made from at launch; a batch offset makes the base per CTA,
    which only the cp.async ring takes (attention_score's q k^T)."""
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    batch = tl.program_id(2).to(tl.int64)
    rm, rn, rk, a_base, b_base = _tile_operands(A, B, s_ab, s_bb, pid_m, pid_n, batch, BATCHED, BLOCK_M, BLOCK_N,
                                                BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    for k in range(0, K, BLOCK_K):
        a, b = _operand_tiles(a_base, b_base, rm, rn, k + rk, M, N, K, s_am, s_ak, s_bk, s_bn, A_MMAJOR, B_KMAJOR)
        # fp32 inputs: three tf32 products on tensor cores give fp32 accuracy, as
        # torch's default (allow_tf32=False) does; 16-bit inputs ignore the option.
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    _epilogue(acc, rm, rn, batch, M, N, s_cb, BIAS, C, Z, scale, ACT, HAS_BIAS, STORE_Z, SCALE, ACC, STREAM_C)


@tessera.kernel
def _persistent_matmul_kernel(A, B, BIAS, C, Z, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, scale, batches,
                              A_MMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr, ACT: tl.constexpr,
                              HAS_BIAS: tl.constexpr, STORE_Z: tl.constexpr, SCALE: tl.constexpr, ACC: tl.constexpr,
                              BATCHED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False,
                              STREAM_C: tl.constexpr = False, PING_PONG: tl.constexpr = False):
    """_matmul_kernel on a fixed grid (a few CTAs per SM), each program taking the
    tiles t = program, program + programs, ... of all `batches` (batch-major, each in
    _grouped_tile's order); grid (programs, 1, 1).
    Its K steps of all its tiles are one flat loop, so the operand ring (TMA or
    cp.async) is filled once per program and runs ahead across tile boundaries: the
    first stages of tile t+1 are in flight while tile t's epilogue converts and stores
    its accumulator (in _matmul_kernel every tile waits for its first stages after the
    previous CTA's epilogue). The accumulator is reset in the last K step's branch;
    it keeps its tensor-core layout on both paths (lower_if), so the reset is 64-128
    register moves per tile, and from 4 stages a wgmma group stays in flight across
    steps (the branch waits for it). _gpu_tiles takes it for one-step products (K <=
    64); K must be at least 1 (a tile's epilogue runs in its last step)."""
    per_batch = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    programs = tl.num_programs(0)
    first = tl.program_id(0)
    steps = tl.cdiv(per_batch * batches - first, programs) * tl.cdiv(K, BLOCK_K)
    # The tile and K offset are carried and stepped (no division by the runtime K
    # steps in the loop: each iteration also computes them for the ring's stage S-1
    # ahead, and the first version's ~5 integer divisions per iteration, twice, ran
    # x @ W^T at 0.60 of cuBLAS where carrying them gave 0.82).
    t = first
    k = 0
    acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    for i in tl.range(0, steps, warp_specialize=WARP_SPECIALIZE, ping_pong=PING_PONG):
        if BATCHED:
            batch = (t // per_batch).to(tl.int64)
            pid_m, pid_n = _grouped_tile(t % per_batch, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        else:
            batch = 0
            pid_m, pid_n = _grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rm, rn, rk, a_base, b_base = _tile_operands(A, B, s_ab, s_bb, pid_m, pid_n, batch, BATCHED, BLOCK_M,
                                                    BLOCK_N, BLOCK_K)
        # k is a multiple of BLOCK_K, which the alignment analysis cannot see in a carried
        # value: without the hint the cp.async ring takes no 16-byte copies (no ring at all)
        kk = tl.multiple_of(k, BLOCK_K) + rk
        a, b = _operand_tiles(a_base, b_base, rm, rn, kk, M, N, K, s_am, s_ak, s_bk, s_bn, A_MMAJOR, B_KMAJOR)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
        k += BLOCK_K
        if k >= K:
            _epilogue(acc, rm, rn, batch, M, N, s_cb, BIAS, C, Z, scale, ACT, HAS_BIAS, STORE_Z, SCALE, ACC, STREAM_C)
            acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        last = k >= K
        t = tl.where(last, t + programs, t)
        k = tl.where(last, 0, k)


@tessera.kernel
def _matmul_kernel_cpu(A, B, BIAS, C, Z, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, scale,
                       A_MMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                       STORE_Z: tl.constexpr, SCALE: tl.constexpr, ACC: tl.constexpr, BATCHED: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """_matmul_kernel as the CPU compiles it best (same arguments and result, but for
    the grid: (row blocks, column blocks, batch), no GROUP_M order):
    - every tile is loaded along its contiguous dimension, and a transposed operand
      (A M-major as dz^T in dW = dz^T @ x, B K-major as W^T) is a tl.trans of that
      load, which the x86 dot reads or packs transposed; loading it across its
      contiguous dimension would be a 16-lane gather per vector (dW was 1.6x slower);
    - addresses are recomputed from k each step instead of carried as pointer tiles: a
      loop-carried tile of pointers is a buffer on the CPU, and updating its 24K
      pointers each step of a 128x256x64 tile cost ~7% of the matmul."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    rm, rn, rk, a_base, b_base = _tile_operands(A, B, s_ab, s_bb, pid_m, pid_n, batch, BATCHED, BLOCK_M, BLOCK_N,
                                                BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    for k in range(0, K, BLOCK_K):
        if A_MMAJOR:
            a = tl.trans(tl.load(a_base + (k + rk[:, None]) * s_ak + rm[None, :] * s_am,
                                 mask=(rk[:, None] < K - k) & (rm[None, :] < M), other=0.0))
        else:
            a = tl.load(a_base + rm[:, None] * s_am + (k + rk[None, :]) * s_ak,
                        mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        if B_KMAJOR:
            b = tl.trans(tl.load(b_base + rn[:, None] * s_bn + (k + rk[None, :]) * s_bk,
                                 mask=(rn[:, None] < N) & (rk[None, :] < K - k), other=0.0))
        else:
            b = tl.load(b_base + (k + rk[:, None]) * s_bk + rn[None, :] * s_bn,
                        mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    _epilogue(acc, rm, rn, batch, M, N, s_cb, BIAS, C, Z, scale, ACT, HAS_BIAS, STORE_Z, SCALE, ACC)


@tessera.kernel
def _split_k_matmul_kernel(A, B, BIAS, C, Z, PART, ARRIVED, M, N, K, s_am, s_ak, s_bk, s_bn, k_per_split,
                           A_MMAJOR: tl.constexpr, B_KMAJOR: tl.constexpr, ACT: tl.constexpr,
                           HAS_BIAS: tl.constexpr, STORE_Z: tl.constexpr, ACC: tl.constexpr, SPLITS: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           SLICE_N: tl.constexpr, GROUP_M: tl.constexpr):
    """C = act(A @ B + bias) (one batch, C (M, N) contiguous) with each tile's K range in
    SPLITS parts of k_per_split (a multiple of BLOCK_K), run by SPLITS programs (grid
    (tiles, SPLITS, 1)). Two uses:
    - linear's small-M forward (_gpu_tiles' small-M branch): 17 rows x 1024 @ W^T (2048 x
      1024) is 32 64x64 tiles, each streaming 128 KB of W; on 32 of 132 SMs the product ran
      at the SMs' own bandwidth (10.7 us against cuBLAS's 5.0). Split 4 ways, 128 programs
      stream 32 KB each;
    - the backward's dW = dz^T @ x in two halves (SPLIT_K_DW, off: see there), whose
      2048x1024 output at 128x256 is 64 tiles for 132 SMs.
    Each program stores its fp32 partial to PART[split] (M x N) from the accumulator's
    registers, then counts itself in ARRIVED[tile] (the barrier orders all threads' stores
    before the acq_rel atomic); the last to arrive sums PART[0] + ... + PART[SPLITS-1] in
    SLICE_N-column slices, always in that order (C does not depend on which part is last:
    deterministic), applies the epilogue (_epilogue: bias, Z, activation), stores C and
    resets the counter (zero again for the next launch in stream order).
    dW measurements (two halves, 128x256 tiles): adding the other half straight into the
    accumulator instead held a second 128-register tile: 255 registers and spills (0.65 of
    cuBLAS); summed in slices, 155 registers, 0.67-0.69 -- still behind one pass over
    128x128 tiles (0.78-0.81), so linear_backward plans it only when SPLIT_K_DW is set."""
    t = tl.program_id(0)
    split = tl.program_id(1)
    pid_m, pid_n = _grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm, rn, rk, a_base, b_base = _tile_operands(A, B, 0, 0, pid_m, pid_n, 0, False, BLOCK_M, BLOCK_N, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    k_first = split * k_per_split
    for k in range(k_first, tl.minimum(K, k_first + k_per_split), BLOCK_K):
        a, b = _operand_tiles(a_base, b_base, rm, rn, k + rk, M, N, K, s_am, s_ak, s_bk, s_bn, A_MMAJOR, B_KMAJOR)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    plane = tl.cast(M, tl.int64) * N  # (tl.cast: M may be the constant 1)
    tl.store(PART + split * plane + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.debug_barrier()
    if tl.atomic_add(ARRIVED + t, 1, sem="acq_rel") == SPLITS - 1:
        for c in tl.static_range(0, BLOCK_N, SLICE_N):
            cn = pid_n * BLOCK_N + c + tl.arange(0, SLICE_N)
            offs = rm[:, None] * N + cn[None, :]
            cmask = (rm[:, None] < M) & (cn[None, :] < N)
            total = tl.load(PART + offs, mask=cmask, other=0.0)
            for s in tl.static_range(1, SPLITS):
                total += tl.load(PART + s * plane + offs, mask=cmask, other=0.0)
            _epilogue(total, rm, cn, 0, M, N, 0, BIAS, C, Z, 1.0, ACT, HAS_BIAS, STORE_Z, False, ACC)
        tl.store(ARRIVED + t, 0)


_MATMUL_PLANS = H.Plans()


def matmul(a, b, a_strides, b_strides, batch, m, n, k, like, bias=None, act=ACT_NONE, scale=None,
           store_z=False, tiles=None, stream=False):
    """(C, Z): C (batch, m, n) contiguous = act(scale * A @ B + bias), A and B given by
    their pointers and (batch, row, col) element strides; Z the pre-activation or None.
    tiles: (BLOCK_M, BLOCK_N, BLOCK_K, launch options) instead of the heuristic's
    choice (bench/linear_gpu.py --sweep compares them). stream: on a GPU, C is stored
    evict-first (_epilogue's STREAM_C)."""
    c = H.empty(like, (batch, m, n))
    z = H.empty(like, (batch, m, n)) if store_z else None
    if batch and m and n:
        key = (a_strides, b_strides, batch, m, n, k, like.dtype, H.on_gpu(like), bias is not None, act, scale,
               store_z, None if tiles is None else (tiles[:3], tuple(sorted(tiles[3].items()))), stream)
        plan = _MATMUL_PLANS.get(key)
        if plan is None:
            plan = _MATMUL_PLANS.remember(key, _Launch(_matmul_plan(a_strides, b_strides, batch, m, n, k, like, bias,
                                                                    act, scale, store_z, tiles, stream)))
        plan(a, b, bias if bias is not None else a, c, z if z is not None else c)
    return c, z


class _Launch:
    """A plan of _matmul_plan or _split_k_launch, its kernel bound once to the grid, the
    sizes and the constexprs (Kernel.bind): a call passes only the arrays A, B, bias, C,
    Z (stand-ins where unused); a split-K launch adds its fp32 partials and arrival
    counters (H.split_scratch: kept per stream, not allocated per call). A launch of
    _persistent_matmul_kernel through kernel[grid](...) with its 17 sizes and 15
    constexpr keywords cost ~3 us of host time to key; bound, ~0.3 us."""
    __slots__ = ("plan", "bound", "partial_elements", "tiles", "acc")

    def __init__(self, plan):
        kernel, grid, sizes, meta = plan
        self.plan = plan
        arrays = 7 if kernel is _split_k_matmul_kernel else 5
        self.bound = kernel.bind(grid, **dict(zip(kernel.arg_names[arrays:], sizes)), **meta)
        # split-K: SPLITS planes of M x N partials, one arrival counter per tile
        self.partial_elements = meta["SPLITS"] * sizes[0] * sizes[1] if arrays == 7 else 0
        self.tiles = grid[0]
        self.acc = "float64" if meta["ACC"] == tl.float64 else "float32"

    def __call__(self, a, b, bias, c, z):
        if self.partial_elements:
            partials, counters = H.split_scratch(c, self.partial_elements, self.tiles, self.acc)
            self.bound(a, b, bias, c, z, partials, counters)
        else:
            self.bound(a, b, bias, c, z)


def _matmul_plan(a_strides, b_strides, batch, m, n, k, like, bias, act, scale, store_z, tiles, stream=False):
    """(kernel, grid, the arguments after the five arrays, constexpr and launch keywords)."""
    gpu = H.on_gpu(like)
    if tiles is None:
        tiles = (_gpu_tiles(H.dtype_name(like), m, n, k, batch, a_mmajor=a_strides[1] == 1 and a_strides[2] != 1,
                            rows_aligned=_rows_aligned(a_strides[1:] + b_strides[1:]), tma=_has_tma(like))
                 if gpu else _tiles(like, m, n, k))
    if batch == 1 and "split_k" in tiles[3]:  # (given tiles may ask for it on the CPU too: tests)
        return _split_k_launch(a_strides, b_strides, m, n, k, like, tiles, act, bias is not None, store_z)
    bm, bn, bk, opts = tiles
    sizes = (m, n, k, *a_strides, *b_strides, m * n, H.scalar(like, 1.0 if scale is None else scale))
    if gpu:
        kernel, grid, extra, opts = _gpu_launch(like, m, n, batch, bm, bn, opts)
        sizes += extra
    else:
        kernel, grid = _matmul_kernel_cpu, (tessera.cdiv(m, bm), tessera.cdiv(n, bn), batch)
    meta = dict(A_MMAJOR=a_strides[1] == 1 and a_strides[2] != 1,
                B_KMAJOR=b_strides[1] == 1 and b_strides[2] != 1, ACT=act, HAS_BIAS=bias is not None,
                STORE_Z=store_z, SCALE=scale is not None, ACC=H.acc_dtype(like), BATCHED=batch > 1,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
    if gpu and stream:
        meta["STREAM_C"] = True
    return kernel, grid, sizes, meta


def _gpu_launch(like, m, n, batch, bm, bn, opts):
    """(kernel, grid, arguments after `scale`, constexpr and launch keywords) of a GPU
    product. opts["persistent"] = P: _persistent_matmul_kernel on P CTAs per SM (at
    most one per tile); otherwise _matmul_kernel, one grid axis over C's tiles walked in
    _grouped_tile's order, the batch on the third."""
    opts = {"GROUP_M": GROUP_M, **opts}
    per_sm = opts.pop("persistent", 0)
    ws = opts.pop("warp_specialize", False)
    ping_pong = opts.pop("ping_pong", False)
    tiles = tessera.cdiv(m, bm) * tessera.cdiv(n, bn)
    if not per_sm:
        return _matmul_kernel, (tiles, 1, batch), (), opts
    if ws:  # a producer warp issues the ring's copies (sm_90a; other targets ignore it)
        opts["WARP_SPECIALIZE"] = True
    if ping_pong:  # two consumer warpgroups take the tiles in turn (num_warps 4: one tile's)
        opts["PING_PONG"] = True
    return _persistent_matmul_kernel, (min(tiles * batch, per_sm * _sm_count(like)), 1, 1), (batch,), opts


_TMA_DEVICES = {}  # device index -> compute capability 9.x (TMA, wgmma)


def _has_tma(like):
    """Whether the GPU `like` (a torch or CuPy array) is on is an sm_90 part (H100/H200),
    where linear's wide products run warp-specialized; False for CPU arrays."""
    if not H.on_gpu(like) or (H.is_torch(like) and not like.is_cuda):  # (tests planning GPU launches on the CPU)
        return False
    dev = like.device.index if H.is_torch(like) else like.device.id
    if dev not in _TMA_DEVICES:
        if H.is_torch(like):
            major = H.torch.cuda.get_device_capability(dev)[0]
        else:
            import cupy
            major = int(cupy.cuda.Device(dev).compute_capability) // 10  # e.g. "90"
        _TMA_DEVICES[dev] = major == 9
    return _TMA_DEVICES[dev]


_SM_COUNTS = {}  # device index -> multiprocessors


def _sm_count(like):
    """The streaming multiprocessors of the GPU `like` (a torch or CuPy array) is on; 4
    for a CPU array (tests running the GPU launch on the CPU, where a persistent grid
    then still gives each program several tiles)."""
    if not H.on_gpu(like):
        return 4
    dev = like.device.index if H.is_torch(like) else like.device.id
    if dev not in _SM_COUNTS:
        if H.is_torch(like):
            _SM_COUNTS[dev] = H.torch.cuda.get_device_properties(dev).multi_processor_count
        else:
            import cupy
            _SM_COUNTS[dev] = cupy.cuda.Device(dev).attributes["MultiProcessorCount"]
    return _SM_COUNTS[dev]


def _gpu_tiles(name, m, n, k, batch, a_mmajor=False, rows_aligned=True, tma=False):
    """(BLOCK_M, BLOCK_N, BLOCK_K, launch options) on a GPU: 128-row tensor-core tiles
    over 8 warps (two warpgroups of wgmma on sm_90a, mma.sync elsewhere); float64 has
    no tensor-core path and keeps the small tile. For 16-bit products of one batch
    (linear's, TMA-filled rings on sm_90a), from bench/linear_gpu.py --sweep on an H100
    (bench/results/kernels_cuda_float16_linear2.md, 4096x1024x2048):
    - with at least WIDE_TILES_FROM 128x256 tiles: 128x256, 4 stages (one CTA per SM,
      one wgmma group kept in flight): x @ W^T 0.87 of cuBLAS (128x128, 3 stages: 0.80),
      dX = dZ W 0.93-0.95 (0.83); fewer such tiles would leave SMs idle;
    - an M-major A (dW = dZ^T X): 128x128, 4 stages, 0.65-0.67 of cuBLAS (3 stages
      0.58-0.59, 128x256 0.52);
    - at most SMALL_M rows (16-bit, one batch, rows aligned, A K-major): one 64-row
      block of SMALL_M_TILES, the K range split (split_k, _split_k_matmul_kernel) so that
      about SMALL_M_PROGRAMS programs stream W (_small_m_splits);
    - otherwise 128x128, 3 stages (two CTAs per SM): batched products, fp32's tf32x3
      (32-wide K), and operands whose row strides are not multiples of 8 elements
      (rows_aligned false, _rows_aligned: the launch's specialization cannot prove the
      rows 16-byte aligned, so no ring takes the loads): 128x256 ran 0.46 of cuBLAS
      against 0.55 at 4097x1000x1030 when the launch specialized on divisibility by 16
      only (K = 1000's 2000-byte rows then counted as unaligned);
    - one K step (K <= 64: attention's q k^T, store-bound with heads x 2048 x 2048
      outputs), 16-bit, rows aligned: _persistent_matmul_kernel, 64x128 over 4 warps (one
      warpgroup), 2 stages, three CTAs per SM (66 KB of shared memory each): the next
      tiles' loads overlap this tile's stores. Kernel time (torch.profiler) at q k^T
      8x2048x2048x64 fp16 on an H100, of a copy of the same bytes, with evict-first stores
      (STREAM_C) / without: 64x128 s2 3 CTAs 1.00 / 0.92, 128x128 s2 2 CTAs 0.93 / 0.89,
      128x256 s2 1 CTA 0.93 / 0.89, 256x128 s2 1 CTA 0.84 / 0.83, one tile per CTA 0.86 /
      0.71 (bench/results/kernels_cuda_float16_attn.md). Earlier, GPU-queued, of cuBLAS:
      128x128 s2 took q k^T from 0.80 to 0.98-0.99 and x @ W^T 8192x64x4096 from 0.67 to
      0.98 (bench/results/kernels_cuda_float16_linear3.md); linear's K <= 64 products take
      the 64x128 tiles too (plain stores; not measured there).
      Longer K keeps one tile per CTA: there the flat loop's per-step bookkeeping cost
      more than the overlap gained (x @ W^T 4096x1024x2048: 0.81 persistent 128x256 s3,
      0.68-0.69 with a wgmma group in flight at 128x128 s4 or 128x256x32 s6, against 0.88).
    - tma (an sm_90 device: TMA rings and wgmma), the wide-tile case: the flat persistent
      kernel, warp-specialized (a producer warpgroup issues the TMA copies and runs ahead
      across tiles, compiler/codegen/nvptx/warp_specialize_nvptx.cpp), 128x256, 4 stages
      (the output tile then goes out by TMA copies, 128x64 column chunks through two 16 KB
      buffers: compiler/codegen/nvptx/tma_store_nvptx.cpp), one CTA per SM. With the TMA
      store, GPU-queued, of cuBLAS alone (bench/results/kernels_cuda_float16_linear_tmastore.md,
      4 runs): fp16 4096x1024x2048 relu 0.957-0.983 (0.0277-0.0280 ms; the stores of before,
      TESSERA_TMA=4, 0.0280-0.0286), gelu 0.83-0.85 (unchanged), 8192x4096x4096 relu
      0.936-0.947 (unchanged), gelu 0.89-0.92 (1.5-3.5% slower than TESSERA_TMA=4's 0.92-0.93).
      Before the TMA store (the tile through shared memory in two column halves, 16-byte
      st.global), against 128x256 s4 one tile per CTA: fp16 x @ W^T + b
      4096x1024x2048 relu 0.87 -> 0.94, gelu 0.72 -> 0.79 (3 stages: 0.92-0.94, 0.76-0.77),
      8192x4096x4096 relu 0.92-0.93 -> 0.94; bf16 (3 stages) relu 0.86 -> 0.91, 8192 0.88
      -> 0.92; dX = dZ W 0.97 both (bench/results/kernels_cuda_float16_wspec.md). At fp16
      4096x1024x2048, GROUP_M 8 (0.914 vs 0.916 GPU-queued relu) and 3 stages (0.908) are no
      better (bench/results/kernels_cuda_float16_epi16.md). Ping-pong consumers (the option
      "ping_pong": two warpgroups of 64x256 tiles taking turns, 4 warps) hide the epilogue
      but ran 0.75-0.79 of cuBLAS against this kernel's 0.97 (the 64-row tiles' B traffic;
      bench/results/kernels_cuda_float16_pingpong.md): not chosen."""
    if name not in ("float16", "bfloat16", "float32"):
        return BM, BN, BK, {}
    if name != "float32" and 0 < k <= 64 and rows_aligned:  # (K = 0: no step would run the epilogue)
        return 64, 128, 64, {"num_warps": 4, "num_stages": 2, "persistent": 3}
    if name != "float32" and batch == 1 and rows_aligned and not a_mmajor and m <= SMALL_M:
        bm, bn, bk, warps, stages = SMALL_M_TILES
        splits = _small_m_splits(n, k, bn, bk)
        return bm, bn, bk, {"num_warps": warps, "num_stages": stages, **({"split_k": splits} if splits > 1 else {})}
    if name != "float32" and batch == 1 and rows_aligned:
        if a_mmajor:
            return 128, 128, 64, {"num_warps": 8, "num_stages": 4}
        if tma and n % 8:
            # C's rows not 16-byte aligned (N = 1030): the specialized 128x256 kernel's
            # epilogue cannot go through shared memory; stored from registers it spilled and
            # ran 0.0606 ms at 4097x1000x1030, this 0.0490 (128x128 s3 one tile per CTA
            # 0.0504, cuBLAS 0.0665; bench/results/kernels_cuda_float16_linalign_run1.log).
            return 128, 128, 64, {"num_warps": 8, "num_stages": 3, "persistent": 2, "warp_specialize": True}
        if tessera.cdiv(m, 128) * tessera.cdiv(n, 256) >= WIDE_TILES_FROM:
            if tma:
                return 128, 256, 64, {"num_warps": 8, "num_stages": 4, "persistent": 1, "warp_specialize": True}
            return 128, 256, 64, {"num_warps": 8, "num_stages": 4}
    return 128, 128, (32 if name == "float32" else 64), {"num_warps": 8, "num_stages": 3}


# About one wave of 128x256 tiles on an H100 (132 SMs, one such CTA each).
WIDE_TILES_FROM = 128

# Small-M products (x @ W^T with at most SMALL_M rows: decoding, small batches) read W
# once and are bound by how many SMs stream it: 17x1024 @ (2048x1024)^T on 16 128x128
# tiles took 10.7 us GPU-queued, cuBLAS 5.0, HBM's floor for W's 4 MB ~1.3 us.
# SMALL_M_TILES = (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): one warpgroup's
# wgmma rows (64), split K so that about SMALL_M_PROGRAMS programs run. On an H100,
# GPU-queued at 17x1024x2048 (bench/results/kernels_cuda_float16_linalign.md): 64x64 s4
# split 4 (128 programs) 5.7-6.0 us (relu; 0.83-0.87 of cuBLAS); split 2 6.4, 64x128
# split 4/8 6.8/8.3, 64x32/64x16 split 2 6.7/7.7; unsplit 64x64, 64x32 s12, 64x16 s16
# (all K steps in flight) 7.5-7.6.
SMALL_M = 64
SMALL_M_TILES = (64, 64, 64, 4, 4)
SMALL_M_PROGRAMS = 128
SMALL_M_MAX_SPLITS = 8


def _small_m_splits(n, k, bn, bk):
    """Parts of the K range for a small-M product over cdiv(n, bn) column tiles: enough
    for about SMALL_M_PROGRAMS programs, at most SMALL_M_MAX_SPLITS, each part at least
    two K steps (1: no split)."""
    return max(1, min(SMALL_M_MAX_SPLITS, SMALL_M_PROGRAMS // tessera.cdiv(n, bn), tessera.cdiv(k, bk) // 2))


def _rows_aligned(strides):
    """Whether every row stride (those not 1) is a multiple of 8 elements: what a launch
    specializes on (specialization.divisibility_class, 16 or 8) and proves 16-byte aligned
    for 16-bit types (32 bytes for fp32), so the cp.async ring and the TMA take the loads."""
    return all(st % 8 == 0 for st in strides if st != 1)


def _tiles(like, m, n, k):
    """(BLOCK_M, BLOCK_N, BLOCK_K, launch options) on the CPU: _cpu_tiles (on a GPU
    _gpu_tiles decides)."""
    name = H.dtype_name(like)
    if not H.on_gpu(like):
        return _cpu_tiles(name, m, n, k) + ({},)
    return BM, BN, BK, {}


def _cpu_tiles(dtype_name, m, n, k):
    """The x86 micro-kernel's tiles: as large as the problem allows up to CPU_TILE
    (fp64 halves N: its vectors hold half the lanes), never below 16 (a smaller tile
    mostly pays per-program costs). Small K (attention's head dim) takes one K step:
    q @ k^T at 8x512x512x64 ran 4.6 ms on 64x64x32 tiles, 3.5 ms on 128x128x64 (one
    thread)."""
    cap_m, cap_n, cap_k = CPU_TILE
    if dtype_name == "float64":
        cap_n //= 2

    def fit(v, cap):
        return max(16, min(cap, tessera.next_power_of_2(max(int(v), 1))))
    return fit(m, cap_m), fit(n, cap_n), fit(k, cap_k)


# On the 2-core Zen 4, 512x1024x1024, one thread (CPU time, best of 5), ms for x @ W^T /
# dz @ W / dz^T @ x: 128x128x128 11.5 / 11.1 / 11.0; 128x256x64 11.8 / 11.4 / 11.2;
# 128x128x256 11.4 / 10.9 / 11.0 (torch 11.5 for x @ W^T): all within 3%.
CPU_TILE = (128, 128, 128)


# --------------------------------------------------------------------------- linear + activation

_LINEAR_PLANS = H.Plans()


def _linear_checks(op, x, weight, bias):
    H.check_float(op, x)
    H.check_same(op, x, weight, "weight")
    H.check_same(op, x, bias, "bias")
    if weight.ndim != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(f"tessera.kernels.{op}: weight must be (out_features, {x.shape[-1]}), "
                         f"got {tuple(weight.shape)}")
    n, k = weight.shape
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"tessera.kernels.{op}: bias has shape {tuple(bias.shape)}, expected ({n},)")


def linear_forward(x, weight, bias, act, keep_preactivation=False):
    """(y, z): y = act(x @ W^T + b) shaped (..., N); z the pre-activation when the
    backward pass needs it (GELU), else None."""
    store_z = keep_preactivation and act in (ACT_GELU, ACT_GELU_TANH)
    if getattr(x, "is_cuda", False):  # (autograd's forward: the fast path's host time)
        r = _fast_linear(x, weight, bias, act, store_z)
        if r is not None:
            return r
    return _linear_general(x, weight, bias, act, store_z)


def _linear_general(x, weight, bias, act, store_z):
    """linear_forward for any inputs: checks (once per layout), views, matmul."""
    key = (H.layout(x), H.layout(weight), H.layout(bias), act)
    plan = _LINEAR_PLANS.get(key)
    if plan is None:  # checks once per layout; the views' strides follow from it
        _linear_checks({ACT_RELU: "linear_relu", ACT_GELU: "linear_gelu", ACT_GELU_TANH: "linear_gelu"}.get(
            act, "linear"), x, weight, bias)
        k = weight.shape[1]
        xv = H.rows_view(x, k)
        plan = _LINEAR_PLANS.remember(key, (xv is x, H.strides(xv), H.strides(weight),
                                            bias is None or H.contiguous(bias) is bias,
                                            tuple(x.shape[:-1]) + (weight.shape[0],)))
    x_direct, xs, ws, b_direct, shape = plan
    n, k = weight.shape
    xv = x if x_direct else H.rows_view(x, k)
    y, z = matmul(xv, weight, (0,) + xs, (0, ws[1], ws[0]), 1, xv.shape[0], n, k, x,
                  bias=bias if b_direct else H.contiguous(bias), act=act, store_z=store_z)
    return H.shaped(y, shape), (H.shaped(z, shape) if z is not None else None)


class _LinearBwdPlan:
    """linear_backward's launches for one layout of (x, weight, dz): the two products'
    launches (_Launch, None when a product is empty) and allocators, the bias gradient's
    column sum (see H.Plans)."""
    __slots__ = ("dz_direct", "x_direct", "dz_contiguous", "dx_launch", "dw_launch", "new_dx", "new_dw",
                 "sum_steps", "grad_dtype")


def _product_launch(a_strides, b_strides, m, n, k, like):
    """matmul's launch (a _Launch) of an unbatched product without bias or activation, or
    None when its output is empty."""
    return _Launch(_matmul_plan(a_strides, b_strides, 1, m, n, k, like, None, ACT_NONE, None, False, None)) \
        if m and n else None


def _weight_gradient_tiles(dtype_name, m, n, k, a_strides, b_strides):
    """(tiles, split) for dW = dz^T @ x, the one product with an M-major A (M, N, K =
    out_features, in_features, rows), or None for _gpu_tiles' choice. 16-bit, rows
    16-byte aligned (the TMA's), from bench/linear_gpu.py --backward on an H100
    (bench/results/kernels_cuda_float16_mmbwd.md):
    - at least WIDE_TILES_FROM 128x256 tiles: 128x256, 4 stages, one program per
      tile (4096x4096x8192: 0.92-0.94 of cuBLAS, 128x128 0.65-0.68);
    - fewer: split (tiles, True) when SPLIT_K_DW and each half keeps at least 16 K steps
      (_split_k_matmul_kernel), else None."""
    if dtype_name not in ("float16", "bfloat16") or a_strides[1] != 1 or a_strides[2] == 1:
        return None
    if not _rows_aligned(a_strides[1:] + b_strides[1:]):
        return None
    wide = tessera.cdiv(m, 128) * tessera.cdiv(n, 256)
    if wide >= WIDE_TILES_FROM:
        return (128, 256, 64, {"num_warps": 8, "num_stages": 4}), False
    if SPLIT_K_DW is not None and wide >= WIDE_TILES_FROM // 4 and k >= 2 * 16 * 64:
        return SPLIT_K_DW, True
    return None


# _split_k_matmul_kernel's tiles for dW, or None: no split. None: on an H100 every split
# measured ran behind one program per 128x128 tile at 2048x1024x4096 (128x256 and 128x128
# halves 0.66-0.69 of cuBLAS against 0.78-0.81; bench/results/kernels_cuda_float16_mmbwd.md).
SPLIT_K_DW = None


def _split_k_launch(a_strides, b_strides, m, n, k, like, tiles, act=ACT_NONE, has_bias=False, store_z=False):
    """(kernel, grid, arguments after the seven arrays, constexpr and launch keywords) of
    _split_k_matmul_kernel for an unbatched product act(A @ B + bias); tiles' options
    name the parts ("split_k", default 2: dW's halves). The arrays: A, B, bias (or A), C,
    Z (or C), the fp32 partials (split_k, m, n), the arrival counters (one per tile)."""
    bm, bn, bk, opts = tiles
    opts = dict(opts)
    splits = opts.pop("split_k", 2)
    group_m = opts.pop("GROUP_M", GROUP_M)
    k_per_split = tessera.cdiv(tessera.cdiv(k, bk), splits) * bk
    # The last program loads a slice of every part at once: at most 128 registers of them
    # per thread (8 parts of 64x64 slices over 4 warps took 255 registers and spilled;
    # 32-column slices 168, no spills).
    slice_n, threads = min(64, bn), 32 * opts.get("num_warps", 4)
    while slice_n > 16 and splits * bm * slice_n > 128 * threads:
        slice_n //= 2
    sizes = (m, n, k, a_strides[1], a_strides[2], b_strides[1], b_strides[2], k_per_split)
    meta = dict(A_MMAJOR=a_strides[1] == 1 and a_strides[2] != 1, B_KMAJOR=b_strides[1] == 1 and b_strides[2] != 1,
                ACT=act, HAS_BIAS=has_bias, STORE_Z=store_z, ACC=H.acc_dtype(like), SPLITS=splits, BLOCK_M=bm,
                BLOCK_N=bn, BLOCK_K=bk, SLICE_N=slice_n, GROUP_M=group_m, **opts)
    return _split_k_matmul_kernel, (tessera.cdiv(m, bm) * tessera.cdiv(n, bn), splits, 1), sizes, meta


def _linear_bwd_plan(x, weight, dz, has_bias):
    n, k = weight.shape
    dzv, xv = H.rows_view(dz, n), H.rows_view(x, k)
    rows = xv.shape[0]
    zs, xs, ws = H.strides(dzv), H.strides(xv), H.strides(weight)
    plan = _LinearBwdPlan()
    plan.dz_direct, plan.x_direct = dzv is dz, xv is x
    plan.dx_launch = _product_launch((0,) + zs, (0,) + ws, rows, k, n, x)                  # dz @ W
    dw_tiles = _weight_gradient_tiles(H.dtype_name(x), n, k, rows, (0, zs[1], zs[0]), (0,) + xs) \
        if H.on_gpu(x) and n and k else None
    if dw_tiles is not None and dw_tiles[1]:  # dz^T @ x, each tile's K range in two halves
        plan.dw_launch = _Launch(_split_k_launch((0, zs[1], zs[0]), (0,) + xs, n, k, rows, weight, dw_tiles[0]))
    elif n and k:  # dz^T @ x
        plan.dw_launch = _Launch(_matmul_plan((0, zs[1], zs[0]), (0,) + xs, 1, n, k, rows, weight, None, ACT_NONE,
                                              None, False, dw_tiles[0] if dw_tiles is not None else None))
    else:
        plan.dw_launch = None
    # The products' outputs are contiguous: made in the gradients' shapes directly.
    plan.new_dx, plan.new_dw = H.allocator(x, tuple(x.shape)), H.allocator(weight, (n, k))
    plan.sum_steps = plan.grad_dtype = None
    plan.dz_contiguous = True
    if has_bias:
        dzc = H.contiguous(dzv)
        plan.dz_contiguous = dzc is dzv
        plan.sum_steps, plan.grad_dtype = column_sum_steps(dzc, rows, n), H.dtype_name(x)
    return plan


_LINEAR_BWD_PLANS = H.Plans()


def linear_backward(x, weight, z_or_y, dy, act, has_bias):
    """(dx, dweight, dbias). z_or_y is the pre-activation (GELU) or the output (ReLU)."""
    n, k = weight.shape
    if act == ACT_RELU:
        dz, _ = elementwise_backward(RELU_OP, z_or_y, None, dy, 0.0, 0, NO_B)
    elif act in (ACT_GELU, ACT_GELU_TANH):
        dz, _ = elementwise_backward(GELU, z_or_y, None, dy, 0.0, 0, NO_B, tanh=act == ACT_GELU_TANH)
    else:
        dz = dy
    key = (H.layout(x), H.layout(weight), H.layout(dz), has_bias)
    plan = _LINEAR_BWD_PLANS.get(key)
    if plan is None:
        plan = _LINEAR_BWD_PLANS.remember(key, _linear_bwd_plan(x, weight, dz, has_bias))
    dzv = dz if plan.dz_direct else H.rows_view(dz, n)
    xv = x if plan.x_direct else H.rows_view(x, k)
    dx, dw = plan.new_dx(), plan.new_dw()
    if plan.dx_launch is not None:  # (a split-K launch for a few rows)
        plan.dx_launch(dzv, weight, dzv, dx, dx)
    _weight_gradient(plan, dzv, xv, dw)
    db = None
    if has_bias:
        db = column_sum_run(plan.sum_steps, dzv if plan.dz_contiguous else H.contiguous(dzv), plan.grad_dtype)
    return dx, dw, db


def _weight_gradient(plan, dzv, xv, dw):
    """dw = dz^T @ x as the plan launches it (split-K or one program per tile)."""
    if plan.dw_launch is not None:
        plan.dw_launch(dzv, xv, dzv, dw, dw)


class _FastLinear:
    """_fast_linear's plan for one (shapes, dtype, device, activation, bias, Z): the
    output allocators and the bound launch (_Launch)."""
    __slots__ = ("new_y", "new_z", "launch", "empty")

    def __init__(self, x, weight, bias, act, store_z):
        n, k = weight.shape
        m = x.numel() // k
        # The outputs are made in their final shapes; x's leading dimensions are kept.
        self.new_y = H.allocator(x, tuple(x.shape[:-1]) + (n,))
        self.new_z = H.allocator(x, tuple(x.shape[:-1]) + (n,)) if store_z else None
        self.empty = m == 0
        self.launch = None if m == 0 else _Launch(_fast_linear_launch(x, m, n, k, act, bias is not None, store_z))


def _fast_linear_launch(x, m, n, k, act, has_bias, store_z):
    """_matmul_plan's tuple for y = act(x @ W^T + b), x (m, k) and W (n, k) contiguous,
    with the GPU tiles (split-K for a few rows)."""
    tiles = _gpu_tiles(H.dtype_name(x), m, n, k, 1, rows_aligned=k % 8 == 0, tma=_has_tma(x))
    if "split_k" in tiles[3]:
        return _split_k_launch((0, k, 1), (0, 1, k), m, n, k, x, tiles, act, has_bias, store_z)
    bm, bn, bk, opts = tiles
    kernel, grid, extra, opts = _gpu_launch(x, m, n, 1, bm, bn, opts)
    # A = x (m, k) row-major; B = W^T: B[k, n] at W + n * k + k, K-major unless k == 1.
    sizes = (m, n, k, 0, k, 1, 0, 1, k, m * n, 1.0, *extra)
    meta = dict(A_MMAJOR=False, B_KMAJOR=k != 1, ACT=act, HAS_BIAS=has_bias, STORE_Z=store_z, SCALE=False,
                ACC=tl.float32, BATCHED=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
    return kernel, grid, sizes, meta


_FAST_LINEAR_PLANS = H.Plans()
_NOT_FAST = object()  # a plan key the fast path leaves to the general one


def _fast_linear(x, weight, bias, act, store_z=False):
    """(y, z) of linear_forward's common case: contiguous torch tensors of one
    float16/bfloat16/float32 dtype on one device, the GPU tiles; z the pre-activation
    when store_z, else None. None for anything else, which then takes the general path
    (its checks, copies and error messages). Per call: one plan lookup keyed by the
    shapes, dtypes and devices, three contiguity checks, the allocation of y (and z), a
    bound launch (_Launch). _linear calls it for CUDA tensors only: host time is what
    the product waits on there (4096x1024 @ 1024x2048 is ~29 us of GPU work, a 17-row
    one a few); tests call it on the CPU too, which checks its launch arguments against
    the general path's."""
    T = H.torch
    if T is None or not isinstance(x, T.Tensor) or not isinstance(weight, T.Tensor):
        return None
    if bias is None:
        key = (x.shape, weight.shape, x.dtype, weight.dtype, x.get_device(), weight.get_device(), act, store_z)
    elif isinstance(bias, T.Tensor):
        key = (x.shape, weight.shape, x.dtype, weight.dtype, x.get_device(), weight.get_device(), act, store_z,
               bias.shape, bias.dtype, bias.get_device())
    else:
        return None
    plan = _FAST_LINEAR_PLANS.get(key)
    if plan is None:
        plan = _FAST_LINEAR_PLANS.remember(key, _fast_linear_plan(x, weight, bias, act, store_z))
    if plan is _NOT_FAST or not (x.is_contiguous() and weight.is_contiguous() and
                                 (bias is None or bias.is_contiguous())):
        return None
    y = plan.new_y()
    z = plan.new_z() if store_z else None
    if not plan.empty:
        plan.launch(x, weight, bias if bias is not None else x, y, z if z is not None else y)
    return y, z


def _fast_linear_plan(x, weight, bias, act, store_z):
    """_FastLinear for these tensors' shapes, dtypes and devices, or _NOT_FAST."""
    T = H.torch
    dt = x.dtype
    if dt not in (T.float16, T.bfloat16, T.float32) or weight.dtype != dt or weight.device != x.device or \
            bias is not None and (bias.dtype != dt or bias.device != x.device):
        return _NOT_FAST
    if weight.dim() != 2 or x.dim() < 2:
        return _NOT_FAST
    n, k = weight.shape
    if k == 0 or n == 0 or x.shape[-1] != k or (bias is not None and tuple(bias.shape) != (n,)):
        return _NOT_FAST
    return _FastLinear(x, weight, bias, act, store_z)


def _linear_fast(x, weight, bias, act):
    """_fast_linear's y (None: the general path's case)."""
    r = _fast_linear(x, weight, bias, act)
    return r[0] if r is not None else None


def _linear(x, weight, bias, act):
    AG = H.autograd()
    if AG.wants_grad(x, weight, bias):
        return AG.Linear.apply(x, weight, bias, act)
    if getattr(x, "is_cuda", False):
        r = _fast_linear(x, weight, bias, act)
        if r is not None:
            return r[0]
    return _linear_general(x, weight, bias, act, False)[0]


def linear_relu(x, weight, bias=None):
    """relu(x @ weight^T + bias), weight (out_features, in_features) as torch.nn.Linear;
    bias and ReLU are applied to the accumulator tile inside the matmul."""
    return _linear(x, weight, bias, ACT_RELU)


def linear_gelu(x, weight, bias=None, approximate="none"):
    """gelu(x @ weight^T + bias) (erf form, or approximate='tanh'), fused as linear_relu."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"tessera.kernels.linear_gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _linear(x, weight, bias, ACT_GELU_TANH if approximate == "tanh" else ACT_GELU)
