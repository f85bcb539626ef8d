"""Launch rules of var, std, var_mean and std_mean.

Rows up to 16384 elements are one pass in registers (16 warps); longer ones loop over 4096-wide chunks on 8 warps
(each lane a Welford state), or split when the rows are too few to fill the device: their merge costs more than the
plain reductions', so fewer programs. Short rows take one-warp tiles (2048 elements for 2-byte rows of 512-1024).
The shared rules come first on a GPU: tails, odd widths, rows over a few threads (``rules.short_rows``), float32
rows of 1024-8192 (``rules.wide_rows``), unrolled loops (``rules.unrolled_loop``).
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec

from ...rules import (
    Caps,
    cols_config,
    itemsize,
    named,
    odd_rows_loop,
    rows_config,
    short_rows,
    tail_rows,
    unrolled_loop,
    wide_rows,
)


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of var, std, var_mean or std_mean.

    Rows up to 16384 in registers on 16 warps, longer ones in loops of 8 warps over 4096-wide chunks (var of
    4096x16384 bf16 43 -> 76 %, fp32 67 -> 89 against the loop; the loop on 8 warps against 16: 1024x131072 bf16
    79 against 70, fp32 94 against 91, 4096x32768 bf16 73 against 57). Columns: tiles of 8 KB, 64x64 2-byte or
    32x64 4-byte elements, on 4 warps (var dim=0 of 16384x4096 bf16 35 -> 60 %; fp32 64 -> 32 rows 72 -> 82, bf16
    32 rows lost, 66 -> 56).
    """
    single_cap, rows_tile = caps.stats_resident, caps.tile
    if not caps.gpu:
        rows_tile = min(rows_tile, caps.tile)
    if problem.inner and caps.gpu:
        for rule in (tail_rows, odd_rows_loop, short_rows, wide_rows):
            cfg = rule(spec, problem, caps)
            if cfg is not None:
                return cfg
        if problem.N <= single_cap:
            cfg = unrolled_loop(problem, caps, statistics=True)
            if cfg is not None:
                return cfg
    if problem.inner:
        return rows_config(problem, caps, True, single_cap, rows_tile, caps.chunk, caps.stats_loop_warps,
                           caps.short_row, False, True)
    return cols_config(problem, caps, True, single_cap, 4, caps.programs, 64 if itemsize(problem) <= 2 else 32)
