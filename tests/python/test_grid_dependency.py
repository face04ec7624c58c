"""Programmatic dependent launch (PDL): tl.extra.cuda.gdc_wait and gdc_launch_dependents.

Without a GPU: the language resolves them, the IR keeps them in place, the PTX for sm_90+
has griddepcontrol in order between the loads and stores around it (and ptxas takes it),
older targets get nothing, only a kernel that waits is marked for a PDL launch, loop rings
never load ahead of a wait, and the kernels compute the same on the CPU and in the
interpreter. With a GPU (-m gpu): a producer and a waiting consumer launched back to back
never let the consumer read stale data.
"""
import importlib
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl
from ptxas_check import assemble
from tessera.compiler.builtins_impl import BUILTINS, check_complete
from tessera.language.extra.cuda import gdc_launch_dependents, gdc_wait
from launch_counting import CountingLauncher  # noqa: E402

J = importlib.import_module("tessera.jit")  # the module: tessera.jit is also the decorator

MIX = 0x2C1B3C6D


# Kernel A: out[i] = a hash of (i, seed) after `rounds` mixing rounds (work enough that
# its last programs are still running when the next kernel may start), letting the next
# kernel in the stream start first thing.
@tessera.kernel
def produce_kernel(out, seed, rounds, n, BLOCK: tl.constexpr):
    tl.extra.cuda.gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    h = offs.to(tl.uint32) * 0x9E3779B1 + seed.to(tl.uint32)
    for _ in range(rounds):
        h = h ^ (h >> 15)
        h = h * MIX
        h = h ^ (h >> 12)
    tl.store(out + offs, h.to(tl.int32, bitcast=True), mask=offs < n)


# Kernel B: reads A's output only after gdc_wait; everything before it (the index math)
# may overlap A's tail.
@tessera.kernel
def consume_kernel(src, result, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.extra.cuda.gdc_wait()
    v = tl.load(src + offs, mask=mask)
    tl.store(result + offs, (v & 0xFFFF).to(tl.float32) + 0.25, mask=mask)


def produce_reference(seed, rounds, n):
    h = np.arange(n, dtype=np.uint32) * np.uint32(0x9E3779B1) + np.uint32(seed)
    for _ in range(rounds):
        h ^= h >> np.uint32(15)
        h *= np.uint32(MIX)
        h ^= h >> np.uint32(12)
    return h.view(np.int32)


def consume_reference(src):
    return (src & 0xFFFF).astype(np.float32) + np.float32(0.25)


# Both halves in one kernel, between a load before and a load and store after: the order
# the PTX must keep.
@tessera.kernel
def ordered_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x + offs, mask=mask)
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()
    b = tl.load(y + offs, mask=mask)
    tl.store(out + offs, a + b, mask=mask)


ORDERED_SIG = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"}
PRODUCE_SIG = {"out": "*i32", "seed": "i32", "rounds": "i32", "n": "i32"}
CONSUME_SIG = {"src": "*i32", "result": "*fp32", "n": "i32"}


def positions(text, pattern):
    return [m.start() for m in re.finditer(pattern, text)]


# =========================================================================== language

def test_reached_as_tl_extra_cuda_and_by_import():
    assert tl.extra.cuda.gdc_wait is gdc_wait
    assert tl.extra.cuda.gdc_launch_dependents is gdc_launch_dependents
    assert gdc_wait.__tessera_builtin__ == "gdc_wait"
    assert check_complete() == []
    assert "gdc_wait" in BUILTINS and "gdc_launch_dependents" in BUILTINS


def test_outside_a_kernel_the_error_names_the_builtin():
    with pytest.raises(RuntimeError, match=r"tl\.extra\.cuda\.gdc_wait can only be used inside a @tessera\.kernel"):
        tl.extra.cuda.gdc_wait()


@tessera.kernel
def wait_with_an_argument(x):
    tl.extra.cuda.gdc_wait(x)


def test_arguments_are_an_error_naming_the_builtin():
    with pytest.raises(tessera.CompilationError, match=r"tl\.extra\.cuda\.gdc_wait\(\): too many positional"):
        tessera.compile(wait_with_an_argument, {"x": "i32"})


@tessera.kernel
def imported_names_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    gdc_launch_dependents()
    gdc_wait()
    tl.store(x + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


def test_imported_names_compile_to_the_same_ops():
    tir = tessera.compile(imported_names_kernel, {"x": "*i32", "n": "i32"}, {"BLOCK": 16}).asm["tir"]
    assert re.search(r"^  gdc_launch_dependents loc\(\d+:5\)\n  gdc_wait loc\(\d+:5\)$", tir, re.M), tir


# =========================================================================== Tile IR

def test_ir_keeps_both_ops_in_place_through_the_passes():
    ck = tessera.compile(ordered_kernel, ORDERED_SIG, {"BLOCK": 128})
    for stage in ("tir", "tir-opt"):
        text = ck.asm[stage]
        ops = [line.split(" = ")[-1].split()[0] for line in text.splitlines()[1:-1]]
        loads = [i for i, op in enumerate(ops) if op == "load"]
        launch, wait, store = ops.index("gdc_launch_dependents"), ops.index("gdc_wait"), ops.index("store")
        assert ops.count("gdc_wait") == 1 and ops.count("gdc_launch_dependents") == 1, text
        assert loads[0] < launch < wait < loads[1] < store, text
    assert "pdl" not in ck.metadata  # a CPU kernel


# =========================================================================== PTX

@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:90", "sm_90")])
def test_ptx_orders_griddepcontrol_between_the_loads_and_stores(target, arch, tmp_path):
    ck = tessera.compile(ordered_kernel, ORDERED_SIG, {"BLOCK": 256}, target=target)
    ptx = ck.asm["ptx"]
    loads, stores = positions(ptx, r"ld\.global"), positions(ptx, r"st\.global")
    launch = positions(ptx, r"griddepcontrol\.launch_dependents;")
    wait = positions(ptx, r"griddepcontrol\.wait;")
    assert len(launch) == 1 and len(wait) == 1, ptx
    # x's loads (2 per thread: 256 elements over 128 threads), then both instructions, then y's.
    assert len(loads) == 4 and loads[1] < launch[0] < wait[0] < loads[2], ptx
    assert stores and wait[0] < stores[0], ptx
    assert ck.metadata["pdl"] == "1"
    assemble(ptx, arch, tmp_path)


def test_only_a_kernel_that_waits_is_a_pdl_launch(tmp_path):
    produce = tessera.compile(produce_kernel, PRODUCE_SIG, {"BLOCK": 256}, target="cuda:90a")
    assert "griddepcontrol.launch_dependents;" in produce.asm["ptx"]
    assert "griddepcontrol.wait" not in produce.asm["ptx"]
    assert "pdl" not in produce.metadata
    consume = tessera.compile(consume_kernel, CONSUME_SIG, {"BLOCK": 256}, target="cuda:90a")
    assert consume.metadata["pdl"] == "1"
    ptx = consume.asm["ptx"]
    assert positions(ptx, r"griddepcontrol\.wait;")[0] < positions(ptx, r"ld\.global")[0], ptx
    assemble(produce.asm["ptx"], "sm_90a", tmp_path)
    assemble(ptx, "sm_90a", tmp_path)


@pytest.mark.parametrize("target", ["sm_80", "cuda:80"])
def test_before_sm_90_neither_instruction_nor_pdl(target, tmp_path):
    for kernel, sig in ((ordered_kernel, ORDERED_SIG), (consume_kernel, CONSUME_SIG)):
        ck = tessera.compile(kernel, sig, {"BLOCK": 256}, target=target)
        assert "griddepcontrol" not in ck.asm["ptx"]
        assert "pdl" not in ck.metadata
        assert len(positions(ck.asm["ptx"], r"ld\.global")) >= 2  # the loads are all there
        assemble(ck.asm["ptx"], "sm_80", tmp_path)


# A K loop whose dot operands a ring (cp.async, or the TMA on sm_90a) would load stages
# ahead: a gdc_wait before the loop keeps the ring, whose first copies come after it; one
# inside the loop turns rings and register prefetch off (their first loads would go before
# the loop, ahead of the wait).
@tessera.kernel
def matmul_after_wait(a, b, c, K, WAIT_IN_LOOP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if not WAIT_IN_LOOP:
        tl.extra.cuda.gdc_wait()
    for k in range(0, K, BK):
        if WAIT_IN_LOOP:
            tl.extra.cuda.gdc_wait()
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * BN + rn[None, :], acc)


MATMUL_SIG = {"a": "*fp16:16", "b": "*fp16:16", "c": "*fp32:16", "K": "i32:16"}


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:90", "sm_90")])
def test_a_ring_loads_only_after_a_wait_before_its_loop(target, arch, tmp_path):
    ck = tessera.compile(matmul_after_wait, MATMUL_SIG, {"WAIT_IN_LOOP": False, "BM": 64, "BN": 64, "BK": 32},
                         target=target, num_stages=3)
    ptx = ck.asm["ptx"]
    copies = positions(ptx, r"cp\.async")
    assert copies, "the K loop should still have its ring"
    assert positions(ptx, r"griddepcontrol\.wait;")[0] < copies[0], ptx
    assert ck.metadata["pdl"] == "1"
    assemble(ptx, arch, tmp_path)


@pytest.mark.parametrize("num_stages", [1, 3])  # 1: no ring, but a register prefetch of the operands
@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:90", "sm_90")])
def test_no_ring_or_prefetch_loads_ahead_of_a_wait_in_the_loop(target, arch, num_stages, tmp_path):
    ck = tessera.compile(matmul_after_wait, MATMUL_SIG, {"WAIT_IN_LOOP": True, "BM": 64, "BN": 64, "BK": 32},
                         target=target, num_stages=num_stages)
    ptx = ck.asm["ptx"]
    assert "cp.async" not in ptx, ptx
    loads, waits = positions(ptx, r"ld\.global"), positions(ptx, r"griddepcontrol\.wait;")
    assert waits and loads and waits[0] < loads[0], ptx
    assemble(ptx, arch, tmp_path)


# A row walk asking for a stream ring (tl.range(..., num_stages=3), stream_ring_nvptx.cpp).
@tessera.kernel
def row_sums(x, out, rows, WAIT_IN_LOOP: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    if not WAIT_IN_LOOP:
        tl.extra.cuda.gdc_wait()
    for r in tl.range(0, rows, num_stages=3):
        if WAIT_IN_LOOP:
            tl.extra.cuda.gdc_wait()
        acc += tl.load(x + r * BLOCK + cols)
    tl.store(out + cols, acc)


@pytest.mark.parametrize("wait_in_loop", [False, True])
def test_stream_ring_copies_never_precede_the_wait(wait_in_loop, tmp_path):
    ck = tessera.compile(row_sums, {"x": "*fp32:16", "out": "*fp32:16", "rows": "i32"},
                         {"WAIT_IN_LOOP": wait_in_loop, "BLOCK": 512}, target="cuda:90a")
    ptx = ck.asm["ptx"]
    wait = positions(ptx, r"griddepcontrol\.wait;")[0]
    copies = positions(ptx, r"cp\.async\.")
    if wait_in_loop:
        assert not copies, ptx
    else:
        assert copies and wait < copies[0], ptx
    assert wait < positions(ptx, r"ld\.(global|shared)")[0], ptx
    assemble(ptx, "sm_90a", tmp_path)


# =========================================================================== CPU and interpreter

@pytest.fixture(params=["compiled", "interpreter"])
def mode(request):
    J.set_interpret(request.param == "interpreter")
    yield request.param
    J.set_interpret(False)


@pytest.mark.parametrize("n", [1, 300, 1000])
def test_producer_and_consumer_compute_the_same_on_the_cpu(mode, n):
    block = 128
    mid = np.zeros(n, np.int32)
    for seed in (3, 12345):
        result = np.full(n, np.nan, np.float32)
        produce_kernel[(tessera.cdiv(n, block),)](mid, seed, 3, n, BLOCK=block)
        consume_kernel[(tessera.cdiv(n, block),)](mid, result, n, BLOCK=block)
        expect = produce_reference(seed, 3, n)
        np.testing.assert_array_equal(mid, expect)
        np.testing.assert_array_equal(result, consume_reference(expect))


def test_ordered_kernel_on_the_cpu(mode):
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 0.5, np.float32)
    out = np.full(n, np.nan, np.float32)
    ordered_kernel[(tessera.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    np.testing.assert_array_equal(out, x + y)


# =========================================================================== launch_pdl=


@pytest.mark.parametrize("launch_pdl", [True, False])
def test_launch_pdl_is_accepted_and_ignored(launch_pdl):
    n = 300
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    ordered_kernel._compiled.clear()
    with CountingLauncher(ordered_kernel) as py:
        for i in range(3):
            out = np.full(n, np.nan, np.float32)
            ordered_kernel[(tessera.cdiv(n, 128),)](x, y + i, out, n, BLOCK=128, launch_pdl=launch_pdl)
            np.testing.assert_array_equal(out, x + y + i)
        assert py.calls == 1, "launch_pdl= must not send cached launches to the Python path"
    # ... and it is no part of the specialization: one entry with or without it.
    ordered_kernel[(tessera.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    assert len(ordered_kernel._compiled) == 1


def test_launch_pdl_in_a_bound_launch():
    n = 200
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 2.0, np.float32)
    out = np.full(n, np.nan, np.float32)
    add = ordered_kernel.bind((tessera.cdiv(n, 128),), n=n, BLOCK=128, launch_pdl=True)
    add(x, y, out)
    np.testing.assert_array_equal(out, x + y)


@tessera.kernel
def takes_launch_pdl(out, launch_pdl):
    tl.store(out, launch_pdl)


def test_a_parameter_named_launch_pdl_is_a_parameter():
    out = np.zeros(1, np.int32)
    takes_launch_pdl[(1,)](out, launch_pdl=7)
    assert out[0] == 7


# =========================================================================== GPU

@pytest.mark.gpu
def test_back_to_back_launches_never_read_stale_data():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    n, block, rounds, launches = (1 << 21) + 123, 256, 64, 50
    grid = (tessera.cdiv(n, block),)
    mid = torch.zeros(n, dtype=torch.int32, device="cuda")
    row = (n + 63) // 64 * 64  # every row 16-byte aligned: one specialization of consume_kernel
    results = torch.full((launches, row), float("nan"), device="cuda")
    seeds = [7919 * t + 3 for t in range(launches)]  # never 1: one specialization
    produce_kernel[grid](mid, seeds[0], rounds, n, BLOCK=block)  # compile both before timing matters
    consume_kernel[grid](mid, results[0], n, BLOCK=block)
    torch.cuda.synchronize()
    results.fill_(float("nan"))
    for t in range(launches):  # back to back on torch's current stream, no host sync between
        produce_kernel[grid](mid, seeds[t], rounds, n, BLOCK=block)
        ck = consume_kernel[grid](mid, results[t], n, BLOCK=block)
    torch.cuda.synchronize()
    if torch.cuda.get_device_capability() >= (9, 0):
        assert ck.metadata["pdl"] == "1" and "griddepcontrol.wait" in ck.asm["ptx"]
    # The reference on the GPU (torch, int64 wrapped to 32 bits): the same hash for each seed.
    i = torch.arange(n, dtype=torch.int64, device="cuda")
    mask32 = 0xFFFFFFFF
    for t in range(launches):
        h = (i * 0x9E3779B1 + seeds[t]) & mask32
        for _ in range(rounds):
            h ^= h >> 15
            h = (h * MIX) & mask32
            h ^= h >> 12
        expect = (h & 0xFFFF).to(torch.float32) + 0.25
        got = results[t, :n]
        bad = (got != expect).nonzero()
        assert bad.numel() == 0, (f"launch {t}: {bad.numel()} stale or wrong elements, first at "
                                  f"{bad[0].item()}: {got[bad[0]].item()} != {expect[bad[0]].item()}")
        assert torch.isnan(results[t, n:]).all()  # masked-off lanes wrote nothing
