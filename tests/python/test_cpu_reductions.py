"""Compiled CPU path, reductions and scans against numpy: sum/max/min/argmax/argmin (with
ties)/xor_sum/tl.reduce with user combine functions over axis 0, 1 and None of 2-D tiles,
keep_dims, result types (Triton's widening rules), masked odd-size rows, softmax;
cumsum/cumprod/associative_scan (also tuples), forward and reverse."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import poisoned, run_interpreted


# --- reduction functions passed as FN (module level: part of the kernel's key) -------------------
def r_sum(x, axis, keep): return tl.sum(x, axis=axis, keep_dims=keep)
def r_max(x, axis, keep): return tl.max(x, axis=axis, keep_dims=keep)
def r_min(x, axis, keep): return tl.min(x, axis=axis, keep_dims=keep)
def r_argmax(x, axis, keep): return tl.argmax(x, axis=axis, keep_dims=keep)
def r_argmin(x, axis, keep): return tl.argmin(x, axis=axis, keep_dims=keep)
def r_argmax_right(x, axis, keep): return tl.argmax(x, axis=axis, tie_break_left=False, keep_dims=keep)
def r_xor(x, axis, keep): return tl.xor_sum(x, axis=axis, keep_dims=keep)
def r_method_sum(x, axis, keep): return x.sum(axis=axis, keep_dims=keep)
def r_sum_f32(x, axis, keep): return tl.sum(x, axis=axis, keep_dims=keep, dtype=tl.float32)


def combine_or(a, b):
    return a | b


def combine_max_abs(a, b):
    return tl.where(tl.abs(a) > tl.abs(b), a, b)


def r_user_or(x, axis, keep): return tl.reduce(x, axis, combine_or, keep_dims=keep)
def r_user_max_abs(x, axis, keep): return tl.reduce(x, axis, combine_max_abs, keep_dims=keep)


@tessera.kernel
def reduce2d_kernel(x_ptr, out_ptr, FN: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr,
                    OUT_T: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rm[:, None] * BN + rn[None, :])
    r = FN(x, AXIS, KEEP)
    # (`r.dtype == OUT_T` and `AXIS is None` misbehave in the interpreter: xfail tests below)
    tl.static_assert(OUT_T == r.dtype)
    if AXIS == None:  # noqa: E711
        if KEEP:
            tl.static_assert(r.shape == (1, 1))
            tl.store(out_ptr + tl.arange(0, 1)[:, None], r)
        else:
            tl.store(out_ptr, r)
    elif AXIS == 0:
        if KEEP:
            tl.static_assert(r.shape == (1, BN))
            tl.store(out_ptr + rn[None, :], r)
        else:
            tl.store(out_ptr + rn, r)
    else:
        if KEEP:
            tl.static_assert(r.shape == (BM, 1))
            tl.store(out_ptr + rm[:, None], r)
        else:
            tl.store(out_ptr + rm, r)


def run_reduce(fn, x, axis, keep, out_t, out_np):
    BM, BN = x.shape
    n_out = {None: 1, 0: BN, 1: BM}[axis]
    out = poisoned(n_out, out_np)
    reduce2d_kernel[(1,)](x, out, FN=fn, AXIS=axis, KEEP=keep, OUT_T=out_t, BM=BM, BN=BN)
    return out


def _data(dtype, shape, seed, ties=False):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if ties:
        return rng.integers(0, 5, shape).astype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)


def _first_index(x, axis, fn):
    """argmax/argmin with the smallest index among ties (numpy's rule too)."""
    if axis is None:
        return np.array([fn(x.reshape(-1))])
    return fn(x, axis=axis)


def _last_index(x, axis, fn):
    if axis is None:
        flat = x.reshape(-1)
        return np.array([flat.size - 1 - fn(flat[::-1])])
    flipped = np.flip(x, axis=axis)
    return x.shape[axis] - 1 - fn(flipped, axis=axis)


AXES = [0, 1, None]
SHAPES = [(16, 32), (1, 8), (8, 1)]
# (axis, keep_dims) pairs; axis=None with keep_dims has its own (xfail) test below
AXIS_KEEP = [(0, False), (0, True), (1, False), (1, True), (None, False)]


@pytest.mark.parametrize("axis,keep", AXIS_KEEP)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint8, np.float64])
def test_sum(dtype, axis, keep):
    x = _data(dtype, (16, 32), 1)
    dt = np.dtype(dtype)
    out_np = {np.dtype(np.int8): np.int32, np.dtype(np.uint8): np.uint32}.get(dt, dt)
    out = run_reduce(r_sum, x, axis, keep, tessera.language.dtypes.NUMPY_TO_DTYPE[np.dtype(out_np).name],
                     out_np)
    if dt.kind == "f":
        want = x.astype(np.float64).sum(axis=axis)
        np.testing.assert_allclose(out, np.ravel(want), rtol=1e-5 if dt == np.float32 else 1e-12,
                                   atol=1e-3 if dt == np.float32 else 1e-10)
    else:
        with np.errstate(over="ignore"):
            want = x.astype(out_np).sum(axis=axis, dtype=out_np)   # wrapping accumulation
        np.testing.assert_array_equal(out, np.ravel(want))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", AXES)
def test_sum_degenerate_shapes(shape, axis):
    x = _data(np.int32, shape, 2, ties=True)
    out = run_reduce(r_method_sum, x, axis, False, tl.int32, np.int32)
    np.testing.assert_array_equal(out, np.ravel(x.sum(axis=axis)))


def test_sum_fp16_accumulates_in_fp16_unless_dtype_given():
    x = np.full((16, 32), 1.0, np.float16) + np.float16(0.0009765625)   # 1 + 2^-10
    out = run_reduce(r_sum, x, None, False, tl.float16, np.float16)
    # an f16 accumulator cannot hold 512 * (1 + 2^-10) exactly; it is within a few ulp
    assert abs(float(out[0]) - 512.5) <= 2.0
    out32 = run_reduce(r_sum_f32, x, None, False, tl.float32, np.float32)
    np.testing.assert_allclose(out32, [512.5], rtol=1e-6)


@pytest.mark.parametrize("fn,ref", [(r_max, np.max), (r_min, np.min)])
@pytest.mark.parametrize("axis,keep", AXIS_KEEP)
def test_max_min_float_and_int(fn, ref, axis, keep):
    x = _data(np.float32, (16, 32), 3)
    np.testing.assert_array_equal(run_reduce(fn, x, axis, keep, tl.float32, np.float32),
                                  np.ravel(ref(x, axis=axis)))
    xi = _data(np.int64, (16, 32), 4)
    np.testing.assert_array_equal(run_reduce(fn, xi, axis, keep, tl.int64, np.int64),
                                  np.ravel(ref(xi, axis=axis)))


@pytest.mark.parametrize("dtype,out_t,out_np", [(np.int8, tl.int32, np.int32), (np.uint16, tl.int32, np.int32),
                                                (np.float16, tl.float32, np.float32),
                                                (np.uint32, tl.uint32, np.uint32)])
def test_max_widens_narrow_types(dtype, out_t, out_np):
    x = _data(dtype, (16, 32), 5)
    np.testing.assert_array_equal(run_reduce(r_max, x, 1, False, out_t, out_np),
                                  x.max(axis=1).astype(out_np))
    np.testing.assert_array_equal(run_reduce(r_min, x, 0, False, out_t, out_np),
                                  x.min(axis=0).astype(out_np))


def test_max_min_ignore_nan():
    x = _data(np.float32, (16, 32), 6)
    x[::3, ::2] = np.nan
    x[5, :] = np.nan                                       # an all-NaN row
    np.testing.assert_array_equal(run_reduce(r_max, x, 1, False, tl.float32, np.float32),
                                  np.fmax.reduce(x, axis=1))
    np.testing.assert_array_equal(run_reduce(r_min, x, 0, False, tl.float32, np.float32),
                                  np.fmin.reduce(x, axis=0))


@pytest.mark.parametrize("axis,keep", AXIS_KEEP)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8])
def test_argmax_argmin_ties_go_left(dtype, axis, keep):
    x = _data(dtype, (16, 32), 7, ties=True)               # values 0..4: many ties
    np.testing.assert_array_equal(run_reduce(r_argmax, x, axis, keep, tl.int32, np.int32),
                                  np.ravel(_first_index(x, axis, np.argmax)))
    np.testing.assert_array_equal(run_reduce(r_argmin, x, axis, keep, tl.int32, np.int32),
                                  np.ravel(_first_index(x, axis, np.argmin)))


@pytest.mark.parametrize("axis", AXES)
def test_argmax_tie_break_right_picks_some_maximum(axis):
    # tie_break_left=False leaves the choice among tied maxima open (Triton's combine
    # then keeps whichever operand comes second): the index must point at a maximum.
    x = _data(np.float32, (16, 32), 8, ties=True)
    idx = run_reduce(r_argmax_right, x, axis, False, tl.int32, np.int32)
    if axis is None:
        assert x.reshape(-1)[idx[0]] == x.max()
    elif axis == 0:
        np.testing.assert_array_equal(x[idx, np.arange(32)], x.max(axis=0))
    else:
        np.testing.assert_array_equal(x[np.arange(16), idx], x.max(axis=1))


@pytest.mark.parametrize("fn", [r_sum, r_max, r_argmin, r_xor, r_user_or], ids=lambda f: f.__name__)
def test_keep_dims_axis_none_keeps_the_rank(fn):
    x = _data(np.int32, (16, 32), 21) & 0xFF
    out = run_reduce(fn, x, None, True, tl.int32, np.int32)
    assert out.size == 1


@tessera.kernel
def dtype_eq_constexpr_kernel(x_ptr, T: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, 2))
    tl.static_assert(x.dtype == T)


@tessera.kernel
def constexpr_is_none_kernel(out_ptr, AXIS: tl.constexpr):
    if AXIS is None:
        tl.store(out_ptr, 1)
    else:
        tl.store(out_ptr, 2)


def test_constexpr_is_none_in_interpreter():
    out = np.zeros(1, np.int32)
    constexpr_is_none_kernel[(1,)](out, AXIS=None)
    assert out[0] == 1                                         # compiled: fine
    out[0] = 0
    run_interpreted(constexpr_is_none_kernel, (1,), out, AXIS=None)
    assert out[0] == 1


def test_dtype_compares_equal_to_constexpr_dtype_in_interpreter():
    x = np.zeros(2, np.float32)
    dtype_eq_constexpr_kernel[(1,)](x, T=tl.float32)          # compiled: fine
    run_interpreted(dtype_eq_constexpr_kernel, (1,), x, T=tl.float32)


@tessera.kernel
def max_with_indices_kernel(x_ptr, v_ptr, i_ptr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rm[:, None] * BN + rn[None, :])
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.static_assert(v.dtype == x.dtype)                 # no widening with indices
    tl.store(v_ptr + rm, v)
    tl.store(i_ptr + rm, i)


def test_max_return_indices():
    x = _data(np.int8, (16, 32), 9, ties=True)
    v, i = poisoned(16, np.int8), poisoned(16, np.int32)
    max_with_indices_kernel[(1,)](x, v, i, BM=16, BN=32)
    np.testing.assert_array_equal(v, x.max(axis=1))
    np.testing.assert_array_equal(i, x.argmax(axis=1))


@pytest.mark.parametrize("axis,keep", AXIS_KEEP)
@pytest.mark.parametrize("dtype", [np.int32, np.uint64, np.int8])
def test_xor_sum(dtype, axis, keep):
    x = _data(dtype, (16, 32), 10)
    want = np.bitwise_xor.reduce(x.reshape(-1) if axis is None else x, axis=0 if axis is None else axis)
    t = tessera.language.dtypes.NUMPY_TO_DTYPE[np.dtype(dtype).name]
    np.testing.assert_array_equal(run_reduce(r_xor, x, axis, keep, t, dtype), np.ravel(want))


@pytest.mark.parametrize("axis", AXES)
def test_reduce_with_user_combine_fn(axis):
    xi = _data(np.int32, (16, 32), 11) & 0x0F0F0F0F
    want = np.bitwise_or.reduce(xi.reshape(-1) if axis is None else xi, axis=0 if axis is None else axis)
    np.testing.assert_array_equal(run_reduce(r_user_or, xi, axis, False, tl.int32, np.int32), np.ravel(want))
    xf = _data(np.float32, (16, 32), 12)
    flat = xf.reshape(-1, 1) if axis is None else (xf if axis == 0 else xf.T)
    want = flat[np.argmax(np.abs(flat), axis=0), np.arange(flat.shape[1])]
    np.testing.assert_array_equal(run_reduce(r_user_max_abs, xf, axis, axis is not None, tl.float32,
                                             np.float32),
                                  np.ravel(want))


def combine_argmax_tuple(v1, i1, v2, i2):
    better = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(better, v1, v2), tl.where(better, i1, i2)


@tessera.kernel
def tuple_reduce_kernel(x_ptr, v_ptr, i_ptr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rm[:, None] * BN + rn[None, :])
    idx = tl.broadcast_to(rn[None, :], (BM, BN))
    v, i = tl.reduce((x, idx), 1, combine_argmax_tuple)
    tl.store(v_ptr + rm, v)
    tl.store(i_ptr + rm, i)


def test_reduce_tuple_operands():
    x = _data(np.float32, (8, 64), 13, ties=True)
    v, i = poisoned(8, np.float32), poisoned(8, np.int32)
    tuple_reduce_kernel[(1,)](x, v, i, BM=8, BN=64)
    np.testing.assert_array_equal(v, x.max(axis=1))
    np.testing.assert_array_equal(i, x.argmax(axis=1))


@tessera.kernel  # as Triton's @triton.jit combine functions: a kernel works as combine_fn too
def combine_add_pair_kernel(a1, b1, a2, b2):
    return a1 + a2, b1 + b2


@tessera.kernel
def pair_sum_kernel(x_ptr, s_ptr, t_ptr, BN: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BN))
    s, t = tl.reduce((x, x * x), 0, combine_add_pair_kernel)
    tl.store(s_ptr, s)
    tl.store(t_ptr, t)


def test_reduce_with_a_kernel_as_combine_fn():
    x = np.arange(64, dtype=np.float32)
    s, t = poisoned(1, np.float32), poisoned(1, np.float32)
    pair_sum_kernel[(1,)](x, s, t, BN=64)
    assert s[0] == x.sum() and t[0] == (x * x).sum()


# --- masked rows of odd length -------------------------------------------------------------------
@tessera.kernel
def row_stats_kernel(x_ptr, sum_ptr, max_ptr, argmin_ptr, soft_ptr, M, N, stride,
                     BN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BN)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(sum_ptr + row, tl.sum(x, axis=0))
    xm = tl.where(mask, x, -float("inf"))
    m = tl.max(xm, axis=0)
    tl.store(max_ptr + row, m)
    tl.store(argmin_ptr + row, tl.argmin(tl.where(mask, x, float("inf")), axis=0))
    e = tl.exp(xm - m)
    tl.store(soft_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@pytest.mark.parametrize("M,N", [(1, 1), (17, 100), (3, 1000), (5, 4097)])
def test_masked_row_reductions_and_softmax(M, N):
    x = _data(np.float32, (M, N), 14)
    BN = tessera.next_power_of_2(N)
    s, mx, am = poisoned(M, np.float32), poisoned(M, np.float32), poisoned(M, np.int32)
    soft = poisoned((M, N), np.float32)
    row_stats_kernel[(M,)](x, s, mx, am, soft, M, N, N, BN=BN)
    np.testing.assert_allclose(s, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(mx, x.max(axis=1))
    np.testing.assert_array_equal(am, x.argmin(axis=1))
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@tessera.kernel
def softmax_builtin_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.softmax(tl.load(x_ptr + offs)))


def test_tl_softmax():
    x = _data(np.float32, 64, 15)
    out = poisoned(64, np.float32)
    softmax_builtin_kernel[(1,)](x, out, BLOCK=64)
    e = np.exp(x.astype(np.float64) - x.max())
    np.testing.assert_allclose(out, e / e.sum(), rtol=1e-5, atol=1e-8)


# --- scans ---------------------------------------------------------------------------------------
def s_cumsum(x, axis, rev): return tl.cumsum(x, axis=axis, reverse=rev)
def s_cumprod(x, axis, rev): return tl.cumprod(x, axis=axis, reverse=rev)
def s_method_cumsum(x, axis, rev): return x.cumsum(axis=axis, reverse=rev)


def combine_max(a, b):
    return tl.maximum(a, b)


def s_cummax(x, axis, rev): return tl.associative_scan(x, axis, combine_max, reverse=rev)


@tessera.kernel
def scan2d_kernel(x_ptr, out_ptr, FN: tl.constexpr, AXIS: tl.constexpr, REV: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr):
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    r = FN(tl.load(x_ptr + offs), AXIS, REV)
    tl.static_assert(r.shape == (BM, BN))
    tl.store(out_ptr + offs, r)


def _np_scan(ufunc, x, axis, rev):
    if rev:
        return np.flip(ufunc.accumulate(np.flip(x, axis=axis), axis=axis), axis=axis)
    return ufunc.accumulate(x, axis=axis)


@pytest.mark.parametrize("rev", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("fn,ufunc", [(s_cumsum, np.add), (s_cummax, np.maximum), (s_cumprod, np.multiply)],
                         ids=["cumsum", "cummax", "cumprod"])
def test_scans_int32(fn, ufunc, axis, rev):
    x = _data(np.int32, (8, 32), 16, ties=True) - 2        # -2..2: products stay small-ish / wrap
    out = poisoned((8, 32), np.int32)
    scan2d_kernel[(1,)](x, out, FN=fn, AXIS=axis, REV=rev, BM=8, BN=32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, _np_scan(ufunc, x, axis, rev).astype(np.int32))


@pytest.mark.parametrize("rev", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum_float(axis, rev):
    x = _data(np.float32, (16, 64), 17)
    out = poisoned((16, 64), np.float32)
    scan2d_kernel[(1,)](x, out, FN=s_method_cumsum, AXIS=axis, REV=rev, BM=16, BN=64)
    np.testing.assert_allclose(out, _np_scan(np.add, x.astype(np.float64), axis, rev), rtol=1e-5, atol=1e-3)


@tessera.kernel
def cumsum_1d_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    c = tl.cumsum(x, 0)
    tl.static_assert(c.dtype == tl.int32)                  # int8 accumulates in int32
    tl.store(out_ptr + offs, c, mask=m)
    r = tl.cumsum(x, 0, reverse=True)
    tl.store(out_ptr + BLOCK + offs, r, mask=m)


@pytest.mark.parametrize("n", [1, 17, 1000])
def test_cumsum_1d_masked_int8_widens(n):
    block = tessera.next_power_of_2(n)
    x = _data(np.int8, n, 18)
    out = poisoned(2 * block, np.int32)
    cumsum_1d_kernel[(1,)](x, out, n, BLOCK=block)
    np.testing.assert_array_equal(out[:n], np.cumsum(x.astype(np.int32)))
    np.testing.assert_array_equal(out[block:block + n], np.cumsum(x[::-1].astype(np.int32))[::-1])


def combine_linear_recurrence(a1, b1, a2, b2):
    # composition of x -> a*x + b maps: associative, not commutative
    return a1 * a2, b1 * a2 + b2


@tessera.kernel
def tuple_scan_kernel(a_ptr, b_ptr, out_ptr, REV: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    _, h = tl.associative_scan((a, b), 0, combine_linear_recurrence, reverse=REV)
    tl.store(out_ptr + offs, h)


@pytest.mark.parametrize("rev", [False, True])
def test_associative_scan_tuple_non_commutative(rev):
    rng = np.random.default_rng(19)
    n = 64
    a = rng.integers(-3, 4, n).astype(np.int64)
    b = rng.integers(-5, 6, n).astype(np.int64)
    out = poisoned(n, np.int64)
    tuple_scan_kernel[(1,)](a, b, out, REV=rev, BLOCK=n)
    # h_i = a_i * h_{i-1} + b_i, h_{-1} = 0 (reverse: from the end)
    want, h = [], 0
    order = range(n - 1, -1, -1) if rev else range(n)
    for i in order:
        h = a[i] * h + b[i]
        want.append(h)
    if rev:
        want = want[::-1]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, np.array(want, dtype=object).astype(np.int64))


def test_reductions_agree_with_interpreter():
    x = _data(np.int32, (16, 32), 20)
    for fn, axis in [(r_sum, 0), (r_max, None), (r_argmin, 1), (r_xor, 0), (r_user_or, 1)]:
        out_t = tl.int32
        o_c = poisoned({None: 1, 0: 32, 1: 16}[axis], np.int32)
        o_i = o_c.copy()
        reduce2d_kernel[(1,)](x, o_c, FN=fn, AXIS=axis, KEEP=False, OUT_T=out_t, BM=16, BN=32)
        run_interpreted(reduce2d_kernel, (1,), x, o_i, FN=fn, AXIS=axis, KEEP=False, OUT_T=out_t,
                        BM=16, BN=32)
        np.testing.assert_array_equal(o_c, o_i, err_msg=fn.__name__)


# --- rank 3 and large tiles --------------------------------------------------------------------------
def r3_sum(x, axis): return tl.sum(x, axis=axis)
def r3_max(x, axis): return tl.max(x, axis=axis)
def r3_argmin(x, axis): return tl.argmin(x, axis=axis)
def r3_cumsum(x, axis): return tl.cumsum(x, axis=axis)
def r3_cumsum_rev(x, axis): return tl.cumsum(x, axis=axis, reverse=True)


@tessera.kernel
def reduce3d_kernel(x_ptr, out_ptr, FN: tl.constexpr, AXIS: tl.constexpr, S0: tl.constexpr,
                    S1: tl.constexpr, S2: tl.constexpr):
    i = tl.arange(0, S0)[:, None, None]
    j = tl.arange(0, S1)[None, :, None]
    k = tl.arange(0, S2)[None, None, :]
    r = FN(tl.load(x_ptr + (i * S1 + j) * S2 + k), AXIS)
    if len(r.shape) == 3:
        tl.store(out_ptr + (i * S1 + j) * S2 + k, r)
    else:
        a = tl.arange(0, r.shape[0])[:, None]
        b = tl.arange(0, r.shape[1])[None, :]
        tl.store(out_ptr + a * r.shape[1] + b, r)


R3_CASES = [(r3_sum, lambda x, a: x.sum(axis=a)), (r3_max, lambda x, a: x.max(axis=a)),
            (r3_argmin, lambda x, a: x.argmin(axis=a)), (r3_cumsum, lambda x, a: np.cumsum(x, axis=a)),
            (r3_cumsum_rev, lambda x, a: np.flip(np.cumsum(np.flip(x, a), axis=a), a))]


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("fn,ref", R3_CASES, ids=[c[0].__name__ for c in R3_CASES])
def test_rank3_reductions_and_scans(fn, ref, axis):
    x = _data(np.int32, (4, 8, 32), 22, ties=True) - 2
    out = poisoned(x.size, np.int32)
    reduce3d_kernel[(1,)](x, out, FN=fn, AXIS=axis, S0=4, S1=8, S2=32)
    want = np.ravel(ref(x, axis)).astype(np.int32)
    np.testing.assert_array_equal(out[:want.size], want)


@pytest.mark.parametrize("shape,axis", [((4, 2048), 1), ((1024, 8), 0), ((2, 4096), 1), ((512, 64), 0)])
@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.int16])
def test_large_tile_reductions(shape, axis, dtype):
    x = _data(dtype, shape, 23, ties=True) - 2
    out_np = np.int32 if dtype == np.int16 else dtype
    t = tessera.language.dtypes.NUMPY_TO_DTYPE[np.dtype(out_np).name]
    out = run_reduce(r_sum, x.astype(dtype), axis, False, t, out_np)
    np.testing.assert_array_equal(out, x.astype(np.int64).sum(axis=axis).astype(out_np))
    mx = run_reduce(r_argmax, x.astype(dtype), axis, False, tl.int32, np.int32)
    np.testing.assert_array_equal(mx, x.argmax(axis=axis))
