"""max and min with indices: the (value, first index) of each row or column.

Each lane keeps its running extreme and the chunk where it was reached; positions are rebuilt once at the end
(``kernels.combine.arg_finish``). NaN is the max and the min (as in torch), ties keep the first index, split
partials merge in index order.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import arg_combine, arg_finish, arg_reduce, arg_step
from ...kernels.rows import (
    aligned_rows,
    col_block,
    load_loop,
    restate_multiple,
    row_masks,
    slice_as_row,
    wait_for_previous_launch,
)


@triton.jit
def _arg_rows_kernel(x_ptr, idx_in_ptr, val_ptr, idx_ptr, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                     IS_MAX: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr, HAS_IDX_IN: tl.constexpr,
                     SPLIT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     EVICT_LOOP: tl.constexpr = False, DIV: tl.constexpr = 1, PART: tl.constexpr = 1,
                     ALIGN: tl.constexpr = 0, WAIT: tl.constexpr = False):
    """(value, first index) of the max/min of each row; HAS_IDX_IN combines split partials (value, index);
    EVICT_LOOP: the evict-first hint on the loop's loads (2-byte dtypes, :func:`load_loop`); DIV: N and the row
    stride are multiples of DIV. PART (the loop): PART whole chunks per iteration, unrolled, then the rest.
    ALIGN (the loop; odd widths): shifted tiles (:func:`_arg_shifted_loop`), a split's slices each shifted as a row
    of its own (unit-stride rows: ``s_xn`` is 1). WAIT: a dependent launch
    (the split's merge, ``runtime.dependent_launch``)."""
    wait_for_previous_launch(WAIT)
    N = restate_multiple(N, DIV)
    s_xm = restate_multiple(s_xm, DIV)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < R
    m = rows // K
    k = rows % K
    row_off = m * s_xm + k * s_xk
    if SINGLE:
        # Whole row in registers: the extreme value, then the smallest position holding it (two plain
        # reductions are cheaper than one reduction of (value, index) pairs).
        cols = tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols < N)[None, :]
        x_at = x_ptr + row_off[:, None] + cols[None, :].to(tl.int64) * s_xn
        FLOAT_IN: tl.constexpr = x_ptr.dtype.element_ty.is_floating()
        if FLOAT_IN:  # masked lanes load the identity (+-inf): no select per element (H200: bf16 69 -> 76 %)
            v = tl.load(x_at, mask=mask, other=IDENT, eviction_policy="evict_first").to(ACC)
        else:  # (an integer input cannot hold the accumulator's identity)
            v = tl.where(mask, tl.load(x_at, mask=mask, other=0, eviction_policy="evict_first").to(ACC), IDENT)
        rv, ri = arg_finish(v, cols[None, :], BLOCK_N, 1, IS_MAX)  # int32 positions
        rv = tl.load(x_ptr + row_off + ri * s_xn, mask=row_ok).to(ACC)  # x[index]: -0.0 vs 0.0 as torch
    elif HAS_IDX_IN:
        # Combining split partials (a few per row): the index travels with its value.
        acc_v = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
        acc_i = tl.full([BLOCK_M, BLOCK_N], 0x7FFFFFFFFFFFFFFF, tl.int64)
        for n0 in range(0, N, BLOCK_N):
            cols = (n0 + tl.arange(0, BLOCK_N)).to(tl.int64)
            mask = row_ok[:, None] & (cols < N)[None, :]
            offs = row_off[:, None] + cols[None, :] * s_xn
            v = tl.where(mask, tl.load(x_ptr + offs, mask=mask, other=0).to(ACC), IDENT)
            i = tl.load(idx_in_ptr + offs, mask=mask, other=0x7FFFFFFFFFFFFFFF)
            acc_v, acc_i = arg_combine(acc_v, acc_i, v, i, IS_MAX)
        rv, ri = arg_reduce(acc_v, acc_i, 1, IS_MAX)
    elif ALIGN > 0:
        if SPLIT > 1:  # a split's slice (whole chunks long but the last) shifted as a row of its own
            s_off, n_row, s0 = slice_as_row(row_off, N, n_per_split)
            rv, ri = _arg_shifted_loop(x_ptr, s_off, row_ok, n_row, s_xn, IS_MAX, IDENT, ACC, BLOCK_M, BLOCK_N,
                                       EVICT_LOOP, PART, ALIGN)
            ri = ri + s0
        else:
            rv, ri = _arg_shifted_loop(x_ptr, row_off, row_ok, N, s_xn, IS_MAX, IDENT, ACC, BLOCK_M, BLOCK_N,
                                       EVICT_LOOP, PART, ALIGN)
        rv = tl.load(x_ptr + row_off + ri * s_xn, mask=row_ok).to(ACC)  # x[index]: -0.0 vs 0.0 as torch
    else:
        # Each lane keeps its running extreme and the (int32) chunk where it was reached; positions are rebuilt
        # once at the end. Half the per-element work of carrying int64 (value, index) pairs through the loop.
        n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
        n_hi = tl.minimum(N, n_lo + n_per_split)
        acc_v = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
        acc_c = tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
        lanes = tl.arange(0, BLOCK_N)
        c_part = 0  # chunks taken PART per iteration (whole ones)
        if PART > 1:
            c_part = (n_hi - n_lo) // (PART * BLOCK_N) * PART
            for g in range(0, c_part, PART):
                for u in tl.static_range(PART):  # loads issued together, no column mask
                    cols = n_lo + (g + u) * BLOCK_N + lanes
                    v = load_loop(x_ptr + row_off[:, None] + cols[None, :] * s_xn, row_ok[:, None], EVICT_LOOP)
                    acc_v, acc_c = arg_step(acc_v, acc_c, v.to(ACC), tl.cast(g + u, tl.int32), IS_MAX)
        for c in range(c_part, tl.cdiv(n_hi - n_lo, BLOCK_N)):
            cols = n_lo + c * BLOCK_N + lanes
            mask = row_ok[:, None] & (cols < n_hi)[None, :]
            v = tl.where(mask, load_loop(x_ptr + row_off[:, None] + cols[None, :] * s_xn, mask,
                                         EVICT_LOOP).to(ACC), IDENT)
            acc_v, acc_c = arg_step(acc_v, acc_c, v, tl.cast(c, tl.int32), IS_MAX)
        rv, ri = arg_finish(acc_v, n_lo + acc_c.to(tl.int64) * BLOCK_N + lanes[None, :], n_hi, 1, IS_MAX)
        rv = tl.load(x_ptr + row_off + ri * s_xn, mask=row_ok).to(ACC)  # x[index]: -0.0 vs 0.0 as torch
    if SPLIT > 1:
        tl.store(val_ptr + rows * SPLIT + tl.program_id(1), rv, mask=row_ok)
        tl.store(idx_ptr + rows * SPLIT + tl.program_id(1), ri, mask=row_ok)
    else:
        tl.store(val_ptr + m * s_om + k * s_ok, rv, mask=row_ok)
        tl.store(idx_ptr + m * s_om + k * s_ok, ri, mask=row_ok)


@triton.jit
def _arg_chunk(acc_v, acc_c, x_row, c, lead, N, row_ok, s_xn, IS_MAX: tl.constexpr, IDENT: tl.constexpr,
               ACC: tl.constexpr, BLOCK_N: tl.constexpr, EVICT_LOOP: tl.constexpr, ALIGN: tl.constexpr,
               WHOLE: tl.constexpr):
    """One chunk ``c`` of :func:`_arg_shifted_loop`; WHOLE: inside every row (masked per row only)."""
    cols = c * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    at = x_row[:, None] + cols[None, :] * s_xn
    if WHOLE:
        v = load_loop(at, row_ok[:, None], EVICT_LOOP).to(ACC)
    else:
        mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
        v = tl.where(mask, load_loop(at, lmask, EVICT_LOOP).to(ACC), IDENT)
    return arg_step(acc_v, acc_c, v, tl.cast(c, tl.int32), IS_MAX)


@triton.jit
def _arg_shifted_loop(x_ptr, row_off, row_ok, N, s_xn, IS_MAX: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT_LOOP: tl.constexpr, PART: tl.constexpr,
                      ALIGN: tl.constexpr):
    """(value, first index) of rows that start off 16-byte boundaries, in tiles from the boundary below each row
    (``kernels.rows.aligned_rows``: 16-byte loads): tile chunk 0 (the shift's lanes) and the chunks past
    N // BLOCK_N masked, those between whole (PART per iteration), with no element mask or select.

    A lane's position is its chunk's columns less the row's shift; a lane that kept the identity from a masked
    lane of chunk 0 (before the row: a negative position) is moved past the row, as the lanes past its end."""
    x_off, lead = aligned_rows(row_off, ALIGN)
    x_row = x_ptr + x_off
    acc_v = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
    acc_c = tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
    acc_v, acc_c = _arg_chunk(acc_v, acc_c, x_row, 0, lead, N, row_ok, s_xn, IS_MAX, IDENT, ACC, BLOCK_N,
                              EVICT_LOOP, ALIGN, False)
    inner = tl.maximum(N // BLOCK_N, 1)
    c_part = 1 + (inner - 1) // PART * PART
    for g in range(1, c_part, PART):
        for u in tl.static_range(PART):  # loads issued together
            acc_v, acc_c = _arg_chunk(acc_v, acc_c, x_row, g + u, lead, N, row_ok, s_xn, IS_MAX, IDENT, ACC,
                                      BLOCK_N, EVICT_LOOP, ALIGN, True)
    for c in range(c_part, inner):
        acc_v, acc_c = _arg_chunk(acc_v, acc_c, x_row, c, lead, N, row_ok, s_xn, IS_MAX, IDENT, ACC, BLOCK_N,
                                  EVICT_LOOP, ALIGN, True)
    for c in range(inner, tl.cdiv(N + ALIGN - 1, BLOCK_N)):
        acc_v, acc_c = _arg_chunk(acc_v, acc_c, x_row, c, lead, N, row_ok, s_xn, IS_MAX, IDENT, ACC, BLOCK_N,
                                  EVICT_LOOP, ALIGN, False)
    pos = acc_c.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :] - lead[:, None]
    pos = tl.where(pos >= 0, pos, N)
    return arg_finish(acc_v, pos, N, 1, IS_MAX)


@triton.jit
def _arg_cols_kernel(x_ptr, val_ptr, idx_ptr, M, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                     IS_MAX: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr,
                     SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """As the rows loop of :func:`_arg_rows_kernel`, over [BLOCK_N, BLOCK_K] tiles along the contiguous k.
    No DIV hint (``runtime.col_hint``): with it, max over dim 0 of 16384x1000 bf16 lost 27 -> 22 % of copy
    bandwidth on the H200, where the other column kernels gained or held."""
    m, ks, k_ok = col_block(K, BLOCK_K)
    x_col = x_ptr + m * s_xm + ks * s_xk
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    acc_v = tl.full([BLOCK_N, BLOCK_K], IDENT, ACC)
    acc_c = tl.zeros([BLOCK_N, BLOCK_K], tl.int32)
    lanes = tl.arange(0, BLOCK_N)
    for c in range(0, tl.cdiv(n_hi - n_lo, BLOCK_N)):
        ns = n_lo + c * BLOCK_N + lanes
        mask = (ns < n_hi)[:, None] & k_ok[None, :]
        v = tl.where(mask, tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=mask, other=0,
                                   eviction_policy="evict_first").to(ACC), IDENT)
        acc_v, acc_c = arg_step(acc_v, acc_c, v, tl.cast(c, tl.int32), IS_MAX)
    rv, ri = arg_finish(acc_v, n_lo + acc_c.to(tl.int64) * BLOCK_N + lanes[:, None], n_hi, 0, IS_MAX)
    rv = tl.load(x_col + ri * s_xn, mask=k_ok).to(ACC)  # x[index]: -0.0 vs 0.0 as torch
    if SPLIT > 1:
        offs = (m * K + ks) * SPLIT + tl.program_id(1)
        tl.store(val_ptr + offs, rv, mask=k_ok)
        tl.store(idx_ptr + offs, ri, mask=k_ok)
    else:
        tl.store(val_ptr + m * s_om + ks * s_ok, rv, mask=k_ok)
        tl.store(idx_ptr + m * s_om + ks * s_ok, ri, mask=k_ok)
