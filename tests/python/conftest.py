"""pytest setup: import tessera from the source tree; each run gets a fresh cache."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "frontend"))
if "TESSERA_CACHE_DIR" not in os.environ:
    os.environ["TESSERA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessera-test-cache-")


# TESSERA_TEST_DEVICE=cuda reruns the CPU op-by-op suite on the GPU: every numpy
# array passed to a kernel launch is copied to a CUDA tensor, the kernel runs there,
# and every array is copied back (so the tests' numpy checks see GPU results).
# Tests about the CPU itself (x86 assembly, the thread pool) are not meaningful
# there; scripts/gpu_round.sh reports this run's counts without gating on them.
if os.environ.get("TESSERA_TEST_DEVICE", "cpu").startswith("cuda"):
    import numpy as _np
    import torch as _torch

    import importlib as _importlib

    _jit = _importlib.import_module("tessera.jit")  # tessera.jit is the decorator

    _device = os.environ["TESSERA_TEST_DEVICE"]

    def _to_device(v):
        if isinstance(v, _np.ndarray) and v.ndim > 0:
            return _torch.from_numpy(_np.ascontiguousarray(v)).to(_device), v
        return v, None

    def _run_on_device(kernel, grid, args, kwargs):
        moved = [_to_device(a) for a in args]
        kmoved = {k: _to_device(v) for k, v in kwargs.items()}
        out = kernel.run(*[m[0] for m in moved], grid=grid, **{k: m[0] for k, m in kmoved.items()})
        _torch.cuda.synchronize()
        for dev, host in list(moved) + list(kmoved.values()):
            if host is not None and host.flags.writeable:
                host[...] = dev.cpu().numpy().reshape(host.shape)
        return out

    def _getitem(self, grid):
        return lambda *a, **k: _run_on_device(self, grid, a, k)

    _jit.Kernel.__getitem__ = _getitem
