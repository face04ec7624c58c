"""Host-side glue shared by the library's ops: which array library an input comes from
(numpy, torch, CuPy), views as (rows, columns) with a unit column stride, output
allocation next to the input, and checks that fail with a message naming the op."""
from __future__ import annotations

import functools
import math
import threading

import numpy as np

import tessera
import tessera.language as tl

try:  # torch is optional: numpy arrays work without it
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


_TORCH_TENSOR = torch.Tensor if torch is not None else ()  # isinstance(x, ()) is False


def is_torch(x) -> bool:
    return isinstance(x, _TORCH_TENSOR)


def is_cupy(x) -> bool:
    return type(x).__module__.startswith("cupy")


def _cupy():
    import cupy
    return cupy


FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


_TORCH_DTYPE_NAMES = {}


def dtype_name(x) -> str:
    """'float32', 'bfloat16', ... for numpy, torch and CuPy arrays alike."""
    if is_torch(x):
        d = x.dtype
        name = _TORCH_DTYPE_NAMES.get(d)
        if name is None:
            name = _TORCH_DTYPE_NAMES[d] = str(d).replace("torch.", "")
        return name
    return np.dtype(x.dtype).name if not hasattr(x.dtype, "name") else x.dtype.name


def check_float(op: str, x, name: str = "x"):
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        raise TypeError(f"tessera.kernels.{op}: {name} must be a numpy array, a torch tensor or a CuPy array, "
                        f"got {type(x).__name__}")
    d = dtype_name(x)
    if d not in FLOAT_DTYPES:
        raise TypeError(f"tessera.kernels.{op}: {name} has dtype {d}; supported: {', '.join(FLOAT_DTYPES)}")
    return d


def check_same(op: str, ref, other, name: str):
    """other must live where ref lives (same library, device and dtype)."""
    if other is None:
        return
    if type(other) is not type(ref) and not (is_torch(ref) and is_torch(other)):
        raise TypeError(f"tessera.kernels.{op}: {name} is a {type(other).__name__} but x is a {type(ref).__name__}; "
                        f"pass both from the same array library")
    if dtype_name(other) != dtype_name(ref):
        raise TypeError(f"tessera.kernels.{op}: {name} has dtype {dtype_name(other)} but x has {dtype_name(ref)}")
    if is_torch(ref) and other.device != ref.device:
        raise ValueError(f"tessera.kernels.{op}: {name} is on {other.device} but x is on {ref.device}")


def acc_dtype(x):
    """The kernels' accumulation type: fp64 inputs accumulate in fp64, the rest in fp32."""
    return tl.float64 if dtype_name(x) == "float64" else tl.float32


def contiguous(x):
    if is_torch(x):
        return x.contiguous()
    if is_cupy(x):
        return _cupy().ascontiguousarray(x)
    return np.ascontiguousarray(x)


def strides(x):
    """Strides in elements."""
    if is_torch(x):
        return tuple(x.stride())
    return tuple(s // x.itemsize for s in x.strides)


def rows_view(x, n_cols: int):
    """x as a (rows, n_cols) array with unit column stride and a single row stride.
    Reshape keeps a view where the layout allows; otherwise (a transposed or sliced
    input) the data is copied once into a contiguous array."""
    if x.shape and x.shape[-1] != n_cols:
        raise ValueError(f"last dimension is {x.shape[-1]}, expected {n_cols}")
    if is_torch(x) and n_cols > 0 and x.dim() >= 1 and x.is_contiguous():
        # The common case first: a contiguous torch tensor (a GPU op's host time is
        # mostly such Python; see bench/results/kernels_cuda_float16_bwd.md).
        return x if x.dim() == 2 else x.view(-1, n_cols)
    rows = math.prod(x.shape[:-1]) if x.ndim > 1 else 1  # math.prod: np.prod costs ~5 us a call
    if x.ndim == 0:
        raise ValueError("a 0-d input has no last dimension")
    try:
        v = x.reshape(rows, n_cols)
    except (ValueError, RuntimeError):
        v = contiguous(x).reshape(rows, n_cols)
    if n_cols > 1 and strides(v)[1] != 1:
        v = contiguous(v)
    return v


def row_stride(v) -> int:
    return strides(v)[0] if v.shape[0] > 1 else v.shape[1]


# Below this many bytes a CPU torch output comes from torch's allocator: transparent
# huge pages start at 2 MiB, and a numpy-backed tensor costs ~1 us more to make and
# more again to free (measured per autograd fwd+bwd on 4x64 inputs).
_THP_BYTES = 1 << 21


def _torch_dtype(like, dtype):
    """The torch dtype empty()/allocator() give for `dtype` (None: like's; 'acc': the
    accumulation type; else a name)."""
    if dtype is None:
        return like.dtype
    if dtype == "acc":
        return torch.float64 if like.dtype is torch.float64 else torch.float32
    return getattr(torch, dtype)


def empty(like, shape, dtype=None):
    """A new array of `shape` in the same library and on the same device as `like`;
    dtype None keeps like's, 'acc' gives the accumulation type (fp32 or fp64)."""
    if isinstance(like, _TORCH_TENSOR):
        # The hot path of every op's host code: few calls (new_empty keeps the device).
        dt = _torch_dtype(like, dtype)
        if like.is_cuda or math.prod(shape) * like.element_size() < _THP_BYTES:
            # Sizes as separate arguments: torch parses a tuple of sizes ~0.5 us slower
            # (new_empty((8, 64)) 1.42 us, new_empty(8, 64) 0.87 us on the CPU), and a
            # dtype keyword costs more to parse than the dtype is worth when it is like's.
            if not shape:
                return like.new_empty(()) if dt is like.dtype else like.new_empty((), dtype=dt)
            return like.new_empty(*shape) if dt is like.dtype else like.new_empty(*shape, dtype=dt)
        return _torch_cpu_empty(shape, dt)
    if dtype == "acc":
        dtype = "float64" if dtype_name(like) == "float64" else "float32"
    if is_cupy(like):
        return _cupy().empty(shape, dtype=like.dtype if dtype is None else dtype)
    return np.empty(shape, dtype=like.dtype if dtype is None else dtype)


def allocator(like, shape, dtype=None):
    """A callable making what empty(like, shape, dtype) makes, with every decision taken
    now, for a launch plan to keep: a call costs what torch.empty itself costs (0.9 us
    on the CPU for a small tensor; empty() spends ~0.5 us more deciding). Only for plans
    keyed by like's layout (its type, dtype and device fix the choice)."""
    shape = tuple(int(s) for s in shape)
    if isinstance(like, _TORCH_TENSOR):
        dt = _torch_dtype(like, dtype)
        if like.is_cuda or math.prod(shape) * like.element_size() < _THP_BYTES:
            # Sizes as separate arguments (see empty); () is a 0-d tensor.
            return functools.partial(torch.empty, *(shape or ((),)), dtype=dt, device=like.device)
        return functools.partial(_torch_cpu_empty, shape, dt)
    if dtype == "acc":
        dtype = "float64" if dtype_name(like) == "float64" else "float32"
    # (not a partial of empty: it would keep `like`, an input array, alive in the plan)
    return functools.partial(_cupy().empty if is_cupy(like) else np.empty, shape,
                             dtype=like.dtype if dtype is None else dtype)


_SAME_SIZE_NUMPY = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_ITEMSIZE = {}


def _torch_cpu_empty(shape, dt):
    """torch.empty on the CPU through numpy's allocator: numpy asks the kernel for
    transparent huge pages on large arrays, torch does not, and a fresh 64 MB output
    then costs 16384 page faults in the kernel instead of 32 (measured: 3x the time
    of a layer norm on 4096x4096 fp32)."""
    itemsize = _ITEMSIZE.get(dt)
    if itemsize is None:
        itemsize = _ITEMSIZE[dt] = torch.empty((), dtype=dt).element_size()
    return torch.from_numpy(np.empty(shape, dtype=_SAME_SIZE_NUMPY[itemsize])).view(dt)


def zeros(like, shape, dtype=None):
    out = empty(like, shape, dtype)
    out[...] = 0
    return out


def block_for(n: int, cap: int = 1 << 16) -> int:
    b = tessera.next_power_of_2(max(int(n), 1))
    if b > cap:
        raise ValueError(f"rows of {n} elements are longer than this kernel's limit ({cap})")
    return b


def num_programs_for_partials(like, n_rows: int, per_sm: int = 4) -> int:
    """How many programs share the rows of a backward pass that also reduces over
    rows (dweight, dbias): each writes one partial row, summed afterwards. A few per
    CPU thread; on a GPU `per_sm` per multiprocessor, a whole number of waves (512 on
    a 132-SM card left the last of four waves a fifth full)."""
    per = per_sm * gpu_multiprocessors(like) if on_gpu(like) else 4 * max(1, tessera_threads())
    return max(1, min(n_rows, per))


_MULTIPROCESSORS = {}


def gpu_multiprocessors(like) -> int:
    """The streaming multiprocessors of the GPU `like` lives on (asked once per device)."""
    if is_torch(like):
        index = like.get_device()
        count = _MULTIPROCESSORS.get(("torch", index))
        if count is None:
            count = _MULTIPROCESSORS[("torch", index)] = torch.cuda.get_device_properties(index).multi_processor_count
        return count
    index = like.device.id
    count = _MULTIPROCESSORS.get(("cupy", index))
    if count is None:
        count = _MULTIPROCESSORS[("cupy", index)] = int(
            _cupy().cuda.Device(index).attributes["MultiProcessorCount"])
    return count


_MEMORY_GBPS = {}
# Plans tuned for memory that streams this fast or faster (the H200's HBM3e: 4.8 TB/s
# nominal, a copy at ~4 TB/s; the H100 SXM's HBM3: 3.35 TB/s, a copy at ~2.9) keep more
# bytes in flight per SM: kernels/norm.py's BWD_GPU_PLANS_FAST_MEMORY.
FAST_MEMORY_GBPS = 4000.0


def gpu_memory_gbps(like) -> float:
    """The nominal bandwidth of the GPU memory `like` lives in, GB/s: 2 transfers a clock
    over the bus (asked once per device; 0 where the driver does not say)."""
    if is_torch(like):
        index = like.get_device()
        key = ("torch", index)
        if key not in _MEMORY_GBPS:
            props = torch.cuda.get_device_properties(index)
            khz, bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
            _MEMORY_GBPS[key] = 2.0 * khz * 1e3 * bits / 8 / 1e9
        return _MEMORY_GBPS[key]
    index = like.device.id
    key = ("cupy", index)
    if key not in _MEMORY_GBPS:
        attrs = _cupy().cuda.Device(index).attributes
        _MEMORY_GBPS[key] = 2.0 * attrs.get("MemoryClockRate", 0) * 1e3 * attrs.get("GlobalMemoryBusWidth", 0) / 8 / 1e9
    return _MEMORY_GBPS[key]


def fast_memory(like) -> bool:
    """Whether `like` is on a GPU whose memory streams at FAST_MEMORY_GBPS or more."""
    return on_gpu(like) and gpu_memory_gbps(like) >= FAST_MEMORY_GBPS


def tessera_threads() -> int:
    """The CPU thread pool's size (fixed when the pool starts; TESSERA_NUM_THREADS or
    the core count). Asked of the runtime once: os.cpu_count() costs ~15 us a call."""
    global _THREADS
    if _THREADS is None:
        from tessera._core import _C
        _THREADS = max(1, int(_C.num_threads()))
    return _THREADS


_THREADS = None


def layout(x):
    """What an op's launch plan depends on in an array: its type, shape, strides,
    dtype and device (a key of the ops' plan caches; see Plans)."""
    if isinstance(x, _TORCH_TENSOR):
        # get_device(): -1 on the CPU, the GPU's index (x.device builds an object per call).
        return x.shape, x.stride(), x.dtype, x.get_device()
    if x is None:
        return None
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):  # not an array: the op's checks say so
        return type(x), None
    dev = getattr(x, "device", None)
    return type(x), tuple(x.shape), getattr(x, "strides", None), str(x.dtype), getattr(dev, "id", None)


class Plans(dict):
    """An op's launch plans: key (layouts of its inputs and its options) -> what the
    host code derives from them once (checks passed, views, grid, block, constexprs,
    launch options), so a repeated call does the checks and arithmetic only on its
    first time. Cleared when it grows past `limit` (shapes that change every call)."""

    def __init__(self, limit=256):
        super().__init__()
        self.limit = limit

    def remember(self, key, plan):
        if len(self) >= self.limit:
            self.clear()
        self[key] = plan
        return plan


def reshape(x, shape):
    return x.reshape(*shape) if shape and is_torch(x) else x.reshape(shape)


def shaped(x, shape):
    """x reshaped to `shape` (a tuple), or x itself when it has that shape already (a
    reshape to the same shape still makes a new view: ~1 us of host time). Torch gets
    the sizes as separate arguments (a tuple costs ~0.5 us more to parse)."""
    if x.shape == shape:
        return x
    return x.reshape(*shape) if shape and isinstance(x, _TORCH_TENSOR) else x.reshape(shape)


def scalar_float(op: str, name: str, v, lo=None, hi=None, hi_open=False) -> float:
    v = float(v)
    if lo is not None and v < lo or hi is not None and (v > hi or hi_open and v >= hi):
        raise ValueError(f"tessera.kernels.{op}: {name}={v} is out of range")
    return v


def numel(x) -> int:
    return int(x.numel()) if is_torch(x) else int(x.size)


def scalar(like, v):
    """A float kernel argument in like's precision class: Python floats launch as fp32,
    so fp64 data gets a numpy float64 (an fp64 argument) to keep eps, p, scale exact."""
    return np.float64(v) if dtype_name(like) == "float64" else float(v)


def on_gpu(x) -> bool:
    return (is_torch(x) and x.is_cuda) or is_cupy(x)


def max_registers(per_sm: int, num_warps: int):
    """The maxnreg launch option that lets `per_sm` programs of `num_warps` warps share a
    multiprocessor's 64K registers (a multiple of 8, ptxas's unit), or None when ptxas's
    own limit (255, or 64K over one program's threads) already allows them."""
    cap = (65536 // (per_sm * num_warps * 32)) // 8 * 8
    return None if per_sm <= 1 or cap >= 255 else cap


def row_launch_options(like, block: int, max_warps: int = 16) -> dict:
    """Launch options of a one-row-per-program kernel: on a GPU, enough warps that each
    thread holds a few elements of the row (a warp per 256 elements, at most
    max_warps); on the CPU none (num_warps has no effect there, but would key the
    cache). Forward row kernels pass max_warps=8: on an H100 (16384x4096 fp16) 8 warps
    ran cross_entropy in 84 us, softmax+dropout in 97 us, 16 warps in 111 and 118 us
    (smaller blocks keep more rows in flight per SM). Backward kernels keep 16 (those
    with a fixed number of programs, as the norm backward's 512, lose occupancy with 8)."""
    if not on_gpu(like):
        return {}
    return {"num_warps": max(1, min(max_warps, block // 256))}


_AUTOGRAD = None


def autograd():
    """tessera.kernels.autograd, imported on the first call (it imports the op modules,
    so they cannot import it at the top); an import statement per call costs ~0.3 us."""
    global _AUTOGRAD
    if _AUTOGRAD is None:
        from . import autograd as module
        _AUTOGRAD = module
    return _AUTOGRAD


# Arrival counters of kernels whose last program to finish a group of programs combines
# the group's partial results (int32, zero between launches: each last arrival resets
# its counter), and the scratch arrays those partial results go to. One of each per
# place launches are ordered in: a GPU stream (torch's current one, which Tessera
# launches on) or a CPU thread (a CPU launch returns when it is done); two launches in
# flight on one array would miscount or overwrite each other's partials. An array only
# grows (new counters are zeroed once); scratch needs no zeroing (every partial a
# launch reads, it wrote first).
_ARRIVAL_COUNTERS = {}
_SCRATCH = {}
_RAW_STREAM = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)


def launch_place(like, dtype):
    """Where launches on like's device are ordered (see above), with the array's dtype."""
    if isinstance(like, _TORCH_TENSOR):  # (the common case in one device query: -1 on the CPU)
        index = like.get_device()
        if index >= 0:
            return ("gpu", index, _RAW_STREAM(index) if _RAW_STREAM is not None else 0, type(like), dtype)
        return ("cpu", threading.get_ident(), type(like), dtype)
    if on_gpu(like):
        index = like.get_device() if is_torch(like) else like.device.id
        return ("gpu", index, _RAW_STREAM(index) if _RAW_STREAM is not None else 0, type(like), dtype)
    return ("cpu", threading.get_ident(), type(like), dtype)


def arrival_counters(like, count: int, dtype: str = "int32"):
    """At least `count` zeroed counters (int32 or int64) on like's device, for this
    stream or thread."""
    place = launch_place(like, dtype)
    counters = _ARRIVAL_COUNTERS.get(place)
    if counters is None or counters.shape[0] < count:
        counters = _ARRIVAL_COUNTERS[place] = zeros(like, (max(count, 1024),), dtype)
    return counters


def split_scratch(like, elements: int, count: int, acc: str = "float32"):
    """(partials, counters) of a split kernel on like's device, for this stream or
    thread: a 1-D scratch array of at least `elements` of `acc` (the accumulation type:
    float32, or float64 for fp64 data) and at least `count` zeroed int32 arrival
    counters. Both are kept and reused (a 17-row linear's 4 x 17 x 2048 fp32 partials
    cost ~4 us of host time to allocate on each call); the scratch grows to the largest
    size asked."""
    place = launch_place(like, acc)
    partials = _SCRATCH.get(place)
    if partials is None or partials.shape[0] < elements:
        partials = _SCRATCH[place] = empty(like, (max(elements, 1 << 16),), acc)
    counters = _ARRIVAL_COUNTERS.get(place[:-1] + ("int32",))
    if counters is None or counters.shape[0] < count:
        counters = arrival_counters(like, count)
    return partials, counters
