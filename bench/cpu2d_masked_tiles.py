"""A row as one 1-D tile vs as a [G, VEC] tile with a mask per group (cross_entropy's
realigned slices, kernels/softmax_ce.py) on the CPU, with numpy beside them.

Two families, each timed round-robin in one process (bench/common.py):
  * slice log-sum-exp: per program a slice of BLOCK classes of one row, its max and
    sum of exp(x - max), as the library's slice kernel; the 1-D tile `c < n` masked,
    the [BLOCK / VEC, VEC] tile read from the row's 16-byte boundary with a mask per
    group (`whole`) and, in the row's first and last slices, per element (`partial`);
  * the library's cross_entropy forward and backward with the realigned plan off
    (1-D rows) and on (the [G, VEC] tiles), torch's cross_entropy beside them.
Writes bench/results/cpu2d_masked_tiles.md (python bench/cpu2d_masked_tiles.py), or with
TESSERA_NUM_THREADS=1 bench/results/cpu2d_masked_tiles_1thread.md (less noise from the
machine's other work).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
from common import tessera, tl, torch  # noqa: E402

sys.path.insert(0, C.REPO_ROOT)
from kernels import softmax_ce as S  # noqa: E402

ROWS, N, BLOCK, VEC = 128, 50257, 4096, 4


@tessera.kernel
def lse_slices_row(X, OUT, stride, n, n_slices, BLOCK: tl.constexpr):
    unit = tl.program_id(0)
    row = unit // n_slices
    c = (unit - row * n_slices) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + row.to(tl.int64) * stride + c, mask=c < n, other=-float("inf"))
    m = tl.max(x, axis=0)
    tl.store(OUT + unit, tl.sum(tl.exp(tl.maximum(x - m, -87.0)), axis=0))


@tessera.kernel
def lse_slices_groups(X, OUT, stride, n, n_slices, BLOCK: tl.constexpr, VEC: tl.constexpr):
    unit = tl.program_id(0)
    row = unit // n_slices
    first = (unit - row * n_slices) * BLOCK
    lead = ((row.to(tl.int64) * stride) % VEC).to(tl.int32)  # the row's start past a 16-byte boundary
    g = tl.arange(0, BLOCK // VEC)
    at = first + VEC * g[:, None] + tl.arange(0, VEC)[None, :]
    col = at - lead
    group_col = (first + VEC * g - lead)[:, None]
    whole = (group_col >= 0) & (group_col + VEC <= n)
    partial = ((group_col < 0) | (group_col + VEC > n)) & (col >= 0) & (col < n)
    src = tl.multiple_of(X + (row.to(tl.int64) * stride - lead), 16)
    x = tl.load(src + at, mask=whole, other=-float("inf"))
    if (first == 0) | (first + BLOCK >= n + lead):
        x = tl.where(whole, x, tl.load(src + at, mask=partial, other=-float("inf")))
    m = tl.max(tl.max(x, axis=1), axis=0)
    tl.store(OUT + unit, tl.sum(tl.sum(tl.exp(tl.maximum(x - m, -87.0)), axis=1), axis=0))


def lse_numpy(x):
    m = x.max(axis=1, keepdims=True)
    return np.exp(x - m).sum(axis=1)


def main():
    machine = C.machine_info()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((ROWS, N), dtype=np.float32)
    slices_row = -(-N // BLOCK)
    slices_groups = -(-(N + VEC - 1) // BLOCK)
    out_row = np.zeros(ROWS * slices_row, np.float32)
    out_groups = np.zeros(ROWS * slices_groups, np.float32)
    run_row = lambda: lse_slices_row[(ROWS * slices_row,)](x, out_row, N, N, slices_row, BLOCK=BLOCK)
    run_groups = lambda: lse_slices_groups[(ROWS * slices_groups,)](x, out_groups, N, N, slices_groups,
                                                                     BLOCK=BLOCK, VEC=VEC)
    run_row(), run_groups()
    # each slice's sum of exp(x - slice max), as numpy computes it
    for out, k, realigned in ((out_row, slices_row, False), (out_groups, slices_groups, True)):
        want = np.zeros((ROWS, k))
        for r in range(ROWS):
            lead = (r * N) % VEC if realigned else 0
            for s_ in range(k):
                part = x[r, max(0, s_ * BLOCK - lead):max(0, (s_ + 1) * BLOCK - lead)].astype(np.float64)
                want[r, s_] = np.exp(np.maximum(part - part.max(), -87.0)).sum() if part.size else np.nan
        got = out.reshape(ROWS, k)
        ok = np.isnan(want) | np.isclose(got, want, rtol=2e-5)
        assert ok.all(), f"slice sums differ from numpy ({'groups' if realigned else 'row'})"
    timings = C.measure_round_robin({"tessera 1-D row": run_row, "tessera [G, 4] groups": run_groups,
                                     "numpy": lambda: lse_numpy(x)}, repeats=20, rounds=5)
    rows_lse = [[k, t.min * 1e3, t.median * 1e3, t.min / timings["tessera 1-D row"].min]
                for k, t in timings.items()]

    # the library: cross_entropy forward + backward, realigned plan off / on
    xt = torch.from_numpy(x)
    target = torch.from_numpy(rng.integers(0, N, ROWS))
    fns = {}
    for realign in (False, True):
        plan = S._ce_plan(xt, target, 0.0, "mean", realign=realign)
        out, scale, lse = S._ce_forward_with(plan, xt, target, -100)
        dloss = torch.tensor(1.0)
        label = "realigned [G, 4]" if realign else "1-D rows"
        fns[f"forward, {label}"] = (lambda p=plan: S._ce_forward_with(p, xt, target, -100))
        fns[f"backward, {label}"] = (lambda p=plan, s=scale, l=lse: S._ce_backward_with(p, xt, target, l, dloss, s,
                                                                                       -100))
    fns["torch F.cross_entropy forward"] = lambda: torch.nn.functional.cross_entropy(xt, target)
    t2 = C.measure_round_robin(fns, repeats=20, rounds=5)
    rows_ce = []
    for k, t in t2.items():
        base = t2.get(k.replace("realigned [G, 4]", "1-D rows"))
        rows_ce.append([k, t.min * 1e3, t.median * 1e3, t.min / base.min if base else None])

    lines = ["# CPU: a row as a 1-D tile vs as a [G, VEC] tile with per-group masks (cpu2d)", "",
             f"Generated by `python bench/cpu2d_masked_tiles.py` on {machine['date']}: {machine['cpu_model']}, "
             f"{machine['cores_usable']} cores usable, Tessera {machine['tessera_git']}, "
             f"{machine['tessera_threads']} threads, torch {machine['torch']} ({machine['torch_threads']} threads); "
             f"load average at start {machine['loadavg_at_start']}.",
             "", "Timed round-robin in one process; best and median of the samples (ms). "
             f"{ROWS} x {N} fp32 (GPT-2's vocabulary), slices of {BLOCK} classes, VEC = {VEC} (16 bytes).", "",
             "## Slice log-sum-exp (max, then sum of exp(x - max), per slice)", ""]
    lines += C.table_lines(["implementation", "best ms", "median ms", "x 1-D row"], rows_lse, markdown=True)
    lines += ["", "## cross_entropy (kernels/softmax_ce.py), realigned plan off / on", ""]
    lines += C.table_lines(["call", "best ms", "median ms", "x 1-D rows"], rows_ce, markdown=True)
    one_thread = os.environ.get("TESSERA_NUM_THREADS") == "1"
    path = os.path.join(C.RESULTS_DIR, "cpu2d_masked_tiles_1thread.md" if one_thread else "cpu2d_masked_tiles.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
