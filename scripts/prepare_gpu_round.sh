#!/usr/bin/env bash
# Development-machine half of the GPU round: builds the core (LLVM linked
# statically) and puts a stripped copy in .carry/lib/ (git-ignored) so the device
# tool can carry it to the GPU host, where scripts/gpu_round.sh builds the binding.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p .carry/lib
strip --strip-unneeded -o .carry/lib/libtessera_core.so "${TESSERA_BUILD_DIR:-build}/libtessera_core.so"
ls -la .carry/lib/
