#!/usr/bin/env bash
# Sets up everything (scripts/setup.sh) and runs the showcase: the tutorials and
# the library kernels, on the GPU if there is one, else on the CPU.
# Usage: bash scripts/showcase.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
bash scripts/setup.sh
export PYTHONPATH="$ROOT/frontend${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
for t in tutorials/[0-9]*.py; do
  echo "================ $t ================"
  python3 "$t"
done
# With a usable NVIDIA GPU (and torch), the same kernels on the GPU next to torch and
# Triton: results are checked against torch, then timed.
if python3 -c "import torch, tessera; from tessera._core import _C; assert _C.cuda_available() and torch.cuda.is_available()" 2>/dev/null; then
  echo "================ GPU: bench/bench_gpu.py ================"
  python3 bench/bench_gpu.py --out "$(mktemp -d)"
  echo "================ GPU: library kernels (tessera.kernels) vs torch ================"
  python3 bench/kernels.py --device cuda --quick --no-compile --out "$(mktemp -d)"
else
  echo "================ library kernels (tessera.kernels) vs torch eager and numpy ================"
  python3 bench/kernels.py --quick --no-backward --out "$(mktemp -d)"
  echo "(no usable NVIDIA GPU here: the showcase ran on the CPU)"
fi
