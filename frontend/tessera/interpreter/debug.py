"""Compile-time checks, printing, device asserts and optimizer hints (no-ops here)."""
from __future__ import annotations

import builtins

import numpy as np

from ..language.semantics import SemanticError
from . import numerics as N
from .errors import user_location
from .values import Tensor, to_tensor, unwrap


def _format_value(v, hex_: bool) -> str:
    v = unwrap(v)
    if not isinstance(v, Tensor):
        return str(v)
    if not hex_:
        return str(v.data)
    bits = N.raw_bits(v.data, v.dtype) if not v.dtype.is_ptr() else v.data
    width = max(2, v.dtype.itemsize * 2)
    return np.array2string(np.asarray(bits), formatter={"all": lambda x: f"0x{int(x):0{width}x}"})


class DebugOps:
    pid: tuple

    def static_assert(self, cond, msg=""):
        c = unwrap(cond)
        if not bool(c):
            raise AssertionError(f"tl.static_assert failed: {unwrap(msg)}" if unwrap(msg)
                                 else "tl.static_assert failed")

    def static_print(self, *values, sep=" ", end="\n", file=None, flush=False):
        builtins.print(*(unwrap(v) for v in values), sep=sep, end=end, file=file, flush=flush)

    def device_print(self, prefix, *args, hex=False):
        """One line per value: '(pid x, y, z) prefix value', like Triton's interpreter."""
        prefix = unwrap(prefix)
        head = f"({self.pid[0]}, {self.pid[1]}, {self.pid[2]})"
        if prefix:
            head += f" {prefix}"
        for v in args:
            builtins.print(f"{head} {_format_value(v, bool(unwrap(hex)))}")

    def device_assert(self, cond, msg=""):
        """Checked always in the interpreter (the compiled path checks only with
        TESSERA_DEBUG=1)."""
        c = to_tensor(cond, "tl.device_assert")
        ok = np.asarray(c.data != 0)
        if ok.all():
            return
        lane = int(np.flatnonzero(~ok.reshape(-1))[0])
        where = "" if c.is_scalar() else (
            f" (lane {lane} of {ok.size}"
            + (f", index {tuple(int(i) for i in np.unravel_index(lane, ok.shape))})"
               if ok.ndim > 1 else ")"))
        raise AssertionError(f"{user_location()}: program {self.pid}: device_assert failed: "
                             f"{unwrap(msg)}{where}")

    def _hint(self, name, input, values):
        x = to_tensor(input, f"tl.{name}")
        values = unwrap(values)
        values = [unwrap(v) for v in values] if isinstance(values, (list, tuple)) else [values]
        if len(values) != max(1, len(x.shape)):
            raise SemanticError(f"tl.{name}: {len(values)} values for a tile of rank "
                                f"{len(x.shape)}")
        return x

    def multiple_of(self, input, values):
        return self._hint("multiple_of", input, values)

    def max_contiguous(self, input, values):
        return self._hint("max_contiguous", input, values)

    def max_constancy(self, input, values):
        return self._hint("max_constancy", input, values)

    def assume(self, cond):
        pass

    def debug_barrier(self):
        pass
