"""An experiment kept with its measurements (bench/results/attention_score_bwd_cluster_h200_s13.md):
attention_score's backward with a thread-block cluster per batch, each ds tile read into
an SM once and dk reduce-scattered over the cluster (tl.cluster_reduce_scatter). It is
correct and it is not used: on an H200 at 8 x 2048 x 2048 x 64 it took 136-230 us against
the shipped flat kernel's 24 (kernels/attention.py). bench/attention_score_gpu.py times
it; tests/python/test_cluster.py checks it on the CPU."""
import tessera
import tessera.language as tl


@tessera.kernel
def score_backward_cluster_kernel(DS, Q, KEY, DQ, DK, M, N, D, s_dm, s_qm, s_kn, scale, rows_q, rows_k,
                                   ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                                   BLOCK_K: tl.constexpr, CLUSTER: tl.constexpr, PARTS: tl.constexpr = 2):
    """attention_score's backward reading each ds tile into an SM once: a cluster of
    CLUSTER programs per batch (M = CLUSTER x BLOCK_M: program x is row block x % CLUSTER
    of batch x // CLUSTER; grid (batch x CLUSTER,)) walks the batch's column blocks in
    step. At column block j each program loads its ds tile (BLOCK_M x BLOCK_K) once and
    uses it twice: dq_i += ds_ij @ k_j, kept in registers over the walk, and its share of
    dk_j, ds_ij^T @ q_i (q_i loaded once), which tl.cluster_reduce_scatter sums over the
    cluster (every row block's share: all of dk_j) in rank order; each program stores its
    BLOCK_K / CLUSTER rows of dk_j. ds, q and k are 2-D arrays of all batches' rows
    (rows_q = batch x M rows of ds and q, rows_k = batch x N of k), read at a scalar row
    and column plus an arange, the form TMA rings take; here the ring stays cp.async and
    both dots run as mma.sync, as q (loop-invariant) is no ring stage, so wgmma is not
    taken. The host checks the layout as for the flat kernel (kernels/attention.py). The flat kernel reads every ds
    tile twice from the L2 (its dq and its dk program): 168 MB through the L2 at
    8 x 2048 x 2048 x 64 against about 100 here -- but every step also moves a
    BLOCK_K x D f32 share through distributed shared memory, as many bytes as its ds tile
    at BLOCK_M = 128 (what bench/results/attention_score_bwd_cluster_h200_s13.md measured)."""
    pid = tl.program_id(0)
    b32 = pid // CLUSTER
    i = pid % CLUSTER
    batch = b32.to(tl.int64)
    rd = tl.arange(0, BLOCK_D)
    ri = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    q_rows = b32 * M + i * BLOCK_M + ri
    q = tl.load(Q + q_rows[:, None] * s_qm + rd[None, :], mask=(q_rows[:, None] < rows_q) & (rd[None, :] < D),
                other=0.0)
    part = tl.arange(0, BLOCK_K // CLUSTER)
    dq = tl.zeros([BLOCK_M, BLOCK_D], ACC)
    for k in tl.range(0, N, BLOCK_K):
        k = tl.multiple_of(k, BLOCK_K)
        ds_cols = k + rk
        ds = tl.load(DS + q_rows[:, None] * s_dm + ds_cols[None, :],
                     mask=(q_rows[:, None] < rows_q) & (ds_cols[None, :] < N), other=0.0)
        k_rows = b32 * N + k + rk
        kt = tl.load(KEY + k_rows[:, None] * s_kn + rd[None, :], mask=(k_rows[:, None] < rows_k) & (rd[None, :] < D),
                     other=0.0)
        dq = tl.dot(ds, kt, dq)
        if PARTS > 0:  # (PARTS: bench/attention_score_gpu.py's cuts, 0 dq alone, 1 no exchange, 2 all)
            share = tl.dot(tl.trans(ds), q)
            if PARTS > 1:
                dk = tl.cluster_reduce_scatter(share.to(tl.float32), CLUSTER) * scale
            else:
                dk = tl.sum(tl.reshape(share, [CLUSTER, BLOCK_K // CLUSTER, BLOCK_D]), 0) * scale
            dk_rows = k + i * (BLOCK_K // CLUSTER) + part
            tl.store(DK + batch * N * D + dk_rows[:, None] * D + rd[None, :], dk.to(DK.dtype.element_ty),
                     mask=rd[None, :] < D)
    dq_rows = i * BLOCK_M + ri
    tl.store(DQ + batch * M * D + dq_rows[:, None] * D + rd[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=rd[None, :] < D)
