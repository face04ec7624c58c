"""Where the fwd+bwd time of the row ops goes on a GPU: per-kernel GPU time from
torch.profiler over autograd fwd+bwd (tk next to torch eager), the events time of
back-to-back calls, and the host time per call (Python + launches, no sync): when the
host time is above the GPU time, the fwd+bwd column of bench/kernels.py measures the
host. Results of H100 runs: bench/results/bwd_profile_h100.log (before the host path's launch
plans), bwd_profile_h100_host.log (after). bench/host_time.py measures the host side alone.

    python bench/bwd_profile.py [--ops layer_norm,bias_gelu] [--no-profile] [--sweep] [--once]
                                [--sweep-parts streams,norm,bias,rope,rows]

--sweep times the backward plans' alternatives alone (CUDA events, 16384x4096 fp16):
the norm walk's programs per SM x warps x prefetch x layer norm's row sums as one pair
reduction or two x one or two rows a step (kernels/norm.py BWD_*), the rope backward's
walk (kernels/rope.py BWD_*), and the bias-gradient backward of bias_gelu
(kernels/activation.py BIAS_BWD_*: rows per program, column block, warps, two rows a
step, a register cap), each checked against torch's gradients.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import cuda_events_us, cuda_host_us  # noqa: E402
from kernels import _fwd_bwd, cases  # noqa: E402

from tessera.kernels import norm as N  # noqa: E402

ROWS, COLS = 16384, 4096


def gpu_ms(fn, reps=20):
    """Best of 3 batches of `reps` back-to-back calls, ms per call (CUDA events)."""
    return cuda_events_us(fn, reps) / 1e3


def profile(name, fn, iters=10):
    """Per-kernel device time per fwd+bwd (us) and the host time per call."""
    from torch.profiler import ProfilerActivity, profile as prof
    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    rows = []
    for ev in p.key_averages():
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = ev.self_cuda_time_total
        if t > 0 and ev.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((t / iters, ev.count // iters, ev.key[:90]))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"  [{name}] GPU kernels {total:.1f} us per fwd+bwd; events {gpu_ms(fn):.4f} ms")
    for t, c, k in rows:
        print(f"      {t:8.1f} us  x{c}  {k}")




def norm_plans(inputs):
    """The norm backward (kernel + column sum) next to torch's backward kernels."""
    x, w, b = inputs
    _, _, mean, rstd = N.norm_forward("layer_norm", x, None, w, b, 1e-5, False, False)
    dy = torch.randn_like(x)
    t = gpu_ms(lambda: N.norm_backward(x, w, b, mean, rstd, dy, None, False, False))
    xr = x.detach().requires_grad_(True)
    wr, br = w.detach().requires_grad_(True), b.detach().requires_grad_(True)
    y = torch.nn.functional.layer_norm(xr, (x.shape[-1],), wr, br)
    tt = gpu_ms(lambda: torch.autograd.grad(y, (xr, wr, br), dy, retain_graph=True))
    print(f"  layer_norm backward alone: tk {t:.4f} ms, torch {tt:.4f} ms")


# (programs per SM, warps, next step's loads ahead, layer norm's two row sums as one pair
# reduction, two rows a step), set for every norm form through kernels/norm.py
# BWD_PLAN_OVERRIDE (the results of alternatives dropped from this list are in
# bench/results/bwd_sweep_normbwd_run1.log and bwd_sweep_norm_h100.log).
# Two programs per SM run with a register cap (kernels/_host.py max_registers: 128 at 8
# warps, 64 at 16), so both are resident; each writes its own partial row.
# The sixth element: the stream ring's stages (kernels/norm.py BWD_STAGES; > 1 loads the
# steps ahead through shared memory instead of the register prefetch).
NORM_CONFIGS = [(1, 16, True, True, False, 1), (2, 8, True, True, False, 1), (2, 16, True, True, False, 1),
                (2, 8, False, True, False, 2), (2, 8, False, True, False, 3), (2, 8, False, True, False, 4),
                (2, 8, False, True, True, 3), (3, 8, False, True, False, 3), (4, 4, False, True, False, 3),
                (1, 16, False, True, True, 3), (1, 16, False, True, True, 4), (2, 16, False, True, False, 3),
                (1, 16, False, True, False, 2), (1, 16, False, True, False, 3)]
# (rows per program, column block, warps, next row's loads ahead, two rows a step,
# programs per SM under a register cap or None); the first is the default. Registers
# (ptxas for sm_90a, erf / tanh-exp form, 2 warps): one row 63 / 47 (16 / 21 programs per
# SM), two rows 80 / 71 (12 / 14 per SM); at 4 warps (4 elements a thread) two rows 40 / 40
# (12 per SM), one row capped at 32 (16 per SM) 4 / 0 bytes of spills. The biasbwd run
# (bench/results/bias_bwd_ab_biasbwd_run1.log) timed the 2-warp plans here (its 4-warp
# labels ran 2 warps: the plan then allowed a warp per 256 columns at most). Earlier
# alternatives (rows 32/48 a row a step, 256 or 1024 columns, no prefetch, the unfused
# plan, tl.tanh) are in bench/results/bwd_sweep_normbwd*_run*.log.
# The seventh element: the stream ring's stages (BIAS_BWD_STAGES; > 1 without the
# register prefetch).
BIAS_CONFIGS = [(128, 512, 2, True, True, None, 1), (128, 512, 2, False, False, None, 2),
                (128, 512, 2, False, False, None, 3),
                (128, 512, 2, False, False, None, 4), (128, 1024, 4, False, False, None, 3),
                (128, 2048, 8, False, False, None, 3), (64, 512, 2, False, False, None, 3)]
BIAS_SWEEP_RESULTS = {}  # (form, config) -> ms, for bench/bias_bwd_ab.py


def sweep_norm(all_cases, copy_ms_per_byte):
    """The norm backward alone per plan: (programs per SM, warps, prefetch, pair sum)."""
    from tessera.kernels import _host as H
    saved = N.BWD_PLAN_OVERRIDE, N.BWD_PREFETCH, N.BWD_PAIR_SUM, N.BWD_STAGES
    for name in ("layer_norm", "rms_norm", "residual_add_layer_norm", "layer_norm+relu"):
        inputs = all_cases[name][0]
        x, w = inputs[0], inputs[-2] if name.startswith("residual") else inputs[1]
        r = inputs[1] if name.startswith("residual") else None
        b = inputs[-1] if name in ("layer_norm", "residual_add_layer_norm", "layer_norm+relu") else None
        is_rms, relu = "rms" in name, name.endswith("relu")
        _, h, mean, rstd = N.norm_forward(name, x, r, w, b, 1e-5 if not is_rms else 1e-6, is_rms, relu)
        xin = h if h is not None else x
        dy = torch.randn_like(x)
        dh = torch.randn_like(x) if r is not None else None
        # Reference gradients: torch autograd in fp32.
        xr = xin.float().requires_grad_(True)
        wr = w.float().requires_grad_(True)
        br = b.float().requires_grad_(True) if b is not None else None
        y = (F.rms_norm(xr, (x.shape[-1],), wr, 1e-6) if is_rms else F.layer_norm(xr, (x.shape[-1],), wr, br))
        if relu:
            y = F.relu(y)
        ref = torch.autograd.grad(y, [t for t in (xr, wr, br) if t is not None], dy.float())
        ref_dx = ref[0] + (dh.float() if dh is not None else 0)
        n_bytes = (4 if dh is not None else 3) * x.numel() * x.element_size()
        for per_sm, warps, prefetch, pair, two_rows, stages in NORM_CONFIGS:
            if is_rms and not pair:
                continue  # one row sum: the pair reduction does not apply
            N.BWD_PLAN_OVERRIDE, N.BWD_PREFETCH, N.BWD_PAIR_SUM = (per_sm, warps, two_rows), prefetch, pair
            N.BWD_STAGES = stages
            N._BWD_PLANS.clear()
            run = lambda: N.norm_backward(xin, w, b, mean, rstd, dy, dh, is_rms, relu)  # noqa: E731
            dx, dw, db = run()
            err = max((dx.float() - ref_dx).abs().max().item() / ref_dx.abs().max().item(),
                      (dw.float() - ref[1]).abs().max().item() / ref[1].abs().max().item())
            t = gpu_ms(run)
            print(f"  {name:24s} programs/SM {per_sm} ({H.num_programs_for_partials(x, 1 << 30, per_sm)}) "
                  f"maxnreg {H.max_registers(per_sm, warps)} warps {warps:2d} prefetch {int(prefetch)} pair sum {int(pair)} rows a step {1 + two_rows} stages {stages}: "
                  f"{t:.4f} ms  {n_bytes * copy_ms_per_byte / t:.3f} of copy  "
                  f"err {err:.2g}", flush=True)
        if name in ("layer_norm", "layer_norm+relu"):
            # The shipped plan with the GPU's instruction cuts on and off (kernels/norm.py
            # BWD_NO_SELECT, BWD_FMA_DX / BWD_FMA_DX_RELU), in the same run.
            N.BWD_PLAN_OVERRIDE, N.BWD_PREFETCH, N.BWD_PAIR_SUM, N.BWD_STAGES = saved
            cuts = N.BWD_NO_SELECT, N.BWD_FMA_DX, N.BWD_FMA_DX_RELU, N.BWD_FMA_XHAT
            for no_select, fma_dx, fma_xhat in ((True, True, False), (True, True, True), (False, True, False),
                                                (True, False, False), (True, False, True), (False, False, False)):
                N.BWD_NO_SELECT, N.BWD_FMA_DX, N.BWD_FMA_DX_RELU, N.BWD_FMA_XHAT = no_select, fma_dx, fma_dx, fma_xhat
                N._BWD_PLANS.clear()
                run = lambda: N.norm_backward(xin, w, b, mean, rstd, dy, dh, is_rms, relu)  # noqa: E731
                dx, dw, db = run()
                err = (dx.float() - ref_dx).abs().max().item() / ref_dx.abs().max().item()
                t = gpu_ms(run)
                print(f"  {name:24s} shipped plan {N._bwd_gpu_plan(x, is_rms, relu, dh is not None, 4096)} "
                      f"no select {int(no_select)} dx in two FMAs {int(fma_dx)} xhat in one FMA {int(fma_xhat)}: "
                      f"{t:.4f} ms  "
                      f"{n_bytes * copy_ms_per_byte / t:.3f} of copy  err {err:.2g}", flush=True)
            N.BWD_NO_SELECT, N.BWD_FMA_DX, N.BWD_FMA_DX_RELU, N.BWD_FMA_XHAT = cuts
    N.BWD_PLAN_OVERRIDE, N.BWD_PREFETCH, N.BWD_PAIR_SUM, N.BWD_STAGES = saved
    N._BWD_PLANS.clear()


def sweep_bias(all_cases, copy_ms_per_byte):
    """bias_gelu's and bias_gelu_tanh's backward alone: the fused bias-gradient kernel
    (+ its column sum) per plan of BIAS_CONFIGS."""
    for tanh in (False, True):  # the tanh form as it ships (its exp form)
        _sweep_bias_form(all_cases, copy_ms_per_byte, tanh, tanh)


def _sweep_bias_form(all_cases, copy_ms_per_byte, tanh, via_exp):
    from tessera.kernels import activation as A
    names = ("BIAS_BWD_ROWS", "BIAS_BWD_BLOCK", "BIAS_BWD_WARPS", "BIAS_BWD_PREFETCH", "BIAS_BWD_TWO_ROWS",
             "BIAS_BWD_PER_SM", "BIAS_BWD_STAGES", "BIAS_BWD_TANH_VIA_EXP")
    saved = [getattr(A, n) for n in names] + [A.BIAS_BWD_STAGES_FAST_MEMORY]
    A.BIAS_BWD_TANH_VIA_EXP = via_exp
    x, b = all_cases["bias_gelu"][0]
    dy = torch.randn_like(x)
    xr, br = x.float().requires_grad_(True), b.float().requires_grad_(True)
    ref = torch.autograd.grad(F.gelu(xr + br, approximate="tanh" if tanh else "none"), (xr, br), dy.float())
    n_bytes = 3 * x.numel() * x.element_size()
    form = ("bias_gelu_tanh" + (" (exp form)" if via_exp else "")) if tanh else "bias_gelu"

    plans = [(f"fused rows {r} block {bl} warps {wp} prefetch {int(pf)} rows a step {1 + tw} per SM {ps} stages {st}",
               (r, bl, wp, pf, tw, ps, st)) for r, bl, wp, pf, tw, ps, st in BIAS_CONFIGS]
    for label, cfg in plans:
        for n, v in zip(names, cfg):
            setattr(A, n, v)
        A.BIAS_BWD_STAGES_FAST_MEMORY = A.BIAS_BWD_STAGES  # (the plan's stages on either GPU)
        A._BWD_PLANS.clear()
        run = lambda: A.elementwise_backward(A.GELU, x, b, dy, 0.0, 0, A.BIAS, tanh)  # noqa: E731
        da, db = run()
        err = max((da.float() - ref[0]).abs().max().item() / ref[0].abs().max().item(),
                  (db.float() - ref[1]).abs().max().item() / ref[1].abs().max().item())
        t = gpu_ms(run)
        BIAS_SWEEP_RESULTS[(form, cfg)] = t
        print(f"  {form} backward {label:45s}: {t:.4f} ms  {n_bytes * copy_ms_per_byte / t:.3f} of copy  "
              f"err {err:.2g}", flush=True)
    for n, v in zip(names, saved):
        setattr(A, n, v)
    A.BIAS_BWD_STAGES_FAST_MEMORY = saved[-1]
    A._BWD_PLANS.clear()


# (programs per SM, warps, next row group's loads ahead); the first is main's plan.
# 3 and 4 per SM run with a register cap (168 and 128 at 4 warps).
# The fourth element: the stream ring's stages (kernels/rope.py BWD_STAGES).
ROPE_CONFIGS = [(3, 4, False, 1), (2, 4, False, 3), (3, 4, False, 3), (2, 8, False, 3), (1, 8, False, 4),
                (2, 4, False, 4)]


def sweep_rope(all_cases, copy_ms_per_byte):
    """rms_norm_rope's backward alone per plan (programs per SM, warps, prefetch)."""
    from tessera.kernels import rope as RP
    saved = RP.BWD_PROGRAMS_PER_SM, RP.BWD_NUM_WARPS, RP.BWD_PREFETCH, RP.BWD_STAGES
    x, w = all_cases["rms_norm_rope"][0]
    ang = torch.randn(x.shape[0], x.shape[-1] // 2)
    cos, sin = ang.cos().to(x), ang.sin().to(x)
    _, rstd = RP.rms_norm_rope_forward(x, w, cos, sin, 1e-6)
    dy = torch.randn_like(x)
    n_bytes = 3 * x.numel() * x.element_size()
    for i, (per_sm, warps, prefetch, stages) in enumerate(ROPE_CONFIGS):
        RP.BWD_PROGRAMS_PER_SM, RP.BWD_NUM_WARPS, RP.BWD_PREFETCH, RP.BWD_STAGES = per_sm, warps, prefetch, stages
        RP._PLANS.clear()
        run = lambda: RP.rms_norm_rope_backward(x, w, cos, sin, rstd, dy)  # noqa: E731
        dx, dw = run()
        if i == 0:
            first = dx.float(), dw.float()
        err = max((dx.float() - first[0]).abs().max().item(), (dw.float() - first[1]).abs().max().item()
                  / first[1].abs().max().item())
        t = gpu_ms(run)
        print(f"  rms_norm_rope backward programs/SM {per_sm} warps {warps:2d} prefetch {int(prefetch)} stages {stages}: {t:.4f} ms  "
              f"{n_bytes * copy_ms_per_byte / t:.3f} of copy  diff from the first plan {err:.2g}", flush=True)
    RP.BWD_PROGRAMS_PER_SM, RP.BWD_NUM_WARPS, RP.BWD_PREFETCH, RP.BWD_STAGES = saved
    RP._PLANS.clear()


def sweep_streams(all_cases, copy_ms_per_byte):
    """The ceiling of the backwards' byte mixes: torch's elementwise kernels reading 2 or 3
    fp16 arrays of 16384x4096 and writing 1 (c = a + b, d = a + b * c), next to the copy
    (read 1, write 1), each as a fraction of a copy of the same bytes."""
    a, b, c = (torch.randn(ROWS, COLS, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(a)
    mat = a.numel() * a.element_size()
    for label, fn, n_bytes in (("read 1 write 1 (fp16 copy_)", lambda: out.copy_(a), 2 * mat),
                               ("read 2 write 1 (torch.add)", lambda: torch.add(a, b, out=out), 3 * mat),
                               ("read 3 write 1 (torch.addcmul)", lambda: torch.addcmul(a, b, c, out=out), 4 * mat)):
        t = gpu_ms(fn)
        print(f"  stream {label:32s}: {t:.4f} ms  {n_bytes / t / 1e6:.0f} GB/s  "
              f"{n_bytes * copy_ms_per_byte / t:.3f} of copy", flush=True)


def sweep_rows(all_cases, copy_ms_per_byte):
    """Backward row kernels' launch choices: cross_entropy's warps, gelu_dropout's block."""
    from tessera.kernels import activation as A
    from tessera.kernels import softmax_ce as S
    saved = S.CE_BWD_MAX_WARPS, A.DROPOUT_BWD_BLOCK
    x = all_cases["cross_entropy"][0][0]
    tgt = torch.randint(0, x.shape[1], (x.shape[0],), device=x.device)
    out, scale, lse = S.cross_entropy_forward(x, tgt, -100, 0.0, "mean")
    dl = torch.ones_like(out)
    n_bytes = 2 * x.numel() * x.element_size()
    for warps in (4, 8, 16):
        S.CE_BWD_MAX_WARPS = warps
        S._CE_PLANS.clear()
        t = gpu_ms(lambda: S.cross_entropy_backward(x, tgt, lse, dl, scale, -100, 0.0))
        print(f"  cross_entropy backward warps {warps:2d}: {t:.4f} ms  {n_bytes * copy_ms_per_byte / t:.3f} of copy",
              flush=True)
    S.CE_BWD_MAX_WARPS = saved[0]
    S._CE_PLANS.clear()
    dy = torch.randn_like(x)
    n_bytes = 3 * x.numel() * x.element_size()
    for block in (2048, 4096):
        A.DROPOUT_BWD_BLOCK = block
        A._BWD_PLANS.clear()
        t = gpu_ms(lambda: A.elementwise_backward(A.GELU, x, None, dy, 0.1, 1, A.NO_B))
        print(f"  gelu_dropout backward block {block}: {t:.4f} ms  {n_bytes * copy_ms_per_byte / t:.3f} of copy",
              flush=True)
    A.DROPOUT_BWD_BLOCK = saved[1]
    A._BWD_PLANS.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="layer_norm,rms_norm,log_softmax,softmax,bias_gelu,cross_entropy")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="only the backward plans' sweep (see the docstring)")
    ap.add_argument("--sweep-parts", default="streams,norm,bias,rope,rows", help="which plans --sweep times")
    ap.add_argument("--once", action="store_true",
                    help="run the layer_norm backward (default plan) three times and exit: a target for ncu")
    args = ap.parse_args()
    if args.once:
        x, w, b = cases(ROWS, COLS, "cuda", torch.float16)["layer_norm"][0]
        _, _, mean, rstd = N.norm_forward("layer_norm", x, None, w, b, 1e-5, False, False)
        dy = torch.randn_like(x)
        for _ in range(3):
            N.norm_backward(x, w, b, mean, rstd, dy, None, False, False)
        torch.cuda.synchronize()
        return
    all_cases = cases(ROWS, COLS, "cuda", torch.float16)
    copy_src = torch.empty(ROWS * COLS // 2, dtype=torch.float32, device="cuda")
    copy_dst = torch.empty_like(copy_src)
    copy_ms = gpu_ms(lambda: copy_dst.copy_(copy_src))
    print(f"copy of 2 x 128 MiB (fp16 16384x4096 read + write): {copy_ms:.4f} ms on {torch.cuda.get_device_name()}")
    if args.sweep:
        per_byte = copy_ms / (ROWS * COLS * 2 * 2)
        parts = {"streams": sweep_streams, "norm": sweep_norm, "bias": sweep_bias, "rope": sweep_rope,
                 "rows": sweep_rows}
        for part in args.sweep_parts.split(","):
            parts[part](all_cases, per_byte)
        return
    ones = torch.empty(ROWS, COLS, dtype=torch.float16, device="cuda")
    print(f"torch.ones_like of the output (in every fwd+bwd): {gpu_ms(lambda: torch.ones_like(ones)):.4f} ms")
    for name in args.ops.split(","):
        inputs, f_tk, f_torch, _, _ = all_cases[name]
        print(f"== {name}")
        if not args.no_profile:
            for impl, f in (("tk", f_tk), ("torch", f_torch)):
                fb = _fwd_bwd(f, inputs)
                profile(impl, fb)
                print(f"      host {cuda_host_us(fb, n=50):.1f} us per fwd+bwd call (no sync)")
        if name == "layer_norm":
            norm_plans(inputs)

if __name__ == "__main__":
    main()
