"""tl.dot on NVIDIA tensor cores (mma.sync), checked on a GPU against torch.

Every combination the NVPTX back end lowers differently:
  * operand types: f16, bf16 (m16n8k16), f32 with input_precision "tf32" (m16n8k8
    after cvt.rna), "tf32x3" (three tf32 mma), "ieee" (exact FMA path), i8 (m16n8k32);
  * tile shapes M, N, K from 16 to 128, num_warps 1/4/8 (warps tiled over M and N,
    or replicated when the tile is one mma);
  * problem sizes that are not tile multiples (masked loads and stores);
  * a K loop carrying the accumulator, acc= from memory, out_dtype=fp16;
  * B K-contiguous (a transposed tensor) and N-contiguous;
  * an elementwise epilogue run on the accumulator registers;
  * chained dots (attention: P = softmax(Q.K^T) in f16 feeds P.V from registers);
  * more than 48 KB of shared memory (dynamic shared memory opt-in).
Outputs start as NaN (integers as a sentinel) so unwritten elements fail the test.
Tolerances: f16/bf16 products are exact in the fp32 accumulator (only the inputs'
rounding, done by the test on both sides, and summation order differ); tf32 keeps
10 mantissa bits, so its error grows like 2^-11 * sqrt(K) * |a||b|; tf32x3 and ieee
are fp32-accurate; int8 is exact.
"""
import pytest

import tessera
import tessera.language as tl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
DEV = "cuda"


@tessera.kernel
def mm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
              ACC_FROM_C: tl.constexpr, EPILOGUE: tl.constexpr, OUT_F16: tl.constexpr, INT: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    c_ptrs = c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if ACC_FROM_C:
        acc = tl.load(c_ptrs, mask=c_mask, other=0.0)
    elif INT:
        acc = tl.zeros((BM, BN), dtype=tl.int32)
    elif OUT_F16:
        acc = tl.zeros((BM, BN), dtype=tl.float16)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0)
        if OUT_F16:
            acc = tl.dot(a, b, acc, out_dtype=tl.float16)
        else:
            acc = tl.dot(a, b, acc, input_precision=PREC)
    if EPILOGUE:  # bias + relu on the accumulator registers, before the store
        bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
        acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(c_ptrs, acc, mask=c_mask)


TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "i8": torch.int8}


def run_mm(a, b, BM, BN, BK, prec="tf32", c_init=None, epilogue=False, bias=None, out_f16=False, num_warps=4):
    M, K = a.shape
    N = b.shape[1]
    is_int = a.dtype == torch.int8
    if c_init is not None:
        c = c_init.clone()
    elif is_int:
        c = torch.full((M, N), -12345, device=DEV, dtype=torch.int32)
    else:
        c = torch.full((M, N), float("nan"), device=DEV, dtype=torch.float16 if out_f16 else torch.float32)
    if bias is None:
        bias = torch.zeros(N, device=DEV)
    mm_kernel[(tessera.cdiv(M, BM), tessera.cdiv(N, BN))](
        a, b, c, bias, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=BM, BN=BN, BK=BK, PREC=prec, ACC_FROM_C=c_init is not None, EPILOGUE=epilogue, OUT_F16=out_f16,
        INT=is_int, num_warps=num_warps)
    torch.cuda.synchronize()
    return c


def inputs(M, N, K, dtype, seed, b_transposed=False):
    g = torch.Generator(device=DEV).manual_seed(seed)
    if dtype == "i8":
        a = torch.randint(-128, 128, (M, K), device=DEV, generator=g, dtype=torch.int32).to(torch.int8)
        bt = torch.randint(-128, 128, (N, K) if b_transposed else (K, N), device=DEV, generator=g,
                           dtype=torch.int32).to(torch.int8)
    else:
        a = torch.randn(M, K, device=DEV, generator=g).to(TORCH[dtype])
        bt = torch.randn((N, K) if b_transposed else (K, N), device=DEV, generator=g).to(TORCH[dtype])
    b = bt.t() if b_transposed else bt
    return a, b


def reference(a, b):
    if a.dtype == torch.int8:
        # |sum| <= 128*128*K < 2^53: exact in fp64 (CUDA has no int64 matmul), and no i32 overflow.
        return (a.double() @ b.double()).round().to(torch.int32)
    return a.double() @ b.double()


def check(c, ref, dtype, prec, K):
    assert not torch.isnan(c.float()).any(), "unwritten (NaN) outputs"
    if dtype == "i8":
        assert torch.equal(c, ref), (c - ref).abs().max()
        return
    ref = ref.to(c.dtype) if c.dtype == torch.float16 else ref.float()
    if c.dtype == torch.float16:  # rounded to f16 once at the end
        torch.testing.assert_close(c, ref, rtol=2e-3, atol=2e-3 * K ** 0.5)
    elif dtype == "fp32" and prec == "tf32":
        torch.testing.assert_close(c, ref, rtol=1e-2, atol=2e-3 * K ** 0.5)
    else:  # f16/bf16 products are exact in fp32; tf32x3 and ieee are fp32-accurate
        torch.testing.assert_close(c, ref, rtol=1e-4, atol=1e-4 * K ** 0.5)


CASES = [("fp16", "ieee"), ("bf16", "ieee"), ("fp32", "tf32"), ("fp32", "tf32x3"), ("fp32", "ieee"), ("i8", "ieee")]


# Tile shapes over 16..128 (K per mma: 16 for f16/bf16, 8 for tf32, 32 for i8, so
# BK >= 32 keeps every dtype on tensor cores), sizes that are not tile multiples.
@pytest.mark.parametrize("dtype,prec", CASES)
@pytest.mark.parametrize("BM,BN,BK,num_warps", [(16, 16, 32, 1), (16, 16, 32, 4), (32, 64, 32, 4), (64, 32, 64, 4),
                                                (128, 128, 32, 4), (128, 128, 32, 8), (64, 128, 64, 8),
                                                (128, 64, 128, 4)])
def test_matmul_tiles(dtype, prec, BM, BN, BK, num_warps):
    M, N, K = 200, 136, 160  # masks on M and N; K a multiple of 32 but not of 64 or 128
    a, b = inputs(M, N, K, dtype, seed=BM * 7 + BN * 3 + BK)
    c = run_mm(a, b, BM, BN, BK, prec, num_warps=num_warps)
    check(c, reference(a, b), dtype, prec, K)


@pytest.mark.parametrize("dtype,prec", CASES)
@pytest.mark.parametrize("M,N,K", [(16, 16, 16), (1, 1, 1), (17, 33, 47), (128, 128, 128), (97, 130, 75),
                                   (300, 257, 513)])
def test_matmul_odd_sizes_and_k_loop(dtype, prec, M, N, K):
    a, b = inputs(M, N, K, dtype, seed=M + N + K)
    c = run_mm(a, b, 64, 64, 32, prec)
    check(c, reference(a, b), dtype, prec, K)


@pytest.mark.parametrize("dtype,prec", CASES)
def test_b_k_contiguous(dtype, prec):
    # B is the transpose of an N x K tensor: K runs along memory (ldmatrix without .trans for 16-bit).
    M, N, K = 96, 80, 96
    a, b = inputs(M, N, K, dtype, seed=11, b_transposed=True)
    c = run_mm(a, b, 64, 64, 32, prec)
    check(c, reference(a, b), dtype, prec, K)


@pytest.mark.parametrize("dtype,prec", CASES)
def test_acc_from_memory(dtype, prec):
    M, N, K = 70, 90, 64
    a, b = inputs(M, N, K, dtype, seed=5)
    if dtype == "i8":
        c0 = torch.randint(-1000, 1000, (M, N), device=DEV, dtype=torch.int32)
    else:
        c0 = torch.randn(M, N, device=DEV)
    c = run_mm(a, b, 32, 32, 32, prec, c_init=c0)
    check(c, reference(a, b) + (c0 if dtype == "i8" else c0.double()), dtype, prec, K)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_bias_relu_epilogue(dtype):
    M, N, K = 128, 128, 64
    a, b = inputs(M, N, K, dtype, seed=3)
    bias = torch.randn(N, device=DEV)
    c = run_mm(a, b, 64, 64, 32, "tf32x3", epilogue=True, bias=bias)
    ref = torch.relu(reference(a, b) + bias.double()[None, :])
    check(c, ref, dtype, "tf32x3", K)


def test_out_dtype_fp16_accumulates_in_fp16_layout():
    M, N, K = 64, 64, 64
    a, b = inputs(M, N, K, "fp16", seed=9)
    c = run_mm(a, b, 64, 64, 32, out_f16=True)
    assert c.dtype == torch.float16
    # Each K step's partial sum is rounded to f16 (the loop carries an f16 accumulator).
    torch.testing.assert_close(c.float(), reference(a, b).float(), rtol=1e-2, atol=5e-2)


def test_tf32_is_less_exact_than_tf32x3():
    # Same inputs: tf32 must differ from the fp64 reference more than tf32x3 does (tf32
    # really rounds the inputs; tf32x3 recovers the lost bits).
    M, N, K = 128, 128, 256
    a, b = inputs(M, N, K, "fp32", seed=21)
    ref = reference(a, b).float()
    err1 = (run_mm(a, b, 64, 64, 32, "tf32") - ref).abs().max().item()
    err3 = (run_mm(a, b, 64, 64, 32, "tf32x3") - ref).abs().max().item()
    errx = (run_mm(a, b, 64, 64, 32, "ieee") - ref).abs().max().item()
    assert err1 > 10 * err3, (err1, err3)
    assert err3 < 1e-3 and errx < 1e-3, (err3, errx)


# Beyond 48 KB: 128x128 tiles with BK = 128 stage 64 KB of f16 operands (dynamic
# shared memory; the runtime opts the kernel in).
def test_shared_memory_beyond_48kb():
    M, N, K = 256, 256, 512
    a, b = inputs(M, N, K, "fp16", seed=1)
    c = run_mm(a, b, 128, 128, 128, num_warps=8)
    check(c, reference(a, b), "fp16", "ieee", K)


# --- chained dots: attention --------------------------------------------------------

@tessera.kernel
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, scale, BM: tl.constexpr, BN: tl.constexpr,
                     D: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, n_ctx, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(k_ptr + rn[:, None] * D + rd[None, :])
        s = tl.dot(q, tl.trans(k)) * scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])  # P from registers: no shared memory
        m_i = m_new
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])


@pytest.mark.parametrize("BM,BN,D,num_warps", [(64, 64, 64, 4), (128, 64, 64, 8), (64, 32, 32, 4), (16, 16, 16, 1),
                                               (128, 32, 128, 8)])
def test_attention_chained_dots(BM, BN, D, num_warps):
    n_ctx = 256
    g = torch.Generator(device=DEV).manual_seed(BM + BN + D)
    q = torch.randn(n_ctx, D, device=DEV, generator=g).half()
    k = torch.randn(n_ctx, D, device=DEV, generator=g).half()
    v = torch.randn(n_ctx, D, device=DEV, generator=g).half()
    o = torch.full((n_ctx, D), float("nan"), device=DEV)
    scale = D ** -0.5
    attention_kernel[(n_ctx // BM,)](q, k, v, o, n_ctx, scale, BM=BM, BN=BN, D=D, num_warps=num_warps)
    torch.cuda.synchronize()
    p = torch.softmax((q.double() @ k.double().t()) * scale, dim=1)
    ref = (p @ v.double()).float()
    assert not torch.isnan(o).any()
    # P is rounded to f16 before P.V (as in Triton's flash attention): ~1e-3 relative.
    torch.testing.assert_close(o, ref, rtol=1e-2, atol=1e-2)


@tessera.kernel
def two_dots_kernel(a_ptr, b_ptr, c_ptr, o_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr,
                    P: tl.constexpr):
    # O = (A @ B).to(f16) @ C with no loop: the first result feeds the second's A.
    rm = tl.arange(0, M)
    rk = tl.arange(0, K)
    rn = tl.arange(0, N)
    rp = tl.arange(0, P)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.load(c_ptr + rn[:, None] * P + rp[None, :])
    t = tl.dot(a, b).to(tl.float16)
    tl.store(o_ptr + rm[:, None] * P + rp[None, :], tl.dot(t, c))


@pytest.mark.parametrize("M,K,N,P", [(64, 32, 64, 32), (128, 64, 32, 64), (16, 16, 16, 16)])
def test_dot_of_dot(M, K, N, P):
    g = torch.Generator(device=DEV).manual_seed(M + K + N + P)
    a = (torch.randn(M, K, device=DEV, generator=g) / K ** 0.5).half()
    b = torch.randn(K, N, device=DEV, generator=g).half()
    c = torch.randn(N, P, device=DEV, generator=g).half()
    o = torch.full((M, P), float("nan"), device=DEV)
    two_dots_kernel[(1,)](a, b, c, o, M=M, K=K, N=N, P=P)
    torch.cuda.synchronize()
    t = (a.double() @ b.double()).half().double()  # the kernel rounds the first product to f16 too
    torch.testing.assert_close(o, (t @ c.double()).float(), rtol=1e-3, atol=1e-3 * N ** 0.5)


# --- K loops with carried pointers (the prefetch path) ------------------------------

@tessera.kernel
def mm_carried_ptrs_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    # As bench/gpu_kernels.matmul_kernel: grouped program order, pointers advanced by the loop.
    # The loads of iteration k+1 are issued at the end of iteration k (from the advanced pointers).
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    per_group = GROUP_M * n_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(n_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak
    b_ptrs = b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,num_warps", [
    (512, 384, 256, 128, 128, 32, 8), (300, 200, 70, 64, 64, 32, 4), (64, 64, 16, 64, 64, 32, 4),
    (128, 128, 0, 64, 64, 32, 4), (1000, 520, 1000, 128, 64, 64, 4), (256, 256, 512, 128, 128, 64, 8)])
def test_k_loop_with_carried_pointers(dtype, M, N, K, BM, BN, BK, num_warps):
    a, b = inputs(M, N, K, dtype, seed=M + K)
    c = torch.full((M, N), float("nan"), device=DEV)
    grid = (tessera.cdiv(M, BM) * tessera.cdiv(N, BN),)
    mm_carried_ptrs_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=num_warps)
    torch.cuda.synchronize()
    check(c, reference(a, b), dtype, "tf32", max(K, 1))  # K = 0: a zero loop, C = 0


# --- Multi-stage cp.async pipelining (num_stages ring, pipeline_nvptx.cpp) ---------------

@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,num_warps", [
    (512, 384, 256, 128, 128, 32, 8),   # K a multiple of BK
    (300, 200, 70, 64, 64, 32, 4),      # K % BK = 6: the last stage zero-filled by src-size 0
    (256, 256, 40, 64, 64, 32, 4),      # fewer iterations (2) than stages - 1 copies in flight
    (1000, 520, 1000, 128, 64, 64, 4),  # M/N edges masked
    (64, 64, 16, 64, 64, 32, 4)])       # one iteration
def test_pipelined_k_loop_num_stages(num_stages, dtype, M, N, K, BM, BN, BK, num_warps):
    # Carried pointer tiles advanced each iteration: the ring's addresses run num_stages-1
    # iterations ahead of the dot; masks on K (k-dependent) and on M, N.
    a, b = inputs(M, N, K, dtype, seed=M + K + num_stages)
    c = torch.full((M, N), float("nan"), device=DEV)
    grid = (tessera.cdiv(M, BM) * tessera.cdiv(N, BN),)
    mm_carried_ptrs_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=num_warps,
                                 num_stages=num_stages)
    torch.cuda.synchronize()
    check(c, reference(a, b), dtype, "tf32", max(K, 1))


@pytest.mark.parametrize("num_stages", [2, 3, 4])
@pytest.mark.parametrize("dtype,prec", CASES)
@pytest.mark.parametrize("M,N,K", [(97, 130, 75), (256, 192, 320)])
def test_pipelined_addresses_from_k(num_stages, dtype, prec, M, N, K):
    # Addresses recomputed from the induction variable (mm_kernel); f32 and i8 pipeline A only.
    a, b = inputs(M, N, K, dtype, seed=7 * num_stages + K)
    c = torch.full((M, N), float("nan"), device=DEV) if dtype != "i8" else \
        torch.full((M, N), -12345, device=DEV, dtype=torch.int32)
    bias = torch.zeros(N, device=DEV)
    mm_kernel[(tessera.cdiv(M, 64), tessera.cdiv(N, 64))](
        a, b, c, bias, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=64, BN=64, BK=32 if dtype != "i8" else 64, PREC=prec, ACC_FROM_C=False, EPILOGUE=False, OUT_F16=False,
        INT=dtype == "i8", num_warps=4, num_stages=num_stages)
    torch.cuda.synchronize()
    check(c, reference(a, b), dtype, prec, K)


# --- wgmma (sm_90a): M = 16 * num_warps, f16/bf16 operands from the cp.async ring ------------

@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("M,N,K,BM,BN,BK,num_warps,num_stages", [
    (256, 512, 256, 128, 256, 64, 8, 3),   # m64n256k16, 128-byte swizzle, 2 warpgroups
    (320, 256, 200, 64, 128, 64, 4, 4),    # one warpgroup, K % BK = 8 (zero-filled stage)
    (128, 128, 48, 128, 128, 16, 8, 2),    # BK 16: 32-byte swizzle for A, 16-row B blocks
    (200, 96, 96, 64, 32, 32, 4, 3)])      # m64n32k16, 64-byte swizzle, M/N edges
def test_wgmma_shapes(dtype, M, N, K, BM, BN, BK, num_warps, num_stages):
    a, b = inputs(M, N, K, dtype, seed=M * 3 + K)
    c = torch.full((M, N), float("nan"), device=DEV)
    grid = (tessera.cdiv(M, BM) * tessera.cdiv(N, BN),)
    mm_carried_ptrs_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=num_warps,
                                 num_stages=num_stages)
    torch.cuda.synchronize()
    check(c, reference(a, b), dtype, "ieee", K)
