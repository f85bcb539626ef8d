"""softmax, log_softmax and logsumexp kernels: rows (single pass, online loop, split rows) and columns.

The row maximum is subtracted before ``exp`` (values up to 1e38 stay finite). When a row fits on chip
(``single_pass``) it is loaded once, reduced and written from registers: one read, one write. Longer rows use the
online softmax of Milakov & Gimelshein (2018): one sweep keeps a running (max, sum of exp) per 16-byte vector of
lanes (no cross-warp reduction inside the loop), rescaling a sum whenever its max grows, merges the pairs once per
row, and a second sweep, from the row's end back, writes the output (the chunks the first sweep read last are the
likeliest to still be in L2). Both sweeps mask only the chunks that hold a row's edges: the chunks between take
no element mask and no select. Split rows (the built-in rules: float32 rows of 64K+ elements) are held by several
programs at once, which merge their chunks' (max, sum of exp) after a per-row barrier and write from registers:
one read, one write (``_split_rows_kernel``).

``MODE``: 0 softmax, 1 log_softmax, 2 logsumexp (one value per row). ``_rows_kernel`` serves ``dim`` with unit
stride, ``_cols_kernel`` a non-last dim (tiles along the contiguous kept axis, no transpose copy); too few column
blocks split N (``split``): ``_cols_part_kernel`` stores a (max, sum of exp) partial per slice, ``_cols_emit_kernel``
merges them and writes its slice (past ``MERGE_INLINE`` slices ``_cols_merge_kernel`` merges them once, in a launch
between the two; on sm_90+ both later launches are dependent launches, ``runtime.dependent_launch``).
NaN/inf follow torch: a row with NaN or +inf gives NaN (softmax) and an all -inf row gives NaN; logsumexp gives
+inf for rows holding +inf and -inf for all -inf rows. ``EXACT`` (float32 softmax, but for split rows): exp within
~2 ulp and each output e / s correctly rounded (:func:`_exp`, :func:`_quotient`), torch's error within 1-8 %;
``EXACT == 2`` (single passes under 32 warps): libdevice's ``expf``, torch's own, at torch's error (H100).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from ...kernels.combine import div_exact, max_fn
from ...kernels.rows import (
    aligned_rows,
    col_block,
    edge_cols,
    group_barrier,
    inner_mask,
    restate_multiple,
    row_block,
    row_masks,
    shifted_out,
    wait_for_previous_launch,
)


@triton.jit
def _exp(x, EXACT: tl.constexpr):
    """exp(x) for x <= 0 (x - max). EXACT (float32 softmax): within ~2 ulp. ``tl.exp`` is ex2.approx(fl(x log2 e)),
    and the product's rounding, up to half an ulp of x log2 e, becomes exp's relative error: 9.6e-7 at most on
    [-20, 0], softmax 1.2-1.75x eager's norm-wise error (H100). The split form takes t = fl(x L) and its exact
    remainder r = x L - t (an fma, plus x times L's own rounding error L_lo): exp(x) = 2^t (1 + r ln 2).
    -inf lanes (masks) are clamped to -128 first (exp2(-185) = 0; -inf would give inf - inf); NaN stays NaN.
    EXACT == 2: libdevice's ``expf`` (CUDA's own, as torch's kernels): within 1 % of eager's error on every float32
    single-pass case of an H100 A/B (12 of 14 cases against 4 of 14 with the split form) at the same % of copy, but
    5 points slower in 32-warp tiles (64 registers a thread): the launch takes it only under 32 warps."""
    if EXACT == 2:
        y = libdevice.exp(x)
    elif EXACT:
        x = tl.maximum(x, -128.0, propagate_nan=tl.PropagateNan.ALL)
        t = x * 1.4426950216293335  # L: log2(e) rounded to float32
        r = tl.fma(x, 1.4426950216293335, -t) + x * 1.925963e-08  # + L_lo = log2(e) - L
        e = tl.exp2(t)
        y = tl.fma(e, r * 0.6931471805599453, e)
    else:
        y = tl.exp(x)
    return y


@triton.jit
def _merge(m_a, s_a, m_b, s_b, EXACT: tl.constexpr):
    """Merge two (max, sum of exp(x - max)) pairs. An all -inf side has s = 0 and must not produce NaN."""
    m = max_fn(m_a, m_b)
    a = tl.where(m_a == float("-inf"), 0.0, s_a * _exp(m_a - m, EXACT))
    b = tl.where(m_b == float("-inf"), 0.0, s_b * _exp(m_b - m, EXACT))
    return m, a + b


@triton.jit
def _online_fn(m_a, s_a, m_b, s_b):
    """:func:`_merge` as a reduction's combine function."""
    return _merge(m_a, s_a, m_b, s_b, False)


@triton.jit
def _online_exact(m_a, s_a, m_b, s_b):
    """:func:`_merge` with the EXACT exp, as a reduction's combine function."""
    return _merge(m_a, s_a, m_b, s_b, True)


@triton.jit
def _online_reduce(m, s, axis: tl.constexpr, EXACT: tl.constexpr):
    """The (max, sum of exp) pairs merged along ``axis``."""
    if EXACT:
        m, s = tl.reduce((m, s), axis, _online_exact)
    else:
        m, s = tl.reduce((m, s), axis, _online_fn)
    return m, s


@triton.jit
def _lse(m, s):
    """log(sum(exp(x))) from (max, sum of exp(x - max)), with torch's infinite cases."""
    return tl.where(m == float("inf"), float("inf"), tl.where(m == float("-inf"), float("-inf"), m + tl.log(s)))


@triton.jit
def _row_scale(s, MODE: tl.constexpr, EXACT: tl.constexpr):
    """What the output takes from a row's sum of exp s, once per row: softmax 1 / s (EXACT: correctly rounded,
    ``div_exact``; ``/`` is the approximate div.full), log_softmax log(s)."""
    if MODE == 0:
        if EXACT:
            k = div_exact(1.0, s, tl.float32)
        else:
            k = 1.0 / s
    else:
        k = tl.log(s)
    return k


@triton.jit
def _quotient(e, s, k, EXACT: tl.constexpr):
    """e / s given k = :func:`_row_scale` (1 / s): e * k, one division a row and a multiply an element. EXACT: the
    rounding of k is a bias shared by the whole row (up to half an ulp of every output); one correction step,
    q + (e - q s) k with the remainder exact by an fma, gives the correctly rounded e / s (but for rare ties) for
    two fmas an element, against ~30 instructions for a division."""
    q = e * k
    if EXACT:
        q = tl.fma(tl.fma(-q, s, e), k, q)
    return q


@triton.jit
def _emit(x, m, s, k, MODE: tl.constexpr, EXACT: tl.constexpr):
    """softmax or log_softmax of x given the row's max m, sum of exp s and :func:`_row_scale` k (broadcast to x's
    shape)."""
    if MODE == 0:
        y = _quotient(_exp(x - m, EXACT), s, k, EXACT)
    else:
        y = (x - m) - k
    return y


@triton.jit
def _store_edges(x_row, y_row, lead, N, row_ok, m, s, k, MODE: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr,
                 ACC: tl.constexpr, ALIGN: tl.constexpr, EXACT: tl.constexpr):
    """Output of the row elements outside whole 16-byte chunks (shifted tiles with vector stores), recomputed
    from a reload with the row's max, sum and :func:`_row_scale`: the same arithmetic as the chunks' own, bit for
    bit."""
    c, ok = edge_cols(lead, N, row_ok, ALIGN)
    x = tl.load(x_row[:, None] + c, mask=ok, other=0).to(PRE).to(CAST).to(ACC)
    tl.store(y_row[:, None] + c, _emit(x, m[:, None], s[:, None], k[:, None], MODE, EXACT), mask=ok)


@triton.jit
def _chunk_in(x_row, n0, lead, N, row_ok, s_xn, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr,
              ALIGN: tl.constexpr, INNER: tl.constexpr, BLOCK_N: tl.constexpr, G: tl.constexpr, GROUP: tl.constexpr):
    """The tile columns [n0, n0 + BLOCK_N) of the online loop's rows, as [rows, G, GROUP] in ACC, lanes outside
    a row at -inf. INNER: every lane lies inside each row (only rows past the end are masked, per row)."""
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
    at = x_row[:, None] + cols[None, :] * s_xn
    if INNER:
        x = tl.load(at, mask=row_ok[:, None], other=0, eviction_policy="evict_last").to(PRE).to(CAST).to(ACC)
    else:
        mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
        x = tl.load(at, mask=lmask, other=0, eviction_policy="evict_last")
        x = tl.where(mask, x.to(PRE).to(CAST).to(ACC), float("-inf"))
    return tl.reshape(x, [x.shape[0], G, GROUP])


@triton.jit
def _online_step(m, s, x, EXACT: tl.constexpr):
    """The running (max, sum of exp) per group of lanes, after one more chunk ``x`` ([rows, G, GROUP])."""
    m_new = max_fn(m, tl.reduce(x, 2, max_fn))
    # A group whose max is still -inf adds exp(-inf - 0) = 0 (exp(-inf - -inf) would be NaN); +inf or NaN makes
    # the sum NaN, as torch's softmax of such a row.
    m_at = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, s * _exp(m - m_at, EXACT) + tl.sum(_exp(x - m_at[:, :, None], EXACT), 2)


@triton.jit
def _chunk_out(x_row, y_row, n0, lead, N, row_ok, s_xn, s_yn, m, s, k, MODE: tl.constexpr, PRE: tl.constexpr,
               CAST: tl.constexpr, ACC: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr,
               INNER: tl.constexpr, BLOCK_N: tl.constexpr, EXACT: tl.constexpr):
    """The second sweep's output for tile columns [n0, n0 + BLOCK_N), given each row's max, sum and
    :func:`_row_scale`. INNER: as :func:`_chunk_in` (whole 16-byte chunks of every row: no element mask)."""
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
    if INNER:
        mask = row_ok[:, None] & (cols >= 0)[None, :]
        lmask = mask
    else:
        mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
        if ALIGN_Y:
            mask = inner_mask(cols, lead, N, row_ok, ALIGN)
    x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=lmask, other=0,
                eviction_policy="evict_first").to(PRE).to(CAST).to(ACC)
    tl.store(y_row[:, None] + cols[None, :] * s_yn, _emit(x, m[:, None], s[:, None], k[:, None], MODE, EXACT),
             mask=mask, eviction_policy="evict_first")


@triton.jit
def _single_tile(x_row, cols, lead, N, row_ok, s_xn, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr,
                 ALIGN: tl.constexpr, EVICT: tl.constexpr):
    """A single pass's tile of the rows at tile columns ``cols``, in ACC with lanes outside a row at -inf, and its
    element mask.

    Masked lanes of a float input load -inf and add exp(-inf - m) = 0, with no select per element: this
    program's arithmetic sits between its load and its store, unhidden when one 32-warp program fills the SM
    (H200, 4096x32768 fp32: two selects per element cost ~10 points). A row whose max is -inf gives NaN, as
    torch. Integer inputs (softmax(x, dtype=...)) cannot hold -inf: they select."""
    mask, lmask = row_masks(cols, lead, N, row_ok, ALIGN)
    FLOAT_IN: tl.constexpr = x_row.dtype.element_ty.is_floating()
    x = tl.load(x_row[:, None] + cols[None, :].to(tl.int64) * s_xn, mask=lmask,
                other=float("-inf") if FLOAT_IN else 0, eviction_policy=EVICT)
    x = x.to(PRE).to(CAST).to(ACC)
    if ALIGN > 0 or not FLOAT_IN:  # (ALIGN: lanes of the neighbouring rows, read with the row's chunks)
        x = tl.where(mask, x, float("-inf"))
    return x, mask


@triton.jit
def _single_store(y_row, cols, lead, N, row_ok, s_yn, x, e, mask, m, s, k, MODE: tl.constexpr, ALIGN: tl.constexpr,
                  ALIGN_Y: tl.constexpr, EXACT: tl.constexpr):
    """Store a single pass's tile (``e``: its exp(x - m); k: the rows' :func:`_row_scale`); ALIGN_Y: its whole
    16-byte chunks only, in vector stores (the caller writes the row's partial edge chunks)."""
    if MODE == 0:
        y = _quotient(e, s[:, None], k[:, None], EXACT)
    else:
        y = (x - m[:, None]) - k[:, None]
    if ALIGN_Y:
        tl.store(y_row[:, None] + cols[None, :], y, mask=inner_mask(cols, lead, N, row_ok, ALIGN))
    else:
        tl.store(y_row[:, None] + cols[None, :].to(tl.int64) * s_yn, y, mask=mask)


@triton.jit
def _rows_kernel(x_ptr, y_ptr, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk,
                 MODE: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr, SINGLE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PERSIST: tl.constexpr = 0,
                 LOOP_STAGES: tl.constexpr = 1, ALIGN: tl.constexpr = 0, ALIGN_Y: tl.constexpr = False,
                 EVICT: tl.constexpr = "", DIV: tl.constexpr = 1, GROUP: tl.constexpr = 1,
                 TAIL: tl.constexpr = 0, EXACT: tl.constexpr = False):
    """Rows of ``dim`` (unit stride or any stride); PERSIST > 0: a persistent grid looping over row blocks.
    EVICT: the L2 hint of the single-pass load (:func:`single_load_evict`). DIV: N and the row strides are
    multiples of DIV (``runtime.row_hint``). GROUP: lanes per (max, sum) pair of the online loop (a power of two
    dividing BLOCK_N: the elements of one thread's vector load). TAIL (single pass): the row's lanes past BLOCK_N in
    a second tile of TAIL lanes (``BLOCK_TAIL``: rows just past a power of two). EXACT: float32 softmax's exp within
    ~2 ulp and e / s correctly rounded (:func:`_exp`, :func:`_row_scale`, :func:`_quotient`)."""
    N = restate_multiple(N, DIV)
    s_xm = restate_multiple(s_xm, DIV)
    if MODE != 2:  # (logsumexp's output has no row axis: its stride is not part of DIV)
        s_ym = restate_multiple(s_ym, DIV)
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _rows_block(x_ptr, y_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk, MODE, PRE, CAST, ACC,
                        SINGLE, BLOCK_M, BLOCK_N, ALIGN, ALIGN_Y, EVICT, GROUP, TAIL, EXACT)
    else:
        _rows_block(x_ptr, y_ptr, tl.program_id(0), R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk, MODE, PRE, CAST,
                    ACC, SINGLE, BLOCK_M, BLOCK_N, ALIGN, ALIGN_Y, EVICT, GROUP, TAIL, EXACT)


@triton.jit
def _rows_block(x_ptr, y_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk,
                MODE: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr, SINGLE: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr,
                EVICT: tl.constexpr, GROUP: tl.constexpr, TAIL: tl.constexpr, EXACT: tl.constexpr):
    rows, row_ok, m_idx, k_idx = row_block(blk, R, K, BLOCK_M)
    x_off = m_idx * s_xm + k_idx * s_xk
    y_off = m_idx * s_ym + k_idx * s_yk
    # odd widths (ALIGN): tiles start at the 16-byte boundary below each row (see aligned_rows)
    x_off, lead = aligned_rows(x_off, ALIGN)
    if MODE != 2:  # (logsumexp writes one value per row: its output keeps its offsets)
        y_off = shifted_out(y_off, lead, ALIGN, ALIGN_Y)
    n_end = N  # tile columns to cover: the row, plus the shift of ALIGN
    if ALIGN > 0:
        n_end = N + ALIGN - 1
    x_row = x_ptr + x_off
    y_row = y_ptr + y_off
    if SINGLE:
        # The whole row is in registers: one read, one write. TAIL: the row's lanes past BLOCK_N in a second tile.
        cols = tl.arange(0, BLOCK_N)  # shifted rows: int32 for the masks, int64 in the addresses (row_masks)
        if ALIGN == 0:
            cols = cols.to(tl.int64)  # (unshifted: int64 columns, as measured)
        lead32 = lead.to(tl.int32)
        x, mask = _single_tile(x_row, cols, lead32, N, row_ok, s_xn, PRE, CAST, ACC, ALIGN, EVICT)
        m = tl.reduce(x, 1, max_fn)
        if TAIL > 0:
            cols_t = BLOCK_N + tl.arange(0, TAIL)
            if ALIGN == 0:
                cols_t = cols_t.to(tl.int64)
            x_t, mask_t = _single_tile(x_row, cols_t, lead32, N, row_ok, s_xn, PRE, CAST, ACC, ALIGN, EVICT)
            m = max_fn(m, tl.reduce(x_t, 1, max_fn))
        e = _exp(x - m[:, None], EXACT)
        s = tl.sum(e, 1)
        if TAIL > 0:
            e_t = _exp(x_t - m[:, None], EXACT)
            s = s + tl.sum(e_t, 1)
        if MODE == 2:
            tl.store(y_row, _lse(m, s), mask=row_ok)
        else:
            k = _row_scale(s, MODE, EXACT)
            _single_store(y_row, cols, lead32, N, row_ok, s_yn, x, e, mask, m, s, k, MODE, ALIGN, ALIGN_Y, EXACT)
            if TAIL > 0:
                _single_store(y_row, cols_t, lead32, N, row_ok, s_yn, x_t, e_t, mask_t, m, s, k, MODE, ALIGN, ALIGN_Y,
                              EXACT)
            if ALIGN_Y:  # the row's partial edge chunks (the tiles stored its whole 16-byte chunks)
                _store_edges(x_row, y_row, lead32, N, row_ok, m, s, k, MODE, PRE, CAST, ACC, ALIGN, EXACT)
    else:
        # Online softmax, a running (max, sum of exp) per GROUP of neighbouring lanes: the elements one thread
        # loads as one vector, so that a chunk's max is a reduction inside each thread. A max over the whole
        # chunk (one (max, sum) per row) put a cross-warp reduction, a barrier, in every iteration, which the
        # SM's single 32-warp program cannot hide (H200, 1024x131072 bf16 63 -> 73 %, 2048x65536 66 -> 79 %). One exp
        # per element, plus one per group per chunk for the rescale.
        G: tl.constexpr = BLOCK_N // GROUP
        m = tl.full([BLOCK_M, G], float("-inf"), ACC)
        s = tl.zeros([BLOCK_M, G], ACC)
        # The first sweep's lines are kept in L2 (evict-last) for the second sweep, whose reads and writes are
        # not read again (evict-first). (H200, 1024x131072: bf16 63 -> 67 %, fp32 66 -> 70 %)
        # Chunk k (columns [k * BLOCK_N, (k + 1) * BLOCK_N) of the tile) is inner for k in [head, inner): every lane
        # is an element of each row, so it takes neither the element mask nor its select (per element, two int64
        # compares against the row's shift and a select: odd widths, 2048x50257 bf16, lost ~15 points to them);
        # the head (the chunk holding the shift's lanes) and the tail chunks keep them.
        n_chunks = tl.cdiv(n_end, BLOCK_N)
        head = tl.minimum(n_chunks, tl.cdiv(ALIGN, BLOCK_N))
        inner = tl.maximum(head, N // BLOCK_N)
        for k in range(0, head):
            m, s = _online_step(m, s, _chunk_in(x_row, k * BLOCK_N, lead, N, row_ok, s_xn, PRE, CAST, ACC, ALIGN,
                                                False, BLOCK_N, G, GROUP), EXACT)
        for k in range(head, inner):
            m, s = _online_step(m, s, _chunk_in(x_row, k * BLOCK_N, lead, N, row_ok, s_xn, PRE, CAST, ACC, ALIGN,
                                                True, BLOCK_N, G, GROUP), EXACT)
        for k in range(inner, n_chunks):
            m, s = _online_step(m, s, _chunk_in(x_row, k * BLOCK_N, lead, N, row_ok, s_xn, PRE, CAST, ACC, ALIGN,
                                                False, BLOCK_N, G, GROUP), EXACT)
        m, s = _online_reduce(m, s, 1, EXACT)
        if MODE == 2:
            tl.store(y_row, _lse(m, s), mask=row_ok)
        else:
            k = _row_scale(s, MODE, EXACT)
            # Second sweep from the row's end: the chunks read last by the first sweep are the likeliest in L2.
            for i in range(0, n_chunks - inner):
                _chunk_out(x_row, y_row, (n_chunks - 1 - i) * BLOCK_N, lead, N, row_ok, s_xn, s_yn, m, s, k, MODE, PRE,
                           CAST, ACC, ALIGN, ALIGN_Y, False, BLOCK_N, EXACT)
            for i in range(0, inner - head):
                _chunk_out(x_row, y_row, (inner - 1 - i) * BLOCK_N, lead, N, row_ok, s_xn, s_yn, m, s, k, MODE, PRE,
                           CAST, ACC, ALIGN, ALIGN_Y, True, BLOCK_N, EXACT)
            for i in range(0, head):
                _chunk_out(x_row, y_row, (head - 1 - i) * BLOCK_N, lead, N, row_ok, s_xn, s_yn, m, s, k, MODE, PRE,
                           CAST, ACC, ALIGN, ALIGN_Y, False, BLOCK_N, EXACT)
            if ALIGN_Y:
                _store_edges(x_row, y_row, lead, N, row_ok, m, s, k, MODE, PRE, CAST, ACC, ALIGN, EXACT)


@triton.jit
def _split_rows_kernel(x_ptr, y_ptr, part_m_ptr, part_s_ptr, count_ptr, R, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk,
                       MODE: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr,
                       SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, BLOCK_N: tl.constexpr, PHASE: tl.constexpr,
                       EXACT: tl.constexpr = False):
    """Rows too long for one program's registers, held by SPLIT programs together: one read, one write (the
    online loop reads a row twice, the second time mostly from HBM once rows pass ~64K elements).

    Program ``part`` of a group keeps columns [part * BLOCK_N, (part + 1) * BLOCK_N) of the group's rows in
    registers. Per row it stores its chunk's (max, sum of exp) and, PHASE 3, waits at the row's barrier
    (:func:`group_barrier`) for the group's other programs; then each program merges the SPLIT partials in the
    same fixed order (deterministic, identical in every program) and writes its chunk from registers. A
    persistent grid of co-resident groups (a cooperative launch, ``runtime.launch_split_rows``) loops over the
    rows. PHASE 1 and PHASE 2 are the two halves as separate launches (the interpreter runs programs one after
    another; also used where no group fits on the device at once): PHASE 2 reads the row a second time.
    """
    part = tl.program_id(0) % SPLIT
    group = tl.program_id(0) // SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    FLOAT_IN: tl.constexpr = x_ptr.dtype.element_ty.is_floating()
    parts = tl.arange(0, SPLIT_P2)  # (partials of a row: SPLIT_P2 slots, SPLIT of them written)
    written = parts < SPLIT
    for row in tl.range(group, R, groups):
        r = tl.cast(row, tl.int64)
        # (masked lanes of float inputs load -inf: no select per element, as _rows_block)
        x = tl.load(x_ptr + (r // K) * s_xm + (r % K) * s_xk + cols * s_xn, mask=ok,
                    other=float("-inf") if FLOAT_IN else 0)
        x = x.to(PRE).to(CAST).to(ACC)
        if not FLOAT_IN:
            x = tl.where(ok, x, float("-inf"))
        m = tl.reduce(x, 0, max_fn)
        # a chunk of only -inf has no mass (exp(-inf - -inf) would be NaN); merged below as the empty pair
        s = tl.where(m == float("-inf"), 0.0, tl.sum(_exp(x - m, EXACT), 0))
        if PHASE != 2:
            tl.store(part_m_ptr + r * SPLIT_P2 + part, m)
            tl.store(part_s_ptr + r * SPLIT_P2 + part, s)
        if PHASE == 3:
            group_barrier(count_ptr + r, SPLIT)
        if PHASE != 1:
            # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
            pm = tl.load(part_m_ptr + r * SPLIT_P2 + parts, mask=written, other=float("-inf"), cache_modifier=".cg")
            ps = tl.load(part_s_ptr + r * SPLIT_P2 + parts, mask=written, other=0, cache_modifier=".cg")
            m_row, s_row = _online_reduce(pm, ps, 0, EXACT)
            tl.store(y_ptr + (r // K) * s_ym + (r % K) * s_yk + cols * s_yn,
                     _emit(x, m_row, s_row, _row_scale(s_row, MODE, EXACT), MODE, EXACT), mask=ok)


@triton.jit
def _col_stats(x_col, k_ok, n_lo, n_hi, s_xn, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVICT: tl.constexpr, EXACT: tl.constexpr):
    """Online (max, sum of exp) of the columns at ``x_col`` over rows [n_lo, n_hi): one pair per lane of the
    [BLOCK_N, BLOCK_K] tile, merged once at the end."""
    m_l = tl.full([BLOCK_N, BLOCK_K], float("-inf"), ACC)
    s_l = tl.zeros([BLOCK_N, BLOCK_K], ACC)
    for n0 in range(n_lo, n_hi, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
        mask = (ns < n_hi)[:, None] & k_ok[None, :]
        x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=mask, other=0, eviction_policy=EVICT)
        x = tl.where(mask, x.to(PRE).to(CAST).to(ACC), float("-inf"))
        m_l, s_l = _merge(m_l, s_l, x, tl.full([BLOCK_N, BLOCK_K], 1.0, ACC), EXACT)
    return _online_reduce(m_l, s_l, 0, EXACT)


@triton.jit
def _col_write(x_col, y_col, k_ok, n_lo, n_hi, s_xn, s_yn, m, s, MODE: tl.constexpr, PRE: tl.constexpr,
               CAST: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr, EXACT: tl.constexpr):
    """The second sweep over rows [n_lo, n_hi) of the columns: softmax or log_softmax from their (max, sum of
    exp). Read and written once more: evict-first."""
    k = _row_scale(s, MODE, EXACT)
    for n0 in range(n_lo, n_hi, BLOCK_N):
        ns = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
        mask = (ns < n_hi)[:, None] & k_ok[None, :]
        x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=mask, other=0,
                    eviction_policy="evict_first").to(PRE).to(CAST).to(ACC)
        tl.store(y_col[None, :] + ns[:, None] * s_yn, _emit(x, m[None, :], s[None, :], k[None, :], MODE, EXACT),
                 mask=mask, eviction_policy="evict_first")


@triton.jit
def _cols_kernel(x_ptr, y_ptr, M, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk,
                 MODE: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr, SINGLE: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV: tl.constexpr = 1, EXACT: tl.constexpr = False):
    """Columns: BLOCK_K adjacent k of one m, over N in one tile (SINGLE) or online chunks, then a second sweep
    that writes (logsumexp: one value per k). DIV: K and the m and n strides are multiples of DIV. EXACT: as
    :func:`_rows_kernel`."""
    K = restate_multiple(K, DIV)
    s_xm, s_xn = restate_multiple(s_xm, DIV), restate_multiple(s_xn, DIV)
    s_ym, s_yn = restate_multiple(s_ym, DIV), restate_multiple(s_yn, DIV)
    m_idx, ks, k_ok = col_block(K, BLOCK_K)
    x_col = x_ptr + m_idx * s_xm + ks * s_xk
    y_col = y_ptr + m_idx * s_ym + ks * s_yk
    if SINGLE:
        ns = tl.arange(0, BLOCK_N).to(tl.int64)
        mask = (ns < N)[:, None] & k_ok[None, :]
        x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=mask, other=0)
        x = tl.where(mask, x.to(PRE).to(CAST).to(ACC), float("-inf"))
        m = tl.reduce(x, 0, max_fn)
        e = tl.where(mask, _exp(x - m[None, :], EXACT), 0.0)
        s = tl.sum(e, 0)
        if MODE == 2:
            tl.store(y_col, _lse(m, s), mask=k_ok)
        elif MODE == 0:
            y = _quotient(e, s[None, :], _row_scale(s, MODE, EXACT)[None, :], EXACT)
            tl.store(y_col[None, :] + ns[:, None] * s_yn, y, mask=mask)
        else:
            tl.store(y_col[None, :] + ns[:, None] * s_yn, (x - m[None, :]) - tl.log(s)[None, :], mask=mask)
    else:
        m, s = _col_stats(x_col, k_ok, 0, N, s_xn, PRE, CAST, ACC, BLOCK_N, BLOCK_K, "evict_last", EXACT)
        if MODE == 2:
            tl.store(y_col, _lse(m, s), mask=k_ok)
        else:
            _col_write(x_col, y_col, k_ok, 0, N, s_xn, s_yn, m, s, MODE, PRE, CAST, ACC, BLOCK_N, EXACT)


@triton.jit
def _cols_part_kernel(x_ptr, pm_ptr, ps_ptr, M, N, K, s_xm, s_xn, s_xk, n_per_split, n_split,
                      PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, DIV: tl.constexpr = 1, EXACT: tl.constexpr = False):
    """Split columns, first launch: the online (max, sum of exp) of BLOCK_K adjacent k over one slice of N
    (``program_id(1)``), stored as the slice's partial at (m * K + k) * n_split + slice (n_split a runtime
    argument: no compile per split count)."""
    K = restate_multiple(K, DIV)
    s_xm, s_xn = restate_multiple(s_xm, DIV), restate_multiple(s_xn, DIV)
    m_idx, ks, k_ok = col_block(K, BLOCK_K)
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split
    m, s = _col_stats(x_ptr + m_idx * s_xm + ks * s_xk, k_ok, n_lo, tl.minimum(N, n_lo + n_per_split), s_xn, PRE,
                      CAST, ACC, BLOCK_N, BLOCK_K, "", EXACT)
    offs = (m_idx * K + ks) * n_split + tl.program_id(1)
    tl.store(pm_ptr + offs, m, mask=k_ok)
    tl.store(ps_ptr + offs, s, mask=k_ok)


@triton.jit
def _cols_emit_kernel(x_ptr, y_ptr, pm_ptr, ps_ptr, M, N, K, s_xm, s_xn, s_xk, s_ym, s_yn, s_yk, n_per_split,
                      n_split, MODE: tl.constexpr, PRE: tl.constexpr, CAST: tl.constexpr, ACC: tl.constexpr,
                      SPLIT_P2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      DIV: tl.constexpr = 1, WAIT: tl.constexpr = False, EXACT: tl.constexpr = False):
    """Split columns, second (writing) launch: each program merges its columns' n_split partials (one fixed
    reduction tree: the same result in every program of a column block; after :func:`_cols_merge_kernel`,
    SPLIT_P2 = 1: it loads each column's merged pair from slot 0), then writes its slice (logsumexp: one value
    per k, a grid of one slice). Slices are taken in reverse launch order: the first programs to run write the
    slices the first launch read last, the likeliest to still be in L2. WAIT: a dependent launch
    (``runtime.dependent_launch``), waiting for the launch before it (its partials) before anything else."""
    wait_for_previous_launch(WAIT)
    K = restate_multiple(K, DIV)
    s_xm, s_xn = restate_multiple(s_xm, DIV), restate_multiple(s_xn, DIV)
    s_ym, s_yn = restate_multiple(s_ym, DIV), restate_multiple(s_yn, DIV)
    m_idx, ks, k_ok = col_block(K, BLOCK_K)
    parts = tl.arange(0, SPLIT_P2)
    p_mask = (parts < n_split)[:, None] & k_ok[None, :]
    p_offs = (m_idx * K + ks)[None, :] * n_split + parts[:, None]
    p_m = tl.load(pm_ptr + p_offs, mask=p_mask, other=float("-inf"))
    p_s = tl.load(ps_ptr + p_offs, mask=p_mask, other=0)
    m, s = _online_reduce(p_m, p_s, 0, EXACT)
    if MODE == 2:
        tl.store(y_ptr + m_idx * s_ym + ks * s_yk, _lse(m, s), mask=k_ok)
    else:
        n_lo = (tl.num_programs(1) - 1 - tl.program_id(1)).to(tl.int64) * n_per_split
        _col_write(x_ptr + m_idx * s_xm + ks * s_xk, y_ptr + m_idx * s_ym + ks * s_yk, k_ok, n_lo,
                   tl.minimum(N, n_lo + n_per_split), s_xn, s_yn, m, s, MODE, PRE, CAST, ACC, BLOCK_N, EXACT)


@triton.jit
def _cols_merge_kernel(pm_ptr, ps_ptr, MK, n_split, BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr,
                       WAIT: tl.constexpr = False, EXACT: tl.constexpr = False):
    """Split columns with many slices, between the two launches: merges each column's n_split partials once (one
    fixed reduction tree: deterministic) into its slot 0, so that the writing programs load one pair per column
    instead of merging all partials each (``split`` x fewer partial reads). WAIT: a dependent launch, as
    :func:`_cols_emit_kernel`."""
    wait_for_previous_launch(WAIT)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < MK
    parts = tl.arange(0, BLOCK_S)
    mask = row_ok[:, None] & (parts < n_split)[None, :]
    offs = rows[:, None] * n_split + parts[None, :]
    m, s = _online_reduce(tl.load(pm_ptr + offs, mask=mask, other=float("-inf")),
                          tl.load(ps_ptr + offs, mask=mask, other=0), 1, EXACT)
    tl.store(pm_ptr + rows * n_split, m, mask=row_ok)
    tl.store(ps_ptr + rows * n_split, s, mask=row_ok)
