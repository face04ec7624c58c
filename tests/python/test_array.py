"""tessera.Array on the CPU (and on a GPU when one is present)."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera._core import _C


@tessera.kernel
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def devices():
    out = ["cpu"]
    if _C.cuda_available():
        out.append(pytest.param("cuda", marks=pytest.mark.gpu))
    return out


@pytest.mark.parametrize("device", devices())
def test_round_trip_and_launch(device):
    x = np.arange(1000, dtype=np.float32)
    a = tessera.from_numpy(x, device=device)
    out = tessera.zeros(1000, np.float32, device=device)
    assert a.shape == (1000,) and a.dtype == np.float32 and a.nbytes == 4000
    scale_kernel[(tessera.cdiv(1000, 256),)](a, out, 1000, BLOCK=256)
    np.testing.assert_array_equal(out.numpy(), 2 * x)
    np.testing.assert_array_equal(a.numpy(), x)


def test_empty_and_zeros_shapes():
    z = tessera.zeros((3, 5), np.int32)
    assert z.shape == (3, 5) and (z.numpy() == 0).all()
    e = tessera.empty(7, np.float64)
    assert e.numpy().shape == (7,)


def test_unknown_device_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        tessera.empty(4, device="tpu")


def test_gpu_array_without_a_gpu_is_a_clear_error():
    if _C.cuda_available():
        pytest.skip("this machine has a usable CUDA driver")
    with pytest.raises(RuntimeError, match="cannot allocate on cuda:0"):
        tessera.zeros(4, device="cuda")
