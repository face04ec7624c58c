"""Launch-time errors: wrong arguments, bad grids, arrays on other devices. Every
message names the kernel; the fast (cached) launch path must give the same errors as
the first launch."""
import numpy as np
import pytest

import tessera
import tessera.language as tl


@tessera.kernel
def add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@tessera.kernel
def fill_grid(out, BLOCK: tl.constexpr):
    # out[pid0, pid1, pid2] = 1 + pid0 + 10*pid1 + 100*pid2, on a 4x3x2 grid
    p0, p1, p2 = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    tl.store(out + p0 + 4 * p1 + 12 * p2, (1 + p0 + 10 * p1 + 100 * p2).to(tl.float32))


N = 100
X = np.arange(N, dtype=np.float32)
Y = np.ones(N, np.float32)


@pytest.fixture(params=["first", "cached"])
def path(request):
    """'first': a fresh kernel table (the general path); 'cached': the specialization
    is already compiled, so the generated fast launcher sees the call first."""
    add._compiled.clear()
    if request.param == "cached":
        out = np.empty_like(X)
        add[(1,)](X, Y, out, N, BLOCK=128)
        assert np.array_equal(out, X + Y)
    return request.param


def launch(*args, grid=(1,), **kwargs):
    return add[grid](*args, **kwargs)


# --- argument count and names -----------------------------------------------------------

@pytest.mark.parametrize("args,kwargs,needles", [
    ((X, Y, np.empty_like(X), N, 128, 7), {}, ["takes 5 positional arguments"]),
    ((X, Y, np.empty_like(X), N, 7), {"BLOCK": 128}, ["multiple values for argument 'BLOCK'"]),
    ((X, Y), {"BLOCK": 128}, ["missing 2 required", "'out'", "'n'"]),
    ((X, Y, np.empty_like(X), N), {}, ["missing 1 required", "'BLOCK'"]),
    ((X, Y, np.empty_like(X), N), {"BLOCK": 128, "BLOK": 1}, ["unexpected keyword argument 'BLOK'"]),
    ((X, Y, np.empty_like(X)), {"n": N, "BLOCK": 128, "x": X}, ["multiple values for argument 'x'"]),
])
def test_wrong_argument_count(path, args, kwargs, needles):
    with pytest.raises(TypeError) as e:
        launch(*args, **kwargs)
    msg = str(e.value)
    assert "kernel add" in msg, msg
    for n in needles:
        assert n in msg, msg


class Opaque:
    pass


@pytest.mark.parametrize("index,value,needles", [
    (0, "abc", ["argument 'x' (position 0)", "type str"]),
    (1, [1.0, 2.0], ["argument 'y' (position 1)", "type list"]),
    (2, Opaque(), ["argument 'out' (position 2)", "type Opaque"]),
    (3, "100", ["argument 'n' (position 3)", "type str"]),
    (3, {"n": 1}, ["argument 'n' (position 3)", "type dict"]),
    (0, np.array([object()] * 4), ["argument 'x' (position 0)", "dtype object"]),
    (0, np.ones(4, np.complex64), ["argument 'x' (position 0)", "complex64"]),
])
def test_wrong_argument_type(path, index, value, needles):
    args = [X, Y, np.empty_like(X), N]
    args[index] = value
    with pytest.raises(TypeError) as e:
        launch(*args, BLOCK=128)
    msg = str(e.value)
    assert msg.startswith("kernel add: "), msg
    for n in needles:
        assert n in msg, msg


def test_integer_too_large(path):
    with pytest.raises(OverflowError, match=r"kernel add: argument 'n' \(position 3\).*64 bits"):
        launch(X, Y, np.empty_like(X), 2**70, BLOCK=128)


def test_unhashable_constexpr(path):
    with pytest.raises(TypeError, match="kernel add: constexpr argument 'BLOCK'.*hashable.*list"):
        launch(X, Y, np.empty_like(X), N, BLOCK=[128])


def test_numpy_scalar_is_a_scalar_not_a_pointer(path):
    out = np.empty_like(X)
    launch(X, Y, out, np.int32(N), BLOCK=128)
    assert np.array_equal(out, X + Y)
    out2 = np.zeros_like(X)
    launch(X, Y, out2, np.int64(50), BLOCK=128)
    assert np.array_equal(out2[:50], (X + Y)[:50]) and not out2[50:].any()


# --- grids -------------------------------------------------------------------------------

@pytest.mark.parametrize("grid,needle", [
    ((-1,), "must be >= 0"),
    ((1, -2), "must be >= 0"),
    ((1, 1, 1, 1), "1 to 3 integers"),
    ((), "1 to 3 integers"),
    ((1.5,), "1 to 3 integers"),
    ((2.0,), "1 to 3 integers"),
    (("a",), "1 to 3 integers"),
    (None, "1 to 3 integers"),
    ("abc", "1 to 3 integers"),
    ((2**31,), "< 2^31"),
    (lambda meta: "garbage", "1 to 3 integers, got 'garbage'"),
    (lambda meta: None, "1 to 3 integers, got None"),
    (lambda meta: (1, 2, 3, 4), "1 to 3 integers"),
    (lambda meta: (-3,), "must be >= 0"),
])
def test_bad_grid(path, grid, needle):
    out = np.zeros_like(X)
    with pytest.raises(ValueError) as e:
        launch(X, Y, out, N, BLOCK=128, grid=grid)
    assert str(e.value).startswith("kernel add: "), str(e.value)
    assert needle in str(e.value)
    assert not out.any(), "a rejected launch must not run"


def test_grid_function_that_raises_keeps_its_error(path):
    with pytest.raises(KeyError) as e:
        launch(X, Y, np.empty_like(X), N, BLOCK=128, grid=lambda meta: (meta["NOPE"],))
    notes = getattr(e.value, "__notes__", None)
    if notes is not None:  # Python 3.11+
        assert any("kernel add" in n for n in notes)


@pytest.mark.parametrize("grid", [(0,), (0, 5), (3, 0, 1), lambda meta: (0,), 0])
def test_empty_grid_launches_nothing(path, grid):
    out = np.zeros_like(X)
    ck = launch(X, Y, out, N, BLOCK=128, grid=grid)
    assert ck is not None and not out.any()


@pytest.mark.parametrize("grid", [(4, 3, 2), [4, 3, 2], lambda meta: (4, 3, 2), (np.int64(4), 3, np.int32(2))])
def test_good_grids_of_every_form(grid):
    out = np.zeros(24, np.float32)
    for _ in range(2):  # first and cached launch
        out[:] = 0
        fill_grid[grid](out, BLOCK=1)
        p0, p1, p2 = np.meshgrid(np.arange(4), np.arange(3), np.arange(2), indexing="ij")
        expect = np.zeros(24, np.float32)
        expect[(p0 + 4 * p1 + 12 * p2).ravel()] = (1 + p0 + 10 * p1 + 100 * p2).ravel()
        np.testing.assert_array_equal(out, expect)


# --- devices -----------------------------------------------------------------------------

class FakeTorchTensor:
    """Looks like a torch tensor to tessera's specialization (module, dtype, device)."""

    def __init__(self, device):
        self.dtype = "torch.float32"
        self.device = device

    def data_ptr(self):
        return 0


FakeTorchTensor.__module__ = "torch"


class FakeCupyArray:
    """A __cuda_array_interface__ object (CuPy, numba) on GPU 0."""

    class device:
        id = 0

    dtype = np.dtype("float32")
    __cuda_array_interface__ = {"shape": (N,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_arrays_on_different_devices(path):
    with pytest.raises(ValueError, match=r"kernel add: arrays on different devices.*'cpu'.*'cuda:0'"):
        launch(FakeTorchTensor("cpu"), FakeTorchTensor("cuda:0"), np.empty_like(X), N, BLOCK=128)
    with pytest.raises(ValueError, match="kernel add: arrays on different devices"):
        launch(FakeTorchTensor("cuda:0"), FakeTorchTensor("cuda:1"), FakeTorchTensor("cuda:0"), N, BLOCK=128)


def test_arrays_on_a_device_no_backend_runs(path):
    # torch's 'meta' (no storage) and other devices: named as such, not as a missing CUDA.
    with pytest.raises(ValueError, match=r"kernel add: 'x' \(position 0\), 'y' \(position 1\), "
                                         r"'out' \(position 2\) on device 'meta': a launch takes arrays in host "
                                         r"memory \(cpu\) or on an NVIDIA GPU \(cuda\)"):
        launch(FakeTorchTensor("meta"), FakeTorchTensor("meta"), FakeTorchTensor("meta"), N, BLOCK=128)


@pytest.mark.parametrize("make", [lambda: FakeTorchTensor("cuda:0"), FakeCupyArray])
def test_gpu_arrays_without_a_usable_gpu(path, make):
    from tessera._core import _C
    if _C.cuda_available():
        pytest.skip("this machine has a usable CUDA driver")
    with pytest.raises(RuntimeError, match="kernel add: arguments live on cuda.*CUDA is not usable here"):
        launch(make(), make(), make(), N, BLOCK=128)


def test_kernel_called_without_grid():
    with pytest.raises(RuntimeError, match=r"kernel add must be launched with a grid: add\[grid\]"):
        add(X, Y, np.empty_like(X), N, BLOCK=128)


# --- kernels whose parameters shadow the launcher's own names -------------------------------

@tessera.kernel
def shadow(grid, num_warps, key, ck, options, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(grid + offs, tl.load(num_warps + offs, mask=m) + tl.load(key + offs, mask=m) + ck, mask=m)


def test_parameter_names_that_shadow_the_launcher():
    a = np.arange(32, dtype=np.float32)
    b = np.ones(32, np.float32)
    for n in (32, 20):  # twice each: first launch, then the cached path
        for _ in range(2):
            out = np.zeros(32, np.float32)
            shadow[(1,)](out, a, b, 5.0, 0, n, BLOCK=32)
            np.testing.assert_array_equal(out[:n], a[:n] + b[:n] + 5.0)
            assert not out[n:].any()


@tessera.kernel
def shadow_locals(key, ck, n, out, BLOCK: tl.constexpr):
    # names the generated launcher once used for its locals (n = len(grid) broke `n`)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(key + offs, mask=m) + ck, mask=m)


def test_parameter_names_that_shadow_the_launcher_locals():
    a = np.arange(64, dtype=np.float32)
    for n in (64, 33):
        for _ in range(2):
            out = np.zeros(64, np.float32)
            shadow_locals[(1,)](a, 2.0, n, out, BLOCK=64)
            np.testing.assert_array_equal(out[:n], a[:n] + 2.0)
            assert not out[n:].any()


# --- read-only outputs ------------------------------------------------------------------
@tessera.kernel
def copy_through_loop_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = dst + offs                       # a loop-carried pointer still traces back to dst
    for i in range(0, n, BLOCK):
        m = offs + i < n
        tl.store(p, tl.load(src + i + offs, mask=m), mask=m)
        p += BLOCK


def test_read_only_output_array_is_refused_and_read_only_input_is_fine():
    src = np.arange(40, dtype=np.float32)
    src.flags.writeable = False                      # read-only inputs are fine
    dst = np.zeros(40, np.float32)
    copy_through_loop_kernel[(1,)](src, dst, 40, BLOCK=16)
    np.testing.assert_array_equal(dst, src)
    ro = np.zeros(40, np.float32)
    ro.flags.writeable = False
    for _ in range(2):                               # first launch (compiles) and a cached one
        with pytest.raises(ValueError, match=r"copy_through_loop_kernel: argument 'dst' \(position 1\) is a "
                                             r"read-only numpy array, but the kernel stores to it"):
            copy_through_loop_kernel[(1,)](src, ro, 40, BLOCK=16)
    assert not ro.any()


def test_written_arguments_are_in_the_metadata():
    c = tessera.compile(copy_through_loop_kernel, signature={"src": "*fp32", "dst": "*fp32", "n": "i32"},
                        constexprs={"BLOCK": 16}, target="cpu")
    assert c.metadata["written_args"] == "1"
