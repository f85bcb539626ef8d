#!/usr/bin/env bash
# H200 calls (device tool) for a closing measurement. STEPS picks what runs (default: all, in this order):
#   latency  tools/latency.py (host-bound tiny calls, interleaved with eager)
#   tests    the whole test suite compiled on the GPU
#   memcheck compute-sanitizer memcheck over the shifted-row (ALIGN) and batch_norm tests
#   align    built-in configs with and without the shifted tiles of odd-width rows (tools/sweep.py --no-align)
#   exp      tools/exp_rotate.py with the steps in EXP (default: split-bn split-ln split-bf16), A/B against the built-in
#            configs (~8 min: run it alone, `STEPS=exp`; lines are written as they come, so a timeout keeps them)
#   off      the offsuite suite (shapes outside the public one) beside every peer, in two runs (bf16; fp32+fp16)
#   bench    tritred beside every peer (torch eager, torch.compile, Liger-Kernel, FlagGems) on the public suite,
#            in four runs (one JSON each) so that a timeout loses one part only; PARTS picks some of them
# Results to $OUT (or ./gpu-out).
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
STEPS=${STEPS:-latency tests memcheck align bench}
source tools/gpu-setup.sh
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
has() { [[ " $STEPS " == *" $1 "* ]]; }
if has latency; then python3 tools/latency.py 2>&1 | tee "$OUT/latency.txt"; fi
if has tests; then
  TRITRED_TEST_DEVICE=cuda HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-dev} timeout "${TEST_TIMEOUT:-200}" \
    python3 -m pytest -q -n 12 -p no:cacheprovider packages examples/tests > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -3; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
fi
if has memcheck; then
  TRITRED_TEST_DEVICE=cuda timeout "${MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --print-limit 20 \
    python3 -m pytest -q -p no:cacheprovider packages/ops/tests/test_softmax.py packages/ops/tests/test_reduce.py \
    packages/ops/tests/test_layer_norm.py packages/ops/tests/test_statistics.py packages/ops/tests/test_batch_norm.py \
    -k "boundaries or every_element or forced" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "passed|failed|ERROR SUMMARY" "$OUT/memcheck.log" | tail -3
fi
if has exp; then
  timeout "${EXP_TIMEOUT:-540}" python3 tools/exp_rotate.py ${EXP:-split-bn split-ln split-bf16} > "$OUT/exp.txt" 2>&1
  echo "exp rc=$?"; tail -n 40 "$OUT/exp.txt"
fi
if has align; then
  for flag in "" --no-align; do
    echo "== builtin $flag"
    timeout 90 python3 tools/sweep.py --builtin --only softmax,layer_norm,var $flag 2>&1 | grep -v "^FAIL"
  done | tee "$OUT/align.txt"
fi
part() {  # name, timeout, bench args...
  local name=$1 t=$2; shift 2
  timeout "$t" tritred bench --suite h200 --peers eager,compile,liger,flaggems --warmup 10 --rep 30 \
    --json "$OUT/bench-$name.json" "$@" > "$OUT/bench-$name.txt" 2>&1
  echo "bench $name rc=$? ($(date +%T))"; grep -E "geometric" "$OUT/bench-$name.txt"
}
if has off; then
  for t in bfloat16 "float32 -t float16"; do
    name=off-${t%% *}
    # shellcheck disable=SC2086
    timeout "${T_OFF:-280}" tritred bench --suite offsuite --peers eager,compile,liger,flaggems --warmup 10 --rep 30 \
      -t $t --json "$OUT/bench-$name.json" > "$OUT/bench-$name.txt" 2>&1
    echo "bench $name rc=$? ($(date +%T))"; grep -E "geometric" "$OUT/bench-$name.txt"
  done
fi
PARTS=${PARTS:-bf16-norm bf16-red fp32-norm fp32-red}  # (a subset: to split the bench over two device calls)
if has bench; then
  [[ " $PARTS " == *" bf16-norm "* ]] && part bf16-norm "${T1:-110}" softmax log_softmax layer_norm --dtype bfloat16
  [[ " $PARTS " == *" bf16-red "* ]] && part bf16-red "${T2:-150}" --dtype bfloat16 sum mean amax amin prod max var std batch_norm
  [[ " $PARTS " == *" fp32-norm "* ]] && part fp32-norm "${T3:-90}" softmax log_softmax layer_norm --dtype float32
  [[ " $PARTS " == *" fp32-red "* ]] && part fp32-red "${T4:-110}" --dtype float32 sum mean amax amin prod max var std batch_norm
fi
