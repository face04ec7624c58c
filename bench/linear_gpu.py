"""tessera.kernels' matmul ops on a GPU next to cuBLAS alone: linear_relu / linear_gelu
(forward, and the dX = dZ W and dW = dZ^T X products of the backward pass) and
attention_score, each beside the bare cuBLAS product of the same shape (torch.mm /
torch.bmm: what issue 5's "linear_relu >= 95% of cuBLAS matmul time alone" compares
with), torch eager's unfused op and the same tk sources compiled by Triton; one run.

    python bench/linear_gpu.py [--dtype float16] [--sweep] [--shapes MxKxN,...] [--tag linear] [--out bench/results]

--sweep also times every candidate tile configuration of kernels/linear.py's matmul
kernel on each product (what _gpu_tiles was chosen from). Writes
kernels_cuda_<dtype>_linear.{md,json}."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import cuda_host_us, machine_info, RESULTS_DIR, table_lines  # noqa: E402
from kernels import load_triton_tk, measure_cuda_events  # noqa: E402  (bench/kernels.py)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tessera.kernels as tk  # noqa: E402
from tessera.kernels import attention as AT  # noqa: E402
from tessera.kernels import linear as L  # noqa: E402

PP = {"warp_specialize": True, "ping_pong": True}
SWEEP = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, GROUP_M, persistent CTAs per SM or 0)
    (128, 128, 64, 8, 3, 1, 0), (128, 256, 64, 8, 4, 1, 0), (128, 256, 32, 8, 8, 1, 0), (256, 128, 64, 16, 4, 1, 0),
    # _persistent_matmul_kernel: the ring runs across a program's tiles. From 4 stages a
    # wgmma group stays in flight (the tile's last step waits for it in its epilogue
    # branch); 128x256x64 fitted only 3 stages next to the epilogue's whole-tile store buffer
    # (before store_through_smem's column chunks), so
    # 128x256 in flight takes 32-wide K steps (6 stages of 24 KB).
    (128, 256, 64, 8, 3, 1, 1), (128, 128, 64, 8, 4, 1, 1), (128, 256, 32, 8, 6, 1, 1), (256, 128, 32, 16, 6, 1, 1),
    (128, 128, 64, 8, 2, 1, 2),
    # Warp-specialized (a producer warp issues the TMA copies and runs ahead across tiles,
    # compiler/codegen/nvptx/warp_specialize_nvptx.cpp): persistent only.
    # (16-bit outputs leave through TMA stores, compiler/codegen/nvptx/tma_store_nvptx.cpp:
    # 128x64 column chunks through 16 KB swizzled buffers beside the ring, which it cannot
    # lend while the producer fills the next tile's stages -- 3 stages hold all four chunks'
    # buffers, 4 stages two, reused as each chunk's copy finishes reading its buffer.)
    (128, 256, 64, 8, 3, 1, 1, True), (128, 256, 64, 8, 4, 1, 1, True), (128, 256, 32, 8, 6, 1, 1, True), (128, 128, 64, 8, 4, 1, 1, True),
    (128, 128, 64, 8, 3, 1, 2, True), (256, 128, 64, 16, 3, 1, 1, True),
    # grouped tile order (GROUP_M rows of tiles share B's columns in L2) for the specialized 128x256
    (128, 256, 64, 8, 4, 4, 1, True), (128, 256, 64, 8, 4, 8, 1, True),
    # Small M (one 64-row block, _gpu_tiles' small-M branch): one warpgroup (wgmma m64), the
    # K range split over {"split_k": S} programs per tile (_split_k_matmul_kernel), or not.
    # (The first sweep, bench/results/kernels_cuda_float16_linalign_run1.log, also tried
    # 64x64 s2 split8, 64x128 s4 split4/8, 64x32 s4 split4, 64x32 s6 split2, 64x16 s8: all
    # 0.61-0.79 of cuBLAS GPU-queued at 17x1024x2048, behind 64x64 s4 split4's 0.84.)
    (64, 64, 64, 4, 4, 1, 0, {"split_k": 4}), (64, 64, 64, 4, 5, 1, 0, {"split_k": 4}),
    (64, 64, 64, 4, 4, 1, 0, {"split_k": 2}), (64, 64, 64, 4, 8, 1, 0, {"split_k": 2}),
    (64, 32, 64, 4, 8, 1, 0, {"split_k": 2}), (64, 16, 64, 4, 8, 1, 0, {"split_k": 2}),
    (64, 64, 64, 4, 4, 1, 0), (64, 32, 64, 4, 12, 1, 0), (64, 16, 64, 4, 16, 1, 0),
    # Ping-pong (compiler/codegen/nvptx/ping_pong_nvptx.cpp): two consumer warpgroups, each
    # with its own 64x256 tile (num_warps 4 is one warpgroup's), take the tiles in turn.
    (64, 256, 64, 4, 4, 1, 1, PP), (64, 256, 64, 4, 3, 1, 1, PP), (64, 256, 64, 4, 4, 8, 1, PP),
]


def measure_queued(fns, calls=50, rounds=5, sleep_cycles=20_000_000):
    """GPU seconds per call with the host out of the picture: each batch of `calls`
    back-to-back calls is queued behind a torch.cuda._sleep of `sleep_cycles` GPU
    clocks (~10 ms), so the events around the batch time the GPU's work alone, as long
    as the host queued the whole batch before the sleep ended (checked: a name whose
    queuing outlasted the sleep is reported in the second result). Round-robin over the
    implementations, best of `rounds`. (best seconds per name, names that underran)."""
    best, underran = {}, set()
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, fn in fns.items():
            e0, s, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            e0.record()
            torch.cuda._sleep(sleep_cycles)
            s.record()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            host_ms = (time.perf_counter() - t0) * 1e3
            e.record()
            torch.cuda.synchronize()
            if host_ms >= e0.elapsed_time(s):
                underran.add(name)
            t = s.elapsed_time(e) / calls / 1e3
            best[name] = min(best.get(name, t), t)
    return best, underran


def products(dtype, m=4096, k=1024, n=2048, heads=8, seq=2048, d=64):
    """name -> (flops, tk product through L.matmul given tiles, cuBLAS alone)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).to("cuda", dtype)  # noqa: E731
    x, w, dz, b = r(m, k), r(n, k, sc=k ** -0.5), r(m, n), r(n)
    q, kk = r(heads, seq, d), r(heads, seq, d)
    xs, ws, zs, qs, ks = (x.stride(), w.stride(), dz.stride(), q.stride(), kk.stride())
    return {
        f"fwd relu(x@W^T+b) {m}x{k}x{n}": (2 * m * n * k,
                                           lambda t: L.matmul(x, w, (0,) + xs, (0, ws[1], ws[0]), 1, m, n, k, x,
                                                              bias=b, act=L.ACT_RELU, tiles=t),
                                           lambda: torch.mm(x, w.t())),
        f"fwd gelu(x@W^T+b) {m}x{k}x{n}": (2 * m * n * k,
                                           lambda t: L.matmul(x, w, (0,) + xs, (0, ws[1], ws[0]), 1, m, n, k, x,
                                                              bias=b, act=L.ACT_GELU, tiles=t),
                                           lambda: torch.mm(x, w.t())),
        f"dX dZ@W {m}x{n}x{k}": (2 * m * n * k,
                                 lambda t: L.matmul(dz, w, (0,) + zs, (0,) + ws, 1, m, k, n, x, tiles=t),
                                 lambda: torch.mm(dz, w)),
        f"dW dZ^T@X {n}x{m}x{k}": (2 * m * n * k,
                                   lambda t: L.matmul(dz, x, (0, zs[1], zs[0]), (0,) + xs, 1, n, k, m, w, tiles=t),
                                   lambda: torch.mm(dz.t(), x)),
        f"score q@k^T {heads}x{seq}x{seq}x{d}": (2 * heads * seq * seq * d,
                                                 lambda t: L.matmul(q, kk, qs, (ks[0], ks[2], ks[1]), heads, seq, seq,
                                                                    d, q, scale=0.125, tiles=t),
                                                 lambda: torch.bmm(q, kk.transpose(1, 2))),
        **{f"fwd relu(x@W^T+b) {m2}x{k2}x{n2}": _linear_product(r, m2, k2, n2)
           for (m2, k2, n2) in ((8192, 4096, 4096), (4097, 1000, 1030), (8192, 64, 4096), (17, 1024, 2048))},
    }


def _linear_product(r, m, k, n):
    """(flops, tk relu(x @ W^T + b) given tiles, cuBLAS x @ W^T) on fresh inputs."""
    x, w, b = r(m, k), r(n, k, sc=k ** -0.5), r(n)
    xs, ws = x.stride(), w.stride()
    return (2 * m * n * k,
            lambda t: L.matmul(x, w, (0,) + xs, (0, ws[1], ws[0]), 1, m, n, k, x, bias=b, act=L.ACT_RELU, tiles=t),
            lambda: torch.mm(x, w.t()))


def sweep(dtype, only="", configs=""):
    rows = []
    for name, (flops, f_tk, f_cublas) in products(dtype).items():
        if only and not any(o in name for o in only.split(",")):
            continue
        fns = {"cuBLAS": f_cublas}
        for (bm, bn, bk, w, s, g, per_sm, *extra) in SWEEP:
            if dtype == torch.float32 and bk > 32:
                continue
            extra = extra[0] if extra else {}
            extra = {"warp_specialize": True} if extra is True else extra  # True: warp-specialized
            cfg_name = f"{bm}x{bn}x{bk} w{w} s{s} g{g}" + (f" persistent x{per_sm}" if per_sm else "") + \
                (" ws" if extra.get("warp_specialize") else "") + (" pingpong" if extra.get("ping_pong") else "") + \
                (f" split{extra['split_k']}" if "split_k" in extra else "")
            if configs and not any(c in cfg_name for c in configs.split(",")):
                continue
            t = (bm, bn, bk, {"num_warps": w, "num_stages": s, "GROUP_M": g, **({"persistent": per_sm} if per_sm else {}),
                              **extra})
            fns[cfg_name] = (lambda t=t, f=f_tk: f(t))
        fns["heuristic"] = lambda f=f_tk: f(None)
        with torch.no_grad():
            res = measure_cuda_events(fns)
            q, underran = measure_queued(fns)
        base, qbase = res["cuBLAS"].min, q["cuBLAS"]
        for cfg, tm in res.items():
            rows.append([name, cfg, tm.min * 1e3, flops / tm.min / 1e12, base / tm.min, q[cfg] * 1e3,
                         flops / q[cfg] / 1e12, qbase / q[cfg], "host underran" if cfg in underran else "ok"])
            print(f"{name:34s} {cfg:36s} {tm.min * 1e3:8.4f} ms {flops / tm.min / 1e12:7.1f} TFLOP/s "
                  f"cuBLAS/this {base / tm.min:5.2f} | queued {q[cfg] * 1e3:8.4f} ms cuBLAS/this "
                  f"{qbase / q[cfg]:5.2f}{' UNDERRAN' if cfg in underran else ''}", flush=True)
    return rows


def ops_table(dtype, triton, only="", base=None):
    """The library ops as a user calls them, beside cuBLAS alone and torch eager (and
    `base`, another copy of tessera.kernels, when given: --baseline)."""
    g = torch.Generator(device="cpu").manual_seed(1)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).to("cuda", dtype)  # noqa: E731
    tkt = load_triton_tk() if triton else None
    rows = []
    shapes = [(4096, 1024, 2048), (8192, 4096, 4096), (4097, 1000, 1030), (17, 1024, 2048)]
    if only:
        shapes = [tuple(int(v) for v in s.split("x")) for s in only.split(",")]
    for (m, k, n) in shapes:
        x, w, b = r(m, k), r(n, k, sc=k ** -0.5), r(n)
        for op, f_tk, f_torch in (("linear_relu", tk.linear_relu, lambda: F.relu(F.linear(x, w, b))),
                                  ("linear_gelu", tk.linear_gelu, lambda: F.gelu(F.linear(x, w, b)))):
            fns = {"tk": lambda f=f_tk: f(x, w, b), "cuBLAS mm alone": lambda: torch.mm(x, w.t()),
                   "torch eager": f_torch}
            if tkt is not None:
                fns["triton (same source)"] = lambda op=op: getattr(tkt, op)(x, w, b)
            if base is not None:
                fns["tk base"] = lambda op=op: getattr(base, op)(x, w, b)
            rows.append(_row(op, f"{m}x{k} @ {n}x{k}^T", 2 * m * n * k, fns, dtype, (x, w, b), op, base))
    if only:
        return rows
    q, kk = r(8, 2048, 64), r(8, 2048, 64)
    fns = {"tk": lambda: tk.attention_score(q, kk, 0.125), "cuBLAS mm alone": lambda: torch.bmm(q, kk.transpose(1, 2)),
           "torch eager": lambda: q @ kk.transpose(-1, -2) * 0.125}
    if tkt is not None:
        fns["triton (same source)"] = lambda: tkt.attention_score(q, kk, 0.125)
    if base is not None:
        fns["tk base"] = lambda: base.attention_score(q, kk, 0.125)
    rows.append(_row("attention_score", "8x2048x64", 2 * 8 * 2048 * 2048 * 64, fns, dtype, (q, kk), "attention_score",
                     base))
    return rows


def _row(op, shape, flops, fns, dtype, inputs, name, base=None):
    if "triton (same source)" in fns:  # a peer that fails to compile leaves its column empty, not the run
        try:
            with torch.no_grad():
                fns["triton (same source)"]()
        except Exception as exc:  # noqa: BLE001
            print(f"{op} {shape}: Triton failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            del fns["triton (same source)"]
    with torch.no_grad():
        ref = fns["torch eager"]().double()
        got = fns["tk"]().double()
        err = (got - ref).abs().max().item() / max(1.0, ref.abs().max().item())
        res = {k: v.min for k, v in measure_cuda_events(fns).items()}
        q, underran = measure_queued({k: fns[k] for k in ("tk", "cuBLAS mm alone")})
        hus = cuda_host_us(fns["tk"])
        base_hus = cuda_host_us(fns["tk base"]) if "tk base" in fns else None
    fb = {}
    leaves = [i.detach().clone().requires_grad_(True) for i in inputs]
    f_tk = {"linear_relu": tk.linear_relu, "linear_gelu": tk.linear_gelu,
            "attention_score": lambda a, b_: tk.attention_score(a, b_, 0.125)}[name]
    f_tr = {"linear_relu": lambda a, w_, b_: F.relu(F.linear(a, w_, b_)),
            "linear_gelu": lambda a, w_, b_: F.gelu(F.linear(a, w_, b_)),
            "attention_score": lambda a, b_: a @ b_.transpose(-1, -2) * 0.125}[name]
    impls = [("tk", f_tk), ("torch eager", f_tr)]
    if base is not None:
        impls.append(("tk base", {"linear_relu": base.linear_relu, "linear_gelu": base.linear_gelu,
                                  "attention_score": lambda a, b_: base.attention_score(a, b_, 0.125)}[name]))
    for key, f in impls:
        def run(f=f):
            for lf in leaves:
                lf.grad = None
            y = f(*leaves)
            y.backward(torch.ones_like(y))
        fb[key] = run
    resb = {k: v.min for k, v in measure_cuda_events(fb).items()}
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    row = [op, shape, res["tk"] * 1e3, res["cuBLAS mm alone"] * 1e3, res["torch eager"] * 1e3,
           res["triton (same source)"] * 1e3 if "triton (same source)" in res else "n/a",
           flops / res["tk"] / 1e12, res["cuBLAS mm alone"] / res["tk"], res["torch eager"] / res["tk"],
           q["tk"] * 1e3, q["cuBLAS mm alone"] * 1e3,
           (f"{q['cuBLAS mm alone'] / q['tk']:.3f}" + (" (host underran)" if underran else "")), hus,
           resb["tk"] * 1e3, resb["torch eager"] * 1e3, resb["torch eager"] / resb["tk"],
           "ok" if err < tol else f"WRONG ({err:.2g})"]
    if base is not None:  # before/after columns of the same run (--baseline)
        row[-1:-1] = [res["tk base"] * 1e3, res["tk base"] / res["tk"], base_hus, resb["tk base"] * 1e3,
                      resb["tk base"] / resb["tk"]]
    print(" | ".join(str(round(v, 4)) if isinstance(v, float) else str(v) for v in row), flush=True)
    return row


def host_profile(dtype, calls, only=""):
    """[(title, lines)]: cProfile of `calls` back-to-back calls of tk.linear_relu and
    linear_gelu (forward) and of linear_relu's fwd+bwd at the ops table's first shape,
    functions by own time (the C++ launch is inside the bound launch's call)."""
    import cProfile
    import io
    import pstats
    m, k, n = tuple(int(v) for v in only.split(",")[0].split("x")) if only else (4096, 1024, 2048)
    g = torch.Generator(device="cpu").manual_seed(3)
    x, w, b = (torch.randn(*s, generator=g).to("cuda", dtype) for s in ((m, k), (n, k), (n,)))
    xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))

    def fwd_bwd():
        y = tk.linear_relu(xg, wg, bg)
        y.backward(torch.ones_like(y))
    out = []
    for name, fn in (("linear_relu", lambda: tk.linear_relu(x, w, b)), ("linear_gelu", lambda: tk.linear_gelu(x, w, b)),
                     ("linear_relu fwd+bwd", fwd_bwd)):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(calls):
            fn()
        pr.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(pr, stream=text).sort_stats("tottime").print_stats(14)
        lines = [ln for ln in text.getvalue().splitlines() if ln.strip()][-16:]
        title = f"cProfile of {calls} calls of {name} {m}x{k}x{n} (--profile; own time, profiler overhead included):"
        print(title, *lines, sep="\n", flush=True)
        out.append((title, lines))
    return out


def backward_table(dtype):
    """The backward's products beside their peers (one process): dW = dZ^T X (split-K, the
    shipped plan, and single-pass tiles) beside cuBLAS's torch.mm(dz.t(), x); linear's
    whole backward (dX, dW: two products) beside torch's two mms; attention_score's
    backward (one launch of both products, in each candidate tiling, and the two matmul
    launches it replaced) beside torch's two bmms and a copy of the model's bytes
    (bench/kernels.py backward_bytes: read q, k, ds once, write dq, dk)."""
    g = torch.Generator(device="cpu").manual_seed(2)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).to("cuda", dtype)  # noqa: E731
    rows = []

    def emit(product, flops, fns, peer, check=None):
        with torch.no_grad():
            res = {k: v.min for k, v in measure_cuda_events(fns).items()}
            q, underran = measure_queued(fns)
        for cfg in fns:
            rows.append([product, cfg, res[cfg] * 1e3, flops / res[cfg] / 1e12 if flops else "", res[peer] / res[cfg],
                         q[cfg] * 1e3, q[peer] / q[cfg], check(cfg) if check else "",
                         "host underran" if cfg in underran else "ok"])
            print(" | ".join(str(round(v, 4)) if isinstance(v, float) else str(v) for v in rows[-1]), flush=True)

    for (m, k, n) in ((4096, 1024, 2048), (8192, 4096, 4096)):
        x, w, dz = r(m, k), r(n, k, sc=k ** -0.5), r(m, n)
        zs, xs = dz.stride(), x.stride()
        a_st, b_st = (0, zs[1], zs[0]), (0,) + xs
        want = torch.mm(dz.t(), x).double()
        outs = {}

        def split(tiles, key):
            kernel, grid, sizes, meta = L._split_k_launch(a_st, b_st, n, k, m, w, tiles)
            dw = torch.empty(n, k, device="cuda", dtype=dtype)
            kernel[grid](dz, x, dw, dw, dw, torch.empty(2, n, k, device="cuda"), L.H.arrival_counters(dw, grid[0]),
                         *sizes, **meta)
            outs[key] = dw
            return dw

        def single(tiles, key):
            outs[key] = L.matmul(dz, x, a_st, b_st, 1, n, k, m, w, tiles=tiles)[0]
            return outs[key]

        plan = L._linear_bwd_plan(x, w, dz, False)

        def planned():
            dw = torch.empty(n, k, device="cuda", dtype=dtype)
            L._weight_gradient(plan, dz, x, dw)
            return dw
        fns = {"cuBLAS mm(dz^T, x)": lambda: torch.mm(dz.t(), x), "tk linear_backward's dW plan": planned}
        # Candidates: split-K (two halves) and one program per tile. At 4096x4096x8192 the
        # splits ran 0.66-0.79 of cuBLAS in run 2 (extra partial traffic): one pass only.
        splits = ((256, 4), (128, 3)) if (m, k, n) == (4096, 1024, 2048) else ()
        for bn, st in splits:
            t = (128, bn, 64, {"num_warps": 8, "num_stages": st})
            fns[f"split-K 2, 128x{bn}x64 s{st}"] = lambda t=t, kk=f"s{bn}{st}": split(t, kk)
        one_pass = ((128, 4), (256, 4)) + (((128, 5), (128, 6)) if splits else ())
        for bn, st in one_pass:
            t = (128, bn, 64, {"num_warps": 8, "num_stages": st})
            fns[f"one pass, 128x{bn}x64 s{st}"] = lambda t=t, kk=f"o{bn}{st}": single(t, kk)

        def check(cfg):
            if cfg.startswith("cuBLAS"):
                return ""
            got = fns[cfg]().double()
            err = (got - want).abs().max().item() / max(1.0, want.abs().max().item())
            return "ok" if err < 2e-2 else f"WRONG ({err:.2g})"
        emit(f"dW dZ^T@X {n}x{k}x{m}", 2 * m * n * k, fns, "cuBLAS mm(dz^T, x)", check)
        emit(f"linear backward dX + dW {m}x{k} @ {n}x{k}^T", 4 * m * n * k,
             {"torch mm(dz, W) + mm(dz^T, x)": lambda: (torch.mm(dz, w), torch.mm(dz.t(), x)),
              "tk linear_backward (no activation, no bias)": lambda: L.linear_backward(x, w, dz, dz, L.ACT_NONE,
                                                                                       False)},
             "torch mm(dz, W) + mm(dz^T, x)")

    heads, seq, d = 8, 2048, 64
    q, kk, ds = r(heads, seq, d), r(heads, seq, d), r(heads, seq, seq)
    model = (2 * q.numel() + 2 * kk.numel() + ds.numel()) * q.element_size()
    src = torch.empty(model // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    want = (ds.double() @ kk.double() * 0.125, ds.double().transpose(1, 2) @ q.double() * 0.125)
    shipped = AT.SCORE_BACKWARD_TILES

    def fused(cfg):
        AT.SCORE_BACKWARD_TILES = cfg
        try:
            return AT.attention_score_backward(q, kk, ds, 0.125)
        finally:
            AT.SCORE_BACKWARD_TILES = shipped

    def two_launches():
        qs, ks, dss = q.stride(), kk.stride(), ds.stride()
        dq, _ = L.matmul(ds, kk, dss, ks, heads, seq, d, seq, q, scale=0.125)
        dk, _ = L.matmul(ds, q, (dss[0], dss[2], dss[1]), qs, heads, seq, d, seq, q, scale=0.125)
        return dq, dk

    fns = {f"copy of the model's {model / 1e6:.0f} MB": lambda: dst.copy_(src),
           "torch bmm(ds, k) + bmm(ds^T, q) (no scale)": lambda: (torch.bmm(ds, kk), torch.bmm(ds.transpose(1, 2), q)),
           "tk two matmul launches (before)": two_launches}
    # (BLOCK_K 128 would give ds K-major rows of 256 bytes, which wgmma does not read: mma.sync)
    for cfg in ((128, 64, 8, 3), (64, 64, 4, 6), (256, 64, 16, 3), (128, 32, 8, 6), (128, 32, 8, 8),
                (64, 32, 4, 8)):
        fns[f"tk one launch {cfg[0]}x{d}x{cfg[1]} w{cfg[2]} s{cfg[3]}"] = lambda cfg=cfg: fused(cfg)

    def check_score(cfg):
        if not cfg.startswith("tk"):
            return ""
        got = fns[cfg]()
        err = max((g_.double() - w_).abs().max().item() / max(1.0, w_.abs().max().item()) for g_, w_ in zip(got, want))
        return "ok" if err < 2e-2 else f"WRONG ({err:.2g})"
    emit(f"attention_score backward {heads}x{seq}x{seq}x{d}", 2 * 2 * heads * seq * seq * d, fns,
         f"copy of the model's {model / 1e6:.0f} MB", check_score)
    return rows


BACKWARD_HEADER = ["product", "config", "ms", "TFLOP/s", "peer / this", "GPU-queued ms", "GPU-queued peer / this",
                   "check", "queue"]
HEADER = ["op", "shape", "tk ms", "cuBLAS mm alone ms", "torch eager ms", "triton ms", "tk TFLOP/s",
          "cuBLAS alone / tk", "torch / tk", "tk GPU-queued ms", "cuBLAS GPU-queued ms", "cuBLAS / tk GPU-queued",
          "tk host us/call", "tk fwd+bwd ms", "torch fwd+bwd ms", "torch/tk fwd+bwd", "check"]
BASE_HEADER = ["tk base ms", "tk base / tk", "tk base host us/call", "tk base fwd+bwd ms", "tk base / tk fwd+bwd"]
SWEEP_HEADER = ["product", "config", "ms", "TFLOP/s", "cuBLAS / this", "GPU-queued ms", "GPU-queued TFLOP/s",
                "GPU-queued cuBLAS / this", "queue"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--no-ops", action="store_true", help="only the sweep")
    ap.add_argument("--no-triton", dest="triton", action="store_false")
    ap.add_argument("--out", default=RESULTS_DIR)
    ap.add_argument("--tag", default="linear", help="results go to kernels_cuda_<dtype>_<tag>.{md,json}")
    ap.add_argument("--products", default="", help="sweep only the products whose names contain one of these "
                    "comma-separated strings (e.g. 'fwd,dW')")
    ap.add_argument("--configs", default="", help="sweep only the tile configurations whose names contain one of "
                    "these comma-separated strings (e.g. 'ws,w8 s4 g1')")
    ap.add_argument("--backward", action="store_true", help="the backward products beside their peers")
    ap.add_argument("--shapes", default="", help="only these linear shapes of the ops table, e.g. 4096x1024x2048 "
                    "(M x K x N, comma-separated); attention_score only when empty")
    ap.add_argument("--baseline", default="", help="a folder with another copy of tessera.kernels (e.g. an older "
                    "commit's), timed in the same run: 'tk base' columns")
    ap.add_argument("--profile", type=int, default=0, help="cProfile this many calls of each linear op at the first "
                    "shape (host functions by own time)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    base = None
    if args.baseline:
        from host_time import load_baseline
        base = load_baseline(args.baseline)
    prof = host_profile(dtype, args.profile, args.shapes) if args.profile else []
    sw = sweep(dtype, args.products, args.configs) if args.sweep else []
    bw = backward_table(dtype) if args.backward else []
    ops = [] if args.no_ops else ops_table(dtype, args.triton, args.shapes, base)
    machine = machine_info()
    machine["gpu"] = torch.cuda.get_device_name()
    tag = f"kernels_cuda_{args.dtype}_{args.tag}"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, tag + ".json"), "w") as fh:
        json.dump({"machine": machine, "args": vars(args), "ops": ops, "sweep": sw, "backward": bw}, fh, indent=1,
                  default=str)
    md = [f"# tessera.kernels matmul ops vs cuBLAS alone ({args.dtype}, {machine['gpu']})", "",
          f"Generated by `python bench/linear_gpu.py {' '.join(sys.argv[1:])}` on "
          f"{machine['date']}. GPU time per call from CUDA events around batches of back-to-back calls, best "
          "of 5 round-robin batches. 'cuBLAS alone / tk' >= 1: tk (matmul + bias + activation, fused) is at "
          "least as fast as cuBLAS's bare product of the same shape (torch.mm / torch.bmm). 'tk host us/call': "
          "host time of one tk call without synchronization (when it exceeds the GPU time, the GPU waits "
          "for the host). 'GPU-queued': batches of 50 calls queued behind a ~10 ms GPU sleep, so the "
          "events time the GPU's work alone (best of 5; 'host underran' if the host had not queued the "
          "batch before the sleep ended).", ""]
    if ops:
        if base is not None:
            md += [f"'tk base': the copy of tessera.kernels in {args.baseline}, timed in the same run.", ""]
        md += table_lines(HEADER[:-1] + (BASE_HEADER if base is not None else []) + HEADER[-1:], ops, markdown=True)
    for title, lines in prof:
        md += ["", title, "", "```"] + lines + ["```"]
    if sw:
        md += ["", "Tile configurations of kernels/linear.py's matmul kernel on each product (--sweep):", ""]
        md += table_lines(SWEEP_HEADER, sw, markdown=True)
    if bw:
        md += ["", "Backward products (--backward; 'peer': the first row of each product's group):", ""]
        md += table_lines(BACKWARD_HEADER, bw, markdown=True)
    with open(os.path.join(args.out, tag + ".md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(f"wrote {os.path.join(args.out, tag)}.{{md,json}}")


if __name__ == "__main__":
    main()
