"""f32 -> bf16 on NVIDIA GPUs: from sm_80 the hardware's cvt.rn.bf16.f32 (one instruction, round
to nearest even), before it the shared integer rounding of compiler/codegen/common/elementwise.cpp
(~7 instructions per element; it was what every sm_90a bf16 matmul epilogue ran). Without a GPU
the PTX is checked and assembled; on a GPU every rounding case is compared bit for bit with
torch's conversion (NaN as NaN)."""

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble


@tessera.kernel
def to_bf16_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m).to(tl.bfloat16), mask=m)


@pytest.mark.parametrize("target,arch,hardware", [("cuda:90a", "sm_90a", True), ("cuda:80", "sm_80", True),
                                                  ("cuda:75", "sm_75", False)])
def test_f32_to_bf16_uses_the_hardware_conversion_from_sm80(target, arch, hardware, tmp_path):
    ptx = tessera.compile(to_bf16_kernel, "*fp32,*bf16,i32", {"BLOCK": 1024}, target=target).asm["ptx"]
    assert ("cvt.rn.bf16.f32" in ptx) == hardware
    assert ("setp.nan.f32" in ptx) == (not hardware)  # the integer rounding's NaN test
    assemble(ptx, arch, tmp_path)


def _cases():
    """Ties both ways (1 + 2^-8 rounds down to 1, 1 + 3 x 2^-8 up to 1 + 2^-6), values just
    either side of ties, overflow to inf (and the largest value that does not), denormals,
    signed zeros, infinities, NaN, and random values across the exponent range."""
    f = np.float32
    one_ulp = lambda v, d: np.nextafter(f(v), f(d))
    special = [1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, one_ulp(1 + 2.0 ** -8, 2), one_ulp(1 + 2.0 ** -8, 0),
               3.3895314e38, 3.3961776e38, np.finfo(np.float32).max, 1e-40, 1.4e-45, 9.2e-41, 0.0, -0.0,
               np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([np.array(special, np.float32), bits.view(np.float32), rng.standard_normal(100000, np.float32)])
    return np.concatenate([x, -x])


@pytest.mark.gpu
def test_f32_to_bf16_matches_torch_bit_for_bit():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.from_numpy(_cases()).cuda()
    out = torch.full(x.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    to_bf16_kernel[(tessera.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    ref = x.to(torch.bfloat16)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(out), nan)
    got, want = out[~nan].view(torch.int16), ref[~nan].view(torch.int16)
    bad = (got != want).nonzero().flatten()
    assert bad.numel() == 0, f"{bad.numel()} differ, first x = {x[~nan][bad[:5]].tolist()}"


# --- bf16 -> f32 (compiler/codegen/nvptx/widen_bf16_words_nvptx.cpp) ---------------------

@tessera.kernel
def from_bf16_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m).to(tl.float32), mask=m)


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80"), ("cuda:75", "sm_75")])
def test_bf16_lanes_widen_from_their_words(target, arch, tmp_path):
    # A 16-byte load brings 8 bf16 in 4 words; each lane becomes an f32 in one instruction from
    # its word: the low half shifted up (shl 16), the high half masked (and 0xffff0000); no
    # unpacking into 16-bit registers and no cvt.u32.u16.
    ptx = tessera.compile(from_bf16_kernel, "*bf16:16,*fp32:16,i32:16", {"BLOCK": 1024}, target=target,
                          num_warps=4).asm["ptx"]
    assert "ld.global.v4.b32" in ptx
    assert ptx.count("and.b32") >= 4 and ptx.count(", -65536;") == 4 and ptx.count(", 16;") >= 4
    assert "cvt.u32.u16" not in ptx and "mov.b32 \t{%rs" not in ptx
    assemble(ptx, arch, tmp_path)


@pytest.mark.gpu
def test_bf16_to_f32_matches_torch_bit_for_bit():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # Every bf16 bit pattern (NaNs, infinities, denormals, both zeros), then an odd-length tail.
    x = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).cuda()
    x = torch.cat([x, x[:1001]])
    out = torch.full(x.shape, float("nan"), device="cuda")
    from_bf16_kernel[(tessera.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    assert torch.equal(out.view(torch.int32), x.float().view(torch.int32))
