"""tl.multiple_of on scalars: the hint reaches axis analysis (wide masked accesses for
`offs < n` without specializing n), TESSERA_DEBUG checks it, and misuse is a clear error."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import debug_mode, poisoned


@tessera.kernel
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, HINT: tl.constexpr):
    if HINT:
        n = tl.multiple_of(n, 16)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


def _ptx(hint):
    c = tessera.compile(scale_kernel, signature={"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32"},
                        constexprs={"BLOCK": 1024, "HINT": hint}, target="cuda:90a")
    return c.asm["ptx"], c.asm["tir"]


def test_scalar_multiple_of_gives_16_byte_masked_accesses_in_ptx():
    ptx, tir = _ptx(True)
    assert "hint %n {divisibility = [16]}" in tir
    assert "ld.global.v4.f32" in ptx and "st.global.v4.f32" in ptx
    plain, _ = _ptx(False)                     # n not known divisible: one element per access
    assert "ld.global.v4.f32" not in plain and "ld.global.f32" in plain


@pytest.mark.parametrize("n", [16, 4096, 4112])
def test_scalar_multiple_of_runs_on_cpu(n):
    x = np.arange(n, dtype=np.float32)
    y = poisoned(n + 16, np.float32)
    scale_kernel[(tessera.cdiv(n, 256),)](x, y, n, BLOCK=256, HINT=True)
    np.testing.assert_array_equal(y[:n], 2 * x)
    assert np.isnan(y[n:]).all() or (y[n:] == poisoned(16, np.float32)).all()


def test_wrong_scalar_multiple_of_is_caught_under_debug():
    x = np.arange(40, dtype=np.float32)
    y = np.zeros(40, np.float32)
    with debug_mode():
        scale_kernel[(1,)](x, y, 32, BLOCK=64, HINT=True)       # a true hint: no error
        with pytest.raises(AssertionError) as info:
            scale_kernel[(1,)](x, y, 40, BLOCK=64, HINT=True)
    text = str(info.value)
    assert "not a multiple of 16" in text and "test_scalar_hints.py" in text
    assert "test_scalar_hints.py:14:" in text                  # the hint's line


@pytest.mark.parametrize("body, message", [
    ("n = tl.max_contiguous(n, 16)", "only tl.multiple_of(x, value) with one value"),
    ("n = tl.multiple_of(n, [16, 16])", "only tl.multiple_of(x, value) with one value"),
    ("n = tl.multiple_of(n, 0)", "needs a positive value"),
    ("n = tl.multiple_of(n * 1.5, 16)", "needs an integer or pointer scalar"),
])
def test_scalar_hint_misuse_is_a_compilation_error(tmp_path, body, message):
    src = tmp_path / "bad_hint.py"
    src.write_text(
        "import tessera\nimport tessera.language as tl\n\n"
        "@tessera.kernel\n"
        "def bad(x_ptr, n, BLOCK: tl.constexpr):\n"
        f"    {body}\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, offs, mask=offs < n)\n")
    ns = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    with pytest.raises(tessera.CompilationError) as info:
        ns["bad"][(1,)](np.zeros(16, np.int32), 16, BLOCK=16)
    text = str(info.value)
    assert message in text and "bad_hint.py" in text and "line 6" in text and body in text
