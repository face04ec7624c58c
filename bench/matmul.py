"""fp32 matmul C = A @ B for square sizes: a Tessera tiled kernel (Triton tutorial
style: BLOCK_M/N/K constexprs, a K loop with a loop-carried accumulator, tl.dot;
each of a few block configurations, and the same kernel under @tessera.autotune over
them) against numpy's BLAS and torch.mm, in GFLOP/s (2 M N K flops) and as a ratio to
numpy. Times are the best of N round-robin samples (the machine is shared)."""
from __future__ import annotations

import time

import numpy as np

from common import NA, Section, check, measure_round_robin, rel_error, tessera, tl, torch


@tessera.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# 128x256x64 and 128x128x64 are the fastest on the 2-core Zen 4 at 1024-2048 (measured,
# best of 15: 0.91-0.94x and 0.86-0.94x numpy); 64x128x64 is the best at 256.
CONFIGS = ((64, 128, 64), (128, 128, 64), (128, 256, 64))

matmul_autotuned = tessera.autotune(
    configs=[tessera.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}) for m, n, k in CONFIGS],
    key=["M", "N", "K"], warmup=20, rep=60)(matmul_kernel)


def matmul_tessera_autotuned(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (tessera.cdiv(M, meta["BLOCK_M"]), tessera.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    matmul_autotuned[grid](a, b, c, M, N, K, a.strides[0] // 4, 1, b.strides[0] // 4, 1, c.strides[0] // 4, 1)


def matmul_tessera(a, b, c, cfg):
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk = cfg
    matmul_kernel[(tessera.cdiv(M, bm), tessera.cdiv(N, bn))](
        a, b, c, M, N, K, a.strides[0] // 4, 1, b.strides[0] // 4, 1, c.strides[0] // 4, 1,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)


def run(quick=False):
    sec = Section("matmul fp32")
    sizes = (256, 512, 1024) if quick else (256, 512, 1024, 2048)
    rng = np.random.default_rng(0)
    rows, cfg_rows, summary = [], [], {}
    dot_error = None           # set when tl.dot does not compile: every Tessera cell is n/a
    slowest_tessera_s = {}     # config -> seconds per flop at the last size, to skip hopeless sizes
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        flops = 2.0 * n * n * n
        fns, status = {}, {}
        for cfg in CONFIGS:
            name = "tessera {}x{}x{}".format(*cfg)
            if dot_error:
                status[name] = dot_error
                continue
            if cfg in slowest_tessera_s and slowest_tessera_s[cfg] * flops > 20.0:
                status[name] = "skipped (> 20 s per call expected)"
                continue
            fn = (lambda cfg=cfg: matmul_tessera(a, b, c, cfg))
            first = {}

            def timed_first(fn=fn, first=first):
                t0 = time.perf_counter()
                fn()
                first["s"] = time.perf_counter() - t0

            try:
                ok, err = check(name, c, timed_first, ref, tol=1e-5)
            except tessera.CompilationError as e:
                if "dot" in str(e) and "not implemented" in str(e):
                    dot_error = "n/a (tl.dot not implemented yet)"
                    status[name] = dot_error
                    continue
                status[name] = f"n/a (CompilationError: {str(e).splitlines()[0]})"
                continue
            except Exception as e:  # an internal compiler error or a crash in the launch
                status[name] = f"n/a ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                continue
            status[name] = "ok" if ok else f"WRONG (rel err {err:.2g})"
            cfg_rows.append([n, name, first["s"] * 1e3, status[name]])
            if ok:
                fns[name] = fn
        if not dot_error:
            name = "tessera @autotune"
            try:
                t0 = time.perf_counter()
                ok, err = check(name, c, lambda: matmul_tessera_autotuned(a, b, c), ref, tol=1e-5)
                cfg_rows.append([n, name + " (tunes: " + str(matmul_autotuned.best_config) + ")",
                                 (time.perf_counter() - t0) * 1e3, "ok" if ok else f"WRONG (rel err {err:.2g})"])
                status[name] = "ok" if ok else f"WRONG (rel err {err:.2g})"
                if ok:
                    fns[name] = lambda: matmul_tessera_autotuned(a, b, c)
            except Exception as e:
                status[name] = f"n/a ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        fns["numpy @ (BLAS)"] = lambda: np.matmul(a, b, out=c)
        if torch is not None:
            ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
            fns["torch.mm(out=)"] = lambda: torch.mm(ta, tb, out=tc)
        for name in ("numpy @ (BLAS)", "torch.mm(out=)"):
            if name in fns:
                ok, err = check(name, c, fns[name], ref, tol=1e-5)
                status[name] = "ok" if ok else f"WRONG (rel err {err:.2g})"
        t = measure_round_robin(fns, repeats=6 if quick else 12, rounds=3 if quick or n > 1024 else 4, budget_s=3.0)
        gflops = {name: flops / tm.min / 1e9 for name, tm in t.items()}
        for name, tm in t.items():
            if name.startswith("tessera") and "autotune" not in name:
                cfg = tuple(int(v) for v in name.split()[1].split("x"))
                slowest_tessera_s[cfg] = tm.min / flops
        np_g = gflops.get("numpy @ (BLAS)")
        tess = [k for k in gflops if k.startswith("tessera")]
        best_t = max(tess, key=lambda k: gflops[k]) if tess else None
        for name in status:
            tm = t.get(name)
            if tm is None:
                rows.append([n, name, NA, NA, NA, NA, status[name]])
                sec.records.append({"n": n, "impl": name, "status": status[name]})
                continue
            best, med = flops / tm.min / 1e9, flops / tm.median / 1e9
            mark = " *" if name == best_t else ""
            rows.append([n, name + mark, tm.min * 1e3, best, med, best / np_g if np_g else NA, status[name]])
            sec.records.append({"n": n, "impl": name, "best_GFLOPs": best, "median_GFLOPs": med,
                                "ratio_to_numpy": best / np_g if np_g else None, **tm.as_dict(),
                                "status": status[name]})
        tess_status = "ok" if best_t else next((status[k] for k in status if k.startswith("tessera")), NA)
        summary[n] = {"tessera": gflops.get(best_t), "tessera_impl": best_t, "tessera_status": tess_status,
                      "numpy": np_g, "torch": gflops.get("torch.mm(out=)")}
    sec.table("matmul fp32, M=N=K (* = best Tessera config)",
              ["n", "impl", "best ms", "best GFLOP/s", "median GFLOP/s", "vs numpy", "check"], rows)
    targets = []
    for n in (1024, 2048):
        r = summary.get(n)
        if r and r["tessera"] and r["numpy"]:
            ratio = r["tessera"] / r["numpy"]
            targets.append([f"fp32 matmul {n}: >= 0.8x numpy", f"{ratio:.3f}x ({r['tessera_impl']})",
                            "PASS" if ratio >= 0.8 else "MISS"])
    if targets:
        sec.table("matmul targets (best of N on a shared 2-core machine)", ["target", "measured", "result"],
                  targets)
    if not dot_error:
        run_f16(sec, (1024,) if quick else (1024, 2048), rng)
    if cfg_rows:
        sec.table("matmul: first call per config and size (at the first size it includes the compile or the "
                  "disk-cache load) and its check",
                  ["n", "config", "first call ms", "check"], cfg_rows)
    return sec, summary


def run_f16(sec, sizes, rng):
    """fp16 inputs, fp32 accumulation and output: Tessera converts each tile once while
    packing it for the dot. Peers: torch.mm on fp16 (fp16 out) and the numpy route
    (convert to fp32, then BLAS; the conversion is timed too)."""
    rows = []
    cfg = (128, 256, 64)
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float16)
        b = rng.standard_normal((n, n)).astype(np.float16)
        c = np.empty((n, n), dtype=np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        flops = 2.0 * n * n * n
        name = "tessera f16 in, f32 acc {}x{}x{}".format(*cfg)

        def tess(a=a, b=b, c=c):
            matmul_kernel[(tessera.cdiv(n, cfg[0]), tessera.cdiv(n, cfg[1]))](
                a, b, c, n, n, n, n, 1, n, 1, n, 1, BLOCK_M=cfg[0], BLOCK_N=cfg[1], BLOCK_K=cfg[2])

        ok, err = check(name, c, tess, ref, tol=1e-5)
        fns, status = {}, {name: "ok" if ok else f"WRONG (rel err {err:.2g})"}
        if ok:
            fns[name] = tess
        fns["numpy astype(f32) @ (BLAS)"] = lambda a=a, b=b, c=c: np.matmul(a.astype(np.float32),
                                                                          b.astype(np.float32), out=c)
        status["numpy astype(f32) @ (BLAS)"] = "ok"
        if torch is not None and n > 1024:
            status["torch.mm f16 (f16 out)"] = "skipped (~100 s per call: no fp16 BLAS on this CPU)"
        elif torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            tc = torch.empty((n, n), dtype=torch.float16)
            fns["torch.mm f16 (f16 out)"] = lambda ta=ta, tb=tb, tc=tc: torch.mm(ta, tb, out=tc)
            fns["torch.mm f16 (f16 out)"]()
            e = rel_error(tc.float().numpy(), ref)
            status["torch.mm f16 (f16 out)"] = "ok" if e < 2e-3 else f"WRONG (rel err {e:.2g})"
        t = measure_round_robin(fns, repeats=8, rounds=2 if n > 1024 else 4, budget_s=3.0)
        np_t = t["numpy astype(f32) @ (BLAS)"].min
        for impl in status:
            tm = t.get(impl)
            if tm is None:
                rows.append([n, impl, NA, NA, NA, NA, status[impl]])
                continue
            g = flops / tm.min / 1e9
            rows.append([n, impl, tm.min * 1e3, g, flops / tm.median / 1e9, np_t / tm.min, status[impl]])
            sec.records.append({"n": n, "impl": impl, "dtype": "f16", "best_GFLOPs": g,
                                "ratio_to_numpy_f32_route": np_t / tm.min, **tm.as_dict(), "status": status[impl]})
    sec.table("matmul fp16 inputs (fp32 accumulate), M=N=K",
              ["n", "impl", "best ms", "best GFLOP/s", "median GFLOP/s", "vs numpy route", "check"], rows)
