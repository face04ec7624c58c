"""End-to-end cases of axis-analysis rules that claimed too much (found by the property
test tests/cpp/test_axis_info_fuzz.cpp): an over-claimed contiguity made x86 load one
contiguous vector where the elements were not one run (wrong data), an over-claimed
divisibility made the GPU lowering emit 16-byte loads of rows that are not 16-byte aligned."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl


@tessera.jit
def rotate(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    src = (offs + 1) % BLOCK  # [1, 2, ..., BLOCK - 1, 0]: runs of BLOCK - 1, not BLOCK
    tl.store(out_ptr + offs, tl.load(x_ptr + src))


@tessera.jit
def negative_remainder(x_ptr, out_ptr, start, BLOCK: tl.constexpr):
    offs = start + tl.arange(0, BLOCK)
    src = offs % BLOCK + BLOCK  # the remainder takes the dividend's sign: -16 % 16 = 0, -15 % 16 = -15
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + src))


@tessera.jit
def rows_by_stride(a_ptr, out_ptr, stride, BM: tl.constexpr, BK: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_k = tl.arange(0, BK)
    rows = offs_m * stride  # divisible by stride's divisor only, not BM times it
    a = tl.load(a_ptr + rows[:, None] + offs_k[None, :])
    tl.store(out_ptr + offs_m[:, None] * BK + offs_k[None, :], a)


@pytest.mark.parametrize("block", [8, 16, 64])
def test_rotated_offsets_modulo_block_are_gathered(block):
    # (arange + 1) % BLOCK was claimed one run of BLOCK: the last lane read x[BLOCK].
    x = np.arange(2 * block, dtype=np.float32)
    out = np.zeros(block, np.float32)
    rotate[(1,)](x, out, BLOCK=block)
    np.testing.assert_array_equal(out, x[(np.arange(block) + 1) % block])


@pytest.mark.parametrize("start", [-16, -32, 0, 16])
def test_remainder_of_negative_offsets(start):
    # start + arange(16) with start a multiple of 16 of unknown sign: was claimed a run.
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(16, np.float32)
    negative_remainder[(1,)](x, out, start, BLOCK=16)
    np.testing.assert_array_equal(out, x[np.fmod(start + np.arange(16), 16) + 16])


@pytest.mark.parametrize("stride", [67, 64])
def test_rows_times_stride_on_cpu(stride):
    a = np.arange(64 * stride + 64, dtype=np.float16) % 251
    out = np.zeros((64, 32), np.float16)
    rows_by_stride[(2,)](a, out, stride, BM=32, BK=32)
    want = np.stack([a[m * stride:m * stride + 32] for m in range(64)])
    np.testing.assert_array_equal(out, want)


def test_rows_times_unknown_stride_load_one_element_at_a_time_in_ptx():
    # An f16 row starts at 2 * stride * row bytes: with nothing known of the stride,
    # only 2-byte loads are safe (16-byte ones were emitted, which fault for odd strides).
    def ptx(sig):
        return tessera.compile(rows_by_stride, sig, dict(BM=32, BK=64), target="cuda:90a", num_warps=4).asm["ptx"]
    loads = set(re.findall(r"ld\.global[\w.]*", ptx("*fp16:16,*fp16:16,i32")))
    assert loads == {"ld.global.b16"}, loads
    # With the stride divisible by 16 the rows are 32-byte aligned: 16-byte loads are sound.
    assert re.search(r"ld\.global[\w.]*\.v4\.b32", ptx("*fp16:16,*fp16:16,i32:16"))


@pytest.mark.gpu
def test_axis_info_cases_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    out = torch.zeros(16, dtype=torch.float32, device="cuda")
    rotate[(1,)](x, out, BLOCK=16)
    assert torch.equal(out.cpu(), x.cpu()[(torch.arange(16) + 1) % 16])
    negative_remainder[(1,)](x, out, -16, BLOCK=16)
    assert torch.equal(out.cpu(), x.cpu()[torch.fmod(torch.arange(-16, 0), 16) + 16])
    for stride in (67, 204, 64):  # odd, 8-byte-aligned rows (the lda = 204 fault), aligned
        a = (torch.arange(64 * stride + 64, device="cuda") % 251).to(torch.float16)
        o = torch.zeros((64, 32), dtype=torch.float16, device="cuda")
        rows_by_stride[(2,)](a, o, stride, BM=32, BK=32)
        want = torch.stack([a[m * stride:m * stride + 32] for m in range(64)])
        assert torch.equal(o, want), stride
