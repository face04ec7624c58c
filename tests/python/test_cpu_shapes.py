"""Compiled CPU path, shape ops against numpy: trans/.T/permute, reshape/view/ravel,
broadcast_to/broadcast, expand_dims, join/split, and chains mixing them with
elementwise ops and reductions (layouts of permuted tiles), for several dtypes."""
import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import poisoned, run_interpreted


def store_any(ptr, t):
    """Stores a rank 1-3 tile row-major at ptr (an inlined helper)."""
    if len(t.shape) == 1:
        tl.store(ptr + tl.arange(0, t.shape[0]), t)
    elif len(t.shape) == 2:
        tl.store(ptr + tl.arange(0, t.shape[0])[:, None] * t.shape[1] + tl.arange(0, t.shape[1])[None, :], t)
    else:
        i = tl.arange(0, t.shape[0])[:, None, None]
        j = tl.arange(0, t.shape[1])[None, :, None]
        k = tl.arange(0, t.shape[2])[None, None, :]
        tl.store(ptr + (i * t.shape[1] + j) * t.shape[2] + k, t)


@tessera.kernel
def shape3d_kernel(x_ptr, out_ptr, FN: tl.constexpr, S0: tl.constexpr, S1: tl.constexpr,
                   S2: tl.constexpr):
    i = tl.arange(0, S0)[:, None, None]
    j = tl.arange(0, S1)[None, :, None]
    k = tl.arange(0, S2)[None, None, :]
    x = tl.load(x_ptr + (i * S1 + j) * S2 + k)
    store_any(out_ptr, FN(x))


@tessera.kernel
def shape2d_kernel(x_ptr, out_ptr, FN: tl.constexpr, S0: tl.constexpr, S1: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, S0)[:, None] * S1 + tl.arange(0, S1)[None, :])
    store_any(out_ptr, FN(x))


def run3(fn, x):
    out = poisoned(x.size * 4, x.dtype)             # room for broadcasts
    shape3d_kernel[(1,)](x, out, FN=fn, S0=x.shape[0], S1=x.shape[1], S2=x.shape[2])
    return out


def run2(fn, x, out_size=None):
    out = poisoned(out_size or x.size * 4, x.dtype)
    shape2d_kernel[(1,)](x, out, FN=fn, S0=x.shape[0], S1=x.shape[1])
    return out


def check(out, want):
    want = np.asarray(want)
    np.testing.assert_array_equal(out[:want.size], want.reshape(-1))


# --- functions passed as FN --------------------------------------------------------------------
def f_trans(x): return tl.trans(x)
def f_T(x): return x.T
def f_trans_method(x): return x.trans()
def f_trans3_201(x): return tl.trans(x, 2, 0, 1)
def f_trans3_tuple(x): return tl.trans(x, (1, 0, 2))
def f_permute_210(x): return tl.permute(x, (2, 1, 0))
def f_permute_varargs(x): return tl.permute(x, 1, 2, 0)
def f_permute_method(x): return x.permute(0, 2, 1)
def f_reshape_merge01(x): return tl.reshape(x, (x.shape[0] * x.shape[1], x.shape[2]))
def f_reshape_varargs(x): return tl.reshape(x, x.shape[0], x.shape[1] * x.shape[2])
def f_reshape_1d(x): return x.reshape(x.numel)
def f_view(x): return tl.view(x, (x.shape[2], x.shape[0] * x.shape[1]))
def f_ravel(x): return tl.ravel(x)
def f_reshape_split(x): return tl.reshape(x, (x.shape[0], 2, x.shape[1] // 2))
def f_expand0(x): return tl.expand_dims(x, 0)
def f_expand_last(x): return tl.expand_dims(x, -1)
def f_expand_multi(x):
    r = tl.expand_dims(x, (0, 2))
    tl.static_assert(r.shape == (1, x.shape[0], 1, x.shape[1]))
    return tl.reshape(r, (x.shape[0], 1, x.shape[1]))
def f_expand_method(x): return x.expand_dims(1)
def f_broadcast_to(x): return tl.broadcast_to(x[:, None, :], (x.shape[0], 4, x.shape[1]))
def f_broadcast_to_method(x): return x[None, :, :].broadcast_to(2, x.shape[0], x.shape[1])
def f_broadcast_pair(x):
    a, b = tl.broadcast(tl.sum(x, axis=1, keep_dims=True), tl.max(x, axis=0, keep_dims=True))
    tl.static_assert(a.shape == x.shape)
    return a * 1000 + b
def f_join(x): return tl.join(x, x + 100)
def f_split(x):
    a, b = tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))
    return a * 1000 + b
def f_join_split_roundtrip(x):
    a, b = tl.split(tl.join(x, x * 2))
    return a + b
def f_trans_then_add(x): return tl.trans(x) + tl.trans(x) * 10
def f_trans_reshape(x): return tl.reshape(tl.trans(x), (x.numel,))
def f_trans_sum(x): return tl.sum(tl.trans(x), axis=1)
def f_permute_sum(x): return tl.sum(tl.permute(x, (2, 0, 1)), axis=0)
def f_mix_layouts(x): return x + tl.trans(tl.trans(x)) * 2 + tl.reshape(tl.ravel(x), x.shape)


def _arr(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-100, 100, shape).astype(dtype)


CASES_2D = [
    (f_trans, lambda x: x.T), (f_T, lambda x: x.T), (f_trans_method, lambda x: x.T),
    (f_ravel, np.ravel), (f_reshape_split, lambda x: x.reshape(x.shape[0], 2, -1)),
    (f_expand0, lambda x: x[None]), (f_expand_last, lambda x: x[..., None]),
    (f_expand_multi, lambda x: x[None, :, None, :]), (f_expand_method, lambda x: x[:, None]),
    (f_broadcast_to, lambda x: np.broadcast_to(x[:, None, :], (x.shape[0], 4, x.shape[1]))),
    (f_broadcast_to_method, lambda x: np.broadcast_to(x[None], (2,) + x.shape)),
    (f_broadcast_pair, lambda x: x.sum(axis=1, keepdims=True) * 1000 + x.max(axis=0, keepdims=True)),
    (f_join, lambda x: np.stack([x, x + 100], axis=-1)),
    (f_split, lambda x: x.reshape(x.shape[0], -1, 2)[..., 0] * 1000 + x.reshape(x.shape[0], -1, 2)[..., 1]),
    (f_join_split_roundtrip, lambda x: x * 3),
    (f_trans_then_add, lambda x: x.T * 11), (f_trans_reshape, lambda x: x.T.ravel()),
    (f_trans_sum, lambda x: x.T.sum(axis=1)), (f_mix_layouts, lambda x: x * 4),
]


@pytest.mark.parametrize("fn,ref", CASES_2D, ids=[c[0].__name__ for c in CASES_2D])
@pytest.mark.parametrize("shape", [(8, 16), (32, 4)])
def test_shape_ops_2d(fn, ref, shape):
    x = _arr(shape, np.int32, 1)
    expand = fn in (f_broadcast_to, f_broadcast_to_method, f_join)
    with np.errstate(over="ignore"):
        want = ref(x)
    out = run2(fn, x, out_size=max(want.size, x.size) if not expand else None)
    check(out, want)


CASES_3D = [
    (f_trans3_201, lambda x: np.transpose(x, (2, 0, 1))), (f_trans3_tuple, lambda x: np.transpose(x, (1, 0, 2))),
    (f_permute_210, lambda x: np.transpose(x, (2, 1, 0))), (f_permute_varargs, lambda x: np.transpose(x, (1, 2, 0))),
    (f_permute_method, lambda x: np.transpose(x, (0, 2, 1))),
    (f_reshape_merge01, lambda x: x.reshape(-1, x.shape[2])),
    (f_reshape_varargs, lambda x: x.reshape(x.shape[0], -1)), (f_reshape_1d, np.ravel),
    (f_view, lambda x: x.reshape(x.shape[2], -1)), (f_ravel, np.ravel),
    (f_permute_sum, lambda x: np.transpose(x, (2, 0, 1)).sum(axis=0)),
]


# every op on int32; a representative subset on the other dtypes
CASES_3D_DTYPES = [(fn, ref, np.int32) for fn, ref in CASES_3D] + [
    (fn, ref, dt) for fn, ref in CASES_3D if fn in (f_trans3_201, f_permute_210, f_reshape_merge01, f_permute_sum)
    for dt in (np.float16, np.int8, np.float64)]


@pytest.mark.parametrize("fn,ref,dtype", CASES_3D_DTYPES,
                         ids=[f"{c[0].__name__}-{np.dtype(c[2]).name}" for c in CASES_3D_DTYPES])
def test_shape_ops_3d(fn, ref, dtype):
    x = _arr((2, 8, 4), dtype, 2)
    out = run3(fn, x)
    with np.errstate(over="ignore"):
        want = ref(x)
    check(out, want.astype(dtype))                  # int8 sums widen to int32, stored back wrapping


@pytest.mark.parametrize("fn", [f_permute_210, f_trans3_201])
def test_permute_agrees_with_interpreter(fn):
    x = _arr((4, 2, 8), np.float32, 3)
    o_c = poisoned(64, np.float32)
    o_i = o_c.copy()
    shape3d_kernel[(1,)](x, o_c, FN=fn, S0=4, S1=2, S2=8)
    run_interpreted(shape3d_kernel, (1,), x, o_i, FN=fn, S0=4, S1=2, S2=8)
    np.testing.assert_array_equal(o_c, o_i)


@tessera.kernel
def interleave_kernel(a_ptr, b_ptr, out_ptr, a_out, b_out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    j = tl.join(a, b)                                        # (BLOCK, 2)
    tl.static_assert(j.shape == (BLOCK, 2))
    flat = tl.reshape(j, (2 * BLOCK,))
    tl.store(out_ptr + tl.arange(0, 2 * BLOCK), flat)
    # and back: deinterleave the stored buffer
    back = tl.load(out_ptr + tl.arange(0, 2 * BLOCK))
    x, y = tl.split(tl.reshape(back, (BLOCK, 2)))
    tl.store(a_out + offs, x)
    tl.store(b_out + offs, y)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64, np.uint16])
def test_join_interleaves_and_split_deinterleaves(dtype):
    a = _arr(64, dtype, 4)
    b = _arr(64, dtype, 5)
    out, ao, bo = poisoned(128, dtype), poisoned(64, dtype), poisoned(64, dtype)
    interleave_kernel[(1,)](a, b, out, ao, bo, BLOCK=64)
    np.testing.assert_array_equal(out[0::2], a)
    np.testing.assert_array_equal(out[1::2], b)
    np.testing.assert_array_equal(ao, a)
    np.testing.assert_array_equal(bo, b)


@tessera.kernel
def transpose_tiled_kernel(src, dst, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    m = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(src + rm[:, None] * N + rn[None, :], mask=m)
    tl.store(dst + rn[:, None] * M + rm[None, :], tl.trans(tile), mask=tl.trans(m))


@pytest.mark.parametrize("M,N", [(1, 1), (17, 33), (100, 64), (3, 1000)])
def test_tiled_matrix_transpose(M, N):
    src = _arr((M, N), np.float32, 6)
    dst = poisoned((N, M), np.float32)
    transpose_tiled_kernel[(tessera.cdiv(M, 16), tessera.cdiv(N, 32))](src, dst, M, N, BM=16, BN=32)
    np.testing.assert_array_equal(dst, src.T)
