"""tl.store(..., cache_modifier=...): the store's cache operator as a Tile IR attribute,
st.global.<op> in the PTX (plain, masked and through shared memory), ignored on the CPU;
a value outside Triton's set is a CompilationError at the call."""
import numpy as np
import pytest
import torch

import tessera
import tessera.language as tl
from codegen_ir_helpers import F32, assert_error, compile_error, ir
from ptxas_check import assemble


@tessera.kernel
def scaled_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MOD: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n, cache_modifier=MOD)


@tessera.kernel
def tile_store(x_ptr, out_ptr, MOD: tl.constexpr):
    # An unmasked 2-D store of a dot's accumulator: the value goes through shared memory
    # (store_through_smem_nvptx.cpp) and leaves in 16-byte stores that keep the operator.
    r = tl.arange(0, 64)
    x = tl.load(x_ptr + r[:, None] * 64 + r[None, :])
    tl.store(out_ptr + r[:, None] * 64 + r[None, :], tl.dot(x, x).to(tl.float16), cache_modifier=MOD)


def test_ir_carries_the_modifier():
    text = ir(scaled_copy.fn, {"BLOCK": 128, "MOD": ".cs"}, x_ptr=F32, out_ptr=F32, n=tl.int32)
    assert 'cache_modifier = ".cs"' in text
    assert "cache_modifier =" not in ir(scaled_copy.fn, {"BLOCK": 128, "MOD": ""}, x_ptr=F32, out_ptr=F32, n=tl.int32)


@pytest.mark.parametrize("mod", [".cs", ".cg", ".wt", ".wb"])
def test_ptx_masked_store_takes_the_operator(mod, tmp_path):
    ck = tessera.compile(scaled_copy, {"x_ptr": "*fp32:16", "out_ptr": "*fp32:16", "n": "i32:16"},
                         {"BLOCK": 1024, "MOD": mod}, target="cuda:90a")
    ptx = ck.asm["ptx"]
    stores = [ln for ln in ptx.splitlines() if "st.global" in ln]
    assert stores and all(f"st.global{mod}.v4.f32" in ln and ln.lstrip().startswith("@") for ln in stores), stores
    assemble(ptx, "90a", tmp_path)


def test_ptx_default_store_has_no_operator():
    ck = tessera.compile(scaled_copy, {"x_ptr": "*fp32:16", "out_ptr": "*fp32:16", "n": "i32:16"},
                         {"BLOCK": 1024, "MOD": ""}, target="cuda:90a")
    assert not any(f"st.global{m}" in ck.asm["ptx"] for m in (".cs", ".cg", ".wt", ".wb"))


def test_ptx_store_through_shared_memory_keeps_it(tmp_path):
    ck = tessera.compile(tile_store, {"x_ptr": "*fp16:16", "out_ptr": "*fp16:16"}, {"MOD": ".cs"},
                         target="cuda:90a", num_warps=4)
    ptx = ck.asm["ptx"]
    # 64x64 f16 = 8 KB over 128 threads: four 16-byte stores each, all streaming.
    assert len([ln for ln in ptx.splitlines() if "st.global.cs.v4.b32" in ln]) == 4, ptx
    assert "st.shared" in ptx and "st.global.v4" not in ptx
    assemble(ptx, "90a", tmp_path)


def test_cpu_ignores_it():
    x = torch.arange(1000, dtype=torch.float32)
    out = torch.full((1000,), float("nan"))
    scaled_copy[(tessera.cdiv(1000, 256),)](x, out, 1000, BLOCK=256, MOD=".cs")
    np.testing.assert_array_equal(out.numpy(), x.numpy() * 2)


def e_bad_modifier(p):
    tl.store(p + tl.arange(0, 16), 1.0, cache_modifier=".ca")


def test_error_unknown_modifier():
    err = compile_error(e_bad_modifier, p=F32)
    assert_error(err, e_bad_modifier, "tl.store(p", "cache_modifier must be one of")
    assert "'.ca'" in err.message


@pytest.mark.gpu
def test_streaming_store_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.arange(5000, dtype=torch.float32, device="cuda")
    out = torch.full((5000,), float("nan"), device="cuda")
    scaled_copy[(tessera.cdiv(5000, 1024),)](x, out, 5000, BLOCK=1024, MOD=".cs")
    torch.testing.assert_close(out, x * 2, rtol=0, atol=0)
