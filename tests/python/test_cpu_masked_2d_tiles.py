"""[G, L] tiles whose minor dim is narrower than a vector (L < 16) on the CPU: several
rows per vector (compiler/codegen/x86/multi_row_chunks.cpp). Results against numpy for
every op that sees such chunks (loads and stores with per-row and per-element masks,
broadcasts both ways, expand_dims, join, gather, reductions along either axis and over
the whole tile, an if that yields the tile), and the code: cross_entropy's realigned
[BLOCK / 4, 4] slice loads whole 64-byte vectors, as a 1-D row does."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl

from cpu_helpers import poisoned


@tessera.kernel
def _groups_copy_scaled(X, Y, n, G: tl.constexpr, L: tl.constexpr):
    # rows of L elements from a boundary `lead` = 1 element before X: a mask per row
    # (whole rows inside [0, n)) and, for the partial rows, per element
    g = tl.program_id(0) * G + tl.arange(0, G)
    at = L * g[:, None] + tl.arange(0, L)[None, :]
    col = at - 1
    row_col = (L * g - 1)[:, None]
    whole = (row_col >= 0) & (row_col + L <= n)
    partial = ((row_col < 0) | (row_col + L > n)) & (col >= 0) & (col < n)
    x = tl.load(X - 1 + at, mask=whole, other=0.0)
    x = tl.where(whole, x, tl.load(X - 1 + at, mask=partial, other=0.0))
    scale = (g * 2 + 1).to(tl.float32)[:, None]  # a [G, 1] column broadcast along the rows
    bias = tl.arange(0, L).to(tl.float32)[None, :]  # a [1, L] row broadcast down the column
    tl.store(Y - 1 + at, x * scale + bias, mask=whole | partial)


@pytest.mark.parametrize("cpu", ["host", "haswell"])
@pytest.mark.parametrize("L", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("n", [1, 5, 37, 257])
def test_masked_rows_load_and_store(L, n, cpu, monkeypatch):
    if cpu == "haswell":  # AVX2: masked accesses take vmaskmov / lane-by-lane code
        monkeypatch.setenv("TESSERA_CPU", "haswell")
    G = 64 // L if L < 16 else 4
    x = np.arange(1, n + 1, dtype=np.float32)
    y = poisoned(n + 1, np.float32)
    guard = y[n:].copy()
    _groups_copy_scaled[(tessera.cdiv(n + 1, G * L),)](x, y, n, G=G, L=L)
    pos = np.arange(n) + 1  # position counted from the boundary
    want = x * (2 * (pos // L) + 1) + pos % L
    np.testing.assert_array_equal(y[:n], want.astype(np.float32))
    np.testing.assert_array_equal(y[n:], guard)  # nothing written past n


@tessera.kernel
def _row_and_whole_reductions(X, ROW_MAX, ROW_SUM, TOTAL, BIGGEST, G: tl.constexpr, L: tl.constexpr):
    at = tl.arange(0, G)[:, None] * L + tl.arange(0, L)[None, :]
    x = tl.load(X + at)
    tl.store(ROW_MAX + tl.arange(0, G), tl.max(x, axis=1))
    tl.store(ROW_SUM + tl.arange(0, G), tl.sum(x * 2.0, axis=1))
    tl.store(TOTAL, tl.sum(tl.sum(tl.exp(x), axis=1), axis=0))
    tl.store(BIGGEST, tl.max(tl.max(x, axis=1), axis=0))


@pytest.mark.parametrize("G,L", [(64, 1), (32, 2), (256, 4), (8, 4), (4, 4), (2, 8), (128, 8), (16, 16)])
def test_reductions_along_rows_and_over_the_whole_tile(G, L):
    x = np.random.default_rng(G * L).standard_normal((G, L)).astype(np.float32)
    row_max, row_sum = np.zeros(G, np.float32), np.zeros(G, np.float32)
    total, biggest = np.zeros(1, np.float32), np.zeros(1, np.float32)
    _row_and_whole_reductions[(1,)](x, row_max, row_sum, total, biggest, G=G, L=L)
    np.testing.assert_array_equal(row_max, x.max(axis=1))
    np.testing.assert_allclose(row_sum, (x * 2).sum(axis=1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(total[0], np.exp(x.astype(np.float64)).sum(), rtol=1e-6)
    assert biggest[0] == x.max()


@tessera.kernel
def _max_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@tessera.kernel
def _nan_aware_whole_max(X, OUT, G: tl.constexpr, L: tl.constexpr):
    at = tl.arange(0, G)[:, None] * L + tl.arange(0, L)[None, :]
    x = tl.load(X + at)
    tl.store(OUT, tl.reduce(tl.reduce(x, 1, _max_keeping_nan), 0, _max_keeping_nan))


def test_whole_tile_max_keeps_a_nan():
    x = np.arange(256, dtype=np.float32).reshape(64, 4)
    x[37, 2] = np.nan
    out = np.zeros(1, np.float32)
    _nan_aware_whole_max[(1,)](x, out, G=64, L=4)
    assert np.isnan(out[0])


@tessera.kernel
def _join_and_gather(X, IDX, PAIRS, PICKED, G: tl.constexpr):
    g = tl.arange(0, G)
    a = tl.load(X + g)
    pairs = tl.join(a, a * 10.0)  # [G, 2]
    tl.store(PAIRS + g[:, None] * 2 + tl.arange(0, 2)[None, :], pairs)
    tile = tl.load(X + g[:, None] * 4 + tl.arange(0, 4)[None, :] * 0)  # [G, 4], rows of one value
    idx = tl.load(IDX + g[:, None] * 4 + tl.arange(0, 4)[None, :])
    tl.store(PICKED + g[:, None] * 4 + tl.arange(0, 4)[None, :], tl.gather(tile, idx, axis=0))


def test_join_and_gather_of_short_rows():
    G = 32
    x = np.arange(G * 4, dtype=np.float32) * 0.5
    idx = np.random.default_rng(3).integers(0, G, (G, 4)).astype(np.int32)
    pairs = np.zeros((G, 2), np.float32)
    picked = np.zeros((G, 4), np.float32)
    _join_and_gather[(1,)](x, idx, pairs, picked, G=G)
    np.testing.assert_array_equal(pairs, np.stack([x[:G], x[:G] * 10], axis=1))
    np.testing.assert_array_equal(picked, x[4 * idx])  # tile[i, j] = x[4 i]


@tessera.kernel
def _transposed_short_rows(X, Y, G: tl.constexpr, L: tl.constexpr):
    # a [L, G] tile read, transposed to [G, L] (a strided view), plus one
    t = tl.load(X + tl.arange(0, L)[:, None] * G + tl.arange(0, G)[None, :])
    tl.store(Y + tl.arange(0, G)[:, None] * L + tl.arange(0, L)[None, :], tl.trans(t) + 1.0)


@pytest.mark.parametrize("G,L", [(64, 4), (16, 2), (32, 8)])
def test_transposed_view_into_short_rows(G, L):
    x = np.random.default_rng(1).standard_normal((L, G)).astype(np.float32)
    y = np.zeros((G, L), np.float32)
    _transposed_short_rows[(1,)](x, y, G=G, L=L)
    np.testing.assert_array_equal(y, x.T + 1)


@tessera.kernel
def _slice_lse(X, OUT, stride, n, n_slices, BLOCK: tl.constexpr, VEC: tl.constexpr):
    # cross_entropy's realigned slice (kernels/softmax_ce.py _from_boundary), whole
    unit = tl.program_id(0)
    row = unit // n_slices
    first = (unit - row * n_slices) * BLOCK
    lead = ((row.to(tl.int64) * stride) % VEC).to(tl.int32)
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
    tl.store(OUT + unit, tl.sum(tl.sum(tl.exp(x - m), axis=1), axis=0))


@pytest.mark.parametrize("n", [1000, 1003, 4097])
def test_realigned_slices_against_numpy(n):
    rows, block, vec = 5, 256, 4
    x = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32)
    k = -(-(n + vec - 1) // block)
    out = np.full(rows * k, np.nan, np.float32)
    _slice_lse[(rows * k,)](x, out, n, n, k, BLOCK=block, VEC=vec)
    for r in range(rows):
        lead = (r * n) % vec
        for s in range(k):
            part = x[r, max(0, s * block - lead):max(0, (s + 1) * block - lead)].astype(np.float64)
            if part.size:
                np.testing.assert_allclose(out[r * k + s], np.exp(part - part.max()).sum(), rtol=2e-6)


def test_realigned_slice_loads_whole_vectors(monkeypatch):
    monkeypatch.setenv("TESSERA_CPU", "skylake-avx512")  # compiled only: the AVX-512 code on any host
    sig = {"X": "*fp32:16", "OUT": "*fp32:16", "stride": "i32", "n": "i32", "n_slices": "i32"}
    compiled = tessera.compile(_slice_lse, signature=sig, constexprs={"BLOCK": 4096, "VEC": 4}, target="cpu")
    asm = compiled.asm["asm"]
    # the edge `if` is a lazy if: each reduce's loop is emitted once per branch, and x
    # is no 16 KB buffer (only the reduces' vector accumulators are on the stack)
    assert "lazy_if.then_nest" in compiled.asm["llir"]
    assert "alloca float, i64 4096" not in compiled.asm["llir"]
    # (before multi-row chunks: 4-lane xmm loads and a gather per group of 4)
    assert "gather" not in asm
    assert "vmovups\t(" in asm or "vmovups\t" in asm and "zmm" in asm
    # one 16-lane exp per 4 rows, not one 4-lane exp per row: its polynomial's fmas on zmm only
    fmas = re.findall(r"\tvfn?madd\w*\s+([^\n]*)", asm)
    assert fmas and all("zmm" in f for f in fmas)


# An if yielding tiles (compiler/codegen/x86/lazy_if.cpp: evaluated per chunk by its
# consumers, their loops split on the condition, when nothing with side effects runs
# between the if and them; else a buffer per branch, or the yielded value's own).

@tessera.kernel
def _if_two_results(X, OUT, SUMS, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    y = x * 3.0
    if pid % 2 == 0:
        x = x + 1.0
        y = tl.where(offs < n, y - x, 0.0)
    tl.store(OUT + offs, x * 2.0 + y, mask=offs < n)
    tl.store(SUMS + pid, tl.sum(x, axis=0) + tl.max(y, axis=0))


@pytest.mark.parametrize("n", [64, 100, 255])
def test_if_with_two_tile_results_in_both_branches(n):
    block = 32
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    out = poisoned(n, np.float32)
    programs = tessera.cdiv(n, block)
    sums = np.zeros(programs, np.float32)
    _if_two_results[(programs,)](x, out, sums, n, BLOCK=block)
    xp = np.concatenate([x, np.zeros(programs * block - n, np.float32)]).reshape(programs, block)
    valid = (np.arange(programs * block) < n).reshape(programs, block)
    even = (np.arange(programs) % 2 == 0)[:, None]
    xs = np.where(even, xp + 1, xp)
    ys = np.where(even, np.where(valid, xp * 3 - xs, 0), xp * 3)
    np.testing.assert_allclose(out, (xs * 2 + ys).reshape(-1)[:n], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sums, xs.sum(axis=1) + ys.max(axis=1), rtol=1e-5, atol=1e-5)


@tessera.kernel
def _if_then_store_then_use(A, OUT, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(A + offs)
    if tl.program_id(0) == 0:
        x = x + 1.0
    tl.store(A + offs, tl.zeros([BLOCK], tl.float32))  # after the if, before x's use
    tl.store(OUT + offs, x * 2.0)


def test_if_result_read_after_a_store_keeps_the_loaded_values():
    a = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    _if_then_store_then_use[(1,)](a, out, BLOCK=16)
    np.testing.assert_array_equal(out, (np.arange(16) + 1) * 2)
    assert (a == 0).all()


@tessera.kernel
def _if_result_used_in_a_loop(X, OUT, steps, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    if tl.program_id(0) == 0:
        x = x * 2.0
    acc = tl.zeros([BLOCK], tl.float32)
    for _ in range(steps):
        acc += x
    tl.store(OUT + offs, acc)


def test_if_result_used_in_a_loop():
    x = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    _if_result_used_in_a_loop[(1,)](x, out, 3, BLOCK=16)
    np.testing.assert_array_equal(out, x * 2 * 3)
