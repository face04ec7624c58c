"""Row softmax of fp32 rows of 4096: the fused Tessera kernel of tutorial 02 (one row
per program) against numpy, torch.softmax and a numba parallel per-row loop. GB/s
counts one read and one write of the matrix."""
from __future__ import annotations

import numpy as np

from common import (BANDWIDTH_HEADER, COPY_NOTE, Section, bandwidth_results, check, copy_references,
                    measure_round_robin, numba, tessera, tl, torch)


@tessera.kernel
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


def softmax_tessera(x, out):
    n_rows, n_cols = x.shape
    softmax_kernel[(n_rows,)](out, x, x.strides[0] // 4, out.strides[0] // 4, n_cols,
                              BLOCK_SIZE=tessera.next_power_of_2(n_cols))


def softmax_numpy(x, out):
    """max, subtract, exp, sum, divide: five passes, written in place (no temporaries
    but the row maxima and sums), the best plain numpy can do."""
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    np.divide(out, out.sum(axis=1, keepdims=True), out=out)


def softmax_reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


_numba_softmax = None


def numba_softmax():
    global _numba_softmax
    if _numba_softmax is None and numba is not None:
        @numba.njit(parallel=True, fastmath=True)
        def softmax(x, out):
            n_rows, n_cols = x.shape
            for r in numba.prange(n_rows):
                m = x[r, 0]
                for c in range(1, n_cols):
                    m = max(m, x[r, c])
                s = np.float32(0.0)
                for c in range(n_cols):
                    e = np.exp(x[r, c] - m)
                    out[r, c] = e
                    s += e
                inv = np.float32(1.0) / s
                for c in range(n_cols):
                    out[r, c] *= inv
        _numba_softmax = softmax
    return _numba_softmax


def run(quick=False):
    sec = Section("softmax: rows of 4096 fp32")
    rng = np.random.default_rng(0)
    rows, summary = [], {}
    for n_rows in (1024, 4096):
        x = rng.standard_normal((n_rows, 4096), dtype=np.float32) * 4
        out = np.empty_like(x)
        ref = softmax_reference(x)
        nbytes = 2 * x.nbytes
        fns = {"tessera": lambda: softmax_tessera(x, out), "numpy (5 passes, in place)": lambda: softmax_numpy(x, out)}
        if torch is not None:
            tx, tout = torch.from_numpy(x), torch.from_numpy(out)
            fns["torch.softmax(out=)"] = lambda: torch.softmax(tx, 1, out=tout)
        f = numba_softmax()
        if f is not None:
            fns["numba prange rows"] = lambda: f(x, out)
        status = {}
        for name, fn in list(fns.items()):
            ok, err = check(name, out, fn, ref, tol=1e-5)
            status[name] = "ok" if ok else f"WRONG (rel err {err:.2g})"
            if not ok:
                del fns[name]
        fns.update(copy_references(x, out))
        t = measure_round_robin(fns, repeats=6 if quick else 16, rounds=3 if quick else 4)
        best, med, copy_ref = bandwidth_results(f"{n_rows}x4096", status, t, nbytes, nbytes, sec, rows)
        peers = [k for k in status if k != "tessera" and k in best]
        summary[n_rows] = {"tessera": best.get("tessera"), "copy": copy_ref, "peers": {k: best[k] for k in peers},
                           "tessera_median": med.get("tessera"), "peers_median": {k: med[k] for k in peers}}
    sec.table("softmax fp32 (GB/s = read + write of the matrix)", BANDWIDTH_HEADER, rows)
    sec.note(COPY_NOTE)
    sec.note("1024x4096 is 16 MB in + 16 MB out: about the size of the 32 MB L3, so partly a cache measurement.")
    return sec, summary
