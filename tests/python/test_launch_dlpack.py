"""Arrays passed through DLPack (__dlpack__ / __dlpack_device__) on the CPU: every
dtype kernels take, views with an offset, the cached C++ path, and clear errors for
dtypes and devices a launch cannot take. (CUDA DLPack arrays: test_launch_gpu_runtime.py.)"""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera._core import _C


class DLPackOnly:
    """Exposes only the DLPack protocol of the array it wraps (as jax, paddle or
    mlx arrays look to Tessera)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


@tessera.kernel
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@tessera.kernel
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_through_dlpack(dtype):
    rng = np.random.default_rng(0)
    src = (rng.integers(0, 2, 77) if dtype is np.bool_ else rng.integers(0, 100, 77)).astype(dtype)
    for _ in range(2):  # first launch, then the C++ path
        dst = np.zeros(77, dtype)
        copy_kernel[(2,)](DLPackOnly(src), DLPackOnly(dst), 77, BLOCK=64)
        np.testing.assert_array_equal(dst, src)


def test_dlpack_info_reads_the_descriptor():
    x = np.arange(10, dtype=np.float16)
    data, ir, device, _ = _C.dlpack_info(x[3:])
    assert (ir, device) == ("f16", "cpu")
    assert data == x.ctypes.data + 3 * 2, "byte offsets and views give the first element's address"
    assert _C.dlpack_info(np.zeros(2, np.complex64))[1] is None


def test_offset_views_and_the_cached_path():
    x = np.arange(300, dtype=np.float32)
    y = np.ones(300, np.float32)
    calls = []
    inner = add._launch
    add._launch = lambda *a, **k: (calls.append(1), inner(*a, **k))[1]
    try:
        for start in (0, 5, 16, 5):
            out = np.zeros(100, np.float32)
            add[(1,)](DLPackOnly(x[start:]), DLPackOnly(y), DLPackOnly(out), 100, BLOCK=128)
            np.testing.assert_array_equal(out, x[start:start + 100] + 1)
    finally:
        add._launch = inner
    assert len(calls) == 1, "DLPack arguments are read by the C++ launch path too"


def test_dlpack_mixed_with_numpy_and_torch():
    torch = pytest.importorskip("torch")
    x = np.arange(64, dtype=np.float32)
    for _ in range(2):
        out = torch.zeros(64)
        add[(1,)](DLPackOnly(torch.from_numpy(x)), x, DLPackOnly(out), 64, BLOCK=64)
        np.testing.assert_array_equal(out.numpy(), 2 * x)


def test_torch_utils_dlpack_round_trip():
    torch = pytest.importorskip("torch")
    x = torch.utils.dlpack.from_dlpack(np.arange(32, dtype=np.float32))  # numpy -> torch through DLPack
    out = np.zeros(32, np.float32)
    add[(1,)](x, DLPackOnly(x), out, 32, BLOCK=32)
    np.testing.assert_array_equal(out, 2 * np.arange(32, dtype=np.float32))


def test_unsupported_dtype_names_the_kernel_and_argument():
    out = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"kernel add: argument 'y' \(position 1\): DLPack dtype .*not supported"):
        add[(1,)](out, DLPackOnly(np.zeros(4, np.complex64)), out, 4, BLOCK=16)


class FakeCudaArray:
    """A __cuda_array_interface__ array on GPU 0 (never dereferenced here)."""

    class device:
        id = 0

    dtype = np.dtype("float32")
    __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_cpu_dlpack_array_in_a_gpu_launch_names_both_devices():
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError) as e:
        add[(1,)](FakeCudaArray(), DLPackOnly(x), FakeCudaArray(), 4, BLOCK=16)
    msg = str(e.value)
    assert msg.startswith("kernel add: arrays on different devices"), msg
    assert "'y' (position 1) on cpu" in msg and "'x' (position 0), 'out' (position 2) on cuda:0" in msg, msg


class BrokenDLPack:
    def __dlpack__(self, stream=None):
        raise ValueError("no export today")

    def __dlpack_device__(self):
        return (1, 0)


def test_a_failing_producer_names_the_kernel_and_argument():
    out = np.zeros(4, np.float32)
    for _ in range(2):
        with pytest.raises(TypeError, match=r"kernel add: argument 'x' \(position 0\): reading BrokenDLPack "
                                            r"through DLPack failed: ValueError: no export today"):
            add[(1,)](BrokenDLPack(), out, out, 4, BLOCK=16)
