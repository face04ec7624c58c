#!/usr/bin/env bash
# The whole GPU round in one call, run ON the GPU host (no LLVM there):
#   1. builds the Python binding against the core library built on the development
#      machine and carried in .carry/lib/ (see scripts/prepare_gpu_round.sh);
#   2. runs the GPU tests (pytest -m gpu);
#   3. runs the GPU benchmark side by side with torch and Triton;
#   4. prints a short table last.
# From the development machine: bash scripts/prepare_gpu_round.sh, then run
# `bash scripts/gpu_round.sh` on the GPU host with .carry carried along.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_binding.sh
. scripts/gpu_binding.sh

echo "== GPU tests"
$PY -m pytest -q -m gpu tests/python -p no:cacheprovider 2>&1 | tee "$OUT_DIR/gpu_tests.log" | tail -25
echo "== the CPU op-by-op suite rerun on the GPU (coverage report, not a gate)"
TESSERA_TEST_DEVICE=cuda timeout 300 $PY -m pytest -q -p no:cacheprovider tests/python/test_cpu_elementwise.py \
  tests/python/test_cpu_memory.py tests/python/test_cpu_reductions.py tests/python/test_cpu_shapes.py \
  tests/python/test_cpu_control_flow.py tests/python/test_cpu_dot.py tests/python/test_cpu_random.py \
  tests/python/test_cpu_dtypes.py 2>&1 | tee "$OUT_DIR/gpu_suite.log" | tail -3
echo "== kernel library benchmark (every tessera.kernels op vs torch eager, torch.compile, Triton; fp16)"
KOPS=${TESSERA_GPU_ROUND_KERNEL_OPS-}  # empty: every op
timeout 420 $PY bench/kernels.py --device cuda --dtype float16 --ops "$KOPS" --out "$OUT_DIR" 2>&1 \
  | tee /tmp/tessera-kernels-bench.log | tail -30
echo "== GPU benchmark"
$PY bench/bench_gpu.py --out "$OUT_DIR" 2>&1 | tee "$OUT_DIR/gpu_bench.log" | tail -40
