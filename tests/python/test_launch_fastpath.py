"""The C++ launch path (frontend/csrc/launch_fastpath.cpp): a cached specialization
is launched without running the Python launcher, every argument property that
changes the code gives another specialization, and anything it does not handle goes
to the Python launcher, which behaves as before."""
import gc
import importlib
import weakref

import numpy as np
import pytest

import tessera
import tessera.language as tl
from launch_counting import CountingLauncher  # noqa: E402
tjit = importlib.import_module("tessera.jit")  # the module: tessera.jit is the decorator


@tessera.kernel
def axpy(x, out, a, n, BLOCK: tl.constexpr, SCALE: tl.constexpr = 1):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * a * SCALE + tl.load(out + offs, mask=m), mask=m)


@pytest.fixture(autouse=True)
def fresh_tables():
    axpy._compiled.clear()
    yield


def _expect(x, out0, a, n, scale=1):
    e = out0.copy()
    e[:n] = x[:n] * np.float32(a) * scale + out0[:n]
    return e


def test_cached_launch_runs_in_cpp_and_computes():
    x = np.arange(100, dtype=np.float32)
    with CountingLauncher(axpy) as py:
        for i in range(5):
            out = np.full(100, float(i), np.float32)
            ck = axpy[(2,)](x, out, 2.0, 100, BLOCK=64)
            np.testing.assert_array_equal(out, _expect(x, np.full(100, float(i), np.float32), 2.0, 100))
        assert py.calls == 1, "only the first launch should take the Python path"
    assert axpy._fast_path_size() == 1
    assert isinstance(ck, tessera.CompiledKernel) and ck is next(iter(axpy._compiled.values()))


@pytest.mark.parametrize("variants", [
    # (n, a, kwargs) triples that each need their own specialization
    [(100, 2.0, {}), (96, 2.0, {}), (1, 2.0, {})],                       # n: plain, divisible by 16, == 1
    [(100, 2.0, {}), (104, 2.0, {}), (96, 2.0, {})],                     # n: plain, divisible by 8, by 16
    [(100, 2.0, {}), (2**40, 2.0, {}), (2**40 + 3, 2.0, {})],            # i32, i64 (divisible or not)
    [(100, 2.0, {}), (100, True, {}), (100, np.float32(2.0), {}), (100, np.int32(2), {})],
    [(100, 2.0, {}), (100, 2.0, {"BLOCK": 32}), (100, 2.0, {"SCALE": 3}), (100, 2.0, {"SCALE": tl.constexpr(2)})],
    [(100, 2.0, {}), (100, 2.0, {"num_warps": 8}), (100, 2.0, {"num_stages": 2}), (100, 2.0, {"debug": True})],
])
def test_each_specialization_is_its_own_entry(variants):
    x = np.arange(128, dtype=np.float32)
    with CountingLauncher(axpy) as py:
        for _ in range(2):
            for n, a, kw in variants:
                kw = dict({"BLOCK": 64}, **kw)
                out = np.ones(128, np.float32)
                axpy[(128 // kw["BLOCK"],)](x, out, a, n, **kw)
                scale = kw.get("SCALE", 1)
                scale = scale.value if isinstance(scale, tl.constexpr) else scale
                m = min(n, 128)
                np.testing.assert_array_equal(out, _expect(x, np.ones(128, np.float32), float(a), m, scale))
        assert py.calls == len(variants), "each variant compiles once, then runs from C++"
    assert axpy._fast_path_size() == len(axpy._compiled) == len(variants)


def test_clearing_the_python_table_clears_the_cpp_one():
    x, out = np.ones(16, np.float32), np.zeros(16, np.float32)
    axpy[(1,)](x, out, 1.0, 16, BLOCK=16)
    assert axpy._fast_path_size() == 1
    axpy._compiled.clear()
    assert axpy._fast_path_size() == 0
    with CountingLauncher(axpy) as py:
        axpy[(1,)](x, out, 1.0, 16, BLOCK=16)
        assert py.calls == 1


def test_interpreter_mode_is_seen_by_the_cpp_path():
    x, out = np.ones(16, np.float32), np.zeros(16, np.float32)
    axpy[(1,)](x, out, 1.0, 16, BLOCK=16)
    with CountingLauncher(axpy) as py:
        tessera.set_interpret(True)
        try:
            axpy[(1,)](x, out, 1.0, 16, BLOCK=16)
        finally:
            tessera.set_interpret(False)
        assert py.calls == 1
    np.testing.assert_array_equal(out, 2.0)


@pytest.mark.parametrize("grid", [[1], (np.int64(1),), lambda meta: (1,), 1])
def test_grids_cpp_does_not_read_take_the_python_path(grid):
    x = np.ones(16, np.float32)
    axpy[(1,)](x, np.zeros(16, np.float32), 1.0, 16, BLOCK=16)
    with CountingLauncher(axpy) as py:
        out = np.zeros(16, np.float32)
        axpy[grid](x, out, 1.0, 16, BLOCK=16)
        np.testing.assert_array_equal(out, 1.0)
        assert py.calls == 1
    assert axpy._fast_path_size() == 1, "a call that missed only for its grid registers nothing new"


def test_keyword_arguments_and_defaults():
    x = np.arange(32, dtype=np.float32)
    for _ in range(2):
        out = np.zeros(32, np.float32)
        axpy[(1,)](n=32, a=3.0, out=out, x=x, BLOCK=32)
        np.testing.assert_array_equal(out, 3 * x)
        out = np.zeros(32, np.float32)
        axpy[(1,)](x, out, 3.0, 32, SCALE=2, BLOCK=32)
        np.testing.assert_array_equal(out, 6 * x)
    assert axpy._fast_path_size() == 2


def test_errors_after_a_cached_launch_are_the_python_paths():
    x, out = np.ones(16, np.float32), np.zeros(16, np.float32)
    axpy[(1,)](x, out, 1.0, 16, BLOCK=16)
    with pytest.raises(TypeError, match=r"kernel axpy: argument 'x' \(position 0\).*complex64"):
        axpy[(1,)](np.ones(16, np.complex64), out, 1.0, 16, BLOCK=16)
    with pytest.raises(TypeError, match=r"kernel axpy\(\) missing 1 required positional argument: 'n'"):
        axpy[(1,)](x, out, 1.0, BLOCK=16)
    with pytest.raises(ValueError, match="kernel axpy: grid dimensions must be >= 0"):
        axpy[(-1,)](x, out, 1.0, 16, BLOCK=16)
    with pytest.raises(OverflowError, match="kernel axpy: argument 'n'.*64 bits"):
        axpy[(1,)](x, out, 1.0, 2**64, BLOCK=16)


def test_torch_and_tessera_arrays_on_the_cpu():
    torch = pytest.importorskip("torch")
    x = np.arange(64, dtype=np.float32)
    with CountingLauncher(axpy) as py:
        for _ in range(3):
            tout = torch.zeros(64)
            axpy[(1,)](torch.from_numpy(x), tout, 2.0, 64, BLOCK=64)
            np.testing.assert_array_equal(tout.numpy(), 2 * x)
            aout = tessera.zeros(64)
            axpy[(1,)](tessera.from_numpy(x), aout, 2.0, 64, BLOCK=64)
            np.testing.assert_array_equal(aout.numpy(), 2 * x)
        assert py.calls == 2
    # torch float64 and float32 are different specializations
    with pytest.raises(TypeError):
        axpy[(1,)](torch.zeros(4, dtype=torch.complex64), torch.zeros(4), 1.0, 4, BLOCK=16)


def test_non_contiguous_and_offset_views():
    x = np.arange(200, dtype=np.float32)
    for _ in range(2):
        out = np.zeros(50, np.float32)
        axpy[(1,)](x[7:], out, 1.0, 50, BLOCK=64)       # an offset view: its own data pointer
        np.testing.assert_array_equal(out, x[7:57])
        out = np.zeros(50, np.float32)
        axpy[(1,)](x[::2], out, 1.0, 50, BLOCK=64)      # strided: the kernel sees the base layout
        np.testing.assert_array_equal(out, x[:50])


@tessera.kernel
def checked(x, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.device_assert(tl.load(x + offs) < n, "value too large")


def test_device_assert_from_the_cpp_path():
    x = np.arange(16, dtype=np.float32)
    checked[(1,)](x, 100, BLOCK=16, debug=True)
    messages = []
    for _ in range(2):  # the second launch of the failing specialization runs from C++
        with pytest.raises(AssertionError) as e:
            checked[(1,)](x, 8, BLOCK=16, debug=True)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "value too large" in messages[0]
    assert checked._fast_path_size() == 1  # n=100 and n=8: one specialization


def test_shadowing_kernels_stay_on_the_python_path():
    @tessera.kernel
    def shadowed(grid, num_warps, BLOCK: tl.constexpr):
        tl.store(grid + tl.arange(0, BLOCK), tl.load(num_warps + tl.arange(0, BLOCK)))

    a, b = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    for _ in range(2):
        shadowed[(1,)](a, b, BLOCK=8)
    np.testing.assert_array_equal(a, b)
    assert shadowed._fast_path_size() == 0


def test_kernels_are_freed():
    def make():
        @tessera.kernel
        def tmp(x, BLOCK: tl.constexpr):
            tl.store(x + tl.arange(0, BLOCK), 1.0)
        x = np.zeros(8, np.float32)
        tmp[(1,)](x, BLOCK=8)
        tmp[(1,)](x, BLOCK=8)
        assert tmp._fast_path_size() == 1 and x.all()
        return weakref.ref(tmp)

    ref = make()
    gc.collect()
    assert ref() is None, "the C++ table must not keep its kernel alive"


def test_stream_on_the_cpu_is_accepted_and_ignored():
    x, out = np.ones(16, np.float32), np.zeros(16, np.float32)
    for _ in range(2):
        axpy[(1,)](x, out, 1.0, 16, BLOCK=16, stream=0)
    np.testing.assert_array_equal(out, 2.0)


def test_debug_flag_changes_are_seen():
    x = np.arange(16, dtype=np.float32)
    checked[(1,)](x, 8, BLOCK=16)  # no checks compiled in: passes
    previous = tjit._DEBUG
    tessera.set_debug(True)
    try:
        with pytest.raises(AssertionError, match="value too large"):
            checked[(1,)](x, 8, BLOCK=16)
    finally:
        tessera.set_debug(previous)
    checked[(1,)](x, 8, BLOCK=16)


def test_cuda_error_type_without_a_driver():
    from tessera._core import _C
    if _C.cuda_available():
        pytest.skip("this machine has a usable CUDA driver")
    with pytest.raises(tessera.CudaError) as e:
        tessera.synchronize("cuda:0")
    assert isinstance(e.value, RuntimeError) and "CUDA is not available" in str(e.value)
    assert e.value.code == -1 and e.value.sticky is False


def test_launches_from_threads_while_the_table_is_cleared():
    import threading
    x = np.arange(64, dtype=np.float32)
    failures = []

    def worker():
        try:
            for _ in range(200):
                out = np.zeros(64, np.float32)
                axpy[(1,)](x, out, 2.0, 64, BLOCK=64)
                if not np.array_equal(out, 2 * x):
                    failures.append("wrong result")
        except Exception as e:  # reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for _ in range(50):
        axpy._compiled.clear()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
