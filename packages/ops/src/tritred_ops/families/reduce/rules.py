"""Launch rules of sum, mean, prod, amax, amin (the plain reductions) and max/min with indices.

Rows up to 8192 elements are one pass; the plain reductions, whose per-element work is one add, take two 16-byte
loads per thread on more warps, and max/min (a value and an index per lane) smaller tiles, one-warp tiles for
short rows. Longer rows loop over 4096-wide chunks on 16 warps, or split when the rows are too few to fill the
device. The shared rules come first on a GPU: rows just past a power of two (``rules.tail_rows``), odd widths
(``rules.odd_rows_loop``), float32 max/min rows of 1024-4096 (``rules.wide_rows``).
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec

from ...rules import (
    Caps,
    because,
    cols_config,
    itemsize,
    named,
    odd_rows_loop,
    plain_reduction,
    rows_config,
    tail_rows,
    wide_rows,
)


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of a plain reduction or of max/min with indices.

    Columns of the plain reductions: 32x64 tiles on 4 warps, 4 tiles loaded per loop iteration (sum dim=1 of
    64x4096x256 bf16 69 -> 75 %, dim=0 of 16384x4096 bf16 66 -> 72), short tiles where unsplit
    (``rules.cols_config``). max/min columns: 8 warps, one tile per iteration.

    Row loops take two whole chunks per iteration, unrolled (``num_stages=2``: PART of the kernels), so that two
    chunks' loads are in flight: the plain reductions' 2-byte rows (sum 1024x131072 bf16 85 -> 88 %, amax 85 -> 87,
    prod 85 -> 88, mean 512x262144 (split) 82 -> 84, sum 4096x50000 88 -> 93, 64x1000000 (split) 58 -> 62; float32
    lost, 1024x131072 97 -> 91: unchanged) and max/min of every dtype (max 1024x131072 bf16 70 -> 79, min
    8192x32000 bf16 61 -> 72, max 4096x50000 fp16 65 -> 75, min 2048x100000 fp32 92 -> 97, max 1024x131072 fp32
    91 -> 93, max 64x1000000 bf16 (split) level). Not prod's split, whose loops also note each slice's 0s and infs
    (``kernels._specials_seen``: 40 registers on 16 warps, sm_90): prod of 384x28672 float16 (one row over 528
    programs) took 20.0 us with two chunks an iteration, 17.5 with one (H100, ``tritred tune``).
    """
    plain = plain_reduction(spec)
    single_cap, allow_split, chunk, loop_warps = caps.row_single, True, caps.chunk, caps.loop_warps
    if plain:
        rows_tile, one_warp_rows, vector_tiles, half_rows = caps.tile, 0, True, False
        col_warps, col_loads = 4, 4
    else:  # with indices (a value and an index per lane): smaller row tiles
        rows_tile, one_warp_rows, vector_tiles, half_rows = caps.arg_tile, caps.short_row, False, True
        col_warps, col_loads = 8, 1
    if not caps.gpu:
        rows_tile = min(rows_tile, caps.tile)
    if problem.inner and caps.gpu:
        for rule in (tail_rows, odd_rows_loop) if plain else (tail_rows, odd_rows_loop, wide_rows):
            cfg = rule(spec, problem, caps)
            if cfg is not None:
                return cfg
    if problem.inner:
        cfg = rows_config(problem, caps, allow_split, single_cap, rows_tile, chunk, loop_warps, one_warp_rows,
                          vector_tiles, half_rows)
        noted = spec.name == "prod" and cfg.strategy == "split"  # (its loops also note 0s and infs)
        if caps.gpu and cfg.strategy != "single_pass" and (not plain or itemsize(problem) == 2) and not noted:
            cfg = because(cfg.model_copy(update={"num_stages": 2}), "num_stages=2: two whole chunks an iteration, "
                          "unrolled, so that two chunks' loads are in flight (the plain reductions' 2-byte rows, "
                          "and max/min with indices)")
        return cfg
    return cols_config(problem, caps, allow_split, single_cap, col_warps, caps.col_programs, 32, col_loads,
                       short_tiles=plain, short_slices=True)
