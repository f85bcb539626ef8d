"""Launch rules of cross_entropy: forward (the loss only) and backward (the launch that forms the gradient).

``direction="forward"``: the loss of class-index targets reads each row once (a logsumexp and one gathered
logit), as logsumexp does. ``direction="backward"``: the launch that forms the gradient (the forward with grad
required) reads a row, then writes its gradient from registers or from a second sweep, as softmax does; the
backward's scale of that buffer (``backward._scale_kernel``) takes the same tiles. Both start from the softmax
family's rules, measured on the H200 for rows of the same widths (see ``families/softmax/rules.py``); they are
not yet measured for this kernel, whose rows carry a few more values (the gathered logit, the one-hot compare).

Bytes: with grad, a row is read once from HBM, read again from L2 if the rows in flight fit it, and its gradient
written once: 2 x C x itemsize per row from HBM at best. The loop's program width is chosen as softmax's: the
narrowest whose rows in flight fit the L2. Columns ((N, C, d1, ...) inputs: the class dim strided) take tiles of
adjacent positions, contiguous loads across them.
"""

from __future__ import annotations

from tritred_core import LaunchConfig, Problem, ReductionSpec

from ...rules import Caps, because, itemsize, named, rows_config, split_rows_config
from ...runtime.launch import next_pow2
from ..softmax.rules import l2_loop


@named
def config(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig:
    """The built-in config of cross_entropy (see the module docstring)."""
    if problem.inner:
        return rows(problem, caps)
    return cols(problem, caps)


@named
def rows(problem: Problem, caps: Caps) -> LaunchConfig:
    """Unit-stride rows (or rows without a kept axis after them).

    Single pass up to 32768 classes (2-byte rows with grad: 16384, where softmax's loop wins past it), rows of up
    to 1024 in one-warp tiles of several rows (no shared-memory barrier), wider ones in tiles of up to 2048
    elements. Longer rows loop: with grad over the chunks of softmax's loop rule (:func:`loop`); the loss alone
    as logsumexp (2-byte rows: 4096-wide chunks on 8 warps, 1024x131072 logsumexp 69 -> 73 %). float32 rows of
    64K+ classes with grad are held by several programs of 8192 elements (``split_rows``: one read instead of
    the loop's two, as softmax's float32 rows: 1024x131072 68 -> 80 %; softmax's bfloat16 rows lost there).
    Under the interpreter: single pass up to 256 classes, loops of 64-wide chunks (several chunks in small
    tests), split rows from 512 classes.
    """
    grad = problem.direction == "backward"
    size = itemsize(problem)
    if grad and problem.dtype == "float32" and problem.N >= caps.split_rows:
        return split_rows_config(problem, caps)
    single_cap = caps.softmax_resident
    if caps.gpu and grad and size == 2:
        single_cap = 16384
    if problem.N > single_cap and caps.gpu:
        if grad or size != 2:
            return loop(problem, caps)
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=8),
                       f"multi_pass, BLOCK_N=4096, num_warps=8: the loss alone reads a 2-byte row of {problem.N} "
                       "once, as logsumexp (1024x131072 69 -> 73 %)")
    rows_tile = 2048 if caps.gpu else min(2048, caps.tile)
    return rows_config(problem, caps, False, single_cap, rows_tile, 64 if not caps.gpu else caps.norm_chunk,
                       caps.loop_warps, caps.norm_short_row)


@named
def loop(problem: Problem, caps: Caps) -> LaunchConfig:
    """softmax's loop rule (``softmax.rules.l2_loop``): the narrowest of 4096-wide chunks on 8 warps, 8192 on 16 or
    16384 on 32 whose rows in flight (SMs x programs per SM, at most the rows) fit the L2 and whose grid fills half
    of those places, else 16384 on 32 (the second sweep then reads mostly from HBM)."""
    return l2_loop(problem, caps)


@named
def cols(problem: Problem, caps: Caps) -> LaunchConfig:
    """Strided classes ((N, C, d1, ...) inputs): tiles of BLOCK_K adjacent positions by the classes, one pass when
    a tile of at least 16 positions holds them (up to ``caps.tile`` elements), else loops over 16-class chunks
    (GPU: 32) of 64 positions. (Not measured: the softmax family's column tiles are the model.)"""
    block_n = next_pow2(max(problem.N, 1))
    if 16 * block_n <= caps.tile:
        block_k = max(1, min(next_pow2(problem.K), 128, caps.tile // block_n))
        return because(LaunchConfig(strategy="single_pass", BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4),
                       f"single_pass, BLOCK_N={block_n}, BLOCK_K={block_k}, num_warps=4: {problem.N} classes by "
                       f"{block_k} adjacent positions in one tile of up to {caps.tile} elements")
    chunk = 32 if caps.gpu else 16
    return because(LaunchConfig(strategy="multi_pass", BLOCK_N=chunk, BLOCK_K=64, num_warps=4),
                   f"multi_pass, BLOCK_N={chunk}, BLOCK_K=64, num_warps=4: {problem.N} classes loop over "
                   f"{chunk}-class chunks of 64 adjacent positions (16 positions by the classes pass {caps.tile} "
                   "elements)")
