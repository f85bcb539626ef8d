"""Launch rules of rms_norm: layer_norm's, less its width-specific rules (not measured for rms_norm yet).

Forward: rows up to 32768 elements (GPU) are one pass in registers, short power-of-two rows (128-1024) spread over a few
threads each (``rules.short_rows``, as layer_norm's), rows of up to 1024 in one-warp tiles of several rows, longer rows
loop over 16384-wide chunks on 32 warps (two sweeps), or, fewer than the SMs, are split rows (one read). rms_norm's
single pass does one reduction where layer_norm's does two or three, so layer_norm's sizes are a conservative start.
Backward: layer_norm's rule (:func:`tritred_ops.families.layer_norm.rules.backward_config`): the same kernel, with one
accumulator row (dw) instead of two.
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec
from tritred_core.models import Strategy

from ...rules import Caps, because, few_rows, named, rows_config, short_rows, split_rows_config
from ...runtime.launch import next_pow2
from ..layer_norm.rules import backward_config


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of rms_norm (forward and backward)."""
    if problem.direction == "backward":
        return backward_config(spec, problem, caps)
    if not problem.inner:  # (a transposed input) tiles of up to 32 adjacent rows: loads contiguous across them
        block_m = min(next_pow2(problem.K), 32 if caps.gpu else 4)
        tile = 4096 if caps.gpu else caps.tile
        block_n = min(next_pow2(max(problem.N, 1)), max(16, tile // block_m))
        strategy: Strategy = "single_pass" if block_n >= problem.N else "multi_pass"
        cols_warps = 8 if caps.gpu else 4
        return because(LaunchConfig(strategy=strategy, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=cols_warps),
                       f"{strategy}, BLOCK_M={block_m}, BLOCK_N={block_n}, num_warps={cols_warps}: a kept axis "
                       f"faster than the normalized one: tiles of {block_m} adjacent rows, loads contiguous across "
                       f"them, {tile} elements")
    if problem.N > caps.norm_resident and few_rows(problem, caps):  # (rows fewer than the SMs: layer_norm's rule)
        return split_rows_config(problem, caps)
    if caps.gpu:
        cfg = short_rows(spec, problem, caps)
        if cfg is not None:
            return cfg
    return rows_config(problem, caps, False, caps.norm_resident, 2048 if caps.gpu else min(2048, caps.tile),
                       caps.norm_chunk, caps.loop_warps, caps.norm_short_row)
