"""The cache key of a compiled kernel. Every input that shapes the generated code
is listed here, in this one block, and nowhere else:

  1. the compiler's build id (a hash of every C++ compiler source), the
     tessera package version and a hash of the frontend's own Python sources
     (code generator and language), which shape the Tile IR;
  2. the kernel's source and the sources of every kernel / helper function it
     references (transitively, through its globals);
  3. the specialization: per argument its dtype, whether an integer equals 1 or is
     divisible by 16 or by 8 (specialization.divisibility_class), whether a GPU
     pointer is 16-byte aligned;
  4. the constexpr values;
  5. the options: num_warps, num_stages, debug (TESSERA_DEBUG), and on GPU targets
     tma when TESSERA_TMA is set (read at compile time: TMA or cp.async rings on sm_90a)
     and fp_fusion when TESSERA_GPU_FP_FUSION is set (FMA contraction on GPUs);
  6. the target: "cpu" + CPU name + feature string (the host's, or TESSERA_CPU's),
     or "cuda:<arch>".

The key is XXH3-128 (computed in C++) over these fields, each framed by its name.
"""
from __future__ import annotations

import inspect
import os
import types

from ._core import _C

VERSION = "0.1.0"


def _code_fingerprint(code) -> str:
    """Everything in a code object that the code generator reads: bytecode, names,
    constants (nested code objects recursively) and the line/column table (not the
    file name: identical kernels in two files share an entry). Much
    cheaper than inspect.getsource, and it changes whenever the source does
    (comments and blank lines aside, unless they move code to other lines)."""
    consts = []
    for c in code.co_consts:
        consts.append(_code_fingerprint(c) if isinstance(c, types.CodeType) else repr(c))
    table = getattr(code, "co_linetable", None) or getattr(code, "co_lnotab", b"")
    return "|".join([str(code.co_firstlineno), code.co_code.hex(), table.hex(),
                     ",".join(code.co_names), ",".join(code.co_varnames), ";".join(consts)])


def _source_of(fn) -> str:
    code = getattr(fn, "__code__", None)
    if code is not None:
        return _code_fingerprint(code)
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return repr(fn)


def dependency_sources(fn) -> str:
    """The kernel's source and the sources of the functions it references."""
    from .jit import Kernel
    seen, out = set(), []

    def visit(f):
        if id(f) in seen:
            return
        seen.add(id(f))
        out.append(f"{getattr(f, '__module__', '')}.{getattr(f, '__qualname__', '')}\n{_source_of(f)}")
        code = getattr(f, "__code__", None)
        if code is None:
            return
        g = getattr(f, "__globals__", {})
        names = set(code.co_names)
        for const in code.co_consts:  # nested code objects (lambdas, combine fns)
            if isinstance(const, types.CodeType):
                names |= set(const.co_names)
        for name in sorted(names):
            obj = g.get(name)
            if isinstance(obj, Kernel):
                visit(obj.fn)
            elif isinstance(obj, types.FunctionType) and not getattr(obj, "__module__", "").startswith("tessera.language"):
                visit(obj)
            elif isinstance(obj, (int, float, bool, str)):
                out.append(f"{name}={obj!r}")
        if f.__closure__:
            for cell in f.__closure__:
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(v, Kernel):
                    visit(v.fn)
                elif isinstance(v, types.FunctionType):
                    visit(v)
                elif isinstance(v, (int, float, bool, str)):
                    out.append(f"closure={v!r}")

    visit(fn)
    return "\n".join(out)


_frontend_hash = None


def frontend_hash() -> str:
    """Hash of tessera/compiler/*.py and tessera/language/*.py (computed once)."""
    global _frontend_hash
    if _frontend_hash is None:
        import os
        here = os.path.dirname(os.path.abspath(__file__))
        parts = []
        for sub in ("compiler", "language"):
            d = os.path.join(here, sub)
            for name in sorted(os.listdir(d)):
                if name.endswith(".py"):
                    with open(os.path.join(d, name), "rb") as f:
                        parts.append((f"{sub}/{name}", f.read().decode("utf-8", "replace")))
        _frontend_hash = _C.hash_key(parts)
    return _frontend_hash


def make_key(sources: str, specialization, constexprs, options: dict, target: str) -> str:
    fields = [
        ("build_id", _C.build_id()),
        ("version", VERSION),
        ("frontend", frontend_hash()),
        ("sources", sources),
        ("specialization", repr(specialization)),
        ("constexprs", repr(sorted(constexprs.items()))),
        ("options", repr(sorted(options.items()))),
        ("target", target),
    ]
    return _C.hash_key(fields)


_cpu_target = None


def cpu_override() -> tuple:
    """TESSERA_CPU=name[:features] compiles CPU kernels for another x86-64 CPU than the
    host (e.g. 'haswell' to test the AVX2 code on an AVX-512 host); ('', '') = host."""
    spec = os.environ.get("TESSERA_CPU", "")
    name, _, features = spec.partition(":")
    return name, features


def cpu_target() -> str:
    global _cpu_target
    name, features = cpu_override()
    if name:
        return f"cpu:{name}:{features}"
    if _cpu_target is None:
        _cpu_target = f"cpu:{_C.host_cpu_name()}:{_C.host_cpu_features()}"
    return _cpu_target
