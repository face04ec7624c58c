"""tl.range's loop hints. num_stages=n: a loop's own pipeline depth on the GPU (the ring of
its tl.dot operands), before the launch's num_stages; 0 or 1 turns the ring off for that
loop; the CPU ignores it. loop_unroll_factor=n: LLVM unrolls the loop by n (1: never) on
both back ends. Checked in the PTX / LLVM IR without a GPU, and on one when present."""
import re

import numpy as np
import pytest

import tessera
import tessera.language as tl


@tessera.kernel
def mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


SIG = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp32:16", "K": "i32:16"}
TILES = {"BM": 64, "BN": 64, "BK": 32}


def _compiled(target, stages, launch_stages=3):
    return tessera.compile(mm, SIG, {**TILES, "STAGES": stages}, target=target, num_stages=launch_stages)


@pytest.mark.parametrize("target", ["cuda:80", "cuda:90a"])
def test_the_loops_num_stages_sets_the_ring_depth(target):
    shared = {s: int(_compiled(target, s).metadata["shared"]) for s in (2, 3, 5)}
    per_stage = (64 * 32 + 32 * 64) * 2                      # one A and one B tile of fp16
    assert shared[3] - shared[2] == per_stage and shared[5] - shared[3] == 2 * per_stage
    # the launch's num_stages does not override the loop's
    assert int(_compiled(target, 2, launch_stages=5).metadata["shared"]) == shared[2]


def test_num_stages_1_turns_the_ring_off_for_that_loop():
    ptx = _compiled("cuda:80", 1, launch_stages=4).asm["ptx"]
    assert "cp.async" not in ptx
    assert "cp.async" in _compiled("cuda:80", 2).asm["ptx"]


def test_the_cpu_ignores_it_and_results_match():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 128)).astype(np.float16)
    b = rng.standard_normal((128, 64)).astype(np.float16)
    for stages in (1, 4):
        c = np.full((64, 64), np.nan, np.float32)
        mm[(1,)](a, b, c, 128, STAGES=stages, **TILES)
        np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_num_stages_must_be_a_compile_time_integer():
    @tessera.kernel
    def bad(x_ptr, n):
        for i in tl.range(0, 16, num_stages=n):
            tl.store(x_ptr + i, 1.0)

    with pytest.raises(tessera.CompilationError) as info:
        tessera.compile(bad, {"x_ptr": "*fp32", "n": "i32"}, {})
    assert "tl.range's num_stages must be a compile-time integer >= 0" in info.value.message


@pytest.mark.gpu
def test_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 64, device="cuda", dtype=torch.float16)
    for stages in (0, 1, 2, 3, 6):
        c = torch.full((64, 64), float("nan"), device="cuda")
        mm[(1,)](a, b, c, 256, STAGES=stages, num_stages=3, **TILES)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=2e-3, atol=2e-3)


# --- loop_unroll_factor

@tessera.kernel
def row_sums(x_ptr, y_ptr, n, U: tl.constexpr):
    acc = tl.zeros([16], tl.float32)
    for i in tl.range(0, n, loop_unroll_factor=U):
        acc += tl.load(x_ptr + i * 16 + tl.arange(0, 16))
    tl.store(y_ptr + tl.arange(0, 16), acc)


ROW_SIG = {"x_ptr": "*fp32:16", "y_ptr": "*fp32:16", "n": "i32"}


@pytest.mark.parametrize("target", ["cpu", "cuda:90a"])
def test_unroll_factor_becomes_the_loops_llvm_metadata(target):
    one = tessera.compile(row_sums, ROW_SIG, {"U": 1}, target=target).asm
    four = tessera.compile(row_sums, ROW_SIG, {"U": 4}, target=target).asm
    assert "llvm.loop.unroll.disable" in one["llir"] and "llvm.loop.unroll.count" not in one["llir"]
    assert re.search(r'!"llvm.loop.unroll.count", i32 4', four["llir"])
    if target == "cpu":  # unrolled by 4: four loads and adds a trip in the main loop instead of one
        assert four["llir-opt"].count("fadd <16 x float>") > one["llir-opt"].count("fadd <16 x float>")
    else:
        assert four["ptx"].count("ld.global") > one["ptx"].count("ld.global")


@pytest.mark.parametrize("unroll", [1, 3, 4, 8])
def test_unrolled_loops_compute_the_same_on_the_cpu(unroll):
    x = np.arange(16 * 7, dtype=np.float32)
    y = np.full(16, np.nan, np.float32)
    row_sums[(1,)](x, y, 7, U=unroll)                        # 7 trips: a remainder for 3, 4 and 8
    np.testing.assert_array_equal(y, x.reshape(7, 16).sum(0))


def test_unroll_factor_must_be_a_compile_time_integer_of_at_least_1():
    @tessera.kernel
    def bad(x_ptr):
        for i in tl.range(0, 16, loop_unroll_factor=0):
            tl.store(x_ptr + i, 1.0)

    with pytest.raises(tessera.CompilationError) as info:
        tessera.compile(bad, {"x_ptr": "*fp32"}, {})
    assert "tl.range's loop_unroll_factor must be a compile-time integer >= 1, got constant 0" in info.value.message


@pytest.mark.gpu
def test_unrolled_loops_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.arange(16 * 7, device="cuda", dtype=torch.float32)
    for unroll in (1, 3, 4):
        y = torch.full((16,), float("nan"), device="cuda")
        row_sums[(1,)](x, y, 7, U=unroll)
        torch.testing.assert_close(y, x.reshape(7, 16).sum(0), rtol=0, atol=0)
