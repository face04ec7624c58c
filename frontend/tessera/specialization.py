"""Specialization of kernel arguments: what about an argument shapes the code.

Like Triton: pointer arguments specialize on their element type; integers on
being equal to 1 (then they become compile-time constants) and on their
divisibility; floats and bools on their type; tl.constexpr parameters on their value.

An integer's divisibility class is 16, 8 or 1 (the largest of these dividing it).
Triton marks divisibility by 16 only; the class 8 is ours: a row stride of 8 elements
of a 16-bit type is 16 bytes, which is what the cp.async ring's 16-byte copies and the
TMA's tensor maps need (x @ W^T with K = 1000 has 2000-byte rows: aligned, but not a
multiple of 16 elements). The price is at most one more specialization per integer
argument (n % 16 == 8 beside n % 8 != 0).
"""
from __future__ import annotations

from ._core import _C
from .language import dtypes as D

# Launch-time argument kinds for the C++ packer (frontend/csrc/module.cpp).
_KIND_OF = {"i1": "b", "i8": "c", "i16": "s", "i32": "i", "i64": "l", "u8": "C", "u16": "S",
            "u32": "I", "u64": "L", "f32": "f", "f64": "d"}


def launch_kind(t: D.dtype) -> str:
    if t.is_ptr():
        return "p"
    k = _KIND_OF.get(t.ir)
    if k is None:
        raise TypeError(f"scalar arguments of type {t} are not supported; pass fp32/fp64 or integers")
    return k


def array_dtype(value):
    """(tessera dtype, device string) of an array-like argument, or None."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        return None
    mod = type(value).__module__
    if mod == "tessera.array":  # tessera.Array
        t = D.NUMPY_TO_DTYPE.get(dt.name)
        if t is None:
            raise TypeError(f"tessera.Array dtype {dt} is not supported")
        return t, value.device
    if mod.startswith("torch"):
        t = D.TORCH_TO_DTYPE.get(str(dt))
        if t is None:
            raise TypeError(f"torch dtype {dt} is not supported")
        return t, str(value.device)
    if hasattr(value, "__array_interface__") or mod.startswith("numpy"):
        t = D.NUMPY_TO_DTYPE.get(getattr(dt, "name", str(dt)))
        if t is None:
            if getattr(dt, "name", "") == "bfloat16":
                return D.bfloat16, "cpu"
            raise TypeError(f"numpy dtype {dt} is not supported")
        return t, "cpu"
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:  # CuPy, numba: a GPU array; the launch rejects it without a GPU back end
        import numpy as np
        t = D.NUMPY_TO_DTYPE.get(np.dtype(cai["typestr"]).name)
        if t is None:
            raise TypeError(f"GPU array dtype {cai['typestr']} is not supported")
        dev = getattr(getattr(value, "device", None), "id", None)
        if dev is None and _C.cuda_available():  # no device attribute: ask the driver who owns it
            dev = _C.cuda_pointer_device(int(cai["data"][0]))
        return t, "cuda" if dev is None else f"cuda:{dev}"
    return None


def dlpack_spec(value):
    """The spec of an array exported through DLPack (__dlpack__ / __dlpack_device__):
    CPU arrays for CPU launches, CUDA ones for GPU launches."""
    try:
        data, ir, device, what = _C.dlpack_info(value)
    except Exception as e:  # the producer's __dlpack__ failed or gave no "dltensor" capsule
        raise TypeError(f"reading {type(value).__name__} through DLPack failed: {type(e).__name__}: {e}") from None
    if ir is None:
        raise TypeError(f"DLPack dtype ({what}) of {type(value).__name__} is not supported")
    if device == "cpu":
        return ("ptr", ir, "cpu")
    if not device.startswith("cuda:"):
        raise TypeError(f"arrays on {device} are not supported (only CPU and CUDA memory)")
    return ("ptr", ir, device, data % 16 == 0)


def int_type(v: int) -> D.dtype:
    if -2**31 <= v < 2**31:
        return D.int32
    if -2**63 <= v < 2**63:
        return D.int64
    if 0 <= v < 2**64:
        return D.uint64
    raise OverflowError(f"integer argument {v} does not fit in 64 bits")


_ARRAY_SPEC_CACHE = {}


def _ndarray_spec(value):
    dt = value.dtype
    s = _ARRAY_SPEC_CACHE.get(dt)
    if s is None:
        t, dev = array_dtype(value)
        s = _ARRAY_SPEC_CACHE[dt] = ("ptr", t.ir, dev)
    return s


# value % 16 -> the divisibility class of an integer argument (see the module's doc).
_DIVISIBILITY_CLASS = tuple(16 if r == 0 else 8 if r == 8 else 1 for r in range(16))


def divisibility_class(value: int) -> int:
    """16, 8 or 1: the largest of these dividing `value` (its specialization)."""
    return _DIVISIBILITY_CLASS[value % 16]


def _int_spec(value):
    if value == 1:
        return ("const", 1)
    if -2**31 <= value < 2**31:
        return ("i32", _DIVISIBILITY_CLASS[value % 16])
    return (int_type(value).ir, _DIVISIBILITY_CLASS[value % 16])


_FAST = {bool: lambda v: "i1", int: _int_spec, float: lambda v: "f32"}
try:
    import numpy as _np
    _FAST[_np.ndarray] = _ndarray_spec
    _np_generic = _np.generic
except ImportError:  # pragma: no cover
    _np_generic = ()


def _data_ptr(value) -> int:
    if hasattr(value, "data_ptr"):
        return int(value.data_ptr())
    cai = getattr(value, "__cuda_array_interface__", None)
    return int(cai["data"][0]) if cai else 0


_TORCH_SPEC_CACHE = {}


def _torch_spec(value):
    """torch.Tensor fast path: (dtype, device) pairs are cached; a CUDA pointer adds
    its 16-byte alignment (one data_ptr() call)."""
    k = (value.dtype, value.device)
    base = _TORCH_SPEC_CACHE.get(k)
    if base is None:
        t, dev = array_dtype(value)
        base = _TORCH_SPEC_CACHE[k] = ("ptr", t.ir, dev)
    if base[2] == "cpu":
        return base
    return base + (value.data_ptr() % 16 == 0,)


def spec_of(value):
    """A hashable key for how `value` specializes its (non-constexpr) parameter."""
    f = _FAST.get(type(value))
    if f is not None:
        return f(value)
    t = type(value)
    if t.__module__ == "torch" and t.__name__ in ("Tensor", "Parameter"):
        _FAST[t] = _torch_spec
        return _torch_spec(value)
    if t is bool:
        return "i1"
    if t is int:
        return _int_spec(int(value))
    if t is float:
        return "f32"
    if value is None:
        return ("const", None)
    if isinstance(value, _np_generic):  # np.int32(5), np.float32(1.5): a scalar, not an array
        name = value.dtype.name
        if name not in D.NUMPY_TO_DTYPE:
            raise TypeError(f"numpy scalar of dtype {name} is not supported")
        return ("scalar", name)
    ad = array_dtype(value)
    if ad is not None:
        if ad[1] != "cpu":
            # GPU pointers also specialize on 16-byte alignment (as Triton): it is what
            # lets loads and stores be 16 bytes per thread (ld.global.v4).
            return ("ptr", ad[0].ir, ad[1], _data_ptr(value) % 16 == 0)
        return ("ptr", ad[0].ir, ad[1])
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        return dlpack_spec(value)
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "shape", None) == ():
        return ("scalar", str(value.dtype))
    raise TypeError(f"unsupported kernel argument of type {t.__name__}: pass numpy arrays, "
                    f"torch tensors, CuPy or DLPack arrays, ints, floats or bools")
