"""attention_score's forward and backward kernels on a GPU, tile configurations side by
side in one run with the byte floors (a copy of the same bytes, a write-only fill of
the output) and torch (cuBLAS): what kernels/attention.py's and kernels/linear.py's
choices are measured from.

    python bench/attention_score_gpu.py [--dtype float16] [--shape 8,2048,2048,64] [--only fwd|bwd]
                                        [--shipped] [--cold N] [--sides] [--prefetch] [--out DIR]

Times are torch.profiler's CUDA kernel time per call (no host launch cost), best of
3 rounds of `--calls` calls; every variant's result is checked against torch first.
The backward variants (and their copy) take N sets of ds in turn (--cold, 4 by default),
so that each call meets its ds in memory, not in the L2.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "frontend"))

import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402

from attention_cluster_kernels import score_backward_cluster_kernel  # noqa: E402
from common import cuda_events_us, profiled_kernel_us  # noqa: E402

L = importlib.import_module("tessera.kernels.linear")
AT = importlib.import_module("tessera.kernels.attention")


def forward(q, k, s, scale, tiles, stream):
    """The forward kernel at explicit tiles (what _attention_score_fast launches)."""
    bt, m, d = q.shape
    n = k.shape[1]
    bm, bn, bk, opts = tiles
    opts = dict(opts)
    balanced = opts.pop("balanced", False)
    kernel, grid, extra, opts = L._gpu_launch(q, m, n, bt, bm, bn, opts)
    if balanced:  # as many programs as give every one the same number of tiles, +-1
        total = tessera.cdiv(m, bm) * tessera.cdiv(n, bn) * bt
        grid = (tessera.cdiv(total, tessera.cdiv(total, grid[0])), 1, 1)
    kernel[grid](q, k, q, s, s, m, n, d, m * d, d, 1, n * d, 1, d, m * n, scale, *extra,
                 A_MMAJOR=False, B_KMAJOR=True, ACT=L.ACT_NONE, HAS_BIAS=False, STORE_Z=False, SCALE=True,
                 ACC=tl.float32, BATCHED=bt > 1, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STREAM_C=stream, **opts)


def backward(q, k, ds, dq, dk, scale, tiles, rotate):
    bt, m, d = q.shape
    n = k.shape[1]
    bm, bk, warps, stages = tiles
    bd = max(16, tessera.next_power_of_2(d))
    AT._score_backward_kernel[(tessera.cdiv(m, bm) + tessera.cdiv(n, bm), 1, bt)](
        ds, q, k, dq, dk, m, n, d, ds.stride(0), ds.stride(1), q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        scale, ACC=tl.float32, BLOCK_M=bm, BLOCK_D=bd, BLOCK_K=bk, ROTATE=rotate, num_warps=warps,
        num_stages=stages)


def backward_flat(q, k, ds, dq, dk, scale, tiles, side=None):
    """_score_backward_flat_kernel: the operands as 2-D arrays of all batches' rows (TMA
    rings on sm_90a), each branch's loop warp-specialized where WS. side "dq" or "dk": a
    cut, that side's programs alone (the other output is not written)."""
    bt, m, d = q.shape
    n = k.shape[1]
    bm, bk, warps, stages, ws, maxnreg, lag, *rest = tiles
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    if rest and rest[0]:
        extra["SWAP"] = True
    if len(rest) > 1 and rest[1]:
        extra["L2_PREFETCH"] = rest[1]
    q_blocks, k_blocks = tessera.cdiv(m, bm), tessera.cdiv(n, bm)
    programs = {None: q_blocks + k_blocks, "dq": q_blocks, "dk": k_blocks}[side]
    AT._score_backward_flat_kernel[(programs, 1, bt)](
        ds, q, k, dq, dk, m, n, d, ds.stride(1), q.stride(1), k.stride(1), scale, bt * m, bt * n, ACC=tl.float32,
        BLOCK_M=bm, BLOCK_D=max(16, tessera.next_power_of_2(d)), BLOCK_K=bk, WS=ws, LAG=lag,
        PROGRAM0=q_blocks if side == "dk" else 0, num_warps=warps, num_stages=stages, **extra)


# name -> (BLOCK_M, BLOCK_K, num_warps, num_stages, WS, maxnreg, LAG[, SWAP[, L2_PREFETCH]]) of
# _score_backward_flat_kernel
FLAT_BACKWARD = {
    "flat 256x64 w16 s4 ws, dq on the anti-diagonal (shipped on sm_90)": (256, 64, 16, 4, True, None, 0),
    # L2 prefetch: each ring's issuer asks the L2 for the boxes P K steps ahead of its copies, so
    # that more distinct ds bytes are in flight than the pairs' shared rings keep (--prefetch).
    "flat 256x64 w16 s4 ws, L2 prefetch 2": (256, 64, 16, 4, True, None, 0, False, 2),
    "flat 256x64 w16 s4 ws, L2 prefetch 4": (256, 64, 16, 4, True, None, 0, False, 4),
    "flat 256x64 w16 s4 ws, L2 prefetch 8": (256, 64, 16, 4, True, None, 0, False, 8),
    "flat 256x64 w16 s4 ws, L2 prefetch 12": (256, 64, 16, 4, True, None, 0, False, 12),
    "flat 256x64 w16 s3 ws, L2 prefetch 4": (256, 64, 16, 3, True, None, 0, False, 4),
    # SWAP: dq^T = k^T ds^T and dk^T = q^T ds, one warpgroup's wgmma.m64n256 (A 8 KB + B 32 KB of
    # shared memory read per K step, against 4 x (8 + 8) KB for four warpgroups' m64n64).
    # Deeper rings (200 KB): the compiler keeps 4 stages of these unless its reserve for
    # register staging is off (session 14 measured them with that reserve patched out).
    "flat 256x64 w16 s5 ws, deeper ring": (256, 64, 16, 5, True, None, 0),
    "flat 256x32 w16 s10 ws, deeper ring": (256, 32, 16, 10, True, None, 0),
    "flat 256x64 swapped w4 s4 ws": (256, 64, 4, 4, True, None, 0, True),
    "flat 256x64 swapped w4 s3 ws": (256, 64, 4, 3, True, None, 0, True),
    "flat 128x64 swapped w4 s3 ws, maxnreg 128 (two CTAs an SM)": (128, 64, 4, 3, True, 128, 0, True),
    "flat 128x64 swapped w4 s4 ws": (128, 64, 4, 4, True, None, 0, True),
    "flat 256x64 w16 s4 ws, dq lags 4 (dk reads first)": (256, 64, 16, 4, True, None, 4),
    "flat 256x64 w16 s4 ws, dq lags 6": (256, 64, 16, 4, True, None, 6),
    "flat 256x64 w16 s4 ws, dq leads 6 (dq reads first)": (256, 64, 16, 4, True, None, -6),
    "flat 256x64 w16 s4 ws, dq lags 8": (256, 64, 16, 4, True, None, 8),
    "flat 256x64 w16 s4 (not specialized)": (256, 64, 16, 4, False, None, 0),
    "flat 128x64 w8 s4 ws, maxnreg 80 (two CTAs an SM)": (128, 64, 8, 4, True, 80, 0),
    # The same 160 KB of ring in 32-wide K steps, 8 stages (more stages shrink to fit: the
    # compiler caps the rings' shared memory at ~160 KB here).
    "flat 256x32 w16 s8 ws": (256, 32, 16, 8, True, None, 0),
}


def backward_cluster(q, k, ds, dq, dk, scale, tiles):
    """score_backward_cluster_kernel: a cluster of M / BLOCK_M programs per batch reading
    each ds tile once (dq in registers, dk_j reduce-scattered over the cluster)."""
    bt, m, d = q.shape
    n = k.shape[1]
    bm, bk, warps, stages, maxnreg = tiles[:5]
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    if len(tiles) > 5:
        extra["PARTS"] = tiles[5]
    score_backward_cluster_kernel[(bt * (m // bm),)](
        ds, q, k, dq, dk, m, n, d, ds.stride(1), q.stride(1), k.stride(1), scale, bt * m, bt * n, ACC=tl.float32,
        BLOCK_M=bm, BLOCK_D=max(16, tessera.next_power_of_2(d)), BLOCK_K=bk, CLUSTER=m // bm, num_warps=warps,
        num_stages=stages, **extra)


# name -> (BLOCK_M, BLOCK_K, num_warps, num_stages, maxnreg) of score_backward_cluster_kernel
# (cluster = M / BLOCK_M programs: 16 at M = 2048 and 128 rows, the H100's non-portable size).
CLUSTER_BACKWARD = {
    "cluster 128x64 w8 s3": (128, 64, 8, 3, None),
    "cluster 128x64 w8 s3, dq alone (a cut: dk wrong)": (128, 64, 8, 3, None, 0),
    "cluster 128x64 w8 s3, dk shares without the exchange (a cut: dk wrong)": (128, 64, 8, 3, None, 1),
    "cluster 128x64 w8 s4": (128, 64, 8, 4, None),
    "cluster 128x64 w8 s3 maxnreg 128 (two CTAs an SM)": (128, 64, 8, 3, 128),
    "cluster 128x64 w4 s3": (128, 64, 4, 3, None),
    "cluster 128x32 w8 s6": (128, 32, 8, 6, None),
    "cluster 256x64 w16 s3 (8 a cluster)": (256, 64, 16, 3, None),
}


# name -> ((BLOCK_M, BLOCK_N, BLOCK_K, launch options), evict-first stores)
FORWARD = {
    "64x128x64 w4 s2 persistent 3, .cs (shipped on other GPUs)": (
        (64, 128, 64, {"num_warps": 4, "num_stages": 2, "persistent": 3}), True),
    "64x128x64 w4 s2 persistent 3": ((64, 128, 64, {"num_warps": 4, "num_stages": 2, "persistent": 3}), False),
    "64x128x64 w4 s2 persistent 3 balanced, .cs": ((64, 128, 64, {"num_warps": 4, "num_stages": 2, "persistent": 3,
                                                                   "balanced": True}), True),
    "128x128x64 w8 s2 persistent 2, .cs": ((128, 128, 64, {"num_warps": 8, "num_stages": 2, "persistent": 2}), True),
    "128x128x64 w8 s2 persistent 2 (before)": ((128, 128, 64, {"num_warps": 8, "num_stages": 2, "persistent": 2}),
                                               False),
    "64x256x64 w4 s2 persistent 2, .cs": ((64, 256, 64, {"num_warps": 4, "num_stages": 2, "persistent": 2}), True),
    "64x64x64 w4 s2 persistent 4, .cs": ((64, 64, 64, {"num_warps": 4, "num_stages": 2, "persistent": 4}), True),
    "64x128x64 w4 s2 persistent 4, .cs": ((64, 128, 64, {"num_warps": 4, "num_stages": 2, "persistent": 4}), True),
    "64x128x64 w4 s3 persistent 3, .cs": ((64, 128, 64, {"num_warps": 4, "num_stages": 3, "persistent": 3}), True),
    "128x128x64 w8 s2 persistent 3, .cs": ((128, 128, 64, {"num_warps": 8, "num_stages": 2, "persistent": 3}), True),
}

def forward_flat(q, k, s, scale, tiles):
    """_score_forward_flat_kernel (sm_90: TMA loads and stores, persistent) at explicit tiles."""
    bt, m, d = q.shape
    n = k.shape[1]
    bm, bn, warps, stages, per_sm, ws, maxnreg, *stream = tiles
    total = (m // bm) * (n // bn) * bt
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    AT._score_forward_flat_kernel[(min(total, per_sm * L._sm_count(q)), 1, 1)](
        q, k, s, m, n, d, bt * m, bt * n, scale, total, ACC=tl.float32, BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_D=max(16, tessera.next_power_of_2(d)), WS=ws, STREAM=bool(stream and stream[0]), num_warps=warps,
        num_stages=stages, **extra)


# name -> (BLOCK_M, BLOCK_N, num_warps, num_stages, CTAs per SM, WS, maxnreg[, evict-first
# stores]) of _score_forward_flat_kernel
FLAT_FORWARD = {
    "flat 64x128 w4 s2, 3 CTAs an SM, .cs": (64, 128, 4, 2, 3, False, None, True),
    "flat 128x128 w8 s2, 2 CTAs an SM, .cs": (128, 128, 8, 2, 2, False, None, True),
    "flat 64x256 w4 s2, 1 CTA an SM, .cs": (64, 256, 4, 2, 1, False, None, True),
    "flat 64x256 w4 s4 ws, 1 CTA an SM, .cs": (64, 256, 4, 4, 1, True, None, True),
    "flat 64x64 w4 s2, 4 CTAs an SM, .cs": (64, 64, 4, 2, 4, False, None, True),
    "flat 128x128 w8 s4 ws, 1 CTA an SM": (128, 128, 8, 4, 1, True, None),
    "flat 128x256 w8 s3 ws, 1 CTA an SM": (128, 256, 8, 3, 1, True, None),
    "flat 64x128 w4 s3 ws, 2 CTAs an SM": (64, 128, 4, 3, 2, True, None),
    "flat 64x128 w4 s4 ws, 1 CTA an SM": (64, 128, 4, 4, 1, True, None),
    "flat 64x256 w4 s4 ws, 1 CTA an SM": (64, 256, 4, 4, 1, True, None),
    "flat 128x128 w8 s2, 2 CTAs an SM (TMA ring, not specialized)": (128, 128, 8, 2, 2, False, None),
    "flat 64x128 w4 s2, 3 CTAs an SM (TMA ring, not specialized; shipped on sm_90)": (64, 128, 4, 2, 3, False, None),
}


# name -> ((BLOCK_M, BLOCK_K, num_warps, num_stages), ROTATE). (Session 8 also timed a FLAT
# form whose rings took TMA copies, commit 86d0ccb: no faster; bench/results/
# attention_score_gpu_bwd90_run3.md.)
BACKWARD = {
    "128x64 w8 s4 rotated (shipped: the batched kernel, other GPUs)": ((128, 64, 8, 4), True),
    "128x64 w8 s4": ((128, 64, 8, 4), False),
    "128x64 w8 s3 rotated": ((128, 64, 8, 3), True),
    "128x32 w8 s8 rotated": ((128, 32, 8, 8), True),
    "128x32 w8 s6 rotated": ((128, 32, 8, 6), True),
    "128x32 w8 s4 rotated": ((128, 32, 8, 4), True),
    "128x128 w8 s2 rotated": ((128, 128, 8, 2), True),
    "256x64 w8 s3 rotated": ((256, 64, 8, 3), True),
    "256x64 w16 s4 rotated": ((256, 64, 16, 4), True),
    "256x64 w16 s3 rotated": ((256, 64, 16, 3), True),
    "256x32 w16 s8 rotated": ((256, 32, 16, 8), True),
    "256x64 w16 s5 rotated": ((256, 64, 16, 5), True),
    "256x32 w16 s10 rotated": ((256, 32, 16, 10), True),
    "256x32 w16 s6 rotated": ((256, 32, 16, 6), True),
    "64x64 w4 s6 (before)": ((64, 64, 4, 6), False),
}


def flat_sides(q, k, dss, scale, args, row):
    """The shipped flat backward's two kinds of programs, each timed alone against a copy of
    its own bytes (ds, its operand, its output): at this batch (half the CTAs of the whole
    kernel) and at twice the batch (as many CTAs as the whole kernel, all of one kind), to
    see whether one kind waits on the other at the end of the shipped kernel (one CTA an
    SM, so an early finisher leaves its SM idle). Errors checked against torch."""
    variants = [("shipped flat", next(t for name, t in FLAT_BACKWARD.items() if "shipped" in name))]
    if args.prefetch:
        variants.append(("flat, L2 prefetch 4", FLAT_BACKWARD["flat 256x64 w16 s4 ws, L2 prefetch 4"]))
    for (what, tiles), twice in ((v, t) for v in variants for t in (False, True)):
        qs, ks, ds_sets = (q, k, dss) if not twice else \
            (torch.cat([q, q]), torch.cat([k, k]), [torch.cat([x, x]) for x in dss])
        bt, m, d = qs.shape
        n = ks.shape[1]
        e = qs.element_size()
        for side in ("dq", "dk"):
            nbytes = (ds_sets[0].numel() + (ks.numel() if side == "dq" else qs.numel()) +
                      (qs.numel() if side == "dq" else ks.numel())) * e
            copy_us = profiled_kernel_us(copy_fn(nbytes, len(ds_sets)), args.calls)
            outs = [(torch.full_like(qs, float("nan")), torch.full_like(ks, float("nan"))) for _ in ds_sets]
            backward_flat(qs, ks, ds_sets[0], outs[0][0], outs[0][1], scale, tiles, side)
            dsf = ds_sets[0].float()
            if side == "dq":
                ref, got = dsf @ ks.float() * scale, outs[0][0]
            else:
                ref, got = dsf.transpose(1, 2) @ qs.float() * scale, outs[0][1]
            err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
            call = cycled([lambda x=x, o=o: backward_flat(qs, ks, x, o[0], o[1], scale, tiles, side)
                           for x, o in zip(ds_sets, outs)])
            label = f"cut: {what}, {side} programs alone, batch {bt} ({bt * tessera.cdiv(m, tiles[0])} CTAs)"
            row("bwd", f"copy of that cut's bytes ({nbytes / 1e6:.1f} MB)", copy_us, copy_us, nbytes, "")
            row("bwd", label, profiled_kernel_us(call, args.calls), copy_us, nbytes, f"{err:.1e}")


def cycled(fns):
    """A call that runs the next of `fns` each time (--cold: each buffer set leaves the L2
    before its next turn)."""
    turn = [0]

    def call():
        fns[turn[0] % len(fns)]()
        turn[0] += 1
    return call


def copy_fn(nbytes, sets=1):
    """A copy of nbytes / 2 (read + write = nbytes), `sets` buffer pairs taken in turn."""
    fns = []
    for _ in range(sets):
        src = torch.empty(nbytes // 2 // 4, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        fns.append(lambda src=src, dst=dst: dst.copy_(src))
    return cycled(fns)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--shape", default="8,2048,2048,64")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--only", default="", help="fwd or bwd: one direction")
    ap.add_argument("--shipped", action="store_true", help="only the shipped and the before configurations")
    ap.add_argument("--events", action="store_true", help="also CUDA-events time of each forward variant "
                    "(back-to-back calls; 'of copy' then against the copy's events time)")
    ap.add_argument("--cold", type=int, default=4, help="backward: cycle through this many ds (and copy "
                    "buffer) sets, so that no call finds its inputs in the L2 (1: the same ds every call)")
    ap.add_argument("--no-cluster", action="store_true", help="backward: leave out the cluster experiments")
    ap.add_argument("--swapped", action="store_true", help="with --shipped: also the swapped flat backwards and "
                    "the deeper rings")
    ap.add_argument("--also", default="", help="with --shipped: also the flat backwards whose names contain "
                    "one of these comma-separated pieces (e.g. 'lags,leads')")
    ap.add_argument("--prefetch", action="store_true", help="with --shipped: also the flat backwards with "
                    "an L2 prefetch ahead of their rings (and with --sides, the sides with one)")
    ap.add_argument("--sides", action="store_true", help="backward: also the shipped flat kernel's dq and dk "
                    "programs timed alone, at this batch and at twice it (as many CTAs as the whole kernel)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    dt = getattr(torch, args.dtype)
    bt, m, n, d = (int(v) for v in args.shape.split(","))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(bt, m, d, generator=gen).to("cuda", dt)
    k = torch.randn(bt, n, d, generator=gen).to("cuda", dt)
    ds = torch.randn(bt, m, n, generator=gen).to("cuda", dt)
    scale = d ** -0.5
    e = q.element_size()
    fwd_bytes = (q.numel() + k.numel() + bt * m * n) * e
    bwd_bytes = (2 * q.numel() + 2 * k.numel() + ds.numel()) * e
    lines = [f"# attention_score kernels, {torch.cuda.get_device_name()}, {args.dtype} {bt}x{m}x{n}x{d}", "",
             f"forward bytes {fwd_bytes / 1e6:.1f} MB, backward bytes {bwd_bytes / 1e6:.1f} MB; kernel us "
             f"(torch.profiler, best of 3 x {args.calls} calls, unless marked); 'of copy' = copy of the same bytes / variant", "",
             "| direction | variant | us | of copy | GB/s | max error / reference max |", "|---|---|---|---|---|---|"]

    # --cold N: N sets of ds (and outputs) taken in turn, as a training step meets a new ds
    # each time (the default, 4); N = 1 calls on the same ds, part of which the previous
    # call left in the L2 (session 9: that favoured orders whose second reads come late).
    dss = [ds] + [torch.randn(bt, m, n, generator=gen).to("cuda", dt) for _ in range(args.cold - 1)]

    def row(direction, name, us, copy_us, nbytes, err):
        lines.append(f"| {direction} | {name} | {us:.1f} | {copy_us / us:.3f} | {nbytes / us / 1e3:.0f} | {err} |")
        print(lines[-1], flush=True)

    if args.only != "bwd":
        ref = (q.float() @ k.float().transpose(1, 2) * scale)
        copy_us = profiled_kernel_us(copy_fn(fwd_bytes), args.calls)
        row("fwd", "copy (same bytes)", copy_us, copy_us, fwd_bytes, "")
        copy_events_us = cuda_events_us(copy_fn(fwd_bytes)) if args.events else None
        if args.events:
            row("fwd", "copy (same bytes) (CUDA events)", copy_events_us, copy_events_us, fwd_bytes, "")
        out = torch.empty(bt, m, n, dtype=dt, device="cuda")
        row("fwd", "fill of the output (write only)", profiled_kernel_us(lambda: out.fill_(1.0), args.calls), copy_us,
            fwd_bytes, "")
        kt = k.transpose(1, 2)
        row("fwd", "torch bmm (cuBLAS, no scale)", profiled_kernel_us(lambda: torch.bmm(q, kt), args.calls), copy_us,
            fwd_bytes, "")
        for name, (tiles, stream) in FORWARD.items():
            if args.shipped and "shipped" not in name and "before" not in name:
                continue
            s = torch.full((bt, m, n), float("nan"), dtype=dt, device="cuda")
            forward(q, k, s, scale, tiles, stream)
            err = ((s.float() - ref).abs().max() / ref.abs().max()).item()
            row("fwd", name, profiled_kernel_us(lambda: forward(q, k, s, scale, tiles, stream), args.calls), copy_us,
                fwd_bytes, f"{err:.1e}")
            if args.events:  # back to back: the previous call's dirty L2 lines and launch gaps included
                ev = cuda_events_us(lambda: forward(q, k, s, scale, tiles, stream))
                row("fwd", name + " (CUDA events)", ev, copy_events_us, fwd_bytes, "")
        for name, tiles in FLAT_FORWARD.items():
            if args.shipped and "shipped" not in name:
                continue
            s = torch.full((bt, m, n), float("nan"), dtype=dt, device="cuda")
            forward_flat(q, k, s, scale, tiles)
            err = ((s.float() - ref).abs().max() / ref.abs().max()).item()
            row("fwd", name, profiled_kernel_us(lambda: forward_flat(q, k, s, scale, tiles), args.calls), copy_us,
                fwd_bytes, f"{err:.1e}")
        # The library call as bench/kernels.py times it (CUDA events around back-to-back
        # calls: the kernel plus whatever the host adds when it is the slower side).
        lib = importlib.import_module("tessera.kernels")
        ev = cuda_events_us(lambda: lib.attention_score(q, k, scale))
        lines.append(f"| fwd | tk.attention_score, CUDA events (host included) | {ev:.1f} | {copy_us / ev:.3f} | "
                     f"{fwd_bytes / ev / 1e3:.0f} | |")
        print(lines[-1], flush=True)
    if args.only != "fwd":
        dsf = ds.float()
        ref_q, ref_k = dsf @ k.float() * scale, dsf.transpose(1, 2) @ q.float() * scale
        copy_us = profiled_kernel_us(copy_fn(bwd_bytes, args.cold), args.calls)
        row("bwd", "copy (same bytes)", copy_us, copy_us, bwd_bytes, "")
        row("bwd", "torch (two bmm + scale)", profiled_kernel_us(lambda: (torch.bmm(ds, k) * scale,
                                                                  torch.bmm(ds.transpose(1, 2), q) * scale),
                                                          args.calls), copy_us, bwd_bytes, "")
        for name, (tiles, rotate) in BACKWARD.items():
            if args.shipped and "shipped" not in name and "before" not in name:
                continue
            dq = torch.full((bt, m, d), float("nan"), dtype=dt, device="cuda")
            dk = torch.full((bt, n, d), float("nan"), dtype=dt, device="cuda")
            backward(q, k, ds, dq, dk, scale, tiles, rotate)
            err = max(((dq.float() - ref_q).abs().max() / ref_q.abs().max()).item(),
                      ((dk.float() - ref_k).abs().max() / ref_k.abs().max()).item())
            outs = [(dq, dk)] + [(torch.empty_like(dq), torch.empty_like(dk)) for _ in dss[1:]]
            call = cycled([lambda x=x, o=o: backward(q, k, x, o[0], o[1], scale, tiles, rotate) for x, o in zip(dss, outs)])
            row("bwd", name, profiled_kernel_us(call, args.calls),
                copy_us, bwd_bytes, f"{err:.1e}")
        for name, tiles in FLAT_BACKWARD.items():
            extra = (args.swapped and ("swapped" in name or "deeper ring" in name)) or \
                (args.prefetch and "L2 prefetch" in name) or any(a and a in name for a in args.also.split(","))
            if args.shipped and "shipped" not in name and not extra:
                continue
            dq = torch.full((bt, m, d), float("nan"), dtype=dt, device="cuda")
            dk = torch.full((bt, n, d), float("nan"), dtype=dt, device="cuda")
            backward_flat(q, k, ds, dq, dk, scale, tiles)
            err = max(((dq.float() - ref_q).abs().max() / ref_q.abs().max()).item(),
                      ((dk.float() - ref_k).abs().max() / ref_k.abs().max()).item())
            outs = [(dq, dk)] + [(torch.empty_like(dq), torch.empty_like(dk)) for _ in dss[1:]]
            call = cycled([lambda x=x, o=o: backward_flat(q, k, x, o[0], o[1], scale, tiles) for x, o in zip(dss, outs)])
            row("bwd", name, profiled_kernel_us(call, args.calls),
                copy_us, bwd_bytes, f"{err:.1e}")
        if args.sides:
            flat_sides(q, k, dss, scale, args, row)
        for name, tiles in CLUSTER_BACKWARD.items() if not args.no_cluster else ():
            if m % tiles[0] or m // tiles[0] not in (2, 4, 8, 16):  # (all of them, --shipped or not)
                continue
            dq = torch.full((bt, m, d), float("nan"), dtype=dt, device="cuda")
            dk = torch.full((bt, n, d), float("nan"), dtype=dt, device="cuda")
            try:
                backward_cluster(q, k, ds, dq, dk, scale, tiles)
            except Exception as e:  # noqa: BLE001  (a variant that does not compile or launch: say so)
                lines.append(f"| bwd | {name} | failed: {type(e).__name__}: {str(e)[:200]} | | | |")
                print(lines[-1], flush=True)
                continue
            err = max(((dq.float() - ref_q).abs().max() / ref_q.abs().max()).item(),
                      ((dk.float() - ref_k).abs().max() / ref_k.abs().max()).item())
            outs = [(dq, dk)] + [(torch.empty_like(dq), torch.empty_like(dk)) for _ in dss[1:]]
            call = cycled([lambda x=x, o=o: backward_cluster(q, k, x, o[0], o[1], scale, tiles)
                           for x, o in zip(dss, outs)])
            row("bwd", name, profiled_kernel_us(call, args.calls), copy_us, bwd_bytes, f"{err:.1e}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        tag = f"{args.dtype}_{bt}x{m}x{n}x{d}" + (f"_{args.only}" if args.only else "") + \
            ("_shipped" if args.shipped else "") + (f"_cold{args.cold}" if args.cold > 1 else "")
        with open(os.path.join(args.out, f"attention_score_gpu_{tag}.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
