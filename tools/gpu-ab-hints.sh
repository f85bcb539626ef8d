#!/usr/bin/env bash
# A/B of the L2 eviction hints on the H200 (device tool): the built-in configs of a few cases timed with the
# installed package as is, then with every eviction_policy argument removed from the installed copy
# (/tmp/site, after tools/gpu-setup.sh; the source tree is not touched). Results to $OUT/ab-hints.txt.
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
CASES=(--case sum:1024x131072:float32:-1 --case sum:268435456:float32:None --case sum:16384x4096:bfloat16:-1
       --case softmax:1024x131072:float32:-1 --case log_softmax:1024x131072:float32:-1
       --case max:1024x131072:float32:-1 --case sum:64x4096x256:bfloat16:1 --case var:16384x4096:bfloat16:-1)
for variant in hints none hints2; do
  if [ "$variant" = none ]; then
    sed -i -E 's/eviction_policy="evict_(first|last)"/eviction_policy=""/' /tmp/site/tritred_ops/*.py
    grep -c "evict_" /tmp/site/tritred_ops/*.py | paste -sd' '
  fi
  if [ "$variant" = hints2 ]; then python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target /tmp/site --upgrade ./packages/ops 2>&1 | grep -v WARNING; fi
  echo "== $variant"
  timeout 90 python3 tools/sweep.py --builtin "${CASES[@]}" 2>&1 | grep -v "^FAIL"
done | tee "$OUT/ab-hints.txt"
