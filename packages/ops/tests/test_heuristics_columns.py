"""The built-in heuristic on a (fake) H200: the rules of reductions over a non-contiguous dim (column kernels,
their splits) and of batch_norm's tiles, from the H200 sweeps. Rows: ``test_heuristics.py``."""

from __future__ import annotations

import pytest
from ops_helpers import h200_config
from ops_helpers import h200_config_of as _config
from tritred_core import Problem
from tritred_core.testing import FAKE_H200


def test_column_split_stays_within_one_wave():
    # 64 column blocks of a 16384x4096 dim=0 sum: 8 programs per SM is 1056, so 16 slices (not 17)
    cfg = _config("sum", 1, 16384, 4096)
    assert cfg.strategy == "split" and cfg.split * (4096 // cfg.BLOCK_K) <= 8 * FAKE_H200.sm_count
    var = _config("var", 1, 16384, 4096)
    assert (var.BLOCK_N, var.BLOCK_K, var.num_warps) == (64, 64, 4)
    var32 = _config("var", 1, 16384, 4096, dtype="float32")  # 8 KB tiles: 32 rows of 4-byte elements
    assert (var32.BLOCK_N, var32.BLOCK_K, var32.num_warps) == (32, 64, 4)


@pytest.mark.parametrize(("shape", "warps"), [((32, 2048, 49), 1), ((8, 64, 300), 2), ((128, 16, 64), 4)])
def test_batch_norm_channel_in_one_tile_is_resident(shape, warps):
    B, C, S = shape
    problem = Problem(op="batch_norm", dtype="bfloat16", M=B, N=S, K=C, stride_m=C * S, stride_n=1, stride_k=S)
    cfg = h200_config(problem)
    assert cfg.BLOCK_M >= B and cfg.BLOCK_N >= S  # one tile: statistics and output in one launch
    # ~64 elements per thread (H200: one warp for 32x2048x7x7's 2048-element tiles beat four)
    assert cfg.num_warps == warps


def test_batch_norm_large_channels_split_into_about_8_programs_per_sm():
    problem = Problem(op="batch_norm", dtype="bfloat16", M=64, N=3136, K=256, stride_m=256 * 3136, stride_n=1,
                      stride_k=3136)
    cfg = h200_config(problem)
    assert cfg.BLOCK_M * cfg.BLOCK_N == 2048 and 256 * cfg.split <= 8 * FAKE_H200.sm_count
    # NCHW tiles of 16 images x 128 spatial on 2 warps: 32 elements per thread (H200:
    # 64x256x56x56 fp32 56 -> 59 % against 32 x 64 on 4 warps)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == (16, 128, 2)


@pytest.mark.parametrize(("dtype", "shape"), [("bfloat16", (1, 65536, 256)), ("float32", (1, 16384, 1024)),
                                              ("float32", (1, 25088, 512)), ("bfloat16", (1, 49939, 384))])
def test_batch_norm_channels_fast_tiles_hold_2048_elements_on_four_warps(dtype, shape):
    """2-D (N, C) and channels-last inputs: 64 channels by 32 rows on 4 warps (H100, training forward: 8-25 %
    faster than 4096 on 8 warps over six such cases)."""
    B, S, C = shape
    problem = Problem(op="batch_norm", dtype=dtype, M=B, N=S, K=C, stride_m=C * S, stride_n=C, stride_k=1)
    cfg = h200_config(problem)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.BLOCK_K, cfg.num_warps) == (1, 32, 64, 4)


@pytest.mark.parametrize(("dtype", "shape", "stages"), [
    ("bfloat16", (64, 256, 3136), 2), ("float16", (32, 96, 3025), 2), ("bfloat16", (16, 64, 16384), 2),
    ("float32", (64, 256, 3136), 1), ("bfloat16", (128, 512, 196), 1), ("bfloat16", (32, 2048, 49), 1)])
def test_batch_norm_statistics_prefetch_two_byte_planes_of_several_tiles(dtype, shape, stages):
    """num_stages=2 (the statistics launch loads each tile one iteration ahead) where it measured faster on the
    H200: 2-byte elements, planes of 4+ tiles; not float32 (registers), short planes or one-tile channels."""
    B, C, S = shape
    problem = Problem(op="batch_norm", dtype=dtype, M=B, N=S, K=C, stride_m=C * S, stride_n=1, stride_k=S)
    cfg = h200_config(problem)
    assert cfg.num_stages == stages


@pytest.mark.parametrize(("shape", "tile"), [((8, 32, 262144), (8, 256)), ((256, 64, 49 * 64), (16, 128)),
                                             ((64, 96, 3025), (16, 128)), ((2, 8, 100000), (2, 1024))])
def test_batch_norm_nchw_tiles_hold_2048_elements_on_two_warps(shape, tile):
    """Up to 128 spatial positions wide; fewer images than the tile's rows widen the spatial side instead."""
    B, C, S = shape
    problem = Problem(op="batch_norm", dtype="float32", M=B, N=S, K=C, stride_m=C * S, stride_n=1, stride_k=S)
    cfg = h200_config(problem)
    assert (cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps, cfg.strategy) == (*tile, 2, "split")


@pytest.mark.parametrize("shape", [(1, 16384, 4096), (2, 4096, 2048)])
def test_split_column_sums_load_four_tiles_per_iteration(shape):
    # plain reductions over a non-contiguous dim, split: 32x64 tiles, 4 warps, num_stages = 4 tiles per iteration;
    # the other column kernels keep one (num_stages is Triton's pipelining depth there)
    cfg = _config("sum", *shape)
    assert (cfg.strategy, cfg.BLOCK_N, cfg.BLOCK_K, cfg.num_warps, cfg.num_stages) == ("split", 32, 64, 4, 4)
    for op in ("var", "max", "softmax"):
        assert _config(op, *shape).num_stages == 1


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "amax", "amin"])
@pytest.mark.parametrize("shape", [(1, 256, 262144), (1, 1000, 100000), (32, 512, 4096), (100, 4000, 1000)])
def test_unsplit_column_reductions_take_short_tiles(op, shape):
    """H200: 8-row x 64-output tiles, two per iteration, where no split is needed: sum dim=0 of
    256x262144 bf16 67 -> 76 %, 128x1000000 bf16 68 -> 82, amin dim=1 of 100x4000x1000 fp16 52 -> 63."""
    cfg = _config(op, *shape)
    assert (cfg.strategy, cfg.BLOCK_N, cfg.BLOCK_K, cfg.num_warps, cfg.num_stages) == ("multi_pass", 8, 64, 4, 2)
    for other in ("var", "max", "softmax"):  # their column kernels keep their tiles
        assert _config(other, *shape).BLOCK_N > 8
    assert _config("sum", 1, 80, 4096).num_stages == 2  # never more tiles than the column has rows for
    assert _config("sum", 1, 12, 4096).num_stages == 1
    # column blocks narrower than 64 outputs (K < 64) keep 32-row tiles, four per iteration
    narrow = _config(op, 8192, 4096, 2)
    assert (narrow.strategy, narrow.BLOCK_N, narrow.BLOCK_K, narrow.num_stages) == ("multi_pass", 32, 2, 4)


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "amax", "amin"])
def test_column_blocks_for_a_program_per_sm_run_unsplit_on_the_warps_that_fill_it(op):
    """Between one and eight programs per SM (132 to 1055 column blocks of 64): no split, 64 warps per SM over
    the programs (8 or 16), two 16-byte vectors per thread per iteration (H200: sum dim=1
    of 64x4096x256 bf16 66 -> 75 %, fp32 79 -> 83; 128x2048x512 bf16 53 -> 82)."""
    def cfg(shape, dtype="bfloat16"):
        c = _config(op, *shape, dtype=dtype)
        return c.strategy, c.BLOCK_N, c.BLOCK_K, c.num_warps, c.num_stages, c.split
    assert cfg((64, 4096, 256)) == ("multi_pass", 128, 64, 16, 1, 1)  # 256 programs: 2-byte, one 128-row tile
    assert cfg((64, 4096, 256), "float32") == ("multi_pass", 32, 64, 16, 2, 1)  # two 32-row tiles
    assert cfg((128, 2048, 512)) == ("multi_pass", 32, 64, 8, 2, 1)  # 1024 programs: 8 warps
    assert cfg((128, 2048, 512), "float32") == ("multi_pass", 16, 64, 8, 2, 1)
    assert cfg((16, 4096, 1000))[:4] == ("multi_pass", 128, 64, 16)  # a partial last column block counts
    assert cfg((2, 4096, 2048))[0] == "split"  # 64 programs: split, as before
    assert cfg((32, 512, 4096))[1:4] == (8, 64, 4)  # 2048 programs: the short tiles, as before
    assert cfg((64, 200, 256))[1:4] == (8, 64, 4)  # too few rows for two iterations: as before
    assert cfg((64, 4096, 256), "float64")[0] == "split"  # 8-byte (and 1-byte) elements: not measured
    for other in ("var", "max", "softmax"):  # their column kernels keep their tiles
        assert _config(other, 64, 4096, 256).num_warps < 16


def test_softmax_columns_split_until_they_fill_the_device():
    """Few 64-column blocks split N (a partial launch, then a merging and writing one) up to 8 programs per SM
    over 128-column blocks (their partials merged once, by a launch of their own, past ``MERGE_INLINE`` slices);
    blocks that already fill the device loop over N (H200; the rule's
    comment has the figures)."""
    for op in ("softmax", "log_softmax", "logsumexp"):
        cfg = _config(op, 1, 8192, K=8192)  # 64 blocks of 128 columns: 16 slices (1056 programs / 64)
        assert (cfg.strategy, cfg.BLOCK_N, cfg.BLOCK_K, cfg.num_warps, cfg.split) == ("split", 16, 128, 4, 16)
        tall = _config(op, 1, 32768, K=1024)  # 8 blocks: 132 slices, no longer capped at 64
        assert (tall.strategy, tall.BLOCK_K, tall.split) == ("split", 128, 132)
        assert _config(op, 1, 16384, K=256).split == 256  # 2 blocks: 528 slices, at least 4 tiles of 16 rows each
        assert _config(op, 16, 4096, K=1000).split == 8  # 16 x 8 blocks: at least 8 slices
        narrow = _config(op, 1, 8192, K=64)  # one block of 64 columns: 32-row tiles, 64 slices
        assert (narrow.strategy, narrow.BLOCK_N, narrow.BLOCK_K, narrow.split) == ("split", 32, 64, 64)
        assert _config(op, 1, 65536, K=64).split == 512  # narrower blocks: not measured capped, not capped
        wide = _config(op, 1, 8192, K=65536)  # enough column blocks already: unchanged
        assert (wide.strategy, wide.BLOCK_N, wide.BLOCK_K, wide.num_warps) == ("multi_pass", 32, 64, 4)
        short = _config(op, 1, 100, K=8192)  # a column in one tile: the single pass
        assert short.strategy == "single_pass"
    assert _config("sum", 1, 8192, K=8192).BLOCK_K == 64  # the plain reductions split N on their own: unchanged


def test_few_column_blocks_split_into_slices_as_short_as_one_tile():
    """Fewer column blocks than SMs, whose four-step slices would give fewer than 4 programs per SM: the plain
    reductions and prod split N into one-tile slices (H100: amax dim=1 of 4x2048x8x8 fp32 30.1 -> 8.0 us, prod dim=0
    of 5976x512 bf16 37.4 -> 13.9). The statistics keep four steps a slice (their Welford slices lost), and so do
    blocks whose four-step slices already fill 4 programs per SM."""
    amax = _config("amax", 4, 2048, 64, dtype="float32")
    assert (amax.strategy, amax.BLOCK_N, amax.split, amax.num_stages) == ("split", 32, 64, 1)
    prod = _config("prod", 1, 5976, 512)
    assert (prod.strategy, prod.split) == ("split", 132)  # 8 blocks x 132 slices: 8 programs per SM
    assert _config("var", 1, 1516, 1024, dtype="float16").split == 6  # statistics: as before
    assert _config("prod", 1, 134400, 192, dtype="float32").split == 263  # 3 x 263 programs: as before
