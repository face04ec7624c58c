"""Shared by the code generator's IR and error tests (test_codegen_ir.py,
test_codegen_errors.py): building a kernel's Tile IR text and checking where an error points."""
import inspect
import re

import pytest

import tessera.language as tl
from tessera.compiler import generate_tile_ir
from tessera.errors import CompilationError

P = tl.pointer_type
F32, F16, I32 = P(tl.float32), P(tl.float16), P(tl.int32)


def ir(fn, constexprs=None, attrs=None, options=None, **arg_types):
    return generate_tile_ir(fn, arg_types, constexprs or {}, attrs or {}, options or {})


def compile_error(fn, constexprs=None, options=None, **arg_types):
    with pytest.raises(CompilationError) as info:
        ir(fn, constexprs, options=options, **arg_types)
    return info.value


def line_of(fn, snippet, nth=0):
    """Absolute file line of the nth source line of fn containing snippet."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if snippet in text]
    return hits[nth]


def col_of(fn, snippet, token=None):
    """0-based column of `token` (default: snippet) on the line containing snippet."""
    lines, start = inspect.getsourcelines(fn)
    text = next(t for t in lines if snippet in t)
    return text.index(token or snippet)


def assert_error(err, fn, snippet, message_part, token=None):
    assert message_part in err.message, err.message
    assert err.lineno == line_of(fn, snippet)
    assert err.col_offset == col_of(fn, snippet, token)
    assert err.filename == inspect.getsourcefile(fn)
    assert snippet in err.source_line
    text = str(err)
    caret_line = [ln for ln in text.splitlines() if ln.strip().startswith("^")][0]
    assert caret_line.index("^") == 4 + err.col_offset
    assert f"line {err.lineno}, col {err.col_offset + 1}" in text


def ops(text):
    """Op names in order of appearance."""
    names = []
    for line in text.splitlines():
        m = re.match(r"\s*(?:%[\w, %]+ = )?([a-z_0-9]+)\b", line)
        if m and not line.strip().startswith(("kernel", "^", "}")):
            names.append(m.group(1))
    return names
