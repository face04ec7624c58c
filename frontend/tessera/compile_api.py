"""tessera.compile: compile a kernel for a signature without launching it."""
from __future__ import annotations

from .jit import Kernel, _check_maxnreg, compile_specialization
from .language import dtypes as D


def compile(kernel, signature, constexprs=None, target="cpu", num_warps=4, num_stages=3, debug=False,
            enable_fp_fusion=None, maxnreg=None):
    """Compile `kernel` for `signature` and return a CompiledKernel whose `.asm`
    maps each stage ('tir', 'tir-opt', 'llir', 'llir-opt', 'asm' / 'ptx') to text.

    signature: {'x': '*fp32', 'n': 'i32'} or '*fp32,*fp32,i32' (runtime parameters
    in order); 'i32:16' marks a value divisible by 16, 'i32:8' one divisible by 8 (as a launch would
    specialize them); constexprs: {'BLOCK': 1024}; target: 'cpu' or 'cuda:90a'; enable_fp_fusion: on a GPU target, whether float
    a * b + c may become one FMA (None: TESSERA_GPU_FP_FUSION, else on); maxnreg: at most that
    many registers per thread on a GPU target (PTX .maxnreg); both as the launch options.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError("tessera.compile expects a @tessera.kernel function")
    constexprs = dict(constexprs or {})
    names = [n for i, n in enumerate(kernel.arg_names) if not kernel.constexpr_mask[i] and n not in constexprs]
    if isinstance(signature, str):
        parts = [p for p in (s.strip() for s in signature.split(",")) if p]
        if len(parts) != len(names):
            raise ValueError(f"signature lists {len(parts)} types but kernel {kernel.__name__} has "
                             f"{len(names)} runtime parameters ({', '.join(names)})")
        signature = dict(zip(names, parts))
    missing = [n for n in names if n not in signature]
    if missing:
        raise ValueError(f"signature is missing parameters: {', '.join(missing)}")
    # 'i32:16' / '*fp32:16' (Triton's spelling): the value is divisible by 16.
    arg_types, attrs = {}, {}
    for n in names:
        t = signature[n]
        if isinstance(t, str) and ":" in t:
            t, div = t.rsplit(":", 1)
            attrs[n] = {"divisibility": int(div)}
        arg_types[n] = D.parse_signature_type(t) if isinstance(t, str) else t
    for i, n in enumerate(kernel.arg_names):
        if kernel.constexpr_mask[i] and n not in constexprs:
            d = kernel.defaults[i]
            if d is not __import__("inspect").Parameter.empty:
                constexprs[n] = d
            else:
                raise ValueError(f"constexpr parameter '{n}' needs a value in constexprs=")
    options = {"num_warps": num_warps, "num_stages": num_stages, "debug": debug}
    if enable_fp_fusion is not None and target != "cpu":
        options["fp_fusion"] = int(bool(enable_fp_fusion))
    if maxnreg is not None:
        maxnreg = _check_maxnreg(kernel.__name__, maxnreg)
        if target != "cpu":
            options["maxnreg"] = maxnreg
    return compile_specialization(kernel, arg_types, constexprs, attrs, options, target, names, use_cache=False)
