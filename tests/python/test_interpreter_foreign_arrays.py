"""The interpreter (TESSERA_INTERPRET=1) takes the arrays a compiled launch takes:
torch tensors (CPU: the kernel writes through; CUDA: copied to the host and back),
CuPy / __cuda_array_interface__ and __dlpack__ arrays and tessera.Array, keeping the
layout (strides the caller passes address the same elements) and aliasing (the same
buffer passed twice is one buffer)."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import run_interpreted


@tessera.kernel
def copy_plus_one(src, dst, M, N, s_m, s_n, d_m, d_n, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    v = tl.load(src + rm[:, None] * s_m + rn[None, :] * s_n, mask=mask, other=0)
    tl.store(dst + rm[:, None] * d_m + rn[None, :] * d_n, v + 1, mask=mask)


@tessera.kernel
def shift_left(x, y, n, BLOCK: tl.constexpr):
    # y[i] = x[i + 1]: with x and y the same buffer, reads see the earlier writes' buffer
    offs = tl.arange(0, BLOCK)
    m = offs < n - 1
    tl.store(y + offs, tl.load(x + offs + 1, mask=m), mask=m)


@tessera.kernel
def bf16_double(x, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * 2, mask=m)


class DLPackOnly:
    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class CudaInterfaceOnly:
    def __init__(self, t):
        self._t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


def _check_views(make, to_numpy, sync=lambda: None):
    base = np.arange(12 * 10, dtype=np.float32).reshape(12, 10)
    src = make(base)
    for view, ref in ((src.T, base.T), (src[::3, 1::2], base[::3, 1::2])):
        M, N = ref.shape
        dst = make(np.zeros((N, M), np.float32))
        s_m, s_n = view.stride()
        run_interpreted(copy_plus_one, (1,), view, dst, M, N, s_m, s_n, 1, M, BM=16, BN=16)
        sync()
        np.testing.assert_array_equal(to_numpy(dst), ref.T + 1)


def test_cpu_torch_tensors_are_written_through():
    torch = pytest.importorskip("torch")
    _check_views(torch.from_numpy, lambda t: t.numpy())
    x = torch.arange(10, dtype=torch.float32)
    run_interpreted(shift_left, (1,), x, x, 10, BLOCK=16)                # the same tensor twice
    np.testing.assert_array_equal(x.numpy(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 9])
    xb = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    ob = torch.zeros(3, dtype=torch.bfloat16)
    run_interpreted(bf16_double, (1,), xb, ob, 3, BLOCK=4)
    assert ob.tolist() == [3.0, -4.0, 6.5]


def test_cpu_tessera_array_and_dlpack_arguments():
    x = tessera.from_numpy(np.arange(10, dtype=np.float32))
    run_interpreted(shift_left, (1,), x, x, 10, BLOCK=16)
    np.testing.assert_array_equal(x.numpy(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 9])
    a = np.arange(10, dtype=np.float32)
    out = np.zeros(10, np.float32)
    run_interpreted(shift_left, (1,), DLPackOnly(a), out, 10, BLOCK=16)
    np.testing.assert_array_equal(out[:9], a[1:])


def test_unknown_argument_types_name_what_is_accepted():
    with pytest.raises(Exception, match="torch, CuPy, tessera.Array"):
        run_interpreted(shift_left, (1,), object(), np.zeros(4, np.float32), 4, BLOCK=4)


@pytest.mark.gpu
def test_cuda_arrays_are_copied_to_the_host_and_back():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _check_views(lambda a: torch.from_numpy(a).cuda(), lambda t: t.cpu().numpy(), torch.cuda.synchronize)
    x = torch.arange(10, dtype=torch.float32, device="cuda")
    run_interpreted(shift_left, (1,), x, x, 10, BLOCK=16)                # aliasing survives the copy
    np.testing.assert_array_equal(x.cpu().numpy(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 9])
    big = torch.arange(20, dtype=torch.float32, device="cuda")
    run_interpreted(shift_left, (1,), big[5:], big[4:], 15, BLOCK=16)   # overlapping views of one buffer
    np.testing.assert_array_equal(big.cpu().numpy(), list(range(4)) + list(range(6, 20)) + [18, 19])
    xb = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16, device="cuda")
    ob = torch.zeros(3, dtype=torch.bfloat16, device="cuda")
    run_interpreted(bf16_double, (1,), xb, ob, 3, BLOCK=4)
    assert ob.cpu().tolist() == [3.0, -4.0, 6.5]
    for wrap in (CudaInterfaceOnly, DLPackOnly):
        y = torch.arange(10, dtype=torch.float32, device="cuda")
        out = torch.zeros(10, device="cuda")
        run_interpreted(shift_left, (1,), wrap(y), wrap(out), 10, BLOCK=16)
        np.testing.assert_array_equal(out.cpu().numpy()[:9], np.arange(1, 10))
    ta = tessera.from_numpy(np.arange(10, dtype=np.float32), "cuda")
    run_interpreted(shift_left, (1,), ta, ta, 10, BLOCK=16)
    np.testing.assert_array_equal(ta.numpy(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 9])
