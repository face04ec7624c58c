"""Vector add (fp32) against numpy, torch and numba, in GB/s (12 bytes per element:
two reads, one write) and as a fraction of the machine's copy bandwidth."""
from __future__ import annotations

import numpy as np

from common import (BANDWIDTH_HEADER, COPY_NOTE, Section, bandwidth_results, check, copy_references,
                    measure_round_robin, numba, tessera, tl, torch)


@tessera.kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


_numba_add = None


def numba_add():
    global _numba_add
    if _numba_add is None and numba is not None:
        @numba.njit(parallel=True, fastmath=False, cache=False)
        def add(x, y, out):
            for i in numba.prange(x.shape[0]):
                out[i] = x[i] + y[i]
        _numba_add = add
    return _numba_add


BLOCKS = (1024, 4096, 16384)


def run(quick=False):
    sec = Section("elementwise: vector add fp32")
    sizes = [1 << 20, 1 << 24] if quick else [1 << 20, 1 << 24, 1 << 26]
    rng = np.random.default_rng(0)
    rows, summary = [], {}
    for n in sizes:
        x = rng.standard_normal(n, dtype=np.float32)
        y = rng.standard_normal(n, dtype=np.float32)
        out = np.empty_like(x)
        ref = x.astype(np.float64) + y
        fns, status = {}, {}
        # Tessera: pick the best of a few block sizes (its only tuning knob here).
        for block in (BLOCKS[:2] if quick else BLOCKS):
            grid = (tessera.cdiv(n, block),)
            fns[f"tessera B={block}"] = (lambda g=grid, b=block: add_kernel[g](x, y, out, n, BLOCK_SIZE=b))
        fns["numpy np.add(out=)"] = lambda: np.add(x, y, out=out)
        if torch is not None:
            tx, ty, tout = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(out)
            fns["torch.add(out=)"] = lambda: torch.add(tx, ty, out=tout)
        f = numba_add()
        if f is not None:
            fns["numba prange"] = lambda: f(x, y, out)
        for name, fn in list(fns.items()):
            ok, err = check(name, out, fn, ref, tol=1e-7)
            status[name] = "ok" if ok else f"WRONG (rel err {err:.2g})"
            if not ok:
                del fns[name]
        fns.update(copy_references(x, out))
        t = measure_round_robin(fns, repeats=6 if quick else 16, rounds=3 if quick else 4)
        best, med, copy_ref = bandwidth_results(n, status, t, 12 * n, 8 * n, sec, rows)
        tess = [k for k in best if k.startswith("tessera")]
        best_t = max(tess, key=lambda k: best[k]) if tess else None
        peers = [k for k in status if not k.startswith("tessera") and k in best]
        summary[n] = {"tessera": best.get(best_t), "tessera_impl": best_t, "copy": copy_ref,
                      "peers": {k: best[k] for k in peers}, "tessera_median": med.get(best_t),
                      "peers_median": {k: med[k] for k in peers}}
    sec.table("vector add fp32 (GB/s = 12 bytes per element; copies count 8)", BANDWIDTH_HEADER, rows)
    sec.note(COPY_NOTE)
    sec.note("the summary uses the best Tessera block size at each n")
    if 1 << 20 in sizes:
        sec.note("n=2^20 is 12 MB of traffic: it fits in the 32 MB L3, so it measures the cache, not DRAM.")
    return sec, summary
