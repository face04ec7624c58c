# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Tutorial 05 — Layer normalization, forward and backward
#
# `y = (x - mean) / sqrt(var + eps) * w + b` over each row. The forward pass is a row
# reduction like the softmax of tutorial 02. The backward pass is more interesting:
# `dx` is again per row, but `dw` and `db` sum over *all rows* — a reduction in the
# other direction. You will learn how to split that work: programs each own a
# strided set of rows, sum their `dw`/`db` contributions in registers, write one
# partial row each, and a small second kernel sums the partials.
#
# With `xhat = (x - mean) * rstd` and `g = dy * w`:
#
#     dx = rstd * (g - mean(g * xhat) * xhat - mean(g))
#     dw = sum over rows of dy * xhat,      db = sum over rows of dy

# %%
import time

import numpy as np

import tessera
import tessera.language as tl


@tessera.kernel
def ln_fwd(X, W, B, Y, Mean, Rstd, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(W + cols, mask=mask)
    b = tl.load(B + cols, mask=mask)
    tl.store(Y + row * n_cols + cols, xc * rstd * w + b, mask=mask)
    tl.store(Mean + row, mean)   # 8 bytes a row, kept for the backward pass
    tl.store(Rstd + row, rstd)


@tessera.kernel
def ln_bwd(X, W, DY, DX, Mean, Rstd, DWp, DBp, n_rows, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0)
    dw = tl.zeros([BLOCK], tl.float32)
    db = tl.zeros([BLOCK], tl.float32)
    for row in range(pid, n_rows, n_progs):       # rows pid, pid + P, pid + 2P, ...
        x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0)
        dy = tl.load(DY + row * n_cols + cols, mask=mask, other=0.0)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(mask, (x - tl.load(Mean + row)) * rstd, 0.0)
        g = dy * w
        c1 = tl.sum(g * xhat, axis=0) / n_cols
        c2 = tl.sum(g, axis=0) / n_cols
        tl.store(DX + row * n_cols + cols, (g - (xhat * c1 + c2)) * rstd, mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(DWp + pid * n_cols + cols, dw, mask=mask)   # one partial row per program
    tl.store(DBp + pid * n_cols + cols, db, mask=mask)


@tessera.kernel
def sum_rows(P, OUT, n_parts, n_cols, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(0, n_parts):
        acc += tl.load(P + i * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(OUT + cols, acc, mask=cols < n_cols)


def layer_norm_fwd(x, w, b, eps=1e-5):
    rows, n = x.shape
    y = np.empty_like(x)
    mean, rstd = np.empty(rows, np.float32), np.empty(rows, np.float32)
    ln_fwd[(rows,)](x, w, b, y, mean, rstd, n, eps, BLOCK=tessera.next_power_of_2(n))
    return y, mean, rstd


def layer_norm_bwd(x, w, dy, mean, rstd, n_progs=8):
    rows, n = x.shape
    dx = np.empty_like(x)
    dwp, dbp = np.empty((n_progs, n), np.float32), np.empty((n_progs, n), np.float32)
    ln_bwd[(n_progs,)](x, w, dy, dx, mean, rstd, dwp, dbp, rows, n, BLOCK=tessera.next_power_of_2(n))
    dw, db = np.empty(n, np.float32), np.empty(n, np.float32)
    sum_rows[(tessera.cdiv(n, 256),)](dwp, dw, n_progs, n, BLOCK=256)
    sum_rows[(tessera.cdiv(n, 256),)](dbp, db, n_progs, n, BLOCK=256)
    return dx, dw, db


# %% [markdown]
# ## Checked against torch.autograd in float64

# %%
import torch

rng = np.random.default_rng(0)
x = rng.standard_normal((301, 777), dtype=np.float32)
w, b = rng.standard_normal(777, dtype=np.float32), rng.standard_normal(777, dtype=np.float32)
dy = rng.standard_normal(x.shape, dtype=np.float32)

y, mean, rstd = layer_norm_fwd(x, w, b)
dx, dw, db = layer_norm_bwd(x, w, dy, mean, rstd)

xt, wt, bt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
yt = torch.nn.functional.layer_norm(xt, (777,), wt, bt)
yt.backward(torch.tensor(dy, dtype=torch.float64))
for name, got, want in [("y", y, yt), ("dx", dx, xt.grad), ("dw", dw, wt.grad), ("db", db, bt.grad)]:
    err = np.abs(got - want.detach().numpy()).max()
    print(f"{name}: max abs error {err:.2e}")
    assert err < 1e-3

# %% [markdown]
# ## The library version
#
# `tk.layer_norm` is this kernel pair with more options (any leading dimensions,
# fp16/bf16/fp64, no weight or bias, a fused ReLU, the residual-add form) and a
# `torch.autograd.Function`; `tk.nn.FusedLayerNorm` replaces `torch.nn.LayerNorm`.

# %%
import tessera.kernels as tk

ln = tk.nn.FusedLayerNorm(777)
ref = torch.nn.LayerNorm(777)
xt = torch.tensor(x, requires_grad=True)
print("module output matches torch:", torch.allclose(ln(xt), ref(xt), atol=1e-5))

# %% [markdown]
# ## Performance: forward + backward, next to torch eager

# %%
def bench(fn, reps=5):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def fwd_bwd(mod, a, g):
    a.grad = None
    mod(a).backward(g)


results = []
for n in [256, 1024, 4096]:
    a = torch.randn(2048, n, requires_grad=True)
    g = torch.randn(2048, n)
    m_tk, m_torch = tk.nn.FusedLayerNorm(n), torch.nn.LayerNorm(n)
    t_tk, t_torch = bench(lambda: fwd_bwd(m_tk, a, g)), bench(lambda: fwd_bwd(m_torch, a, g))
    results.append((n, t_tk, t_torch))
    print(f"2048 x {n:>4}: tk {t_tk * 1e3:7.2f} ms   torch eager {t_torch * 1e3:7.2f} ms   ({t_torch / t_tk:.2f}x)")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
idx = np.arange(len(results))
ax.bar(idx - 0.2, [r[1] * 1e3 for r in results], 0.4, label="tk.nn.FusedLayerNorm")
ax.bar(idx + 0.2, [r[2] * 1e3 for r in results], 0.4, label="torch.nn.LayerNorm")
ax.set_xticks(idx, [f"2048x{r[0]}" for r in results])
ax.set_ylabel("ms (forward + backward)")
ax.set_title("LayerNorm on this CPU (lower is better)")
ax.legend()
fig.tight_layout()
plt.show()
