"""Shared pieces of the CPU benchmark suite: timing, the machine's copy bandwidth,
machine information, result tables, and the JSON + markdown files in bench/results/.

Timing rules (see .library METHOD, adapted to a CPU): warm up first, then take
`repeats` samples with time.perf_counter; a sample of a fast call times a batch of
calls so that it lasts at least ~2 ms. Implementations are measured round-robin
(every implementation gets one batch of samples per round, over several rounds), so
a burst of load from another process hits all of them alike. We report the best
(min) and the median; the spread (median / min - 1) is the noise.
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
FRONTEND = os.path.join(REPO_ROOT, "frontend")
# Use the tessera on PYTHONPATH if there is one (e.g. a frozen copy of frontend/, so
# a rebuild during the run cannot swap the library under it), else this checkout's.
if importlib.util.find_spec("tessera") is None:
    sys.path.insert(0, FRONTEND)

import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402

# Optional peers: a missing one is reported as "n/a", never a crash. The launch-cost
# children set BENCH_NO_PEERS=1: they time Tessera's own start-up, which importing
# torch (~1 s) would only blur.
torch = numba = None
if os.environ.get("BENCH_NO_PEERS") != "1":
    try:
        import torch
    except ImportError:  # pragma: no cover - depends on the machine
        torch = None
    try:
        import numba
    except ImportError:  # pragma: no cover
        numba = None

NA = "n/a"


# --------------------------------------------------------------------------- timing

@dataclass
class Timing:
    """Seconds per call: every sample, and the best and the median of them."""
    samples: list = field(default_factory=list)

    @property
    def min(self):
        return min(self.samples) if self.samples else float("nan")

    @property
    def median(self):
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def spread(self):
        """Median over best, minus one: how noisy the samples were."""
        return self.median / self.min - 1 if self.samples else float("nan")

    def as_dict(self):
        return {"min_s": self.min, "median_s": self.median, "spread": self.spread, "n": len(self.samples)}


def calibrate(fn, target_s=0.002, max_inner=1 << 16):
    """How many calls one sample should time so it lasts about target_s."""
    inner = 1
    while True:
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        dt = time.perf_counter() - t
        if dt >= target_s or inner >= max_inner:
            return inner
        inner = min(max_inner, max(inner * 2, int(inner * target_s / max(dt, 1e-9)) + 1))


def sample(fn, n, inner=1, timing=None):
    """Append n samples (seconds per call, `inner` calls each) of fn to timing."""
    timing = timing or Timing()
    perf = time.perf_counter
    for _ in range(n):
        if inner == 1:
            t = perf()
            fn()
            timing.samples.append(perf() - t)
        else:
            t = perf()
            for _ in range(inner):
                fn()
            timing.samples.append((perf() - t) / inner)
    return timing


def measure_round_robin(fns: dict, repeats=12, rounds=4, warmup=2, budget_s=4.0):
    """Time each callable of `fns` (name -> fn) round-robin. Returns name -> Timing.

    Each round gives every function repeats/rounds samples. A function slower than
    budget_s / repeats per call gets fewer samples (at least one per round), so one
    slow implementation cannot blow the run's time.
    """
    plan = {}
    for name, fn in fns.items():
        t = time.perf_counter()
        for _ in range(warmup):
            fn()
        per_call = (time.perf_counter() - t) / max(warmup, 1)
        inner = calibrate(fn) if per_call < 0.002 else 1
        per_sample = max(per_call * inner, 1e-9)
        n_total = max(rounds, min(repeats, int(budget_s / per_sample)))
        plan[name] = (inner, max(1, n_total // rounds))
    out = {name: Timing() for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            inner, n = plan[name]
            # Let the previous library's spinning workers go to sleep first (OpenBLAS
            # spins ~0.1 s after a call, OpenMP and Tessera's pool less), so they do
            # not take a core from the next one; then re-warm, as it may have evicted
            # the caches.
            time.sleep(0.12)
            fn()
            sample(fn, n, inner, out[name])
    return out


# --------------------------------------------------------------------------- checks

def rel_error(out, ref):
    """||out - ref|| / ||ref|| in float64; inf when out has a NaN (an unwritten element)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))


def check(name, out_array, run, ref, tol=1e-5):
    """Poison out_array with NaN, run once, compare with ref. Returns (ok, rel_error)."""
    out_array[...] = np.nan
    run()
    err = rel_error(out_array, ref)
    return err <= tol, err


# --------------------------------------------------------------------------- copy bandwidth

@tessera.kernel
def copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def copy_bandwidth(nbytes=256 << 20, repeats=10, rounds=2):
    """The machine's copy bandwidth in GB/s, counting bytes read + bytes written
    (2 x nbytes per copy; the write-allocate read of the destination is not
    counted, the same as for every kernel here). Returns a dict with both numpy's
    np.copyto (one thread) and a Tessera copy kernel (thread pool)."""
    n = nbytes // 4
    src = np.random.default_rng(1).random(n, dtype=np.float32)
    dst = np.empty_like(src)
    block = 4096
    grid = (tessera.cdiv(n, block),)
    fns = {
        "numpy np.copyto": lambda: np.copyto(dst, src),
        "tessera copy": lambda: copy_kernel[grid](src, dst, n, BLOCK_SIZE=block),
    }
    ok, err = check("tessera copy", dst, fns["tessera copy"], src, tol=0)
    t = measure_round_robin(fns, repeats=repeats, rounds=rounds)
    res = {"bytes_per_copy": 2 * nbytes, "tessera_copy_correct": ok}
    for name, tm in t.items():
        res[name] = {"best_GBps": 2 * nbytes / tm.min / 1e9, "median_GBps": 2 * nbytes / tm.median / 1e9,
                     **tm.as_dict()}
    res["reference_GBps"] = max(res[k]["best_GBps"] for k in fns)
    return res


# --------------------------------------------------------------------------- same-round copy reference

COPY_PREFIX = "copy: "


def copy_references(src, dst):
    """Copies of src into dst (numpy, and the Tessera copy kernel), to be timed in
    the same round-robin as the kernels they are the reference for. On a shared
    machine the bandwidth drifts by tens of percent within a minute, so a ratio to a
    copy measured at another moment says more about the drift than the kernel."""
    n = src.size
    s, d = src.reshape(-1), dst.reshape(-1)
    grid = (tessera.cdiv(n, 4096),)
    return {COPY_PREFIX + "numpy np.copyto": lambda: np.copyto(dst, src),
            COPY_PREFIX + "tessera copy": lambda: copy_kernel[grid](s, d, n, BLOCK_SIZE=4096)}


def bandwidth_results(label, status, timings, kernel_bytes, copy_bytes, sec, rows):
    """Turn one size's timings into table rows and JSON records (GB/s, best and
    median, and the fraction of the best same-round copy). Returns (best GB/s by
    name, median GB/s by name, the copy reference in GB/s)."""
    best, med = {}, {}
    for name, tm in timings.items():
        b = copy_bytes if name.startswith(COPY_PREFIX) else kernel_bytes
        best[name], med[name] = b / tm.min / 1e9, b / tm.median / 1e9
    copies = [v for k, v in best.items() if k.startswith(COPY_PREFIX)]
    ref = max(copies) if copies else None
    for name in list(status) + [k for k in timings if k.startswith(COPY_PREFIX)]:
        tm = timings.get(name)
        st = status.get(name, "reference")
        if tm is None:
            rows.append([label, name, NA, NA, NA, NA, st])
            sec.records.append({"size": label, "impl": name, "status": st})
            continue
        frac = best[name] / ref if ref else None
        rows.append([label, name, tm.min * 1e3, best[name], med[name], frac, st])
        sec.records.append({"size": label, "impl": name, "best_GBps": best[name], "median_GBps": med[name],
                            "frac_of_copy": frac, **tm.as_dict(), "status": st})
    return best, med, ref


BANDWIDTH_HEADER = ["size", "impl", "best ms", "best GB/s", "median GB/s", "of copy", "check"]
COPY_NOTE = ("'of copy' = best GB/s over the best same-round copy of the same input (numpy np.copyto or the "
             "Tessera copy kernel, timed in the same round-robin, counting read + write)")


# --------------------------------------------------------------------------- machine info

def _cpu_model():
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k in ("model name", "cpu family", "model") and k not in fields:
                    fields[k] = v.strip()
                if not line.strip():
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown"
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return sorted(x for x in line.split(":", 1)[1].split()
                                  if x.startswith("avx") or x in ("fma", "f16c"))
    except OSError:
        pass
    return []


def _lscpu_field(name):
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.split(":")[0].strip() == name:
            return line.split(":", 1)[1].strip()
    return None


def _git_rev():
    try:
        rev = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO_ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info():
    """What the numbers were measured on, and with which versions."""
    from tessera._core import _C
    info = {
        "cpu_model": _cpu_model(),
        "cores_online": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "avx_flags": _cpu_flags(),
        "l2": _lscpu_field("L2 cache"),
        "l3": _lscpu_field("L3 cache"),
        "hypervisor": _lscpu_field("Hypervisor vendor"),
        "loadavg_at_start": tuple(round(x, 2) for x in os.getloadavg()),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "torch": getattr(torch, "__version__", NA),
        "torch_threads": torch.get_num_threads() if torch else NA,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability() if torch else NA,
        "numba": getattr(numba, "__version__", NA),
        "tessera": tessera.__version__,
        "tessera_git": _git_rev(),
        "tessera_path": os.path.dirname(tessera.__file__),
        "tessera_threads": _C.num_threads(),
        "tessera_llvm_cpu": _C.host_cpu_name(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    try:
        from threadpoolctl import threadpool_info
        info["blas"] = [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                        for d in threadpool_info() if d.get("user_api") == "blas"]
    except ImportError:
        info["blas"] = NA
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "TESSERA_NUM_THREADS"):
        if var in os.environ:
            info.setdefault("env", {})[var] = os.environ[var]
    return info


# --------------------------------------------------------------------------- tables and files

def fmt(v, digits=3):
    """A table cell: numbers to `digits` significant figures, None as n/a."""
    if v is None:
        return NA
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != v:
            return NA
        if v == float("inf"):
            return "inf"
        if abs(v) >= 10 ** digits:
            return f"{v:.0f}"
        return f"{v:.{digits}g}"
    return str(v)


def table_lines(header, rows, markdown=False):
    """Rows of cells as aligned text, or as a markdown table."""
    cells = [[fmt(c) for c in header]] + [[fmt(c) for c in r] for r in rows]
    if markdown:
        out = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join("---" for _ in header) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in cells[1:]]
        return out
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]]


def print_table(title, header, rows):
    print(f"\n== {title}")
    for line in table_lines(header, rows):
        print(line)
    sys.stdout.flush()


@dataclass
class Section:
    """One benchmark family's results: tables for people, records for machines."""
    name: str
    tables: list = field(default_factory=list)   # (title, header, rows)
    records: list = field(default_factory=list)  # dicts, written to JSON
    notes: list = field(default_factory=list)

    def table(self, title, header, rows):
        self.tables.append((title, header, rows))
        print_table(title, header, rows)

    def note(self, text):
        self.notes.append(text)
        print(f"   note: {text}")


def write_results(name, machine, sections, summary, targets, extra_notes=()):
    """bench/results/<name>.json (everything) and <name>.md (the tables)."""
    os.makedirs(RESULTS_DIR, exist_ok=True)

    def clean(v):  # JSON has no NaN / inf
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return None if v != v else str(v)
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    doc = {"machine": machine, "summary": summary, "targets": targets,
           "sections": {s.name: {"records": s.records, "notes": s.notes} for s in sections},
           "notes": list(extra_notes)}
    with open(os.path.join(RESULTS_DIR, f"{name}.json"), "w") as f:
        json.dump(clean(doc), f, indent=1)

    md = [f"# Tessera CPU benchmarks ({name})", ""]
    md.append(f"Generated by `python bench/bench_cpu.py` on {machine['date']}.")
    md.append("")
    md.append(f"- CPU: {machine['cpu_model']}, {machine['cores_usable']} cores usable "
              f"(L2 {machine['l2']}, L3 {machine['l3']}, hypervisor: {machine['hypervisor']})")
    md.append(f"- AVX flags: {' '.join(machine['avx_flags'])}")
    md.append(f"- Tessera {machine['tessera']} ({machine['tessera_git']}), {machine['tessera_threads']} threads, "
              f"LLVM CPU {machine['tessera_llvm_cpu']}")
    md.append(f"- numpy {machine['numpy']} (BLAS: {machine.get('blas')}), torch {machine['torch']} "
              f"({machine['torch_threads']} threads, {machine['torch_cpu_capability']}), numba {machine['numba']}, "
              f"Python {machine['python']}")
    md.append(f"- load average at start {machine['loadavg_at_start']}, at end {machine.get('loadavg_at_end')}")
    md.append("")
    md.append("How to read: every implementation runs on the same inputs in one process, timed round-robin "
              "(warm-up, then several rounds of samples each); tables give the best and the median sample. "
              "Bandwidth counts each input read once and each output written once. 'x copy' compares with a "
              "copy of the same data timed in the same rounds. Targets are judged on the best samples; on a "
              "machine shared with other work, compare the medians too before trusting a close call.")
    md.append("")
    md.append("## Summary")
    md.append("")
    md += table_lines(summary["header"], summary["rows"], markdown=True)
    md.append("")
    md.append("## Targets")
    md.append("")
    md += table_lines(["target", "measured", "goal", "result"],
                      [[t["target"], t["measured"], t["goal"], t["result"]] for t in targets], markdown=True)
    for s in sections:
        md.append("")
        md.append(f"## {s.name}")
        for title, header, rows in s.tables:
            md.append("")
            md.append(f"### {title}")
            md.append("")
            md += table_lines(header, rows, markdown=True)
        if s.notes:
            md.append("")
            md += [f"- {n}" for n in s.notes]
    if extra_notes:
        md.append("")
        md.append("## Notes")
        md.append("")
        md += [f"- {n}" for n in extra_notes]
    with open(os.path.join(RESULTS_DIR, f"{name}.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def cuda_host_us(fn, n=200):
    """Host microseconds per call of `fn` on a GPU, with no synchronization between calls
    (above the GPU time an op is host-bound, and CUDA events around back-to-back calls
    then measure the host): one warm-up call, n calls, a synchronize after."""
    import torch
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def cuda_kernels_us(prof):
    """The device's busy time, us, in a torch.profiler run: the union of the intervals of
    the CUDA kernels (and device copies) it recorded. That is their sum where they run
    one after another; a kernel launched early by programmatic dependent launch
    (tl.extra.cuda.gdc_wait) starts while the previous one runs and waits for it, and
    counting its whole interval would count that wait twice (union_us)."""
    import torch
    spans = [(ev.time_range.start, ev.time_range.end) for ev in prof.events()
             if ev.device_type == torch.autograd.DeviceType.CUDA]
    return union_us(spans)


def profiled_kernel_us(fn, calls):
    """Best over 3 rounds of `calls` calls of fn of the CUDA kernel time per call (us,
    cuda_kernels_us: no host launch cost), after one call to warm up."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        best = min(best, cuda_kernels_us(prof) / calls)
    return best


def union_us(spans):
    """The length of the union of (start, end) intervals."""
    total, start, end = 0.0, None, None
    for s, e in sorted(spans):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (end - start if end is not None else 0.0)


def cuda_events_us(fn, calls=100, rounds=3):
    """CUDA events around `calls` back-to-back calls of `fn` (after one warm-up call),
    best of `rounds`: microseconds per call."""
    import torch
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / calls)
    return best
