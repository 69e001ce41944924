#!/usr/bin/env bash
# The first GPU run's checks (docs/distributed.md, "What to check on the first GPU run"), on one GPU,
# in about eight minutes: a short real training of the demo recipe on its prepared data (compiled,
# auto precision, saves and a validation inside), averaging, beam-4 translation of test_2016_flickr on
# the GPU and on the CPU from the same averaged checkpoint, then benchmarks/gpu.py.
#
# Needs data-bin/multi30k-en-de (`nmtk prepare recipes/multi30k-en-de.toml`). Logs go to $OUT (or
# gpu-first-run/). Usage: bash benchmarks/gpu_first_run.sh [TRAIN_MINUTES]
set -u
OUT=${OUT:-gpu-first-run}
MINUTES=${1:-2}
RUN=runs/gpu-first-run
DATA=data-bin/multi30k-en-de
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
NMTK="python3 -m nmtk"
step() { echo; echo "=== $* ($(date +%T))"; }

step environment
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"

step "train $MINUTES min: compiled, auto precision, save every 100, validate every 300"
timeout $((MINUTES * 60 + 150)) $NMTK train recipes/multi30k-en-de.toml --data $DATA --run-dir $RUN \
  --set train.max_minutes="$MINUTES" --set train.compile=true --set train.save_every_updates=100 \
  --set train.validate_every_updates=300 --set train.log_every_updates=100 \
  --set batching.batch_tokens=8192 2>&1 | tee "$OUT/train.log"
echo "train exit: ${PIPESTATUS[0]}"
cp $RUN/train.jsonl "$OUT/" 2>/dev/null

step average and translate
$NMTK average $RUN --last 5 --force 2>&1 | tail -3
for device in cuda cpu; do
  /usr/bin/time -f "$device translate: %e s" timeout 120 $NMTK translate -m $RUN --device $device \
    -i $DATA/test_2016_flickr.raw.en -o "$OUT/hyp.$device.de" --force 2>&1 | tail -3
  $NMTK score -r $DATA/test_2016_flickr.raw.de "$OUT/hyp.$device.de" --metrics bleu,chrf 2>&1 | tail -2
done
python3 - "$OUT" <<'EOF'
import sys
a, b = (open(f"{sys.argv[1]}/hyp.{d}.de").read().splitlines() for d in ("cuda", "cpu"))
print(f"cuda = cpu on {sum(x == y for x, y in zip(a, b))} of {len(a)} lines")
EOF

step "benchmarks/gpu.py"
timeout 270 python3 benchmarks/gpu.py --updates 30 2>&1 | tee "$OUT/gpu_bench.log" | tail -40
echo "gpu.py exit: ${PIPESTATUS[0]}"
