"""Experiment (session 9, on an H100): kernels/attention.py's flat backward
(_score_backward_flat_kernel at 256x64, 16 warps + a producer warpgroup, 4 stages) with L2
eviction hints on its TMA copies, patched into the PTX at compile time (the language has no
load eviction policy yet), cold (4 ds sets taken in turn) against a copy of the same bytes.
One variant per process (a fresh TESSERA_CACHE_DIR each: the cache key does not see the patch):

    TESSERA_CACHE_DIR=$(mktemp -d) python bench/attention_score_bwd_hints.py LAG HINTS

HINTS: none | dk_last | dk_last_dq_first | all_first | all_first_kq_last | dq_first | dk_first |
kq_first | kq_last. Results: bench/results/attention_score_bwd_flat_h100.md."""
import importlib
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "frontend"))
sys.path.insert(0, HERE)
import tessera  # noqa: E402
import tessera.language as tl  # noqa: E402
from common import cuda_kernels_us  # noqa: E402
J = sys.modules["tessera.jit"]
AT = importlib.import_module("tessera.kernels.attention")
lag, hints = int(sys.argv[1]), sys.argv[2]
COPY = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"


def patch(ptx):
    """dq's producer (2 copies a stage: ds, k) and dk's (5: four ds^T boxes, q), in PTX order."""
    lines = ptx.split("\n")
    idx = [i for i, l in enumerate(lines) if COPY in l]
    assert len(idx) == 7, len(idx)
    # group by producer: the 2-copy run and the 5-copy run
    groups, cur = [], [idx[0]]
    for i in idx[1:]:
        if i - cur[-1] > 30:
            groups.append(cur); cur = [i]
        else:
            cur.append(i)
    groups.append(cur)
    assert sorted(len(g) for g in groups) == [2, 5], [len(g) for g in groups]
    dq = next(g for g in groups if len(g) == 2); dk = next(g for g in groups if len(g) == 5)
    pol = {}
    if hints == "dk_last":
        pol = {dk[0]: "last", dk[1]: "last", dk[2]: "last", dk[3]: "last"}
    elif hints == "dk_last_dq_first":
        pol = {dk[0]: "last", dk[1]: "last", dk[2]: "last", dk[3]: "last", dq[0]: "first"}
    elif hints == "all_first":
        pol = {dk[0]: "first", dk[1]: "first", dk[2]: "first", dk[3]: "first", dq[0]: "first"}
    elif hints == "all_first_kq_last":
        pol = {dk[0]: "first", dk[1]: "first", dk[2]: "first", dk[3]: "first", dq[0]: "first", dk[4]: "last",
               dq[1]: "last"}
    elif hints == "dq_first":
        pol = {dq[0]: "first"}
    elif hints == "dk_first":
        pol = {dk[0]: "first", dk[1]: "first", dk[2]: "first", dk[3]: "first"}
    elif hints == "kq_first":
        pol = {dk[4]: "first", dq[1]: "first"}
    elif hints == "kq_last":
        pol = {dk[4]: "last", dq[1]: "last"}
    for i, p in pol.items():
        l = lines[i]
        l = l.replace(COPY, COPY + ".L2::cache_hint")
        l = re.sub(r"\];\s*$", f"], %hint_{p};", l)  # noqa: E741
        lines[i] = l
    out = "\n".join(lines)
    head = ("\t.reg .b64 %hint_last;\n\t.reg .b64 %hint_first;\n"
            "\tcreatepolicy.fractional.L2::evict_last.b64 %hint_last, 1.0;\n"
            "\tcreatepolicy.fractional.L2::evict_first.b64 %hint_first, 1.0;\n")
    return out.replace("{\n", "{\n" + head, 1)


class Wrap:
    def __init__(self, c): self._c = c
    def __getattr__(self, n): return getattr(self._c, n)
    def compile(self, ir, target, *a):
        res = self._c.compile(ir, target, *a)
        if hints != "none" and "_score_backward_flat_kernel" in res.get("name", "") and "binary" in res:
            ptx = patch(res["binary"].decode() if isinstance(res["binary"], bytes) else res["binary"])
            res["binary"] = ptx.encode() if isinstance(res["binary"], bytes) else ptx
        return res


J._C = Wrap(J._C)
bt, m, n, d = 8, 2048, 2048, 64
gen = torch.Generator().manual_seed(0)
q = torch.randn(bt, m, d, generator=gen).cuda().half()
k = torch.randn(bt, n, d, generator=gen).cuda().half()
dss = [torch.randn(bt, m, n, generator=gen).cuda().half() for _ in range(4)]
outs = [(torch.empty_like(q), torch.empty_like(k)) for _ in dss]
nbytes = (2 * q.numel() + 2 * k.numel() + dss[0].numel()) * 2
copies = [(torch.empty(nbytes // 8, device="cuda"), torch.empty(nbytes // 8, device="cuda")) for _ in range(4)]


def run_flat(i):
    ds = dss[i % 4]; dq, dk = outs[i % 4]
    AT._score_backward_flat_kernel[(16, 1, bt)](ds, q, k, dq, dk, m, n, d, n, d, d, 0.125, bt * m, bt * n,
                                                ACC=tl.float32, BLOCK_M=256, BLOCK_D=64, BLOCK_K=64, WS=True, LAG=lag,
                                                num_warps=16, num_stages=4)


def run_copy(i):
    s, t = copies[i % 4]; t.copy_(s)


def us(fn, calls=40):
    from torch.profiler import ProfilerActivity, profile
    fn(0); torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(calls):
                fn(i)
            torch.cuda.synchronize()
        best = min(best, cuda_kernels_us(prof) / calls)
    return best


run_flat(0); torch.cuda.synchronize()
ref = dss[0].float() @ k.float() * 0.125
err = ((outs[0][0].float() - ref).abs().max() / ref.abs().max()).item()
c, f = us(run_copy), us(run_flat)
print(f"lag {lag:2d} hints {hints:17s} copy {c:.1f} us, flat {f:.1f} us, of copy {c / f:.3f}, err {err:.1e}", flush=True)
