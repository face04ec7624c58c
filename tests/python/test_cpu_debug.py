"""Compiled CPU path, debugging builtins: tl.static_assert / tl.static_print at compile
time, tl.device_print and print() output (captured from the C stdout), and
tl.device_assert / `assert` raising only when debug is on (tessera.jit.set_debug,
TESSERA_DEBUG) with the message, the source line and the failing program."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import debug_mode, poisoned, tjit


# --- compile time ------------------------------------------------------------------------------
@tessera.kernel
def static_assert_kernel(out_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK % 16 == 0, "BLOCK must be a multiple of 16")
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK))


def test_static_assert_passes_and_fails_with_message_and_line():
    out = poisoned(32, np.int32)
    static_assert_kernel[(1,)](out, BLOCK=32)
    np.testing.assert_array_equal(out, np.arange(32))
    with pytest.raises(tessera.CompilationError) as info:
        static_assert_kernel[(1,)](out, BLOCK=8)
    text = str(info.value)
    assert "BLOCK must be a multiple of 16" in text
    assert "tl.static_assert(BLOCK % 16 == 0" in text          # the source line is quoted
    assert "test_cpu_debug.py" in text


@tessera.kernel
def static_print_kernel(x_ptr, BLOCK: tl.constexpr, TAG: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.static_print("static:", TAG, BLOCK * 2, x.dtype)
    tl.store(x_ptr + tl.arange(0, BLOCK), x + 1)


def test_static_print_runs_once_at_compile_time(capfd, monkeypatch, tmp_path):
    # static_print runs when the kernel compiles: a disk cache of its own, so that an entry
    # a previous run left (the same TESSERA_CACHE_DIR) cannot skip the compile.
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    x = np.zeros(8, np.float32)
    static_print_kernel[(1,)](x, BLOCK=8, TAG="first")
    static_print_kernel[(1,)](x, BLOCK=8, TAG="first")        # cached: no second print
    out = capfd.readouterr().out
    assert out.count("static: first 16") == 1, out
    assert "fp32" in out or "float32" in out
    np.testing.assert_array_equal(x, 2)


# --- device_print --------------------------------------------------------------------------------
@tessera.kernel
def device_print_kernel(x_ptr, i_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    i = tl.load(i_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    tl.device_print("x=", x)
    tl.device_print("pid", pid)
    tl.device_print("hex ", i, hex=True)
    tl.device_print("fhex ", x, hex=True)
    print("builtin print", i)


def test_device_print_output(capfd):
    x = np.array([1.5, -2.25, 3.0, 0.1, 10.0, 11.0, 12.0, 13.0], np.float32)
    i = np.array([255, -1, 16, 0, 1, 2, 3, 4], np.int32)
    device_print_kernel[(2,)](x, i, BLOCK=4)
    out = capfd.readouterr().out
    lines = out.splitlines()
    # one line per element per value, each with the program id and the element index
    for pid in range(2):
        for j in range(4):
            k = pid * 4 + j
            value = re.escape(f"{float(x[k]):.9g}")       # printf %.9g of the f32 value
            pat = rf"pid \({pid}, 0, 0\) idx \({j}\) x=\s*{value}\s*$"
            assert any(re.search(pat, ln) for ln in lines), (pat, out)
        assert any(re.search(rf"pid \({pid}, 0, 0\).*pid\s*{pid}\s*$", ln) for ln in lines), out
    assert any(re.search(r"pid \(0, 0, 0\) idx \(0\) hex\s*0xff\s*$", ln) for ln in lines), out
    assert any(re.search(r"pid \(0, 0, 0\) idx \(1\) hex\s*0xffffffff\s*$", ln) for ln in lines), out
    assert any(re.search(r"pid \(0, 0, 0\) idx \(0\) fhex\s*0x3fc00000\s*$", ln) for ln in lines), out
    assert any(re.search(r"pid \(1, 0, 0\) idx \(3\) builtin print\s*4\s*$", ln) for ln in lines), out
    assert len([ln for ln in lines if "x=" in ln]) == 8


@tessera.kernel
def device_print_scalar_kinds_kernel(f_ptr, u_ptr):
    f = tl.load(f_ptr)
    u = tl.load(u_ptr)
    tl.device_print("f64 ", f)
    tl.device_print("u64 ", u)
    tl.device_print("two ", f, u)


def test_device_print_scalar_types(capfd):
    f = np.array([0.1], np.float64)
    u = np.array([2**64 - 1], np.uint64)
    device_print_scalar_kinds_kernel[(1,)](f, u)
    out = capfd.readouterr().out
    assert re.search(r"f64\s*0\.1\d*\s*$", out, re.M), out
    assert re.search(r"u64\s*18446744073709551615\s*$", out, re.M), out
    assert re.search(r"two\s*\(operand 1\)", out) or out.count("two") == 2, out


# --- device_assert -----------------------------------------------------------------------------------
@tessera.kernel
def device_assert_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1)
    tl.device_assert(x > 0, "x must be positive")
    assert pid < 100, "pid out of range"


def test_device_assert_ignored_without_debug():
    assert not tjit._DEBUG
    x = np.array([1, 2, -3, 4], np.int32)
    device_assert_kernel[(1,)](x, 4, BLOCK=4)                # no check compiled in


def test_device_assert_raises_with_debug():
    x = np.ones(64, np.int32)
    x[37] = -5
    with debug_mode():
        device_assert_kernel[(4,)](np.ones(64, np.int32), 64, BLOCK=16)   # passes: no error
        with pytest.raises(AssertionError) as info:
            device_assert_kernel[(4,)](x, 64, BLOCK=16)
    text = str(info.value)
    assert "x must be positive" in text
    assert "program (2, 0, 0)" in text                        # element 37 lives in program 2
    assert "test_cpu_debug.py" in text
    # debug restored: the unchecked specialization is used again
    device_assert_kernel[(4,)](x, 64, BLOCK=16)


def test_python_assert_statement_is_a_device_assert_under_debug():
    x = np.ones(16, np.int32)
    with debug_mode():
        with pytest.raises(AssertionError, match="pid out of range"):
            device_assert_kernel[(101,)](np.ones(101 * 16, np.int32), 101 * 16, BLOCK=16)
        device_assert_kernel[(1,)](x, 16, BLOCK=16)          # the failure did not stick


def test_kernel_level_debug_flag():
    @tessera.kernel(debug=True)
    def always_checked(x_ptr):
        tl.device_assert(tl.load(x_ptr) == 0, "nonzero")

    always_checked[(1,)](np.zeros(1, np.int32))
    with pytest.raises(AssertionError, match="nonzero"):
        always_checked[(1,)](np.ones(1, np.int32))


def test_launch_option_debug():
    x = np.array([-1], np.int32)
    device_assert_kernel[(1,)](x, 1, BLOCK=1)
    with pytest.raises(AssertionError, match="x must be positive"):
        device_assert_kernel[(1,)](x, 1, BLOCK=1, debug=True)


def test_debug_and_interpret_switches_are_public():
    # tessera.jit is the decorator (as triton.jit), so the switches live on the package.
    assert callable(tessera.set_debug) and callable(tessera.set_interpret)
