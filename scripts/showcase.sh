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
