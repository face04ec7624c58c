"""@tessera.kernel: specialization, compilation through the cache, and launch.

A launch `k[grid](*args, **meta)` of a specialization already compiled runs in C++
(frontend/csrc/launch_fastpath.cpp, the base class of Kernel): it binds the
arguments, computes the specialization key, finds the compiled kernel in a per-kernel
table, packs the parameters and launches. Everything else (a first launch, the
interpreter, a callable grid, unusual options, any error) takes the Python launcher
generated here (`Kernel._make_launcher`), which finds the kernel in an in-memory
table, the disk cache, or compiles it; C++ then registers what it returned.
`kernel.bind(grid, **values)` is the same launch with the grid, options and some
arguments fixed once (Kernel.bind; BoundKernel in launch_fastpath.cpp).
"""
from __future__ import annotations

import functools
import inspect
import operator
import os
import weakref

from . import cache_key as CK
from . import specialization as S
from ._core import _C
from .errors import CompilationError, InternalCompilerError
from .language import dtypes as D
from .language.core import constexpr

# Triton's launch options a launch accepts and `run` drops: num_ctas is ignored, and so is
# launch_pdl (a kernel that calls tl.extra.cuda.gdc_wait is launched with PDL whatever the
# launch says; docs/language.md).
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "stream", "debug", "launch_pdl")
# The launch options Kernel.bind fixes (stream= is given per call).
_BIND_OPTIONS = ("num_warps", "num_stages", "debug", "maxnreg", "enable_fp_fusion", "num_ctas")
# Names the generated launcher binds itself (see Kernel._make_launcher).
_LAUNCHER_NAMES = frozenset({"grid", "num_warps", "num_stages", "debug", "options"})

# Read once: launches must not pay for environment lookups. set_interpret()
# switches at run time (tests).
_INTERPRET = os.environ.get("TESSERA_INTERPRET") == "1"
_DEBUG = os.environ.get("TESSERA_DEBUG") == "1"
# TESSERA_PDL=0: kernels that call gdc_wait load as ordinary launches (no programmatic
# dependent launch; for measuring what it gains, or ruling it out). Read at import.
_PDL = os.environ.get("TESSERA_PDL", "1") != "0"


def set_interpret(on: bool) -> None:
    """Run kernels with the numpy interpreter (same as TESSERA_INTERPRET=1)."""
    global _INTERPRET
    _INTERPRET = bool(on)


def set_debug(on: bool) -> None:
    """Compile device_assert checks in (same as TESSERA_DEBUG=1)."""
    global _DEBUG
    _DEBUG = bool(on)


def _is_constexpr_annotation(ann) -> bool:
    if ann is constexpr:
        return True
    return isinstance(ann, str) and ann.split(".")[-1] == "constexpr"


class CompiledKernel:
    """A kernel compiled for one specialization. `asm` maps each stage name ('tir',
    'tir-opt', 'llir', 'llir-opt', 'asm', ...) to its text."""

    def __init__(self, name, asm, stage_order, binary, entry_symbol, metadata, kinds, runtime_indices,
                 cache_key=None, from_cache=False):
        self.name = name
        self.asm = asm
        self.stage_order = stage_order
        self.binary = binary
        self.entry_symbol = entry_symbol
        self.metadata = metadata
        self.written_indices = ()  # argument positions the kernel may store through (set by Kernel)
        self.kinds = kinds
        self.runtime_indices = runtime_indices
        self.cache_key = cache_key
        self.from_cache = from_cache
        self._entry = None
        # What the C++ launch path needs to launch without Python:
        # ("cpu", entry address) or ("cuda", device, kernel handle, threads,
        # dynamic shared bytes, current-stream getter or None). Set by Kernel._compile_for.
        # A kernel launched in clusters has ("cpu-cluster", ...) or ("cuda-cluster", ...),
        # which the C++ path leaves to the Python launcher (it checks the grid).
        self._fast_target = None

    @property
    def entry(self):
        if self._entry is None:
            self._entry = _C.load_cpu(self.binary, self.entry_symbol)
        return self._entry

    # What the CUDA driver reports of the loaded GPU kernel (Triton's names; n_spills, as
    # Triton's, is the local memory per thread in 4-byte words: spilled registers plus
    # local arrays). None for a CPU kernel and for one not launched yet (tessera.compile).
    def _gpu_attributes(self):
        if self._fast_target is None or not self._fast_target[0].startswith("cuda"):
            return None
        return _C.cuda_kernel_attributes(self._fast_target[2])

    @property
    def n_regs(self):
        a = self._gpu_attributes()
        return None if a is None else a["num_regs"]

    @property
    def n_spills(self):
        a = self._gpu_attributes()
        return None if a is None else a["local_bytes"] // 4

    @property
    def n_max_threads(self):
        a = self._gpu_attributes()
        return None if a is None else a["max_threads"]

    def __repr__(self):
        return f"<CompiledKernel {self.name} stages={self.stage_order}>"


def _cache_dir() -> str:
    return os.environ.get("TESSERA_CACHE_DIR") or _C.default_cache_dir()


def _raise_compile_failure(kernel_name, fn, res):
    line, col = res.get("line", 0), res.get("col", 0)
    filename, source_line = None, None
    if line:
        try:
            filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
            import linecache
            source_line = linecache.getline(filename, line) or None
        except (TypeError, OSError):
            pass
    msg = res["error"]
    if res.get("user_error"):
        raise CompilationError(msg, kernel_name=kernel_name, filename=filename, lineno=line or None,
                               col_offset=max(0, col - 1) if line else None, source_line=source_line)
    raise InternalCompilerError(msg, kernel_name=kernel_name, filename=filename, lineno=line or None,
                                col_offset=max(0, col - 1) if line else None, source_line=source_line)


def compile_specialization(kernel, arg_types, constexprs, arg_attrs, options, target, runtime_names,
                           use_cache=True):
    """Compile (or fetch from the disk cache) one specialization of `kernel` for
    `target`: 'cpu' (this host) or 'cuda:<sm>' / 'sm_<sm>' (PTX)."""
    gpu = target.startswith(("cuda:", "sm_"))
    if not gpu and target != "cpu":
        raise NotImplementedError(f"target '{target}' is not supported (use 'cpu', 'cuda:90a', 'sm_80', ...)")
    tma = os.environ.get("TESSERA_TMA")
    if gpu and tma is not None:  # sm_90a wgmma rings: cp.async (0) or the TMA (1; 2: CTA-barrier variant)
        options = {**options, "tma": int(tma) if tma in ("2", "3", "4") else int(tma not in ("0", "", "false", "False"))}
    fusion = os.environ.get("TESSERA_GPU_FP_FUSION")
    if gpu and fusion is not None and "fp_fusion" not in options:
        # float a * b + c contracted to one FMA on the GPU (1, the default) or not (0); a
        # launch's enable_fp_fusion= comes first
        options = {**options, "fp_fusion": int(fusion not in ("0", "", "false", "False"))}
    kinds = "".join(S.launch_kind(arg_types[n]) for n in runtime_names)
    spec = tuple((n, arg_types[n].ir, tuple(sorted(arg_attrs.get(n, {}).items()))) for n in runtime_names)
    key = CK.make_key(kernel._dependency_sources(), spec, constexprs, options,
                      "gpu:" + target if gpu else CK.cpu_target())
    cache_dir = _cache_dir()
    if use_cache:
        blobs = _C.cache_get(cache_dir, key)
        if blobs is not None and "binary" in blobs:
            order = blobs["stage_order"].decode().split(",")
            asm = {s: blobs["stage:" + s].decode() for s in order if "stage:" + s in blobs}
            meta = {k[5:]: v.decode() for k, v in blobs.items() if k.startswith("meta:")}
            return CompiledKernel(blobs["name"].decode(), asm, order, blobs["binary"], blobs["entry"].decode(),
                                  meta, kinds, None, cache_key=key, from_cache=True)
    from .compiler import generate_tile_ir  # imported on a cache miss only: ~10 ms
    ir = generate_tile_ir(kernel.fn, arg_types, constexprs, arg_attrs, options)
    dump = [s for s in os.environ.get("TESSERA_DUMP", "").split(",") if s]
    res = _C.compile(ir, target, options.get("num_warps", 4), options.get("num_stages", 3),
                     bool(options.get("debug", False)), dump, *(("", "") if gpu else CK.cpu_override()))
    if "error" in res:
        _raise_compile_failure(kernel.__name__, kernel.fn, res)
    ck = CompiledKernel(res["name"], res["stages"], res["stage_order"], res["binary"], res["entry"],
                        res["metadata"], kinds, None, cache_key=key)
    if use_cache:
        blobs = {"name": ck.name.encode(), "entry": ck.entry_symbol.encode(), "binary": ck.binary,
                 "stage_order": ",".join(ck.stage_order).encode()}
        for s, text in ck.asm.items():
            blobs["stage:" + s] = text.encode()
        for k, v in ck.metadata.items():
            blobs["meta:" + k] = str(v).encode()
        _C.cache_put(cache_dir, key, blobs)
    return ck


def _gpu_target(kernel_name, device):
    """'cuda:N' device -> compile target 'cuda:<sm>' of that GPU (90 -> '90a')."""
    if not _C.cuda_available():
        raise RuntimeError(f"kernel {kernel_name}: arguments live on {device} but CUDA is not usable here: "
                           f"{_C.cuda_unavailable_reason()}")
    index = int(device.split(":")[1]) if ":" in device else 0
    cap = _C.cuda_capability(index)
    return f"cuda:{cap}a" if cap >= 90 else f"cuda:{cap}"


def _cluster_size(ck):
    """Programs per cluster of a kernel that calls tl.cluster_reduce_scatter, else 0."""
    return int(ck.metadata.get("cluster", 0) or 0)


def _check_cluster_grid(kernel_name, g0, cluster):
    if g0 % cluster:
        raise ValueError(f"kernel {kernel_name} runs its programs in clusters of {cluster} along grid axis 0 "
                         f"(tl.cluster_reduce_scatter(..., {cluster})), so the grid's first extent must be a "
                         f"multiple of {cluster}; it is {g0}")


def _cpu_launcher(ck, kernel_name):
    cluster = _cluster_size(ck)
    if not cluster:
        ck._fast_target = ("cpu", ck.entry)
        return functools.partial(_C.launch_cpu, ck.entry)
    ck._fast_target = ("cpu-cluster", ck.entry)
    entry, launch_cpu = ck.entry, _C.launch_cpu

    def launch(g0, g1, g2, args, kinds):
        _check_cluster_grid(kernel_name, g0, cluster)
        try:
            launch_cpu(entry, g0, g1, g2, args, kinds, cluster)
        except _C.ClusterError as e:
            raise _C.ClusterError(f"kernel {kernel_name}: {e}") from None

    return launch


def _named_cuda_error(kernel_name, e):
    """`e` (a _C.CudaError) restated as 'kernel NAME: ...', keeping code and sticky."""
    err = _C.CudaError(f"kernel {kernel_name}: {e}")
    err.code, err.sticky = getattr(e, "code", -1), getattr(e, "sticky", False)
    return err


def _current_stream_getter():
    """device index -> torch's current stream on it, or None without torch."""
    try:
        import torch
    except ImportError:  # no torch: the legacy default stream unless stream= is given
        return None
    # The raw-stream getter costs ~0.3 us; torch.cuda.current_stream() several.
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)


def _cuda_launcher(ck, device, num_warps, kernel_name):
    index = int(device.split(":")[1]) if ":" in device else 0
    shared = int(ck.metadata.get("shared", 0) or 0)
    try:
        # A handle that survives a context reset: its module is reloaded when needed.
        # pdl: the kernel calls gdc_wait, so it is launched with programmatic dependent launch.
        fn = _C.cuda_load(index, ck.binary, ck.entry_symbol, shared, ck.metadata.get("tensor_maps", ""),
                          ck.metadata.get("pdl") == "1" and _PDL, _cluster_size(ck))
    except _C.CudaError as e:
        raise _named_cuda_error(kernel_name, e) from None
    # The block size the kernel was compiled for (a kernel may fix num_warps itself).
    threads = int(ck.metadata.get("threads") or 32 * int(ck.metadata.get("num_warps", num_warps) or num_warps))
    current = _current_stream_getter()
    launch_cuda = _C.cuda_launch
    cluster = _cluster_size(ck)
    ck._fast_target = ("cuda-cluster" if cluster else "cuda", index, fn, threads, shared, current)

    def launch(g0, g1, g2, args, kinds, stream=None):
        if cluster:
            _check_cluster_grid(kernel_name, g0, cluster)
        if stream is None:
            stream = current(index) if current is not None else 0
        try:
            launch_cuda(index, fn, g0, g1, g2, threads, shared, int(stream), args, kinds)
        except _C.CudaError as e:
            raise _named_cuda_error(kernel_name, e) from None

    return launch


def _gpu_launch_options(kernel, kwargs):
    """Takes Triton's GPU launch options out of a launch's keyword arguments (where the
    kernel has no parameter of that name) as sorted (compile option, value) pairs, part of
    the launch's key; they change nothing on the CPU.
      enable_fp_fusion=bool: whether float a * b + c may become one FMA (default on; also
        TESSERA_GPU_FP_FUSION, which the launch option overrides).
      maxnreg=int: at most that many registers per thread (PTX .maxnreg; ptxas spills
        beyond it)."""
    out = []
    if "enable_fp_fusion" in kwargs and "enable_fp_fusion" not in kernel._name_index:
        fusion = kwargs.pop("enable_fp_fusion")
        if fusion is not None:
            out.append(("fp_fusion", int(bool(fusion))))
    if "maxnreg" in kwargs and "maxnreg" not in kernel._name_index:
        n = kwargs.pop("maxnreg")
        if n is not None:
            out.append(("maxnreg", _check_maxnreg(kernel.__name__, n)))
    return tuple(out)


def _check_maxnreg(kernel_name, n):
    if isinstance(n, bool) or not isinstance(n, int) or not 16 <= n <= 255:
        raise ValueError(f"kernel {kernel_name}: maxnreg must be an integer from 16 to 255 (registers per "
                         f"thread), got {n!r}")
    return n


def _writes_read_only(ck, values):
    """True when an argument the kernel stores through is a read-only (numpy) array:
    `run` then raises the error."""
    return any(not getattr(getattr(values[i], "flags", None), "writeable", True) for i in ck.written_indices)


def synchronize(device="cuda:0"):
    """Waits for every kernel launched on `device` ("cuda", "cuda:N" or N). A CUDA
    error raised there names the last kernel Tessera launched on that device; after
    a sticky error (illegal address, trap, ...) the device's context is reset, so
    later launches with new arrays work (docs/architecture.md, "Runtime")."""
    index = (int(device.split(":")[1]) if ":" in device else 0) if isinstance(device, str) else int(device)
    _C.cuda_synchronize(index)


class _SpecializationTable(dict):
    """Kernel._compiled: specialization key -> CompiledKernel. clear() also empties
    the C++ launch path's table, so the next launch takes the Python path."""

    def __init__(self, kernel):
        super().__init__()
        self._kernel = weakref.ref(kernel)

    def clear(self):
        super().clear()
        k = self._kernel()
        if k is not None:
            k._fast_path_clear()


class Kernel(_C.KernelLauncher):
    """A function compiled by Tessera. Launch with `kernel[grid](*args, **meta)`.

    `kernel[grid]` (KernelLauncher, in C++) launches a cached specialization without
    running Python code. Otherwise it calls the launcher generated here for this
    kernel's signature (as Triton does), so binding arguments costs one Python call
    and Python's own binding errors name the kernel; its key is a tuple of
    per-argument keys. Anything unusual (interpreter mode, a callable grid, extra
    options, a first launch, a bad argument) takes the general path `run`, which
    gives precise errors.
    """

    def __init__(self, fn, do_not_specialize=(), debug=None):
        self.fn = fn
        functools.update_wrapper(self, fn)
        sig = inspect.signature(fn)
        self.arg_names = list(sig.parameters)
        self.constexpr_mask = [_is_constexpr_annotation(p.annotation) for p in sig.parameters.values()]
        self.defaults = [p.default for p in sig.parameters.values()]
        self.do_not_specialize = set(do_not_specialize)
        self.debug = debug
        self._name_index = {n: i for i, n in enumerate(self.arg_names)}
        self._compiled = _SpecializationTable(self)
        self._sources = None
        self._launch, generated = self._make_launcher()
        # C++ launches only kernels whose launcher was generated: parameters that
        # shadow the launcher's own names always go through `run`.
        self._init_fast_path(self.__name__, list(self.arg_names), list(self.constexpr_mask), list(self.defaults),
                             debug, globals(), constexpr, inspect.Parameter.empty, generated)

    def _dependency_sources(self):
        if self._sources is None:
            self._sources = CK.dependency_sources(self.fn)
        return self._sources

    def __call__(self, *args, **kwargs):
        from .language import core as _lang_core
        if _lang_core._interpreter_impl is not None:
            # Called from a kernel the interpreter is running (TESSERA_INTERPRET=1): run
            # its body in place, as the compiler inlines it.
            return self.fn(*args, **kwargs)
        raise RuntimeError(
            f"kernel {self.__name__} must be launched with a grid: {self.__name__}[grid](...); "
            f"inside another kernel it is inlined by the compiler")

    # --- the generated fast launcher -------------------------------------------
    def _make_launcher(self):
        names = self.arg_names
        # The launcher's own names (its keyword parameters; its locals start with "_")
        # must not collide with the kernel's parameters: those kernels take `run`.
        if any(not n.isidentifier() or n.startswith("_") or n in _LAUNCHER_NAMES for n in names):
            return (lambda *a, grid, **k: self.run(*a, grid=grid, **k)), False
        g = {"_spec": S.spec_of, "_compiled": self._compiled, "_run": self.run, "_launch_cpu": _C.launch_cpu,
             "_constexpr": constexpr, "_jit": __import__(__name__, fromlist=["_"])}
        params, key_items, runtime = [], [], []
        for i, n in enumerate(names):
            if self.defaults[i] is inspect.Parameter.empty:
                params.append(n)
            else:
                g[f"_default_{i}"] = self.defaults[i]
                params.append(f"{n}=_default_{i}")
            if self.constexpr_mask[i]:
                key_items.append(f"({n}.value if type({n}) is _constexpr else {n})")
            else:
                key_items.append(f"_spec({n})")
                runtime.append(n)
        debug_expr = (f"({self.debug!r} if debug is None else debug)" if self.debug is not None
                      else "(_jit._DEBUG if debug is None else debug)")
        all_args = ", ".join(names)
        src = f"""
def launch({", ".join(params + ["*", "grid", "num_warps=4", "num_stages=3", "debug=None", "**options"])}):
    if _jit._INTERPRET or options or type(grid) is not tuple:
        return _run({all_args}{"," if names else ""} grid=grid, num_warps=num_warps, num_stages=num_stages, debug=debug, **options)
    try:
        _key = ({", ".join(key_items)}{"," if key_items else ""} num_warps, num_stages, {debug_expr})
        _ck = _compiled.get(_key)
    except (TypeError, OverflowError):  # run() says which argument is wrong
        return _run({all_args}{"," if names else ""} grid=grid, num_warps=num_warps, num_stages=num_stages, debug=debug)
    _n = len(grid)
    if _ck is None or _n == 0 or _n > 3 or (_ck.written_indices and _jit._writes_read_only(_ck, ({all_args}{"," if names else ""}))):
        return _run({all_args}{"," if names else ""} grid=grid, num_warps=num_warps, num_stages=num_stages, debug=debug)
    try:
        if _n == 1:
            _ck.launcher(grid[0], 1, 1, ({", ".join(runtime)}{"," if runtime else ""}), _ck.kinds)
        elif _n == 2:
            _ck.launcher(grid[0], grid[1], 1, ({", ".join(runtime)}{"," if runtime else ""}), _ck.kinds)
        else:
            _ck.launcher(grid[0], grid[1], grid[2], ({", ".join(runtime)}{"," if runtime else ""}), _ck.kinds)
    except (TypeError, ValueError, OverflowError):
        return _run({all_args}{"," if names else ""} grid=grid, num_warps=num_warps, num_stages=num_stages, debug=debug)
    return _ck
"""
        exec(compile(src, f"<tessera launcher for {self.__name__}>", "exec"), g)
        launch = g["launch"]
        # Python's own binding errors ("missing 1 required positional argument")
        # then read "kernel add() ...", naming the kernel at no cost per launch.
        launch.__qualname__ = launch.__name__ = f"kernel {self.__name__}"
        launch.__code__ = launch.__code__.replace(co_name=f"kernel {self.__name__}")
        return launch, True

    # --- kernel.bind: a launch with its grid, options and some arguments fixed ---------
    def bind(self, grid, **values):
        """A callable launching this kernel on `grid` with `values` fixed: kernel
        parameters by name (constexpr or not) and the launch options num_warps,
        num_stages, debug, maxnreg, enable_fp_fusion, num_ctas (launch_pdl is accepted and
        ignored, as by a launch). Call it with the other
        parameters, by position in signature order (those with defaults may be left
        off), and optionally stream=; it returns what `kernel[grid](...)` returns.
        What is fixed is checked here, once; a call keys only the arguments it passes
        (in C++), so a launch with many constexprs costs little more host time than
        one with none. The same specializations, compilations and errors as
        `kernel[grid](*all_arguments, **options)`, which a call that misses runs."""
        if callable(grid):
            raise TypeError(f"kernel {self.__name__}.bind: the grid must be a tuple of 1 to 3 integers (a "
                            f"callable grid depends on each launch's arguments: launch with kernel[grid](...))")
        g = self._grid(grid, None)
        if "launch_pdl" not in self._name_index:
            values.pop("launch_pdl", None)  # ignored, as by a launch (_LAUNCH_OPTIONS)
        options = {o: values.pop(o) for o in _BIND_OPTIONS if o in values and o not in self._name_index}
        free = object()
        fixed = [free] * len(self.arg_names)
        for name, v in values.items():
            i = self._name_index.get(name)
            if i is None:
                why = "stream= is given to each call" if name == "stream" else \
                    "not a parameter of the kernel nor a launch option"
                raise TypeError(f"kernel {self.__name__}.bind() got an unexpected keyword argument '{name}' ({why})")
            if isinstance(v, constexpr) and self.constexpr_mask[i]:
                v = v.value
            fixed[i] = v
        error = self._argument_error(fixed, None, skip=free)
        if error is not None:
            raise error
        for o in ("num_warps", "num_stages"):
            if o in options and (isinstance(options[o], bool) or not isinstance(options[o], int)):
                raise TypeError(f"kernel {self.__name__}.bind: {o} must be an integer, got {options[o]!r}")
        maxnreg = options.get("maxnreg")
        if maxnreg is not None:
            _check_maxnreg(self.__name__, maxnreg)
        debug = options.get("debug")
        # The C++ key knows num_warps, num_stages, maxnreg and debug; other options
        # (enable_fp_fusion, num_ctas) send every call through the Python path.
        fast = set(options) <= {"num_warps", "num_stages", "maxnreg", "debug"}
        free_names = [n for n, v in zip(self.arg_names, fixed) if v is free]
        slow = functools.partial(self._bound_slow, g, fixed, free, free_names, options)
        return _C.BoundKernel(self, g, fixed, free, options.get("num_warps", 4), options.get("num_stages", 3),
                              maxnreg or 0, None if debug is None else bool(debug), fast, slow)

    def _bound_slow(self, grid, fixed, free, free_names, options, *args, **kwargs):
        """A bound launch's call through kernel[grid](...): the first one, a miss, a
        mistake (whose error then names the free parameters)."""
        stream = kwargs.pop("stream", None)
        if kwargs:
            raise TypeError(f"kernel {self.__name__} (bound): unexpected keyword argument(s) {sorted(kwargs)}; a "
                            f"bound launch takes its free arguments ({', '.join(free_names)}) by position, and "
                            f"stream=")
        if len(args) > len(free_names):
            raise TypeError(f"kernel {self.__name__} (bound) takes {len(free_names)} arguments "
                            f"({', '.join(free_names)}) but {len(args)} were given")
        values, j = list(fixed), 0
        for i, v in enumerate(values):
            if v is free:
                if j < len(args):
                    values[i] = args[j]
                elif self.defaults[i] is not inspect.Parameter.empty:
                    values[i] = self.defaults[i]
                else:
                    raise TypeError(f"kernel {self.__name__} (bound) missing argument '{self.arg_names[i]}' "
                                    f"(position {j} of the free arguments: {', '.join(free_names)})")
                j += 1
        extra = dict(options)
        if stream is not None:
            extra["stream"] = stream
        return self[grid](*values, **extra)

    # --- the general path --------------------------------------------------------
    def _bind(self, args, kwargs):
        n = len(self.arg_names)
        if len(args) > n:
            raise TypeError(f"kernel {self.__name__}() takes {n} arguments but {len(args)} were given")
        values = list(args) + [inspect.Parameter.empty] * (n - len(args))
        for k, v in kwargs.items():
            i = self._name_index.get(k)
            if i is None:
                raise TypeError(f"kernel {self.__name__}() got an unexpected keyword argument '{k}'")
            if i < len(args):
                raise TypeError(f"kernel {self.__name__}() got multiple values for argument '{k}'")
            values[i] = v
        for i in range(len(args), n):
            if values[i] is inspect.Parameter.empty:
                d = self.defaults[i]
                if d is inspect.Parameter.empty:
                    raise TypeError(f"kernel {self.__name__}() missing required argument '{self.arg_names[i]}'")
                values[i] = d
        return values

    def _grid(self, grid, values):
        if callable(grid):
            try:
                grid = grid(dict(zip(self.arg_names, values)))
            except Exception as e:
                if hasattr(e, "add_note"):  # Python 3.11+
                    e.add_note(f"(raised by the grid function of kernel {self.__name__})")
                raise
        if isinstance(grid, int) and not isinstance(grid, bool):
            grid = (grid,)
        try:
            ok = 1 <= len(grid) <= 3 and not any(isinstance(x, bool) for x in grid)
            g = tuple(operator.index(x) for x in grid)  # ints, numpy integers
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"kernel {self.__name__}: the grid must be a tuple of 1 to 3 integers, got {grid!r}")
        if any(x < 0 for x in g):
            raise ValueError(f"kernel {self.__name__}: grid dimensions must be >= 0, got {g}")
        if any(x >= 2**31 for x in g):
            raise ValueError(f"kernel {self.__name__}: grid dimensions must be < 2^31, got {g}")
        return g + (1,) * (3 - len(g))

    def run(self, *args, grid, num_warps=4, num_stages=3, debug=None, stream=None, **kwargs):
        gpu_options = _gpu_launch_options(self, kwargs)
        for opt in _LAUNCH_OPTIONS:
            if opt in kwargs and opt not in self._name_index:
                kwargs.pop(opt)  # accepted for Triton compatibility (see _LAUNCH_OPTIONS)
        values = self._bind(args, kwargs)
        if _INTERPRET:
            return self._interpret(values, grid)
        if debug is None:
            debug = self.debug if self.debug is not None else _DEBUG
        try:
            spec = tuple([(v.value if isinstance(v, constexpr) else v) if ce else S.spec_of(v)
                          for ce, v in zip(self.constexpr_mask, values)])
            opt_key = (num_warps, num_stages, bool(debug)) + gpu_options
            # the generated launcher looks up spec + (num_warps, num_stages, debug): same key
            ck = self._compiled.get(spec + (num_warps, num_stages, debug) + opt_key[3:])
        except (TypeError, OverflowError) as e:
            raise self._argument_error(values, e) from None
        if ck is None:
            ck = self._compile_for(values, spec, opt_key)
            self._compiled[spec + (num_warps, num_stages, debug) + opt_key[3:]] = ck
        for i in ck.written_indices:
            if not getattr(getattr(values[i], "flags", None), "writeable", True):  # numpy's read-only arrays
                raise ValueError(f"kernel {self.__name__}: argument '{self.arg_names[i]}' (position {i}) is a "
                                 f"read-only numpy array, but the kernel stores to it; pass a writeable array "
                                 f"(e.g. a copy)")
        g = self._grid(grid, values)
        runtime = tuple(v for ce, v in zip(self.constexpr_mask, values) if not ce)
        # A CUDA failure is a _C.CudaError naming the kernel (see _cuda_launcher).
        on_gpu = ck._fast_target is not None and ck._fast_target[0].startswith("cuda")
        extra = {"stream": stream} if on_gpu and stream is not None else {}  # stream= means nothing on the CPU
        ck.launcher(g[0], g[1], g[2], runtime, ck.kinds, **extra)
        return ck

    def _argument_error(self, values, error, skip=None):
        """`error` (from specializing the arguments) restated naming the kernel and the
        argument; with `error` None (Kernel.bind), the first such error or None. Values
        that are `skip` are not checked."""
        for i, (name, v) in enumerate(zip(self.arg_names, values)):
            if skip is not None and v is skip:
                continue
            try:
                if self.constexpr_mask[i]:
                    hash(v.value if isinstance(v, constexpr) else v)
                else:
                    S.spec_of(v)
            except (TypeError, OverflowError) as e:
                what = "constexpr argument" if self.constexpr_mask[i] else "argument"
                if isinstance(e, TypeError) and "unhashable" in str(e):
                    return TypeError(f"kernel {self.__name__}: {what} '{name}' (position {i}) must be hashable "
                                     f"to specialize on it, got {type(v).__name__}")
                return type(e)(f"kernel {self.__name__}: {what} '{name}' (position {i}): {e}")
        return None if error is None else type(error)(f"kernel {self.__name__}: {error}")

    def _compile_for(self, values, spec, opt_key):
        arg_types, constexprs, attrs, runtime = {}, {}, {}, []
        devices = {}  # device -> names of the array arguments on it
        kinds = []
        for i, (name, s, v) in enumerate(zip(self.arg_names, spec, values)):
            if self.constexpr_mask[i]:
                constexprs[name] = s
                continue
            if s[0] == "const":
                constexprs[name] = s[1]
                kinds.append("x")
                continue
            if s[0] == "ptr":
                arg_types[name] = D.pointer_type(D.BY_IR[s[1]])
                devices.setdefault(s[2], []).append(f"'{name}' (position {i})")
                if len(s) > 3 and s[3] and name not in self.do_not_specialize:
                    attrs[name] = {"divisibility": 16}
            elif s[0] == "scalar":
                arg_types[name] = D.NUMPY_TO_DTYPE[s[1]]
            elif isinstance(s, tuple):
                arg_types[name] = D.BY_IR[s[0]]
                if s[1] > 1 and name not in self.do_not_specialize:  # 16 or 8 (specialization.py)
                    attrs[name] = {"divisibility": s[1]}
            else:
                arg_types[name] = D.BY_IR[s]
            runtime.append(i)
            try:
                kinds.append(S.launch_kind(arg_types[name]))
            except TypeError as e:
                raise TypeError(f"kernel {self.__name__}: argument '{name}' (position {i}): {e}") from None
        if len(devices) > 1:
            where = "; ".join(f"{', '.join(names)} on {dev}" for dev, names in sorted(devices.items()))
            raise ValueError(f"kernel {self.__name__}: arrays on different devices in one launch: "
                             f"{sorted(devices)}: {where}. Move them to one device (a CPU launch takes "
                             f"host arrays only; a GPU launch takes arrays on that GPU only)")
        target, device = "cpu", None
        if devices and next(iter(devices)) != "cpu":
            device = next(iter(devices))
            if not device.startswith("cuda"):
                raise ValueError(f"kernel {self.__name__}: {', '.join(devices[device])} on device '{device}': "
                                 f"a launch takes arrays in host memory (cpu) or on an NVIDIA GPU (cuda)")
            target = _gpu_target(self.__name__, device)
        options = {"num_warps": opt_key[0], "num_stages": opt_key[1], "debug": opt_key[2]}
        if target != "cpu":  # _gpu_launch_options: no effect on the CPU
            options.update(opt_key[3:])
        runtime_names = [self.arg_names[i] for i in runtime]
        ck = compile_specialization(self, arg_types, constexprs, attrs, options, target, runtime_names)
        ck.kinds = "".join(kinds)
        ck.runtime_indices = runtime
        written = ck.metadata.get("written_args", "")
        ck.written_indices = tuple(runtime[int(j)] for j in written.split(",") if j)
        ck.launcher = (_cpu_launcher(ck, self.__name__) if target == "cpu"
                       else _cuda_launcher(ck, device, opt_key[0], self.__name__))
        return ck

    def _interpret(self, values, grid):
        from . import interpreter
        g = self._grid(grid, values)
        args, constexprs = {}, {}
        for i, (name, v) in enumerate(zip(self.arg_names, values)):
            if self.constexpr_mask[i]:
                constexprs[name] = v.value if isinstance(v, constexpr) else v
            else:
                args[name] = v
        return interpreter.run_grid(self.fn, g, args, constexprs)

    def __repr__(self):
        return f"<tessera.kernel {self.__name__}>"


def kernel(fn=None, *, do_not_specialize=(), debug=None, **_ignored):
    """Decorator: `@tessera.kernel` or `@tessera.kernel(do_not_specialize=[...])`."""
    if fn is None:
        return lambda f: Kernel(f, do_not_specialize=do_not_specialize, debug=debug)
    return Kernel(fn, do_not_specialize=do_not_specialize, debug=debug)


jit = kernel
