"""The interpreter (tessera.interpreter) op by op against numpy: arithmetic and
promotion, memory, reductions, scans, atomics, casts, bf16, Philox, dot, block
pointers, debugging builtins, and the errors it reports."""
import inspect
import math
import os
import sys
import types

import numpy as np
import pytest

try:
    import tessera  # noqa: F401
except ImportError:
    # The C++ core is not built: the interpreter needs only the pure-Python parts.
    _pkg = types.ModuleType("tessera")
    _pkg.__path__ = [os.path.join(os.path.dirname(__file__), "..", "..", "frontend", "tessera")]
    sys.modules["tessera"] = _pkg

import tessera.language as tl  # noqa: E402
from tessera.language import core  # noqa: E402
from tessera.language.semantics import SemanticError  # noqa: E402
from tessera.interpreter import InterpreterError, run_grid  # noqa: E402
from tessera.interpreter.grid import Builtins  # noqa: E402
from tessera.interpreter import numerics as N  # noqa: E402


def run(kernel, grid, constexprs=None, types=None, **args):
    run_grid(kernel, grid, args, constexprs or {}, types=types)


def bf16_round(x):
    """Reference bf16 rounding (RNE on the upper 16 bits) of float32 values."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return (b.astype(np.uint32) << 16).view(np.float32)


# --- kernels used by several tests ---------------------------------------------------------
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, x + y, mask=mask)


def unary_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, FN(x), mask=mask)


def binary_kernel(x_ptr, y_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, FN(x, y), mask=mask)


def apply_unary(fn, x, out_dtype, block=64, types=None):
    out = np.zeros(x.shape, out_dtype)
    run(unary_kernel, (max(1, -(-x.size // block)),), dict(FN=fn, BLOCK=block), types,
        x_ptr=x, out_ptr=out, n=x.size)
    return out


def apply_binary(fn, x, y, out_dtype, block=64):
    out = np.zeros(x.shape, out_dtype)
    run(binary_kernel, (max(1, -(-x.size // block)),), dict(FN=fn, BLOCK=block),
        x_ptr=x, y_ptr=y, out_ptr=out, n=x.size)
    return out


# --- elementwise, masks, odd sizes -----------------------------------------------------------
@pytest.mark.parametrize("n", [1, 17, 127, 128, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int8, np.float64])
def test_vector_add_masks_odd_sizes(n, dtype):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 50).astype(dtype)
    y = (rng.standard_normal(n) * 50).astype(dtype)
    out = np.full(n + 5, 7, dtype)                 # lanes past n must stay untouched
    run(add_kernel, (-(-n // 128),), dict(BLOCK=128), x_ptr=x, y_ptr=y, out_ptr=out, n=n)
    np.testing.assert_array_equal(out[:n], x + y)  # numpy wraps ints, rounds f16 like us
    assert (out[n:] == 7).all()


def test_strided_and_transposed_arrays():
    def copy2d(src, dst, sm, sn, dm, dn, M: tl.constexpr, N: tl.constexpr):
        rm = tl.arange(0, M)[:, None]
        rn = tl.arange(0, N)[None, :]
        tl.store(dst + rm * dm + rn * dn, tl.load(src + rm * sm + rn * sn) * 2)

    a = np.arange(64 * 3, dtype=np.float32).reshape(16, 12)[::2, 1::3]   # 8 x 4 view
    src = a.T                                                               # 4 x 8, not contiguous
    dst = np.zeros((4, 8), np.float32)
    s = src.strides
    run(copy2d, (1,), dict(M=4, N=8), src=src, dst=dst, sm=s[0] // 4, sn=s[1] // 4,
        dm=8, dn=1)
    np.testing.assert_array_equal(dst, src * 2)


def test_scalar_program_id_arithmetic_and_control_flow():
    def k(out_ptr, n):
        pid = tl.program_id(0)
        v = pid * 10
        if pid % 2 == 0:
            v = v + 1
        i = 0
        while i < n:
            v += 100
            i += 1
        tl.store(out_ptr + pid, v)

    out = np.zeros(4, np.int32)
    run(k, (4,), out_ptr=out, n=3)
    np.testing.assert_array_equal(out, [301, 310, 321, 330])


def test_num_programs_and_3d_grid_order():
    def k(out_ptr, counter_ptr):
        x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        nx, ny = tl.num_programs(0), tl.num_programs(1)
        order = tl.atomic_add(counter_ptr, 1)
        tl.store(out_ptr + (z * ny + y) * nx + x, order)

    out = np.zeros(2 * 3 * 4, np.int32)
    counter = np.zeros(1, np.int32)
    run(k, (2, 3, 4), out_ptr=out, counter_ptr=counter)
    np.testing.assert_array_equal(out, np.arange(24))   # x fastest, then y, then z


# --- promotion ----------------------------------------------------------------------------
def test_promotion_rules():
    def k(i8_ptr, u32_ptr, f16_ptr, out_ptr, scal):
        a = tl.load(i8_ptr + tl.arange(0, 4))
        u = tl.load(u32_ptr + tl.arange(0, 4))
        h = tl.load(f16_ptr + tl.arange(0, 4))
        tl.static_assert((a + 1).dtype == tl.int8)          # weak literal takes the tile type
        tl.static_assert((a + scal).dtype == tl.int32)      # a runtime scalar is not weak
        tl.static_assert((a + 1.5).dtype == tl.float32)     # float literal vs int tile
        tl.static_assert((h * 2).dtype == tl.float16)
        tl.static_assert((h / h).dtype == tl.float32)       # / of halves is f32
        tl.static_assert((a / a).dtype == tl.float32)
        tl.static_assert((a < u).dtype == tl.int1)
        tl.static_assert((u + a).dtype == tl.uint32)
        tl.static_assert((h + 1.0).dtype == tl.float16)
        tl.store(out_ptr + tl.arange(0, 4), (a + 127).to(tl.int32))  # wraps in i8
        tl.store(out_ptr + 4 + tl.arange(0, 4), (a < u).to(tl.int32))

    i8 = np.array([1, -1, 2, -128], np.int8)
    u32 = np.array([5, 5, 1, 0], np.uint32)
    out = np.zeros(8, np.int32)
    run(k, (1,), i8_ptr=i8, u32_ptr=u32, f16_ptr=np.ones(4, np.float16), out_ptr=out, scal=3)
    np.testing.assert_array_equal(out[:4], (i8.astype(np.int32) + 127).astype(np.int8))
    # -1 < 5 compares as u32: 0xFFFFFFFF < 5 is false
    np.testing.assert_array_equal(out[4:], [1, 0, 0, 0])


NUMERIC = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.float16, np.float32,
           np.float64]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "lt", "eq"])
def test_binary_ops_on_every_dtype_pair(op):
    from tessera.language import dtypes as D
    from tessera.language import semantics as S
    fns = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "lt": lambda a, b: a < b, "eq": lambda a, b: a == b}
    rng = np.random.default_rng(8)
    for ta in NUMERIC:
        for tb in NUMERIC:
            t = S.computation_type(D.NUMPY_TO_DTYPE[np.dtype(ta).name], False,
                                   D.NUMPY_TO_DTYPE[np.dtype(tb).name], False)
            x = rng.integers(-100, 100, 37).astype(ta)
            y = rng.integers(-100, 100, 37).astype(tb)
            with np.errstate(all="ignore"):
                ref = fns[op](x.astype(t.to_numpy()), y.astype(t.to_numpy()))
            want = D.int1 if op in ("lt", "eq") else t

            def checked(a, b):
                r = fns[op](a, b)
                assert r.dtype == want, (ta, tb, r.dtype, want)
                return r

            got = apply_binary(checked, x, y, ref.dtype)
            np.testing.assert_array_equal(got, ref, err_msg=f"{ta.__name__} {op} {tb.__name__}")


def test_integer_division_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 0, 5, -2**31, 9], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, -1, -4], np.int32)
    q = apply_binary(lambda x, y: x // y, a, b, np.int32)
    r = apply_binary(lambda x, y: x % y, a, b, np.int32)
    np.testing.assert_array_equal(q, [3, -3, -3, 3, 0, 0, -2**31, -2])
    np.testing.assert_array_equal(r, [1, -1, 1, -1, 0, 0, 0, 1])
    ua = np.array([7, 2**32 - 1], np.uint32)
    ub = np.array([2, 2], np.uint32)
    np.testing.assert_array_equal(apply_binary(lambda x, y: x // y, ua, ub, np.uint32),
                                  [3, 2**31 - 1])


def test_float_mod_is_fmod_and_floordiv_of_floats_is_an_error():
    a = np.array([5.5, -5.5, 5.5, -5.5], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    np.testing.assert_array_equal(apply_binary(lambda x, y: x % y, a, b, np.float32),
                                  np.fmod(a, b))
    with pytest.raises(SemanticError, match="//"):
        apply_binary(lambda x, y: x // y, a, b, np.float32)


def test_shifts_bitwise_and_invert():
    a = np.array([-8, 8, 1, -1], np.int32)
    np.testing.assert_array_equal(apply_unary(lambda x: x >> 1, a, np.int32), a >> 1)
    u = a.view(np.uint32)
    np.testing.assert_array_equal(apply_unary(lambda x: x >> 1, u, np.uint32), u >> 1)
    np.testing.assert_array_equal(apply_unary(lambda x: (x << 3) ^ ~x | 1, a, np.int32),
                                  (a << 3) ^ ~a | 1)


def test_bool_arithmetic_is_modulo_two():
    def k(out_ptr):
        t = tl.arange(0, 4) < 2          # [1, 1, 0, 0]
        f = tl.arange(0, 4) % 2 == 0     # [1, 0, 1, 0]
        tl.store(out_ptr + tl.arange(0, 4), (t + f).to(tl.int32))
        tl.store(out_ptr + 4 + tl.arange(0, 4), (~t).to(tl.int32))

    out = np.zeros(8, np.int32)
    run(k, (1,), out_ptr=out)
    np.testing.assert_array_equal(out, [0, 1, 1, 0, 0, 0, 1, 1])


def test_loop_variable_is_a_typed_scalar():
    def k(x_ptr, out_ptr):
        x = tl.load(x_ptr + tl.arange(0, 4))
        acc = x
        for i in range(3):
            acc = acc + i                      # i32 loop variable promotes i8 -> i32
        tl.static_assert(acc.dtype == tl.int32)
        tl.store(out_ptr + tl.arange(0, 4), acc)

    out = np.zeros(4, np.int32)
    run(k, (1,), x_ptr=np.array([127, 0, -128, 1], np.int8), out_ptr=out)
    np.testing.assert_array_equal(out, [130, 3, -125, 4])


# --- casts ----------------------------------------------------------------------------------
def test_float_to_int_casts_truncate_saturate_and_map_nan_to_zero():
    x = np.array([1.9, -1.9, 300.0, -300.0, np.nan, np.inf, -np.inf, 127.5], np.float32)
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.int8), x, np.int8),
                                  [1, -1, 127, -128, 0, 127, -128, 127])
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.uint8), x, np.uint8),
                                  [1, 0, 255, 0, 0, 255, 0, 127])
    big = np.array([3e9, -3e9, 1e20, np.nan], np.float64)
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.int32), big, np.int32),
                                  [2**31 - 1, -2**31, 2**31 - 1, 0])
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.int64), big, np.int64),
                                  [3000000000, -3000000000, 2**63 - 1, 0])


def test_int_casts_and_bitcast():
    x = np.array([-1, 255, 256, -129], np.int32)
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.int8), x, np.int8),
                                  x.astype(np.int8))
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.int8).to(tl.uint32), x, np.uint32),
                                  x.astype(np.int8).astype(np.uint32))    # sign-extends
    f = np.array([1.0, -2.5, np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(apply_unary(lambda v: v.to(tl.int32, bitcast=True), f, np.int32),
                                  f.view(np.int32))
    np.testing.assert_array_equal(apply_unary(lambda v: (v != 0).to(tl.int8), x, np.int8),
                                  [1, 1, 1, 1])


def test_int64_to_bf16_rounds_once():
    # 2**60 + 2**52 + 1 is just above a bf16 tie: rounding through float64 first would
    # turn it into an exact tie and round down to 2**60.
    x = np.array([2**60 + 2**52 + 1, 2**60 + 2**52, -(2**60 + 2**52 + 1), 3], np.int64)
    out = apply_unary(lambda v: v.to(tl.bfloat16).to(tl.float64), x, np.float64)
    np.testing.assert_array_equal(out, [2.0**60 + 2.0**53, 2.0**60, -(2.0**60 + 2.0**53), 3.0])


def test_downcast_round_toward_zero():
    x = np.array([1.0 + 2**-12, -(1.0 + 2**-12), 1e6], np.float32)
    rtne = apply_unary(lambda v: v.to(tl.float16), x, np.float16)
    rtz = apply_unary(lambda v: tl.cast(v, tl.float16, fp_downcast_rounding="rtz"), x, np.float16)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(rtne, x.astype(np.float16))
    np.testing.assert_array_equal(rtz, np.array([1.0, -1.0, 65504.0], np.float16))


# --- bf16 -------------------------------------------------------------------------------------
def test_bf16_storage_and_rounding():
    def k(x_ptr, y_ptr, out_ptr, f32_ptr):
        offs = tl.arange(0, 8)
        x = tl.load(x_ptr + offs)
        y = tl.load(y_ptr + offs)
        tl.static_assert(x.dtype == tl.bfloat16)
        s = x + y                              # computed in f32, rounded to bf16
        tl.static_assert(s.dtype == tl.bfloat16)
        tl.store(out_ptr + offs, s)
        tl.store(f32_ptr + offs, tl.exp(x).to(tl.float32))

    rng = np.random.default_rng(0)
    xf = bf16_round(rng.standard_normal(8).astype(np.float32))
    yf = bf16_round(rng.standard_normal(8).astype(np.float32) * 1e-3)
    bits = lambda a: (a.view(np.uint32) >> 16).astype(np.uint16)
    out = np.zeros(8, np.uint16)
    f32 = np.zeros(8, np.float32)
    run(k, (1,), types={"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16"},
        x_ptr=bits(xf), y_ptr=bits(yf), out_ptr=out, f32_ptr=f32)
    np.testing.assert_array_equal(out, bits(bf16_round(xf + yf)))
    np.testing.assert_array_equal(f32, bf16_round(np.exp(xf)))


def test_bf16_ties_round_to_even():
    # 1 + 2**-8 is halfway between bf16 1.0 and 1 + 2**-7: rounds to even (1.0);
    # 1 + 3 * 2**-8 is halfway between 1 + 2**-7 and 1 + 2**-6: rounds to 1 + 2**-6.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.398e38], np.float32)
    out = apply_unary(lambda v: v.to(tl.bfloat16).to(tl.float32), x, np.float32)
    np.testing.assert_array_equal(out, [1.0, 1 + 2**-6, -1.0, np.inf])
    assert N.f32_to_bf16_bits(np.array([np.nan], np.float32))[0] & 0x7FC0 == 0x7FC0


# --- math -------------------------------------------------------------------------------------
def test_math_functions():
    x = np.linspace(0.1, 4.0, 50).astype(np.float32)
    for fn, ref in [(tl.exp, np.exp), (tl.log, np.log), (tl.sqrt, np.sqrt), (tl.sin, np.sin),
                    (tl.cos, np.cos), (tl.exp2, np.exp2), (tl.log2, np.log2),
                    (tl.tanh, np.tanh), (tl.floor, np.floor), (tl.ceil, np.ceil),
                    (tl.rsqrt, lambda v: 1 / np.sqrt(v)),
                    (tl.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
                    (tl.erf, np.vectorize(math.erf))]:
        np.testing.assert_allclose(apply_unary(fn, x, np.float32), ref(x.astype(np.float64)),
                                   rtol=2e-6, err_msg=fn.__name__)


def test_math_on_ints_and_halves():
    def k(i_ptr, h_ptr, out_ptr):
        i = tl.load(i_ptr + tl.arange(0, 4))
        h = tl.load(h_ptr + tl.arange(0, 4))
        tl.static_assert(tl.sqrt(i).dtype == tl.float32)
        tl.static_assert(tl.exp(h).dtype == tl.float16)
        tl.store(out_ptr + tl.arange(0, 4), tl.sqrt(i) + tl.exp(h))

    h = np.array([0.5, 1.0, 2.0, 3.0], np.float16)
    out = np.zeros(4, np.float32)
    run(k, (1,), i_ptr=np.array([1, 4, 9, 2], np.int32), h_ptr=h, out_ptr=out)
    expect = np.sqrt(np.float32([1, 4, 9, 2])) + np.exp(h.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out, expect)


def test_minimum_maximum_nan_and_clamp():
    x = np.array([1.0, np.nan, 3.0, np.nan], np.float32)
    y = np.array([2.0, 1.0, np.nan, np.nan], np.float32)
    np.testing.assert_array_equal(apply_binary(tl.maximum, x, y, np.float32), [2, 1, 3, np.nan])
    np.testing.assert_array_equal(
        apply_binary(lambda a, b: tl.minimum(a, b, propagate_nan=True), x, y, np.float32),
        [1, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(apply_unary(lambda a: tl.clamp(a, 1.5, 2.5), x, np.float32),
                                  [1.5, 1.5, 2.5, 1.5])
    i = np.array([-5, 5, 0, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(apply_unary(lambda a: tl.maximum(a, 0), i, np.int32),
                                  [0, 5, 0, 2**31 - 1])


def test_fma_rounds_once_and_umulhi():
    a = np.array([1 + 2**-23, 3.0], np.float32)
    b = np.array([1 - 2**-23, 0.1], np.float32)
    c = np.array([-1.0, 1.0], np.float32)
    out = np.zeros(2, np.float32)

    def k(a_ptr, b_ptr, c_ptr, out_ptr):
        o = tl.arange(0, 2)
        tl.store(out_ptr + o, tl.fma(tl.load(a_ptr + o), tl.load(b_ptr + o), tl.load(c_ptr + o)))

    run(k, (1,), a_ptr=a, b_ptr=b, c_ptr=c, out_ptr=out)
    exact = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    np.testing.assert_array_equal(out, exact.astype(np.float32))
    assert out[0] == -(2.0**-46)                    # a*b+c separately would give 0

    ua = np.array([0xFFFFFFFF, 0x80000000, 3], np.uint32)
    ub = np.array([0xFFFFFFFF, 4, 5], np.uint32)
    np.testing.assert_array_equal(apply_binary(tl.umulhi, ua, ub, np.uint32),
                                  [(int(p) * int(q)) >> 32 for p, q in zip(ua, ub)])
    # Signed operands are taken as unsigned (Triton's mulhiui), result bits reinterpreted.
    sa, sb = ua.view(np.int32), ub.view(np.int32)
    np.testing.assert_array_equal(apply_binary(tl.umulhi, sa, sb, np.int32),
                                  np.array([(int(p) * int(q)) >> 32 for p, q in zip(ua, ub)], np.uint32).view(np.int32))
    la = np.array([2**64 - 1, 2**63 + 12345, 7], np.uint64)
    lb = np.array([2**64 - 1, 2**40 + 3, 2**63], np.uint64)
    np.testing.assert_array_equal(apply_binary(tl.umulhi, la, lb, np.uint64),
                                  [(int(p) * int(q)) >> 64 for p, q in zip(la, lb)])
    sla, slb = la.view(np.int64), lb.view(np.int64)
    np.testing.assert_array_equal(apply_binary(tl.umulhi, sla, slb, np.int64),
                                  np.array([(int(p) * int(q)) >> 64 for p, q in zip(la, lb)], np.uint64).view(np.int64))


def test_where_and_fdiv():
    x = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    np.testing.assert_array_equal(apply_unary(lambda v: tl.where(v > 0, v, 0.0), x, np.float32),
                                  np.where(x > 0, x, 0))
    np.testing.assert_array_equal(apply_unary(lambda v: tl.fdiv(v, 3.0), x, np.float32),
                                  x / np.float32(3))


# --- reductions ---------------------------------------------------------------------------------
def test_reductions_and_argmax_ties():
    def k(x_ptr, out_ptr, idx_ptr, M: tl.constexpr, N: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
        tl.store(out_ptr + tl.arange(0, M), tl.sum(x, axis=1))
        tl.store(out_ptr + M + tl.arange(0, N), tl.max(x, axis=0))
        tl.store(out_ptr + M + N + tl.arange(0, N), x.min(0))
        tl.store(out_ptr + M + 2 * N, tl.sum(x))
        tl.store(idx_ptr + tl.arange(0, M), tl.argmax(x, axis=1))
        tl.store(idx_ptr + M + tl.arange(0, M), tl.argmin(x, axis=1))
        v, i = tl.max(x, axis=1, return_indices=True)
        tl.store(idx_ptr + 2 * M + tl.arange(0, M), i)

    x = np.array([[1, 5, 5, 2], [7, 7, 7, 7], [0, -1, 3, -1], [9, 1, 9, 1]], np.float32)
    out = np.zeros(4 + 4 + 4 + 1, np.float32)
    idx = np.zeros(12, np.int32)
    run(k, (1,), dict(M=4, N=4), x_ptr=x, out_ptr=out, idx_ptr=idx)
    np.testing.assert_array_equal(out[:4], x.sum(1))
    np.testing.assert_array_equal(out[4:8], x.max(0))
    np.testing.assert_array_equal(out[8:12], x.min(0))
    assert out[12] == x.sum()
    np.testing.assert_array_equal(idx[:4], [1, 0, 2, 0])        # ties -> smallest index
    np.testing.assert_array_equal(idx[4:8], [0, 0, 1, 1])
    np.testing.assert_array_equal(idx[8:], [1, 0, 2, 0])


def test_reduction_types():
    def k(i8_ptr, h_ptr, b_ptr):
        a = tl.load(i8_ptr + tl.arange(0, 8))
        h = tl.load(h_ptr + tl.arange(0, 8))
        b = tl.load(b_ptr + tl.arange(0, 8))
        tl.static_assert(tl.sum(a).dtype == tl.int32)           # widened: no i8 overflow
        tl.static_assert(tl.sum(a.to(tl.uint8)).dtype == tl.uint32)
        tl.static_assert(tl.sum(a < 0).dtype == tl.uint32)
        tl.static_assert(tl.sum(h).dtype == tl.float16)         # Triton keeps f16
        tl.static_assert(tl.sum(h, dtype=tl.float32).dtype == tl.float32)
        tl.static_assert(tl.max(h).dtype == tl.float32)         # max widens < 32 bits
        tl.static_assert(tl.max(a).dtype == tl.int32)
        tl.static_assert(tl.max(b).dtype == tl.float32)         # bf16 -> f32
        tl.static_assert(tl.max(h, 0, return_indices=True)[0].dtype == tl.float16)
        tl.static_assert(tl.cumsum(a, 0).dtype == tl.int32)
        tl.static_assert(tl.cumsum(b, 0).dtype == tl.float32)
        tl.static_assert(tl.xor_sum(a).dtype == tl.int8)
        tl.device_assert(tl.sum(a) == 800, "i8 sum must not wrap")

    run(k, (1,), types={"b_ptr": "*bf16"}, i8_ptr=np.full(8, 100, np.int8),
        h_ptr=np.ones(8, np.float16), b_ptr=np.zeros(8, np.uint16))


def test_f16_sum_accumulates_in_f16_pairwise():
    def k(x_ptr, out_ptr, N: tl.constexpr):
        tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, N))))

    x = np.array([2048, 1, 1, 1, 1, 1, 1, 1], np.float16)
    out = np.zeros(1, np.float16)
    run(k, (1,), dict(N=8), x_ptr=x, out_ptr=out)
    # tree: (2048+1)+(1+1)... level sums: [2049->2048, 2, 2, 2], [2050, 4], [2054] in f16
    level = x.copy()
    while level.size > 1:
        h = level.size // 2
        level = (level[:h].astype(np.float32) + level[h:].astype(np.float32)).astype(np.float16)
    assert out[0] == level[0] == np.float16(2054)


def test_reduce_with_custom_combine_fns():
    def add_combine(a, b):
        return a + b

    def branching_max(a, b):         # branches on its inputs: run element by element
        if a > b:
            return a
        return b

    def argmax_combine(v1, i1, v2, i2):
        gt = (v1 > v2) | ((v1 == v2) & (i1 < i2))
        return tl.where(gt, v1, v2), tl.where(gt, i1, i2)

    def k(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
        tl.store(out_ptr + tl.arange(0, M), tl.reduce(x, 1, add_combine))
        tl.store(out_ptr + M + tl.arange(0, N), tl.reduce(x, 0, branching_max))
        idx = tl.broadcast_to(tl.arange(0, N)[None, :], M, N)
        v, i = tl.reduce((x, idx), 1, argmax_combine)
        tl.store(out_ptr + M + N + tl.arange(0, M), i.to(tl.float32))
        s = tl.reduce(x, 1, add_combine, keep_dims=True)
        tl.static_assert(s.shape == (M, 1))
        tl.store(out_ptr + M + N + M, tl.reduce(x, None, add_combine))

    rng = np.random.default_rng(1)
    x = rng.integers(-5, 5, (4, 8)).astype(np.float32)
    out = np.zeros(4 + 8 + 4 + 1, np.float32)
    run(k, (1,), dict(M=4, N=8), x_ptr=x, out_ptr=out)
    np.testing.assert_array_equal(out[:4], x.sum(1))
    np.testing.assert_array_equal(out[4:12], x.max(0))
    np.testing.assert_array_equal(out[12:16], x.argmax(1))
    assert out[16] == x.sum()


# --- scans ----------------------------------------------------------------------------------------
def test_scans():
    def running_max(a, b):
        return tl.maximum(a, b)

    def k(x_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
        offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, tl.cumsum(x, axis=1))
        tl.store(out_ptr + M * N + offs, tl.cumsum(x, axis=0, reverse=True))
        tl.store(out_ptr + 2 * M * N + offs, tl.cumprod(x, 1))
        tl.store(out_ptr + 3 * M * N + offs, tl.associative_scan(x, 1, running_max))
        tl.store(out_ptr + 4 * M * N + offs, tl.associative_scan(x, 1, running_max, reverse=True))

    x = np.array([[1, 3, 2, 5], [2, -1, 4, 1]], np.int32)
    out = np.zeros((5, 2, 4), np.int32)
    run(k, (1,), dict(M=2, N=4), x_ptr=x, out_ptr=out)
    np.testing.assert_array_equal(out[0], np.cumsum(x, 1))
    np.testing.assert_array_equal(out[1], np.cumsum(x[::-1], 0)[::-1])
    np.testing.assert_array_equal(out[2], np.cumprod(x, 1))
    np.testing.assert_array_equal(out[3], np.maximum.accumulate(x, 1))
    np.testing.assert_array_equal(out[4], np.maximum.accumulate(x[:, ::-1], 1)[:, ::-1])


def test_scan_with_tuple_and_branching_combine():
    def first_nonzero(v1, seen1, v2, seen2):      # "carry the first nonzero", branching
        if seen1:
            return v1, seen1
        return v2, seen2

    def k(x_ptr, out_ptr, N: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, N))
        v, s = tl.associative_scan((x, x != 0), 0, first_nonzero)
        tl.store(out_ptr + tl.arange(0, N), v)

    x = np.array([0, 0, 4, 0, 7, 0, 0, 1], np.int32)
    out = np.zeros(8, np.int32)
    run(k, (1,), dict(N=8), x_ptr=x, out_ptr=out)
    np.testing.assert_array_equal(out, [0, 0, 4, 4, 4, 4, 4, 4])


# --- kernels: softmax, layernorm, matmul --------------------------------------------------------
def softmax_kernel(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


def test_softmax_kernel_and_builtin():
    x = np.random.default_rng(2).standard_normal((5, 37)).astype(np.float32)
    out = np.zeros_like(x)
    run(softmax_kernel, (5,), dict(BLOCK=64), x_ptr=x, out_ptr=out, stride=37, n_cols=37)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)

    row = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    sm = apply_unary(tl.softmax, row, np.float32, block=64)
    np.testing.assert_allclose(sm, np.exp(row - row.max()) / np.exp(row - row.max()).sum(),
                               rtol=1e-6)


def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    rstd = 1 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n_cols + cols, (d * rstd * w + b).to(tl.float16), mask=mask)


def test_layernorm():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 100)).astype(np.float16)
    w = rng.standard_normal(100).astype(np.float32)
    b = rng.standard_normal(100).astype(np.float32)
    y = np.zeros_like(x)
    run(layernorm_kernel, (3,), dict(BLOCK=128), x_ptr=x, w_ptr=w, b_ptr=b, y_ptr=y,
        n_cols=100, eps=1e-5)
    xf = x.astype(np.float64)
    ref = (xf - xf.mean(1, keepdims=True)) / np.sqrt(xf.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-3)


def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_matmul_with_dot_loop(dtype):
    rng = np.random.default_rng(5)
    M, N, K = 37, 45, 70
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    c = np.zeros((M, N), np.float32)
    run(matmul_kernel, (-(-M // 16), -(-N // 32)), dict(BM=16, BN=32, BK=16),
        a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, sam=K, sak=1, sbk=N, sbn=1, scm=N, scn=1)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


def test_dot_int8_and_types():
    def k(a_ptr, b_ptr, c_ptr):
        r = tl.arange(0, 16)
        a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
        c = tl.dot(a, b)
        tl.static_assert(c.dtype == tl.int32)
        tl.store(c_ptr + r[:, None] * 16 + r[None, :], c)

    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (16, 16)).astype(np.int8)
    b = rng.integers(-128, 128, (16, 16)).astype(np.int8)
    c = np.zeros((16, 16), np.int32)
    run(k, (1,), a_ptr=a, b_ptr=b, c_ptr=c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


# --- shapes ---------------------------------------------------------------------------------------
def test_shape_ops():
    def k(out_ptr):
        x = tl.arange(0, 8)
        m = tl.reshape(x, 2, 4)
        tl.static_assert(m.shape == (2, 4))
        t = tl.trans(m)
        tl.static_assert(t.shape == (4, 2) and m.T.shape == (4, 2))
        p = tl.permute(tl.reshape(x, (2, 2, 2)), (2, 0, 1))
        j = tl.join(x, x + 100)
        tl.static_assert(j.shape == (8, 2))
        lo, hi = tl.split(j)
        e = tl.expand_dims(x, (0, 2))
        tl.static_assert(e.shape == (1, 8, 1))
        bc = tl.broadcast_to(x[None, :], 4, 8)
        a, b = tl.broadcast(x[:, None], x[None, :])
        tl.static_assert(a.shape == (8, 8) and bc.shape == (4, 8))
        tl.store(out_ptr + tl.arange(0, 8), tl.ravel(t))
        tl.store(out_ptr + 8 + tl.arange(0, 8), tl.ravel(p))
        tl.store(out_ptr + 16 + tl.arange(0, 8), hi)
        tl.store(out_ptr + 24 + tl.arange(0, 8), m.reshape(8) + lo)

    out = np.zeros(32, np.int32)
    run(k, (1,), out_ptr=out)
    x = np.arange(8)
    np.testing.assert_array_equal(out[:8], x.reshape(2, 4).T.ravel())
    np.testing.assert_array_equal(out[8:16], x.reshape(2, 2, 2).transpose(2, 0, 1).ravel())
    np.testing.assert_array_equal(out[16:24], x + 100)
    np.testing.assert_array_equal(out[24:], 2 * x)


def test_full_zeros_like_and_power_of_two_shapes():
    def k(out_ptr):
        f = tl.full((2, 4), 3, tl.int16)
        z = tl.zeros_like(f)
        o = tl.full_like(f, 1.5, dtype=tl.float32)
        tl.static_assert(z.dtype == tl.int16 and o.dtype == tl.float32)
        tl.store(out_ptr + tl.arange(0, 8), tl.ravel(f + z + o))

    out = np.zeros(8, np.float32)
    run(k, (1,), out_ptr=out)
    np.testing.assert_array_equal(out, np.full(8, 4.5))

    def bad(out_ptr):
        tl.arange(0, 6)

    with pytest.raises(SemanticError, match="power of two"):
        run(bad, (1,), out_ptr=out)


# --- memory ---------------------------------------------------------------------------------------
def test_out_of_bounds_load_names_the_op_and_lane():
    def k(x_ptr, out_ptr):
        offs = tl.arange(0, 128)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))

    x = np.zeros(17, np.float32)
    out = np.zeros(128, np.float32)
    with pytest.raises(InterpreterError,
                       match=r"tl\.load: address out of bounds of every array argument "
                             r"\(lane 17 of 128") as e:
        run(k, (1,), x_ptr=x, out_ptr=out)
    assert "'x_ptr'" in str(e.value) and "past the end" in str(e.value)
    assert any("program (0, 0, 0)" in n for n in e.value.__notes__)


def test_out_of_bounds_store_and_masked_lanes_untouched():
    def k(x_ptr, n):
        offs = tl.arange(0, 16) - 1
        tl.store(x_ptr + offs, 1.0, mask=(offs >= 0) & (offs < n))

    x = np.zeros(10, np.float32)
    run(k, (1,), x_ptr=x, n=10)
    np.testing.assert_array_equal(x, np.ones(10))

    def k2(x_ptr):
        tl.store(x_ptr + tl.arange(0, 16) - 1, 1.0)

    with pytest.raises(InterpreterError, match=r"tl\.store: .*lane 0 of 16.*starts 4 bytes "
                                               r"before argument 'x_ptr'"):
        run(k2, (1,), x_ptr=x)


def test_access_before_a_page_aligned_array_names_it():
    # An array at page offset 0 starts its virtual window at the window's first byte, so
    # one element before it lies below the window (below every window for the first
    # argument): the message still says "before" that argument (it once said ~10^16
    # bytes past its end, whenever the allocator happened to return such an address).
    import mmap
    page = mmap.mmap(-1, 4096)
    x = np.frombuffer(page, np.float32, count=10)
    assert x.ctypes.data % 4096 == 0

    def k(x_ptr):
        tl.store(x_ptr + tl.arange(0, 16) - 1, 1.0)

    with pytest.raises(InterpreterError, match=r"starts 4 bytes before argument 'x_ptr'"):
        run(k, (1,), x_ptr=x)


def test_overrun_into_a_neighbouring_array_is_caught():
    # Both arrays come from one buffer: x is immediately followed by y in memory, so
    # x_ptr + 8 is a valid address of y. The pointer derives from x: it is an error.
    buf = np.zeros(16, np.float32)
    x, y = buf[:8], buf[8:]

    def k(x_ptr, y_ptr):
        tl.store(x_ptr + tl.arange(0, 16), 1.0)

    with pytest.raises(InterpreterError, match=r"lane 8 of 16.*past the end of argument 'x_ptr'"):
        run(k, (1,), x_ptr=x, y_ptr=y)
    assert (buf == 0).all()


def test_pointer_table_with_real_addresses():
    # A table of host addresses (as in grouped GEMM): accepted when each address
    # falls inside an argument.
    a = np.arange(4, dtype=np.float32)
    b = np.arange(4, dtype=np.float32) * 10
    table = np.array([b.ctypes.data, a.ctypes.data], np.int64)
    out = np.zeros(8, np.float32)

    def k(table_ptr, a_ptr, b_ptr, out_ptr):
        for g in range(2):
            p = tl.load(table_ptr + g).to(tl.pointer_type(tl.float32))
            tl.store(out_ptr + g * 4 + tl.arange(0, 4), tl.load(p + tl.arange(0, 4)))

    run(k, (1,), table_ptr=table, a_ptr=a, b_ptr=b, out_ptr=out)
    np.testing.assert_array_equal(out, np.concatenate([b, a]))


def test_read_only_array_cannot_be_stored_to():
    def k(x_ptr):
        tl.store(x_ptr + tl.arange(0, 4), 1)

    x = np.zeros(4, np.int32)
    x.flags.writeable = False
    with pytest.raises(InterpreterError, match="read-only"):
        run(k, (1,), x_ptr=x)


def test_scalar_pointer_and_bool_memory():
    def k(flags_ptr, out_ptr):
        f = tl.load(flags_ptr + tl.arange(0, 4))
        tl.static_assert(f.dtype == tl.int1)
        tl.store(out_ptr, tl.sum(f.to(tl.int32)))
        tl.store(flags_ptr + 1, True)

    flags = np.array([True, False, True, False])
    out = np.zeros(1, np.int32)
    run(k, (1,), flags_ptr=flags, out_ptr=out)
    assert out[0] == 2 and flags.tolist() == [True, True, True, False]


def test_block_pointers_with_boundary_check():
    def k(a_ptr, out_ptr, M, N, sm, sn, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        src = tl.make_block_ptr(a_ptr, (M, N), (sm, sn), (pid * BM, 0), (BM, BN), (1, 0))
        dst = tl.make_block_ptr(out_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
        for _ in range(0, tl.cdiv(N, BN)):
            t = tl.load(src, boundary_check=(0, 1), padding_option="zero")
            tl.store(dst, t + 1, boundary_check=(0, 1))
            src = tl.advance(src, (0, BN))
            dst = tl.advance(dst, (0, BN))

    a = np.arange(10 * 13, dtype=np.float32).reshape(10, 13)
    out = np.zeros((10, 13), np.float32)
    run(k, (3,), dict(BM=4, BN=8), a_ptr=a, out_ptr=out, M=10, N=13, sm=13, sn=1)
    np.testing.assert_array_equal(out, a + 1)

    def pad(a_ptr, out_ptr):
        p = tl.make_block_ptr(a_ptr, (3, 3), (3, 1), (1, 1), (4, 4), (1, 0))
        t = tl.load(p, boundary_check=(0, 1), padding_option="nan")
        q = tl.make_block_ptr(out_ptr, (4, 4), (4, 1), (0, 0), (4, 4), (1, 0))
        tl.store(q, t)

    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    out = np.zeros((4, 4), np.float32)
    run(pad, (1,), a_ptr=a, out_ptr=out)
    expect = np.full((4, 4), np.nan, np.float32)
    expect[:2, :2] = a[1:, 1:]
    np.testing.assert_array_equal(out, expect)


# --- atomics ----------------------------------------------------------------------------------------
def test_histogram_with_atomic_add():
    def hist(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x_ptr + offs, mask=mask)
        tl.atomic_add(bins_ptr + v, 1, mask=mask)

    x = np.random.default_rng(7).integers(0, 10, 1000).astype(np.int32)
    bins = np.zeros(10, np.int32)
    run(hist, (8,), dict(BLOCK=128), x_ptr=x, bins_ptr=bins, n=1000)
    np.testing.assert_array_equal(bins, np.bincount(x, minlength=10))


def test_atomics_return_old_values_sequentially():
    def k(p_ptr, old_ptr):
        offs = tl.arange(0, 8)
        old = tl.atomic_add(p_ptr + offs % 2, offs + 1, mask=offs < 6)
        tl.store(old_ptr + offs, old)
        tl.store(old_ptr + 8, tl.atomic_max(p_ptr + 2, 7))
        tl.store(old_ptr + 9, tl.atomic_min(p_ptr + 2, -3))
        tl.store(old_ptr + 10, tl.atomic_xchg(p_ptr + 3, 42))
        tl.store(old_ptr + 11, tl.atomic_cas(p_ptr + 3, 42, 5))
        tl.store(old_ptr + 12, tl.atomic_cas(p_ptr + 3, 42, 6))
        tl.store(old_ptr + 13, tl.atomic_or(p_ptr + 4, 6))
        tl.store(old_ptr + 14, tl.atomic_and(p_ptr + 4, 3))
        tl.store(old_ptr + 15, tl.atomic_xor(p_ptr + 4, 1))

    p = np.array([0, 100, 1, 9, 1], np.int32)
    old = np.zeros(16, np.int32)
    run(k, (1,), p_ptr=p, old_ptr=old)
    # lanes 0, 2, 4 add 1, 3, 5 to p[0]; lanes 1, 3, 5 add 2, 4, 6 to p[1]; lanes 6, 7 masked
    np.testing.assert_array_equal(old[:8], [0, 100, 1, 102, 4, 106, 0, 0])
    np.testing.assert_array_equal(old[8:], [1, 7, 9, 42, 5, 1, 7, 3])
    np.testing.assert_array_equal(p, [9, 112, -3, 5, 2])


def test_float_atomic_add():
    def k(p_ptr):
        tl.atomic_add(p_ptr + tl.zeros((8,), tl.int32), 0.5)

    p = np.zeros(1, np.float16)
    run(k, (3,), p_ptr=p)
    assert p[0] == 12.0


# --- Philox ----------------------------------------------------------------------------------------
MASK32 = 0xFFFFFFFF


def philox_reference(c, k, rounds=10):
    """Philox 4x32 as written by Salmon et al. / Random123."""
    c = list(c)
    k0, k1 = k
    for _ in range(rounds):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & MASK32, p1 & MASK32,
             ((p0 >> 32) ^ c[3] ^ k1) & MASK32, p0 & MASK32]
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return c


def triton_randint4x_reference(seed, offset, offset_bits=32):
    """triton.language.random.randint4x for one (seed, offset), in plain Python."""
    seed &= 2**64 - 1                      # seed.to(tl.uint64) sign-extends negative seeds
    hi = (offset >> 32) & MASK32 if offset_bits > 32 else 0
    return philox_reference([offset & MASK32, hi, 0, 0], [seed & MASK32, seed >> 32])


def uniform_reference(word):
    i = word - 2**32 if word >= 2**31 else word
    if i < 0:
        i = -i - 1
    return np.float32(np.float32(i) * np.float32(4.6566127342e-10))


def test_philox_reference_known_answers():
    # Random123 kat_vectors, philox4x32 10 rounds.
    assert philox_reference([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox_reference([MASK32] * 4, [MASK32] * 2) == \
        [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert philox_reference([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
                            [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_philox_known_answer_through_the_interpreter():
    def k(out_ptr):
        a, b, c, d = tl.randint4x(0, tl.zeros((2,), tl.int32))
        tl.store(out_ptr + tl.arange(0, 2) * 4, a)
        tl.store(out_ptr + tl.arange(0, 2) * 4 + 1, b)
        tl.store(out_ptr + tl.arange(0, 2) * 4 + 2, c)
        tl.store(out_ptr + tl.arange(0, 2) * 4 + 3, d)

    out = np.zeros(8, np.uint32)
    run(k, (1,), out_ptr=out)
    assert out.tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8] * 2


@pytest.mark.parametrize("seed", [0, 1, 12345, -7, 2**40 + 17])
def test_philox_matches_triton(seed):
    def k(seed, w_ptr, u_ptr, n_ptr, w64_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK) * 1000003 - 7
        a, b, c, d = tl.randint4x(seed, offs)
        tl.static_assert(a.dtype == tl.uint32)
        tl.store(w_ptr + tl.arange(0, BLOCK) * 4, a)
        tl.store(w_ptr + tl.arange(0, BLOCK) * 4 + 1, b)
        tl.store(w_ptr + tl.arange(0, BLOCK) * 4 + 2, c)
        tl.store(w_ptr + tl.arange(0, BLOCK) * 4 + 3, d)
        tl.device_assert(tl.randint(seed, offs) == a, "randint is word 0 of randint4x")
        tl.store(u_ptr + tl.arange(0, BLOCK), tl.rand(seed, offs))
        tl.store(n_ptr + tl.arange(0, BLOCK), tl.randn(seed, offs))
        big = offs.to(tl.int64) * 4000000000
        tl.store(w64_ptr + tl.arange(0, BLOCK), tl.randint(seed, big))

    B = 16
    words = np.zeros(4 * B, np.uint32)
    uni = np.zeros(B, np.float32)
    nrm = np.zeros(B, np.float32)
    w64 = np.zeros(B, np.uint32)
    run(k, (1,), dict(BLOCK=B), seed=seed, w_ptr=words, u_ptr=uni, n_ptr=nrm, w64_ptr=w64)
    for i in range(B):
        off = i * 1000003 - 7
        ref = triton_randint4x_reference(seed, off)
        assert words[4 * i:4 * i + 4].tolist() == ref
        assert uni[i] == uniform_reference(ref[0])
        u1 = max(np.float32(1e-7), uniform_reference(ref[0]))
        u2 = uniform_reference(ref[1])
        expect = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)
        assert abs(nrm[i] - expect) <= 1e-5 * max(1.0, abs(expect))
        assert w64[i] == triton_randint4x_reference(seed, off * 4000000000, 64)[0]
    assert ((uni >= 0) & (uni < 1)).all()


# --- debugging builtins ---------------------------------------------------------------------------
def test_device_print_and_static_print(capsys):
    def k(x_ptr):
        tl.static_print("static", 3)
        tl.device_print("x =", tl.load(x_ptr + tl.arange(0, 4)))
        tl.device_print("h", tl.program_id(0) + 10, hex=True)

    run(k, (2,), x_ptr=np.arange(4, dtype=np.int32))
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["static 3", "(0, 0, 0) x = [0 1 2 3]", "(0, 0, 0) h 0x0000000a",
                     "static 3", "(1, 0, 0) x = [0 1 2 3]", "(1, 0, 0) h 0x0000000b"]


def test_device_assert_raises_with_message_and_lane():
    def k(x_ptr):
        x = tl.load(x_ptr + tl.arange(0, 8))
        tl.device_assert(x < 5, "x must be small")

    with pytest.raises(AssertionError, match=r"program \(0, 0, 0\): device_assert failed: "
                                             r"x must be small \(lane 6 of 8\)"):
        run(k, (1,), x_ptr=np.array([0, 1, 2, 3, 4, 4, 9, 1], np.int32))


def test_static_assert_and_hints():
    def k(x_ptr, BLOCK: tl.constexpr):
        offs = tl.multiple_of(tl.arange(0, BLOCK), 4)
        offs = tl.max_contiguous(tl.max_constancy(offs, 1), BLOCK)
        tl.assume(BLOCK > 0)
        tl.debug_barrier()
        tl.static_assert(BLOCK == 4, "BLOCK must be 4")
        tl.store(x_ptr + offs, offs)

    x = np.zeros(4, np.int32)
    run(k, (1,), dict(BLOCK=4), x_ptr=x)
    np.testing.assert_array_equal(x, np.arange(4))
    with pytest.raises(AssertionError, match="BLOCK must be 4"):
        run(k, (1,), dict(BLOCK=8), x_ptr=np.zeros(8, np.int32))


# --- errors and the interpreter's own contract --------------------------------------------------
def test_tile_truth_value_is_an_error():
    def k(x_ptr):
        if tl.arange(0, 4) < 2:
            pass

    with pytest.raises(TypeError, match="only scalars"):
        run(k, (1,), x_ptr=np.zeros(1))


def test_impl_is_restored_after_errors():
    def k(x_ptr):
        raise ValueError("boom")

    assert core._interpreter_impl is None
    with pytest.raises(ValueError, match="boom"):
        run(k, (1,), x_ptr=np.zeros(1))
    assert core._interpreter_impl is None
    with pytest.raises(RuntimeError, match="can only be used inside"):
        tl.program_id(0)


def test_argument_binding():
    def k(a, b, c, d, e, out_ptr, C: tl.constexpr = 5):
        tl.static_assert(a.dtype == tl.int32 and b.dtype == tl.int64 and c.dtype == tl.float32)
        tl.static_assert(d.dtype == tl.int1 and e.dtype == tl.float16 and C == 5)
        tl.store(out_ptr, b)

    out = np.zeros(1, np.int64)
    run(k, (1,), a=1, b=2**40, c=1.0, d=True, e=np.float16(2), out_ptr=out)
    assert out[0] == 2**40
    with pytest.raises(TypeError, match="missing"):
        run(k, (1,), a=1)
    with pytest.raises(TypeError, match="no parameter"):
        run(k, (1,), a=1, b=2, c=1.0, d=True, e=1.0, out_ptr=out, zz=3)


def test_constexpr_parameters_have_python_operators():
    def double(x):
        return x * 2

    def k(out_ptr, bias_ptr, BLOCK: tl.constexpr, FN: tl.constexpr, SHAPE: tl.constexpr):
        HALF: tl.constexpr = BLOCK // 2
        tl.static_assert(BLOCK > 16 and HALF == 16 and isinstance(HALF, tl.constexpr))
        offs = tl.arange(0, HALF) + HALF * 0
        v = FN(offs) + tl.zeros(SHAPE, tl.int32)
        if bias_ptr is not None:
            v += tl.load(bias_ptr)
        tl.store(out_ptr + offs, v)

    out = np.zeros(16, np.int32)
    run(k, (1,), dict(BLOCK=32, FN=double, SHAPE=(16,)), out_ptr=out, bias_ptr=None)
    np.testing.assert_array_equal(out, np.arange(16) * 2)
    run(k, (1,), dict(BLOCK=32, FN=double, SHAPE=(16,)), out_ptr=out,
        bias_ptr=np.array([5], np.int32))
    np.testing.assert_array_equal(out, np.arange(16) * 2 + 5)


def test_types_override_scalar_arguments():
    def k(n, out_ptr):
        tl.static_assert(n.dtype == tl.int64)
        tl.store(out_ptr, n * 2**33)

    out = np.zeros(1, np.int64)
    run(k, (1,), types={"n": "i64"}, n=3, out_ptr=out)
    assert out[0] == 3 * 2**33


def test_every_builtin_has_an_implementation():
    names = [getattr(core, n).__tessera_builtin__ for n in dir(core)
             if core.is_builtin(getattr(core, n))]
    assert len(names) > 70
    for name in names:
        impl = getattr(Builtins, name, None)
        assert impl is not None, name
        # the interpreter accepts every parameter the language declares
        declared = set(getattr(core, name).__tessera_signature__.parameters)
        accepted = set(inspect.signature(impl).parameters) - {"self"}
        assert declared <= accepted, (name, declared - accepted)
