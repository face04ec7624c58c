"""FMA contraction on the GPU (compiler/codegen/nvptx/gpu_lowering.cpp): by default (and
with TESSERA_GPU_FP_FUSION=1) the kernel's own float a * b + c becomes one fma.rn (Triton's
enable_fp_fusion default); with 0 mul.rn + add.rn stay separately rounded; fp16 (rounded
after every op) never contracts, and the CPU never does. Checked in the PTX without a GPU,
and on a GPU against the exactly rounded FMA."""
import numpy as np
import pytest

import tessera
import tessera.language as tl


def axpy(a_ptr, b_ptr, c_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m)
    y = a * tl.load(b_ptr + offs, mask=m) + tl.load(c_ptr + offs, mask=m)
    tl.store(y_ptr + offs, y, mask=m)


# (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (a tie, to even) to 1 + 2^-11 in f32, so
# a * b + c is 2^-24 in one FMA and 0 when the product is rounded first.
ABC = (1 + 2.0 ** -12, 1 + 2.0 ** -12, -(1 + 2.0 ** -11))


def _ptx(monkeypatch, dtype, fusion):
    if fusion is None:
        monkeypatch.delenv("TESSERA_GPU_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TESSERA_GPU_FP_FUSION", fusion)
    sig = {n: f"*{dtype}:16" for n in ("a_ptr", "b_ptr", "c_ptr", "y_ptr")} | {"n": "i32"}
    return tessera.compile(tessera.jit(axpy), sig, {"BLOCK": 128}, target="cuda:90a").asm["ptx"]


@pytest.mark.parametrize("fusion", [None, "1"])
def test_fp32_multiply_add_contracts_by_default_and_with_fusion_on(monkeypatch, fusion):
    ptx = _ptx(monkeypatch, "fp32", fusion)
    assert "fma.rn.f32" in ptx and "mul.rn.f32" not in ptx and "add.rn.f32" not in ptx


def test_fusion_off_keeps_separately_rounded_operations(monkeypatch):
    ptx = _ptx(monkeypatch, "fp32", "0")
    assert "fma.rn.f32" not in ptx and "mul.rn.f32" in ptx and "add.rn.f32" in ptx


def test_fp16_rounds_after_every_op_and_never_contracts(monkeypatch):
    ptx = _ptx(monkeypatch, "fp16", None)
    assert "fma.rn" not in ptx


def test_the_cpu_never_contracts():
    a, b, c = (np.full(256, v, np.float32) for v in ABC)
    y = np.empty(256, np.float32)
    tessera.jit(axpy)[(2,)](a, b, c, y, 256, BLOCK=128)
    np.testing.assert_array_equal(y, a * b + c)             # the product rounded first: exactly 0 here
    assert (y == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("fusion", [None, "1", "0"])
def test_gpu_results_match_the_chosen_rounding(monkeypatch, fusion):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if fusion is None:
        monkeypatch.delenv("TESSERA_GPU_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TESSERA_GPU_FP_FUSION", fusion)
    a, b, c = (torch.full((256,), v, device="cuda") for v in ABC)
    y = torch.full((256,), float("nan"), device="cuda")
    tessera.jit(axpy)[(2,)](a, b, c, y, 256, BLOCK=128)
    torch.cuda.synchronize()
    want = 0.0 if fusion == "0" else 2.0 ** -24
    assert (y == want).all(), y[:4]


# --- How fusion prints (compiler/codegen/nvptx/pin_fp_rounding_nvptx.cpp): with it on (the default),
# the kernel's own ops carry no rounding mode (ptxas may fuse them further, as Triton's
# do); everything else keeps .rn, so the math library's instructions do not change.

def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0, mask=m)


@pytest.mark.parametrize("fusion,want,absent", [(None, "mul.f32", "mul.rn.f32"), ("1", "mul.f32", "mul.rn.f32"),
                                                ("0", "mul.rn.f32", "mul.f32")])
def test_the_kernels_own_ops_print_without_rounding_mode_only_with_fusion(monkeypatch, fusion, want, absent):
    if fusion is None:
        monkeypatch.delenv("TESSERA_GPU_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TESSERA_GPU_FP_FUSION", fusion)
    sig = {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32"}
    ptx = tessera.compile(tessera.jit(scale), sig, {"BLOCK": 128}, target="cuda:90a").asm["ptx"]
    assert f"\t{want}" in ptx and f"\t{absent}" not in ptx


def math_only(x_ptr, y_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if FN == "tanh":
        y = tl.tanh(x)
    if FN == "erf":
        y = tl.erf(x)
    if FN == "sigmoid":
        y = tl.sigmoid(x)
    if FN == "log":
        y = tl.log(x)
    if FN == "log2":
        y = tl.log2(x)
    if FN == "exp":
        y = tl.exp(x)
    tl.store(y_ptr + offs, y)


def _instruction_counts(ptx):
    """How many times each PTX instruction occurs, moves left out (the pinned ops take
    their constants in registers, which changes moves and register names only)."""
    import collections
    import re
    names = re.findall(r"^\s+(?:@%p\d+ )?([a-z][\w.]*)", ptx, re.M)
    return collections.Counter(n for n in names if not n.startswith("mov"))


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("fn", ["tanh", "erf", "sigmoid", "log", "log2", "exp"])
def test_math_library_instructions_are_the_same_with_fusion(monkeypatch, dtype, fn):
    counts = []
    for fusion in ("0", "1"):
        monkeypatch.setenv("TESSERA_GPU_FP_FUSION", fusion)
        sig = {"x_ptr": f"*{dtype}:16", "y_ptr": f"*{dtype}:16"}
        ptx = tessera.compile(tessera.jit(math_only), sig, {"BLOCK": 128, "FN": fn}, target="cuda:90a").asm["ptx"]
        counts.append(_instruction_counts(ptx))
    assert counts[0] == counts[1]
    assert not any(n.split(".")[0] in ("add", "sub", "mul") and ".rn" not in n for n in counts[1] if n[-3:] in ("f32", "f64"))


@pytest.mark.parametrize("dtype,target", [("fp16", "cuda:90a"), ("bf16", "cuda:90a"), ("bf16", "cuda:80")])
def test_half_precision_ops_keep_their_rounding_with_fusion(monkeypatch, dtype, target):
    monkeypatch.setenv("TESSERA_GPU_FP_FUSION", "1")
    sig = {n: f"*{dtype}:16" for n in ("a_ptr", "b_ptr", "c_ptr", "y_ptr")} | {"n": "i32"}
    ptx = tessera.compile(tessera.jit(axpy), sig, {"BLOCK": 128}, target=target).asm["ptx"]
    assert "fma.rn" not in ptx
    assert not any(f"\t{op}.{t}\t" in ptx or f"\t{op}.{t} " in ptx for op in ("add", "sub", "mul") for t in ("f16", "bf16", "f32"))


# --- Triton's enable_fp_fusion launch option: per launch (and per tessera.compile), before the
# environment variable; a separate specialization, so both settings coexist in one process.

@pytest.mark.parametrize("env", [None, "1", "0"])
@pytest.mark.parametrize("option,fused", [(True, True), (False, False)])
def test_enable_fp_fusion_option_wins_over_the_environment(monkeypatch, env, option, fused):
    if env is None:
        monkeypatch.delenv("TESSERA_GPU_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TESSERA_GPU_FP_FUSION", env)
    sig = {n: "*fp32:16" for n in ("a_ptr", "b_ptr", "c_ptr", "y_ptr")} | {"n": "i32"}
    ptx = tessera.compile(tessera.jit(axpy), sig, {"BLOCK": 128}, target="cuda:90a",
                          enable_fp_fusion=option).asm["ptx"]
    assert ("fma.rn.f32" in ptx) == fused and ("mul.rn.f32" in ptx) == (not fused)


def test_enable_fp_fusion_is_accepted_and_changes_nothing_on_the_cpu():
    k = tessera.jit(axpy)
    a, b, c = (np.full(256, v, np.float32) for v in ABC)
    for option in (True, False, None):
        y = np.full(256, np.nan, np.float32)
        kw = {} if option is None else {"enable_fp_fusion": option}
        k[(2,)](a, b, c, y, 256, BLOCK=128, **kw)
        assert (y == 0).all()                               # never contracted on the CPU
    assert len(k._compiled) == 3                            # the option is part of the launch's key


@pytest.mark.gpu
def test_enable_fp_fusion_launch_option_on_the_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.delenv("TESSERA_GPU_FP_FUSION", raising=False)
    k = tessera.jit(axpy)
    a, b, c = (torch.full((256,), v, device="cuda") for v in ABC)
    for option, want in ((False, 0.0), (True, 2.0 ** -24), (None, 2.0 ** -24), (False, 0.0)):
        y = torch.full((256,), float("nan"), device="cuda")
        kw = {} if option is None else {"enable_fp_fusion": option}
        k[(2,)](a, b, c, y, 256, BLOCK=128, **kw)
        torch.cuda.synchronize()
        assert (y == want).all(), (option, y[:4])
