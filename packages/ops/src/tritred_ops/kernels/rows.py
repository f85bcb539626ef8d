"""Row and column tiles: which rows or columns a program owns, masks of shifted tiles, L2 hints, barriers.

The row kernels of every family take BLOCK_M rows of the M x N x K view per program (:func:`row_block`), the
column kernels BLOCK_K adjacent outputs of one m (:func:`col_block`). Rows that start off 16-byte boundaries are
loaded in tiles shifted to the boundary below each row (:func:`aligned_rows`, :func:`row_masks`), so that every
load is a 16-byte vector.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait


@triton.jit
def wait_for_previous_launch(WAIT: tl.constexpr):
    """With WAIT (a programmatic dependent launch, ``runtime.dependent_launch``): wait until the launch before
    this one has finished and its writes are visible (``griddepcontrol.wait``, sm_90+); the program's first
    statement, before any read of what that launch wrote. Without WAIT, nothing (a plain launch already starts
    after the previous one; the interpreter has no inline assembly)."""
    if WAIT:
        gdc_wait()


@triton.jit
def restate_multiple(v, DIV: tl.constexpr):
    """``v`` restated as ``v // DIV * DIV``, a multiple of DIV that it already is (the host checked:
    ``runtime.row_hint``, ``runtime.col_hint``, batch_norm's ``_nchw_hint``), so that the compiler sees the
    divisibility (Triton specializes integer arguments on 16 only) and vectorizes the loads, stores and masks; ``v``
    itself for DIV 1. Equal at run time."""
    if DIV > 1:
        v = v // DIV * DIV
    return v


@triton.jit
def row_block(blk, R, K, BLOCK_M: tl.constexpr):
    """(rows, row_ok, m, k) of row block ``blk`` of the row kernels: its BLOCK_M row indices (int64: the offsets
    they scale may pass 2^31), which of them are among the R rows, and each row's (m, k) in the M x N x K view."""
    rows = tl.cast(blk, tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return rows, rows < R, rows // K, rows % K


@triton.jit
def col_block(K, BLOCK_K: tl.constexpr):
    """(m, its BLOCK_K adjacent k, their mask) of column program ``program_id(0)`` of the column kernels: the k
    blocks of one m are adjacent program ids; m and k are int64 (the offsets they scale may pass 2^31)."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    m = (tl.program_id(0) // k_blocks).to(tl.int64)
    ks = (tl.program_id(0) % k_blocks).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    return m, ks, ks < K


@triton.jit
def aligned_rows(x_off, ALIGN: tl.constexpr):
    """(the ALIGN-element boundary at or below each row start ``x_off``, the row start's lane from there);
    ALIGN = 0: (``x_off``, 0), tiles start at the row start.

    Rows of odd width start off 16-byte boundaries, and Triton, which cannot prove alignment, loads them one
    element at a time. Tiles that start at the boundary below the row (the first ``lead`` lanes masked) load
    16 bytes per instruction. Only for tensors whose data pointer is 16-byte aligned (the host checks).
    """
    if ALIGN > 0:
        lead = x_off % ALIGN
        start = tl.multiple_of(x_off - lead, ALIGN)
    else:
        lead = tl.zeros_like(x_off)
        start = x_off
    return start, lead


@triton.jit
def slice_as_row(off, N, n_per_split):
    """(offset, length, start) of this program's split slice (``program_id(1)``) of the unit-stride row at ``off``,
    for :func:`aligned_rows` to shift it as a row of its own: a split's slices are whole chunks long but the last,
    so each slice of an odd-width row starts off 16-byte boundaries as the row does."""
    s0 = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    return off + s0, tl.minimum(N, s0 + n_per_split) - s0, s0


@triton.jit
def shifted_out(y_off, lead, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr):
    """Output row offsets for the tiles of :func:`aligned_rows`: shifted by the same ``lead`` (ALIGN_Y: the host
    checked that the output rows are then 16-byte aligned as well)."""
    if ALIGN > 0:
        y_off = y_off - lead
        if ALIGN_Y:
            y_off = tl.multiple_of(y_off, ALIGN)
    return y_off


@triton.jit
def row_masks(cols, lead, N, row_ok, ALIGN: tl.constexpr):
    """(element mask, load mask) of a [rows, BLOCK_N] tile at tile columns ``cols``; rows start at lane ``lead``.

    Triton vectorizes a masked load only when its mask is constant over each vector, so with ALIGN the load
    mask covers whole 16-byte chunks up to the one holding the row's last element (the extra lanes read
    neighbouring elements of the same aligned chunks, inside the allocation) and the element mask drops them
    from the math and the stores. Without ALIGN the tile starts at the row start and the two are the same.

    The single passes give int32 ``cols`` and ``lead`` (rows of at most 32768 elements): each element's compares
    are then one instruction each, not the two of an int64 compare; loops keep int64 columns (rows past 2^31).
    """
    if ALIGN > 0:
        elem = row_ok[:, None] & (cols[None, :] >= lead[:, None]) & (cols[None, :] < (lead + N)[:, None])
        end = tl.multiple_of(tl.cdiv(lead + N, ALIGN) * ALIGN, ALIGN)
        load = row_ok[:, None] & (cols[None, :] < end[:, None])
    else:
        elem = row_ok[:, None] & (cols < N)[None, :]
        load = elem
    return elem, load


@triton.jit
def _whole_chunks(lead, N, ALIGN: tl.constexpr):
    """(first, end) tile columns of the whole ALIGN-element chunks inside each shifted row."""
    lo = tl.multiple_of(tl.cdiv(lead, ALIGN) * ALIGN, ALIGN)
    hi = tl.multiple_of(((lead + N) // ALIGN) * ALIGN, ALIGN)
    return lo, hi


@triton.jit
def inner_mask(cols, lead, N, row_ok, ALIGN: tl.constexpr):
    """Store mask of the whole 16-byte chunks inside each row of a shifted tile (constant over each chunk, so
    the store vectorizes); the row's partial first and last chunks are written through :func:`edge_cols`."""
    lo, hi = _whole_chunks(lead, N, ALIGN)
    return row_ok[:, None] & (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])


@triton.jit
def edge_cols(lead, N, row_ok, ALIGN: tl.constexpr):
    """(tile columns, mask) of the row elements outside whole chunks: [rows, 2 * ALIGN] lanes, the first ALIGN
    over the row's first chunk, the others over the chunk after the last whole one (at most 2 * (ALIGN - 1)
    elements per row, read and written one by one)."""
    j = tl.arange(0, 2 * ALIGN)[None, :]
    lo, hi = _whole_chunks(lead, N, ALIGN)
    lo, hi = lo[:, None], hi[:, None]
    c = tl.where(j < ALIGN, j, hi + j - ALIGN)
    first = (j < ALIGN) & (c < lo)
    last = (j >= ALIGN) & (c >= hi) & (c >= lo)
    ok = row_ok[:, None] & (c >= lead[:, None]) & (c < (lead + N)[:, None]) & (first | last)
    return c, ok


@triton.jit
def group_barrier(count_ptr, expected):
    """Wait until ``expected`` programs have arrived at ``count_ptr`` (an int32 counter, zero before the launch):
    a barrier among the programs that share a row (softmax's split rows).

    Every thread's stores before the barrier are visible to every program after it: the CTA barrier orders this
    program's threads before its one release add (the pattern of CUDA's grid sync), and the acquire poll orders
    the reads after it. The programs must be co-resident, else a waiting one could hold the SM its partner needs:
    the launcher makes it a cooperative launch, which the driver refuses rather than deadlock. Compiled only: the
    interpreter runs programs one after another.
    """
    tl.debug_barrier()
    tl.atomic_add(count_ptr, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")
    while seen < expected:
        seen = tl.atomic_add(count_ptr, 0, sem="acquire", scope="gpu")


def single_load_evict(op: str, num_warps: int) -> str:
    """L2 hint of the single-pass row load of softmax or layer_norm (ops writing an output as large as their input).

    Evict-last, though each element is read once. Measured, not explained: H200, rotating inputs (no L2 residue
    between calls), hint none / evict-first / evict-last: softmax 16384x4096 fp32 94 / 91 / 98 %, bf16 91 / 88 / 94;
    65536x1024 fp32 95 / 90 / 98; 8192x8192 bf16 90 / 87 / 94 (last wins 11 of 12 shapes; plain reductions, with no
    output stream, prefer evict-first). layer_norm gains with tiles of 4-8 warps only (16384x4096 fp32 88.5 -> 90.8,
    bf16 88.3 -> 91.2) and loses with one warp (65536x1024 bf16 90.7 -> 84.2) and 16-32 (2048x16384 fp32 83.3 -> 80.6):
    no hint there.
    """
    if op == "layer_norm" and not 4 <= num_warps <= 8:
        return ""
    return "evict_last"


def loop_evicts(t: torch.Tensor) -> bool:
    """The ``EVICT_FIRST`` of :func:`load_loop` for a row loop over ``t``: 2-byte dtypes only (measured below)."""
    return t.element_size() <= 2


@triton.jit
def load_loop(ptrs, mask, EVICT_FIRST: tl.constexpr):
    """A row loop's load of data read once, with the evict-first L2 hint when EVICT_FIRST (0 where masked).

    The hint is a per-dtype choice (H200, 1024x131072, one bench with and one without): it gains 2-byte loops
    of var/std and max/min 2-4 points (70 vs 66-68 %) and costs 4-byte loops 5-7 (86-88 vs 93 %).
    """
    if EVICT_FIRST:
        x = tl.load(ptrs, mask=mask, other=0, eviction_policy="evict_first")
    else:
        x = tl.load(ptrs, mask=mask, other=0)
    return x
