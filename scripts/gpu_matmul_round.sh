#!/usr/bin/env bash
# A targeted GPU round for the matmul path, run ON the GPU host (as gpu_round.sh, whose
# first steps it shares): builds the binding against .carry/lib, runs the GPU dot/TMA
# tests given in $TESTS (default: the TMA and dot tests), then bench/bench_matmul.py
# (cp.async vs TMA rings, cuBLAS, Triton) with $BENCH_ARGS; logs and tables go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
CORE="$ROOT/.carry/lib/libtessera_core.so"
[ -f "$CORE" ] || { echo "missing $CORE: run scripts/prepare_gpu_round.sh on the development machine"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
BUILD=${BUILD:-/tmp/tessera-binding-build-$(basename "$ROOT")}
GEN=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
cmake -S . -B "$BUILD" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_CORE=OFF -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_PREBUILT_CORE="$CORE" -DPython3_EXECUTABLE="$(command -v $PY)" > /tmp/tessera-cmake.log 2>&1 \
  || { cat /tmp/tessera-cmake.log; exit 1; }
cmake --build "$BUILD" -j 16 > /tmp/tessera-ninja.log 2>&1 || { cat /tmp/tessera-ninja.log; exit 1; }
mkdir -p frontend/tessera/_lib
cp -f "$BUILD"/frontend/csrc/_C*.so "$CORE" frontend/tessera/_lib/
export PYTHONPATH="$ROOT/frontend${PYTHONPATH:+:$PYTHONPATH}"
export TESSERA_CACHE_DIR=$(mktemp -d /tmp/tessera-gpu-cache.XXXXXX)
OUT_DIR=${OUT:-/tmp/tessera-gpu-out}
mkdir -p "$OUT_DIR"
echo "== GPU tests: ${TESTS:=tests/python/test_gpu_tma.py tests/python/test_gpu_dot.py}"
timeout 300 $PY -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tee "$OUT_DIR/gpu_matmul_tests.log" | tail -15
echo "== bench/bench_matmul.py ${BENCH_ARGS:=--sizes 4096,8192}"
# shellcheck disable=SC2086
timeout 400 $PY bench/bench_matmul.py --out "$OUT_DIR" $BENCH_ARGS 2>&1 | tee "$OUT_DIR/gpu_matmul_bench.log" | tail -12
if [ -n "${BENCH_GPU:-}" ]; then
  echo "== bench/bench_gpu.py (every row: bandwidth, matmul fp16/bf16/tf32/skinny, compile, launch)"
  timeout 400 $PY bench/bench_gpu.py --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/gpu_bench.log" | tail -30
fi
