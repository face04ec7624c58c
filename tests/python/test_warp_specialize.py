"""tl.range(..., warp_specialize=True) (compiler/codegen/nvptx/warp_specialize_nvptx.cpp):
the PTX of a specialized flat persistent matmul for sm_90a (a producer warp that only
issues the TMA copies, consumers that only wait, wgmma and store; named barriers past
the split; the launch's extra warp), the errors where it cannot apply, the targets that
ignore it (CPU, interpreter, sm_80), and (marked gpu) kernels/linear.py's specialized
persistent kernel against float64 on edge shapes with NaN-poisoned outputs."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from tessera.kernels import linear as L
from ptxas_check import assemble  # noqa: E402

torch = pytest.importorskip("torch")



def _linear_persistent(ws=True, bn=256, stages=4, act=L.ACT_RELU, target="cuda:90a", dtype="fp16", mn="i32:16"):
    """kernels/linear.py's persistent kernel as L.matmul launches x @ W^T + b on a GPU
    (M and N multiples of 16 unless mn says otherwise)."""
    sig = {p: f"*{dtype}:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("K", "s_ab", "s_am", "s_bb", "s_bn", "s_cb")})
    sig.update(M=mn, N=mn, scale="fp32", batches="i32")
    ce = dict(s_ak=1, s_bk=1, A_MMAJOR=False, B_KMAJOR=True, ACT=act, HAS_BIAS=True, STORE_Z=False, SCALE=False,
              ACC=tl.float32, BATCHED=False, BLOCK_M=128, BLOCK_N=bn, BLOCK_K=64, GROUP_M=1, WARP_SPECIALIZE=ws)
    return tessera.compile(L._persistent_matmul_kernel, sig, ce, target=target, num_warps=8, num_stages=stages)


def _assemble(ptx, tmp_path):
    """ptxas -v on sm_90a (skips without the CUDA toolkit): its register/spill report."""
    return assemble(ptx, "90a", tmp_path, verbose=True)


def _split(ptx):
    """(before the split, producer, consumers) of a specialized kernel's PTX: the split is
    the first branch on `tid < 256` after the ring's setup; the producer's code runs from
    there to the consumers' first block (the target of that branch)."""
    m = re.search(r"setp\.lt\.u32\s+(%p\d+), %r\d+, 256;\s*\n\s*@\1 bra\s+(\$L__BB\d+_\d+);", ptx)
    assert m, "no producer/consumer split"
    consumer_label = m.group(2)
    start = ptx.index(consumer_label + ":")
    # The producer's blocks come before the consumers' in the PTX (emitted first).
    return ptx[:m.start()], ptx[m.end():start], ptx[start:]


def test_specialized_persistent_matmul_ptx(tmp_path):
    ck = _linear_persistent(stages=3)
    assert ck.metadata["threads"] == "384"  # two consumer warpgroups and the producer warpgroup
    ptx = ck.asm["ptx"]
    assert ".maxntid 384" in ptx
    before, producer, consumers = _split(ptx)
    # Before the split: every thread initializes the ring's barriers (3 full, 3 empty), CTA barrier 0.
    assert before.count("mbarrier.init.shared::cta.b64") == 6 and "bar.sync \t0;" in before
    # Registers: 384 threads launch with 168 each; the producer warpgroup keeps 40 and the
    # consumers take the rest (256 x 232 + 128 x 40 = 384 x 168).
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in producer and "setmaxnreg" not in before
    assert consumers.count("setmaxnreg.inc.sync.aligned.u32 232;") == 1 and "setmaxnreg.dec" not in consumers
    # The producer: only the copies (an A box and a B box per stage) behind expect_tx, and waits
    # on the empty barriers; no tensor-core work, no stores, no barriers.
    assert producer.count("cp.async.bulk.tensor.2d") == 2 and producer.count("mbarrier.arrive.expect_tx") == 1
    assert producer.count("mbarrier.try_wait.parity") == 1
    assert "wgmma" not in producer and "st.global" not in producer and "bar.sync" not in producer
    assert "barrier.sync" not in producer
    # The consumers: wait on full barriers, wgmma, release stages; no copies into the ring
    # (the output's copies go the other way: tma_store_nvptx.cpp); every barrier past the
    # split is named barrier 1 over the 256 consumer threads.
    assert "cp.async.bulk.tensor.2d.shared" not in consumers and "expect_tx" not in consumers
    assert consumers.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    assert "mbarrier.try_wait.parity" in consumers and "mbarrier.arrive.shared::cta.b64 _, [" in consumers
    # With 3 stages a wgmma group stays in flight (the producer refills every released stage).
    assert "wgmma.wait_group.sync.aligned 1;" in consumers
    assert "bar.sync" not in consumers and "barrier.sync \t1, 256;" in consumers
    info = _assemble(ptx, tmp_path)
    assert "Used 168 registers" in info and "0 bytes spill stores" in info
    # The bias is loaded in the accumulator's layout (each thread its columns, 32 pairs of
    # f16), not converted through shared memory. The output goes out by TMA copies in four
    # 128x64 chunks, each warpgroup its 64 rows with its own barriers (named 2 and 3, 128
    # threads: one before the first chunk, one per chunk before its copy); the consumers'
    # barrier is left for the ring's end.
    assert consumers.count("ld.global.b32") == 32 and "st.shared.b16" not in consumers
    assert consumers.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 4
    assert consumers.count("@p barrier.sync.aligned 2, 128;") == 1 + 4
    assert consumers.count("barrier.sync \t1, 256;") == 1


def test_bias_loads_before_the_last_wgmma_wait():
    # The epilogue branch waits for the tile's last wgmma group only where it first reads the
    # accumulator (lower_if): the bias loads (32 per thread) are issued before that wait, so
    # their latency passes while the group runs.
    _, _, consumers = _split(_linear_persistent(stages=4).asm["ptx"])
    wait = consumers.index("wgmma.wait_group.sync.aligned 0;")
    assert consumers[:wait].count("ld.global.b32") == 32 and "ld.global" not in consumers[wait:]


def test_unaligned_columns_assemble(tmp_path):
    # N not a multiple of 16: the output is stored from the accumulator's registers.
    info = _assemble(_linear_persistent(stages=3, mn="i32").asm["ptx"], tmp_path)
    assert "Used 168 registers" in info


def test_stored_preactivation_fits(tmp_path):
    # Training's forward stores Z (the pre-activation) and C: both go out by TMA copies
    # through the same chunk buffers (the ring, which the producer keeps filling, cannot
    # lend it), each with its own tensor map.
    sig = {p: "*fp16:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("M", "N", "K", "s_ab", "s_am", "s_bb", "s_bn", "s_cb")})
    sig.update(scale="fp32", batches="i32")
    ce = dict(s_ak=1, s_bk=1, A_MMAJOR=False, B_KMAJOR=True, ACT=L.ACT_GELU, HAS_BIAS=True, STORE_Z=True, SCALE=False,
              ACC=tl.float32, BATCHED=False, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=1, WARP_SPECIALIZE=True)
    ck = tessera.compile(L._persistent_matmul_kernel, sig, ce, target="cuda:90a", num_warps=8, num_stages=3)
    ring = 3 * (128 + 256) * 64 * 2
    store = 4 * 128 * 128  # four 128x64 f16 chunk buffers: the whole tile
    assert ck.metadata["threads"] == "384" and ring + store <= int(ck.metadata["shared"]) < ring + store + 2048
    assert ck.metadata["tensor_maps"].endswith("|4:2:128:64:64:i6:i5:i6|3:2:128:64:64:i6:i5:i6")  # Z's, C's
    _, _, consumers = _split(ck.asm["ptx"])
    assert consumers.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 2 * 4
    assert "st.global" not in consumers
    _assemble(ck.asm["ptx"], tmp_path)


def test_four_stages_store_in_column_chunks(tmp_path):
    # 4 stages of 128x256x64 (192 KB) leave room for two of the output's four 128x64 chunk
    # buffers (16 KB each): chunk c waits until chunk c-2's copy has read its buffer.
    ck = _linear_persistent(stages=4)
    ring, bufs = 4 * (128 + 256) * 64 * 2, 2 * 128 * 128
    assert ring + bufs <= int(ck.metadata["shared"]) < ring + bufs + 2048
    _, _, consumers = _split(ck.asm["ptx"])
    assert consumers.count("@p barrier.sync.aligned 3, 128;") == 1 + 4
    assert consumers.count("cp.async.bulk.wait_group.read 1;") == 1
    assert consumers.count("cp.async.bulk.wait_group.read 0;") == 3
    assert "st.global" not in consumers
    _assemble(ck.asm["ptx"], tmp_path)


def test_tma_mode_4_stores_in_column_halves(monkeypatch, tmp_path):
    # TESSERA_TMA=4 (to measure against): TMA rings, the output through one 128x128 padded
    # buffer in two passes (two barriers each), 8 16-byte stores per thread per pass.
    monkeypatch.setenv("TESSERA_TMA", "4")
    sig = {p: "*fp16:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32:16" for p in ("M", "N", "K", "s_ab", "s_am", "s_bb", "s_bn", "s_cb")})
    sig.update(scale="fp32", batches="i32")
    ce = dict(s_ak=1, s_bk=1, A_MMAJOR=False, B_KMAJOR=True, ACT=L.ACT_RELU, HAS_BIAS=True, STORE_Z=False, SCALE=False,
              ACC=tl.float32, BATCHED=False, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=1, WARP_SPECIALIZE=True)
    ck = tessera.compile(tessera.jit(L._persistent_matmul_kernel.fn), sig, ce, target="cuda:90a", num_warps=8,
                         num_stages=4)
    ring, half = 4 * (128 + 256) * 64 * 2, 128 * (128 + 8) * 2
    assert ring + half <= int(ck.metadata["shared"]) < ring + half + 1024
    assert ck.metadata["tensor_maps"].count("|") == 2  # the ring's two maps only
    _, _, consumers = _split(ck.asm["ptx"])
    assert consumers.count("barrier.sync \t1, 256;") == 2 * 2 + 1
    assert consumers.count("st.global.v4.b32") == 2 * 8 and "cp.async.bulk" not in consumers
    _assemble(ck.asm["ptx"], tmp_path)


def test_producer_parity_with_four_stages():
    # The w-th issue (w >= 4) waits for the (w/4 - 1)-th release of stage w % 4: parity
    # (w/4 - 1) & 1, which is bit 2 of ~w.
    _, producer, _ = _split(_linear_persistent(bn=128, stages=4).asm["ptx"])
    assert re.search(r"not\.b32\s+(%r\d+), %r\d+;\s*\n\s*bfe\.u32\s+%r\d+, \1, 2, 1;", producer)
    assert re.search(r"setp\.gt\.u32\s+%p\d+, %r\d+, 3;", producer)  # no wait for the first 4 issues


def test_unaligned_rows_run_unspecialized():
    # K not known to be a multiple of 16 elements: the rows may not be 16-byte aligned, no
    # TMA ring for this specialization, so the loop runs as written (other launches of the
    # same kernel may still specialize it).
    sig = {p: "*fp16:16" for p in ("A", "B", "BIAS", "C", "Z")}
    sig.update({p: "i32" for p in ("K", "s_am", "s_bn")})
    sig.update({p: "i32:16" for p in ("s_ab", "s_bb", "s_cb")})
    sig.update(M="i32", N="i32", scale="fp32", batches="i32")
    ce = dict(s_ak=1, s_bk=1, A_MMAJOR=False, B_KMAJOR=True, ACT=1, HAS_BIAS=True, STORE_Z=False, SCALE=False,
              ACC=tl.float32, BATCHED=False, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=1, WARP_SPECIALIZE=True)
    ck = tessera.compile(L._persistent_matmul_kernel, sig, ce, target="cuda:90a", num_warps=8, num_stages=3)
    assert ck.metadata["threads"] == "256" and "setmaxnreg" not in ck.asm["ptx"]


def test_unspecialized_kernel_unchanged():
    ck = _linear_persistent(ws=False, stages=3)
    ptx = ck.asm["ptx"]
    assert ck.metadata["threads"] == "256" and ".maxntid 256" in ptx
    assert "barrier.sync" not in ptx and "setp.lt.u32 \t%p9, %r1, 256" not in ptx
    # Thread 0 of the consumers issues the copies: two stages before the loop, one per iteration.
    assert ptx.count("cp.async.bulk.tensor.2d") == 2 * 3


def test_other_targets_ignore_it():
    # sm_80 (no TMA, no wgmma): a schedule hint the same source may carry everywhere.
    ck = _linear_persistent(target="cuda:80", stages=3, bn=128)
    assert ck.metadata["threads"] == "256" and "barrier.sync" not in ck.asm["ptx"]


def test_cpu_and_interpreter_ignore_it(monkeypatch):
    # The CPU back end: the specialized persistent kernel through L.matmul's GPU plan (4 "SMs").
    import test_kernels_linear as T
    monkeypatch.setattr(L.H, "on_gpu", lambda t: True)
    monkeypatch.setattr(L, "_sm_count", lambda like: 4)
    for product in T.PERSISTENT_PRODUCTS:
        c, want = T._persistent_product("cpu", torch.float32, *product,
                                        (32, 16, 16, {"persistent": 1, "warp_specialize": True}), L.ACT_RELU)
        T._close(c, want, T.TOL[torch.float32], f"warp-specialized on the CPU {product}")

    @tessera.kernel
    def partial_sums(x, out, n, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], tl.float32)
        for i in tl.range(0, n, BLOCK, warp_specialize=True):
            acc += tl.load(x + i + tl.arange(0, BLOCK), mask=i + tl.arange(0, BLOCK) < n, other=0.0)
        tl.store(out + tl.arange(0, BLOCK), acc)

    x = np.arange(100, dtype=np.float32)
    want = np.zeros(16, np.float32)
    for i in range(0, 100, 16):
        chunk = x[i:i + 16]
        want[:len(chunk)] += chunk
    for interpret in ("0", "1"):
        monkeypatch.setenv("TESSERA_INTERPRET", interpret)
        out = np.full(16, np.nan, np.float32)
        partial_sums[(1,)](x, out, 100, BLOCK=16)
        np.testing.assert_array_equal(out, want)


def _gpu_compile(fn, sig, ce, num_stages=3):
    return tessera.compile(tessera.kernel(fn), sig, ce, target="cuda:90a", num_warps=4, num_stages=num_stages)


def _no_ring(x, out, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for i in tl.range(0, n, BLOCK, warp_specialize=True):
        acc += tl.load(x + i + tl.arange(0, BLOCK))
    tl.store(out + tl.arange(0, BLOCK), acc)


def _nested(a, b, c, M, N, K, s_am, s_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for t in range(0, 2):
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, warp_specialize=True):
            x = tl.load(a + rm[:, None] * s_am + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0.0)
            y = tl.load(b + (k + rk)[:, None] * s_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + t * BM * N + rm[:, None] * N + rn[None, :], acc)


def _outer(a, b, c, M, N, K, s_am, s_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for t in tl.range(0, 2, warp_specialize=True):
        acc = tl.zeros([BM, BN], tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * s_am + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0.0)
            y = tl.load(b + (k + rk)[:, None] * s_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + t * BM * N + rm[:, None] * N + rn[None, :], acc)


def _two_in_a_row(a, b, c, M, N, K, s_am, s_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    for t in tl.static_range(2):  # two specialized loops on one path: the second is refused
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, warp_specialize=True):
            x = tl.load(a + rm[:, None] * s_am + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0.0)
            y = tl.load(b + (k + rk)[:, None] * s_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + t * BM * N + rm[:, None] * N + rn[None, :], acc)


MM_SIG = {"a": "*fp16:16", "b": "*fp16:16", "c": "*fp32:16", "M": "i32", "N": "i32", "K": "i32", "s_am": "i32:16",
          "s_bk": "i32:16"}


@pytest.mark.parametrize("fn, sig, ce, message", [
    (_no_ring, {"x": "*fp32:16", "out": "*fp32:16", "n": "i32"}, {"BLOCK": 128}, "loads no tl.dot operand"),
    (_nested, MM_SIG, {"BM": 64, "BN": 64, "BK": 64}, "inside another loop"),
    (_outer, MM_SIG, {"BM": 64, "BN": 64, "BK": 64}, "loaded in an inner loop"),
    (_two_in_a_row, MM_SIG, {"BM": 64, "BN": 64, "BK": 64}, "already has a warp-specialized loop on this path"),
], ids=["no_ring", "nested", "ring_in_inner_loop", "two_in_a_row"])
def test_where_it_cannot_apply(fn, sig, ce, message):
    with pytest.raises(tessera.CompilationError) as e:
        _gpu_compile(fn, sig, ce)
    text = str(e.value)
    assert message in text and "warp_specialize=True" in text and fn.__name__ in text


def _two_products(a, b, c, M, N, K, s_am, s_bk, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  OTHER: tl.constexpr):
    """Program 0 computes a @ b with a specialized loop; the other programs (OTHER):
    0 a specialized loop of their own (K steps in reverse), 1 return at once, 2 an
    unspecialized store; then every program stores a row of ones after the if."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if tl.program_id(0) == 0:
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, warp_specialize=True):
            x = tl.load(a + rm[:, None] * s_am + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                        other=0.0)
            y = tl.load(b + (k + rk)[:, None] * s_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    elif OTHER == 0:
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, warp_specialize=True):
            kk = K - BK - k + rk
            x = tl.load(a + rm[:, None] * s_am + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            y = tl.load(b + kk[:, None] * s_bk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + M * N + rm[:, None] * N + rn[None, :], acc * 2.0, mask=(rm[:, None] < M) & (rn[None, :] < N))
    elif OTHER == 1:
        return
    elif OTHER == 3:  # asks too, but its operands start one element past a: no TMA ring, no split
        acc = tl.zeros([BM, BN], tl.float32)
        for k in tl.range(0, K, BK, warp_specialize=True):
            x = tl.load(a + 1 + rm[:, None] * s_am + (k + rk)[None, :],
                        mask=(rm[:, None] < M) & ((k + rk)[None, :] < K - 1), other=0.0)
            y = tl.load(b + (k + rk)[:, None] * s_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        tl.store(c + M * N + rm[:, None] * N + rn[None, :], tl.zeros([BM, BN], tl.float32),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.store(c + 2 * M * N + tl.program_id(0) * BM + rm, tl.zeros([BM], tl.float32) + 1.0)


def _producer_paths(ptx):
    """The producer warpgroup's paths: each starts where its threads give up registers."""
    return ptx.count("setmaxnreg.dec.sync.aligned.u32 40;")


@pytest.mark.parametrize("maxnreg", [None, 80])
def test_each_branch_specializes_its_own_loop(maxnreg, tmp_path):
    # A program runs one branch of a kernel-level if: each branch's loop gets its own split
    # (a producer warpgroup issuing its ring's TMA copies, consumers past named barrier 1),
    # lowered from the state before the if. The launch: 4 consumer warps + the producer
    # warpgroup. maxnreg caps the registers the block launches with (two blocks an SM at 80:
    # the consumers then take (256 x 80 - 128 x 40) / 128 = 120).
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}
    ck = tessera.compile(tessera.kernel(_two_products), MM_SIG, {"BM": 64, "BN": 64, "BK": 64, "OTHER": 0},
                         target="cuda:90a", num_warps=4, num_stages=3, **extra)
    ptx = ck.asm["ptx"]
    assert ck.metadata["threads"] == "256" and len(ck.metadata["tensor_maps"].split("|")) == 5  # 2 + 2 maps
    assert _producer_paths(ptx) == 2 and ptx.count("cp.async.bulk.tensor.2d") == 4
    assert ptx.count("setmaxnreg.inc.sync.aligned.u32 " + ("256" if maxnreg is None else "120") + ";") == 2
    assert ptx.count("wgmma.mma_async") == 8 and "cp.async.cg" not in ptx
    # Every barrier past a split is named barrier 1 over the 128 consumers (the stores of
    # the row of ones after the if need none).
    assert "barrier.sync \t1, 128;" in ptx and ptx.count("bar.sync \t0;") == 4  # each ring's setup, all threads
    if maxnreg:
        assert ".maxnreg 80" in ptx
    info = _assemble(ptx, tmp_path)
    assert "0 bytes spill stores" in info


@pytest.mark.parametrize("other", [1, 2, 3], ids=["returns", "unspecialized", "ask_without_ring"])
def test_the_other_branch_runs_without_the_producer(other):
    # Where only one branch specializes, the other one's threads past the kernel's warps
    # (the producer warpgroup the launch has for the first branch) leave at its start:
    # the unspecialized store runs on 4 warps, as its layout says. A loop that asks but
    # gets no TMA ring (operands one element off 16-byte alignment) sends them home
    # before it.
    ck = tessera.compile(tessera.kernel(_two_products), MM_SIG, {"BM": 64, "BN": 64, "BK": 64, "OTHER": other},
                         target="cuda:90a", num_warps=4, num_stages=3)
    ptx = ck.asm["ptx"]
    assert ck.metadata["threads"] == "256" and _producer_paths(ptx) == 1
    # Thread-id tests against the 128 consumers: the split's, and (a branch with code) the
    # leaving threads' (for a branch that returns, both of its paths return).
    tests = re.findall(r"setp\.(?:lt|gt|ge)\.u32\s+%p\d+, %r\d+, 12[78];", ptx)
    assert len(tests) == (1 if other == 1 else 2), tests


def _ping_pong_in_branch(a, b, c, M, N, K, steps, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if tl.program_id(0) == 0:
        t = 0
        k = 0
        acc = tl.zeros([BM, BN], tl.float32)
        for i in tl.range(0, steps, warp_specialize=True, ping_pong=True):
            rm = t * BM + tl.arange(0, BM)
            kk = tl.multiple_of(k, BK) + rk
            x = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            y = tl.load(b + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
            acc = tl.dot(x, tl.trans(y), acc)
            k += BK
            if k >= K:
                tl.store(c + rm[:, None] * N + rn[None, :], acc, mask=rm[:, None] < M)
                acc = tl.zeros([BM, BN], tl.float32)
            last = k >= K
            t = tl.where(last, t + 1, t)
            k = tl.where(last, 0, k)
    tl.store(c + M * N + tl.program_id(0), 1.0)


def test_branches_that_go_on_with_different_threads():
    # A ping-pong loop in one branch (two consumer warpgroups, thread ids renumbered) and
    # code after the if that the other branch reaches on one warpgroup: an error.
    sig = {"a": "*fp16:16", "b": "*fp16:16", "c": "*fp32:16", "M": "i32", "N": "i32", "K": "i32:16", "steps": "i32"}
    with pytest.raises(tessera.CompilationError) as e:
        tessera.compile(tessera.kernel(_ping_pong_in_branch), sig, {"BM": 64, "BN": 128, "BK": 64},
                        target="cuda:90a", num_warps=4, num_stages=4)
    text = str(e.value)
    assert "branches of this if go on to the code after it with different threads" in text
    assert "_ping_pong_in_branch" in text


@pytest.mark.parametrize("other", [0, 1, 2, 3])
def test_two_products_on_the_cpu(other):
    # The same source on the CPU (the hint ignored): program 0's product, program 1's.
    import torch as T
    gen = T.Generator().manual_seed(other)
    m, n, k = 50, 40, 128
    a, b = T.randn(m, k, generator=gen).half(), T.randn(k, n, generator=gen).half()
    c = T.full((2 * m * n + 2 * 64,), float("nan"))
    tessera.kernel(_two_products)[(2,)](a, b, c, m, n, k, k, n, BM=64, BN=64, BK=64, OTHER=other)
    want = a.double() @ b.double()
    assert T.allclose(c[:m * n].view(m, n).double(), want, atol=1e-2, rtol=1e-3)
    if other == 3:  # each row of a read from its second element on, K - 1 of them
        flat = a.reshape(-1)
        shifted = T.stack([flat[1 + i * k:i * k + k] for i in range(m)]).double()
        other_want = shifted @ b[:-1].double()
    else:
        other_want = 2 * want if other == 0 else 0 * want
    if other != 1:
        assert T.allclose(c[m * n:2 * m * n].view(m, n).double(), other_want, atol=2e-2, rtol=1e-3)
    ones = c[2 * m * n:]
    assert (ones[:64] == 1).all() and ((ones[64:] == 1).all() if other != 1 else ones[64:].isnan().all())


def test_warp_specialize_must_be_compile_time():
    def runtime_flag(x, out, n, flag):
        for i in tl.range(0, n, warp_specialize=flag):
            tl.store(out + i, tl.load(x + i))

    with pytest.raises(tessera.CompilationError, match="warp_specialize must be a compile-time bool"):
        tessera.compile(tessera.kernel(runtime_flag), {"x": "*fp32", "out": "*fp32", "n": "i32", "flag": "i32"})


def test_ir_carries_the_attribute():
    ck = _linear_persistent(stages=3)
    assert re.search(r"= for .*warp_specialize = 1", ck.asm["tir"]) or "warp_specialize = 1" in ck.asm["tir"]


# --------------------------------------------------------------------------- GPU

def _poisoned_outputs(monkeypatch):
    """L.matmul's C (and Z) start as NaN: an element no program wrote stays NaN."""
    real = L.H.empty

    def empty(like, shape):
        out = real(like, shape)
        if hasattr(out, "fill_") and out.is_floating_point():
            out.fill_(float("nan"))
        return out
    monkeypatch.setattr(L.H, "empty", empty)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_specialized_linear_on_gpu(dtype, monkeypatch):
    import test_kernels_linear as T
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _poisoned_outputs(monkeypatch)
    # Edges: M, N not multiples of the tile, K not a multiple of BK (80), K < BK (48), one K
    # step (64), K 1024; several tiles per program (297 tiles of 128x128 on one CTA per SM);
    # bias or not, relu and gelu; N-major B (dX = dZ W); stage counts with and without a wgmma
    # group in flight. K = 200 (400-byte rows: a multiple
    # of 8 elements only, which the launch also specializes on).
    for per_sm, stages, bn, bk in ((1, 3, 256, 64), (1, 4, 256, 64), (1, 6, 256, 32), (1, 4, 128, 64),
                                   (2, 3, 128, 64)):
        tiles = (128, bn, bk, {"num_warps": 8, "num_stages": stages, "persistent": per_sm, "warp_specialize": True})
        for product, act in T.RAGGED_PRODUCTS:
            c, want = T._persistent_product("cuda", dtype, *product, tiles, act)
            assert not torch.isnan(c).any(), f"unwritten outputs {tiles} {product}"
            T._close(c, want, T.TOL[dtype], f"warp-specialized s{stages} 128x{bn}x{bk} x{per_sm} {product} act {act}")


def test_gpu_tiles_pick_it_on_sm90_wide_products():
    ws = (128, 256, 64, {"num_warps": 8, "num_stages": 4, "persistent": 1, "warp_specialize": True})
    assert L._gpu_tiles("float16", 4096, 2048, 1024, 1, tma=True) == ws
    assert L._gpu_tiles("bfloat16", 4096, 1024, 2048, 1, tma=True) == ws
    # Elsewhere (no TMA device, dW's M-major A, batched, few tiles, unaligned rows): unchanged.
    assert L._gpu_tiles("float16", 4096, 2048, 1024, 1) == (128, 256, 64, {"num_warps": 8, "num_stages": 4})
    for args, kw in [(("float16", 2048, 1024, 4096, 1), {"a_mmajor": True}), (("float16", 2048, 2048, 1024, 8), {}),
                     (("float16", 4096, 768, 2048, 1), {}), (("float16", 4096, 2048, 1000, 1), {"rows_aligned": False}),
                     (("float32", 4096, 2048, 1024, 1), {})]:
        assert "warp_specialize" not in L._gpu_tiles(*args, tma=True, **kw)[3], args
    assert not L._has_tma(torch.empty(1))  # a CPU tensor
