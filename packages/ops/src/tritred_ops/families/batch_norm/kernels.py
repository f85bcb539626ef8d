"""batch_norm kernels: per-channel statistics over (batch, *spatial) tiles, then the normalize launch."""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact, sqrt_exact
from ...kernels.rows import restate_multiple, wait_for_previous_launch
from ...kernels.welford import chan_fn, chunk_stats, stats_shift


@triton.jit
def _lanes(ptr, cs, s_b, s_s, s_c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Pointers of a [BLOCK_M batch, BLOCK_N spatial] tile at the origin, as BLOCK_M * BLOCK_N flat lanes by
    BLOCK_K channels: lane i is image i // BLOCK_N, spatial i % BLOCK_N (power-of-two shifts). A flat lane axis
    keeps the statistics 2-D ([lanes, channels]) for the shared Welford helpers. A tile adds its corner offset."""
    i = tl.arange(0, BLOCK_M * BLOCK_N)
    return ptr + ((i // BLOCK_N).to(tl.int64) * s_b + (i % BLOCK_N) * s_s)[:, None] + cs[None, :] * s_c


@triton.jit
def _edge_mask(b0, s0, B, S, c_ok, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """In-range lanes of the tile at (b0, s0) that crosses an edge of B or S."""
    i = tl.arange(0, BLOCK_M * BLOCK_N)
    return (((b0 + i // BLOCK_N) < B) & ((s0 + i % BLOCK_N) < S))[:, None] & c_ok[None, :]


@triton.jit
def _edge_tile(lanes, b0, s0, B, S, s_b, s_s, c_ok, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The raw tile at (b0, s0) of a :func:`_lanes` grid, its lanes past an edge of B or S not loaded (0)."""
    return tl.load(lanes + (b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s),
                   mask=_edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N), other=0)


@triton.jit
def _channel_shift(x_ptr, cs, c_ok, s_c, ACC: tl.constexpr):
    """The shift of channels ``cs``' statistics: each channel's first element (batch 0, spatial 0) when finite,
    else 0 (:func:`stats_shift`). The statistics launch stores its partials less it and the normalize launch adds
    it back, so both take it from here."""
    return stats_shift(tl.load(x_ptr + cs * s_c, mask=c_ok, other=0).to(ACC))


@triton.jit
def _channels(block, C, BLOCK_K: tl.constexpr):
    """(channels, in range) of channel block ``block``: BLOCK_K int64 indices."""
    cs = block.to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    return cs, cs < C


@triton.jit
def _tile_range(B, S, tiles_per_split, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(spatial chunks, first tile, end) of slice ``program_id(1)``'s range of [BLOCK_M batch, BLOCK_N spatial]
    tiles, numbered batch chunk by batch chunk."""
    s_chunks = tl.cdiv(S, BLOCK_N)
    t_lo = tl.program_id(1) * tiles_per_split
    t_hi = tl.minimum(tl.cdiv(B, BLOCK_M) * s_chunks, t_lo + tiles_per_split)
    return s_chunks, t_lo, t_hi


@triton.jit
def _next_tile(bi, si, s_chunks):
    """The (batch chunk, spatial chunk) after (bi, si): the next spatial chunk, or the next batch chunk's first
    (no division in the loop)."""
    si += 1
    wrap = si == s_chunks
    bi += wrap.to(tl.int32)
    si = tl.where(wrap, 0, si)
    return bi, si


@triton.jit
def _mirror_tile(q, tiles_per_split, s_chunks, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The corner (b0, s0) of the q-th tile of a launch after a tile-range one (:func:`_tile_range`), in mirror
    order: the first tiles are those that each slice's program read last (the likeliest to still be in L2),
    stepping back through the ranges. Past the last tile b0 >= B: nothing in range."""
    t = (q % SPLIT) * tiles_per_split + (tiles_per_split - 1 - q // SPLIT)
    b0 = (t // s_chunks) * BLOCK_M
    s0 = (t % s_chunks) * BLOCK_N
    return b0, s0


@triton.jit
def _partials(cs, c_ok, SPLIT: tl.constexpr, BLOCK_S: tl.constexpr):
    """(offsets, mask) of channels ``cs``' SPLIT partials in a ``[C, SPLIT]`` buffer: a [BLOCK_K, BLOCK_S] tile."""
    sp = tl.arange(0, BLOCK_S)
    pmask = c_ok[:, None] & (sp < SPLIT)[None, :]
    poffs = cs[:, None] * SPLIT + sp[None, :]
    return poffs, pmask


@triton.jit
def _merged_sum(p_ptr, poffs, pmask):
    """Each channel's partials (:func:`_partials`) summed in a fixed order."""
    return tl.sum(tl.load(p_ptr + poffs, mask=pmask, other=0), 1)


@triton.jit
def _merged_stats(pmean_ptr, pm2_ptr, pcnt_ptr, poffs, pmask):
    """Each channel's (mean, M2, count) from its partials (:func:`_partials`): Chan's merge in a fixed order."""
    return tl.reduce((tl.load(pmean_ptr + poffs, mask=pmask, other=0),
                      tl.load(pm2_ptr + poffs, mask=pmask, other=0),
                      tl.load(pcnt_ptr + poffs, mask=pmask, other=0)), 1, chan_fn)


@triton.jit
def _invstd(var, eps, ACC: tl.constexpr):
    """1 / sqrt(var + eps), each step correctly rounded (``div_exact``, ``sqrt_exact``), as torch computes it."""
    return div_exact(1.0, sqrt_exact(var + eps, ACC), ACC)


@triton.jit
def _add_tile(x, mask, n, mean, m2, cnt, tot):
    """A partial [lanes, channels] tile ``x`` of ``n`` valid lanes (``mask``, the others 0) merged into the
    channels' (mean, M2, count) by its own two-pass statistics (:func:`chunk_stats`, Chan's merge), and its plain
    sum added to ``tot``."""
    n_c = tl.zeros_like(mean) + n
    mean_t, corr_t, m2_t = chunk_stats(x, mask, 0, n_c)
    mean, m2, cnt = chan_fn(mean, m2, cnt, mean_t + corr_t, m2_t, n_c)
    return mean, m2, cnt, tot + tl.sum(x, 0)


@triton.jit
def _stats_kernel(x_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, psum_ptr, B, S, C, s_b, s_s, s_c, tiles_per_split,
                  ACC: tl.constexpr, SPLIT: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV_S: tl.constexpr = 1,
                  PREFETCH: tl.constexpr = False):
    """Partial (mean, M2, count, sum) of BLOCK_K channels over a range of [BLOCK_M batch, BLOCK_N spatial] tiles.
    DIV_S: NCHW with S and the batch and channel strides multiples of DIV_S (:func:`_nchw_hint`).
    PREFETCH (``num_stages`` > 1 in the config): each tile's load is issued one iteration ahead, before the
    arithmetic of the tile before it (two tiles in flight per program; masked by the edges of B and S).

    Full tiles (every lane in range): each GROUP of neighbouring lanes (the elements one thread loads with one
    vector access: NCHW; one lane where the vector runs across channels, channels-fast) gets its two-pass mean and
    M2 in registers, then merges into that group's running statistics (Welford 1962, Chan et al. 1979; all groups
    have seen the same count, so one scalar division per tile), with no cross-lane traffic inside the loop. The
    groups merge once after it. A statistics exchange across warps per tile instead (each channels-fast tile's
    own two-pass statistics) held fewer registers but waited on two barriers a tile: 6x the time of
    ``var_mean(x, 0)``'s per-lane loop on the same 65536x256 bfloat16 (H100: the statistics launch ~110 of 126 us,
    var_mean 23 us).

    The rare partial tiles (edges of B and S) get their two-pass statistics (:func:`chunk_stats`) in a second
    loop over the range, after the groups merged: in the first loop their reductions held registers beside the
    groups' state (sm_90, 65536x256 bfloat16 channels-fast: 176 registers, 79 without them).

    All of it on ``x - shift``, the channel's first element (:func:`stats_shift`): group means and deviations of
    values near zero stay exact where a channel sits far from 0 (mean 1e4, spread 0.1: the group means of raw
    values rounded at 1e-3, 8x torch's float32 error in y; found by an adversarial run). The partial means and
    sums are stored shifted: the normalize launch merges them and adds the shift once.
    """
    S = restate_multiple(S, DIV_S)
    s_b, s_c = restate_multiple(s_b, DIV_S), restate_multiple(s_c, DIV_S)
    cs, c_ok = _channels(tl.program_id(0), C, BLOCK_K)
    s_chunks, t_lo, t_hi = _tile_range(B, S, tiles_per_split, BLOCK_M, BLOCK_N)
    # A tile's lanes sit at fixed offsets from its corner: computed once, so a tile costs a scalar corner
    # offset, and its (batch, spatial) chunk steps on without a division. Tile indices are int32 (a tile holds
    # BLOCK_M * BLOCK_N elements); offsets are int64.
    lanes = _lanes(x_ptr, cs, s_b, s_s, s_c, BLOCK_M, BLOCK_N)
    shift = _channel_shift(x_ptr, cs, c_ok, s_c, ACC)
    bi = t_lo // s_chunks
    si = t_lo % s_chunks
    G: tl.constexpr = BLOCK_M * BLOCK_N // GROUP  # groups per tile
    mean_g = tl.zeros([G, BLOCK_K], ACC)
    m2_g = tl.zeros([G, BLOCK_K], ACC)
    # A plain sum beside: torch's running_mean of a channel holding inf is inf, the Welford mean is NaN.
    tot_g = tl.zeros([G, BLOCK_K], ACC)
    full = 0
    if PREFETCH:  # (no slice is empty: the range's first tile exists)
        x_next = _edge_tile(lanes, bi * BLOCK_M, si * BLOCK_N, B, S, s_b, s_s, c_ok, BLOCK_M, BLOCK_N)
    for t in range(t_lo, t_hi):
        b0 = bi * BLOCK_M
        s0 = si * BLOCK_N
        if PREFETCH:
            # The tile after this one: its load in flight during this tile's arithmetic (H200, 2-byte elements:
            # the statistics launch 40 -> 38 us on 64x256x56x56; float32 tiles lost, their registers 128 -> 168).
            x_raw = x_next
            s1 = si + 1
            b1 = tl.where(s1 == s_chunks, bi + 1, bi) * BLOCK_M
            s1 = tl.where(s1 == s_chunks, 0, s1) * BLOCK_N
            b1 = tl.where(t + 1 < t_hi, b1, B)  # past the program's range: a tile past B, nothing loaded
            x_next = _edge_tile(lanes, b1, s1, B, S, s_b, s_s, c_ok, BLOCK_M, BLOCK_N)
        if (b0 + BLOCK_M <= B) & (s0 + BLOCK_N <= S):
            if not PREFETCH:
                x_raw = tl.load(lanes + (b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s), mask=c_ok[None, :],
                                other=0)
            xg = tl.reshape(x_raw.to(ACC) - shift[None, :], [G, GROUP, BLOCK_K])
            # Scaled, then summed: values near the top of the float range keep a finite group mean (the scale is
            # a power of two: the same rounding as a sum divided by GROUP).
            mean_x = tl.sum(xg * (1.0 / GROUP), 1)
            d = xg - mean_x[:, None, :]
            full += 1
            inv = div_exact(1.0, full, ACC)
            delta = mean_x - mean_g
            mean_g += delta * inv
            # Chan's merge of (GROUP * (full - 1), mean_g, m2_g) with (GROUP, mean_x, sum(d^2))
            m2_g += tl.sum(d * d, 1) + delta * (delta * (GROUP * (full - 1) * inv))
            tot_g += mean_x * GROUP  # the plain sum, less the shifts (inf where an inf is)
        bi, si = _next_tile(bi, si, s_chunks)
    mean, m2, cnt = tl.reduce((mean_g, m2_g, tl.zeros([G, BLOCK_K], ACC) + GROUP * full), 0, chan_fn)
    tot = tl.sum(tot_g, 0)
    bi = t_lo // s_chunks
    si = t_lo % s_chunks
    for _ in range(t_lo, t_hi):  # the partial tiles
        b0 = bi * BLOCK_M
        s0 = si * BLOCK_N
        if (b0 + BLOCK_M > B) | (s0 + BLOCK_N > S):
            mask = _edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N)
            x_raw = _edge_tile(lanes, b0, s0, B, S, s_b, s_s, c_ok, BLOCK_M, BLOCK_N)
            mean, m2, cnt, tot = _add_tile(tl.where(mask, x_raw.to(ACC) - shift[None, :], 0.0), mask,
                                           tl.minimum(B - b0, BLOCK_M) * tl.minimum(S - s0, BLOCK_N),
                                           mean, m2, cnt, tot)
        bi, si = _next_tile(bi, si, s_chunks)
    offs = cs * SPLIT + tl.program_id(1)
    tl.store(pmean_ptr + offs, mean, mask=c_ok)
    tl.store(pm2_ptr + offs, m2, mask=c_ok)
    tl.store(pcnt_ptr + offs, cnt, mask=c_ok)
    tl.store(psum_ptr + offs, tot, mask=c_ok)


@triton.jit
def _load_running(rm_ptr, rv_ptr, cs, c_ok, ACC: tl.constexpr):
    """The running statistics of channels ``cs``, loaded ahead of their update (see :func:`_update_running`)."""
    return tl.load(rm_ptr + cs, mask=c_ok, other=0).to(ACC), tl.load(rv_ptr + cs, mask=c_ok, other=0).to(ACC)


@triton.jit
def _update_running(rm_ptr, rv_ptr, rm_out_ptr, rv_out_ptr, cs, c_ok, mean, m2, n, total, momentum, momentum_lo,
                    ACC: tl.constexpr, rm=None, rv=None):
    """running = (1 - momentum) * running + momentum * batch statistic, the variance unbiased (as torch), read
    from ``rm_ptr``/``rv_ptr`` and written to ``rm_out_ptr``/``rv_out_ptr``: the same pointers in place (eager),
    new buffers for the registered op (which mutates none of its inputs).

    ``rm``/``rv``: the old values when the caller loaded them early (:func:`_load_running`, issued with the
    input's tile, so that their latency hides under the statistics instead of following them: the output's
    stores, which may alias the running statistics' as far as the compiler knows, wait for these)."""
    mom = tl.cast(momentum, ACC) + tl.cast(momentum_lo, ACC)  # float64 scalars arrive as two float32 parts
    if rm is None:
        rm, rv = _load_running(rm_ptr, rv_ptr, cs, c_ok, ACC)
    unbiased = div_exact(m2, n - 1, ACC)
    plain = total / n
    batch_mean = tl.where((mean == mean) | (plain != plain), mean, plain)  # +-inf where torch has it
    tl.store(rm_out_ptr + cs, (1 - mom) * rm + mom * batch_mean, mask=c_ok)
    tl.store(rv_out_ptr + cs, (1 - mom) * rv + mom * unbiased, mask=c_ok)


@triton.jit
def _normalize(x, mean, scale, bias, HAS_B: tl.constexpr):
    """(x - mean) * (rstd * weight) + bias for a [lanes, channels] tile (no + 0 without bias: -0.0 stays)."""
    y = (x - mean[None, :]) * scale[None, :]
    if HAS_B:
        y = y + bias[None, :]
    return y


@triton.jit
def _apply_kernel(x_ptr, y_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, psum_ptr, rm_ptr, rv_ptr, rm_out_ptr, rv_out_ptr,
                  w_ptr, b_ptr, mean_out_ptr, invstd_out_ptr,
                  B, S, C, s_b, s_s, s_c, y_b, y_s, y_c, tiles_per_split, tiles_per_program, eps, eps_lo,
                  momentum, momentum_lo, FROM_RUNNING: tl.constexpr, RESIDENT: tl.constexpr,
                  HAS_RUNNING: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr,
                  SPLIT: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, DIV_S: tl.constexpr = 1, WAIT: tl.constexpr = False,
                  STATS: tl.constexpr = False, COEFS: tl.constexpr = False):
    """y = (x - mean) * rstd * weight + bias over ``tiles_per_program`` [BLOCK_M batch, BLOCK_N spatial, BLOCK_K
    channel] tiles of one channel block. DIV_S: as the statistics kernel's, for x and y. WAIT: a dependent launch
    after the statistics launch (``runtime.dependent_launch``), waiting for its partials before anything else.
    STATS (training): the channel block's first program also stores the batch mean and 1 / sqrt(var + eps) in ACC
    to ``mean_out_ptr``/``invstd_out_ptr`` (what the backward pass reads: torch's save_mean, save_invstd). The
    running statistics are read from ``rm_ptr``/``rv_ptr`` and written to ``rm_out_ptr``/``rv_out_ptr``.

    Training: mean and rstd come from merging the channels' SPLIT partials in a fixed order (a few loads per
    program, cheaper than a launch of their own, and shared by the program's tiles), or, RESIDENT (one tile holds
    the whole channel block), from the tile itself: one launch, one read. The first program of each channel
    block also updates the running statistics. Eval: mean and variance are the running ones. Where the partials
    are too many to merge in every program (``rules.merge_inline``), a finish launch of this kernel (no tiles:
    ``tiles_per_program`` 0, STATS) merges them once per channel, updates the running statistics and stores mean
    and rstd, and the normalize launch (COEFS) reads those from ``mean_out_ptr``/``invstd_out_ptr``.

    Tile order mirrors the statistics pass: the first programs take the tiles that each stats program read last
    (the likeliest to still be in L2), stepping back through the tile ranges.
    """
    wait_for_previous_launch(WAIT)
    S = restate_multiple(S, DIV_S)
    s_b, s_c = restate_multiple(s_b, DIV_S), restate_multiple(s_c, DIV_S)
    y_b, y_c = restate_multiple(y_b, DIV_S), restate_multiple(y_c, DIV_S)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
    c_blocks = tl.cdiv(C, BLOCK_K)
    s_chunks = tl.cdiv(S, BLOCK_N)
    pid = tl.program_id(0)
    cs, c_ok = _channels(pid % c_blocks, C, BLOCK_K)
    first = pid < c_blocks  # the channel block's first program
    x_lanes = _lanes(x_ptr, cs, s_b, s_s, s_c, BLOCK_M, BLOCK_N)
    y_lanes = _lanes(y_ptr, cs, y_b, y_s, y_c, BLOCK_M, BLOCK_N)
    scale = tl.zeros([BLOCK_K], ACC) + 1
    if HAS_W:
        scale = tl.load(w_ptr + cs, mask=c_ok, other=0).to(ACC)
    bias = tl.zeros([BLOCK_K], ACC)
    if HAS_B:
        bias = tl.load(b_ptr + cs, mask=c_ok, other=0).to(ACC)
    if RESIDENT:  # the channel block's one tile, at the origin: statistics and normalization from registers
        mask = _edge_mask(0, 0, B, S, c_ok, BLOCK_M, BLOCK_N)
        x = tl.load(x_lanes, mask=mask, other=0).to(ACC)
        rm = None
        rv = None
        if HAS_RUNNING:
            rm, rv = _load_running(rm_ptr, rv_ptr, cs, c_ok, ACC)
        n = tl.zeros([BLOCK_K], ACC) + tl.minimum(B, BLOCK_M) * tl.minimum(S, BLOCK_N)
        mean0, corr, m2 = chunk_stats(x, mask, 0, n)
        mean = mean0 + corr
        rstd = _invstd(div_exact(m2, n, ACC), eps, ACC)  # biased variance, as torch
        if HAS_RUNNING:
            _update_running(rm_ptr, rv_ptr, rm_out_ptr, rv_out_ptr, cs, c_ok, mean, m2, n, tl.sum(x, 0), momentum,
                            momentum_lo, ACC, rm, rv)
        if STATS:
            tl.store(mean_out_ptr + cs, mean, mask=c_ok)
            tl.store(invstd_out_ptr + cs, rstd, mask=c_ok)
        tl.store(y_lanes, _normalize(x, mean, scale * rstd, bias, HAS_B), mask=mask)
    else:
        if FROM_RUNNING:
            mean = tl.load(rm_ptr + cs, mask=c_ok, other=0).to(ACC)
            rstd = _invstd(tl.load(rv_ptr + cs, mask=c_ok, other=1).to(ACC), eps, ACC)
        elif COEFS:  # merged once per channel by the finish launch
            mean = tl.load(mean_out_ptr + cs, mask=c_ok, other=0)
            rstd = tl.load(invstd_out_ptr + cs, mask=c_ok, other=0)
        else:
            poffs, pmask = _partials(cs, c_ok, SPLIT, BLOCK_S)
            shift = _channel_shift(x_ptr, cs, c_ok, s_c, ACC)  # the statistics launch's: its partials are shifted
            mean, m2, n = _merged_stats(pmean_ptr, pm2_ptr, pcnt_ptr, poffs, pmask)
            mean = mean + shift
            rstd = _invstd(div_exact(m2, n, ACC), eps, ACC)
            if HAS_RUNNING:  # noqa: SIM102 (a constexpr test beside a runtime one)
                if first:
                    total = _merged_sum(psum_ptr, poffs, pmask) + shift * n
                    _update_running(rm_ptr, rv_ptr, rm_out_ptr, rv_out_ptr, cs, c_ok, mean, m2, n, total, momentum,
                                    momentum_lo, ACC)
            if STATS:  # noqa: SIM102
                if first:
                    tl.store(mean_out_ptr + cs, mean, mask=c_ok)
                    tl.store(invstd_out_ptr + cs, rstd, mask=c_ok)
        scale = scale * rstd
        q_end = SPLIT * tiles_per_split
        q_lo = (pid // c_blocks) * tiles_per_program
        for q in range(q_lo, tl.minimum(q_lo + tiles_per_program, q_end)):
            b0, s0 = _mirror_tile(q, tiles_per_split, s_chunks, SPLIT, BLOCK_M, BLOCK_N)
            x_at = x_lanes + (b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s)
            y_at = y_lanes + (b0.to(tl.int64) * y_b + s0.to(tl.int64) * y_s)
            if (b0 + BLOCK_M <= B) & (s0 + BLOCK_N <= S):
                x = tl.load(x_at, mask=c_ok[None, :], other=0).to(ACC)
                tl.store(y_at, _normalize(x, mean, scale, bias, HAS_B), mask=c_ok[None, :])
            else:
                mask = _edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N)
                x = tl.load(x_at, mask=mask, other=0).to(ACC)
                tl.store(y_at, _normalize(x, mean, scale, bias, HAS_B), mask=mask)
