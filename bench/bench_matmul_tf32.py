"""fp32 matmul on tf32 tensor cores: Tessera vs Triton (the same bench/gpu_kernels.py source)
vs cuBLAS (torch.matmul with allow_tf32), in both operand layouts -- NN (B row-major K x N,
N contiguous: tf32 wgmma cannot transpose a shared-memory operand, so on sm_90a it runs as
C^T = B^T A^T with B^T's fragments in registers, when BN = 16 x warps) and NT (x @ W^T, W
N x K: both operands K-major, wgmma from a TMA ring on sm_90a) -- over a few
tile configurations. Every result is checked against a float64 reference (relative
Frobenius error < 3e-3, bench_gpu.py's tf32 tolerance). Writes matmul_tf32.md to --out."""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_gpu as BG  # noqa: E402  (do_bench, try_bench, the Triton copy of gpu_kernels)
import gpu_kernels as TK  # noqa: E402

import tessera  # noqa: E402

# (BM, BN, BK, warps, stages) per layout. NT 128x128/4 warps: M != 16 x warps, so Tessera
# keeps mma.sync from the ring there -- the path every tf32 dot took before wgmma. NN: the
# swapped wgmma's n is BM (up to 256) and BN = 16 x warps; 128x128x32/4 warps/3 stages is
# the mma.sync path NN took before it.
CONFIGS = {"NT": [(128, 128, 32, 8, 3), (128, 256, 32, 8, 4), (128, 128, 32, 4, 3)],
           "NN": [(256, 128, 32, 8, 4), (256, 128, 32, 8, 4, 4), (256, 128, 32, 8, 3), (128, 128, 32, 8, 4),
                  (128, 128, 32, 4, 3)]}


def run_layout(TR, layout, size, cfg):
    M = N = K = size
    BM, BN, BK, warps, stages, group_m = (*cfg, 8)[:6]
    g = torch.Generator(device="cuda").manual_seed(size + (1 if layout == "NT" else 0))
    A = torch.randn(M, K, device="cuda", generator=g)
    W = torch.randn(N, K, device="cuda", generator=g) if layout == "NT" else None
    B = W.t() if layout == "NT" else torch.randn(K, N, device="cuda", generator=g)
    C = torch.empty(M, N, device="cuda")
    grid = (tessera.cdiv(M, BM) * tessera.cdiv(N, BN),)

    def launch(mod):
        if layout == "NT":
            return lambda: mod.matmul_nt_kernel[grid](A, W, C, M, N, K, A.stride(0), A.stride(1), W.stride(0),
                                                      W.stride(1), C.stride(0), C.stride(1), BM=BM, BN=BN, BK=BK,
                                                      GROUP_M=group_m, num_warps=warps, num_stages=stages)
        return lambda: mod.matmul_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                                               C.stride(0), C.stride(1), BM=BM, BN=BN, BK=BK, GROUP_M=group_m,
                                               num_warps=warps, num_stages=stages)

    ref = A.double() @ B.double()

    def check():
        err = ((C.double() - ref).norm() / ref.norm()).item()
        assert err < 3e-3, f"relative error {err:.2e}"

    tfl = lambda ms: 2 * M * N * K / (ms * 1e-3) / 1e12 if ms else None
    C.fill_(float("nan"))
    t_ms, t_err = BG.try_bench(launch(TK), check)
    C.fill_(float("nan"))
    r_ms, r_err = BG.try_bench(launch(TR), check) if TR else (None, "no triton")
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        C.fill_(float("nan"))
        cb_ms, cb_err = BG.try_bench(lambda: torch.matmul(A, B, out=C), check)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return tfl(t_ms), tfl(cb_ms), tfl(r_ms), "; ".join(e for e in (t_err, r_err and f"triton: {r_err}", cb_err) if e)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--layouts", default="NN,NT")
    ap.add_argument("--out", default=".")
    ap.add_argument("--configs", default="", help="replace the configurations: BMxBNxBK/warps/stages[/GROUP_M],...")
    args = ap.parse_args()
    if args.configs:
        cfgs = [tuple(int(v) for v in c.replace("x", "/").split("/")) for c in args.configs.split(",")]
        for layout in CONFIGS:
            CONFIGS[layout] = cfgs
    TR = BG.load_triton_kernels()
    f = lambda v: f"{v:.1f}" if v else "n/a"
    r = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
    lines = [f"# tf32 matmul — {torch.cuda.get_device_name()}", "",
             "TFLOP/s (2 M N K / time, M = N = K); cuBLAS = torch.matmul with allow_tf32; Tessera and Triton "
             "run bench/gpu_kernels.py's matmul_kernel (NN) / matmul_nt_kernel (NT); config "
             "BMxBNxBK/warps/stages[/GROUP_M, default 8].",
             "", "| layout | size | config | tessera | cuBLAS | triton | tessera / cuBLAS | tessera / triton | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for layout in args.layouts.split(","):
        for size in map(int, args.sizes.split(",")):
            for cfg in CONFIGS[layout]:
                t, cb, tr, err = run_layout(TR, layout, size, cfg)
                label = f"{cfg[0]}x{cfg[1]}x{cfg[2]}/{cfg[3]}/{cfg[4]}" + (f"/G{cfg[5]}" if len(cfg) > 5 else "")
                lines.append(f"| {layout} | {size} | {label} | {f(t)} | {f(cb)} | {f(tr)} | {r(t, cb)} | {r(t, tr)} "
                             f"| {err} |")
                print(lines[-1], flush=True)
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, "matmul_tf32.md"), "w") as fh:  # each row as it comes
                    fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
