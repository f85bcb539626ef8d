"""var/std kernels: rows (single pass, Welford loop, split slices, two reduced axes), columns, and the merge.

``single_pass``: the row is one register tile, reduced by the corrected two-pass algorithm (exact for rows far
from 0; bfloat16 rows by the plain two-pass, whose error their 8-bit significand bounds:
``kernels.welford.chunk_stats``); short rows may each be spread over a few threads (``threads_per_row``:
``kernels.welford.short_rows_stats``). ``multi_pass``/``split``: each lane of the [BLOCK_M, BLOCK_N] tile runs
Welford's (1962) update over the chunks, and the lanes are merged once at the end with the parallel formula of
Chan, Golub & LeVeque (1979). Split partials (mean, M2) are merged in a fixed order by ``_stats_combine_kernel``
(deterministic); their counts are recomputed from the split geometry rather than stored.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact, sqrt_exact
from ...kernels.rows import (
    aligned_rows,
    col_block,
    load_loop,
    restate_multiple,
    row_block,
    slice_as_row,
    wait_for_previous_launch,
)
from ...kernels.welford import (
    chan_fn,
    chunk_stats,
    join_chunk,
    merge_lanes,
    reported_mean,
    shifted_row_stats,
    short_rows_stats,
    short_rows_tile,
    single_tile,
    stats_shift,
    tiles_stats,
    welford_step,
)


@triton.jit
def _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, offs, mask, STD: tl.constexpr, WANT_MEAN: tl.constexpr):
    """var = M2 / max(N - correction, 0) (inf or NaN when that is 0, as torch), std = sqrt(var)."""
    var = div_exact(m2, divisor, m2.dtype)
    if STD:
        var = sqrt_exact(var, m2.dtype)
    tl.store(out_ptr + offs, var, mask=mask)
    if WANT_MEAN:
        # torch's Welford mean turns NaN as soon as an infinity meets any other element (inf - inf); ours is
        # a sum, which stays infinite: follow torch.
        mean = tl.where((var != var) & ((mean == float("inf")) | (mean == float("-inf"))) & (cnt > 1),
                        float("nan"), mean)
        tl.store(mean_ptr + offs, mean, mask=mask)


@triton.jit
def _stats_rows_kernel(x_ptr, out_ptr, mean_ptr, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                       divisor, divisor_lo,
                       ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr, SPLIT: tl.constexpr,
                       SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       PERSIST: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = 1, ALIGN: tl.constexpr = 0,
                       EVICT_LOOP: tl.constexpr = False, EVEN: tl.constexpr = False, PARTIAL: tl.constexpr = False,
                       DIV: tl.constexpr = 1, UNROLL: tl.constexpr = 0, TAIL: tl.constexpr = 0,
                       COLS: tl.constexpr = 0):
    """Rows of the reduced axis; PERSIST > 0: a persistent grid looping over row blocks (not with SPLIT);
    EVICT_LOOP: the evict-first hint on the loop's loads (2-byte dtypes, :func:`load_loop`); EVEN (single pass,
    unshifted): N == BLOCK_N, every lane of a row is one of its elements. PARTIAL (not with SPLIT): each row's
    (mean, M2) is stored at its row index for the combine kernel instead of finished (two reduced axes). DIV: N
    and the row stride are multiples of DIV. UNROLL (loop, no split): rows of exactly UNROLL full chunks, the
    loop unrolled (``runtime.unrolled_chunks``). TAIL (single pass): the row's lanes past BLOCK_N in a second
    tile of TAIL lanes (``BLOCK_TAIL``). COLS (single pass, unshifted, no tail): each row's COLS neighbouring columns
    across a few threads, its other columns in their registers (``threads_per_row``, :func:`short_rows_stats`)."""
    N = restate_multiple(N, DIV)
    s_xm = restate_multiple(s_xm, DIV)
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _stats_rows_block(x_ptr, out_ptr, mean_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                              divisor, divisor_lo, ACC, STD, WANT_MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N, ALIGN,
                              EVICT_LOOP, EVEN, PARTIAL, UNROLL, TAIL, COLS)
    else:
        _stats_rows_block(x_ptr, out_ptr, mean_ptr, tl.program_id(0), R, N, K, s_xm, s_xn, s_xk, s_om, s_ok,
                          n_per_split, divisor, divisor_lo, ACC, STD, WANT_MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N,
                          ALIGN, EVICT_LOOP, EVEN, PARTIAL, UNROLL, TAIL, COLS)


@triton.jit
def _stats_rows_block(x_ptr, out_ptr, mean_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                      divisor, divisor_lo,
                      ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr, SPLIT: tl.constexpr,
                      SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr,
                      EVICT_LOOP: tl.constexpr, EVEN: tl.constexpr, PARTIAL: tl.constexpr, UNROLL: tl.constexpr,
                      TAIL: tl.constexpr = 0, COLS: tl.constexpr = 0):
    rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
    x_off = m * s_xm + k * s_xk
    # odd widths (ALIGN): tiles start at the 16-byte boundary below each row; a split's slice (whole chunks long
    # but the last) is shifted as a row of its own, n_row long
    n_row = N
    if SPLIT > 1 and ALIGN > 0:
        x_off, n_row, _ = slice_as_row(x_off, N, n_per_split)
    x_off, lead = aligned_rows(x_off, ALIGN)
    x_row = x_ptr + x_off
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    if SINGLE and COLS > 0:  # short rows, each over a few threads (threads_per_row)
        cnt = tl.full([BLOCK_M], N, ACC)
        x, _, mask = short_rows_tile(x_row, N, row_ok, s_xn, ACC, BLOCK_N, COLS, EVEN, "evict_first")
        mean, corr, m2 = short_rows_stats(x, mask, cnt, ACC, EVEN, x_ptr.dtype.element_ty != tl.bfloat16)
        mean = reported_mean(mean, corr, m2, cnt)
    elif SINGLE:  # the row is one register tile: exact corrected two-pass
        lead32 = lead.to(tl.int32)  # (int32 compares: see row_masks)
        x, mask, _ = single_tile(x_row, tl.arange(0, BLOCK_N), lead32, N, row_ok, s_xn, ACC, ALIGN, "evict_first")
        cnt = tl.full([BLOCK_M], N, ACC)
        if TAIL > 0:  # the row's lanes past BLOCK_N in a second tile (rows just past a power of two)
            x_t, mask_t, _ = single_tile(x_row, BLOCK_N + tl.arange(0, TAIL), lead32, N, row_ok, s_xn, ACC, ALIGN,
                                         "evict_first")
            mean, corr, m2 = tiles_stats(x, mask, x_t, mask_t, cnt, CORRECT=x_ptr.dtype.element_ty != tl.bfloat16)
        else:
            mean, corr, m2 = chunk_stats(x, mask, 1, cnt, EVEN, CORRECT=x_ptr.dtype.element_ty != tl.bfloat16)
        mean = reported_mean(mean, corr, m2, cnt)  # (a lone +-inf stays the mean: inf - inf = NaN)
    else:  # per-lane Welford over the full chunks, lanes merged once, then the partial last chunk
        mean_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        m2_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        if ALIGN > 0:  # shifted rows or slices (BLOCK_N >= ALIGN): only the first and last chunks are masked
            mean, m2, cnt = shifted_row_stats(x_row, lead, n_row, row_ok, s_xn, None, ACC, ALIGN, BLOCK_M, BLOCK_N,
                                              "evict_first" if EVICT_LOOP else "", False)
        elif UNROLL > 0:  # N == UNROLL * BLOCK_N (no split), unrolled: all of the row's loads in flight at once
            n_full = UNROLL
            for i in tl.static_range(UNROLL):
                cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)  # (the type of the tail's columns)
                x = load_loop(x_row[:, None] + cols[None, :] * s_xn, row_ok[:, None], EVICT_LOOP).to(ACC)
                mean_l, m2_l = welford_step(mean_l, m2_l, x, 1.0 / (i + 1))  # (constant: rounded at compile time)
        else:
            n_full = (n_hi - n_lo) // BLOCK_N
            for i in range(0, n_full):
                cols = n_lo + i * BLOCK_N + tl.arange(0, BLOCK_N)
                x = load_loop(x_row[:, None] + cols[None, :] * s_xn, row_ok[:, None], EVICT_LOOP).to(ACC)
                mean_l, m2_l = welford_step(mean_l, m2_l, x, div_exact(1.0, i + 1, ACC))
        if ALIGN == 0:
            # Raw lane means merged, unlike layer_norm's loop (lanes on x less the row's first element): shifting
            # every element cost 2-8 points on the H200, and the first element as the shift of the merge only costs
            # rows whose first element is far from their mean (1e4 among randn: the mean off by ulp(1e4)); raw, a
            # row at 1000 +- 1 keeps its mean within ~7 roundings and its variance within ~ulp(offset) / spread
            # (docs/semantics.md).
            mean, m2, cnt = merge_lanes(mean_l, m2_l, n_full, 1)
            t0 = n_lo + n_full * BLOCK_N
            if t0 < n_hi:
                cols = t0 + tl.arange(0, BLOCK_N)
                mask = row_ok[:, None] & (cols < n_hi)[None, :]
                x = load_loop(x_row[:, None] + cols[None, :] * s_xn, mask, EVICT_LOOP).to(ACC)
                mean, m2, cnt = join_chunk(mean, m2, cnt, x, mask, tl.zeros([BLOCK_M], ACC) + (n_hi - t0), 1)
    if PARTIAL:  # row r = (m, k) at r: output k's partials at k, k + K, ... (the combine kernel's partial strides)
        tl.store(out_ptr + rows, m2, mask=row_ok)
        tl.store(mean_ptr + rows, mean, mask=row_ok)
    elif SPLIT > 1:
        offs = rows * SPLIT + tl.program_id(1)
        tl.store(out_ptr + offs, m2, mask=row_ok)
        tl.store(mean_ptr + offs, mean, mask=row_ok)
    else:
        divisor = tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC)  # float64 scalars arrive as two float32 parts
        _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, m * s_om + k * s_ok, row_ok, STD, WANT_MEAN)


@triton.jit
def _stats_cols_kernel(x_ptr, out_ptr, mean_ptr, M, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                       divisor, divisor_lo, shift_ptr,
                       ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr, SPLIT: tl.constexpr,
                       SINGLE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV: tl.constexpr = 1,
                       SHIFT: tl.constexpr = False):
    """Columns: BLOCK_K adjacent k of one m over N (split slices or whole). DIV: K and the m and n strides are
    multiples of DIV.

    SHIFT (the loop; float32 inputs): the statistics of x less the mean of the column's first chunk (its first
    BLOCK_N elements) where that chunk sits farther from 0 than its spread, added back to the mean once: here, or
    by the combine kernel (split partial means are stored shifted; slice 0 stores the shift to ``shift_ptr``).
    Each Welford step rounds a lane's mean at the scale of the data's mean, and split slices' means merge at that
    scale: raw, 16384x4096 dim=0 at 100 sigma from zero had 2.29e-7 relative error on an H100, eager 1.93e-7
    (plain inputs 6.4e-8); interpreter, 8192x64 at 100 sigma: 2.9e-7 -> 7.7e-8 (split), 5.9e-7 -> 1.2e-7 (loop).
    Shifted values round at the scale of their distance to the shift: the first element as the shift, 1e4 among
    randn, put ulp(1e4) on each of them (the variance off by ~1e-5), and that chunk's mean (~600) the mean off by
    ulp(600). One subtraction an element and one chunk read twice (from L2): on an H100, 1-2 points of copy on
    sweeps of 64 chunks, 6 on a sweep of 8 (the launch shifts sweeps of 32 chunks or more, ``SHIFT_SWEEP``); float32
    rows lost 8 points on the H200 (var_mean 1024x131072: 94.6 -> 86.2 %), so the rows' loop keeps raw lanes (float32
    rows at an offset: 1.18e-7 against eager's 1.25e-7)."""
    K = restate_multiple(K, DIV)
    s_xm, s_xn = restate_multiple(s_xm, DIV), restate_multiple(s_xn, DIV)
    s_om = restate_multiple(s_om, DIV)
    m, ks, k_ok = col_block(K, BLOCK_K)
    x_col = x_ptr + m * s_xm + ks * s_xk
    shift = tl.zeros([BLOCK_K], ACC)
    if SHIFT:
        rows0 = tl.arange(0, BLOCK_N)  # (names of their own: the loop's ns is int64)
        mask0 = (rows0 < N)[:, None] & k_ok[None, :]
        x0 = tl.load(x_col[None, :] + rows0[:, None].to(tl.int64) * s_xn, mask=mask0, other=0).to(ACC)
        n0 = tl.minimum(N, BLOCK_N)
        shift, _, m2_0 = chunk_stats(x0, mask0, 0, n0, CORRECT=False)  # (the plain two-pass: a shift needs no more)
        # only where the chunk sits farther from 0 than its spread (|mean| sqrt(n) > sqrt(M2)): nearer, raw lanes
        # round no coarser than the spread, and a chunk of randn holding one 1e4 would shift the rest by ~600
        shift = stats_shift(tl.where(tl.abs(shift) * tl.sqrt(n0.to(ACC)) > tl.sqrt(m2_0), shift, 0.0))
        if SPLIT > 1:  # noqa: SIM102 (a constexpr test beside a runtime one)
            if tl.program_id(1) == 0:
                tl.store(shift_ptr + m * K + ks, shift, mask=k_ok)
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    if SINGLE:
        ns = tl.arange(0, BLOCK_N)
        mask = (ns < N)[:, None] & k_ok[None, :]
        x = tl.load(x_col[None, :] + ns[:, None].to(tl.int64) * s_xn, mask=mask, other=0,
                    eviction_policy="evict_first").to(ACC)
        cnt = tl.full([BLOCK_K], N, ACC)
        mean, corr, m2 = chunk_stats(x, mask, 0, cnt)
        mean = reported_mean(mean, corr, m2, cnt)
    else:  # as the rows kernel: Welford over full chunks, then the partial last chunk
        mean_l = tl.zeros([BLOCK_N, BLOCK_K], ACC)
        m2_l = tl.zeros([BLOCK_N, BLOCK_K], ACC)
        n_full = (n_hi - n_lo) // BLOCK_N
        for i in range(0, n_full):
            ns = n_lo + i * BLOCK_N + tl.arange(0, BLOCK_N)
            x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=k_ok[None, :], other=0,
                        eviction_policy="evict_first").to(ACC)
            if SHIFT:
                x = x - shift[None, :]
            mean_l, m2_l = welford_step(mean_l, m2_l, x, div_exact(1.0, i + 1, ACC))
        mean, m2, cnt = merge_lanes(mean_l, m2_l, n_full, 0)  # (raw, as the rows')
        t0 = n_lo + n_full * BLOCK_N
        if t0 < n_hi:
            ns = t0 + tl.arange(0, BLOCK_N)
            mask = (ns < n_hi)[:, None] & k_ok[None, :]
            x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=mask, other=0, eviction_policy="evict_first").to(ACC)
            if SHIFT:
                x = tl.where(mask, x - shift[None, :], 0.0)  # (masked lanes hold 0: chunk_stats sums them)
            mean, m2, cnt = join_chunk(mean, m2, cnt, x, mask, tl.zeros([BLOCK_K], ACC) + (n_hi - t0), 0)
    if SPLIT > 1:
        offs = (m * K + ks) * SPLIT + tl.program_id(1)
        tl.store(out_ptr + offs, m2, mask=k_ok)
        tl.store(mean_ptr + offs, mean, mask=k_ok)
    else:
        divisor = tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC)
        if SHIFT:
            mean = mean + shift
        _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, m * s_om + ks * s_ok, k_ok, STD, WANT_MEAN)


@triton.jit
def _stats_combine_kernel(pm2_ptr, pmean_ptr, out_ptr, mean_ptr, R, N, K, n_per_split, s_om, s_ok,
                          divisor, divisor_lo, n_split, s_prow, s_pslice, shift_ptr,
                          ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, WAIT: tl.constexpr = False,
                          SHIFT: tl.constexpr = False):
    """Merge the n_split partial (mean, M2) of each output (output r's slice s at r * s_prow + s * s_pslice);
    slice s holds clamp(N - s*n_per_split) elements. n_split is a runtime argument (the batch size of two reduced
    axes: no compile per batch size). WAIT: a dependent launch (``runtime.dependent_launch``). SHIFT: the partial
    means are of x less output r's ``shift_ptr[r]`` (the columns kernel's SHIFT), added back once after the
    merge."""
    wait_for_previous_launch(WAIT)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < R
    s = tl.arange(0, BLOCK_S)
    mask = row_ok[:, None] & (s < n_split)[None, :]
    offs = rows[:, None] * s_prow + s[None, :].to(tl.int64) * s_pslice
    p_mean = tl.load(pmean_ptr + offs, mask=mask, other=0)
    p_m2 = tl.load(pm2_ptr + offs, mask=mask, other=0)
    p_n = tl.minimum(tl.maximum(N - s.to(tl.int64) * n_per_split, 0), n_per_split).to(ACC)
    p_n = tl.where(mask, p_n[None, :], 0)
    mean, m2, cnt = tl.reduce((p_mean, p_m2, p_n), 1, chan_fn)
    if SHIFT:
        mean += tl.load(shift_ptr + rows, mask=row_ok, other=0)
    divisor = tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC)
    _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, (rows // K) * s_om + (rows % K) * s_ok, row_ok, STD,
            WANT_MEAN)
