"""Launch configurations of tessera.kernels' memory-bound GPU kernels side by side, on
bench/kernels.py's fp16 shapes (16384x4096; rms_norm_rope 65536x8x128): the kernels
launched directly, one candidate per row, each next to a torch copy of the same bytes,
timed round-robin with CUDA events in one run (what the libraries' defaults are chosen
from: kernels/softmax_ce.py, activation.py, reduce.py, rope.py).

    python bench/memory_bound_configs.py [--out bench/results] [--tag _h100]

'of copy' = copy time / kernel time (copy of the bytes the kernel must move: inputs
read once, outputs written once); >= 0.9 is the target. The library ops' rows also give
their host time per call (a host time above the GPU time means the op is host-bound)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import RESULTS_DIR, cuda_host_us, machine_info, table_lines  # noqa: E402
from kernels import measure_cuda_events  # noqa: E402  (bench/kernels.py)

import torch  # noqa: E402

import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402
import tessera.kernels as tk  # noqa: E402
from tessera.kernels import activation as A  # noqa: E402
from tessera.kernels import reduce as RD  # noqa: E402
from tessera.kernels import rope as RP  # noqa: E402
from tessera.kernels import softmax_ce as S  # noqa: E402


def candidates(rows, cols, dev="cuda", baseline=None):
    """name -> (fn, bytes moved); baseline: another copy of tessera.kernels whose
    cross_entropy is timed next to the library's on the vocabulary shapes."""
    f16 = torch.float16
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(rows, cols, generator=g).to(dev, f16)
    tgt = torch.randint(0, cols, (rows,), generator=g).to(dev)
    mat = x.numel() * 2
    out = {}

    # cross_entropy forward. 16384x4096 (rows held whole): the row kernel alone
    # (reduction 'none': a program per row), then with the loss reduction fused (the
    # mean): programs walking runs of rows, as many per SM as given, the last to finish
    # summing the row groups' partials (at most max_groups groups). Language-model
    # vocabularies (4096x32000, 2048x50257: rows split in slices): the slice kernel alone
    # (a program per row slice of `block` classes held as one tile), the slices + the
    # merge with the mean (the library's two launches) for each tile and warps, and the
    # library op in fp16 and bf16. History of the candidates: kernels_cuda_float16_cefwd.md,
    # kernels_cuda_float16_ce32k.md.
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 2
    x_vocab = torch.randn(max(1, rows // 4), 32000, generator=g).to(dev, f16)
    t_vocab = torch.randint(0, 32000, (x_vocab.shape[0],), generator=g).to(dev)
    x_gpt2 = torch.randn(max(1, rows // 8), 50257, generator=g).to(dev, f16)
    t_gpt2 = torch.randint(0, 50257, (x_gpt2.shape[0],), generator=g).to(dev)
    arrived = torch.zeros(1, device=dev, dtype=torch.int64)

    def xent(logits, tgt, w, per_sm=None, max_groups=None):
        n_rows, n = logits.shape
        block = S._ce_block(n)
        reduce = per_sm is not None
        if reduce:
            group_rows, n_groups, rpp, progs = S._row_groups(n_rows, per_sm * sms, max_groups)
        else:
            group_rows, n_groups, rpp, progs = 1, n_rows, 1, n_rows
        loss, lse = torch.empty(n_rows, device=dev), torch.empty(n_rows, device=dev)
        part = torch.empty(n_groups, device=dev)
        red_out = torch.empty((), device=dev, dtype=f16)
        return lambda: S._xent_fwd_kernel[(progs,)](
            logits, tgt, loss, lse, part, red_out, part, arrived, n, n_rows, rpp, n, -100, 0.0, group_rows,
            n_groups, SMOOTH=False, REDUCE=reduce, MEAN=True, ACC=tl.float32, BLOCK=block,
            FINAL=min(S.CE_LOSS_GROUP, 256 * w), num_warps=w)

    def sliced(logits, tgt, block, w, merge, realign=None, force=False, maxnreg=0):
        plan = S._ce_plan(logits, tgt, 0.0, "mean", slice_block=block, slice_warps=w, realign=realign, sliced=force,
                          slice_maxnreg=maxnreg)
        if merge:
            return lambda: S._ce_forward_with(plan, logits, tgt, -100)
        work = plan.new_work()
        misalign = S._misalignment(logits) if plan.slice_kw["REALIGN"] else 0
        return lambda: S._xent_slice_kernel[(plan.units,)](logits, tgt, work, plan.stride, plan.n, plan.slices,
                                                           plan.units, misalign, **plan.slice_kw)

    def merge_alone(logits, tgt):
        # The library plan's merge launch by itself, over partials the slices stored once:
        # what the second launch costs (its time here against slices + merge - slices alone).
        plan = S._ce_plan(logits, tgt, 0.0, "mean", sliced=True)
        work = plan.new_work()
        misalign = S._misalignment(logits) if plan.slice_kw["REALIGN"] else 0
        S._xent_slice_kernel[(plan.units,)](logits, tgt, work, plan.stride, plan.n, plan.slices, plan.units,
                                            misalign, **plan.slice_kw)
        lse, part, out_ = plan.new_lse(), plan.new_part(), plan.new_out()
        return lambda: S._xent_merge_kernel[(plan.programs,)](
            tgt, work, part, lse, part, out_, part, arrived, plan.rows, plan.n, plan.slices, plan.units, -100, 0.0,
            plan.group_rows, plan.n_groups, **plan.merge_kw)

    shape, nbytes = "x".join(map(str, x.shape)), x.numel() * 2
    out[f"cross_entropy {shape} fwd kernel, num_warps=4"] = (xent(x, tgt, 4), nbytes)
    out[f"cross_entropy {shape} fwd kernel + fused mean, num_warps=4, 8 programs per SM"] = (
        xent(x, tgt, 4, 8), nbytes)
    # The rows as slices of their whole length, then the merge with the mean (the long
    # rows' two launches) instead of the reducing walk.
    for w in (2, 4, 8):
        out[f"cross_entropy {shape} slices + merge (mean), 4096 classes a slice, num_warps={w}"] = (
            sliced(x, tgt, 4096, w, True, force=True), nbytes)
    out[f"cross_entropy {shape} tk.cross_entropy (library default)"] = (lambda: tk.cross_entropy(x, tgt), nbytes)
    out[f"cross_entropy {shape} merge alone (mean; the slices' launch not timed)"] = (merge_alone(x, tgt), nbytes)
    for logits, tgt_v in ((x_vocab, t_vocab), (x_gpt2, t_gpt2)):
        shape, nbytes = "x".join(map(str, logits.shape)), logits.numel() * 2
        out[f"cross_entropy {shape} merge alone (mean; the slices' launch not timed)"] = (
            merge_alone(logits, tgt_v), nbytes)
        for block, w in ((1024, 1), (2048, 1), (2048, 2), (2048, 4), (4096, 1), (4096, 2), (4096, 4), (4096, 8),
                         (8192, 4), (8192, 8)):
            if w <= 4:
                out[f"cross_entropy {shape} slices alone, {block} classes a slice, num_warps={w}"] = (
                    sliced(logits, tgt_v, block, w, False), nbytes)
            out[f"cross_entropy {shape} slices + merge (mean), {block} classes a slice, num_warps={w}"] = (
                sliced(logits, tgt_v, block, w, True), nbytes)
        # Registers a thread of the 2-warp slices (CE_SLICE_MAXNREG_FAST_MEMORY; None: as ptxas
        # allocates, 96, 10 programs an SM; 80: 12; 64 spills).
        bf = logits.to(torch.bfloat16)
        for regs in (None, 80, 64):
            for merge in (False, True):
                what = "slices + merge (mean)" if merge else "slices alone"
                out[f"cross_entropy {shape} {what}, 4096 classes a slice, num_warps=2, maxnreg {regs}"] = (
                    sliced(logits, tgt_v, 4096, 2, merge, maxnreg=regs), nbytes)
                if regs != 64:
                    out[f"cross_entropy {shape} bf16 {what}, 4096 classes a slice, num_warps=2, maxnreg {regs}"] = (
                        sliced(bf, tgt_v, 4096, 2, merge, maxnreg=regs), nbytes)
        if logits.shape[1] % 16:  # rows not 16-byte aligned: read element by element instead of realigned
            out[f"cross_entropy {shape} slices + merge (mean), 4096 classes a slice, num_warps=4, not realigned"] = (
                sliced(logits, tgt_v, 4096, 4, True, realign=False), nbytes)
        out[f"cross_entropy {shape} tk.cross_entropy (library default)"] = (
            lambda logits=logits, tgt_v=tgt_v: tk.cross_entropy(logits, tgt_v), nbytes)
        # The merge without the loss reduction (row losses stored; no atomic, no partials'
        # second trip): what the reduction's last steps cost.
        out[f"cross_entropy {shape} tk.cross_entropy reduction='none'"] = (
            lambda logits=logits, tgt_v=tgt_v: tk.cross_entropy(logits, tgt_v, reduction="none"), nbytes)
        out[f"cross_entropy {shape} bf16 tk.cross_entropy (library default)"] = (
            lambda bf=bf, tgt_v=tgt_v: tk.cross_entropy(bf, tgt_v), nbytes)
        if baseline is not None:
            for name, a in (("", logits), ("bf16 ", bf)):
                out[f"cross_entropy {shape} {name}baseline's cross_entropy (library default)"] = (
                    lambda a=a, tgt_v=tgt_v: baseline.cross_entropy(a, tgt_v), nbytes)

    # GPT-2's rows are 12.27 slices of 4096 (the 13th 27% full, one program slot of 13): the
    # same slices on rows of exactly 12 (49152 classes, aligned) give the cost of that tail.
    # Also: 53248 (13 whole slices, aligned), 49144 (rows not 16-byte aligned, realigned:
    # 49151 positions, 12 slices, the last all but full): the realigned reads' own cost.
    for classes in (49152, 53248, 49144):
        x_even = torch.randn(max(1, rows // 8), classes, generator=g).to(dev, f16)
        t_even = torch.randint(0, classes, (x_even.shape[0],), generator=g).to(dev)
        shape, nbytes = "x".join(map(str, x_even.shape)), x_even.numel() * 2
        out[f"cross_entropy {shape} slices alone, 4096 classes a slice, num_warps=2"] = (
            sliced(x_even, t_even, 4096, 2, False), nbytes)
        out[f"cross_entropy {shape} tk.cross_entropy (library default)"] = (
            lambda x_even=x_even, t_even=t_even: tk.cross_entropy(x_even, t_even), nbytes)

    # cross_entropy backward of the vocabulary shapes (dlogits = (softmax - onehot) * dloss
    # of the mean; bytes: the logits read, dlogits written, the targets and lse): the row
    # walk (a program per row, 2048-class chunks over 8 warps: the library's choice until
    # bwd90) against programs per (row, slice) of `span` positions walked in `block`-wide
    # tiles, with dx stored plainly or evict-first (.cs). kernels/softmax_ce.py
    # CE_BWD_SLICE is chosen from these (memory_bound_configs_bwd90_run*.md: run 1 with the
    # realigned edge groups as masked element accesses over the whole tile, run 2 with
    # them as a tile of their own; kernels_cuda_float16_bwd90.md).
    def xent_bwd(logits, tgt, bwd_slice):
        plan = S._ce_plan(logits, tgt, 0.0, "mean", bwd_slice=bwd_slice)
        _, scale, lse = S._ce_forward_with(plan, logits, tgt, -100)
        dloss = torch.ones((), device=dev, dtype=torch.float32)
        kw = plan.bwd_realigned_kw if plan.bwd_realigned_kw is not None else plan.bwd_kw
        kw, slices, span = kw
        dxb = torch.empty_like(logits)
        n_rows, n = logits.shape
        return lambda: S._xent_bwd_kernel[(n_rows * slices,)](
            logits, tgt, lse, dloss, scale, dxb, plan.stride, 0, n, slices, span, -100, plan.smoothing,
            HAS_SCALE=True, **kw)
    for logits, tgt_v in ((x_vocab, t_vocab), (x_gpt2, t_gpt2)):
        shape, nbytes = "x".join(map(str, logits.shape)), 2 * logits.numel() * 2 + logits.shape[0] * 12
        out[f"cross_entropy {shape} bwd row walk, 2048-class chunks, num_warps=8 (before)"] = (
            xent_bwd(logits, tgt_v, (1 << 30, 2048, 8, False)), nbytes)
        for span, block, w, stream in ((2048, 2048, 4, False), (4096, 4096, 4, False), (4096, 4096, 8, False),
                                       (8192, 8192, 8, False), (8192, 2048, 8, False), (8192, 4096, 8, False),
                                       (4096, 2048, 8, False), (4096, 4096, 4, True), (4096, 4096, 8, True),
                                       (2048, 2048, 4, True)):
            out[f"cross_entropy {shape} bwd slices of {span}, {block}-wide tiles, num_warps={w}"
                + (", .cs stores" if stream else "")] = (xent_bwd(logits, tgt_v, (span, block, w, stream)), nbytes)
        out[f"cross_entropy {shape} bwd tk library (default plan)"] = (
            xent_bwd(logits, tgt_v, None), nbytes)

    # gelu_dropout forward: column block and warps.
    y = torch.empty_like(x)
    for block in (1024, 2048, 4096):
        for w in (2, 4, 8):
            if block // (32 * w) < 8 or block // (32 * w) > 64:
                continue
            out[f"gelu_dropout fwd, BLOCK={block}, num_warps={w}"] = (
                lambda block=block, w=w: A._ew_fwd_kernel[(rows, tessera.cdiv(cols, block))](
                    x, x, y, cols, 0, cols, 0.1, 1, A._keep_from(0.1), OP=A.GELU, TANH=False, HAS_B=False,
                    DROPOUT=True, ACC=tl.float32, BLOCK=block, num_warps=w), 2 * mat)
    out["tk.gelu_dropout (library default)"] = (lambda: tk.gelu_dropout(x, 0.1, seed=1), 2 * mat)
    dx = torch.empty_like(x)
    for block, w in ((2048, 4), (4096, 2), (4096, 4)):
        out[f"gelu_dropout bwd, BLOCK={block}, num_warps={w}"] = (
            lambda block=block, w=w: A._ew_bwd_kernel[(rows, tessera.cdiv(cols, block))](
                x, x, x, dx, dx, cols, 0, cols, cols, 0.1, 1, A._keep_from(0.1), OP=A.GELU, TANH=False, HAS_B=False,
                WRITE_DB=False, DROPOUT=True, ACC=tl.float32, BLOCK=block, num_warps=w), 3 * mat)

    # Elementwise forwards without dropout: column block and warps. Bound by instruction
    # issue as much as by bytes on an H200 (bias_gelu erf ~30 SASS instructions per
    # element); a wider block spreads each thread's fixed work (addresses, masks) over
    # more elements (bias_gelu 30.5 -> 28.5 per element at 4096, swiglu 31 -> 28.5).
    bias = torch.randn(cols, generator=g).to(dev, f16)
    x2 = torch.randn(rows, cols, generator=g).to(dev, f16)
    N = x.numel()
    for op, name, tanh, same in ((A.GELU, "bias_gelu", False, False), (A.GELU, "bias_gelu_tanh", True, False),
                                 (A.SWIGLU, "swiglu", False, True), (A.GEGLU, "geglu", False, True)):
        for block in (2048, 4096):
            for w in (2, 4, 8):
                if same:  # two same-shape inputs: one long row
                    fn = (lambda op=op, tanh=tanh, block=block, w=w: A._ew_fwd_kernel[(1, tessera.cdiv(N, block))](
                        x, x2, y, N, N, N, 0.0, 0, 0, OP=op, TANH=tanh, HAS_B=True, DROPOUT=False, ACC=tl.float32,
                        BLOCK=block, num_warps=w))
                else:  # a bias: the second input with a row stride of 0
                    fn = (lambda op=op, tanh=tanh, block=block, w=w: A._ew_fwd_kernel[(rows, tessera.cdiv(cols, block))](
                        x, bias, y, cols, 0, cols, 0.0, 0, 0, OP=op, TANH=tanh, HAS_B=True, DROPOUT=False,
                        ACC=tl.float32, BLOCK=block, num_warps=w))
                out[f"ew fwd {name}, BLOCK={block}, num_warps={w}"] = (fn, (3 if same else 2) * mat)

    # reduce_mean_abs(dim=0): the sliced column kernel (BLOCK_R x BLOCK_I tiles, ~`programs`
    # programs), the last slice of each column block summing the slices' partials, as
    # reduce.py's _reduce launches it.
    ycol = torch.empty(cols, device=dev, dtype=f16)
    col_counters = torch.zeros(cols, device=dev, dtype=torch.int32)

    def mean_abs_dim0(block_r, block_i, w, programs, unroll, stages=1):
        # block_r rows per step: `unroll` tiles of block_r / unroll rows.
        cols_progs = tessera.cdiv(cols, block_i)
        split = max(1, min(tessera.cdiv(programs, cols_progs), rows // (block_r * 4)))
        rps = tessera.cdiv(tessera.cdiv(rows, split), block_r) * block_r
        split = tessera.cdiv(rows, rps)
        part = torch.empty(split, cols, device=dev)

        def run():
            RD._reduce_dim_kernel[(1, cols_progs, split)](
                x, ycol, part, col_counters, rows, cols, 0, cols, 1, 1.0 / rows, rps, OP=RD.OP_MEAN_ABS, MEAN=True,
                ACC=tl.float32, BLOCK_R=block_r // unroll, BLOCK_I=block_i, UNROLL=unroll, SPLIT_FINISH=split > 1,
                BLOCK_S=min(tessera.next_power_of_2(split), 4096 // block_i), STAGES=stages, num_warps=w)
        return run
    for block_r, block_i, w, programs, unroll in (
            (64, 64, 2, 1024, 4), (64, 64, 2, 2048, 4), (128, 64, 2, 1024, 4), (32, 64, 2, 1024, 4),
            (64, 64, 4, 512, 4), (64, 64, 2, 512, 4)):
        out[f"reduce_mean_abs(dim=0), {block_r}x{block_i} rows x cols per step as {unroll} loads, "
            f"num_warps={w}, ~{programs} programs"] = (mean_abs_dim0(block_r, block_i, w, programs, unroll), mat)
    # Through the compiler's stream ring (reduce.py's STAGES): the next steps' tiles in flight.
    for block_r, block_i, w, programs, unroll, stages in (
            (64, 64, 2, 1024, 4, 2), (64, 64, 2, 1024, 4, 3), (64, 64, 2, 1024, 1, 3), (64, 64, 2, 1024, 1, 4),
            (64, 64, 4, 512, 1, 4), (128, 64, 4, 512, 1, 3), (64, 128, 4, 512, 1, 3)):
        out[f"reduce_mean_abs(dim=0), {block_r}x{block_i} rows x cols per step as {unroll} loads, "
            f"num_warps={w}, ~{programs} programs, {stages} stages"] = (
            mean_abs_dim0(block_r, block_i, w, programs, unroll, stages), mat)
    out["tk.reduce_mean_abs(dim=0) (library default)"] = (lambda: tk.reduce_mean_abs(x, 0), mat)

    # softmax with dropout, forward and backward: warps per row (one program a row;
    # kernels/softmax_ce.py SOFTMAX_DROPOUT_MAX_WARPS).
    ysm, dysm = torch.empty_like(x), torch.randn(rows, cols, generator=g).to(dev, f16)
    for w in (4, 8, 16):
        out[f"softmax+dropout fwd, num_warps={w}"] = (
            lambda w=w: S._softmax_fwd_kernel[(rows,)](x, ysm, cols, cols, 0.1, 1, A._keep_from(0.1), LOG=False,
                                                       DROPOUT=True, ACC=tl.float32, BLOCK=cols, num_warps=w),
            2 * mat)
        out[f"softmax+dropout bwd, num_warps={w}"] = (
            lambda w=w: S._softmax_bwd_kernel[(rows,)](x, dysm, ysm, cols, cols, cols, 0.1, 1, A._keep_from(0.1),
                                                       LOG=False, DROPOUT=True, ACC=tl.float32, BLOCK=cols,
                                                       num_warps=w), 3 * mat)

    # rms_norm_rope forward: head vectors per program and warps.
    hd, heads = 128, 8
    xq = torch.randn(rows * cols // (heads * hd), heads, hd, generator=g).to(dev, f16)
    seq = xq.shape[0]
    wq = torch.randn(hd, generator=g).to(dev, f16)
    ang = torch.randn(seq, hd // 2, generator=g)
    cos, sin = ang.cos().to(dev, f16), ang.sin().to(dev, f16)
    xv = xq.view(-1, hd)
    yq = torch.empty_like(xv)
    rstd = torch.empty(xv.shape[0], device=dev)
    n = xv.shape[0]
    for per in (16, 32, 64):
        for w in (2, 4, 8):
            if per * 64 // (32 * w) < 8:
                continue
            out[f"rms_norm_rope fwd, ROWS={per}, num_warps={w}"] = (
                lambda per=per, w=w: RP._rms_rope_fwd_kernel[(tessera.cdiv(n, per),)](
                    xv, wq, cos, sin, yq, rstd, hd, n, heads, seq, hd // 2, 1e-6, HAS_W=True, ACC=tl.float32,
                    ROWS=per, BLOCK=hd // 2, num_warps=w), 2 * xq.numel() * 2)
    out["tk.rms_norm_rope (library default)"] = (lambda: tk.rms_norm_rope(xq, wq, cos, sin), 2 * xq.numel() * 2)
    return out




def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=RESULTS_DIR)
    ap.add_argument("--tag", default="")
    ap.add_argument("--only", default="", help="only the candidates whose name starts with one of these "
                                                 "(comma-separated)")
    ap.add_argument("--baseline", default="", help="a folder with another copy of tessera.kernels (its "
                                                     "cross_entropy is timed alongside)")
    ap.add_argument("--smoke", action="store_true", help="run every candidate once on the CPU at 256x4096 (no timing)")
    args = ap.parse_args()
    only = tuple(args.only.split(","))
    baseline = None
    if args.baseline:
        from host_time import load_baseline  # noqa: E402  (bench/host_time.py)
        baseline = load_baseline(args.baseline)
    if args.smoke:
        for name, (fn, _) in candidates(256, 4096, "cpu", baseline).items():
            if not name.startswith(only):
                continue
            fn()
            print("ran", name)
        return
    t0 = time.time()
    rows_out, records = [], []
    with torch.no_grad():
        for name, (fn, nbytes) in candidates(16384, 4096, baseline=baseline).items():
            if not name.startswith(only):
                continue
            src = torch.empty(max(nbytes // 8, 1), dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)
            t = measure_cuda_events({"kernel": fn, "copy": lambda: dst.copy_(src)})
            k, c = t["kernel"].min, t["copy"].min
            host = cuda_host_us(fn) if "library" in name else None
            rows_out.append([name, k * 1e3, t["kernel"].median * 1e3, c * 1e3, nbytes / k / 1e9, c / k,
                             host if host is not None else "n/a"])
            records.append({"config": name, "ms": k * 1e3, "median_ms": t["kernel"].median * 1e3, "copy_ms": c * 1e3,
                            "GBps": nbytes / k / 1e9, "of_copy": c / k, "host_us_per_call": host})
            print(f"{name:80s} {k * 1e3:8.4f} ms  of copy {c / k:5.3f}"
                  + (f"  host {host:6.1f} us/call" if host is not None else ""), flush=True)
    header = ["config", "ms (best)", "ms (median)", "copy ms", "GB/s", "of copy", "host us/call (library ops)"]
    machine = machine_info()
    machine["gpu"] = torch.cuda.get_device_name()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "memory_bound_configs" + args.tag)
    with open(stem + ".json", "w") as fh:
        json.dump({"machine": machine, "records": records}, fh, indent=1, default=str)
    md = [f"# Launch configurations of the memory-bound kernels ({machine['gpu']}, fp16)", "",
          f"Generated by `python bench/memory_bound_configs.py` on {machine['date']}; each row: the kernel launched "
          "directly (or the library op, '(library default)'), next to a torch copy of the same bytes, CUDA events "
          "around back-to-back batches, best of 5 round-robin rounds.", ""]
    md += table_lines(header, rows_out, markdown=True)
    with open(stem + ".md", "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(f"wrote {stem}.{{md,json}} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
