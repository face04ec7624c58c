"""What relu(a + b)'s autograd saves for its backward pass: torch eager, torch.compile
and tessera.kernels.add_relu, each listed as the dtype and shape of every tensor saved
(torch.autograd.graph.saved_tensors_hooks), and the backward's GPU kernel time alone.

    python bench/add_relu_saved.py [--device cuda] [--rows 16384 --cols 4096]

Answers whether torch.compile keeps a 1-byte mask where tk keeps the fp16 output."""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import tessera.kernels as tk


def saved_by(fn, a, b):
    saved = []

    def pack(t):
        saved.append((str(t.dtype).replace("torch.", ""), tuple(t.shape)))
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(a, b)
    return y, saved


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=4096)
    args = ap.parse_args()
    dt = torch.float16 if args.device == "cuda" else torch.float32
    a = torch.randn(args.rows, args.cols, device=args.device, dtype=dt, requires_grad=True)
    b = torch.randn(args.rows, args.cols, device=args.device, dtype=dt, requires_grad=True)
    impls = {"torch eager": lambda x, y: F.relu(x + y), "tk": tk.add_relu,
             "torch.compile": torch.compile(lambda x, y: F.relu(x + y))}
    for name, fn in impls.items():
        for _ in range(2):  # the first compiles
            y, saved = saved_by(fn, a, b)
        dy = torch.randn_like(y)
        line = f"{name:14s} saves {saved}"
        if args.device == "cuda":
            from torch.profiler import ProfilerActivity, profile
            torch.autograd.grad(y, (a, b), dy, retain_graph=True)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    torch.autograd.grad(y, (a, b), dy, retain_graph=True)
                torch.cuda.synchronize()
            ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            us = sum(e.device_time for e in ks) / 10
            line += f"; backward kernels {us:.1f} us per call: {sorted({e.name[:60] for e in ks})}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
