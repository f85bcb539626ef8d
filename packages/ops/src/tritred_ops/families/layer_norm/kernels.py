"""layer_norm kernels: the row kernel (single pass or two sweeps), split rows, and shifted weight copies.

``single_pass``: the row stays in registers; mean, then the sum of squared deviations (the corrected two-pass,
exact), then
``y = (x - mean) * rstd * weight + bias`` with ``rstd = 1 / sqrt(var + eps)`` (biased variance, eps inside the
square root, as torch); short rows (``threads_per_row``) are held with each row over a few threads, the rest of
it in their registers, weight and bias loaded beside it. ``multi_pass``: a first sweep keeps per-lane Welford
(1962) statistics merged once (Chan et al. 1979), a second sweep normalizes and writes (the row's second read
usually hits L2).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact, sqrt_exact
from ...kernels.rows import (
    aligned_rows,
    edge_cols,
    group_barrier,
    inner_mask,
    restate_multiple,
    row_block,
    row_masks,
    shifted_out,
)
from ...kernels.welford import (
    chan_fn,
    chunk_stats,
    join_chunk,
    merge_lanes,
    shifted_row_stats,
    short_rows_stats,
    short_rows_tile,
    single_tile,
    stats_shift,
    tile_stats,
    tiles_stats,
    welford_step,
)


@triton.jit
def _affine(y, w_ptr, b_ptr, pos, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr):
    """y * weight[pos] + bias[pos] for a tile whose lanes read the weight and bias at ``pos`` (shifted tiles:
    the shifted copies of :func:`_shift_affine_kernel`, ``pos`` = tile column + the row's shift x ``s_wl``)."""
    if HAS_W:
        y = y * tl.load(w_ptr + pos, mask=mask, other=0).to(ACC)
    if HAS_B:
        y = y + tl.load(b_ptr + pos, mask=mask, other=0).to(ACC)
    return y


@triton.jit
def _affine_load(ptr, cols, N, EVEN: tl.constexpr):
    """weight or bias at tile columns ``cols`` (no mask where every lane is in the row, EVEN)."""
    if EVEN:
        v = tl.load(ptr + cols)
    else:
        v = tl.load(ptr + cols, mask=cols < N, other=0)
    return v


@triton.jit
def _shift_affine_kernel(w_ptr, b_ptr, w_sh_ptr, b_sh_ptr, N, s_wl, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                         BLOCK: tl.constexpr):
    """Copy ``l`` of weight and bias shifted by ``l`` lanes: ``w_sh[l, j] = weight[j - l]`` (0 outside the row),
    ``l`` = program_id(1) < ALIGN, ``j`` < ``s_wl`` (a multiple of 16).

    Shifted tiles (odd widths, ``kernels.rows.aligned_rows``) hold row element ``j - lead`` at tile column ``j``, so
    the weight a row needs starts ``lead`` elements before a 16-byte boundary: read from ``weight`` directly it
    takes one load per element (as many instructions as the row's own loads saved). Copy ``lead`` at column ``j``
    is aligned with the tile: 16-byte loads. ALIGN x (N + 2 ALIGN) elements of each, written per call (weights
    change between calls): ~1.6 MB for bfloat16 rows of 50257, a few microseconds."""
    j = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    shift = tl.program_id(1).to(tl.int64)  # (shift * s_wl: int64, rows past 2^31 / ALIGN elements)
    src = j - shift
    ok = (src >= 0) & (src < N)
    at = shift * s_wl + j
    if HAS_W:
        tl.store(w_sh_ptr + at, tl.load(w_ptr + src, mask=ok, other=0), mask=j < s_wl)
    if HAS_B:
        tl.store(b_sh_ptr + at, tl.load(b_ptr + src, mask=ok, other=0), mask=j < s_wl)


@triton.jit
def _store_edges(x_row, y_row, w_ptr, b_ptr, lead, N, row_ok, mean0, corr, rstd, s_wl, HAS_W: tl.constexpr,
                 HAS_B: tl.constexpr, ACC: tl.constexpr, ALIGN: tl.constexpr):
    """Output of the row elements outside whole 16-byte chunks (shifted tiles with vector stores, ALIGN_Y),
    recomputed from a reload with the row's statistics: the same arithmetic as the chunks' own."""
    c, ok = edge_cols(lead, N, row_ok, ALIGN)
    x = tl.load(x_row[:, None] + c, mask=ok, other=0).to(ACC)
    y = ((x - mean0[:, None]) - corr[:, None]) * rstd[:, None]
    y = _affine(y, w_ptr, b_ptr, c + (lead.to(tl.int64) * s_wl)[:, None], ok, HAS_W, HAS_B, ACC)
    tl.store(y_row[:, None] + c, y, mask=ok)


@triton.jit
def _single_out(x, cols, mask, lmask, y_row, w_ptr, b_ptr, lead, N, row_ok, s_yn, s_wl, mean0, corr, rstd,
                HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr, ALIGN: tl.constexpr,
                ALIGN_Y: tl.constexpr):
    """Normalize and store one tile of a single pass (the row's BLOCK_N lanes, or its TAIL) at tile columns
    ``cols``. ALIGN: weight and bias from the row's shifted copies (lane j holds element j - lead of each);
    ALIGN_Y: the tile's whole 16-byte chunks only, in vector stores (the caller writes the partial edges)."""
    y = ((x - mean0[:, None]) - corr[:, None]) * rstd[:, None]  # exact centering (see chunk_stats)
    if ALIGN > 0:
        y = _affine(y, w_ptr, b_ptr, cols[None, :] + (lead * s_wl)[:, None], lmask, HAS_W, HAS_B, ACC)
        if ALIGN_Y:
            tl.store(y_row[:, None] + cols[None, :], y, mask=inner_mask(cols, lead.to(tl.int32), N, row_ok, ALIGN))
        else:
            tl.store(y_row[:, None] + cols[None, :].to(tl.int64) * s_yn, y, mask=mask)
    else:
        y = _affine(y, w_ptr, b_ptr, cols[None, :], mask, HAS_W, HAS_B, ACC)
        tl.store(y_row[:, None] + cols[None, :].to(tl.int64) * s_yn, y, mask=mask)


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, R, N, K, s_xm, s_xn, s_xk,
                       s_ym, s_yn, s_yk, eps, eps_lo, s_wl,
                       HAS_W: tl.constexpr, HAS_B: tl.constexpr, STORE_STATS: tl.constexpr, ACC: tl.constexpr,
                       SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       PERSIST: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = 1, ALIGN: tl.constexpr = 0,
                       ALIGN_Y: tl.constexpr = False, EVEN: tl.constexpr = False, EVICT: tl.constexpr = "",
                       PRELOAD_WB: tl.constexpr = False, DIV: tl.constexpr = 1, UNROLL: tl.constexpr = 0,
                       TAIL: tl.constexpr = 0, COLS: tl.constexpr = 0, UNROLL_OUT: tl.constexpr = False):
    """Row blocks of layer_norm; PERSIST > 0: a persistent grid looping over row blocks.

    EVEN (single pass, unshifted): N == BLOCK_N, every lane of a row is one of its elements. EVICT: the L2 hint of
    the single-pass load (:func:`single_load_evict`). PRELOAD_WB (single pass, unshifted): weight and bias are
    loaded with the row (``launch._preload_affine``). DIV: N and the row strides are multiples of DIV
    (``runtime.row_hint``). UNROLL (multi pass): the rows hold exactly UNROLL full chunks, and the first sweep is
    unrolled (``runtime.unrolled_chunks``); UNROLL_OUT: the second sweep too (rows of at most
    ``launch.UNROLL_SECOND`` chunks); the second sweep's whole chunks take no column mask. ALIGN (odd widths,
    single pass or loop): tiles start at the 16-byte boundary below each row; weight and bias are then the shifted
    copies of :func:`_shift_affine_kernel`, copy ``l`` at ``w_ptr + l * s_wl``. TAIL (single pass): the row's lanes
    past BLOCK_N in a second tile of TAIL lanes (``BLOCK_TAIL``: rows just past a power of two). COLS (single pass,
    unshifted, no tail): each row's COLS neighbouring columns across a few threads, its other columns in their
    registers, weight and bias loaded with the row (``threads_per_row``, ``kernels.welford.short_rows_tile``)."""
    N = restate_multiple(N, DIV)
    s_xm, s_ym = restate_multiple(s_xm, DIV), restate_multiple(s_ym, DIV)
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _layer_norm_block(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, blk, R, N, K, s_xm, s_xn, s_xk,
                              s_ym, s_yn, s_yk, eps, eps_lo, s_wl, HAS_W, HAS_B, STORE_STATS, ACC, SINGLE, BLOCK_M,
                              BLOCK_N, ALIGN, ALIGN_Y, EVEN, EVICT, PRELOAD_WB, UNROLL, TAIL, COLS, UNROLL_OUT)
    else:
        _layer_norm_block(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, tl.program_id(0), R, N, K, s_xm, s_xn,
                          s_xk, s_ym, s_yn, s_yk, eps, eps_lo, s_wl, HAS_W, HAS_B, STORE_STATS, ACC, SINGLE, BLOCK_M,
                          BLOCK_N, ALIGN, ALIGN_Y, EVEN, EVICT, PRELOAD_WB, UNROLL, TAIL, COLS, UNROLL_OUT)


@triton.jit
def _layer_norm_block(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, blk, R, N, K, s_xm, s_xn, s_xk,
                      s_ym, s_yn, s_yk, eps, eps_lo, s_wl,
                      HAS_W: tl.constexpr, HAS_B: tl.constexpr, STORE_STATS: tl.constexpr, ACC: tl.constexpr,
                      SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr,
                      ALIGN_Y: tl.constexpr, EVEN: tl.constexpr, EVICT: tl.constexpr,
                      PRELOAD_WB: tl.constexpr, UNROLL: tl.constexpr, TAIL: tl.constexpr,
                      COLS: tl.constexpr = 0, UNROLL_OUT: tl.constexpr = False):
    rows, row_ok, m_idx, k_idx = row_block(blk, R, K, BLOCK_M)
    x_off = m_idx * s_xm + k_idx * s_xk
    y_off = m_idx * s_ym + k_idx * s_yk
    # odd widths (ALIGN): tiles start at the 16-byte boundary below each row
    x_off, lead = aligned_rows(x_off, ALIGN)
    y_off = shifted_out(y_off, lead, ALIGN, ALIGN_Y)
    x_row = x_ptr + x_off
    y_row = y_ptr + y_off
    if SINGLE and COLS > 0:  # short rows, each over a few threads (threads_per_row)
        x, cols, mask = short_rows_tile(x_row, N, row_ok, s_xn, ACC, BLOCK_N, COLS, EVEN, EVICT)
        # weight and bias issued with the row (H200: +1-3 points over loading them after the statistics, bfloat16
        # too, unlike the one-warp tiles' PRELOAD_WB)
        if HAS_W:
            w_row = _affine_load(w_ptr, cols, N, EVEN)
        if HAS_B:
            b_row = _affine_load(b_ptr, cols, N, EVEN)
        mean0, corr, m2 = short_rows_stats(x, mask, tl.full([BLOCK_M], N, ACC), ACC, EVEN, True)
        mean = mean0 + corr
    elif SINGLE:
        cols = tl.arange(0, BLOCK_N)  # shifted rows: int32 for the masks, int64 in the addresses (row_masks)
        if ALIGN == 0:
            cols = cols.to(tl.int64)  # (unshifted: int64 columns, as measured)
        lead32 = lead.to(tl.int32)
        x, mask, lmask = single_tile(x_row, cols, lead32, N, row_ok, s_xn, ACC, ALIGN, EVICT)
        if PRELOAD_WB:  # weight and bias issued with the row (kept in their dtype until used)
            if HAS_W:
                w_row = tl.load(w_ptr + cols, mask=cols < N, other=0)
            if HAS_B:
                b_row = tl.load(b_ptr + cols, mask=cols < N, other=0)
        if TAIL > 0:  # the row's lanes past BLOCK_N in a second tile (rows just past a power of two)
            cols_t = BLOCK_N + tl.arange(0, TAIL)
            if ALIGN == 0:
                cols_t = cols_t.to(tl.int64)
            x_t, mask_t, lmask_t = single_tile(x_row, cols_t, lead32, N, row_ok, s_xn, ACC, ALIGN, EVICT)
            mean0, corr, m2 = tiles_stats(x, mask, x_t, mask_t, tl.full([BLOCK_M], N, ACC))
        else:
            mean0, corr, m2 = chunk_stats(x, mask, 1, tl.full([BLOCK_M], N, ACC), EVEN)
        mean = mean0 + corr
    else:  # per-lane Welford over the full chunks, lanes merged once, then the partial last chunk
        # The first sweep's lines are kept in L2 (evict-last) for the second sweep, whose reads and writes are
        # not read again (evict-first); as the softmax loop (H200: +3-4 points on 131072-wide rows).
        # The lanes run on x - shift, the row's first element (stats_shift), and the shift is added back once to
        # the merged mean. On raw values each Welford update and each Chan merge rounds its mean at the ulp of the
        # values: a row at 1000 +- 1 moved every output by 4e-4 (`tritred check`'s offset case). A first element
        # far from the row's mean costs the stored mean a few ulps of that element, small against the row's
        # spread: the outputs keep torch's error. For one row the shift is a scalar load (a uniform register, no
        # mask: blk < R), as a [BLOCK_M] load held through the loop cost 9 registers (bf16 4096-wide chunks on 16
        # warps: 3 -> 2 programs per SM); issued after the loop its latency per row cost 4 points (H200,
        # 4096x32768 bf16); as it is, within 1.3 points of raw lanes.
        if BLOCK_M == 1:
            r0 = tl.cast(blk, tl.int64)
            shift = tl.zeros([BLOCK_M], ACC) + stats_shift(tl.load(x_ptr + (r0 // K * s_xm + r0 % K * s_xk)).to(ACC))
        else:
            shift = stats_shift(tl.load(x_row + lead, mask=row_ok, other=0).to(ACC))
        mean_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        m2_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        if ALIGN > 0:  # shifted rows: the head and tail chunks masked (as var/std's loop, on x - shift)
            mean, m2, cnt = shifted_row_stats(x_row, lead, N, row_ok, s_xn, shift, ACC, ALIGN, BLOCK_M, BLOCK_N,
                                              "evict_last", True)
        elif UNROLL > 0:  # N // BLOCK_N == UNROLL full chunks, unrolled: all their loads in flight at once
            n_full = UNROLL
            for i in tl.static_range(UNROLL):
                cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
                x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=row_ok[:, None], other=0,
                            eviction_policy="evict_last").to(ACC)
                mean_l, m2_l = welford_step(mean_l, m2_l, x - shift[:, None], 1.0 / (i + 1))  # (a constant)
        else:
            n_full = N // BLOCK_N
            for i in range(0, n_full):
                cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
                x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=row_ok[:, None], other=0,
                            eviction_policy="evict_last").to(ACC)
                mean_l, m2_l = welford_step(mean_l, m2_l, x - shift[:, None], div_exact(1.0, i + 1, ACC))
        if ALIGN == 0:
            mean, m2, cnt = merge_lanes(mean_l, m2_l, n_full, 1)
            t0 = n_full * BLOCK_N
            if t0 < N:
                cols = t0 + tl.arange(0, BLOCK_N).to(tl.int64)
                mask = row_ok[:, None] & (cols < N)[None, :]
                x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0,
                            eviction_policy="evict_last").to(ACC)
                n_t = tl.zeros([BLOCK_M], ACC) + (N - t0)
                mean, m2, cnt = join_chunk(mean, m2, cnt, tl.where(mask, x - shift[:, None], 0.0), mask, n_t, 1)
        # The mean unshifted (one rounding, as torch's): the second sweep centers x on it with one subtraction
        # per element, as before the shift.
        mean = shift + mean
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
    rstd = div_exact(1.0, sqrt_exact(div_exact(m2, N, ACC) + eps, ACC), ACC)  # per row: exact rounding is cheap
    if STORE_STATS:
        tl.store(mean_ptr + rows, mean, mask=row_ok)
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    if SINGLE and COLS > 0:
        y = ((x - mean0[:, None, None]) - corr[:, None, None]) * rstd[:, None, None]  # (see chunk_stats)
        if HAS_W:
            y = y * w_row.to(ACC)
        if HAS_B:
            y = y + b_row.to(ACC)
        tl.store(y_row[:, None, None] + cols.to(tl.int64) * s_yn, y, mask=mask)
    elif SINGLE:
        if ALIGN > 0 or TAIL > 0:  # (with a tail, no preloaded weight and bias: the host gives no PRELOAD_WB)
            _single_out(x, cols, mask, lmask, y_row, w_ptr, b_ptr, lead, N, row_ok, s_yn, s_wl, mean0, corr, rstd,
                        HAS_W, HAS_B, ACC, ALIGN, ALIGN_Y)
            if TAIL > 0:
                _single_out(x_t, cols_t, mask_t, lmask_t, y_row, w_ptr, b_ptr, lead, N, row_ok, s_yn, s_wl, mean0,
                            corr, rstd, HAS_W, HAS_B, ACC, ALIGN, ALIGN_Y)
            if ALIGN_Y:  # the rows' partial edge chunks (the tiles stored their whole 16-byte chunks)
                _store_edges(x_row, y_row, w_ptr, b_ptr, lead32, N, row_ok, mean0, corr, rstd, s_wl, HAS_W, HAS_B,
                             ACC, ALIGN)
        else:
            y = ((x - mean0[:, None]) - corr[:, None]) * rstd[:, None]  # exact centering (see chunk_stats)
            if HAS_W:
                if not PRELOAD_WB:  # loaded now, after the statistics
                    w_row = tl.load(w_ptr + cols, mask=cols < N, other=0)
                y = y * w_row.to(ACC)[None, :]
            if HAS_B:
                if not PRELOAD_WB:
                    b_row = tl.load(b_ptr + cols, mask=cols < N, other=0)
                y = y + b_row.to(ACC)[None, :]
            tl.store(y_row[:, None] + cols[None, :].to(tl.int64) * s_yn, y, mask=mask)
    else:
        # Second sweep from the row's end: the chunks read last by the first sweep are the likeliest in L2. The
        # partial last chunk first, then the whole chunks, whose lanes are all in the row: no column mask.
        # Shifted rows (ALIGN): the head chunk, tile chunk 0, is partial too, and is written last.
        if ALIGN > 0:
            n_chunks = tl.cdiv(N + ALIGN - 1, BLOCK_N)
            head = 1
            n_whole = tl.maximum(N // BLOCK_N, 1) - 1
        else:
            n_chunks = tl.cdiv(N, BLOCK_N)
            head = 0
            n_whole = N // BLOCK_N
        if UNROLL > 0 and UNROLL_OUT:  # (ALIGN == 0, N == UNROLL x BLOCK_N) all of the sweep's loads in flight
            for i in tl.static_range(UNROLL):
                _normalize_chunk(x_row, y_row, w_ptr, b_ptr, (UNROLL - 1 - i) * BLOCK_N, lead, N, row_ok, s_xn,
                                 s_yn, s_wl, mean, rstd, HAS_W, HAS_B, ACC, ALIGN, ALIGN_Y, True, BLOCK_N)
        else:
            for i in range(0, n_chunks - n_whole - head):
                _normalize_chunk(x_row, y_row, w_ptr, b_ptr, (n_chunks - 1 - i) * BLOCK_N, lead, N, row_ok, s_xn,
                                 s_yn, s_wl, mean, rstd, HAS_W, HAS_B, ACC, ALIGN, ALIGN_Y, False, BLOCK_N)
            for i in range(0, n_whole):
                _normalize_chunk(x_row, y_row, w_ptr, b_ptr, (head + n_whole - 1 - i) * BLOCK_N, lead, N, row_ok,
                                 s_xn, s_yn, s_wl, mean, rstd, HAS_W, HAS_B, ACC, ALIGN, ALIGN_Y, True, BLOCK_N)
        if ALIGN > 0:
            _normalize_chunk(x_row, y_row, w_ptr, b_ptr, 0, lead, N, row_ok, s_xn, s_yn, s_wl, mean, rstd, HAS_W,
                             HAS_B, ACC, ALIGN, ALIGN_Y, False, BLOCK_N)
            if ALIGN_Y:
                _store_edges(x_row, y_row, w_ptr, b_ptr, lead, N, row_ok, mean, tl.zeros_like(mean), rstd, s_wl,
                             HAS_W, HAS_B, ACC, ALIGN)


@triton.jit
def _normalize_chunk(x_row, y_row, w_ptr, b_ptr, n0, lead, N, row_ok, s_xn, s_yn, s_wl, mean, rstd,
                     HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr, ALIGN: tl.constexpr,
                     ALIGN_Y: tl.constexpr, WHOLE: tl.constexpr, BLOCK_N: tl.constexpr):
    """y = (x - mean) * rstd * w + b for tile columns [n0, n0 + BLOCK_N) of the loop's rows. WHOLE: every column
    is in the row (only rows past the end are masked: per row, no column compare). ALIGN: shifted rows, weight
    and bias the shifted copies (see the kernel); ALIGN_Y: the partial 16-byte chunks are written by
    ``_store_edges``."""
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
    if WHOLE:  # weight and bias unmasked; x and y masked per row only
        c_ok = None
        fill = None
        mask = row_ok[:, None] & (cols >= 0)[None, :]
        lmask = mask
        w_mask = mask  # (per row)
    elif ALIGN > 0:
        mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
        w_mask = lmask
        if ALIGN_Y:
            mask = inner_mask(cols, lead, N, row_ok, ALIGN)
    else:
        c_ok = cols < N
        fill = 0
        mask = row_ok[:, None] & c_ok[None, :]
        lmask = mask
    x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=lmask, other=0, eviction_policy="evict_first").to(ACC)
    y = (x - mean[:, None]) * rstd[:, None]
    if ALIGN > 0:
        y = _affine(y, w_ptr, b_ptr, cols[None, :] + (lead * s_wl)[:, None], w_mask, HAS_W, HAS_B, ACC)
    else:
        if HAS_W:
            y = y * tl.load(w_ptr + cols, mask=c_ok, other=fill).to(ACC)[None, :]
        if HAS_B:
            y = y + tl.load(b_ptr + cols, mask=c_ok, other=fill).to(ACC)[None, :]
    tl.store(y_row[:, None] + cols[None, :] * s_yn, y, mask=mask, eviction_policy="evict_first")


@triton.jit
def _split_rows_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, part_ptr, count_ptr, R, N, K, s_xm, s_xn, s_xk,
                       s_ym, s_yn, s_yk, eps, eps_lo, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                       STORE_STATS: tl.constexpr, ACC: tl.constexpr, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
                       BLOCK_N: tl.constexpr, PHASE: tl.constexpr):
    """Rows too long for one program's registers, held by SPLIT programs together (``split_rows``): one read and
    one write, where the loop reads a row twice (the second time mostly from HBM once rows pass ~64K elements).

    Program ``part`` of a group keeps columns [part * BLOCK_N, (part + 1) * BLOCK_N) of the group's rows in
    registers, less the row's first element (:func:`stats_shift`). Per row it stores its chunk's (mean, M2,
    count) (the corrected two-pass of :func:`chunk_stats`,
    on a 1-D tile: a [1, BLOCK_N] one took 194 registers on 8 warps against 112 (ptxas, sm_90a, 8192 float32
    elements)) and, PHASE 3, waits at the row's barrier (:func:`group_barrier`); then every program merges the
    SPLIT partials in the same fixed order (Chan et al. 1979; deterministic, identical in every program) and
    writes its chunk from registers, weight and bias loaded per row (from L2 after the first rows). A persistent
    grid of co-resident groups (a cooperative launch, ``runtime.launch_split_rows``) loops over the rows; PHASE 1
    and 2 are the halves as two launches (the interpreter, or no group fits the device), PHASE 2 reading the row
    again.
    """
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
    part = tl.program_id(0) % SPLIT
    group = tl.program_id(0) // SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    n = tl.minimum(N - part * BLOCK_N, BLOCK_N).to(ACC)  # (> 0: no program starts past the row's end)
    parts = tl.arange(0, SPLIT_P2)  # (partials of a row: SPLIT_P2 slots, SPLIT of them written)
    slots = parts < SPLIT
    for row in tl.range(group, R, groups):
        r = tl.cast(row, tl.int64)
        x_row = x_ptr + (r // K) * s_xm + (r % K) * s_xk
        # statistics of x - shift, the row's first element (see stats_shift); masked lanes load the shift itself
        # (exact in the input's dtype: it is one of its values, or 0), so they hold 0 without a select
        shift = stats_shift(tl.load(x_row))
        x = tl.load(x_row + cols * s_xn, mask=ok, other=shift).to(ACC) - shift.to(ACC)
        base = part_ptr + r * (3 * SPLIT_P2)
        if PHASE != 2:
            mean_t, m2_t, _ = tile_stats(x, ok, n)
            tl.store(base + part, mean_t)
            tl.store(base + SPLIT_P2 + part, m2_t)
            tl.store(base + 2 * SPLIT_P2 + part, n)
        if PHASE == 3:
            group_barrier(count_ptr + r, SPLIT)
        if PHASE != 1:
            # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
            mean, m2, _ = tl.reduce((tl.load(base + parts, mask=slots, other=0, cache_modifier=".cg"),
                                     tl.load(base + SPLIT_P2 + parts, mask=slots, other=0, cache_modifier=".cg"),
                                     tl.load(base + 2 * SPLIT_P2 + parts, mask=slots, other=0,
                                             cache_modifier=".cg")), 0, chan_fn)
            rstd = div_exact(1.0, sqrt_exact(div_exact(m2, N, ACC) + eps, ACC), ACC)
            if STORE_STATS:  # noqa: SIM102 (a constexpr test beside a runtime one)
                if part == 0:
                    tl.store(mean_ptr + r, shift.to(ACC) + mean)
                    tl.store(rstd_ptr + r, rstd)
            y = _affine((x - mean) * rstd, w_ptr, b_ptr, cols, ok, HAS_W, HAS_B, ACC)
            tl.store(y_ptr + (r // K) * s_ym + (r % K) * s_yk + cols * s_yn, y, mask=ok)
