"""Kernels of the GPU benchmark, written once in the Tessera language. bench_gpu.py
also loads this file with the imports switched to Triton, so both frameworks run
exactly the same source (the peer comparison is kernel for kernel)."""
import tessera as jit_module
import tessera.language as tl


@jit_module.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@jit_module.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=m, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=m)


@jit_module.jit
def layernorm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(m, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


@jit_module.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    x = x + tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    # tanh form written with exp (no erf/tanh in triton.language's core): 0.5x(1+tanh(u))
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 1.0 - 2.0 / (tl.exp(2.0 * u) + 1.0)
    tl.store(y_ptr + row * stride + cols, (0.5 * x * (1.0 + t)).to(y_ptr.dtype.element_ty), mask=m)


@jit_module.jit
def row_sum_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@jit_module.jit
def tiny_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1.0)


@jit_module.jit
def _grouped_tile(t, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    # Output tile t in groups of GROUP_M row-blocks walked column by column, so that
    # neighbouring CTAs share A and B tiles in L2: (row-block, column-block).
    n_m = tl.cdiv(M, BM)
    per_group = GROUP_M * tl.cdiv(N, BN)
    first_m = (t // per_group) * GROUP_M
    rows_in_group = tl.minimum(n_m - first_m, GROUP_M)
    return first_m + (t % per_group) % rows_in_group, (t % per_group) // rows_in_group


@jit_module.jit
def _tile_product(a_ptr, b_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, pid_m, pid_n, k_first, k_steps,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, B_ROWS_ALONG_K: tl.constexpr):
    # The fp32 product of A's BM rows and B's BN columns of tile (pid_m, pid_n) over K
    # steps k_first .. k_first + k_steps - 1 of BK each (steps past K load zeros).
    # B_ROWS_ALONG_K: B = W^T with W stored N x K (B's strides are W's swapped): its
    # [BN, BK] tile is loaded along W's rows and transposed for the dot.
    # Addresses are recomputed from k each iteration (no pointer tiles carried around
    # the loop: Tessera would keep every element's 64-bit pointer in registers).
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, k_steps):
        kk = (k_first + k) * BK + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        if B_ROWS_ALONG_K:
            b = tl.trans(tl.load(b_ptr + rn[:, None] * s_bn + kk[None, :] * s_bk,
                                 mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0))
        else:
            b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                        mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    return acc


@jit_module.jit
def _matmul_tile(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, pid_m, pid_n,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, B_ROWS_ALONG_K: tl.constexpr):
    # One BM x BN tile of C = A @ B with fp32 accumulation, stored in C's dtype.
    acc = _tile_product(a_ptr, b_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, pid_m, pid_n, 0, tl.cdiv(K, BK),
                        BM, BN, BK, B_ROWS_ALONG_K)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@jit_module.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # A program per output tile.
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    _matmul_tile(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, pid_m, pid_n, BM, BN, BK, False)


@jit_module.jit
def persistent_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # The same tiles in the same order on a fixed grid (e.g. one program per SM): each
    # program loops over output tiles with a stride of the grid size.
    for t in range(tl.program_id(0), tl.cdiv(M, BM) * tl.cdiv(N, BN), tl.num_programs(0)):
        pid_m, pid_n = _grouped_tile(t, M, N, BM, BN, GROUP_M)
        _matmul_tile(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, pid_m, pid_n, BM, BN, BK, False)


@jit_module.jit
def splitk_matmul_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, count_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                         SPLIT_K: tl.constexpr):
    # Split-K for short, wide products (M = 16..128, N = K = 8192): A is read from L2
    # once per column tile, so wide BN tiles read less, but leave SMs idle (8192 / 256 =
    # 32 tiles); SPLIT_K programs (grid axis 1) share each tile's K steps instead. Each
    # writes its fp32 partial tile to ws (SPLIT_K x M x N, row-major) and counts itself
    # in count[t] (int32, zero before the first launch); the last to arrive sums the
    # partials, stores C and sets count[t] back to 0, so a launch needs no memset.
    t = tl.program_id(0)
    split = tl.program_id(1)
    pid_m, pid_n = _grouped_tile(t, M, N, BM, BN, GROUP_M)
    steps = tl.cdiv(tl.cdiv(K, BK), SPLIT_K)
    acc = _tile_product(a_ptr, b_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, pid_m, pid_n, split * steps, steps,
                        BM, BN, BK, False)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(ws_ptr + split * M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.debug_barrier()  # all of this program's partial is written before it counts itself
    arrived = tl.atomic_add(count_ptr + t, 1, sem="acq_rel")
    if arrived == SPLIT_K - 1:
        # The sum runs over 64-column slices: a whole fp32 tile next to the loaded one
        # would not fit in registers.
        for c in range(0, BN // 64):
            cn = pid_n * BN + c * 64 + tl.arange(0, 64)
            cmask = (rm[:, None] < M) & (cn[None, :] < N)
            total = tl.zeros((BM, 64), dtype=tl.float32)
            for s in range(0, SPLIT_K):
                total += tl.load(ws_ptr + s * M * N + rm[:, None] * N + cn[None, :], mask=cmask, other=0.0)
            tl.store(c_ptr + rm[:, None] * s_cm + cn[None, :] * s_cn, total.to(c_ptr.dtype.element_ty), mask=cmask)
        tl.store(count_ptr + t, 0)


@jit_module.jit
def matmul_nt_kernel(a_ptr, w_ptr, c_ptr, M, N, K, s_am, s_ak, s_wn, s_wk, s_cm, s_cn,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # C = A @ W^T with W stored N x K (nn.Linear's weight): both operands' tiles run
    # along K, the layout tf32 wgmma reads from shared memory (no transpose for 32-bit
    # types). Same program order as matmul_kernel.
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    _matmul_tile(a_ptr, w_ptr, c_ptr, M, N, K, s_am, s_ak, s_wk, s_wn, s_cm, s_cn, pid_m, pid_n, BM, BN, BK, True)


@jit_module.jit
def matmul_block_ptr_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # matmul_kernel through block pointers (tl.make_block_ptr / tl.advance, boundary_check),
    # the form whose tile shape and strides a TMA descriptor states directly.
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BM, BN, GROUP_M)
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (s_am, s_ak), (pid_m * BM, 0), (BM, BK), (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (s_bk, s_bn), (0, pid_n * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(tl.load(a_bp, boundary_check=(0, 1)), tl.load(b_bp, boundary_check=(0, 1)), acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(c_ptr, (M, N), (s_cm, s_cn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
    tl.store(c_bp, acc.to(c_ptr.dtype.element_ty), boundary_check=(0, 1))
