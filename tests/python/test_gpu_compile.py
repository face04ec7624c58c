"""Compiling kernels for the GPU without a GPU: tessera.compile(..., target='cuda:90a')
gives PTX that ptxas (from the CUDA toolkit, when installed) assembles."""
import importlib
import os
import shutil
import subprocess

import pytest

import tessera
import tessera.language as tl
from tessera.language import dtypes as D

J = importlib.import_module("tessera.jit")  # the module: tessera.jit is also the decorator

PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                  else None)


# The tutorial's vector add (tutorials/01_vector_add.py).
@tessera.kernel
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


# The tutorial's fused softmax (tutorials/02_fused_softmax.py).
@tessera.kernel
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=mask)


ADD_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32"}


def assemble(ptx, arch, tmp_path):
    if PTXAS is None:
        pytest.skip("ptxas (CUDA toolkit) not installed")
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", str(src), "-o", str(tmp_path / f"k_{arch}.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n" + ptx


def compile_specialized(kernel, signature, constexprs, attrs, target):
    """What a launch would compile: 16-byte aligned arrays, sizes divisible by 16."""
    names = list(signature)
    arg_types = {n: D.parse_signature_type(t) for n, t in signature.items()}
    options = {"num_warps": 4, "num_stages": 3, "debug": False}
    return J.compile_specialization(kernel, arg_types, constexprs, attrs, options, target, names, use_cache=False)


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80"), ("sm_90a", "sm_90a")])
def test_vector_add_stages_and_ptx(target, arch, tmp_path):
    ck = tessera.compile(add_kernel, signature=ADD_SIG, constexprs={"BLOCK_SIZE": 1024}, target=target)
    assert ck.stage_order == ["tir", "tir-opt", "llir", "llir-opt", "ptx"]
    ptx = ck.asm["ptx"]
    assert ck.binary == ptx.encode()
    assert ck.entry_symbol == "add_kernel"
    assert ".entry add_kernel" in ptx and f".target {arch}" in ptx
    assert ck.metadata["num_warps"] == "4" and ck.metadata["arch"] == arch
    assert "nvptx64-nvidia-cuda" in ck.asm["llir"]
    assemble(ptx, arch, tmp_path)


@pytest.mark.parametrize("target,arch", [("cuda:90a", "sm_90a"), ("cuda:80", "sm_80")])
def test_vector_add_specialized_uses_v4_accesses(target, arch, tmp_path):
    attrs = {n: {"divisibility": 16} for n in ADD_SIG}
    ck = compile_specialized(add_kernel, ADD_SIG, {"BLOCK_SIZE": 1024}, attrs, target)
    ptx = ck.asm["ptx"]
    # 1024 floats over 128 threads: each thread moves two runs of 4 per array.
    assert ptx.count("ld.global.v4.f32") == 4, ptx
    assert ptx.count("st.global.v4.f32") == 2, ptx
    assemble(ptx, arch, tmp_path)


def test_vector_add_unspecialized_stays_correct_with_scalar_accesses():
    # Without alignment facts the pointers may be 4-byte aligned only.
    ck = tessera.compile(add_kernel, signature=ADD_SIG, constexprs={"BLOCK_SIZE": 1024}, target="cuda:90a")
    assert "ld.global.v4.f32" not in ck.asm["ptx"]
    assert ck.asm["ptx"].count("ld.global.f32") == 16


@pytest.mark.parametrize("num_warps", [1, 4, 8])
def test_softmax_reduces_with_warp_shuffles(num_warps, tmp_path):
    ck = tessera.compile(softmax_kernel, signature="*fp32,*fp32,i32,i32,i32", constexprs={"BLOCK_SIZE": 1024},
                         target="cuda:90a", num_warps=num_warps)
    ptx = ck.asm["ptx"]
    assert "shfl.sync.bfly.b32" in ptx
    assert f".maxntid {32 * num_warps}, 1, 1" in ptx
    assert ("bar.sync" in ptx) == (num_warps > 1)  # across warps through shared memory
    assemble(ptx, "sm_90a", tmp_path)


def test_unsupported_op_is_a_compilation_error_with_the_line():
    @tessera.kernel
    def cumsum(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(x_ptr + offs, tl.cumsum(x, axis=0))

    with pytest.raises(tessera.CompilationError) as e:
        tessera.compile(cumsum, signature="*fp32", constexprs={"BLOCK": 128}, target="cuda:90a")
    assert "not supported on the GPU yet" in str(e.value)
    assert "tl.cumsum" in str(e.value)  # the source line is shown


def test_gpu_compile_goes_through_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    arg_types = {n: D.parse_signature_type(t) for n, t in ADD_SIG.items()}
    args = (add_kernel, arg_types, {"BLOCK_SIZE": 1024}, {}, {"num_warps": 4, "num_stages": 3, "debug": False},
            "cuda:90a", list(ADD_SIG))
    first = J.compile_specialization(*args)
    again = J.compile_specialization(*args)
    assert not first.from_cache and again.from_cache
    assert again.binary == first.binary and again.asm["ptx"] == first.asm["ptx"]
    assert again.metadata.get("shared") == str(first.metadata.get("shared"))
