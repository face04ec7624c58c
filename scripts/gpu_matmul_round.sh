#!/usr/bin/env bash
# A targeted GPU round for the matmul path, run ON the GPU host (as gpu_round.sh, whose
# first steps it shares): builds the binding against .carry/lib, runs the GPU dot/TMA
# tests given in $TESTS (default: the TMA and dot tests), then bench/bench_matmul.py
# (cp.async vs TMA rings, cuBLAS, Triton) with $BENCH_ARGS; logs and tables go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_binding.sh
. scripts/gpu_binding.sh
echo "== GPU tests: ${TESTS:=tests/python/test_gpu_tma.py tests/python/test_gpu_dot.py}"
timeout 300 $PY -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tee "$OUT_DIR/gpu_matmul_tests.log" | tail -15
echo "== bench/bench_matmul.py ${BENCH_ARGS:=--sizes 4096,8192}"
# shellcheck disable=SC2086
timeout 400 $PY bench/bench_matmul.py --out "$OUT_DIR" $BENCH_ARGS 2>&1 | tee "$OUT_DIR/gpu_matmul_bench.log" | tail -12
if [ -n "${BENCH_GPU:-}" ]; then
  echo "== bench/bench_gpu.py (every row: bandwidth, matmul fp16/bf16/tf32/skinny, compile, launch)"
  timeout 400 $PY bench/bench_gpu.py --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/gpu_bench.log" | tail -30
fi
