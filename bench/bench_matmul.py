"""Matmul-only GPU benchmark (TFLOP/s), side by side in one run on one card: Tessera
vs torch.matmul (cuBLAS) vs Triton, the same kernel source (gpu_kernels.matmul_kernel,
grouped program order, 8 warps) for both JITs, fp16 and bf16, at 1024^3 .. 8192^3.
Tessera runs its sm_90a wgmma rings both ways in the same run: filled by cp.async and by
the TMA (TESSERA_TMA), plus the block-pointer kernel (gpu_kernels.matmul_block_ptr_kernel).
Writes bench/results/gpu_matmul.{md,json} (or --out DIR); prints the table last.

--sweep runs a configuration sweep instead (sweep() below): tiles, warps, stages, GROUP_M and
the persistent kernel's grid, for both JITs on the same source, next to cuBLAS, with the
cuBLAS kernel names; screened once, the finalists then measured --reps more times round-robin
(best and median). Writes <--name>.md/.json (default gpu_matmul_sweep)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
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
    ap.add_argument("--sizes", default="1024,2048,4096,8192", help="N for N^3; --sweep also takes MxNxK")
    ap.add_argument("--name", default="gpu_matmul", help="results file stem under --out")
    ap.add_argument("--extra", action="store_true", help="also 256x128 tiles on 16 warps and GROUP_M 16")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--sweep", action="store_true", help="the configuration sweep (sweep() below)")
    ap.add_argument("--configs", default=",".join(SWEEP_CONFIGS),
                    help="--sweep: BMxBNxBK/warps/stages/G<GROUP_M>[/P<programs per SM>],...")
    ap.add_argument("--reps", type=int, default=3, help="--sweep: repetitions of the finalists after screening")
    ap.add_argument("--finalists", type=int, default=2, help="--sweep: each JIT's best screened configs repeated (with the first config)")
    ap.add_argument("--rep-ms", type=int, default=100, help="--sweep: do_bench's rep (ms of timed runs)")
    ap.add_argument("--telemetry", action="store_true", help="--sweep: cuBLAS and each JIT's pick run back to "
                    "back for ~0.5 s while nvidia-smi samples the SM clock and board power")
    args = ap.parse_args()
    if args.sweep:
        return sweep(args)
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


# The sweep's default configurations. Tessera runs wgmma only where BM = 16 x warps (one m64
# instruction row per warpgroup), so 256x128 needs 16 warps there (8 warps is Triton's form and
# mma.sync in Tessera) and 128x128 on 4 warps is mma.sync; both are kept to show it. 128x256x64
# at 5 stages (240 KB of ring) does not fit in shared memory. /P<n>: persistent_matmul_kernel on
# n programs per SM.
SWEEP_CONFIGS = ["128x256x64/8/4/G8", "128x256x64/8/3/G8", "128x256x64/8/4/G4", "128x256x64/8/4/G16",
                 "256x128x64/8/4/G8", "256x128x64/16/4/G8", "128x128x64/8/4/G8", "128x128x64/8/5/G8",
                 "128x128x64/4/4/G8", "128x256x64/8/4/G8/P1", "128x256x64/8/4/G8/P2"]


def parse_sweep_config(text):
    """'128x256x64/8/4/G8/P2' -> dict(BM=128, BN=256, BK=64, warps=8, stages=4, group_m=8, per_sm=2)."""
    tile, warps, stages, *rest = text.split("/")
    BM, BN, BK = (int(v) for v in tile.split("x"))
    cfg = dict(BM=BM, BN=BN, BK=BK, warps=int(warps), stages=int(stages), group_m=8, per_sm=0)
    for r in rest:
        if r[:1] not in ("G", "P") or not r[1:].isdigit():
            raise ValueError(f"bad sweep configuration {text!r}: expected G<GROUP_M> or P<programs per SM>, got {r!r}")
        cfg["group_m" if r[0] == "G" else "per_sm"] = int(r[1:])
    return cfg


def parse_shape(text):
    """'4096' -> (4096, 4096, 4096); '4096x4096x16384' -> (M, N, K)."""
    dims = [int(v) for v in text.split("x")]
    if len(dims) not in (1, 3):
        raise ValueError(f"bad matmul shape {text!r}: expected N or MxNxK")
    return tuple(dims * 3) if len(dims) == 1 else tuple(dims)


def sweep_launcher(mod, cfg, A, B, C):
    """A no-argument launch of one configuration (matmul_kernel, or persistent_matmul_kernel on
    per_sm programs per SM) of gpu_kernels `mod` (Tessera's or the Triton copy)."""
    (M, K), N = A.shape, B.shape[1]
    tiles = tessera.cdiv(M, cfg["BM"]) * tessera.cdiv(N, cfg["BN"])
    meta = dict(BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP_M=cfg["group_m"], num_warps=cfg["warps"],
                num_stages=cfg["stages"])
    kernel, grid = mod.matmul_kernel, (tiles,)
    if cfg["per_sm"]:
        kernel = mod.persistent_matmul_kernel
        grid = (min(tiles, cfg["per_sm"] * torch.cuda.get_device_properties(0).multi_processor_count),)
    return lambda: kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                                C.stride(0), C.stride(1), **meta)


def sweep(args):
    """Screens every configuration once per (dtype, size) for Tessera and Triton, then measures
    the first configuration (the benchmark's current one), each JIT's --finalists best and
    cuBLAS --reps more times, round-robin, so that a slow spell of the card hits all alike."""
    from bench_matmul_tf32 import kernel_names, sustained
    TR = bench_gpu.load_triton_kernels()
    dev = torch.cuda.get_device_name()
    configs = args.configs.split(",")
    parsed = {c: parse_sweep_config(c) for c in configs}
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    jits = [("tessera", TK)] + ([("triton", TR)] if TR else [])
    bench = lambda fn: bench_gpu.do_bench(fn, warmup=25, rep=args.rep_ms)
    name = args.name if args.name != "gpu_matmul" else "gpu_matmul_sweep"
    f = lambda v: f"{v:.1f}" if v else "n/a"
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
    med = lambda xs: statistics.median(xs) if xs else None
    screen_lines = ["| dtype | size | config | tessera | triton | cuBLAS | tessera / cuBLAS | note |",
                    "|---|---|---|---|---|---|---|---|"]
    summary_lines = ["| dtype | size | who | config | runs | best | median | median / cuBLAS median |",
                     "|---|---|---|---|---|---|---|---|"]
    picks, names, records = [], [], []
    telemetry = ["| dtype | size | who | config | TFLOP/s | SM MHz | board W | of the 16-bit peak at that clock | samples |",
                 "|---|---|---|---|---|---|---|---|---|"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def write():
        text = [f"# fp16/bf16 matmul configuration sweep — {dev}", "",
                "TFLOP/s (2 M N K / time; N^3 or M x N x K), triton.testing.do_bench "
                f"(warmup 25 ms, rep {args.rep_ms} ms); Tessera and Triton run bench/gpu_kernels.py's matmul_kernel "
                "(persistent_matmul_kernel for /P<programs per SM>); config BMxBNxBK/warps/stages/G<GROUP_M>. "
                "Every configuration's first result is checked against a float64 reference (relative error < 1e-2).",
                "", "## Screening (one measurement each)", ""] + screen_lines + [
                "", f"## Finalists: screening + {args.reps} round-robin repetitions", ""] + summary_lines + [
                "", "## Fastest by median", ""] + picks + ([
                "", "## Sustained runs (back to back, ~0.5 s; SM clock and board power sampled by nvidia-smi every "
                "20 ms over the second half; peak = SMs x 4096 FLOP per clock, dense fp16/bf16 on sm_90)", ""] +
                telemetry if args.telemetry else []) + ["", "## cuBLAS kernels (torch.profiler)", ""] + names
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, name + ".md"), "w") as fh:
            fh.write("\n".join(text) + "\n")
        with open(os.path.join(args.out, name + ".json"), "w") as fh:
            json.dump({"device": dev, "rep_ms": args.rep_ms, "records": records, "telemetry": telemetry[2:]}, fh,
                      indent=1)

    for dname in args.dtypes.split(","):
        dt = dtypes[dname]
        for shape in args.sizes.split(","):
            M, N, K = parse_shape(shape)
            size = shape if "x" in shape else f"{M}^3"
            g = torch.Generator(device="cuda").manual_seed(M * 7 + N + K)
            A = torch.randn(M, K, device="cuda", dtype=dt, generator=g)
            B = torch.randn(K, N, device="cuda", dtype=dt, generator=g)
            C = torch.empty(M, N, device="cuda", dtype=dt)
            ref = A.double() @ B.double()
            tflops = lambda ms: 2 * M * N * K / (ms * 1e-3) / 1e12 if ms else None

            def check():
                err = ((C.double() - ref).norm() / ref.norm()).item()
                assert err < 1e-2, f"relative error {err:.2e}"

            cublas = lambda: torch.matmul(A, B, out=C)
            names.append(f"- {dname} {size}: " + ", ".join(f"`{n}`" for n in kernel_names(cublas)))
            runs = {("cuBLAS", "-"): [tflops(bench(cublas))]}
            errors = {}
            for cfg in configs:  # screening, checked
                for who, mod in jits:
                    C.fill_(float("nan"))
                    ms, err = bench_gpu.try_bench(sweep_launcher(mod, parsed[cfg], A, B, C), check)
                    runs[(who, cfg)] = [tflops(ms)] if ms else []
                    if err:
                        errors[(who, cfg)] = err
                first = lambda who: runs[(who, cfg)][0] if runs[(who, cfg)] else None
                note = "; ".join(f"{w}: {errors[(w, cfg)]}" for w, _ in jits if (w, cfg) in errors)
                cb = runs[("cuBLAS", "-")][0]
                screen_lines.append(f"| {dname} | {size} | {cfg} | {f(first('tessera'))} | {f(first('triton'))} | "
                                    f"{f(cb)} | {ratio(first('tessera'), cb)} | {note} |")
                print(screen_lines[-1], flush=True)
            finalists = [("cuBLAS", "-")]
            for who, _ in jits:
                ranked = sorted((c for c in configs if runs[(who, c)]), key=lambda c: -runs[(who, c)][0])
                for c in [configs[0]] + ranked[:args.finalists]:
                    if runs[(who, c)] and (who, c) not in finalists:
                        finalists.append((who, c))
            mods = dict(jits)
            for _ in range(args.reps):
                for who, cfg in finalists:
                    fn = cublas if who == "cuBLAS" else sweep_launcher(mods[who], parsed[cfg], A, B, C)
                    runs[(who, cfg)].append(tflops(bench(fn)))
            cb_med = med(runs[("cuBLAS", "-")])
            for who, cfg in finalists:
                xs = runs[(who, cfg)]
                summary_lines.append(f"| {dname} | {size} | {who} | {cfg} | {len(xs)} | {f(max(xs))} | {f(med(xs))} | "
                                     f"{ratio(med(xs), cb_med)} |")
                print(summary_lines[-1], flush=True)
            best = {}
            for who, _ in jits:
                cands = [(med(runs[(w, c)]), c) for w, c in finalists if w == who]
                if cands:
                    best[who] = max(cands)
            t, tr = best.get("tessera"), best.get("triton")
            if args.telemetry:  # tells a slower kernel apart from a lower clock (power-capped card)
                for who, cfg in [("cuBLAS", "-")] + [(w, best[w][1]) for w, _ in jits if w in best]:
                    fn = cublas if who == "cuBLAS" else sweep_launcher(mods[who], parsed[cfg], A, B, C)
                    ms, mhz, watts, count = sustained(fn, 2 * M * N * K / (med(runs[(who, cfg)]) * 1e12) * 1e3)
                    peak = sms * 4096 * mhz * 1e6 / 1e12 if mhz else None
                    telemetry.append(f"| {dname} | {size} | {who} | {cfg} | {f(tflops(ms))} | "
                                     f"{f'{mhz:.0f}' if mhz else 'n/a'} | {f'{watts:.0f}' if watts else 'n/a'} | "
                                     f"{ratio(tflops(ms), peak)} | {count} |")
                    print(telemetry[-1], flush=True)
            picks.append(f"- {dname} {size}: cuBLAS median {f(cb_med)}; tessera {t[1] if t else 'n/a'} "
                         f"{f(t[0] if t else None)} ({ratio(t[0] if t else None, cb_med)} of cuBLAS); triton "
                         f"{tr[1] if tr else 'n/a'} {f(tr[0] if tr else None)} "
                         f"(tessera / triton {ratio(t[0] if t else None, tr[0] if tr else None)})")
            records.append({"dtype": dname, "size": size, "cublas_kernels": names[-1],
                            "runs": {f"{w} {c}": xs for (w, c), xs in runs.items()},
                            "errors": {f"{w} {c}": e for (w, c), e in errors.items()}})
            write()
            del A, B, C, ref
            torch.cuda.empty_cache()
    write()
    print("\n".join(picks + [""] + names))


if __name__ == "__main__":
    main()
