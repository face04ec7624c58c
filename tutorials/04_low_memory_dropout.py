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
# # Tutorial 04 — Low-memory dropout
#
# Dropout zeroes each element with probability `p` and scales the rest by `1/(1-p)`.
# The usual implementation draws a random mask, keeps it in memory for the backward
# pass, and reads it again there: one extra tensor per dropout layer.
#
# Here the mask is never stored. Each element's random number comes from
# `tl.rand(seed, offset)` — Philox 4x32-10, a counter-based generator — with the
# element's flat index as the counter, so the same `(seed, index)` always gives the
# same number. The backward kernel regenerates exactly the forward mask from the seed.
#
# You will learn `tl.rand`, why counter-based generators make dropout stateless, and
# how `tessera.kernels` (`tk`) uses this in `tk.gelu_dropout` and `tk.softmax(..., dropout_p=)`.

# %%
import time

import numpy as np

import tessera
import tessera.language as tl


@tessera.kernel
def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) >= p          # one uniform number in [0, 1) per element
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def dropout(x, p, seed):
    out = np.empty_like(x)
    dropout_kernel[(tessera.cdiv(x.size, 1024),)](x, out, x.size, p, seed, BLOCK=1024)
    return out


x = np.ones(16, dtype=np.float32)
print("seed 1:", dropout(x, 0.5, seed=1))
print("seed 1:", dropout(x, 0.5, seed=1))
print("seed 2:", dropout(x, 0.5, seed=2))
assert np.array_equal(dropout(x, 0.5, 1), dropout(x, 0.5, 1))

# %% [markdown]
# The same seed gives the same mask; a new seed a new one. The fraction dropped is `p`:

# %%
big = np.ones(1 << 20, dtype=np.float32)
print("fraction dropped:", (dropout(big, 0.3, seed=42) == 0).mean())

# %% [markdown]
# ## Forward and backward from one seed
#
# `tk.gelu_dropout(x, p, seed)` computes `dropout(gelu(x))` in one kernel; its
# backward kernel recomputes the mask from `seed`. With torch tensors it is a
# `torch.autograd.Function`, so the gradient is zero exactly where the output was
# dropped — with no mask tensor saved.

# %%
import torch

import tessera.kernels as tk

xt = torch.randn(4, 8, requires_grad=True)
y = tk.gelu_dropout(xt, p=0.5, seed=123)
y.sum().backward()
print("output zeros  :", (y == 0).int()[0].tolist())
print("gradient zeros:", (xt.grad == 0).int()[0].tolist())
assert torch.equal(y == 0, xt.grad == 0)

# %% [markdown]
# ## Memory and time next to torch
#
# `torch.nn.functional.dropout` keeps a mask for the backward pass (torch stores it as
# a byte tensor: one byte per element). Here: zero bytes. And the fused kernel
# reads `x` once and writes the output once, where torch eager runs GELU and dropout
# as two passes.

# %%
def bench(fn, reps=10):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


rows = []
for n in [1 << 16, 1 << 18, 1 << 20, 1 << 22]:
    a = torch.randn(n // 1024, 1024)
    t_tk = bench(lambda: tk.gelu_dropout(a, 0.1, seed=0))
    t_torch = bench(lambda: torch.nn.functional.dropout(torch.nn.functional.gelu(a), 0.1))
    rows.append((n, t_tk, t_torch))
    print(f"{n:>8} elements: tk {t_tk * 1e3:7.3f} ms   torch eager {t_torch * 1e3:7.3f} ms   "
          f"mask kept: tk 0 B, torch {n} B")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot([r[0] for r in rows], [2 * 4 * r[0] / r[1] / 1e9 for r in rows], "o-", label="tk.gelu_dropout")
ax.plot([r[0] for r in rows], [2 * 4 * r[0] / r[2] / 1e9 for r in rows], "s--", label="torch gelu + dropout")
ax.set_xscale("log", base=2)
ax.set_xlabel("elements (fp32)")
ax.set_ylabel("GB/s (one read + one write)")
ax.set_title("GELU + dropout forward on this CPU")
ax.legend()
ax.grid(True, alpha=0.3)
fig.tight_layout()
plt.show()
