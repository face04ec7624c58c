"""TMA-filled wgmma rings without a GPU (compiler/codegen/nvptx/tma_nvptx.cpp): which
loads qualify, the tensor maps the metadata asks the runtime for, and PTX that ptxas
assembles for sm_90a (cp.async.bulk.tensor, mbarrier expect_tx / try_wait, wgmma).
The same kernels run on a GPU in test_gpu_tma.py."""
import os
import shutil
import subprocess
import sys

import pytest

import tessera

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gpu_tma as G  # noqa: E402  (the kernels; its tests need a GPU and skip here)

PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                  else None)
# What a launch with 16-byte aligned fp16 arrays, strides divisible by 16 and unit inner
# strides compiles (the inner strides specialized to the constant 1).
SIG = {"a_ptr": "*fp16:16", "b_ptr": "*fp16:16", "c_ptr": "*fp32:16", "M": "i32", "N": "i32", "K": "i32",
       "s_am": "i32:16", "s_bk": "i32:16", "s_cm": "i32:16"}
UNIT = {"s_ak": 1, "s_bn": 1, "s_cn": 1}


def build(fn, monkeypatch, tma="1", sig=SIG, target="cuda:90a", BM=128, BN=128, BK=64, num_warps=8, num_stages=3,
          unit=UNIT):
    if tma is None:
        monkeypatch.delenv("TESSERA_TMA", raising=False)
    else:
        monkeypatch.setenv("TESSERA_TMA", tma)
    return tessera.compile(tessera.jit(fn), sig, {**unit, "BM": BM, "BN": BN, "BK": BK}, target=target,
                           num_warps=num_warps, num_stages=num_stages)


def assemble(ptx, tmp_path):
    if PTXAS is None:
        pytest.skip("ptxas (CUDA toolkit) not installed")
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, "-arch=sm_90a", str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr + "\n" + ptx


@pytest.mark.parametrize("fn", [G._mm, G._mm_block_ptr], ids=["addresses", "block_ptr"])
def test_matmul_ring_is_tma_filled(fn, monkeypatch, tmp_path):
    ck = build(fn, monkeypatch)
    # Parameters: a b c M N K s_am s_bk s_cm = 0..8. A: base 0, 2-byte elements, 128-byte
    # swizzle, box 64 (K) x 128 (M), extents K (5) x M (3), row stride s_am (6). B: base 1,
    # boxes of 64 columns x 64 rows of K (two per stage), extents N (4) x K (5), stride s_bk (7).
    assert ck.metadata["tensor_maps"] == "9|0:2:128:64:128:i5:i3:i6|1:2:128:64:64:i4:i5:i7"
    ptx = ck.asm["ptx"]
    assert ptx.count(".param .align 64 .b8") == 2  # the CUtensorMaps, __grid_constant__
    assert "cvta.param.u64" in ptx                    # read in place, not copied to local memory
    # Three stages: two issued before the loop, one per iteration; per issue one A box and two B boxes.
    # Per stage a "full" mbarrier (count 1: thread 0's expect_tx, then the copies' bytes) and an
    # "empty" one (count 8: each warp arrives once its wgmma retired the stage).
    assert ptx.count("mbarrier.init.shared::cta.b64") == 6
    assert ptx.count("], 1;") >= 3 and ptx.count("], 8;") == 3
    assert ptx.count("mbarrier.arrive.expect_tx.shared::cta.b64 _, [") == 3
    assert ", 32768;" in ptx  # A 16 KB + B 16 KB per stage
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 9
    # In the loop: thread 0 waits for the stage's release, issues, everyone waits for the data.
    assert ptx.count("mbarrier.try_wait.parity.shared::cta.b64") == 2
    assert ptx.count("mbarrier.arrive.shared::cta.b64 _, [") == 1
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16") == 4
    assert "cp.async.cg" not in ptx and "cp.async.wait_group" not in ptx
    loop = ptx[ptx.index("mbarrier.try_wait"):ptx.rindex("mbarrier.inval")]
    assert "bar.sync" not in loop[:loop.index("mbarrier.arrive.shared")]  # no CTA barrier per iteration
    assert loop.index("cp.async.bulk.tensor") < loop.rindex("mbarrier.try_wait") < loop.index("wgmma.mma_async")
    assert ptx.count("mbarrier.inval.shared::cta.b64") == 6
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("BN,BK,num_warps,num_stages,boxes", [
    (256, 64, 8, 4, "9|0:2:128:64:128:i5:i3:i6|1:2:128:64:64:i4:i5:i7"),   # four B boxes per stage
    (128, 16, 8, 2, "9|0:2:32:16:128:i5:i3:i6|1:2:128:64:16:i4:i5:i7"),    # A rows 32 bytes: 32-byte swizzle
    (128, 32, 4, 3, "9|0:2:64:32:64:i5:i3:i6|1:2:128:64:32:i4:i5:i7")])    # one warpgroup, 64-byte swizzle
def test_ring_formats(BN, BK, num_warps, num_stages, boxes, monkeypatch, tmp_path):
    BM = 16 * num_warps
    ck = build(G._mm, monkeypatch, BM=BM, BN=BN, BK=BK, num_warps=num_warps, num_stages=num_stages)
    assert ck.metadata["tensor_maps"] == boxes
    ptx = ck.asm["ptx"]
    copies_per_issue = 1 + BN // 64
    issues = num_stages - (2 if num_stages >= 4 else 1) + 1  # prologue (ahead) + the loop's
    assert ptx.count("cp.async.bulk.tensor.2d") == copies_per_issue * issues
    assert f"wgmma.mma_async.sync.aligned.m64n{BN}k16" in ptx
    if num_stages >= 4:  # one wgmma group in flight across iterations
        assert "wgmma.wait_group.sync.aligned 1;" in ptx
    assemble(ptx, tmp_path)


def test_cta_barrier_variant(monkeypatch, tmp_path):
    # TESSERA_TMA=2: stages released by a CTA barrier at the top of each iteration, no
    # empty mbarriers (the simpler scheme, kept to measure against).
    ptx = build(G._mm, monkeypatch, tma="2").asm["ptx"]
    assert ptx.count("mbarrier.init.shared::cta.b64") == 3
    assert ptx.count("mbarrier.try_wait.parity") == 1 and "mbarrier.arrive.shared" not in ptx
    # The loop's copies (the last issue before the first wait) come after a barrier that
    # follows the prologue's copies: the iteration's barrier precedes its copies.
    issue = ptx.rindex("mbarrier.arrive.expect_tx", 0, ptx.index("mbarrier.try_wait"))
    assert "bar.sync" in ptx[ptx.rindex("cp.async.bulk.tensor", 0, issue):issue]
    assemble(ptx, tmp_path)


def test_off_by_option_and_below_sm90(monkeypatch):
    # Extents divisible by 16 (as the bench's): the masks' constancy lets cp.async copy 16 bytes.
    sig = {**SIG, "M": "i32:16", "N": "i32:16", "K": "i32:16"}
    for tma, target in (("0", "cuda:90a"), ("1", "cuda:80")):
        ck = build(G._mm, monkeypatch, tma=tma, target=target, sig=sig)
        assert "tensor_maps" not in ck.metadata
        assert "cp.async.bulk" not in ck.asm["ptx"] and "mbarrier" not in ck.asm["ptx"]
        assert "cp.async.cg" in ck.asm["ptx"]  # the cp.async ring


def test_default_is_the_tma_ring(monkeypatch):
    ck = build(G._mm, monkeypatch, tma=None)
    assert ck.metadata["tensor_maps"] == "9|0:2:128:64:128:i5:i3:i6|1:2:128:64:64:i4:i5:i7"
    assert ck.asm["ptx"].count("mbarrier.init") == 6


def test_loads_the_host_cannot_describe_keep_cp_async(monkeypatch):
    # A row stride not known divisible by 16 (its bytes need not be 16-aligned), and
    # the inner stride not the constant 1: no tensor map; the ring stays cp.async where it can.
    ck = build(G._mm, monkeypatch, sig={**SIG, "s_am": "i32"})
    assert "tensor_maps" not in ck.metadata
    ck = build(G._mm, monkeypatch, sig={**SIG, "s_bn": "i32:16"}, unit={"s_ak": 1, "s_cn": 1})  # B's columns strided
    assert "tensor_maps" not in ck.metadata
    assert "cp.async.bulk" not in ck.asm["ptx"]


def test_block_pointers_without_tma_still_compile(monkeypatch):
    # Block-pointer masks are beyond cp.async's constancy analysis: without the TMA the
    # loads stay plain (and correct), with it the ring forms.
    ptx = build(G._mm_block_ptr, monkeypatch, tma="0").asm["ptx"]
    assert "cp.async" not in ptx and "ld.global" in ptx
