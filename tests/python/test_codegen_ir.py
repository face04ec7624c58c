"""Tests of the Python -> Tile IR code generator: the IR text it prints for small kernels
(not executed) and some errors met along the way (the user-error paths, message, line and
caret: test_codegen_errors.py).

Run: cd /work/main && PYTHONPATH=frontend python -m pytest tests/python/test_codegen_ir.py -q
"""
import inspect
import re

import pytest

import tessera.language as tl
from tessera.compiler.builtins_impl import check_complete

from codegen_ir_helpers import F16, F32, I32, P, col_of, ir, line_of, ops

GLOBAL_SCALE = 3.0
GLOBAL_BLOCK = tl.constexpr(64)


# =========================================================================== the four integration kernels

def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def test_vector_add():
    text = ir(add_kernel, {"BLOCK": 1024}, {"x_ptr": {"divisibility": 16}},
              x_ptr=F32, y_ptr=F32, out_ptr=F32, n=tl.int32)
    lines = text.splitlines()
    assert lines[0].startswith("kernel @add_kernel(%x_ptr: ptr<f32> {divisibility = 16}, "
                               "%y_ptr: ptr<f32>, %out_ptr: ptr<f32>, %n: i32) attributes {file = ")
    assert f'file = "{inspect.getsourcefile(add_kernel)}"' in lines[0]
    assert "num_warps = 4" in lines[0]
    pid_line = line_of(add_kernel, "tl.program_id")
    assert f"%0 = program_id {{axis = 0}} : i32 loc({pid_line}:11)" in text
    assert "const {value = 1024} : i32" in text
    assert "arange {end = 1024, start = 0} : tile<1024xi32>" in text
    assert "splat %n : tile<1024xi32>" in text
    assert re.search(r"cmp %\d+, %\d+ \{pred = \"lt\"\} : tile<1024xi1>", text)
    assert "splat %x_ptr : tile<1024xptr<f32>>" in text
    assert re.search(r"addptr %\d+, %\d+ : tile<1024xptr<f32>>", text)
    assert re.search(r"load %\d+, %\d+ : tile<1024xf32>", text)
    assert re.search(r"add %\d+, %\d+ : tile<1024xf32>", text)
    assert re.search(r"^  store %\d+, %\d+, %\d+ loc\(\d+:5\)$", text, re.M)
    assert lines[-2].strip().startswith("return")
    assert lines[-1] == "}"
    assert ops(text) == ["program_id", "const", "mul", "arange", "splat", "add", "splat", "cmp",
                         "splat", "addptr", "load", "splat", "addptr", "load", "splat", "addptr",
                         "add", "store", "return"]


def test_printing_is_deterministic():
    args = dict(x_ptr=F32, y_ptr=F32, out_ptr=F32, n=tl.int32)
    assert ir(add_kernel, {"BLOCK": 256}, **args) == ir(add_kernel, {"BLOCK": 256}, **args)
    assert ir(matmul_kernel, MATMUL_CONST, **MATMUL_ARGS) == ir(matmul_kernel, MATMUL_CONST, **MATMUL_ARGS)


def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


def test_softmax():
    text = ir(softmax_kernel, {"BLOCK": 256}, out_ptr=F32, in_ptr=F32, in_row_stride=tl.int32,
              out_row_stride=tl.int32, n_cols=tl.int32)
    assert "const {value = -inf} : tile<256xf32>" in text
    assert re.search(r"load %\d+, %\d+, %\d+ : tile<256xf32>", text)
    # max reduction to a scalar with a max combiner
    assert re.search(r"%(\d+) = reduce %\d+ \{axis = 0\} : f32 \{\n    \^\(%(\d+): f32, %(\d+): f32\):\n"
                     r"    %\d+ = max %\2, %\3 : f32", text)
    assert re.search(r"reduce %\d+ \{axis = 0\} : f32 \{\n    \^\(%(\d+): f32, %(\d+): f32\):\n"
                     r"    %\d+ = add %\1, %\2 : f32", text)
    assert "exp" in ops(text)
    assert re.search(r"div %\d+, %\d+ : tile<256xf32>", text)
    assert ops(text).count("reduce") == 2


MATMUL_ARGS = dict(a_ptr=F16, b_ptr=F16, c_ptr=F32, M=tl.int32, N=tl.int32, K=tl.int32,
                   stride_am=tl.int32, stride_bk=tl.int32, stride_cm=tl.int32)
MATMUL_CONST = dict(stride_ak=1, stride_bn=1, stride_cn=1, BLOCK_M=32, BLOCK_N=64, BLOCK_K=16, GROUP_M=8)


def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                  stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc, mask=c_mask)


def test_matmul():
    text = ir(matmul_kernel, MATMUL_CONST, options={"num_warps": 8, "num_stages": 3}, **MATMUL_ARGS)
    assert "num_stages = 3, num_warps = 8" in text.splitlines()[0]
    assert "%stride_ak" not in text and "%stride_bn" not in text  # specialized to 1
    m = re.search(r"%(\d+), %(\d+), %(\d+) = for %\d+, %\d+, %\d+, %\d+, %\d+, %\d+ : "
                  r"tile<32x64xf32>, tile<32x16xptr<f16>>, tile<16x64xptr<f16>> \{\n"
                  r"    \^\(%\d+: i32, %(\d+): tile<32x64xf32>, %\d+: tile<32x16xptr<f16>>, "
                  r"%\d+: tile<16x64xptr<f16>>\):", text)
    assert m, text
    assert "const {value = 0.0} : tile<32x64xf32>" in text
    assert re.search(r"dot %\d+, %\d+, %\d+ \{input_precision = \"ieee\"\} : tile<32x64xf32>", text)
    assert re.search(r"^    yield %\d+, %\d+, %\d+ loc", text, re.M)
    assert re.search(rf"store %\d+, %{m.group(1)}, %\d+", text)  # the loop result is stored
    assert "expand_dims" in text and "broadcast" in ops(text)
    assert re.search(r"min %\d+, %\d+ : i32", text)  # Python min on tensors


def layernorm_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + cols, y, mask=mask)


def test_layernorm():
    text = ir(layernorm_kernel, {"BLOCK_SIZE": 512}, X=F16, Y=F16, W=F16, B=F16, Mean=F32,
              Rstd=F32, stride=tl.int32, N=tl.int32, eps=tl.float32)
    assert ops(text).count("for") == 3
    assert re.search(r"%\d+ = for %\d+, %N, %\d+, %\d+ : tile<512xf32> \{", text)
    assert re.search(r"^  for %\d+, %N, %\d+ \{$", text, re.M)  # no carried values
    assert re.search(r"addptr %X, %\d+ : ptr<f16>", text)
    assert re.search(r"cast %N : f32", text)
    assert "sqrt" in ops(text)
    assert re.search(r"select %\d+, %\d+, %\d+ : tile<512xf32>", text)
    assert re.search(r"cast %\d+ : tile<512xf16>", text)  # value cast to the pointee type


# =========================================================================== arguments and specialization

def k_args(a, b, c, n, D: tl.constexpr, E: tl.constexpr = 5):
    tl.store(a + n, D + E)


def test_arguments_and_constexprs():
    text = ir(k_args, {"D": 2, "b": None, "c": 1}, {"a": {"divisibility": 16}, "n": {"divisibility": 16}},
              a=I32, n=tl.int64)
    assert text.startswith("kernel @k_args(%a: ptr<i32> {divisibility = 16}, %n: i64 {divisibility = 16})")
    assert "const {value = 7} : i32" in text  # D + E folded in Python
    assert re.search(r"addptr %a, %n : ptr<i32>", text)


def test_signature_strings_and_options():
    text = ir(k_args, {"D": tl.constexpr(1), "b": None, "c": 1}, options={"num_warps": 2},
              a="*i32", n="i32")
    assert "%a: ptr<i32>, %n: i32" in text
    assert "num_warps = 2" in text and "num_stages" not in text


def test_locations_are_absolute():
    text = ir(softmax_kernel, {"BLOCK": 128}, out_ptr=F32, in_ptr=F32, in_row_stride=tl.int32,
              out_row_stride=tl.int32, n_cols=tl.int32)
    line = line_of(softmax_kernel, "tl.exp(z)")
    col = col_of(softmax_kernel, "tl.exp(z)") + 1
    assert "exp %" in text and f"loc({line}:{col})" in text


def test_every_builtin_has_an_implementation():
    assert check_complete() == []


# =========================================================================== types, promotion, broadcasting

def k_promote(xh, xi, out, s, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    h = tl.load(xh + offs)
    i = tl.load(xi + offs)
    a = h * 2.0          # weak float: stays f16
    b = h + i            # int tile with f16 tile: f16
    c = i + s            # i32 tile + f32 scalar: f32
    d = i / 3            # int / int: f32
    e = h / 2            # f16 / weak int: f16
    f = i // 3
    g = i % 4
    tl.store(out + offs, a + b + c + d + e + f + g)


def test_promotion_rules():
    text = ir(k_promote, {"BLOCK": 32}, xh=F16, xi=I32, out=F32, s=tl.float32)
    assert "const {value = 2.0} : tile<32xf16>" in text
    assert re.search(r"mul %\d+, %\d+ : tile<32xf16>", text)
    assert re.search(r"cast %\d+ : tile<32xf16>", text)  # i -> f16 for h + i
    assert "splat %s : tile<32xf32>" in text
    assert re.search(r"cast %\d+ : tile<32xf32>", text)
    assert "const {value = 3.0} : tile<32xf32>" in text  # i / 3 in f32
    assert re.search(r"div %\d+, %\d+ : tile<32xi32>", text)  # i // 3
    assert re.search(r"rem %\d+, %\d+ : tile<32xi32>", text)


def k_broadcast(out, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)[:, None]
    c = tl.arange(0, 2 * BLOCK)[None, :]
    x = r * (2 * BLOCK) + c
    y = x[None, :, :] + tl.arange(0, 4)[:, None, None]
    tl.store(out + x, x)
    tl.store(out + tl.sum(y, 0), x)


def test_broadcasting_is_explicit():
    text = ir(k_broadcast, {"BLOCK": 8}, out=I32)
    assert "expand_dims %0 {axis = 1} : tile<8x1xi32>" in text
    assert re.search(r"expand_dims %\d+ \{axis = 0\} : tile<1x16xi32>", text)
    assert re.search(r"broadcast %\d+ : tile<8x16xi32>", text)
    assert "const {value = 16} : tile<8x1xi32>" in text  # (2 * BLOCK) folded to a constant
    assert re.search(r"expand_dims %\d+ \{axis = 0\} : tile<1x8x16xi32>", text)
    assert re.search(r"broadcast %\d+ : tile<4x8x16xi32>", text)
    assert re.search(r"reduce %\d+ \{axis = 0\} : tile<8x16xi32>", text)


def k_operators(xi, xf, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    i = tl.load(xi + offs)
    f = tl.load(xf + offs)
    r = (i & 3) | (i ^ 5)
    r = (r << 2) >> 1
    r = ~r + (-i)
    m = (i < n) & (i <= 3) & (i > 1) & (i >= 0) & (i == 2) & (i != 7)
    g = tl.where(not m, f, -f)
    tl.store(out + offs, g + r)


def test_operators():
    text = ir(k_operators, {"BLOCK": 16}, xi=I32, xf=F32, out=F32, n=tl.int32)
    names = ops(text)
    for op in ("and", "or", "xor", "shl", "shr", "not", "neg", "select"):
        assert op in names, op
    for pred in ("lt", "le", "gt", "ge", "eq", "ne"):
        assert f'pred = "{pred}"' in text
    # `not m` on an i1 tile is a logical not
    assert re.search(r"not %\d+ : tile<16xi1>", text)


def k_unsigned(x, out):
    v = tl.load(x)
    tl.store(out, (v >> 1) + v // v)


def test_unsigned_ops_keep_type():
    text = ir(k_unsigned, x=P(tl.uint32), out=P(tl.uint32))
    assert re.search(r"shr %\d+, %\d+ : u32", text)
    assert re.search(r"div %\d+, %\d+ : u32", text)


def k_scalar_logic(out, a, b):
    if a > 0 and b > 0:
        tl.store(out, 1)
    if a > 0 or not b > 0:
        tl.store(out, 2)


def test_and_or_on_scalars():
    text = ir(k_scalar_logic, out=I32, a=tl.int32, b=tl.int32)
    assert re.search(r"and %\d+, %\d+ : i1", text)
    assert re.search(r"or %\d+, %\d+ : i1", text)
    assert re.search(r"not %\d+ : i1", text)
    assert ops(text).count("if") == 2


def k_constexpr_fold(out, N: tl.constexpr, FLAG: tl.constexpr):
    M = N * 2 + 1
    K = M // 2 if FLAG and N > 2 else -1
    L = max(N, 3) + min(1, 2) + GLOBAL_BLOCK + len((1, 2)) + int(2.5) + abs(-2)
    tl.static_assert(K == N)
    if not FLAG or N < 0:
        tl.store(out, 100)
    else:
        tl.store(out, L + GLOBAL_SCALE)


def test_constexpr_folding_and_static_if():
    text = ir(k_constexpr_fold, {"N": 4, "FLAG": True}, out=F32)
    assert "const {value = 78.0} : f32" in text  # 4 + 1 + 64 + 2 + 2 + 2 + 3.0
    assert "100" not in text
    assert ops(text) == ["const", "store", "return"]


def k_ternary(out, c, BLOCK: tl.constexpr):
    x = 1.0 if BLOCK > 8 else 2
    y = c * 2 if c > 0 else c - 1
    tl.store(out, x + y)


def test_ternary():
    text = ir(k_ternary, {"BLOCK": 16}, out=F32, c=tl.int32)
    assert re.search(r"%\d+ = if %\d+ : i32 \{", text)
    assert ops(text).count("yield") == 2


def k_cast(x, out):
    v = tl.load(x)
    a = v.to(tl.int32, bitcast=True)
    b = tl.cast(v, tl.float16)
    c = v.to(tl.int1)
    p = x.to(P(tl.int8))
    tl.store(out, a + b.to(tl.int32) + c + tl.load(p).to(tl.int32))


def test_casts():
    text = ir(k_cast, x=F32, out=I32)
    assert re.search(r"bitcast %\d+ : i32", text)
    assert re.search(r"cast %\d+ : f16", text)
    assert re.search(r"cast %\d+ : i1", text)
    assert "bitcast %x : ptr<i8>" in text


# =========================================================================== helpers, inlining, globals

SCALE = 2.5


def _mul_add(x, y):
    return x * y + SCALE


def _two(x):
    return x + 1, x - 1


def _sign(x, c):
    if c > 0:
        return x
    return -x


def _pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


class FakeKernel:
    """What @tessera.kernel returns: the Python function is at .fn."""

    def __init__(self, fn):
        self.fn = fn


@FakeKernel
def sub_kernel(x, y):
    return x - y


def k_helpers(x, out, c, N: tl.constexpr):
    v = tl.load(x + tl.arange(0, 16))
    a = _mul_add(v, 2)
    p, q = _two(a)
    s = _sign(p, c)
    d = sub_kernel(s, q)
    B: tl.constexpr = _pow2(N)
    tl.store(out + tl.arange(0, B), d)


def test_inlining_helpers():
    text = ir(k_helpers, {"N": 13}, x=F32, out=F32, c=tl.int32)
    assert "const {value = 2.5} : tile<16xf32>" in text
    assert re.search(r"%\d+ = if %\d+ : tile<16xf32>", text)
    assert re.search(r"sub %\d+, %\d+ : tile<16xf32>", text)
    # a helper defined in this file keeps its own line numbers
    assert f"loc({line_of(_mul_add, 'return x * y')}:" in text


def test_closure_variables():
    factor = 4
    dtype = tl.float16

    def k_closure(out):
        tl.store(out + tl.arange(0, factor), tl.full((factor,), factor, dtype))

    text = ir(k_closure, out=F16)
    assert "const {value = 4.0} : tile<4xf16>" in text


# =========================================================================== control flow

def k_if(out, c, n):
    x = 0.0
    y = 1
    if c > 0:
        x = 2.0
        y = c
    elif c < -5:
        x = 3.0
    tl.store(out + y, x)
    if n > 0:
        tl.store(out, x)


def test_runtime_if_yields():
    text = ir(k_if, out=F32, c=tl.int32, n=tl.int32)
    assert re.search(r"%\d+, %\d+ = if %\d+ : f32, i32 \{", text)
    assert re.search(r"%\d+ = if %\d+ : f32 \{", text)  # the elif
    assert re.search(r"^  if %\d+ \{$", text, re.M)  # no results
    assert "const {value = 2.0} : f32" in text and "const {value = 3.0} : f32" in text


def k_early_return(out, n):
    pid = tl.program_id(0)
    if pid >= n:
        return
    tl.store(out + pid, pid)


def test_early_return_is_restructured():
    text = ir(k_early_return, out=I32, n=tl.int32)
    m = re.search(r"  if %\d+ \{\n    yield.*\n  \} \{\n(.*?)\n  \}", text, re.S)
    assert m, text
    assert "store" in m.group(1)
    assert text.count("store") == 1


def k_loops(out, n, N: tl.constexpr):
    acc = 0
    for i in range(n):
        acc += i
    for j in range(10, 0, -2):
        acc += j
    for k in tl.static_range(3):
        acc += k * N
    t = (acc, 1.0)
    for i in tl.range(0, n, 2, num_stages=2):
        t = (t[0] + 1, t[1] * 2.0)
    while acc < 100:
        acc = acc * 2
    tl.store(out, acc + t[0])


def test_loops():
    text = ir(k_loops, {"N": 5}, out=I32, n=tl.int32)
    assert ops(text).count("for") == 3
    assert ops(text).count("while") == 1
    assert re.search(r"%\d+ = for %\d+, %n, %\d+, %\d+ : i32", text)
    # negative constexpr step: iv' runs over [0, 10) by 2 and iv = 0 + 10 - iv'
    assert re.search(r"for %\d+, %\d+, %\d+, %\d+ : i32 \{\n    \^\(%(\d+): i32, %\d+: i32\):\n"
                     r".*\n    %\d+ = sub %\d+, %\1", text)
    # static_range unrolled: 3 adds of k * N folded
    assert "const {value = 5} : i32" in text and "const {value = 10} : i32" in text
    # tl.range's num_stages is the loop's own attribute (the GPU pipeline depth)
    assert re.search(r"%\d+, %\d+ = for %\d+, %n, %\d+, %\d+, %\d+ \{num_stages = 2\} : i32, f32", text)
    assert re.search(r"condition %\d+, %\d+", text)


def k_while_carried(x, n):
    i = 0
    s = tl.zeros((8,), dtype=tl.float32)
    while i < n:
        s += tl.load(x + i + tl.arange(0, 8))
        i += 8
    tl.store(x + tl.arange(0, 8), s)


def test_while_loop():
    text = ir(k_while_carried, x=F32, n=tl.int32)
    m = re.search(r"%(\d+), %(\d+) = while %\d+, %\d+ : tile<8xf32>, i32 \{\n    \^\(%(\d+): tile<8xf32>, %(\d+): i32\):", text)
    assert m, text
    assert re.search(r"condition %\d+, %\d+, %\d+", text)
    assert re.search(r"^  \} \{\n    \^\(%\d+: tile<8xf32>, %\d+: i32\):", text, re.M)


def k_invariant_carry(out, n):
    x = 1.0
    y = 2.0
    i = 0
    while i < n:
        if n > 100:
            x = x
        i += 1
        y = y
    for j in range(n):
        y = y
    tl.store(out, x + y)


def test_invariant_carried_values_are_pruned():
    text = ir(k_invariant_carry, out=F32, n=tl.int32)
    assert re.search(r"%(\d+) = while %\d+ : i32 \{\n    \^\(%(\d+): i32\):", text), text
    assert re.search(r"condition %\d+, %\d+ loc", text)
    assert re.search(r"^  for %\d+, %n, %\d+ \{$", text, re.M)
    assert "const {value = 1.0} : f32" in text and "const {value = 2.0} : f32" in text


def k_nested(out, n, m):
    total = 0.0
    for i in range(n):
        for j in range(m):
            if i > j:
                total += 1.0
    tl.store(out, total)


def test_nested_control_flow():
    text = ir(k_nested, out=F32, n=tl.int32, m=tl.int32)
    assert re.search(r"^    %\d+ = for %\d+, %m, %\d+, %\d+ : f32 \{$", text, re.M)
    assert re.search(r"^      %\d+ = if %\d+ : f32 \{$", text, re.M)


def k_static_iter(out):
    for i, v in enumerate((1.0, 2.0)):
        tl.store(out + i, v)


def test_static_iteration_over_tuples():
    text = ir(k_static_iter, out=F32)
    assert text.count("store") == 2


# =========================================================================== builtins

def k_memory(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    row = tl.load(x + offs[None, :], mask=m[None, :], other=0)   # other cast to f32
    col = tl.load(y)                                                # scalar load
    tl.store(out + offs[:, None] * BLOCK + offs[None, :], col)   # scalar value broadcast
    tl.store(out + offs, 1.5, mask=m)
    old = tl.atomic_add(out + offs, row.reshape(BLOCK), mask=m)
    tl.atomic_max(out + offs, old)
    tl.atomic_cas(out, 0.0, 1.0)
    tl.atomic_xchg(out + offs, 2.0)


def test_load_store_atomics():
    text = ir(k_memory, {"BLOCK": 16}, x=F32, y=F32, out=F32, n=tl.int32)
    assert "const {value = 0.0} : tile<1x16xf32>" in text
    assert "load %y : f32" in text
    assert re.search(r"splat %\d+ : tile<16x16xf32>", text)
    assert "const {value = 1.5} : tile<16xf32>" in text
    assert 'atomic_rmw' in text and 'kind = "fadd"' in text and 'kind = "max"' in text
    assert 'kind = "xchg"' in text
    assert re.search(r"atomic_cas %out, %\d+, %\d+ : f32", text)
    assert re.search(r"reshape %\d+ : tile<16xf32>", text)


def k_atomic_int(x, v):
    tl.atomic_max(x, v)
    tl.atomic_min(x, v)
    tl.atomic_add(x, 1)
    tl.atomic_and(x, 3)


def test_atomic_kinds_follow_types():
    text = ir(k_atomic_int, x=P(tl.uint32), v=tl.uint32)
    assert 'kind = "umax"' in text and 'kind = "umin"' in text and 'kind = "add"' in text
    assert 'kind = "and"' in text


def k_bool_ptr(x, out):
    m = tl.load(x)
    tl.store(out, m)


def test_bool_pointers_use_bytes():
    text = ir(k_bool_ptr, x=P(tl.int1), out=P(tl.int1))
    assert "bitcast %x : ptr<i8>" in text and "load %" in text
    assert re.search(r"load %\d+ : i8", text)
    assert re.search(r"cast %\d+ : i1", text)


def k_block_ptr(a, out, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    bp = tl.make_block_ptr(a, shape=(M, N), strides=(stride_m, 1), offsets=(0, 0),
                           block_shape=(BM, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(0, N, BN):
        acc += tl.load(bp, boundary_check=(0, 1), padding_option="zero")
        bp = tl.advance(bp, (0, BN))
    ob = tl.make_block_ptr(out, (M, N), (stride_m, 1), (0, 0), (BM, BN), (1, 0))
    tl.store(ob, acc, boundary_check=(1,))


def test_block_pointers():
    text = ir(k_block_ptr, {"BM": 16, "BN": 32}, a=F16, out=F16, M=tl.int32, N=tl.int32,
              stride_m=tl.int32)
    assert "cast %M : i64" in text
    # of the block pointer's leaves (base, 2 shapes, 2 strides, 2 offsets) only the
    # offset that tl.advance changes stays carried; the invariant ones are pruned
    assert re.search(r"= for %\d+, %N, %\d+, %\d+, %\d+ : tile<16x32xf32>, i32 \{", text), text
    assert re.search(r"load %\d+, %\d+, %\d+ : tile<16x32xf16>", text)
    assert text.count('pred = "ge"') == 3  # 2 dims checked in the loop + 1 for the store
    assert re.search(r"store %\d+, %\d+, %\d+ loc", text)


def k_reductions(x, out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + offs[:, None] * BLOCK + offs[None, :])
    a = tl.sum(v, axis=1, keep_dims=True)
    b = tl.max(v, 0)
    c, ci = tl.min(v, axis=1, return_indices=True)
    d = tl.argmax(v, 1)
    e = v.sum()
    f = tl.xor_sum(v.to(tl.int32), 0)
    g = tl.cumsum(v, 1)
    h = tl.cumprod(v, 0, reverse=True)
    tl.store(out + offs, a.reshape(BLOCK) + b + c + ci + d + e + f + tl.sum(g + h, 1))


def test_reductions_and_scans():
    text = ir(k_reductions, {"BLOCK": 8}, x=F32, out=F32)
    assert re.search(r"reduce %\d+ \{axis = 1\} : tile<8xf32>", text)
    assert re.search(r"expand_dims %\d+ \{axis = 1\} : tile<8x1xf32>", text)  # keep_dims
    assert re.search(r"%\d+, %\d+ = reduce %\d+, %\d+ \{axis = 1\} : tile<8xf32>, tile<8xi32>", text)
    assert re.search(r"reshape %\d+ : tile<64xf32>", text)  # sum with axis None
    assert re.search(r"reduce %\d+ \{axis = 0\} : f32", text)
    assert re.search(r"scan %\d+ \{axis = 1, reverse = false\} : tile<8x8xf32>", text)
    assert re.search(r"scan %\d+ \{axis = 0, reverse = true\} : tile<8x8xf32>", text)
    assert re.search(r"xor %\d+, %\d+ : i32", text)


def k_small_int_sum(x, out):
    v = tl.load(x + tl.arange(0, 16))
    tl.store(out, tl.sum(v) + tl.max(v))


def test_sum_of_small_ints_accumulates_in_i32():
    text = ir(k_small_int_sum, x=P(tl.int8), out=I32)
    assert re.search(r"cast %\d+ : tile<16xi32>", text)
    assert "tile<16xi8>" in text and not re.search(r"reduce %\d+ \{axis = 0\} : i8", text)


def k_bool_sum(x, out):
    m = tl.load(x + tl.arange(0, 16)) > 0
    tl.store(out, tl.sum(m))


def test_sum_of_bools_is_unsigned():
    text = ir(k_bool_sum, x=F32, out=P(tl.uint32))
    assert re.search(r"cast %\d+ : tile<16xu32>", text)
    assert re.search(r"reduce %\d+ \{axis = 0\} : u32", text)


def k_f16_reductions(x, out):
    v = tl.load(x + tl.arange(0, 16))
    tl.store(out, tl.sum(v))
    tl.store(out + 1, tl.max(v))


def test_f16_sum_stays_f16_and_max_widens():
    text = ir(k_f16_reductions, x=F16, out=F16)
    assert re.search(r"reduce %\d+ \{axis = 0\} : f16", text)  # Triton: sum keeps fp16
    assert re.search(r"reduce %\d+ \{axis = 0\} : f32", text)  # Triton: max widens to fp32


def _argmax_combine(a, ai, b, bi):
    gt = a > b
    return tl.where(gt, a, b), tl.where(gt, ai, bi)


def k_user_reduce(x, out):
    v = tl.load(x + tl.arange(0, 16))
    i = tl.arange(0, 16)
    m, mi = tl.reduce((v, i), 0, _argmax_combine)
    s = tl.associative_scan(v, 0, _add)
    tl.store(out + mi + tl.arange(0, 16), m + s)


def _add(a, b):
    return a + b


def test_user_combine_functions():
    text = ir(k_user_reduce, x=F32, out=F32)
    m = re.search(r"%\d+, %\d+ = reduce %\d+, %\d+ \{axis = 0\} : f32, i32 \{\n"
                  r"    \^\(%(\d+): f32, %(\d+): i32, %(\d+): f32, %(\d+): i32\):\n"
                  r"    %\d+ = cmp %\1, %\3 \{pred = \"gt\"\} : i1", text)
    assert m, text
    assert re.search(r"scan %\d+ \{axis = 0, reverse = false\} : tile<16xf32> \{", text)


def k_shapes(x, out):
    v = tl.load(x + tl.arange(0, 8)[:, None] * 4 + tl.arange(0, 4)[None, :])
    t = tl.trans(v)
    p = tl.permute(v, (1, 0))
    q = v.T
    r = tl.reshape(v, 32)
    s = tl.view(v, (4, 8))
    b = tl.broadcast_to(tl.arange(0, 4)[None, :], (8, 4))
    e = tl.expand_dims(r, (0, 2))
    j = tl.join(v, v)
    lo, hi = tl.split(j)
    rv = tl.ravel(t)
    bb, cc = tl.broadcast(tl.arange(0, 4), v)
    tl.store(out + tl.arange(0, 32), rv + r + tl.ravel(s) + tl.ravel(q) + tl.ravel(p))
    tl.store(out + b, lo + hi + bb.to(tl.float32) + cc)
    tl.store(out + tl.arange(0, 32)[None, :, None], e)


def test_shape_ops():
    text = ir(k_shapes, x=F32, out=F32)
    assert re.search(r"permute %\d+ \{order = \[1, 0\]\} : tile<4x8xf32>", text)
    assert re.search(r"reshape %\d+ : tile<32xf32>", text)
    assert re.search(r"reshape %\d+ : tile<4x8xf32>", text)
    assert re.search(r"join %\d+, %\d+ : tile<8x4x2xf32>", text)
    assert re.search(r"%\d+, %\d+ = split %\d+ : tile<8x4xf32>, tile<8x4xf32>", text)
    assert re.search(r"expand_dims %\d+ \{axis = 0\} : tile<1x32xf32>", text)
    assert re.search(r"expand_dims %\d+ \{axis = 2\} : tile<1x32x1xf32>", text)


def k_dot(a, b, c, i8p, out, acc16):
    x = tl.load(a + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    y = tl.load(b + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    f = x.to(tl.float32)
    d1 = tl.dot(f, f)
    d2 = tl.dot(f, f, input_precision="ieee")
    d3 = tl.dot(x, y, out_dtype=tl.float16)
    q = tl.load(i8p + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    d4 = tl.dot(q, q)
    d5 = tl.dot(tl.load(a + tl.arange(0, 2)[:, None] + tl.arange(0, 4)[None, :]),
                tl.load(b + tl.arange(0, 4)[:, None] + tl.arange(0, 1)[None, :]))
    tl.store(out + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :],
             d1 + d2 + d3 + d4.to(tl.float32))
    tl.store(out + tl.arange(0, 2)[:, None] + tl.arange(0, 1)[None, :], d5)


def test_dot():
    text = ir(k_dot, a=F16, b=F16, c=F32, i8p=P(tl.int8), out=F32, acc16=F16)
    assert re.search(r'dot %\d+, %\d+, %\d+ \{input_precision = "tf32"\} : tile<16x16xf32>', text)
    assert re.search(r'dot %\d+, %\d+, %\d+ \{input_precision = "ieee"\} : tile<16x16xf32>', text)
    assert re.search(r"cast %\d+ : tile<16x16xf16>", text)  # out_dtype=f16 computed in f32
    assert re.search(r"dot %\d+, %\d+, %\d+ \{input_precision = \"ieee\"\} : tile<16x16xi32>", text)
    assert "const {value = 0} : tile<16x16xi32>" in text
    assert re.search(r"dot %\d+, %\d+, %\d+ \{input_precision = \"ieee\"\} : tile<2x1xf32>", text)


def k_math(x, xi, out):
    v = tl.load(x + tl.arange(0, 16))
    i = tl.load(xi + tl.arange(0, 16))
    r = (tl.exp(v) + tl.exp2(v) + tl.log(v) + tl.log2(v) + tl.sqrt(v) + tl.rsqrt(v) + tl.sin(v)
         + tl.cos(v) + tl.abs(v) + tl.floor(v) + tl.ceil(v) + tl.erf(v) + tl.tanh(v)
         + tl.sigmoid(v) + tl.sqrt_rn(v) + tl.fma(v, v, 1.0) + tl.fdiv(v, 3.0) + tl.div_rn(v, v))
    r += tl.exp(i) + tl.abs(i).to(tl.float16)
    r += tl.maximum(v, 0.0) + tl.minimum(v, 1.0, propagate_nan=tl.PropagateNan.ALL)
    r += tl.clamp(v, -1.0, 1.0) + tl.softmax(v) + v.exp()
    u = tl.umulhi(i, i)
    tl.store(out + tl.arange(0, 16), r + u)


def test_math():
    text = ir(k_math, x=F16, xi=I32, out=F32)
    names = ops(text)
    for op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "abs", "floor",
               "ceil", "erf", "tanh", "sigmoid", "fma", "max", "minimum_nan", "min", "umulhi"):
        assert op in names, op
    assert re.search(r"exp %\d+ : tile<16xf16>", text)  # f16 stays f16
    assert re.search(r"cast %\d+ : tile<16xf32>\s.*\n.*exp %\d+ : tile<16xf32>", text)  # int -> f32
    assert re.search(r"abs %\d+ : tile<16xi32>", text)
    # Triton's umulhi is unsigned: signed operands go through u32
    assert re.search(r"bitcast %\d+ : tile<16xu32>.*\n.*bitcast.*\n.*umulhi %\d+, %\d+ : tile<16xu32>", text)


def k_creation(out, v, BLOCK: tl.constexpr):
    a = tl.zeros((BLOCK, 2), dtype=tl.float16)
    b = tl.full((BLOCK,), 7, tl.int64)
    c = tl.full((BLOCK,), v, tl.float32)
    d = tl.zeros_like(c)
    e = tl.full_like(b, 1.5, dtype=tl.float32)
    f = tl.num_programs(1) + tl.program_id(2) + tl.cdiv(v, 4)
    tl.store(out + tl.arange(0, BLOCK), tl.sum(a, 1) + b + c + d + e + f)


def test_creation_ops():
    text = ir(k_creation, {"BLOCK": 4}, out=F32, v=tl.int32)
    assert "const {value = 0.0} : tile<4x2xf16>" in text
    assert "const {value = 7} : tile<4xi64>" in text
    assert re.search(r"cast %v : f32 loc.*\n.*splat %\d+ : tile<4xf32>", text)
    assert "const {value = 1.5} : tile<4xf32>" in text
    assert "num_programs {axis = 1} : i32" in text and "program_id {axis = 2} : i32" in text


def k_random(out, seed, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.rand(seed, offs)
    b = tl.randn(42, offs)
    c = tl.randint(seed, offs)
    d0, d1, d2, d3 = tl.randint4x(seed, offs.to(tl.int64), n_rounds=7)
    tl.store(out + offs, a + b + c.to(tl.float32) + d3.to(tl.float32))


def test_philox_random():
    text = ir(k_random, {"BLOCK": 8}, out=F32, seed=tl.int32)
    assert "cast %seed : u64" in text
    # the Philox round and key constants (Triton's)
    for c in (0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85):
        assert f"const {{value = {c}}}" in text
    # 64-bit offsets: the high word is counter word 1 (Triton 3.6), still Philox 4x32
    assert re.search(r"shr %\d+, %\d+ : tile<8xi64>", text)
    assert "tile<8xu64>" not in text
    assert text.count("umulhi") == 2 * 10 * 3 + 2 * 7
    assert "const {value = 4.6566127342e-10} : tile<8xf32>" in text
    assert "const {value = 6.283185307179586} : tile<8xf32>" in text  # Box-Muller
    assert "log" in ops(text) and "cos" in ops(text)
    assert "const {value = 42} : i32" in text


def k_debug(x, n):
    v = tl.load(x + tl.arange(0, 4))
    tl.device_print("v", v)
    print("n =", n)
    tl.device_assert(v > 0, "positive")
    assert n > 0, "n must be positive"
    assert 1 + 1 == 2
    tl.static_print("compile time", v)
    y = tl.multiple_of(tl.arange(0, 4), 4)
    y = tl.max_contiguous(y, [4])
    y = tl.max_constancy(y, 1)
    tl.assume(n > 0)
    tl.debug_barrier()
    tl.store(x + y, v)


def test_debug_ops(capsys):
    text = ir(k_debug, options={"debug": True}, x=F32, n=tl.int32)
    assert re.search(r'print %\d+ \{hex = false, prefix = "v"\}', text)
    assert re.search(r'print %n \{hex = false, prefix = "n = "\}', text)
    assert re.search(r'assert %\d+ \{msg = "positive"\}', text)
    assert re.search(r'assert %\d+ \{msg = "n must be positive"\}', text)
    assert "hint %" in text and "divisibility = [4]" in text and "contiguity = [4]" in text
    assert "constancy = [1]" in text
    assert re.search(r"assume %\d+", text)
    assert "compile time <tensor" not in capsys.readouterr().out or True
    no_debug = ir(k_debug, x=F32, n=tl.int32)
    assert "assert" not in ops(no_debug)


# =========================================================================== larger kernels

def attn_fwd(Q, K, V, Out, sm_scale, stride_qm, stride_kn, stride_vn, stride_om, N_CTX,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
             CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    q_ptr = tl.make_block_ptr(Q, (N_CTX, HEAD_DIM), (stride_qm, 1), (start_m * BLOCK_M, 0),
                              (BLOCK_M, HEAD_DIM), (1, 0))
    k_ptr = tl.make_block_ptr(K, (HEAD_DIM, N_CTX), (1, stride_kn), (0, 0), (HEAD_DIM, BLOCK_N), (0, 1))
    v_ptr = tl.make_block_ptr(V, (N_CTX, HEAD_DIM), (stride_vn, 1), (0, 0), (BLOCK_N, HEAD_DIM), (1, 0))
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    q = tl.load(q_ptr)
    hi = (start_m + 1) * BLOCK_M if CAUSAL else N_CTX
    for start_n in range(0, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = tl.load(k_ptr)
        qk = tl.dot(q, k)
        if CAUSAL:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        l_ij = tl.sum(p, 1)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
        v_ptr = tl.advance(v_ptr, (BLOCK_N, 0))
        k_ptr = tl.advance(k_ptr, (0, BLOCK_N))
    acc = acc / l_i[:, None]
    o_ptr = tl.make_block_ptr(Out, (N_CTX, HEAD_DIM), (stride_om, 1), (start_m * BLOCK_M, 0),
                              (BLOCK_M, HEAD_DIM), (1, 0))
    tl.store(o_ptr, acc.to(Out.type.element_ty))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_forward(causal):
    text = ir(attn_fwd, dict(BLOCK_M=64, BLOCK_N=32, HEAD_DIM=64, CAUSAL=causal), Q=F16, K=F16,
              V=F16, Out=F16, sm_scale=tl.float32, stride_qm=tl.int32, stride_kn=tl.int32,
              stride_vn=tl.int32, stride_om=tl.int32, N_CTX=tl.int32)
    # carried: acc, l_i, m_i and the two block-pointer offsets that advance
    m = re.search(r"= for (.*) : (.*) \{", text)
    assert m, text
    types = m.group(2).split(", ")
    assert sorted(types) == sorted(["tile<64xf32>", "tile<64xf32>", "tile<64x64xf32>", "i32", "i32"])
    assert ops(text).count("dot") == 2
    assert ops(text).count("exp2") == 2
    assert re.search(r"dot %\d+, %\d+, %\d+ \{input_precision = \"ieee\"\} : tile<64x32xf32>", text)
    assert re.search(r"cast %\d+ : tile<64x64xf16>", text)
    assert ("select" in ops(text)) == causal


def _scale_to_pow2(x, n):
    p = 1
    while p < n:
        p *= 2
    return x * p


def k_static_while(out, N: tl.constexpr):
    v = tl.load(out + tl.arange(0, 4))
    tl.store(out + tl.arange(0, 4), _scale_to_pow2(v, N))


def test_compile_time_while_in_inlined_helper():
    text = ir(k_static_while, {"N": 5}, out=F32)
    assert "while" not in ops(text)
    assert "const {value = 8.0} : tile<4xf32>" in text


def k_gather(table, idx, out, n, BLOCK: tl.constexpr, D: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rows = tl.load(idx + offs, mask=offs < n, other=0).to(tl.int64)
    cols = tl.arange(0, D)
    vals = tl.load(table + rows[:, None] * D + cols[None, :], mask=(offs < n)[:, None])
    tl.store(out + offs[:, None] * D + cols[None, :], vals, mask=(offs < n)[:, None])


def test_gather_with_64bit_offsets():
    text = ir(k_gather, {"BLOCK": 16, "D": 8}, table=F32, idx=I32, out=F32, n=tl.int32)
    assert re.search(r"cast %\d+ : tile<16xi64>", text)
    assert re.search(r"addptr %\d+, %\d+ : tile<16x8xptr<f32>>", text)
    assert re.search(r"broadcast %\d+ : tile<16x8xi1>", text)


# --- closures made by one factory share a code object (and so the parsed source): each
# must still be compiled with its own cells (a cached source once carried the first's).

def _make_closure_kernel(kind, scale):
    def k(o_ptr):
        if kind == 0:
            tl.store(o_ptr, 10 * scale)
        else:
            tl.store(o_ptr, 20 * scale)
    return k


def test_closures_of_one_factory_are_compiled_with_their_own_cells():
    texts = [ir(_make_closure_kernel(kind, scale), o_ptr=P(tl.int32)) for kind, scale in ((0, 1), (1, 1), (1, 3))]
    consts = [re.findall(r"const \{value = (\d+)\}", t) for t in texts]
    assert consts == [["10"], ["20"], ["60"]]
