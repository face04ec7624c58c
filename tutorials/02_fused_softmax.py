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
# # Tutorial 02 — Fused softmax
#
# Softmax of each row of a matrix, in one pass over memory: each program loads one
# row, computes its maximum, the exponentials and their sum, and writes the result.
# A naive numpy version reads and writes the matrix several times
# (max, subtract, exp, sum, divide); the fused kernel reads it once and writes it once.
#
# You will learn reductions (`tl.max`, `tl.sum`), `other=` for masked-off lanes, and
# how the compiler fuses chains of elementwise operations into one loop.

# %%
import time

import numpy as np

import tessera
import tessera.language as tl


@tessera.kernel
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # Masked-off lanes read -inf, so they never win the max and exp() makes them 0.
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


def softmax(x: np.ndarray) -> np.ndarray:
    n_rows, n_cols = x.shape
    out = np.empty_like(x)
    block = tessera.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](out, x, x.strides[0] // x.itemsize, out.strides[0] // out.itemsize, n_cols,
                              BLOCK_SIZE=block)
    return out


def softmax_numpy(x):
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# %%
rng = np.random.default_rng(0)
x = rng.standard_normal((1823, 781), dtype=np.float32)
y = softmax(x)
print("max abs error vs numpy:", np.abs(y - softmax_numpy(x)).max())
assert np.allclose(y, softmax_numpy(x), atol=1e-6)

# %% [markdown]
# ## Fusion, seen in the IR
#
# The Tile IR keeps one op per operation; the CPU back end evaluates the chain
# `exp(x - max)` lazily, chunk by chunk, so no temporary tile is written for
# `x - max`. `tl.max` and `tl.sum` each become one vectorized pass with several
# independent accumulators.

# %%
ck = tessera.compile(softmax_kernel, signature="*fp32,*fp32,i32,i32,i32", constexprs={"BLOCK_SIZE": 1024})
print(ck.asm["tir"])

# %% [markdown]
# ## Performance: rows of 4096 floats

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
for n_rows in [256, 1024, 4096]:
    a = rng.standard_normal((n_rows, 4096), dtype=np.float32)
    t_t = bench(lambda: softmax(a))
    t_n = bench(lambda: softmax_numpy(a))
    gbs = lambda t: 2 * a.nbytes / t / 1e9
    rows.append((n_rows, gbs(t_t), gbs(t_n)))
    print(f"{n_rows:>5} x 4096: tessera {gbs(t_t):6.2f} GB/s   numpy {gbs(t_n):6.2f} GB/s")

# %%
import matplotlib.pyplot as plt

plt.figure(figsize=(6, 3.5))
plt.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label="tessera")
plt.plot([r[0] for r in rows], [r[2] for r in rows], "s--", label="numpy")
plt.xscale("log", base=2)
plt.xlabel("rows (of 4096 fp32)")
plt.ylabel("GB/s")
plt.title("softmax on this CPU")
plt.legend()
plt.grid(True, alpha=0.3)
plt.tight_layout()
plt.show()
