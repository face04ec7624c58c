"""tessera.Array: a small array type for users without torch or CuPy.

On the CPU it wraps a numpy array; on a GPU ("cuda", "cuda:1") it owns device
memory from the CUDA driver and exposes __cuda_array_interface__, so kernels take
it like a CuPy array. Only what kernels need: dense, C-contiguous, a dtype, a shape.
"""
from __future__ import annotations

import numpy as np

from ._core import _C


def _device_index(device: str) -> int | None:
    """None for the CPU, the GPU index for 'cuda' / 'cuda:N'."""
    if device in (None, "cpu"):
        return None
    if device == "cuda":
        return 0
    if device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    raise ValueError(f"unknown device '{device}' (use 'cpu', 'cuda' or 'cuda:N')")


class Array:
    """A dense array on the CPU or on a GPU. Build with tessera.empty / zeros /
    from_numpy; read back with .numpy()."""

    def __init__(self, shape, dtype, device="cpu", _host=None):
        self.shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        self.dtype = np.dtype(dtype)
        self.device = "cpu" if device in (None, "cpu") else ("cuda:0" if device == "cuda" else device)
        self._index = _device_index(self.device)
        self._ptr = 0
        self._generation = 0
        if self._index is None:
            self._host = _host if _host is not None else np.empty(self.shape, self.dtype)
        else:
            self._host = None
            if not _C.cuda_available():
                raise RuntimeError(f"cannot allocate on {self.device}: {_C.cuda_unavailable_reason()}")
            self._ptr = _C.cuda_malloc(self._index, self.nbytes)
            # A sticky CUDA error resets the context and frees everything on it; a
            # later free of this address could free someone else's new allocation.
            self._generation = _C.cuda_context_generation(self._index)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def __array_interface__(self):
        if self._host is None:  # AttributeError: hasattr() must say "no" for GPU arrays
            raise AttributeError(f"array on {self.device}: use .numpy() to copy it to the host")
        return self._host.__array_interface__

    def data_ptr(self) -> int:
        """Address of the first element (host or device), as torch's data_ptr()."""
        return self._ptr if self._index is not None else int(self._host.ctypes.data)

    @property
    def __cuda_array_interface__(self):
        if self._index is None:
            raise AttributeError("__cuda_array_interface__")  # a CPU array is not a GPU array
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._ptr, False), "version": 3,
                "strides": None}

    def numpy(self) -> np.ndarray:
        """A host copy (the wrapped array itself on the CPU)."""
        if self._index is None:
            return self._host
        out = np.empty(self.shape, self.dtype)
        _C.cuda_copy_to_host(self._index, out, self._ptr)
        return out

    def __del__(self):
        if getattr(self, "_ptr", 0):
            try:
                if _C.cuda_context_generation(self._index) == self._generation:
                    _C.cuda_free(self._index, self._ptr)
            except Exception:  # interpreter shutdown: the driver may be gone
                pass
            self._ptr = 0

    def __repr__(self):
        return f"tessera.Array(shape={self.shape}, dtype={self.dtype}, device='{self.device}')"


def empty(shape, dtype=np.float32, device="cpu") -> Array:
    return Array(shape, dtype, device)


def zeros(shape, dtype=np.float32, device="cpu") -> Array:
    a = Array(shape, dtype, device)
    if a._index is None:
        a._host[...] = 0
    else:
        _C.cuda_memset(a._index, a._ptr, 0, a.nbytes)
    return a


def from_numpy(x, device="cpu") -> Array:
    x = np.ascontiguousarray(x)
    if _device_index(device) is None:
        return Array(x.shape, x.dtype, "cpu", _host=x)
    a = Array(x.shape, x.dtype, device)
    _C.cuda_copy_to_device(a._index, a._ptr, x)
    return a
