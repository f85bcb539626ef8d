"""batch_norm's backward kernels: per-channel sums of dy and dy * (x - mean) over [batch, spatial] tiles, then dx.

Both follow the forward's tiles (:mod:`.kernels`): programs own BLOCK_K channels, tiles are [BLOCK_M batch,
BLOCK_N spatial] lanes by BLOCK_K channels read with each tensor's own strides (x, dy and dx may have three
layouts), int64 offsets, fp32 accumulation (fp64 for fp64 inputs), masked lanes at 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact
from ...kernels.rows import restate_multiple, wait_for_previous_launch
from ...kernels.welford import add_pair
from .kernels import (
    _channels,
    _edge_mask,
    _invstd,
    _lanes,
    _merged_sum,
    _mirror_tile,
    _next_tile,
    _partials,
    _tile_range,
)


@triton.jit
def _channel_consts(mean_ptr, var_ptr, w_ptr, cs, c_ok, eps, eps_lo, FROM_RUNNING: tl.constexpr,
                    HAS_W: tl.constexpr, ACC: tl.constexpr, BLOCK_K: tl.constexpr):
    """(mean, invstd, weight) of channels ``cs``: training, the batch mean and invstd the forward saved; eval
    (FROM_RUNNING), the running mean and 1 / sqrt(running_var + eps), computed as the forward's eval does."""
    mean = tl.load(mean_ptr + cs, mask=c_ok, other=0).to(ACC)
    if FROM_RUNNING:
        eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
        invstd = _invstd(tl.load(var_ptr + cs, mask=c_ok, other=1).to(ACC), eps, ACC)
    else:
        invstd = tl.load(var_ptr + cs, mask=c_ok, other=0).to(ACC)
    w = tl.zeros([BLOCK_K], ACC) + 1
    if HAS_W:
        w = tl.load(w_ptr + cs, mask=c_ok, other=0).to(ACC)
    return mean, invstd, w


@triton.jit
def _count(B, S, ACC: tl.constexpr, BLOCK_K: tl.constexpr):
    """The number of values per channel, B * S, in ACC (int64 product: past 2^31 values per channel too; B is a
    constexpr 1 where batch and spatial merged)."""
    return ((tl.zeros([BLOCK_K], tl.int64) + B) * S).to(ACC)


@triton.jit
def _tile_sums(x_ptr, dy_ptr, dx_ptr, b0, s0, cs, mask, mean, scale, s_b, s_s, s_c, g_b, g_s, g_c, d_b, d_s, d_c,
               DOT: tl.constexpr, WRITE_DX: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """(dy, DOT: dy * (x - mean), else dy) of one tile (``mask``: its lanes in range, the others 0), and
    (WRITE_DX) its dx = dy * scale stored from the same load."""
    dy = tl.load(_lanes(dy_ptr + (b0 * g_b + s0 * g_s), cs, g_b, g_s, g_c, BLOCK_M, BLOCK_N), mask=mask,
                 other=0).to(ACC)
    if WRITE_DX:
        tl.store(_lanes(dx_ptr + (b0 * d_b + s0 * d_s), cs, d_b, d_s, d_c, BLOCK_M, BLOCK_N), dy * scale[None, :],
                 mask=mask)
    if DOT:
        x = tl.load(_lanes(x_ptr + (b0 * s_b + s0 * s_s), cs, s_b, s_s, s_c, BLOCK_M, BLOCK_N), mask=mask,
                    other=0).to(ACC)
        dxm = dy * tl.where(mask, x - mean[None, :], 0.0)  # (0, not 0 * -mean: an inf running mean in eval)
    else:
        dxm = dy
    return dy, dxm


@triton.jit
def _sums_kernel(x_ptr, dy_ptr, dx_ptr, mean_ptr, var_ptr, w_ptr, psum_ptr, pdot_ptr, B, S, C,
                 s_b, s_s, s_c, g_b, g_s, g_c, d_b, d_s, d_c, tiles_per_split, eps, eps_lo,
                 ACC: tl.constexpr, SPLIT: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FROM_RUNNING: tl.constexpr, DOT: tl.constexpr,
                 WRITE_DX: tl.constexpr, HAS_W: tl.constexpr, DIV_S: tl.constexpr = 1):
    """Partial sum(dy) and (DOT) sum(dy * (x - mean)) of BLOCK_K channels over the range ``tiles_per_split`` of
    [BLOCK_M batch, BLOCK_N spatial] tiles of slice ``program_id(1)``, stored at ``c * SPLIT + slice``.
    WRITE_DX (eval: dx does not depend on the sums): also dx = dy * w * invstd, from the same loads. DIV_S: NCHW
    with S and every tensor's batch and channel strides multiples of DIV_S (the forward's ``_nchw_hint``).

    Full tiles load with the channel mask only; their sums go into per-GROUP accumulators (GROUP neighbouring
    lanes, the elements one thread loads as one 16-byte vector, summed inside the thread: NCHW; single lanes where
    the vector runs across channels), so the loop has no cross-lane traffic; the groups are summed once at the
    end. The partial tiles (edges of B and S) are summed over their rows in a second loop, after the groups (as
    the forward's statistics launch, :func:`.kernels._stats_kernel`, and for the same reasons: a cross-warp
    exchange per channels-fast tile waited on barriers; in the first loop, the partial tiles' reductions held
    registers beside the groups').
    """
    S = restate_multiple(S, DIV_S)
    s_b, s_c = restate_multiple(s_b, DIV_S), restate_multiple(s_c, DIV_S)
    g_b, g_c = restate_multiple(g_b, DIV_S), restate_multiple(g_c, DIV_S)
    d_b, d_c = restate_multiple(d_b, DIV_S), restate_multiple(d_c, DIV_S)
    cs, c_ok = _channels(tl.program_id(0), C, BLOCK_K)
    s_chunks, t_lo, t_hi = _tile_range(B, S, tiles_per_split, BLOCK_M, BLOCK_N)
    mean, invstd, w = _channel_consts(mean_ptr, var_ptr, w_ptr, cs, c_ok, eps, eps_lo, FROM_RUNNING, HAS_W, ACC,
                                      BLOCK_K)
    scale = w * invstd
    G: tl.constexpr = BLOCK_M * BLOCK_N // GROUP  # groups per tile
    sum_g = tl.zeros([G, BLOCK_K], ACC)
    dot_g = tl.zeros([G, BLOCK_K], ACC)
    bi = t_lo // s_chunks
    si = t_lo % s_chunks
    for _ in range(t_lo, t_hi):
        b0 = bi.to(tl.int64) * BLOCK_M
        s0 = si.to(tl.int64) * BLOCK_N
        if (bi * BLOCK_M + BLOCK_M <= B) & (si * BLOCK_N + BLOCK_N <= S):
            dy, dxm = _tile_sums(x_ptr, dy_ptr, dx_ptr, b0, s0, cs, c_ok[None, :], mean, scale, s_b, s_s, s_c, g_b,
                                 g_s, g_c, d_b, d_s, d_c, DOT, WRITE_DX, ACC, BLOCK_M, BLOCK_N)
            sum_g += tl.sum(tl.reshape(dy, [G, GROUP, BLOCK_K]), 1)
            if DOT:
                dot_g += tl.sum(tl.reshape(dxm, [G, GROUP, BLOCK_K]), 1)
        bi, si = _next_tile(bi, si, s_chunks)
    sum_c = tl.sum(sum_g, 0)
    dot_c = tl.sum(dot_g, 0)
    bi = t_lo // s_chunks
    si = t_lo % s_chunks
    for _ in range(t_lo, t_hi):  # the partial tiles
        if (bi * BLOCK_M + BLOCK_M > B) | (si * BLOCK_N + BLOCK_N > S):
            b0 = bi.to(tl.int64) * BLOCK_M
            s0 = si.to(tl.int64) * BLOCK_N
            mask = _edge_mask(bi * BLOCK_M, si * BLOCK_N, B, S, c_ok, BLOCK_M, BLOCK_N)
            dy, dxm = _tile_sums(x_ptr, dy_ptr, dx_ptr, b0, s0, cs, mask, mean, scale, s_b, s_s, s_c, g_b, g_s, g_c,
                                 d_b, d_s, d_c, DOT, WRITE_DX, ACC, BLOCK_M, BLOCK_N)
            if DOT:
                s_t, d_t = tl.reduce((dy, dxm), 0, add_pair)
                dot_c += d_t
            else:
                s_t = tl.sum(dy, 0)
            sum_c += s_t
        bi, si = _next_tile(bi, si, s_chunks)
    offs = cs * SPLIT + tl.program_id(1)
    tl.store(psum_ptr + offs, sum_c, mask=c_ok)
    if DOT:
        tl.store(pdot_ptr + offs, dot_c, mask=c_ok)


@triton.jit
def _dx_tile(x_at, dy_at, dx_at, mask, mean, scale, mdy, k, FROM_RUNNING: tl.constexpr, ACC: tl.constexpr):
    """dx of one tile: training ``(dy - mean(dy) - (x - mean) * k) * scale`` with ``k`` = mean(dy *
    x_hat) * invstd; eval (FROM_RUNNING) ``dy * scale``; ``scale`` = weight * invstd."""
    dy = tl.load(dy_at, mask=mask, other=0).to(ACC)
    if not FROM_RUNNING:
        x = tl.load(x_at, mask=mask, other=0).to(ACC)
        dx = (dy - mdy[None, :] - (x - mean[None, :]) * k[None, :]) * scale[None, :]
    else:
        dx = dy * scale[None, :]
    tl.store(dx_at, dx, mask=mask)


@triton.jit
def _dx_kernel(x_ptr, dy_ptr, dx_ptr, mean_ptr, var_ptr, w_ptr, psum_ptr, pdot_ptr, dw_ptr, db_ptr, coef_ptr,
               B, S, C, s_b, s_s, s_c, g_b, g_s, g_c, d_b, d_s, d_c, tiles_per_split, tiles_per_program, eps, eps_lo,
               FROM_RUNNING: tl.constexpr, RESIDENT: tl.constexpr, SUMS: tl.constexpr, DOT: tl.constexpr,
               HAS_DX: tl.constexpr, HAS_DW: tl.constexpr, HAS_DB: tl.constexpr, HAS_W: tl.constexpr,
               ACC: tl.constexpr, SPLIT: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV_S: tl.constexpr = 1, WAIT: tl.constexpr = False,
               STORE_COEFS: tl.constexpr = False, COEFS: tl.constexpr = False):
    """dx over ``tiles_per_program`` tiles of one channel block, and (its first program) dw and db.

    The sums: RESIDENT (one tile holds the channel block), from the tile in registers (one read of x and dy, one
    launch); else SUMS, merging the channels' SPLIT partials of :func:`_sums_kernel` in a fixed order (a few loads
    per program, shared by its tiles; WAIT: a dependent launch after it, waiting for them first). Training (not
    FROM_RUNNING): ``dx = w * invstd * (dy - sum(dy) / n - (x - mean) * invstd^2 * sum(dy * (x - mean)) / n)``;
    eval: ``dx = dy * w * invstd``. ``dw = invstd * sum(dy * (x - mean))``, ``db = sum(dy)``, stored in their
    tensors' dtypes. Without HAS_DX the launch is programs of BLOCK_K channels that only finish dw and db (the
    finish launch), and with STORE_COEFS also training's per-channel ``mean(dy)`` and ``mean(dy * x_hat) *
    invstd`` (``coef_ptr``: ``[2, C]``), which a dx launch with COEFS then reads instead of merging partials.

    Tile order mirrors the sums pass, as the forward's normalize launch: the first programs take the tiles that
    each sums program read last (the likeliest to still be in L2).
    """
    wait_for_previous_launch(WAIT)
    S = restate_multiple(S, DIV_S)
    s_b, s_c = restate_multiple(s_b, DIV_S), restate_multiple(s_c, DIV_S)
    g_b, g_c = restate_multiple(g_b, DIV_S), restate_multiple(g_c, DIV_S)
    d_b, d_c = restate_multiple(d_b, DIV_S), restate_multiple(d_c, DIV_S)
    c_blocks = tl.cdiv(C, BLOCK_K)
    s_chunks = tl.cdiv(S, BLOCK_N)
    pid = tl.program_id(0)
    cs, c_ok = _channels(pid % c_blocks, C, BLOCK_K)
    first = pid < c_blocks  # the channel block's first program
    x_lanes = _lanes(x_ptr, cs, s_b, s_s, s_c, BLOCK_M, BLOCK_N)
    g_lanes = _lanes(dy_ptr, cs, g_b, g_s, g_c, BLOCK_M, BLOCK_N)
    d_lanes = _lanes(dx_ptr, cs, d_b, d_s, d_c, BLOCK_M, BLOCK_N)
    mean, invstd, w = _channel_consts(mean_ptr, var_ptr, w_ptr, cs, c_ok, eps, eps_lo, FROM_RUNNING, HAS_W, ACC,
                                      BLOCK_K)
    scale = w * invstd
    s_dy = tl.zeros([BLOCK_K], ACC)
    s_dot = tl.zeros([BLOCK_K], ACC)
    if RESIDENT:  # the channel block's one tile, at the origin
        mask = _edge_mask(0, 0, B, S, c_ok, BLOCK_M, BLOCK_N)
        dy = tl.load(g_lanes, mask=mask, other=0).to(ACC)
        s_dy = tl.sum(dy, 0)
        xm = dy
        if DOT:
            xm = tl.where(mask, tl.load(x_lanes, mask=mask, other=0).to(ACC) - mean[None, :], 0.0)
            s_dot = tl.sum(dy * xm, 0)
    elif SUMS:
        poffs, pmask = _partials(cs, c_ok, SPLIT, BLOCK_S)
        s_dy = _merged_sum(psum_ptr, poffs, pmask)
        if DOT:
            s_dot = _merged_sum(pdot_ptr, poffs, pmask)
    if HAS_DW:  # noqa: SIM102 (a constexpr test beside a runtime one)
        if first:
            tl.store(dw_ptr + cs, s_dot * invstd, mask=c_ok)
    if HAS_DB:  # noqa: SIM102
        if first:
            tl.store(db_ptr + cs, s_dy, mask=c_ok)
    if STORE_COEFS or HAS_DX:
        inv_n = div_exact(1.0, _count(B, S, ACC, BLOCK_K), ACC)
        mdy = s_dy * inv_n  # mean(dy)
        k = s_dot * inv_n * invstd * invstd  # mean(dy * x_hat) * invstd
        if STORE_COEFS:
            tl.store(coef_ptr + cs, mdy, mask=c_ok)
            tl.store(coef_ptr + C + cs, k, mask=c_ok)
        if COEFS:
            mdy = tl.load(coef_ptr + cs, mask=c_ok, other=0)
            k = tl.load(coef_ptr + C + cs, mask=c_ok, other=0)
    if HAS_DX:
        if RESIDENT:
            if FROM_RUNNING:
                dx = dy * scale[None, :]
            else:
                dx = (dy - mdy[None, :] - xm * k[None, :]) * scale[None, :]
            tl.store(d_lanes, dx, mask=mask)
        else:
            q_end = SPLIT * tiles_per_split
            q_lo = (pid // c_blocks) * tiles_per_program
            for q in range(q_lo, tl.minimum(q_lo + tiles_per_program, q_end)):
                b0, s0 = _mirror_tile(q, tiles_per_split, s_chunks, SPLIT, BLOCK_M, BLOCK_N)
                b0l = b0.to(tl.int64)
                s0l = s0.to(tl.int64)
                x_at = x_lanes + (b0l * s_b + s0l * s_s)
                dy_at = g_lanes + (b0l * g_b + s0l * g_s)
                dx_at = d_lanes + (b0l * d_b + s0l * d_s)
                if (b0 + BLOCK_M <= B) & (s0 + BLOCK_N <= S):
                    _dx_tile(x_at, dy_at, dx_at, c_ok[None, :], mean, scale, mdy, k, FROM_RUNNING, ACC)
                else:
                    mask = _edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N)
                    _dx_tile(x_at, dy_at, dx_at, mask, mean, scale, mdy, k, FROM_RUNNING, ACC)
