"""Float % on the GPU is C fmod, exact (compiler/codegen/nvptx/float_remainder_nvptx.cpp):
the PTX has no quotient-based expansion (LLVM's frem lowering, x - trunc(x / y) * y,
gave fmod(1e10f, 3) = 256), it assembles, and on a GPU it agrees with numpy bit for
bit on hard cases (huge exponent gaps, subnormals, signed zeros)."""

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble


@tessera.kernel
def fmod_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m, other=1) % tl.load(y_ptr + offs, mask=m, other=1), mask=m)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32", "fp64"])
def test_float_remainder_ptx_is_the_exact_loop_and_assembles(dtype, tmp_path):
    ck = tessera.compile(fmod_kernel, signature=f"*{dtype},*{dtype},*{dtype},i32", constexprs={"BLOCK": 128},
                         target="cuda:90a")
    ptx = ck.asm["ptx"]
    assert "cvt.rzi" not in ptx, "float % must not be the inexact trunc(x / y) expansion"
    assert "div." not in ptx, "float % must not divide"
    assert "clz.b" in ptx  # the significands are normalized with a count of leading zeros
    assemble(ptx, "90a", tmp_path)


def _hard_cases(dtype):
    fi = np.finfo(dtype)
    tiny = fi.smallest_subnormal
    with np.errstate(over="ignore"):
        pairs = [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (1e10, 3.0), (1.0, 0.1), (-1.0, 0.1), (0.0, 1.0), (-0.0, 1.0),
                 (-6.0, 3.0), (6.0, -3.0), (float(fi.max), 3.0), (float(fi.max), float(tiny)),
                 (float(fi.max), float(fi.tiny) * 1.5), (float(tiny) * 7, float(tiny) * 2),
                 (float(fi.tiny) * 3, float(tiny) * 5), (5.0, float(fi.max)), (np.inf, 1.0), (1.0, np.inf),
                 (-3.0, np.inf), (np.nan, 1.0), (1.0, np.nan), (5.0, 0.0), (-5.0, -0.0), (float(fi.tiny), 1.0)]
        x = np.array([p[0] for p in pairs], dtype)
        y = np.array([p[1] for p in pairs], dtype)
    rng = np.random.default_rng(5)
    with np.errstate(over="ignore"):
        rx = (rng.standard_normal(2000) * np.exp2(rng.uniform(-20, 20, 2000))).astype(dtype)
        ry = (rng.standard_normal(2000) * np.exp2(rng.uniform(-20, 20, 2000))).astype(dtype)
    return np.concatenate([x, rx]), np.concatenate([y, ry])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_remainder_on_the_gpu_is_exact_fmod(dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x, y = _hard_cases(dtype)
    xt, yt = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    out = torch.full_like(xt, 12345)
    fmod_kernel[(tessera.cdiv(x.size, 128),)](xt, yt, out, x.size, BLOCK=128)
    got = out.cpu().numpy()
    with np.errstate(all="ignore"):
        want = np.fmod(x, y)
    np.testing.assert_array_equal(got, want)
    signed = ~np.isnan(want)  # the sign of a NaN is not specified
    np.testing.assert_array_equal(np.signbit(got)[signed], np.signbit(want)[signed])
