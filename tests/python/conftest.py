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
# TESSERA_TEST_DEVICE=torch-cpu runs the same shim with CPU torch tensors (tests the
# shim itself on a machine without a GPU).
if os.environ.get("TESSERA_TEST_DEVICE", "cpu").startswith(("cuda", "torch-cpu")):
    import numpy as _np
    import torch as _torch

    import importlib as _importlib

    _jit = _importlib.import_module("tessera.jit")  # tessera.jit is the decorator

    _device = os.environ["TESSERA_TEST_DEVICE"].replace("torch-cpu", "cpu")

    def _span(v):
        """(first, count): the elements [first, first + count) of v's memory, counted
        from v's element [0, ...] (first <= 0 for negative strides)."""
        item = v.dtype.itemsize
        first = sum((n - 1) * s // item for n, s in zip(v.shape, v.strides) if s < 0)
        last = sum((n - 1) * s // item for n, s in zip(v.shape, v.strides) if s > 0)
        return first, last - first + 1

    def _to_device(v):
        """A device copy with v's layout: the kernel gets the address of element
        [0, ...] of a copy of the whole span v's strides reach, so the strides a test
        passes (transposed, every 3rd row, negative) address the same elements there."""
        if not (isinstance(v, _np.ndarray) and v.ndim > 0):
            return v, None
        if v.size == 0 or any(s % v.dtype.itemsize for s in v.strides):
            return _torch.from_numpy(_np.ascontiguousarray(v)).to(_device), (v, None)
        first, count = _span(v)
        lowest = v[tuple(slice(n - 1, None) if s < 0 else slice(0, 1) for n, s in zip(v.shape, v.strides))]
        span = _np.lib.stride_tricks.as_strided(lowest, shape=(count,), strides=(v.dtype.itemsize,))
        flat = _torch.from_numpy(_np.array(span)).to(_device)
        return flat[-first:], (v, flat)

    def _copy_back(host, flat, dev):
        if not host.flags.writeable:
            return
        if flat is None:
            host[...] = dev.cpu().numpy().reshape(host.shape)
            return
        first, _ = _span(host)
        got = flat.cpu().numpy()
        host[...] = _np.lib.stride_tricks.as_strided(got[-first:], shape=host.shape, strides=host.strides)

    def _run_on_device(kernel, grid, args, kwargs):
        moved = [_to_device(a) for a in args]
        kmoved = {k: _to_device(v) for k, v in kwargs.items()}
        out = kernel.run(*[m[0] for m in moved], grid=grid, **{k: m[0] for k, m in kmoved.items()})
        if _device != "cpu":
            _torch.cuda.synchronize()
        for dev, saved in list(moved) + list(kmoved.values()):
            if saved is not None:
                _copy_back(saved[0], saved[1], dev)
        return out

    def _getitem(self, grid):
        return lambda *a, **k: _run_on_device(self, grid, a, k)

    _jit.Kernel.__getitem__ = _getitem
