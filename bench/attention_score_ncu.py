"""attention_score's shipped forward and backward launched a few times with nothing else
around them (no torch.profiler, whose CUPTI subscription Nsight Compute cannot share), for
hardware counters:

    ncu --clock-control none -k regex:score_backward_flat --launch-skip 4 --launch-count 1 \\
        --metrics dram__bytes_read.sum,lts__t_throughput.avg.pct_of_peak_sustained_elapsed,... \\
        python bench/attention_score_ncu.py [--shape 8,2048,2048,64] [--only fwd|bwd] [--side dq|dk] [--calls 8]

The backward takes 4 sets of ds in turn, as bench/attention_score_gpu.py --cold 4 does, so
that no call meets its ds in the L2.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frontend"))

import tessera.kernels as tk  # noqa: E402
from tessera.kernels import attention as AT  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_score_gpu as G  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8,2048,2048,64")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--only", default="", help="fwd or bwd")
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--side", default="", help="dq or dk: the shipped flat backward's programs of that side "
                    "alone (bench/attention_score_gpu.py --sides)")
    args = ap.parse_args()
    bt, m, n, d = (int(v) for v in args.shape.split(","))
    dt = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(bt, m, d, generator=gen).to("cuda", dt)
    k = torch.randn(bt, n, d, generator=gen).to("cuda", dt)
    dss = [torch.randn(bt, m, n, generator=gen).to("cuda", dt) for _ in range(4)]
    scale = d ** -0.5
    with torch.no_grad():
        for i in range(args.calls):
            if args.only != "bwd":
                tk.attention_score(q, k, scale)
            if args.only != "fwd" and args.side:
                dq, dk = torch.empty_like(q), torch.empty_like(k)
                tiles = next(t for name, t in G.FLAT_BACKWARD.items() if "shipped" in name)
                G.backward_flat(q, k, dss[i % len(dss)], dq, dk, scale, tiles, args.side)
            elif args.only != "fwd":
                AT.attention_score_backward(q, k, dss[i % len(dss)], scale)
    torch.cuda.synchronize()
    print(f"attention_score {args.shape} {args.dtype}: {args.calls} calls done")


if __name__ == "__main__":
    main()
