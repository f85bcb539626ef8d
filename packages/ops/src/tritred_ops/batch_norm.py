"""batch_norm: per-channel statistics over (batch, *spatial), then normalize; training and eval, running stats.

The input ``[B, C, *spatial]`` is viewed as (B, C, S) with its own strides (NCHW, channels-last and sliced
inputs alike; spatial dims that do not merge are gathered, logged). When the batch stride equals S times the
spatial stride (channels-last), batch and spatial merge into one axis.

Training runs two launches, both deterministic:
1. ``_stats_kernel``: programs own BLOCK_K channels and a contiguous range of [BLOCK_M batch, BLOCK_N
   spatial, BLOCK_K channel] tiles (about 8 programs per SM). In a full tile each group of lanes that one
   thread loads as one 16-byte vector gets its two-pass statistics in registers and merges into the group's
   running (mean, M2) (Chan et al. 1979; one scalar division per tile); partial tiles (edges of B and S) take
   the corrected two-pass over the tile; everything merges once at the end, all of it on x less the channel's
   first element (channels far from 0 keep their spread). NCHW tiles run along the spatial axis, channels-last
   along rt. With ``num_stages`` > 1 each tile's load is issued one iteration ahead (the built-in choice for
   2-byte planes of several tiles).
2. ``_apply_kernel``: merges each channel's partials in a fixed order into mean and rstd (the first program
   of each channel block also updates ``running_mean``/``running_var`` in place with ``momentum``, the unbiased
   variance, as torch), then ``y = (x - mean) * (rstd * weight) + bias``, in the input's layout, in the mirror
   order of the statistics pass (the tiles it read last, likeliest in L2, first); one tile per program, or
   ``num_programs`` programs looping over their channel block's tiles. In training, after the statistics
   launch, on sm_90+ a programmatic dependent launch (``runtime.dependent_launch``): it starts while the
   statistics' last programs finish and waits for their partials.
When one tile holds a whole channel block (``B * S`` small: 32x2048x7x7), training is one launch: the apply
kernel takes the statistics from its own tile (one read, one write). Eval runs 2 alone, with the running
statistics.

Strategy ``split_rows`` (training; a plugin's or ``tritred tune``'s choice, not the built-in heuristic's: on the
H200 it measured slower than the two launches, 24-54 % against 49-56 % of copy bandwidth on the 56x56 shapes):
a channel block's tiles are held by as many programs together, which meet at a barrier per channel block and
normalize from registers (``_split_channels_kernel``): one read and one write.
"""

from __future__ import annotations

import logging

import torch
import triton
import triton.language as tl
from torch._prims_common import suggest_memory_format
from tritred_core import LaunchConfig, Problem, ReductionSpec

from . import runtime as rt
from .kernels.combine import div_exact, sqrt_exact
from .kernels.dtypes import acc_dtype, f32_split, tl_dtype
from .kernels.rows import group_barrier, wait_for_previous_launch
from .kernels.welford import chan_fn, chunk_stats, stats_shift, tile_stats
from .runtime import Recorder, find_plan

log = logging.getLogger("tritred")


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
def _stats_kernel(x_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, psum_ptr, B, S, C, s_b, s_s, s_c, tiles_per_split,
                  ACC: tl.constexpr, SPLIT: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV_S: tl.constexpr = 1,
                  PREFETCH: tl.constexpr = False):
    """Partial (mean, M2, count, sum) of BLOCK_K channels over a range of [BLOCK_M batch, BLOCK_N spatial] tiles.
    DIV_S: NCHW with S and the batch and channel strides multiples of DIV_S (:func:`_nchw_hint`).
    PREFETCH (``num_stages`` > 1 in the config): each tile's load is issued one iteration ahead, before the
    arithmetic of the tile before it (two tiles in flight per program; masked by the edges of B and S).

    Full tiles (every lane in range): each GROUP of neighbouring lanes (the elements one thread loads with one
    vector access) gets its two-pass mean and M2 in registers, then merges into that group's running statistics
    (Chan et al. 1979; all groups have seen the same count, so one scalar division per tile), with no cross-lane
    traffic inside the loop. Per-group rather than per-lane state: 3 registers per GROUP elements, not 3 per
    element, so more programs fit an SM and more loads are in flight (a bf16 tile of per-lane Welford state
    took 113 registers: 4 programs per SM). The rare partial tiles (edges of B and S) get the two-pass
    statistics of :func:`chunk_stats`. Groups and partial tiles merge once at the end.

    All of it on ``x - shift``, the channel's first element (:func:`stats_shift`): group means and deviations of
    values near zero stay exact where a channel sits far from 0 (mean 1e4, spread 0.1: the group means of raw
    values rounded at 1e-3, 8x torch's float32 error in y; found by an adversarial run). The partial means and
    sums are stored shifted: the normalize launch merges them and adds the shift once.
    """
    if DIV_S > 1:  # restated so that the compiler sees the divisibility: vector loads
        S = S // DIV_S * DIV_S
        s_b = s_b // DIV_S * DIV_S
        s_c = s_c // DIV_S * DIV_S
    cs = tl.program_id(0).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    c_ok = cs < C
    s_chunks = tl.cdiv(S, BLOCK_N)
    t_lo = tl.program_id(1) * tiles_per_split
    t_hi = tl.minimum(tl.cdiv(B, BLOCK_M) * s_chunks, t_lo + tiles_per_split)
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
    mean_p = tl.zeros([BLOCK_K], ACC)
    m2_p = tl.zeros([BLOCK_K], ACC)
    cnt_p = tl.zeros([BLOCK_K], ACC)
    if PREFETCH:  # (no slice is empty: the range's first tile exists)
        x_next = _edge_tile(lanes, bi * BLOCK_M, si * BLOCK_N, B, S, s_b, s_s, c_ok, BLOCK_M, BLOCK_N)
    for t in range(t_lo, t_hi):
        b0 = bi * BLOCK_M
        s0 = si * BLOCK_N
        corner = b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s
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
                x_raw = tl.load(lanes + corner, mask=c_ok[None, :], other=0)
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
        else:  # an edge of B or S
            mask = _edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N)
            if not PREFETCH:
                x_raw = _edge_tile(lanes, b0, s0, B, S, s_b, s_s, c_ok, BLOCK_M, BLOCK_N)
            x = tl.where(mask, x_raw.to(ACC) - shift[None, :], 0.0)
            tot_g += tl.sum(tl.reshape(x, [G, GROUP, BLOCK_K]), 1)
            n_c = tl.zeros([BLOCK_K], ACC) + tl.minimum(B - b0, BLOCK_M) * tl.minimum(S - s0, BLOCK_N)
            mean_t, corr_t, m2_t = chunk_stats(x, mask, 0, n_c)
            mean_p, m2_p, cnt_p = chan_fn(mean_p, m2_p, cnt_p, mean_t + corr_t, m2_t, n_c)
        si += 1
        wrap = si == s_chunks
        bi += wrap.to(tl.int32)
        si = tl.where(wrap, 0, si)
    mean, m2, cnt = tl.reduce((mean_g, m2_g, tl.zeros([G, BLOCK_K], ACC) + GROUP * full), 0, chan_fn)
    mean, m2, cnt = chan_fn(mean, m2, cnt, mean_p, m2_p, cnt_p)
    offs = cs * SPLIT + tl.program_id(1)
    tl.store(pmean_ptr + offs, mean, mask=c_ok)
    tl.store(pm2_ptr + offs, m2, mask=c_ok)
    tl.store(pcnt_ptr + offs, cnt, mask=c_ok)
    tl.store(psum_ptr + offs, tl.sum(tot_g, 0), mask=c_ok)


@triton.jit
def _load_running(rm_ptr, rv_ptr, cs, c_ok, ACC: tl.constexpr):
    """The running statistics of channels ``cs``, loaded ahead of their update (see :func:`_update_running`)."""
    return tl.load(rm_ptr + cs, mask=c_ok, other=0).to(ACC), tl.load(rv_ptr + cs, mask=c_ok, other=0).to(ACC)


@triton.jit
def _update_running(rm_ptr, rv_ptr, cs, c_ok, mean, m2, n, total, momentum, momentum_lo, ACC: tl.constexpr,
                    rm=None, rv=None):
    """running = (1 - momentum) * running + momentum * batch statistic, the variance unbiased (as torch).

    ``rm``/``rv``: the old values when the caller loaded them early (:func:`_load_running`, issued with the
    input's tile, so that their latency hides under the statistics instead of following them: the output's
    stores, which may alias the running statistics' as far as the compiler knows, wait for these)."""
    mom = tl.cast(momentum, ACC) + tl.cast(momentum_lo, ACC)  # float64 scalars arrive as two float32 parts
    if rm is None:
        rm, rv = _load_running(rm_ptr, rv_ptr, cs, c_ok, ACC)
    unbiased = div_exact(m2, n - 1, ACC)
    plain = total / n
    batch_mean = tl.where((mean == mean) | (plain != plain), mean, plain)  # +-inf where torch has it
    tl.store(rm_ptr + cs, (1 - mom) * rm + mom * batch_mean, mask=c_ok)
    tl.store(rv_ptr + cs, (1 - mom) * rv + mom * unbiased, mask=c_ok)


@triton.jit
def _normalize(x, mean, scale, bias, HAS_B: tl.constexpr):
    """(x - mean) * (rstd * weight) + bias for a [lanes, channels] tile (no + 0 without bias: -0.0 stays)."""
    y = (x - mean[None, :]) * scale[None, :]
    if HAS_B:
        y = y + bias[None, :]
    return y


@triton.jit
def _apply_kernel(x_ptr, y_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, psum_ptr, rm_ptr, rv_ptr, w_ptr, b_ptr,
                  B, S, C, s_b, s_s, s_c, y_b, y_s, y_c, tiles_per_split, tiles_per_program, eps, eps_lo,
                  momentum, momentum_lo, FROM_RUNNING: tl.constexpr, RESIDENT: tl.constexpr,
                  HAS_RUNNING: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr,
                  SPLIT: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, DIV_S: tl.constexpr = 1, WAIT: tl.constexpr = False):
    """y = (x - mean) * rstd * weight + bias over ``tiles_per_program`` [BLOCK_M batch, BLOCK_N spatial, BLOCK_K
    channel] tiles of one channel block. DIV_S: as the statistics kernel's, for x and y. WAIT: a dependent launch
    after the statistics launch (``runtime.dependent_launch``), waiting for its partials before anything else.

    Training: mean and rstd come from merging the channels' SPLIT partials in a fixed order (a few loads per
    program, cheaper than a launch of their own, and shared by the program's tiles), or, RESIDENT (one tile holds
    the whole channel block), from the tile itself: one launch, one read. The first program of each channel
    block also updates the running statistics. Eval: mean and variance are the running ones.

    Tile order mirrors the statistics pass: the first programs take the tiles that each stats program read last
    (the likeliest to still be in L2), stepping back through the tile ranges.
    """
    wait_for_previous_launch(WAIT)
    if DIV_S > 1:  # (see the statistics kernel)
        S = S // DIV_S * DIV_S
        s_b = s_b // DIV_S * DIV_S
        s_c = s_c // DIV_S * DIV_S
        y_b = y_b // DIV_S * DIV_S
        y_c = y_c // DIV_S * DIV_S
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
    c_blocks = tl.cdiv(C, BLOCK_K)
    s_chunks = tl.cdiv(S, BLOCK_N)
    pid = tl.program_id(0)
    cs = (pid % c_blocks).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    c_ok = cs < C
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
        rstd = div_exact(1.0, sqrt_exact(div_exact(m2, n, ACC) + eps, ACC), ACC)  # biased variance, as torch
        if HAS_RUNNING:
            _update_running(rm_ptr, rv_ptr, cs, c_ok, mean, m2, n, tl.sum(x, 0), momentum, momentum_lo, ACC, rm, rv)
        tl.store(y_lanes, _normalize(x, mean, scale * rstd, bias, HAS_B), mask=mask)
    else:
        if FROM_RUNNING:
            mean = tl.load(rm_ptr + cs, mask=c_ok, other=0).to(ACC)
            rstd = div_exact(1.0, sqrt_exact(tl.load(rv_ptr + cs, mask=c_ok, other=1).to(ACC) + eps, ACC), ACC)
        else:
            sp = tl.arange(0, BLOCK_S)
            pmask = c_ok[:, None] & (sp < SPLIT)[None, :]
            poffs = cs[:, None] * SPLIT + sp[None, :]
            shift = _channel_shift(x_ptr, cs, c_ok, s_c, ACC)  # the statistics launch's: its partials are shifted
            mean, m2, n = tl.reduce((tl.load(pmean_ptr + poffs, mask=pmask, other=0),
                                     tl.load(pm2_ptr + poffs, mask=pmask, other=0),
                                     tl.load(pcnt_ptr + poffs, mask=pmask, other=0)), 1, chan_fn)
            mean = mean + shift
            rstd = div_exact(1.0, sqrt_exact(div_exact(m2, n, ACC) + eps, ACC), ACC)
            if HAS_RUNNING:  # noqa: SIM102 (a constexpr test beside a runtime one)
                if first:
                    total = tl.sum(tl.load(psum_ptr + poffs, mask=pmask, other=0), 1) + shift * n
                    _update_running(rm_ptr, rv_ptr, cs, c_ok, mean, m2, n, total, momentum, momentum_lo, ACC)
        scale = scale * rstd
        q_end = SPLIT * tiles_per_split
        q_lo = (pid // c_blocks) * tiles_per_program
        for q in range(q_lo, tl.minimum(q_lo + tiles_per_program, q_end)):
            t = (q % SPLIT) * tiles_per_split + (tiles_per_split - 1 - q // SPLIT)  # mirror order
            b0 = (t // s_chunks) * BLOCK_M  # (past the last tile, b0 >= B: nothing in range)
            s0 = (t % s_chunks) * BLOCK_N
            x_at = x_lanes + (b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s)
            y_at = y_lanes + (b0.to(tl.int64) * y_b + s0.to(tl.int64) * y_s)
            if (b0 + BLOCK_M <= B) & (s0 + BLOCK_N <= S):
                x = tl.load(x_at, mask=c_ok[None, :], other=0).to(ACC)
                tl.store(y_at, _normalize(x, mean, scale, bias, HAS_B), mask=c_ok[None, :])
            else:
                mask = _edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N)
                x = tl.load(x_at, mask=mask, other=0).to(ACC)
                tl.store(y_at, _normalize(x, mean, scale, bias, HAS_B), mask=mask)


@triton.jit
def _split_channels_kernel(x_ptr, y_ptr, part_ptr, rm_ptr, rv_ptr, w_ptr, b_ptr, count_ptr, B, S, C,
                           s_b, s_s, s_c, y_b, y_s, y_c, eps, eps_lo, momentum, momentum_lo,
                           HAS_RUNNING: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr,
                           SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, OFF64: tl.constexpr, PHASE: tl.constexpr):
    """Training with one read: a channel block's SPLIT tiles held by SPLIT programs together (``split_rows``).

    Program ``part`` of a group keeps tile ``part`` ([BLOCK_M batch, BLOCK_N spatial, BLOCK_K channels]) of the
    group's channel blocks in registers, less each channel's first element (:func:`stats_shift`). Per channel
    block it stores the tile's (mean, M2, count, plain sum) (the corrected two-pass of :func:`chunk_stats`) and,
    PHASE 3, waits at the block's barrier (:func:`group_barrier`) for the group's other programs; then every
    program merges the SPLIT partials in the same fixed order (Chan
    et al. 1979; deterministic, identical in every program), the first one updates the running statistics, and
    each normalizes its tile from registers: one read and one write, where the two-launch path reads the input
    twice. The grid is persistent (co-resident groups looping over channel blocks, a cooperative launch: see
    ``runtime.launch_split_rows``); PHASE 1 and 2 are the halves as two launches (the interpreter, or no group
    fits the device), PHASE 2 reading the tile again. A tile's lane offsets are the same in every channel block:
    computed once, outside the loop.
    """
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
    part = tl.program_id(0) % SPLIT
    group = tl.program_id(0) // SPLIT
    groups = tl.num_programs(0) // SPLIT
    s_chunks = tl.cdiv(S, BLOCK_N)
    b0 = (part // s_chunks) * BLOCK_M
    s0 = (part % s_chunks) * BLOCK_N
    # Lane offsets from the tile's corner, int32 unless the host says a tile spans 2**31 elements (OFF64): they
    # are held across the whole loop. One channel per block (BLOCK_K = 1, NCHW) keeps the tile 1-D: a
    # [lanes, 1] tile took 170 registers on 8 warps against 120 (ptxas, sm_90a, 8192 float32 elements).
    i = tl.arange(0, BLOCK_M * BLOCK_N)
    if OFF64:
        i = i.to(tl.int64)
    lane_ok = ((b0 + i // BLOCK_N) < B) & ((s0 + i % BLOCK_N) < S)
    x_off = (i // BLOCK_N) * s_b + (i % BLOCK_N) * s_s
    y_off = (i // BLOCK_N) * y_b + (i % BLOCK_N) * y_s
    ks = tl.arange(0, BLOCK_K)
    if BLOCK_K > 1:  # [lanes, channels] tiles (channels-last)
        x_off = x_off[:, None] + ks[None, :] * s_c
        y_off = y_off[:, None] + ks[None, :] * y_c
    x_tile = x_ptr + (b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s)
    y_tile = y_ptr + (b0.to(tl.int64) * y_b + s0.to(tl.int64) * y_s)
    n = (tl.minimum(B - b0, BLOCK_M) * tl.minimum(S - s0, BLOCK_N)).to(ACC)  # (> 0: no tile is empty)
    # partials of channel block r: part_ptr[r, stat, slot, k] (stat: mean, M2, count, sum), SPLIT of SPLIT_P2 slots
    parts = tl.arange(0, SPLIT_P2)
    slot_at = parts * BLOCK_K
    slots = parts < SPLIT
    if BLOCK_K > 1:
        slot_at = slot_at[:, None] + ks[None, :]
        slots = slots[:, None]
    STAT: tl.constexpr = SPLIT_P2 * BLOCK_K
    for row in tl.range(group, tl.cdiv(C, BLOCK_K), groups):
        r = tl.cast(row, tl.int64)
        cs = r * BLOCK_K + ks  # (BLOCK_K = 1: a block of one channel, always in range)
        if BLOCK_K > 1:
            c_ok = cs < C
            mask = lane_ok[:, None] & c_ok[None, :]
        else:
            cs = r
            c_ok = r < C
            mask = lane_ok
        # statistics of x - shift, the channel's first element (see stats_shift); masked lanes load the shift
        # itself (exact in the input's dtype: it is one of its values, or 0), so they hold 0 without a select
        shift_x = stats_shift(tl.load(x_ptr + cs * s_c, mask=c_ok, other=0))
        shift = shift_x.to(ACC)
        x = tl.load(x_tile + r * BLOCK_K * s_c + x_off, mask=mask, other=shift_x).to(ACC) - shift
        # Running statistics, weight and bias are loaded with the tile, so that their latency hides under the
        # statistics' (see _update_running).
        rm = None
        rv = None
        if HAS_RUNNING:
            rm, rv = _load_running(rm_ptr, rv_ptr, cs, c_ok, ACC)
        if HAS_W:
            w_c = tl.load(w_ptr + cs, mask=c_ok, other=0).to(ACC)
        if HAS_B:
            b_c = tl.load(b_ptr + cs, mask=c_ok, other=0).to(ACC)
        base = part_ptr + r * (4 * STAT)
        if (SPLIT == 1) | (PHASE != 2):
            # scaled sums (values near the top of the float range keep a finite mean); ``total``, the plain sum of
            # the unshifted values, only stands in for an infinite or NaN mean (see _update_running)
            mean, m2, total = tile_stats(x, mask, n, BLOCK_M * BLOCK_N)
            total = total + n * shift
            cnt = tl.zeros_like(m2) + n
        if SPLIT > 1:
            if PHASE != 2:
                at = base + part * BLOCK_K + ks
                if BLOCK_K == 1:
                    at = base + part
                tl.store(at, mean)
                tl.store(at + STAT, m2)
                tl.store(at + 2 * STAT, cnt)
                tl.store(at + 3 * STAT, total)
            if PHASE == 3:
                group_barrier(count_ptr + r, SPLIT)
            if PHASE != 1:
                # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
                at = base + slot_at
                mean, m2, cnt = tl.reduce((tl.load(at, mask=slots, other=0, cache_modifier=".cg"),
                                           tl.load(at + STAT, mask=slots, other=0, cache_modifier=".cg"),
                                           tl.load(at + 2 * STAT, mask=slots, other=0, cache_modifier=".cg")), 0,
                                          chan_fn)
        if (SPLIT == 1) | (PHASE != 1):
            if HAS_RUNNING:  # noqa: SIM102 (a constexpr test beside a runtime one)
                if part == 0:
                    if SPLIT > 1:  # the plain sum of the channel's partials
                        total = tl.sum(tl.load(base + slot_at + 3 * STAT, mask=slots, other=0, cache_modifier=".cg"),
                                       0)
                    _update_running(rm_ptr, rv_ptr, cs, c_ok, shift + mean, m2, cnt, total, momentum, momentum_lo,
                                    ACC, rm, rv)
            scale = div_exact(1.0, sqrt_exact(div_exact(m2, cnt, ACC) + eps, ACC), ACC)  # biased variance, as torch
            if HAS_W:
                scale = scale * w_c
            y = (x - mean) * scale
            if HAS_B:  # (no + 0 without bias: -0.0 stays)
                y = y + b_c
            tl.store(y_tile + r * BLOCK_K * y_c + y_off, y, mask=mask)


SPEC = ReductionSpec(name="batch_norm", family="normalize", outputs=("out",),
                     mirrors="torch.nn.functional.batch_norm",
                     summary="per-channel statistics over (batch, *spatial); running stats updated in training")


def _bsc(t: torch.Tensor, order: list[int]) -> tuple[int, int, int, int] | None:
    """(S, stride_b, stride_s, stride_c) of ``t`` viewed as (B, C, S) with its spatial dims merged in ``order``
    (any order: the statistics ignore it and the output uses the same one), or None if they don't merge."""
    S = rt.prod([t.shape[d] for d in order])
    s_s = t.stride(order[-1]) if order else 1
    for a, b in zip(order, order[1:]):
        if t.stride(a) != t.stride(b) * t.shape[b]:
            return None
    return S, t.stride(0), s_s, t.stride(1)


def _out_format(x: torch.Tensor) -> torch.memory_format:
    """The output's memory format, as torch's batch_norm picks it: contiguous for a contiguous input (also when
    size-1 dims make it channels-last too), else the format the input's strides suggest (channels-last for a
    sliced channels-last input, contiguous for a permuted one)."""
    if x.is_contiguous():
        return torch.contiguous_format
    return suggest_memory_format(x)


def _canonical(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int, int],
                                                          tuple[int, ...], tuple[int, ...]]:
    """(x, y, (B, S, C), x strides (b, s, c), y strides (b, s, c)); batch merges into spatial when both allow.
    ``y`` (contiguous or channels-last: :func:`_out_format`) may have another layout than ``x``: both are read
    with their own strides, in one spatial order; where no order merges the spatial dims of both (a permuted
    input beside its contiguous output), the input is gathered (one copy, logged)."""
    order = sorted((d for d in range(2, x.dim()) if x.shape[d] != 1), key=lambda d: -x.stride()[d])
    vx, vy = _bsc(x, order), _bsc(y, order)
    if vx is None or vy is None:
        log.debug("tritred.batch_norm: spatial dims of strides %s are gathered (one copy)", x.stride())
        x = x.contiguous()
        order = [d for d in range(2, x.dim()) if x.shape[d] != 1]
        vx, vy = _bsc(x, order), _bsc(y, order)
        if vy is None:  # (an output's dims merge in the standard order: contiguous and channels-last both do)
            y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            vy = _bsc(y, order)
        assert vx is not None and vy is not None
    B, Ch = x.shape[0], x.shape[1]
    (S, xb, xs, xc), (_, yb, ys, yc) = vx, vy
    if S == 1:  # [B, C]: the batch is the spatial axis
        return x, y, (1, B, Ch), (0, xb, xc), (0, yb, yc)
    if B == 1 or (xb == S * xs and yb == S * ys):  # channels-last (or one image): batch and spatial merge
        return x, y, (1, B * S, Ch), (0, xs, xc), (0, ys, yc)
    return x, y, (B, S, Ch), (xb, xs, xc), (yb, ys, yc)


def problem(x: torch.Tensor) -> Problem:
    """The canonical problem of a batch_norm call: M=batch, N=spatial, K=channels with the input's strides."""
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=_out_format(x))
    _, _, (B, S, Ch), (xb, xs, xc), _ = _canonical(x, y)
    return Problem(op="batch_norm", dtype=rt.dtype_name(x.dtype), M=B, N=S, K=Ch, stride_m=xb, stride_n=xs,
                   stride_k=xc)


def batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """Batch normalization — mirrors :func:`torch.nn.functional.batch_norm` (Ioffe & Szegedy 2015).

    Args:
        input: floating tensor ``[B, C, *spatial]`` (2-D to 5-D and beyond; NCHW, channels-last or any strides).
        running_mean, running_var: ``[C]`` floating tensors or None. In training they are updated in place:
            ``r = (1 - momentum) * r + momentum * batch_stat`` with the unbiased batch variance. Required in eval.
        weight, bias: optional ``[C]`` affine parameters.
        training: use batch statistics (and update the running ones) instead of the running statistics.
        momentum: float in the update above. eps: added to the variance inside the square root.

    Returns:
        Tensor of the input's shape and dtype, in torch's memory format for it: contiguous, or channels-last
        (2-D or 3-D) where the input's strides suggest it (a sliced channels-last input included; a permuted
        input gives a contiguous output). Statistics in fp32 (fp64 for fp64 inputs).

    Raises:
        ValueError: training with one value per channel (B * prod(spatial) == 1) or with eps <= 0 (a NaN eps
            passes, as in torch); only one of running_mean and running_var given.
        RuntimeError: running_mean missing in eval, parameters with the wrong number of elements, non-float
            dtypes, tensors on different devices, not on CUDA (outside the interpreter).
        IndexError: a 0-d input, or a non-empty 1-D one (no channel dim; an empty 1-D input gives an empty
            output, as torch).
        TypeError: momentum not a number (torch's functional form takes no ``momentum=None``), training not a
            bool (as torch: no ``training=1``).
    """
    op = "batch_norm"
    plan, key = find_plan(op, (training, momentum, eps), input, running_mean, running_var, weight, bias)
    if plan is not None:
        return plan.run(input, running_mean, running_var, weight, bias)[0]
    input = rt.check_tensor(op, "input", input)
    if input.dim() == 0:
        raise IndexError(f"{op}(): expected an input of at least 1 dim [B, C, *] (channels: dim 1), got a 0-d tensor")
    rt.check_float(op, input)
    if not isinstance(training, bool):  # torch takes no training=1 or None
        raise TypeError(f"{op}(): argument 'training' (position 6) must be bool, not {type(training).__name__}")
    if momentum is None or not isinstance(momentum, (int, float)):  # (a bool is a number to torch: True is 1.0)
        raise TypeError(f"{op}(): argument 'momentum' must be float, not {type(momentum).__name__}")
    # A 1-D input has no channel dim: torch counts 0 channels (an empty one gives an empty output, below).
    Ch = input.shape[1] if input.dim() > 1 else 0
    empty_1d = input.dim() == 1 and input.numel() == 0
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is None:
            continue
        rt.check_tensor(op, name, t)
        if t.numel() != Ch and not empty_1d:
            raise RuntimeError(f"{op}(): {name} should contain {Ch} elements not {t.numel()}")
        if name.startswith("running") and t.dim() != 1:  # torch's kernels index them as 1-D
            raise RuntimeError(f"{op}(): {name} should be a 1-D tensor of {Ch} elements, got shape {list(t.shape)}")
        rt.check_float(op, t, what=name)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}(): running_mean and running_var must either both be None or neither be None")
    if not training and running_mean is None:
        raise RuntimeError(f"{op}(): running_mean and running_var must be defined in evaluation mode")
    if training and eps <= 0:  # (torch's test: a NaN eps passes and gives NaN)
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    # torch's rule: parameters share the input's dtype, except float32 ones beside a half/bfloat16 input; its
    # CUDA kernels also take running statistics of any floating dtype (they are updated in their own dtype).
    checked = [("weight", weight), ("bias", bias)]
    if input.device.type != "cuda":
        checked += [("running_mean", running_mean), ("running_var", running_var)]
    for name, t in checked:
        if t is not None and t.dtype != input.dtype and not (
                t.dtype == torch.float32 and input.dtype in (torch.float16, torch.bfloat16)):
            raise RuntimeError(f"{op}(): mixed dtype: {name} is {t.dtype}, expected {input.dtype}"
                               + (" or torch.float32" if input.dtype in (torch.float16, torch.bfloat16) else ""))
    rt.check_same_device(op, input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    if input.dim() == 1:  # (torch: an empty 1-D input gives an empty output; a non-empty one has no dim 1)
        if empty_1d:
            return torch.empty_like(input)
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    if training and input.numel() // max(Ch, 1) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
    rt.check_runnable(op, input)
    rec = Recorder(input, running_mean, running_var, weight, bias)
    y = rec.adopt(torch.empty(input.shape, dtype=input.dtype, device=input.device,
                              memory_format=_out_format(input)))
    if input.numel() == 0:
        return y
    x, y, (B, S, _), (xb, xs, xc), (yb, ys, yc) = _canonical(input, y)
    bn_view = rt.View(B, S, Ch, ((xb, xs, xc),))
    cfg: LaunchConfig = rt.decide(SPEC, x, bn_view, make_problem=lambda: Problem(
        op=op, dtype=rt.dtype_name(x.dtype), M=B, N=S, K=Ch, stride_m=xb, stride_n=xs, stride_k=xc))
    rt.no_tail(cfg, "batch_norm")
    acc = acc_dtype(x.dtype)  # fp32 statistics, fp64 for fp64 inputs
    # Per-channel vectors are read with unit stride: strided or expanded ones are copied (C elements). Running
    # stats updated in place go through a contiguous buffer that is copied back.
    w = rt.unit_stride(weight) if weight is not None else y
    b = rt.unit_stride(bias) if bias is not None else y
    rm_buf, rv_buf = rt.unit_stride(running_mean), rt.unit_stride(running_var)
    has_running = running_mean is not None and running_var is not None
    dev = x.device
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    if training and cfg.strategy == "split_rows":  # one read: a channel block's tiles held by programs together
        bm, bn = _split_tiles(cfg, B, S)
        tiles = rt.cdiv(B, bm) * rt.cdiv(S, bn)
        blocks, parts = rt.cdiv(Ch, cfg.BLOCK_K), rt.next_pow2(tiles)
        args = (x, y, rec.empty((blocks * 4 * parts * cfg.BLOCK_K,), acc, dev) if tiles > 1 else y,
                rm_buf if has_running else y, rv_buf if has_running else y, w, b)
        (eps_hi, eps_lo), (mom_hi, mom_lo) = f32_split(float(eps)), f32_split(float(momentum))
        kwargs = dict(B=B, S=S, C=Ch, s_b=xb, s_s=xs, s_c=xc, y_b=yb, y_s=ys, y_c=yc, eps=eps_hi, eps_lo=eps_lo,
                      momentum=mom_hi, momentum_lo=mom_lo, HAS_RUNNING=has_running, HAS_W=weight is not None,
                      HAS_B=bias is not None, ACC=tl_dtype(acc), SPLIT=tiles, SPLIT_P2=parts, BLOCK_M=bm,
                      BLOCK_N=bn, BLOCK_K=cfg.BLOCK_K,
                      OFF64=_tile_span((bm, bn, cfg.BLOCK_K), (xb, xs, xc), (yb, ys, yc)) >= 2**31,
                      num_warps=cfg.num_warps)
        if tiles == 1:  # a channel block in one tile: one program each, no partials, no barrier
            rec.launch(_split_channels_kernel, (blocks,), *args, y, **kwargs, PHASE=3)
        else:
            rt.launch_split_rows(rec, _split_channels_kernel, x, blocks, tiles, cfg.num_programs, args, kwargs)
        _copy_back_running(rec, training, running_mean, rm_buf, running_var, rv_buf)
        rec.save(key, y)
        return y
    resident = training and tiles == 1  # one tile holds each channel block: statistics from it, one launch
    if training and not resident:
        split, tiles_per_split = rt.slices(tiles, cfg.split)
        pm, pm2, pn, psum = (rec.empty((Ch, split), acc, dev) for _ in range(4))
        # Statistics groups: one 16-byte vector of spatial neighbours (NCHW), the elements one thread loads
        # together; single lanes when channels are the contiguous axis (the vector runs across channels).
        group = min(16 // x.element_size(), cfg.BLOCK_M * cfg.BLOCK_N) if cfg.BLOCK_K == 1 else 1
        rec.launch(
            _stats_kernel, (rt.cdiv(Ch, cfg.BLOCK_K), split), x, pm, pm2, pn, psum, B, S, Ch, xb, xs, xc,
            tiles_per_split, ACC=tl_dtype(acc), SPLIT=split, GROUP=group, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K, DIV_S=_nchw_hint(S, (xb, xs, xc)), PREFETCH=cfg.num_stages > 1,
            num_warps=cfg.num_warps, num_stages=1)  # (the prefetch is by hand; Triton's own stages: SASS identical)
    else:
        split, tiles_per_split, pm = 1, tiles, y
        pm2 = pn = psum = pm
    # The normalize launch: cfg.num_programs > 0 spreads each channel block's tiles over num_programs / (channel
    # blocks) programs (its statistics merged once per program), 0 gives one tile per program.
    c_blocks, units = rt.cdiv(Ch, cfg.BLOCK_K), split * tiles_per_split
    per_block = max(1, cfg.num_programs // c_blocks) if cfg.num_programs > 0 else units
    tiles_per_program = rt.cdiv(units, min(per_block, units))
    grid = (c_blocks * rt.cdiv(units, tiles_per_program),)
    rec.launch(_apply_kernel, grid, x, y, pm, pm2, pn, psum, rm_buf if has_running else y,
               rv_buf if has_running else y, w, b, B, S, Ch, xb, xs, xc, yb, ys, yc, tiles_per_split,
               tiles_per_program,
               *f32_split(float(eps)), *f32_split(float(momentum)), FROM_RUNNING=not training, RESIDENT=resident,
               HAS_RUNNING=has_running, HAS_W=weight is not None, HAS_B=bias is not None, ACC=tl_dtype(acc),
               SPLIT=split, BLOCK_S=rt.next_pow2(split), BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
               BLOCK_K=cfg.BLOCK_K, DIV_S=_nchw_hint(S, (xb, xs, xc), (yb, ys, yc)), num_warps=cfg.num_warps,
               **(rt.dependent_launch(dev) if training and not resident else {}))  # (after the statistics launch)
    _copy_back_running(rec, training, running_mean, rm_buf, running_var, rv_buf)
    rec.save(key, y)
    return y


_MAX_TILES = 4096  # split_rows: tiles of a channel block (programs meeting at its barrier, partials each merges)


def _nchw_hint(S: int, *strides: tuple[int, int, int]) -> int:
    """DIV_S of the NCHW kernels: the largest power of two (2-8) dividing S and every tensor's batch and channel
    strides, when Triton cannot see it (it specializes on 16 only); 1 otherwise, or when the spatial axis is not
    unit-stride. 14x14 maps (S = 196): 8-byte loads instead of scalar ones, as ``runtime.row_hint`` for rows."""
    if S <= 1 or any(s != 1 for _, s, _ in strides):
        return 1
    d = rt.pow2_divisor(S, *(b for b, _, _ in strides), *(c for _, _, c in strides))
    return d if 1 < d < 16 else 1


def _split_tiles(cfg: LaunchConfig, B: int, S: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of a split_rows launch: the config's, widened (spatial side first, never past Triton's
    largest tile) until a channel block has at most ``_MAX_TILES`` tiles, so that any config computes the problem
    (each program merges every partial of its block: a tile of ``next_pow2(tiles)`` elements)."""
    bm, bn = cfg.BLOCK_M, cfg.BLOCK_N
    while rt.cdiv(B, bm) * rt.cdiv(S, bn) > _MAX_TILES and bm * bn * cfg.BLOCK_K < 1 << 20:
        if bn < rt.next_pow2(S):
            bn *= 2
        else:
            bm *= 2
    return bm, bn


def _tile_span(blocks: tuple[int, int, int], *strides: tuple[int, int, int]) -> int:
    """The largest offset, in elements, between a [BLOCK_M, BLOCK_N, BLOCK_K] tile's corner and one of its lanes."""
    return max(sum((n - 1) * abs(st) for n, st in zip(blocks, stride)) for stride in strides)


def _copy_back_running(rec: Recorder, training: bool, running_mean: torch.Tensor | None, rm_buf: torch.Tensor | None,
                       running_var: torch.Tensor | None, rv_buf: torch.Tensor | None) -> None:
    """Training: copy the updated running statistics back where a strided one went through a contiguous buffer."""
    if training:
        for given, buf in ((running_mean, rm_buf), (running_var, rv_buf)):
            if given is not None and buf is not None and buf is not given:
                given.copy_(buf.view_as(given))
                rec.replayable = False  # the copy back is not a launch

