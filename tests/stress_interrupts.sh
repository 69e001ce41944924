#!/usr/bin/env bash
# The interrupt tests (tests/integration/test_interrupts.py) N times in one pytest session beside a load:
#   bash tests/stress_interrupts.sh N LOAD      LOAD: idle | busy1 | busy2 | io
# prints pass/fail and the distribution of times from signal to exit (NMTK_INTERRUPT_LOG), in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-30}; LOAD=${2:-idle}
LOG=$(mktemp); PIDS=()
busy() { python3 -c "while True: pass" & PIDS+=($!); }
case $LOAD in
  busy1) busy ;;
  busy2) busy; busy ;;
  io) (while true; do dd if=/dev/zero of="$LOG.io" bs=1M count=512 conv=fsync status=none;
        dd if="$LOG.io" of=/dev/null bs=1M status=none; sync; done) & PIDS+=($!) ;;
  idle) ;;
  *) echo "LOAD: idle | busy1 | busy2 | io"; exit 2 ;;
esac
NMTK_INTERRUPT_REPEAT=$N NMTK_INTERRUPT_LOG=$LOG .venv/bin/python -m pytest tests/integration/test_interrupts.py -q \
  -p no:cacheprovider --basetemp "$LOG.tmp" > "$LOG.pytest" 2>&1
grep -E "^(FAILED|E  )" "$LOG.pytest" | head -20; tail -1 "$LOG.pytest"; rm -f "$LOG.pytest"
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done  # the loop first, then what it had started
sleep 0.2; pkill -f "$LOG.io" 2>/dev/null
rm -rf "$LOG.io" "$LOG.tmp"
python3 - "$LOG" "$LOAD" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1])]
for test in sorted({t for t, _ in rows}):
    s = sorted(float(x) for t, x in rows if t == test)
    q = statistics.quantiles(s, n=20) if len(s) > 1 else s * 19
    print(f"{sys.argv[2]} {test}: n={len(s)} min {s[0]:.3f} median {statistics.median(s):.3f} "
          f"p95 {q[18]:.3f} max {s[-1]:.3f} s")
PY
rm -f "$LOG"
