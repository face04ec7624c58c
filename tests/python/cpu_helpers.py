"""Shared helpers of the compiled CPU path tests (test_cpu_*.py): poisoned output
buffers (so elements a kernel never wrote show up), per-dtype tolerances, ulp
distances, bf16 bit conversions, and running a kernel through the interpreter with
the same calling convention as a compiled launch (the differential oracle)."""
from __future__ import annotations

import contextlib
import importlib
import math
import os

import numpy as np

# `tessera.jit` the attribute is the decorator alias (tessera.jit = tessera.kernel), which
# shadows the module of the same name: reach the module through importlib.
tjit = importlib.import_module("tessera.jit")

# TESSERA_TEST_DEVICE=cuda reruns these tests on the GPU (conftest.py). There, as
# docs/language.md documents, fp32 `/` is div.full.f32 and tl.exp uses ex2.approx;
# the helpers below assert those documented bounds on the GPU and IEEE results on
# the CPU.
ON_GPU = os.environ.get("TESSERA_TEST_DEVICE", "cpu").startswith("cuda")

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES

# Sizes that are not multiples of any block: single element, prime, round decimal,
# one past a power of two.
ODD_SIZES = [1, 17, 1000, 4097]

POISON_BYTE = 0xAB


def cdiv(a, b):
    return (a + b - 1) // b


def grid_for(n, block):
    return (max(1, cdiv(n, block)),)


# --- poisoned outputs ---------------------------------------------------------------------
def poisoned(shape, dtype):
    """An output buffer a kernel must overwrite: NaN for floats, bytes 0xAB for ints."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(np.prod(shape, dtype=np.int64) * dtype.itemsize, POISON_BYTE,
                   np.uint8).view(dtype).reshape(shape)


def is_poison(a):
    """Elementwise: does `a` still hold the poison pattern?"""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        return np.isnan(a)
    return a == poisoned((), a.dtype)[()]


def assert_poison(a, what="elements the kernel must not write"):
    a = np.asarray(a)
    bad = ~is_poison(a)
    assert not bad.any(), f"{what}: {int(bad.sum())} overwritten, first at {np.argwhere(bad)[0]}"


def assert_no_poison(a, what="output"):
    a = np.asarray(a)
    bad = is_poison(a)
    assert not bad.any(), f"{what}: {int(bad.sum())} elements never written, first at {np.argwhere(bad)[0]}"


# --- tolerances ----------------------------------------------------------------------------
def tolerance(dtype):
    """(rtol, atol) for results computed in `dtype` by a few roundings."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return 2e-3, 1e-3
    if dtype == np.float32:
        return 1e-5, 1e-6
    if dtype == np.float64:
        return 1e-12, 1e-14
    return 0, 0


def assert_close(actual, expected, dtype=None, rtol=None, atol=None, err_msg=""):
    actual = np.asarray(actual)
    r, a = tolerance(dtype if dtype is not None else actual.dtype)
    np.testing.assert_allclose(actual.astype(np.float64) if actual.dtype.kind == "f" else actual,
                               np.asarray(expected), rtol=r if rtol is None else rtol,
                               atol=a if atol is None else atol, equal_nan=True, err_msg=err_msg)


# --- ulps ----------------------------------------------------------------------------------
_UINT_OF = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _ordered_key(a):
    """Unsigned keys in the order of the float values: consecutive floats get
    consecutive keys (-0.0 and +0.0 are one apart)."""
    u = _UINT_OF[a.dtype.itemsize]
    bits = a.view(u)
    sign = u(1) << u(8 * a.dtype.itemsize - 1)
    return np.where(bits & sign, ~bits, bits | sign).astype(u)


def ulp_distance(actual, expected):
    """Number of representable steps between actual and expected (same float dtype), as
    float64. NaN vs NaN is 0 apart; NaN vs a number is inf."""
    actual = np.ascontiguousarray(actual)
    expected = np.ascontiguousarray(expected, dtype=actual.dtype)
    ka, ke = _ordered_key(actual), _ordered_key(expected)
    d = np.where(ka > ke, ka - ke, ke - ka).astype(np.float64)
    both_nan = np.isnan(actual) & np.isnan(expected)
    one_nan = np.isnan(actual) ^ np.isnan(expected)
    d = np.where(both_nan, 0.0, d)
    return np.where(one_nan, np.inf, d)


def assert_ulp(actual, expected, max_ulp, inputs=None, what=""):
    """|actual - expected| <= max_ulp ulps of the dtype of actual (expected is rounded
    to that dtype first: pass float64 references)."""
    actual = np.asarray(actual)
    with np.errstate(over="ignore", invalid="ignore"):
        exp_r = np.asarray(expected, np.float64).astype(actual.dtype)
    d = ulp_distance(actual, exp_r)
    bad = np.asarray(d > max_ulp, dtype=bool)
    if bad.any():
        idx = np.flatnonzero(bad)[:8]
        rows = []
        for i in idx:
            x = "" if inputs is None else f"x={np.asarray(inputs).reshape(-1)[i]!r} "
            rows.append(f"  [{i}] {x}got {actual.reshape(-1)[i]!r} want {exp_r.reshape(-1)[i]!r} "
                        f"({d.reshape(-1)[i]} ulp)")
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements over {max_ulp} ulp:\n"
                             + "\n".join(rows))


def assert_fp32_quotient(actual, x, y, what="x / y"):
    """An f32 quotient of x / y: the IEEE (correctly rounded) result on the CPU; on the
    GPU div.full.f32, within 2 ulp of the exact quotient (docs/language.md)."""
    with np.errstate(all="ignore"):
        exact = np.asarray(x, np.float64) / np.asarray(y, np.float64)
    if ON_GPU:
        assert_ulp(actual, exact, 2, inputs=x, what=f"{what} (GPU div.full.f32)")
    else:
        np.testing.assert_array_equal(actual, exact.astype(np.float32), err_msg=what)


def assert_gpu_exp_f32(actual, x, expected):
    """tl.exp of f32 on the GPU: ex2.approx of x * log2(e) rounded to f32
    (docs/language.md): relative error up to 2^-22 from the unit plus |x| * 2^-24 from
    rounding the product; this checks twice that, one subnormal step absolute, and
    exact inf / nan / 0 for the special values."""
    actual = np.asarray(actual, np.float64)
    x = np.asarray(x, np.float64)
    expected = np.asarray(expected, np.float64).astype(np.float32).astype(np.float64)
    finite = np.isfinite(expected) & (expected != 0)
    bound = (2.0**-21 + np.abs(x) * 2.0**-23) * np.abs(expected) + 2.0**-148
    bad = finite & ~(np.abs(actual - expected) <= bound)
    bad |= ~finite & (ulp_distance(actual.astype(np.float32), expected.astype(np.float32)) > 1)
    if bad.any():
        i = np.flatnonzero(bad)[:8]
        raise AssertionError(f"tl.exp float32 on the GPU: {int(bad.sum())} elements over the documented bound: "
                             f"x={x[i]} got {actual[i]} want {expected[i]}")


# --- special values ------------------------------------------------------------------------
def special_values(dtype):
    """inf, -inf, nan, +-0, denormals, extremes and ordinary values of a float dtype."""
    dtype = np.dtype(dtype)
    fi = np.finfo(dtype)
    vals = [np.inf, -np.inf, np.nan, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
            fi.smallest_normal, -fi.smallest_normal, fi.smallest_normal / 2, fi.max, -fi.max,
            fi.eps, 1.0, -1.0, 0.5, 2.0, 3.0, -3.5, 10.0, -10.0, 88.5, -88.5, 100.0, 1e-3]
    return np.array(vals, dtype=dtype)


# --- bf16 (numpy has none: kernels take uint16 arrays of bf16 bit patterns) -----------------
def f32_to_bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even (NaN stays NaN)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, np.float32))
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), r).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_round(x):
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


# --- the interpreter as oracle ----------------------------------------------------------------
@contextlib.contextmanager
def interpreted():
    """Launches inside this block run on the numpy interpreter."""
    previous = tjit._INTERPRET
    tjit.set_interpret(True)
    try:
        yield
    finally:
        tjit.set_interpret(previous)


def run_interpreted(kernel, grid, *args, **kwargs):
    with interpreted():
        kernel[grid](*args, **kwargs)


def run_compiled_and_interpreted(kernel, grid, *args, **kwargs):
    """Runs the kernel compiled and interpreted, each on its own copies of the array
    arguments; returns (compiled_arrays, interpreted_arrays) in argument order."""
    ca = [a.copy() for a in args if isinstance(a, np.ndarray)]
    ia = [a.copy() for a in ca]

    def with_arrays(arrays):
        it = iter(arrays)
        return [next(it) if isinstance(a, np.ndarray) else a for a in args]
    kernel[grid](*with_arrays(ca), **kwargs)
    run_interpreted(kernel, grid, *with_arrays(ia), **kwargs)
    return ca, ia


@contextlib.contextmanager
def debug_mode():
    """Compile device_assert checks in (TESSERA_DEBUG) and restore afterwards."""
    previous = tjit._DEBUG
    tjit.set_debug(True)
    try:
        yield
    finally:
        tjit.set_debug(previous)


def erf_ref(x):
    x = np.asarray(x, np.float64)
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x

