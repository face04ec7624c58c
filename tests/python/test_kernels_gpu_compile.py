"""Every tessera.kernels kernel, as the ops specialize it, compiles for the GPU without a
GPU: run the ops (forward and backward) on the CPU, record each specialization the
launches compile, then compile the same specializations for sm_90a and assemble the
PTX with ptxas. This catches a construct the NVPTX back end lacks before a GPU round."""
import importlib
import inspect
import os
import re
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

import tessera.kernels as tk  # noqa: E402
from tessera.kernels import linear as L  # noqa: E402
from test_kernels_ops import ALL_CASES, MM_CASES, check_case  # noqa: E402

J = importlib.import_module("tessera.jit")
PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK)
                                  else None)
MODULES = ["norm", "softmax_ce", "activation", "reduce", "rope", "linear", "attention"]


def _library_kernels():
    """The kernels the library launches: every module-level kernel except those only
    called from another kernel (inlined there, e.g. linear's _epilogue) or named in one
    (norm's _add_pair, a tl.reduce combine function)."""
    kernels = []
    for m in MODULES:
        mod = importlib.import_module(f"tessera.kernels.{m}")
        kernels += [v for v in vars(mod).values() if isinstance(v, J.Kernel)]
    sources = {k.__name__: inspect.getsource(k.fn) for k in kernels}
    for k in kernels:
        if not any(re.search(rf"\b{k.__name__}\b", src) for name, src in sources.items() if name != k.__name__):
            yield k


def _record_specializations(monkeypatch, dtype):
    for k in _library_kernels():
        # Force every launch to specialize again. The table is emptied in place (which
        # also empties the C++ launch path's): a kernel launched before, e.g. by
        # test_kernels_ops in the same process, has a launcher holding this very table.
        k._compiled.clear()
    seen = {}
    real = J.compile_specialization

    def recording(kernel, arg_types, constexprs, attrs, options, target, names, use_cache=True):
        if target == "cpu":
            # On a GPU the pointers are 16-byte aligned (cudaMalloc): specialize as a launch there would.
            gpu_attrs = dict(attrs)
            for n, t in arg_types.items():
                if t.is_ptr():
                    gpu_attrs[n] = {"divisibility": 16}
            # Row kernels launch with more warps on a GPU (H.row_launch_options): mirror it.
            gpu_options = dict(options)
            if "BLOCK" in constexprs and kernel.fn.__module__.split(".")[-1] in ("norm", "softmax_ce"):
                gpu_options["num_warps"] = max(1, min(16, constexprs["BLOCK"] // 256))
            key = (kernel.__name__, repr(sorted(arg_types.items(), key=str)), repr(sorted(constexprs.items(), key=str)))
            seen.setdefault(key, (kernel, arg_types, constexprs, gpu_attrs, gpu_options, names))
            if kernel is L._matmul_kernel_cpu:
                # On a GPU the same launch runs _matmul_kernel (same arguments and
                # constexprs, plus the GPU grid's tile order) with the GPU's tiles and
                # launch options (linear._gpu_tiles).
                gk = dict(constexprs, GROUP_M=L.GROUP_M)
                go = dict(gpu_options)
                elem = str(arg_types["A"])
                if elem == "pointer<fp64>":
                    gk.update(BLOCK_M=L.BM, BLOCK_N=L.BN, BLOCK_K=L.BK)
                else:
                    gk.update(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32 if elem == "pointer<fp32>" else 64)
                    go.update(num_warps=8, num_stages=3)
                key = ("_matmul_kernel", repr(sorted(arg_types.items(), key=str)), repr(sorted(gk.items(), key=str)))
                seen.setdefault(key, (L._matmul_kernel, arg_types, gk, gpu_attrs, go, names))
                if elem in ("pointer<fp16>", "pointer<bf16>") and "M" in arg_types:
                    # K <= 64 (attention's q k^T) runs the persistent kernel: one more
                    # i32 argument (the batch count), its own tiles and stages.
                    pt = dict(arg_types, batches=arg_types["M"])
                    bm, bn, bk, popts = L._gpu_tiles("float16", 2048, 2048, 64, 8)
                    pk = dict(gk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
                    go = dict(go, num_warps=popts["num_warps"], num_stages=popts["num_stages"])
                    key = ("_persistent_matmul_kernel", repr(sorted(pt.items(), key=str)), repr(sorted(pk.items(), key=str)))
                    seen.setdefault(key, (L._persistent_matmul_kernel, pt, pk, gpu_attrs, go, list(names) + ["batches"]))
        return real(kernel, arg_types, constexprs, attrs, options, target, names, use_cache)

    monkeypatch.setattr(J, "compile_specialization", recording)
    # Reductions launch differently on a GPU (row slices, a 1-D row kernel): plan as there.
    monkeypatch.setattr(importlib.import_module("tessera.kernels.reduce"), "_gpu_plan", lambda x: True)
    for m in ("norm", "activation", "rope"):  # their backward plans keep column-sum launches planned before
        for plans in ("_BWD_PLANS", "_PLANS"):
            getattr(importlib.import_module(f"tessera.kernels.{m}"), plans, {}).clear()
    for case in ALL_CASES:
        check_case(case, 40 if case in MM_CASES else (3, 33), dtype)
    tk.softmax(torch.randn(3, 33, dtype=dtype), dropout_p=0.2, seed=1)
    for name in ("layer_norm", "softmax", "cross_entropy"):  # long rows: 8192-wide tiles, 16 warps
        check_case(next(c for c in ALL_CASES if c.name == name), (2, 4097), dtype)
    # rows longer than softmax_ce.CE_ONE_CHUNK: the sliced forward (two launches)
    check_case(next(c for c in ALL_CASES if c.name == "cross_entropy"), (2, 9000), dtype)
    tk.gelu_dropout(torch.randn(3, 33, dtype=dtype, requires_grad=True), 0.2, seed=1).sum().backward()
    monkeypatch.setattr(J, "compile_specialization", real)
    return list(seen.values())


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=pytest.mark.slow)],
                         ids=["float32", "bfloat16"])
def test_every_library_kernel_compiles_to_ptx(monkeypatch, tmp_path, dtype):
    if PTXAS is None:
        pytest.skip("ptxas (CUDA toolkit) not installed")
    specs = _record_specializations(monkeypatch, dtype)
    names = {s[0].__name__ for s in specs}
    # fp32 products never take the persistent kernel (linear._gpu_tiles: 16-bit only).
    unused = {"_persistent_matmul_kernel"} if dtype == torch.float32 else set()
    # GPU-only plans (the CPU never launches them): test_kernels_matmul_backward.py
    # compiles them for sm_90a as linear_backward and attention_score_backward launch them.
    unused |= {"_split_k_matmul_kernel", "_score_backward_kernel", "_score_backward_flat_kernel",
               "_score_forward_flat_kernel"}  # (test_kernels_attention_forward.py)
    assert {k.__name__ for k in _library_kernels()} - unused <= names, "some library kernel was never launched"
    failures = []
    for i, (kernel, arg_types, constexprs, attrs, options, runtime_names) in enumerate(specs):
        try:
            ck = J.compile_specialization(kernel, arg_types, constexprs, attrs, options, "cuda:90a", runtime_names)
        except Exception as exc:
            failures.append(f"{kernel.__name__} {constexprs}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        src = tmp_path / f"k{i}.ptx"
        src.write_text(ck.asm["ptx"])
        r = subprocess.run([PTXAS, "-arch=sm_90a", str(src), "-o", str(tmp_path / f"k{i}.cubin")],
                           capture_output=True, text=True)
        if r.returncode:
            failures.append(f"{kernel.__name__} {constexprs}: ptxas: {r.stderr[:300]}")
    assert not failures, "\n".join(failures)
