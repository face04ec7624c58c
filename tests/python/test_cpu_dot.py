"""Compiled CPU path, tl.dot against numpy: f32 (ieee and the tf32 default), f16, bf16
(cast inside the kernel), f64 and int8 operands; fp32 accumulation; acc=; out_dtype;
tile shapes from 1 to 128; a full tiled matmul kernel with a K loop, masks and
strides on odd sizes; the packed-panel paths (tiles large enough that f16/bf16/int8
operands are widened once into packed panels), both accumulator forms, and the AVX2
blocking (TESSERA_CPU=haswell, in a subprocess)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import ON_GPU, bf16_round, poisoned, run_interpreted


@tessera.kernel
def dot_tile_kernel(a_ptr, b_ptr, acc_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                    CAST: tl.constexpr, USE_ACC: tl.constexpr, PREC: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if CAST != "none":                      # (not `is not None`: the interpreter wraps None)
        a = a.to(CAST)
        b = b.to(CAST)
    if USE_ACC:
        acc = tl.load(acc_ptr + rm[:, None] * N + rn[None, :])
        c = tl.dot(a, b, acc=acc, input_precision=PREC)
    else:
        c = tl.dot(a, b, input_precision=PREC)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def _operands(M, N, K, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return (rng.integers(-128, 128, (M, K)).astype(dtype), rng.integers(-128, 128, (K, N)).astype(dtype))
    return (rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype))


def _check_float(c, a64, b64, acc64, unit_roundoff, K):
    ref = a64 @ b64 + acc64
    bound = (2 * K + 2) * unit_roundoff * (np.abs(a64) @ np.abs(b64) + np.abs(acc64)) + 1e-300
    err = np.abs(c.astype(np.float64) - ref)
    assert (err <= bound).all(), f"max error {err.max()} exceeds bound {bound[np.argmax(err - bound)]}"


SHAPES = [(16, 16, 16), (32, 64, 16), (64, 32, 128), (128, 128, 32), (16, 128, 64), (1, 1, 1), (2, 4, 8),
          (8, 1, 32), (1, 16, 4)]


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_dot_f32_ieee_shapes(M, N, K):
    a, b = _operands(M, N, K, np.float32, M * N + K)
    acc = np.random.default_rng(1).standard_normal((M, N)).astype(np.float32)
    c = poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, acc, c, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    _check_float(c, a.astype(np.float64), b.astype(np.float64), acc.astype(np.float64), 2.0**-24, K)


@pytest.mark.parametrize("M,N,K", [(16, 16, 16), (64, 32, 128)])
def test_dot_f32_default_precision_is_tf32_or_better(M, N, K):
    a, b = _operands(M, N, K, np.float32, 2)
    c = poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, a, c, M=M, N=N, K=K, CAST="none", USE_ACC=False, PREC=None)
    _check_float(c, a.astype(np.float64), b.astype(np.float64), 0.0, 2.0**-11, K)   # tf32: 10-bit mantissa


@pytest.mark.parametrize("M,N,K", [(16, 16, 16), (32, 64, 16), (128, 128, 32), (64, 16, 128)])
def test_dot_f16_inputs_accumulate_in_f32(M, N, K):
    a, b = _operands(M, N, K, np.float16, 3)
    acc = np.ones((M, N), np.float32)
    c = poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, acc, c, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    # products of f16 are exact in f32: only the f32 sums round
    _check_float(c, a.astype(np.float64), b.astype(np.float64), 1.0, 2.0**-24, K)


def test_dot_f16_sum_exceeds_f16_range_in_f32_accumulator():
    M = N = K = 16
    a = np.full((M, K), 200.0, np.float16)
    b = np.full((K, N), 30.0, np.float16)                     # 16 * 6000 = 96000 > f16 max
    c = poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, a, c, M=M, N=N, K=K, CAST="none", USE_ACC=False, PREC="ieee")
    np.testing.assert_array_equal(c, np.full((M, N), 96000.0, np.float32))


@pytest.mark.parametrize("M,N,K", [(16, 16, 16), (64, 32, 64), (32, 128, 16)])
def test_dot_bf16_via_casts(M, N, K):
    a, b = _operands(M, N, K, np.float32, 4)
    c = poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, a, c, M=M, N=N, K=K, CAST=tl.bfloat16, USE_ACC=False, PREC="ieee")
    _check_float(c, bf16_round(a).astype(np.float64), bf16_round(b).astype(np.float64), 0.0, 2.0**-24, K)


@pytest.mark.parametrize("M,N,K", [(16, 16, 16), (32, 16, 64)])
def test_dot_f64(M, N, K):
    a, b = _operands(M, N, K, np.float64, 5)
    acc = np.full((M, N), 0.25)
    c = poisoned((M, N), np.float64)
    dot_tile_kernel[(1,)](a, b, acc, c, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    _check_float(c, a, b, acc, 2.0**-53, K)


@pytest.mark.parametrize("M,N,K", [(16, 16, 16), (32, 64, 128), (1, 8, 4)])
def test_dot_int8_accumulates_in_int32_exactly(M, N, K):
    a, b = _operands(M, N, K, np.int8, 6)
    acc = np.arange(M * N, dtype=np.int32).reshape(M, N) - 1000
    c = poisoned((M, N), np.int32)
    dot_tile_kernel[(1,)](a, b, acc, c, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32) + acc)


@tessera.kernel
def dot_out_f16_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b, out_dtype=tl.float16)
    tl.static_assert(c.dtype == tl.float16)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def test_dot_out_dtype_f16_rounds_the_f32_result():
    M = N = K = 32
    a, b = _operands(M, N, K, np.float16, 7)
    c = poisoned((M, N), np.float16)
    dot_out_f16_kernel[(1,)](a, b, c, M=M, N=N, K=K)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-3, atol=2e-3)


@tessera.kernel
def dot_chain_kernel(a_ptr, b_ptr, c_ptr, d_ptr, BLOCK: tl.constexpr):
    # (A @ B) @ C with a transposed operand and an elementwise op on the intermediate
    r = tl.arange(0, BLOCK)
    idx = r[:, None] * BLOCK + r[None, :]
    a = tl.load(a_ptr + idx)
    b = tl.load(b_ptr + idx)
    c = tl.load(c_ptr + idx)
    ab = tl.dot(a, tl.trans(b), input_precision="ieee")
    d = tl.dot(tl.maximum(ab, 0.0), c, input_precision="ieee")
    tl.store(d_ptr + idx, d)


def test_dot_chain_with_transposed_operand():
    n = 32
    rng = np.random.default_rng(8)
    a, b, c = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(3))
    d = poisoned((n, n), np.float32)
    dot_chain_kernel[(1,)](a, b, c, d, BLOCK=n)
    ref = np.maximum(a.astype(np.float64) @ b.T.astype(np.float64), 0) @ c.astype(np.float64)
    np.testing.assert_allclose(d, ref, rtol=1e-4, atol=1e-4)


# --- full tiled matmul ------------------------------------------------------------------------------
@tessera.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CAST: tl.constexpr,
                  PLUS_EQUALS: tl.constexpr = False):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak
    b_ptrs = b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn
    if CAST == "int8":
        acc = tl.zeros((BM, BN), tl.int32)
    else:
        acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        k_left = K - k * BK
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        if CAST == "bf16":
            a = a.to(tl.bfloat16)
            b = b.to(tl.bfloat16)
        if PLUS_EQUALS:                     # dot from zero, then one add into the carried acc
            acc += tl.dot(a, b, input_precision="ieee")
        else:                               # the carried acc is the dot's accumulator
            acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BK * s_ak
        b_ptrs += BK * s_bk
    c_ptrs = c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn
    tl.store(c_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run_matmul(a, b, out_dtype, BM, BN, BK, cast="none", plus_equals=False):
    M, K = a.shape
    _, N = b.shape
    c = poisoned((M, N), out_dtype)
    isz = a.itemsize
    grid = (tessera.cdiv(M, BM), tessera.cdiv(N, BN))
    matmul_kernel[grid](a, b, c, M, N, K, a.strides[0] // isz, a.strides[1] // isz,
                        b.strides[0] // b.itemsize, b.strides[1] // b.itemsize,
                        c.strides[0] // c.itemsize, c.strides[1] // c.itemsize,
                        BM=BM, BN=BN, BK=BK, CAST=cast, PLUS_EQUALS=plus_equals)
    return c


MATMUL_SIZES = [(1, 1, 1), (17, 33, 65), (128, 128, 128), (100, 64, 300), (257, 129, 77)]


@pytest.mark.parametrize("M,N,K", MATMUL_SIZES)
@pytest.mark.parametrize("blocks", [(32, 32, 32), (64, 16, 16)], ids=lambda b: "x".join(map(str, b)))
def test_tiled_matmul_f32(M, N, K, blocks):
    a, b = _operands(M, N, K, np.float32, M + N + K)
    c = run_matmul(a, b, np.float32, *blocks)
    _check_float(c, a.astype(np.float64), b.astype(np.float64), 0.0, 2.0**-24, K)


@pytest.mark.parametrize("M,N,K", [(17, 33, 65), (128, 64, 256)])
def test_tiled_matmul_f16(M, N, K):
    a, b = _operands(M, N, K, np.float16, 9)
    c = run_matmul(a, b, np.float32, 32, 32, 32)
    _check_float(c, a.astype(np.float64), b.astype(np.float64), 0.0, 2.0**-24, K)


@pytest.mark.parametrize("M,N,K", [(17, 33, 65), (64, 128, 96)])
def test_tiled_matmul_bf16_cast_in_kernel(M, N, K):
    a, b = _operands(M, N, K, np.float32, 10)
    c = run_matmul(a, b, np.float32, 32, 32, 32, cast="bf16")
    _check_float(c, bf16_round(a).astype(np.float64), bf16_round(b).astype(np.float64), 0.0, 2.0**-24, K)


def test_tiled_matmul_int8():
    M, N, K = 37, 70, 200
    a, b = _operands(M, N, K, np.int8, 11)
    c = run_matmul(a, b, np.int32, 32, 32, 32, cast="int8")
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_tiled_matmul_transposed_and_strided_views():
    rng = np.random.default_rng(12)
    base_a = rng.standard_normal((90, 120)).astype(np.float32)
    base_b = rng.standard_normal((80, 70)).astype(np.float32)
    a = base_a[::2, 1::3].T                                   # (40, 45), both strides unusual
    b = base_b[:45, ::2]                                      # (45, 35)
    c = run_matmul(a, b, np.float32, 16, 16, 16)
    _check_float(c, a.astype(np.float64), b.astype(np.float64), 0.0, 2.0**-24, a.shape[1])


def test_dot_agrees_with_interpreter():
    M, N, K = 16, 32, 64
    a, b = _operands(M, N, K, np.float16, 13)
    acc = np.random.default_rng(14).standard_normal((M, N)).astype(np.float32)
    c_c, c_i = poisoned((M, N), np.float32), poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, acc, c_c, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    run_interpreted(dot_tile_kernel, (1,), a, b, acc, c_i, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    np.testing.assert_allclose(c_c, c_i, rtol=1e-5, atol=1e-5)


# --- packed panels ----------------------------------------------------------------------------
# Tiles of 64x128x32: on AVX-512 (8x32 micro-tiles) and AVX2 (6x16) f16/bf16/int8 B panels
# are widened into packed buffers and A is widened once. Odd sizes make every load masked
# (rows, columns and the K tail), so the panels hold zeros past the edges.
PACKED_SIZES = [(65, 130, 47), (128, 256, 96), (3, 129, 33)]


@pytest.mark.parametrize("M,N,K", PACKED_SIZES)
@pytest.mark.parametrize("plus_equals", [False, True], ids=["acc_arg", "plus_equals"])
def test_packed_matmul_f16(M, N, K, plus_equals):
    a, b = _operands(M, N, K, np.float16, M * 7 + K)
    c = run_matmul(a, b, np.float32, 64, 128, 32, plus_equals=plus_equals)
    _check_float(c, a.astype(np.float64), b.astype(np.float64), 0.0, 2.0**-24, K)


@pytest.mark.parametrize("M,N,K", PACKED_SIZES)
@pytest.mark.parametrize("plus_equals", [False, True], ids=["acc_arg", "plus_equals"])
def test_packed_matmul_bf16(M, N, K, plus_equals):
    a, b = _operands(M, N, K, np.float32, M * 5 + K)
    c = run_matmul(a, b, np.float32, 64, 128, 32, cast="bf16", plus_equals=plus_equals)
    _check_float(c, bf16_round(a).astype(np.float64), bf16_round(b).astype(np.float64), 0.0, 2.0**-24, K)


@pytest.mark.parametrize("M,N,K", PACKED_SIZES)
def test_packed_matmul_int8_is_exact(M, N, K):
    a, b = _operands(M, N, K, np.int8, M * 3 + K)
    c = run_matmul(a, b, np.int32, 64, 128, 32, cast="int8", plus_equals=True)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (64, 64, 32)])
def test_packed_dot_tile_f16_with_acc(M, N, K):
    a, b = _operands(M, N, K, np.float16, 21)
    acc = np.random.default_rng(22).standard_normal((M, N)).astype(np.float32)
    c = poisoned((M, N), np.float32)
    dot_tile_kernel[(1,)](a, b, acc, c, M=M, N=N, K=K, CAST="none", USE_ACC=True, PREC="ieee")
    _check_float(c, a.astype(np.float64), b.astype(np.float64), acc.astype(np.float64), 2.0**-24, K)


def test_packed_f16_asm_converts_outside_the_fma_loop():
    """The packed f16 dot converts with vcvtph2ps in the packing loops; the blocks that
    issue the FMAs only load f32 (the GoogleTest checks this per basic block too)."""
    ck = tessera.compile(dot_tile_kernel, "*fp16,*fp16,*fp32,*fp32",
                         {"M": 128, "N": 128, "K": 64, "CAST": "none", "USE_ACC": True, "PREC": "ieee"})
    asm = ck.asm["asm"]
    assert "vcvtph2ps" in asm
    blocks = asm.split("\n.LBB")
    fma_blocks = [blk for blk in blocks if "vfmadd231ps" in blk]
    assert fma_blocks, "no FMA code"
    assert not any("vcvtph2ps" in blk for blk in fma_blocks)


# The AVX2 blocking (6x16 ymm micro-tiles) on this host: TESSERA_CPU=haswell makes the x86
# back end compile for Haswell. The kernels are compiled per process, so the checks run
# in a child process with that variable set (and a cache directory of its own).
_AVX2_CHILD = r"""
import numpy as np, tessera
import test_cpu_dot as T
for (M, N, K) in T.PACKED_SIZES + [(17, 33, 65)]:
    for dt, cast in ((np.float32, "none"), (np.float16, "none"), (np.float32, "bf16"), (np.int8, "int8")):
        a, b = T._operands(M, N, K, dt, M + N)
        for plus in (False, True):
            out = np.int32 if dt == np.int8 else np.float32
            c = T.run_matmul(a, b, out, 64, 128, 32, cast=cast, plus_equals=plus)
            if dt == np.int8:
                np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
            else:
                if cast == "bf16":
                    a64, b64 = T.bf16_round(a).astype(np.float64), T.bf16_round(b).astype(np.float64)
                else:
                    a64, b64 = a.astype(np.float64), b.astype(np.float64)
                T._check_float(c, a64, b64, 0.0, 2.0**-24, K)
ck = tessera.compile(T.dot_tile_kernel, "*fp16,*fp16,*fp32,*fp32",
                     {"M": 128, "N": 128, "K": 64, "CAST": "none", "USE_ACC": True, "PREC": "ieee"})
asm = ck.asm["asm"]
assert "zmm" not in asm and "vfmadd231ps\t%ymm" in asm, "not AVX2 code"
print("AVX2-OK")
"""


def test_avx2_blocking_all_dtypes_in_a_haswell_child(tmp_path):
    env = dict(os.environ, TESSERA_CPU="haswell", TESSERA_CACHE_DIR=str(tmp_path / "cache"))
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _AVX2_CHILD], env=env, cwd=here, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "AVX2-OK" in r.stdout


# --- transposed operands ------------------------------------------------------------------------
# A tile loaded along its rows and transposed (`tl.trans(tl.load(...))`) reaches the dot as a
# transposed buffer: A^T is read in place, B^T is transposed in registers into the packed
# panels. Both, with masks (odd sizes), every float type and the tiny tiles that copy B^T
# element by element (K or N below the vector width).
@tessera.kernel
def matmul_transposed_kernel(a_ptr, b_ptr, c_ptr, M, N, K, TRANS_A: tl.constexpr, TRANS_B: tl.constexpr,
                             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CAST: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float64 if CAST == "f64" else tl.float32)
    for k in range(0, K, BK):
        if TRANS_A:   # A (M, K) stored as A^T (K, M): load (BK, BM) along M, transpose
            a = tl.trans(tl.load(a_ptr + (k + rk[:, None]) * M + rm[None, :],
                                 mask=(k + rk[:, None] < K) & (rm[None, :] < M), other=0.0))
        else:
            a = tl.load(a_ptr + rm[:, None] * K + k + rk[None, :], mask=(rm[:, None] < M) & (k + rk[None, :] < K),
                        other=0.0)
        if TRANS_B:   # B (K, N) stored as B^T (N, K): load (BN, BK) along K, transpose
            b = tl.trans(tl.load(b_ptr + rn[:, None] * K + k + rk[None, :],
                                 mask=(rn[:, None] < N) & (k + rk[None, :] < K), other=0.0))
        else:
            b = tl.load(b_ptr + (k + rk[:, None]) * N + rn[None, :], mask=(k + rk[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
        if CAST == "bf16":
            a = a.to(tl.bfloat16)
            b = b.to(tl.bfloat16)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("trans", [(True, False), (False, True), (True, True)], ids=["At", "Bt", "AtBt"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("M,N,K,blocks", [(65, 130, 47, (64, 128, 32)), (128, 256, 64, (128, 256, 64)),
                                          (3, 5, 7, (4, 2, 2)), (33, 17, 9, (16, 16, 4)), (1, 1, 1, (1, 1, 1))],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_matmul_with_transposed_operands(trans, dtype, M, N, K, blocks):
    ta, tb = trans
    np_dt = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "f64": np.float64}[dtype]
    a, b = _operands(M, N, K, np_dt, M * 31 + N + K)
    a_in = np.ascontiguousarray(a.T) if ta else a
    b_in = np.ascontiguousarray(b.T) if tb else b
    c = poisoned((M, N), np.float64 if dtype == "f64" else np.float32)
    bm, bn, bk = blocks
    launch = lambda: matmul_transposed_kernel[(tessera.cdiv(M, bm), tessera.cdiv(N, bn))](  # noqa: E731
        a_in, b_in, c, M, N, K, TRANS_A=ta, TRANS_B=tb, BM=bm, BN=bn, BK=bk, CAST=dtype)
    if ON_GPU and dtype == "f64" and bm * bn >= 128 * 256:
        # fp64 operands of a 128x256x64 tile need 256-384 KB of shared memory on a GPU:
        # a clear compile error there (the CPU has no such limit).
        with pytest.raises(tessera.CompilationError, match="bytes of shared memory"):
            launch()
        return
    launch()
    if dtype == "bf16":
        a64, b64 = bf16_round(a).astype(np.float64), bf16_round(b).astype(np.float64)
    else:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
    _check_float(c, a64, b64, 0.0, 2.0**-53 if dtype == "f64" else 2.0**-24, K)


@pytest.mark.parametrize("trans", [(True, False), (False, True), (True, True)], ids=["At", "Bt", "AtBt"])
def test_transposed_operands_are_not_gathered(trans):
    # The transposed tiles go to the dot as they are: no gather copies them element by element.
    ck = tessera.compile(matmul_transposed_kernel, "*fp32,*fp32,*fp32,i32,i32,i32",
                         {"TRANS_A": trans[0], "TRANS_B": trans[1], "BM": 64, "BN": 64, "BK": 32, "CAST": "f32"})
    assert "gather" not in ck.asm["llir-opt"]


@pytest.mark.parametrize("trans", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["AB", "AtB", "ABt", "AtBt"])
def test_k_loop_dot_prefetches_the_next_k_step(trans):
    # In a K loop the dot prefetches the rows of the next step's tiles, whichever way they
    # were loaded (results are checked by test_matmul_with_transposed_operands).
    ck = tessera.compile(matmul_transposed_kernel, "*fp32,*fp32,*fp32,i32,i32,i32",
                         {"TRANS_A": trans[0], "TRANS_B": trans[1], "BM": 64, "BN": 64, "BK": 32, "CAST": "f32"})
    assert "llvm.prefetch" in ck.asm["llir-opt"]
    assert "prefetcht1" in ck.asm["asm"]


def test_dot_outside_a_loop_does_not_prefetch():
    ck = tessera.compile(dot_tile_kernel, "*fp32,*fp32,*fp32,*fp32",
                         {"M": 64, "N": 64, "K": 64, "CAST": "none", "USE_ACC": False, "PREC": "ieee"})
    assert "llvm.prefetch" not in ck.asm["llir-opt"] and "prefetcht1" not in ck.asm["asm"]
