"""Where the fwd+bwd time of the row ops goes on a GPU, and launch-plan sweeps of their
backward kernels: per-kernel GPU time from torch.profiler over autograd fwd+bwd
(tk next to torch eager), then CUDA-event timings of each backward plan.

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

from tessera.kernels import activation as A  # noqa: E402
from tessera.kernels import norm as N  # noqa: E402
from tessera.kernels import softmax_ce as S  # noqa: E402

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
    x, w, b = inputs
    y, _, mean, rstd = N.norm_forward("layer_norm", x, None, w, b, 1e-5, False, False)
    dy = torch.randn_like(x)
    ref = N.norm_backward(x, w, b, mean, rstd, dy, None, False, False)
    saved = dict(N.GPU_BWD)
    print("  layer_norm backward (kernel + column sums), ms:")
    for rows, warps, pf in ((1, 16, False), (1, 16, True), (2, 16, False), (2, 16, True), (1, 8, False),
                            (2, 8, False), (1, 4, False), (4, 16, False)):
        for progs in (132, 264, 512, 1056):
            N.GPU_BWD.update(programs=progs, rows=rows, max_warps=warps, prefetch=pf)
            got = N.norm_backward(x, w, b, mean, rstd, dy, None, False, False)
            err = max((g.float() - r.float()).abs().max().item() for g, r in zip(got, ref))
            t = gpu_ms(lambda: N.norm_backward(x, w, b, mean, rstd, dy, None, False, False))
            print(f"    rows {rows} warps {warps:2d} prefetch {int(pf)} programs {progs:5d}: {t:.4f} ms  err {err:.3g}")
            if err < 0.05:
                keep_best("norm.GPU_BWD", t, dict(N.GPU_BWD))
    N.GPU_BWD.clear()
    N.GPU_BWD.update(saved)


def sweep_bias_gelu(inputs):
    x, bias = inputs
    dy = torch.randn_like(x)
    from tessera.kernels.activation import BIAS, GELU
    ref = A.elementwise_backward(GELU, x, bias, dy, 0.0, 0, BIAS, False)
    A.FUSED_BIAS_BWD = False  # the old path: elementwise kernel, then a column sum of dx
    try:
        old = lambda: A.elementwise_backward(GELU, x, bias, dy, 0.0, 0, BIAS, False)  # noqa: E731
        t_old = gpu_ms(old)
        print(f"  bias_gelu backward, old path (ew kernel + column_sum of dx): {t_old:.4f} ms")
    finally:
        A.FUSED_BIAS_BWD = True
    saved = dict(A.GPU_BIAS_BWD)
    for rows, block, warps in ((1, 2048, 8), (2, 1024, 4), (2, 1024, 8), (2, 2048, 8), (4, 1024, 4), (4, 1024, 8),
                               (4, 2048, 8), (8, 1024, 8)):
        for progs in (1056, 2112, 4224):
            A.GPU_BIAS_BWD.update(programs=progs, rows=rows, block=block, num_warps=warps)
            got = A.elementwise_backward(GELU, x, bias, dy, 0.0, 0, BIAS, False)
            err = max((g.float() - r.float()).abs().max().item() / max(1.0, r.float().abs().max().item())
                      for g, r in zip(got, ref))
            t = gpu_ms(lambda: A.elementwise_backward(GELU, x, bias, dy, 0.0, 0, BIAS, False))
            print(f"    rows {rows} block {block} warps {warps} programs {progs:5d}: {t:.4f} ms  err {err:.3g}")
            if err < 0.02:
                keep_best("activation.GPU_BIAS_BWD", t, dict(A.GPU_BIAS_BWD))
    A.GPU_BIAS_BWD.clear()
    A.GPU_BIAS_BWD.update(saved)
    BEST["activation.FUSED_BIAS_BWD"] = (0.0, BEST.get("activation.GPU_BIAS_BWD", (t_old,))[0] < t_old)


def sweep_softmax_xent(x, tgt):
    saved = dict(S.GPU_MAX_WARPS)
    dy = torch.randn_like(x)
    times = {}
    for log in (False, True):
        y = S.softmax_forward(x, -1, log, 0.0, 0)
        for wp in (4, 8, 16):
            S.GPU_MAX_WARPS["softmax_bwd"] = wp
            t = gpu_ms(lambda: S.softmax_backward(y, dy, -1, log, 0.0, 0))
            print(f"  {'log_' if log else ''}softmax backward warps {wp:2d}: {t:.4f} ms")
            times[wp] = times.get(wp, 0.0) + t
    best = {"softmax_bwd": min(times, key=times.get)}
    times = {}
    for wp in (2, 4, 8, 16):
        S.GPU_MAX_WARPS["xent_fwd"] = wp
        t = times[wp] = gpu_ms(lambda: S.cross_entropy_forward(x, tgt, -100, 0.0))
        print(f"  cross_entropy forward warps {wp:2d}: {t:.4f} ms")
    best["xent_fwd"] = min(times, key=times.get)
    times = {}
    loss, lse = S.cross_entropy_forward(x, tgt, -100, 0.0)
    out, scale = S.reduce_loss(loss, tgt, -100, "mean", "float16")
    d = torch.ones_like(out)
    for wp in (4, 8, 16):
        S.GPU_MAX_WARPS["xent_bwd"] = wp
        t = times[wp] = gpu_ms(lambda: S.cross_entropy_backward(x, tgt, lse, d, scale, -100, 0.0))
        print(f"  cross_entropy backward warps {wp:2d}: {t:.4f} ms")
    best["xent_bwd"] = min(times, key=times.get)
    BEST["softmax_ce.GPU_MAX_WARPS"] = (0.0, best)
    S.GPU_MAX_WARPS.clear()
    S.GPU_MAX_WARPS.update(saved)


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
        if name == "bias_gelu":
            sweep_bias_gelu(inputs)
        if name == "cross_entropy":
            tgt = torch.randint(0, COLS, (ROWS,), device="cuda")
            sweep_softmax_xent(inputs[0], tgt)
    if args.plan_out:
        import json
        plan = {k: v[1] for k, v in BEST.items()}
        with open(args.plan_out, "w") as fh:
            json.dump(plan, fh, indent=1)
        print("fastest plans:", plan)


if __name__ == "__main__":
    main()
