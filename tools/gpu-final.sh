#!/usr/bin/env bash
# One H200 call (device tool): latency, the whole test suite compiled, then tritred beside every peer (torch
# eager, torch.compile, Liger-Kernel, FlagGems) on the public suite, in four bench runs (one JSON each) so that a
# timeout loses one part only. Results to $OUT (or ./gpu-out).
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
source tools/gpu-setup.sh
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
python3 tools/latency.py 2>&1 | tee "$OUT/latency.txt"
TRITRED_TEST_DEVICE=cuda HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev} timeout "${TEST_TIMEOUT:-150}" \
  python3 -m pytest -q -n 12 -p no:cacheprovider packages examples/tests > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -3; grep -E "^FAILED" "$OUT/tests.log" | head
part() {  # name, timeout, bench args...
  local name=$1 t=$2; shift 2
  timeout "$t" tritred bench --suite h200 --peers eager,compile,liger,flaggems --warmup 10 --rep 30 \
    --json "$OUT/bench-$name.json" "$@" > "$OUT/bench-$name.txt" 2>&1
  echo "bench $name rc=$? ($(date +%T))"; grep -E "geometric" "$OUT/bench-$name.txt"
}
part bf16-norm "${T1:-110}" softmax log_softmax layer_norm --dtype bfloat16
part bf16-red "${T2:-120}" --dtype bfloat16 sum mean amax amin prod max var std batch_norm
part fp32-norm "${T3:-90}" softmax log_softmax layer_norm --dtype float32
part fp32-red "${T4:-110}" --dtype float32 sum mean amax amin prod max var std batch_norm
