"""tl.erf, tl.tanh and tl.sigmoid of f32 (and f16/bf16, computed in f32) on NVIDIA GPUs use the SFU
(compiler/codegen/nvptx/math_nvptx.cpp): without a GPU, the PTX is checked for the
ex2.approx form, no division and a short instruction count, and assembled; on a GPU the
results are swept densely against float64 references within the documented ulp bounds
(compiler/codegen/nvptx/math_nvptx.h)."""
import math
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import ulp_distance
from ptxas_check import assemble

# Documented in math_nvptx.h; measured on an H100 (the GPU tests below).
MAX_ULP_F32 = {"erf": 2, "tanh": 3, "sigmoid": 4}


@tessera.kernel
def erf_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.erf(tl.load(x_ptr + offs, mask=m, other=0)), mask=m)


@tessera.kernel
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.tanh(tl.load(x_ptr + offs, mask=m, other=0)), mask=m)


@tessera.kernel
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.sigmoid(tl.load(x_ptr + offs, mask=m, other=0)), mask=m)


KERNELS = {"erf": erf_kernel, "tanh": tanh_kernel, "sigmoid": sigmoid_kernel}
# Instructions of the kernel body, not counting declarations, labels and braces.
_INSTR = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)", re.M)



def _ptx(name, dtype):
    # BLOCK = 128 over 4 warps: one element per thread, so the body is one evaluation.
    ck = tessera.compile(KERNELS[name], signature=f"*{dtype},*{dtype},i32", constexprs={"BLOCK": 128},
                         target="cuda:90a")
    return ck.asm["ptx"]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", ["erf", "tanh", "sigmoid"])
def test_erf_tanh_ptx_uses_the_sfu_without_division(name, dtype, tmp_path):
    ptx = _ptx(name, dtype)
    body = ptx[ptx.index("{", ptx.index(".entry")):]
    ops = [m.group(1) for m in _INSTR.finditer(body)]
    # sigmoid keeps denormal results: ex2.approx without ftz
    assert ("ex2.approx.f32" if name == "sigmoid" else "ex2.approx.ftz.f32") in ops
    assert not any(o.startswith("div.") for o in ops), f"{name} must not divide (div.rn.f32 is ~10 instructions)"
    if name in ("tanh", "sigmoid"):
        assert "rcp.approx.ftz.f32" in ops
    # The shared polynomial lowering took ~80 instructions per element; this one ~25,
    # plus the kernel's own loads, stores and index arithmetic.
    arith = [o for o in ops if o.split(".")[0] in ("fma", "mul", "add", "sub", "min", "max", "selp", "ex2", "rcp",
                                                    "abs", "neg", "and", "or", "setp")]
    assert len(arith) <= 40, f"{len(arith)} arithmetic instructions for one {name}:\n{ptx}"
    assemble(ptx, "90a", tmp_path)


def test_f64_erf_tanh_keep_the_shared_polynomials():
    for name in ("erf", "tanh", "sigmoid"):
        ptx = _ptx(name, "fp64")
        assert "ex2.approx" not in ptx and "fma.rn.f64" in ptx


# --- on the GPU --------------------------------------------------------------------------------
def _ref(name, x):
    x = np.asarray(x, np.float64)
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-x))
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sweep_f32():
    """Every region: tiny and denormal inputs, both sides of the split points (erf 1,
    tanh 0.6), where the result rounds to 1, a dense uniform sweep, and special values."""
    rng = np.random.default_rng(7)
    parts = [np.linspace(-5, 5, 400001), np.linspace(-12, 12, 100001), rng.uniform(0.55, 1.1, 100000),
             np.exp2(rng.uniform(-149, 0, 20000)) * rng.choice([-1, 1], 20000),
             rng.uniform(80, 104, 20000),  # sigmoid(-x): results near and below 2^-126
             np.array([1.0, np.nextafter(np.float32(1), np.float32(0)), 0.6, np.nextafter(np.float32(0.6), np.float32(1)),
                       3.92, 8.7, 10.0, 17.0, 87.3, 103.9, 104.0, 1e30, np.finfo(np.float32).max])]
    x = np.concatenate(parts).astype(np.float32)
    return np.concatenate([x, -x])


def _run_on_gpu(name, x):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    xt = torch.from_numpy(np.ascontiguousarray(x)).cuda()
    out = torch.empty_like(xt)
    KERNELS[name][(tessera.cdiv(x.size, 1024),)](xt, out, x.size, BLOCK=1024)
    return out.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["erf", "tanh", "sigmoid"])
def test_erf_tanh_f32_within_the_documented_ulp_bound(name):
    x = _sweep_f32()
    got = _run_on_gpu(name, x)
    want = _ref(name, x)
    d = ulp_distance(got, want.astype(np.float32))
    worst = int(np.argmax(d))
    print(f"tl.{name} f32 on the GPU: max {d.max()} ulp at x={x[worst]!r}")
    assert d.max() <= MAX_ULP_F32[name], (f"tl.{name}: {int((d > MAX_ULP_F32[name]).sum())} elements over "
                                         f"{MAX_ULP_F32[name]} ulp; worst {d.max()} ulp at x={x[worst]!r}: "
                                         f"got {got[worst]!r} want {want[worst]!r}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["erf", "tanh"])
def test_erf_tanh_special_values_on_the_gpu(name):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40], np.float32)
    got = _run_on_gpu(name, x)
    np.testing.assert_array_equal(got[:4], np.array([0.0, -0.0, 1.0, -1.0], np.float32))
    np.testing.assert_array_equal(np.signbit(got[:2]), [False, True])
    assert np.isnan(got[4])
    # Denormal inputs give denormal outputs (erf(x) ≈ 1.128 x, tanh(x) ≈ x), not 0.
    assert (ulp_distance(got[5:], _ref(name, x[5:]).astype(np.float32)) <= 1).all(), got[5:]


@pytest.mark.gpu
def test_sigmoid_special_values_on_the_gpu():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 104.0, -104.0, -95.0], np.float32)
    got = _run_on_gpu("sigmoid", x)
    np.testing.assert_array_equal(got[[0, 1, 2, 3, 5, 6, 7, 8]],
                                  np.array([0.5, 0.5, 1.0, 0.0, 0.5, 0.5, 1.0, 0.0], np.float32))
    assert np.isnan(got[4])
    assert 0 < got[9] < np.finfo(np.float32).tiny        # e^-95: a denormal, not flushed to 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["erf", "tanh", "sigmoid"])
def test_erf_tanh_f16_round_the_f32_result_once(name):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = np.linspace(-6, 6, 20001).astype(np.float16)
    if name == "sigmoid":  # down to fp16's denormals: sigmoid(-17) = 4.1e-8
        x = np.linspace(-17, 12, 20001).astype(np.float16)
    xt = torch.from_numpy(x).cuda()
    out = torch.empty_like(xt)
    KERNELS[name][(tessera.cdiv(x.size, 1024),)](xt, out, x.size, BLOCK=1024)
    d = ulp_distance(out.cpu().numpy(), _ref(name, x).astype(np.float16))
    assert d.max() <= 1, f"tl.{name} f16: max {d.max()} ulp"


# --- exp/exp2 of a clamped argument (compiler/codegen/nvptx/gpu_lowering.cpp) -----------------
@tessera.kernel
def exp_clamped_kernel(x_ptr, out_ptr, n, LO: tl.constexpr, EXP2: tl.constexpr, BLOCK: tl.constexpr,
                       PROPAGATE_NAN: tl.constexpr = False):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    if PROPAGATE_NAN:
        x = tl.maximum(x, LO, propagate_nan=tl.PropagateNan.ALL)
    else:
        x = tl.maximum(x, LO)
    tl.store(out_ptr + offs, tl.exp2(x) if EXP2 else tl.exp(x), mask=m)


def _ex2_forms(exp2, lo, propagate_nan=False):
    ck = tessera.compile(exp_clamped_kernel, signature="*fp32,*fp32,i32",
                         constexprs={"LO": lo, "EXP2": exp2, "BLOCK": 128, "PROPAGATE_NAN": propagate_nan},
                         target="cuda:90a")
    ptx = ck.asm["ptx"]
    return ptx.count("ex2.approx.ftz.f32"), ptx.count("ex2.approx.f32"), ptx


@pytest.mark.parametrize("propagate_nan", [False, True])
@pytest.mark.parametrize("exp2, lo, short", [(True, -126.0, True), (True, -10.0, True), (True, -127.0, False),
                                             (False, -87.0, True), (False, -88.0, False)])
def test_ex2_of_an_argument_clamped_above_the_denormals_is_the_short_form(exp2, lo, short, propagate_nan, tmp_path):
    # ex2.approx.f32 keeps denormal results: ptxas wraps the SFU in a compare, a halving
    # and a squaring (4 instructions). exp2(max(x, c >= -126)) (exp: c >= -87) never
    # has a denormal result, so it takes the .ftz form, the SFU alone; below the
    # bound the result could be denormal and the full form stays.
    # propagate_nan (llvm.maximum, max.NaN.f32) qualifies too: ex2 of NaN is NaN in both forms.
    ftz, full, ptx = _ex2_forms(exp2, lo, propagate_nan)
    assert (ftz, full) == ((1, 0) if short else (0, 1)), ptx
    assert ("max.NaN.f32" in ptx) == propagate_nan
    assemble(ptx, "90a", tmp_path)


def test_ex2_without_a_clamp_keeps_denormal_results():
    # maximum(x, -inf) is no bound: the full form (tests/python/test_cpu_elementwise.py
    # checks exp's denormal results on a GPU).
    ck = tessera.compile(exp_clamped_kernel, signature="*fp32,*fp32,i32",
                         constexprs={"LO": -float("inf"), "EXP2": True, "BLOCK": 128}, target="cuda:90a")
    assert "ex2.approx.f32" in ck.asm["ptx"] and "ex2.approx.ftz.f32" not in ck.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("propagate_nan", [False, True])
@pytest.mark.parametrize("exp2, lo", [(True, -126.0), (False, -87.0)])
def test_ex2_clamped_short_form_matches_numpy_on_the_gpu(exp2, lo, propagate_nan):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = np.concatenate([np.linspace(-200, 80, 100001), [lo, np.nextafter(np.float32(lo), np.float32(0)), 0.0, -np.inf,
                                                         np.nan]]).astype(np.float32)
    xt = torch.from_numpy(x).cuda()
    out = torch.empty_like(xt)
    exp_clamped_kernel[(tessera.cdiv(x.size, 1024),)](xt, out, x.size, LO=lo, EXP2=exp2, BLOCK=1024,
                                                      PROPAGATE_NAN=propagate_nan)
    got = out.cpu().numpy().astype(np.float64)
    if propagate_nan:
        assert np.isnan(got[np.isnan(x)]).all()
        got, x = got[~np.isnan(x)], x[~np.isnan(x)]
    xc = np.maximum(np.where(np.isnan(x), lo, x), lo).astype(np.float64)  # maxnum(nan, lo) = lo
    want = np.exp2(xc) if exp2 else np.exp(xc)
    rel = np.abs(got - want) / want
    # ex2.approx: relative error about 2^-22; exp also rounds x·log2 e (|x|·2^-24).
    bound = 2.0 ** -21 + (0 if exp2 else np.abs(xc) * 2.0 ** -23)
    assert (rel <= bound).all(), (x[np.argmax(rel - bound)], rel.max())
    assert (got > 0).all()  # the clamp keeps every result a normal number, never 0


@tessera.kernel
def exp2_of_kernel(x_ptr, out_ptr, n, FORM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    a = tl.minimum(tl.abs(x), 6.0)
    if FORM == 0:    # a Horner chain in a in [0, 6] (the normal tail's shape): [-35.8, -1]
        q = tl.fma(tl.fma(tl.fma(8.47e-06, a, -0.0527), a, -1.151), a, -1.0)
    elif FORM == 1:  # [-280, -100]: results below 2^-126
        q = a * -30.0 - 100.0
    elif FORM == 2:  # unbounded
        q = x * 0.5 - 1.0
    else:            # clamped (the softmax kernels' form)
        q = tl.maximum(x, -126.0)
    tl.store(out_ptr + offs, tl.exp2(q), mask=m)


@pytest.mark.parametrize("form,ftz", [(0, True), (1, False), (2, False), (3, True)],
                         ids=["horner-in-a-clamp", "below-2^-126", "unbounded", "max-clamp"])
def test_exp2_takes_ftz_where_the_argument_is_bounded(form, ftz, tmp_path):
    # The NVPTX lowering takes ex2.approx.ftz (the SFU alone) where it can prove the argument
    # at or above -126 from the IR (compiler/codegen/common/float_range.h), ex2.approx.f32
    # (denormal results kept: four instructions) elsewhere.
    ck = tessera.compile(exp2_of_kernel, signature="*fp32,*fp32,i32", constexprs={"FORM": form, "BLOCK": 128},
                         target="cuda:90a")
    ptx = ck.asm["ptx"]
    assert ("ex2.approx.ftz.f32" in ptx) == ftz and ("ex2.approx.f32" in ptx) == (not ftz), ptx
    assemble(ptx, "90a", tmp_path)
