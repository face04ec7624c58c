"""Kernels launched on an NVIDIA GPU with torch CUDA tensors (skipped without one).
The same sources as the CPU tests; outputs are poisoned with NaN so unwritten
elements show."""
import numpy as np
import pytest

import tessera
import tessera.language as tl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


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
