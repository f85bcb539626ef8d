"""The plain reductions' kernels (sum, mean, prod, amax, amin, and max/min without dim): rows and columns.

- ``_rows_kernel``: the reduced axis is the fast one (``stride_n == 1``, e.g. ``dim=-1``). A program owns
  BLOCK_M rows and sweeps N in BLOCK_N chunks, combining elementwise into a [BLOCK_M, BLOCK_N] accumulator and
  reducing it once at the end (one chunk = single pass, several = multi pass). It also merges split partials.
- ``_cols_kernel``: the kept axis K is the fast one (``dim=0`` of a matrix, a middle dim): a program owns BLOCK_K
  contiguous outputs of one m and sweeps N, so every load is a coalesced row segment: no transpose copy.

A product whose slice holds +-inf or 0 is set exactly by :func:`_prod_specials` when the tree of partial products
came out NaN; partials of a product for another launch mark a slice whose finite values left float range (its loops
note whether the slice may hold a 0 or an inf: :func:`_specials_seen`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import combine, div_exact, tile_reduce
from ...kernels.rows import (
    aligned_rows,
    col_block,
    restate_multiple,
    row_block,
    row_masks,
    slice_as_row,
    wait_for_previous_launch,
)


@triton.jit
def _rows_kernel(x_ptr, out_ptr, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                 divisor, divisor_lo,
                 OP: tl.constexpr, IDENT: tl.constexpr, ACC: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr,
                 MEAN: tl.constexpr, SPLIT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, PERSIST: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = 1,
                 ALIGN: tl.constexpr = 0, DIV: tl.constexpr = 1, UNROLL: tl.constexpr = 0, PART: tl.constexpr = 1,
                 TAIL: tl.constexpr = 0, WAIT: tl.constexpr = False, MARK_IN: tl.constexpr = False,
                 MARK_OUT: tl.constexpr = False):
    """Reduce rows of length N (row r = (m, k)) into out[m, k], or into partials[r, split] when SPLIT > 1.

    PERSIST > 0 (``num_programs`` of the config): a persistent grid of PERSIST programs, each looping over row
    blocks with ``tl.range`` pipelining (LOOP_STAGES), so that the next block's loads are in flight while this
    block reduces. DIV: N and the row stride are multiples of DIV. UNROLL (loop, no split, unshifted): rows of
    exactly UNROLL full chunks, the loop unrolled (``runtime.unrolled_chunks``). PART (other loops, unshifted):
    PART whole chunks per iteration, unrolled (``num_stages`` of a row loop's config), then the rest one by one.
    TAIL (single pass): the row's lanes past BLOCK_N in a second tile of TAIL lanes (``BLOCK_TAIL``).
    WAIT: a dependent launch (a split's merge, ``runtime.dependent_launch``). MARK_IN, MARK_OUT (products): the
    input holds, or ``out`` receives, partials of a product (:func:`_prod_specials`); a split's always do.
    """
    wait_for_previous_launch(WAIT)
    N = restate_multiple(N, DIV)
    s_xm = restate_multiple(s_xm, DIV)
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _rows_block(x_ptr, out_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split, divisor,
                        divisor_lo, OP, IDENT, ACC, PRE, CAST, MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N, ALIGN, UNROLL,
                        PART, TAIL, MARK_IN, MARK_OUT or SPLIT > 1)
    else:
        _rows_block(x_ptr, out_ptr, tl.program_id(0), R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split, divisor,
                    divisor_lo, OP, IDENT, ACC, PRE, CAST, MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N, ALIGN, UNROLL, PART,
                    TAIL, MARK_IN, MARK_OUT or SPLIT > 1)


@triton.jit
def _whole_chunk(acc, seen, x_row, n0, row_ok, s_xn, OP: tl.constexpr, ACC: tl.constexpr, PRE: tl.constexpr,
                 CAST: tl.constexpr, BLOCK_N: tl.constexpr, TRACK: tl.constexpr = False):
    """(``acc``, ``seen``) combined with the chunk of columns [n0, n0 + BLOCK_N) of the rows at ``x_row``, all in
    the row (no column mask; rows out of range load 0 and are never stored). TRACK: ``seen`` as
    :func:`_specials_seen`."""
    cols = n0 + tl.arange(0, BLOCK_N)
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=row_ok[:, None], other=0)
    x = x.to(PRE).to(CAST).to(ACC)
    if TRACK:
        seen = _specials_seen(seen, x, ACC)
    return combine(acc, x, OP), seen


@triton.jit
def _specials_seen(seen, x, ACC: tl.constexpr):
    """``seen`` lowered to ``min(|x|, MAX - |x|)`` lane by lane (MAX: ACC's largest finite value), which is <= 0
    only for a 0, an inf (or ACC's largest value itself): a product's main loop notes whether its slice may hold a
    0 or an inf in one float per lane (three instructions an element), so that a product of finite values that
    left float range is marked without a second read of the slice (:func:`_prod_specials`). NaN needs no note: it
    makes the product NaN."""
    a = tl.abs(x)
    if ACC == tl.float64:
        big = 1.7976931348623157e308 - a
    else:
        big = 3.4028234663852886e38 - a
    return tl.minimum(seen, tl.minimum(a, big))


@triton.jit
def _masked_chunk(acc, seen, x_row, n0, lead, n_hi, row_ok, s_xn, OP: tl.constexpr, IDENT: tl.constexpr,
                  ACC: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr,
                  TRACK: tl.constexpr = False):
    """(``acc``, ``seen``) combined with tile columns [n0, n0 + BLOCK_N) of the rows at ``x_row`` that end at
    column ``n_hi`` (a split slice's end, or N), lanes outside the rows at the identity; ALIGN: shifted rows
    (:func:`row_masks`; ``n_hi`` the row's length, or a split slice's). TRACK: ``seen`` as :func:`_specials_seen`."""
    cols = n0 + tl.arange(0, BLOCK_N)
    mask, lmask = row_masks(cols, lead, n_hi, row_ok, ALIGN)
    # (no L2 hint in row loops: evict-first made long fp32 rows slower, 1024x131072: 95 -> 91 %)
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=lmask, other=0)
    x = tl.where(mask, x.to(PRE).to(CAST).to(ACC), IDENT)
    if TRACK:
        seen = _specials_seen(seen, x, ACC)
    return combine(acc, x, OP), seen


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
                TAIL: tl.constexpr = 0, MARK_IN: tl.constexpr = False, MARK_OUT: tl.constexpr = False):
    """Row block ``blk`` of :func:`_rows_kernel`. ALIGN (unit-stride rows): tiles start at the 16-byte boundary
    below each row (see ``aligned_rows``), and the loop's chunks inside every row take no element mask; a split's
    slice (whole chunks long but the last) is shifted as a row of its own, ``n_row`` long."""
    rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
    x_off = m * s_xm + k * s_xk
    n_row = N
    if SPLIT > 1 and ALIGN > 0:  # (rows of odd width split over programs: 16x999983 bf16 loaded 2 bytes at a time)
        x_off, n_row, _ = slice_as_row(x_off, N, n_per_split)
    x_off, lead = aligned_rows(x_off, ALIGN)
    x_row = x_ptr + x_off
    # A product whose partials go to another launch (MARK_OUT) notes in its loops whether its slice may hold a 0 or
    # an inf (:func:`_specials_seen`); a single tile is not noted (a stage's tile that left float range is read again)
    TRACK: tl.constexpr = MARK_OUT and OP == 1 and not SINGLE and (ACC == tl.float32 or ACC == tl.float64)
    if TRACK:
        seen = tl.full([BLOCK_M, BLOCK_N], 1.0, ACC)
    else:
        seen = 0.0
    if SINGLE:  # the row is one tile: no loop, no loop-carried accumulator
        lead32 = lead.to(tl.int32)  # (int32 compares: see row_masks)
        r = _single_tile(x_row, tl.arange(0, BLOCK_N), lead32, N, row_ok, s_xn, OP, IDENT, ACC, PRE, CAST, ALIGN)
        if TAIL > 0:  # (the row's lanes past BLOCK_N: a row just past a power of two in BLOCK_N + TAIL lanes)
            r = combine(r, _single_tile(x_row, BLOCK_N + tl.arange(0, TAIL), lead32, N, row_ok, s_xn, OP, IDENT, ACC,
                                        PRE, CAST, ALIGN), OP)
    elif UNROLL > 0:  # N == UNROLL * BLOCK_N: whole chunks, unrolled (all of the row's loads in flight at once)
        acc = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
        for i in tl.static_range(UNROLL):
            acc, seen = _whole_chunk(acc, seen, x_row, i * BLOCK_N, row_ok, s_xn, OP, ACC, PRE, CAST, BLOCK_N, TRACK)
        r = tile_reduce(acc, 1, OP)
    else:
        n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
        n_hi = tl.minimum(N, n_lo + n_per_split)
        n_end = n_hi
        if ALIGN > 0:  # (the whole row, or a split's slice as a row of its own)
            n_lo = n_lo * 0
            n_hi = n_row
            n_end = n_row + ALIGN - 1
        acc = tl.full([BLOCK_M, BLOCK_N], IDENT, ACC)
        if PART > 1 and ALIGN == 0:
            # PART whole chunks per iteration, unrolled: their loads are issued together (a runtime trip count
            # otherwise keeps one chunk in flight, see runtime.unrolled_chunks), no column mask.
            n_whole = n_lo + (n_hi - n_lo) // (PART * BLOCK_N) * (PART * BLOCK_N)
            for g0 in range(n_lo, n_whole, PART * BLOCK_N):
                for u in tl.static_range(PART):
                    acc, seen = _whole_chunk(acc, seen, x_row, g0 + u * BLOCK_N, row_ok, s_xn, OP, ACC, PRE, CAST,
                                             BLOCK_N, TRACK)
            n_lo = n_whole
        if ALIGN > 0 and BLOCK_N >= ALIGN:
            # Shifted rows: the head chunk (the shift's lanes) masked, then the chunks inside every row with no
            # element mask or select (as softmax._chunk_in), then the tail below, masked.
            acc, seen = _masked_chunk(acc, seen, x_row, 0, lead, n_hi, row_ok, s_xn, OP, IDENT, ACC, PRE, CAST,
                                      ALIGN, BLOCK_N, TRACK)
            for n0 in range(BLOCK_N, n_row // BLOCK_N * BLOCK_N, BLOCK_N):
                acc, seen = _whole_chunk(acc, seen, x_row, n0, row_ok, s_xn, OP, ACC, PRE, CAST, BLOCK_N, TRACK)
            n_lo = tl.maximum(n_row // BLOCK_N * BLOCK_N, BLOCK_N).to(tl.int64)
        for n0 in range(n_lo, n_end, BLOCK_N):
            acc, seen = _masked_chunk(acc, seen, x_row, n0, lead, n_hi, row_ok, s_xn, OP, IDENT, ACC, PRE, CAST,
                                      ALIGN, BLOCK_N, TRACK)
        r = tile_reduce(acc, 1, OP)
    if OP == 1 and (ACC == tl.float32 or ACC == tl.float64):
        if SPLIT > 1:  # this program's slice
            s_lo = tl.program_id(1).to(tl.int64) * n_per_split
            s_hi = tl.minimum(N, s_lo + n_per_split)
        else:
            # The whole row, as an int64 0 and N (sm_90, bf16 rows of 1000: the slice end n_per_split cost 6
            # registers more, a Python 0, which makes the reread's offsets int32, 9 more)
            s_lo = tl.program_id(1).to(tl.int64) * 0
            s_hi = N
        # A long product leaves float range in the common case (20,000 normal values multiply to 0 in float32):
        # the loops' note (TRACK) marks such a slice without reading it again. What is still read again (NaN; a
        # marked single tile) goes in chunks of the main loop's width up to 1024 lanes, not 256 (prod of
        # 384x28672 float16 on an H100, every slice read again: 256 lanes 8 % of copy, 1024 lanes 25 %, eager 36 %;
        # wider chunks cost registers: 30 -> 39-40 for 2048-4096 on the split kernels, ptxas sm_90).
        if TRACK:
            maybe = tl.min(seen, 1) <= 0
        else:
            maybe = row_ok
        r = _prod_specials(r, x_ptr, tl.cast(blk, tl.int64) * BLOCK_M, K, s_xm, s_xk, row_ok, s_lo, s_hi, s_xn,
                           PRE, CAST, ACC, MARK_IN, MARK_OUT,
                           (BLOCK_N if BLOCK_N < 1024 else 1024) if MARK_OUT else 256, maybe, TRACK)
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
                 LOADS: tl.constexpr = 1, DIV: tl.constexpr = 1, MARK_IN: tl.constexpr = False,
                 MARK_OUT: tl.constexpr = False):
    """Reduce over N for BLOCK_K adjacent k of one m: tiles [BLOCK_N, BLOCK_K] load along the fast k axis.
    DIV: K and the m and n strides are multiples of DIV. MARK_IN, MARK_OUT: as :func:`_rows_kernel`'s.

    Each loop iteration loads LOADS tiles before combining any (independent loads in flight per thread: a
    manual pipeline, since Triton's pipeliner does not stage these loads), with an evict-first hint: the input
    is read once, so its lines should not push other data out of L2. (H200, sum dim=1 of 64x4096x256 bf16:
    hint 69 -> 74 %, 4 loads 75 %.)
    """
    K = restate_multiple(K, DIV)
    s_xm, s_xn = restate_multiple(s_xm, DIV), restate_multiple(s_xn, DIV)
    s_om = restate_multiple(s_om, DIV)
    m, ks, k_ok = col_block(K, BLOCK_K)
    x_col = x_ptr + m * s_xm + ks * s_xk
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    acc = tl.full([BLOCK_N, BLOCK_K], IDENT, ACC)
    # as the rows kernel's loops: a product whose partials go to another launch notes its slices' 0s and infs
    TRACK: tl.constexpr = (MARK_OUT or SPLIT > 1) and OP == 1 and (ACC == tl.float32 or ACC == tl.float64)
    if TRACK:
        seen = tl.full([BLOCK_N, BLOCK_K], 1.0, ACC)
    else:
        seen = 0.0
    for n0 in range(n_lo, n_hi, BLOCK_N * LOADS):
        for u in tl.static_range(LOADS):
            ns = n0 + u * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = (ns < n_hi)[:, None] & k_ok[None, :]
            x = tl.load(x_col[None, :] + ns[:, None].to(tl.int64) * s_xn, mask=mask, other=0,
                        eviction_policy="evict_first")
            x = x.to(PRE).to(CAST).to(ACC)
            if OP != 0:  # (not a sum: its masked lanes already hold its identity, the load's 0)
                x = tl.where(mask, x, IDENT)
            if TRACK:
                seen = _specials_seen(seen, x, ACC)
            acc = combine(acc, x, OP)
    r = tile_reduce(acc, 0, OP)
    if OP == 1 and (ACC == tl.float32 or ACC == tl.float64):
        k_blocks = tl.cdiv(K, BLOCK_K)
        if TRACK:
            maybe = tl.min(seen, 0) <= 0
        else:
            maybe = k_ok
        # (a column product's second read goes lane by lane: prod over dim 0 of 134400x192 float32, every slice
        # read again, ran at 5 % of copy on an H100, eager 21 %)
        r = _prod_specials(r, x_ptr, m * K + tl.program_id(0) % k_blocks * BLOCK_K, K, s_xm, s_xk, k_ok,
                           tl.program_id(1).to(tl.int64) * n_per_split, n_hi, s_xn, PRE, CAST, ACC, MARK_IN,
                           MARK_OUT or SPLIT > 1, 256, maybe, TRACK)
    if SPLIT > 1:
        tl.store(out_ptr + (m * K + ks) * SPLIT + tl.program_id(1), r, mask=k_ok)
    else:
        if MEAN:
            r = div_exact(r, tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC), ACC)
        tl.store(out_ptr + m * s_om + ks * s_ok, r, mask=k_ok)



# Partials of a product that its next launch multiplies (a split's slices, a stage's temporary) mark a slice whose
# finite values' product left float range: NaN with these payloads (1, 2: underflowed to +0 / -0; 3, 4:
# overflowed to +inf / -inf; 5, 6: lost, positive / negative: partial products that both underflowed and
# overflowed), so that the next launch can tell them from a slice's exact 0 or inf.
MARK32 = tl.constexpr(0x7FC00000)
MARK64 = tl.constexpr(0x7FF8000000000000)


@triton.jit
def _bits(x, ACC: tl.constexpr):
    """The bits of ``x`` (ACC: float32 or float64) as a signed integer of their width."""
    if ACC == tl.float64:
        b = x.to(tl.int64, bitcast=True)
    else:
        b = x.to(tl.int32, bitcast=True)
    return b


@triton.jit
def _mark(code, ACC: tl.constexpr):
    """The NaN that marks ``code`` (see MARK32) in ACC."""
    if ACC == tl.float64:
        m = (code.to(tl.int64) + MARK64).to(tl.float64, bitcast=True)
    else:
        m = (code + MARK32).to(tl.float32, bitcast=True)
    return m


@triton.jit
def _prod_specials(r, x_ptr, first, K, s_xm, s_xk, ok, n_lo, n_hi, s_xn, PRE: tl.constexpr, CAST: tl.constexpr,
                   ACC: tl.constexpr, MARK_IN: tl.constexpr, MARK_OUT: tl.constexpr, CHUNK: tl.constexpr, maybe,
                   NOTED: tl.constexpr):
    """Products ``r`` of the slices [n_lo, n_hi) of rows ``first + lane`` (row ``(m, k)`` at ``x_ptr + m * s_xm +
    k * s_xk``, element stride ``s_xn``), set exactly where the tree of partial products cannot say them.

    Why: the partial products of a slice's finite values can underflow to 0 before they meet its inf (or overflow
    to inf before they meet its 0), and 0 * inf makes NaN where the exact product is +-inf (or +-0). A slice whose
    product came out NaN (rare) is read again, noting NaN, inf, 0 and the count of negative values (sign bits, so
    -0.0 counts): NaN if it holds NaN or both an inf and a 0, else +-0 if it holds a 0, else +-inf if it holds an
    inf. MARK_IN (the values are partials of another launch): the marks of partials that left float range count
    as such a 0 or inf only against each other (both: magnitude lost). MARK_OUT (``r`` are such partials): a
    product of finite values that came out 0 or +-inf is read again too, and marked if it left float range (lost
    included, so that another slice's 0 or inf still decides). A product of finite values only whose partial
    products both overflowed and underflowed is NaN.

    The common path costs a test of the results. The rare one reads its lanes one at a time in 1-D chunks of
    CHUNK elements, each lane's address computed from its row index there: the registers of the rare path count
    for every call (ptxas, sm_90: 16384x4096 bfloat16 rows 20 registers without it; 58 with a [lanes, BLOCK_N]
    tile of flags, 25 this way, still 8 programs of 8 warps per SM; columns of 4096x4096 bfloat16 40 -> 100, this
    way 48). Under MARK_OUT the second read is not rare (a long product leaves float range): the rows kernel then
    reads in chunks of its main loop's width (the 256-lane chunks kept one load in flight per program).

    NOTED (MARK_OUT, the main loop noted ``maybe``: whether each slice may hold a 0 or an inf): a product of 0 or
    +-inf whose slice holds neither left float range, and is marked without a second read, its sign the tree
    product's own (IEEE products keep the sign of the factors' signs, underflowed or overflowed). One with a 0 or
    an inf is exact as it came out: a 0 beside an inf would have made it NaN. Only NaN is read again. (prod of
    384x28672 float16 read each slice twice before: 25 % of copy on an H100, eager 36 %.)
    """
    redo = r != r
    if MARK_OUT:
        left = (r == 0) | (tl.abs(r) == float("inf"))
        if NOTED:
            code = tl.where(r == 0, 1, 3) + (_bits(r, ACC) < 0).to(tl.int32)
            r = tl.where(left & ~maybe, _mark(code, ACC), r)
        else:
            redo = redo | left
    redo = redo & ok
    if tl.max(redo.to(tl.int32), 0) > 0:
        lane = tl.arange(0, r.shape[0])
        for i in range(0, r.shape[0]):
            if tl.max(((lane == i) & redo).to(tl.int32), 0) > 0:
                row = first + i
                off = row // K * s_xm + row % K * s_xk
                r_i = tl.sum(tl.where(lane == i, r, 0.0), 0)
                flags, neg = _slice_specials(x_ptr + off, n_lo, n_hi, s_xn, PRE, CAST, ACC, MARK_IN, CHUNK)
                r = tl.where(lane == i, _exact_product(r_i, flags, neg, ACC, MARK_OUT), r)
    return r


@triton.jit
def _slice_specials(x_ptr, n_lo, n_hi, s_xn, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr,
                    MARK_IN: tl.constexpr, CHUNK: tl.constexpr):
    """(flags, count of negative values) of the slice [n_lo, n_hi) at ``x_ptr``: flag bits 1 NaN, 2 inf, 4 zero,
    8 an underflowed, 16 an overflowed and 32 a lost partial (MARK_IN: the marks carry their sign in the payload,
    since the sign bit of a NaN is not kept). Lane-wise flags and sign parities, reduced across the lanes once after the
    loop: no block-wide reduction (and barrier) per chunk."""
    lane_flags = tl.zeros([CHUNK], tl.int32)
    lane_neg = tl.zeros([CHUNK], tl.int32)
    for n0 in range(n_lo, n_hi, CHUNK):
        cols = n0 + tl.arange(0, CHUNK)
        mask = cols < n_hi
        x = tl.load(x_ptr + cols.to(tl.int64) * s_xn, mask=mask, other=0)
        x = tl.where(mask, x.to(PRE).to(CAST).to(ACC), 1.0)
        a = tl.abs(x)
        b = _bits(x, ACC)
        nan = a != a
        seen = tl.zeros([CHUNK], tl.int32)
        negs = (b < 0) & ~nan
        if MARK_IN:
            if ACC == tl.float64:
                code = tl.where(nan, b - MARK64, 0).to(tl.int32)
            else:
                code = tl.where(nan, b - MARK32, 0)
            under = (code == 1) | (code == 2)
            over = (code == 3) | (code == 4)
            lost = (code == 5) | (code == 6)
            seen = (under.to(tl.int32) << 3) | (over.to(tl.int32) << 4) | (lost.to(tl.int32) << 5)
            nan = nan & ~(under | over | lost)
            negs = negs | (code == 2) | (code == 4) | (code == 6)
        seen |= nan.to(tl.int32) | ((a == float("inf")).to(tl.int32) << 1) | ((a == 0).to(tl.int32) << 2)
        lane_flags |= seen
        lane_neg ^= negs.to(tl.int32)  # (only the parity of the count is used)
    return tl.reduce(lane_flags, 0, _or_fn), tl.sum(lane_neg, 0)


@triton.jit
def _exact_product(r, flags, neg, ACC: tl.constexpr, MARK_OUT: tl.constexpr):
    """The product of a slice from its tree product ``r`` and :func:`_slice_specials`' (flags, negative count)."""
    one = tl.where((neg & 1) == 1, -1.0, 1.0).to(ACC)
    inf, zero = (flags & 2) != 0, (flags & 4) != 0
    under, over = (flags & 8) != 0, (flags & 16) != 0
    if MARK_OUT:  # a product of finite values: 0 or inf means it left float range
        finite_only = (flags & 7) == 0
        under = under | (finite_only & (r == 0))
        over = over | (finite_only & (tl.abs(r) == float("inf")))
    # Finite values whose magnitude is lost: a lost mark, both marks, or no special value at all (the tree's NaN
    # came from their partial products meeting as 0 * inf). Against a slice's own 0 or inf they are still
    # nonzero and finite: the 0 or inf decides.
    lost = ((flags & 32) != 0) | (under & over) | ~(inf | zero | under | over)
    exact = tl.where(zero | (under & ~inf), one * 0.0, one * float("inf"))
    nan = ((flags & 1) != 0) | (inf & zero)
    if MARK_OUT:  # finite values that left float range: marked, for the next launch to meet with its 0 or inf
        code = tl.where(lost, 5, tl.where(under, 1, 3)) + ((neg & 1) == 1).to(tl.int32)
        exact = tl.where(inf | zero, exact, _mark(code, ACC))
    else:
        nan = nan | (lost & ~inf & ~zero)
    return tl.where(nan, float("nan"), exact).to(ACC)


@triton.jit
def _or_fn(a, b):
    return a | b
