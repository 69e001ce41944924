#!/usr/bin/env bash
# issue 78's device checks in one call (docs/distributed.md, "Graphed micro-batches"): graphed against
# eager losses (fp32, 1e-4), the speed rows (graphs on and off at the paper's per-GPU shapes 1 x 3,125,
# 1 x 6,250 and 1 x 12,500, the recipe as written, re-cut or as its 8 batches of 3,125 graphed, the
# whole forward compiled and graphed, the best shape 1 x 25,000; base and big), and the bf16 loss curve
# of the Multi30k recipe (1 %). Each stage has its own time limit and log under $OUT, so a stage that
# fails or runs long leaves the others' figures; ROWS, T_EQUAL, T_ROWS, T_CURVE override; at most
# 9 minutes on one H200. Needs data-bin/multi30k-en-de for the curve, and on a bare GPU machine pydantic and
# tomli-w (docs/distributed.md). Usage: bash benchmarks/gpu_graphs_session.sh
set -u
OUT=${OUT:-gpu-graphs-session}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
stage() { echo; echo "=== $1 ($(date +%T))"; }
stage environment
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
stage "equal: fp32, dropout 0, 10 updates eager and graphed"
timeout "${T_EQUAL:-110}" python3 benchmarks/gpu_graphs.py --checks equal >"$OUT/equal.log" 2>&1
echo "exit $?"; grep -E '^\{|Error|error' "$OUT/equal.log" | tail -4 | cut -c1-3000
stage "speed rows"
timeout "${T_ROWS:-330}" python3 benchmarks/gpu.py --no-decode --no-costs --pairs 100000 --updates 20 \
  --rows "${ROWS:-base:compiled:1x25000,base:compiled-cuda-graphs:1x3125,base:compiled:1x3125,base:compiled-cuda-graphs:1x6250,base:compiled:1x6250,base:compiled-cuda-graphs:1x12500,base:compiled:1x12500,base:compiled:recipe,base:compiled-cuda-graphs:recipe,base:compiled-cuda-graphs:8x3125,base:model-cuda-graphs:1x3125,big:compiled:1x25000,big:compiled:recipe,big:compiled-cuda-graphs:8x3125}" \
  >"$OUT/rows.log" 2>&1
echo "exit $?"; grep -E '^ROW|Error' "$OUT/rows.log" | cut -c1-1500
stage "curve: Multi30k recipe, bf16 with dropout, 300 updates eager and graphed"
timeout "${T_CURVE:-100}" python3 benchmarks/gpu_graphs.py --checks curve >"$OUT/curve.log" 2>&1
echo "exit $?"; grep -E '^\{|Error|error' "$OUT/curve.log" | tail -3 | cut -c1-3000
stage done
