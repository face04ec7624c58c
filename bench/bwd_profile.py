"""Where the fwd+bwd time of the row ops goes on a GPU: per-kernel GPU time from
torch.profiler over autograd fwd+bwd (tk next to torch eager) and the host time per
call, then CUDA-event timings of the norm backward's plans (the fused walk, the split
plan over its tiles).

    python bench/bwd_profile.py [--ops layer_norm,bias_gelu] [--no-sweep]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kernels import _fwd_bwd, cases  # noqa: E402

from tessera.kernels import norm as N  # noqa: E402

ROWS, COLS = 16384, 4096
BEST = {}  # 'module.NAME' -> the fastest plan found (written by --plan-out)


def keep_best(key, t, plan):
    if key not in BEST or t < BEST[key][0]:
        BEST[key] = (t, plan)


def gpu_ms(fn, reps=20):
    """Best of 3 batches of `reps` back-to-back calls, ms per call (CUDA events)."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) / reps)
    return best


def profile(name, fn, iters=10):
    """Per-kernel device time per fwd+bwd (us) and the host time per call."""
    from torch.profiler import ProfilerActivity, profile as prof
    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    rows = []
    for ev in p.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = ev.self_cuda_time_total
        if t > 0 and ev.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((t / iters, ev.count // iters, ev.key[:90]))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"  [{name}] GPU kernels {total:.1f} us per fwd+bwd; events {gpu_ms(fn):.4f} ms")
    for t, c, k in rows:
        print(f"      {t:8.1f} us  x{c}  {k}")


def host_us(fn, n=50):
    import time
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def sweep_norm(inputs):
    """The norm backward on the GPU: the fused walk (the CPU's plan) against the split
    plan (one-row dx kernel + the dweight/dbias column kernel) over its tiles."""
    x, w, b = inputs
    y, _, mean, rstd = N.norm_forward("layer_norm", x, None, w, b, 1e-5, False, False)
    dy = torch.randn_like(x)
    run = lambda: N.norm_backward(x, w, b, mean, rstd, dy, None, False, False)  # noqa: E731
    ref = [t.float() for t in run()]

    def check():
        got = run()
        return max(((g.float() - r).abs().max() / r.abs().max().clamp(min=1)).item() for g, r in zip(got, ref))
    split = N._split_backward
    N._split_backward = lambda t: False
    try:
        print(f"  layer_norm backward, fused walk (512 programs, 16 warps): {gpu_ms(run):.4f} ms  err {check():.3g}")
    finally:
        N._split_backward = split
    saved = (N.DWDB_BLOCK_R, N.DWDB_BLOCK_C, N.DWDB_PROGRAMS, N.DX_MAX_WARPS)
    for warps in (4, 8, 16):
        N.DX_MAX_WARPS = warps
        for br, bc, progs in ((64, 64, 1024), (32, 128, 1024), (64, 64, 2048), (128, 32, 1024), (16, 256, 1024),
                              (32, 64, 2048)):
            if warps != 8 and (br, bc, progs) != (64, 64, 1024):
                continue
            N.DWDB_BLOCK_R, N.DWDB_BLOCK_C, N.DWDB_PROGRAMS = br, bc, progs
            t = gpu_ms(run)
            err = check()
            print(f"    split: dx warps {warps:2d}, dweight/dbias tile {br}x{bc}, ~{progs} programs: {t:.4f} ms  "
                  f"err {err:.3g}")
            if err < 1e-2:
                keep_best("norm", t, {"DWDB_BLOCK_R": br, "DWDB_BLOCK_C": bc, "DWDB_PROGRAMS": progs,
                                      "DX_MAX_WARPS": warps})
    N.DWDB_BLOCK_R, N.DWDB_BLOCK_C, N.DWDB_PROGRAMS, N.DX_MAX_WARPS = saved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="layer_norm,rms_norm,log_softmax,softmax,bias_gelu,cross_entropy")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--plan-out", default="", help="write the fastest plans found as JSON (bench/kernels.py --plan)")
    args = ap.parse_args()
    all_cases = cases(ROWS, COLS, "cuda", torch.float16)
    copy_src = torch.empty(ROWS * COLS // 2, dtype=torch.float32, device="cuda")
    copy_dst = torch.empty_like(copy_src)
    print(f"copy of 2 x 128 MiB (fp16 16384x4096 read + write): {gpu_ms(lambda: copy_dst.copy_(copy_src)):.4f} ms")
    ones = torch.empty(ROWS, COLS, dtype=torch.float16, device="cuda")
    print(f"torch.ones_like of the output (in every fwd+bwd): {gpu_ms(lambda: torch.ones_like(ones)):.4f} ms")
    for name in args.ops.split(","):
        inputs, f_tk, f_torch, _, _ = all_cases[name]
        print(f"== {name}")
        if not args.no_profile:
            for impl, f in (("tk", f_tk), ("torch", f_torch)):
                fb = _fwd_bwd(f, inputs)
                profile(impl, fb)
                print(f"      host {host_us(fb):.1f} us per fwd+bwd call (no sync)")
        if args.no_sweep:
            continue
        if name == "layer_norm":
            sweep_norm(inputs)
    if args.plan_out:
        import json
        plan = {f"norm.{k}": v for k, v in BEST["norm"][1].items()} if "norm" in BEST else {}
        with open(args.plan_out, "w") as fh:
            json.dump(plan, fh, indent=1)
        print("fastest plans:", plan)


if __name__ == "__main__":
    main()
