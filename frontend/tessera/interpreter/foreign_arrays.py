"""Array arguments that are not numpy arrays (torch tensors, CuPy and other
__cuda_array_interface__ / __dlpack__ arrays, tessera.Array) for the interpreter.

The interpreter reads and writes host memory only (memory.py), so:
  * host arrays (CPU torch tensors, tessera.Array on the CPU, CPU __dlpack__ and
    __array_interface__ objects) become numpy views of the same memory: the kernel
    writes straight through;
  * GPU arrays are copied to the host before the grid runs and copied back after it
    (as Triton's interpreter does). The copy keeps the layout: each argument's host
    view has the device view's strides, so pointer arithmetic with the strides the
    caller passes works, and arguments whose device bytes overlap (the same tensor
    passed twice, two views of one buffer) share one host copy, so a store through
    one is seen through the other.

Worked example: x = torch.arange(12., device="cuda").reshape(3, 4).T (shape (4, 3),
strides (1, 4) elements) spans device bytes [p, p + 48). The host gets one 48-byte
buffer (aligned like p modulo 4096, so the interpreter's alignment checks see the
device alignment) and the argument becomes np.ndarray((4, 3), float32, strides
(4, 16)) over it. After the grid the 48 bytes go back to p.
"""
from __future__ import annotations

import numpy as np

from ..language.semantics import SemanticError

_ALIGN = 4096

# torch dtypes numpy lacks: (numpy dtype of the same bits, Tessera signature type).
_TORCH_BIT_VIEWS = {"bfloat16": (np.uint16, "*bf16")}


class _DeviceArray:
    """A GPU array argument: its device, element [0, ...] address, numpy dtype, shape,
    byte strides, and whether the kernel may write it."""

    def __init__(self, device: int, ptr: int, dtype, shape, strides, writeable: bool):
        self.device, self.ptr, self.dtype = device, int(ptr), np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.writeable = writeable

    def byte_span(self) -> tuple[int, int]:
        if 0 in self.shape:
            return self.ptr, self.ptr
        lo = hi = self.ptr
        for n, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (n - 1) * s
            else:
                lo += (n - 1) * s
        return lo, hi + self.dtype.itemsize


def _torch_module(value):
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "untyped_storage")


def _torch_numpy_dtype(name: str, t):
    if name in _TORCH_BIT_VIEWS:
        return np.dtype(_TORCH_BIT_VIEWS[name][0]), _TORCH_BIT_VIEWS[name][1]
    try:
        return np.dtype("bool" if name == "bool" else name), None
    except TypeError:
        raise SemanticError(f"torch dtype {t.dtype} has no Tessera equivalent") from None


def _from_torch(name: str, t):
    """(host numpy array or _DeviceArray, forced signature type or None)."""
    dt_name = str(t.dtype).split(".")[-1]
    np_dtype, forced = _torch_numpy_dtype(dt_name, t)
    import torch
    t = t.detach()
    if t.device.type == "cpu":
        if forced is not None:
            t = t.view(torch.int16)  # same bits; numpy has no bf16
        return t.numpy().view(np_dtype), forced
    if t.device.type != "cuda":
        raise SemanticError(f"argument '{name}': the interpreter cannot reach memory on {t.device}")
    item = np_dtype.itemsize
    return _DeviceArray(t.device.index if t.device.index is not None else torch.cuda.current_device(),
                        t.data_ptr(), np_dtype, t.shape, [s * item for s in t.stride()], True), forced


def _from_cuda_array_interface(name: str, value, cai: dict):
    from .._core import _C
    ptr, readonly = cai["data"]
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, step = [], dtype.itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= max(int(n), 1)
    device = _C.cuda_pointer_device(int(ptr)) if ptr else 0
    return _DeviceArray(device, ptr, dtype, shape, strides, not readonly), None


def _from_dlpack(name: str, value):
    kind, index = value.__dlpack_device__()
    if int(kind) == 1:  # kDLCPU
        return np.from_dlpack(value), None
    try:
        import torch
    except ImportError:
        raise SemanticError(f"argument '{name}': the interpreter copies GPU arrays without "
                            f"__cuda_array_interface__ through torch, which is not installed") from None
    return _from_torch(name, torch.from_dlpack(value))


def as_interpretable(name: str, value):
    """(value the interpreter can bind, forced signature type or None). numpy arrays
    and scalars pass through; see the module comment for the others."""
    if isinstance(value, np.ndarray) or value is None or np.isscalar(value):
        return value, None
    if _torch_module(value):
        return _from_torch(name, value)
    cai = getattr(value, "__cuda_array_interface__", None) if not isinstance(value, type) else None
    if isinstance(cai, dict):
        return _from_cuda_array_interface(name, value, cai)
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return _from_dlpack(name, value)
    if hasattr(value, "__array_interface__"):
        return np.asarray(value), None
    return value, None


class HostCopies:
    """The host copies of all GPU arguments of one interpreted launch: overlapping
    device byte ranges (per device) merged into one buffer each."""

    def __init__(self, arrays: dict):
        self.buffers = []  # (device, device lo, host uint8 buffer, written back?)
        self.views = {}
        by_device = {}
        for name, a in arrays.items():
            by_device.setdefault(a.device, []).append((name, a))
        for device, items in by_device.items():
            self._copy_device(device, sorted(items, key=lambda it: it[1].byte_span()))

    def _copy_device(self, device: int, items: list):
        from .._core import _C
        groups = []
        for name, a in items:
            lo, hi = a.byte_span()
            if groups and lo < groups[-1][1]:
                groups[-1][1] = max(groups[-1][1], hi)
                groups[-1][2].append((name, a))
            else:
                groups.append([lo, hi, [(name, a)]])
        _C.cuda_synchronize(device)  # the whole context: torch's and CuPy's streams too
        for lo, hi, members in groups:
            raw = np.empty(hi - lo + _ALIGN, np.uint8)
            start = (lo - raw.ctypes.data) % _ALIGN
            host = raw[start:start + (hi - lo)]
            if hi > lo:
                _C.cuda_copy_to_host(device, host, lo)
            writeable = any(a.writeable for _, a in members)
            self.buffers.append((device, lo, host, writeable))
            for name, a in members:
                offset = a.ptr - lo
                view = np.ndarray(a.shape, a.dtype, buffer=host, offset=offset, strides=a.strides) \
                    if 0 not in a.shape else np.empty(a.shape, a.dtype)
                view.flags.writeable = a.writeable
                self.views[name] = view

    def write_back(self):
        from .._core import _C
        for device, lo, host, writeable in self.buffers:
            if writeable and host.size:
                _C.cuda_copy_to_device(device, lo, host)
        for device in {b[0] for b in self.buffers}:
            _C.cuda_synchronize(device)


def is_device_array(value) -> bool:
    return isinstance(value, _DeviceArray)
