"""Compiled CPU path, the x86 lowering's fast paths: loops specialized for masks
that are all true (and the integer wrap-around that must keep a mask out of them),
leaf tiles kept lazy, and stores that write around the cache on launches larger
than the last-level cache. Every result is checked bit for bit: the fast paths
change which instructions run, never a value."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import assert_no_poison, grid_for, poisoned, run_interpreted


def asm_of(kernel, signature, **constexprs):
    return tessera.compile(kernel, signature=signature, constexprs=constexprs).asm["asm"]


# --- masks that are all true ---------------------------------------------------------------
@tessera.kernel
def masked_axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=2.0)
    tl.store(out_ptr + offs, tl.where(mask, a * x + y, -1.0), mask=mask)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 4096, 4097, 10000])
def test_masked_elementwise_full_and_partial_blocks(n):
    # Every block but the last takes the all-true copy of the loop; the last the masked one.
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = poisoned(n, np.float32)
    masked_axpy_kernel[grid_for(n, 64)](x, y, out, 1.5, n, BLOCK=64)
    np.testing.assert_array_equal(out, np.float32(1.5) * x + y)


def loops(asm):
    """The body of every loop in `asm` (a label some later jump branches back to)."""
    lines = [ln.strip() for ln in asm.splitlines() if ln.strip() and not ln.strip().startswith(".p2align")]
    labels = {ln[:-1]: i for i, ln in enumerate(lines) if ln.endswith(":")}
    out = []
    for i, ln in enumerate(lines):
        parts = ln.split()
        if len(parts) == 2 and parts[0].startswith("j") and labels.get(parts[1], i + 1) <= i:
            out.append(lines[labels[parts[1]]:i + 1])
    return out


def test_all_true_loop_is_plain_vector_code():
    asm = asm_of(masked_axpy_kernel, "*fp32,*fp32,*fp32,fp32,i32", BLOCK=1024)
    bodies = [b for b in loops(asm) if any("vmulps" in ln for ln in b)]
    plain = [b for b in bodies if not any("{%k" in ln or "vmaskmov" in ln or "vpcmpgt" in ln for ln in b)]
    masked = [b for b in bodies if b not in plain]
    assert plain, "no loop of the all-true copy (plain loads and stores)"
    assert masked, "no masked copy for the last block"
    # Per chunk: two loads, a multiply, an add, a store, and little else.
    per_chunk = min(len(b) / sum("vmulps" in ln for ln in b) for b in plain)
    assert per_chunk <= 7, per_chunk


@tessera.kernel
def mask_value_kernel(out_ptr, base, n, BLOCK: tl.constexpr):
    offs = base + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + cols, tl.where(offs < n, 1, 0))


@pytest.mark.parametrize("base,n", [
    (2**31 - 8, 2**31 - 1),     # i32 lanes wrap to negative: compare true there, not "all true"
    (2**31 - 65, 2**31 - 1),    # the last lane is INT32_MAX - 1: no wrap, all true
    (2**31 - 64, 2**31 - 1),    # the last lane is INT32_MAX: no wrap, the last lane false
    (-(2**31), -(2**31) + 10),  # from INT32_MIN: a partial mask
    (0, 64),
    (5, 64),
])
def test_mask_ranges_with_wraparound(base, n):
    block = 64
    out = poisoned(block, np.int32)
    mask_value_kernel[(1,)](out, base, n, BLOCK=block)
    offs = (np.int64(base) + np.arange(block)).astype(np.int64)
    offs = ((offs + 2**31) % 2**32 - 2**31).astype(np.int32)  # int32 wrap-around
    np.testing.assert_array_equal(out, (offs < n).astype(np.int32))
    ref = poisoned(block, np.int32)
    run_interpreted(mask_value_kernel, (1,), ref, base, n, BLOCK=block)
    np.testing.assert_array_equal(out, ref)


@tessera.kernel
def or_mask_value_kernel(out_ptr, base, n, k, BLOCK: tl.constexpr):
    offs = base + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + cols, tl.where((offs < n) | (cols < k), offs, -1))


@pytest.mark.parametrize("base,n,k", [
    (0, 64, 0),                 # the first side all true
    (0, 10, 64),                # the second side all true
    (0, 10, 20),                # neither: lane by lane
    (2**31 - 8, 2**31 - 1, 64),  # the first side's lanes wrap; the second side all true: the
                                 # all-true copy, whose offsets must still wrap (not nsw)
    (2**31 - 8, 2**31 - 1, 3),  # wrapped lanes, neither side all true
    (2**31 - 65, 2**31 - 1, 0),  # no wrap, the first side all true
])
def test_or_of_masks_takes_the_all_true_copy(base, n, k):
    # mask_versioning.cpp: an `or` of compares is all true where either side is.
    block = 64
    out = poisoned(block, np.int32)
    or_mask_value_kernel[(1,)](out, base, n, k, BLOCK=block)
    offs = (np.int64(base) + np.arange(block)).astype(np.int64)
    offs = ((offs + 2**31) % 2**32 - 2**31).astype(np.int32)  # int32 wrap-around
    want = np.where((offs < n) | (np.arange(block) < k), offs, -1).astype(np.int32)
    np.testing.assert_array_equal(out, want)
    ref = poisoned(block, np.int32)
    run_interpreted(or_mask_value_kernel, (1,), ref, base, n, k, BLOCK=block)
    np.testing.assert_array_equal(out, ref)


def test_or_mask_is_versioned():
    ir = tessera.compile(or_mask_value_kernel, "*i32,i32,i32,i32", constexprs={"BLOCK": 1024}).asm["llir"]
    assert "mask.all_true" in ir and "mask.general" in ir


@tessera.kernel
def mask_value_i64_kernel(out_ptr, base, n, BLOCK: tl.constexpr):
    offs = base + tl.arange(0, BLOCK).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + cols, tl.where((offs < n) & (offs >= base), 1, 0))


@pytest.mark.parametrize("base,n", [(2**63 - 8, 2**63 - 1), (2**63 - 64, 2**63 - 1), (7, 100)])
def test_mask_ranges_i64_wraparound(base, n):
    block = 64
    out = poisoned(block, np.int32)
    mask_value_i64_kernel[(1,)](out, base, n, BLOCK=block)
    offs = (np.uint64(base) + np.arange(block, dtype=np.uint64)).view(np.int64)  # int64 wrap
    want = ((offs < n) & (offs >= base)).astype(np.int32)
    np.testing.assert_array_equal(out, want)


@tessera.kernel
def masked_2d_kernel(x_ptr, out_ptr, M, N, stride, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + rows[:, None] * stride + cols[None, :], x * 2.0 + 1.0, mask=mask)


@pytest.mark.parametrize("M,N", [(32, 64), (33, 64), (32, 70), (5, 3)])
def test_masked_2d_tiles(M, N):
    x = np.random.default_rng(0).standard_normal((M, N)).astype(np.float32)
    out = poisoned((M, N), np.float32)
    masked_2d_kernel[(grid_for(M, 16)[0], grid_for(N, 32)[0])](x, out, M, N, N, BM=16, BN=32)
    np.testing.assert_array_equal(out, x * np.float32(2) + np.float32(1))


@tessera.kernel
def row_stats_kernel(x_ptr, sum_ptr, max_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    # The scalar results come out of both copies of the reduce loop (merged by a phi).
    tl.store(sum_ptr + row, tl.sum(x, axis=0))
    tl.store(max_ptr + row, tl.max(tl.where(mask, x, -float("inf")), axis=0))


@pytest.mark.parametrize("n_cols", [1, 100, 256, 255])
def test_masked_row_reductions(n_cols):
    rows = 7
    # Small integers: every order of summation gives the same float sum.
    x = np.random.default_rng(n_cols).integers(-50, 50, (rows, n_cols)).astype(np.float32)
    s, m = poisoned(rows, np.float32), poisoned(rows, np.float32)
    row_stats_kernel[(rows,)](x, s, m, n_cols, BLOCK=256)
    np.testing.assert_array_equal(s, x.sum(axis=1))
    np.testing.assert_array_equal(m, x.max(axis=1))


@tessera.kernel
def col_sum_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.arange(0, BM)
    cols = tl.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + cols, tl.sum(x, axis=0), mask=cols < N)


@pytest.mark.parametrize("M,N", [(8, 32), (5, 32), (8, 20)])
def test_masked_column_reductions(M, N):
    x = np.random.default_rng(M * N).integers(-9, 9, (M, N)).astype(np.float32)
    out = poisoned(N, np.float32)
    col_sum_kernel[(1,)](x, out, M, N, BM=8, BN=32)
    np.testing.assert_array_equal(out, x.sum(axis=0))


# --- softmax and layernorm: both copies of every loop give the same bits -------------------
@tessera.kernel
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=mask)


def test_softmax_all_true_and_masked_copies_agree():
    # BLOCK == n_cols runs the all-true copies; BLOCK = 2 * n_cols the masked ones.
    # Padding lanes add exp(-inf) = 0 to the sums and -inf to the maxima: same bits.
    x = np.random.default_rng(1).standard_normal((6, 512)).astype(np.float32) * 4
    fast, general = poisoned(x.shape, np.float32), poisoned(x.shape, np.float32)
    softmax_kernel[(6,)](fast, x, 512, BLOCK=512)
    softmax_kernel[(6,)](general, x, 512, BLOCK=1024)
    np.testing.assert_array_equal(fast, general)
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(fast, ref / ref.sum(1, keepdims=True), rtol=2e-6)


@tessera.kernel
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n_cols + cols, xc * rstd * w + b, mask=mask)


def test_layernorm_all_true_and_masked_copies_agree():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 256)).astype(np.float32)
    w, b = rng.standard_normal(256).astype(np.float32), rng.standard_normal(256).astype(np.float32)
    fast, general = poisoned(x.shape, np.float32), poisoned(x.shape, np.float32)
    layernorm_kernel[(5,)](x, w, b, fast, 256, 1e-5, BLOCK=256)
    layernorm_kernel[(5,)](x, w, b, general, 256, 1e-5, BLOCK=512)
    np.testing.assert_array_equal(fast, general)


def test_layernorm_keeps_arange_lazy():
    # `cols` feeds many uses; materializing it cost a 16 KB buffer write per program and
    # turned contiguous loads into loads of offsets from that buffer.
    llir = tessera.compile(layernorm_kernel, signature="*fp32,*fp32,*fp32,*fp32,i32,fp32",
                           constexprs={"BLOCK": 4096}).asm["llir"]
    assert "alloca i32" not in llir


def test_rows_are_reloaded_not_buffered():
    # x feeds the max and the exp (softmax), the mean, the variance and the output
    # (layernorm): each pass loads it again from the row (still in L1/L2) instead of
    # writing a 16 KB copy on the stack. Softmax keeps one buffer: exp(x), which the
    # division reads after the sum. Layernorm keeps none: its mask `cols < n_cols`
    # stays lazy however often it is used, so the all-true loop copies exist.
    sm = tessera.compile(softmax_kernel, signature="*fp32,*fp32,i32",
                         constexprs={"BLOCK": 4096}).asm["llir"]
    assert sm.count("alloca float, i64 4096") == 1, sm
    ln = tessera.compile(layernorm_kernel, signature="*fp32,*fp32,*fp32,*fp32,i32,fp32",
                         constexprs={"BLOCK": 4096}).asm["llir"]
    assert "alloca float" not in ln and "alloca i8" not in ln and "alloca i1" not in ln
    assert "mask.all_true" in ln


def test_next_row_prefetch_goes_in_the_last_nest_that_loads_the_row():
    # row_prefetch.cpp: the next program's row is prefetched (one prefetcht1 per
    # 64-byte chunk) in the last loop nest that loads this row, the long exp nest of
    # softmax, not in the short max nest; a row every program reads (layernorm's
    # weight and bias) is not prefetched at all.
    def innermost(bodies):  # drop the loop over programs, which holds all the others
        return [b for b in bodies if not any(o is not b and len(o) < len(b) and o[0] in b for o in bodies)]

    asm = asm_of(softmax_kernel, "*fp32,*fp32,i32", BLOCK=4096)
    bodies = innermost(loops(asm))
    exp_loops = [b for b in bodies if any("vscalefps" in ln for ln in b)]
    max_loops = [b for b in bodies if any("vcmpunordps" in ln for ln in b)]
    assert exp_loops and max_loops
    for b in exp_loops:
        loads = sum(ln.startswith(("vmovups", "vblendmps")) and "(" in ln for ln in b)
        assert sum(ln.startswith("prefetcht1") for ln in b) == loads, b
    for b in max_loops:
        assert not any(ln.startswith("prefetch") for ln in b), b
    # Layernorm: x is loaded by all three nests (sum, centred sum of squares, scale):
    # only the last prefetches, one line per 64-byte chunk of x, none for w or b.
    ln_asm = asm_of(layernorm_kernel, "*fp32,*fp32,*fp32,*fp32,i32,fp32", BLOCK=4096)
    with_prefetch = [b for b in innermost(loops(ln_asm)) if any(ln.startswith("prefetcht1") for ln in b)]
    assert with_prefetch and all(any(ln.startswith(("vmovntps", "vmovups\t%zmm")) for ln in b) for b in with_prefetch)


@tessera.kernel
def rescale_rows_kernel(x_ptr, w_ptr, out_ptr, W_ROW_STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    # x and w are each read by two nests (the sum, then the store). With
    # W_ROW_STRIDE = 0 every program reads the same w.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * BLOCK + cols)
    w = tl.load(w_ptr + row * W_ROW_STRIDE + cols)
    s = tl.sum(x * w, axis=0)
    tl.store(out_ptr + row * BLOCK + cols, x * w * s)


def prefetches(kernel, signature, **constexprs):
    llir = tessera.compile(kernel, signature=signature, constexprs=constexprs).asm["llir"]
    return sum("call void @llvm.prefetch" in ln for ln in llir.splitlines())


def test_next_row_prefetch_only_for_rows_that_move_with_the_program():
    # A shared w is not prefetched a row ahead (that is unrelated memory): half the
    # prefetches of the same kernel with a w row per program.
    shared = prefetches(rescale_rows_kernel, "*fp32,*fp32,*fp32", W_ROW_STRIDE=0, BLOCK=4096)
    per_row = prefetches(rescale_rows_kernel, "*fp32,*fp32,*fp32", W_ROW_STRIDE=4096, BLOCK=4096)
    assert shared > 0 and per_row == 2 * shared, (shared, per_row)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4096)).astype(np.float32)
    w = rng.standard_normal(4096).astype(np.float32)
    out = poisoned(x.shape, np.float32)
    rescale_rows_kernel[(3,)](x, w, out, W_ROW_STRIDE=0, BLOCK=4096)  # the last row prefetches past x
    s = (x.astype(np.float64) * w).sum(axis=1, keepdims=True)       # sums differ in order only
    np.testing.assert_allclose(out, (x * w).astype(np.float64) * s, rtol=1e-4, atol=1e-4)


def test_no_next_row_prefetch_for_a_single_pass_stream():
    # Vector add reads each block once, in order: the hardware prefetcher follows it,
    # and software prefetches made it 5% slower (row_prefetch.cpp).
    assert prefetches(masked_axpy_kernel, "*fp32,*fp32,*fp32,fp32,i32", BLOCK=4096) == 0


@tessera.kernel
def reload_after_store_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # The second use of x comes after a store that may overwrite it (out_ptr may alias
    # x_ptr): x must be buffered, not reloaded.
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols)
    tl.store(out_ptr + cols, x * 2.0)
    tl.store(out_ptr + BLOCK + cols, x + tl.sum(x, axis=0))


def test_no_reload_across_a_store_to_the_same_memory():
    x = np.arange(64, dtype=np.float32)
    buf = np.concatenate([x, np.zeros(64, np.float32)])
    reload_after_store_kernel[(1,)](buf, buf, BLOCK=64)  # out aliases x
    np.testing.assert_array_equal(buf[:64], x * 2)
    np.testing.assert_array_equal(buf[64:], x + x.sum())


# --- streaming (non-temporal) stores --------------------------------------------------------
@tessera.kernel
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


@tessera.kernel
def store_then_load_kernel(x_ptr, out_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 3.0)
    tl.store(sum_ptr + tl.program_id(0), tl.sum(tl.load(out_ptr + offs), axis=0))


@tessera.kernel
def store_and_count_kernel(x_ptr, out_ptr, count_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 3.0)
    tl.atomic_add(count_ptr, 1)


def test_streaming_stores_only_where_safe():
    sig = "*fp32,*fp32,i32"
    assert "movnt" in asm_of(scale_kernel, sig, BLOCK=4096)
    # A launch ends its non-temporal stores with a fence.
    assert "sfence" in asm_of(scale_kernel, sig, BLOCK=4096)
    # The program reads the stored data back: no streaming.
    assert "movnt" not in asm_of(store_then_load_kernel, "*fp32,*fp32,*fp32,i32", BLOCK=4096)
    # Atomics may tell another program that the data is there: no streaming.
    assert "movnt" not in asm_of(store_and_count_kernel, "*fp32,*fp32,*i32,i32", BLOCK=4096)


@pytest.mark.parametrize("out_offset", [0, 1])
def test_streaming_stores_large_launch(out_offset):
    # 2 x 64 MB: more than any last-level cache here, so the stores stream when the
    # output is 16-byte aligned (offset 0) and fall back to normal stores when it is not.
    n = (1 << 24) - 5
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    buf = poisoned(n + 4, np.float32)
    out = buf[out_offset:out_offset + n]
    scale_kernel[grid_for(n, 4096)](x, out, n, BLOCK=4096)
    np.testing.assert_array_equal(out, x * np.float32(3))
    if out_offset:
        assert np.isnan(buf[0])


def test_store_then_load_still_correct():
    n = 1 << 23
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    out, sums = poisoned(n, np.float32), poisoned(n // 4096, np.float32)
    store_then_load_kernel[(n // 4096,)](x, out, sums, n, BLOCK=4096)
    np.testing.assert_array_equal(out, x * np.float32(3))
    assert_no_poison(sums)


# --- the matmul K loop: acc += dot(a, b) summed into the carried acc in place ---------------
@tessera.kernel
def k_loop_matmul_kernel(a_ptr, b_ptr, c_ptr, spy_ptr, K, SPY: tl.constexpr, ACC_FIRST: tl.constexpr,
                         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=c_ptr.dtype.element_ty)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        if SPY:  # a second use of acc: the add cannot be fused into the dot
            tl.store(spy_ptr + rm[:, None] * BN + rn[None, :], acc)
        if ACC_FIRST:
            acc = acc + tl.dot(a, b, input_precision="ieee")
        else:
            acc = tl.dot(a, b, input_precision="ieee") + acc
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@pytest.mark.parametrize("acc_first", [True, False])
def test_fused_dot_add_is_bit_exact(acc_first):
    # The fused form sums each K block from zero in registers and adds it to acc once:
    # the same roundings as dot(a, b, 0) followed by the add, bit for bit.
    M, N, K = 32, 64, 128
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    fused, plain = poisoned((M, N), np.float32), poisoned((M, N), np.float32)
    spy = np.zeros((M, N), np.float32)
    k_loop_matmul_kernel[(1,)](a, b, fused, spy, K, SPY=False, ACC_FIRST=acc_first, BM=M, BN=N, BK=32)
    k_loop_matmul_kernel[(1,)](a, b, plain, spy, K, SPY=True, ACC_FIRST=acc_first, BM=M, BN=N, BK=32)
    np.testing.assert_array_equal(fused, plain)
    np.testing.assert_allclose(fused, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_fused_dot_add_int8():
    M, N, K = 16, 32, 64
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    c = poisoned((M, N), np.int32)
    k_loop_matmul_kernel[(1,)](a, b, c, np.zeros((M, N), np.int32), K, SPY=False, ACC_FIRST=True,
                               BM=M, BN=N, BK=16)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


# --- loop-carried tiles updated in place, or through a temporary when they must be ----------
@tessera.kernel
def carried_update_kernel(x_ptr, y_ptr, out_ptr, n_iter, MODE: tl.constexpr, B: tl.constexpr):
    r = tl.arange(0, B)
    offs = r[:, None] * B + r[None, :]
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    for _ in range(n_iter):
        if MODE == 0:    # each element from itself: in place
            x = x * 0.5 + y
        elif MODE == 1:  # reads the transpose: other elements of its own buffer
            x = x + tl.trans(x)
        else:            # swaps: each reads the other's buffer
            x, y = y, x + y
    tl.store(out_ptr + offs, x)
    tl.store(y_ptr + offs, y)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_carried_tiles_in_place_or_not(mode):
    B, n_iter = 16, 3
    rng = np.random.default_rng(mode)
    x = rng.integers(-8, 8, (B, B)).astype(np.float32)
    y = rng.integers(-8, 8, (B, B)).astype(np.float32)
    out, y_out = poisoned((B, B), np.float32), y.copy()
    carried_update_kernel[(1,)](x, y_out, out, n_iter, MODE=mode, B=B)
    ex, ey = x.copy(), y.copy()
    for _ in range(n_iter):
        if mode == 0:
            ex = ex * np.float32(0.5) + ey
        elif mode == 1:
            ex = ex + ex.T
        else:
            ex, ey = ey, ex + ey
    np.testing.assert_array_equal(out, ex)
    np.testing.assert_array_equal(y_out, ey)
