"""GPU benchmark, side by side in one run on the same card: Tessera vs torch vs
Triton (kernels written here for the comparison). Prints a short table last and
writes bench/results/gpu.{md,json} (or --out DIR). Run by scripts/gpu_round.sh."""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frontend"))
import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402

try:
    import triton
    import triton.language as ttl
    from triton.testing import do_bench
except ImportError:  # pragma: no cover
    triton = None

    def do_bench(fn, warmup=25, rep=100):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(rep):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times)[len(times) // 2]


# Both frameworks run the same kernel source (bench/gpu_kernels.py).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_kernels as TK  # noqa: E402


def load_triton_kernels():
    """gpu_kernels.py with `import triton as jit_module, triton.language as tl`."""
    if triton is None:
        return None
    import importlib.util
    import tempfile
    src = open(os.path.join(HERE, "gpu_kernels.py")).read()
    src = src.replace("import tessera as jit_module", "import triton as jit_module")
    src = src.replace("import tessera.language as tl", "import triton.language as tl")
    path = os.path.join(tempfile.mkdtemp(prefix="tessera-bench-"), "gpu_kernels_triton.py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location("gpu_kernels_triton", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def try_bench(fn, check=None):
    try:
        fn()
        torch.cuda.synchronize()
        if check is not None:
            check()
        return do_bench(fn), ""
    except Exception as e:  # record, keep going: one failing kernel must not hide the rest
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


FIRST_LAUNCH = r"""
import os, sys, time, torch
sys.path.insert(0, {here!r}); sys.path.insert(0, {frontend!r})
framework = sys.argv[1]
x = torch.randn(64, 4096, device="cuda"); y = torch.empty_like(x); torch.cuda.synchronize()
if framework == "tessera":
    import gpu_kernels as K
else:
    import bench_gpu; K = bench_gpu.load_triton_kernels()
t = time.perf_counter()
K.softmax_kernel[(64,)](y, x, 4096, 4096, BLOCK=4096, num_warps=16)
torch.cuda.synchronize()
print((time.perf_counter() - t) * 1e3)
"""


def first_launch_ms(cold):
    """(tessera, triton) ms of the first softmax launch in a new process; cold = empty
    caches (compile included), warm = caches filled by the previous cold run."""
    import subprocess
    import tempfile
    out = []
    for fw, var in (("tessera", "TESSERA_CACHE_DIR"), ("triton", "TRITON_CACHE_DIR")):
        if fw == "triton" and triton is None:
            out.append(None)
            continue
        env = dict(os.environ)
        key = f"_bench_cache_{fw}"
        if cold or key not in globals():
            globals()[key] = tempfile.mkdtemp(prefix=f"bench-{fw}-cache-")
        env[var] = globals()[key]
        code = FIRST_LAUNCH.format(here=HERE, frontend=os.path.join(HERE, "..", "frontend"))
        r = subprocess.run([sys.executable, "-c", code, fw], env=env, capture_output=True, text=True)
        try:
            out.append(float(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            out.append(None)
    return tuple(out)


def host_us(fn, n=2000):
    import time
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def rows_table(rows, same_size, copy_bw):
    """The bandwidth table's lines (GB/s per kernel, ratios to the copies and to Triton)."""
    lines = ["| kernel | tessera | torch | triton | tessera / copy | tessera / same-size copy | tessera / triton | note |",
             "|---|---|---|---|---|---|---|---|"]
    f = lambda v: f"{v:.0f}" if v else "n/a"
    for name, t, to, tr, err in rows:
        ss = f"{t / same_size[name]:.2f}" if (t and name in same_size) else "n/a"
        lines.append(f"| {name} | {f(t)} | {f(to)} | {f(tr)} | {t / copy_bw:.2f} | {ss} | "
                     f"{(t / tr) if (t and tr) else float('nan'):.2f} | {err} |" if t else
                     f"| {name} | n/a | {f(to)} | {f(tr)} | n/a | n/a | n/a | {err} |")
    return lines


def write_rows_only(args, dev, versions, rows, same_size, copy_bw):
    fusion = os.environ.get("TESSERA_GPU_FP_FUSION")
    lines = [f"# GPU benchmark, bandwidth rows — {dev}", "", f"{versions}.", "",
             f"GB/s (bytes that must be read + written); device copy {copy_bw:.0f} GB/s; "
             f"TESSERA_GPU_FP_FUSION={fusion if fusion is not None else '(unset)'}. Tessera and Triton run the "
             "same kernel source (bench/gpu_kernels.py); torch is eager.", ""] + rows_table(rows, same_size, copy_bw)
    text = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"gpu_rows{args.tag}.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(args.out, f"gpu_rows{args.tag}.json"), "w") as fh:
        json.dump({"device": dev, "fp_fusion": fusion, "rows": rows, "same_size_copy_gbps": same_size}, fh, indent=1)
    print(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--only", default="", help="comma-separated substrings: run only the rows whose name "
                    "contains one (e.g. 'skinny,tf32'); compile and launch rows then run only if named "
                    "('compile', 'launch')")
    ap.add_argument("--rows-only", action="store_true",
                    help="the bandwidth rows only (no matmul, compile or host rows): writes gpu_rows<tag>.{md,json}")
    ap.add_argument("--tag", default="", help="suffix of the result files' names")
    args = ap.parse_args()
    only = [o for o in args.only.split(",") if o]
    wanted = lambda name: not only or any(o in name for o in only)
    dev = torch.cuda.get_device_name()
    versions = f"torch {torch.__version__} (CUDA {torch.version.cuda})" + (
        f", Triton {triton.__version__}" if triton is not None else ", no Triton")
    TR = load_triton_kernels()
    rows = []

    n = 2**27
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    o = torch.empty_like(a)
    copy_ms = do_bench(lambda: o.copy_(a))
    copy_bw = gbps(2 * a.numel() * 4, copy_ms)
    rows.append(("device copy fp32 2^27 (torch)", copy_bw, None, None, ""))
    # The read-only ceiling a row reduction can reach (it writes almost nothing):
    # torch's own sum of the same bytes, for reading the row-sum ratio.
    read_bw = gbps(a.numel() * 4, do_bench(lambda: a.sum()))
    rows.append(("device read fp32 2^27 (torch sum)", read_bw, None, None, "read-only ceiling for row sum"))

    # A copy moving the same number of bytes as a kernel (half read, half written): a
    # kernel of ~100 us pays the same fixed ramp-up and tail as this copy, which the
    # 1 GB copy above hides (H100: a 256 MB row sum reaches 0.93 of the 1 GB copy's rate,
    # a 512 MB one 0.996; bench/results/gpu_row_sum_size_h100.log).
    same_size_copy = {}

    def same_size_copy_bw(nbytes):
        if nbytes not in same_size_copy:
            src = torch.empty(nbytes // 2 // 4, device="cuda")
            dst = torch.empty_like(src)
            same_size_copy[nbytes] = gbps(nbytes, do_bench(lambda: dst.copy_(src)))
        return same_size_copy[nbytes]

    same_size = {}

    def bw_row(name, nbytes, t_fn, torch_fn, tr_fn, check):
        if not wanted(name):
            return
        same_size[name] = same_size_copy_bw(nbytes)
        t_ms, err = try_bench(t_fn, check)
        to_ms = do_bench(torch_fn) if torch_fn else None
        tr_ms = do_bench(tr_fn) if tr_fn else None
        rows.append((name, gbps(nbytes, t_ms) if t_ms else None, gbps(nbytes, to_ms) if to_ms else None,
                     gbps(nbytes, tr_ms) if tr_ms else None, err))

    def tuned_row(name, nbytes, make, torch_fn, check):
        """A row kernel (one program per row of 4096) at the num_warps that is fastest for
        each framework on this card (4, 8 or 16: fp16 rows want fewer warps than fp32),
        the same source and choices for both; the note says what each picked."""
        if not wanted(name):
            return
        picked = {}
        for fw, K in (("tessera", TK), ("triton", TR)):
            if K is None:
                continue
            times = {}
            for nw in (4, 8, 16):
                try:
                    times[nw] = do_bench(make(K, nw))
                except Exception:  # a framework refusing a config loses that config only
                    pass
            if times:
                picked[fw] = min(times, key=times.get)
        t_fn = make(TK, picked["tessera"]) if "tessera" in picked else make(TK, 16)
        tr_fn = make(TR, picked["triton"]) if "triton" in picked else None
        bw_row(name, nbytes, t_fn, torch_fn, tr_fn, check)
        name_, t, to, tr, err = rows[-1]
        note = "num_warps " + ", ".join(f"{fw} {nw}" for fw, nw in picked.items())
        rows[-1] = (name_, t, to, tr, f"{err}; {note}" if err else note)

    grid = ((n + 1023) // 1024,)
    bw_row("vector add fp32 2^27", 3 * n * 4,
           lambda: TK.add_kernel[grid](a, b, o, n, BLOCK=1024), lambda: torch.add(a, b, out=o),
           (lambda: TR.add_kernel[grid](a, b, o, n, BLOCK=1024)) if TR else None,
           lambda: torch.testing.assert_close(o, a + b))

    # Rows of 4096 at 16384 rows (the size: 256 MB moved in fp32, 128 MB in fp16)
    # and fp16 at 65536 rows (512 MB: the ramp-up and tail, ~5 us, weigh 4x less).
    C = 4096
    for dtype, R in ((torch.float32, 16384), (torch.float16, 16384), (torch.float16, 65536)):
        dn = str(dtype).split(".")[-1]
        x = torch.randn(R, C, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        w = torch.rand(C, device="cuda", dtype=dtype)
        bias = torch.rand(C, device="cuda", dtype=dtype)
        io = 2 * x.numel() * x.element_size()
        sm = lambda K, nw: (lambda: K.softmax_kernel[(R,)](y, x, x.stride(0), C, BLOCK=4096, num_warps=nw))
        tuned_row(f"softmax {dn} {R}x{C}", io, sm, lambda: torch.softmax(x, 1),
                  lambda: torch.testing.assert_close(y.float(), torch.softmax(x.float(), 1), atol=2e-3, rtol=2e-3))
        ln = lambda K, nw: (lambda: K.layernorm_kernel[(R,)](x, y, w, bias, x.stride(0), C, 1e-5, BLOCK=4096,
                                                             num_warps=nw))
        ref_ln = lambda: torch.nn.functional.layer_norm(x.float(), (C,), w.float(), bias.float(), 1e-5)
        tuned_row(f"layernorm fwd {dn} {R}x{C}", io, ln,
                  lambda: torch.nn.functional.layer_norm(x, (C,), w, bias, 1e-5),
                  lambda: torch.testing.assert_close(y.float(), ref_ln(), atol=3e-2, rtol=3e-2))
        bg = lambda K, nw: (lambda: K.bias_gelu_kernel[(R,)](x, bias, y, x.stride(0), C, BLOCK=4096, num_warps=nw))
        ref_bg = lambda: torch.nn.functional.gelu(x.float() + bias.float(), approximate="tanh")
        tuned_row(f"bias + GELU {dn} {R}x{C}", io, bg,
                  lambda: torch.nn.functional.gelu(x + bias, approximate="tanh"),
                  lambda: torch.testing.assert_close(y.float(), ref_bg(), atol=2e-2, rtol=2e-2))
    R = 16384
    x = torch.randn(R, C, device="cuda")
    s_out = torch.empty(R, device="cuda")
    rs = lambda K, nw: (lambda: K.row_sum_kernel[(R,)](x, s_out, x.stride(0), C, BLOCK=4096, num_warps=nw))
    tuned_row(f"row sum fp32 {R}x{C}", x.numel() * 4 + R * 4, rs, lambda: torch.sum(x, 1, out=s_out),
              lambda: torch.testing.assert_close(s_out, x.sum(1), atol=1e-2, rtol=1e-3))

    # Matmul on tensor cores, TFLOP/s: the same kernel source (gpu_kernels.matmul_kernel,
    # grouped program order) in Tessera and Triton vs cuBLAS (torch.matmul), one row per
    # dtype and shape. fp16/bf16 square: 128x256x64 tiles, 8 warps, 4 stages (the best of
    # bench_matmul.py's configurations for both JITs on an H100). tf32: fp32 inputs,
    # tl.dot's default input_precision "tf32" in both JITs vs cuBLAS with allow_tf32.
    # Skinny (M = 16..128, N = K = 8192, fp16): BM = M up to 64, 128x64 column tiles.
    mm_rows = []
    TF32_NT = (128, 256, 32, 4)  # BM, BN, BK, stages (bench/results/gpu_matmul_tf32.md's best for both JITs)
    TF32_NN = (256, 128, 32, 4)  # NN: Tessera's swapped wgmma takes BN = 16 x warps, n = BM (same file)

    def mm_row(label, dtype, M, N, K, BM, BN, BK, warps, max_rel_err, stages=3, nt=False, persistent=False,
               alternatives=()):
        # nt: B is W^T, W an N x K row-major weight (x @ W^T, nn.Linear's layout):
        # gpu_kernels.matmul_nt_kernel reads W's K-contiguous rows; cuBLAS gets the same view.
        # alternatives: more (BM, BN, BK, warps, stages[, split-K[, GROUP_M]]) configs; each
        # framework then runs the fastest of them on the same source (the note says which).
        if not wanted(label):
            return
        g = torch.Generator(device="cuda").manual_seed(M * 7 + N)
        A = torch.randn(M, K, device="cuda", dtype=dtype, generator=g)
        W = torch.randn(N, K, device="cuda", dtype=dtype, generator=g) if nt else None
        B = W.t() if nt else torch.randn(K, N, device="cuda", dtype=dtype, generator=g)
        Cm = torch.empty(M, N, device="cuda", dtype=dtype)

        def launcher(Kmod, cfg):
            BM, BN, BK, warps, stages, split, group_m = (*cfg, *(1, 8)[len(cfg) - 5:])  # split-K 1, GROUP_M 8
            grid = (tessera.cdiv(M, BM) * tessera.cdiv(N, BN),)
            meta = dict(BM=BM, BN=BN, BK=BK, GROUP_M=group_m, num_warps=warps, num_stages=stages)
            if split > 1:  # gpu_kernels.splitk_matmul_kernel: fp32 partials + per-tile counters (zeroed once)
                ws = torch.empty(split, M, N, device="cuda", dtype=torch.float32)
                count = torch.zeros(grid[0], device="cuda", dtype=torch.int32)
                return lambda: Kmod.splitk_matmul_kernel[(grid[0], split)](
                    A, B, Cm, ws, count, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                    Cm.stride(0), Cm.stride(1), SPLIT_K=split, **meta)
            if persistent:  # one program per SM, each looping over output tiles
                grid = (min(grid[0], torch.cuda.get_device_properties(0).multi_processor_count),)
                return lambda: Kmod.persistent_matmul_kernel[grid](
                    A, B, Cm, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), Cm.stride(0), Cm.stride(1),
                    **meta)
            if nt:
                return lambda: Kmod.matmul_nt_kernel[grid](
                    A, W, Cm, M, N, K, A.stride(0), A.stride(1), W.stride(0), W.stride(1), Cm.stride(0), Cm.stride(1),
                    **meta)
            return lambda: Kmod.matmul_kernel[grid](A, B, Cm, M, N, K, A.stride(0), A.stride(1),
                                                    B.stride(0), B.stride(1), Cm.stride(0), Cm.stride(1), **meta)
        ref = A.double() @ B.double()

        def check():  # ||C - ref|| / ||ref|| against a float64 reference; NaN poison fails
            err = ((Cm.double() - ref).norm() / ref.norm()).item()
            assert err < max_rel_err, f"relative error {err:.2e} >= {max_rel_err:.0e}"

        configs = [(BM, BN, BK, warps, stages), *alternatives]

        def fastest(Kmod):  # (ms or None, error, config)
            runs = []
            for cfg in configs:
                Cm.fill_(float("nan"))
                runs.append((*try_bench(launcher(Kmod, cfg), check), cfg))
            ok = [r for r in runs if r[0] is not None]
            return min(ok, key=lambda r: r[0]) if ok else runs[0]

        tflops = lambda ms: 2 * M * N * K / (ms * 1e-3) / 1e12
        t_ms, err, t_cfg = fastest(TK)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dtype == torch.float32
        try:  # cuBLAS gets as many timings as each JIT has configs, the best of them: the
            # JITs' row is the best of len(configs) medians, and a minimum of several noisy
            # medians is lower than one median even for identical code
            to_ms = min(do_bench(lambda: torch.matmul(A, B, out=Cm)) for _ in configs)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        tr_ms, tr_err, tr_cfg = fastest(TR) if TR else (None, "", None)
        note = err or (f"triton: {tr_err}" if tr_err else "")
        if alternatives:
            name = lambda c: f"{c[0]}x{c[1]}x{c[2]} {c[3]}w {c[4]}s" + (
                f" split-K {c[5]}" if len(c) > 5 and c[5] > 1 else "") + (f" GROUP_M {c[6]}" if len(c) > 6 else "")
            picked = f"config tessera {name(t_cfg)}" + (f", triton {name(tr_cfg)}" if tr_cfg else "")
            note = f"{note}; {picked}" if note else picked
        mm_rows.append((label, tflops(t_ms) if t_ms else None, tflops(to_ms), tflops(tr_ms) if tr_ms else None, note))

    if args.rows_only:
        return write_rows_only(args, dev, versions, rows, same_size, copy_bw)
    for dname, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for size in (1024, 2048, 4096, 8192):
            # Below 4096 a 128x256 tile leaves SMs idle (1024^3: 32 tiles on 132 SMs): smaller
            # tiles are tried there, for both JITs.
            # At 8192, GROUP_M 16 is tried too: a wave of 132 tiles then covers a ~2048x2112 block
            # of C, whose A rows and B columns are 67 MB, against 85 MB for 8 x 16.5 tiles with
            # GROUP_M 8 (L2: 50 MB; at 4096 both fit: 34 / 42 MB). It was Tessera's faster one in
            # two H100 sweeps (bf16 medians 686 vs 653, 677 vs 662 TFLOP/s), about even for Triton;
            # at 4096 no configuration beat the default by more than the card's noise
            # (bench/results/gpu_matmul_bf16_sweep_h100.md).
            alts = ((128, 128, 64, 8, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4)) if size < 4096 else \
                ((128, 256, 64, 8, 4, 1, 16),) if size == 8192 else ()
            mm_row(f"matmul {dname} {size}^3", dtype, size, size, size, 128, 256, 64, 8, 1e-2, stages=4,
                   alternatives=alts)
    for size in (4096, 8192):  # gpu_kernels.persistent_matmul_kernel: same tiles on one program per SM
        mm_row(f"matmul fp16 {size}^3 persistent", torch.float16, size, size, size, 128, 256, 64, 8, 1e-2, stages=4,
               persistent=True)
    for size in (4096, 8192):
        mm_row(f"matmul tf32 {size}^3", torch.float32, size, size, size, TF32_NN[0], TF32_NN[1], TF32_NN[2], 8,
               3e-3, stages=TF32_NN[3])
        # tf32 NT (x @ W^T): both operands K-major, wgmma from a TMA ring on sm_90a.
        mm_row(f"matmul tf32 NT {size}^3", torch.float32, size, size, size, TF32_NT[0], TF32_NT[1], TF32_NT[2],
               8, 3e-3, stages=TF32_NT[3], nt=True)
    for m in (16, 32, 64, 128):
        # 8192 / 128 = 64 column tiles for 132 SMs: 64-wide tiles (128 programs) are tried too,
        # and split-K (the 6th field): 256-wide tiles read A from L2 4x less often than 64-wide
        # ones, and 4 programs per tile fill the SMs.
        bm, w = min(m, 128), 8 if m > 64 else 4
        split = tuple((bm, bn, 64, w, 4, k) for bn in (256, 128) for k in (2, 4))
        mm_row(f"matmul fp16 skinny {m}x8192x8192", torch.float16, m, 8192, 8192, min(m, 64), 128, 64, 4, 1e-2,
               alternatives=((min(m, 64), 64, 64, 4, 4), (min(m, 64), 64, 128, 4, 3), *split))

    compile_rows, host = [], []
    if wanted("compile"):
        compile_rows = [("cold compile + first launch of softmax, ms", *first_launch_ms(cold=True)),
                        ("warm first launch (disk cache), new process, ms", *first_launch_ms(cold=False))]
    if wanted("launch"):
        tiny = torch.zeros(16, device="cuda")
        host = [("cached launch of a tiny kernel, host us", host_us(lambda: TK.tiny_kernel[(1,)](tiny, BLOCK=16)),
                 host_us(lambda: tiny.add_(1.0)),
                 host_us(lambda: TR.tiny_kernel[(1,)](tiny, BLOCK=16)) if TR else None)]
        # The row above must measure the C++ launch path (frontend/csrc/launch_fastpath.cpp).
        assert TK.tiny_kernel._fast_path_size() == 1, "the cached tiny launch did not run from the C++ launch path"

    lines = [f"# GPU benchmark — {dev}", "", f"{versions}.", "",
             f"GB/s (bytes that must be read + written); device copy {copy_bw:.0f} GB/s. "
             "Tessera and Triton run the same kernel source (bench/gpu_kernels.py); torch is eager.", "",
             "'same-size copy' is a torch copy moving the kernel's byte count (half read, half written).", "",
             ] + rows_table(rows, same_size, copy_bw)
    f = lambda v: f"{v:.0f}" if v else "n/a"
    lines += ["", "TFLOP/s (2 M N K / time); torch.matmul is cuBLAS (allow_tf32 on for the tf32 rows only); every "
              "result checked against a float64 reference (relative Frobenius error; the note says why a "
              "column is missing).", "",
              "| matmul | tessera | torch (cuBLAS) | triton | tessera / cuBLAS | tessera / triton | note |",
              "|---|---|---|---|---|---|---|"]
    f1 = lambda v: f"{v:.1f}" if v else "n/a"
    for name, t, to, tr, err in mm_rows:
        lines.append(f"| {name} | {f1(t)} | {f1(to)} | {f1(tr)} | "
                     f"{(t / to) if (t and to) else float('nan'):.2f} | "
                     f"{(t / tr) if (t and tr) else float('nan'):.2f} | {err} |")
    lines += ["", "| compile | tessera | triton |", "|---|---|---|"]
    for name, t, tr in compile_rows:
        lines.append(f"| {name} | {f(t) if t else 'n/a'} | {f(tr) if tr else 'n/a'} |")
    lines += ["", "| host cost | tessera | torch | triton |", "|---|---|---|---|"]
    for name, t, to, tr in host:
        lines.append(f"| {name} | {t:.2f} | {to:.2f} | {tr:.2f} |" if tr else f"| {name} | {t:.2f} | {to:.2f} | n/a |")
    from tessera import _torch_native
    lines += ["", f"Torch tensors in the launch row: C++ reader {_torch_native.state()} "
              "(bench/launch/launch_native.py has the breakdown and the C floor)."]
    text = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    stem = "gpu" if not only else "gpu_only_" + "_".join(o.replace(" ", "-") for o in only)
    with open(os.path.join(args.out, stem + ".md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(args.out, stem + ".json"), "w") as fh:
        json.dump({"device": dev, "rows": rows, "same_size_copy_gbps": same_size, "matmul_tflops": mm_rows,
                   "host": host}, fh, indent=1)
    print(text)


if __name__ == "__main__":
    main()
