#!/usr/bin/env bash
# Nsight Compute on the H200 (device tool): one launch of each named kernel per case of tools/s24_ncu.py, the third
# call's (the first compiles, the second warms). Results to $OUT/ncu-CASE.txt. Clocks left alone (METHOD.md).
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
METRICS=dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__t_bytes.sum,lts__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,\
launch__occupancy_limit_registers,launch__occupancy_limit_warps,launch__occupancy_limit_blocks,launch__grid_size
run() {  # case, kernel regex, launches of it to skip
  timeout 150 "$NCU" --clock-control none -k "regex:$2" --launch-skip "$3" --launch-count "$4" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --metrics "$METRICS" python3 tools/s24_ncu.py "$1" > "$OUT/ncu-$1.txt" 2>&1
  echo "== $1 (rc $?)"; grep -E "^  [a-z_]+.*\(|dram__|lts__|gpu__time|sm__warps_active|launch__|Stall|stall|Hit Rate|Throughput" \
    "$OUT/ncu-$1.txt" | grep -v "^ *-" | head -60
}
run bn-bf16 "_stats_kernel|_apply_kernel" 4 2
run bn-fp32 "_stats_kernel|_apply_kernel" 4 2
run ln-bf16-wb "_layer_norm_kernel" 2 1
run ln-bf16 "_layer_norm_kernel" 2 1
run sum-bf16 "_rows_kernel" 2 1
run sum-fp32 "_rows_kernel" 2 1
run var-rows-bf16 "_stats_rows_kernel" 2 1
run lnp-1row "_ln_affine" 2 1
run lnp-2rows "_ln_affine" 2 1
