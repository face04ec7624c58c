"""Per-element cost of the CPU benchmark kernels on one thread, and the size of
their hot loops in the generated assembly: the numbers to judge a code-generation
change by on a noisy shared machine (wall-clock bests drift by tens of percent;
one thread's CPU time and an instruction count do not).

    python bench/cpu_cycles.py [--only add,copy,softmax,layernorm,passes] [--repeats 7] [--asm]

For each kernel: ns per element (min over repeats of process_time per call, one
thread; the "cycles" column multiplies by the nominal clock from /proc/cpuinfo, a
VM's turbo makes it approximate), at a size resident in L2 (the code's cost) and
at L3 and DRAM sizes (what the memory system lets through one core). --asm prints, for
every loop in the kernel, its instruction count and its vector loads / stores.
`passes` splits softmax into its loop nests by difference: the max alone, max + exp
and sum (the exp buffer not written), and the whole kernel (+ the buffer write, the
division and the store), in L2 and from DRAM.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

os.environ["TESSERA_NUM_THREADS"] = "1"  # before tessera starts its pool
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from common import copy_kernel, tessera, tl  # noqa: E402
from elementwise import add_kernel  # noqa: E402
from layernorm import EPS, layernorm_kernel  # noqa: E402
from softmax import softmax_kernel  # noqa: E402


@tessera.kernel
def softmax_max_pass(m_ptr, in_ptr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(in_ptr + row * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE))
    tl.store(m_ptr + row, tl.max(x, axis=0))


@tessera.kernel
def softmax_max_exp_sum_passes(s_ptr, in_ptr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(in_ptr + row * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE))
    tl.store(s_ptr + row, tl.sum(tl.exp(x - tl.max(x, axis=0)), axis=0))


def nominal_ghz():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1]) / 1e3
    except OSError:
        pass
    return None


def cpu_time_per_call(fn, repeats, min_s=0.05):
    fn()
    inner = 1
    while True:
        t = time.process_time()
        for _ in range(inner):
            fn()
        dt = time.process_time() - t
        if dt >= min_s:
            break
        inner *= 2
    best = dt / inner
    for _ in range(repeats - 1):
        t = time.process_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.process_time() - t) / inner)
    return best


def cases(only):
    rng = np.random.default_rng(0)
    out = []
    if "copy" in only or "add" in only:
        for n in (1 << 16, 1 << 24):
            x = rng.standard_normal(n, dtype=np.float32)
            y = rng.standard_normal(n, dtype=np.float32)
            o = np.empty_like(x)
            grid = (tessera.cdiv(n, 4096),)
            if "copy" in only:
                out.append((f"copy {n}", n, lambda x=x, o=o, n=n, g=grid: copy_kernel[g](x, o, n, BLOCK_SIZE=4096),
                            lambda x=x, o=o: np.array_equal(o, x)))
            if "add" in only:
                out.append((f"add {n}", n, lambda x=x, y=y, o=o, n=n, g=grid: add_kernel[g](x, y, o, n, BLOCK_SIZE=4096),
                            lambda x=x, y=y, o=o: np.array_equal(o, x + y)))
    for rows in (16, 1024, 4096):
        x = rng.standard_normal((rows, 4096), dtype=np.float32) * 4
        o = np.empty_like(x)
        if "softmax" in only:
            def sm(x=x, o=o):
                softmax_kernel[(x.shape[0],)](o, x, 4096, 4096, 4096, BLOCK_SIZE=4096)

            def sm_ok(x=x, o=o):
                e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
                return np.abs(o - e / e.sum(1, keepdims=True)).max() < 1e-6
            out.append((f"softmax {rows}x4096", x.size, sm, sm_ok))
        if "passes" in only and rows != 1024:
            m = np.empty(rows, np.float32)

            def sm_max(x=x, m=m):
                softmax_max_pass[(x.shape[0],)](m, x, BLOCK_SIZE=4096)

            def sm_exp(x=x, m=m):
                softmax_max_exp_sum_passes[(x.shape[0],)](m, x, BLOCK_SIZE=4096)

            def sm_all(x=x, o=o):
                softmax_kernel[(x.shape[0],)](o, x, 4096, 4096, 4096, BLOCK_SIZE=4096)
            e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
            out.append((f"  max {rows}x4096", x.size, sm_max, lambda x=x, m=m: np.array_equal(m, x.max(1))))
            out.append((f"  max+exp+sum {rows}x4096", x.size, sm_exp,
                        lambda m=m, e=e: np.allclose(m, e.sum(1), rtol=1e-5)))
            out.append((f"  all {rows}x4096", x.size, sm_all,
                        lambda o=o, e=e: np.abs(o - e / e.sum(1, keepdims=True)).max() < 1e-6))
        if "layernorm" in only:
            w = rng.standard_normal(4096, dtype=np.float32)
            b = rng.standard_normal(4096, dtype=np.float32)

            def ln(x=x, o=o, w=w, b=b):
                layernorm_kernel[(x.shape[0],)](x, w, b, o, 4096, 4096, EPS, BLOCK_SIZE=4096)

            def ln_ok(x=x, o=o, w=w, b=b):
                xd = x.astype(np.float64)
                m = xd.mean(1, keepdims=True)
                ref = (xd - m) / np.sqrt(((xd - m) ** 2).mean(1, keepdims=True) + EPS) * w + b
                return np.abs(o - ref).max() < 1e-4
            out.append((f"layernorm {rows}x4096", x.size, ln, ln_ok))
    return out


def loops_of(asm):
    """(label, instructions, vector loads, vector stores) per loop: a label that a
    later jump branches back to; the loop's body is everything in between."""
    lines = [ln.strip() for ln in asm.splitlines()]
    label_at, insns = {}, []
    for ln in lines:
        if not ln or ln.startswith(("#", ".p2align", ".cfi", ".section", ".type", ".size", ".globl", ".text",
                                    ".file", ".long", ".quad", ".byte", ".short", ".ident", ".addrsig")):
            continue
        if ln.endswith(":"):
            label_at[ln[:-1]] = len(insns)
            continue
        insns.append(ln)
    loops = []
    for i, ins in enumerate(insns):
        m = re.match(r"j\w+\s+(\.\w+)", ins)
        if m and m.group(1) in label_at and label_at[m.group(1)] <= i:
            body = insns[label_at[m.group(1)]:i + 1]
            vld = sum(1 for s in body if re.match(r"v\w+\s+-?\w*\(", s) and "mov" in s.split()[0] or
                      re.match(r"vblendm\w+\s+-?\w*\(", s))
            vst = sum(1 for s in body if re.match(r"vmov\w+\s+%[xyz]mm\d+(\s*\{%k\d\})?,\s*-?\w*\(", s))
            masked = sum(1 for s in body if "{%k" in s and "(" in s)
            loops.append((m.group(1), len(body), vld, vst, masked))
    return loops


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="copy,add,softmax,layernorm")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--asm", action="store_true", help="print the hot loops' instruction counts")
    args = ap.parse_args()
    only = args.only.split(",")
    ghz = nominal_ghz()
    print(f"one thread; nominal clock {ghz} GHz; load average {os.getloadavg()[0]:.2f}")
    print(f"{'kernel':<22}{'ns/elem':>10}{'cycles/elem':>13}{'GB/s (r+w)':>12}  check")
    passes = {}
    for name, n, fn, ok in cases(only):
        t = cpu_time_per_call(fn, args.repeats)
        nbytes = 12 if name.startswith("add") else 8
        if name.startswith("  "):                      # a softmax pass: cost, not bandwidth
            passes[name.split()[0]] = t / n
            prev = {"max+exp+sum": "max", "all": "max+exp+sum"}.get(name.split()[0])
            extra = f"   (+{(t / n - passes[prev]) * 1e9:.3f} ns over '{prev}')" if prev else ""
            print(f"{name:<26}{t / n * 1e9:>6.3f}{t / n * 1e9 * ghz if ghz else float('nan'):>13.3f}"
                  f"{'':>12}  {'ok' if ok() else 'WRONG'}{extra}")
            continue
        good = ok()
        print(f"{name:<22}{t / n * 1e9:>10.3f}{t / n * 1e9 * ghz if ghz else float('nan'):>13.3f}"
              f"{nbytes * n / t / 1e9:>12.1f}  {'ok' if good else 'WRONG'}")
    if args.asm:
        sigs = {
            "copy": (copy_kernel, "*fp32:16,*fp32:16,i32:16"),
            "add": (add_kernel, "*fp32:16,*fp32:16,*fp32:16,i32:16"),
            "softmax": (softmax_kernel, "*fp32:16,*fp32:16,i32:16,i32:16,i32:16"),
            "layernorm": (layernorm_kernel, "*fp32:16,*fp32:16,*fp32:16,*fp32:16,i32:16,i32:16,fp32"),
        }
        for k in only:
            if k not in sigs:
                continue
            kern, sig = sigs[k]
            asm = tessera.compile(kern, signature=sig, constexprs={"BLOCK_SIZE": 4096}).asm["asm"]
            print(f"{k}: loops (label: instructions, vector loads, vector stores, masked memory ops)")
            for lab, count, vld, vst, masked in loops_of(asm):
                print(f"   {lab}: {count} insns, {vld} vld, {vst} vst, {masked} masked")


if __name__ == "__main__":
    main()
