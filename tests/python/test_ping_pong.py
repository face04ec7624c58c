"""tl.range(..., warp_specialize=True, ping_pong=True) (compiler/codegen/nvptx/ping_pong_nvptx.cpp):
the PTX of kernels/linear.py's flat persistent matmul with two consumer warpgroups taking
its tiles in turn (roles, per-warpgroup named barriers and buffers, the turn mbarriers,
setmaxnreg), the errors where it cannot apply, the targets that ignore it (CPU,
interpreter), and (marked gpu) the kernel against float64 on edge shapes with NaN-poisoned
outputs."""
import re

import pytest

import tessera
import tessera.language as tl
from tessera.kernels import linear as L
from ptxas_check import assemble  # noqa: E402

torch = pytest.importorskip("torch")

PP = {"num_warps": 4, "num_stages": 4, "persistent": 1, "warp_specialize": True, "ping_pong": True}


def _linear_ping_pong(stages=4, act=L.ACT_RELU, dtype="fp16", mn="i32:16", store_z=False, bn=256, has_bias=True):
    """kernels/linear.py's persistent kernel as L.matmul launches x @ W^T + b with ping-pong
    consumers (64-row tiles: one warpgroup's wgmma rows)."""
    sig = {p: f"*{dtype}:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("K", "s_ab", "s_am", "s_bb", "s_bn", "s_cb")})
    sig.update(M=mn, N=mn, scale="fp32", batches="i32")
    ce = dict(s_ak=1, s_bk=1, A_MMAJOR=False, B_KMAJOR=True, ACT=act, HAS_BIAS=has_bias, STORE_Z=store_z,
              SCALE=False, ACC=tl.float32, BATCHED=False, BLOCK_M=64, BLOCK_N=bn, BLOCK_K=64, GROUP_M=1,
              WARP_SPECIALIZE=True, PING_PONG=True)
    return tessera.compile(L._persistent_matmul_kernel, sig, ce, target="cuda:90a", num_warps=4, num_stages=stages)


def _assemble(ptx, tmp_path):
    """ptxas -v on sm_90a (skips without the CUDA toolkit): its register/spill report."""
    return assemble(ptx, "90a", tmp_path, verbose=True)


def _split(ptx):
    """(before the split, producer, consumers): the split is the branch on `tid < 256` (two
    consumer warpgroups); the producer's blocks come first."""
    m = re.search(r"setp\.lt\.u32\s+(%p\d+), %r\d+, 256;\s*\n\s*@\1 bra\s+(\$L__BB\d+_\d+);", ptx)
    assert m, "no producer/consumer split"
    start = ptx.index(m.group(2) + ":")
    return ptx[:m.start()], ptx[m.end():start], ptx[start:]


def test_ping_pong_ptx(tmp_path):
    ck = _linear_ping_pong()
    assert ck.metadata["threads"] == "384" and ck.metadata["num_warps"] == "4"
    ptx = ck.asm["ptx"]
    assert ".maxntid 384" in ptx
    before, producer, consumers = _split(ptx)
    # Before the split: 4 full (1 arrival), 4 empty (4 arrivals: one warpgroup's warps release a
    # stage) and 2 turn barriers (1); warpgroup 0's first turn is given at once.
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", before)
    assert sorted(inits) == sorted(["1"] * 6 + ["4"] * 4), inits
    assert before.count("mbarrier.arrive.shared::cta.b64") == 1
    # Registers: 384 threads launch with 168; the producer keeps 40, each consumer takes 232.
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in producer
    assert consumers.count("setmaxnreg.inc.sync.aligned.u32 232;") == 1
    # The producer issues the copies only (one A box, one B box of 256 rows per stage).
    assert producer.count("cp.async.bulk.tensor.2d") == 2 and "wgmma" not in producer and "bar" not in producer.replace(
        "mbarrier", "")
    # The consumers: thread ids modulo 128 and the warpgroup (tid >> 7); one m64n256k16 tile per
    # warpgroup (4 k-steps), no copies; the epilogue's barriers the warpgroup's own named
    # barrier (2 + group) over 128 threads; after the loop barrier 1 over both (256), then
    # warpgroup 0 alone (128).
    assert "cp.async.bulk" not in consumers
    assert consumers.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    assert re.search(r"and\.b32\s+%r\d+, %r\d+, 127;", consumers) and re.search(r"shr\.u32\s+(%r\d+), %r\d+, 7;",
                                                                                 consumers)
    group_bars = re.findall(r"barrier\.sync \t(%r\d+), 128;", consumers)
    assert len(group_bars) == 2 and len(set(group_bars)) == 1  # one store buffer pass: 2 barriers
    assert re.search(r"or\.b32\s+" + re.escape(group_bars[0]) + r", %r\d+, 2;", consumers)
    assert consumers.count("barrier.sync \t1, 256;") == 1 and consumers.count("barrier.sync \t1, 128;") == 1
    # Turns: a run's first iteration waits on its warpgroup's turn barrier; the run's last
    # waits for its wgmma groups, releases its two stages (a group stays in flight within a
    # run: wait_group 1) and hands the turn over before the epilogue (four arrives: those two
    # releases, the turn, and the usual release of the previous iteration's stage).
    assert consumers.count("mbarrier.arrive.shared::cta.b64") == 4
    assert consumers.count("wgmma.wait_group.sync.aligned 1;") == 1
    assert consumers.count("mbarrier.try_wait.parity") == 2  # the full barrier and the turn
    info = _assemble(ptx, tmp_path)
    assert "0 bytes spill stores" in info


def test_store_buffer_per_warpgroup():
    # Each warpgroup converts its 64x256 f16 output through its own padded buffer, both beside
    # the 4-stage ring (4 x 40 KB): 160 KB + 2 x 33 KB fit the H100's 227 KB in one pass.
    ck = _linear_ping_pong()
    ring, store = 4 * (64 + 256) * 64 * 2, 64 * (256 + 8) * 2
    assert ring + 2 * store <= int(ck.metadata["shared"]) < ring + 2 * store + 1024


def test_stored_preactivation_shares_the_buffer(tmp_path):
    # Training's forward stores Z and C through the same per-warpgroup buffer.
    ck = _linear_ping_pong(act=L.ACT_GELU, store_z=True)
    ring, store = 4 * (64 + 256) * 64 * 2, 64 * (256 + 8) * 2
    assert ring + 2 * store <= int(ck.metadata["shared"]) < ring + 2 * store + 1024
    _, _, consumers = _split(ck.asm["ptx"])
    assert len(re.findall(r"barrier\.sync \t%r\d+, 128;", consumers)) == 4
    _assemble(ck.asm["ptx"], tmp_path)


@pytest.mark.parametrize("kw", [dict(mn="i32"), dict(dtype="bf16"), dict(stages=3), dict(has_bias=False, act=L.ACT_NONE),
                                dict(bn=128)], ids=["unaligned_mn", "bf16", "stages3", "no_bias", "64x128"])
def test_variants_assemble(kw, tmp_path):
    ck = _linear_ping_pong(**kw)
    assert ck.metadata["threads"] == "384"
    assert "0 bytes spill stores" in _assemble(ck.asm["ptx"], tmp_path)


def test_ir_carries_the_attribute():
    assert "ping_pong = 1" in _linear_ping_pong().asm["tir"]


def test_cpu_and_interpreter_ignore_it(monkeypatch):
    # The same source on the CPU (L.matmul's GPU plan on 4 "SMs": several tiles per program)
    # and in the interpreter: the loop runs in order, as its meaning says.
    import test_kernels_linear as T
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(L, "_sm_count", lambda like: 4)
    for product in T.PERSISTENT_PRODUCTS:
        c, want = T._persistent_product("cpu", torch.float32, *product,
                                        (32, 16, 16, {"persistent": 1, "warp_specialize": True, "ping_pong": True}),
                                        L.ACT_RELU)
        T._close(c, want, T.TOL[torch.float32], f"ping-pong on the CPU {product}")
    monkeypatch.setenv("TESSERA_INTERPRET", "1")
    c, want = T._persistent_product("cpu", torch.float32, 1, 40, 24, 20, False, True,
                                    (16, 16, 16, {"persistent": 1, "warp_specialize": True, "ping_pong": True}),
                                    L.ACT_GELU)
    T._close(c, want, T.TOL[torch.float32], "ping-pong in the interpreter")


# --------------------------------------------------------------------------- errors

def _flat(a, b, c, M, N, K, steps, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    """A flat loop over K steps of tiles along M (N = BN), as _persistent_matmul_kernel; MODE
    breaks one of ping_pong's rules."""
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    t = 0
    k = 0
    seen = 0.0
    acc = tl.zeros([BM, BN], tl.float32)
    if MODE == 1:
        acc = tl.full([BM, BN], 1.0, tl.float32)
    for i in tl.range(0, steps, warp_specialize=True, ping_pong=True):
        rm = t * BM + tl.arange(0, BM)
        kk = tl.multiple_of(k, BK) + rk
        x = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        acc = tl.dot(x, tl.trans(y), acc)
        k += BK
        if MODE == 3:  # a carried scalar read from memory: the other warpgroup cannot compute it
            seen += tl.load(c + i)
        if k >= K:
            tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)
            if MODE != 2:
                acc = tl.zeros([BM, BN], tl.float32)
        last = k >= K
        t = tl.where(last, t + 1, t)
        k = tl.where(last, 0, k)
    if MODE == 3:
        tl.store(c, seen)
    if MODE == 4:
        tl.store(c + tl.arange(0, BM)[:, None] * N + rn[None, :], acc)


FLAT_SIG = {"a": "*fp16:16", "b": "*fp16:16", "c": "*fp32:16", "M": "i32", "N": "i32", "K": "i32:16", "steps": "i32"}


@pytest.mark.parametrize("mode, num_warps, message", [
    (0, 8, "launch it with num_warps=4 (got 8)"),
    (1, 4, "does not start from zeros"),
    (2, 4, "is not reset to zeros by the loop's `if` that ends a tile"),
    (3, 4, "must be plain arithmetic on scalars"),
    (4, 4, "is used after the loop"),
], ids=["num_warps", "init", "no_reset", "scalar_from_memory", "tile_used_after"])
def test_where_it_cannot_apply(mode, num_warps, message):
    with pytest.raises(tessera.CompilationError) as e:
        tessera.compile(tessera.kernel(_flat), FLAT_SIG, {"BM": 16 * num_warps, "BN": 128, "BK": 64, "MODE": mode},
                        target="cuda:90a", num_warps=num_warps, num_stages=4)
    text = str(e.value)
    assert message in text and "ping_pong=True" in text and "_flat" in text


def test_the_flat_loop_compiles():
    ck = tessera.compile(tessera.kernel(_flat), FLAT_SIG, {"BM": 64, "BN": 128, "BK": 64, "MODE": 0},
                         target="cuda:90a", num_warps=4, num_stages=4)
    assert ck.metadata["threads"] == "384"


def test_needs_warp_specialize():
    def alone(x, out, n):
        for i in tl.range(0, n, ping_pong=True):
            tl.store(out + i, tl.load(x + i))

    with pytest.raises(tessera.CompilationError, match="ping_pong=True needs warp_specialize=True"):
        tessera.compile(tessera.kernel(alone), {"x": "*fp32", "out": "*fp32", "n": "i32"})


def test_must_be_compile_time():
    def runtime_flag(x, out, n, flag):
        for i in tl.range(0, n, warp_specialize=True, ping_pong=flag):
            tl.store(out + i, tl.load(x + i))

    with pytest.raises(tessera.CompilationError, match="ping_pong must be a compile-time bool"):
        tessera.compile(tessera.kernel(runtime_flag), {"x": "*fp32", "out": "*fp32", "n": "i32", "flag": "i32"})


# --------------------------------------------------------------------------- GPU

from test_warp_specialize import _poisoned_outputs  # noqa: E402  (C and Z start as NaN)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_ping_pong_linear_on_gpu(dtype, monkeypatch):
    import test_kernels_linear as T
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _poisoned_outputs(monkeypatch)
    # Edges: M, N not multiples of the tile; K not a multiple of BK (80), K < BK (48), one K step
    # (64), K 1024; odd and even tile counts per program (one CTA per SM: 4097x1030 at 64x256 is
    # 65 x 5 = 325 tiles, 2-3 per program, so each warpgroup's share differs); bias or not;
    # relu, gelu, none; 3 and 4 stages; 64x128 tiles. K = 200 (400-byte rows: a multiple of 8
    # elements only, which the launch also specializes on).
    for stages, bn in ((4, 256), (3, 256), (4, 128)):
        tiles = (64, bn, 64, {**PP, "num_stages": stages})
        for product, act in T.RAGGED_PRODUCTS + [((1, 4096, 1024, 2048, False, True), L.ACT_GELU),
                                                 ((1, 64, 1024, 256, False, True), L.ACT_RELU)]:
            c, want = T._persistent_product("cuda", dtype, *product, tiles, act)
            assert not torch.isnan(c).any(), f"unwritten outputs {tiles} {product}"
            T._close(c, want, T.TOL[dtype], f"ping-pong s{stages} 64x{bn} {product} act {act}")


@pytest.mark.gpu
def test_ping_pong_training_forward_on_gpu(monkeypatch):
    # linear_gelu with grad: Z (the pre-activation) and C both stored by the ping-pong kernel.
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _poisoned_outputs(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(4097, 520, generator=gen), torch.randn(1030, 520, generator=gen) / 23,
               torch.randn(1030, generator=gen))
    xd, wd, bd = (t.to("cuda", torch.float16) for t in (x, w, b))
    c, z = L.matmul(xd, wd, (0,) + xd.stride(), (0, wd.stride(1), wd.stride(0)), 1, 4097, 1030, 520, xd, bias=bd,
                    act=L.ACT_GELU, store_z=True, tiles=(64, 256, 64, PP))
    want_z = x.double() @ w.double().T + b.double()
    assert not torch.isnan(c).any() and not torch.isnan(z).any()
    torch.testing.assert_close(z[0].double().cpu(), want_z, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(c[0].double().cpu(), torch.nn.functional.gelu(want_z), rtol=2e-2, atol=2e-2)


# --------------------------------------------------------------------------- the epilogue's GELU

@tessera.kernel
def _gelu_of(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, L._gelu(tl.load(x + offs, mask=offs < n)), mask=offs < n)


def _gelu_error(device):
    x = torch.cat([torch.linspace(-12, 12, 200_001), torch.tensor([0.0, -0.0, 6.0, -6.0, 1e-30, -1e-30])])
    xd = x.to(device)
    out = torch.full_like(xd, float("nan"))
    _gelu_of[(tessera.cdiv(x.numel(), 1024),)](xd, out, x.numel(), BLOCK=1024)
    want = torch.nn.functional.gelu(x.double())
    return ((out.cpu().double() - want).abs() / x.double().abs().clamp(min=1)).max().item()


def test_epilogue_gelu_accuracy(monkeypatch):
    # L._gelu (one polynomial for log2 Phi and one exp2) against float64 erf GELU: within
    # 2^-22 of max(1, |x|) on the CPU (f32 rounding included), as the erf form is.
    assert _gelu_error("cpu") < 2.4e-7
    monkeypatch.setenv("TESSERA_INTERPRET", "1")
    assert _gelu_error("cpu") < 2.4e-7


@pytest.mark.gpu
def test_epilogue_gelu_accuracy_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    assert _gelu_error("cuda") < 5e-7  # ex2.approx: 2^-22 relative on p
