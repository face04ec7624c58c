"""bench/bench_matmul.py --sweep: its configuration and shape syntax, and every default sweep
configuration compiled for sm_90a (no GPU needed) to wgmma from a TMA ring exactly where
BM = 16 x warps (the configurations the sweep keeps to show mma.sync are the others), with
the hardware's f32 -> bf16 conversion in the epilogue."""
import os
import sys

import pytest

import tessera

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
torch = pytest.importorskip("torch")
import bench_matmul  # noqa: E402
import gpu_kernels  # noqa: E402


def test_parse_sweep_config():
    assert bench_matmul.parse_sweep_config("128x256x64/8/4") == dict(
        BM=128, BN=256, BK=64, warps=8, stages=4, group_m=8, per_sm=0)
    assert bench_matmul.parse_sweep_config("256x128x64/16/3/G16/P2") == dict(
        BM=256, BN=128, BK=64, warps=16, stages=3, group_m=16, per_sm=2)


@pytest.mark.parametrize("text", ["128x256x64/8/4/X8", "128x256x64/8/4/G", "128x256/8/4"])
def test_parse_sweep_config_rejects_bad_text(text):
    with pytest.raises(ValueError):
        bench_matmul.parse_sweep_config(text)


def test_parse_shape():
    assert bench_matmul.parse_shape("4096") == (4096, 4096, 4096)
    assert bench_matmul.parse_shape("4096x2048x16384") == (4096, 2048, 16384)
    with pytest.raises(ValueError):
        bench_matmul.parse_shape("4096x2048")


@pytest.mark.parametrize("text", bench_matmul.SWEEP_CONFIGS)
def test_sweep_config_compiles_for_sm90a(text, monkeypatch):
    monkeypatch.delenv("TESSERA_TMA", raising=False)  # the default ring, as the sweep runs it
    cfg = bench_matmul.parse_sweep_config(text)
    kernel = gpu_kernels.persistent_matmul_kernel if cfg["per_sm"] else gpu_kernels.matmul_kernel
    # A launch on contiguous 4096^3 bf16 operands: unit strides fold to constants.
    sig = "*bf16:16,*bf16:16,*bf16:16,i32:16,i32:16,i32:16,i32:16,i32:16,i32:16"
    ck = tessera.compile(kernel, sig, dict(BM=cfg["BM"], BN=cfg["BN"], BK=cfg["BK"], GROUP_M=cfg["group_m"],
                                           s_ak=1, s_bn=1, s_cn=1),
                         target="cuda:90a", num_warps=cfg["warps"], num_stages=cfg["stages"])
    ptx = ck.asm["ptx"]
    wgmma = cfg["BM"] == 16 * cfg["warps"]
    assert ("wgmma.mma_async" in ptx) == wgmma
    assert ("cp.async.bulk.tensor" in ptx) == wgmma
    if not wgmma:
        assert "mma.sync" in ptx
    # The bf16 epilogue rounds with the hardware's cvt (each element of the thread's share of the
    # tile once, two per cvt.rn.bf16x2.f32: test_gpu_half_pair_convert.py), not the ~7-instruction
    # integer rounding it ran before (test_gpu_bf16_convert.py).
    assert ptx.count("cvt.rn.bf16x2.f32") == cfg["BM"] * cfg["BN"] // (32 * cfg["warps"]) // 2
    assert "cvt.rn.bf16.f32" not in ptx
    assert "setp.nan" not in ptx
