"""The PTX of the library's memory-bound GPU kernels, as the fp16 benchmark
(bench/kernels.py --device cuda, 16384x4096) specializes them, checked for the
instruction-level choices their speed depends on (kernels/*.py say why); no GPU needed."""
import re

import pytest

import tessera
import tessera.language as tl
from tessera.kernels import activation as A
from tessera.kernels import rope as R
from tessera.kernels import softmax_ce as S
from ptxas_check import assemble_if_available  # noqa: E402



def _ptx(kernel, signature, constexprs, num_warps, tmp_path):
    ptx = tessera.compile(kernel, signature, constexprs, target="cuda:90a", num_warps=num_warps).asm["ptx"]
    assemble_if_available(ptx, "90a", tmp_path)
    return ptx


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_gelu_dropout_draws_its_mask_without_shared_memory(direction, tmp_path):
    # _dropout_keep shifts each even column's 16-bit half up by (1 - (j & 1)) * 16; a
    # `j % 2 == 0` select went through shared memory behind a barrier.
    if direction == "fwd":
        ptx = _ptx(A._ew_fwd_kernel, "*fp16:16,*fp16:16,*fp16:16,i32:16,i32,i32:16,fp32,i32,i32",
                   dict(OP=A.GELU, TANH=False, HAS_B=False, DROPOUT=True, ACC=tl.float32, BLOCK=2048), 4, tmp_path)
    else:
        ptx = _ptx(A._ew_bwd_kernel, "*fp16:16,*fp16:16,*fp16:16,*fp16:16,*fp16:16,i32:16,i32,i32:16,i32:16,fp32,i32,i32",
                   dict(OP=A.GELU, TANH=False, HAS_B=False, WRITE_DB=False, DROPOUT=True, ACC=tl.float32,
                        BLOCK=2048), 4, tmp_path)
    assert "bar.sync" not in ptx and "st.shared" not in ptx
    # 2048 columns over 128 threads: two 16-byte runs per thread of each input.
    assert ptx.count("ld.global.v4.b32") == 2 * (2 if direction == "bwd" else 1)


def test_softmax_dropout_barriers_are_its_two_reductions_only(tmp_path):
    ptx = _ptx(S._softmax_fwd_kernel, "*fp16:16,*fp16:16,i32:16,i32:16,fp32,i32,i32",
               dict(LOG=False, DROPOUT=True, ACC=tl.float32, BLOCK=4096), 8, tmp_path)
    assert ptx.count("bar.sync") == 4  # max and sum across 8 warps: two barriers each


@pytest.mark.parametrize("num_warps", [4, 8])
def test_cross_entropy_forward_uses_the_short_ex2_for_every_element(num_warps, tmp_path):
    # 4096 classes over 32 * num_warps threads; exp(x - max) clamped at e^-87
    # (_exp_of_difference) is one ex2.approx.ftz each, with no denormal handling.
    ptx = _ptx(S._xent_fwd_kernel, "*fp16:16,*i64:16,*fp32:16,*fp32:16,*fp32:16,*fp16:16,*fp32:16,*i64:16,i32:16,i32,"
               "i32,i32:16,i32,fp32,i32,i32", dict(SMOOTH=False, REDUCE=True, MEAN=True,
                                                   ACC=tl.float32, BLOCK=4096, FINAL=S.CE_LOSS_GROUP),
               num_warps, tmp_path)
    assert ptx.count("ex2.approx.ftz.f32") == 4096 // (32 * num_warps)
    assert "ex2.approx.f32" not in ptx
    assert ptx.count("max.NaN.f32") == 4096 // (32 * num_warps)  # the clamp keeps a NaN logit NaN


@pytest.mark.parametrize("fma_exp", [False, True])
@pytest.mark.parametrize("realign", [False, True])
def test_cross_entropy_slices_load_16_bytes_at_a_time(realign, fma_exp, tmp_path):
    # A 4096-class slice over 128 threads: four 16-byte loads per thread, an ex2 per
    # logit. Rows not provably 16-byte aligned (stride, class count without :16) load
    # from the row's 16-byte boundary (_from_boundary); only its first and last slices
    # take the element-wise loads of the row's partial groups, behind a branch.
    sig = "*fp16:16,*i64:16,*fp32:16," + ("i32,i32,i32,i32,i32" if realign else "i32:16,i32:16,i32,i32:16,i32")
    ptx = _ptx(S._xent_slice_kernel, sig, dict(SMOOTH=False, ACC=tl.float32, BLOCK=4096, CHUNKS=1, REALIGN=realign,
                                               VEC=8, FMA_EXP=fma_exp), 4, tmp_path)
    # A term per logit: x - m and a multiply by log2 e, or one FMA (the GPU's plan).
    assert (ptx.count("fma.rn.f32"), ptx.count("sub.f32")) == ((32, 0) if fma_exp else (0, 32))
    assert ptx.count("ld.global.v4.b32") == 4
    assert ptx.count("ld.global.b16") == (1 + 32 if realign else 1)  # (+ the target's logit)
    assert ptx.count("ex2.approx.ftz.f32") == 32 and "ex2.approx.f32" not in ptx
    if realign:
        assert "bra" in ptx
        # The edge branch merges converted (f32) logits: its whole and partial loads
        # converted apart from the common path's 32 (+ the target's), so the common
        # path keeps its halves packed until their conversion (no per-logit unpacking).
        assert ptx.count("cvt.f32.f16") == 1 + 3 * 32 and "selp.b16" not in ptx
    else:
        assert ptx.count("cvt.f32.f16") == 1 + 32


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("realign", [False, True])
def test_cross_entropy_fast_memory_slices_fit_their_register_cap(realign, dtype, tmp_path):
    # The fast-memory GPUs' 2-warp slices of 16-bit logits run under a register cap
    # (CE_SLICE_MAXNREG_FAST_MEMORY: 12 programs an SM instead of 10); ptxas keeps to it
    # without spilling (label smoothing's third sum would spill: _slice_maxnreg leaves it).
    cap = S.CE_SLICE_MAXNREG_FAST_MEMORY
    sig = f"*{dtype}:16,*i64:16,*fp32:16," + ("i32,i32,i32,i32,i32" if realign else "i32:16,i32:16,i32,i32:16,i32")
    ptx = tessera.compile(S._xent_slice_kernel, sig,
                          dict(SMOOTH=False, ACC=tl.float32, BLOCK=S.CE_SLICE, CHUNKS=1, REALIGN=realign, VEC=8,
                               FMA_EXP=True), target="cuda:90a", num_warps=S.CE_SLICE_WARPS_FAST_MEMORY,
                          maxnreg=cap).asm["ptx"]
    assert f".maxnreg {cap}" in ptx
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None:
        assert "0 bytes spill stores" in err, err
        assert int(re.search(r"Used (\d+) registers", err).group(1)) <= cap


def test_cross_entropy_plan_caps_registers_only_where_it_fits(monkeypatch):
    # _slice_maxnreg: the cap for the fast-memory plan's 2-warp fp16 and bf16 slices without
    # label smoothing; none with smoothing, fp32 logits, or off fast-memory GPUs.
    from tessera.kernels import _host as H
    np = pytest.importorskip("numpy")
    x16, x32 = np.zeros((4, 50257), np.float16), np.zeros((4, 50257), np.float32)
    kw = {"num_warps": S.CE_SLICE_WARPS_FAST_MEMORY}
    monkeypatch.setattr(H, "fast_memory", lambda like: True)
    assert S._slice_maxnreg(x16, 50257, kw, 0.0) == S.CE_SLICE_MAXNREG_FAST_MEMORY
    assert S._slice_maxnreg(x16, 50257, kw, 0.1) is None
    assert S._slice_maxnreg(x32, 50257, kw, 0.0) is None
    torch = pytest.importorskip("torch")
    bf16 = torch.zeros(4, 50257, dtype=torch.bfloat16)
    assert S._slice_maxnreg(bf16, 50257, kw, 0.0) == S.CE_SLICE_MAXNREG_FAST_MEMORY
    assert S._slice_maxnreg(bf16, 50257, kw, 0.1) is None
    assert S._slice_maxnreg(x16, 4096, kw, 0.0) is None  # rows held whole
    assert S._slice_maxnreg(x16, 50257, {"num_warps": 4}, 0.0) is None
    monkeypatch.setattr(H, "fast_memory", lambda like: False)
    assert S._slice_maxnreg(x16, 50257, kw, 0.0) is None


@pytest.mark.parametrize("realign", [False, True])
@pytest.mark.parametrize("block,num_warps,stream", [(2048, 8, False), (4096, 4, False), (4096, 4, True)])
def test_cross_entropy_backward_of_unaligned_rows_is_16_bytes_wide(realign, block, num_warps, stream, tmp_path):
    # Rows of an odd class count (stride and n without :16): element accesses only, or,
    # realigned from each row's 16-byte boundary, 16-byte loads and stores (one per
    # thread and 1024 classes, 8 fp16 a thread) and one element load and store a thread
    # for the row's partial first and last groups (a 16-element tile of their own,
    # behind a branch); as a program per row (2048 classes, 8 warps) or per slice of the
    # row (4096, 4 warps), dx stored plainly or evict-first (st.global.cs). The edge
    # groups' tile keeps the registers at the aligned kernel's 32 (masked element
    # accesses over the whole tile took 128 at 4096 over 4 warps, and ran at 0.79 of
    # copy on an H100: bench/results/kernels_cuda_float16_bwd90.md).
    sig = "*fp16:16,*i64:16,*fp32:16,*fp32:16,*fp32:16,*fp16:16,i32,i32,i32,i32,i32:16,i32,fp32"
    ptx = _ptx(S._xent_bwd_kernel, sig, dict(SMOOTH=False, HAS_SCALE=True, ACC=tl.float32, BLOCK=block,
                                             REALIGN=realign, VEC=8, STREAM=stream), num_warps, tmp_path)
    vectors = block // (8 * 32 * num_warps) if realign else 0
    cs = ".cs" if stream else ""
    assert ptx.count("ld.global.v4.b32") == ptx.count(f"st.global{cs}.v4.b32") == vectors
    elements = 1 if realign else block // (32 * num_warps)
    assert ptx.count("ld.global.b16") == ptx.count(f"st.global{cs}.b16") == elements
    if stream:
        assert "st.global.v4.b32" not in ptx and "st.global.b16" not in ptx
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None and realign:
        assert int(re.search(r"Used (\d+) registers", err).group(1)) <= 40


def test_rms_norm_rope_positions_use_32_bit_division(tmp_path):
    ptx = _ptx(R._rms_rope_fwd_kernel, "*fp16:16,*fp16:16,*fp16:16,*fp16:16,*fp16:16,*fp32:16,i32:16,i32:16,i32,"
               "i32:16,i32:16,fp32", dict(HAS_W=True, ACC=tl.float32, ROWS=32, BLOCK=64), 4, tmp_path)
    assert "div.s64" not in ptx and "rem.s64" not in ptx
    assert "div.s32" in ptx and "rem.s32" in ptx



@pytest.mark.parametrize("form", ["layer_norm", "layer_norm+relu", "rms_norm"])
def test_norm_backward_two_programs_per_sm_fit_their_registers(form, tmp_path):
    # The norm walks' GPU plans (kernels/norm.py BWD_GPU_PLANS) put two programs on each
    # SM: the register cap (maxnreg) must be in the PTX and ptxas must keep to it.
    from tessera.kernels import _host as H
    from tessera.kernels import norm as N
    relu, rms = form.endswith("relu"), form == "rms_norm"
    per_sm, warps, two_rows, _ = N.BWD_GPU_PLANS[form]
    assert per_sm == 2
    cap = H.max_registers(per_sm, warps)
    ptx = tessera.compile(N._norm_bwd_kernel, "*fp16:16," * 6 + "*fp32:16," * 3 + "i32:16," * 6 + "i32",
                          dict(IS_RMS=rms, HAS_W=True, HAS_B=not rms, RELU=relu, HAS_DH=False, PREFETCH=True,
                               PAIR_SUM=True, TWO_ROWS=two_rows, ACC=tl.float32, BLOCK=4096),
                          target="cuda:90a", num_warps=warps, maxnreg=cap).asm["ptx"]
    assert f".maxnreg {cap}" in ptx
    assert ptx.count("bar.sync") == 2  # one (pair) reduction a row: two barriers
    err = assemble_if_available(ptx, "90a", tmp_path, verbose=True)
    if err is not None:
        assert int(re.search(r"Used (\d+) registers", err).group(1)) <= cap



def _compiled(kernel, signature, constexprs, num_warps):
    return tessera.compile(kernel, signature, constexprs, target="cuda:90a", num_warps=num_warps)


def test_second_launches_wait_for_the_first_with_pdl(tmp_path):
    # The launches that read the kernel before them (cross_entropy's merge after the
    # slices, the column sums after the backward passes' partial rows) wait with
    # griddepcontrol.wait before any memory access and are PDL launches (metadata "pdl");
    # the kernels before them let them start (griddepcontrol.launch_dependents) and are
    # not PDL launches themselves.
    from tessera.kernels import norm as N
    from tessera.kernels import reduce as RD
    col = _compiled(RD._reduce_dim_kernel, "*fp32:16,*fp32:16,*fp32:16,*i32:16,i32,i32:16,i64,i64:16,i64,fp32,i32",
                    dict(OP=RD.OP_SUM, MEAN=False, ACC=tl.float32, BLOCK_R=8, BLOCK_I=256, UNROLL=4,
                         SPLIT_FINISH=True, BLOCK_S=16, STAGES=2), 2)
    merge = _compiled(S._xent_merge_kernel, "*i64:16,*fp32:16,*fp32:16,*fp32:16,*fp32:16,*fp16,*fp32:16,*i64:16,"
                      "i32,i32,i32,i32,i64,fp32,i32,i32", dict(SMOOTH=False, REDUCE=True, MEAN=True, ACC=tl.float32,
                                                             ROWS=32, SLICES=8, FINAL=1024), 4)
    for ck in (col, merge):
        ptx = ck.asm["ptx"]
        assert ck.metadata.get("pdl") == "1" and ptx.count("griddepcontrol.wait;") == 1
        first_access = min(i for i in (ptx.find("ld.global"), ptx.find("st.global"), ptx.find("cp.async"),
                                       ptx.find("atom.")) if i >= 0)
        assert ptx.find("griddepcontrol.wait;") < first_access
        assemble_if_available(ptx, "90a", tmp_path)
    slices = _compiled(S._xent_slice_kernel, "*fp16:16,*i64:16,*fp32:16,i64:16,i32:16,i32,i32,i32",
                       dict(SMOOTH=False, ACC=tl.float32, BLOCK=4096, CHUNKS=1, REALIGN=False, VEC=8, FMA_EXP=True), 2)
    norm = _compiled(N._norm_bwd_kernel, "*fp16:16,*fp16:16,*fp16:16,*fp16:16,*fp16:16,*fp16:16,*fp32:16,*fp32:16,"
                     "*fp32:16,i32:16,i32:16,i32:16,i32:16,i32,i32:16,i32",
                     dict(IS_RMS=False, HAS_W=True, HAS_B=True, RELU=False, HAS_DH=False, PREFETCH=True,
                          PAIR_SUM=True, TWO_ROWS=False, ACC=tl.float32, BLOCK=4096), 16)
    for ck in (slices, norm):
        assert "pdl" not in ck.metadata and ck.asm["ptx"].count("griddepcontrol.launch_dependents;") == 1
        assert "griddepcontrol.wait" not in ck.asm["ptx"]
