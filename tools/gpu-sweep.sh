#!/usr/bin/env bash
# One H200 call (device tool): optional host-time breakdown of a replayed call (OVERHEAD=1), tests given as
# arguments, then the config sweep of tools/sweep.py
# (compiled in 16 parallel shards, then timed serially). Results to $OUT (or ./gpu-out).
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source tools/gpu-setup.sh
export PYTHONUNBUFFERED=1
[ -n "$OVERHEAD" ] && python3 tools/launch_overhead.py 2>&1 | tee "$OUT/overhead.txt"
if [ $# -gt 0 ]; then
  TRITRED_TEST_DEVICE=cuda timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -n 12 -p no:cacheprovider "$@" > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -5 "$OUT/tests.log"
fi
t0=$(date +%s)
for i in $(seq 0 15); do timeout 200 python3 tools/sweep.py --shard $i/16 --compile-only > "$OUT/compile-$i.log" 2>&1 & done
wait; echo "compiled in $(( $(date +%s) - t0 )) s"; cat "$OUT"/compile-*.log | grep -c FAIL
cat "$OUT"/compile-*.log | grep FAIL | head -5; rm -f "$OUT"/compile-*.log
timeout ${SWEEP_TIMEOUT:-280} python3 tools/sweep.py --out "$OUT/sweep.json" --seconds ${SWEEP_SECONDS:-260} 2>&1 \
  | tee "$OUT/sweep.txt" | grep -v "^FAIL" 
