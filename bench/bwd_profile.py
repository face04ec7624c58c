"""Where the fwd+bwd time of the row ops goes on a GPU: per-kernel GPU time from
torch.profiler over autograd fwd+bwd (tk next to torch eager), the events time of
back-to-back calls, and the host time per call (Python + launches, no sync): when the
host time is above the GPU time, the fwd+bwd column of bench/kernels.py measures the
host. Results of H100 runs: bench/results/bwd_profile_h100.log (before the host path's launch
plans), bwd_profile_h100_host.log (after). bench/host_time.py measures the host side alone.

    python bench/bwd_profile.py [--ops layer_norm,bias_gelu] [--no-profile]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import cuda_host_us  # noqa: E402
from kernels import _fwd_bwd, cases  # noqa: E402

from tessera.kernels import norm as N  # noqa: E402

ROWS, COLS = 16384, 4096


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




def norm_plans(inputs):
    """The norm backward (kernel + column sum) next to torch's backward kernels."""
    x, w, b = inputs
    _, _, mean, rstd = N.norm_forward("layer_norm", x, None, w, b, 1e-5, False, False)
    dy = torch.randn_like(x)
    t = gpu_ms(lambda: N.norm_backward(x, w, b, mean, rstd, dy, None, False, False))
    xr = x.detach().requires_grad_(True)
    wr, br = w.detach().requires_grad_(True), b.detach().requires_grad_(True)
    y = torch.nn.functional.layer_norm(xr, (x.shape[-1],), wr, br)
    tt = gpu_ms(lambda: torch.autograd.grad(y, (xr, wr, br), dy, retain_graph=True))
    print(f"  layer_norm backward alone: tk {t:.4f} ms, torch {tt:.4f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="layer_norm,rms_norm,log_softmax,softmax,bias_gelu,cross_entropy")
    ap.add_argument("--no-profile", action="store_true")
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
                print(f"      host {cuda_host_us(fb, n=50):.1f} us per fwd+bwd call (no sync)")
        if name == "layer_norm":
            norm_plans(inputs)

if __name__ == "__main__":
    main()
