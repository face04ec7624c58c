"""Loads the C++ core (tessera._C) built by CMake into frontend/tessera/_lib."""
from __future__ import annotations

import importlib
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_lib = os.path.join(_here, "_lib")
if _lib not in sys.path:
    sys.path.insert(0, _lib)
try:
    _C = importlib.import_module("_C")
except ImportError as e:  # pragma: no cover - only on a broken install
    raise ImportError(
        f"tessera's C++ core is not built ({e}). Run `bash scripts/setup.sh` "
        f"(or `pip install .`) first.") from e
