"""What one tl.cluster_reduce_scatter costs on a GPU: a kernel whose programs each make
`steps` exchanges of an R x N f32 tile in clusters of C, against the same kernel summing
its own tile's parts instead (no exchange, no cluster), in one run.

    python bench/cluster_exchange_gpu.py [--programs 128] [--steps 32] [--only C,R,N,warps] [--out DIR]

Times are torch.profiler's CUDA kernel time per call (best of 3 rounds); the
per-exchange cost is (cluster - local) / steps.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "frontend"))

import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402

from common import profiled_kernel_us  # noqa: E402


@tessera.kernel
def exchanges(X, Y, steps, C: tl.constexpr, R: tl.constexpr, N: tl.constexpr, EXCHANGE: tl.constexpr):
    px = tl.program_id(0)
    rows = tl.arange(0, R)
    cols = tl.arange(0, N)
    part = tl.arange(0, R // C)
    x = tl.load(X + px * R * N + rows[:, None] * N + cols[None, :])
    acc = tl.zeros([R // C, N], tl.float32)
    for s in range(steps):
        t = x * (s + 1.0)
        if EXCHANGE:
            acc += tl.cluster_reduce_scatter(t, C)
        else:
            acc += tl.sum(tl.reshape(t, [C, R // C, N]), 0)
    tl.store(Y + px * (R // C) * N + part[:, None] * N + cols[None, :], acc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--only", help="one configuration, C,R,N,warps (e.g. 16,64,64,8: for Nsight Compute)")
    ap.add_argument("--out")
    args = ap.parse_args()
    p, steps = args.programs, args.steps
    lines = [f"# cluster_reduce_scatter on {torch.cuda.get_device_name()}: {p} programs, {steps} exchanges each", "",
             "| cluster | tile | warps | local sum us | exchange us | per exchange us |", "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    configs = [(2, 64, 64, 8), (8, 64, 64, 8), (16, 64, 64, 8), (16, 64, 64, 4), (16, 16, 64, 8)]
    if args.only:
        configs = [tuple(int(v) for v in args.only.split(","))]
    for c, r, n, warps in configs:
        x = torch.randn(p, r, n, device="cuda")
        y = torch.empty(p, r // c, n, device="cuda")
        us = [profiled_kernel_us(lambda e=e: exchanges[(p,)](x, y, steps, C=c, R=r, N=n, EXCHANGE=e,
                                                             num_warps=warps), 20)
              for e in (0, 1)]
        lines.append(f"| {c} | {r}x{n} | {warps} | {us[0]:.1f} | {us[1]:.1f} | {(us[1] - us[0]) / steps:.3f} |")
        print(lines[-1], flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "cluster_exchange_gpu.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
