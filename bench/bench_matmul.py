"""Matmul-only GPU benchmark (TFLOP/s), side by side in one run on one card: Tessera
vs torch.matmul (cuBLAS) vs Triton, the same kernel source (gpu_kernels.matmul_kernel,
grouped program order, 8 warps) for both JITs, fp16 and bf16, at 1024^3 .. 8192^3.
Tessera runs its sm_90a wgmma rings both ways in the same run: filled by cp.async and by
the TMA (TESSERA_TMA), plus the block-pointer kernel (gpu_kernels.matmul_block_ptr_kernel).
Writes bench/results/gpu_matmul.{md,json} (or --out DIR); prints the table last."""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_gpu  # noqa: E402  (do_bench, load_triton_kernels, try_bench; the frontend path)
import gpu_kernels as TK  # noqa: E402
import tessera  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--name", default="gpu_matmul", help="results file stem under --out")
    ap.add_argument("--extra", action="store_true", help="also 256x128 tiles on 16 warps and GROUP_M 16")
    ap.add_argument("--dtypes", default="fp16,bf16")
    args = ap.parse_args()
    TR = bench_gpu.load_triton_kernels()
    dev = torch.cuda.get_device_name()
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    # (label, kernel, BN, BK, num_stages, TESSERA_TMA[, BM, num_warps, GROUP_M]), by default BM = 128,
    # 8 warps, GROUP_M 8. On sm_90a
    # Tessera runs these as wgmma (M = 16 x num_warps) from a ring filled by cp.async (TMA "0")
    # or by the TMA (cp.async.bulk.tensor + mbarrier, "1"; "2", tma-bar: stages released by a CTA
    # barrier per iteration instead of "empty" mbarriers); "tessera bp" is the block-pointer
    # kernel, whose loads only the TMA pipelines. Each (kernel, TMA) pair is its own Kernel object,
    # compiled with TESSERA_TMA set for that variant only.
    kern = {}

    def tessera_kernel(fn, tma):
        return kern.setdefault((fn, tma), tessera.jit(fn))

    mm, bp = TK.matmul_kernel.fn, TK.matmul_block_ptr_kernel.fn
    variants = [("cp.async 128x128x32 s3", mm, 128, 32, 3, "0"), ("tma 128x128x32 s3", mm, 128, 32, 3, "1"),
                ("cp.async 128x128x64 s3", mm, 128, 64, 3, "0"), ("tma 128x128x64 s3", mm, 128, 64, 3, "1"),
                ("cp.async 128x256x64 s3", mm, 256, 64, 3, "0"), ("tma 128x256x64 s3", mm, 256, 64, 3, "1"),
                ("cp.async 128x256x64 s4", mm, 256, 64, 4, "0"), ("tma 128x256x64 s4", mm, 256, 64, 4, "1"),
                ("tma-bar 128x256x64 s4", mm, 256, 64, 4, "2"), ("tma bp 128x256x64 s4", bp, 256, 64, 4, "1")]
    if args.extra:  # 16 warps: four consumer warpgroups on a 256-row tile
        variants += [("tma 256x128x64 s4 w16", mm, 128, 64, 4, "1", 256, 16),
                     ("tma-bar 256x128x64 s4 w16", mm, 128, 64, 4, "2", 256, 16),
                     ("tma 128x256x64 s4 g16", mm, 256, 64, 4, "1", 128, 8, 16)]
    variants = [(f"tessera {v[0]}", *v[1:]) for v in variants]
    if TR:
        variants += [("triton 128x128x32 s3", TR.matmul_kernel, 128, 32, 3, None),
                     ("triton 128x256x64 s3", TR.matmul_kernel, 256, 64, 3, None),
                     ("triton 128x256x64 s4", TR.matmul_kernel, 256, 64, 4, None)]
    rows = []
    for dname in args.dtypes.split(","):
        dt = dtypes[dname]
        for size in (int(s) for s in args.sizes.split(",")):
            g = torch.Generator(device="cuda").manual_seed(size)
            A = torch.randn(size, size, device="cuda", dtype=dt, generator=g)
            B = torch.randn(size, size, device="cuda", dtype=dt, generator=g)
            C = torch.empty(size, size, device="cuda", dtype=dt)
            ref = (A.float() @ B.float())
            tflops = lambda ms: 2 * size ** 3 / (ms * 1e-3) / 1e12

            def check():
                err = ((C.float() - ref).norm() / ref.norm()).item()
                assert err < 1e-2, f"relative error {err}"

            row = {"dtype": dname, "size": size}
            row["cublas"] = tflops(bench_gpu.do_bench(lambda: torch.matmul(A, B, out=C)))
            for label, kfn, BN, BK, ns, tma, *shape in variants:
                BM, nw, gm = shape + [128, 8, 8][len(shape):]  # optional BM, num_warps, GROUP_M
                C.fill_(float("nan"))
                grid = (tessera.cdiv(size, BM) * tessera.cdiv(size, BN),)
                K = kfn if tma is None else tessera_kernel(kfn, tma)
                fn = (lambda K=K, BM=BM, BN=BN, BK=BK, ns=ns, nw=nw, gm=gm, grid=grid: K[grid](
                    A, B, C, size, size, size, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                    C.stride(0), C.stride(1), BM=BM, BN=BN, BK=BK, GROUP_M=gm, num_warps=nw, num_stages=ns))
                saved = os.environ.get("TESSERA_TMA")
                if tma is not None:
                    os.environ["TESSERA_TMA"] = tma
                try:
                    ms, err = bench_gpu.try_bench(fn, check)
                finally:
                    if saved is None:
                        os.environ.pop("TESSERA_TMA", None)
                    else:
                        os.environ["TESSERA_TMA"] = saved
                row[label] = tflops(ms) if ms else None
                if err:
                    row[label + " error"] = err
            rows.append(row)
            print(json.dumps(row), flush=True)
    labels = [v[0] for v in variants]
    lines = [f"Device: {dev}. TFLOP/s (2 M N K / median time, triton.testing.do_bench); torch.matmul is cuBLAS.", "",
             "| matmul | " + " | ".join(labels) + " | cuBLAS | best tessera / cuBLAS | best tessera / best triton |",
             "|---|" + "---|" * (len(labels) + 3)]
    fmt = lambda v: f"{v:.1f}" if v else "-"
    for r in rows:
        best = max((r[l] for l in labels if l.startswith("tessera") and r.get(l)), default=None)
        tri = max((r[l] for l in labels if l.startswith("triton") and r.get(l)), default=None)
        lines.append(f"| {r['dtype']} {r['size']}^3 | " + " | ".join(fmt(r.get(l)) for l in labels) +
                     f" | {fmt(r['cublas'])} | {best / r['cublas']:.2f} | " +
                     (f"{best / tri:.2f}" if best and tri else "-") + " |")
    errs = [f"{r['dtype']} {r['size']} {k}: {v}" for r in rows for k, v in r.items() if k.endswith("error")]
    lines += [""] + errs
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.name + ".md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, args.name + ".json"), "w") as fh:
        json.dump({"device": dev, "rows": rows}, fh, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
