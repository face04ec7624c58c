"""Compiled CPU path, memory: loads and stores with masks and `other`, masked-off lanes
that must not touch memory, pointer arithmetic with broadcasting and None-indexing,
strided/transposed arrays, block pointers with boundary_check / padding / advance,
and atomics (every kind, masks, returned old values, contention across programs)."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import (ON_GPU, ODD_SIZES, assert_no_poison, assert_poison, grid_for, poisoned,
                         run_interpreted)


# --- load / store with masks ---------------------------------------------------------------
@tessera.kernel
def masked_copy_kernel(x_ptr, out_ptr, n, OTHER: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=OTHER)
    tl.store(out_ptr + offs, x)                         # unmasked: writes `other` past n


@pytest.mark.parametrize("n", ODD_SIZES)
def test_load_other_fills_masked_lanes(n):
    block = 64
    x = np.arange(n, dtype=np.float32) + 1
    out = poisoned(grid_for(n, block)[0] * block, np.float32)
    masked_copy_kernel[grid_for(n, block)](x, out, n, OTHER=-2.5, BLOCK=block)
    np.testing.assert_array_equal(out[:n], x)
    assert (out[n:] == -2.5).all()


def test_load_without_other_gives_zero():
    x = np.arange(10, dtype=np.int32) + 1
    out = poisoned(16, np.int32)
    masked_load_default_kernel[(1,)](x, out, 10, BLOCK=16)
    np.testing.assert_array_equal(out, np.r_[x, np.zeros(6, np.int32)])


@tessera.kernel
def masked_load_default_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n))


@tessera.kernel
def far_masked_lanes_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ok = offs < n
    # Masked-off lanes point 8 GiB before the arrays: touching them would fault.
    far = tl.where(ok, offs.to(tl.int64), offs.to(tl.int64) - (1 << 31))
    x = tl.load(x_ptr + far, mask=ok, other=7.0)
    tl.store(out_ptr + far, x * 2, mask=ok)
    tl.store(out_ptr + BLOCK + offs, x)


def test_masked_off_lanes_touch_no_memory():
    x = np.arange(5, dtype=np.float32) + 1
    out = poisoned(32, np.float32)
    far_masked_lanes_kernel[(1,)](x, out, 5, BLOCK=16)
    np.testing.assert_array_equal(out[:5], x * 2)
    assert_poison(out[5:16])
    np.testing.assert_array_equal(out[16:], np.r_[x, np.full(11, 7.0, np.float32)])


@tessera.kernel
def masked_store_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    keep = (offs < n) & (offs % 3 != 1)
    tl.store(out_ptr + offs, x, mask=keep)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint16, np.float64, np.int64])
def test_store_mask_leaves_lanes_untouched(dtype):
    n = 1000
    x = (np.arange(n) % 100).astype(dtype)
    out = poisoned(n + 24, dtype)
    masked_store_kernel[grid_for(n, 128)](x, out, n, BLOCK=128)
    idx = np.arange(n)
    np.testing.assert_array_equal(out[:n][idx % 3 != 1], x[idx % 3 != 1])
    assert_poison(out[:n][idx % 3 == 1])
    assert_poison(out[n:])


@tessera.kernel
def tile_other_kernel(x_ptr, fill_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    fill = tl.load(fill_ptr + offs)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=fill))


def test_load_other_as_tile_and_converted():
    x = np.arange(16, dtype=np.float32)
    fill = -np.arange(16, dtype=np.int32)                # int other is cast to f32
    out = poisoned(16, np.float32)
    tile_other_kernel[(1,)](x, fill, out, 9, BLOCK=16)
    np.testing.assert_array_equal(out, np.where(np.arange(16) < 9, x, fill.astype(np.float32)))


@tessera.kernel
def scalar_ptr_kernel(x_ptr, out_ptr, n):
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid)
    tl.store(out_ptr + pid, v * 3 + pid, mask=pid < n)
    w = tl.load(x_ptr + pid, mask=pid < 2, other=-1)
    tl.store(out_ptr + 100 + pid, w)


def test_scalar_pointer_loads_and_stores():
    x = np.arange(10, dtype=np.int32) * 10
    out = poisoned(110, np.int32)
    scalar_ptr_kernel[(10,)](x, out, 7)
    np.testing.assert_array_equal(out[:7], x[:7] * 3 + np.arange(7))
    assert_poison(out[7:100])
    np.testing.assert_array_equal(out[100:110], [0, 10] + [-1] * 8)


# --- pointer arithmetic, broadcasting, None-indexing ---------------------------------------------
@tessera.kernel
def matrix_copy_kernel(src, dst, M, N, s_m, s_n, d_m, d_n, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    ptrs = src + rm[:, None] * s_m + rn[None, :] * s_n      # (BM, 1) + (1, BN) -> (BM, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    v = tl.load(ptrs, mask=mask, other=0)
    tl.store(dst + rm[:, None] * d_m + rn[None, :] * d_n, v + 1, mask=mask)


@pytest.mark.parametrize("M,N", [(1, 1), (17, 5), (33, 64), (100, 3)])
def test_2d_pointer_broadcasting_and_masks(M, N):
    src = np.arange(M * N, dtype=np.float32).reshape(M, N)
    dst = poisoned((M, N), np.float32)
    matrix_copy_kernel[(tessera.cdiv(M, 16), tessera.cdiv(N, 16))](src, dst, M, N, N, 1, N, 1,
                                                                   BM=16, BN=16)
    np.testing.assert_array_equal(dst, src + 1)


def test_strided_transposed_and_negative_stride_views():
    base = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    for src in (base[::3, 1::2], base.T, base[::-2, ::-1]):
        M, N = src.shape
        s_m, s_n = (s // 4 for s in src.strides)
        dst = poisoned((N, M), np.float32)                  # write the transpose
        matrix_copy_kernel[(tessera.cdiv(M, 16), tessera.cdiv(N, 16))](
            src, dst, M, N, s_m, s_n, 1, M, BM=16, BN=16)
        np.testing.assert_array_equal(dst, src.T + 1)


@tessera.kernel
def none_indexing_kernel(x_ptr, y_ptr, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BM))                  # (BM,)
    y = tl.load(y_ptr + tl.arange(0, BN))                  # (BN,)
    outer = x[:, None] * y[None, :]                        # (BM, BN)
    row = x[None, :]                                       # (1, BM)
    tl.static_assert(row.shape[0] == 1)
    col3 = y[:, None, None]                                # (BN, 1, 1)
    tl.static_assert(len(col3.shape) == 3)
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, outer + tl.sum(row, axis=1)[:, None])


def test_none_indexing_outer_product():
    x = np.arange(1, 9, dtype=np.float32)
    y = np.arange(1, 5, dtype=np.float32) * 10
    out = poisoned((8, 4), np.float32)
    none_indexing_kernel[(1,)](x, y, out, BM=8, BN=4)
    np.testing.assert_array_equal(out, np.outer(x, y) + x.sum())


@tessera.kernel
def offset_types_kernel(x_ptr, out_ptr, off64, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(x_ptr + i.to(tl.int64) + off64)             # i64 offsets
    b = tl.load(x_ptr + i.to(tl.uint32) + 1)                # u32 offsets (zero-extended)
    c = tl.load((x_ptr + 20) - i.to(tl.int16))              # negative offsets from an interior pointer
    p = x_ptr + i                                           # pointer tile arithmetic chains
    d = tl.load(p + i)
    tl.store(out_ptr + i, a)
    tl.store(out_ptr + BLOCK + i, b)
    tl.store(out_ptr + 2 * BLOCK + i, c)
    tl.store(out_ptr + 3 * BLOCK + i, d)


def test_pointer_offsets_of_every_integer_type():
    x = np.arange(64, dtype=np.float64) * 1.5
    out = poisoned(32, np.float64)
    offset_types_kernel[(1,)](x, out, 3, BLOCK=8)
    i = np.arange(8)
    np.testing.assert_array_equal(out[:8], x[i + 3])
    np.testing.assert_array_equal(out[8:16], x[i + 1])
    np.testing.assert_array_equal(out[16:24], x[20 - i])
    np.testing.assert_array_equal(out[24:32], x[2 * i])


@tessera.kernel
def gather_scatter_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + i)
    v = tl.load(x_ptr + idx)
    tl.store(out_ptr + idx, v * 10)


def test_gather_scatter_permutation():
    rng = np.random.default_rng(0)
    idx = rng.permutation(256).astype(np.int32)
    x = rng.standard_normal(256).astype(np.float32)
    out = poisoned(256, np.float32)
    gather_scatter_kernel[(1,)](x, idx, out, BLOCK=256)
    np.testing.assert_array_equal(out, x * 10)


# --- block pointers ------------------------------------------------------------------------------
@tessera.kernel
def block_copy_kernel(src, dst, M, N, s_m, s_n, BM: tl.constexpr, BN: tl.constexpr,
                      PAD: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    src_bp = tl.make_block_ptr(src, shape=(M, N), strides=(s_m, s_n), offsets=(pm * BM, pn * BN),
                               block_shape=(BM, BN), order=(1, 0))
    dst_bp = tl.make_block_ptr(dst, shape=(M, N), strides=(N, 1), offsets=(pm * BM, pn * BN),
                               block_shape=(BM, BN), order=(1, 0))
    v = tl.load(src_bp, boundary_check=(0, 1), padding_option=PAD)
    tl.store(dst_bp, v * 2, boundary_check=(0, 1))


@pytest.mark.parametrize("M,N", [(1, 1), (17, 33), (64, 16), (5, 100)])
def test_block_pointer_boundary_check_both_dims(M, N):
    src = np.arange(M * N, dtype=np.float32).reshape(M, N) - 50
    dst = poisoned((M + 2, N), np.float32)                  # rows past M must stay poisoned
    block_copy_kernel[(tessera.cdiv(M, 16), tessera.cdiv(N, 32))](src, dst, M, N, N, 1, BM=16, BN=32,
                                                                  PAD="zero")
    np.testing.assert_array_equal(dst[:M], src * 2)
    assert_poison(dst[M:])


@tessera.kernel
def block_pad_kernel(src, out, M, N, BM: tl.constexpr, BN: tl.constexpr, PAD: tl.constexpr,
                     CHECK: tl.constexpr):
    bp = tl.make_block_ptr(src, shape=(M, N), strides=(N, 1), offsets=(0, 0), block_shape=(BM, BN),
                           order=(1, 0))
    v = tl.load(bp, boundary_check=CHECK, padding_option=PAD)
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out + offs, v)


@pytest.mark.parametrize("pad", ["zero", "nan"])
def test_block_pointer_padding_options(pad):
    M, N = 5, 6
    src = np.arange(M * N, dtype=np.float32).reshape(M, N) + 1
    out = np.zeros((8, 8), np.float32)
    block_pad_kernel[(1,)](src, out, M, N, BM=8, BN=8, PAD=pad, CHECK=(0, 1))
    np.testing.assert_array_equal(out[:M, :N], src)
    fill = 0.0 if pad == "zero" else np.nan
    outside = np.ones((8, 8), bool)
    outside[:M, :N] = False
    np.testing.assert_array_equal(out[outside], np.full(outside.sum(), fill, np.float32))


def test_block_pointer_partial_boundary_check():
    # boundary_check=(0,) checks rows only: columns 0..7 of a 16-wide row are in bounds
    M, N = 3, 16
    src = np.arange(M * N, dtype=np.float32).reshape(M, N)
    out = poisoned((4, 8), np.float32)
    block_pad_kernel[(1,)](src, out, M, N, BM=4, BN=8, PAD="zero", CHECK=(0,))
    np.testing.assert_array_equal(out[:3], src[:, :8])
    np.testing.assert_array_equal(out[3], np.zeros(8, np.float32))


@tessera.kernel
def block_advance_rowsum_kernel(src, out, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pm = tl.program_id(0)
    bp = tl.make_block_ptr(src, shape=(M, N), strides=(N, 1), offsets=(pm * BM, 0),
                           block_shape=(BM, BN), order=(1, 0))
    acc = tl.zeros((BM,), tl.float32)
    for _ in range(0, tl.cdiv(N, BN)):
        acc += tl.sum(tl.load(bp, boundary_check=(0, 1), padding_option="zero"), axis=1)
        bp = tl.advance(bp, (0, BN))
    rows = pm * BM + tl.arange(0, BM)
    tl.store(out + rows, acc, mask=rows < M)


@pytest.mark.parametrize("M,N", [(7, 100), (64, 33), (1, 1)])
def test_block_pointer_advance_in_a_loop(M, N):
    src = np.arange(M * N, dtype=np.float32).reshape(M, N) % 17
    out = poisoned(M, np.float32)
    block_advance_rowsum_kernel[(tessera.cdiv(M, 8),)](src, out, M, N, BM=8, BN=16)
    np.testing.assert_array_equal(out, src.sum(axis=1))


@tessera.kernel
def block_transposed_order_kernel(src, dst, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # src is column-major (order=(0, 1)): element (i, j) at i + j * M
    bp = tl.make_block_ptr(src, shape=(M, N), strides=(1, M), offsets=(0, 0), block_shape=(BM, BN),
                           order=(0, 1))
    v = tl.load(bp, boundary_check=(0, 1), padding_option="zero")
    out = tl.make_block_ptr(dst, shape=(N, M), strides=(M, 1), offsets=(0, 0), block_shape=(BN, BM),
                            order=(1, 0))
    tl.store(out, tl.trans(v), boundary_check=(0, 1))


def test_block_pointer_column_major_and_transposed_store():
    M, N = 6, 5
    a = np.arange(M * N, dtype=np.float32).reshape(M, N)
    src = np.asfortranarray(a).ravel(order="K")             # column-major storage
    dst = poisoned((N, M), np.float32)
    block_transposed_order_kernel[(1,)](src, dst, M, N, BM=8, BN=8)
    np.testing.assert_array_equal(dst, a.T)


# --- atomics -------------------------------------------------------------------------------------
@tessera.kernel
def atomic_kernel(ptr, val_ptr, old_ptr, n, KIND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(val_ptr + offs, mask=mask)
    target = ptr + offs % 4                                 # 4 contended addresses
    if KIND == "add":
        old = tl.atomic_add(target, v, mask=mask)
    elif KIND == "max":
        old = tl.atomic_max(target, v, mask=mask)
    elif KIND == "min":
        old = tl.atomic_min(target, v, mask=mask)
    elif KIND == "and":
        old = tl.atomic_and(target, v, mask=mask)
    elif KIND == "or":
        old = tl.atomic_or(target, v, mask=mask)
    elif KIND == "xor":
        old = tl.atomic_xor(target, v, mask=mask)
    else:
        old = tl.atomic_xchg(target, v, mask=mask)
    tl.store(old_ptr + offs, old)                           # masked lanes yield 0


def _atomic_reference(kind, init, vals):
    acc = init.copy()
    for i, v in enumerate(vals):
        j = i % 4
        if kind == "add":
            acc[j] = acc[j] + v
        elif kind == "max":
            acc[j] = np.fmax(acc[j], v) if acc.dtype.kind == "f" else max(acc[j], v)
        elif kind == "min":
            acc[j] = np.fmin(acc[j], v) if acc.dtype.kind == "f" else min(acc[j], v)
        elif kind == "and":
            acc[j] &= v
        elif kind == "or":
            acc[j] |= v
        elif kind == "xor":
            acc[j] ^= v
    return acc


ATOMIC_CASES = [(k, d) for k in ("add", "max", "min") for d in (np.int32, np.uint32, np.int64,
                                                               np.uint64, np.float32, np.float64)]
ATOMIC_CASES += [(k, d) for k in ("and", "or", "xor") for d in (np.int32, np.uint64)]


@pytest.mark.parametrize("kind,dtype", ATOMIC_CASES, ids=lambda x: getattr(x, "__name__", x))
def test_atomic_rmw_contended_across_programs(kind, dtype):
    n, block = 4000 + 3, 64                                 # 63 programs, masked tail
    rng = np.random.default_rng(hash(kind) % 100)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        vals = rng.integers(-50, 50, n).astype(dtype)       # integral: sums are exact
        if kind == "add":
            vals = np.abs(vals)
    elif kind in ("and", "or", "xor"):
        vals = rng.integers(0, np.iinfo(dtype).max, n, dtype=dtype, endpoint=True)
    else:
        info = np.iinfo(dtype)
        vals = rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(dtype)
        if kind == "add":
            vals = (np.abs(vals.astype(np.int64)) + 1).astype(dtype)     # strictly increasing sums
    init = {"and": np.full(4, np.iinfo(dtype).max if dt.kind in "iu" else 0, dtype)}.get(
        kind, np.array([3, 0, 7, 1], dtype))
    mem = init.copy()
    old = poisoned(grid_for(n, block)[0] * block, dtype)
    atomic_kernel[grid_for(n, block)](mem, vals, old, n, KIND=kind, BLOCK=block)
    np.testing.assert_array_equal(mem, _atomic_reference(kind, init, vals))
    assert (old[n:] == 0).all(), "masked-off atomic lanes must yield 0"
    assert_no_poison(old[:n])
    if kind == "add" and dt.kind in "iu":
        # the updates to one address happened in some serial order: each lane's old + v is the
        # next lane's old (or the final value), starting from the initial value
        for j in range(4):
            o = old[:n][j::4].astype(np.int64)
            v = vals[j::4].astype(np.int64)
            np.testing.assert_array_equal(np.sort(o + v), np.sort(np.r_[o, int(mem[j])])[1:])
            assert o.min() == init[j]


def test_atomic_add_counter_returns_unique_tickets():
    grid = 500
    counter = np.zeros(1, np.int32)
    tickets = poisoned(grid, np.int32)
    ticket_kernel[(grid,)](counter, tickets)
    assert counter[0] == grid
    np.testing.assert_array_equal(np.sort(tickets), np.arange(grid))


@tessera.kernel
def ticket_kernel(counter_ptr, out_ptr):
    pid = tl.program_id(0)
    t = tl.atomic_add(counter_ptr, 1)                       # scalar atomic
    tl.store(out_ptr + pid, t)


@tessera.kernel
def same_address_lanes_kernel(ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(ptr + offs * 0, offs + 1)           # every lane hits ptr[0]
    tl.store(old_ptr + offs, old)


def test_atomic_lanes_of_one_op_hitting_one_address():
    mem = np.zeros(1, np.int32)
    old = poisoned(32, np.int32)
    same_address_lanes_kernel[(1,)](mem, old, BLOCK=32)
    assert mem[0] == 32 * 33 // 2
    # each lane got the sum of the lanes applied before it: sorted olds are distinct partial sums
    assert len(np.unique(old)) == 32
    assert old.min() == 0


@tessera.kernel
def fadd_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(ptr + offs % 2, tl.full((BLOCK,), 0.5, tl.float32), mask=offs < n)


def test_atomic_fadd_many_programs():
    mem = np.zeros(2, np.float32)
    n = 100_001
    fadd_kernel[grid_for(n, 128)](mem, n, BLOCK=128)
    np.testing.assert_array_equal(mem, [0.5 * 50001, 0.5 * 50000])


@tessera.kernel
def fp16_atomic_add_kernel(ptr, old_ptr, v, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(ptr + offs % 4, tl.full((BLOCK,), v, tl.float16))
    tl.store(old_ptr + tl.program_id(0) * BLOCK + offs, old)


def test_atomic_add_fp16():
    mem = np.zeros(4, np.float16)
    old = poisoned(8 * 64, np.float16)
    fp16_atomic_add_kernel[(8,)](mem, old, 1.0, BLOCK=64)
    np.testing.assert_array_equal(mem, np.full(4, 128, np.float16))
    np.testing.assert_array_equal(np.sort(old.reshape(-1, 4), axis=0),
                                  np.repeat(np.arange(128, dtype=np.float16)[:, None], 4, axis=1))
    # every add rounds to f16: 2048 + 1 is a tie that stays at 2048
    mem = np.full(4, 2048, np.float16)
    fp16_atomic_add_kernel[(8,)](mem, old, 1.0, BLOCK=64)
    np.testing.assert_array_equal(mem, np.full(4, 2048, np.float16))


@tessera.kernel
def xchg_kernel(ptr, old_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_xchg(ptr + offs, pid + 1 + offs * 0)
    tl.store(old_ptr + pid * BLOCK + offs, old)


def test_atomic_xchg_chain():
    grid, block = 50, 8
    mem = np.zeros(block, np.int32)
    old = poisoned(grid * block, np.int32).reshape(grid, block)
    xchg_kernel[(grid,)](mem, old, BLOCK=block)
    # per slot: the values seen plus the final value are exactly {0, 1..grid}
    for j in range(block):
        seen = np.sort(np.r_[old[:, j], mem[j]])
        np.testing.assert_array_equal(seen, np.arange(grid + 1))


@tessera.kernel
def cas_lock_kernel(lock_ptr, count_ptr, ITERS: tl.constexpr):
    # a spin lock around a non-atomic read-modify-write
    for _ in range(ITERS):
        while tl.atomic_cas(lock_ptr, 0, 1) != 0:
            pass
        c = tl.load(count_ptr)
        tl.store(count_ptr, c + 1)
        tl.atomic_xchg(lock_ptr, 0)


def test_atomic_cas_spin_lock_mutual_exclusion():
    lock = np.zeros(1, np.int32)
    count = np.zeros(1, np.int64)
    cas_lock_kernel[(64,)](lock, count, ITERS=50)
    assert count[0] == 64 * 50
    assert lock[0] == 0


@tessera.kernel
def cas_tile_kernel(ptr, cmp_ptr, val_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(ptr + offs, tl.load(cmp_ptr + offs), tl.load(val_ptr + offs))
    tl.store(old_ptr + offs, old)


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.int64, np.float64])
def test_atomic_cas_tile(dtype):
    mem = np.arange(16).astype(dtype)
    cmp = mem.copy()
    cmp[1::2] += 1                                          # odd lanes do not match
    val = (np.arange(16) * 10 + 5).astype(dtype)
    old = poisoned(16, dtype)
    cas_tile_kernel[(1,)](mem, cmp, val, old, BLOCK=16)
    np.testing.assert_array_equal(old, np.arange(16).astype(dtype))
    np.testing.assert_array_equal(mem, np.where(np.arange(16) % 2 == 0, val, np.arange(16)).astype(dtype))


@tessera.kernel
def atomic_max_float_nan_kernel(ptr, val_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_max(ptr + offs, tl.load(val_ptr + offs))
    tl.atomic_min(ptr + BLOCK + offs, tl.load(val_ptr + offs))


def test_atomic_float_max_min_ieee_and_negative():
    vals = np.array([-1.0, -3.0, np.nan, 2.0, -0.5, 5.0, -7.0, 0.0], np.float32)
    mem = np.r_[np.full(8, -2.0, np.float32), np.full(8, -2.0, np.float32)]
    atomic_max_float_nan_kernel[(1,)](mem, vals, BLOCK=8)
    np.testing.assert_array_equal(mem[:8], np.fmax(-2.0, vals))
    np.testing.assert_array_equal(mem[8:], np.fmin(-2.0, vals))


def test_atomics_agree_with_interpreter_single_program():
    vals = np.arange(1, 65, dtype=np.int32)
    for kind in ("add", "max", "xor", "xchg"):
        mem_c = np.array([5, 1, 9, 2], np.int32)
        old_c = poisoned(64, np.int32)
        mem_i, old_i = mem_c.copy(), old_c.copy()
        atomic_kernel[(1,)](mem_c, vals, old_c, 61, KIND=kind, BLOCK=64)
        run_interpreted(atomic_kernel, (1,), mem_i, vals, old_i, 61, KIND=kind, BLOCK=64)
        if ON_GPU:  # lanes hitting one address apply in an unspecified order (docs/language.md)
            assert_atomics_linearizable(kind, np.array([5, 1, 9, 2], np.int32), vals[:61], old_c[:61], mem_c)
            continue
        np.testing.assert_array_equal(mem_c, mem_i, err_msg=kind)
        np.testing.assert_array_equal(old_c, old_i, err_msg=kind)
        assert_atomics_linearizable(kind, np.array([5, 1, 9, 2], np.int32), vals[:61], old_c[:61], mem_c)


_ATOMIC_STEP = {"add": lambda m, v: m + v, "max": max, "xor": lambda m, v: m ^ v, "xchg": lambda m, v: v}


def assert_atomics_linearizable(kind, mem0, vals, olds, mem_final):
    """The GPU results of atomic_kernel (lane i updates address i % 4 with vals[i]) are
    those of SOME one-at-a-time order of the lanes: per address, a chain from the
    initial value through every lane (each lane's old value is the value before it)
    to the final value."""
    step = _ATOMIC_STEP[kind]
    for a in range(len(mem0)):
        lanes = list(range(a, len(vals), len(mem0)))

        seen = {}

        def chain(cur, left):  # depth-first, memoized: olds are almost always unique
            if not left:
                return cur == mem_final[a]
            if (cur, left) not in seen:
                seen[cur, left] = any(chain(int(step(cur, int(vals[i]))), left - {i})
                                      for i in sorted(left) if olds[i] == cur)
            return seen[cur, left]
        assert chain(int(mem0[a]), frozenset(lanes)), \
            f"{kind}: address {a}: old values {olds[lanes]} and final {mem_final[a]} fit no order of the lanes"


# --- alignment and hints ---------------------------------------------------------------------------
@tessera.kernel
def hinted_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.multiple_of(tl.program_id(0) * BLOCK, BLOCK) + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(offs, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int16])
@pytest.mark.parametrize("n", [4096, 4097])            # 4096: n specialized as divisible by 16
def test_misaligned_array_views_with_contiguity_hints(dtype, n):
    base = (np.arange(n + 8) % 100).astype(dtype)
    out_base = poisoned(n + 8, dtype)
    for shift in (1, 3):                                 # data pointers not 16-byte aligned
        x, y = base[shift:shift + n], base[shift + 1:shift + 1 + n]
        out = out_base[shift:shift + n]
        hinted_add_kernel[grid_for(n, 256)](x, y, out, n, BLOCK=256)
        np.testing.assert_array_equal(out, x + y)
