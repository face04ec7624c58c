"""Assembling a test's PTX with ptxas (from the CUDA toolkit, when installed): the check
that LLVM's PTX is valid for the target, without a GPU."""
import os
import shutil
import subprocess

import pytest

PTXAS = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.path.exists("/usr/local/cuda/bin/ptxas") else None)


def assemble(ptx, arch, tmp_path, verbose=False):
    """ptxas -arch=sm_<arch> on `ptx` (arch "90a" or "sm_90a"); fails the test with ptxas's
    message if it does not assemble, skips it without ptxas. Returns ptxas's stderr (with
    verbose, its register and spill counts)."""
    if PTXAS is None:
        pytest.skip("ptxas (CUDA toolkit) not installed")
    arch = arch if arch.startswith("sm_") else f"sm_{arch}"
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", *(["-v"] if verbose else []), str(src), "-o",
                        str(tmp_path / f"k_{arch}.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n" + ptx
    return r.stderr


def assemble_if_available(ptx, arch, tmp_path, verbose=False):
    """assemble() where ptxas is installed (None otherwise): for tests whose PTX checks
    should still run without the CUDA toolkit."""
    return None if PTXAS is None else assemble(ptx, arch, tmp_path, verbose)


def launch_signature(kernel, pointer_types, sizes, meta):
    """tessera.compile's (signature, constexprs, options) of a launch as the launch would
    specialize it: `pointer_types` (a list in order, or a dict by name) for the leading
    pointer parameters, then `sizes`: floats as fp32, ints equal to 1 as constants, other
    ints by their divisibility class (specialization.divisibility_class: 16, 8 or none);
    num_warps / num_stages taken out of `meta` as options."""
    from tessera.specialization import divisibility_class
    names = [n for i, n in enumerate(kernel.arg_names) if not kernel.constexpr_mask[i]]
    sig = dict(pointer_types) if isinstance(pointer_types, dict) else dict(zip(names, pointer_types))
    ce = dict(meta)
    for name, v in zip(names[len(sig):], sizes):
        if isinstance(v, float):
            sig[name] = "fp32"
        elif v == 1:
            ce[name] = 1
        else:
            div = divisibility_class(v)
            sig[name] = f"i32:{div}" if div > 1 else "i32"
    opts = {o: ce.pop(o) for o in ("num_warps", "num_stages") if o in ce}
    return sig, ce, opts
