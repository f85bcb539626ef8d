"""Launch rules of softmax, log_softmax and logsumexp.

Rows up to 32768 elements are one pass in registers (2-byte softmax rows up to 16384: past it the loop wins),
rows of up to 1024 in one-warp tiles of several rows. Longer rows take the online loop, whose program width is
chosen so that the rows in flight fit the L2 (:func:`loop`); float32 softmax rows of 64K+ elements are held by
several programs meeting at a per-row barrier. Columns take narrower blocks, or split columns, until they fill the
device. The shared rules come first on a GPU: tails and odd widths.
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec

from ...rules import Caps, cols_config, itemsize, odd_rows_loop, rows_config, tail_rows
from ...runtime.launch import cdiv


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
    """
    single_cap, rows_tile = caps.softmax_resident, 2048
    if not caps.gpu:
        rows_tile = min(rows_tile, caps.tile)
    if problem.inner and "split_rows" in spec.strategies and problem.dtype == "float32" \
            and problem.N >= caps.split_rows:
        return LaunchConfig(strategy="split", BLOCK_M=1, BLOCK_N=caps.split_chunk,
                            split=cdiv(problem.N, caps.split_chunk), num_warps=caps.split_warps)
    if problem.inner and caps.gpu:
        for rule in (tail_rows, odd_rows_loop):
            cfg = rule(spec, problem, caps)
            if cfg is not None:
                return cfg
        cfg = loop(problem, caps, single_cap, logsumexp=spec.name == "logsumexp")
        if cfg is not None:
            return cfg
    if problem.inner:
        return rows_config(problem, caps, False, single_cap, rows_tile, caps.norm_chunk, caps.loop_warps,
                           caps.norm_short_row)
    return cols_config(problem, caps, False, single_cap, 4, caps.programs, narrow=True, split_cols=True)


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
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=4)
    if size == 2 and logsumexp:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=8)
    for block_n, warps in ((4096, 8), (8192, 16), (16384, 32)):
        places = caps.sm_count * (2048 // (32 * warps))  # programs the device holds at once (threads per SM)
        if 2 * problem.outputs >= places and min(problem.outputs, places) * N * size <= caps.l2_bytes:
            return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=warps)
    return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=caps.norm_chunk, num_warps=caps.max_warps)
