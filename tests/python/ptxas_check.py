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
