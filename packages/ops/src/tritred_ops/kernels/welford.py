"""Statistics building blocks: Welford lanes, Chan's merge, the corrected two-pass of a tile.

var/std, layer_norm and batch_norm keep (mean, M2, count) statistics: per lane over a loop's chunks
(:func:`welford_step`), merged once (:func:`merge_lanes`, :func:`chan_fn`), or of a whole tile in registers by
the corrected two-pass algorithm (:func:`chunk_stats`). E[x^2] - E[x]^2 is never formed, so rows with a large
mean keep their precision.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .combine import div_exact
from .rows import row_masks


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
    """Sum combine of two pairs (one ``tl.reduce`` for two sums)."""
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
        # (ss overflowed: c * corr, at most ss in exact arithmetic, may overflow too; inf - inf would be NaN)
        m2 = tl.where(ss == float("inf"), ss, ss - c * corr)
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
    -> 640 instructions per program of 32 elements a thread. The rows' axis comes first so
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
def reported_mean(mean, corr, m2, n):
    """The mean a single pass reports: the corrected two-pass ``mean + corr`` where the mean is far from zero
    against the spread (|mean| > sigma / 5, sigma^2 = M2 / n), else the plain ``sum / n``.

    Why: each ``x - mean`` rounds to the grid of x, and subtracting the same mean from every element rounds the
    same way across a binade, so the deviations' sum ``c`` carries a bias that grows as n u sigma, not sqrt(n). For
    a mean near zero that bias is larger than the plain sum's own error: float32 var_mean's mean of 4096x16384
    randn rows reached 1.08e-6 relative error on an H100 against 1.05e-7 for ``mean`` (eager 1.42e-7). An
    emulation of the GPU's summation order puts the crossover at |mean| ~ sigma / 5 for rows of 1024-16384 (plain
    better below, corrected better above; rows far from zero keep the correction's gain, 3.7e-8 -> 2.2e-8). Per-row
    arithmetic only. Compared as |mean| sqrt(n) > sqrt(M2) / 5, so that squares neither underflow (rows of 1e-30: M2
    0, the correction kept) nor overflow; an overflowed M2 keeps the correction too (rows of 1e30 +- 1e23). A NaN
    ``corr`` (a lone infinity: inf - inf) keeps the sum's mean, as before; ``+ 0.0`` makes a row of -0.0 report +0.0,
    as the corrected mean and torch's Welford mean do (found by an adversarial review)."""
    far = (tl.abs(mean) * tl.sqrt(n) > 0.2 * tl.sqrt(m2)) | (m2 == float("inf"))
    return tl.where((corr == corr) & far, mean + corr, mean + 0.0)


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
