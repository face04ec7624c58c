"""kernel.bind(grid, **values): a launch with its grid, options and some arguments fixed
(frontend/tessera/jit.py, BoundKernel in frontend/csrc/launch_fastpath.cpp). Same
results and specializations as kernel[grid](...), the fast path taken from the second
call, errors naming the kernel and the argument."""
import numpy as np
import pytest

import tessera
import tessera.language as tl


@tessera.kernel
def scaled_add(X, Y, OUT, n, a, BLOCK: tl.constexpr, SCALE: tl.constexpr = True):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    if SCALE:
        x = x * a
    tl.store(OUT + offs, x + tl.load(Y + offs, mask=m), mask=m)


def _inputs(n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random(n).astype(dtype), rng.random(n).astype(dtype), np.full(n, np.nan, dtype)


def test_bound_launch_matches_the_plain_launch_and_reuses_its_specialization():
    n = 1000
    x, y, out = _inputs(n)
    scaled_add._compiled.clear()
    launch = scaled_add.bind((tessera.cdiv(n, 256),), n=n, a=2.0, BLOCK=256)
    ck = launch(x, y, out)  # first call: the Python path compiles and registers
    np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)
    assert scaled_add._fast_path_size() == 1 and len(scaled_add._compiled) == 1
    out2 = np.full(n, np.nan, np.float32)
    assert launch(x, y, out2) is ck  # the C++ path: the same CompiledKernel
    np.testing.assert_allclose(out2, out)
    # The plain launch with the same values keys the same specialization.
    out3 = np.full(n, np.nan, np.float32)
    assert scaled_add[(tessera.cdiv(n, 256),)](x, y, out3, n, 2.0, BLOCK=256) is ck
    np.testing.assert_array_equal(out3, out)
    assert len(scaled_add._compiled) == 1


def test_free_arguments_still_specialize():
    # A free argument of another dtype, or a free constexpr, is another specialization.
    n = 300
    launch = scaled_add.bind((2,), n=n, a=0.5, BLOCK=256)
    for dtype in (np.float32, np.float64, np.float32):
        x, y, out = _inputs(n, dtype, seed=1)
        launch(x, y, out)
        np.testing.assert_allclose(out, 0.5 * x + y, rtol=1e-6)
    x, y, out = _inputs(n, seed=2)
    launch(x, y, out, False)  # SCALE=False, by position after the arrays
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    # fixed ints keep their specialization: 300 and 304 (divisible by 16) are two
    x4, y4, out4 = _inputs(304, seed=3)
    scaled_add.bind((2,), n=304, a=0.5, BLOCK=256)(x4, y4, out4)
    np.testing.assert_allclose(out4, 0.5 * x4 + y4, rtol=1e-6)


def test_bound_options_and_a_fixed_array():
    n = 64
    x, y, out = _inputs(n, seed=4)
    launch = scaled_add.bind((1,), X=x, n=n, a=3.0, BLOCK=64, SCALE=tl.constexpr(True), num_warps=2)
    launch(y, out)  # the free parameters: Y, OUT (SCALE fixed, unwrapped from tl.constexpr)
    np.testing.assert_allclose(out, 3 * x + y, rtol=1e-6)
    x[:] = 1.0  # a fixed array is read where it is, at each launch
    launch(y, out)
    np.testing.assert_allclose(out, 3 + y, rtol=1e-6)
    # enable_fp_fusion: a key the C++ path lacks; every call takes the Python path, correctly
    slow = scaled_add.bind((1,), n=n, a=3.0, BLOCK=64, enable_fp_fusion=False)
    for _ in range(2):
        out[:] = np.nan
        slow(x, y, out)
        np.testing.assert_allclose(out, 3 + y, rtol=1e-6)


def test_clearing_the_table_drops_the_bound_launch_cached_specialization():
    n = 100
    x, y, out = _inputs(n, seed=5)
    launch = scaled_add.bind((1,), n=n, a=1.0, BLOCK=128)
    launch(x, y, out)
    launch(x, y, out)
    scaled_add._compiled.clear()  # frees the C++ table's specializations
    assert scaled_add._fast_path_size() == 0
    out[:] = np.nan
    launch(x, y, out)  # recompiled (from the disk cache) through the Python path, no stale pointer
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    assert scaled_add._fast_path_size() == 1


def test_interpreter_mode_runs_bound_launches_in_the_interpreter():
    n = 50
    x, y, out = _inputs(n, seed=6)
    launch = scaled_add.bind((1,), n=n, a=2.0, BLOCK=64)
    launch(x, y, out)
    tessera.set_interpret(True)
    try:
        out[:] = np.nan
        assert launch(x, y, out) is None  # the interpreter returns no CompiledKernel
    finally:
        tessera.set_interpret(False)
    np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)


def test_an_empty_grid_launches_nothing():
    x, y, out = _inputs(10, seed=7)
    launch = scaled_add.bind((0,), n=10, a=2.0, BLOCK=16)
    launch(x, y, out)
    launch(x, y, out)
    assert np.isnan(out).all()


def test_bind_errors_name_the_kernel_and_the_argument():
    with pytest.raises(TypeError, match=r"kernel scaled_add\.bind\(\) got an unexpected keyword argument 'm'"):
        scaled_add.bind((1,), m=3)
    with pytest.raises(TypeError, match=r"'stream' \(stream= is given to each call\)"):
        scaled_add.bind((1,), stream=0)
    with pytest.raises(TypeError, match=r"kernel scaled_add\.bind: the grid must be a tuple"):
        scaled_add.bind(lambda meta: (1,), n=3)
    with pytest.raises(ValueError, match=r"kernel scaled_add: grid dimensions must be >= 0"):
        scaled_add.bind((-1,), n=3)
    with pytest.raises(TypeError, match=r"kernel scaled_add: argument 'n' \(position 3\): unsupported kernel "
                                        r"argument of type list"):
        scaled_add.bind((1,), n=[3])
    with pytest.raises(TypeError, match=r"kernel scaled_add: constexpr argument 'BLOCK' \(position 5\) must be "
                                        r"hashable"):
        scaled_add.bind((1,), BLOCK=[64])
    with pytest.raises(ValueError, match=r"kernel scaled_add: maxnreg must be an integer from 16 to 255"):
        scaled_add.bind((1,), maxnreg=7)
    with pytest.raises(TypeError, match=r"kernel scaled_add\.bind: num_warps must be an integer"):
        scaled_add.bind((1,), num_warps="4")


def test_bound_call_errors_name_the_free_arguments():
    x, y, out = _inputs(10, seed=8)
    launch = scaled_add.bind((1,), n=10, a=2.0, BLOCK=16)
    with pytest.raises(TypeError, match=r"kernel scaled_add \(bound\) missing argument 'OUT' \(position 2 of the "
                                        r"free arguments: X, Y, OUT, SCALE\)"):
        launch(x, y)
    with pytest.raises(TypeError, match=r"kernel scaled_add \(bound\) takes 4 arguments \(X, Y, OUT, SCALE\) but 5"):
        launch(x, y, out, True, 1)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['OUT'\]"):
        launch(x, y, OUT=out)
    with pytest.raises(TypeError, match=r"kernel scaled_add: argument 'Y' \(position 1\)"):
        launch(x, "not an array", out)
    # a read-only output is refused as in a plain launch, on the fast path's table too
    launch(x, y, out)
    ro = out.copy()
    ro.setflags(write=False)
    with pytest.raises(ValueError, match=r"argument 'OUT' \(position 2\) is a read-only numpy array"):
        launch(x, y, ro)
