"""The optional C++ reader of torch tensor arguments (_C_torch, frontend/csrc/torch_args.cpp):
launches read torch tensors (and, on the GPU, torch's current stream) through it and
compute the same as through Python attributes; a Tensor subclass, another torch
version, a missing module or TESSERA_TORCH_NATIVE=0 keep the attribute path, and
tessera imports without torch at all."""
import glob
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera import _torch_native as native
from tessera._core import _C

torch = pytest.importorskip("torch")
LIB = os.path.join(os.path.dirname(tessera.__file__), "_lib")
BUILT = bool(glob.glob(os.path.join(LIB, "_C_torch*.so")))
needs_module = pytest.mark.skipif(not BUILT, reason="_C_torch was not built (no torch C++ headers at build time)")


@tessera.kernel
def axpy(x, y, out, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * a + tl.load(y + offs, mask=m), mask=m)


@tessera.kernel
def add_one(x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs) + 1)


class Wrapped(torch.Tensor):
    """A Tensor subclass: its attributes may mean something else, so Python reads it.
    Its module is made to look like torch's own (as FakeTensor's), where the C++ path
    takes torch types; other subclasses go to the Python launcher altogether."""


Wrapped.__module__ = "torch._tessera_test"


@pytest.fixture(autouse=True)
def reinstall():
    """Every test starts and ends with the reader as tessera installs it by itself."""
    native.install()
    yield
    native.install()


def _counts():
    s = native.stats()
    return s["native_tensors"], s["attribute_tensors"], s["native_streams"]


def _axpy_checked(dtype, device="cpu", n=100, offset=0):
    g = torch.Generator().manual_seed(n + offset)
    base = torch.randint(-8, 8, (n + offset,), generator=g).to(dtype)
    x = base.to(device)[offset:]
    y = torch.randint(-8, 8, (n,), generator=g).to(dtype).to(device)
    out = torch.full((n,), 99, dtype=dtype, device=device)
    axpy[((n + 63) // 64,)](x, y, out, 3, n, BLOCK=64)
    torch.testing.assert_close(out.cpu(), (x * 3 + y).cpu())


@needs_module
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64])
def test_cpu_tensors_are_read_natively_and_computed(dtype):
    assert native.state().startswith("active"), native.state()
    _axpy_checked(dtype)  # first launch: compiles through Python
    nat, attr, _ = _counts()
    for offset in (0, 1, 3):  # views at odd offsets: data_ptr includes the storage offset
        _axpy_checked(dtype, offset=offset)
    nat2, attr2, _ = _counts()
    assert nat2 - nat >= 9 and attr2 == attr  # three tensors per launch, none through Python


@needs_module
def test_parameters_are_read_natively_and_subclasses_through_python():
    x = torch.nn.Parameter(torch.arange(16.0), requires_grad=False)
    for _ in range(2):
        add_one[(1,)](x, BLOCK=16)
    assert _counts()[0] > 0
    w = torch.arange(16.0).as_subclass(Wrapped)
    nat, attr, _ = _counts()
    for _ in range(2):
        add_one[(1,)](w, BLOCK=16)
    nat2, attr2, _ = _counts()
    assert nat2 == nat and attr2 - attr == 2
    torch.testing.assert_close(w.as_subclass(torch.Tensor), torch.arange(16.0) + 2)
    torch.testing.assert_close(x.detach(), torch.arange(16.0) + 2)


@needs_module
def test_an_active_torch_function_mode_sees_the_attribute_reads():
    class Counting(torch.overrides.TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    x = torch.zeros(16)
    add_one[(1,)](x, BLOCK=16)
    add_one[(1,)](x, BLOCK=16)
    nat, attr, _ = _counts()
    with Counting():
        add_one[(1,)](x, BLOCK=16)
    assert _counts()[:2] == (nat, attr + 1)
    assert Counting.calls >= 3  # is_cuda, is_cpu, dtype, data_ptr went through the mode
    torch.testing.assert_close(x, torch.full((16,), 3.0))


@needs_module
def test_specializations_are_shared_by_both_readers():
    """The dtype identity read in C++ is the torch.dtype object Python reads, so a
    specialization registered under one reader is launched under the other."""
    add_one._compiled.clear()
    add_one._fast_path_clear()
    x = torch.zeros(16)
    _C._install_torch_args(None, None)
    add_one[(1,)](x, BLOCK=16)
    add_one[(1,)](x, BLOCK=16)
    assert native.install()
    for _ in range(3):
        add_one[(1,)](x, BLOCK=16)
    assert add_one._fast_path_size() == 1
    torch.testing.assert_close(x, torch.full((16,), 5.0))


def test_another_torch_version_keeps_the_attribute_path(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "0.0.0+not-this-one")
    assert not native.install()
    assert ("0.0.0+not-this-one" if BUILT else "No module named") in native.state(), native.state()
    nat, attr, _ = _counts()
    _axpy_checked(torch.float32)
    nat2, attr2, _ = _counts()
    assert nat2 == nat and attr2 - attr == 3


@needs_module
def test_the_module_refuses_to_import_under_another_torch():
    code = ("import sys, torch; torch.__version__ = '0.0.0+other'; sys.path.insert(0, %r)\n"
            "try:\n    import _C_torch\nexcept ImportError as e:\n    print('refused:', e)\n" % LIB)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused: _C_torch was built against torch" in r.stdout, r.stdout + r.stderr
    assert "this process runs torch 0.0.0+other" in r.stdout


def test_a_missing_module_keeps_the_attribute_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "_C_torch", None)  # `import _C_torch` raises ImportError
    assert not native.install()
    assert native.state().startswith("unavailable (ModuleNotFoundError"), native.state()
    nat, attr, _ = _counts()
    _axpy_checked(torch.int32, offset=2)
    assert _counts()[0] == nat and _counts()[1] - attr == 3


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("TESSERA_TORCH_NATIVE", "0")
    assert not native.install()
    assert native.state() == "off: TESSERA_TORCH_NATIVE=0"
    nat, _, _ = _counts()
    _axpy_checked(torch.float32)
    assert _counts()[0] == nat


def test_install_refuses_a_foreign_capsule():
    import datetime  # any capsule with another name
    capsule = datetime.datetime_CAPI
    with pytest.raises(ValueError):
        _C._install_torch_args(capsule, None)
    _axpy_checked(torch.float32)  # the reader in place before is untouched


def test_tessera_imports_and_launches_without_torch(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, tessera, tessera.language as tl\n"
            "from tessera import _torch_native as N\n"
            "@tessera.kernel\n"
            "def inc(x, BLOCK: tl.constexpr):\n"
            "    o = tl.arange(0, BLOCK)\n"
            "    tl.store(x + o, tl.load(x + o) + 1)\n"
            "x = np.zeros(16, np.float32)\n"
            "for _ in range(3): inc[(1,)](x, BLOCK=16)\n"
            "print(x.sum(), N.install(), N.state())\n")
    script = tmp_path / "no_torch.py"  # a file: kernels need their source
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(tessera.__file__)))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert r.stdout.strip() == "48.0 False not loaded: torch is not imported", r.stdout + r.stderr


# --- on the GPU (run by scripts/gpu_round.sh) -------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
@pytest.mark.parametrize("reader", ["native", "attributes"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_through_both_readers(dtype, reader):
    if reader == "native" and not BUILT:
        pytest.skip("_C_torch was not built")
    if reader == "attributes":
        _C._install_torch_args(None, None)
    for offset in (0, 0, 8, 1):  # offset 1: a misaligned pointer, its own specialization
        _axpy_checked(dtype, "cuda", n=1000, offset=offset)
    torch.cuda.synchronize()


@pytest.mark.parametrize("reader", ["native", "attributes"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_launch_goes_to_torchs_current_stream(reader):
    """On a side stream: a long sleep, x.fill_(5), then the launch. Only a launch queued
    behind the fill on that stream leaves 6 (one anywhere else runs first and leaves 5)."""
    if reader == "native" and not BUILT:
        pytest.skip("_C_torch was not built")
    if reader == "attributes":
        _C._install_torch_args(None, None)
    native_stream = reader == "native" and importlib.import_module("_C_torch").has_cuda_stream
    x = torch.zeros(16, device="cuda")
    add_one[(1,)](x, BLOCK=16)  # compiles; the launches below are cached ones
    add_one[(1,)](x, BLOCK=16)
    s = torch.cuda.Stream()
    for _ in range(3):
        torch.cuda.synchronize()
        _, _, streams = _counts()
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU clock cycles
            x.fill_(5.0)
            add_one[(1,)](x, BLOCK=16)
        grew = _counts()[2] - streams
        s.synchronize()
        torch.testing.assert_close(x, torch.full((16,), 6.0, device="cuda"))
        assert grew == int(native_stream)
    torch.cuda.synchronize()
