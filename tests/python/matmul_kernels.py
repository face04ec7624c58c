"""The tutorial's matmul (tutorials/03_matrix_multiplication.py, without grouping): a K
loop with masked edges, shared by the GPU tests, with B read as it is stored (K x N rows)
or along W's rows for B = W^T (the NT layout). `matmul` is undecorated so that a test
can make its own kernels of it (tessera.jit(matmul): a fresh cache per kernel object);
`matmul_kernel` is the common one."""
import tessera
import tessera.language as tl


def matmul(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr = None,
           B_ROWS_ALONG_K: tl.constexpr = False):
    # B_ROWS_ALONG_K: B = W^T with W stored N x K (x @ W^T, nn.Linear's layout; B's
    # strides are W's swapped): the [BN, BK] tile is loaded along W's rows, then
    # transposed for the dot. PREC: tl.dot's input_precision (None: its default).
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        if B_ROWS_ALONG_K:
            b = tl.trans(tl.load(b_ptr + rn[:, None] * s_bn + kk[None, :] * s_bk,
                                 mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0))
        else:
            b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                        mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


matmul_kernel = tessera.kernel(matmul)
