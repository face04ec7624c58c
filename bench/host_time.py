"""Host time of tessera.kernels' autograd calls next to torch eager's: microseconds of
Python + launches per forward + backward (and per forward) on inputs small enough
that the kernels themselves cost next to nothing, so what is measured is the host
path the fwd+bwd column of bench/kernels.py pays on a GPU. Runs on the CPU too (torch
CPU tensors take the same Python path; only allocation and launch differ).

    python bench/host_time.py [--device cpu|cuda] [--ops layer_norm,softmax] [--breakdown]
                              [--sync-check] [--baseline DIR] [--out bench/results] [--tag _before]

--breakdown: inclusive host time per call of each library function (the op's forward
and backward, the _host helpers, column sums), from wrappers installed for the run.
--sync-check (cuda): one fwd+bwd call on the large shape of bench/kernels.py queued
behind ~20 ms of GPU work: a call that returns in microseconds never waits for the
GPU; one that takes ~20 ms synchronizes somewhere.
--baseline DIR: another copy of tessera.kernels (e.g. `git show`n from an older commit
into a folder) timed in the same run, batch for batch alternating with this one and
torch, as a "tk base" column: a before/after comparison that the shared machine's
drifting load cannot skew towards either side.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import RESULTS_DIR, machine_info, table_lines  # noqa: E402
from kernels import _fwd_bwd, cases  # noqa: E402

import torch  # noqa: E402

import tessera.kernels as tk  # noqa: E402


def per_call_us(fn, device, calls=200, batches=7, clock=time.perf_counter_ns):
    """Best and median over `batches` batches of `calls` back-to-back calls, us per call
    (wall clock by default; on a GPU the batch ends with a synchronize, which the tiny
    kernels leave nothing to wait for)."""
    return per_call_us_round_robin({"fn": fn}, device, calls, batches, clock)["fn"]


def per_call_us_round_robin(fns, device, calls=200, batches=7, clock=time.perf_counter_ns):
    """per_call_us of several callables (name -> fn), their batches taken in turn, so a
    change in the machine's load reaches each alike: name -> (best, median) us per call."""
    for f in fns.values():
        for _ in range(20):
            f()
    samples = {name: [] for name in fns}
    for _ in range(batches):
        for name, fn in fns.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = clock()
            for _ in range(calls):
                fn()
            if device == "cuda":
                torch.cuda.synchronize()
            samples[name].append((clock() - t0) / calls / 1e3)
    return {name: (min(s), statistics.median(s)) for name, s in samples.items()}


def load_baseline(directory):
    """Another copy of tessera.kernels (its own module objects and plan caches), imported
    from `directory` as tessera.kernels_baseline."""
    import importlib.util
    name = "tessera.kernels_baseline"
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, "__init__.py"),
                                                  submodule_search_locations=[directory])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def sync_check_us(fn, sleep_cycles=40_000_000, reps=5):
    """Host us of one call queued behind `sleep_cycles` GPU clocks of torch.cuda._sleep
    (~20 ms on an H100), median of `reps`; and the sleep's own length in us."""
    fn()
    torch.cuda.synchronize()
    calls, sleeps = [], []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(sleep_cycles)
        e.record()
        t0 = time.perf_counter_ns()
        fn()
        calls.append((time.perf_counter_ns() - t0) / 1e3)
        torch.cuda.synchronize()
        sleeps.append(s.elapsed_time(e) * 1e3)
    return statistics.median(calls), statistics.median(sleeps)


class _EmptyFunction(torch.autograd.Function):
    """The floor of any autograd.Function op: allocation only, no kernel."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return torch.empty_like(x)


class _EmptyFunction3(torch.autograd.Function):
    """The floor of a norm-like op: three inputs that get gradients (x, weight, bias),
    allocation only, no kernel."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w, b)
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        x, w, b = ctx.saved_tensors
        return torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)


def floor3_case(rows, cols, device, dtype):
    """floor_case with three inputs getting gradients (torch's side: addcmul(x, w, b) =
    x + w * b, one op whose backward gives all three)."""
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    w, b = torch.randn(cols, device=device, dtype=dtype), torch.randn(cols, device=device, dtype=dtype)
    return (x, w, b), _EmptyFunction3.apply, torch.addcmul, None, 0


def module_cases(rows, cols, device, dtype, lib):
    """tk.nn's norm modules next to torch.nn's (the module call and its parameter handling
    on top of the op). Their parameters' gradients accumulate from call to call on both
    sides alike (one in-place add per parameter)."""
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    out = {}
    for name, tk_cls, torch_cls in (("nn.LayerNorm module", lib.nn.FusedLayerNorm, torch.nn.LayerNorm),
                                    ("nn.RMSNorm module", lib.nn.FusedRMSNorm, torch.nn.RMSNorm)):
        m_tk = tk_cls(cols, device=device, dtype=dtype)
        m_torch = torch_cls(cols, device=device, dtype=dtype)
        out[name] = ((x,), m_tk, m_torch, None, 0)
    return out


def floor_case(rows, cols, device, dtype):
    """bench/kernels.py's case layout for an op whose forward and backward launch nothing
    (torch's side: a view, the least autograd can do)."""
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    return (x,), _EmptyFunction.apply, lambda a: a.view(a.shape), None, 0


class _TimedKernel:
    """Stands in for a @tessera.kernel in its module: `k[grid](...)` timed from the
    indexing to the launch's return."""

    def __init__(self, kernel, key, breakdown):
        self.kernel, self.key, self.breakdown = kernel, key, breakdown

    def __getitem__(self, grid):
        def launch(*a, **k):
            t0 = time.perf_counter_ns()
            try:
                return self.kernel[grid](*a, **k)
            finally:
                self.breakdown.record(self.key, time.perf_counter_ns() - t0)
        return launch


def micro_us(device, dtype):
    """Single host operations, each timed alone in a loop (us per call): allocation
    ways and launches of a small and of a many-argument kernel."""
    from tessera.kernels import norm as N
    x = torch.randn(64, 256, device=device, dtype=dtype)
    w, b = torch.randn(256, device=device, dtype=dtype), torch.randn(256, device=device, dtype=dtype)
    y, st = torch.empty_like(x), torch.empty(2, 64, device=device, dtype=torch.float32)
    mean, rstd = st[0], st[1]
    N.norm_forward("layer_norm", x, None, w, b, 1e-5, False, False)
    plan = next(iter(N._FWD_PLANS.values())) if hasattr(N, "_FWD_PLANS") else None
    out = {
        "x.new_empty(shape)": lambda: x.new_empty((64, 256)),
        "x.new_empty(shape, dtype=float32)": lambda: x.new_empty((64,), dtype=torch.float32),
        "torch.empty(shape, dtype=, device=x.device)": lambda: torch.empty((64, 256), dtype=x.dtype, device=x.device),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "st[1] (a view)": lambda: st[1],
        "y.reshape(same shape)": lambda: y.reshape((64, 256)),
        "key of 4 layouts": lambda: (x.shape, x.stride(), x.dtype, x.get_device(), w.shape, w.stride(), w.dtype,
                                     w.get_device(), b.shape, b.stride(), b.dtype, b.get_device()),
    }
    if plan is not None:
        out["launch _norm_fwd_kernel (14 args + 10 keywords)"] = lambda: N._norm_fwd_kernel[(64,)](
            x, x, w, b, y, y, mean, rstd, 256, 256, 256, 256, 1e-5, **plan.kw)
    times = {k: per_call_us(f, device, calls=500)[0] for k, f in out.items()}
    if device == "cuda":
        times.update(linear_micro_us(dtype))
    return times


def linear_micro_us(dtype):
    """linear_relu's host path at 4096x1024x2048 and 17x1024x2048 in parts (us per call,
    no synchronization between calls: cuda_host_us): the whole op, the output's
    allocation, the bound launch alone (output made once), and allocation alternatives."""
    from common import cuda_host_us
    from tessera.kernels import linear as L
    out = {}
    for m, k, n in ((4096, 1024, 2048), (17, 1024, 2048)):
        x, w = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        plan = L._fast_linear_plan(x, w, b, L.ACT_RELU, False)
        y = plan.new_y()
        template = x.new_empty(0)
        shape = f"{m}x{k}x{n}"
        for name, f in ((f"tk.linear_relu {shape}", lambda: tk.linear_relu(x, w, b)),
                        (f"  {shape}: its y = plan.new_y() (torch.empty(*shape, dtype=, device=))", plan.new_y),
                        (f"  {shape}: template.new_empty(*shape) instead", lambda: template.new_empty(m, n)),
                        (f"  {shape}: its bound launch, y made once", lambda: plan.launch(x, w, b, y, y)),
                        (f"  torch.mm(x, w.t()) {shape} (peer)", lambda: torch.mm(x, w.t()))):
            out[name] = min(cuda_host_us(f) for _ in range(5))
    return out


class Breakdown:
    """Wraps the library's host functions with timers (inclusive us, per call of the op)."""

    def __init__(self):
        self.total_ns, self.count = {}, {}
        self.saved = []

    def install(self):
        from tessera.jit import Kernel
        from tessera.kernels import _host, activation, attention, linear, norm, reduce, rope, softmax_ce
        for mod in (_host, activation, attention, linear, norm, reduce, rope, softmax_ce):
            for name, f in list(vars(mod).items()):
                if isinstance(f, Kernel):  # a launch, `k[grid](...)`, timed whole
                    self.saved.append((mod, name, f))
                    setattr(mod, name, _TimedKernel(f, f"launch {name}", self))
                elif callable(f) and getattr(f, "__module__", None) == mod.__name__ and not isinstance(f, type) \
                        and not name.startswith("__") and type(f).__name__ == "function":
                    self.saved.append((mod, name, f))
                    setattr(mod, name, self._wrap(f"{mod.__name__.split('.')[-1]}.{name}", f))

    def uninstall(self):
        for mod, name, f in self.saved:
            setattr(mod, name, f)
        self.saved = []

    def reset(self):
        self.total_ns.clear()
        self.count.clear()

    def record(self, key, ns):
        self.total_ns[key] = self.total_ns.get(key, 0) + ns
        self.count[key] = self.count.get(key, 0) + 1

    def _wrap(self, key, f):
        total, count = self.total_ns, self.count

        @functools.wraps(f)
        def timed(*a, **k):
            t0 = time.perf_counter_ns()
            try:
                return f(*a, **k)
            finally:
                total[key] = total.get(key, 0) + time.perf_counter_ns() - t0
                count[key] = count.get(key, 0) + 1
        return timed

    def report(self, calls, top=12):
        rows = sorted(self.total_ns.items(), key=lambda kv: -kv[1])[:top]
        return [(k, v / calls / 1e3, self.count[k] / calls) for k, v in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default=None, help="float16 on cuda, float32 on cpu by default")
    ap.add_argument("--ops", default="", help="comma-separated subset of bench/kernels.py's ops")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--sync-check", action="store_true")
    ap.add_argument("--clock", choices=["wall", "thread"], default=None,
                    help="thread: the calling thread's CPU time (default on the CPU, where other processes "
                         "share the cores; the CPU kernels then run on one thread: TESSERA_NUM_THREADS=1); "
                         "wall on a GPU (the backward runs on autograd's device thread)")
    ap.add_argument("--micro", action="store_true", help="time single host operations (allocations, launches)")
    ap.add_argument("--baseline", default="", help="a folder with another copy of tessera.kernels, timed alongside")
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200, help="calls per batch")
    ap.add_argument("--out", default=RESULTS_DIR)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    device = args.device
    dtype = getattr(torch, args.dtype or ("float16" if device == "cuda" else "float32"))
    if device == "cpu":
        torch.set_num_threads(1)  # tiny inputs: no intra-op threads for either side
    clock_name = args.clock or ("thread" if device == "cpu" else "wall")
    clock = time.thread_time_ns if clock_name == "thread" else time.perf_counter_ns
    small = cases(args.rows, args.cols, device, dtype)
    small.update(module_cases(args.rows, args.cols, device, dtype, tk))
    base = {}
    if args.baseline:
        base_lib = load_baseline(args.baseline)
        base = cases(args.rows, args.cols, device, dtype, lib=base_lib)
        base.update(module_cases(args.rows, args.cols, device, dtype, base_lib))
    big = cases(16384, 4096, device, dtype) if args.sync_check and device == "cuda" else {}
    floors = {"autograd.Function floor": floor_case(args.rows, args.cols, device, dtype),
              "autograd.Function floor (3 grads)": floor3_case(args.rows, args.cols, device, dtype)}
    small.update(floors)
    names = [n for n in small if not args.ops or n in args.ops.split(",") or n in floors]
    records, table = [], []
    bd = Breakdown() if args.breakdown else None
    cases_of_library = set(small) - set(floors)
    if args.micro:
        for k, us in micro_us(device, dtype).items():
            print(f"  micro: {us:7.2f} us  {k}")
    for name in names:
        inputs, f_tk, f_torch, _, _ = small[name]
        rec = {"op": name, "shape": [int(s) for s in inputs[0].shape]}
        impls = {"tk": f_tk, "torch": f_torch}
        if name in base:
            impls["tk_base"] = base[name][1]
        times = per_call_us_round_robin({impl: _fwd_bwd(f, inputs) for impl, f in impls.items()}, device,
                                        args.calls, args.batches, clock)
        with torch.no_grad():
            fwd_times = per_call_us_round_robin({impl: functools.partial(f, *inputs) for impl, f in impls.items()},
                                                device, args.calls, args.batches, clock)
        for impl, f in impls.items():
            rec[f"{impl}_fwd_bwd_us"], rec[f"{impl}_fwd_bwd_median_us"] = times[impl]
            rec[f"{impl}_fwd_us"], rec[f"{impl}_fwd_median_us"] = fwd_times[impl]
            if big and name in big and impl != "tk_base":
                bi = big[name][0]
                fbig = _fwd_bwd(big[name][1] if impl == "tk" else big[name][2], bi)
                rec[f"{impl}_queued_call_us"], rec["queued_behind_us"] = sync_check_us(fbig)
        if bd is not None and name in cases_of_library:
            fb = _fwd_bwd(f_tk, inputs)
            bd.install()
            try:
                fb()
                bd.reset()
                n = 200
                for _ in range(n):
                    fb()
                if device == "cuda":
                    torch.cuda.synchronize()
                rec["breakdown_us"] = bd.report(n)
            finally:
                bd.uninstall()
        records.append(rec)
        ratio = rec["torch_fwd_bwd_us"] / rec["tk_fwd_bwd_us"]
        table.append([name] + ([rec.get("tk_base_fwd_bwd_us", "n/a")] if base else [])
                     + [rec["tk_fwd_bwd_us"], rec["torch_fwd_bwd_us"], ratio]
                     + ([rec.get("tk_base_fwd_us", "n/a")] if base else []) + [rec["tk_fwd_us"], rec["torch_fwd_us"]]
                     + ([rec.get("tk_queued_call_us", "n/a"), rec.get("torch_queued_call_us", "n/a")] if big else []))
        line = (f"{name:28s} fwd+bwd tk {rec['tk_fwd_bwd_us']:7.1f} us  torch {rec['torch_fwd_bwd_us']:7.1f} us  "
                f"torch/tk {ratio:5.2f}   fwd tk {rec['tk_fwd_us']:6.1f}  torch {rec['torch_fwd_us']:6.1f}")
        if "tk_base_fwd_bwd_us" in rec:
            line += f"   (tk base: fwd+bwd {rec['tk_base_fwd_bwd_us']:6.1f}  fwd {rec['tk_base_fwd_us']:6.1f})"
        if "queued_behind_us" in rec:
            line += (f"   queued behind {rec['queued_behind_us']:.0f} us: tk call {rec['tk_queued_call_us']:.0f} us, "
                     f"torch {rec['torch_queued_call_us']:.0f} us")
        print(line, flush=True)
        for key, us, count in rec.get("breakdown_us", []):
            print(f"      {us:7.1f} us  x{count:g}  {key}")
    machine = machine_info()
    if device == "cuda":
        machine["gpu"] = torch.cuda.get_device_name()
    header = (["op"] + (["tk base fwd+bwd us"] if base else []) + ["tk fwd+bwd us", "torch fwd+bwd us", "torch/tk"]
              + (["tk base fwd us"] if base else []) + ["tk fwd us", "torch fwd us"])
    if big:
        header += ["tk call queued us", "torch call queued us"]
    behind = [r["op"] for r in records if r["torch_fwd_bwd_us"] < r["tk_fwd_bwd_us"]]
    tag = f"host_time_{device}{args.tag}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, tag + ".json"), "w") as fh:
        json.dump({"machine": machine, "args": vars(args), "records": records}, fh, indent=1, default=str)
    md = [f"# Host time per call: tessera.kernels vs torch eager ({device}, {str(dtype)[6:]})", "",
          f"Generated by `python bench/host_time.py --device {device}` on {machine['date']}; "
          f"{machine['cpu_model']}, torch {machine['torch']}"
          f"{', GPU ' + machine['gpu'] if 'gpu' in machine else ''}; load average "
          f"{tuple(round(v, 2) for v in os.getloadavg())}.", "",
          f"Inputs {args.rows}x{args.cols} (bench/kernels.py's ops at a small shape): the kernels cost next to "
          f"nothing, so the times are the host's (Python, autograd, allocation, launches). Best of {args.batches} "
          f"batches of {args.calls} back-to-back calls ({clock_name} clock), the implementations' batches taken in "
          f"turn. 'torch/tk' > 1: tk's host path is faster. tk behind on fwd+bwd: {', '.join(behind) or 'none'}."
          + (f" 'tk base': the copy of tessera.kernels in {args.baseline}, timed in the same run." if base else ""),
          ""]
    md += table_lines(header, table, markdown=True)
    with open(os.path.join(args.out, tag + ".md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(f"wrote {os.path.join(args.out, tag)}.{{md,json}}")


if __name__ == "__main__":
    main()
