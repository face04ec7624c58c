"""fp32 matmul on tf32 tensor cores: Tessera vs Triton (the same bench/gpu_kernels.py source)
vs cuBLAS (torch.matmul with allow_tf32), in both operand layouts -- NN (B row-major K x N,
N contiguous: tf32 wgmma cannot transpose a shared-memory operand, so on sm_90a it runs as
C^T = B^T A^T with B^T's fragments in registers, when BN = 16 x warps) and NT (x @ W^T, W
N x K: both operands K-major, wgmma from a TMA ring on sm_90a) -- over a few
tile configurations. Every result is checked against a float64 reference (relative
Frobenius error < 3e-3, bench_gpu.py's tf32 tolerance). Writes matmul_tf32.md to --out.

--reps R measures every configuration R times, round-robin over the configurations (so a
slow spell of the card hits them alike), and adds a summary with the best and the median
of each column. --telemetry also runs Tessera and cuBLAS back to back for a while per
configuration (first repetition) while sampling the SM clock and the board power
(nvidia-smi), so that a gap can be told apart from a lower clock. --kernel-names records
which cuBLAS kernel torch.matmul launches (torch.profiler)."""
from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_gpu as BG  # noqa: E402  (do_bench, try_bench, the Triton copy of gpu_kernels)
import gpu_kernels as TK  # noqa: E402

import tessera  # noqa: E402

# (BM, BN, BK, warps, stages[, GROUP_M[, "P"]]) per layout; "P": gpu_kernels'
# persistent_matmul_kernel on one program per SM (NN only). NT 128x128/4 warps: M != 16 x
# warps, so Tessera keeps mma.sync from the ring there -- the path every tf32 dot took
# before wgmma. NN: the swapped wgmma's n is BM (up to 256) and BN = 16 x warps;
# 128x128x32/4 warps/3 stages is the mma.sync path NN took before it.
CONFIGS = {"NT": [(128, 128, 32, 8, 3), (128, 256, 32, 8, 4), (128, 128, 32, 4, 3)],
           "NN": [(256, 128, 32, 8, 4), (256, 128, 32, 8, 4, 4), (256, 128, 32, 8, 3), (128, 128, 32, 8, 4),
                  (128, 128, 32, 4, 3)]}


def parse_config(text):
    """'256x128x32/8/4[/G][/P]' -> (256, 128, 32, 8, 4[, G][, 'P'])."""
    parts = text.replace("x", "/").split("/")
    return tuple(p if p == "P" else int(p.lstrip("G")) for p in parts)


def config_label(cfg):
    BM, BN, BK, warps, stages = cfg[:5]
    label = f"{BM}x{BN}x{BK}/{warps}/{stages}"
    for extra in cfg[5:]:
        label += "/P" if extra == "P" else f"/G{extra}"
    return label


class Operands:
    """One size and layout's inputs, output and float64 reference, shared by its configurations."""

    def __init__(self, layout, size):
        M = N = K = size
        g = torch.Generator(device="cuda").manual_seed(size + (1 if layout == "NT" else 0))
        self.layout, self.M, self.N, self.K = layout, M, N, K
        self.A = torch.randn(M, K, device="cuda", generator=g)
        self.W = torch.randn(N, K, device="cuda", generator=g) if layout == "NT" else None
        self.B = self.W.t() if layout == "NT" else torch.randn(K, N, device="cuda", generator=g)
        self.C = torch.empty(M, N, device="cuda")
        self.ref = self.A.double() @ self.B.double()
        self.flop = 2 * M * N * K

    def check(self):
        err = ((self.C.double() - self.ref).norm() / self.ref.norm()).item()
        assert err < 3e-3, f"relative error {err:.2e}"

    def launch(self, mod, cfg):
        BM, BN, BK, warps, stages = cfg[:5]
        group_m = next((v for v in cfg[5:] if v != "P"), 8)
        persistent = "P" in cfg[5:]
        A, B, W, C, M, N, K = self.A, self.B, self.W, self.C, self.M, self.N, self.K
        grid = (tessera.cdiv(M, BM) * tessera.cdiv(N, BN),)
        meta = dict(BM=BM, BN=BN, BK=BK, GROUP_M=group_m, num_warps=warps, num_stages=stages)
        if self.layout == "NT":
            assert not persistent, "the persistent kernel is NN only"
            return lambda: mod.matmul_nt_kernel[grid](A, W, C, M, N, K, A.stride(0), A.stride(1), W.stride(0),
                                                      W.stride(1), C.stride(0), C.stride(1), **meta)
        kernel = mod.persistent_matmul_kernel if persistent else mod.matmul_kernel
        if persistent:
            grid = (min(grid[0], torch.cuda.get_device_properties(0).multi_processor_count),)
        return lambda: kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                                    C.stride(0), C.stride(1), **meta)

    def cublas(self):
        return lambda: torch.matmul(self.A, self.B, out=self.C)


class Tf32Cublas:
    """torch.matmul with allow_tf32 on inside the block."""

    def __enter__(self):
        self.old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.old


def measure(ops, TR, cfg):
    """TFLOP/s of Tessera, cuBLAS and Triton for one configuration, and the errors."""
    tfl = lambda ms: ops.flop / (ms * 1e-3) / 1e12 if ms else None
    ops.C.fill_(float("nan"))
    t_ms, t_err = BG.try_bench(ops.launch(TK, cfg), ops.check)
    ops.C.fill_(float("nan"))
    r_ms, r_err = BG.try_bench(ops.launch(TR, cfg), ops.check) if TR else (None, "no triton")
    with Tf32Cublas():
        ops.C.fill_(float("nan"))
        cb_ms, cb_err = BG.try_bench(ops.cublas(), ops.check)
    return tfl(t_ms), tfl(cb_ms), tfl(r_ms), "; ".join(e for e in (t_err, r_err and f"triton: {r_err}", cb_err) if e)


def sample_clocks(seconds_from, seconds_to, samples):
    """Mean SM clock (MHz) and board power (W) of the samples taken inside the window."""
    inside = [(mhz, w) for t, mhz, w in samples if seconds_from <= t <= seconds_to]
    if not inside:
        return None, None, 0
    return statistics.mean(s[0] for s in inside), statistics.mean(s[1] for s in inside), len(inside)


def sustained(fn, ms_estimate, seconds=0.5):
    """Runs fn back to back for about `seconds` while nvidia-smi samples the SM clock and the
    power every 20 ms. Returns (ms per call, mean MHz, mean W, samples) over the window's
    second half (the clock settles in the first)."""
    n = max(20, int(seconds * 1e3 / max(ms_estimate, 1e-3)))
    cmd = ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "20"]
    try:
        smi = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        smi = None
    time.sleep(0.05)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(n):
        if i == n // 2:
            start.record()
            t_half = time.time()
        fn()
    end.record()
    torch.cuda.synchronize()
    t1 = time.time()
    ms = start.elapsed_time(end) / (n - n // 2)
    samples = []
    if smi is not None:
        time.sleep(0.05)
        smi.send_signal(signal.SIGINT)
        try:
            out, _ = smi.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            smi.kill()
            out, _ = smi.communicate()
        for line in out.splitlines():
            try:
                stamp, mhz, watts = (f.strip() for f in line.split(","))
                t = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((t, float(mhz), float(watts)))
            except ValueError:
                continue
    # The half-way point is when the host enqueued it; the GPU reached it later. The host
    # runs ahead by at most the queue, so the window's later half is safe: (t_half + t1) / 2.
    mhz, watts, count = sample_clocks((t_half + t1) / 2, t1, samples)
    return ms, mhz, watts, count


def kernel_names(fn):
    """Names of the CUDA kernels one call of fn launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA") and e.name not in names:
            names.append(e.name)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--layouts", default="NN,NT")
    ap.add_argument("--out", default=".")
    ap.add_argument("--configs", default="",
                    help="replace the configurations: BMxBNxBK/warps/stages[/GROUP_M][/P],... (P: persistent, NN)")
    ap.add_argument("--nt-configs", default="", help="the NT configurations when --configs gives NN's")
    ap.add_argument("--reps", type=int, default=1, help="measure every configuration this many times, round-robin")
    ap.add_argument("--telemetry", action="store_true", help="SM clock and power while Tessera / cuBLAS run")
    ap.add_argument("--kernel-names", action="store_true", help="the cuBLAS kernel torch.matmul launches")
    args = ap.parse_args()
    if args.configs:
        cfgs = [parse_config(c) for c in args.configs.split(",")]
        CONFIGS["NN"] = cfgs
        CONFIGS["NT"] = [parse_config(c) for c in args.nt_configs.split(",")] if args.nt_configs else \
            [c for c in cfgs if "P" not in c[5:]]
    TR = BG.load_triton_kernels()
    f = lambda v: f"{v:.1f}" if v else "n/a"
    r = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
    lines = [f"# tf32 matmul — {torch.cuda.get_device_name()}", "",
             "TFLOP/s (2 M N K / time, M = N = K); cuBLAS = torch.matmul with allow_tf32; Tessera and Triton "
             "run bench/gpu_kernels.py's matmul_kernel (NN; persistent_matmul_kernel for /P) / matmul_nt_kernel "
             "(NT); config BMxBNxBK/warps/stages[/GROUP_M, default 8][/P]. Every result checked against float64.",
             "", "| layout | size | config | rep | tessera | cuBLAS | triton | tessera / cuBLAS | tessera / triton | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    summary, telemetry, names = [], [], []
    out_path = os.path.join(args.out, "matmul_tf32.md")

    def write():
        os.makedirs(args.out, exist_ok=True)
        with open(out_path, "w") as fh:  # after every row: a run cut short keeps what it measured
            fh.write("\n".join(lines + summary + telemetry + names) + "\n")

    for layout in args.layouts.split(","):
        for size in map(int, args.sizes.split(",")):
            ops = Operands(layout, size)
            if args.kernel_names:
                with Tf32Cublas():
                    names.append(f"- cuBLAS {layout} {size}: " + ", ".join(f"`{n}`" for n in kernel_names(ops.cublas())))
            results = {config_label(c): [] for c in CONFIGS[layout]}
            for rep in range(args.reps):
                for cfg in CONFIGS[layout]:
                    label = config_label(cfg)
                    t, cb, tr, err = measure(ops, TR, cfg)
                    results[label].append((t, cb, tr))
                    lines.append(f"| {layout} | {size} | {label} | {rep + 1} | {f(t)} | {f(cb)} | {f(tr)} | "
                                 f"{r(t, cb)} | {r(t, tr)} | {err} |")
                    print(lines[-1], flush=True)
                    if args.telemetry and rep == 0 and t:
                        for who, fn, tflops in (("tessera", ops.launch(TK, cfg), t), ("cuBLAS", ops.cublas(), cb)):
                            with Tf32Cublas():
                                ms, mhz, watts, count = sustained(fn, ops.flop / (tflops * 1e12) * 1e3)
                            tf = ops.flop / (ms * 1e-3) / 1e12
                            sms = torch.cuda.get_device_properties(0).multi_processor_count
                            # tf32 dense on sm_90: 1024 FMA (2048 FLOP) per SM per clock.
                            peak = sms * 2048 * mhz * 1e6 / 1e12 if mhz else None
                            telemetry.append(f"| {layout} | {size} | {label} | {who} | {tf:.1f} | "
                                             f"{f'{mhz:.0f}' if mhz else 'n/a'} | {f'{watts:.0f}' if watts else 'n/a'} | "
                                             f"{r(tf, peak)} | {count} |")
                            print(telemetry[-1], flush=True)
                    write()
            if args.reps > 1:
                if not summary:
                    summary += ["", f"## Summary over {args.reps} repetitions (best / median of each column; "
                                "ratio of the medians)", "",
                                "| layout | size | config | tessera best | tessera median | cuBLAS best | "
                                "cuBLAS median | triton median | tessera / cuBLAS (medians) | per-rep ratios |",
                                "|---|---|---|---|---|---|---|---|---|---|"]
                for label, rows in results.items():
                    col = lambda i: [row[i] for row in rows if row[i]]
                    best = lambda i: max(col(i)) if col(i) else None
                    med = lambda i: statistics.median(col(i)) if col(i) else None
                    ratios = " ".join(r(row[0], row[1]) for row in rows)
                    summary.append(f"| {layout} | {size} | {label} | {f(best(0))} | {f(med(0))} | {f(best(1))} | "
                                   f"{f(med(1))} | {f(med(2))} | {r(med(0), med(1))} | {ratios} |")
            write()
            del ops
            torch.cuda.empty_cache()
    if telemetry:
        telemetry[:0] = ["", "## Sustained runs (back to back, ~0.5 s; clock and power sampled by nvidia-smi every "
                         "20 ms over the second half)", "",
                         "| layout | size | config | who | TFLOP/s | SM MHz | board W | of tf32 peak at that clock "
                         "| samples |", "|---|---|---|---|---|---|---|---|---|"]
    if names:
        names[:0] = ["", "## cuBLAS kernels (torch.profiler)", ""]
    write()
    print("\n".join(summary + telemetry + names))


if __name__ == "__main__":
    main()
