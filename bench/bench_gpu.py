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


# --- Tessera kernels ----------------------------------------------------------------
@tessera.kernel
def t_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@tessera.kernel
def t_softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=m, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=m)


# --- Triton kernels (the peer) ----------------------------------------------------------
if triton is not None:
    @triton.jit
    def tr_add(x_ptr, y_ptr, out_ptr, n, BLOCK: ttl.constexpr):
        offs = ttl.program_id(0) * BLOCK + ttl.arange(0, BLOCK)
        m = offs < n
        ttl.store(out_ptr + offs, ttl.load(x_ptr + offs, mask=m) + ttl.load(y_ptr + offs, mask=m), mask=m)

    @triton.jit
    def tr_softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: ttl.constexpr):
        row = ttl.program_id(0)
        cols = ttl.arange(0, BLOCK)
        m = cols < n_cols
        x = ttl.load(in_ptr + row * stride + cols, mask=m, other=-float("inf")).to(ttl.float32)
        z = x - ttl.max(x, axis=0)
        num = ttl.exp(z)
        y = num / ttl.sum(num, axis=0)
        ttl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=m)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    dev = torch.cuda.get_device_name()
    rows, notes = [], []

    n = 2**27
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    o = torch.empty_like(a)
    copy_ms = do_bench(lambda: o.copy_(a))
    copy_bw = gbps(2 * a.numel() * 4, copy_ms)
    rows.append(("device copy fp32 2^27 (torch)", copy_bw, None, None, ""))

    def check_add():
        torch.testing.assert_close(o, a + b)
    t_ms, err = try_bench(lambda: t_add[(triton.cdiv(n, 1024) if triton else (n + 1023) // 1024,)](a, b, o, n, BLOCK=1024),
                          check_add)
    torch_ms = do_bench(lambda: torch.add(a, b, out=o))
    tr_ms = do_bench(lambda: tr_add[((n + 1023) // 1024,)](a, b, o, n, BLOCK=1024)) if triton else None
    nbytes = 3 * n * 4
    rows.append(("vector add fp32 2^27", gbps(nbytes, t_ms) if t_ms else None, gbps(nbytes, torch_ms),
                 gbps(nbytes, tr_ms) if tr_ms else None, err))

    for dtype in (torch.float32, torch.float16):
        x = torch.randn(16384, 4096, device="cuda", dtype=dtype)
        y = torch.empty_like(x)

        def check_sm():
            torch.testing.assert_close(y.float(), torch.softmax(x.float(), 1), atol=2e-3, rtol=2e-3)
        t_ms, err = try_bench(lambda: t_softmax[(x.shape[0],)](y, x, x.stride(0), x.shape[1], BLOCK=4096,
                                                               num_warps=16), check_sm)
        torch_ms = do_bench(lambda: torch.softmax(x, 1, out=y) if False else y.copy_(torch.softmax(x, 1)))
        tr_ms = (do_bench(lambda: tr_softmax[(x.shape[0],)](y, x, x.stride(0), x.shape[1], BLOCK=4096,
                                                              num_warps=16)) if triton else None)
        nbytes = 2 * x.numel() * x.element_size()
        name = f"softmax {str(dtype).split('.')[-1]} 16384x4096"
        rows.append((name, gbps(nbytes, t_ms) if t_ms else None, gbps(nbytes, torch_ms),
                     gbps(nbytes, tr_ms) if tr_ms else None, err))

    lines = [f"# GPU benchmark — {dev}", "", "GB/s (bytes that must be read + written); "
             f"device copy {copy_bw:.0f} GB/s", "",
             "| kernel | tessera | torch | triton | tessera / copy | note |", "|---|---|---|---|---|---|"]
    for name, t, to, tr, err in rows:
        f = lambda v: f"{v:.0f}" if v else "n/a"
        ratio = f"{t / copy_bw:.2f}" if t else "n/a"
        lines.append(f"| {name} | {f(t)} | {f(to)} | {f(tr)} | {ratio} | {err} |")
    text = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(args.out, "gpu.json"), "w") as fh:
        json.dump({"device": dev, "rows": rows}, fh, indent=1)
    print(text)


if __name__ == "__main__":
    main()
