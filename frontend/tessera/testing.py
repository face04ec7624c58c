"""Benchmarking helpers in the shape of triton.testing: `do_bench` (time one callable),
and `perf_report` / `Benchmark` (sweep a function over a grid, print a table, plot it)."""
from __future__ import annotations

import math
import statistics
import sys
import time

__all__ = ["do_bench", "Benchmark", "perf_report", "Mark"]


# --------------------------------------------------------------------------- timing

class _CpuTimer:
    """Wall-clock time of each call (perf_counter); CPU launches are synchronous."""

    def synchronize(self):
        pass

    def time_calls(self, fn, n):
        """Milliseconds of each of n calls."""
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


class _CudaTimer:
    """GPU time of each call: a pair of CUDA events (Tessera's runtime) recorded around
    it on the stream Tessera launches on (torch's current stream when torch is
    present, else the legacy default stream)."""

    def __init__(self, device_index=0):
        from ._core import _C
        if not _C.cuda_available():
            raise RuntimeError(f"do_bench(device='cuda:{device_index}'): CUDA is not usable here: "
                               f"{_C.cuda_unavailable_reason()}")
        self._C = _C
        self.device_index = device_index
        self.stream = 0
        try:
            import torch
            if torch.cuda.is_available():
                self.stream = torch.cuda.current_stream(device_index).cuda_stream
        except ImportError:
            pass

    def synchronize(self):
        self._C.cuda_synchronize(self.device_index)

    def time_calls(self, fn, n):
        C, dev = self._C, self.device_index
        events = [(C.cuda_event_create(dev), C.cuda_event_create(dev)) for _ in range(n)]
        try:
            for start, end in events:
                C.cuda_event_record(dev, start, self.stream)
                fn()
                C.cuda_event_record(dev, end, self.stream)
            return [C.cuda_event_elapsed_ms(dev, start, end) for start, end in events]
        finally:
            for pair in events:
                for e in pair:
                    C.cuda_event_destroy(dev, e)


def _timer(device):
    if device is None or device == "cpu":
        return _CpuTimer()
    if isinstance(device, str) and device.startswith("cuda"):
        return _CudaTimer(int(device.split(":")[1]) if ":" in device else 0)
    raise ValueError(f"do_bench: device must be 'cpu' or 'cuda[:N]', got {device!r}")


_RETURN_MODES = ("min", "max", "mean", "median", "all")


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean", device="cpu"):
    """Time `fn()` in milliseconds.

    warmup, rep: milliseconds to spend warming up and measuring (as in Triton); the call
    count comes from a first estimate of one call (at least 1 warm-up and 1 measured
    call). device: 'cpu' (perf_counter around each call) or 'cuda[:N]' (CUDA events
    around each call). grad_to_none: tensors whose .grad is reset before each call.
    Returns the `return_mode` statistic ('mean', 'median', 'min', 'max', or 'all' for
    the list of samples), or, with quantiles=[q, ...], the list of those quantiles.

    On the CPU nothing flushes the caches between calls: a kernel whose data fit in
    cache is timed warm, like numpy in a loop."""
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"do_bench: return_mode must be one of {_RETURN_MODES}, got {return_mode!r}")
    if quantiles is not None and any(not 0 <= q <= 1 for q in quantiles):
        raise ValueError(f"do_bench: quantiles must lie in [0, 1], got {quantiles!r}")
    timer = _timer(device)

    def call():
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        fn()

    call()
    timer.synchronize()
    estimate = statistics.median(timer.time_calls(call, 5))
    n_warmup = max(1, int(warmup / max(estimate, 1e-6)))
    n_repeat = max(1, int(rep / max(estimate, 1e-6)))
    n_warmup, n_repeat = min(n_warmup, 100_000), min(n_repeat, 100_000)
    for _ in range(n_warmup):
        call()
    timer.synchronize()
    samples = timer.time_calls(call, n_repeat)
    if quantiles is not None:
        out = [_quantile(samples, q) for q in quantiles]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return samples
    return {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}[return_mode](samples)


def _quantile(samples, q):
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(samples)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# --------------------------------------------------------------------------- perf_report

class Benchmark:
    """One sweep for perf_report: the function is called with x_names set to each of
    x_vals (all x_names get the same value, or x_vals holds tuples, one value per name),
    line_arg set to each of line_vals, and `args` fixed. It returns a number, or a
    (middle, min, max) tuple whose middle is tabulated and plotted."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args=None, xlabel="",
                 ylabel="", x_log=False, y_log=False, styles=None, color=None):
        if len(line_names) != len(line_vals):
            raise ValueError(f"Benchmark {plot_name!r}: line_names has {len(line_names)} entries, "
                             f"line_vals {len(line_vals)}")
        self.x_names = list(x_names)
        self.x_vals = list(x_vals)
        self.line_arg = line_arg
        self.line_vals = list(line_vals)
        self.line_names = list(line_names)
        self.plot_name = plot_name
        self.args = dict(args or {})
        self.xlabel = xlabel or ", ".join(self.x_names)
        self.ylabel = ylabel
        self.x_log = x_log
        self.y_log = y_log
        self.styles = styles


class Mark:
    """A function with its Benchmarks; `.run()` sweeps them."""

    def __init__(self, fn, benchmarks):
        self.fn = fn
        self.benchmarks = benchmarks

    def _sweep(self, bench):
        rows = []
        for x in bench.x_vals:
            xs = x if isinstance(x, (tuple, list)) else (x,) * len(bench.x_names)
            if len(xs) != len(bench.x_names):
                raise ValueError(f"Benchmark {bench.plot_name!r}: x value {x!r} does not match x_names "
                                 f"{bench.x_names}")
            kwargs = dict(zip(bench.x_names, xs))
            row = {"x": xs[0] if len(xs) == 1 else tuple(xs), **kwargs}
            for val, name in zip(bench.line_vals, bench.line_names):
                r = self.fn(**kwargs, **{bench.line_arg: val}, **bench.args)
                if isinstance(r, (tuple, list)):
                    mid, lo, hi = tuple(r[:3]) if len(r) >= 3 else (r[0], r[0], r[0])
                else:
                    mid = lo = hi = r
                row[name] = mid
                row[name + "-min"] = lo
                row[name + "-max"] = hi
            rows.append(row)
        return rows

    @staticmethod
    def _table(bench, rows):
        head = bench.x_names + bench.line_names
        cells = [[_fmt(r[n]) for n in bench.x_names] + [_fmt(r[n]) for n in bench.line_names] for r in rows]
        widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(head)]
        lines = [f"{bench.plot_name}:" + (f" ({bench.ylabel})" if bench.ylabel else "")]
        lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
        return "\n".join(lines)

    def _plot(self, bench, rows, show_plots, save_path):
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(6, 3.5))
        xs = [r["x"] for r in rows]
        for i, name in enumerate(bench.line_names):
            style = bench.styles[i] if bench.styles and i < len(bench.styles) else None
            kw = {}
            if style:
                kw["color"], kw["linestyle"] = style[0], style[1] if len(style) > 1 else "-"
            ax.plot(xs, [r[name] for r in rows], marker="o", label=name, **kw)
            lo, hi = [r[name + "-min"] for r in rows], [r[name + "-max"] for r in rows]
            if lo != hi:
                ax.fill_between(xs, lo, hi, alpha=0.15, color=ax.lines[-1].get_color())
        ax.set_xlabel(bench.xlabel)
        ax.set_ylabel(bench.ylabel)
        ax.set_title(bench.plot_name)
        if bench.x_log:
            ax.set_xscale("log", base=2)
        if bench.y_log:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        if save_path:
            import os
            os.makedirs(save_path, exist_ok=True)
            fig.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))
        if show_plots:
            plt.show()
        else:
            plt.close(fig)
        return fig

    def run(self, show_plots=False, print_data=True, save_path=None, return_df=False, file=None):
        """Sweep every Benchmark: print its table (always; print_data=False keeps it
        quiet), plot it with matplotlib when that is installed (show_plots shows the
        figure; save_path writes <plot_name>.png and .csv there). Returns the rows of
        each sweep (a list of dicts; a pandas DataFrame with return_df=True and pandas
        installed); one sweep's result directly when there is one Benchmark."""
        benches = self.benchmarks if isinstance(self.benchmarks, (list, tuple)) else [self.benchmarks]
        results = []
        for bench in benches:
            rows = self._sweep(bench)
            if print_data:
                print(self._table(bench, rows), file=file or sys.stdout, flush=True)
            self._plot(bench, rows, show_plots, save_path)
            if save_path:
                import os
                with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w") as f:
                    cols = bench.x_names + bench.line_names
                    f.write(",".join(cols) + "\n")
                    f.writelines(",".join(str(r[c]) for c in cols) + "\n" for r in rows)
            if return_df:
                try:
                    import pandas
                    rows = pandas.DataFrame(rows)
                except ImportError:
                    pass
            results.append(rows)
        return results[0] if len(results) == 1 else results


def perf_report(benchmarks):
    """Decorator: `@perf_report(Benchmark(...))` (or a list of them) turns a function
    into a Mark whose `.run(print_data=True, show_plots=True)` sweeps it."""
    return lambda fn: Mark(fn, benchmarks)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
