"""var, std, var_mean, std_mean: one-sweep statistics, Welford lanes merged by Chan's formula.

``single_pass``: the row is one register tile, reduced by the corrected two-pass algorithm (exact for rows far
from 0; bfloat16 rows by the plain two-pass, whose error their 8-bit significand bounds:
``kernels.welford.chunk_stats``); short rows may each be spread over a few threads (``threads_per_row``:
``kernels.welford.short_rows_stats``).
``multi_pass``/``split``: each lane of the [BLOCK_M, BLOCK_N] tile runs Welford's (1962) update over
the chunks, and the lanes are merged once at the end with the parallel formula of Chan, Golub & LeVeque (1979).
Either way the input is read once and E[x^2] - E[x]^2 is never formed, so rows with a large mean keep their
precision. Split partials (mean, M2) are merged in a fixed order by ``_stats_combine_kernel`` (deterministic);
their counts are recomputed from the split geometry rather than stored.

Two reduced axes (var over (0, 2, 3) of NCHW: the batch and H*W) need no copy: each (channel, image) row of H*W
elements gets its own (mean, M2) partial from the rows kernel (``PARTIAL``), and the combine kernel merges each
channel's batch of partials, as it merges split slices.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from tritred_core import LaunchConfig, ReductionSpec

from . import runtime as rt
from .kernels.combine import div_exact, sqrt_exact
from .kernels.dtypes import acc_dtype, f32_split, tl_dtype
from .kernels.rows import aligned_rows, col_block, load_loop, loop_evicts, row_block, wait_for_previous_launch
from .kernels.welford import (
    chan_fn,
    chunk_stats,
    join_chunk,
    merge_lanes,
    shifted_row_stats,
    short_rows_stats,
    short_rows_tile,
    single_tile,
    tiles_stats,
    welford_step,
)
from .runtime import Recorder, find_plan


@triton.jit
def _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, offs, mask, STD: tl.constexpr, WANT_MEAN: tl.constexpr):
    """var = M2 / max(N - correction, 0) (inf or NaN when that is 0, as torch), std = sqrt(var)."""
    var = div_exact(m2, divisor, m2.dtype)
    if STD:
        var = sqrt_exact(var, m2.dtype)
    tl.store(out_ptr + offs, var, mask=mask)
    if WANT_MEAN:
        # torch's Welford mean turns NaN as soon as an infinity meets any other element (inf - inf); ours is
        # a sum, which stays infinite: follow torch.
        mean = tl.where((var != var) & ((mean == float("inf")) | (mean == float("-inf"))) & (cnt > 1),
                        float("nan"), mean)
        tl.store(mean_ptr + offs, mean, mask=mask)


@triton.jit
def _stats_rows_kernel(x_ptr, out_ptr, mean_ptr, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                       divisor, divisor_lo,
                       ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr, SPLIT: tl.constexpr,
                       SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       PERSIST: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = 1, ALIGN: tl.constexpr = 0,
                       EVICT_LOOP: tl.constexpr = False, EVEN: tl.constexpr = False, PARTIAL: tl.constexpr = False,
                       DIV: tl.constexpr = 1, UNROLL: tl.constexpr = 0, TAIL: tl.constexpr = 0,
                       COLS: tl.constexpr = 0):
    """Rows of the reduced axis; PERSIST > 0: a persistent grid looping over row blocks (not with SPLIT);
    EVICT_LOOP: the evict-first hint on the loop's loads (2-byte dtypes, :func:`load_loop`); EVEN (single pass,
    unshifted): N == BLOCK_N, every lane of a row is one of its elements. PARTIAL (not with SPLIT): each row's
    (mean, M2) is stored at its row index for the combine kernel instead of finished (two reduced axes). DIV: N
    and the row stride are multiples of DIV. UNROLL (loop, no split): rows of exactly UNROLL full chunks, the
    loop unrolled (``runtime.unrolled_chunks``). TAIL (single pass): the row's lanes past BLOCK_N in a second
    tile of TAIL lanes (``BLOCK_TAIL``). COLS (single pass, unshifted, no tail): each row's COLS neighbouring columns
    across a few threads, its other columns in their registers (``threads_per_row``, :func:`short_rows_stats`)."""
    if DIV > 1:  # restated so that the compiler sees the divisibility (``runtime.row_hint``): vector loads, masks
        N = N // DIV * DIV
        s_xm = s_xm // DIV * DIV
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST, num_stages=LOOP_STAGES):
            _stats_rows_block(x_ptr, out_ptr, mean_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                              divisor, divisor_lo, ACC, STD, WANT_MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N, ALIGN,
                              EVICT_LOOP, EVEN, PARTIAL, UNROLL, TAIL, COLS)
    else:
        _stats_rows_block(x_ptr, out_ptr, mean_ptr, tl.program_id(0), R, N, K, s_xm, s_xn, s_xk, s_om, s_ok,
                          n_per_split, divisor, divisor_lo, ACC, STD, WANT_MEAN, SPLIT, SINGLE, BLOCK_M, BLOCK_N,
                          ALIGN, EVICT_LOOP, EVEN, PARTIAL, UNROLL, TAIL, COLS)


@triton.jit
def _stats_rows_block(x_ptr, out_ptr, mean_ptr, blk, R, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                      divisor, divisor_lo,
                      ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr, SPLIT: tl.constexpr,
                      SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr,
                      EVICT_LOOP: tl.constexpr, EVEN: tl.constexpr, PARTIAL: tl.constexpr, UNROLL: tl.constexpr,
                      TAIL: tl.constexpr = 0, COLS: tl.constexpr = 0):
    rows, row_ok, m, k = row_block(blk, R, K, BLOCK_M)
    x_off = m * s_xm + k * s_xk
    # odd widths (ALIGN; not with SPLIT): tiles start at the 16-byte boundary below each row
    x_off, lead = aligned_rows(x_off, ALIGN)
    x_row = x_ptr + x_off
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    if SINGLE and COLS > 0:  # short rows, each over a few threads (threads_per_row)
        cnt = tl.full([BLOCK_M], N, ACC)
        x, _, mask = short_rows_tile(x_row, N, row_ok, s_xn, ACC, BLOCK_N, COLS, EVEN, "evict_first")
        mean, corr, m2 = short_rows_stats(x, mask, cnt, ACC, EVEN, x_ptr.dtype.element_ty != tl.bfloat16)
        mean = tl.where(corr == corr, mean + corr, mean)
    elif SINGLE:  # the row is one register tile: exact corrected two-pass
        lead32 = lead.to(tl.int32)  # (int32 compares: see row_masks)
        x, mask, _ = single_tile(x_row, tl.arange(0, BLOCK_N), lead32, N, row_ok, s_xn, ACC, ALIGN, "evict_first")
        cnt = tl.full([BLOCK_M], N, ACC)
        if TAIL > 0:  # the row's lanes past BLOCK_N in a second tile (rows just past a power of two)
            x_t, mask_t, _ = single_tile(x_row, BLOCK_N + tl.arange(0, TAIL), lead32, N, row_ok, s_xn, ACC, ALIGN,
                                         "evict_first")
            mean, corr, m2 = tiles_stats(x, mask, x_t, mask_t, cnt, CORRECT=x_ptr.dtype.element_ty != tl.bfloat16)
        else:
            mean, corr, m2 = chunk_stats(x, mask, 1, cnt, EVEN, CORRECT=x_ptr.dtype.element_ty != tl.bfloat16)
        mean = tl.where(corr == corr, mean + corr, mean)  # a lone +-inf stays the mean (inf - inf = NaN)
    else:  # per-lane Welford over the full chunks, lanes merged once, then the partial last chunk
        mean_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        m2_l = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        if ALIGN > 0:  # shifted rows (no split; BLOCK_N >= ALIGN): only the first and last chunks are masked
            mean, m2, cnt = shifted_row_stats(x_row, lead, N, row_ok, s_xn, None, ACC, ALIGN, BLOCK_M, BLOCK_N,
                                              "evict_first" if EVICT_LOOP else "", False)
        elif UNROLL > 0:  # N == UNROLL * BLOCK_N (no split), unrolled: all of the row's loads in flight at once
            n_full = UNROLL
            for i in tl.static_range(UNROLL):
                cols = i * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)  # (the type of the tail's columns)
                x = load_loop(x_row[:, None] + cols[None, :] * s_xn, row_ok[:, None], EVICT_LOOP).to(ACC)
                mean_l, m2_l = welford_step(mean_l, m2_l, x, 1.0 / (i + 1))  # (constant: rounded at compile time)
        else:
            n_full = (n_hi - n_lo) // BLOCK_N
            for i in range(0, n_full):
                cols = n_lo + i * BLOCK_N + tl.arange(0, BLOCK_N)
                x = load_loop(x_row[:, None] + cols[None, :] * s_xn, row_ok[:, None], EVICT_LOOP).to(ACC)
                mean_l, m2_l = welford_step(mean_l, m2_l, x, div_exact(1.0, i + 1, ACC))
        if ALIGN == 0:
            # Raw lane means merged, unlike layer_norm's loop (lanes on x less the row's first element): shifting
            # every element cost 2-8 points on the H200, and the first element as the shift of the merge only costs
            # rows whose first element is far from their mean (1e4 among randn: the mean off by ulp(1e4)); raw, a
            # row at 1000 +- 1 keeps its mean within ~7 roundings and its variance within ~ulp(offset) / spread
            # (docs/semantics.md).
            mean, m2, cnt = merge_lanes(mean_l, m2_l, n_full, 1)
            t0 = n_lo + n_full * BLOCK_N
            if t0 < n_hi:
                cols = t0 + tl.arange(0, BLOCK_N)
                mask = row_ok[:, None] & (cols < n_hi)[None, :]
                x = load_loop(x_row[:, None] + cols[None, :] * s_xn, mask, EVICT_LOOP).to(ACC)
                mean, m2, cnt = join_chunk(mean, m2, cnt, x, mask, tl.zeros([BLOCK_M], ACC) + (n_hi - t0), 1)
    if PARTIAL:  # row r = (m, k) at r: output k's partials at k, k + K, ... (the combine kernel's partial strides)
        tl.store(out_ptr + rows, m2, mask=row_ok)
        tl.store(mean_ptr + rows, mean, mask=row_ok)
    elif SPLIT > 1:
        offs = rows * SPLIT + tl.program_id(1)
        tl.store(out_ptr + offs, m2, mask=row_ok)
        tl.store(mean_ptr + offs, mean, mask=row_ok)
    else:
        divisor = tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC)  # float64 scalars arrive as two float32 parts
        _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, m * s_om + k * s_ok, row_ok, STD, WANT_MEAN)


@triton.jit
def _stats_cols_kernel(x_ptr, out_ptr, mean_ptr, M, N, K, s_xm, s_xn, s_xk, s_om, s_ok, n_per_split,
                       divisor, divisor_lo,
                       ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr, SPLIT: tl.constexpr,
                       SINGLE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV: tl.constexpr = 1):
    """Columns: BLOCK_K adjacent k of one m over N (split slices or whole). DIV: K and the m and n strides are
    multiples of DIV."""
    if DIV > 1:  # restated so that the compiler sees the divisibility (``runtime.col_hint``): vector loads, masks
        K = K // DIV * DIV
        s_xm = s_xm // DIV * DIV
        s_xn = s_xn // DIV * DIV
        s_om = s_om // DIV * DIV
    m, ks, k_ok = col_block(K, BLOCK_K)
    x_col = x_ptr + m * s_xm + ks * s_xk
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split  # int64: split slices may start past 2^31
    n_hi = tl.minimum(N, n_lo + n_per_split)
    if SINGLE:
        ns = tl.arange(0, BLOCK_N)
        mask = (ns < N)[:, None] & k_ok[None, :]
        x = tl.load(x_col[None, :] + ns[:, None].to(tl.int64) * s_xn, mask=mask, other=0,
                    eviction_policy="evict_first").to(ACC)
        cnt = tl.full([BLOCK_K], N, ACC)
        mean, corr, m2 = chunk_stats(x, mask, 0, cnt)
        mean = tl.where(corr == corr, mean + corr, mean)
    else:  # as the rows kernel: Welford over full chunks, then the partial last chunk
        mean_l = tl.zeros([BLOCK_N, BLOCK_K], ACC)
        m2_l = tl.zeros([BLOCK_N, BLOCK_K], ACC)
        n_full = (n_hi - n_lo) // BLOCK_N
        for i in range(0, n_full):
            ns = n_lo + i * BLOCK_N + tl.arange(0, BLOCK_N)
            x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=k_ok[None, :], other=0,
                        eviction_policy="evict_first").to(ACC)
            mean_l, m2_l = welford_step(mean_l, m2_l, x, div_exact(1.0, i + 1, ACC))
        mean, m2, cnt = merge_lanes(mean_l, m2_l, n_full, 0)  # (raw, as the rows')
        t0 = n_lo + n_full * BLOCK_N
        if t0 < n_hi:
            ns = t0 + tl.arange(0, BLOCK_N)
            mask = (ns < n_hi)[:, None] & k_ok[None, :]
            x = tl.load(x_col[None, :] + ns[:, None] * s_xn, mask=mask, other=0, eviction_policy="evict_first").to(ACC)
            mean, m2, cnt = join_chunk(mean, m2, cnt, x, mask, tl.zeros([BLOCK_K], ACC) + (n_hi - t0), 0)
    if SPLIT > 1:
        offs = (m * K + ks) * SPLIT + tl.program_id(1)
        tl.store(out_ptr + offs, m2, mask=k_ok)
        tl.store(mean_ptr + offs, mean, mask=k_ok)
    else:
        divisor = tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC)
        _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, m * s_om + ks * s_ok, k_ok, STD, WANT_MEAN)


@triton.jit
def _stats_combine_kernel(pm2_ptr, pmean_ptr, out_ptr, mean_ptr, R, N, K, n_per_split, s_om, s_ok,
                          divisor, divisor_lo, n_split, s_prow, s_pslice,
                          ACC: tl.constexpr, STD: tl.constexpr, WANT_MEAN: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr, WAIT: tl.constexpr = False):
    """Merge the n_split partial (mean, M2) of each output (output r's slice s at r * s_prow + s * s_pslice);
    slice s holds clamp(N - s*n_per_split) elements. n_split is a runtime argument (the batch size of two reduced
    axes: no compile per batch size). WAIT: a dependent launch (``runtime.dependent_launch``)."""
    wait_for_previous_launch(WAIT)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < R
    s = tl.arange(0, BLOCK_S)
    mask = row_ok[:, None] & (s < n_split)[None, :]
    offs = rows[:, None] * s_prow + s[None, :].to(tl.int64) * s_pslice
    p_mean = tl.load(pmean_ptr + offs, mask=mask, other=0)
    p_m2 = tl.load(pm2_ptr + offs, mask=mask, other=0)
    p_n = tl.minimum(tl.maximum(N - s.to(tl.int64) * n_per_split, 0), n_per_split).to(ACC)
    p_n = tl.where(mask, p_n[None, :], 0)
    mean, m2, cnt = tl.reduce((p_mean, p_m2, p_n), 1, chan_fn)
    divisor = tl.cast(divisor, ACC) + tl.cast(divisor_lo, ACC)
    _finish(mean, m2, cnt, divisor, out_ptr, mean_ptr, (rows // K) * s_om + (rows % K) * s_ok, row_ok, STD,
            WANT_MEAN)


SPECS = {
    name: ReductionSpec(name=name, family="statistics", outputs=outputs, mirrors=f"torch.{name}", summary=summary)
    for name, outputs, summary in (
        ("var", ("var",), "variance with Bessel-style correction"),
        ("std", ("std",), "standard deviation with correction"),
        ("var_mean", ("var", "mean"), "(variance, mean) in one sweep"),
        ("std_mean", ("std", "mean"), "(standard deviation, mean) in one sweep"),
    )
}


def _launch(rec: Recorder, x: torch.Tensor, view: rt.View, out: torch.Tensor, mean_out: torch.Tensor, divisor: float,
            std: bool, want_mean: bool, cfg: LaunchConfig) -> None:
    (sxm, sxn, sxk), (som, _, sok) = view.strides
    acc = acc_dtype(x.dtype)
    R = view.M * view.K
    split, nps = rt.split_plan(cfg, view.N)
    consts = dict(ACC=tl_dtype(acc), STD=std, WANT_MEAN=want_mean, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    single = cfg.strategy == "single_pass"
    if split > 1:
        p_m2 = rec.empty((R, split), acc, x.device)
        p_mean = rec.empty((R, split), acc, x.device)
    else:
        p_m2, p_mean = out, mean_out
    name = ("std" if std else "var") + ("_mean" if want_mean else "")
    cols = rt.row_cols(cfg, x, name, rt.rows_layout(view), single, split)
    if rt.rows_layout(view):
        programs, persist = rt.row_programs(cfg, R, split)
        align = rt.row_align(x, view, cfg, single, True) if split == 1 else 0
        rec.launch(
            _stats_rows_kernel, (programs, split), x, p_m2, p_mean, R, view.N, view.K, sxm, sxn, sxk, som,
            sok, nps, *f32_split(divisor), SPLIT=split, SINGLE=single, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
            PERSIST=persist, LOOP_STAGES=cfg.num_stages, ALIGN=align, EVICT_LOOP=not single and loop_evicts(x),
            EVEN=split == 1 and rt.even_rows(view, cfg, single, align), DIV=rt.row_hint(view, align),
            UNROLL=rt.unrolled_chunks(view.N, cfg) if not single and split == 1 and not align else 0,
            TAIL=rt.single_tail(cfg, view, single), COLS=cols, **consts)
    else:
        rt.no_tail(cfg, name)
        rec.launch(
            _stats_cols_kernel, (view.M * rt.cdiv(view.K, cfg.BLOCK_K), split), x, p_m2, p_mean, view.M, view.N, view.K,
            sxm, sxn, sxk, som, sok, nps, *f32_split(divisor), SPLIT=split, SINGLE=single, BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K, DIV=rt.col_hint(view), **consts)
    if split > 1:
        block_m, block_s = rt.combine_blocks(R, split)
        rec.launch(
            _stats_combine_kernel, (rt.cdiv(R, block_m),), p_m2, p_mean, out, mean_out, R, view.N, view.K, nps, som,
            sok, *f32_split(divisor), split, split, 1, BLOCK_M=block_m, BLOCK_S=block_s,
            **rt.dependent_launch(x.device), **{**consts, "num_warps": 4})


#: Most partials per output the two-axes merge takes (one tile holds all of an output's partials).
_MAX_SLICES = 1024


def _two_axes(x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor, keepdim: bool) -> tuple[rt.View, int] | None:
    """Reduced dims that make two strided axes of ``x``, the inner one unit-stride, beside at most one kept axis
    (var over (0, 2, 3) of NCHW: the batch, then H*W, the channels kept): (the rows view M = outer, N = inner,
    K = kept: row (m, k), the m-th inner row of output k, is its m-th partial; the output's stride along the kept
    axis). Rows in that order are adjacent in memory (NCHW: image by image), so short inner rows (7x7) share
    their sectors. None for other layouts, or past ``_MAX_SLICES`` outer slices (the caller gathers)."""
    strides = [list(x.stride()), rt.out_strides(out, x.dim(), dims, keepdim)]
    kg, rg = rt.dim_groups(x.shape, strides, dims)
    if len(rg) != 2 or len(kg) > 1:
        return None
    (slices, s_outer), (inner, s_inner) = rg  # (sorted by stride: the outer axis first)
    if s_inner[0] != 1 or slices > _MAX_SLICES:
        return None
    kept, s_kept = kg[0] if kg else (1, [0, 0])
    view = rt.View(M=slices, N=inner, K=kept, strides=((s_outer[0], 1, s_kept[0]), (0, 0, 0)))
    return view, s_kept[1]


def _launch_two_axes(rec: Recorder, x: torch.Tensor, view: rt.View, out_stride: int, out: torch.Tensor,
                     mean_out: torch.Tensor, divisor: float, std: bool, want_mean: bool, cfg: LaunchConfig) -> None:
    """Statistics over two reduced axes without a copy: the rows kernel gives each inner row (one channel of
    one image) its (mean, M2) partial (PARTIAL), the combine kernel merges each output's ``view.M`` partials in a
    fixed order (Chan et al. 1979) and divides. ``cfg`` was decided for those rows; a split of them (long inner
    rows, few of them) becomes the loop over each row instead, as partials cannot be split twice."""
    if cfg.strategy == "split":
        cfg = cfg.model_copy(update={"strategy": "multi_pass", "split": 1})
    (sxm, sxn, sxk), _ = view.strides
    acc = acc_dtype(x.dtype)
    R = view.M * view.K
    p_m2, p_mean = rec.empty((R,), acc, x.device), rec.empty((R,), acc, x.device)
    consts = dict(ACC=tl_dtype(acc), STD=std, WANT_MEAN=want_mean, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    single = cfg.strategy == "single_pass"
    programs, persist = rt.row_programs(cfg, R)
    cols = rt.row_cols(cfg, x, ("std" if std else "var") + ("_mean" if want_mean else ""), True, single, 1)
    align = rt.row_align(x, view, cfg, single, True)
    rec.launch(
        _stats_rows_kernel, (programs, 1), x, p_m2, p_mean, R, view.N, view.K, sxm, sxn, sxk, 0, 0, view.N,
        *f32_split(divisor), SPLIT=1, SINGLE=single, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, PERSIST=persist,
        LOOP_STAGES=cfg.num_stages, ALIGN=align, EVICT_LOOP=not single and loop_evicts(x),
        EVEN=rt.even_rows(view, cfg, single, align), PARTIAL=True, DIV=rt.row_hint(view, align),
        TAIL=rt.single_tail(cfg, view, single), COLS=cols,
        UNROLL=0 if single or align else rt.unrolled_chunks(view.N, cfg), **consts)
    block_m, block_s = rt.combine_blocks(view.K, view.M)  # (output k's partials at k + m * K: rows * 1 + s * K)
    rec.launch(
        _stats_combine_kernel, (rt.cdiv(view.K, block_m),), p_m2, p_mean, out, mean_out, view.K, view.M * view.N, 1,
        view.N, out_stride, 0, *f32_split(divisor), view.M, 1, view.K, BLOCK_M=block_m, BLOCK_S=block_s,
        **rt.dependent_launch(x.device), **{**consts, "num_warps": 4})


def _parse_correction(name: str, dim: int | Sequence[int] | None, unbiased: bool | None,
                      correction: float | None) -> tuple[int | Sequence[int] | None, float]:
    if isinstance(dim, bool):  # torch's legacy overload var(input, unbiased)
        if unbiased is not None:
            raise TypeError(f"{name}() received an invalid combination of arguments: unbiased given twice")
        dim, unbiased = None, dim
    if unbiased is not None and not isinstance(unbiased, bool):  # torch takes no var(x, 1, 1)
        raise TypeError(f"{name}() received an invalid combination of arguments: 'unbiased' must be bool, "
                        f"not {type(unbiased).__name__}")
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}() received an invalid combination of arguments: "
                        "got both 'unbiased' and 'correction'")
    if correction is None:
        correction = 0 if unbiased is False else 1
    if not isinstance(correction, (int, float)):  # bool is an int for torch too: correction=True is 1
        raise TypeError(f"{name}(): argument 'correction' must be Number, not {type(correction).__name__}")
    return dim, float(correction)


def _stats(name: str, x: torch.Tensor, dim: int | Sequence[int] | None, unbiased: bool | None, keepdim: bool,
           correction: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    plan, key = find_plan(name, (dim, unbiased, keepdim, correction), x)
    if plan is not None:
        outs = plan.run(x)
        return outs[0], outs[-1]
    x = rt.check_tensor(name, "input", x)
    rt.check_keepdim(name, keepdim)
    dim, corr = _parse_correction(name, dim, unbiased, correction)
    if x.dtype not in rt.FLOATS:
        if x.dtype.is_complex:
            raise NotImplementedError(f"tritred.{name}(): complex inputs are not supported")
        raise RuntimeError(f"{name}(): std and var only support floating point and complex dtypes, got {x.dtype}")
    dims = rt.wrap_dims(name, dim, x.dim())  # type: ignore[arg-type]
    rt.check_runnable(name, x)
    shape = rt.reduced_shape(x.shape, dims, keepdim)
    rec = Recorder(x)
    out = rec.empty(shape, x.dtype, x.device)
    want_mean = name.endswith("_mean")
    # var/std write no mean: its pointer is out's, never stored to (one allocation less per call)
    mean_out = rec.empty(shape, x.dtype, x.device) if want_mean else out
    n = rt.prod([x.shape[d] for d in dims])
    if out.numel() == 0:
        return out, mean_out
    if n == 0:
        return out.fill_(float("nan")), mean_out.fill_(float("nan"))
    divisor = n - corr if n - corr > 0 else 0.0  # torch's max(N - correction, 0), which takes NaN to 0
    two = _two_axes(x, dims, out, keepdim)
    if two is not None:
        view, out_stride = two
        _launch_two_axes(rec, x, view, out_stride, out, mean_out, divisor, name.startswith("std"), want_mean,
                         rt.decide(SPECS[name], x, view))
    else:
        src, view, layout = rt.gathering(name, x, dims, out, keepdim)
        cfg = rt.decide(SPECS[name], x, view, layout)
        _launch(rec, src, view, out, mean_out, divisor, name.startswith("std"), want_mean, cfg)
    rec.save(key, *((out, mean_out) if want_mean else (out,)))
    return out, mean_out


_ARGS_DOC = """
    Args:
        input: floating tensor (float16, bfloat16, float32, float64) of any shape and strides.
        dim: int, tuple of ints, or None (all dims). ``var(input, True)`` is torch's legacy ``unbiased`` form.
        unbiased: legacy alias: True is ``correction=1``, False ``correction=0``.
        keepdim: keep reduced dims with size 1.
        correction: the divisor is ``max(N - correction, 0)`` (default 1, Bessel). A divisor of 0 gives inf
            (or NaN when the deviations are 0), as torch does.

    Raises:
        RuntimeError: integer/bool input, repeated dim, tensor not on CUDA (outside the interpreter).
        TypeError: both ``unbiased`` and ``correction``, or an ``unbiased`` that is not a bool.
        IndexError: dim out of range.
        NotImplementedError: complex input.

    Algorithm: chunked two-pass in registers merged by Chan et al. (1979) (Welford 1962's pairwise form);
    fp32 accumulation for fp16/bf16; deterministic split for few outputs; over two reduced axes (dim (0, 2, 3)
    of NCHW) one partial per inner row, merged per output in a fixed order, without copying the input.
"""


def var(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Variance over ``dim`` — mirrors :func:`torch.var`. Returns a tensor of the kept shape in the input dtype.
    """
    return _stats("var", input, dim, unbiased, keepdim, correction)[0]


def std(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Standard deviation (sqrt of :func:`var`) — mirrors :func:`torch.std`."""
    return _stats("std", input, dim, unbiased, keepdim, correction)[0]


def var_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(variance, mean) in one sweep — mirrors :func:`torch.var_mean`; both in the input dtype."""
    return _stats("var_mean", input, dim, unbiased, keepdim, correction)


def std_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(standard deviation, mean) in one sweep — mirrors :func:`torch.std_mean`."""
    return _stats("std_mean", input, dim, unbiased, keepdim, correction)


for _f in (var, std, var_mean, std_mean):
    _f.__doc__ = (_f.__doc__ or "") + _ARGS_DOC
