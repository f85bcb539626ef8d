"""rms_norm's forward kernel: the row's mean square, then ``y = x * rstd * weight`` (Zhang & Sennrich 2019).

``rstd = 1 / sqrt(mean(x^2) + eps)`` in fp32 (fp64 for fp64 inputs), IEEE-rounded (torch's CUDA kernel takes
``rsqrt``); ``x * rstd`` is formed in that dtype and multiplied by the weight in the promoted dtype of the two
(fp64 for a float64 weight of a narrower input: ``WACC``), as torch's, then rounded once to the input's dtype.

``SINGLE``: a block of BLOCK_M rows in registers (one read, one write); ``COLS`` (``threads_per_row``): each row
over a few threads, its other columns in their registers (``kernels.welford.short_rows_tile``). The loop: a first
sweep sums the squares per lane (kept in L2: evict-last), a second normalizes from the row's end. Split rows
(:func:`_split_rows_kernel`): several programs hold a row and meet at a barrier. The backward is layer_norm's kernel
without the mean (``families.layer_norm.backward_kernels``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact, sqrt_exact
from ...kernels.rows import group_barrier, restate_multiple, row_block
from ...kernels.welford import short_rows_tile


@triton.jit
def _rstd(ss, N, eps, eps_lo, ACC: tl.constexpr):
    """1 / sqrt(ss / N + eps) per row, IEEE-rounded (eps arrives as two float32 parts: ``f32_split``)."""
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
    return div_exact(1.0, sqrt_exact(div_exact(ss, N, ACC) + eps, ACC), ACC)


@triton.jit
def _scale(xh, w_ptr, cols, c_ok, HAS_W: tl.constexpr, WACC: tl.constexpr):
    """x_hat * weight[cols] in WACC (the promoted dtype of the accumulator and the weight)."""
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=c_ok, other=0)
        xh = xh.to(WACC) * w.to(WACC)
    return xh


@triton.jit
def _to_out(y, y_ptr):
    """``y`` ready to store at ``y_ptr``: a float64 product (a float64 weight) bound for a bfloat16 output is rounded
    to float32 first, because the Triton interpreter's float64 -> bfloat16 conversion reinterprets bits (zeros and
    NaN, Triton 3.6 and 3.9). Rounding twice can move a result that lies within 2^-24 (relative) of a bfloat16
    rounding midpoint by one bfloat16 ulp from torch's single rounding; float16 and float32 outputs round once.
    (The interpreter's float32 -> bfloat16 conversion itself truncates, for every op: CPU tests allow an ulp.)"""
    if y.dtype == tl.float64 and y_ptr.dtype.element_ty == tl.bfloat16:
        y = y.to(tl.float32)
    return y


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk, eps, eps_lo,
                     HAS_W: tl.constexpr, STORE_RSTD: tl.constexpr, ACC: tl.constexpr, WACC: tl.constexpr,
                     SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     PERSIST: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = 1, EVEN: tl.constexpr = False,
                     DIV: tl.constexpr = 1, EVICT: tl.constexpr = "", COLS: tl.constexpr = 0):
    """Row blocks of rms_norm (row r of the M x N x K view is (r // K, r % K)); PERSIST > 0: a persistent grid
    looping over row blocks. STORE_RSTD: each row's rstd to ``rstd_ptr`` (flat, for the backward). EVEN (single
    pass): N == BLOCK_N. DIV: N and the row strides are multiples of DIV (``runtime.row_hint``). EVICT: the L2 hint
    of the single pass's load. COLS (single pass): each row's COLS neighbouring columns across a few threads."""
    N = restate_multiple(N, DIV)
    s_xm, s_ym = restate_multiple(s_xm, DIV), restate_multiple(s_ym, DIV)
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _rms_norm_block(x_ptr, w_ptr, y_ptr, rstd_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk, eps,
                            eps_lo, HAS_W, STORE_RSTD, ACC, WACC, SINGLE, BLOCK_M, BLOCK_N, EVEN, EVICT, COLS)
    else:
        _rms_norm_block(x_ptr, w_ptr, y_ptr, rstd_ptr, tl.program_id(0), R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk,
                        eps, eps_lo, HAS_W, STORE_RSTD, ACC, WACC, SINGLE, BLOCK_M, BLOCK_N, EVEN, EVICT, COLS)


@triton.jit
def _rms_norm_block(x_ptr, w_ptr, y_ptr, rstd_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk, eps, eps_lo,
                    HAS_W: tl.constexpr, STORE_RSTD: tl.constexpr, ACC: tl.constexpr, WACC: tl.constexpr,
                    SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr,
                    EVICT: tl.constexpr, COLS: tl.constexpr):
    rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
    x_row = x_ptr + (m * s_xm + k * s_xk)
    y_row = y_ptr + (m * s_ym + k * s_yk)
    if SINGLE and COLS > 0:  # short rows, each over a few threads (threads_per_row)
        x, cols, mask = short_rows_tile(x_row, N, row_ok, s_xn, ACC, BLOCK_N, COLS, EVEN, EVICT)
        rstd = _rstd(tl.sum(tl.sum(x * x, 1), 1), N, eps, eps_lo, ACC)  # (the register axis first)
        y = x * rstd[:, None, None]
        if HAS_W:
            if EVEN:
                w = tl.load(w_ptr + cols)
            else:
                w = tl.load(w_ptr + cols, mask=cols < N, other=0)
            y = y.to(WACC) * w.to(WACC)
        tl.store(y_row[:, None, None] + cols.to(tl.int64) * s_yn, _to_out(y, y_ptr), mask=mask)
    elif SINGLE:
        cols = tl.arange(0, BLOCK_N).to(tl.int64)
        c_ok = cols < N
        if EVEN:
            mask = row_ok[:, None] & (cols >= 0)[None, :]
        else:
            mask = row_ok[:, None] & c_ok[None, :]
        x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0, eviction_policy=EVICT).to(ACC)
        rstd = _rstd(tl.sum(x * x, 1), N, eps, eps_lo, ACC)
        y = _scale(x * rstd[:, None], w_ptr, cols[None, :], c_ok[None, :], HAS_W, WACC)
        tl.store(y_row[:, None] + cols[None, :] * s_yn, _to_out(y, y_ptr), mask=mask)
    else:  # the sum of squares per lane over the chunks, then the normalizing sweep from the row's end
        ss_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        n_chunks = tl.cdiv(N, BLOCK_N)
        for i in range(0, n_chunks):
            cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = row_ok[:, None] & (cols < N)[None, :]
            x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0,
                        eviction_policy="evict_last").to(ACC)
            ss_l += x * x
        rstd = _rstd(tl.sum(ss_l, 1), N, eps, eps_lo, ACC)
        for i in range(0, n_chunks):
            cols = (n_chunks - 1 - i) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
            c_ok = cols < N
            mask = row_ok[:, None] & c_ok[None, :]
            x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0,
                        eviction_policy="evict_first").to(ACC)
            y = _scale(x * rstd[:, None], w_ptr, cols[None, :], c_ok[None, :], HAS_W, WACC)
            tl.store(y_row[:, None] + cols[None, :] * s_yn, _to_out(y, y_ptr), mask=mask,
                     eviction_policy="evict_first")
    if STORE_RSTD:
        tl.store(rstd_ptr + rows, rstd, mask=row_ok)


@triton.jit
def _split_rows_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, part_ptr, count_ptr, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn,
                       s_yk, eps, eps_lo, HAS_W: tl.constexpr, STORE_RSTD: tl.constexpr, ACC: tl.constexpr,
                       WACC: tl.constexpr, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK_N: tl.constexpr,
                       PHASE: tl.constexpr):
    """Rows too long for one program, held by SPLIT programs together (``split_rows``): one read and one write, where
    the loop reads each row twice, and all the SMs busy when the rows are fewer than them (one program a row would
    leave the rest idle).

    Program ``part`` of a group keeps columns [part * BLOCK_N, (part + 1) * BLOCK_N) of its rows in registers,
    stores its chunk's sum of squares per row and, PHASE 3, waits at the row's barrier (``group_barrier``); then
    every program sums the SPLIT partials in the same order (deterministic, identical in every program) and
    writes its chunk. A persistent grid of co-resident groups (a cooperative launch, ``runtime.launch_split_rows``)
    loops over the rows; PHASE 1 and 2 are the halves as two launches (the interpreter, or no group fits the device),
    PHASE 2 reading the row again.
    """
    part = tl.program_id(0) % SPLIT
    group = tl.program_id(0) // SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    parts = tl.arange(0, SPLIT_P2)  # (partials of a row: SPLIT_P2 slots, SPLIT of them written)
    for row in tl.range(group, R, groups):
        r = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + (r // K) * s_xm + (r % K) * s_xk + cols * s_xn, mask=ok, other=0).to(ACC)
        if PHASE != 2:
            tl.store(part_ptr + r * SPLIT_P2 + part, tl.sum(x * x, 0))
        if PHASE == 3:
            group_barrier(count_ptr + r, SPLIT)
        if PHASE != 1:
            # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
            ss = tl.sum(tl.load(part_ptr + r * SPLIT_P2 + parts, mask=parts < SPLIT, other=0, cache_modifier=".cg"), 0)
            rstd = _rstd(ss, N, eps, eps_lo, ACC)
            if STORE_RSTD:  # noqa: SIM102 (a constexpr test beside a runtime one)
                if part == 0:
                    tl.store(rstd_ptr + r, rstd)
            y = _scale(x * rstd, w_ptr, cols, ok, HAS_W, WACC)
            tl.store(y_ptr + (r // K) * s_ym + (r % K) * s_yk + cols * s_yn, _to_out(y, y_ptr), mask=ok)
