#!/usr/bin/env bash
# Twenty-first session's A/B of the shifted single passes' int32 element masks, on the H200: the same bench
# (tools/s21_single.json, eager beside) with the kernels before the change (a copy of tritred_ops in _old/, first
# on PYTHONPATH) and after, alternated twice. Usage (after tools/gpu-setup.sh): bash tools/s21_single.sh OUTDIR
set -u
out=${1:-.}
for round in 1 2; do
  PYTHONPATH=_old:$PYTHONPATH tritred bench --suite tools/s21_single.json --peers eager --warmup 10 --rep 30 \
      --json "$out/before-$round.json" > /dev/null 2>&1
  tritred bench --suite tools/s21_single.json --peers eager --warmup 10 --rep 30 --json "$out/after-$round.json" \
      > /dev/null 2>&1
done
for f in "$out"/before-*.json "$out"/after-*.json; do echo "== $f"; python3 tools/perf_table.py "$f" | grep '^| [a-z]' | cut -d'|' -f2,4,5; done
