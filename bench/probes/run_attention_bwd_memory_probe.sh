#!/usr/bin/env bash
# Builds and runs attention_bwd_memory_probe.cu on a GPU host (sm_90a, CUDA toolkit with
# nvcc): the memory side of attention_score's backward, unicast pairs against multicast
# pairs. Prints a table; with OUT set, also writes it to $OUT/attention_bwd_memory_probe.md.
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
BIN=${TMPDIR:-/tmp}/attention_bwd_memory_probe
"$NVCC" -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 attention_bwd_memory_probe.cu \
  -L"$CUDA_HOME/lib64/stubs" -lcuda -o "$BIN"
nvidia-smi --query-gpu=name --format=csv,noheader
# Each variant in its own process (a hung one is stopped and says where: the probe's waits trap).
# Batch 7 besides 8: an H200 holds 7 clusters of 16 at once, so batch 8's multicast runs in two
# waves; batch 16 of the dq cut has as many CTAs as the whole backward at batch 8.
{ echo "| variant | us | of copy |"; echo "|---|---|---|"
  for b in 8 7; do for v in unicast multicast unicast unicast-ds unicast-ds6 multicast-ds; do
    timeout 60 "$BIN" "$v" "$b" || echo "| $v, batch $b: failed (rc $?) | | |"; done; done
  for b in 8 16; do
    timeout 60 "$BIN" dq "$b" || echo "| dq, batch $b: failed (rc $?) | | |"; done; } \
  | tee "${OUT:-${TMPDIR:-/tmp}}/attention_bwd_memory_probe.md"
