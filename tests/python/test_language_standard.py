"""tl.interleave, cat, flip, sort, topk, histogram and swizzle2d (triton.language.standard's):
compiled on the CPU and run by the interpreter against numpy, on every dtype with NaN,
infinities and ties; assembled by ptxas for sm_90a and sm_80; run on a GPU when there is
one (outputs poisoned); and the errors for wrong arguments."""
import importlib

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble

J = importlib.import_module("tessera.jit")  # the module: tessera.jit is also the decorator



@tessera.kernel
def sort_kernel(x_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr, DIM: tl.constexpr, DESCENDING: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(y_ptr + offs, tl.sort(tl.load(x_ptr + offs), dim=DIM, descending=DESCENDING))


@tessera.kernel
def sort_1d_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs).sort())


@tessera.kernel
def topk_kernel(x_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr, K: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(y_ptr + tl.arange(0, R)[:, None] * K + tl.arange(0, K)[None, :], tl.load(x_ptr + offs).topk(K))


@tessera.kernel
def flip_kernel(x_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr, DIM: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    tl.store(y_ptr + offs, tl.flip(tl.load(x_ptr + offs), DIM))


@tessera.kernel
def interleave_cat_kernel(a_ptr, b_ptr, inter_ptr, cat_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    a, b = tl.load(a_ptr + offs), tl.load(b_ptr + offs)
    tl.store(inter_ptr + tl.arange(0, R)[:, None] * (2 * C) + tl.arange(0, 2 * C)[None, :], tl.interleave(a, b))
    tl.store(cat_ptr + tl.arange(0, 2 * R)[:, None] * C + tl.arange(0, C)[None, :], tl.cat(a, b, can_reorder=True))


@tessera.kernel
def histogram_kernel(x_ptr, h_ptr, n, N: tl.constexpr, BINS: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(h_ptr + tl.arange(0, BINS), tl.histogram(x, BINS, mask=offs < n))


@tessera.kernel
def swizzle_kernel(out_ptr, size_i, size_j, size_g, BLOCK: tl.constexpr):
    t = tl.arange(0, BLOCK)
    i, j = tl.swizzle2d(t // size_j, t % size_j, size_i, size_j, size_g)
    m = t < size_i * size_j
    tl.store(out_ptr + 2 * t, i, mask=m)
    tl.store(out_ptr + 2 * t + 1, j, mask=m)


def _values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        x = rng.standard_normal(shape).astype(dtype)
        x.flat[::7] = x.flat[::11][: x.flat[::7].size]            # ties
        x.flat[3], x.flat[-2], x.flat[5] = np.nan, np.inf, -np.inf
        return x
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)


def _run(kernel, *args, **kw):
    kernel[(1,)](*args, **kw)


@pytest.fixture(params=["compiled", "interpreter"])
def mode(request):
    """Each CPU test runs compiled and in the numpy interpreter."""
    J.set_interpret(request.param == "interpreter")
    yield request.param
    J.set_interpret(False)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.uint8, np.int64])
@pytest.mark.parametrize("dim,descending", [(1, False), (1, True), (0, False), (0, True)])
def test_sort_matches_numpy(mode, dtype, dim, descending):
    x = _values(dtype, (8, 32), seed=dim * 2 + descending)
    y = np.zeros_like(x)
    _run(sort_kernel, x, y, R=8, C=32, DIM=dim, DESCENDING=descending)
    want = np.sort(x, axis=dim)
    if descending:
        want = np.flip(want, dim)
    np.testing.assert_array_equal(y, want)                   # NaN last ascending, first descending


def test_sort_as_a_method_and_one_element_and_long_rows(mode):
    for n in (1, 2, 1024):
        x = _values(np.float32, (n,), seed=n) if n > 8 else np.arange(n, 0, -1).astype(np.float32)
        y = np.full_like(x, -7)
        _run(sort_1d_kernel, x, y, N=n)
        np.testing.assert_array_equal(y, np.sort(x))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("k", [1, 4, 32])
def test_topk_is_the_largest_k_largest_first(mode, dtype, k):
    x = _values(dtype, (4, 32), seed=k)
    y = np.zeros((4, k), dtype)
    _run(topk_kernel, x, y, R=4, C=32, K=k)
    np.testing.assert_array_equal(y, np.flip(np.sort(x, axis=1), 1)[:, :k])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64])
@pytest.mark.parametrize("dim", [0, 1, -1, None])
def test_flip_matches_numpy(mode, dtype, dim):
    x = _values(dtype, (4, 16), seed=3)
    y = np.zeros_like(x)
    _run(flip_kernel, x, y, R=4, C=16, DIM=dim)
    np.testing.assert_array_equal(y, np.flip(x, 1 if dim is None else dim))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int16])
def test_interleave_and_cat_keep_every_element_in_order(mode, dtype):
    a, b = _values(dtype, (4, 8), seed=1), _values(dtype, (4, 8), seed=2)
    inter, cat = np.zeros((4, 16), dtype), np.zeros((8, 8), dtype)
    _run(interleave_cat_kernel, a, b, inter, cat, R=4, C=8)
    want = np.empty((4, 16), dtype)
    want[:, 0::2], want[:, 1::2] = a, b
    np.testing.assert_array_equal(inter, want)
    np.testing.assert_array_equal(cat, np.concatenate([a, b]))


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64])
def test_histogram_counts_in_range_unmasked_values(mode, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 20, 100).astype(dtype)           # some below 0, some at or above 16 bins
    h = np.full(16, -1, np.int32)
    _run(histogram_kernel, x, h, 100, N=128, BINS=16)
    keep = (x >= 0) & (x < 16)
    np.testing.assert_array_equal(h, np.bincount(x[keep].astype(np.int64), minlength=16))


def _swizzle_reference(size_i, size_j, size_g):
    out = []
    for t in range(size_i * size_j):
        i, j = divmod(t, size_j)
        ij = i * size_j + j
        off_i = ij // (size_g * size_j) * size_g
        rows = min(size_i - off_i, size_g)
        ij %= size_g * size_j
        out += [off_i + ij % rows, ij // rows]
    return np.array(out, np.int32)


@pytest.mark.parametrize("size_i,size_j,size_g", [(8, 8, 4), (7, 5, 3), (5, 6, 8), (1, 9, 2)])
def test_swizzle2d_visits_every_tile_once_in_grouped_order(mode, size_i, size_j, size_g):
    out = np.full(128, -1, np.int32)
    _run(swizzle_kernel, out, size_i, size_j, size_g, BLOCK=64)
    got = out[: 2 * size_i * size_j]
    np.testing.assert_array_equal(got, _swizzle_reference(size_i, size_j, size_g))
    pairs = set(zip(got[0::2].tolist(), got[1::2].tolist()))
    assert pairs == {(i, j) for i in range(size_i) for j in range(size_j)}   # a permutation of the grid


def test_swizzle2d_of_constants_folds():
    @tessera.kernel
    def k(out_ptr):
        i, j = tl.swizzle2d(5, 3, 7, 5, 3)
        tl.store(out_ptr, i)
        tl.store(out_ptr + 1, j)

    out = np.zeros(2, np.int32)
    k[(1,)](out)
    np.testing.assert_array_equal(out, _swizzle_reference(7, 5, 3)[2 * (5 * 5 + 3): 2 * (5 * 5 + 3) + 2])


# --- the GPU: PTX that ptxas accepts, and results on a device

_PTX_CASES = [
    (sort_kernel, {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16"}, {"R": 8, "C": 64, "DIM": 1, "DESCENDING": True}),
    (sort_kernel, {"x_ptr": "*fp16:16", "y_ptr": "*fp16:16"}, {"R": 16, "C": 16, "DIM": 0, "DESCENDING": False}),
    (flip_kernel, {"x_ptr": "*bf16:16", "y_ptr": "*bf16:16"}, {"R": 4, "C": 64, "DIM": 1}),
    (interleave_cat_kernel, {n: "*i32:16" for n in ("a_ptr", "b_ptr", "inter_ptr", "cat_ptr")}, {"R": 8, "C": 32}),
    (topk_kernel, {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16"}, {"R": 4, "C": 64, "K": 8}),
    (histogram_kernel, {"x_ptr": "*i32:16", "h_ptr": "*i32:16", "n": "i32"}, {"N": 256, "BINS": 32}),
    (swizzle_kernel, {"out_ptr": "*i32:16", "size_i": "i32", "size_j": "i32", "size_g": "i32"}, {"BLOCK": 128}),
]


@pytest.mark.parametrize("case", range(len(_PTX_CASES)))
@pytest.mark.parametrize("arch", ["90a", "80"])
def test_ptx_assembles(tmp_path, case, arch):
    kernel, sig, constexprs = _PTX_CASES[case]
    assemble(tessera.compile(kernel, sig, constexprs, target=f"cuda:{arch}").asm["ptx"], arch, tmp_path)


@pytest.mark.gpu
def test_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for dtype, ndt in ((torch.float32, np.float32), (torch.float16, np.float16), (torch.int32, np.int32)):
        for dim, desc in ((1, False), (1, True), (0, False)):
            x = torch.from_numpy(_values(ndt, (8, 128), seed=dim + desc)).cuda()
            y = torch.full_like(x, -5)
            sort_kernel[(1,)](x, y, R=8, C=128, DIM=dim, DESCENDING=desc)
            want = torch.sort(x.cpu().double() if dtype == torch.float16 else x.cpu(), dim=dim, descending=desc).values
            assert torch.equal(y.cpu().to(want.dtype), want) or torch.allclose(
                y.cpu().to(want.dtype), want, equal_nan=True, rtol=0, atol=0), (dtype, dim, desc)
        y = torch.full_like(x, -5)
        flip_kernel[(1,)](x, y, R=8, C=128, DIM=1)
        assert torch.equal(y.cpu(), torch.flip(x.cpu(), [1])) or torch.allclose(
            y.cpu().double(), torch.flip(x.cpu(), [1]).double(), equal_nan=True, rtol=0, atol=0)
    x = torch.from_numpy(_values(np.float32, (4, 64), seed=9)).cuda()
    y = torch.full((4, 8), -5.0, device="cuda")
    topk_kernel[(1,)](x, y, R=4, C=64, K=8)
    assert torch.allclose(y.cpu(), torch.sort(x.cpu(), 1, descending=True).values[:, :8], equal_nan=True, rtol=0, atol=0)
    a = torch.arange(256, device="cuda", dtype=torch.int32).reshape(8, 32)
    b = -a
    inter = torch.full((8, 64), 99, device="cuda", dtype=torch.int32)
    cat = torch.full((16, 32), 99, device="cuda", dtype=torch.int32)
    interleave_cat_kernel[(1,)](a, b, inter, cat, R=8, C=32)
    assert torch.equal(inter, torch.stack([a, b], -1).reshape(8, 64)) and torch.equal(cat, torch.cat([a, b]))
    x = torch.randint(-3, 40, (200,), device="cuda", dtype=torch.int32)
    h = torch.full((32,), -1, device="cuda", dtype=torch.int32)
    histogram_kernel[(1,)](x, h, 200, N=256, BINS=32)
    keep = x[(x >= 0) & (x < 32)].long()
    assert torch.equal(h.long(), torch.bincount(keep, minlength=32))
    out = torch.full((128,), -1, device="cuda", dtype=torch.int32)
    swizzle_kernel[(1,)](out, 7, 5, 3, BLOCK=64)
    np.testing.assert_array_equal(out[:70].cpu().numpy(), _swizzle_reference(7, 5, 3))


# --- errors

def _compile_error(src_kernel, sig, constexprs):
    with pytest.raises(tessera.CompilationError) as info:
        tessera.compile(src_kernel, sig, constexprs)
    return info.value


def test_errors_name_the_builtin_and_the_argument():
    @tessera.kernel
    def sort_scalar(x_ptr):
        tl.store(x_ptr, tl.sort(tl.load(x_ptr)))

    @tessera.kernel
    def flip_bad_dim(x_ptr):
        offs = tl.arange(0, 16)
        tl.store(x_ptr + offs, tl.flip(tl.load(x_ptr + offs), 2))

    @tessera.kernel
    def cat_mismatch(x_ptr):
        a = tl.load(x_ptr + tl.arange(0, 16))
        tl.store(x_ptr + tl.arange(0, 64), tl.cat(a, tl.load(x_ptr + tl.arange(0, 32))))

    @tessera.kernel
    def histogram_float(x_ptr, h_ptr):
        tl.store(h_ptr + tl.arange(0, 8), tl.histogram(tl.load(x_ptr + tl.arange(0, 16)), 8))

    @tessera.kernel
    def topk_three(x_ptr):
        offs = tl.arange(0, 16)
        tl.store(x_ptr + tl.arange(0, 4), tl.topk(tl.load(x_ptr + offs), 3))

    f32 = {"x_ptr": "*fp32"}
    assert "tl.topk: k must be a power of two from 1 to 16" in _compile_error(topk_three, f32, {}).message
    assert "tl.sort needs a tile" in _compile_error(sort_scalar, f32, {}).message
    e = _compile_error(flip_bad_dim, f32, {})
    assert "tl.flip: dim 2 is out of range" in e.message and "tl.flip(" in e.source_line
    assert "tl.cat needs two tiles of the same shape and type" in _compile_error(cat_mismatch, f32, {}).message
    assert "tl.histogram needs a 1-D integer tile" in _compile_error(
        histogram_float, {"x_ptr": "*fp32", "h_ptr": "*i32"}, {}).message
