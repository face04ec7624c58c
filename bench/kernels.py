"""tessera.kernels next to torch eager and numpy (CPU), and next to torch eager and
torch.compile on a GPU: every library op, forward (and forward + backward through
autograd), side by side in one run, timed round-robin. Results go to
bench/results/kernels_cpu.{md,json} (or kernels_gpu.* with --device cuda).

    python bench/kernels.py [--quick] [--device cpu|cuda] [--ops layer_norm,softmax]

GB/s counts each input read once and each output written once (the traffic a fused
kernel needs); "torch/tk" > 1 means tk is faster. Targets: on the CPU every fused op
ahead of torch eager; on a GPU memory-bound ops at >= 90% of copy bandwidth, forward
and backward.

The backward on a GPU is timed on its own: forward passes run first, outside the
profiler, then torch.profiler's busy time of the CUDA kernels of torch.autograd.grad
over them (the union of their intervals: a kernel launched early with PDL, as tk's
column sums are, does not count its wait for the one before; the upstream gradients made beforehand, no AccumulateGrad copies), for tk, torch
eager, torch.compile (of the torch function, with autograd: AOTAutograd's compiled
backward) and Triton (tk's sources built by Triton). Its byte model (backward_bytes)
is what backward kernels must move at least, given the forward's *inputs* and the
statistics a fused forward keeps (mean/rstd, lse): each tensor the gradient formula
reads once, the upstream gradients once, each input's gradient written once, e.g.

    layer_norm     read x, dy, mean, rstd, weight, bias; write dx, dweight, dbias
                   = 3 (rows x cols) + 2 rows (fp32) + 4 cols
    residual_add_* read h (= x + residual), dy, dh; write dx (the same tensor is the
                   residual's gradient) = 4 (rows x cols) + statistics + vectors
    softmax        read y, dy; write dx = 3;   cross_entropy: read logits, write dlogits = 2
    add_relu, mul_tanh, swiglu, geglu: read a, b, dy; write da, db = 5
    bias_gelu(_tanh), gelu_dropout: read x, dy; write dx (+ dbias) = 3
    reduce_*       read x (+ dy, one row or column); write dx = 2
(a design that saves outputs could move less for some: relu's backward needs only the
output and dy). 'tk bwd of copy' = time of a device copy moving the same bytes / tk's
backward kernel time. torch.compile's fwd+bwd column: events time of the compiled
function's forward + backward through autograd."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import RESULTS_DIR, cuda_kernels_us, machine_info, measure_round_robin, table_lines  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if os.environ.get("TK_KERNELS_DIR"):  # another copy of tessera.kernels (e.g. an older commit's), for A/B runs
    import importlib.util

    import tessera
    _dir = os.environ["TK_KERNELS_DIR"]
    _spec = importlib.util.spec_from_file_location("tessera.kernels", os.path.join(_dir, "__init__.py"),
                                                   submodule_search_locations=[_dir])
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["tessera.kernels"] = tessera.kernels = _mod
    _spec.loader.exec_module(_mod)
import tessera.kernels as tk  # noqa: E402


def _np_gelu(x):
    from math import sqrt
    t = np.tanh(sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))  # numpy has no erf: tanh form
    return 0.5 * x * (1 + t)


def cases(rows, cols, device, dtype, lib=tk):
    """name -> (inputs, `lib` fn, torch fn, numpy key or None, bytes moved); lib is
    tessera.kernels, or its sources compiled by Triton (load_triton_tk)."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def t(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    x, r, w, b = t(rows, cols), t(rows, cols), t(cols), t(cols)
    e = x.element_size()
    mat = rows * cols * e
    tgt = torch.randint(0, cols, (rows,), generator=g).to(device)
    hd = 128
    xq = t(rows * cols // (8 * hd), 8, hd)
    ang = torch.randn(xq.shape[0], hd // 2, generator=g)
    cos, sin = ang.cos().to(device=device, dtype=dtype), ang.sin().to(device=device, dtype=dtype)
    k_in = 1024
    xl, wl, bl = t(rows // 4, k_in), t(cols // 2, k_in, scale=k_in ** -0.5), t(cols // 2)
    q, kk = t(8, rows // 8, 64), t(8, rows // 8, 64)
    # A language model's vocabulary: rows / 4 rows of 32000 classes (split in slices),
    # rows / 8 of GPT-2's 50257 (odd: rows not 16-byte aligned).
    x_vocab = t(max(1, rows // 4), 32000)
    t_vocab = torch.randint(0, 32000, (x_vocab.shape[0],), generator=g).to(device)
    x_gpt2 = t(max(1, rows // 8), 50257)
    t_gpt2 = torch.randint(0, 50257, (x_gpt2.shape[0],), generator=g).to(device)

    def rope_ref(a, wt):
        n = F.rms_norm(a, (hd,), wt, 1e-6)
        n1, n2 = n[..., : hd // 2], n[..., hd // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([n1 * c - n2 * s, n2 * c + n1 * s], -1)

    C = {
        "layer_norm": ((x, w, b), lambda a, w_, b_: lib.layer_norm(a, w_, b_),
                       lambda a, w_, b_: F.layer_norm(a, (cols,), w_, b_), "ln", 2 * mat),
        "layer_norm+relu": ((x, w, b), lambda a, w_, b_: lib.layer_norm(a, w_, b_, relu=True),
                            lambda a, w_, b_: F.relu(F.layer_norm(a, (cols,), w_, b_)), None, 2 * mat),
        "rms_norm": ((x, w), lambda a, w_: lib.rms_norm(a, w_), lambda a, w_: F.rms_norm(a, (cols,), w_, 1e-6),
                     "rms", 2 * mat),
        "residual_add_layer_norm": ((x, r, w, b), lambda a, r_, w_, b_: lib.residual_add_layer_norm(a, r_, w_, b_),
                                    lambda a, r_, w_, b_: (F.layer_norm(a + r_, (cols,), w_, b_), a + r_), None,
                                    4 * mat),
        "residual_add_rms_norm": ((x, r, w), lambda a, r_, w_: lib.residual_add_rms_norm(a, r_, w_),
                                  lambda a, r_, w_: (F.rms_norm(a + r_, (cols,), w_, 1e-6), a + r_), None, 4 * mat),
        "rms_norm_rope": ((xq, t(hd)), lambda a, w_: lib.rms_norm_rope(a, w_, cos, sin), rope_ref, None,
                          2 * xq.numel() * e),
        "softmax": ((x,), lambda a: lib.softmax(a), lambda a: torch.softmax(a, -1), "softmax", 2 * mat),
        "softmax+dropout": ((x,), lambda a: lib.softmax(a, dropout_p=0.1, seed=1),
                            lambda a: F.dropout(torch.softmax(a, -1), 0.1), None, 2 * mat),
        "log_softmax": ((x,), lambda a: lib.log_softmax(a), lambda a: torch.log_softmax(a, -1), None, 2 * mat),
        "cross_entropy": ((x,), lambda a: lib.cross_entropy(a, tgt), lambda a: F.cross_entropy(a, tgt), None, mat),
        "cross_entropy(vocab=32000)": ((x_vocab,), lambda a: lib.cross_entropy(a, t_vocab),
                                       lambda a: F.cross_entropy(a, t_vocab), None, x_vocab.numel() * e),
        "cross_entropy(vocab=50257)": ((x_gpt2,), lambda a: lib.cross_entropy(a, t_gpt2),
                                       lambda a: F.cross_entropy(a, t_gpt2), None, x_gpt2.numel() * e),
        "add_relu": ((x, r), lib.add_relu, lambda a, b_: F.relu(a + b_), "add_relu", 3 * mat),
        "mul_tanh": ((x, r), lib.mul_tanh, lambda a, b_: torch.tanh(a * b_), "mul_tanh", 3 * mat),
        "bias_gelu": ((x, b), lib.bias_gelu, lambda a, b_: F.gelu(a + b_), None, 2 * mat),
        "bias_gelu_tanh": ((x, b), lambda a, b_: lib.bias_gelu(a, b_, "tanh"),
                           lambda a, b_: F.gelu(a + b_, approximate="tanh"), "bias_gelu_tanh", 2 * mat),
        "gelu_dropout": ((x,), lambda a: lib.gelu_dropout(a, 0.1, seed=1), lambda a: F.dropout(F.gelu(a), 0.1),
                         None, 2 * mat),
        "swiglu": ((x, r), lib.swiglu, lambda a, b_: F.silu(a) * b_, None, 3 * mat),
        "geglu": ((x, r), lib.geglu, lambda a, b_: F.gelu(a) * b_, None, 3 * mat),
        "reduce_sum_squared(dim=-1)": ((x,), lambda a: lib.reduce_sum_squared(a, -1), lambda a: (a * a).sum(-1),
                                       "sumsq", mat),
        "reduce_mean_abs(dim=0)": ((x,), lambda a: lib.reduce_mean_abs(a, 0), lambda a: a.abs().mean(0),
                                   "meanabs0", mat),
        "attention_score": ((q, kk), lambda a, b_: lib.attention_score(a, b_, 0.125),
                            lambda a, b_: a @ b_.transpose(-1, -2) * 0.125, None,
                            (q.numel() * 2 + 8 * (rows // 8) ** 2) * e),
        "linear_relu": ((xl, wl, bl), lib.linear_relu, lambda a, w_, b_: F.relu(F.linear(a, w_, b_)), "linear_relu",
                        (xl.numel() + wl.numel() + xl.shape[0] * wl.shape[0]) * e),
        "linear_gelu": ((xl, wl, bl), lib.linear_gelu, lambda a, w_, b_: F.gelu(F.linear(a, w_, b_)), None,
                        (xl.numel() + wl.numel() + xl.shape[0] * wl.shape[0]) * e),
    }
    return C


NUMPY = {
    "ln": lambda a, w, b: (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5) * w + b,
    "rms": lambda a, w: a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * w,
    "softmax": lambda a: (lambda e_: e_ / e_.sum(-1, keepdims=True))(np.exp(a - a.max(-1, keepdims=True))),
    "add_relu": lambda a, b: np.maximum(a + b, 0),
    "mul_tanh": lambda a, b: np.tanh(a * b),
    "bias_gelu_tanh": lambda a, b: _np_gelu(a + b),
    "sumsq": lambda a: np.einsum("ij,ij->i", a, a),
    "meanabs0": lambda a: np.abs(a).mean(0),
    "linear_relu": lambda a, w, b: np.maximum(a @ w.T + b, 0),
}


def load_triton_tk():
    """The library's own sources with `@tessera.kernel` -> `@triton.jit` and
    `tessera.language` -> `triton.language`: the same kernels and host code, compiled
    by Triton (the kernel-for-kernel peer on a GPU). None without Triton."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    import importlib
    import tempfile
    src_dir = os.path.dirname(os.path.abspath(tk.__file__))
    root = tempfile.mkdtemp(prefix="tk-triton-")
    os.makedirs(os.path.join(root, "tk_triton"))
    for f in os.listdir(src_dir):
        if f.endswith(".py"):
            with open(os.path.join(src_dir, f)) as fh:
                text = fh.read()
            text = text.replace("import tessera.language as tl", "import triton\nimport triton.language as tl")
            text = text.replace("@tessera.kernel", "@triton.jit")
            # triton.language has no tanh: Triton users call libdevice's (an accurate
            # tanh, as tl.tanh is in Tessera).
            text = text.replace("tl.tanh(", "libdevice.tanh(")
            # Tessera's ping-pong schedule hint has no Triton spelling (the Triton peer runs
            # the loop without it; the library's plans leave it off).
            text = re.sub(r",\s*ping_pong=[A-Za-z_]+", "", text)
            # Grid dependency control (tl.extra.cuda.gdc_*): Triton launches these kernels
            # without launch_pdl, where the calls do nothing; a Triton without them skips them.
            if not _triton_has_gdc():
                text = re.sub(r"tl\.extra\.cuda\.gdc_(wait|launch_dependents)\(\)", "pass", text)
            text = text.replace("import triton.language as tl",
                                "import triton.language as tl\nfrom triton.language.extra import libdevice")
            with open(os.path.join(root, "tk_triton", f), "w") as fh:
                fh.write(text)
    sys.path.insert(0, root)
    from triton.runtime.jit import JITFunction
    if not hasattr(JITFunction, "bind"):
        JITFunction.bind = _triton_bind
    return importlib.import_module("tk_triton")


def _triton_has_gdc():
    try:
        from triton.language.extra import cuda
    except ImportError:
        return False
    return hasattr(cuda, "gdc_wait") and hasattr(cuda, "gdc_launch_dependents")


def _triton_bind(self, grid, **values):
    """Tessera's Kernel.bind for the Triton peer (the library's host code launches bound
    plans): the fixed parameters and options as keywords, the rest by position in
    signature order, on the current stream, through Triton's own launch path."""
    free = [n for n in self.arg_names if n not in values]
    launch = self[grid]

    def call(*args, stream=None):
        if stream is not None:
            raise NotImplementedError("the Triton peer launches on torch's current stream")
        return launch(**dict(zip(free, args)), **values)
    return call


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _fwd_bwd(fn, inputs):
    """A callable running forward and backward through autograd (grads of all inputs)."""
    leaves = [i.detach().clone().requires_grad_(True) for i in inputs]

    def run():
        for lf in leaves:
            lf.grad = None
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward([o for o in outs], [torch.ones_like(o) for o in outs])
    return run


class _EventTiming:
    def __init__(self, samples):
        self.samples = sorted(samples)
        self.min = self.samples[0]
        self.median = self.samples[len(self.samples) // 2]


def measure_cuda_events(fns, rounds=5, target_ms=25.0):
    """GPU time per call from CUDA events around a batch of back-to-back calls (no
    synchronization between calls, as triton.testing.do_bench), round-robin over the
    implementations; each round's batch is sized to about target_ms. Seconds."""
    plan = {}
    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(3):
            fn()
        e.record()
        torch.cuda.synchronize()
        per_call = max(s.elapsed_time(e) / 3, 1e-3)
        plan[name] = max(3, min(200, int(target_ms / per_call)))
    out = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            n = plan[name]
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(n):
                fn()
            e.record()
            torch.cuda.synchronize()
            out[name].append(s.elapsed_time(e) / n / 1e3)
    return {name: _EventTiming(v) for name, v in out.items()}


def gpu_kernel_us(fn, iters=5):
    """GPU kernel time per call (us): the device's busy time torch.profiler records over
    `iters` calls (the union of the kernels' intervals, common.cuda_kernels_us) (bench/bwd_profile.py lists them). CUDA events around
    back-to-back calls measure the host instead when it is the slower side."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return cuda_kernels_us(prof) / iters


def backward_bytes(name, inputs):
    """Bytes the backward kernels of op `name` must move at least (module docstring)."""
    x = inputs[0]
    e = x.element_size()
    mat = x.numel() * e
    rows = x.numel() // max(x.shape[-1], 1)
    vec = x.shape[-1] * e
    stat = rows * 4  # an fp32 per row: mean, rstd or lse
    if name in ("layer_norm", "layer_norm+relu"):
        return 3 * mat + 2 * stat + 4 * vec
    if name == "rms_norm":
        return 3 * mat + stat + 2 * vec
    if name == "residual_add_layer_norm":
        return 4 * mat + 2 * stat + 4 * vec
    if name == "residual_add_rms_norm":
        return 4 * mat + stat + 2 * vec
    if name == "rms_norm_rope":  # + the cos and sin tables (one row per position)
        hd = x.shape[-1]
        return 3 * mat + stat + 2 * vec + 2 * x.shape[0] * (hd // 2) * e
    if name in ("softmax", "softmax+dropout", "log_softmax", "bias_gelu", "bias_gelu_tanh", "gelu_dropout"):
        return 3 * mat + (2 * vec if name.startswith("bias_gelu") else 0)
    if name.startswith("cross_entropy"):  # + the targets (int64) and lse
        return 2 * mat + rows * (8 + 4)
    if name == "add_relu":  # read y and dy, write one gradient both inputs take (relu tests its output)
        return 3 * mat
    if name in ("mul_tanh", "swiglu", "geglu"):
        return 5 * mat
    if name.startswith("reduce_"):
        return 2 * mat
    if name == "attention_score":  # read q, k, ds; write dq, dk
        q, k = inputs
        return (2 * q.numel() + 2 * k.numel() + q.shape[0] * q.shape[1] * k.shape[1]) * e
    if name.startswith("linear_"):  # read x, w, z, dy; write dx, dw, db
        xl, wl, bl = inputs
        m, n = xl.shape[0], wl.shape[0]
        return (2 * xl.numel() + 2 * wl.numel() + 2 * m * n + bl.numel()) * e
    raise KeyError(name)


def gpu_backward_us(fn, inputs, iters=4):
    """GPU kernel time (us) of one backward pass alone: `iters` forward passes run
    first, then torch.profiler's busy time of the CUDA kernels of torch.autograd.grad over each
    (upstream gradients made beforehand, so neither the forward nor their fill counts)."""
    from torch.profiler import ProfilerActivity, profile
    leaves = [i.detach().clone().requires_grad_(True) for i in inputs]

    def forward():
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        return outs, [torch.ones_like(o) for o in outs]
    outs, grads = forward()  # a warm-up pass (compiles the backward kernels)
    torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    passes = [forward() for _ in range(iters)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for outs, grads in passes:
            torch.autograd.grad(outs, leaves, grads, allow_unused=True)
        torch.cuda.synchronize()
    return cuda_kernels_us(prof) / iters


def host_us(fn, calls=30):
    """Host time per call (us): back-to-back calls with no synchronization (the GPU
    queue absorbs the kernels), best of 3."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def run(args):
    device = args.device
    dtype = getattr(torch, args.dtype)
    rows, cols = (2048, 1024) if args.quick else ((16384, 4096) if device == "cuda" else (4096, 4096))
    all_cases = cases(rows, cols, device, dtype)
    tkt = load_triton_tk() if device == "cuda" and args.triton else None
    triton_cases = cases(rows, cols, device, dtype, lib=tkt) if tkt is not None else {}
    names = [n for n in all_cases if not args.ops or n in args.ops.split(",")]
    compiled = {}
    table, records = [], []
    for name in names:
        inputs, f_tk, f_torch, np_key, nbytes = all_cases[name]
        # Correctness first: a wrong result is reported, never timed.
        with torch.no_grad():
            got, want = f_tk(*inputs), f_torch(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        if "dropout" not in name:
            err = max((a.double() - b.double()).abs().max().item() / max(1.0, b.double().abs().max().item())
                      for a, b in zip(got, want))
            status = "ok" if err < (1e-4 if dtype == torch.float32 else 2e-2) else f"WRONG ({err:.2g})"
        else:
            status = "ok (random)"
        fns = {"tk": lambda: f_tk(*inputs), "torch eager": lambda: f_torch(*inputs)}
        if device == "cuda" and args.compile:
            try:
                compiled[name] = torch.compile(f_torch)
                compiled[name](*inputs)
                fns["torch.compile"] = lambda: compiled[name](*inputs)
            except Exception as exc:  # pragma: no cover - depends on the toolchain
                print(f"  torch.compile failed for {name}: {type(exc).__name__}")
        if name in triton_cases:
            f_tr = triton_cases[name][1]
            try:
                with torch.no_grad():
                    f_tr(*inputs)
                fns["triton (same source)"] = lambda: f_tr(*inputs)
            except Exception as exc:  # pragma: no cover - depends on the toolchain
                print(f"  Triton failed for {name}: {type(exc).__name__}: {str(exc)[:200]}")
        if device == "cpu" and np_key and dtype == torch.float32:
            npi = [i.numpy() for i in inputs]
            fns["numpy"] = lambda: NUMPY[np_key](*npi)
        if device == "cuda":
            copy_src = torch.empty(nbytes // 2 // 4, dtype=torch.float32, device=device)
            copy_dst = torch.empty_like(copy_src)
            fns["copy (same bytes)"] = lambda: copy_dst.copy_(copy_src)
        with torch.no_grad():
            if device == "cuda":
                t = measure_cuda_events(fns)
            else:
                t = measure_round_robin(fns, repeats=6 if args.quick else 10, rounds=2 if args.quick else 3,
                                        budget_s=1.0 if args.quick else 2.0)
        bw = {k: tm.min for k, tm in t.items()}
        fwd_gpu_us = fwd_host_us = None
        if device == "cuda" and args.kernel_time:
            # The forward's kernels alone and its host path alone: the events time above is
            # the larger of the two, and a forward of two short launches can be host-bound.
            with torch.no_grad():
                fwd_gpu_us = gpu_kernel_us(fns["tk"])
                fwd_host_us = host_us(fns["tk"])
        bwd, bwd_median, gpu_us, host, bwd_us, bwd_copy_ms = {}, {}, {}, {}, {}, None
        bwd_nbytes = backward_bytes(name, inputs)
        if not args.no_backward:
            fb = {"tk": _fwd_bwd(f_tk, inputs), "torch eager": _fwd_bwd(f_torch, inputs)}
            grad_fns = {"tk": f_tk, "torch eager": f_torch}
            if "torch.compile" in fns:
                try:  # its own compiled module: the forward-only one above saw no grad
                    f_c = torch.compile(f_torch)
                    fb_c = _fwd_bwd(f_c, inputs)
                    fb_c()
                    fb["torch.compile"], grad_fns["torch.compile"] = fb_c, f_c
                except Exception as exc:  # pragma: no cover - depends on the toolchain
                    print(f"  torch.compile fwd+bwd failed for {name}: {type(exc).__name__}")
            if "triton (same source)" in fns:
                try:
                    fb_t = _fwd_bwd(f_tr, inputs)
                    fb_t()
                    fb["triton (same source)"], grad_fns["triton (same source)"] = fb_t, f_tr
                except Exception as exc:  # pragma: no cover - depends on the toolchain
                    print(f"  Triton fwd+bwd failed for {name}: {type(exc).__name__}: {str(exc)[:200]}")
            if device == "cuda":
                if args.kernel_time:
                    bwd_us = {k: gpu_backward_us(f, inputs) for k, f in grad_fns.items()}
                    bcopy_src = torch.empty(bwd_nbytes // 2 // 4, dtype=torch.float32, device=device)
                    bcopy_dst = torch.empty_like(bcopy_src)
                    fb["copy (backward's bytes)"] = lambda: bcopy_dst.copy_(bcopy_src)
                tb = measure_cuda_events(fb)
            else:
                tb = measure_round_robin(fb, repeats=4 if args.quick else 8, rounds=2,
                                         budget_s=1.0 if args.quick else 2.0)
            bwd_copy_ms = tb.pop("copy (backward's bytes)").min * 1e3 if "copy (backward's bytes)" in tb else None
            bwd = {k: tm.min for k, tm in tb.items()}
            bwd_median = {k: tm.median for k, tm in tb.items()}
            if device == "cuda" and args.kernel_time:
                gpu_us = {k: gpu_kernel_us(f) for k, f in fb.items() if k in ("tk", "torch eager")}
                host = {k: host_us(f) for k, f in fb.items() if k in ("tk", "torch eager")}
        row = {"op": name, "shape": [int(s) for s in inputs[0].shape], "dtype": args.dtype, "status": status,
               "fwd_ms": {k: v * 1e3 for k, v in bw.items()},
               "fwd_median_ms": {k: tm.median * 1e3 for k, tm in t.items()},
               "fwd_GBps": {k: nbytes / v / 1e9 for k, v in bw.items() if not k.startswith("copy")},
               "fwd_bwd_ms": {k: v * 1e3 for k, v in bwd.items()},
               "fwd_bwd_median_ms": {k: v * 1e3 for k, v in bwd_median.items()},
               "fwd_bwd_gpu_kernels_us": gpu_us, "fwd_bwd_host_us": host,
               "bwd_bytes": bwd_nbytes, "bwd_gpu_kernels_us": bwd_us,
               "bwd_GBps": {k: bwd_nbytes / (v * 1e-6) / 1e9 for k, v in bwd_us.items() if v > 0}}
        if bwd_us and bwd_copy_ms:
            row["bwd_copy_us"] = bwd_copy_ms * 1e3
            row["bwd_frac_of_copy"] = {k: bwd_copy_ms * 1e3 / v for k, v in bwd_us.items() if v > 0}
        row["torch_over_tk_fwd"] = bw["torch eager"] / bw["tk"]
        if bwd:
            row["torch_over_tk_fwd_bwd"] = bwd["torch eager"] / bwd["tk"]
        if "copy (same bytes)" in bw:
            row["tk_frac_of_copy"] = bw["copy (same bytes)"] / bw["tk"]
        if fwd_gpu_us:
            row["tk_fwd_gpu_kernels_us"], row["tk_fwd_host_us"] = fwd_gpu_us, fwd_host_us
            if "copy (same bytes)" in bw:
                row["tk_fwd_kernels_frac_of_copy"] = bw["copy (same bytes)"] * 1e6 / fwd_gpu_us
        records.append(row)
        table.append([name, "x".join(map(str, row["shape"])), bw["tk"] * 1e3, bw["torch eager"] * 1e3,
                      bw.get("numpy", float("nan")) * 1e3 if "numpy" in bw else "n/a",
                      bw.get("torch.compile", float("nan")) * 1e3 if "torch.compile" in bw else "n/a",
                      bw["triton (same source)"] * 1e3 if "triton (same source)" in bw else "n/a",
                      row["fwd_GBps"]["tk"], row["torch_over_tk_fwd"],
                      bwd.get("tk", float("nan")) * 1e3, bwd.get("torch eager", float("nan")) * 1e3,
                      row.get("torch_over_tk_fwd_bwd", float("nan")),
                      gpu_us.get("tk", "n/a"), gpu_us.get("torch eager", "n/a"),
                      host.get("tk", "n/a"), host.get("torch eager", "n/a"),
                      row.get("tk_frac_of_copy", "n/a"), row.get("tk_fwd_gpu_kernels_us", "n/a"),
                      row.get("tk_fwd_host_us", "n/a"), row.get("tk_fwd_kernels_frac_of_copy", "n/a"),
                      bwd.get("torch.compile", float("nan")) * 1e3 if "torch.compile" in bwd else "n/a",
                      bwd["triton (same source)"] * 1e3 if "triton (same source)" in bwd else "n/a",
                      bwd_us.get("tk", "n/a"), bwd_us.get("torch eager", "n/a"), bwd_us.get("torch.compile", "n/a"),
                      bwd_us.get("triton (same source)", "n/a"), row["bwd_GBps"].get("tk", "n/a"),
                      row.get("bwd_frac_of_copy", {}).get("tk", "n/a"),
                      row.get("bwd_frac_of_copy", {}).get("torch.compile", "n/a"), status])
        fb_ratio = row.get("torch_over_tk_fwd_bwd")
        fb_text = f"{fb_ratio:5.2f}" if fb_ratio else "  n/a"  # --no-backward: not measured
        print(f"{name:28s} tk {bw['tk'] * 1e3:8.3f} ms  torch {bw['torch eager'] * 1e3:8.3f} ms  "
              f"torch/tk {row['torch_over_tk_fwd']:5.2f}  fwd+bwd torch/tk {fb_text}  {status}", flush=True)
    return table, records


HEADER = ["op", "shape", "tk ms", "torch ms", "numpy ms", "torch.compile ms", "triton ms", "tk GB/s", "torch/tk",
          "tk fwd+bwd ms", "torch fwd+bwd ms", "torch/tk fwd+bwd", "tk fwd+bwd GPU us", "torch fwd+bwd GPU us",
          "tk fwd+bwd host us", "torch fwd+bwd host us", "tk of copy", "tk fwd GPU us",
          "tk fwd host us", "tk fwd kernels of copy", "torch.compile fwd+bwd ms",
          "triton fwd+bwd ms", "tk bwd GPU us", "torch bwd GPU us", "torch.compile bwd GPU us", "triton bwd GPU us",
          "tk bwd GB/s", "tk bwd of copy", "torch.compile bwd of copy", "check"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs, fewer samples")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--ops", default="", help="comma-separated subset of ops")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile (GPU)")
    ap.add_argument("--no-triton", dest="triton", action="store_false",
                    help="skip the Triton build of the same kernel sources (GPU)")
    ap.add_argument("--no-kernel-time", dest="kernel_time", action="store_false",
                    help="skip the fwd+bwd GPU kernel time (torch.profiler) and host time columns (GPU)")
    ap.add_argument("--out", default=RESULTS_DIR)
    ap.add_argument("--tag", default="", help="suffix of the result files' names")
    args = ap.parse_args()
    t0 = time.time()
    load_at_start = tuple(round(v, 2) for v in os.getloadavg())
    table, records = run(args)
    machine = machine_info()
    machine["loadavg_at_start"] = load_at_start  # machine_info() runs after the timings
    if args.device == "cuda":
        machine["gpu"] = torch.cuda.get_device_name()
    ahead = [r["op"] for r in records if r["torch_over_tk_fwd"] > 1]
    behind = [r["op"] for r in records if r["torch_over_tk_fwd"] <= 1]

    def behind_on(key):  # ops where torch eager's time under `key` is not above tk's
        return [r["op"] for r in records if r.get(key) and r[key]["torch eager"] <= r[key]["tk"]]
    summary = {"ops": len(records), "tk_ahead_of_torch_eager_fwd": ahead, "tk_behind_torch_eager_fwd": behind,
               "tk_behind_fwd_median": behind_on("fwd_median_ms"), "tk_behind_fwd_bwd": behind_on("fwd_bwd_ms"),
               "tk_behind_fwd_bwd_median": behind_on("fwd_bwd_median_ms"),
               "tk_bwd_below_0.9_of_copy": [r["op"] for r in records
                                            if r.get("bwd_frac_of_copy", {}).get("tk", 1.0) < 0.9],
               "tk_behind_torch_compile_fwd_bwd": [r["op"] for r in records if "torch.compile" in r["fwd_bwd_ms"]
                                                   and r["fwd_bwd_ms"]["torch.compile"] <= r["fwd_bwd_ms"]["tk"]],
               "seconds": time.time() - t0}
    tag = f"kernels_{args.device}" + ("" if args.dtype == "float32" else f"_{args.dtype}") + args.tag
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, tag + ".json"), "w") as fh:
        json.dump({"machine": machine, "args": vars(args), "summary": summary, "records": records}, fh, indent=1,
                  default=str)
    md = [f"# tessera.kernels vs torch eager ({args.device}, {args.dtype})", "",
          f"Generated by `python bench/kernels.py{' --quick' if args.quick else ''} --device {args.device}` "
          f"on {machine['date']}; {machine['cpu_model']}, {machine['cores_usable']} cores usable, "
          f"torch {machine['torch']} ({machine['torch_threads']} threads), Tessera {machine['tessera_threads']} "
          f"threads{', GPU ' + machine['gpu'] if 'gpu' in machine else ''}; load average at start "
          f"{machine['loadavg_at_start']}, at end {tuple(round(v, 2) for v in os.getloadavg())} (a load above the "
          f"core count means other processes shared the cores: torch's OpenMP threads suffer more from that "
          f"than Tessera's pool, so ratios then overstate tk's lead; compare the medians in the JSON too).", "",
          ("GPU time per call from CUDA events around batches of back-to-back calls, best of 5 round-robin "
           "batches (the JSON has medians too). " if args.device == "cuda" else
           "Best of several round-robin samples (the JSON has medians too). ") +
          "'torch/tk' > 1: tk is faster. "
          "GB/s counts each input read once and each output written once. Forward timings run under "
          "torch.no_grad(); fwd+bwd runs autograd with all inputs requiring grad" +
          ("; on a GPU its events time is the larger of the GPU's time and the host's, so the fwd+bwd GPU us "
           "columns give the kernels' time alone (torch.profiler's busy time of the CUDA kernels per call: the union of their intervals, so a kernel launched early with PDL does not count its wait; the upstream "
           "gradient's ones_like included on both sides) and the host us columns the Python + launch time per "
           "call (back-to-back calls, no synchronization). 'tk fwd GPU us' and 'tk fwd host us' split tk's "
           "forward the same way, and 'tk fwd kernels of copy' is the copy's time over the former: where it is "
           "above 'tk of copy', the forward's events time was host-bound." if args.device == "cuda" else "."), "",
          f"tk ahead of torch eager (forward) on {len(ahead)} of {len(records)} ops; behind on: "
          f"{', '.join(behind) if behind else 'none'}. Behind on medians (forward): "
          f"{', '.join(summary['tk_behind_fwd_median']) or 'none'}; on fwd+bwd (best): "
          f"{', '.join(summary['tk_behind_fwd_bwd']) or 'none'}; on fwd+bwd (median): "
          f"{', '.join(summary['tk_behind_fwd_bwd_median']) or 'none'}." +
          (f" Backward kernels below 0.9 of copy: {', '.join(summary['tk_bwd_below_0.9_of_copy']) or 'none'}; "
           f"fwd+bwd behind torch.compile: {', '.join(summary['tk_behind_torch_compile_fwd_bwd']) or 'none'}."
           if args.device == "cuda" and not args.no_backward else ""), "",
          ("Backward columns (GPU): 'bwd GPU us' is torch.profiler's busy time (the union of the CUDA kernels' intervals) of one "
           "torch.autograd.grad after the forward (neither the forward nor the upstream gradient's fill); "
           "'tk bwd GB/s' divides the byte model of the module docstring (backward_bytes) by it, and "
           "'bwd of copy' is a copy of the same bytes over it. 'torch.compile fwd+bwd ms' and 'triton fwd+bwd "
           "ms' time autograd fwd+bwd like the tk and torch columns." if args.device == "cuda" else ""), ""]
    md = [line for i, line in enumerate(md) if line or (i and md[i - 1])]  # no run of blank lines (CPU)
    md += table_lines(HEADER, table, markdown=True)
    with open(os.path.join(args.out, tag + ".md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    print(f"wrote {os.path.join(args.out, tag)}.{{md,json}} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
