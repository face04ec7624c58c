"""f32 -> f16/bf16 two at a time on NVIDIA GPUs from sm_80 (compiler/codegen/nvptx/
pair_half_conversions_nvptx.cpp): conversions whose results fill adjacent lanes of one
vector store become one cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32. Without a GPU the PTX is
counted and assembled; on a GPU every rounding case (ties, overflow to inf, denormals, NaN)
is compared bit for bit with torch's .half() / .bfloat16(), and distinct values in the two
lanes of each pair check the operand order (the first source goes to the upper half)."""
import os
import re
import sys

import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera.kernels import linear as L
from ptxas_check import assemble

ALIGNED = {"fp16": "*fp32:16,*fp16:16,i32:16", "bf16": "*fp32:16,*bf16:16,i32:16"}
UNALIGNED = {"fp16": "*fp32,*fp16,i32", "bf16": "*fp32,*bf16,i32"}


@tessera.kernel
def narrow_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m).to(out_ptr.dtype.element_ty), mask=m)


def _counts(ptx, dt):
    single = len(re.findall(rf"cvt\.rn\.{dt}\.f32\s", ptx))
    paired = len(re.findall(rf"cvt\.rn\.{dt}x2\.f32\s", ptx))
    return single, paired



@pytest.mark.parametrize("dtype,dt", [("fp16", "f16"), ("bf16", "bf16")])
@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80")])
def test_vector_stores_pair_the_conversions_from_sm80(dtype, dt, target, arch, tmp_path):
    # 1024 elements over 4 warps: 8 per thread, stored as two 4-wide vectors: 4 paired conversions.
    ptx = tessera.compile(narrow_kernel, ALIGNED[dtype], {"BLOCK": 1024}, target=target).asm["ptx"]
    assert _counts(ptx, dt) == (0, 4)
    assemble(ptx, arch, tmp_path)


@pytest.mark.parametrize("dtype,dt", [("fp16", "f16"), ("bf16", "bf16")])
def test_scalar_stores_keep_single_conversions(dtype, dt):
    # Unaligned pointers store element by element: nothing shares a register, nothing to pair.
    ptx = tessera.compile(narrow_kernel, UNALIGNED[dtype], {"BLOCK": 1024}, target="cuda:90a").asm["ptx"]
    assert _counts(ptx, dt) == (8, 0)


def test_before_sm80_conversions_stay_single():
    ptx = tessera.compile(narrow_kernel, ALIGNED["fp16"], {"BLOCK": 1024}, target="cuda:75").asm["ptx"]
    assert _counts(ptx, "f16") == (8, 0)


@pytest.mark.parametrize("dtype,dt", [("fp16", "f16"), ("bf16", "bf16")])
def test_linear_epilogue_converts_two_per_instruction(dtype, dt, tmp_path):
    # The warp-specialized 128x256 linear (8 consumer warps): 128 accumulator elements per
    # thread per tile, all stored in pairs through shared memory: 64 conversions, was 128.
    sig = {p: f"*{dtype}:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("M", "N", "K", "s_ab", "s_am", "s_bb", "s_bn", "s_cb")})
    sig.update(scale="fp32", batches="i32")
    ce = dict(s_ak=1, s_bk=1, A_MMAJOR=False, B_KMAJOR=True, ACT=L.ACT_RELU, HAS_BIAS=True, STORE_Z=False, SCALE=False,
              ACC=tl.float32, BATCHED=False, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=1, WARP_SPECIALIZE=True)
    ptx = tessera.compile(L._persistent_matmul_kernel, sig, ce, target="cuda:90a", num_warps=8,
                          num_stages=4).asm["ptx"]
    assert _counts(ptx, dt) == (0, 64)
    assemble(ptx, "sm_90a", tmp_path)


def _cases(dtype):
    """Ties both ways, values just either side of a tie, overflow to inf and the largest value
    that rounds to a finite one, denormals (a tie to zero among them), signed zeros,
    infinities, NaN; then random bit patterns and normal values; padded to a multiple of 16."""
    f = np.float32
    if dtype == "fp16":
        special = [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, np.nextafter(f(1 + 2.0 ** -11), f(2)), 65504.0, 65519.99,
                   65520.0, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25, 1e-8]
    else:
        special = [1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, np.nextafter(f(1 + 2.0 ** -8), f(2)), 3.3895314e38,
                   3.3961776e38, np.finfo(np.float32).max, 1e-40, 1.4e-45, 9.2e-41]
    special += [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0]
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([np.array(special, np.float32), bits.view(np.float32),
                        rng.standard_normal(100000).astype(np.float32) * 1000])
    x = np.concatenate([x, -x])
    return np.concatenate([x, np.zeros((-len(x)) % 16, np.float32)])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_paired_conversions_match_torch_bit_for_bit(dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
    x = torch.from_numpy(_cases(dtype)).cuda()
    for shift in (0, 1):  # the same values in the other lane of each pair
        xs = torch.roll(x, shift)
        out = torch.full(xs.shape, float("nan"), device="cuda", dtype=tdt)
        narrow_kernel[(tessera.cdiv(xs.numel(), 1024),)](xs, out, xs.numel(), BLOCK=1024)
        ref = xs.to(tdt)
        nan = torch.isnan(ref)
        assert torch.equal(torch.isnan(out), nan)
        got, want = out[~nan].view(torch.int16), ref[~nan].view(torch.int16)
        bad = (got != want).nonzero().flatten()
        assert bad.numel() == 0, f"{bad.numel()} differ, first x = {xs[~nan][bad[:5]].tolist()}"


def _bench_persistent_matmul():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import gpu_kernels  # the benchmark's kernels (bench/gpu_kernels.py)
    return gpu_kernels.persistent_matmul_kernel


@pytest.mark.parametrize("dtype,dt", [("fp16", "f16"), ("bf16", "bf16")])
def test_conversions_reaching_the_store_through_phis_pair(dtype, dt):
    # bench/gpu_kernels.py's persistent matmul rounds its accumulator in the K loop's drain
    # block and reaches the store through phis (a 0 on the edge where no K step ran): the
    # phis pair too, 128x256 over 8 warps = 128 elements per thread, 64 paired conversions.
    sig = ",".join([f"*{dtype}:16"] * 3 + ["i32:16"] * 6)
    ck = tessera.compile(_bench_persistent_matmul(), sig,
                         dict(BM=128, BN=256, BK=64, GROUP_M=8, s_ak=1, s_bn=1, s_cn=1), target="cuda:90a",
                         num_warps=8, num_stages=4)
    assert _counts(ck.asm["ptx"], dt) == (0, 64)
    assert f"phi {'half' if dtype == 'fp16' else 'bfloat'}" not in ck.asm["llir-opt"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("K", [320, 64])
def test_paired_epilogue_rounds_the_accumulator_like_torch(dtype, K):
    # The same kernel storing f32 and storing 16-bit: the 16-bit output must be the f32 one
    # rounded by torch, bit for bit (the accumulation is the same; only the store differs).
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
    M, N = 512, 1024
    g = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(M, max(K, 16), device="cuda", generator=g).to(tdt)[:, :K]
    b = torch.randn(max(K, 16), N, device="cuda", generator=g).to(tdt)[:K]
    kernel = _bench_persistent_matmul()
    outs = {}
    for out_dtype in (torch.float32, tdt):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=out_dtype)
        kernel[(5,)](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                     BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=4)
        outs[out_dtype] = c
    torch.cuda.synchronize()
    want = outs[torch.float32].to(tdt)
    assert not torch.isnan(want).any()
    assert torch.equal(outs[tdt].view(torch.int16), want.view(torch.int16))
