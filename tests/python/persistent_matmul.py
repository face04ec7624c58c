"""A persistent matmul (a fixed grid of programs, each looping over output tiles with
a stride of the grid size), shared by the persistent-kernel tests and the GPU benchmark.
Undecorated so each test can make its own kernel object (tessera.jit(persistent_matmul))."""
import tessera.language as tl


def persistent_matmul(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    rk = tl.arange(0, BK)
    for tile in range(tl.program_id(0), num_m * num_n, tl.num_programs(0)):
        # Tiles in groups of GROUP_M rows of tiles, column by column (B stays in L2).
        in_group = GROUP_M * num_n
        first_m = (tile // in_group) * GROUP_M
        rows = tl.minimum(num_m - first_m, GROUP_M)
        rm = (first_m + (tile % in_group) % rows) * BM + tl.arange(0, BM)
        rn = ((tile % in_group) // rows) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                        mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                        mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))
