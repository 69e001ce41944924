#!/usr/bin/env bash
# Issue 63's checks in one call on one GPU (under 10 minutes): the same update as 8 x 3,125 tokens and as
# one micro-batch in bf16 (benchmarks/micro_batches.py), benchmarks/gpu.py's default rows (each WMT14
# recipe as written, the 8-GPU per-GPU shape, the best shape), then the 8-GPU shape with CUDA graphs and
# with the whole forward compiled. JSON lines and logs go to $OUT (or gpu-micro-batches/).
# Usage: bash benchmarks/gpu_micro_batches.sh
set -u
OUT=${OUT:-$PWD/gpu-micro-batches}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
step() { echo; echo "=== $* ($(date +%T))"; }

step environment
nvidia-smi -L
date -u +%F
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"

step "the same update as 8 x 3,125 and as one micro-batch, bf16, base"
timeout 100 python3 micro_batches.py --model base --updates 10 2>"$OUT/micro.err" | tee "$OUT/micro.json"
tail -3 "$OUT/micro.err"

step "benchmarks/gpu.py default rows"
timeout 330 python3 gpu.py --updates 15 --pairs 60000 --no-decode --no-costs 2>"$OUT/gpu.err" | tee "$OUT/gpu.json"
tail -5 "$OUT/gpu.err"

step "the 8-GPU shape with CUDA graphs, and with the whole forward compiled"
timeout 130 python3 gpu.py --updates 15 --pairs 20000 --rows base:graphs:1x3125,base:model:1x3125 --no-decode \
  --no-costs 2>"$OUT/experiments.err" | tee "$OUT/experiments.json"
tail -5 "$OUT/experiments.err"
