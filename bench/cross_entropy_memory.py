"""cross_entropy on a GPU: tessera.kernels vs torch eager (F.cross_entropy), forward +
backward through autograd, side by side in one run: GPU time per step (CUDA events,
best of several batches) and the peak memory a step allocates on top of the logits
and targets (torch.cuda.max_memory_allocated). torch's eager path keeps the
(rows, classes) log-softmax for its backward; the fused kernel keeps one log-sum-exp
per row.

    python bench/cross_entropy_memory.py [--rows 16384] [--classes 4096 32000] [--out DIR]

Writes cross_entropy_memory_cuda.md to --out (default bench/results)."""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import RESULTS_DIR  # noqa: E402

import tessera.kernels as tk  # noqa: E402


def step(fn, logits, tgt):
    logits.grad = None
    loss = fn(logits, tgt)
    loss.backward()


def peak_bytes(fn, logits, tgt):
    step(fn, logits, tgt)  # compile / warm up
    logits.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step(fn, logits, tgt)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def time_ms(fn, logits, tgt, batch=10, rounds=5):
    best = float("inf")
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            step(fn, logits, tgt)
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / batch)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--classes", type=int, nargs="+", default=[4096, 32000])
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--out", default=RESULTS_DIR)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    impls = {"tk": tk.cross_entropy, "torch eager": F.cross_entropy}
    lines = ["# cross_entropy forward + backward: time and peak memory (cuda, %s)" % args.dtype, "",
             f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}. 'peak MiB': memory a step allocates "
             "beyond the logits and targets (the gradient included); lower is better.", "",
             "| rows x classes | impl | fwd+bwd ms | peak MiB | loss |", "|---|---|---|---|---|"]
    for n in args.classes:
        g = torch.Generator(device="cpu").manual_seed(0)
        logits = torch.randn(args.rows, n, generator=g).to("cuda", dtype).requires_grad_(True)
        tgt = torch.randint(0, n, (args.rows,), generator=g).cuda()
        for name, fn in impls.items():
            peak = peak_bytes(fn, logits, tgt) / 2**20
            ms = time_ms(fn, logits, tgt)
            loss = float(fn(logits, tgt))
            lines.append(f"| {args.rows}x{n} | {name} | {ms:.3f} | {peak:.1f} | {loss:.5f} |")
            print(lines[-1], flush=True)
        del logits
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cross_entropy_memory_cuda.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
