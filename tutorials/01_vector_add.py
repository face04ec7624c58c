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
# # Tutorial 01 — Vector addition
#
# The smallest useful Tessera kernel. You will learn:
# - how to write a kernel with `@tessera.kernel` and `tessera.language` (`tl`);
# - how a launch grid maps *programs* onto the data;
# - how masks keep the last, partial block in bounds;
# - how to look at what the compiler produced (`tessera.compile(...).asm`);
# - how fast it is next to numpy on this machine.
#
# Everything here runs on the CPU; the same source runs on an NVIDIA GPU once the
# GPU back end lands.

# %%
import time

import numpy as np

import tessera
import tessera.language as tl


@tessera.kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    # Each program handles one block of BLOCK_SIZE consecutive elements.
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # The last block may run past the end of the arrays: mask those lanes off.
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    n = x.size
    # The grid can be a tuple or a function of the launch's meta-parameters.
    grid = lambda meta: (tessera.cdiv(n, meta["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    return out


# %% [markdown]
# Check the result against numpy, on a size that is not a multiple of the block.

# %%
rng = np.random.default_rng(0)
size = 98_432 + 17
x = rng.random(size, dtype=np.float32)
y = rng.random(size, dtype=np.float32)
out = add(x, y)
print("max abs error:", np.abs(out - (x + y)).max())
assert np.array_equal(out, x + y)

# %% [markdown]
# ## What did the compiler make of it?
#
# `tessera.compile` compiles without launching and returns every stage's text:
# the Tile IR, the LLVM IR before and after optimization, and the x86 assembly.
# The loads become masked vector loads (`vmovups ... {%k1}` with AVX-512 or
# `vmaskmovps` with AVX2): one instruction per 16 (or 8) lanes.

# %%
ck = tessera.compile(add_kernel, signature="*fp32,*fp32,*fp32,i32", constexprs={"BLOCK_SIZE": 1024})
print(ck.asm["tir"])
vector_lines = [l.strip() for l in ck.asm["asm"].splitlines() if "mov" in l and ("zmm" in l or "ymm" in l)]
print("\n".join(vector_lines[:8]))

# %% [markdown]
# ## Performance
#
# Vector addition is memory bound: it reads 8 bytes and writes 4 per element.
# We report the effective bandwidth next to numpy's `x + y` (which must also
# allocate its output) and `np.add(x, y, out=out)`.

# %%
def bench(fn, reps=20):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


sizes = [2**k for k in range(12, 26, 2)]
rows = []
for n in sizes:
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    o = np.empty_like(a)
    grid = (tessera.cdiv(n, 1024),)
    t_tessera = bench(lambda: add_kernel[grid](a, b, o, n, BLOCK_SIZE=1024))
    t_numpy = bench(lambda: np.add(a, b, out=o))
    gbs = lambda t: 12 * n / t / 1e9
    rows.append((n, gbs(t_tessera), gbs(t_numpy)))
    print(f"n={n:>9}  tessera {gbs(t_tessera):7.2f} GB/s   numpy {gbs(t_numpy):7.2f} GB/s")

# %%
import matplotlib.pyplot as plt

plt.figure(figsize=(6, 3.5))
plt.semilogx([r[0] for r in rows], [r[1] for r in rows], "o-", label="tessera")
plt.semilogx([r[0] for r in rows], [r[2] for r in rows], "s--", label="numpy")
plt.xlabel("elements")
plt.ylabel("GB/s")
plt.title("vector add (fp32) on this CPU")
plt.legend()
plt.grid(True, alpha=0.3)
plt.tight_layout()
plt.show()
