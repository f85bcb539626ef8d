"""Built-in launch heuristics: the ``trylast`` implementation of ``tritred_launch_config``.

Any plugin's implementation is asked first; this one answers every problem of tritred's own ops. It reads only
the :class:`~tritred_core.Problem` and :class:`~tritred_core.DeviceInfo`, so its decisions can be printed by
``tritred explain`` and tested without a GPU.

Register-tile budget: a program keeps about 4096 accumulator elements in registers with ~32 per thread (4
warps; the plain reductions' whole-row tiles take two 16-byte loads per thread instead, and so do float32
var/std and max/min rows of 1024-2048, 4096-8192-wide ones two rows on 16 warps); rows that fit are single
pass (up to 8192 for reductions, 16384 on 16 warps for var/std and 2-byte softmax rows, 32768 on 32 warps for
other softmax and layer_norm rows;
rows <= 512 of ops with several reductions per row, and <= 1024 of softmax and layer_norm, in 1024-element tiles
of one warp; 2-byte rows of 512-1024 of var/std and max/min in 2048-element ones), longer rows loop over
4096-wide chunks (16384 on 32 warps for softmax and layer_norm) with 8-32 warps (multi pass), float32 softmax rows
of 64K+ elements are held by several 8192-element programs meeting at a per-row barrier (split rows), and few outputs
with long rows split N across programs (two-stage, deterministic), never past one wave of programs.
Shapes outside the public suite added three rules (tools/ab_rules.py, on shapes they were not tuned on):
layer_norm rows whose power-of-two tile is largely masked (hidden sizes 5120, 6144, 20480), 2-byte softmax
rows of 32K-64K elements (vocabularies such as 50257) with 8+ rows per SM (logsumexp's only since the twentieth
session), and softmax column blocks narrowed
until they fill the device; the twenty-first session's, rows that are not whole 16-byte vectors loop over 1024-wide
chunks (:func:`_odd_rows_loop`). The fourteenth session's: softmax loops in the narrowest programs whose rows in
flight fit the L2 (:func:`_softmax_loop`), and the row loops of max/min and of the plain reductions' 2-byte rows
take two whole chunks per iteration. The thirteenth session's two came from reading torch.compile's kernels
(tools/inductor_dump.py): 2-byte layer_norm and var/std rows of a few whole chunks loop over them with the first
sweep unrolled (:func:`_unrolled_loop`), and the plain reductions' unsplit column launches take 8-row tiles.
The sixteenth session's: column blocks for one to eight programs per SM run unsplit, on the warps that fill the SM,
as torch.compile's (tools/cols_tiles_ab.py). The nineteenth session's: batch_norm's statistics launch loads each
tile one iteration ahead on 2-byte planes of several tiles (tools/bn_launch_times.py).
The twenty-second session's: rows just past a power of two of 512-8192 (2049, 4097) are single passes of two tiles,
that power of two plus a small tail (``BLOCK_TAIL``, :func:`_tail_rows`; tools/s22_ab.py). The twenty-fifth
session's: var/std of 2-byte rows of 128-512 elements spread each row over a few threads (``threads_per_row``,
:func:`_short_rows`; tools/s25_probe.py), and so do layer_norm's rows of 128-1024. The twenty-sixth session's:
float32 var/std and max/min rows of 1024-8192 (max/min: 4096) on more warps, two rows a program from 4096
(:func:`_wide_rows`; tools/s26_probe.py). The thirtieth session's: 2-byte layer_norm rows of 513-896 take two rows
a one-warp program (:func:`_layer_norm_half_rows`; tools/s30_probe.py).
The numbers come from config sweeps and A/B runs on an H200 (``tools/sweep.py``, ``tools/exp_rotate.py``,
docs/performance.md); they are rules on
sizes, not a table of the benchmark's shapes. Under the Triton interpreter the caps are small so that tests
reach every branch.
"""

from __future__ import annotations

from tritred_core import DeviceInfo, LaunchConfig, Problem, ReductionSpec, hookimpl

from .runtime.hints import unrolled_chunks
from .runtime.launch import cdiv, next_pow2
from .tuning import lookup

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "bool": 1, "uint8": 1, "int8": 1,
             "int16": 2, "int32": 4, "int64": 8}


class _Caps:
    """Per-backend sizes: measured on an H200 for CUDA (``tools/sweep.py``), tiny for the interpreter (so that
    small test tensors reach every branch)."""

    def __init__(self, device: DeviceInfo) -> None:
        gpu = device.backend == "cuda"
        self.gpu = gpu
        self.tile = 4096 if gpu else 512            # elements per program for reductions (~32 per thread, 4 warps)
        self.row_single = 8192 if gpu else 256      # longest row reduced in one pass (reduce/statistics)
        self.softmax_resident = 32768 if gpu else 256   # longest softmax row kept in registers (32 warps)
        self.norm_resident = 32768 if gpu else 256  # longest layer_norm row kept in registers
        self.chunk = 4096 if gpu else 128           # BLOCK_N of multi-pass loops (16 warps: 8 per thread)
        self.norm_chunk = 16384 if gpu else 256     # BLOCK_N of softmax/layer_norm loops (two sweeps: wider wins)
        self.short_row = 512 if gpu else 0          # rows this short: 1024-element tiles of one warp (no barrier)
        self.norm_short_row = 1024 if gpu else 0    # the same for layer_norm
        self.arg_tile = 2048 if gpu else 256        # elements per program of max/min with indices (value + index)
        self.programs = 4 * device.sm_count if gpu else 4  # enough programs to fill the device
        self.col_programs = 8 * device.sm_count if gpu else 8  # column kernels: more, narrower programs win
        self.sm_count = device.sm_count if gpu else 2
        self.l2_bytes = device.l2_bytes                 # 0 where unknown
        self.max_warps = 32 if gpu else 4           # 32 for 32768-wide rows kept in registers
        self.loop_warps = 16 if gpu else 4          # loops: 8 elements per thread per 4096-wide chunk
        self.stats_loop_warps = 8 if gpu else 4     # var/std loops: 16 Welford lanes per thread per chunk
        self.stats_resident = 16384 if gpu else 256  # longest var/std row kept in registers (16 warps)
        self.split_rows = 65536 if gpu else 512     # float32 softmax rows this long are split over programs
        self.split_chunk = 8192 if gpu else 128     # softmax split rows: elements per program (8 warps)
        self.split_warps = 8 if gpu else 4


def _warps(elements: int, caps: _Caps, lo: int = 4) -> int:
    """~32 elements per thread for register tiles: 4 warps for 4096 elements, up to 16 for 16384+ (measured:
    fewer, fuller threads beat many threads with one vector each)."""
    return max(min(lo, caps.max_warps), min(caps.max_warps, next_pow2(max(1, elements // 1024))))


def _prev_pow2(n: int) -> int:
    """The largest power of two <= n (1 for n < 1)."""
    return 1 << (max(1, n).bit_length() - 1)


def _itemsize(problem: Problem) -> int:
    """Bytes per element of ``problem.dtype`` (torch's name; a name it does not know counts as 4 bytes)."""
    return _ITEMSIZE.get(problem.dtype, 4)


def _vector_warps(problem: Problem, elements: int, caps: _Caps) -> int:
    """Warps giving each thread two 16-byte loads of a ``elements`` tile: the plain reductions' single pass, whose
    per-element work is one add, wins from more loads in flight per SM over fuller threads (H200, rotating inputs,
    ``tools/exp_rotate.py warps``: sum of 16384x4096 rows fp32 4 -> 16 warps 88 -> 94 %, bf16 4 -> 8 warps 83 -> 87 %;
    partial tiles lost up to 10 points: not taken for them)."""
    return max(4, min(16, caps.max_warps, next_pow2(max(1, elements * _itemsize(problem) // (32 * 32)))))


def _rows_config(problem: Problem, caps: _Caps, allow_split: bool, single_cap: int,
                 rows_tile: int, chunk: int, loop_warps: int, one_warp_rows: int = 0, vector_warps: bool = False,
                 half_rows: bool = False) -> LaunchConfig:
    """Row kernels; ``loop_warps``: warps of the loops over chunks of at most 8192 (wider chunks take
    ``caps.max_warps``); ``one_warp_rows``: the longest (power-of-two) row given one-warp tiles (0: none);
    ``half_rows``: 2-byte rows of 512-1024 elements take one-warp tiles of 2048 elements (see below)."""
    N, R = max(problem.N, 1), problem.outputs
    if N <= single_cap:
        block_n = next_pow2(N)
        if half_rows and caps.gpu and _itemsize(problem) == 2 and 512 <= block_n <= 1024:
            # var/std and max/min with indices: a 2-byte element fills half the bytes per thread of a float32
            # one, so one warp takes twice the elements (H200, rotating inputs, tools/exp_rotate.py tiles:
            # var 65536x1024 bf16 64% -> 85%, 131072x512 69% -> 82%; max 59% -> 76%, 70% -> 73%). float32 did
            # not gain, and 256-wide bf16 rows lost 3 points (var 68% -> 65%): not taken for them.
            block_m = max(1, min(next_pow2(R), 2048 // block_n))
            return LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=1)
        if block_n <= one_warp_rows:
            # Short rows of ops with several reductions per row: one warp per 1024-element tile reduces with
            # shuffles only, no shared-memory barrier (H200 sweep, 262144x256: var 72% -> 87%, layer_norm
            # 80% -> 89%, softmax 88% -> 92%; a plain sum loses, 77% -> 70%; max with indices bf16 60% -> 67%,
            # fp32 87% -> 87%; layer_norm 65536x1024 bf16 83% -> 90%, fp32 94% -> 96%).
            block_m = max(1, min(next_pow2(R), 1024 // block_n))
            return LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=1)
        block_m = max(1, min(next_pow2(R), rows_tile // block_n))
        warps = _warps(block_m * block_n, caps)
        if vector_warps and caps.gpu and block_n == N:  # (measured on whole-row tiles only)
            # Also for tiles of several rows (H200, rotating inputs, tools/exp_rotate.py tiles: sum of
            # 65536x1024 fp32 90% -> 95% on 16 warps, bf16 80% -> 85% on 8; 262144x256 fp32 88% -> 94%).
            warps = _vector_warps(problem, block_m * block_n, caps)
        return LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)
    block_n = chunk
    if chunk > 8192:
        loop_warps = caps.max_warps
    if allow_split and R < caps.programs:
        # Few long rows: give each row several programs so the whole device streams.
        split = max(2, min(cdiv(caps.programs, R), cdiv(N, block_n)))
        return LaunchConfig(strategy="split", BLOCK_M=1, BLOCK_N=block_n, split=split, num_warps=loop_warps)
    return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=loop_warps)


def _cols_config(problem: Problem, caps: _Caps, allow_split: bool, single_cap: int, warps: int,
                 target_programs: int, rows: int = 32, loads: int = 1, narrow: bool = False,
                 short_tiles: bool = False, split_cols: bool = False) -> LaunchConfig:
    """Column kernels: [BLOCK_N, BLOCK_K] tiles of ``rows`` rows x 64 contiguous outputs, ``loads`` tiles loaded
    per loop iteration (``num_stages``; the plain reductions' kernel only); few column blocks split N up to
    ``target_programs`` programs, never past them: a last partial wave costs more than the extra parallelism
    brings (H200 sweeps: sum dim=0 of 16384x4096 fp32 51% -> 80%; split 17 -> 16, bf16 61% -> 65%). Softmax's
    128-column blocks (``split_cols``) split up to 8 programs per SM (``caps.col_programs``) instead.

    ``narrow`` (kernels that cannot split N: softmax): too few column blocks take narrower ones, down to 16
    columns, in tiles of as many elements (more rows) on 8 warps, until they fill ``target_programs`` (H200 sweep,
    softmax dim=0 of 8192x8192 bf16: 128 programs of 32x64 15% -> 512 of 128x16 35%).

    ``short_tiles`` (the plain reductions): where the column blocks need no split, tiles of 8 rows x 64 outputs,
    two loaded per iteration, as torch.compile's (``tools/inductor_dump.py``): a program then holds 8 elements
    per thread instead of 32 per tile, so more programs share an SM (H200, ``tools/inductor_cfgs.py``: sum dim=0
    of 256x262144 bf16 67% -> 77%, fp32 81% -> 88%, mean dim=0 of 1000x50000 fp32 75% -> 81%). Split launches
    keep the 32-row tiles: their few programs need the long tiles (sum dim=1 of 64x4096x256 bf16 67% -> 42%)."""
    N, K = max(problem.N, 1), problem.K
    block_k = min(next_pow2(K), 64 if caps.gpu else 32)
    if split_cols and N > min(max(1, caps.tile // (16 if caps.gpu else block_k)), single_cap):
        # softmax: too few column blocks split N instead, a partial (max, sum of exp) per slice, then a launch that
        # merges them and writes its slice (``softmax._cols_part_kernel`` / ``_cols_emit_kernel``): the input is read
        # twice, as by the loop, but the blocks keep 128 columns (256-512 contiguous bytes a row) in 16-row tiles on 4
        # warps, at least 8 slices (how many more: below; H200, tools/s23_ab.py: softmax dim=0 of 8192x8192 bf16 35 ->
        # 39 %, fp32 42 -> 52, log_softmax bf16 35 -> 40, dim=1 of 16x4096x1000 bf16 29 -> 37, of 64x4096x256 bf16 36 ->
        # 42; 32768x1024 bf16 9 -> 31 with 33 slices of 64-column blocks, 35 beside the peers with this rule's 66 of
        # 128; fewer slices lost: s4 of 16x128 23-39). Fewer than 128 columns: 32-row tiles of 64. Columns that fit a
        # tile of 16 keep the narrowed single pass below (not measured split). Over 128-column blocks, slices until 8
        # programs per SM (H200, tools/s29_probe.py cols3, softmax dim=0: 8192x8192 bf16 39.5 -> 43.2 % with 16 slices,
        # fp32 52.5 -> 57.2; 32768x1024 bf16 35.3 -> 40.1 with 128, fp32 47.6 -> 53.1; 32768x512 bf16 24.6 -> 35.5 with
        # 256, fp32 34.0 -> 49.3; log_softmax dim=0 16384x256 bf16 11.9 -> 17.8, fp32 19.3 -> 31.9; 32-row tiles, timed
        # at one count only, not taken): past ``softmax.MERGE_INLINE`` slices each column's partials are merged once by
        # a launch of their own, so the merge grows as K x split, not K x split^2 as when every writing program merged
        # them all (which had capped the slices at 64).
        wide = caps.gpu and K >= 128
        split_k, split_n = (128, 16) if wide else (block_k, rows if caps.gpu else 8)
        split = min(max(8 if wide else 1, (caps.col_programs if wide else target_programs)
                        // (problem.M * cdiv(K, split_k))), cdiv(N, 4 * split_n))
        if split > 1 and problem.M * cdiv(K, block_k) < target_programs:  # (too few 64-column blocks)
            return LaunchConfig(strategy="split", BLOCK_N=split_n, BLOCK_K=split_k, split=split,
                                num_warps=min(warps, caps.max_warps))
    if narrow and caps.gpu:
        narrowed = block_k
        while narrowed > 16 and problem.M * cdiv(K, narrowed) < target_programs:
            narrowed //= 2
        if narrowed < block_k:
            rows, warps, block_k = rows * block_k // narrowed, 2 * warps, narrowed
    rows_fit = max(1, caps.tile // block_k)
    if N <= min(rows_fit, single_cap):
        return LaunchConfig(strategy="single_pass", BLOCK_N=next_pow2(N), BLOCK_K=block_k,
                            num_warps=min(warps, caps.max_warps))
    programs = problem.M * cdiv(K, block_k)
    if short_tiles and caps.gpu and block_k == 64 and caps.sm_count <= programs < target_programs \
            and _itemsize(problem) in (2, 4):
        # Column blocks for at least a program per SM (several outer slices: sum dim=1 of 64x4096x256): no
        # split (no merge launch), as torch.compile (tools/inductor_dump.py), on as many warps as fill the SM (64
        # warps per SM over the programs: 8 or 16), two 16-byte vectors per thread per iteration: as two tiles
        # loaded one after the other, or, 2-byte tiles on 16 warps, one tile of 128 rows. H200, against the split
        # (32x64 tiles on 4 warps and a merge launch): tools/cols_tiles_ab.py, sum dim=1 64x4096x256 bf16 66 -> 75 %
        # (two 64-row tiles: 69), fp32 79 -> 83, 128x2048x512 bf16 53 -> 82 on 8 warps (16: 79; these took the
        # 8x64 short tiles, 1024 elements per iteration); tools/src_ab.py, off the suite: mean dim=1 16x4096x1000
        # fp32 67 -> 77, 32x1000x777 bf16 29 -> 38, amax dim=1 48x3000x640 fp32 77 -> 86, mean dim=0 1000x50000
        # fp32/bf16 80/68 -> 80/66 (782 programs: 8 warps).
        fill_warps = min(16, _prev_pow2(64 * caps.sm_count // programs))  # (>= 8: programs < 8 per SM)
        tile_rows = fill_warps * (16 // _itemsize(problem)) // 2  # one vector a thread: 32 threads x 16 B / 64
        tiles = 2
        if fill_warps == 16 and _itemsize(problem) == 2:
            tile_rows, tiles = 2 * tile_rows, 1
        if N >= 2 * tile_rows * tiles:
            return LaunchConfig(strategy="multi_pass", BLOCK_N=tile_rows, BLOCK_K=block_k, num_warps=fill_warps,
                                num_stages=tiles)
    block_n = min(rows if caps.gpu else 8, next_pow2(N))
    loads = max(1, min(loads, cdiv(N, block_n)))
    step = block_n * loads  # rows per loop iteration
    if allow_split and programs < target_programs and N > 4 * step:
        split = min(target_programs // programs, cdiv(N, 4 * step))
        if split > 1:
            return LaunchConfig(strategy="split", BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                                num_warps=min(warps, caps.max_warps), num_stages=loads)
    if short_tiles and caps.gpu and block_k == 64:  # (narrower column blocks keep their rows: not measured)
        block_n, loads = min(8, block_n), min(2, loads)
    return LaunchConfig(strategy="multi_pass", BLOCK_N=block_n, BLOCK_K=block_k, num_warps=min(warps, caps.max_warps),
                        num_stages=loads)


def _batch_norm_config(problem: Problem, caps: _Caps) -> LaunchConfig:
    """batch_norm: Problem is (M=batch, N=spatial, K=channels) with the input's strides; tiles are
    [BLOCK_M batch, BLOCK_N spatial, BLOCK_K channels] along whichever of spatial (NCHW) or channels
    (channels-last) is contiguous."""
    N, K = max(problem.N, 1), problem.K
    channels_fast = problem.stride_k == 1 and problem.stride_n != 1
    if channels_fast:
        block_k = min(next_pow2(K), 64 if caps.tile >= 4096 else 16)
        block_n = max(1, min(next_pow2(N), caps.tile // block_k))
        block_m = max(1, min(next_pow2(problem.M), caps.tile // (block_k * block_n)))
        warps = 8
    else:
        # NCHW: 2048-element tiles of up to 128 spatial x 16 images (H200 sweep: 31% -> 38% on 64x256x56x56 bf16
        # against one 4096-wide spatial row); one image widens the spatial side instead. Two warps: 32 elements
        # (two to four 16-byte loads) per thread keep more loads in flight than four warps' 16 (H200,
        # tools/bn_tiles_ab.py, training against 32x64 tiles on 4 warps: 64x256x56x56 fp32 56 -> 60 %,
        # 32x128x112x112 fp16 50 -> 54, 64x96x55x55 bf16 19 -> 24, 16x64x224x224 fp32 56 -> 60).
        tile = caps.tile // 2
        block_k = 1
        block_n = min(next_pow2(N), 128 if caps.gpu else 16)
        block_m = max(1, min(next_pow2(problem.M), tile // block_n))
        block_n = max(1, min(next_pow2(N), tile // block_m))
        warps = 2 if caps.gpu else 4
    whole = next_pow2(problem.M) * next_pow2(N)
    if whole * block_k <= 2 * caps.tile:
        # A channel block fits one tile: statistics and normalization in one launch from registers (one read,
        # one write) instead of two launches and a second read.
        # ~64 elements per thread, down to one warp (H200, rotating inputs, exp 2026-11-30-e: 32x2048x7x7 bf16
        # 20 -> 26 %, fp32 34 -> 41 %; 64x1024x7x7 bf16 17 -> 24 %, fp32 31 -> 42 % against 4 warps): these
        # grids are one wave of short programs, and 49-wide rows load one element per instruction, so fuller
        # threads keep more loads in flight per warp while more programs share an SM.
        block_m, block_n = next_pow2(problem.M), next_pow2(N)
        warps = max(1, min(caps.max_warps, whole * block_k // 2048))
    tiles = cdiv(problem.M, block_m) * cdiv(N, block_n)
    channel_blocks = cdiv(K, block_k)
    # ~8 statistics programs per SM: each streams its tile range with few loads in flight (H200 sweep,
    # 64x256x56x56 bf16: 2 programs per channel 33% -> 42% against 1)
    split = max(1, min(tiles, caps.col_programs // channel_blocks))
    # 2-byte NCHW planes of several tiles: the statistics launch loads each tile one iteration ahead
    # (num_stages=2; H200, tools/bn_launch_times.py --prefetch: 64x256x56x56 bf16 50.1 -> 51.3 %, 32x96x55x55
    # 19.6 -> 21.0, 32x128x112x112 fp16 53.2 -> 54.7; float32 lost 4 points on 168 registers, 14x14 planes 3).
    stages = 2 if not channels_fast and tiles > 1 and _itemsize(problem) == 2 and N >= 4 * block_n else 1
    # num_programs stays 0: one normalize tile per program. Programs looping over several tiles (the statistics
    # merged once each) measured equal in training and 4-9 points lower in eval (H200: 64x256x56x56 bf16 eval
    # 81 -> 74 % at 16 programs per SM); they remain a config a plugin or `tritred tune` can pick.
    return LaunchConfig(strategy="split", BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                        num_warps=min(warps, caps.max_warps), num_stages=stages)


def _short_rows(name: str, problem: Problem, caps: _Caps) -> LaunchConfig | None:
    """Whole power-of-two rows of 128-512 elements (var/std/var_mean/std_mean: 2-byte ones) or 128-1024
    (layer_norm: 2- and 4-byte ones), each spread over a few threads (``threads_per_row``) on 4 warps: 32 elements a
    thread (16 for float32 layer_norm rows of up to 512); None elsewhere.

    The rows' own layout puts a warp across each row, and these single passes are then instruction-bound: five
    shuffle levels per sum for 8 elements a thread, and every per-row division computed by 32 threads (offline
    SASS, sm_90a: var of 262144x256 bf16 16.5 instructions per element, 8.5 with 8 threads a row; layer_norm 944
    -> 640 per program). H200, ``tools/s25_probe.py``, against the rules before: var 262144x256 bf16 69 -> 83 %,
    std 70 -> 85, 524288x128 70 -> 83, fp16 262144x256 69 -> 83, 131072x512 84 -> 84; float32 var within a point
    (not taken). layer_norm, as probe kernels with weight and bias loaded with the row: 262144x256 bf16 91 -> 94,
    131072x512 93 -> 94, 65536x1024 91 -> 94, 524288x128 81 -> 94; fp32 96-97 -> 97-98.5. Rows whose tile is
    partly masked lost (var 200000x300 bf16 64 -> 38 %: a mask per element, no 16-byte loads), as did var's
    768 (86 -> 82 %).
    """
    N, size = problem.N, _itemsize(problem)
    if not caps.gpu or N & (N - 1) or not 128 <= N <= 1024 or size > 4:
        return None
    if name == "layer_norm":
        per_thread = 32 if size <= 2 or N > 512 else 16
    elif size == 2 and N <= 512:
        per_thread = 32
    else:
        return None
    warps = 4
    threads = min(32, N // per_thread)
    return LaunchConfig(strategy="single_pass", BLOCK_M=32 * warps // threads, BLOCK_N=N, num_warps=warps,
                        threads_per_row=threads)


def _layer_norm_half_rows(problem: Problem, caps: _Caps) -> LaunchConfig | None:
    """2-byte layer_norm rows of 513-896 elements (a 1024 tile an eighth or more masked: hidden sizes 640, 768;
    the rows just past 512 take :func:`_tail_rows` first), unit stride, row stride a multiple of 16 elements: two
    rows a one-warp program (a 2048-element tile, 64 elements a thread), not one; None elsewhere.

    As var's ``half_rows``: a 2-byte element fills half the bytes of a float32 one, and a one-warp tile of a partly
    masked row keeps few loads in flight per thread. H200, ``tools/s30_probe.py`` (pre, best of two alternated
    rounds, % of copy bandwidth): bf16 65536x768 80.1 -> 84.0, 100000x768 82.9 -> 88.4, 32768x768 71.4 -> 74.3,
    65536x640 70.8 -> 75.5, fp16 65536x768 82.7 -> 84.6. Not taken where it lost: 50000x1000 bf16 (2 % masked) 85.7
    -> 84.5, float32 65536x768 95.6 -> 94.8, 512-wide tiles (131072x384 bf16, four rows a warp) 82.3 -> 80.5. Weight
    and bias loaded with the rows (torch.compile's order): bf16 rows of 384-1000 lost 5-14 points, fp16 768 0.4-3.4;
    only 200000x300 bf16 gained (64.7 -> 67.1, four rows a warp 61.2 -> 65.0): not taken. On shapes it was not
    chosen on (val, best of three): bf16 65536x576 65.2 -> 69.9, 65536x720 74.8 -> 80.2, 65536x896 86.5 -> 87.9,
    fp16 65536x832 85.8 -> 87.3, fp16 100000x768 86.9 -> 89.6, fp16 65536x640 level; 16384x768 bf16 lost (59.6 ->
    58.6), hence the bound of 64 two-row programs per SM (16896 rows on an H200).
    """
    N = problem.N
    if not caps.gpu or _itemsize(problem) != 2 or not 512 < N <= 896 or problem.stride_n != 1 \
            or problem.stride_m % 16 or problem.K != 1 or problem.M < 2 * 64 * caps.sm_count:
        return None
    return LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=1024, num_warps=1)


def _wide_rows(name: str, problem: Problem, caps: _Caps) -> LaunchConfig | None:
    """float32 var/std/var_mean/std_mean (rows of 1024-8192) and max/min with indices (1024-4096) of whole
    power-of-two unit-stride rows: 1024-2048-wide rows one a program on N / 256 warps (two 16-byte loads a thread,
    as the plain reductions' whole rows), 4096-8192 two a program on 16 warps (16-32 elements a thread) where the
    grid has at least ~4 waves of them and the rows have no kept axis inside them (K = 1); None elsewhere
    (integer max/min, strided rows: not measured).

    The generic tile (~32 elements a thread on 4 warps) left these rows 2-5 points under the plain reductions of
    the same shapes; a row's reductions cross its warps, and two rows a program share those exchanges. H200,
    ``tools/s26_probe.py`` (the built-in against a grid of 1-16 rows x 2-32 warps at 8-32 elements a thread, then
    the rule against the configs it replaced, in alternation): var 65536x1024 fp32 88 -> 92-93.5 % (M4 w4 -> M1
    w4), std 88 -> 93, 100000x1024 92 -> 95, 32768x2048 88-89 -> 92-92.6 (M2 w4 -> M1 w8), var_mean 40000x2048 90 ->
    92, 16384x4096 88-89 -> 91-92 (M1 w4 -> M2 w16; std and var_mean alike), 8192x8192 88 -> 89.5-90 (M1 w8 -> M2
    w16); max 65536x1024 88 -> 90, 32768x2048 88 -> 91, 16384x4096 88 -> 90. Lost: 3000x4096 (1500 programs of
    16 warps, under 3 waves) 65 -> 60, hence the rows bound, and var over (0, 2, 3) of 256x64x64x64 (4096-wide
    planes of two reduced axes) 85 -> 82, so two-row programs are for plain rows (K = 1) only; its 1024- and
    2048-wide planes took the one-row tiles (64x256x32x32 59 -> 61, 64x128x32x64 level). A row over 16 warps alone
    (4096: 89 -> 86) and tiles of more rows on more warps (4096, M4 w32: 50 %) lost too. 16384-wide rows kept theirs
    (M1 w16: level); bfloat16 gained nothing beyond the run-to-run spread (+-1.5 points), 256-512-wide rows lost
    (one-warp tiles stay). Partly masked tiles are not covered (the plain reductions' version of this lost up to 10
    points there).
    """
    N, R = problem.N, problem.outputs
    widest = 4096 if name in ("max", "min") else 8192  # (max/min's 8192 with M2: not measured)
    if not caps.gpu or N & (N - 1) or not 1024 <= N <= widest or problem.dtype != "float32" or problem.stride_n != 1:
        return None
    if N <= 2048:
        return LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=N, num_warps=min(caps.max_warps, N // 256))
    if R < 32 * caps.sm_count or problem.K > 1:
        # (2-row programs on 16 warps, 4 an SM: fewer than ~4 waves; or rows of two reduced axes, whose per-row
        # partials merge afterwards: var over (0, 2, 3) of 256x64x64x64 fp32 84.9 -> 82.4 %)
        return None
    return LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=N, num_warps=min(caps.max_warps, 16))


def _unrolled_loop(problem: Problem, caps: _Caps, statistics: bool = False) -> LaunchConfig | None:
    """2-byte rows over 4096 elements that are 2-8 chunks of 1024, 2048 or 4096 elements (the smallest such
    chunk): a loop over those chunks, 8 elements per thread, whose first sweep is unrolled
    (``runtime.unrolled_chunks``); None elsewhere. A power-of-two tile leaves lanes of such rows masked, and the
    loop keeps the whole row's loads in flight with a quarter of the single pass's registers.

    H200, ``tools/unroll_ab.py``, against the single pass (or the rule before), bf16 unless named:
    layer_norm 5120 78 -> 81 %, 6144 69 -> 82, 7168 74 -> 83, 10240 76 -> 82, 12288 71 -> 82 (fp16 67 -> 88),
    14336 77 -> 83, 20480 66 -> 83, 24576 55 -> 82, 28672 64 -> 79, and the power of two 32768 70 -> 76 (whose
    single pass needs 32 warps); var 5120 66 -> 78, 6144 77 -> 79, 10240 56 -> 75, 12288 65 -> 78, 14336
    73 -> 79. Lost, so left to the single pass: powers of two up to 16384 (layer_norm 8192 84 -> 82, 16384
    85 -> 81), var rows of 8192-element tiles less than a quarter masked (7168: 85 -> 81), float32, the plain
    reductions (sum of the same widths: 88-92 % either way).
    """
    N = problem.N
    if not caps.gpu or _itemsize(problem) != 2 or N <= 4096 or (N & (N - 1) == 0 and N <= 16384):
        return None
    if statistics and N <= 8192 and 4 * N > 3 * next_pow2(N):
        return None
    return _smallest_unrolled_chunk(N, (1024, 2048, 4096))


def _smallest_unrolled_chunk(N: int, chunks: tuple[int, ...]) -> LaunchConfig | None:
    """The loop over the first of ``chunks`` whose rows of N unroll (``runtime.unrolled_chunks``), one warp per
    256 elements (8 per thread); None if none does."""
    for chunk in chunks:
        cfg = LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=chunk, num_warps=chunk // 256)
        if unrolled_chunks(N, cfg):
            return cfg
    return None


def _short_unrolled_loop(problem: Problem) -> LaunchConfig | None:
    """2-byte layer_norm rows of 1025-2560 elements that are whole chunks (1280, 1536, 1792, 2560): a loop over
    5-7 chunks of 256 on one warp (rows under 2048) or of 512 on two (rows of 2049-2560, whose 4096 tile is 3/8
    or more masked), 8 elements per thread, the first sweep unrolled (``runtime.unrolled_chunks``); None
    elsewhere.
    As rows of up to 1024 (one warp each), a row stays on one or two warps, and all of its loads are issued at
    once, where the single pass of a 2048 or 4096 tile on 4 warps leaves an eighth or more of its lanes masked.
    Only unit-stride rows whose stride is a multiple of 16 elements (the measured case): other rows take the
    shifted tiles (``runtime.row_align``), whose loop is not unrolled.

    H200 (``tools/s28_probe.py lnw``, 134 MB inputs, % of copy bandwidth, against the single pass on 4 warps):
    bf16 1280 62.5 -> 87.7, 1536 71.0 -> 89.7, 1792 79.4 -> 88.7, 2560 71.8 -> 78.0; fp16 1536 76.4 -> 89.6, 2560
    75.4 -> 84.7. Lost, so left to the single pass: 3072 (80.3 -> 78.1) and 3584 (86.3 -> 79.4) in 512-wide chunks
    on 2 warps, and 1536 in 512-wide chunks on one warp (16 elements per thread, 71.0 -> 70.0). 2304 (nine
    256-wide chunks: a rolled loop) measured level (66.1 -> 67.2) and stays. Powers of two keep the single pass
    (2048: 88.7 against 85.0 for the loop).
    """
    N = problem.N
    # (past 2560 a 4096 tile is less than 3/8 masked: the single pass is ahead)
    if _itemsize(problem) != 2 or not 1024 < N <= 2560 or N & (N - 1) == 0 or problem.stride_n != 1 \
            or problem.stride_m % 16:
        return None
    return _smallest_unrolled_chunk(N, (256, 512))  # (256 unrolls the rows under 2048, 512 those over it)


def _layer_norm_masked_rows(problem: Problem, caps: _Caps, block_n: int) -> LaunchConfig | None:
    """layer_norm rows whose power-of-two tile leaves many lanes masked (hidden sizes 5120, 6144, 20480: a
    5120-wide row in an 8192 tile keeps 62 % of the loads in flight that a full tile would); None elsewhere.

    - float32 rows of 4097-6144 (an 8192 tile a quarter or more masked): two rows per program on 16 warps,
      which also halves the weight and bias reads per row (as many bytes as the row itself, from L2).
    - 2-byte rows over 4096 that are 2-8 whole chunks of 1024-4096 elements: the unrolled loop
      (:func:`_unrolled_loop`).
    - 2-byte rows of 1280-1792 (5-7 chunks of 256, one warp) and of 2560 (512 on two warps): the unrolled loop
      too (:func:`_short_unrolled_loop`).
    - other 2-byte rows in a 2048 tile, at least 3 x 4 x SMs of them: two rows a program.
    - other 2-byte rows over 4096, multiples of 512, whose tile is 3/8 or more masked: a loop over chunks of the
      largest power of two dividing N (512-2048 elements), one warp per 1024, so no lane is masked.

    H200, tools/sweep.py then tools/ab_rules.py on shapes the rule was not tuned on (new vs old, % of copy
    bandwidth): float32 16384x5120 79 -> 94, 8192x6144 86 -> 92; bf16 16384x5120 61 -> 71, 4096x20480 50 -> 67.
    Where the same changes lost, the rule does not reach: float32 two-row tiles of 4096 (16384x2560 86 -> 74) and
    16384 (4096x12288 90 -> 81), float32 loops (4096x20480 78 -> 68, 2048x24576 76 -> 63), 2-byte loops of rows
    a quarter masked (32768x1536 70 -> 65, 8192x3072 fp16 72 -> 63, 8192x6144 64 -> 63; 8192x12288 69 -> 73
    the one gain) or of 2560-wide rows (68 -> 67): rolled loops over the largest power-of-two chunk, 16+ elements
    per thread; the unrolled ones of :func:`_short_unrolled_loop` later won on 1536 and 2560.
    """
    N = problem.N
    if not (caps.gpu and N > caps.norm_short_row):
        return None
    if _itemsize(problem) >= 4:
        if block_n == 8192 and 4 * N <= 3 * block_n:
            return LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=block_n,
                                num_warps=min(caps.max_warps, 2 * _warps(block_n, caps)))
        return None
    unrolled = _unrolled_loop(problem, caps) or _short_unrolled_loop(problem)
    if unrolled is not None:
        return unrolled
    if block_n == 2048 and problem.M * problem.K >= 3 * caps.programs:
        # Other 2-byte rows in a 2048 tile (every one that no loop rule above takes: 1793-2048, and shorter rows that
        # are not 5-7 whole 256-element chunks or whose stride is not a multiple of 16 elements), at least 3 x 4 x SMs
        # rows: two rows a program on 4 warps (the weight and bias loaded once for both), not one
        # (H200, tools/s29_probe.py ln2: bf16 33554x2000 84.3 -> 89.8 %, 34952x1920 82.5 -> 89.2, 32768x2048 88.9 ->
        # 91.8, fp16 33554x2000 87.6 -> 90.8; 8192 rows +1.0-5.5 points; two rows on 8 warps 3-9 below one on 4;
        # twenty-eighth session's lnw, two rows against one on 4 warps, aligned rows: 1280 62.5 -> 70.5, 1536 71.0 ->
        # 79.7, 1792 79.4 -> 86.7). On shapes it was not chosen on (val): 65536x1800 84.3 -> 90.6, 50000x1600 72.5 ->
        # 83.1, 40000x2047 41.5 -> 52.3, fp16 16384x1984 81.0 -> 83.3, 4096x2000 51.6 -> 55.0; 1024x2048 (512 programs)
        # lost, 30.0 -> 27.9: fewer rows keep one. Near the bound (thirtieth session, tools/s29_probe.py val2, M1 w4
        # -> M2 w4, best of three): 1056x2048 bf16 lost (31.7 -> 29.1), 2048x2048 bf16 gained (44.1 -> 46.3), 2048x1920
        # fp16 too (42.7 -> 44.9): the bound, 2 x 4 x SMs rows before, is 3 x 4 x SMs (1584 on an H200, between them).
        return LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=block_n, num_warps=4)
    if N > 4096 and 8 * N <= 5 * block_n and N % 512 == 0:
        chunk = min(2048, N & -N)  # (N & -N: the largest power of two dividing N)
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=chunk, num_warps=max(1, chunk // 1024))
    return None


def _softmax_loop(problem: Problem, caps: _Caps, single_cap: int, logsumexp: bool) -> LaunchConfig | None:
    """The online loop of softmax, log_softmax and logsumexp rows past the single pass; None for rows kept in
    registers. 2-byte rows stay resident up to 16384 elements (softmax, log_softmax), others up to ``single_cap``.

    softmax and log_softmax read a row twice; the second sweep hits L2 only while the rows in flight fit it. The
    loop takes the narrowest program, of 4096-wide chunks on 8 warps (8 programs per SM), 8192 on 16 (4) or 16384
    on 32 (2), whose rows in flight (``min(rows, SMs x programs per SM)`` rows) fit the L2 and whose grid fills at
    least half of those places; else 16384 on 32 warps. Narrower programs keep more loads in flight per SM, wider
    ones fewer rows. H200, ``tools/softmax_rows_ab.py`` (the per-group loop of ``softmax._rows_block``), bf16:
    softmax 4096x32768 single pass 72 -> 81 % (8192 on 16 warps; log_softmax 73 -> 89, fp16 74 -> 86), 4096x40000
    63 -> 80 (8192/16), 16384x20000 55 -> 85 (4096/8), 8192x24576 62 -> 83 (4096/8), 512x32768 54 -> 61 (8192/16);
    1024x131072 keeps 16384/32 (74 %: every narrower program lower). 16384-wide rows keep the single pass (8192x16384
    91 %, 82 for the best loop); float32 rows to 32768 too (4096x32768 99 % in the suite).

    Rows that are not whole 16-byte vectors (odd vocabularies: 50257) follow the same rule since the loop's inner
    chunks take no element mask (twentieth session, ``softmax._chunk_in``; tools/peel_ab.py, bf16: log_softmax
    2048x50257 62 -> 70 % on 8192-wide chunks, 16 warps, where the rule before it kept 4096 on 4 warps, 60 %;
    4096x50257 64 -> 74, 8192x50257 67 -> 76, float16 60 -> 71). logsumexp's 2-byte rows of 32K-64K elements of
    that kind, 8+ rows per SM, keep 4096-wide chunks on 4 warps (tools/ab_rules.py, against 16384 on 32: 30 -> 40
    %); its other 2-byte rows past 32768 (one sweep, no second read) take 4096 on 8 warps (1024x131072 69 -> 73 %).
    """
    N, size = problem.N, _itemsize(problem)
    if N <= (16384 if size == 2 and not logsumexp else single_cap):
        return None
    if logsumexp and size == 2 and (N * size) % 16 and single_cap < N < caps.split_rows \
            and problem.outputs >= 8 * caps.sm_count:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=4)
    if size == 2 and logsumexp:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=8)
    for block_n, warps in ((4096, 8), (8192, 16), (16384, 32)):
        places = caps.sm_count * (2048 // (32 * warps))  # programs the device holds at once (threads per SM)
        if 2 * problem.outputs >= places and min(problem.outputs, places) * N * size <= caps.l2_bytes:
            return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=warps)
    return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=caps.norm_chunk, num_warps=caps.max_warps)


def _tail_rows(name: str, problem: Problem, caps: _Caps) -> LaunchConfig | None:
    """Rows just past a power of two of 512-8192 (513, 1025, 2049, 4097, 8193 elements: up to 1/8 of it more, the
    16-byte shift of an odd width included): a single pass over a tile of that power of two plus a small tail
    tile (``BLOCK_TAIL``) instead of a tile twice as wide, half of its lanes masked; None elsewhere. Warps for 128
    bytes of the first tile per thread, at most 4 (bfloat16 2048: 1 warp, 4096: 2, 8192: 4; float32 2048: 2,
    4096 and 8192: 4; layer_norm and var fp32 8192x8193 on 8 warps: 51 and 80 %, on 4: 73 and 91).

    H200, ``tools/s22_ab.py``, against the built-in config before (single passes of the next power of two, or the
    1024-wide loops of :func:`_odd_rows_loop` past 4096), % of copy bandwidth: softmax bf16 32768x2049 45 -> 86,
    65536x1025 35 -> 75, 16384x4097 62 -> 79, fp32 32768x2049 91 -> 97, 16384x4097 85 -> 97, 65536x1025 82 -> 97;
    log_softmax 16384x4097 bf16 68 -> 79; logsumexp 32768x2049 bf16 30 -> 54; var bf16 32768x2049 38 -> 57,
    65536x1025 33 -> 58, 16384x4097 43 -> 53 (std the same), fp32 32768x2049 69 -> 91, 16384x4097 67 -> 92; var_mean
    32768x2049 bf16 36 -> 56; layer_norm bf16 32768x2049 34 -> 54, 65536x1025 25 -> 56, fp32 32768x2049 63 -> 81,
    16384x4097 73 -> 76, 65536x1025 64 -> 86; sum bf16 32768x2049 48 -> 71, 65536x1025 45 -> 69. Rows of whole
    16-byte vectors too: layer_norm 16384x4104 bf16 50 -> 77, softmax 32768x2056 bf16 75 -> 91. Not taken: the plain
    reductions' float32 rows (+1-2 points) and 2-byte rows past 4096 (sum 16384x4097 bf16: 65 against 72 for its
    loop), odd-width 2-byte layer_norm rows of 4097-4608 (a loop of 512-wide chunks on one warp: 16384x4097 42 ->
    58, the tail 50; 8192x8193: 54 that loop, 61 the tail), rows that fill 3/4 of their power of two (16384x3000
    bf16: softmax 88 either way), widths not measured. Past 8192 and just past 512 (``tools/s22_ab.py third``):
    softmax 8192x8193 bf16 69 -> 78, fp32 85 -> 96, 131072x513 bf16 49 -> 58, fp32 94 -> 97; layer_norm 8192x8193
    bf16 50 -> 61, fp32 69 -> 73, 131072x513 bf16 37 -> 41; var 8192x8193 fp32 73 -> 91, 131072x513 fp32 61 -> 74;
    not taken there: 2-byte var rows (in the code) and sums (8192x8193 bf16 71 built-in, 67 the tail; 131072x513 52
    against 38).
    """
    N, size = problem.N, _itemsize(problem)
    if problem.stride_n != 1 or size > 4 or N <= 512:
        return None
    bn = _prev_pow2(N - 1)
    rest = N + 16 // size - 1 - bn  # (the row plus its largest shift, past the first tile)
    if not (512 <= bn <= 8192 and 0 < rest <= bn // 8):
        return None
    plain = name in ("sum", "mean", "prod", "amax", "amin")
    if plain and (size != 2 or not 1024 <= bn <= 2048):
        return None
    statistics = name in ("var", "std", "var_mean", "std_mean")
    if statistics and size == 2 and bn in (512, 8192):
        return None  # (131072x513 bf16: 45 % built-in, 38 the tail; 8192x8193: 54 its loop, 52 the tail)
    if not plain and not statistics and name not in ("softmax", "log_softmax", "logsumexp", "layer_norm"):
        return None
    if name == "layer_norm" and size == 2 and bn == 4096 and (N * size) % 16:
        # (odd-width 2-byte rows: 512-wide chunks of one warp, 57.7 % against 50.0 for the tail on 16384x4097)
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=512, num_warps=1)
    return LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=bn, BLOCK_TAIL=max(16, next_pow2(rest)),
                        num_warps=min(4, max(1, bn * size // 4096)))


def _odd_rows_loop(name: str, problem: Problem, caps: _Caps) -> LaunchConfig | None:
    """Unit-stride rows past 4096 elements that are not whole 16-byte vectors (odd widths: 4097, 12289, 50257);
    None elsewhere. Their loops take the shifted tiles, whose inner chunks are unmasked (twenty-first session:
    layer_norm, var/std and max/min loops, as softmax's and the plain reductions' before), and a single pass would
    hold a power-of-two tile up to half masked (4097 in 8192 lanes, plus the shift): loops over 1024-wide chunks.

    H200, ``tools/s21_ab.py``, against the built-in config before (single passes or 4096-16384-wide loops), % of
    copy bandwidth: layer_norm bf16 16384x4097 24 -> 42 (2 warps), 8192x12289 39 -> 56 (4), fp32 16384x4097
    50 -> 73 (4), and past 16384 2048-wide chunks on 8 warps: bf16 4096x50257 33 -> 50, 1024x131071 43 -> 47, fp32
    4096x50257 46 -> 59 (the best of each within 1.5 points); var bf16 16384x4097 28 -> 44, 8192x12289
    32 -> 63, 4096x50257 62 -> 71, fp32 16384x4097 51 -> 68 (2 warps each); softmax bf16 16384x4097 38 -> 62 (2),
    8192x12289 58 -> 71 (4), fp32 16384x4097 79 -> 85 (4); max (loops only, two chunks per iteration) bf16
    4096x50257 71 -> 82, 8192x32001 65 -> 83, min fp32 2048x100001 90 -> 92; the plain reductions to 16384 (4
    warps) sum bf16 16384x4097 35 -> 70, 8192x12289 71 -> 81, fp32 16384x5001 79 -> 91, 3000x4097 53 -> 57.
    Not reached: few rows (their split), float32 softmax rows past 8192 (8192x12289 in one 16384 tile: 98 %
    against 84 for the best loop) and 2-byte ones past 16384 (the L2 rule of :func:`_softmax_loop`), the plain
    reductions' longer rows (4096x50257 bf16: 90 % built-in), rows up to 4096 (layer_norm 32768x2049 bf16: 28 %
    either way).
    """
    N, size = problem.N, _itemsize(problem)
    if N <= 4096 or (N * size) % 16 == 0 or problem.stride_n != 1 or (problem.stride_m * size) % 16 == 0:
        return None  # (rows whose starts are 16-byte aligned, padded ones: no shifted tiles, not measured)
    if name == "layer_norm":
        if N > 16384:
            return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=2048, num_warps=8)
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=2 if size == 2 and N <= 8192
                            else 4)
    if problem.outputs < caps.programs:
        return None  # (few rows: the split of the reductions that have one)
    if name in ("var", "std", "var_mean", "std_mean"):
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=2)
    if name in ("softmax", "log_softmax") and size == 2 and N <= 16384:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=2 if N <= 8192 else 4)
    if name in ("softmax", "log_softmax") and size == 4 and N <= 8192:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=4)
    if name in ("max", "min") and N > caps.row_single:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=4, num_stages=2)
    if name in ("sum", "mean", "prod", "amax", "amin") and N <= 16384:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=4)
    return None


_BUILTINS = frozenset({"sum", "mean", "prod", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean",
                       "softmax", "log_softmax", "logsumexp", "layer_norm", "batch_norm"})


@hookimpl(trylast=True)
def tritred_launch_config(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """tritred's built-in heuristic (see the module docstring); returns None for reductions it does not know.

    A config stored by ``tritred tune`` for this device, triton version, op, dtype and shape bucket comes first.
    """
    name = spec.name
    if name in _BUILTINS:
        tuned = lookup(name, problem, device)
        if tuned is not None:
            return tuned
    caps = _Caps(device)
    if name == "batch_norm":
        return _batch_norm_config(problem, caps)
    # (longest row kept on chip, may split N, rows per program tile, loop chunk, column kernels' warps, program
    # target and rows per tile; short rows in one-warp tiles: ops with several reductions per row)
    col_rows, col_loads, one_warp_rows, vector_warps = 32, 1, caps.short_row, False
    loop_warps, half_rows = caps.loop_warps, False  # (loops: 8 elements per thread per 4096-wide chunk)
    if name in ("softmax", "log_softmax", "logsumexp"):
        # loops: 16384-wide chunks of 32 warps (H200, tools/exp_h200.py, 1024x131072 with the L2 hints: bf16
        # 65% -> 67%, fp32 66% -> 70% against 8192 on 16 warps)
        single_cap, allow_split, rows_tile, chunk = caps.softmax_resident, False, 2048, caps.norm_chunk
        # rows up to 1024 in one-warp tiles, as layer_norm (H200, rotating inputs, exp 2026-11-30-c: 100000x768
        # bf16 87% -> 95%; 65536x1024 bf16 94.4% -> 93.7%, fp32 98.1% both)
        col_warps, col_programs, one_warp_rows = 4, caps.programs, caps.norm_short_row
    elif name == "layer_norm":
        # loops: 16384-wide chunks of 32 warps (H200 sweep, 1024x131072 bf16: 51% -> 61%)
        single_cap, allow_split, rows_tile, chunk = caps.norm_resident, False, 2048, caps.norm_chunk
        col_warps, col_programs, one_warp_rows = 4, caps.programs, caps.norm_short_row
    elif name in ("max", "min"):  # with indices (a value and an index per lane): smaller row tiles
        single_cap, allow_split, rows_tile, chunk = caps.row_single, True, caps.arg_tile, caps.chunk
        col_warps, col_programs, half_rows = 8, caps.col_programs, True
    elif name in ("sum", "mean", "prod", "amax", "amin"):
        single_cap, allow_split, rows_tile, chunk = caps.row_single, True, caps.tile, caps.chunk
        # columns: 32x64 tiles of 4 warps, 4 tiles loaded per iteration (H200, tools/exp_h200.py: sum dim=1 of
        # 64x4096x256 bf16 69% -> 75%, dim=0 of 16384x4096 bf16 66% -> 72%)
        col_warps, col_programs, col_loads, one_warp_rows, vector_warps = 4, caps.col_programs, 4, 0, True
    elif name in ("var", "std", "var_mean", "std_mean"):  # (their split combine costs more: fewer programs)
        # Rows up to 16384 in registers on 16 warps, longer ones in loops of 8 warps over 4096-wide chunks (H200,
        # rotating inputs, tools/exp_rotate.py stats: var of 4096x16384 bf16 43% -> 76%, fp32 67% -> 89% against
        # the loop; the loop on 8 warps against 16: 1024x131072 bf16 70% -> 79%, fp32 91% -> 94%, 4096x32768
        # bf16 57% -> 73%).
        single_cap, allow_split, rows_tile, chunk = caps.stats_resident, True, caps.tile, caps.chunk
        loop_warps, half_rows = caps.stats_loop_warps, True
        # columns: tiles of 8 KB, 64x64 2-byte or 32x64 4-byte elements, on 4 warps (H200 sweep, var dim=0 of
        # 16384x4096 bf16: 35% -> 60%; rotating inputs, exp 2026-11-30-c: fp32 64 -> 32 rows 72% -> 82%, bf16
        # 32 rows lost, 66% -> 56%)
        col_warps, col_programs, col_rows = 4, caps.programs, 64 if _itemsize(problem) <= 2 else 32
    else:
        return None
    if not caps.gpu:
        rows_tile = min(rows_tile, caps.tile)
    if problem.inner and name in ("softmax", "log_softmax") and problem.dtype == "float32" \
            and problem.N >= caps.split_rows:
        # float32 rows of 64K+ elements: held by several programs of 8192 elements each, which meet at a per-row
        # barrier (one read, one write; softmax._split_rows_kernel) instead of the online loop's two reads, the
        # second of which misses L2 once the rows in flight outgrow it (H200, rotating inputs, tools/exp_rotate.py
        # split and split-shapes: 1024x131072 68% -> 80%, 2048x65536 77% -> 81%, 64x1048576 36% -> 55%).
        # Shorter rows lost (4096x40000 80% -> 76%, 2048x50257 65% -> 58%: their second read hits L2), and so did
        # bfloat16 (1024x131072 63% -> 58%: half the bytes per program for the same barrier) and wider programs
        # (16384 elements on 16 or 32 warps, 32768 on 32).
        return LaunchConfig(strategy="split", BLOCK_M=1, BLOCK_N=caps.split_chunk,
                            split=cdiv(problem.N, caps.split_chunk), num_warps=caps.split_warps)
    if problem.inner and caps.gpu:
        tail = _tail_rows(name, problem, caps)
        if tail is not None:
            return tail
        odd = _odd_rows_loop(name, problem, caps)
        if odd is not None:
            return odd
        N, block_n = problem.N, next_pow2(problem.N)
        if name in ("var", "std", "var_mean", "std_mean", "layer_norm"):
            short = _short_rows(name, problem, caps)
            if short is not None:
                return short
        if name == "layer_norm":
            half = _layer_norm_half_rows(problem, caps)
            if half is not None:
                return half
        if name in ("var", "std", "var_mean", "std_mean", "max", "min"):
            wide = _wide_rows(name, problem, caps)
            if wide is not None:
                return wide
        if name == "layer_norm" and N <= single_cap:
            masked = _layer_norm_masked_rows(problem, caps, block_n)
            if masked is not None:
                return masked
        if name in ("var", "std", "var_mean", "std_mean") and N <= single_cap:
            unrolled = _unrolled_loop(problem, caps, statistics=True)
            if unrolled is not None:
                return unrolled
        if name in ("softmax", "log_softmax", "logsumexp"):
            loop = _softmax_loop(problem, caps, single_cap, logsumexp=name == "logsumexp")
            if loop is not None:
                return loop
    if problem.inner:
        cfg = _rows_config(problem, caps, allow_split, single_cap, rows_tile, chunk, loop_warps, one_warp_rows,
                           vector_warps, half_rows)
        if caps.gpu and cfg.strategy != "single_pass" and (
                name in ("max", "min") or (vector_warps and _itemsize(problem) == 2)):
            # Row loops of two whole chunks per iteration, unrolled (``num_stages``: PART of ``reduce._rows_block``
            # and ``reduce._arg_rows_kernel``), so that two chunks' loads are in flight (H200, tools/part_ab.py).
            # The plain reductions' 2-byte rows: sum 1024x131072 bf16 85 -> 88 %, amax 85 -> 87, prod 85 -> 88,
            # mean 512x262144 (split) 82 -> 84, sum 4096x50000 88 -> 93, 64x1000000 (split) 58 -> 62; float32
            # lost (1024x131072 97 -> 91 %): unchanged. max/min with indices, every dtype: max 1024x131072 bf16
            # 70 -> 79, min 8192x32000 bf16 61 -> 72, max 4096x50000 fp16 65 -> 75, min 2048x100000 fp32 92 -> 97,
            # max 1024x131072 fp32 91 -> 93, max 64x1000000 bf16 (split) 56 -> 56. (var/std's Welford loops lost
            # with two: 79 -> 74 %, not offered.)
            cfg = cfg.model_copy(update={"num_stages": 2})
        return cfg
    return _cols_config(problem, caps, allow_split, single_cap, col_warps, col_programs, col_rows, col_loads,
                        narrow=name in ("softmax", "log_softmax", "logsumexp"),
                        split_cols=name in ("softmax", "log_softmax", "logsumexp"),
                        short_tiles=name in ("sum", "mean", "prod", "amax", "amin"))
