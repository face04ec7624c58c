# Sourced by the GPU-host scripts (gpu_round.sh, gpu_matmul_round.sh), from the
# repository root: builds the Python binding against the core library carried in
# .carry/lib (the GPU host has no LLVM), puts both in frontend/tessera/_lib, and sets
# PY, ROOT, PYTHONPATH, a fresh TESSERA_CACHE_DIR and OUT_DIR (= $OUT, where the
# device tool collects files). The build directory is per checkout, so copies of the
# tree carried side by side (.gpu-<name>/) do not share it.
ROOT=$(pwd)
PY=${PYTHON:-python3}
CORE="$ROOT/.carry/lib/libtessera_core.so"
[ -f "$CORE" ] || { echo "missing $CORE: run scripts/prepare_gpu_round.sh on the development machine"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
BUILD=${BUILD:-/tmp/tessera-binding-build-$(basename "$ROOT")}
GEN=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
cmake -S . -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_CORE=OFF -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_PREBUILT_CORE="$CORE" -DPython3_EXECUTABLE="$(command -v "$PY")" > /tmp/tessera-cmake.log 2>&1 \
  || { cat /tmp/tessera-cmake.log; exit 1; }
cmake --build "$BUILD" -j 16 > /tmp/tessera-ninja.log 2>&1 || { cat /tmp/tessera-ninja.log; exit 1; }
mkdir -p frontend/tessera/_lib
cp -f "$BUILD"/frontend/csrc/_C*.so "$CORE" frontend/tessera/_lib/
export PYTHONPATH="$ROOT/frontend${PYTHONPATH:+:$PYTHONPATH}"
TESSERA_CACHE_DIR=$(mktemp -d /tmp/tessera-gpu-cache.XXXXXX)
export TESSERA_CACHE_DIR
OUT_DIR=${OUT:-/tmp/tessera-gpu-out}
mkdir -p "$OUT_DIR"
