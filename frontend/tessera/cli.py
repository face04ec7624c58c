"""The `tessera` command line: inspect and clear the disk cache, and dump any compiler
stage of a kernel (`tessera dump FILE.py:KERNEL --signature ... --stage asm`).

Exit codes: 0 success, 1 the operation failed (a compile error, a GPU target in a CPU
build, an exception while importing FILE.py), 2 a bad command line (unknown option,
missing file or kernel, unknown stage). Errors are one line on stderr, except a
kernel's CompilationError, which keeps its source line and caret.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import sys
import time

_STAGES = ("tir", "tir-opt", "llir", "llir-opt", "asm", "ptx")


class CLIError(Exception):
    """A failure reported as `tessera: error: <message>` with exit code `code`."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise CLIError(f"{message} (see `{self.prog} --help`)", code=2)


# --- cache -----------------------------------------------------------------------------

def _cache_dir(args) -> str:
    from .jit import _cache_dir
    return args.dir or _cache_dir()


def _human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable


def _human_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds // span}{unit}"
    return f"{seconds}s"


def _stray_temporaries(root: str) -> int:
    """*.tmp files (left by killed writers; harmless, removed by `cache clear`)."""
    count = 0
    if os.path.isdir(root):
        for shard in os.listdir(root):
            path = os.path.join(root, shard)
            if len(shard) == 2 and os.path.isdir(path):
                count += sum(1 for f in os.listdir(path) if f.endswith(".tmp"))
    return count


def cmd_cache_list(args) -> int:
    from ._core import _C
    entries = _C.cache_list(_cache_dir(args))
    now = time.time()
    if not entries:
        print(f"no entries in {_cache_dir(args)}")
        return 0
    print(f"{'KEY':32}  {'KERNEL':24}  {'SIZE':>10}  {'AGE':>5}")
    for e in sorted(entries, key=lambda e: -e["mtime"]):
        name = e["name"] or "<corrupt>"
        print(f"{e['key']:32}  {name:24}  {_human_size(e['size']):>10}  {_human_age(now - e['mtime']):>5}")
    return 0


def cmd_cache_clear(args) -> int:
    from ._core import _C
    removed = _C.cache_clear(_cache_dir(args))
    print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {_cache_dir(args)}")
    return 0


def cmd_cache_info(args) -> int:
    from ._core import _C
    from . import __version__
    root = _cache_dir(args)
    entries = _C.cache_list(root)
    rows = [
        ("cache dir", root),
        ("entries", str(len(entries))),
        ("total size", _human_size(sum(e["size"] for e in entries))),
        ("temporaries", str(_stray_temporaries(root))),
        ("tessera", __version__),
        ("compiler build id", _C.build_id()),
        ("host cpu", _C.host_cpu_name()),
        ("host features", _C.host_cpu_features()),
        ("threads", str(_C.num_threads())),
    ]
    for k, v in rows:
        print(f"{k + ':':19} {v}")
    return 0


# --- dump ------------------------------------------------------------------------------

def _parse_constexpr(text: str):
    name, sep, value = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise CLIError(f"--constexpr expects NAME=VALUE, got '{text}'", code=2)
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        parsed = value.strip()  # a bare word: a string constexpr (e.g. ACTIVATION=relu)
    return name.strip(), parsed


def _parse_target(text: str) -> str:
    """'cpu', 'sm_90a' or 'cuda:90a' (both GPU spellings mean the same)."""
    t = text.strip().lower()
    if t == "cpu":
        return "cpu"
    m = re.fullmatch(r"(?:sm_|cuda:)(\d+a?)", t)
    if not m:
        raise CLIError(f"unknown target '{text}' (expected cpu, sm_90a or cuda:90a)", code=2)
    return f"cuda:{m.group(1)}"


def _load_module(path: str):
    if not os.path.isfile(path):
        raise CLIError(f"no such file: {path}", code=2)
    path = os.path.abspath(path)
    name = "_tessera_cli_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"cannot import {path} (not a Python file?)", code=2)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and inspect look modules up here
    sys.path.insert(0, os.path.dirname(path))  # so the file's sibling imports work
    try:
        spec.loader.exec_module(module)
    except SystemExit:
        raise
    except BaseException as e:
        raise CLIError(f"importing {path} failed: {type(e).__name__}: {_one_line(e)}") from e
    return module


def _find_kernel(module, path: str, name: str | None):
    from .jit import Kernel
    kernels = sorted(k for k, v in vars(module).items() if isinstance(v, Kernel))
    if name is None:
        if len(kernels) == 1:
            return getattr(module, kernels[0])
        found = ", ".join(kernels) if kernels else "none"
        raise CLIError(f"name the kernel as {path}:KERNEL (kernels in the file: {found})", code=2)
    obj = getattr(module, name, None)
    if isinstance(obj, Kernel):
        return obj
    found = ", ".join(kernels) if kernels else "none"
    what = "not a @tessera.kernel" if obj is not None else "not found"
    raise CLIError(f"'{name}' in {path} is {what} (kernels in the file: {found})", code=2)


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def cmd_dump(args) -> int:
    import tessera
    path, sep, name = args.kernel.rpartition(":")
    if not sep or not path.endswith(".py"):
        path, name = args.kernel, None
    if args.stage not in _STAGES:
        raise CLIError(f"unknown stage '{args.stage}'; stages: {', '.join(_STAGES)}", code=2)
    target = _parse_target(args.target)
    constexprs = dict(_parse_constexpr(c) for c in args.constexpr)
    kernel = _find_kernel(_load_module(path), path, name or None)
    try:
        ck = tessera.compile(kernel, signature=args.signature, constexprs=constexprs, target=target,
                             num_warps=args.num_warps, num_stages=args.num_stages, debug=args.debug)
    except (tessera.CompilationError, tessera.InternalCompilerError) as e:
        raise CLIError(str(e)) from e  # keeps the source line and caret
    except NotImplementedError as e:  # a GPU target in a CPU-only build
        raise CLIError(_one_line(e)) from e
    except (ValueError, TypeError) as e:  # a bad signature or constexpr
        raise CLIError(_one_line(e), code=2) from e
    available = [s for s in ck.stage_order if s in ck.asm]
    if args.stage not in ck.asm:
        raise CLIError(f"stage '{args.stage}' is not available for target {target}; "
                       f"available: {', '.join(available)}", code=2)
    text = ck.asm[args.stage]
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# --- entry point -----------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = _Parser(prog="tessera", description="Tessera kernel JIT: cache tools and compiler dumps.")
    p.add_argument("--version", action="version", version=f"tessera {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    cache = sub.add_parser("cache", help="inspect or clear the on-disk kernel cache")
    csub = cache.add_subparsers(dest="cache_command", metavar="{list,clear,info}", parser_class=_Parser)
    csub.required = True
    for name, fn, text in (("list", cmd_cache_list, "one line per entry: key, kernel, size, age"),
                           ("clear", cmd_cache_clear, "remove every entry (and stray *.tmp files)"),
                           ("info", cmd_cache_info, "cache dir, entry count, total size, build id, host CPU")):
        c = csub.add_parser(name, help=text)
        c.add_argument("--dir", help="cache directory (default: $TESSERA_CACHE_DIR or ~/.cache/tessera)")
        c.set_defaults(func=fn)

    d = sub.add_parser("dump", help="print one compiler stage of a kernel",
                       description="Import FILE.py, compile its kernel for a signature and print a stage.")
    d.add_argument("kernel", metavar="FILE.py[:KERNEL]", help="the file and the @tessera.kernel in it")
    d.add_argument("--signature", "-s", required=True,
                   help="runtime parameter types in order, e.g. '*fp32,*fp32,i32'")
    d.add_argument("--constexpr", "-c", action="append", default=[], metavar="NAME=VALUE",
                   help="a tl.constexpr value (repeatable), e.g. BLOCK=1024")
    d.add_argument("--target", "-t", default="cpu", help="cpu (default), sm_90a or cuda:90a")
    d.add_argument("--stage", default="asm", help=f"one of {', '.join(_STAGES)} (default: asm)")
    d.add_argument("--num-warps", type=int, default=4)
    d.add_argument("--num-stages", type=int, default=3)
    d.add_argument("--debug", action="store_true", help="compile device_assert checks in")
    d.set_defaults(func=cmd_dump)
    return p


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except CLIError as e:
        print(f"tessera: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tessera dump ... | head`
        sys.stderr.close()
        return 0
    except Exception as e:  # a Tessera bug: still one line, with the exception type
        print(f"tessera: internal error: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
