"""tf32 wgmma without a GPU (lower_dot_wgmma_nvptx.cpp, lower_dot_wgmma_swapped_nvptx.cpp):
which fp32 dots run as wgmma.mma_async m64nNk8 .tf32 on sm_90a (both operands K-major in a
ring: x @ W^T; an N-contiguous B swapped, C^T = B^T A^T with B^T from registers), which stay
on mma.sync (tf32x3, ieee, sm_80, NN tiles the swapped form cannot take), the tensor maps of
the 4-byte TMA boxes, and PTX that ptxas assembles for sm_90a. The same kernels run on a GPU
in test_gpu_tf32_wgmma.py."""
import os
import re
import sys

import pytest

import tessera

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from matmul_kernels import matmul  # noqa: E402  (the kernel test_gpu_tf32_wgmma.py runs on a GPU)
import ptxas_check  # noqa: E402

# 16-byte aligned fp32 arrays, row strides divisible by 16 elements, unit inner strides.
# NT: B = W^T with W stored N x K, read along W's rows (B's k stride is 1, its n stride W's rows').
SIG_NT = {"a_ptr": "*fp32:16", "b_ptr": "*fp32:16", "c_ptr": "*fp32:16", "M": "i32", "N": "i32", "K": "i32",
          "s_am": "i32:16", "s_bn": "i32:16", "s_cm": "i32:16"}
UNIT_NT = {"s_ak": 1, "s_bk": 1, "s_cn": 1, "B_ROWS_ALONG_K": True}
SIG_NN = {"a_ptr": "*fp32:16", "b_ptr": "*fp32:16", "c_ptr": "*fp32:16", "M": "i32", "N": "i32", "K": "i32",
          "s_am": "i32:16", "s_bk": "i32:16", "s_cm": "i32:16"}
UNIT_NN = {"s_ak": 1, "s_bn": 1, "s_cn": 1}


def build(monkeypatch, layout="NT", tma="1", prec="tf32", target="cuda:90a", BM=128, BN=128, BK=32, num_warps=8,
          num_stages=3, sig=None):
    monkeypatch.setenv("TESSERA_TMA", tma)
    sig0, unit = (SIG_NT, UNIT_NT) if layout == "NT" else (SIG_NN, UNIT_NN)
    sig = {**sig0, **(sig or {})}
    return tessera.compile(tessera.jit(matmul), sig, {**unit, "BM": BM, "BN": BN, "BK": BK, "PREC": prec},
                           target=target, num_warps=num_warps, num_stages=num_stages)


def assemble(ptx, tmp_path, arch="sm_90a", serialized_ok=True):
    """ptxas_check.assemble, then: no spills, and (serialized_ok false) ptxas neither
    serialized the wgmmas nor had to add waits (C7514-C7517)."""
    log = ptxas_check.assemble(ptx, arch, tmp_path, verbose=True)
    assert " 0 bytes spill stores" in log, log
    if not serialized_ok:
        assert "Potential Performance Loss" not in log and "is injected" not in log, log


WGMMA_TF32 = r"wgmma\.mma_async\.sync\.aligned\.m64n{n}k8\.f32\.tf32\.tf32 \{{[^}}]*\}}, %rd\d+, %rd\d+, p, 1, 1;"


@pytest.mark.parametrize("BN,BK,num_warps,num_stages,maps", [
    # A: base 0, 4-byte elements, 128-byte swizzle, box 32 (K) x 128 (M), extents K (5) x M (3), stride s_am (6).
    # W: base 1, box 32 (K) x BN rows, extents K (5) x N (4), stride s_bn (7) -- K-major like A.
    (128, 32, 8, 3, "9|0:4:128:32:128:i5:i3:i6|1:4:128:32:128:i5:i4:i7"),
    (256, 32, 8, 4, "9|0:4:128:32:128:i5:i3:i6|1:4:128:32:256:i5:i4:i7"),   # n256, a wgmma group in flight
    (64, 16, 4, 3, "9|0:4:64:16:64:i5:i3:i6|1:4:64:16:64:i5:i4:i7"),        # 64-byte rows, one warpgroup
    (32, 8, 4, 2, "9|0:4:32:8:64:i5:i3:i6|1:4:32:8:32:i5:i4:i7")])          # 32-byte rows
def test_nt_tf32_runs_wgmma_from_a_tma_ring(BN, BK, num_warps, num_stages, maps, monkeypatch, tmp_path):
    ck = build(monkeypatch, BN=BN, BK=BK, BM=16 * num_warps, num_warps=num_warps, num_stages=num_stages)
    assert ck.metadata["tensor_maps"] == maps
    ptx = ck.asm["ptx"]
    # Per warpgroup BK / 8 k-steps, each 32 bytes further along the K-major rows; no
    # transpose immediates (tf32 has none), no mma.sync, no register conversion.
    assert len(re.findall(WGMMA_TF32.format(n=BN), ptx)) == BK // 8, ptx
    assert "mma.sync" not in ptx and "cvt.rna.tf32" not in ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "cp.async.cg" not in ptx
    if num_stages >= 4:
        assert "wgmma.wait_group.sync.aligned 1;" in ptx
    assemble(ptx, tmp_path, serialized_ok=False)


@pytest.mark.parametrize("k_sig", ["i32", "i32:16"])
def test_nt_tf32_cp_async_ring(k_sig, monkeypatch, tmp_path):
    # TESSERA_TMA=0: the same wgmma from a cp.async ring (fence.proxy.async before its
    # barrier). K's bound masks 4-byte runs unless K is known divisible by 16: then 16 B.
    ck = build(monkeypatch, tma="0", sig={"K": k_sig})
    ptx = ck.asm["ptx"]
    assert not ck.metadata.get("tensor_maps")
    assert len(re.findall(WGMMA_TF32.format(n=128), ptx)) == 4
    assert "fence.proxy.async" in ptx
    assert ("cp.async.cg" in ptx) == (k_sig == "i32:16")
    assemble(ptx, tmp_path, serialized_ok=False)


# The swapped form (lower_dot_wgmma_swapped_nvptx.cpp): B^T from registers as wgmma's A
# (four .b32 fragment registers), A's K-major stage as its B descriptor, m64n{BM}.
WGMMA_TF32_RS = (r"wgmma\.mma_async\.sync\.aligned\.m64n{n}k8\.f32\.tf32\.tf32 \{{[^}}]*\}}, "
                 r"\{{%r\d+, %r\d+, %r\d+, %r\d+\}}, %rd\d+, p, 1, 1;")


@pytest.mark.parametrize("BM,BN,BK,num_warps,num_stages,maps", [
    # A: K-major as in NT, box 32 (K) x BM. B: base 1, column blocks of 32 fp32 (128 bytes,
    # 128-byte swizzle), box 32 (N) x BK rows, extents N (4) x K (5), row stride s_bk (7).
    (256, 128, 32, 8, 4, "9|0:4:128:32:256:i5:i3:i6|1:4:128:32:32:i4:i5:i7"),  # n256, groups in flight
    (128, 128, 32, 8, 3, "9|0:4:128:32:128:i5:i3:i6|1:4:128:32:32:i4:i5:i7"),
    (64, 64, 16, 4, 3, "9|0:4:64:16:64:i5:i3:i6|1:4:128:32:16:i4:i5:i7"),      # 64-byte A rows
    (16, 64, 8, 4, 2, "9|0:4:32:8:16:i5:i3:i6|1:4:128:32:8:i4:i5:i7")])       # n16, 32-byte A rows
def test_nn_tf32_runs_swapped_wgmma(BM, BN, BK, num_warps, num_stages, maps, monkeypatch, tmp_path):
    ck = build(monkeypatch, layout="NN", BM=BM, BN=BN, BK=BK, num_warps=num_warps, num_stages=num_stages)
    assert ck.metadata["tensor_maps"] == maps
    ptx = ck.asm["ptx"]
    assert len(re.findall(WGMMA_TF32_RS.format(n=BM), ptx)) == BK // 8, ptx
    assert "mma.sync" not in ptx and "cvt.rna.tf32" not in ptx
    # Each k-step's fragment: two 8-byte loads of B's stage (rows t and t + 4).
    assert len(re.findall(r"ld\.shared\.v2\.u32", ptx)) == 2 * (BK // 8)
    # One commit group per iteration. With 4+ stages it stays in flight: the next
    # iteration waits for it (wait_group 0) before rewriting the fragment registers,
    # and the loop's way out (for.drain) retires the last one -- no wait_group 1.
    assert ptx.count("wgmma.commit_group.sync.aligned;") == 1
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == (2 if num_stages >= 4 else 1)
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx
    assemble(ptx, tmp_path, serialized_ok=False)


def blocks_with(llir, needle):
    """Labels of the LLVM IR basic blocks whose instructions contain `needle`."""
    found, label = [], None
    for line in llir.splitlines():
        m = re.match(r"^([\w.$-]+):", line)
        if m:
            label = m.group(1)
        elif line.startswith("define "):
            label = "entry"
        elif needle in line and label not in found:
            found.append(label)
    return found


@pytest.mark.parametrize("layout,BM,BN", [("NN", 256, 128), ("NT", 128, 256)])
def test_tma_copies_are_branched_to_not_predicated(layout, BM, BN, monkeypatch, tmp_path):
    # Thread 0 issues every copy; the others branch around them. Predicated copies in the
    # loop's straight line made ptxas run each copy's uniform-operand loop (ELECT, R2UR,
    # BRA.U.ANY) in every warp every iteration: on an H100 ~40% of the NN tf32 matmul's
    # stall samples and 0.86 instead of 0.93 tensor utilisation (ncu).
    ck = build(monkeypatch, layout=layout, BM=BM, BN=BN, num_stages=4)
    llir = ck.asm["llir-opt"]
    labels = blocks_with(llir, "cp.async.bulk.tensor")
    assert labels and all(lbl.startswith("tma.copy") for lbl in labels), labels
    # The prologue's stages and the loop's: one copy block each, all behind the branch.
    assert len(labels) >= 2
    # Each stage's expected byte count is posted in the same blocks.
    assert set(blocks_with(llir, "mbarrier.arrive.expect_tx")) <= set(labels)
    assemble(ck.asm["ptx"], tmp_path, serialized_ok=False)


def test_nn_tf32_swapped_cp_async_ring(monkeypatch, tmp_path):
    # TESSERA_TMA=0: B's column blocks filled by cp.async (the same staged_offset format).
    ck = build(monkeypatch, layout="NN", tma="0", BM=256, BN=128, num_stages=4)
    ptx = ck.asm["ptx"]
    assert not ck.metadata.get("tensor_maps")
    assert len(re.findall(WGMMA_TF32_RS.format(n=256), ptx)) == 4
    assemble(ptx, tmp_path, serialized_ok=False)


@pytest.mark.parametrize("BM,BN,num_warps", [(128, 128, 4), (128, 256, 8)])
def test_nn_tf32_other_shapes_stay_on_mma_sync(BM, BN, num_warps, monkeypatch, tmp_path):
    # The swapped form needs BN = 16 x num_warps (a warp per 16 columns of C; and BM <= 256,
    # wgmma's n): otherwise mma.sync with B staged through registers.
    ptx = build(monkeypatch, layout="NN", BM=BM, BN=BN, num_warps=num_warps).asm["ptx"]
    assert "wgmma" not in ptx
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("prec,instr", [("tf32x3", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
                                        ("ieee", "fma.rn.f32")])
def test_other_precisions_do_not_use_wgmma(prec, instr, monkeypatch, tmp_path):
    ptx = build(monkeypatch, prec=prec).asm["ptx"]
    assert "wgmma" not in ptx and instr in ptx
    assemble(ptx, tmp_path)


def test_sm80_keeps_mma_sync(monkeypatch, tmp_path):
    ptx = build(monkeypatch, target="cuda:80").asm["ptx"]
    assert "wgmma" not in ptx and "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assemble(ptx, tmp_path, arch="sm_80")
