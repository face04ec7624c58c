"""run_grid: binds a kernel's arguments to interpreter values and runs every program
of the grid, one at a time, with the numpy builtins installed in tessera.language."""
from __future__ import annotations

import inspect
import threading
import types as pytypes

import numpy as np

from ..language import core
from ..language import dtypes as D
from ..language import semantics as S
from ..language.semantics import SemanticError
from .cluster import ClusterOps
from .constexprs import KernelConstexpr
from .debug import DebugOps
from .elementwise import ElementwiseOps
from .errors import innermost_user_frame
from .foreign_arrays import HostCopies, as_interpretable, is_device_array
from .grid_dependency import GridDependencyOps
from .loop_carry import with_carried_numbers_as_tensors
from .memory import Memory, MemoryOps
from .random import RandomOps
from .reductions import ReductionOps
from .shapes import ShapeOps
from .standard import StandardOps
from .values import Tensor, convert, dtype_of_numpy, to_tensor, unwrap


class Builtins(MemoryOps, ElementwiseOps, ReductionOps, ShapeOps, StandardOps, RandomOps, DebugOps,
               GridDependencyOps, ClusterOps):
    """The object installed as core._interpreter_impl: one method per builtin name."""

    def __init__(self, memory: Memory, grid: tuple, kernel_name: str):
        self.memory, self.grid, self.kernel_name = memory, grid, kernel_name
        self._thread = threading.local()  # the program id: per thread (a cluster's programs run at once)
        self.pid = (0, 0, 0)
        self._clusters, self._claimed = {}, set()  # cluster.py
        self._run_program = None

    @property
    def pid(self):
        return self._thread.pid

    @pid.setter
    def pid(self, value):
        self._thread.pid = value

    def range_values(self, start, end=None, step=None):
        """The loop variables of a kernel `for` loop: scalar tensors of the type the
        compiled loop's induction variable has (the bounds' types promoted together,
        i32 for ordinary literals), so `i` in `x + i` is not a weak Python int."""
        if end is None:
            start, end = 0, start
        step = 1 if step is None else step
        bounds = [to_tensor(v, "range bound") for v in (start, end, step)]
        for b in bounds:
            if not (b.dtype.is_int() and b.is_scalar()):
                raise SemanticError(f"range bounds must be integer scalars, got {b.dtype} of "
                                    f"shape {list(b.shape)}")
        t = S.integer_promote(S.integer_promote(bounds[0].dtype, bounds[1].dtype), bounds[2].dtype)
        lo, hi, st = (int(b.data) for b in bounds)
        if st == 0:
            raise SemanticError("range step must not be zero")
        for i in range(lo, hi, st):
            yield convert(i, t)


class _KernelRange:
    """Stands for Python's `range` inside the kernel function (see range_values)."""

    def __init__(self, impl: Builtins):
        self.impl = impl

    def __call__(self, *args):
        return core.range(*args)  # iterated through impl.range_values (core.range.__iter__)


def _with_kernel_range(fn, impl: Builtins):
    """A copy of fn whose global `range` yields typed loop variables and whose run-time
    loops carry Python numbers as tensors (loop_carry.py). Only the kernel function
    itself is rebound; helpers it calls keep Python's range."""
    if not isinstance(fn, pytypes.FunctionType):
        return fn
    env = dict(fn.__globals__)
    env["range"] = _KernelRange(impl)
    rewritten = with_carried_numbers_as_tensors(fn, env)
    if rewritten is not None:
        return rewritten
    copy = pytypes.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


# --- arguments ------------------------------------------------------------------------------
def _python_int_type(value: int) -> D.dtype:
    """Triton's specialization of an int argument: i32 if it fits, u64 above 2**63 - 1,
    i64 otherwise."""
    if -2**31 <= value < 2**31:
        return D.int32
    if 2**63 <= value < 2**64:
        return D.uint64
    if -2**63 <= value < 2**63:
        return D.int64
    raise SemanticError(f"integer argument {value} does not fit in 64 bits")


def _resolve_type(t):
    if isinstance(t, str):
        return D.parse_signature_type(t)
    return unwrap(t)


def _runtime_argument(name: str, value, forced, memory: Memory):
    forced = _resolve_type(forced)
    if isinstance(value, np.ndarray):
        if not value.dtype.isnative:
            raise SemanticError(f"argument '{name}' has non-native byte order ({value.dtype}); "
                                f"pass value.astype(value.dtype.newbyteorder('='))")
        if forced is None:
            try:
                elem = dtype_of_numpy(value.dtype)
            except SemanticError as e:
                raise SemanticError(f"argument '{name}': {e}") from None
        if forced is not None:
            if not forced.is_ptr():
                raise SemanticError(f"argument '{name}' is an array but its type is given as "
                                    f"{forced}; use a pointer type such as '*fp32'")
            elem = forced.element_ty
        address = memory.add_array(name, value)
        return Tensor(np.uint64(address), D.pointer_type(elem))
    if value is None:               # `if ptr is not None:` must work in plain Python
        return None
    if isinstance(value, core.constexpr):
        return KernelConstexpr(value)
    if forced is not None:
        if forced.is_ptr():
            raise SemanticError(f"argument '{name}' has pointer type {forced} but is not an array")
        return convert(value, forced)
    if isinstance(value, (bool, np.bool_)):
        return Tensor(np.asarray(bool(value)), D.int1)
    if isinstance(value, np.generic):
        return to_tensor(value, f"argument '{name}'")
    if isinstance(value, int):
        return convert(value, _python_int_type(value))
    if isinstance(value, float):
        return convert(value, D.float32)
    raise SemanticError(f"argument '{name}': cannot pass a {type(value).__name__} to a kernel "
                        f"(expected an array (numpy, torch, CuPy, tessera.Array, __dlpack__), "
                        f"a Python/numpy scalar or None)")


def _is_constexpr_annotation(annotation) -> bool:
    return annotation is core.constexpr or (isinstance(annotation, str)
                                            and annotation.split(".")[-1] == "constexpr")


def _bind_arguments(fn, args: dict, constexprs: dict, types: dict, memory: Memory) -> list:
    sig = inspect.signature(fn)
    params = sig.parameters
    unknown = (set(args) | set(constexprs) | set(types)) - set(params)
    if unknown:
        raise TypeError(f"kernel '{fn.__name__}' has no parameter(s) {sorted(unknown)}")
    twice = set(args) & set(constexprs)
    if twice:
        raise TypeError(f"parameter(s) {sorted(twice)} given both as args and constexprs")
    values = []
    missing = []
    for name, p in params.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"kernel '{fn.__name__}' cannot take *args or **kwargs")
        if name in constexprs:
            values.append(_constexpr_argument(constexprs[name]))
        elif name in args:
            values.append(_runtime_argument(name, args[name], types.get(name), memory))
        elif p.default is not p.empty:
            if _is_constexpr_annotation(p.annotation) or isinstance(p.default, core.constexpr):
                values.append(_constexpr_argument(p.default))
            else:
                values.append(_runtime_argument(name, p.default, types.get(name), memory))
        else:
            missing.append(name)
    if missing:
        raise TypeError(f"kernel '{fn.__name__}' is missing argument(s) {missing}")
    return values


def _normalize_grid(grid) -> tuple:
    grid = tuple(int(unwrap(g)) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    if not 1 <= len(grid) <= 3 or any(g < 0 for g in grid):
        raise ValueError(f"grid must be 1 to 3 non-negative ints, got {grid}")
    return grid + (1,) * (3 - len(grid))


def _constexpr_argument(value):
    """Numbers get constexpr arithmetic; None and dtypes stay themselves, so that
    `AXIS is None` and `x.dtype == T` behave as in compiled kernels."""
    v = value.value if isinstance(value, core.constexpr) else value
    if v is None or isinstance(v, D.dtype):
        return v
    return KernelConstexpr(v)


def run_grid(fn, grid, args: dict, constexprs: dict, *, types: dict | None = None) -> None:
    """Runs `fn` once per program id of `grid` (x fastest, then y, then z).

    fn: the plain Python kernel function. grid: up to 3 ints. args: runtime parameter
    name -> numpy array (becomes a pointer to its element [0, ...]; any strides) or
    scalar (int -> i32/i64/u64, float -> fp32, bool -> i1, numpy scalars keep their
    type) or None. constexprs: constexpr parameter name -> value (the kernel gets a
    tl.constexpr with Python operators, see constexprs.py). types: optional
    parameter name -> tl dtype or signature string ('*bf16', 'i64') overriding the
    inferred type (the compiled path's signature, e.g. uint16 arrays holding bf16).
    """
    grid = _normalize_grid(grid)
    memory = Memory()
    impl = Builtins(memory, grid, getattr(fn, "__name__", "kernel"))
    types = dict(types or {})
    args, copies = _host_arguments(args, types)
    try:
        values = _bind_arguments(fn, args, constexprs, types, memory)
        _run_programs(fn, impl, grid, values)
    finally:
        if copies is not None:
            copies.write_back()


def _host_arguments(args: dict, types: dict):
    """args with torch/CuPy/dlpack/tessera.Array arguments replaced by host numpy
    arrays (foreign_arrays.py), and the HostCopies to write back (None if no GPU
    array). Fills `types` for arrays whose dtype numpy lacks (bf16)."""
    host, on_device = {}, {}
    for name, value in args.items():
        value, forced = as_interpretable(name, value)
        if forced is not None:
            types.setdefault(name, forced)
        (on_device if is_device_array(value) else host)[name] = value
    if not on_device:
        return host, None
    copies = HostCopies(on_device)
    host.update(copies.views)
    return host, copies


def _run_programs(fn, impl: Builtins, grid: tuple, values: list) -> None:
    kernel = _with_kernel_range(fn, impl)
    previous = core._interpreter_impl
    core._interpreter_impl = impl

    def run_program(pid):
        try:
            kernel(*values)
        except Exception as e:
            where = innermost_user_frame(e.__traceback__)
            e.add_note(f"while interpreting program {pid} of kernel '{impl.kernel_name}' (grid {grid})"
                       + (f" at {where}" if where else ""))
            raise

    impl._run_program = run_program
    try:
        with np.errstate(all="ignore"):
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        pid = (x, y, z)
                        if pid in impl._claimed:  # ran with its cluster (cluster.py)
                            continue
                        impl.pid = pid
                        try:
                            run_program(pid)
                        except Exception as e:
                            impl.finish_cluster(pid, e)
                            raise
                        impl.finish_cluster(pid, None)
    finally:
        core._interpreter_impl = previous
