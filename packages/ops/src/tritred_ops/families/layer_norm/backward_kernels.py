"""Backward kernels of layer_norm and rms_norm: the input gradient's two row reductions, the weight and bias
gradients as per-program fp32 partials, and the launch that sums those partials in a fixed order.

With ``x_hat = (x - mean) * rstd`` (rms_norm: ``x * rstd``) and ``g = weight * dy`` (``dy`` without a weight),
the gradients of ``y = x_hat * weight + bias`` are (Ba, Kiros & Hinton 2016; torch's ``layer_norm_backward``)::

    dx = rstd * (g - mean(g * x_hat) * x_hat - mean(g))     (rms_norm: without the mean(g) term)
    dw = sum over rows of dy * x_hat
    db = sum over rows of dy

``_norm_backward_kernel`` is a persistent grid: each program takes every ``programs``-th block of BLOCK_M rows
and accumulates its rows' ``dy * x_hat`` and ``dy`` per column in fp32 (fp64 for fp64 inputs or weights).
``SINGLE``: a row block is one tile in registers (x and dy read once, dx written once), and the accumulators stay
in registers until the program's last block; the loop (BLOCK_N < N, :func:`_loop_rows`) takes two sweeps over the
program's rows, the first for the row sums, the second chunk by chunk for dx and the chunk's weight-gradient
terms, summed in registers over the program's rows. Each program writes one partial row of N values once (no
other program touches it: no atomics); ``_partials_sum_kernel`` adds a column's partials in program order (a
fixed tile and reduction tree per config): the gradients are the same bit for bit on every run.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact
from ...kernels.rows import restate_multiple, row_block, wait_for_previous_launch
from ...kernels.welford import add_pair


@triton.jit
def _row_sums(g, xh, N, RMS: tl.constexpr, ACC: tl.constexpr):
    """(mean(g * x_hat), mean(g)) of each row of a tile (rms_norm: mean(g) is 0), one cross-warp exchange."""
    if RMS:
        c1 = div_exact(tl.sum(g * xh, 1), N, ACC)
        c2 = tl.zeros_like(c1)
    else:
        s1, s2 = tl.reduce((g * xh, g), 1, add_pair)
        c1 = div_exact(s1, N, ACC)
        c2 = div_exact(s2, N, ACC)
    return c1, c2


@triton.jit
def _tile_terms(x_ptrs, g_ptrs, w_ptr, cols, mask, c_ok, mean, rstd, RMS: tl.constexpr, HAS_W: tl.constexpr,
                ACC: tl.constexpr, EVICT: tl.constexpr, WEVEN: tl.constexpr):
    """(x_hat, dy, g = weight * dy) of a tile, in ACC; masked lanes load 0 (their dy, g and products are 0)."""
    x = tl.load(x_ptrs, mask=mask, other=0, eviction_policy=EVICT).to(ACC)
    dy = tl.load(g_ptrs, mask=mask, other=0, eviction_policy=EVICT).to(ACC)
    if RMS:
        xh = x * rstd[:, None]
    else:
        xh = (x - mean[:, None]) * rstd[:, None]
    if HAS_W:
        if WEVEN:
            w = tl.load(w_ptr + cols)
        else:
            w = tl.load(w_ptr + cols, mask=c_ok, other=0)
        g = dy * w.to(ACC)[None, :]
    else:
        g = dy
    return xh, dy, g


@triton.jit
def _norm_backward_kernel(x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, pw_ptr, pb_ptr, cs_ptr, R, N, K,
                          s_xm, s_xn, s_xk, s_gm, s_gn, s_gk, s_om, s_on, s_ok,
                          RMS: tl.constexpr, HAS_W: tl.constexpr, NEED_DX: tl.constexpr, NEED_DW: tl.constexpr,
                          NEED_DB: tl.constexpr, ACC: tl.constexpr, PACC: tl.constexpr, SINGLE: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LOOP_STAGES: tl.constexpr = 1,
                          EVEN: tl.constexpr = False, DIV: tl.constexpr = 1, EVICT: tl.constexpr = ""):
    """dx (NEED_DX) of R rows of N elements (the M x N x K view: row r is (r // K, r % K)), and this program's
    partial rows of dw (NEED_DW, ``pw_ptr``) and db (NEED_DB, ``pb_ptr``): row ``program_id`` of a [programs, N]
    buffer each. ``mean_ptr``, ``rstd_ptr``: the forward's per-row statistics (rms_norm: rstd only); ``cs_ptr``:
    the loop's per-row sums ([R, 2] in ACC). EVEN (single pass): N == BLOCK_N, no column mask. DIV: N and the row
    strides are multiples of DIV (``runtime.row_hint``). LOOP_STAGES: software pipelining of the persistent loop
    over row blocks (single pass). EVICT: the L2 hint of the single pass's first load."""
    N = restate_multiple(N, DIV)
    s_xm, s_gm, s_om = restate_multiple(s_xm, DIV), restate_multiple(s_gm, DIV), restate_multiple(s_om, DIV)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    blocks = tl.cdiv(R, BLOCK_M)
    part = pid.to(tl.int64) * N  # (this program's partial row)
    if SINGLE:
        cols = tl.arange(0, BLOCK_N).to(tl.int64)
        c_ok = cols < N
        acc_w = tl.zeros([BLOCK_N], PACC)
        acc_b = tl.zeros([BLOCK_N], PACC)
        for blk in tl.range(pid, blocks, programs, num_stages=LOOP_STAGES):
            rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
            if EVEN:
                mask = row_ok[:, None] & (cols >= 0)[None, :]
            else:
                mask = row_ok[:, None] & c_ok[None, :]
            mean, rstd = _row_stats(mean_ptr, rstd_ptr, rows, row_ok, RMS, ACC)
            x_ptrs = x_ptr + (m * s_xm + k * s_xk)[:, None] + cols[None, :] * s_xn
            g_ptrs = dy_ptr + (m * s_gm + k * s_gk)[:, None] + cols[None, :] * s_gn
            xh, dy, g = _tile_terms(x_ptrs, g_ptrs, w_ptr, cols, mask, c_ok, mean, rstd, RMS, HAS_W, ACC, EVICT,
                                    EVEN)
            if NEED_DW:  # (before the row sums: dy is then dead while they cross the warps)
                acc_w += tl.sum(dy.to(PACC) * xh.to(PACC), 0)
            if NEED_DB:
                acc_b += tl.sum(dy.to(PACC), 0)
            if NEED_DX:
                c1, c2 = _row_sums(g, xh, N, RMS, ACC)
                # the tile again, from L1 or L2 (the lines this program just read; the first load caches at all
                # levels): x_hat and g are not held through the row sums (ptxas, sm_90a, bf16 4096-wide rows on 8
                # warps: 97 -> 84 registers, 2 -> 3 programs per SM; rms_norm 16384 on 32 warps: 48 spilled values
                # -> none)
                xh, dy, g = _tile_terms(x_ptrs, g_ptrs, w_ptr, cols, mask, c_ok, mean, rstd, RMS, HAS_W, ACC,
                                        "evict_first", EVEN)
                dx = (g - xh * c1[:, None] - c2[:, None]) * rstd[:, None]
                tl.store(dx_ptr + (m * s_om + k * s_ok)[:, None] + cols[None, :] * s_on, dx, mask=mask)
        if NEED_DW:
            tl.store(pw_ptr + part + cols, acc_w, mask=c_ok)
        if NEED_DB:
            tl.store(pb_ptr + part + cols, acc_b, mask=c_ok)
    else:
        _loop_rows(x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, pw_ptr + part, pb_ptr + part, cs_ptr, pid,
                   programs, blocks, R, N, K, s_xm, s_xn, s_xk, s_gm, s_gn, s_gk, s_om, s_on, s_ok, RMS, HAS_W, NEED_DX,
                   NEED_DW, NEED_DB, ACC, PACC, BLOCK_M, BLOCK_N)


@triton.jit
def _row_stats(mean_ptr, rstd_ptr, rows, row_ok, RMS: tl.constexpr, ACC: tl.constexpr):
    """(mean, rstd) of a block's rows, as the forward stored them (rms_norm: rstd twice)."""
    rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0).to(ACC)
    if RMS:
        mean = rstd
    else:
        mean = tl.load(mean_ptr + rows, mask=row_ok, other=0).to(ACC)
    return mean, rstd


@triton.jit
def _loop_rows(x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, pw_row, pb_row, cs_ptr, pid, programs, blocks, R, N,
               K, s_xm, s_xn, s_xk, s_gm, s_gn, s_gk, s_om, s_on, s_ok,
               RMS: tl.constexpr, HAS_W: tl.constexpr, NEED_DX: tl.constexpr, NEED_DW: tl.constexpr,
               NEED_DB: tl.constexpr, ACC: tl.constexpr, PACC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """The loop over rows longer than a tile, in two sweeps over the program's row blocks.

    First (NEED_DX), row by row: the two row sums over the chunks, stored per row (``cs_ptr``: [R, 2]). Then chunk
    by chunk: every row block's chunk again (from HBM for inputs past the L2), dx from the stored sums, and the
    chunk's dw/db terms summed over all of the program's rows in registers, stored once to the program's partial
    rows ``pw_row``/``pb_row``. So the partials are written once, never read back and updated (a per-row update of
    a partial row of N fp32 values moves more bytes than the row itself), at the cost of the second read."""
    n_chunks = tl.cdiv(N, BLOCK_N)
    if NEED_DX:
        for blk in tl.range(pid, blocks, programs):
            rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
            mean, rstd = _row_stats(mean_ptr, rstd_ptr, rows, row_ok, RMS, ACC)
            x_row = x_ptr + (m * s_xm + k * s_xk)
            g_row = dy_ptr + (m * s_gm + k * s_gk)
            s1 = tl.zeros([BLOCK_M, BLOCK_N], ACC)
            s2 = tl.zeros([BLOCK_M, BLOCK_N], ACC)
            for i in range(0, n_chunks):
                cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
                c_ok = cols < N
                mask = row_ok[:, None] & c_ok[None, :]
                xh, dy, g = _tile_terms(x_row[:, None] + cols[None, :] * s_xn,
                                        g_row[:, None] + cols[None, :] * s_gn, w_ptr, cols, mask, c_ok, mean, rstd,
                                        RMS, HAS_W, ACC, "", False)
                s1 += g * xh
                if not RMS:
                    s2 += g
            tl.store(cs_ptr + 2 * rows, div_exact(tl.sum(s1, 1), N, ACC), mask=row_ok)
            if not RMS:
                tl.store(cs_ptr + 2 * rows + 1, div_exact(tl.sum(s2, 1), N, ACC), mask=row_ok)
        tl.debug_barrier()  # (the sums are read back by other threads of this program)
    for i in range(0, n_chunks):
        cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
        c_ok = cols < N
        acc_w = tl.zeros([BLOCK_N], PACC)
        acc_b = tl.zeros([BLOCK_N], PACC)
        for blk in tl.range(pid, blocks, programs):
            rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
            mask = row_ok[:, None] & c_ok[None, :]
            mean, rstd = _row_stats(mean_ptr, rstd_ptr, rows, row_ok, RMS, ACC)
            xh, dy, g = _tile_terms(x_ptr + (m * s_xm + k * s_xk)[:, None] + cols[None, :] * s_xn,
                                    dy_ptr + (m * s_gm + k * s_gk)[:, None] + cols[None, :] * s_gn, w_ptr, cols, mask,
                                    c_ok, mean, rstd, RMS, HAS_W, ACC, "evict_first", False)
            if NEED_DX:
                c1 = tl.load(cs_ptr + 2 * rows, mask=row_ok, other=0)
                if RMS:
                    dx = (g - xh * c1[:, None]) * rstd[:, None]
                else:
                    c2 = tl.load(cs_ptr + 2 * rows + 1, mask=row_ok, other=0)
                    dx = (g - xh * c1[:, None] - c2[:, None]) * rstd[:, None]
                tl.store(dx_ptr + (m * s_om + k * s_ok)[:, None] + cols[None, :] * s_on, dx, mask=mask,
                         eviction_policy="evict_first")
            if NEED_DW:
                acc_w += tl.sum(dy.to(PACC) * xh.to(PACC), 0)
            if NEED_DB:
                acc_b += tl.sum(dy.to(PACC), 0)
        if NEED_DW:
            tl.store(pw_row + cols, acc_w, mask=c_ok)
        if NEED_DB:
            tl.store(pb_row + cols, acc_b, mask=c_ok)


@triton.jit
def _partials_sum_kernel(pw_ptr, pb_ptr, dw_ptr, db_ptr, P, N, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                         PACC: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, WAIT: tl.constexpr = False):
    """dw[n] (HAS_W) and db[n] (HAS_B): the sums of the P partial rows of column n, in program order (a [BLOCK_P,
    BLOCK_N] tile per step, then one fixed reduction tree), cast to the gradient's dtype by the store. WAIT: a
    dependent launch waits for the partials' launch first (``runtime.dependent_launch``)."""
    wait_for_previous_launch(WAIT)
    cols = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < N
    acc_w = tl.zeros([BLOCK_P, BLOCK_N], PACC)
    acc_b = tl.zeros([BLOCK_P, BLOCK_N], PACC)
    for p0 in range(0, P, BLOCK_P):
        ps = p0 + tl.arange(0, BLOCK_P).to(tl.int64)
        mask = (ps < P)[:, None] & c_ok[None, :]
        off = ps[:, None] * N + cols[None, :]
        if HAS_W:
            acc_w += tl.load(pw_ptr + off, mask=mask, other=0)
        if HAS_B:
            acc_b += tl.load(pb_ptr + off, mask=mask, other=0)
    if HAS_W:
        tl.store(dw_ptr + cols, tl.sum(acc_w, 0), mask=c_ok)
    if HAS_B:
        tl.store(db_ptr + cols, tl.sum(acc_b, 0), mask=c_ok)
