#!/usr/bin/env bash
# FMA contraction on the GPU, run ON the GPU host (see scripts/gpu_round.sh for the
# setup): the GPU tests with TESSERA_GPU_FP_FUSION=1 and the math/fusion tests with
# it unset, then the memory-bound kernels and the bandwidth rows with fusion on and
# off, side by side with torch eager, torch.compile and Triton. Logs and tables in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_binding.sh
. scripts/gpu_binding.sh
OPS=${TESSERA_FUSION_ROUND_OPS:-bias_gelu,bias_gelu_tanh,gelu_dropout,swiglu,softmax+dropout,cross_entropy,reduce_mean_abs(dim=0),rms_norm_rope,layer_norm}
echo "== GPU tests, TESSERA_GPU_FP_FUSION=1"
TESSERA_GPU_FP_FUSION=1 $PY -m pytest -q -m gpu tests/python -p no:cacheprovider > "$OUT_DIR/gpu_tests_fusion.log" 2>&1
tail -15 "$OUT_DIR/gpu_tests_fusion.log"
echo "== math and fusion tests, TESSERA_GPU_FP_FUSION unset"
$PY -m pytest -q -p no:cacheprovider tests/python/test_gpu_math.py tests/python/test_gpu_fp_fusion.py \
  > "$OUT_DIR/gpu_tests_math_default.log" 2>&1
tail -3 "$OUT_DIR/gpu_tests_math_default.log"
for f in 1 0; do
  echo "== kernel library, fusion $f"
  cols=""; [ "$f" = 0 ] && cols="--no-compile --no-triton"
  TESSERA_GPU_FP_FUSION=$f timeout 300 $PY bench/kernels.py --device cuda --dtype float16 --ops "$OPS" --no-backward \
    --no-kernel-time $cols --out "$OUT_DIR" --tag "_fusion$f" > "$OUT_DIR/kernels_fusion$f.log" 2>&1
  grep -E '^\| ' "$OUT_DIR"/kernels_cuda_float16_fusion$f.md | cut -d'|' -f2-8,18 | head -20
  echo "== bandwidth rows, fusion $f"
  TESSERA_GPU_FP_FUSION=$f $PY bench/bench_gpu.py --rows-only --tag "_fusion$f" --out "$OUT_DIR" 2>&1 | tail -13
done
