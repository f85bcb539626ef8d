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
    because,
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
        tiny = tiny_rows(problem, caps)
        if tiny is not None:
            return tiny
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


@named
def tiny_rows(problem: Problem, caps: Caps) -> LaunchConfig | None:
    """float32 rows of at most 4 elements (a 4-wide tile), enough of them for 4 such tiles a SM: one-warp tiles of
    64 rows, 8 elements a thread; None elsewhere.

    Why: each row's corrected two-pass ends in an exact division and square root per row (``_finish``), so a
    tile's time is its rows' arithmetic more than its loads, and smaller tiles put more warps on each SM (up to
    32 one-warp programs) to hide it. std of 506640x3 float32 (H100, forced configs, two rounds): 64 rows a warp
    15.4 us, 256 (the one-warp tile of 1024 elements) 26.0, 512 on 4 warps 18.8, 1024 on 4 warps 20.3-20.8;
    eager 16.5-17.1. Only this shape was measured: 2-byte rows and rows of 5-8 keep the shared rules.
    """
    if problem.N > 4 or itemsize(problem) != 4 or problem.stride_n != 1 or problem.outputs < 64 * caps.programs:
        return None  # (fewer rows: the shared rules' small grids shrink the tiles further)
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=64, BLOCK_N=4, num_warps=1),
                   f"single_pass, BLOCK_M=64, BLOCK_N=4, num_warps=1: float32 rows of {problem.N}, 64 a one-warp "
                   "tile (8 elements a thread): more warps a SM for the rows' exact division and square root")
