"""Plugs the optional C++ reader of torch tensor arguments (_C_torch, built from
frontend/csrc/torch_args.cpp where torch's headers exist) into the C++ launch path."""
from __future__ import annotations

import importlib
import os
import sys

from ._core import _C

_state = "not loaded: no launch has met a torch tensor yet"


def _disabled():
    return os.environ.get("TESSERA_TORCH_NATIVE", "1").strip().lower() in ("0", "off", "false", "no")


def install():
    """Installs _C_torch when it exists and was built against this exact torch;
    otherwise leaves (or puts back) the attribute path. tessera._C calls it the first
    time a launch meets a torch tensor type. True when the reader is active."""
    global _state
    torch = sys.modules.get("torch")
    if _disabled():
        _C._install_torch_args(None, None)
        _state = "off: TESSERA_TORCH_NATIVE=0"
        return False
    if torch is None:  # never imported for tessera's sake: it costs a second
        _C._install_torch_args(None, None)
        _state = "not loaded: torch is not imported"
        return False
    try:
        mod = importlib.import_module("_C_torch")  # refuses another torch version itself
        if mod.torch_version != str(torch.__version__):
            raise ImportError(f"_C_torch was built against torch {mod.torch_version} but this process runs "
                              f"torch {torch.__version__}")
        _C._install_torch_args(mod.api, getattr(torch._C, "_cuda_getCurrentRawStream", None))
    except Exception as e:  # not built, another torch, an unloadable library: Python reads tensors
        _C._install_torch_args(None, None)
        _state = f"unavailable ({type(e).__name__}: {e}); torch tensors are read through Python"
        return False
    _state = (f"active: torch {mod.torch_version}, "
              + ("tensors and CUDA streams" if mod.has_cuda_stream else "tensors (no CUDA stream reader)"))
    return True


def state():
    """Whether launches read torch tensors in C++, and if not, why."""
    return _state


def stats():
    """How many torch tensor arguments (and current streams) were read natively or
    through Python attributes by the C++ launch path, since the process started."""
    return _C._torch_args_stats()
