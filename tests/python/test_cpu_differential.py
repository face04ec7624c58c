"""Differential tests, compiled CPU path vs the interpreter: Hypothesis draws random
expression trees over a few ops and dtypes, the test writes them out as a kernel
module (a real file, so inspect.getsource works), runs it compiled and interpreted
on the same masked inputs and compares.

Three kinds of kernel: exactly specified elementwise trees (integer ops, IEEE
+-*/, min/max, where, casts, floor/ceil/sqrt: compared value for value), a math
function at the root (compared in ulps), and a reduction at the root (integers,
max/min: exact; float sums: within n*eps of the sum of magnitudes)."""
import importlib.util
import itertools
import os
import random
import sys
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from tessera.language import dtypes as D
from tessera.language import semantics as S
from cpu_helpers import poisoned, run_interpreted, ulp_distance

INT_TYPES = [D.int8, D.int16, D.int32, D.int64, D.uint8, D.uint16, D.uint32, D.uint64]
FLOAT_TYPES = [D.float16, D.float32, D.float64]
TYPES = INT_TYPES + FLOAT_TYPES
BM, BN = 4, 16


def tl_name(t):
    return {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}.get(t.ir, t.name)


def storable(e):
    """bf16 results are stored as f32 (numpy has no bf16)."""
    return Expr(f"({e.src}).to(tl.float32)", D.float32) if e.dtype.is_bf16() else e


def np_of(t):
    return np.dtype(D._NUMPY_NAMES[t.ir])


# --- expression trees --------------------------------------------------------------------------------
class Expr:
    """Source text and Tessera type of a generated subexpression; `weak` marks a Python
    literal (it takes the type of the tile it meets)."""

    def __init__(self, src, dtype, weak=False):
        self.src, self.dtype, self.weak = src, dtype, weak


def _leaf(rng, env):
    choice = rng.choice(["x", "y", "x", "y", "int", "float"])
    if choice in ("x", "y"):
        return Expr(choice, env[choice])
    if choice == "int":
        v = rng.choice([0, 1, 2, 3, 7, 100, 300])
        return Expr(str(v), S.literal_type(v), weak=True)
    v = rng.choice([0.5, 2.0, -1.25, 3.0])
    return Expr(repr(v), D.float32, weak=True)


def _tile_leaf(rng, env):
    name = rng.choice(["x", "y"])
    return Expr(name, env[name])


def _promote(a, b, kind="arith"):
    if kind == "truediv":
        return S.truediv_type(a.dtype, a.weak, b.dtype, b.weak)
    return S.computation_type(a.dtype, a.weak, b.dtype, b.weak, div_or_mod=kind == "divmod")


def exact_expr(rng, env, depth):
    """A random elementwise tree whose value is fully specified (no math library calls).
    rng: random.Random (Hypothesis draws its seed: trees are diverse, failures are
    reported with the kernel source)."""
    if depth <= 0:
        return _leaf(rng, env)
    kind = rng.choice(["binary", "binary", "binary", "unary", "where", "minmax", "cast", "leaf"])
    if kind == "leaf":
        return _leaf(rng, env)
    a = exact_expr(rng, env, depth - 1)
    if kind == "unary" or kind == "cast":
        if a.weak:
            a = _tile_leaf(rng, env)
        if kind == "cast":
            t = rng.choice(TYPES + [D.bfloat16])
            return Expr(f"{a.src}.to(tl.{tl_name(t)})", t)
        ops = ["neg", "abs"] + (["floor", "ceil", "sqrt"] if a.dtype.is_floating() else ["invert"])
        op = rng.choice(ops)
        src = {"neg": f"(-{a.src})", "abs": f"tl.abs({a.src})", "invert": f"(~{a.src})"}.get(op, f"tl.{op}({a.src})")
        return Expr(src, a.dtype)
    b = exact_expr(rng, env, depth - 1)
    if a.weak and b.weak:
        b = _tile_leaf(rng, env)
    if kind == "minmax":
        fn = rng.choice(["minimum", "maximum"])
        return Expr(f"tl.{fn}({a.src}, {b.src})", _promote(a, b))
    if kind == "where":
        c = exact_expr(rng, env, depth - 1)
        d = exact_expr(rng, env, depth - 1)
        if c.weak and d.weak:
            d = _tile_leaf(rng, env)
        pred = rng.choice(["<", "<=", "==", "!=", ">"])
        _promote(a, b)                                       # comparable
        return Expr(f"tl.where({a.src} {pred} {b.src}, {c.src}, {d.src})", _promote(c, d))
    ops = ["+", "-", "*", "/"]
    both_int = a.dtype.is_int() and b.dtype.is_int()
    if both_int:
        ops += ["//", "%", "//", "%", "&", "|", "^", "<<", ">>"]
    op = rng.choice(ops)
    if op in ("//", "%"):
        try:
            t = _promote(a, b, "divmod")
        except S.SemanticError:                              # mixed signedness: cast one side
            if a.weak:
                a = Expr(f"{a.src}.to(tl.{tl_name(b.dtype)})", b.dtype)
            else:
                b = Expr(f"{b.src}.to(tl.{tl_name(a.dtype)})", a.dtype)
            t = _promote(a, b, "divmod")
        return Expr(f"({a.src} {op} {b.src})", t)
    if op in ("<<", ">>"):
        t = _promote(a, b)
        bits = t.primitive_bitwidth
        return Expr(f"({a.src} {op} ({b.src} & {bits - 1}))", t)   # in-range shift amounts
    if op == "/":
        return Expr(f"({a.src} / {b.src})", _promote(a, b, "truediv"))
    return Expr(f"({a.src} {op} {b.src})", _promote(a, b))


def tree_rng(*params):
    """A random.Random seeded from every parameter Hypothesis drew for the example: the
    examples are distinct tuples, so each gets its own trees even when Hypothesis repeats
    one parameter (it favours small integers)."""
    text = repr([p if not isinstance(p, dict) else sorted((k, v.ir) for k, v in p.items()) for p in params])
    return random.Random(zlib.crc32(text.encode()))


def root_expr(rng, env, depth):
    e = exact_expr(rng, env, depth)
    if e.weak:
        e = Expr(f"(x + {e.src})", _promote(Expr("x", env["x"]), e))
    return e


def kernel_source(name, body_lines):
    lines = [
        "import tessera",
        "import tessera.language as tl",
        "",
        "",
        "@tessera.kernel",
        f"def {name}(x_ptr, y_ptr, out_ptr, aux_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):",
        "    rm = tl.arange(0, BM)[:, None]",
        "    rn = tl.arange(0, BN)[None, :]",
        "    mask = (rm < M) & (rn < N)",
        "    x = tl.load(x_ptr + rm * N + rn, mask=mask, other=1)",
        "    y = tl.load(y_ptr + rm * N + rn, mask=mask, other=2)",
    ]
    return "\n".join(lines + ["    " + ln for ln in body_lines]) + "\n"


_counter = itertools.count()


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("generated_kernels")


def load_kernel(directory, source):
    name = f"tessera_gen_{next(_counter)}"
    path = directory / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.gen


def make_inputs(env, seed, M, N):
    rng = np.random.default_rng(seed)
    out = []
    for name in ("x", "y"):
        t = env[name]
        dt = np_of(t)
        if t.is_floating():
            v = rng.standard_normal(M * N) * rng.choice([1.0, 10.0, 1000.0])
            v[rng.random(M * N) < 0.1] = 0.0
            v = v.astype(dt)
        else:
            info = np.iinfo(dt)
            small = rng.integers(max(info.min, -20), min(info.max, 20), M * N, endpoint=True)
            full = rng.integers(info.min, info.max, M * N, endpoint=True, dtype=dt)
            v = np.where(rng.random(M * N) < 0.7, small, full).astype(dt)
        out.append(v)
    return out


def run_both(directory, source, env, seed, M, N, out_dtype, out_size, aux_size=1):
    note(source)
    kernel = load_kernel(directory, source)
    x, y = make_inputs(env, seed, M, N)
    res = []
    for runner in ("compiled", "interpreted"):
        out = poisoned(out_size, out_dtype)
        aux = poisoned(aux_size, np.float64)
        args = (x.copy(), y.copy(), out, aux, M, N)
        if runner == "compiled":
            kernel[(1,)](*args, BM=BM, BN=BN)
        else:
            run_interpreted(kernel, (1,), *args, BM=BM, BN=BN)
        res.append((out, aux))
    return res


envs = st.fixed_dictionaries({"x": st.sampled_from(TYPES), "y": st.sampled_from(TYPES)})
shapes = st.tuples(st.integers(1, BM), st.integers(1, BN))
# TESSERA_DIFFERENTIAL_SCALE=k runs k times more examples, randomly (a deeper, slower run);
# by default the examples are derandomized so every run tests the same kernels.
SCALE = int(os.environ.get("TESSERA_DIFFERENTIAL_SCALE", "1"))
SETTINGS = dict(deadline=None, derandomize=SCALE == 1, suppress_health_check=[HealthCheck.too_slow],
                database=None)


# --- exact elementwise trees -------------------------------------------------------------------------
N_TREES = 3        # independent trees per kernel: more coverage per compilation


@settings(max_examples=50 * SCALE, **SETTINGS)
@given(tree=st.integers(0, 2**32), env=envs, shape=shapes, seed=st.integers(0, 2**16))
def test_exact_elementwise_trees(kernel_dir, tree, env, shape, seed):
    rng = tree_rng(tree, env, shape, seed)
    exprs = [storable(root_expr(rng, env, 4)) for _ in range(N_TREES)]
    body = []
    for k, e in enumerate(exprs):
        body += [f"t{k} = {e.src}",
                 f"tl.static_assert(t{k}.dtype == tl.{tl_name(e.dtype)})",
                 f"tl.store(out_ptr + {k * BM * BN} + rm * BN + rn, t{k}.to(tl.float64), mask=mask)"
                 if e.dtype.is_floating() else
                 f"tl.store(out_ptr + {k * BM * BN} + rm * BN + rn, t{k}.to(tl.int64, bitcast={e.dtype.primitive_bitwidth == 64})"
                 f".to(tl.uint64, bitcast=True), mask=mask)"]
    src = kernel_source("gen", body)
    M, N = shape
    # every result is stored widened (exactly) into a u64 (ints) or f64 (floats) slot
    (c, _), (i, _) = run_both(kernel_dir, src, env, seed, M, N, np.uint64, N_TREES * BM * BN)
    for k, e in enumerate(exprs):
        ck = c[k * BM * BN:(k + 1) * BM * BN].reshape(BM, BN)
        ik = i[k * BM * BN:(k + 1) * BM * BN].reshape(BM, BN)
        if e.dtype.is_floating():
            ck, ik = ck.view(np.float64), ik.view(np.float64)
        np.testing.assert_array_equal(ck[:M, :N], ik[:M, :N], err_msg=f"t{k} = {e.src}")   # NaN == NaN
        np.testing.assert_array_equal(ck.view(np.uint64)[M:], ik.view(np.uint64)[M:])      # untouched


# --- a math function at the root ------------------------------------------------------------------------
MATH = {"exp": True, "exp2": True, "log": False, "log2": False, "sqrt": False, "rsqrt": False,
        "sin": True, "cos": True, "erf": True, "tanh": True, "sigmoid": True}


@settings(max_examples=40 * SCALE, **SETTINGS)
@given(tree=st.integers(0, 2**32), env=envs, shape=shapes, seed=st.integers(0, 2**16),
       fn=st.sampled_from(sorted(MATH)), ftype=st.sampled_from(FLOAT_TYPES))
def test_math_at_root(kernel_dir, tree, env, shape, seed, fn, ftype):
    e = root_expr(tree_rng(tree, env, shape, seed, fn, ftype), env, 2)
    arg = f"({e.src}).to(tl.{tl_name(ftype)})"
    if MATH[fn]:                  # keep sin/cos in their accurate range (see test_cpu_elementwise)
        # sigmoid: above -80, where the interpreter's 1/(1+exp(-x)) does not underflow to 0
        # before the true result does (test_interpreter_sigmoid_of_very_negative_arguments)
        lim = 80.0 if fn == "sigmoid" else 100.0
        arg = f"tl.minimum(tl.maximum({arg}, -{lim}), {lim})"
    body = [f"t = tl.{fn}({arg})",
            f"tl.static_assert(t.dtype == tl.{tl_name(ftype)})",
            "tl.store(out_ptr + rm * BN + rn, t, mask=mask)"]
    src = kernel_source("gen", body)
    M, N = shape
    (c, _), (i, _) = run_both(kernel_dir, src, env, seed, M, N, np_of(ftype), BM * BN)
    c, i = c.reshape(BM, BN)[:M, :N], i.reshape(BM, BN)[:M, :N]
    # compiled: <= 2-4 ulp of the correctly rounded value; the interpreter (numpy): <= 1
    max_ulp = 1 if ftype == D.float16 else 6
    d = ulp_distance(c, i)
    assert (d <= max_ulp).all(), f"tl.{fn}: {c[d > max_ulp]} vs {i[d > max_ulp]} ({d.max()} ulp)"


# --- a reduction at the root ----------------------------------------------------------------------------
@settings(max_examples=40 * SCALE, **SETTINGS)
@given(tree=st.integers(0, 2**32), env=envs, shape=shapes, seed=st.integers(0, 2**16),
       red=st.sampled_from(["sum", "max", "min", "xor_sum"]), axis=st.sampled_from([0, 1, None]))
def test_reduction_at_root(kernel_dir, tree, env, shape, seed, red, axis):
    e = storable(root_expr(tree_rng(tree, env, shape, seed, red, axis), env, 2))
    if red == "xor_sum" and e.dtype.is_floating():
        red = "max"
    t = e.dtype
    out_t = t
    if red == "sum" and t.is_int() and t.primitive_bitwidth < 32:
        out_t = D.uint32 if t.is_int_unsigned() else D.int32
    if red in ("max", "min") and t.primitive_bitwidth < 32:
        out_t = D.float32 if t.is_floating() else D.int32
    n_out = {None: 1, 0: BN, 1: BM}[axis]
    store = {None: "tl.store(out_ptr, r)", 0: "tl.store(out_ptr + tl.arange(0, BN), r)",
             1: "tl.store(out_ptr + tl.arange(0, BM), r)"}[axis]
    body = [f"t = {e.src}",
            f"r = tl.{red}(t, axis={axis})",
            f"tl.static_assert(r.dtype == tl.{tl_name(out_t)})",
            store]
    if red == "sum" and t.is_floating():
        body += [f"a = tl.sum(tl.abs(t).to(tl.float64), axis={axis})",
                 store.replace("out_ptr", "aux_ptr").replace(", r)", ", a)")]
    src = kernel_source("gen", body)
    M, N = shape
    (c, ca), (i, ia) = run_both(kernel_dir, src, env, seed, M, N, np_of(out_t), n_out, aux_size=n_out)
    if red == "sum" and t.is_floating():
        eps = float(np.finfo(np_of(out_t)).eps)
        bound = (BM * BN) * eps * ia + 2 * float(np.finfo(np_of(out_t)).tiny)
        both_finite = np.isfinite(c) & np.isfinite(i) & np.isfinite(bound)
        with np.errstate(invalid="ignore"):
            err = np.abs(c.astype(np.float64) - i)
        assert (err[both_finite] <= bound[both_finite]).all(), (c, i, bound)
        big = np.finfo(np_of(out_t)).max / 2                 # order-dependent overflow near the max
        np.testing.assert_array_equal(np.isnan(c) | (np.abs(ia) > big), np.isnan(i) | (np.abs(ia) > big))
    else:
        np.testing.assert_array_equal(c, i)


def test_interpreter_sigmoid_of_very_negative_arguments(kernel_dir):
    src = kernel_source("gen", ["tl.store(out_ptr + rm * BN + rn, tl.sigmoid(x), mask=mask)"])
    kernel = load_kernel(kernel_dir, src)
    x = np.array([-90.0, -95.0, -99.0, -103.0], np.float32)
    c, i = poisoned(BM * BN, np.float32), poisoned(BM * BN, np.float32)
    kernel[(1,)](x, x, c, np.zeros(1), 1, 4, BM=BM, BN=BN)
    run_interpreted(kernel, (1,), x, x, i, np.zeros(1), 1, 4, BM=BM, BN=BN)
    want = (np.exp(x.astype(np.float64)) / (1 + np.exp(x.astype(np.float64)))).astype(np.float32)
    assert (ulp_distance(c[:4], want) <= 4).all()           # compiled: fine
    assert (ulp_distance(i[:4], want) <= 4).all()           # interpreter: 0
