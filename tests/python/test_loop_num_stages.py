"""tl.range(lo, hi, step, num_stages=n): a loop's own pipeline depth on the GPU (the ring of
its tl.dot operands), before the launch's num_stages; 0 or 1 turns the ring off for that
loop. The CPU ignores it. Checked in the PTX (shared memory, cp.async groups, TMA) without
a GPU, and on one when present."""
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
