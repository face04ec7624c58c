"""LayerNorm forward over fp32 rows of 4096 with weight and bias: a Tessera kernel
(one row per program: mean, variance, rstd, (x - mean) * rstd * w + b) against
torch.nn.functional.layer_norm and numpy. GB/s counts one read and one write of
the matrix (weight and bias are 32 KB, read from cache)."""
from __future__ import annotations

import numpy as np

from common import (BANDWIDTH_HEADER, COPY_NOTE, Section, bandwidth_results, check, copy_references,
                    measure_round_robin, tessera, tl, torch)

EPS = 1e-5


@tessera.kernel
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, row_stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * row_stride + cols, xc * rstd * w + b, mask=mask)


def layernorm_tessera(x, w, b, y):
    n_rows, n_cols = x.shape
    layernorm_kernel[(n_rows,)](x, w, b, y, x.strides[0] // 4, n_cols, EPS,
                                BLOCK_SIZE=tessera.next_power_of_2(n_cols))


def layernorm_numpy(x, w, b, y):
    """mean, centre, variance, scale: written in place into y where numpy allows."""
    mean = x.mean(axis=1, keepdims=True)
    np.subtract(x, mean, out=y)
    var = np.einsum("ij,ij->i", y, y)[:, None] / x.shape[1]
    np.multiply(y, 1.0 / np.sqrt(var + EPS, dtype=np.float32), out=y)
    np.multiply(y, w, out=y)
    np.add(y, b, out=y)


def layernorm_reference(x, w, b):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def run(quick=False):
    sec = Section("layernorm forward: rows of 4096 fp32, weight and bias")
    rng = np.random.default_rng(0)
    rows, summary = [], {}
    for n_rows in (1024, 4096):
        x = (rng.standard_normal((n_rows, 4096), dtype=np.float32) * 2 + 0.5).astype(np.float32)
        w = rng.standard_normal(4096, dtype=np.float32)
        b = rng.standard_normal(4096, dtype=np.float32)
        y = np.empty_like(x)
        ref = layernorm_reference(x, w, b)
        nbytes = 2 * x.nbytes
        fns = {"tessera": lambda: layernorm_tessera(x, w, b, y), "numpy": lambda: layernorm_numpy(x, w, b, y)}
        checked = dict(fns)
        if torch is not None:
            import torch.nn.functional as F
            tx, tw, tb, ty = (torch.from_numpy(a) for a in (x, w, b, y))
            fns["torch F.layer_norm"] = lambda: F.layer_norm(tx, (4096,), tw, tb, EPS)
            # The timed call returns a new tensor; the check copies it into y.
            checked["torch F.layer_norm"] = lambda: ty.copy_(F.layer_norm(tx, (4096,), tw, tb, EPS))
        status = {}
        for name in list(fns):
            ok, err = check(name, y, checked[name], ref, tol=1e-5)
            status[name] = "ok" if ok else f"WRONG (rel err {err:.2g})"
            if not ok:
                del fns[name]
        fns.update(copy_references(x, y))
        t = measure_round_robin(fns, repeats=6 if quick else 16, rounds=3 if quick else 4)
        best, med, copy_ref = bandwidth_results(f"{n_rows}x4096", status, t, nbytes, nbytes, sec, rows)
        peers = [k for k in status if k != "tessera" and k in best]
        summary[n_rows] = {"tessera": best.get("tessera"), "copy": copy_ref, "peers": {k: best[k] for k in peers},
                           "tessera_median": med.get("tessera"), "peers_median": {k: med[k] for k in peers}}
    sec.table("layernorm fp32 (GB/s = read + write of the matrix)", BANDWIDTH_HEADER, rows)
    sec.note(COPY_NOTE)
    sec.note("torch F.layer_norm allocates its output on every call (it has no out=); its time includes that: "
             "a 64 MB output is a fresh mmap (page faults) each call, a 16 MB one is reused from the heap.")
    return sec, summary
