"""Does a torch op right before a Tessera launch slow the launch? torch's OpenMP
(libgomp) workers spin after every parallel region (GOMP_SPINCOUNT), holding cores
that Tessera's pool wants. Times one Tessera launch (attention_score's forward,
8x512x64) alone, right after a torch op, and after a torch op plus a pause.

    python bench/pool_interference.py [--reps 200]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "frontend"))

import torch  # noqa: E402

import tessera.kernels as tk  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    q = torch.randn(8, 512, 64)
    k = torch.randn(8, 512, 64)
    big = torch.empty(8, 512, 512)
    launch = lambda: tk.attention_score(q, k, 0.125)  # noqa: E731
    torch_ops = {
        "none": None,
        "ones_like (8 MB, OpenMP)": lambda: torch.ones_like(big),
        "add (small, serial)": lambda: q[0, 0] + 1.0,
    }
    with torch.no_grad():
        for _ in range(20):
            launch()
        print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), load {os.getloadavg()}, "
              f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')}, "
              f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
              f"TESSERA_CPU_THREADS={os.environ.get('TESSERA_CPU_THREADS', 'unset')}")
        # Conditions interleaved round-robin, so a burst of load from other processes
        # hits them all alike.
        conditions = [(name, op, pause_ms) for pause_ms in (0.0, 5.0, 30.0) for name, op in torch_ops.items()
                      if op is not None or not pause_ms]
        times = {c[0] + (f", then {c[2]:g} ms sleep" if c[2] else ""): [] for c in conditions}
        for _ in range(args.reps):
            for (name, op, pause_ms), samples in zip(conditions, times.values()):
                if op is not None:
                    op()
                if pause_ms:
                    time.sleep(pause_ms / 1e3)
                t = time.perf_counter()
                launch()
                samples.append((time.perf_counter() - t) * 1e3)
        for label, samples in times.items():
            samples.sort()
            print(f"  after {label:45s} launch ms: best {samples[0]:.3f}  median {statistics.median(samples):.3f}  "
                  f"p90 {samples[int(0.9 * len(samples))]:.3f}")
        # The benchmark's fwd+bwd step: tk forward, torch.ones_like, tk backward.
        qg, kg = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    step = []
    for _ in range(max(args.reps // 4, 10)):
        qg.grad = kg.grad = None
        t = time.perf_counter()
        s = tk.attention_score(qg, kg, 0.125)
        s.backward(torch.ones_like(s))
        step.append((time.perf_counter() - t) * 1e3)
    step.sort()
    print(f"  fwd+bwd (tk forward, ones_like, tk backward)          ms: best {step[0]:.3f}  "
          f"median {statistics.median(step):.3f}  p90 {step[int(0.9 * len(step))]:.3f}")
    print(f"  load at end {os.getloadavg()}")

if __name__ == "__main__":
    main()
