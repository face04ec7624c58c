"""Errors raised while interpreting a kernel, and how they point at the kernel source."""
from __future__ import annotations

import linecache
import os
import sys
import types

_INTERPRETER_DIR = os.path.dirname(os.path.abspath(__file__))
_LANGUAGE_DIR = os.path.join(os.path.dirname(_INTERPRETER_DIR), "language")


class InterpreterError(RuntimeError):
    """A kernel did something at run time that has no defined result (an access outside
    every array argument, a store to a read-only array, ...)."""


def _is_tessera_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_INTERPRETER_DIR + os.sep) or path.startswith(_LANGUAGE_DIR + os.sep)


def user_location(frame: types.FrameType | None = None) -> str:
    """'file:line: source' of the innermost kernel-code frame calling into Tessera."""
    f = frame or sys._getframe(1)
    while f is not None and _is_tessera_frame(f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return "<unknown location>"
    src = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    loc = f"{f.f_code.co_filename}:{f.f_lineno}"
    return f"{loc}: {src}" if src else loc


def innermost_user_frame(tb: types.TracebackType | None) -> str | None:
    """'file:line' of the innermost non-Tessera frame of a traceback."""
    found = None
    while tb is not None:
        if not _is_tessera_frame(tb.tb_frame.f_code.co_filename):
            found = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found
