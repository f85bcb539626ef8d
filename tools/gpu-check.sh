#!/usr/bin/env bash
# One H200 call (device tool): set up offline, per-call latency, a short tritred-vs-eager bench, then the whole
# test suite compiled on CUDA (call plans, >2^31 elements and cross-process determinism included).
# Logs go to $OUT (or ./gpu-out). Usage: bash tools/gpu-check.sh [pytest paths/args...]
# BENCH_TIMEOUT=0 skips the bench; TEST_TIMEOUT bounds the tests (seconds).
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source tools/gpu-setup.sh
export PYTHONUNBUFFERED=1
[ $# -eq 0 ] && set -- packages examples/tests
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 tools/latency.py 2>&1 | tee "$OUT/latency.txt"
python3 tools/launch_overhead.py > "$OUT/overhead.txt" 2>&1; head -3 "$OUT/overhead.txt"
if [ "${BENCH_TIMEOUT:-170}" != 0 ]; then
  timeout "${BENCH_TIMEOUT:-170}" tritred bench --suite h200 --peers eager --warmup 10 --rep 30 \
    --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; echo "bench rc=$?"; tail -5 "$OUT/bench.txt"
fi
TRITRED_TEST_DEVICE=cuda HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev} timeout "${TEST_TIMEOUT:-330}" \
  python3 -m pytest -q -n 12 -p no:cacheprovider "$@" > "$OUT/tests.log" 2>&1; echo "tests rc=$?"
tail -40 "$OUT/tests.log"
