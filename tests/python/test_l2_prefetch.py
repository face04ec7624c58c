"""tl.range(..., l2_prefetch=P) (compiler/codegen/nvptx/l2_prefetch_nvptx.cpp): the
issuer of a TMA ring follows each iteration's copies with L2 prefetches of iteration
+P's boxes. Without a GPU: the PTX for sm_90a (one cp.async.bulk.prefetch.tensor per
copy, at the coordinates P iterations on, behind the loop's bounds test, from the
issuing thread only, specialized or not) assembles with ptxas; where the hint does not
apply (no TMA ring, coordinates from a carried pointer, sm_80, the CPU) it changes
nothing; bad values are compile errors that name the line. With a GPU (marked gpu):
the products match float64 with NaN-poisoned outputs."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from cpu_helpers import interpreted
from ptxas_check import assemble

PREFETCH = "cp.async.bulk.prefetch.tensor.2d.L2.global.tile"
SIG = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp32:16", "M": "i32", "N": "i32", "K": "i32",
       "s_am": "i32:16", "s_bk": "i32:16", "s_cm": "i32:16"}


def matmul(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_bk, s_cm, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr, P: tl.constexpr, WS: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS, l2_prefetch=P):
        kk = k + rk
        a = tl.load(a_ptr + rm[:, None] * s_am + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * s_bk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_carried(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_bk, s_cm, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, P: tl.constexpr, WS: tl.constexpr):
    # The same product through block pointers advanced round the loop (carried values).
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (s_am, 1), (tl.program_id(0) * BM, 0), (BM, BK), (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (s_bk, 1), (0, tl.program_id(1) * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS, l2_prefetch=P):
        acc = tl.dot(tl.load(a_bp, boundary_check=(0, 1)), tl.load(b_bp, boundary_check=(0, 1)), acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * s_cm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def build(P, ws=False, fn=matmul, target="cuda:90a", stages=3, BN=128):
    return tessera.compile(tessera.jit(fn), SIG, {"BM": 128, "BN": BN, "BK": 64, "P": P, "WS": ws},
                           target=target, num_warps=8, num_stages=stages)


def _prefetch_lines(ptx):
    return [ln for ln in ptx.splitlines() if PREFETCH in ln]


def test_no_hint_no_prefetch():
    ptx = build(0).asm["ptx"]
    assert PREFETCH not in ptx and "cp.async.bulk.tensor.2d.shared::cluster" in ptx


@pytest.mark.parametrize("ws", [False, True], ids=["plain", "specialized"])
def test_prefetch_follows_each_issue(ws, tmp_path):
    ptx = build(2, ws=ws).asm["ptx"]
    copies = ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile")
    lines = _prefetch_lines(ptx)
    # One prefetch per copy wherever the ring issues (A one box, B two 64-column boxes a stage):
    # not specialized, the prologue's two issues and the loop's one; specialized, the producer's one.
    assert copies == (9 if not ws else 3) and len(lines) == copies
    # Through each copy's own tensor map (a grid-constant parameter), never a shared-memory address.
    maps = {re.search(r"\[(%rd\d+), \{", ln).group(1) for ln in lines}
    assert 1 <= len(maps) <= copies
    # Iteration + 2 of a 64-wide K step: the K coordinate is the copy's plus 128, computed from the
    # induction variable (A's inner coordinate and B's outer one).
    assert re.search(r"add\.s32\s+%r\d+, %r\d+, 128;", ptx)
    # Only the issuing thread prefetches, behind a branch that also tests the loop's bound.
    for ln in lines:
        assert not ln.strip().startswith("@")
    assemble(ptx, "90a", tmp_path)


def test_prefetch_is_bounded_by_the_loop():
    # Each prefetch block is entered under a predicate computed with a compare against K: the
    # iteration P on must exist. (The branch into it: `@%p bra` after a setp.lt on the ahead value.)
    ptx = build(3).asm["ptx"]
    first = ptx.index(PREFETCH)
    before = ptx[:first]
    label = before[before.rindex("$L__BB"):].split(":")[0]
    assert f"bra.uni \t{label};" not in ptx  # reached only by a conditional branch
    assert re.search(r"add\.s32\s+%r\d+, %r\d+, 192;", ptx)  # 3 iterations of 64


def test_prefetch_distance_changes_the_kernel():
    # A hint that shapes the code is part of what the cache hashes: P = 2 and P = 4 differ.
    assert build(2).asm["ptx"] != build(4).asm["ptx"]


@pytest.mark.parametrize("case", ["carried", "sm80", "no-tma"])
def test_hint_ignored_where_it_cannot_apply(case):
    if case == "carried":
        # The boxes' coordinates come from block pointers carried round the loop: iteration + P's
        # are not at hand, so no prefetch (the ring itself still runs on the TMA).
        ptx = build(2, fn=matmul_carried).asm["ptx"]
        assert "cp.async.bulk.tensor.2d.shared::cluster" in ptx
    elif case == "sm80":
        ptx = build(2, target="cuda:80").asm["ptx"]
        assert "mma.sync" in ptx and "cp.async.bulk" not in ptx
    else:  # B's rows not 16-byte aligned: a cp.async ring, no tensor maps
        sig = dict(SIG, s_bk="i32")
        ptx = tessera.compile(tessera.jit(matmul), sig, {"BM": 128, "BN": 128, "BK": 64, "P": 2, "WS": False},
                              target="cuda:90a", num_warps=8, num_stages=3).asm["ptx"]
        assert "cp.async.bulk.tensor" not in ptx
    assert PREFETCH not in ptx


def _small_product(seed, M, N, K, P):
    """An fp16 product with the hint, launched on this process's back end, against float64."""
    kern = tessera.jit(matmul)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    kern[(tessera.cdiv(M, 16), tessera.cdiv(N, 16))](a, b, c, M, N, K, K, N, N, BM=16, BN=16, BK=16, P=P, WS=False)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-2)


def test_cpu_ignores_the_hint():
    _small_product(0, 33, 40, 70, P=2)


@pytest.mark.parametrize("bad,why", [("-1", "integer >= 0"), ("1.5", "integer >= 0"), ("K", "integer >= 0")])
def test_bad_distance_is_a_compile_error(bad, why, tmp_path):
    src = tmp_path / "bad_prefetch.py"
    src.write_text(
        "import tessera\nimport tessera.language as tl\n\n\n@tessera.kernel\n"
        "def k(x_ptr, K):\n"
        "    acc = tl.zeros((16,), dtype=tl.float32)\n"
        f"    for i in tl.range(0, K, 16, l2_prefetch={bad}):\n"
        "        acc += tl.load(x_ptr + i + tl.arange(0, 16))\n"
        "    tl.store(x_ptr + tl.arange(0, 16), acc)\n")
    import importlib.util
    spec = importlib.util.spec_from_file_location("bad_prefetch", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(tessera.CompilationError) as e:
        tessera.compile(mod.k, {"x_ptr": "*fp32", "K": "i32"}, {}, target="cpu")
    msg = str(e.value)
    assert f"tl.range's l2_prefetch must be a compile-time {why}" in msg
    assert e.value.lineno == 8 and "bad_prefetch.py" in msg and "in kernel k" in msg
    assert f"for i in tl.range(0, K, 16, l2_prefetch={bad}):" in msg  # the source line, a caret under it


def test_interpreter_ignores_the_hint():
    with interpreted():
        _small_product(1, 16, 16, 48, P=3)


@pytest.mark.gpu
@pytest.mark.parametrize("ws", [False, True], ids=["plain", "specialized"])
@pytest.mark.parametrize("M,N,K,P", [(512, 384, 1024, 2), (300, 200, 70, 4), (256, 256, 640, 16)])
def test_gpu_products_with_prefetch(ws, M, N, K, P):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    g = torch.Generator(device="cuda").manual_seed(M + K)
    a = torch.randn(M, -(-K // 16) * 16, device="cuda", generator=g).half()[:, :K]
    b = torch.randn(K, -(-N // 16) * 16, device="cuda", generator=g).half()[:, :N]
    c = torch.full((M, N), float("nan"), device="cuda")
    kern = tessera.jit(matmul)
    kern[(tessera.cdiv(M, 128), tessera.cdiv(N, 128))](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                                                       BM=128, BN=128, BK=64, P=P, WS=ws, num_warps=8, num_stages=3)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "unwritten (NaN) outputs"
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4 * K ** 0.5)
