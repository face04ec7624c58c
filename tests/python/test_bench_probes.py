"""bench/probes/: the CUDA measurement probes (not library code) build with the toolkit's
nvcc for sm_90a, so they do not rot between the GPU sessions that run them (skipped where
nvcc is not installed)."""
import os
import shutil
import subprocess

import pytest

PROBES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "probes")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)


@pytest.mark.parametrize("probe", sorted(f for f in os.listdir(PROBES) if f.endswith(".cu")))
def test_probe_builds_for_sm90a(probe, tmp_path):
    if NVCC is None:
        pytest.skip("nvcc (CUDA toolkit) not installed")
    cuda = os.path.dirname(os.path.dirname(os.path.realpath(NVCC)))
    r = subprocess.run([NVCC, "-O3", "-gencode", "arch=compute_90a,code=sm_90a", "-std=c++17",
                        os.path.join(PROBES, probe), f"-L{cuda}/lib64/stubs", "-lcuda", "-o", str(tmp_path / "probe")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
