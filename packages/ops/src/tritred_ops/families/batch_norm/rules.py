"""Launch rules of batch_norm: tiles of [batch, spatial, channel] over the (B, S, C) view of the input.

Its Problem is (M = batch, N = spatial, K = channels) with the input's strides; the tiles run along whichever of
spatial (NCHW) or channels (channels-last) is contiguous. Training is two launches (statistics over slices of each
channel block's tiles, then the normalize launch, which merges them), or one when a tile holds a whole channel
block; eval is the normalize launch alone. Many partials per channel block are merged once per channel by a finish
launch first (:func:`merge_inline`). The backward pass (``direction="backward"``, :func:`backward_config`)
runs on the same tiles: per-channel sums of dy and dy * (x - mean), then dx.
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec

from ...rules import Caps, because, itemsize, named
from ...runtime.launch import cdiv, next_pow2


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of batch_norm (``split``: the statistics' slices per channel block).

    - Channels-fast (channels-last, 2-D (N, C)): tiles of up to 64 channels by the spatial and batch sides, 2048
      elements on 4 warps; against 4096 on 8 (H100, training forward): 65536x256 bf16 74 -> 61 us, 16384x1024
      fp32 102 -> 88, 4478x1024 fp32 56 -> 42, 49939x384 bf16 86 -> 76, channels-last 64x256x56x56 bf16
      161 -> 148, 128x512x14x14 fp32 87 -> 73.
    - NCHW: 2048-element tiles of up to 128 spatial x 16 images (31 -> 38 % on 64x256x56x56 bf16 against one
      4096-wide spatial row); one image widens the spatial side instead. Two warps: 32 elements (two to four 16-byte
      loads) per thread keep more loads in flight than four warps' 16 (training, against 32x64 tiles on 4 warps:
      64x256x56x56 fp32 56 -> 60 %, 32x128x112x112 fp16 50 -> 54, 64x96x55x55 bf16 19 -> 24, 16x64x224x224 fp32
      56 -> 60).
    - A channel block that fits one tile: statistics and normalization in one launch from registers (one read, one
      write) instead of two launches and a second read, ~64 elements per thread, down to one warp: these grids are
      one wave of short programs, and 49-wide rows load one element per instruction, so fuller threads keep more
      loads in flight per warp while more programs share an SM (32x2048x7x7 bf16 20 -> 26 %, fp32 34 -> 41;
      64x1024x7x7 bf16 17 -> 24, fp32 31 -> 42, against 4 warps).
    - ~8 statistics programs per SM: each streams its range of tiles with few loads in flight (64x256x56x56 bf16,
      2 programs per channel: 33 -> 42 % against 1).
    - 2-byte NCHW planes of several tiles: the statistics launch loads each tile one iteration ahead
      (``num_stages=2``; 64x256x56x56 bf16 50.1 -> 51.3 %, 32x96x55x55 19.6 -> 21.0, 32x128x112x112 fp16
      53.2 -> 54.7; float32 lost 4 points on 168 registers, 14x14 planes 3).
    - ``num_programs`` stays 0: one normalize tile per program. Programs looping over several tiles (their channel
      block's statistics merged once each) measured equal in training and 4-9 points lower in eval (64x256x56x56
      bf16 eval 81 -> 74 % at 16 programs per SM); a plugin or ``tritred tune`` can still pick them.
    """
    if problem.direction == "backward":
        return backward_config(problem, caps)
    N, K = max(problem.N, 1), problem.K
    channels_fast, block_m, block_n, block_k, warps = _tile(problem, caps)
    tile_why = _tile_why(channels_fast, block_m, block_n, block_k, caps)
    whole = next_pow2(problem.M) * next_pow2(N)
    if whole * block_k <= 2 * caps.tile:
        block_m, block_n = next_pow2(problem.M), next_pow2(N)
        warps = max(1, min(caps.max_warps, whole * block_k // 2048))
        tile_why = f"BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}: a channel block in one tile: " \
                   "statistics and normalization in one launch from registers (one read)"
    if whole * block_k <= 2 * caps.tile:
        warps_why = "about 64 elements a thread (one launch of short programs)"
    elif channels_fast:
        warps_why = "16 elements a thread, 4-warp programs for the channels-fast tiles"
    else:
        warps_why = "32 elements a thread, more loads in flight than 4 warps' 16" if caps.gpu else "the interpreter's"
    warps_why = f"num_warps={min(warps, caps.max_warps)}: {warps_why}"
    tiles = cdiv(problem.M, block_m) * cdiv(N, block_n)
    channel_blocks = cdiv(K, block_k)
    split = max(1, min(tiles, caps.col_programs // channel_blocks))
    stages = 2 if not channels_fast and tiles > 1 and itemsize(problem) == 2 and N >= 4 * block_n else 1
    reasons = [tile_why, warps_why, _split_why(split, tiles, channel_blocks, caps)]
    if stages == 2:
        reasons.append("num_stages=2: 2-byte planes of several tiles: the statistics load a tile one iteration ahead")
    return because(LaunchConfig(strategy="split", BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                                num_warps=min(warps, caps.max_warps), num_stages=stages), *reasons)


def _tile_why(channels_fast: bool, block_m: int, block_n: int, block_k: int, caps: Caps) -> str:
    """The reason of a :func:`_tile` tile, for ``LaunchConfig.why``."""
    head = f"BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}: "
    if channels_fast:
        return head + f"channels contiguous: up to {block_k} channels by the spatial and batch sides, half a tile " \
            f"({caps.tile // 2} elements)"
    return head + f"spatial contiguous: one channel, half a tile ({caps.tile // 2} elements) of spatial by images"


def _split_why(split: int, tiles: int, channel_blocks: int, caps: Caps) -> str:
    """The reason of the statistics' (or the sums') ``split``, for ``LaunchConfig.why``."""
    return f"split={split}: {channel_blocks} channel blocks of {tiles} tiles, about {caps.col_programs} programs " \
           "in all (~8 a SM on a GPU)"


def _tile(problem: Problem, caps: Caps) -> tuple[bool, int, int, int, int]:
    """(channels fast, BLOCK_M, BLOCK_N, BLOCK_K, warps) of a tile that does not hold a whole channel block, the
    forward's and the backward's (:func:`config` gives the measurements): channels-last (channels contiguous), up
    to 64 channels by the spatial and batch sides, half a tile (``caps.tile // 2``) on 4 warps; NCHW, half a tile of one
    channel, up to 128 spatial (16 under the interpreter) by the images, on 2 warps (4 under the interpreter)."""
    N = max(problem.N, 1)
    channels_fast = problem.stride_k == 1 and problem.stride_n != 1
    tile = caps.tile // 2
    if channels_fast:
        block_k = min(next_pow2(problem.K), 64 if caps.tile >= 4096 else 16)
        block_n = max(1, min(next_pow2(N), tile // block_k))
        block_m = max(1, min(next_pow2(problem.M), tile // (block_k * block_n)))
        warps = 4
    else:
        block_k = 1
        block_n = min(next_pow2(N), 128 if caps.gpu else 16)
        block_m = max(1, min(next_pow2(problem.M), tile // block_n))
        block_n = max(1, min(next_pow2(N), tile // block_m))
        warps = 2 if caps.gpu else 4
    return channels_fast, block_m, block_n, block_k, warps


@named
def backward_config(problem: Problem, caps: Caps) -> LaunchConfig:
    """The backward pass's config (``families.batch_norm.backward``): the forward's tiles, minding the second tensor.

    Not measured yet (no GPU run of the backward kernels); derived from the forward's measured rules and the bytes
    each launch moves. Training reads x and dy in the sums launch, then x and dy again and writes dx (5 x numel x
    itemsize against the 3 a single read would need); its tile's elements hold two loaded values where the
    forward's statistics held one.

    - Tiles as the forward's (NCHW: 2048 elements, 16 images x 128 spatial, on 2 warps; channels-last: up to 64
      channels, 2048 elements on 4 warps): each thread then has twice the forward's bytes in flight per tile (x
      and dy), ~32 values of each for 32-bit data, no more registers than the forward's prefetching statistics
      (two tiles of one tensor) took.
    - One tile per channel block (the sums from registers, one launch, one read of x and dy): up to 4096 elements
      of the block, half the forward's 8192 (two tensors held instead of one), on one warp per 1024 elements
      (32x2048x7x7 and 64x1024x7x7 take it, as in the forward).
    - ``split``: ~8 sums programs per SM, as the forward's statistics (``caps.col_programs``).
    - ``num_programs`` 0: one dx tile per program (the forward's normalize launch measured no gain from loops).
    - No prefetch (``num_stages`` 1): each tile already loads two tensors.
    """
    N, K = max(problem.N, 1), problem.K
    channels_fast, block_m, block_n, block_k, warps = _tile(problem, caps)
    tile_why = _tile_why(channels_fast, block_m, block_n, block_k, caps)
    warps_why = f"num_warps={min(warps, caps.max_warps)}: the forward's tiles' warps"
    whole = next_pow2(problem.M) * next_pow2(N)
    if whole * block_k <= caps.tile:
        block_m, block_n = next_pow2(problem.M), next_pow2(N)
        warps = max(1, min(caps.max_warps, whole * block_k // 1024))
        tile_why = f"BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K={block_k}: a channel block in one tile: the " \
                   "sums from registers, one launch, one read of x and dy"
        warps_why = f"num_warps={min(warps, caps.max_warps)}: a warp per 1024 elements of the block"
    tiles = cdiv(problem.M, block_m) * cdiv(N, block_n)
    split = max(1, min(tiles, caps.col_programs // cdiv(K, block_k)))
    return because(LaunchConfig(strategy="split", BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                                num_warps=min(warps, caps.max_warps)),
                   tile_why, warps_why, _split_why(split, tiles, cdiv(K, block_k), caps))


#: The most partials (channels x slices, the slices rounded up to a power of two) that each program of the
#: normalize launch (forward) or the dx launch (backward) merges itself; past it a finish launch merges them once
#: per channel.
MERGE_INLINE = 256


def merge_inline(block_k: int, split: int) -> bool:
    """Whether each program of the normalize launch (forward) or the dx launch (backward) merges its channel
    block's split partials itself (NCHW: one channel of a few slices, a few loads per program) rather than reading
    per-channel values that a finish launch merged once (one launch more). Why: channels-last blocks of 64
    channels split ~260 ways held 64 x 512 partials in each program (sm_90 compile of 64x256x56x56 bf16: the
    forward's normalize launch 255 registers and 2.6 KB of spills, 15.6 KB with the saved statistics; the
    backward's dx launch 255 registers) and read 130-200 KB of partials per program from L2 over 12576 programs,
    several times the bytes of the tensors. With the finish launch: 40-64 registers, no spills. NCHW configs (one
    channel, up to 256 slices: 4 channels or more on the H200, the measured cases among them) keep their two
    launches."""
    return block_k * next_pow2(split) <= MERGE_INLINE


def finish_block(channels: int, split: int, min_programs: int = 1) -> tuple[int, int]:
    """(channels per program, warps) of a finish launch, which merges ``split`` partials of each statistic (or
    sum) per channel: ~2048 partials of each per program on 4 warps (16 per thread), at least one channel, halved
    down to ``min_programs`` programs where the channels allow. The forward's statistics finish asks for one per
    SM: its few programs of many channels each waited a long chain of loads. H100, training forward, forced against
    the old block (32 channels a program on 1024 channels): 4478x1024 fp32 at 4 (the rule's pick) 47.4 -> 36.7 us,
    eager 44.1; 128x512x14x14 fp32 channels-last at 4, 76.4 -> 74.0; 16384x1024 fp32 at 8, 91.0 -> 90.1; 65536x256
    bf16 at 2, 64.8 -> 63.6 (the rule's picks for these three, 2, 4 and 1, not run). The backward's finish keeps
    its blocks (4478x1024 fp32 not faster at 4, 8 or 16 channels)."""
    block_s = next_pow2(split)
    block_c = max(1, min(next_pow2(channels), 2048 // block_s))
    while block_c > 1 and cdiv(channels, block_c) < min_programs:
        block_c //= 2
    return block_c, 4


def merge_ranks_block(world: int, channels: int) -> tuple[int, int, int]:
    """(ranks per step, channels per program, warps) of ``sync_kernels._merge_ranks_kernel``, which merges the
    gathered (mean, M2, count) of ``world`` ranks per channel (``tritred_ops.nn.SyncBatchNorm``): up to 64 ranks per
    step of its loop over ranks, ~1024 values of each statistic per program on 4 warps (8 per thread), at least one
    channel. A launch of a few KB (3 x world x channels values): latency, not bandwidth; more programs of fewer
    channels spread it over more SMs."""
    block_w = min(next_pow2(max(world, 1)), 64)
    return block_w, max(1, min(next_pow2(max(channels, 1)), 1024 // block_w)), 4
