"""Triton building blocks shared by the op families: combine functions and dtype helpers.

Each family file (reduce.py, statistics.py, softmax.py, layer_norm.py, batch_norm.py) holds its own kernels;
what they have in common lives here so that each combine rule is written once.
"""

from __future__ import annotations

import math
import struct

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

# Reduction op codes (constexpr in kernels).
SUM, PROD, MAX, MIN = 0, 1, 2, 3

TL_DTYPES = {
    torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32, torch.float64: tl.float64,
    torch.bool: tl.int1, torch.uint8: tl.uint8, torch.int8: tl.int8, torch.int16: tl.int16, torch.int32: tl.int32,
    torch.int64: tl.int64,
}


def tl_dtype(dtype: torch.dtype) -> tl.dtype:
    return TL_DTYPES[dtype]


def f32_split(value: float) -> tuple[float, float]:
    """``value`` as two float32 parts (hi, lo) with hi + lo ~ value to 48 bits.

    Triton passes Python floats to kernels as float32; a float64 kernel (eps, momentum, divisors) joins the two
    parts in float64 so its scalars keep float64 precision.
    """
    if not math.isfinite(value):  # inf - inf would make the low part NaN
        return value, 0.0
    hi = struct.unpack("f", struct.pack("f", value))[0] if abs(value) < 3.0e38 else value
    # (a zero low part carries hi's sign: -0.0 + 0.0 would be +0.0)
    return hi, (value - hi) or math.copysign(0.0, hi)


def pre_cast(src: torch.dtype, cast: torch.dtype) -> tl.dtype:
    """First conversion of a loaded element on its way to ``cast`` (the ``dtype=`` argument).

    Anything but float32/half -> bfloat16/float16 goes through float32, as torch converts (c10's BFloat16 and
    Half are built from a float): the same double rounding, bit for bit. It also avoids the interpreter's
    integer and float64 -> bf16 conversions, which reinterpret bits.
    """
    if cast in (torch.bfloat16, torch.float16) and src not in (torch.float32, torch.bfloat16, torch.float16):
        return tl.float32
    return tl_dtype(cast)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulator dtype: fp32 for fp16/bf16/fp32, fp64 for fp64, int64 for integers and bool."""
    if dtype == torch.float64:
        return torch.float64
    if dtype.is_floating_point:
        return torch.float32
    return torch.int64


def identity(op: int, acc: torch.dtype) -> float | int:
    """The identity of ``op`` in ``acc``: what masked lanes hold so they never change the result."""
    if op == SUM:
        return 0
    if op == PROD:
        return 1
    if acc.is_floating_point:
        return float("-inf") if op == MAX else float("inf")
    info = torch.iinfo(acc)
    return info.min if op == MAX else info.max


@triton.jit
def mul_fn(a, b):
    return a * b


@triton.jit
def max_fn(a, b):
    # NaN-propagating max (torch.amax returns NaN when any element is NaN): one max.NaN instruction on sm_80+,
    # against four (compare, compare, or, select) for the where-based form; bf16 rows are compute-tight.
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def min_fn(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def combine(a, b, OP: tl.constexpr):
    """Elementwise combine of two accumulators for op code OP."""
    if OP == 0:
        r = a + b
    elif OP == 1:
        r = a * b
    elif OP == 2:
        r = max_fn(a, b)
    else:
        r = min_fn(a, b)
    return r


@triton.jit
def tile_reduce(x, axis: tl.constexpr, OP: tl.constexpr):
    """Reduce a tile along ``axis`` with op code OP (a fixed tree: deterministic for a given config)."""
    if OP == 0:
        r = tl.sum(x, axis)
    elif OP == 1:
        r = tl.reduce(x, axis, mul_fn)
    elif OP == 2:
        r = tl.reduce(x, axis, max_fn)
    else:
        r = tl.reduce(x, axis, min_fn)
    return r


@triton.jit
def div_exact(a, b, ACC: tl.constexpr):
    """IEEE-rounded a / b in ACC (fp32 or fp64): compiled Triton's fp32 '/' is approximate, and a constant row
    must get exactly its value as mean. Used per row or per chunk, never per element."""
    if ACC == tl.float64:
        r = tl.cast(a, tl.float64) / tl.cast(b, tl.float64)
    else:
        r = tl.div_rn(tl.cast(a, tl.float32), tl.cast(b, tl.float32))
    return r


@triton.jit
def sqrt_exact(a, ACC: tl.constexpr):
    if ACC == tl.float64:
        r = tl.sqrt(tl.cast(a, tl.float64))
    else:
        r = tl.sqrt_rn(tl.cast(a, tl.float32))
    return r


@triton.jit
def argmax_fn(va, ia, vb, ib):
    """(value, index) combine for max: NaN wins (it is the max in torch), ties keep the smaller index."""
    a_nan = va != va
    b_nan = vb != vb
    pick_a = (va > vb) | ((va == vb) & (ia < ib)) | (a_nan & (~b_nan | (ia < ib)))
    return tl.where(pick_a, va, vb), tl.where(pick_a, ia, ib)


@triton.jit
def argmin_fn(va, ia, vb, ib):
    a_nan = va != va
    b_nan = vb != vb
    pick_a = (va < vb) | ((va == vb) & (ia < ib)) | (a_nan & (~b_nan | (ia < ib)))
    return tl.where(pick_a, va, vb), tl.where(pick_a, ia, ib)


@triton.jit
def arg_combine(acc_v, acc_i, v, i, IS_MAX: tl.constexpr):
    """Elementwise (value, index) update of a max (IS_MAX) or min accumulator."""
    if IS_MAX:
        r_v, r_i = argmax_fn(acc_v, acc_i, v, i)
    else:
        r_v, r_i = argmin_fn(acc_v, acc_i, v, i)
    return r_v, r_i


@triton.jit
def arg_reduce(v, i, axis: tl.constexpr, IS_MAX: tl.constexpr):
    """(value, first index) of the max (IS_MAX) or min of a tile along ``axis``."""
    if IS_MAX:
        r_v, r_i = tl.reduce((v, i), axis, argmax_fn)
    else:
        r_v, r_i = tl.reduce((v, i), axis, argmin_fn)
    return r_v, r_i


@triton.jit
def arg_step(acc_v, acc_c, v, chunk, IS_MAX: tl.constexpr):
    """Per-lane update of a running max (IS_MAX) or min and the chunk number ``chunk`` where it was reached.

    A lane sees its positions in increasing order, so a tie keeps the earlier chunk, and the first NaN wins and
    stays (NaN is the max and the min in torch).
    """
    if IS_MAX:
        better = v > acc_v
    else:
        better = v < acc_v
    better = better | ((v != v) & (acc_v == acc_v))
    return tl.where(better, v, acc_v), tl.where(better, chunk, acc_c)


@triton.jit
def arg_finish(v, pos, past, axis: tl.constexpr, IS_MAX: tl.constexpr):
    """(extreme value, smallest position holding it) along ``axis`` of lanes ``v`` at positions ``pos`` (``past``:
    a position beyond every lane's).

    Lanes beyond the data hold the identity at positions past every real one: they can tie with the result only
    when all real values equal the identity, and then a real position is smaller. When the extreme is NaN, only
    NaN lanes hit (v == NaN is false); otherwise no lane is NaN.
    """
    if IS_MAX:
        best = tl.reduce(v, axis, max_fn)
    else:
        best = tl.reduce(v, axis, min_fn)
    if axis == 0:
        hit = (v == best[None, :]) | (v != v)
    else:
        hit = (v == best[:, None]) | (v != v)
    return best, tl.min(tl.where(hit, pos, past), axis).to(tl.int64)


@triton.jit
def wait_for_previous_launch(WAIT: tl.constexpr):
    """With WAIT (a programmatic dependent launch, ``_common.dependent_launch``): wait until the launch before
    this one has finished and its writes are visible (``griddepcontrol.wait``, sm_90+); the program's first
    statement, before any read of what that launch wrote. Without WAIT, nothing (a plain launch already starts
    after the previous one; the interpreter has no inline assembly)."""
    if WAIT:
        gdc_wait()


@triton.jit
def row_block(blk, R, K, BLOCK_M: tl.constexpr):
    """(rows, row_ok, m, k) of row block ``blk`` of the row kernels: its BLOCK_M row indices (int64: the offsets
    they scale may pass 2^31), which of them are among the R rows, and each row's (m, k) in the M x N x K view."""
    rows = tl.cast(blk, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return rows, rows < R, rows // K, rows % K


@triton.jit
def col_block(K, BLOCK_K: tl.constexpr):
    """(m, its BLOCK_K adjacent k, their mask) of column program ``program_id(0)`` of the column kernels: the k
    blocks of one m are adjacent program ids; m and k are int64 (the offsets they scale may pass 2^31)."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    m = (tl.program_id(0) // k_blocks).to(tl.int64)
    ks = (tl.program_id(0) % k_blocks).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    return m, ks, ks < K


@triton.jit
def aligned_rows(x_off, ALIGN: tl.constexpr):
    """(the ALIGN-element boundary at or below each row start ``x_off``, the row start's lane from there);
    ALIGN = 0: (``x_off``, 0), tiles start at the row start.

    Rows of odd width start off 16-byte boundaries, and Triton, which cannot prove alignment, loads them one
    element at a time. Tiles that start at the boundary below the row (the first ``lead`` lanes masked) load
    16 bytes per instruction. Only for tensors whose data pointer is 16-byte aligned (the host checks).
    """
    if ALIGN > 0:
        lead = x_off % ALIGN
        start = tl.multiple_of(x_off - lead, ALIGN)
    else:
        lead = tl.zeros_like(x_off)
        start = x_off
    return start, lead


@triton.jit
def shifted_out(y_off, lead, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr):
    """Output row offsets for the tiles of :func:`aligned_rows`: shifted by the same ``lead`` (ALIGN_Y: the host
    checked that the output rows are then 16-byte aligned as well)."""
    if ALIGN > 0:
        y_off = y_off - lead
        if ALIGN_Y:
            y_off = tl.multiple_of(y_off, ALIGN)
    return y_off


@triton.jit
def row_masks(cols, lead, N, row_ok, ALIGN: tl.constexpr):
    """(element mask, load mask) of a [rows, BLOCK_N] tile at tile columns ``cols``; rows start at lane ``lead``.

    Triton vectorizes a masked load only when its mask is constant over each vector, so with ALIGN the load
    mask covers whole 16-byte chunks up to the one holding the row's last element (the extra lanes read
    neighbouring elements of the same aligned chunks, inside the allocation) and the element mask drops them
    from the math and the stores. Without ALIGN the tile starts at the row start and the two are the same.

    The single passes give int32 ``cols`` and ``lead`` (rows of at most 32768 elements): each element's compares
    are then one instruction each, not the two of an int64 compare; loops keep int64 columns (rows past 2^31).
    """
    if ALIGN > 0:
        elem = row_ok[:, None] & (cols[None, :] >= lead[:, None]) & (cols[None, :] < (lead + N)[:, None])
        end = tl.multiple_of(tl.cdiv(lead + N, ALIGN) * ALIGN, ALIGN)
        load = row_ok[:, None] & (cols[None, :] < end[:, None])
    else:
        elem = row_ok[:, None] & (cols < N)[None, :]
        load = elem
    return elem, load


@triton.jit
def _whole_chunks(lead, N, ALIGN: tl.constexpr):
    """(first, end) tile columns of the whole ALIGN-element chunks inside each shifted row."""
    lo = tl.multiple_of(tl.cdiv(lead, ALIGN) * ALIGN, ALIGN)
    hi = tl.multiple_of(((lead + N) // ALIGN) * ALIGN, ALIGN)
    return lo, hi


@triton.jit
def inner_mask(cols, lead, N, row_ok, ALIGN: tl.constexpr):
    """Store mask of the whole 16-byte chunks inside each row of a shifted tile (constant over each chunk, so
    the store vectorizes); the row's partial first and last chunks are written through :func:`edge_cols`."""
    lo, hi = _whole_chunks(lead, N, ALIGN)
    return row_ok[:, None] & (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])


@triton.jit
def edge_cols(lead, N, row_ok, ALIGN: tl.constexpr):
    """(tile columns, mask) of the row elements outside whole chunks: [rows, 2 * ALIGN] lanes, the first ALIGN
    over the row's first chunk, the others over the chunk after the last whole one (at most 2 * (ALIGN - 1)
    elements per row, read and written one by one)."""
    j = tl.arange(0, 2 * ALIGN)[None, :]
    lo, hi = _whole_chunks(lead, N, ALIGN)
    lo, hi = lo[:, None], hi[:, None]
    c = tl.where(j < ALIGN, j, hi + j - ALIGN)
    first = (j < ALIGN) & (c < lo)
    last = (j >= ALIGN) & (c >= hi) & (c >= lo)
    ok = row_ok[:, None] & (c >= lead[:, None]) & (c < (lead + N)[:, None]) & (first | last)
    return c, ok


@triton.jit
def group_barrier(count_ptr, expected):
    """Wait until ``expected`` programs have arrived at ``count_ptr`` (an int32 counter, zero before the launch):
    a barrier among the programs that share a row (softmax's split rows).

    Every thread's stores before the barrier are visible to every program after it: the CTA barrier orders this
    program's threads before its one release add (the pattern of CUDA's grid sync), and the acquire poll orders
    the reads after it. The programs must be co-resident, else a waiting one could hold the SM its partner needs:
    the launcher makes it a cooperative launch, which the driver refuses rather than deadlock. Compiled only: the
    interpreter runs programs one after another.
    """
    tl.debug_barrier()
    tl.atomic_add(count_ptr, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
    while seen < expected:
        seen = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")


@triton.jit
def stats_shift(v):
    """A shift for the statistics of the values around ``v`` (one of them, loaded by every program of a row):
    ``v`` itself when finite, else 0. Statistics of ``x - shift`` are those of values near zero, so that the
    chunk means that split rows store and merge (Chan et al. 1979) keep the spread of rows far from 0: a float32
    mean of 1e4 rounds by 1e-3, the size of such a row's deviations (found by an adversarial run)."""
    return tl.where((v == v) & (tl.abs(v) < float("inf")), v, tl.zeros_like(v))


@triton.jit
def chan_fn(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """Merge two (mean, M2, count) partial statistics (Chan, Golub & LeVeque 1979); empty sides are exact."""
    n = n_a + n_b
    w_b = tl.where(n > 0, div_exact(n_b, tl.where(n > 0, n, 1), n.dtype), 0)
    delta = mean_b - mean_a
    mean = mean_a + delta * w_b
    m2 = m2_a + m2_b + delta * (delta * (n_a * w_b))  # (an empty side gives 0, not inf * 0, for |delta| > 1e19)
    return mean, m2, n


def single_load_evict(op: str, num_warps: int) -> str:
    """L2 hint of the single-pass row load of softmax or layer_norm (ops writing an output as large as their input).

    Evict-last, though each element is read once. Measured, not explained: H200, rotating inputs (no L2 residue
    between calls), hint none / evict-first / evict-last (docs/data/h200-exp-2026-11-30-b.txt):
    softmax 16384x4096 fp32 94 / 91 / 98 %, bf16 91 / 88 / 94; 65536x1024 fp32 95 / 90 / 98; 8192x8192 bf16
    90 / 87 / 94 (last wins 11 of 12 shapes; plain reductions, with no output stream, prefer evict-first).
    layer_norm gains with tiles of 4-8 warps only (16384x4096 fp32 88.5 -> 90.8, bf16 88.3 -> 91.2) and loses
    with one warp (65536x1024 bf16 90.7 -> 84.2) and 16-32 (2048x16384 fp32 83.3 -> 80.6): no hint there.
    """
    if op == "layer_norm" and not 4 <= num_warps <= 8:
        return ""
    return "evict_last"


def loop_evicts(t: torch.Tensor) -> bool:
    """The ``EVICT_FIRST`` of :func:`load_loop` for a row loop over ``t``: 2-byte dtypes only (measured below)."""
    return t.element_size() <= 2


@triton.jit
def load_loop(ptrs, mask, EVICT_FIRST: tl.constexpr):
    """A row loop's load of data read once, with the evict-first L2 hint when EVICT_FIRST (0 where masked).

    The hint is a per-dtype choice (H200, 1024x131072, one bench with and one without): it gains 2-byte loops
    of var/std and max/min 2-4 points (70 vs 66-68 %) and costs 4-byte loops 5-7 (86-88 vs 93 %).
    """
    if EVICT_FIRST:
        x = tl.load(ptrs, mask=mask, other=0, eviction_policy="evict_first")
    else:
        x = tl.load(ptrs, mask=mask, other=0)
    return x


@triton.jit
def welford_step(mean, m2, x, inv):
    """Per-lane Welford (1962) step of full chunks, where every lane has seen the same count ``1 / inv``.

    Loops use this instead of reducing every chunk across lanes (no cross-warp traffic inside the loop), and
    one scalar division per chunk instead of one per element; the lanes are merged once at the end with
    :func:`chan_fn`, and a partial last chunk joins through :func:`chunk_stats`.
    """
    delta = x - mean
    mean = mean + delta * inv
    m2 = m2 + delta * (x - mean)
    return mean, m2


@triton.jit
def merge_lanes(mean_l, m2_l, n_full, AXIS: tl.constexpr):
    """Merge a row loop's Welford lanes along AXIS, each of ``n_full`` values, with Chan et al.'s (1979) formula:
    (mean, M2, count) of the lanes. A partial last chunk joins with :func:`join_chunk`."""
    return tl.reduce((mean_l, m2_l, tl.zeros_like(mean_l) + n_full), AXIS, chan_fn)


@triton.jit
def join_chunk(mean, m2, cnt, x, mask, n_t, AXIS: tl.constexpr):
    """Join a partial chunk ``x`` of ``n_t`` valid lanes along AXIS (masked lanes 0: :func:`chunk_stats` sums
    them) to (mean, M2, count) statistics: its corrected two-pass statistics, merged by Chan's formula."""
    mean_t, corr_t, m2_t = chunk_stats(x, mask, AXIS, n_t)
    return chan_fn(mean, m2, cnt, mean_t + corr_t, m2_t, n_t)


@triton.jit
def shifted_chunk(x_row, n0, lead, N, row_ok, s_xn, shift, ACC: tl.constexpr, ALIGN: tl.constexpr,
                  BLOCK_N: tl.constexpr, EVICT: tl.constexpr, SHIFT: tl.constexpr):
    """A partial chunk of a statistics loop over shifted rows (:func:`aligned_rows`): tile columns
    [n0, n0 + BLOCK_N) in ACC (SHIFT: less each row's ``shift``), lanes outside each row 0 (as :func:`chunk_stats`
    wants them), the element mask, and each row's count of elements in the chunk (0 for a row that ends before it:
    see :func:`join_rows`)."""
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
    mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
    x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=lmask, other=0, eviction_policy=EVICT).to(ACC)
    if SHIFT:
        x = x - shift[:, None]
    x = tl.where(mask, x, 0.0)  # (lanes of the neighbouring rows, read with the row's 16-byte chunks)
    n = tl.maximum(tl.minimum(lead + N, n0 + BLOCK_N) - tl.maximum(lead, n0), 0).to(ACC)
    return x, mask, n


@triton.jit
def shifted_row_stats(x_row, lead, N, row_ok, s_xn, shift, ACC: tl.constexpr, ALIGN: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr, SHIFT: tl.constexpr):
    """(mean, M2, count) of shifted rows (odd widths: tiles from the 16-byte boundary below each row start
    ``lead`` lanes before it, :func:`aligned_rows`), in 16-byte vector loads throughout; SHIFT: of x less each
    row's ``shift`` (layer_norm's loop), else of raw x (var/std's).

    Tile chunk 0 holds the shift's lanes: its corrected two-pass statistics first. Chunks 1 to N // BLOCK_N - 1
    lie inside every row: per-lane Welford (1962) with no element mask (a mask and a select per element cost the
    shifted loops of the plain reductions ~60 points: ``reduce._masked_chunk``). The one or two chunks after
    them hold the rows' ends: joined one by one (Chan et al. 1979), as the head."""
    x, mask, n_h = shifted_chunk(x_row, 0, lead, N, row_ok, s_xn, shift, ACC, ALIGN, BLOCK_N, EVICT, SHIFT)
    mean_h, corr_h, m2_h = chunk_stats(x, mask, 1, n_h)
    mean_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    m2_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    inner = tl.maximum(N // BLOCK_N, 1)
    for i in range(1, inner):
        cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
        x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=row_ok[:, None], other=0,
                    eviction_policy=EVICT).to(ACC)
        if SHIFT:
            x = x - shift[:, None]
        mean_l, m2_l = welford_step(mean_l, m2_l, x, div_exact(1.0, i, ACC))
    mean, m2, cnt = merge_lanes(mean_l, m2_l, inner - 1, 1)
    mean, m2, cnt = chan_fn(mean, m2, cnt, mean_h + corr_h, m2_h, n_h)
    for k in range(inner, tl.cdiv(N + ALIGN - 1, BLOCK_N)):
        x, mask, n_t = shifted_chunk(x_row, k * BLOCK_N, lead, N, row_ok, s_xn, shift, ACC, ALIGN, BLOCK_N, EVICT,
                                     SHIFT)
        mean, m2, cnt = join_rows(mean, m2, cnt, x, mask, n_t)
    return mean, m2, cnt


@triton.jit
def join_rows(mean, m2, cnt, x, mask, n_t):
    """:func:`join_chunk` along axis 1 for chunks that may hold no element of some rows (``n_t`` 0: those rows'
    statistics are kept as they are; a chunk mean of 0 / 0 would turn them NaN)."""
    mean_t, corr_t, m2_t = chunk_stats(x, mask, 1, tl.maximum(n_t, 1.0))
    mean_j, m2_j, cnt_j = chan_fn(mean, m2, cnt, mean_t + corr_t, m2_t, n_t)
    some = n_t > 0
    return tl.where(some, mean_j, mean), tl.where(some, m2_j, m2), tl.where(some, cnt_j, cnt)


@triton.jit
def add_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def tile_stats(x, mask, n, LANES: tl.constexpr = 1):
    """(mean, M2, sum) over axis 0 of a tile of ``n`` valid lanes, 1-D or [lanes, channels]: the corrected
    two-pass of :func:`chunk_stats` (whose centering needs a 2-D tile), for the split-rows kernels' 1-D tiles.
    LANES > 1: the first mean sums values scaled by 1 / LANES (a power of two: exact), so that values near the
    top of the float range keep a finite mean; ``sum`` is then that scaled sum times LANES."""
    if LANES > 1:
        scaled = tl.sum(x * (1.0 / LANES), 0)
        mean = div_exact(scaled, n * (1.0 / LANES), x.dtype)
        total = scaled * LANES
    else:
        total = tl.sum(x, 0)
        mean = div_exact(total, n, x.dtype)
    d = tl.where(mask, x - mean, 0.0)
    c, ss = tl.reduce((d, d * d), 0, add_pair)
    corr = div_exact(c, n, x.dtype)
    return mean + corr, ss - c * corr, total


@triton.jit
def chunk_stats(x, mask, axis: tl.constexpr, n, EVEN: tl.constexpr = False, CORRECT: tl.constexpr = True):
    """(mean, correction, M2) of the ``n`` valid lanes of a tile along ``axis``: the corrected two-pass algorithm.

    The first mean carries the rounding of a sum of large values (rows far from 0); the deviations' own sum
    ``c`` corrects it: mean += c / n and M2 = sum(d^2) - c^2 / n (Chan, Golub & LeVeque 1983). The tile is in
    registers, so the extra reduction reads no memory. ``n`` (> 0) is given: counting the mask would cost a
    fourth reduction. The mean is returned in two parts, ``mean + correction``: ``(x - mean) - correction``
    centers a value more exactly than ``x - (mean + correction)`` rounded to the dtype (rows with a mean far
    larger than their spread).

    EVEN: every lane is valid (a whole row per tile; lanes of rows past the end are never stored), so no select per
    element. A program whose tile fills its SM cannot hide its arithmetic between its load and its store.

    CORRECT=False (var/std of bfloat16 tiles): the plain two-pass, correction 0. A mean off by e adds n * e^2 to
    M2: relative error (e / spread)^2. bfloat16 bounds it: a row whose spread is small against its mean holds few
    distinct values (elements within 2^-8 of each other are neighbours), their float32 sum is exact (n <= 2^16)
    and e is the division's one rounding, e <= 2^-24 |mean| <= 2^-16 sqrt(n) spread: M2 within 4e-6 for
    16384-wide rows. One add per element and one reduction less: the single passes of bfloat16 rows are
    instruction-bound (var of 262144x256: ~8 instructions per element against sum's ~2). Not for layer_norm: e
    moves every output by e / spread, up to 40 bfloat16 ulps of the outputs near the mean (found by an adversarial
    review); nor float16 (sums exact for fewer elements) and wider types. (Correcting the mean per row instead, by
    the exact float64 residual total - n * mean, cost 5-6 points: measured on the H200, dropped.)
    """
    n_safe = n
    mean = div_exact(tl.sum(x, axis), n_safe, x.dtype)
    if EVEN:
        if axis == 0:
            d = x - mean[None, :]
        else:
            d = x - mean[:, None]
    elif axis == 0:
        d = tl.where(mask, x - mean[None, :], 0.0)
    else:
        d = tl.where(mask, x - mean[:, None], 0.0)
    if CORRECT:
        c, ss = tl.reduce((d, d * d), axis, add_pair)  # one cross-warp exchange for both sums
        corr = div_exact(c, n_safe, x.dtype)
        m2 = ss - c * corr
    else:
        m2 = tl.sum(d * d, axis)
        corr = tl.zeros_like(mean)  # (a constant: the callers' "+ corr" folds away)
    return mean, corr, m2


@triton.jit
def short_rows_tile(x_row, N, row_ok, s_xn, ACC: tl.constexpr, BLOCK_N: tl.constexpr, COLS: tl.constexpr,
                    EVEN: tl.constexpr, EVICT: tl.constexpr):
    """Rows ``x_row`` (``[BLOCK_M]`` pointers) of ``N`` elements as a ``[BLOCK_M, BLOCK_N // COLS, COLS]`` tile in
    ACC (lanes past N are 0): a row's COLS neighbouring columns across COLS / vector threads, its other column
    groups in those threads' registers (``threads_per_row`` of the config). Returns (tile, tile columns, mask).

    Why: Triton lays a [BLOCK_M, BLOCK_N] tile of short rows with a warp across each row (the contiguous axis),
    so every row's sums take five shuffle levels for 8 elements a thread, and the per-row divisions are computed
    by all 32 threads of each of a program's rows. bfloat16 var of 262144x256: 16.5 SASS instructions per element
    (sm_90a, offline) against 8.5 with 8 threads a row, 70 -> 85 % of the H200's copy bandwidth; layer_norm 944
    -> 640 instructions per program of 32 elements a thread (tools/s25_probe.py). The rows' axis comes first so
    that the compiler, which sees no stride between rows, spreads rows over threads and keeps the column groups in
    registers; the sums then reduce the register axis before the threads' (:func:`short_rows_stats`).
    """
    cols = tl.arange(0, BLOCK_N // COLS)[None, :, None] * COLS + tl.arange(0, COLS)[None, None, :]
    if EVEN:
        mask = row_ok[:, None, None]
    else:
        mask = row_ok[:, None, None] & (cols < N)
    x = tl.load(x_row[:, None, None] + cols.to(tl.int64) * s_xn, mask=mask, other=0,
                eviction_policy=EVICT).to(ACC)
    return x, cols, mask


@triton.jit
def short_rows_stats(x, mask, n, ACC: tl.constexpr, EVEN: tl.constexpr, CORRECT: tl.constexpr):
    """(mean, correction, M2) of the rows of a :func:`short_rows_tile` tile of ``n`` valid lanes each: the corrected
    (or, CORRECT=False, plain) two-pass of :func:`chunk_stats`, each sum over the register axis first (no shuffle),
    then across the row's few threads."""
    mean = div_exact(tl.sum(tl.sum(x, 1), 1), n, ACC)
    d = x - mean[:, None, None]
    if not EVEN:
        d = tl.where(mask, d, 0.0)
    if CORRECT:
        c1, ss1 = tl.reduce((d, d * d), 1, add_pair)
        c, ss = tl.reduce((c1, ss1), 1, add_pair)
        corr = div_exact(c, n, ACC)
        m2 = ss - c * corr
    else:
        m2 = tl.sum(tl.sum(d * d, 1), 1)
        corr = tl.zeros_like(mean)
    return mean, corr, m2


@triton.jit
def single_tile(x_row, cols, lead, N, row_ok, s_xn, ACC: tl.constexpr, ALIGN: tl.constexpr, EVICT: tl.constexpr):
    """A statistics single pass's tile of the rows at tile columns ``cols`` (the row's BLOCK_N lanes, or its TAIL),
    in ACC with lanes outside each row 0 (as :func:`chunk_stats` and :func:`tiles_stats` want them), and its
    (element mask, load mask) (:func:`row_masks`)."""
    mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=lmask, other=0,
                eviction_policy=EVICT).to(ACC)
    if ALIGN > 0:
        x = tl.where(mask, x, 0.0)  # lanes of the neighbouring rows, read with the row's 16-byte chunks
    return x, mask, lmask


@triton.jit
def tiles_stats(x, mask, x_t, mask_t, n, CORRECT: tl.constexpr = True):
    """:func:`chunk_stats` along axis 1 of rows held in two tiles: a single pass's BLOCK_N lanes ``x`` and its
    TAIL lanes ``x_t`` (``BLOCK_TAIL``: rows just past a power of two), masked lanes 0 in both. The same corrected
    two-pass, each sum taken over both tiles."""
    mean = div_exact(tl.sum(x, 1) + tl.sum(x_t, 1), n, x.dtype)
    d = tl.where(mask, x - mean[:, None], 0.0)
    d_t = tl.where(mask_t, x_t - mean[:, None], 0.0)
    if CORRECT:
        c, ss = tl.reduce((d, d * d), 1, add_pair)
        c_t, ss_t = tl.reduce((d_t, d_t * d_t), 1, add_pair)
        c = c + c_t
        corr = div_exact(c, n, x.dtype)
        m2 = (ss + ss_t) - c * corr
    else:
        m2 = tl.sum(d * d, 1) + tl.sum(d_t * d_t, 1)
        corr = tl.zeros_like(mean)
    return mean, corr, m2
