"""Launch rules of layer_norm.

Rows up to 32768 elements are one pass in registers (the statistics, then the normalized row, with one read), rows
of up to 1024 in one-warp tiles of several rows; longer rows loop over 16384-wide chunks on 32 warps (two sweeps:
the second reads the row again, mostly from L2), unless the rows are fewer than the SMs: then several programs hold
each row and meet at a barrier (``split_rows``). On a GPU, the shared rules first (tails, odd widths, rows over a
few threads), then this family's: two 2-byte rows a one-warp program (:func:`half_rows`) and rows whose
power-of-two tile is largely masked (:func:`masked_rows`).
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec
from tritred_core.models import Strategy

from ...rules import (
    Caps,
    because,
    cols_config,
    few_rows,
    itemsize,
    named,
    odd_rows_loop,
    rows_config,
    short_rows,
    smallest_unrolled_chunk,
    split_rows_config,
    tail_rows,
    unrolled_loop,
    warps,
)
from ...runtime.launch import next_pow2
from ..softmax.rules import l2_loop, places


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of layer_norm. Loops: 16384-wide chunks of 32 warps (1024x131072 bf16 51 -> 61 %
    against 4096-wide ones). Rows past the single pass that are fewer than the SMs are split rows
    (:func:`tritred_ops.rules.few_rows`)."""
    if problem.direction == "backward":
        return backward_config(spec, problem, caps)
    single_cap, rows_tile = caps.norm_resident, 2048
    if not caps.gpu:
        rows_tile = min(rows_tile, caps.tile)
    if problem.inner and problem.N > single_cap and few_rows(problem, caps):
        # fewer rows than SMs: each row held by programs of caps.split_chunk elements (one read, a barrier)
        return split_rows_config(problem, caps)
    if problem.inner and caps.gpu:
        for rule in (tail_rows, odd_rows_loop, short_rows):
            cfg = rule(spec, problem, caps)
            if cfg is not None:
                return cfg
        cfg = half_rows(problem, caps)
        if cfg is None and problem.N <= single_cap:
            cfg = masked_rows(problem, caps, next_pow2(problem.N))
        if cfg is not None:
            return cfg
    if problem.inner:
        return rows_config(problem, caps, False, single_cap, rows_tile, caps.norm_chunk, caps.loop_warps,
                           caps.norm_short_row)
    return cols_config(problem, caps, False, single_cap, 4, caps.programs)


@named
def half_rows(problem: Problem, caps: Caps) -> LaunchConfig | None:
    """2-byte rows of 513-896 elements (a 1024 tile an eighth or more masked: hidden sizes 640, 768; the rows just
    past 512 take ``rules.tail_rows`` first), unit stride, row stride a multiple of 16 elements, at least 64 two-row
    programs per SM: two rows a one-warp program (a 2048-element tile, 64 elements a thread), not one; None
    elsewhere.

    Why: as var's one-warp tiles of 2-byte rows, a 2-byte element fills half the bytes of a float32 one, and a
    one-warp tile of a partly masked row keeps few loads in flight per thread. Best of alternated rounds: bf16
    65536x768 80.1 -> 84.0 %, 100000x768 82.9 -> 88.4, 32768x768 71.4 -> 74.3, 65536x640 70.8 -> 75.5, fp16
    65536x768 82.7 -> 84.6; on shapes it was not chosen on: bf16 65536x576 65.2 -> 69.9, 65536x720 74.8 -> 80.2,
    65536x896 86.5 -> 87.9, fp16 65536x832 85.8 -> 87.3, 100000x768 86.9 -> 89.6, 65536x640 level. Not taken where
    it lost: 50000x1000 bf16 (2 % masked) 85.7 -> 84.5, float32 65536x768 95.6 -> 94.8, 512-wide tiles
    (131072x384 bf16, four rows a warp) 82.3 -> 80.5, 16384x768 bf16 (59.6 -> 58.6: hence the rows bound, 16896
    rows on an H200). Weight and bias loaded with the rows (torch.compile's order) lost 5-14 points on bf16 rows of
    384-1000.
    """
    N = problem.N
    if not caps.gpu or itemsize(problem) != 2 or not 512 < N <= 896 or problem.stride_n != 1 \
            or problem.stride_m % 16 or problem.K != 1 or problem.M < 2 * 64 * caps.sm_count:
        return None
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=1024, num_warps=1),
                   f"single_pass, BLOCK_M=2, BLOCK_N=1024, num_warps=1: two 2-byte rows of {N} (a 1024 tile an "
                   "eighth or more masked) a one-warp program, 64 elements a thread")


@named
def short_unrolled_loop(problem: Problem) -> LaunchConfig | None:
    """2-byte rows of 1025-2560 elements that are whole chunks (1280, 1536, 1792, 2560): a loop over 5-7 chunks of
    256 on one warp (rows under 2048) or of 512 on two (rows of 2049-2560, whose 4096 tile is 3/8 or more masked),
    8 elements per thread, the first sweep unrolled (``runtime.unrolled_chunks``); None elsewhere. Only unit-stride
    rows whose stride is a multiple of 16 elements (the measured case): other rows take the shifted tiles
    (``runtime.row_align``), whose loop is not unrolled.

    Why: as rows of up to 1024 (one warp each), a row stays on one or two warps and all of its loads are issued at
    once, where the single pass of a 2048 or 4096 tile on 4 warps leaves an eighth or more of its lanes masked.
    134 MB inputs, against the single pass on 4 warps: bf16 1280 62.5 -> 87.7 %, 1536 71.0 -> 89.7, 1792
    79.4 -> 88.7, 2560 71.8 -> 78.0; fp16 1536 76.4 -> 89.6, 2560 75.4 -> 84.7. Lost, so left to the single pass:
    3072 (80.3 -> 78.1) and 3584 (86.3 -> 79.4) in 512-wide chunks on 2 warps, and 1536 in 512-wide chunks on one
    warp (16 elements per thread, 71.0 -> 70.0). 2304 (nine 256-wide chunks: a rolled loop) measured level (66.1 ->
    67.2) and stays. Powers of two keep the single pass (2048: 88.7 against 85.0 for the loop).
    """
    N = problem.N
    # (past 2560 a 4096 tile is less than 3/8 masked: the single pass is ahead)
    if itemsize(problem) != 2 or not 1024 < N <= 2560 or N & (N - 1) == 0 or problem.stride_n != 1 \
            or problem.stride_m % 16:
        return None
    return smallest_unrolled_chunk(N, (256, 512))  # (256 unrolls the rows under 2048, 512 those over it)


@named
def masked_rows(problem: Problem, caps: Caps, block_n: int) -> LaunchConfig | None:
    """Rows whose power-of-two tile (``block_n``) leaves many lanes masked (hidden sizes 5120, 6144, 20480: a
    5120-wide row in an 8192 tile keeps 62 % of the loads in flight that a full tile would); None elsewhere.

    - float32 rows of 4097-6144 (an 8192 tile a quarter or more masked): two rows per program on 16 warps, which
      also halves the weight and bias reads per row (as many bytes as the row itself, from L2): 16384x5120
      79 -> 94 %, 8192x6144 86 -> 92.
    - 2-byte rows over 4096 that are 2-8 whole chunks of 1024-4096 elements: the unrolled loop
      (``rules.unrolled_loop``); of 1280-1792 and 2560: :func:`short_unrolled_loop`.
    - other 2-byte rows in a 2048 tile (1793-2048, and shorter rows that are not 5-7 whole 256-element chunks or
      whose stride is not a multiple of 16 elements), at least 3 x 4 x SMs of them: two rows a program on 4 warps,
      the weight and bias loaded once for both (bf16 33554x2000 84.3 -> 89.8 %, 34952x1920 82.5 -> 89.2,
      32768x2048 88.9 -> 91.8, fp16 33554x2000 87.6 -> 90.8; 8192 rows +1.0-5.5 points; two rows on 8 warps 3-9
      below one on 4; aligned rows 1280 62.5 -> 70.5, 1536 71.0 -> 79.7, 1792 79.4 -> 86.7; on shapes it was not
      chosen on: 65536x1800 84.3 -> 90.6, 50000x1600 72.5 -> 83.1, 40000x2047 41.5 -> 52.3, fp16 16384x1984
      81.0 -> 83.3, 4096x2000 51.6 -> 55.0). Fewer rows keep one a program: 1024x2048 (512 programs) lost,
      30.0 -> 27.9, and 1056x2048 bf16 31.7 -> 29.1, where 2048x2048 bf16 gained (44.1 -> 46.3) and 2048x1920
      fp16 too (42.7 -> 44.9): the bound, 3 x 4 x SMs rows (1584 on an H200), lies between them.
    - other 2-byte rows over 4096, multiples of 512, whose tile is 3/8 or more masked: a loop over chunks of the
      largest power of two dividing N (512-2048 elements), one warp per 1024, so that no lane is masked (bf16
      16384x5120 61 -> 71 %, 4096x20480 50 -> 67), where the rows such programs hold at once fit the L2 (16384x5120:
      4224 rows of 10 KB, 43 MB), whose second sweep then reads it; else softmax's L2 loop
      (``softmax.rules.l2_loop``): fp16 8192x18944 (4224 rows of 37 KB, 160 MB: the second sweep from DRAM, 3 bytes
      moved for 2) 67.7 % of copy on one warp a 512 chunk, 88.7 on 8 warps a 4096 chunk (1056 rows, 40 MB), 73.9 on
      16 a 8192, 74.5 in one 32768 tile (H100, forced configs, two rounds).

    Where the same changes lost, the rule does not reach: float32 two-row tiles of 4096 (16384x2560 86 -> 74 %) and
    16384 (4096x12288 90 -> 81), float32 loops (4096x20480 78 -> 68, 2048x24576 76 -> 63), rolled 2-byte loops over
    the largest power-of-two chunk, 16+ elements per thread, of rows a quarter masked (32768x1536 70 -> 65,
    8192x3072 fp16 72 -> 63, 8192x6144 64 -> 63; 8192x12288 69 -> 73 the one gain) or 2560 wide (68 -> 67).
    """
    N = problem.N
    if not (caps.gpu and N > caps.norm_short_row):
        return None
    if itemsize(problem) >= 4:
        if block_n == 8192 and 4 * N <= 3 * block_n:
            two_warps = min(caps.max_warps, 2 * warps(block_n, caps))
            return because(LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=block_n, num_warps=two_warps),
                           f"single_pass, BLOCK_M=2, BLOCK_N={block_n}, num_warps={two_warps}: two float32 rows of "
                           f"{N} (an {block_n} tile a quarter or more masked) a program, the weight and bias read "
                           "once for both")
        return None
    unrolled = unrolled_loop(problem, caps) or short_unrolled_loop(problem)
    if unrolled is not None:
        return unrolled
    if block_n == 2048 and problem.M * problem.K >= 3 * caps.programs:
        return because(LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=block_n, num_warps=4),
                       f"single_pass, BLOCK_M=2, BLOCK_N={block_n}, num_warps=4: two 2-byte rows of {N} a program, "
                       f"the weight and bias loaded once for both ({problem.M * problem.K} rows: 3 or more a place)")
    if N > 4096 and 8 * N <= 5 * block_n and N % 512 == 0:
        chunk = min(2048, N & -N)  # (N & -N: the largest power of two dividing N)
        chunk_warps = max(1, chunk // 1024)
        # rows in flight (one a program, as many as the device holds at once), each read twice
        in_flight = min(problem.outputs, places(chunk_warps, caps)) * N * itemsize(problem)
        if caps.l2_bytes and in_flight > caps.l2_bytes:
            return l2_loop(problem, caps)
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=chunk, num_warps=chunk_warps),
                       f"multi_pass, BLOCK_N={chunk}, num_warps={chunk_warps}: 2-byte rows of {N} (a {block_n} "
                       "tile 3/8 or more masked) loop over the largest power of two dividing them, no lane masked, "
                       "a warp per 1024")
    return None


# -- backward ------------------------------------------------------------------------------------------------------

#: Longest row (in bytes) the backward's single pass holds in registers on a GPU; longer rows loop over
#: BACKWARD_CHUNK-element chunks: 16384 2-byte or 8192 4-byte elements, on BACKWARD_WARPS warps.
BACKWARD_RESIDENT_BYTES = 32768
#: Elements of x (and of dy) a thread holds in the single pass (float64: half). Registers go with elements, not
#: bytes: the float32 1024-wide rows' 8 a thread on 4 warps take 56 registers (ptxas, sm_90a; 36 warps per SM),
#: bfloat16 4096-wide rows at 16 a thread took 84 (layer_norm: 16 warps per SM) and at 8 take 57 (32 warps). The
#: backward alone on an H100: layer_norm bf16 16384x4096 72 % of copy at 16 a thread, 82 % at 8
#: (docs/performance.md).
BACKWARD_ELEMENTS = 8
#: Most warps of a single-pass program. On 32 warps the row sums cross 32 warps through shared memory and the
#: registers are capped at 64 a thread: bf16 16384-wide rows (16 elements a thread) ran at 52 % of copy in the
#: backward alone where 16 warps (32 elements a thread) ran at 78 % (H100, 2026-12-05, docs/performance.md).
BACKWARD_WARPS = 16
BACKWARD_CHUNK = 4096
#: Most elements of the dw (and of the db) partials: programs x N, so that very long rows take fewer programs.
BACKWARD_PARTIALS = 1 << 24


@named
def backward_config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The backward kernel's config (layer_norm and rms_norm: ``backward_kernels._norm_backward_kernel``).

    The kernel reads x and dy and writes dx, one stream more than the forward (x read, y written), and keeps per
    program an fp32 accumulator row of dw and one of db until its last row block. Registers therefore bound the
    single pass (ptxas, sm_90a, Triton 3.x, layer_norm with weight and bias, the tile reloaded from L1 after the row
    sums): about 25 + 4.3 registers per element a thread holds for 2-byte rows (bf16 4096 on 8 warps: 84; 8192 on
    16: 94), 25 + 5 for float32 (4096 on 16 warps: 60, on 8: 105); bf16 16384 on 32 warps capped at 64 registers
    spills 20 values (80 bytes, layer_norm's two accumulators; rms_norm's one: none), float32 16384 (16 elements a
    thread on 32 warps) would spill more: it loops.

    - Rows of up to ``BACKWARD_RESIDENT_BYTES``: a single pass (x and dy read once, dx written once), each thread
      ``BACKWARD_ELEMENTS`` elements of x and of dy (8: bf16 one 16-byte vector, float32 two; float64 4), at least
      4 warps' worth of rows a program (1024: one row on 4 warps; 256: four), at most ``BACKWARD_WARPS`` (16)
      warps: the rows past 4096 elements of 4 bytes or 8192 of 2 take more elements a thread (bf16 16384: 32 on
      128 registers, the cap of 16 warps; float32 8192: 16 on 110; one program per SM).
      Registers per SM then hold 32-36 warps: bf16 4096 on 16 warps takes 57 registers (layer_norm; rms_norm 64),
      two programs per SM, where 16 elements a thread on 8 warps took 84 (two programs: 16 warps).
    - Longer rows: the loop over chunks of 8 KB of a row (2-byte rows: ``BACKWARD_CHUNK`` elements), two rows a
      tile (16 KB of x; 2-byte on 32 warps: 64 registers; 4-byte on 16: 80; one program per SM, 32 KB of x and dy
      in flight): two sweeps over the program's rows,
      the row sums, then chunk by chunk dx and the chunk's dw/db terms summed in registers (x and dy read twice:
      10 bytes an element where 6 are the least for bf16, so about 60 % of the single pass's speed at best).
      Adding each row's terms to the program's partial rows in memory instead (a loop over one row, its second
      read from L2) moves 16 more bytes an element through L2 or, for rows of 131072 float32 elements (132
      partial rows of 1 MB), HBM.
    - A kept axis faster than the normalized one (a transposed input): tiles of up to 32 adjacent rows, whose
      loads are contiguous across the rows, 4096 elements on 8 warps.
    - The grid is persistent: the dw/db partials are one row per program. ``num_programs=0`` on a GPU: as many
      programs as the device holds at once (the compiled kernel's occupancy, read by the launcher), at most
      ``BACKWARD_PARTIALS / N``; the interpreter's ``caps.programs``.

    Measured (docs/performance.md, "The norms' backward"): the backward alone on an H100 (2026-12-05), this rule
    against other tiles: layer_norm bf16 16384x4096 at 82 % of copy (16 elements a thread on 8 warps: 72 %),
    rms_norm 86 %, rms_norm bf16 65536x1024 91 %, layer_norm float32 65536x1024 95 %; bf16 4096x16384 on 32 warps
    52 %, on 16 warps 78 % (the cap above; float32 8192-wide and float64 4096-wide rows follow it unmeasured).
    """
    N, R = max(problem.N, 1), max(problem.outputs, 1)
    size = itemsize(problem)
    programs = 0 if caps.gpu else caps.programs
    grid = f"num_programs={programs}: " + ("as many programs as the device holds at once (persistent grid: one dw/db "
                                           "partial row each)" if caps.gpu else "the interpreter's persistent grid")
    if caps.gpu and BACKWARD_PARTIALS // N < 8 * caps.sm_count:  # (rows past ~16K: where the cap may bind)
        programs = max(caps.sm_count, BACKWARD_PARTIALS // N)
        grid = f"num_programs={programs}: at most {BACKWARD_PARTIALS} elements of dw/db partials (rows of {N}), " \
               "at least one program a SM"
    if not problem.inner:
        block_m = min(next_pow2(problem.K), 32 if caps.gpu else 4)
        tile = 4096 if caps.gpu else caps.tile
        block_n = min(next_pow2(N), max(16, tile // block_m))
        strategy: Strategy = "single_pass" if block_n >= N else "multi_pass"
        cols_warps = 8 if caps.gpu else 4
        return because(LaunchConfig(strategy=strategy, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=cols_warps,
                                    num_programs=programs),
                       f"{strategy}, BLOCK_M={block_m}, BLOCK_N={block_n}, num_warps={cols_warps}: a kept axis "
                       f"faster than the normalized one: tiles of {block_m} adjacent rows, loads contiguous across "
                       f"them, {tile} elements", grid)
    if not caps.gpu:
        if N <= caps.norm_resident:
            block_n = next_pow2(N)
            block_m = max(1, min(next_pow2(R), caps.tile // block_n))
            return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4,
                                        num_programs=programs),
                           f"single_pass, BLOCK_M={block_m}, BLOCK_N={block_n}: the interpreter's tiles of up to "
                           f"{caps.tile} elements", grid)
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=caps.norm_chunk, num_warps=4,
                                    num_programs=programs),
                       f"multi_pass, BLOCK_N={caps.norm_chunk}: the interpreter's loop (N={N} > "
                       f"{caps.norm_resident})", grid)
    per_thread = BACKWARD_ELEMENTS if size <= 4 else BACKWARD_ELEMENTS // 2
    block_n = next_pow2(N)
    if block_n * size > BACKWARD_RESIDENT_BYTES:  # (tiles of 16 KB of x: two rows of 8 KB chunks)
        chunk = min(BACKWARD_CHUNK, 8192 // size)
        rows = max(1, 16384 // (size * chunk))
        loop_warps = 32 if size <= 2 else 16
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=rows, BLOCK_N=chunk, num_warps=loop_warps,
                                    num_programs=programs),
                       f"multi_pass, BLOCK_M={rows}, BLOCK_N={chunk}: a row of {N * size} bytes is past the "
                       f"{BACKWARD_RESIDENT_BYTES} held in registers: two sweeps over tiles of 16 KB of x",
                       f"num_warps={loop_warps}: one program a SM, 32 KB of x and dy in flight", grid)
    block_m = max(1, min(next_pow2(R), 4 * 32 * per_thread // block_n))
    num_warps = min(BACKWARD_WARPS, max(1, block_m * block_n // (32 * per_thread)))
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
                                num_programs=programs),
                   f"single_pass, BLOCK_N={block_n}: a row of {N * size} bytes and its dy in registers (at most "
                   f"{BACKWARD_RESIDENT_BYTES})",
                   f"BLOCK_M={block_m}, num_warps={num_warps}: {per_thread} elements of x and of dy a thread "
                   f"(registers), at least 4 warps' worth of rows, at most {BACKWARD_WARPS} warps", grid)


def partials_sum_tile(N: int) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_N) of the launch that sums the backward's dw/db partials (a [programs, N] fp32 buffer each):
    column blocks of 16-64 so that rows of 1024-16384 give about 64-256 programs (2 KB-64 KB of partials each:
    the sum of 792 partial rows of 1024 in 64-column blocks would take 16 programs, a few microseconds of an
    85-microsecond backward), 64 partial rows a step on 4 warps (1024-4096 elements)."""
    block_n = min(64, max(16, next_pow2(-(-N // 256))))
    return 4096 // block_n, block_n
