"""Launch rules of softmax, log_softmax and logsumexp.

Rows up to 32768 elements are one pass in registers (2-byte softmax rows up to 16384: past it the loop wins), rows of up
to 1024 in one-warp tiles of several rows. Longer rows take the online loop, whose program width is chosen so that the
rows in flight fit the L2 (:func:`loop`); float32 softmax rows of 64K+ elements, and such rows of any dtype fewer than
the SMs, are held by several programs meeting at a per-row barrier. Columns take narrower blocks, or split columns,
until they fill the device. The shared rules come first on a GPU: tails and odd widths. The backward kernels' rules
(``direction="backward"``) start from the same ones, counting the second tensor they read (:func:`backward_config`).
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec

from ... import rules as shared
from ...rules import (
    Caps,
    because,
    cols_config,
    few_rows,
    itemsize,
    named,
    odd_rows_loop,
    rows_config,
    split_rows_config,
    tail_rows,
)
from ...runtime.device import programs_per_sm
from ...runtime.launch import cdiv, next_pow2


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of softmax, log_softmax or logsumexp.

    Loops over 16384-wide chunks on 32 warps by default (1024x131072 with the L2 hints: bf16 65 -> 67 %, fp32
    66 -> 70 against 8192 on 16 warps); rows up to 1024 in one-warp tiles, as layer_norm (100000x768 bf16
    87 -> 95 %; 65536x1024 bf16 94.4 -> 93.7, fp32 98.1 both).

    float32 rows of 64K+ elements of the ops that declare ``split_rows`` (softmax, log_softmax: logsumexp reads a
    row once anyway) are held by several programs of 8192 elements each, which meet at a per-row barrier: one read
    and one write, instead of the online loop's two reads, the second of which misses L2 once the rows in flight
    outgrow it (1024x131072 68 -> 80 %, 2048x65536 77 -> 81, 64x1048576 36 -> 55). Shorter rows lost (4096x40000
    80 -> 76, 2048x50257 65 -> 58: their second read hits L2), and so did bfloat16 (1024x131072 63 -> 58: half the
    bytes per program for the same barrier) and wider programs (16384 elements on 16 or 32 warps, 32768 on 32).
    Rows of every dtype take the split when they are fewer than the SMs (:func:`few_rows`).
    """
    if problem.direction == "backward":
        return backward_config(problem, caps)
    single_cap, rows_tile = caps.softmax_resident, 2048
    if not caps.gpu:
        rows_tile = min(rows_tile, caps.tile)
    if problem.inner and "split_rows" in spec.strategies and problem.N >= caps.split_rows \
            and (problem.dtype == "float32" or few_rows(problem, caps)):
        return split_rows_config(problem, caps, "split")
    if problem.inner and spec.name == "logsumexp" and problem.N > single_cap and few_rows(problem, caps):
        return few_rows_split(problem, caps)
    if problem.inner and caps.gpu:
        for rule in (tail_rows, odd_rows_loop):
            cfg = rule(spec, problem, caps)
            if cfg is not None:
                return cfg
        cfg = tiny_rows(problem)
        if cfg is not None:
            return cfg
        cfg = loop(problem, caps, single_cap, logsumexp=spec.name == "logsumexp")
        if cfg is not None:
            return cfg
    if problem.inner:
        return rows_config(problem, caps, False, single_cap, rows_tile, caps.norm_chunk, caps.loop_warps,
                           caps.norm_short_row)
    return cols_config(problem, caps, False, single_cap, 4, caps.programs, narrow=True, split_cols=True)


@named
def few_rows_split(problem: Problem, caps: Caps) -> LaunchConfig:
    """logsumexp of rows past the single pass that are fewer than the SMs: each row split into slices of its own
    programs, whose (max, sum of exp) partials a second launch merges (the split columns' kernels, a row being a
    column of K = 1: ``launch._launch``); 2048-element tiles on 8 warps (8 elements a thread), slices enough for
    ``caps.programs`` programs.

    Why: one program a row streams a row on one SM: 2x3145735 bf16 ran at 1 % of copy on an H100 (eager 6.7x
    faster), the grid's bound being R / SMs of the bandwidth. softmax's split rows hold a row for a
    second sweep that logsumexp does not make; its partials need no barrier. Predicted from the grid (12.6 MB over
    ~500 programs instead of 2): near the copy bandwidth less two small launches; not measured.
    """
    block_n, warps = (2048, 8) if caps.gpu else (64, 4)
    split = max(2, min(cdiv(caps.programs, max(problem.outputs, 1)), cdiv(problem.N, block_n)))
    return because(LaunchConfig(strategy="split", BLOCK_N=block_n, BLOCK_K=1, split=split, num_warps=warps),
                   f"split={split}: {problem.outputs} rows of {problem.N}, fewer than the {caps.sm_count} SMs, split "
                   f"over about {caps.programs} programs, their partials merged by a second launch",
                   f"BLOCK_N={block_n}, BLOCK_K=1, num_warps={warps}: a row as a column of one, "
                   f"{block_n // (32 * warps)} elements a thread")


@named
def tiny_rows(problem: Problem) -> LaunchConfig | None:
    """Rows of up to 8 elements (millions of them: a softmax over a last dim of 2-8): a row a thread, tiles of 512
    elements on 2 warps (8 elements a thread); None for longer rows.

    Why: the one-warp tiles of 1024 elements that rows up to 1024 take give each thread four rows of 8, whose
    loads are issued one element at a time (a row of 7 2-byte elements is not a 16-byte vector). log_softmax of
    3464772x7 bf16 on an H100 (forced configs, 2026-12-05): 19.5 % of copy on one warp of 128 rows; 41.8 % on
    64 rows a program of 2 warps, 41.4 on 128 rows of 4 warps and 256 of 8 (8 elements a thread each), 37.1 on 32
    rows of one warp; eager 38 %, torch.compile 40. Rows of 9-16 elements are not measured (they keep the one-warp
    tiles).
    """
    block_n = next_pow2(max(problem.N, 1))
    if block_n > 8:
        return None
    block_m = max(1, min(next_pow2(problem.outputs), 512 // block_n))
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=2),
                   f"single_pass, BLOCK_M={block_m}, BLOCK_N={block_n}, num_warps=2: rows of {problem.N} (at most "
                   "8), a row a thread, 8 elements a thread on 2 warps")


@named
def loop(problem: Problem, caps: Caps, single_cap: int, logsumexp: bool) -> LaunchConfig | None:
    """The online loop of rows past the single pass; None for rows kept in registers. 2-byte rows stay resident up
    to 16384 elements (softmax, log_softmax), others up to ``single_cap``.

    softmax and log_softmax read a row twice; the second sweep hits L2 only while the rows in flight fit it. The loop
    takes the narrowest program, of 4096-wide chunks on 8 warps (8 programs per SM), 8192 on 16 (4) or 16384 on 32
    (2), whose rows in flight (``min(rows, SMs x programs per SM)`` rows) fit the L2 and whose grid fills at least
    half of those places; else 16384 on 32 warps. Narrower programs keep more loads in flight per SM, wider ones
    fewer rows. bf16: softmax 4096x32768 single pass 72 -> 81 % (8192 on 16 warps; log_softmax 73 -> 89, fp16
    74 -> 86), 4096x40000 63 -> 80 (8192/16), 16384x20000 55 -> 85 (4096/8), 8192x24576 62 -> 83 (4096/8),
    512x32768 54 -> 61 (8192/16); 1024x131072 keeps 16384/32 (74 %: every narrower program lower). 16384-wide rows
    keep the single pass (8192x16384 91 %, 82 for the best loop); float32 rows up to 32768 too (4096x32768 99 %).

    Rows that are not whole 16-byte vectors (odd vocabularies: 50257) follow the same rule, the loop's inner chunks
    taking no element mask (bf16 log_softmax 2048x50257 62 -> 70 % on 8192-wide chunks on 16 warps, against 4096 on
    4 warps; 4096x50257 64 -> 74, 8192x50257 67 -> 76, float16 60 -> 71). logsumexp (one sweep, no second read):
    2-byte rows of 32K-64K elements of that kind, 8+ rows per SM, take 4096-wide chunks on 4 warps (30 -> 40 %
    against 16384 on 32); its other 2-byte rows past 32768 take 4096 on 8 warps (1024x131072 69 -> 73 %).
    """
    N, size = problem.N, itemsize(problem)
    if N <= (16384 if size == 2 and not logsumexp else single_cap):
        return None
    if logsumexp and size == 2 and (N * size) % 16 and single_cap < N < caps.split_rows \
            and problem.outputs >= 8 * caps.sm_count:
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=4),
                       f"multi_pass, BLOCK_N=4096, num_warps=4: logsumexp's 2-byte rows of {N} (not whole 16-byte "
                       "vectors), 8 or more a SM, one sweep each (30 -> 40 % against 16384 on 32 warps)")
    if size == 2 and logsumexp:
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=8),
                       f"multi_pass, BLOCK_N=4096, num_warps=8: logsumexp's 2-byte rows of {N} past {single_cap} "
                       "in registers, read once (1024x131072 69 -> 73 %)")
    return l2_loop(problem, caps)


@named
def l2_loop(problem: Problem, caps: Caps) -> LaunchConfig:
    """The loop of rows read twice (:func:`loop` gives the rule and its figures): the narrowest of 4096-wide chunks
    on 8 warps, 8192 on 16 or 16384 on 32 whose rows in flight fit the L2 and whose grid fills half of the places
    that hold them, else ``caps.norm_chunk`` on ``caps.max_warps``. Also cross_entropy's loop with a gradient."""
    N, size = problem.N, itemsize(problem)
    return _l2_chunks(problem.outputs, N * size, ((4096, 8), (8192, 16), (16384, 32)), caps,
                      (caps.norm_chunk, caps.max_warps), "a row")


def places(warps: int, caps: Caps) -> int:
    """Programs of ``warps`` warps the device holds at once (``runtime.device.programs_per_sm`` at 32 registers a
    thread: only the 2048 threads and the 32 programs a SM bind); the rows in flight of a loop of one row a program
    (:func:`_l2_chunks`, ``layer_norm.rules.masked_rows``)."""
    return caps.sm_count * programs_per_sm(32, warps)


def _l2_chunks(rows: int, row_bytes: int, programs: tuple[tuple[int, int], ...], caps: Caps,
               fallback: tuple[int, int], what: str) -> LaunchConfig:
    """The first (BLOCK_N, num_warps) of ``programs`` whose rows in flight (``row_bytes`` each, as many as the
    device holds such programs at once, at most ``rows``) fit the L2 and whose grid fills half of those places,
    else ``fallback``; with its reason (:func:`l2_loop`, :func:`backward_loop`)."""
    for block_n, warps in programs:
        held = places(warps, caps)
        in_flight = min(rows, held) * row_bytes
        if 2 * rows >= held and in_flight <= caps.l2_bytes:
            return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=warps),
                           f"multi_pass, BLOCK_N={block_n}, num_warps={warps}: the narrowest program whose rows in "
                           f"flight ({min(rows, held)} x {row_bytes} bytes of {what}) fit the L2 "
                           f"({caps.l2_bytes >> 20} MiB) and whose {rows} rows fill half of its {held} places: "
                           "the second sweep reads L2")
    block_n, warps = fallback
    return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=warps),
                   f"multi_pass, BLOCK_N={block_n}, num_warps={warps}: no narrower program's rows in flight fit the "
                   f"L2 ({caps.l2_bytes >> 20} MiB) with half its places filled: the widest program, fewest rows")


@named
def backward_config(problem: Problem, caps: Caps) -> LaunchConfig:
    """The config of softmax's and log_softmax's backward kernels (``problem.direction == "backward"``; its dtype
    is the saved output's): dx from the output y and the incoming dy, both read, dx written.

    The forward's rules with the second tensor counted. Registers: a program holds y and dy, so a row kept in
    registers is at most half the forward's (16384 elements on 32 warps: 16 values of each tensor per thread, 32
    in all, what the forward's 32768-wide rows keep; fp64 half again); tiles hold ~32 values per thread of the two
    tensors together (``warps`` of twice the tile: 16384x4096 bf16 on 8 warps, the forward's 4). Rows up to 1024
    keep the forward's one-warp tiles, shuffles only and no shared-memory barrier, of 512 elements of each tensor
    (1024-wide rows one a warp: 64 values per thread, well inside a one-warp program's 255 registers). Longer rows
    take the two sweeps (:func:`backward_loop`). Columns: :func:`backward_cols`.

    Bytes: one read of y and dy and one write of dx, 3 x numel x itemsize, when the row fits; the loop reads the
    row's dy (and y, for softmax) a second time, from L2 while the rows in flight fit it. Not measured on a GPU yet.
    """
    size = itemsize(problem)
    resident = caps.softmax_resident // 2 // max(1, size // 4)
    if not problem.inner:
        return backward_cols(problem, caps, resident)
    N, R = max(problem.N, 1), problem.outputs
    if N > resident:
        return backward_loop(problem, caps)
    block_n = next_pow2(N)
    whole = f"single_pass, BLOCK_N={block_n}: a row of {N} and its dy in registers (N <= {resident})"
    if block_n <= caps.norm_short_row:
        block_m = max(1, min(next_pow2(R), 512 // block_n))
        return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=1),
                       whole, f"BLOCK_M={block_m}, num_warps=1: rows up to {caps.norm_short_row} in one-warp tiles "
                       "of 512 elements of each tensor (shuffles, no shared-memory barrier)")
    rows_tile = 1024 if caps.gpu else caps.tile // 2
    block_m = max(1, min(next_pow2(R), rows_tile // block_n))
    tile_warps = shared.warps(2 * block_m * block_n, caps)
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=tile_warps),
                   whole, f"BLOCK_M={block_m}: rows in a tile of up to {rows_tile} elements of each tensor",
                   f"num_warps={tile_warps}: about 32 values a thread of the two tensors together")


@named
def backward_loop(problem: Problem, caps: Caps) -> LaunchConfig:
    """The backward's two sweeps over rows past the single pass: the forward's :func:`loop` choice with half the
    chunk on the same warps (the same bytes in flight per program, y and dy in each chunk) and twice the bytes
    per row in flight (y and dy): 2048-wide chunks on 8 warps, 4096 on 16 or 8192 on 32, the narrowest whose
    rows in flight fit the L2 and whose grid fills at least half of the device's places; else 8192 on 32 warps
    (4096x32768 bf16: 8192 on 32 warps, 264 rows of 128 KiB in flight, 34 MB)."""
    N, size, R = problem.N, itemsize(problem), problem.outputs
    if not caps.gpu:
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=caps.norm_chunk // 2,
                                    num_warps=caps.loop_warps),
                       f"multi_pass, BLOCK_N={caps.norm_chunk // 2}, num_warps={caps.loop_warps}: the interpreter's "
                       "loop, half the forward's chunk (y and dy in each)")
    return _l2_chunks(R, N * 2 * size, ((2048, 8), (4096, 16), (8192, 32)), caps, (8192, caps.max_warps),
                      "a row's y and dy")


@named
def backward_cols(problem: Problem, caps: Caps, resident: int) -> LaunchConfig:
    """The backward's columns (a non-last dim): blocks of 64 adjacent columns, narrowed down to 16 while they
    are too few to fill the device (as the forward's); one [BLOCK_N, BLOCK_K] tile of at most 2048 elements of
    each tensor on 4 warps (the forward's 4096, for the two tensors), else two sweeps of tiles of 1024 elements
    of each. Not measured on a GPU yet."""
    N, K = max(problem.N, 1), problem.K
    block_k = min(next_pow2(K), 64 if caps.gpu else 32)
    if caps.gpu:
        while block_k > 16 and problem.M * cdiv(K, block_k) < caps.programs:
            block_k //= 2
    tile = caps.tile // 2
    cols_why = f"BLOCK_K={block_k}: adjacent columns a tile, at most {64 if caps.gpu else 32}" + \
        (f", narrowed down to 16 while the column blocks are fewer than {caps.programs} programs" if caps.gpu else "")
    if next_pow2(N) <= min(resident, tile // block_k):
        return because(LaunchConfig(strategy="single_pass", BLOCK_N=next_pow2(N), BLOCK_K=block_k, num_warps=4),
                       f"single_pass, BLOCK_N={next_pow2(N)}, num_warps=4: the reduced dim of {N} by the columns in "
                       f"one tile of at most {tile} elements of each tensor", cols_why)
    block_n = max(1, min(next_pow2(N), tile // 2 // block_k))
    return because(LaunchConfig(strategy="multi_pass", BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4),
                   f"multi_pass, BLOCK_N={block_n}, num_warps=4: two sweeps of tiles of {tile // 2} elements of each "
                   f"tensor (the reduced dim of {N} does not fit one)", cols_why)
