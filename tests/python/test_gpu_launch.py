"""Kernels launched on an NVIDIA GPU with torch CUDA tensors (skipped without one).
The same sources as the CPU tests; outputs are poisoned with NaN (integers with -1)
so unwritten elements show. DEV names the device; every check is against torch on
the same tensors, so the tests also pass with DEV = "cpu" on the CPU back end."""
import numpy as np
import pytest

import tessera
import tessera.language as tl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
DEV = "cuda"


@tessera.kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@tessera.kernel
def axpb_kernel(x_ptr, out_ptr, a, b, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(x > 0, a * x + b, tl.exp(x)), mask=mask)


@tessera.kernel
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


@pytest.mark.parametrize("n", [1, 17, 1000, 98_432 + 17])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_vector_add(n, dtype):
    x = torch.rand(n, device="cuda", dtype=dtype)
    y = torch.rand(n, device="cuda", dtype=dtype)
    out = torch.full_like(x, float("nan"))
    add_kernel[(tessera.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    torch.testing.assert_close(out, x + y)


def test_elementwise_with_scalars_and_math():
    n = 4097
    x = torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    axpb_kernel[(tessera.cdiv(n, 256),)](x, out, 2.5, -1.0, n, BLOCK=256)
    torch.testing.assert_close(out, torch.where(x > 0, 2.5 * x - 1.0, torch.exp(x)))


@pytest.mark.parametrize("n_cols", [1, 781, 1024])
def test_softmax_rows(n_cols):
    x = torch.randn(37, n_cols, device="cuda")
    out = torch.full_like(x, float("nan"))
    softmax_kernel[(37,)](out, x, x.stride(0), n_cols, BLOCK=tessera.next_power_of_2(n_cols))
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_cuda_error_names_the_kernel():
    x = torch.rand(16, device="cuda")
    with pytest.raises(ValueError, match="kernel add_kernel"):
        add_kernel[(-1,)](x, x, x, 16, BLOCK=16)


# --- dot: the tutorial matmul with a K loop --------------------------------------------

from matmul_kernels import matmul_kernel  # noqa: E402


def _matmul(a, b, BM=64, BN=64, BK=32):
    M, K = a.shape
    N = b.shape[1]
    c = torch.full((M, N), float("nan"), device=a.device, dtype=torch.float32)
    matmul_kernel[(tessera.cdiv(M, BM), tessera.cdiv(N, BN))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=BM, BN=BN, BK=BK)
    return c


@pytest.mark.parametrize("M,N,K", [(64, 64, 32), (97, 130, 75), (256, 192, 320), (1, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matmul_k_loop(M, N, K, dtype):
    g = torch.Generator(device=DEV).manual_seed(M * 1000 + N + K)
    a = torch.randn(M, K, device=DEV, generator=g).to(dtype)
    b = torch.randn(K, N, device=DEV, generator=g).to(dtype)
    c = _matmul(a, b)
    ref = (a.double() @ b.double()).float()
    if dtype == torch.float16:  # f16 products are exact in the fp32 accumulator
        torch.testing.assert_close(c, ref, rtol=1e-3, atol=1e-4 * K ** 0.5)
    else:  # tl.dot's default input_precision is tf32 (10-bit mantissa), as in Triton
        torch.testing.assert_close(c, ref, rtol=1e-2, atol=2e-3 * K ** 0.5)


def test_matmul_strided_and_transposed_operands():
    a = torch.randn(80, 150, device=DEV)[:, ::2]     # 80 x 75, column stride 2
    b = torch.randn(90, 75, device=DEV).t()           # 75 x 90, transposed
    c = _matmul(a, b, BM=32, BN=32, BK=16)
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-2, atol=2e-2)  # tf32


# --- scan ---------------------------------------------------------------------------

@tessera.kernel
def cumsum_rows_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=0)
    tl.store(out_ptr + row * n + offs, tl.cumsum(x, axis=0, reverse=REVERSE), mask=offs < n)


@tessera.kernel
def cumsum_2d_kernel(x_ptr, out_ptr, AXIS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), axis=AXIS))


@pytest.mark.parametrize("n", [1, 37, 1000, 4096])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_rows_int32_exact(n, reverse):
    x = torch.randint(-100, 100, (5, n), device=DEV, dtype=torch.int32)
    out = torch.full_like(x, -1)
    cumsum_rows_kernel[(5,)](x, out, n, BLOCK=tessera.next_power_of_2(n), REVERSE=reverse)
    ref = torch.cumsum(x.flip(1), 1).flip(1) if reverse else torch.cumsum(x, 1)
    torch.testing.assert_close(out, ref.to(torch.int32))


@pytest.mark.parametrize("n", [17, 1024])
def test_cumsum_rows_float(n):
    x = torch.rand(3, n, device=DEV)
    out = torch.full_like(x, float("nan"))
    cumsum_rows_kernel[(3,)](x, out, n, BLOCK=tessera.next_power_of_2(n), REVERSE=False)
    torch.testing.assert_close(out, torch.cumsum(x.double(), 1).float(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", [(16, 64), (256, 4), (4, 256)])
def test_cumsum_2d(axis, shape):
    x = torch.randint(-50, 50, shape, device=DEV, dtype=torch.int32)
    out = torch.full_like(x, -1)
    cumsum_2d_kernel[(1,)](x, out, AXIS=axis, BM=shape[0], BN=shape[1])
    torch.testing.assert_close(out, torch.cumsum(x, axis).to(torch.int32))


# --- atomics ------------------------------------------------------------------------

@tessera.kernel
def histogram_kernel(x_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + x, tl.full((BLOCK,), 1, tl.int32), mask=mask)


@pytest.mark.parametrize("n,bins,block", [(1, 4, 1024), (100_003, 37, 1024), (5000, 256, 16)])
def test_histogram_matches_bincount(n, bins, block):
    x = torch.randint(0, bins, (n,), device=DEV, dtype=torch.int32)
    hist = torch.zeros(bins, device=DEV, dtype=torch.int32)
    histogram_kernel[(tessera.cdiv(n, block),)](x, hist, n, BLOCK=block)
    torch.testing.assert_close(hist, torch.bincount(x, minlength=bins).to(torch.int32))


@tessera.kernel
def ticket_kernel(counter_ptr, out_ptr):
    tl.store(out_ptr + tl.program_id(0), tl.atomic_add(counter_ptr, 1))  # scalar atomic


def test_scalar_atomic_returns_unique_tickets():
    counter = torch.zeros(1, device=DEV, dtype=torch.int32)
    tickets = torch.full((500,), -1, device=DEV, dtype=torch.int32)
    ticket_kernel[(500,)](counter, tickets)
    assert counter.item() == 500
    torch.testing.assert_close(tickets.sort().values, torch.arange(500, device=DEV, dtype=torch.int32))


@tessera.kernel
def same_address_kernel(ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(old_ptr + offs, tl.atomic_add(ptr + offs * 0, offs + 1))  # every lane hits ptr[0]


@pytest.mark.parametrize("block", [16, 32, 1024])  # 16 and 32: replicated over 128 threads
def test_atomic_lanes_hitting_one_address_act_once_each(block):
    mem = torch.zeros(1, device=DEV, dtype=torch.int32)
    old = torch.full((block,), -1, device=DEV, dtype=torch.int32)
    same_address_kernel[(1,)](mem, old, BLOCK=block)
    assert mem.item() == block * (block + 1) // 2
    # lane i saw the partial sum of the lanes before it: distinct, and old + (i+1) <= total
    assert len(torch.unique(old)) == block
    assert int(old.min()) == 0


@tessera.kernel
def atomic_max_kernel(ptr, val_ptr, old_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(val_ptr + offs, mask=mask)
    tl.store(old_ptr + offs, tl.atomic_max(ptr + offs % 8, v, mask=mask), mask=mask)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_atomic_max_contended(dtype):
    n = 3001
    vals = (torch.randn(n, device=DEV) * 100).to(dtype)
    mem = torch.full((8,), -1000, device=DEV, dtype=dtype)
    old = torch.zeros(n, device=DEV, dtype=dtype)
    atomic_max_kernel[(tessera.cdiv(n, 256),)](mem, vals, old, n, BLOCK=256)
    ref = torch.stack([vals[j::8].max() for j in range(8)])
    torch.testing.assert_close(mem, torch.maximum(ref, torch.full_like(ref, -1000)))
    assert bool((old <= mem[torch.arange(n, device=DEV) % 8]).all())


@tessera.kernel
def cas_kernel(ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(old_ptr + offs, tl.atomic_cas(ptr + offs, offs, offs + 100))


def test_atomic_cas_swaps_where_equal():
    mem = torch.tensor([0, 5, 2, 7] * 32, device=DEV, dtype=torch.int32)  # equal to the index at 0 and 2
    init = mem.clone()
    old = torch.full_like(mem, -1)
    cas_kernel[(1,)](mem, old, BLOCK=128)
    idx = torch.arange(128, device=DEV, dtype=torch.int32)
    torch.testing.assert_close(old, init)
    torch.testing.assert_close(mem, torch.where(init == idx, idx + 100, init))


# --- argmax / argmin (reductions of (value, index) pairs) --------------------------

@tessera.kernel
def argmax_argmin_kernel(x_ptr, imax_ptr, imin_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
    tl.store(imax_ptr + row, tl.argmax(x, axis=0))
    y = tl.load(x_ptr + row * n + offs, mask=offs < n, other=float("inf"))
    tl.store(imin_ptr + row, tl.argmin(y, axis=0))


@pytest.mark.parametrize("n", [1, 100, 1024, 3000])
def test_argmax_argmin_rows(n):
    x = torch.randn(7, n, device=DEV)
    x[0, :] = 1.0                                  # all ties: the first index wins
    imax = torch.full((7,), -1, device=DEV, dtype=torch.int32)
    imin = torch.full((7,), -1, device=DEV, dtype=torch.int32)
    argmax_argmin_kernel[(7,)](x, imax, imin, n, BLOCK=tessera.next_power_of_2(n))
    torch.testing.assert_close(imax, torch.argmax(x, 1).to(torch.int32))
    torch.testing.assert_close(imin, torch.argmin(x, 1).to(torch.int32))


@pytest.mark.parametrize("n", [1024, 1000, 7])
def test_expanded_1d_mask_on_rows(n):
    # 16-byte accesses when n is a multiple of 16 (specialized), 2-byte ones otherwise;
    # masked-off columns keep their poison.
    from test_gpu_compile import rows_copy_expanded_mask_kernel
    x = torch.randn(4, 1024, device=DEV, dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    rows_copy_expanded_mask_kernel[(1,)](x, y, n, BLOCK=1024)
    torch.testing.assert_close(y[:, :n], x[:, :n], rtol=0, atol=0)
    assert torch.isnan(y[:, n:]).all()


# --- What the driver reports of a launched kernel (CompiledKernel.n_regs, n_spills,
# n_max_threads, Triton's names); None where nothing was loaded on a GPU.

@pytest.mark.gpu
def test_register_counts_of_a_launched_gpu_kernel():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")

    @tessera.jit
    def spill(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)

    x = torch.arange(256, device="cuda", dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    ck = spill[(1,)](x, y, BLOCK=256, num_warps=4)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)
    assert 0 < ck.n_regs <= 255
    assert ck.n_spills == 0
    assert ck.n_max_threads >= 128
