"""tl.exp / exp2 / log / log2 on the CPU: within 2 ulp of numpy's float64 (float32
results) or long double (float64 results) over the whole input range, underflow to
denormals and overflow included, and the same bits whatever the tile's shape (1-D
rows, [G, VEC] tiles, scalars) or the CPU (host AVX-512 and AVX2-only haswell)."""
import numpy as np
import pytest

import tessera
import tessera.language as tl

FUNCS = {
    "exp": (lambda x: tl.exp(x), np.exp),
    "exp2": (lambda x: tl.exp2(x), np.exp2),
    "log": (lambda x: tl.log(x), np.log),
    "log2": (lambda x: tl.log2(x), np.log2),
}


@tessera.kernel
def _math_row(X, Y, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + c, mask=c < n, other=1.0)
    tl.store(Y + c, _apply(x, FN), mask=c < n)


@tessera.kernel
def _math_groups(X, Y, n, FN: tl.constexpr, G: tl.constexpr, VEC: tl.constexpr):
    # a [G, VEC] tile with a mask per group of VEC and per element (cross_entropy's
    # realigned slices have this shape)
    g = tl.program_id(0) * G + tl.arange(0, G)
    c = g[:, None] * VEC + tl.arange(0, VEC)[None, :]
    whole = (g[:, None] + 1) * VEC <= n
    x = tl.load(X + c, mask=whole, other=1.0)
    x = tl.where(whole, x, tl.load(X + c, mask=c < n, other=1.0))
    tl.store(Y + c, _apply(x, FN), mask=c < n)


@tessera.kernel
def _math_scalars(X, Y, n, FN: tl.constexpr, PER_PROGRAM: tl.constexpr):
    # one element at a time: scalar code (or whatever LLVM's loop vectorizer makes of it)
    first = tl.program_id(0) * PER_PROGRAM
    for i in range(first, tl.minimum(first + PER_PROGRAM, n)):
        tl.store(Y + i, _apply(tl.load(X + i), FN))


@tessera.kernel
def _apply(x, FN: tl.constexpr):
    if FN == "exp":
        y = tl.exp(x)
    elif FN == "exp2":
        y = tl.exp2(x)
    elif FN == "log":
        y = tl.log(x)
    else:
        y = tl.log2(x)
    return y


SHAPES = ["row1024", "row16", "groups128x8", "groups256x4", "groups32x16", "groups512x2", "scalars"]


def _run(shape, fn, x):
    y = np.full_like(x, np.nan)
    n = x.size
    if shape.startswith("row"):
        block = int(shape[3:])
        _math_row[(tessera.cdiv(n, block),)](x, y, n, FN=fn, BLOCK=block)
    elif shape.startswith("groups"):
        g, vec = (int(v) for v in shape[6:].split("x"))
        _math_groups[(tessera.cdiv(n, g * vec),)](x, y, n, FN=fn, G=g, VEC=vec)
    else:
        _math_scalars[(tessera.cdiv(n, 4096),)](x, y, n, FN=fn, PER_PROGRAM=4096)
    return y


def _specials(dtype):
    f = np.finfo(dtype)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, f.tiny, f.smallest_subnormal, -f.tiny, f.max, -f.max,
                     1.0, -1.0, 2.0, 0.5], dtype)


def _inputs(fn, dtype):
    """Dense sweeps over each function's interesting range (every result from overflow
    down through the denormals to 0) plus a stride through every bit pattern, an odd
    count so that rows and groups end partially filled."""
    rng = np.random.default_rng(7)
    f32 = dtype == np.float32
    bits = np.arange(200_003, dtype=np.uint64) * np.uint64((2**32 if f32 else 2**64) // 200_003)
    every = (bits.astype(np.uint32) if f32 else bits).view(dtype)
    if fn in ("exp", "exp2"):
        # exp: overflow above 88.72 (709.78), denormal results below -87.34 (-708.4),
        # zero below -103.97 (-745.13); exp2 the same times 1/ln 2
        lo, hi = (-104.5, 89.5) if f32 else (-746.0, 710.5)
        if fn == "exp2":
            lo, hi = lo / np.log(2), hi / np.log(2)
        edges = np.concatenate([np.linspace(e - 1, e + 1, 20_001) for e in
                                ((-87.34, -103.97, 88.72) if f32 else (-708.4, -745.13, 709.78))])
        if fn == "exp2":
            edges = edges / np.log(2)
        dense = np.concatenate([rng.uniform(lo, hi, 400_000), rng.uniform(-1, 1, 100_000), edges,
                                np.arange(np.floor(lo), np.ceil(hi))])
    else:
        # log: every binade, the denormals and the region around 1 (where log is small)
        dense = np.concatenate([np.exp2(rng.uniform(np.log2(np.finfo(dtype).smallest_subnormal),
                                                    np.log2(np.finfo(dtype).max), 400_000)),
                                rng.uniform(0.5, 2.0, 100_000), np.exp2(np.arange(-1074 if not f32 else -149, 128))])
    x = np.concatenate([dense.astype(dtype), every, _specials(dtype)])
    return x if x.size % 2 else np.append(x, dtype(0.25))


def _ulp_errors(y, x, ref_fn, dtype):
    """ulp error of each finite-reference result (ulps of the correctly rounded result,
    denormal spacing at the bottom) and the indices where the reference is inf/nan/0."""
    wide = np.longdouble if dtype == np.float64 else np.float64
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(wide))
        rounded = ref.astype(dtype)
        spacing = np.maximum(np.spacing(np.abs(rounded)).astype(wide), wide(np.finfo(dtype).smallest_subnormal))
        err = np.abs(y.astype(wide) - ref) / spacing
    special = ~np.isfinite(rounded) | (rounded == 0)
    return err, special, rounded


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("fn", list(FUNCS))
def test_within_2_ulp_and_the_same_bits_on_every_tile_shape(fn, dtype, monkeypatch):
    x = _inputs(fn, dtype)
    results = {}
    for cpu in ("", "haswell"):
        if cpu:
            monkeypatch.setenv("TESSERA_CPU", cpu)
        for shape in SHAPES:
            results[(cpu or "host", shape)] = _run(shape, fn, x)
    err, special, rounded = _ulp_errors(results[("host", "row1024")], x, FUNCS[fn][1], dtype)
    finite = ~special
    worst = int(np.argmax(np.where(finite, err, 0)))
    assert err[finite].max() <= 2.0, f"{fn} {np.dtype(dtype).name}: {err[worst]:.3f} ulp at x={x[worst]!r}"
    # inf, nan and exact zeros as numpy's (an exp that underflows is +0, log(0) is -inf)
    y = results[("host", "row1024")]
    np.testing.assert_array_equal(y[special], rounded[special])
    base = y.view(np.uint32 if dtype == np.float32 else np.uint64)
    for key, other in results.items():
        same = (other.view(base.dtype) == base) | (np.isnan(other) & np.isnan(y))
        assert same.all(), (f"{fn} {np.dtype(dtype).name} {key}: {np.count_nonzero(~same)} results differ from a "
                            f"1-D row's, first at x={x[~same][0]!r}: {other[~same][0]!r} vs {y[~same][0]!r}")


@pytest.mark.parametrize("fn", ["exp", "exp2"])
def test_underflow_is_gradual_and_overflow_is_inf(fn):
    # exp's results from the smallest normal down to the smallest denormal, each
    # within 2 ulp of the denormal spacing's true value, then exactly 0; past the
    # largest finite result, inf
    f = np.float32
    top = np.log(np.finfo(f).tiny) if fn == "exp" else -126.0
    bottom = np.log(float(np.finfo(f).smallest_subnormal) / 2) if fn == "exp" else -150.0
    x = np.linspace(bottom - 0.5, top, 100_001).astype(f)
    for shape in ("row1024", "groups128x8"):
        y = _run(shape, fn, x)
        err, special, rounded = _ulp_errors(y, x, FUNCS[fn][1], f)
        assert err[~special].max() <= 2.0
        assert (y[rounded == 0] == 0).all() and (y[rounded != 0] > 0).all()
    over = np.array([89.0, 100.0, 1e30] if fn == "exp" else [128.0, 200.0, 1e30], f)
    assert np.isposinf(_run("groups128x8", fn, over)).all()
    largest = np.array([np.nextafter(np.log(np.finfo(f).max), 0)] if fn == "exp" else [np.nextafter(f(128), f(0))], f)
    assert np.isfinite(_run("row16", fn, largest)).all()


def test_a_cpu_name_alone_implies_its_features(monkeypatch):
    # TESSERA_CPU=skylake-avx512 without a feature list: the kernel's functions carry the
    # name's implied features (+avx512f ...), so the lowering's AVX-512 paths (the exp's
    # vscalef scaling) apply as for an AVX-512 host. (They once carried an empty list.)
    import re

    @tessera.kernel
    def exp_row(x, y, n, BLOCK: tl.constexpr):
        o = tl.arange(0, BLOCK)
        tl.store(y + o, tl.exp(tl.load(x + o, mask=o < n)), mask=o < n)

    monkeypatch.setenv("TESSERA_CPU", "skylake-avx512")
    ck = tessera.compile(exp_row, "*fp32,*fp32,i32", {"BLOCK": 64})
    features = re.search(r'"target-features"="([^"]*)"', ck.asm["llir"]).group(1).split(",")
    assert "+avx512f" in features and "+avx2" in features
    assert "vscalef" in ck.asm["asm"]
    monkeypatch.setenv("TESSERA_CPU", "haswell")
    ck = tessera.compile(exp_row, "*fp32,*fp32,i32", {"BLOCK": 64})
    features = re.search(r'"target-features"="([^"]*)"', ck.asm["llir"]).group(1).split(",")
    assert "+avx2" in features and "+avx512f" not in features and "vscalef" not in ck.asm["asm"]
