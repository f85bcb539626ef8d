"""sum, mean, prod, amax, amin, max, min: plain and arg (value + index) reductions.

Two kernel shapes serve every op of this family:

- ``_rows_kernel``: the reduced axis is the fast one (``stride_n == 1``, e.g. ``dim=-1``). A program owns
  BLOCK_M rows and sweeps N in BLOCK_N chunks, combining elementwise into a [BLOCK_M, BLOCK_N] accumulator and
  reducing it once at the end (one chunk = single pass, several = multi pass).
- ``_cols_kernel``: the kept axis K is the fast one (``dim=0`` of a matrix, a middle dim): a program owns BLOCK_K
  contiguous outputs of one m and sweeps N, so every load is a coalesced row segment: no transpose copy.

With ``strategy="split"`` each output's N range is cut into ``split`` slices reduced by separate programs into a
partials buffer [outputs, split]; ``_rows_kernel`` then combines the partials in a fixed order (deterministic,
no atomics). Accumulation is fp32 for fp16/bf16/fp32, fp64 for fp64, int64 for integers and bool.

Reduced dims that are not one strided axis (``sum(x, (0, 2, 3))`` of NCHW: per-channel sums) go in stages, one
launch per group of dims, through contiguous temporaries in the accumulation dtype (:func:`_reduce_into`): each
(n, c) row of H*W first, then n. Each stage reads its input once; only the last divides (mean) and rounds.
Inputs whose dims cannot even be staged (sliced in several dims) are gathered into one copy, logged.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from tritred_core import LaunchConfig, ReductionSpec

from . import runtime as rt
from .kernels.combine import (
    MAX,
    MIN,
    PROD,
    SUM,
    arg_combine,
    arg_finish,
    arg_reduce,
    arg_step,
    combine,
    div_exact,
    tile_reduce,
)
from .kernels.dtypes import acc_dtype, f32_split, identity, pre_cast, tl_dtype
from .kernels.rows import (
    aligned_rows,
    col_block,
    load_loop,
    loop_evicts,
    row_block,
    row_masks,
    wait_for_previous_launch,
)
from .runtime import UNSET as _UNSET  # marks an argument that was not passed
from .runtime import Recorder, find_plan
from .runtime import Unset as _Unset

# --------------------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------------------


@triton.jit
def _rows_kernel(x_ptr, out_ptr, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                 divisor, divisor_lo,
                 OP: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr,
                 MEAN: tl.constexpr, SPLIT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, PERSIST: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = 1,
                 ALIGN: tl.constexpr = 0, DIV: tl.constexpr = 1, UNROLL: tl.constexpr = 0, PART: tl.constexpr = 1,
                 PEEL: tl.constexpr = True, TAIL: tl.constexpr = 0, WAIT: tl.constexpr = False):
    """Reduce rows of length N (row r = (m, k)) into out[m, k], or into partials[r, split] when SPLIT > 1.

    PERSIST > 0 (``num_programs`` of the config): a persistent grid of PERSIST programs, each looping over row
    blocks with ``tl.range`` pipelining (LOOP_STAGES), so that the next block's loads are in flight while this
    block reduces. DIV: N and the row stride are multiples of DIV. UNROLL (loop, no split, unshifted): rows of
    exactly UNROLL full chunks, the loop unrolled (``runtime.unrolled_chunks``). PART (other loops, unshifted):
    PART whole chunks per iteration, unrolled (``num_stages`` of a row loop's config), then the rest one by one.
    PEEL (shifted loops; off only for an A/B, tools/peel_ab.py): the chunks inside every row take no element mask.
    TAIL (single pass): the row's lanes past BLOCK_N in a second tile of TAIL lanes (``BLOCK_TAIL``).
    WAIT: a dependent launch (a split's merge, ``runtime.dependent_launch``).
    """
    wait_for_previous_launch(WAIT)
    if DIV > 1:  # restated so that the compiler sees the divisibility (``runtime.row_hint``): vector loads, masks
        N = N // DIV * DIV
        s_xm = s_xm // DIV * DIV
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _rows_block(x_ptr, out_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split, divisor,
                        divisor_lo, OP, IDENT, ACC, PRE, CAST, MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N, ALIGN, UNROLL,
                        PART, PEEL, TAIL)
    else:
        _rows_block(x_ptr, out_ptr, tl.program_id(0), R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split, divisor,
                    divisor_lo, OP, IDENT, ACC, PRE, CAST, MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N, ALIGN, UNROLL, PART,
                    PEEL, TAIL)


@triton.jit
def _whole_chunk(acc, x_row, n0, row_ok, s_xn, OP: tl.constexpr, ACC: tl.constexpr, PRE: tl.constexpr,
                 CAST: tl.constexpr, BLOCK_N: tl.constexpr):
    """``acc`` combined with the chunk of columns [n0, n0 + BLOCK_N) of the rows at ``x_row``, all in the row (no
    column mask; rows out of range load 0 and are never stored)."""
    cols = n0 + tl.arange(0, BLOCK_N)
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=row_ok[:, None], other=0)
    return combine(acc, x.to(PRE).to(CAST).to(ACC), OP)


@triton.jit
def _masked_chunk(acc, x_row, n0, lead, n_hi, row_ok, s_xn, OP: tl.constexpr, IDENT: tl.constexpr,
                  ACC: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    """``acc`` combined with tile columns [n0, n0 + BLOCK_N) of the rows at ``x_row`` that end at column ``n_hi``
    (a split slice's end, or N), lanes outside the rows at the identity; ALIGN: shifted rows (:func:`row_masks`,
    never with a split: ``n_hi`` is N)."""
    cols = n0 + tl.arange(0, BLOCK_N)
    mask, lmask = row_masks(cols, lead, n_hi, row_ok, ALIGN)
    # (no L2 hint in row loops: evict-first made long fp32 rows slower, 1024x131072: 95 -> 91 %)
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=lmask, other=0)
    return combine(acc, tl.where(mask, x.to(PRE).to(CAST).to(ACC), IDENT), OP)


@triton.jit
def _single_tile(x_row, cols, lead, N, row_ok, s_xn, OP: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr,
                 PRE: tl.constexpr, CAST: tl.constexpr, ALIGN: tl.constexpr):
    """The reduction of a single pass's tile of the rows at tile columns ``cols`` (the row's BLOCK_N lanes, or its
    TAIL), lanes outside each row at the identity. The input is read once: evict-first."""
    mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
    # int32 columns for the masks, int64 in the address: a strided row (K = 1, element stride s_xn) may reach past
    # offset 2^31 within one tile (unit-stride rows compile to the same instructions either way)
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=lmask, other=0,
                eviction_policy="evict_first")
    # dtype= converts the input first (torch semantics), then we widen to the accumulator.
    return tile_reduce(tl.where(mask, x.to(PRE).to(CAST).to(ACC), IDENT), 1, OP)


@triton.jit
def _rows_block(x_ptr, out_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split, divisor, divisor_lo,
                OP: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr,
                MEAN: tl.constexpr, SPLIT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, ALIGN: tl.constexpr, UNROLL: tl.constexpr = 0, PART: tl.constexpr = 1,
                PEEL: tl.constexpr = True, TAIL: tl.constexpr = 0):
    """Row block ``blk`` of :func:`_rows_kernel`. ALIGN (unit-stride rows, no split): tiles start at the 16-byte
    boundary below each row (see ``aligned_rows``)."""
    rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
    x_off = m * s_xm + k * s_xk
    x_off, lead = aligned_rows(x_off, ALIGN)
    x_row = x_ptr + x_off
    if SINGLE:  # the row is one tile: no loop, no loop-carried accumulator
        lead32 = lead.to(tl.int32)  # (int32 compares: see row_masks)
        r = _single_tile(x_row, tl.arange(0, BLOCK_N), lead32, N, row_ok, s_xn, OP, IDENT, ACC, PRE, CAST, ALIGN)
        if TAIL > 0:  # (the row's lanes past BLOCK_N: a row just past a power of two in BLOCK_N + TAIL lanes)
            r = combine(r, _single_tile(x_row, BLOCK_N + tl.arange(0, TAIL), lead32, N, row_ok, s_xn, OP, IDENT, ACC,
                                        PRE, CAST, ALIGN), OP)
    elif UNROLL > 0:  # N == UNROLL * BLOCK_N: whole chunks, unrolled (all of the row's loads in flight at once)
        acc = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
        for i in tl.static_range(UNROLL):
            acc = _whole_chunk(acc, x_row, i * BLOCK_N, row_ok, s_xn, OP, ACC, PRE, CAST, BLOCK_N)
        r = tile_reduce(acc, 1, OP)
    else:
        n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
        n_hi = tl.minimum(N, n_lo + n_per_split)
        n_end = n_hi
        if ALIGN > 0:  # (never with SPLIT: n_lo is 0, the slice is the whole row)
            n_hi = N
            n_end = N + ALIGN - 1
        acc = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
        if PART > 1 and ALIGN == 0:
            # PART whole chunks per iteration, unrolled: their loads are issued together (a runtime trip count
            # otherwise keeps one chunk in flight, see runtime.unrolled_chunks), no column mask.
            n_whole = n_lo + (n_hi - n_lo) // (PART * BLOCK_N) * (PART * BLOCK_N)
            for g0 in range(n_lo, n_whole, PART * BLOCK_N):
                for u in tl.static_range(PART):
                    acc = _whole_chunk(acc, x_row, g0 + u * BLOCK_N, row_ok, s_xn, OP, ACC, PRE, CAST, BLOCK_N)
            n_lo = n_whole
        if ALIGN > 0 and PEEL and BLOCK_N >= ALIGN:
            # Shifted rows: the head chunk (the shift's lanes) masked, then the chunks inside every row with no
            # element mask or select (as softmax._chunk_in), then the tail below, masked.
            acc = _masked_chunk(acc, x_row, 0, lead, n_hi, row_ok, s_xn, OP, IDENT, ACC, PRE, CAST, ALIGN, BLOCK_N)
            for n0 in range(BLOCK_N, N // BLOCK_N * BLOCK_N, BLOCK_N):
                acc = _whole_chunk(acc, x_row, n0, row_ok, s_xn, OP, ACC, PRE, CAST, BLOCK_N)
            n_lo = tl.maximum(N // BLOCK_N * BLOCK_N, BLOCK_N).to(tl.int64)
        for n0 in range(n_lo, n_end, BLOCK_N):
            acc = _masked_chunk(acc, x_row, n0, lead, n_hi, row_ok, s_xn, OP, IDENT, ACC, PRE, CAST, ALIGN, BLOCK_N)
        r = tile_reduce(acc, 1, OP)
    if SPLIT > 1:
        tl.store(out_ptr + rows * SPLIT + tl.program_id(1), r, mask=row_ok)
    else:
        if MEAN:
            r = div_exact(r, tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC), ACC)
        tl.store(out_ptr + m * s_om + k * s_ok, r, mask=row_ok)


@triton.jit
def _cols_kernel(x_ptr, out_ptr, M, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                 divisor, divisor_lo,
                 OP: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr,
                 MEAN: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 LOADS: tl.constexpr = 1, DIV: tl.constexpr = 1):
    """Reduce over N for BLOCK_K adjacent k of one m: tiles [BLOCK_N, BLOCK_K] load along the fast k axis.
    DIV: K and the m and n strides are multiples of DIV.

    Each loop iteration loads LOADS tiles before combining any (independent loads in flight per thread: a
    manual pipeline, since Triton's pipeliner does not stage these loads), with an evict-first hint: the input
    is read once, so its lines should not push other data out of L2. (H200, sum dim=1 of 64x4096x256 bf16:
    hint 69 -> 74 %, 4 loads 75 %; tools/exp_h200.py.)
    """
    if DIV > 1:  # restated so that the compiler sees the divisibility (``runtime.col_hint``): vector loads, masks
        K = K // DIV * DIV
        s_xm = s_xm // DIV * DIV
        s_xn = s_xn // DIV * DIV
        s_om = s_om // DIV * DIV
    m, ks, k_ok = col_block(K, BLOCK_K)
    x_col = x_ptr + m * s_xm + ks * s_xk
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    acc = tl.full([BLOCK_N, BLOCK_K], IDENT, ACC)
    for n0 in range(n_lo, n_hi, BLOCK_N * LOADS):
        for u in tl.static_range(LOADS):
            ns = n0 + u * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = (ns < n_hi)[:, None] & k_ok[None, :]
            x = tl.load(x_col[None, :] + ns[:, None].to(tl.int64) * s_xn, mask=mask, other=0,
                        eviction_policy="evict_first")
            x = x.to(PRE).to(CAST).to(ACC)
            if OP != 0:  # (not a sum: its masked lanes already hold its identity, the load's 0)
                x = tl.where(mask, x, IDENT)
            acc = combine(acc, x, OP)
    r = tile_reduce(acc, 0, OP)
    if SPLIT > 1:
        tl.store(out_ptr + (m * K + ks) * SPLIT + tl.program_id(1), r, mask=k_ok)
    else:
        if MEAN:
            r = div_exact(r, tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC), ACC)
        tl.store(out_ptr + m * s_om + ks * s_ok, r, mask=k_ok)


@triton.jit
def _arg_rows_kernel(x_ptr, idx_in_ptr, val_ptr, idx_ptr, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                     IS_MAX: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr, HAS_IDX_IN: tl.constexpr,
                     SPLIT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     EVICT_LOOP: tl.constexpr = False, DIV: tl.constexpr = 1, PART: tl.constexpr = 1,
                     ALIGN: tl.constexpr = 0, WAIT: tl.constexpr = False):
    """(value, first index) of the max/min of each row; HAS_IDX_IN combines split partials (value, index);
    EVICT_LOOP: the evict-first hint on the loop's loads (2-byte dtypes, :func:`load_loop`); DIV: N and the row
    stride are multiples of DIV. PART (the loop): PART whole chunks per iteration, unrolled, then the rest.
    ALIGN (the loop, no split; odd widths): shifted tiles (:func:`_arg_shifted_loop`). WAIT: a dependent launch
    (the split's merge, ``runtime.dependent_launch``)."""
    wait_for_previous_launch(WAIT)
    if DIV > 1:  # restated so that the compiler sees the divisibility (``runtime.row_hint``): vector loads, masks
        N = N // DIV * DIV
        s_xm = s_xm // DIV * DIV
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
        rv, ri = _arg_shifted_loop(x_ptr, row_off, row_ok, N, s_xn, IS_MAX, IDENT, ACC, BLOCK_M, BLOCK_N, EVICT_LOOP,
                                   PART, ALIGN)
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
    bandwidth on the H200 (tools/div_ab.py --cols), where the other column kernels gained or held."""
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


# --------------------------------------------------------------------------------------------------------------
# host side
# --------------------------------------------------------------------------------------------------------------

SPECS = {
    "sum": ReductionSpec(name="sum", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.sum",
                         summary="sum over dims (integer and bool inputs sum into int64)"),
    "mean": ReductionSpec(name="mean", family="reduce", mirrors="torch.mean", summary="arithmetic mean over dims"),
    "prod": ReductionSpec(name="prod", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.prod",
                          summary="product over dims"),
    "amax": ReductionSpec(name="amax", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.amax",
                          summary="maximum over dims (NaN propagates)"),
    "amin": ReductionSpec(name="amin", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.amin",
                          summary="minimum over dims (NaN propagates)"),
    "max": ReductionSpec(name="max", family="reduce", dtypes=rt.ALL_DTYPES, outputs=("values", "indices"),
                         mirrors="torch.max", summary="max, or (values, indices) of the first max along dim"),
    "min": ReductionSpec(name="min", family="reduce", dtypes=rt.ALL_DTYPES, outputs=("values", "indices"),
                         mirrors="torch.min", summary="min, or (values, indices) of the first min along dim"),
}


def _values_indices(name: str, values: torch.Tensor, indices: torch.Tensor) -> Any:
    """``torch.return_types.max`` / ``min`` of (values, indices): the type torch's own max/min with dim return."""
    return (torch.return_types.max if name == "max" else torch.return_types.min)((values, indices))


def _launch_reduce(rec: Recorder, op: int, name: str, x: torch.Tensor, view: rt.View, out: torch.Tensor,
                   cast: torch.dtype, acc: torch.dtype, mean_divisor: float, cfg: LaunchConfig) -> None:
    """Run one plain reduction of ``x`` (described by ``view``) into ``out`` with config ``cfg``."""
    (sxm, sxn, sxk), (som, _, sok) = view.strides
    R = view.M * view.K
    ident = identity(op, acc)
    consts = dict(OP=op, IDENT=ident, ACC=tl_dtype(acc), MEAN=mean_divisor > 0, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    split, nps = rt.split_plan(cfg, view.N)
    target = rec.empty((R, split), acc, x.device) if split > 1 else out
    if rt.rows_layout(view):
        programs, persist = rt.row_programs(cfg, R, split)
        grid = (programs, split)
        single = split == 1 and cfg.BLOCK_N + cfg.BLOCK_TAIL >= view.N
        align = rt.row_align(x, view, cfg, single) if split == 1 else 0
        rec.launch(
            _rows_kernel, grid, x, target, R, view.N, view.K, sxm, sxn, sxk, som, sok, nps, *f32_split(mean_divisor),
            PRE=pre_cast(x.dtype, cast), CAST=tl_dtype(cast), SPLIT=split, SINGLE=single, BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N, PERSIST=persist, LOOP_STAGES=cfg.num_stages, ALIGN=align,
            DIV=rt.row_hint(view, align),
            UNROLL=rt.unrolled_chunks(view.N, cfg) if not single and split == 1 and not align else 0,
            PART=1 if single else cfg.num_stages, TAIL=rt.single_tail(cfg, view, single), **consts)
    else:
        rt.no_tail(cfg, name)
        grid = (view.M * rt.cdiv(view.K, cfg.BLOCK_K), split)
        # num_stages of a column config: tiles loaded per loop iteration (see _cols_kernel)
        rec.launch(
            _cols_kernel, grid, x, target, view.M, view.N, view.K, sxm, sxn, sxk, som, sok, nps,
            *f32_split(mean_divisor), PRE=pre_cast(x.dtype, cast), CAST=tl_dtype(cast), SPLIT=split,
            BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, LOADS=cfg.num_stages, DIV=rt.col_hint(view),
            **{**consts, "num_stages": 1})
    if split > 1:  # combine the partials of each output in a fixed order
        block_m, block_n = rt.combine_blocks(R, split)
        rec.launch(_rows_kernel, (rt.cdiv(R, block_m), 1), target, out, R, split, view.K, view.K * split, 1, split,
                   som, sok, split, *f32_split(mean_divisor), PRE=tl_dtype(acc), CAST=tl_dtype(acc), SPLIT=1,
                   SINGLE=True, BLOCK_M=block_m, BLOCK_N=block_n, **rt.dependent_launch(x.device), **consts)


def _first_stage(x: torch.Tensor, dims: tuple[int, ...]) -> tuple[tuple[int, ...], list[int], rt.View] | None:
    """A first stage for reduced dims that are not one strided axis of ``x`` (dims (0, 2, 3) of NCHW): the
    most reduced dims, taken in order of stride (smallest first), that are one strided axis; returns (those
    dims, the shape of the contiguous temporary that keeps every other dim, the joint view of ``x`` and that
    temporary), or None when not even one dim can go first on its own."""
    order = sorted(dims, key=lambda d: (x.stride(d), d))
    for k in range(len(order) - 1, 0, -1):
        first = tuple(sorted(order[:k]))
        shape = [s for d, s in enumerate(x.shape) if d not in first]
        temp = torch.empty(shape, device="meta")  # (its strides over x's dims, as the output's)
        view = rt.canonical_view(x.shape, [list(x.stride()), rt.out_strides(temp, x.dim(), first, False)], first)
        if view is not None:
            return first, shape, view
    return None


def _next_launch(x: torch.Tensor, dims: tuple[int, ...],
                 out_flat: torch.Tensor) -> tuple[rt.View, tuple[int, ...], list[int]] | None:
    """What :func:`_reduce_into` launches next for ``dims`` of ``x``: (view, (), []) when they are one strided
    axis (straight into the output), (view of the first stage, its dims, its temporary's shape) when they are not,
    None when not even a first stage exists (the caller gathers). ``tritred explain`` and ``tune`` describe the
    same first launch."""
    view = rt.canonical_view(x.shape, [list(x.stride()), rt.out_strides(out_flat, x.dim(), dims, False)], dims)
    if view is not None:
        return view, (), []
    stage = _first_stage(x, dims)
    if stage is None:
        return None
    first, shape, view = stage
    return view, first, shape


def _reduce_into(rec: Recorder, op: int, name: str, x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor,
                 out_flat: torch.Tensor, cast: torch.dtype, acc: torch.dtype, mean_divisor: float) -> bool:
    """Reduce ``dims`` of ``x`` into ``out`` (``out_flat``: ``out`` viewed without its reduced dims, for strides
    only: the kernels get ``out`` itself, so the call stays replayable). Reduced dims that are not one strided
    axis go in stages through contiguous temporaries in the accumulation dtype, smallest strides first (sum over
    (0, 2, 3) of NCHW: each (n, c) row of H*W, then n of the (N, C) partials): every stage reads its input once,
    and only the last divides (mean) and rounds to the output dtype. False when not even a first stage exists
    (the caller gathers)."""
    step = _next_launch(x, dims, out_flat)
    if step is None:
        return False
    view, first, shape = step
    if not first:
        _launch_reduce(rec, op, name, x, view, out, cast, acc, mean_divisor, rt.decide(SPECS[name], x, view))
        return True
    temp = rec.empty(shape, acc, x.device)
    _launch_reduce(rec, op, name, x, view, temp, cast, acc, 0.0, rt.decide(SPECS[name], x, view))
    rest = tuple(d - builtins.sum(f < d for f in first) for d in dims if d not in first)  # temp's dims
    return _reduce_into(rec, op, name, temp, rest, out, out_flat, acc, acc, mean_divisor)


def _reduce(name: str, op: int, x: torch.Tensor, dim: int | Sequence[int] | None, keepdim: bool,
            dtype: torch.dtype | None) -> torch.Tensor:
    plan, key = find_plan(name, (dim, keepdim, dtype), x)
    if plan is not None:
        return plan.run(x)[0]
    x = rt.check_tensor(name, "input", x)
    spec = SPECS[name]
    rt.check_supported(name, x, allow_integers=True)  # mean: integer inputs need dtype= (checked below)
    rt.check_keepdim(name, keepdim)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")
    cast = dtype if dtype is not None else x.dtype
    if cast.is_complex:
        raise NotImplementedError(f"tritred.{name}(): dtype={cast} is not supported (complex)")
    if name == "mean" and cast not in rt.FLOATS:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                           f"or complex dtype. Got: {rt.SCALAR_TYPE_NAMES.get(cast, cast)}")
    if cast not in rt.FLOATS + rt.INTEGERS:
        raise NotImplementedError(f"tritred.{name}(): dtype={cast} is not supported")
    if name in ("sum", "prod") and dtype is None and x.dtype in rt.INTEGERS:
        out_dtype = torch.int64  # torch promotes integer and bool sums/products to int64
    else:
        out_dtype = cast
    dims = rt.wrap_dims(name, dim, x.dim())
    rt.check_runnable(name, x)
    if x.numel() == 0 or any(x.shape[d] == 0 for d in dims):
        if name in ("amax", "amin") and (x.numel() == 0 and (dim is None or dim == () or dim == [])):
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        for d in dims:
            if x.shape[d] == 0 and name in ("amax", "amin", "max", "min"):
                raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
        fill = {"sum": 0, "prod": 1, "mean": float("nan")}.get(name, 0)  # amax/amin: the result is empty
        return torch.full(rt.reduced_shape(x.shape, dims, keepdim), fill, dtype=out_dtype, device=x.device)
    acc = acc_dtype(cast)
    rec = Recorder(x)
    out = rec.empty(rt.reduced_shape(x.shape, dims, keepdim), out_dtype, x.device)
    count = rt.prod([x.shape[d] for d in dims])
    divisor = float(count) if name == "mean" else 0.0
    out_flat = out.view(rt.reduced_shape(x.shape, dims, False))
    if not _reduce_into(rec, op, name, x, dims, out, out_flat, cast, acc, divisor):
        src, view, layout = rt.gathering(name, x, dims, out, keepdim)
        _launch_reduce(rec, op, name, src, view, out, cast, acc, divisor, rt.decide(spec, x, view, layout))
    rec.save(key, out)
    return out


def sum(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
        dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum of ``input`` over ``dim`` — mirrors :func:`torch.sum`.

    Args:
        input: tensor of any shape and strides; float16/bfloat16/float32/float64, integer or bool, on CUDA (or
            CPU under ``TRITON_INTERPRET=1``).
        dim: int, tuple of ints, or None (all dims; ``()`` also means all dims, as in torch).
        keepdim: keep reduced dims with size 1.
        dtype: convert the input to this dtype before summing (and return it).

    Returns:
        Tensor of the kept shape; dtype: ``dtype``, else int64 for integer/bool inputs, else the input's.
        fp16/bf16 accumulate in fp32. Empty reductions return 0.

    Raises:
        TypeError: ``input`` not a Tensor, bad ``dim`` type. IndexError: dim out of range.
        RuntimeError: repeated dim, tensor not on CUDA (outside the interpreter).
        NotImplementedError: unsupported dtype (complex).

    Algorithm: strided tile sweep with an fp32 accumulator; deterministic two-stage split for few outputs.
    """
    return _reduce("sum", SUM, input, dim, keepdim, dtype)


def mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Arithmetic mean over ``dim`` — mirrors :func:`torch.mean`.

    Shapes and arguments as :func:`sum`. Floating inputs only (or ``dtype=`` a floating dtype): integer inputs
    raise RuntimeError like torch. An empty reduction returns NaN. Sum accumulated in fp32 (fp64 for fp64),
    then divided by the number of reduced elements.
    """
    return _reduce("mean", SUM, input, dim, keepdim, dtype)


def prod(input: torch.Tensor, dim: int | _Unset = _UNSET, keepdim: bool = False, *,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Product over ``dim`` — mirrors :func:`torch.prod` (which takes one int dim or None).

    Shapes/dtypes as :func:`sum` (integer and bool products are int64 and wrap around like torch's); an empty
    reduction returns 1. Raises as :func:`sum`.
    """
    if dim is _UNSET:
        if keepdim is not False:
            raise TypeError("prod(): keepdim needs an int dim")
        return _reduce("prod", PROD, input, None, False, dtype)
    if dim is None and rt.torch_accepts("prod(x, None)",
                                       lambda: torch.prod(torch.empty(2, device="meta"), None)):  # type: ignore[call-overload]
        return _reduce("prod", PROD, input, None, keepdim, dtype)
    if rt.as_index(dim) is None:
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    return _reduce("prod", PROD, input, dim, keepdim, dtype)  # type: ignore[arg-type]


def amax(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim`` (``()``: all dims) — mirrors :func:`torch.amax`.

    Output dtype = input dtype. NaN propagates (any NaN in a slice gives NaN). Raises IndexError when a reduced
    dim has size 0, RuntimeError for an empty input without ``dim``, plus the errors of :func:`sum`.
    """
    return _reduce("amax", MAX, input, dim, keepdim, None)


def amin(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Minimum over ``dim`` — mirrors :func:`torch.amin`; see :func:`amax`."""
    return _reduce("amin", MIN, input, dim, keepdim, None)


def _arg(name: str, x: torch.Tensor, dim: int | _Unset, keepdim: bool | _Unset) -> Any:
    plan, key = find_plan(name, (dim, keepdim), x)
    if plan is not None:
        return _values_indices(name, *plan.run(x))
    x = rt.check_tensor(name, "input", x)
    if isinstance(dim, torch.Tensor):  # torch.max(x, other): the elementwise binary overload, not a reduction
        raise TypeError(f"tritred.{name}(): a tensor second argument is torch's binary {name}(input, other) "
                        f"(elementwise); tritred has only the reductions: use torch.{name}imum, or an int dim")
    rt.check_supported(name, x, allow_integers=True)
    if dim is None:  # as torch: max(input) or max(input, int dim), no max(input, None)
        raise TypeError(f"{name}() received an invalid combination of arguments - got (Tensor, NoneType): "
                        "'dim' must be an int (or omitted for the full reduction)")
    if dim is _UNSET and keepdim is not _UNSET:
        raise TypeError(f"{name}(): keepdim needs a dim ({name}(input) takes no keepdim)")
    keepdim = rt.check_keepdim(name, False if keepdim is _UNSET else keepdim)
    if isinstance(dim, _Unset):
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return _reduce(name, MAX if name == "max" else MIN, x, None, False, None)
    d = rt.wrap_dim(name, dim, x.dim())
    rt.check_runnable(name, x)
    shape = rt.reduced_shape(x.shape, (d,) if x.dim() else (), keepdim)
    rec = Recorder(x)
    values = rec.empty(shape, x.dtype, x.device)
    indices = rec.empty(shape, torch.int64, x.device)
    if x.dim() == 0:
        values.copy_(x)
        indices.zero_()
        return _values_indices(name, values, indices)
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    if x.numel() == 0:
        return _values_indices(name, values, indices)
    src, view, layout = rt.gathering(name, x, (d,), values, keepdim, reorder=False)
    cfg = rt.decide(SPECS[name], x, view, layout)
    (sxm, sxn, sxk), (som, _, sok) = view.strides
    acc = acc_dtype(x.dtype)
    R = view.M * view.K
    is_max = name == "max"
    consts = dict(IS_MAX=is_max, IDENT=identity(MAX if is_max else MIN, acc), ACC=tl_dtype(acc),
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    split, nps = rt.split_plan(cfg, view.N)
    if split > 1:
        pv = rec.empty((R, split), acc, x.device)
        pi = rec.empty((R, split), torch.int64, x.device)
    else:
        pv, pi = values, indices
    rt.no_tail(cfg, name)
    if rt.rows_layout(view):
        single = cfg.strategy == "single_pass"
        # odd widths, loops only: the shifted tiles (the single pass keeps its plain masked tiles: not measured)
        align = rt.row_align(src, view, cfg, False, True) if not single and split == 1 else 0
        rec.launch(
            _arg_rows_kernel, (rt.cdiv(R, cfg.BLOCK_M), split), src, src, pv, pi, R, view.N, view.K, sxm, sxn, sxk, som,
            sok, nps, HAS_IDX_IN=False, SPLIT=split, SINGLE=single, BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N, EVICT_LOOP=not single and loop_evicts(src),
            DIV=rt.row_hint(view, align), PART=1 if single else cfg.num_stages, ALIGN=align, **consts)
    else:
        rec.launch(
            _arg_cols_kernel, (view.M * rt.cdiv(view.K, cfg.BLOCK_K), split), src, pv, pi, view.M, view.N, view.K, sxm,
            sxn, sxk, som, sok, nps, SPLIT=split, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, **consts)
    if split > 1:
        block_m, block_n = rt.combine_blocks(R, split)
        rec.launch(
            _arg_rows_kernel, (rt.cdiv(R, block_m), 1), pv, pi, values, indices, R, split, view.K, view.K * split, 1,
            split, som, sok, split, HAS_IDX_IN=True, SPLIT=1, SINGLE=False, BLOCK_M=block_m, BLOCK_N=block_n,
            **rt.dependent_launch(x.device), **consts)
    rec.save(key, values, indices)
    return _values_indices(name, values, indices)


def max(input: torch.Tensor, dim: int | _Unset = _UNSET, keepdim: bool | _Unset = _UNSET) -> Any:
    """Maximum — mirrors :func:`torch.max` (the reduction overloads).

    ``max(input)`` returns a 0-d tensor (NaN if any element is NaN; RuntimeError on an empty input).
    ``max(input, dim, keepdim=False)`` returns ``torch.return_types.max(values, indices)``: values in the input dtype,
    int64 indices of the first maximal element along ``dim`` (the first NaN when the slice has one).

    Raises IndexError (dim out of range, or reducing a dim of size 0), TypeError (``dim=None``, a non-int dim, or
    keepdim without dim, as torch), NotImplementedError (complex).
    Split strategy: per-slice (value, index) partials combined in index order: ties stay first-occurrence.
    """
    return _arg("max", input, dim, keepdim)


def min(input: torch.Tensor, dim: int | _Unset = _UNSET, keepdim: bool | _Unset = _UNSET) -> Any:
    """Minimum — mirrors :func:`torch.min`; see :func:`max`."""
    return _arg("min", input, dim, keepdim)
