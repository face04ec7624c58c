"""Compiling kernels for the GPU without a GPU: tessera.compile(..., target='cuda:90a')
gives PTX that ptxas (from the CUDA toolkit, when installed) assembles."""
import importlib

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import PTXAS, assemble
from tessera.language import dtypes as D

J = importlib.import_module("tessera.jit")  # the module: tessera.jit is also the decorator


# The tutorial's vector add (tutorials/01_vector_add.py).
@tessera.kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


# The tutorial's fused softmax (tutorials/02_fused_softmax.py).
@tessera.kernel
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}


def compile_specialized(kernel, signature, constexprs, attrs, target):
    """What a launch would compile: 16-byte aligned arrays, sizes divisible by 16."""
    names = list(signature)
    arg_types = {n: D.parse_signature_type(t) for n, t in signature.items()}
    options = {"num_warps": 4, "num_stages": 3, "debug": False}
    return J.compile_specialization(kernel, arg_types, constexprs, attrs, options, target, names, use_cache=False)


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80"), ("sm_90a", "sm_90a")])
def test_vector_add_stages_and_ptx(target, arch, tmp_path):
    ck = tessera.compile(add_kernel, signature=ADD_SIG, constexprs={"BLOCK_SIZE": 1024}, target=target)
    assert ck.stage_order == ["tir", "tir-opt", "llir", "llir-opt", "ptx"]
    ptx = ck.asm["ptx"]
    assert ck.binary == ptx.encode()
    assert ck.entry_symbol == "add_kernel"
    assert ".entry add_kernel" in ptx and f".target {arch}" in ptx
    assert ck.metadata["num_warps"] == "4" and ck.metadata["arch"] == arch
    assert "nvptx64-nvidia-cuda" in ck.asm["llir"]
    assemble(ptx, arch, tmp_path)


@tessera.kernel
def rows_copy_expanded_mask_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    r = tl.arange(0, 4)
    c = tl.arange(0, BLOCK)
    m = (c < n)[None, :]  # a 1-D mask expanded and broadcast over the rows
    offs = r[:, None] * BLOCK + c[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0.0), mask=m)


def test_expanded_1d_mask_keeps_16_byte_accesses(tmp_path):
    # (c < n)[None, :] is as constant over runs of 8 fp16 as c[None, :] < n: both give
    # ld/st.global.v4 (the expanded form gave 2-byte accesses).
    ck = tessera.compile(rows_copy_expanded_mask_kernel, signature="*fp16:16,*fp16:16,i32:16",
                         constexprs={"BLOCK": 1024}, target="cuda:90a", num_warps=4)
    ptx = ck.asm["ptx"]
    assert "ld.global.b16" not in ptx and "st.global.b16" not in ptx
    assert ptx.count("ld.global.v4.b32") == 4 and ptx.count("st.global.v4.b32") == 4
    assemble(ptx, "sm_90a", tmp_path)


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80")])
def test_vector_add_specialized_uses_v4_accesses(target, arch, tmp_path):
    attrs = {n: {"divisibility": 16} for n in ADD_SIG}
    ck = compile_specialized(add_kernel, ADD_SIG, {"BLOCK_SIZE": 1024}, attrs, target)
    ptx = ck.asm["ptx"]
    # 1024 floats over 128 threads: each thread moves two runs of 4 per array.
    assert ptx.count("ld.global.v4.f32") == 4, ptx
    assert ptx.count("st.global.v4.f32") == 2, ptx
    assemble(ptx, arch, tmp_path)


def test_vector_add_unspecialized_stays_correct_with_scalar_accesses():
    # Without alignment facts the pointers may be 4-byte aligned only.
    ck = tessera.compile(add_kernel, signature=ADD_SIG, constexprs={"BLOCK_SIZE": 1024}, target="cuda:90a")
    assert "ld.global.v4.f32" not in ck.asm["ptx"]
    assert ck.asm["ptx"].count("ld.global.f32") == 16


@tessera.kernel
def layernorm_fp16_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(m, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (xc * rstd * w + b).to(tl.float16), mask=m)


def test_loads_written_after_reductions_are_issued_before_their_barriers(tmp_path):
    # The early-loads pass: w and b load before the first bar.sync of the mean's block
    # reduction (no LLVM or ptxas pass moves a global load above a barrier), 16 bytes
    # per thread each; the store still comes last.
    ck = tessera.compile(layernorm_fp16_kernel, signature="*fp16:16,*fp16:16,*fp16:16,*fp16:16,i32:16,i32:16,fp32",
                         constexprs={"BLOCK": 4096}, target="cuda:90a", num_warps=8)
    ptx = ck.asm["ptx"]
    first_barrier = ptx.index("bar.sync")
    assert ptx[:first_barrier].count("ld.global.v4.b32") == 6  # x, w, b: two 16-byte loads each
    assert "ld.global" not in ptx[first_barrier:]
    assert ptx.index("st.global.v4.b32") > ptx.rindex("bar.sync")
    tir = ck.asm["tir-opt"]
    loads = [i for i, line in enumerate(tir.splitlines()) if " = load " in line]
    first_reduce = next(i for i, line in enumerate(tir.splitlines()) if " = reduce " in line)
    assert len(loads) == 3 and max(loads) < first_reduce
    assemble(ptx, "sm_90a", tmp_path)


@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_softmax_reduces_with_warp_shuffles(num_warps, tmp_path):
    ck = tessera.compile(softmax_kernel, signature="*fp32,*fp32,i32,i32,i32", constexprs={"BLOCK_SIZE": 1024},
                         target="cuda:90a", num_warps=num_warps)
    ptx = ck.asm["ptx"]
    assert "shfl.sync.bfly.b32" in ptx
    assert f".maxntid {32 * num_warps}, 1, 1" in ptx
    assert ("bar.sync" in ptx) == (num_warps > 1)  # across warps through shared memory
    assemble(ptx, "sm_90a", tmp_path)


def test_dot_too_large_for_shared_memory_is_a_compilation_error_with_the_line():
    # 256x256 + 256x256 f32 operands (512 KB) do not fit the 227 KB an sm_90 block may use.
    @tessera.kernel
    def big_dot(a_ptr, c_ptr, BM: tl.constexpr, BK: tl.constexpr):
        r = tl.arange(0, BM)
        k = tl.arange(0, BK)
        a = tl.load(a_ptr + r[:, None] * BK + k[None, :])
        c = tl.dot(a, tl.trans(a))
        tl.store(c_ptr + r[:, None] * BM + r[None, :], c)

    with pytest.raises(tessera.CompilationError) as e:
        tessera.compile(big_dot, signature="*fp32,*fp32", constexprs={"BM": 256, "BK": 256}, target="cuda:90a")
    assert "at most 227 KB" in str(e.value)
    assert "tl.dot(a, tl.trans(a))" in str(e.value)  # the source line is shown


# The tutorial's matmul without grouping (tests/python/matmul_kernels.py): a K loop, masks.
from matmul_kernels import matmul_kernel  # noqa: E402


def ptxas_verbose(ptx, arch, tmp_path):
    return assemble(ptx, arch, tmp_path, verbose=True)


MMA_INSTR = {
    "fp16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "fp32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",  # tl.dot's default: tf32
}


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80")])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_matmul_uses_tensor_cores_on_ldmatrix_operands(dtype, target, arch, tmp_path):
    ck = tessera.compile(matmul_kernel, signature=f"*{dtype},*{dtype},*fp32" + ",i32" * 9,
                         constexprs={"BM": 64, "BN": 64, "BK": 32}, target=target)
    ptx = ck.asm["ptx"]
    ksteps = 32 // (8 if dtype == "fp32" else 16)
    if dtype == "fp32" and arch == "sm_90a":
        # tf32 with B N-contiguous and BN = 16 x 4 warps: swapped wgmma (C^T = B^T A^T,
        # lower_dot_wgmma_swapped_nvptx.cpp), both operands in a cp.async ring (4-byte .ca
        # copies: unknown strides); B^T's fragments from ld.shared, no register staging of B.
        assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32") == ksteps
        assert "mma.sync" not in ptx and "cvt.rna.tf32.f32" not in ptx and "fma.rn.f32" not in ptx
        assert "cp.async.ca.shared.global" in ptx and "fence.proxy.async" in ptx
        assert ptx.count("bar.sync") == 2  # the ring's prologue and per-iteration barriers
        assemble(ptx, arch, tmp_path)
        return
    # 2x2 warps of 32x32: 2 m-tiles x 4 n-tiles x (32 / k per mma) k-steps, once per K iteration.
    assert ptx.count(MMA_INSTR[dtype]) == 2 * 4 * ksteps, ptx
    assert "ldmatrix.sync.aligned.m8n8.x4" in ptx
    assert ("cvt.rna.tf32.f32" in ptx) == (dtype == "fp32")
    assert "fma.rn.f32" not in ptx
    if dtype == "fp32":
        # Unknown strides: 4-byte elements still fit cp.async (.ca, 4 bytes), so A (K-contiguous in
        # the buffer) goes through the num_stages ring; B (N-contiguous, but tf32 fragments need
        # K-contiguous rows) is staged by registers. Barriers: the ring's prologue and per-iteration
        # one, and B's staging.
        assert "cp.async.ca.shared.global" in ptx and "cp.async.cg" not in ptx
        assert ptx.count("bar.sync") == 3
        assemble(ptx, arch, tmp_path)
        return
    # 16-bit elements with unknown strides: 2-byte runs are below cp.async's 4 bytes, so no ring.
    # One barrier per iteration: staging alternates two copies of the buffers (so no barrier before
    # the stores), and the accumulator is never converted.
    assert "cp.async" not in ptx
    assert ptx.count("bar.sync") == 1
    assert ck.metadata["shared"] == str(2 * 2 * 64 * 32 * 2)
    assemble(ptx, arch, tmp_path)


@pytest.mark.parametrize("num_warps", [4, 8])
def test_k_loop_prefetches_the_next_operands_after_the_mma(num_warps, tmp_path):
    # Loads for iteration k+1 are issued after iteration k's mma (a prologue loads k = 0), so
    # their latency overlaps the tensor-core work; they are predicated on k+1 < trip count.
    ck = tessera.compile(matmul_kernel, signature="*fp16:16,*fp16:16,*fp32:16" + ",i32" * 3 + ",i32:16" * 6,
                         constexprs={"BM": 64, "BN": 64, "BK": 32}, target="cuda:80", num_warps=num_warps)
    ptx = ck.asm["ptx"]
    loop = ptx[ptx.index("bar.sync"):]  # the loop body starts with the staging stores and barrier
    first_mma, last_mma = loop.index("mma.sync"), loop.rindex("mma.sync")
    assert "ld.global" not in loop[:first_mma]       # no load waits in front of this iteration's mma
    assert "ld.global" in loop[last_mma:]            # the next iteration's operands
    assert "ld.global" in ptx[:ptx.index("bar.sync")]  # the prologue's
    assemble(ptx, "sm_80", tmp_path)


@pytest.mark.parametrize("precision,mma_count,instr", [
    ("ieee", 0, "fma.rn.f32"), ("tf32", 8, "cvt.rna.tf32.f32"), ("tf32x3", 24, "sub.rn.f32")])
def test_fp32_dot_input_precisions(precision, mma_count, instr, tmp_path):
    @tessera.kernel
    def dot_prec(a_ptr, b_ptr, c_ptr, PREC: tl.constexpr):
        r = tl.arange(0, 32)
        a = tl.load(a_ptr + r[:, None] * 32 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 32 + r[None, :])
        tl.store(c_ptr + r[:, None] * 32 + r[None, :], tl.dot(a, b, input_precision=PREC))

    ck = tessera.compile(dot_prec, signature="*fp32,*fp32,*fp32", constexprs={"PREC": precision}, target="cuda:80")
    ptx = ck.asm["ptx"]
    # 32x32 over 4 warps: 2x2 warps of 16x16 = 1 m-tile x 2 n-tiles x 4 k-steps of 8.
    assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == mma_count
    assert instr in ptx
    assemble(ptx, "sm_80", tmp_path)


def test_int8_dot_uses_m16n8k32(tmp_path):
    @tessera.kernel
    def dot_i8(a_ptr, b_ptr, c_ptr):
        r = tl.arange(0, 64)
        a = tl.load(a_ptr + r[:, None] * 64 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 64 + r[None, :])
        tl.store(c_ptr + r[:, None] * 64 + r[None, :], tl.dot(a, b))

    ck = tessera.compile(dot_i8, signature="*i8,*i8,*i32", target="cuda:90a")
    assert ck.asm["ptx"].count("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32") == 2 * 4 * 2
    assemble(ck.asm["ptx"], "sm_90a", tmp_path)


@pytest.mark.parametrize("num_warps", [4, 8])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_128x128x32_fp16_matmul_tiles_do_not_spill(num_warps, arch, tmp_path):
    ck = tessera.compile(matmul_kernel, signature="*fp16:16,*fp16:16,*fp32:16" + ",i32" * 3 + ",i32:16" * 6,
                         constexprs={"BM": 128, "BN": 128, "BK": 32}, target="cuda:" + arch[3:],
                         num_warps=num_warps)
    ptx = ck.asm["ptx"]
    assert ptx.count("mma.sync.aligned.m16n8k16") == 128 * 128 * 32 // (16 * 8 * 16 * num_warps)
    assert "ld.local" not in ptx and "st.local" not in ptx
    log = ptxas_verbose(ptx, arch, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "0 bytes stack frame" in log, log


# Flash-attention's inner step: S = Q.K^T, P = exp(S - rowmax) in f16, O = O*alpha + P.V,
# with the running max and sum carried over the loop.
@tessera.kernel
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, n_ctx, BN):
        rn = start + tl.arange(0, BN)
        k = tl.load(k_ptr + rn[:, None] * D + rd[None, :])
        s = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + rn[:, None] * D + rd[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
        m_i = m_new
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l_i[:, None])


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_attention_feeds_p_to_the_second_dot_in_registers(arch, tmp_path):
    ck = tessera.compile(attention_kernel, signature="*fp16:16,*fp16:16,*fp16:16,*fp32:16,i32:16",
                         constexprs={"BM": 128, "BN": 64, "D": 64}, target="cuda:" + arch[3:], num_warps=8)
    ptx = ck.asm["ptx"]
    # Warps on whole rows (8 x 16 rows): Q.K^T and P.V are 1 m-tile x 8 n-tiles x 4 k-steps each.
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 2 * 8 * 4
    # ldmatrix for K^T (4 pairs x 4 k) and V (4 pairs x 4 k) only: P comes from Q.K^T's registers,
    # and Q (loop-invariant) is loaded once, straight into A-fragment registers.
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4") == 16 + 16
    # K (read transposed by ldmatrix) and V go through the num_stages cp.async ring (16-byte copies,
    # 3 issue sites: 2 in the prologue, 1 in the body). Barriers: the ring's prologue and
    # per-iteration one only; the running max and sum stay in the accumulator's row layout (no
    # conversion through shared memory).
    assert ptx.count("cp.async.cg.shared.global") == 2 * 3 * 64 * 64 * 2 // 16 // 256
    assert ptx.count("cp.async.wait_group 1;") == 1
    assert ptx.count("bar.sync") == 2
    log = ptxas_verbose(ptx, arch, tmp_path)
    assert "0 bytes spill stores" in log, log


def test_dynamic_shared_memory_beyond_48kb(tmp_path):
    ck = tessera.compile(matmul_kernel, signature="*fp16:16,*fp16:16,*fp32:16" + ",i32" * 3 + ",i32:16" * 6,
                         constexprs={"BM": 128, "BN": 128, "BK": 128}, target="cuda:90a")
    assert int(ck.metadata["shared"]) == 2 * 128 * 128 * 2  # 64 KB: set at launch as dynamic shared memory
    assert ".extern .shared .align 1024 .b8 tessera_dyn_smem[]" in ck.asm["ptx"]
    assemble(ck.asm["ptx"], "sm_90a", tmp_path)


@tessera.kernel
def cumsum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.program_id(0) * n + offs, tl.cumsum(x, axis=0, reverse=REVERSE), mask=offs < n)


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_compiles_and_assembles(reverse, tmp_path):
    ck = tessera.compile(cumsum_kernel, signature="*fp32,*fp32,i32", constexprs={"BLOCK": 1024, "REVERSE": reverse},
                         target="cuda:90a")
    ptx = ck.asm["ptx"]
    assert "st.shared" in ptx and ptx.count("bar.sync") == 4  # stage, chunk scans, prefixes, read back
    assemble(ptx, "sm_90a", tmp_path)


@tessera.kernel
def histogram_kernel(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + x, tl.full((BLOCK,), 1, tl.int32), mask=mask)


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80")])
def test_histogram_uses_global_atomics(target, arch, tmp_path):
    ck = tessera.compile(histogram_kernel, signature="*i32,*i32,i32", constexprs={"BLOCK": 1024}, target=target)
    ptx = ck.asm["ptx"]
    assert ptx.count("atom.global.add.u32") == 8, ptx  # 1024 keys over 128 threads
    assert ptx.count("fence.acq_rel.gpu") == 2
    assemble(ptx, arch, tmp_path)


@tessera.kernel
def argmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n + offs, mask=offs < n, other=-float("inf"))
    tl.store(out_ptr + tl.program_id(0), tl.argmax(x, axis=0))


def test_argmax_compiles_and_assembles(tmp_path):
    ck = tessera.compile(argmax_kernel, signature="*fp32,*i32,i32", constexprs={"BLOCK": 1024}, target="cuda:90a")
    assert "shfl.sync.bfly.b32" in ck.asm["ptx"]
    assemble(ck.asm["ptx"], "sm_90a", tmp_path)


@tessera.kernel
def print_assert_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.device_print("x: ", x)
    tl.device_assert(x > 0, "x must be positive")


@pytest.mark.parametrize("debug", [False, True])
def test_print_uses_vprintf_and_assert_uses_assertfail_when_debug(debug, tmp_path):
    ck = tessera.compile(print_assert_kernel, signature="*fp32", constexprs={"BLOCK": 64}, target="cuda:90a",
                         debug=debug)
    ptx = ck.asm["ptx"]
    assert "vprintf" in ptx
    assert ("__assertfail" in ptx) == debug
    assemble(ptx, "sm_90a", tmp_path)


def test_gpu_compile_goes_through_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    arg_types = {n: D.parse_signature_type(t) for n, t in ADD_SIG.items()}
    args = (add_kernel, arg_types, {"BLOCK_SIZE": 1024}, {}, {"num_warps": 4, "num_stages": 3, "debug": False},
            "cuda:90a", list(ADD_SIG))
    first = J.compile_specialization(*args)
    again = J.compile_specialization(*args)
    assert not first.from_cache and again.from_cache
    assert again.binary == first.binary and again.asm["ptx"] == first.asm["ptx"]
    assert again.metadata.get("shared") == str(first.metadata.get("shared"))


@pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("which", ["add", "softmax"])
def test_tutorial_kernels_have_no_local_memory_spills(tmp_path, arch, which):
    if which == "add":
        ck = tessera.compile(add_kernel, signature="*fp32:16,*fp32:16,*fp32:16,i32:16",
                             constexprs={"BLOCK_SIZE": 1024}, target="cuda:" + arch[3:])
    else:
        ck = tessera.compile(softmax_kernel, signature="*fp32:16,*fp32:16,i32:16,i32:16,i32",
                             constexprs={"BLOCK_SIZE": 4096}, target="cuda:" + arch[3:], num_warps=16)
    log = assemble(ck.asm["ptx"], arch, tmp_path, verbose=True)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "0 bytes stack frame" in log, log


@tessera.kernel
def exchange_through_global_kernel(buf_ptr, out_ptr, BLOCK: tl.constexpr):
    # Each thread's stores are read back by other threads of the program after the
    # barrier (reversed): the barrier must sit between them.
    offs = tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, offs.to(tl.float32))
    tl.debug_barrier()
    tl.store(out_ptr + offs, tl.load(buf_ptr + (BLOCK - 1 - offs)))


def test_debug_barrier_is_a_bar_sync_between_the_stores_and_the_loads(tmp_path):
    ck = tessera.compile(exchange_through_global_kernel, signature="*fp32:16,*fp32:16", constexprs={"BLOCK": 1024},
                         target="cuda:90a", num_warps=4)
    assert "barrier" in ck.asm["tir-opt"]
    ptx = ck.asm["ptx"]
    first_load = ptx.index("ld.global")
    assert "bar.sync" in ptx[ptx.index("st.global"):first_load]
    assemble(ptx, "sm_90a", tmp_path)


def test_debug_barrier_on_the_cpu_is_nothing_and_the_kernel_runs():
    import numpy as np
    buf, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    exchange_through_global_kernel[(1,)](buf, out, BLOCK=64)
    np.testing.assert_array_equal(out, np.arange(63, -1, -1, dtype=np.float32))


@pytest.mark.gpu
def test_debug_barrier_orders_an_exchange_through_global_memory_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    buf = torch.full((4096,), float("nan"), device="cuda")
    out = torch.full((4096,), float("nan"), device="cuda")
    for _ in range(20):  # without the barrier, a thread would read before the other warps stored
        buf.fill_(float("nan"))
        exchange_through_global_kernel[(1,)](buf, out, BLOCK=4096, num_warps=16)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), torch.arange(4095, -1, -1, dtype=torch.float32))


# CompiledKernel.n_regs / n_spills / n_max_threads come from the driver after a GPU load
# (test_gpu_launch.py); without one they are None.
def test_register_counts_are_none_for_cpu_kernels_and_unlaunched_ptx():
    @tessera.jit
    def fill(y_ptr, BLOCK: tl.constexpr):
        tl.store(y_ptr + tl.arange(0, BLOCK), tl.full([BLOCK], 1.0, tl.float32))

    y = np.zeros(64, np.float32)
    ck = fill[(1,)](y, BLOCK=64)
    assert (ck.n_regs, ck.n_spills, ck.n_max_threads) == (None, None, None)
    ptx = tessera.compile(fill, {"y_ptr": "*fp32:16"}, {"BLOCK": 64}, target="cuda:90a")
    assert ptx.n_regs is None


# --- A tile beyond 1024 elements per thread is refused on the GPU (tile_budget_nvptx.cpp):
# registers cannot hold it and ptxas would take minutes (2048 per thread: 29 s, 4096: 237 s).

_WIDE_SIG = {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16"}


def _wide_softmax(x_ptr, y_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(y_ptr + tl.arange(0, BLOCK), tl.exp(x) / tl.sum(tl.exp(x), axis=0))


def test_a_tile_beyond_the_per_thread_budget_is_a_clear_error_on_the_gpu():
    k = tessera.jit(_wide_softmax)
    with pytest.raises(tessera.CompilationError) as info:
        tessera.compile(k, _WIDE_SIG, {"BLOCK": 1 << 18}, target="cuda:90a", num_warps=4)
    e = info.value
    assert "the tile tile<262144xi32> is 2048 elements per thread with num_warps=4 (128 threads)" in e.message
    assert "refuses more than 1024 elements per thread" in e.message and "num_warps=8 or more" in e.message
    assert e.kernel_name == "_wide_softmax" and "tl.arange(0, BLOCK)" in e.source_line
    assert e.lineno == _wide_softmax.__code__.co_firstlineno + 1


def test_the_same_tile_compiles_with_enough_warps_and_on_the_cpu():
    k = tessera.jit(_wide_softmax)
    assert ".entry _wide_softmax" in tessera.compile(k, _WIDE_SIG, {"BLOCK": 1 << 18}, target="cuda:90a",
                                                     num_warps=8).asm["ptx"]
    x = np.random.default_rng(0).standard_normal(1 << 18).astype(np.float32)
    y = np.full_like(x, np.nan)
    k[(1,)](x, y, BLOCK=1 << 18)
    np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum(), rtol=1e-5, atol=1e-12)


def test_beyond_32_warps_the_message_only_says_to_loop():
    with pytest.raises(tessera.CompilationError) as info:
        tessera.compile(tessera.jit(_wide_softmax), _WIDE_SIG, {"BLOCK": 1 << 22}, target="cuda:90a", num_warps=4)
    assert "loop over it (in kernel" in str(info.value) and "num_warps=" not in info.value.message.split("threads)")[1]
