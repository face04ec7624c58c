"""The bias-gradient backward's plans on a GPU in one process: times each plan of
bench/bwd_profile.py's BIAS_CONFIGS for bias_gelu and bias_gelu_tanh (kernel + column
sum, CUDA events), takes the plan with the least total time of the two forms as
kernels/activation.py's BIAS_BWD_* for the rest of the process, and then runs
bench/kernels.py on the given ops (torch eager, torch.compile and Triton columns next to
it; Triton's build of the sources runs the same plan). Results: bench/results/kernels_cuda_float16_biasbwd.md.

    python bench/bias_bwd_ab.py --ops bias_gelu,bias_gelu_tanh,gelu_dropout --out DIR [--tag _x]
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bwd_profile as P  # noqa: E402

from tessera.kernels import activation as A  # noqa: E402

NAMES = ("BIAS_BWD_ROWS", "BIAS_BWD_BLOCK", "BIAS_BWD_WARPS", "BIAS_BWD_PREFETCH", "BIAS_BWD_TWO_ROWS",
         "BIAS_BWD_PER_SM")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="bias_gelu,bias_gelu_tanh")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--tag", default="_biasbwd")
    args = ap.parse_args()
    all_cases = P.cases(P.ROWS, P.COLS, "cuda", torch.float16)
    src = torch.empty(P.ROWS * P.COLS // 2, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = P.gpu_ms(lambda: dst.copy_(src))
    print(f"copy of 2 x 128 MiB: {copy_ms:.4f} ms on {torch.cuda.get_device_name()}", flush=True)
    P.sweep_bias(all_cases, copy_ms / (P.ROWS * P.COLS * 2 * 2))
    totals = {}
    for (form, cfg), t in P.BIAS_SWEEP_RESULTS.items():
        totals[cfg] = totals.get(cfg, 0.0) + t
    best = min(totals, key=totals.get)
    shipped = tuple(getattr(A, n) for n in NAMES)
    print(f"best plan over both forms: {best} ({totals[best]:.4f} ms); the module's default: {shipped} "
          f"({totals.get(shipped, float('nan')):.4f} ms)", flush=True)
    for n, v in zip(NAMES, best):
        setattr(A, n, v)
    A._BWD_PLANS.clear()
    bench = runpy.run_path(os.path.join(HERE, "kernels.py"), run_name="tk_kernels_bench")
    load_triton_tk = bench["load_triton_tk"]

    def load_triton_tk_with_plan():  # Triton's build of the sources runs the same plan
        tkt = load_triton_tk()
        if tkt is not None:
            for n, v in zip(NAMES, best):
                setattr(tkt.activation, n, v)
        return tkt
    bench["load_triton_tk"] = load_triton_tk_with_plan
    sys.argv = ["kernels.py", "--device", "cuda", "--dtype", "float16", "--ops", args.ops, "--out", args.out,
                "--tag", args.tag]
    bench["main"]()


if __name__ == "__main__":
    main()
