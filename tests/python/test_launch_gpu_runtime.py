"""The GPU launch runtime: the C++ launch path with torch CUDA tensors and streams,
DLPack and CuPy arrays, device checks, CUDA errors naming the kernel (launch limits,
shared memory, a sticky error and the recovery after it or, where the driver
refuses one, the clear error of every later call, in a subprocess) and kernels
on cuda:1. Skipped without a GPU (run by scripts/gpu_round.sh)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera._core import _C
from launch_counting import CountingLauncher  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@tessera.kernel
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class DLPackOnly:
    """Only the DLPack protocol of the wrapped array."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class CudaInterfaceOnly:
    """Only __cuda_array_interface__ and a dtype: no device attribute, so the device
    comes from the driver (cuPointerGetAttribute)."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.dtype = np.dtype(str(tensor.dtype).replace("torch.", ""))

    @property
    def __cuda_array_interface__(self):
        return self._tensor.__cuda_array_interface__


def _operands(n, device="cuda"):
    x = torch.randn(n, device=device)
    return x, torch.randn(n, device=device), torch.full((n,), float("nan"), device=device)


def test_cached_cuda_launch_runs_in_cpp():
    add._compiled.clear()
    with CountingLauncher(add) as py:
        for _ in range(4):
            x, y, out = _operands(1000)
            add[(8,)](x, y, out, 1000, BLOCK=128)
            torch.testing.assert_close(out, x + y)
        assert py.calls == 1
    assert add._fast_path_size() == 1


def test_misaligned_pointer_is_its_own_specialization():
    add._compiled.clear()
    base = torch.randn(1001, device="cuda")
    y, out = torch.randn(1000, device="cuda"), torch.empty(1000, device="cuda")
    for _ in range(2):
        add[(8,)](base[1:], y, out, 1000, BLOCK=128)     # 4-byte aligned only
        torch.testing.assert_close(out, base[1:] + y)
        add[(8,)](base[:1000], y, out, 1000, BLOCK=128)  # 16-byte aligned
        torch.testing.assert_close(out, base[:1000] + y)
    assert add._fast_path_size() == 2


def test_explicit_and_current_streams():
    s = torch.cuda.Stream()
    for _ in range(2):
        x, y, out = _operands(4096)
        torch.cuda.synchronize()
        add[(32,)](x, y, out, 4096, BLOCK=128, stream=s.cuda_stream)
        s.synchronize()
        torch.testing.assert_close(out, x + y)
        x, y, out = _operands(4096)
        torch.cuda.synchronize()
        with torch.cuda.stream(s):  # the current torch stream, without stream=
            add[(32,)](x, y, out, 4096, BLOCK=128)
        s.synchronize()
        torch.testing.assert_close(out, x + y)


def test_dlpack_cuda_arrays():
    for _ in range(2):
        x, y, out = _operands(300)
        add[(3,)](DLPackOnly(x), y, DLPackOnly(out), 300, BLOCK=128)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y)


def test_cuda_array_interface_without_a_device_attribute():
    for _ in range(2):
        x, y, out = _operands(300)
        add[(3,)](CudaInterfaceOnly(x), y, CudaInterfaceOnly(out), 300, BLOCK=128)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y)


def test_cupy_arrays():
    cp = pytest.importorskip("cupy")
    for _ in range(2):
        x = cp.arange(500, dtype=cp.float32)
        y = cp.ones(500, dtype=cp.float32)
        out = cp.zeros(500, dtype=cp.float32)
        add[(4,)](x, y, out, 500, BLOCK=128)
        cp.cuda.runtime.deviceSynchronize()
        np.testing.assert_array_equal(cp.asnumpy(out), np.arange(500, dtype=np.float32) + 1)


def test_tessera_arrays_on_the_gpu():
    x = np.arange(256, dtype=np.float32)
    for _ in range(2):
        out = tessera.zeros(256, device="cuda")
        add[(2,)](tessera.from_numpy(x, "cuda"), tessera.from_numpy(x, "cuda"), out, 256, BLOCK=128)
        tessera.synchronize("cuda:0")
        np.testing.assert_array_equal(out.numpy(), 2 * x)


@pytest.mark.parametrize("host", [lambda n: np.zeros(n, np.float32), lambda n: torch.zeros(n),
                                  lambda n: DLPackOnly(np.zeros(n, np.float32))])
def test_host_array_in_a_gpu_launch_names_the_argument(host):
    x, y, _ = _operands(16)
    for _ in range(2):
        with pytest.raises(ValueError) as e:
            add[(1,)](x, y, host(16), 16, BLOCK=16)
        msg = str(e.value)
        assert msg.startswith("kernel add: arrays on different devices"), msg
        assert "'out' (position 2) on cpu" in msg and "'x' (position 0), 'y' (position 1) on cuda:0" in msg, msg


def _compiled_add():
    x, y, out = _operands(16)
    ck = add[(1,)](x, y, out, 16, BLOCK=16)
    torch.cuda.synchronize()
    return ck, (x, y, out, 16)


def test_shared_memory_beyond_the_device_limit_is_refused_at_load():
    ck, _ = _compiled_add()
    with pytest.raises(tessera.CudaError, match=r"kernel add needs 1000000 bytes of shared memory per block, "
                                                r"but cuda:0 .* allows at most \d+"):
        _C.cuda_load(0, ck.binary, ck.entry_symbol, 1_000_000)


def test_more_threads_than_the_kernel_allows():
    ck, args = _compiled_add()
    handle = ck._fast_target[2]
    with pytest.raises(tessera.CudaError, match=r"kernel add can run at most 128 threads per block on cuda:0 "
                                                r".*but this launch asks for 2048 \(num_warps=64\)"):
        _C.cuda_launch(0, handle, 1, 1, 1, 2048, 0, 0, args, ck.kinds)
    assert _C.cuda_synchronize(0) is None  # not sticky: the context is fine


def test_too_much_dynamic_shared_memory_at_launch():
    ck, args = _compiled_add()
    handle, threads = ck._fast_target[2], ck._fast_target[3]
    # INVALID_VALUE on current drivers; OUT_OF_RESOURCES is the other answer a driver may give
    with pytest.raises(tessera.CudaError, match=r"cuLaunchKernel failed: CUDA_ERROR_(INVALID_VALUE|LAUNCH_OUT_OF_"
                                                r"RESOURCES).*kernel add.*400000 bytes of dynamic shared memory") as e:
        _C.cuda_launch(0, handle, 1, 1, 1, threads, 400_000, 0, args, ck.kinds)
    assert not e.value.sticky
    x, y, out = _operands(64)  # and the device still works
    add[(1,)](x, y, out, 64, BLOCK=64)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)


STICKY_SCRIPT = r'''
import sys
sys.modules["torch"] = None  # tessera.Array only: torch keeps state the reset would invalidate
import numpy as np
import tessera
import tessera.language as tl


@tessera.kernel
def wild_store(out, offset, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offset + offs, tl.zeros((BLOCK,), tl.float32) + 1.0)


@tessera.kernel
def add_one(x, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + 1.0, mask=m)


def good_launch():
    x = tessera.from_numpy(np.arange(64, dtype=np.float32), "cuda")
    out = tessera.zeros(64, device="cuda")
    add_one[(1,)](x, out, 64, BLOCK=64)
    tessera.synchronize()
    return bool(np.array_equal(out.numpy(), np.arange(64, dtype=np.float32) + 1))


print("before", good_launch(), flush=True)
bad = tessera.zeros(64, device="cuda")
wild_store[(1,)](bad, 1 << 40, BLOCK=64)  # 4 TB past the allocation: an illegal address
try:
    tessera.synchronize()
    print("no error", flush=True)
except tessera.CudaError as e:
    print("error", e.sticky, e.code, str(e).replace("\n", " "), flush=True)
def attempt(label):
    """True if the launch worked; False (and says so) if the device stays unusable."""
    try:
        print(label, good_launch(), flush=True)
        return True
    except tessera.CudaError as e:
        print(label, "unusable", e.sticky, "restart the process" in str(e), flush=True)
        return False


recovered = attempt("after")
recovered = attempt("after again") and recovered
if not recovered:
    sys.exit(0)  # the driver keeps the device unusable in this process: nothing more to try

# Without a synchronize: the next driver call (an allocation, the launch, or the
# synchronize) reports the error; the message still names wild_store.
bad = tessera.zeros(64, device="cuda")
wild_store[(1,)](bad, 1 << 40, BLOCK=64)
import time
time.sleep(0.5)  # let the fault happen before the next call
try:
    print("second no error", good_launch(), flush=True)
except tessera.CudaError as e:
    print("second error", e.sticky, "wild_store" in str(e), flush=True)
print("after second", good_launch(), flush=True)
'''


def test_sticky_error_names_the_kernel_and_the_process_recovers(tmp_path):
    script = tmp_path / "sticky.py"
    script.write_text(STICKY_SCRIPT)
    frontend = os.path.dirname(os.path.dirname(os.path.abspath(tessera.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([frontend, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines[0] == "before True", lines
    assert lines[1].startswith(("error True 700 ", "error True 719 ")), lines  # illegal address / launch failed
    assert "CUDA_ERROR_" in lines[1], lines[1]
    assert "the last kernel Tessera launched on cuda:0 was wild_store" in lines[1], lines[1]
    assert "reset the primary context of cuda:0" in lines[1], lines[1]
    if "refuses to recreate" in lines[1]:
        # The driver keeps the device unusable in this process (the H100 driver does,
        # as NVIDIA documents for sticky errors): the first error says to restart the
        # process, and every later call says so too, as a sticky CudaError.
        assert "restart the process to use cuda:0 again" in lines[1], lines[1]
        assert lines[2:] == ["after unusable True True", "after again unusable True True"], lines
        return
    assert "later launches with new arrays work" in lines[1], lines[1]
    assert lines[2:4] == ["after True", "after again True"], lines
    # The error may surface at the allocation, the launch or the synchronize; it is
    # sticky wherever it surfaces, names the kernel, and the process recovers.
    assert lines[4] == "second error True True", lines
    assert lines[5] == "after second True", lines


@tessera.kernel
def scale(x, out, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * a, mask=m)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_kernels_run_on_the_device_of_their_arguments():
    for dev in ("cuda:1", "cuda:0", "cuda:1", "cuda:0"):
        x = torch.arange(1000, device=dev, dtype=torch.float32)
        out = torch.full_like(x, float("nan"))
        scale[(8,)](x, out, 3.0, 1000, BLOCK=128)
        torch.cuda.synchronize(dev)
        torch.testing.assert_close(out, 3 * x)
    assert scale._fast_path_size() == 2, "one specialization (and loaded module) per device"
    x = torch.arange(1000, device="cuda:1", dtype=torch.float32)
    out = torch.zeros_like(x)
    scale[(8,)](CudaInterfaceOnly(x), CudaInterfaceOnly(out), 2.0, 1000, BLOCK=128)  # device from the driver
    torch.cuda.synchronize("cuda:1")
    torch.testing.assert_close(out, 2 * x)
    a = tessera.from_numpy(np.arange(100, dtype=np.float32), "cuda:1")
    b = tessera.zeros(100, device="cuda:1")
    scale[(1,)](a, b, 2.0, 100, BLOCK=128)
    tessera.synchronize("cuda:1")
    np.testing.assert_array_equal(b.numpy(), 2 * np.arange(100, dtype=np.float32))
    with pytest.raises(ValueError, match=r"kernel scale: arrays on different devices.*'cuda:0', 'cuda:1'.*"
                                         r"'x' \(position 0\) on cuda:0; 'out' \(position 1\) on cuda:1"):
        scale[(1,)](torch.zeros(4, device="cuda:0"), torch.zeros(4, device="cuda:1"), 1.0, 4, BLOCK=16)
