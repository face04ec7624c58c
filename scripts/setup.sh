#!/usr/bin/env bash
# Sets up everything Tessera needs on a fresh Debian/Ubuntu x86-64 machine and
# builds it: system packages, Python packages, the C++ core and the binding.
# A second run only rebuilds what changed. Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}

need_apt=()
dpkg -s llvm-19-dev >/dev/null 2>&1 || need_apt+=(llvm-19-dev)
dpkg -s libzstd-dev >/dev/null 2>&1 || need_apt+=(libzstd-dev)
dpkg -s libxxhash-dev >/dev/null 2>&1 || need_apt+=(libxxhash-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need_apt+=(zlib1g-dev)
dpkg -s libgtest-dev >/dev/null 2>&1 || need_apt+=(libgtest-dev)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v ccache >/dev/null || need_apt+=(ccache)
command -v g++ >/dev/null || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# torch is a test dependency only (tessera.kernels' CPU tests check the torch tensor paths,
# tk.nn and autograd against it); tessera itself imports it only when given torch tensors.
if ! $PY -c "import numpy, pybind11, pytest, hypothesis, nbclient, nbformat, ipykernel, jupytext, matplotlib, torch" \
    2>/dev/null; then
  echo "[setup] installing Python packages"
  $PY -m pip install -q -r requirements-dev.txt
fi
$PY -c "import sys; from jupyter_client.kernelspec import KernelSpecManager as K; sys.exit('python3' not in K().find_kernel_specs())" 2>/dev/null || $PY -m ipykernel install --user --name python3 >/dev/null  # the tutorials' notebook kernel

BUILD=${TESSERA_BUILD_DIR:-$ROOT/build}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" >/dev/null
fi
echo "[setup] building (ninja, $(nproc) jobs)"
ninja -C "$BUILD" ${TESSERA_NINJA_TARGETS:-}
mkdir -p frontend/tessera/_lib
# Copy to a temporary name and rename: running processes keep their mapped copy.
for f in "$BUILD"/frontend/csrc/_C*.so "$BUILD"/libtessera_core.so; do
  dst=frontend/tessera/_lib/$(basename "$f")
  if ! cmp -s "$f" "$dst"; then
    cp -f "$f" "$dst.tmp.$$" && mv -f "$dst.tmp.$$" "$dst"
  fi
done
echo "[setup] done: PYTHONPATH=$ROOT/frontend"
