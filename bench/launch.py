"""Compile and launch costs: the cold compile of the softmax kernel, the first launch
in a new process with the disk cache populated, and the host time of a cached
launch of a tiny kernel next to numpy and torch on 16 elements.

The first two run in child processes (`python bench/launch.py --child cold|warm`,
with BENCH_NO_PEERS=1 so the child imports only numpy and Tessera), because only a
new process has nothing compiled, loaded or cached in memory.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

SOFTMAX_SIGNATURE = "*fp32,*fp32,i32,i32,i32"
# Small enough that the kernel's run (~0.1 ms) is noise next to a compile; first
# launch minus a warm launch of the same size is the compile (or cache load) cost.
CHILD_ROWS = 64


def child(mode):
    """Runs in a fresh process; prints one JSON line of seconds."""
    t0 = time.perf_counter()
    import numpy as np
    from common import tessera
    from softmax import softmax_kernel, softmax_tessera
    t_import = time.perf_counter() - t0
    x = np.random.default_rng(0).standard_normal((CHILD_ROWS, 4096), dtype=np.float32)
    out = np.empty_like(x)
    # CPU time (all threads of this process) next to wall time: compiling is
    # single-threaded, so CPU time is what the first launch costs without the time
    # other processes on a busy machine took from it.
    t, c = time.perf_counter(), time.process_time()
    softmax_tessera(x, out)
    first, first_cpu = time.perf_counter() - t, time.process_time() - c
    warm, warm_cpu = [], []
    for _ in range(20):
        t, c = time.perf_counter(), time.process_time()
        softmax_tessera(x, out)
        warm.append(time.perf_counter() - t)
        warm_cpu.append(time.process_time() - c)
    res = {"mode": mode, "import_s": t_import, "first_launch_s": first, "warm_launch_s": min(warm),
           "warm_launch_median_s": statistics.median(warm), "first_launch_cpu_s": first_cpu,
           "compile_or_load_cpu_s": first_cpu - statistics.median(warm_cpu)}
    e = np.exp(x - x.max(axis=1, keepdims=True))
    res["correct"] = bool(np.allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7))
    ck = next(iter(softmax_kernel._compiled.values()), None)
    res["from_cache"] = bool(getattr(ck, "from_cache", False))
    if mode == "cold":
        # tessera.compile: no cache, every stage; this process has LLVM warm already.
        times, cpu = [], []
        for _ in range(3):
            t, c = time.perf_counter(), time.process_time()
            tessera.compile(softmax_kernel, signature=SOFTMAX_SIGNATURE, constexprs={"BLOCK_SIZE": 4096})
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        res["tessera_compile_s"] = min(times)
        res["tessera_compile_median_s"] = statistics.median(times)
        res["tessera_compile_cpu_s"] = min(cpu)
        res.update(_compile_breakdown(softmax_kernel))
    print(json.dumps(res))


def _compile_breakdown(kernel):
    """Python front end (AST -> Tile IR text) versus the C++ core (passes, LLVM,
    object code), best of 3. Uses internals, so it is optional."""
    try:
        from tessera._core import _C
        from tessera.compiler import generate_tile_ir
        from tessera.language import dtypes as D
        names = [n for i, n in enumerate(kernel.arg_names) if not kernel.constexpr_mask[i]]
        arg_types = {n: D.parse_signature_type(s) for n, s in zip(names, SOFTMAX_SIGNATURE.split(","))}
        options = {"num_warps": 4, "num_stages": 3, "debug": False}
        fe, be = [], []
        for _ in range(3):
            t = time.perf_counter()
            ir = generate_tile_ir(kernel.fn, arg_types, {"BLOCK_SIZE": 4096}, {}, options)
            fe.append(time.perf_counter() - t)
            t = time.perf_counter()
            _C.compile(ir, "cpu", 4, 3, False, [])
            be.append(time.perf_counter() - t)
        return {"frontend_s": min(fe), "backend_s": min(be)}
    except Exception as e:  # the internals moved: the breakdown is optional
        return {"breakdown_error": f"{type(e).__name__}: {e}"}


def _run_child(mode, cache_dir, pycache=None):
    """pycache: a PYTHONPYCACHEPREFIX folder, so the child imports Tessera from
    bytecode as an installed package would (this machine sets
    PYTHONDONTWRITEBYTECODE=1); None keeps the environment as it is."""
    env = dict(os.environ, TESSERA_CACHE_DIR=cache_dir, BENCH_NO_PEERS="1")
    if pycache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode], env=env,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"launch child ({mode}) failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _tiny_launch(rounds, per_round):
    """Seconds per call of a cached 1-program, 16-element launch, and of numpy /
    torch on 16 elements: per_round calls timed together, best and median round."""
    import numpy as np
    from common import torch
    from elementwise import add_kernel
    x = np.arange(16, dtype=np.float32)
    y = np.ones(16, dtype=np.float32)
    out = np.empty_like(x)
    grid = (1,)
    # The Python launcher jit.py generates was the cached path before the C++ one
    # (frontend/csrc/launch_fastpath.cpp); it still serves first launches and misses.
    python_launcher = add_kernel._launch
    fns = {"tessera add_kernel[(1,)] BLOCK=16": lambda: add_kernel[grid](x, y, out, 16, BLOCK_SIZE=16),
           "tessera, Python launcher (the cached path before C++)":
               lambda: python_launcher(x, y, out, 16, BLOCK_SIZE=16, grid=grid),
           "numpy np.add(out=)": lambda: np.add(x, y, out=out)}
    if torch is not None:
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y)
        tout = torch.empty_like(tx)
        fns["tessera add_kernel, torch CPU tensors"] = lambda: add_kernel[grid](tx, ty, tout, 16, BLOCK_SIZE=16)
        fns["torch x.add_(y)"] = lambda: tx.add_(ty)
    add_kernel._compiled.clear()  # earlier benchmarks in this process left other specializations
    fns["tessera add_kernel[(1,)] BLOCK=16"]()
    fns["tessera add_kernel[(1,)] BLOCK=16"]()
    assert np.array_equal(out, x + y)
    assert add_kernel._fast_path_size() == 1, "the cached launch must run from the C++ launch path"
    res = {}
    for name, fn in fns.items():
        for _ in range(min(per_round, 1000)):
            fn()
        rs = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(per_round):
                fn()
            rs.append((time.perf_counter() - t) / per_round)
        res[name] = {"min_s": min(rs), "median_s": statistics.median(rs), "calls_per_round": per_round,
                     "rounds": rounds}
    return res


def run(quick=False):
    from common import Section
    sec = Section("compile and launch costs")
    n_cold, n_warm = (2, 3) if quick else (4, 6)
    base = tempfile.mkdtemp(prefix="tessera-bench-cache-")
    pyc = os.path.join(base, "pycache")
    try:
        _run_child("cold", os.path.join(base, "prime"), pyc)  # writes the bytecode; not counted
        cold = [_run_child("cold", os.path.join(base, f"cold{i}"), pyc) for i in range(n_cold)]
        warm = [_run_child("warm", os.path.join(base, "cold0"), pyc) for _ in range(n_warm)]
        warm_nopyc = [_run_child("warm", os.path.join(base, "cold0")) for _ in range(2)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for r in cold + warm + warm_nopyc:
        r["compile_or_load_s"] = r["first_launch_s"] - r["warm_launch_s"]

    def stat(rs, key):
        v = [r[key] for r in rs if key in r]
        return (min(v), statistics.median(v)) if v else (None, None)

    rows = []
    for label, rs, key in (("cold: first launch - warm launch (fresh cache dir)", cold, "compile_or_load_s"),
                           ("cold: the same, process CPU time", cold, "compile_or_load_cpu_s"),
                           ("cold: tessera.compile (LLVM initialised)", cold, "tessera_compile_s"),
                           ("cold: tessera.compile, process CPU time", cold, "tessera_compile_cpu_s"),
                           ("cold: of which Python front end", cold, "frontend_s"),
                           ("cold: of which C++ core (passes, LLVM, object)", cold, "backend_s"),
                           ("cold: import numpy + tessera", cold, "import_s"),
                           ("warm new process: first launch", warm, "first_launch_s"),
                           ("warm new process: first launch, process CPU time", warm, "first_launch_cpu_s"),
                           ("warm new process: first - warm launch", warm, "compile_or_load_s"),
                           ("warm new process: import numpy + tessera", warm, "import_s"),
                           ("warm launch of the same kernel (64x4096)", warm, "warm_launch_s"),
                           ("warm new process, no bytecode cache: first launch", warm_nopyc, "first_launch_s")):
        lo, med = stat(rs, key)
        rows.append([label, lo * 1e3 if lo is not None else None, med * 1e3 if med is not None else None, len(rs)])
    sec.table("softmax kernel (64 x 4096), times in ms over child processes",
              ["what", "best ms", "median ms", "processes"], rows)
    bad = [r for r in cold + warm if not r.get("correct")]
    if bad:
        sec.note(f"{len(bad)} child run(s) computed a wrong softmax")
    if not all(r.get("from_cache") for r in warm):
        sec.note("a warm child did not load from the disk cache (it compiled)")
    if any("breakdown_error" in r for r in cold):
        sec.note("compile breakdown unavailable: " + cold[0].get("breakdown_error", ""))
    sec.note("children import Tessera from bytecode (a PYTHONPYCACHEPREFIX folder), as an installed package "
             "would; the last row keeps this machine's PYTHONDONTWRITEBYTECODE=1, so every import of "
             "tessera.compiler recompiles its Python source")
    sec.records.append({"cold_children": cold, "warm_children": warm, "warm_children_no_bytecode": warm_nopyc})

    rounds, per_round = (3, 20_000) if quick else (5, 100_000)
    tiny = _tiny_launch(rounds, per_round)
    sec.table(f"host time per call on 16 elements ({rounds} rounds of {per_round} calls)",
              ["impl", "best us", "median us"],
              [[k, v["min_s"] * 1e6, v["median_s"] * 1e6] for k, v in tiny.items()])
    sec.records.append({"tiny_launch": tiny})
    summary = {
        "cold_compile_s": stat(cold, "compile_or_load_s"),
        "cold_compile_cpu_s": stat(cold, "compile_or_load_cpu_s"),
        "warm_first_launch_cpu_s": stat(warm, "first_launch_cpu_s"),
        "tessera_compile_s": stat(cold, "tessera_compile_s"),
        "warm_first_launch_s": stat(warm, "first_launch_s"),
        "tiny_launch_s": (tiny["tessera add_kernel[(1,)] BLOCK=16"]["min_s"],
                          tiny["tessera add_kernel[(1,)] BLOCK=16"]["median_s"]),
        "tiny_numpy_s": tiny["numpy np.add(out=)"]["min_s"],
        "tiny_torch_s": tiny.get("torch x.add_(y)", {}).get("min_s"),
    }
    return sec, summary


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        sec, summary = run(quick="--quick" in sys.argv)
        print(summary)
