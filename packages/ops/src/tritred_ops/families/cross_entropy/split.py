"""cross_entropy's split rows: a row too long for one program's registers held by SPLIT programs at once.

Each program keeps BLOCK_N logits of the row in registers, publishes its chunk's (max, sum of exp) and, for label
smoothing and probability targets, the chunk's sum of v (w, or w q') and of v (x - max), meets the row's other
programs at a barrier (``kernels.rows.group_barrier``, one cooperative launch: ``runtime.launch_split_rows``),
merges the SPLIT partials in one fixed order (the same in every program: deterministic), then writes its chunk's
gradient from registers: the logits read once and the gradient written once, where the loop reads a row twice
(the second time from HBM once the rows in flight outgrow the L2). Under the interpreter, or where no group fits
on the device at once, two launches do the halves (PHASE 1, PHASE 2: a second read).

The loss of a row (and its (max, log_sum) pair) is stored by the row's first program: per row for 'none', else
into a per-row buffer that ``kernels._merge_kernel`` sums in a fixed order.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from tritred_core import LaunchConfig

from ... import runtime as rt
from ...kernels.combine import max_fn
from ...kernels.dtypes import tl_dtype
from ...kernels.rows import group_barrier
from ...runtime import Recorder
from .kernels import INF, _coefficients, _constants, _emit, _online_fn, _row_loss, _target, _weight_total, _weighted_q


@triton.jit
def _xent_split_kernel(x_ptr, t_ptr, q_ptr, w_ptr, g_ptr, out_ptr, lse_ptr, wpart_ptr, wsum_ptr, pm_ptr, ps_ptr,
                       pv_ptr, pa_ptr, count_ptr, R, C, K, s_xm, s_xn, s_xk, s_tm, s_tk, s_qm, s_qn, s_qk, s_gm,
                       s_gn, s_gk, s_om, s_ok, ignore_index, eps_hi, eps_lo, n_wpart,
                       PROB: tl.constexpr, HAS_W: tl.constexpr, SMOOTH: tl.constexpr, GRAD: tl.constexpr,
                       RED: tl.constexpr, SAVE_LSE: tl.constexpr, ACC: tl.constexpr, SPLIT: tl.constexpr,
                       SPLIT_P2: tl.constexpr, BLOCK_N: tl.constexpr, WP2: tl.constexpr, PHASE: tl.constexpr):
    """Rows of C logits, SPLIT programs of BLOCK_N each per row (see the module docstring); the arguments are
    ``_xent_kernel``'s, plus the per-row partial slots (``pm``, ``ps``, ``pv``, ``pa``: [R, SPLIT_P2]) and the
    barrier counters. RED 1 and 2 store each row's loss at ``out_ptr + row`` (fp32/fp64)."""
    part = tl.program_id(0) % SPLIT
    group = tl.program_id(0) // SPLIT
    groups = tl.num_programs(0) // SPLIT
    cols = part.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < C
    mask = cmask[None, :]
    parts = tl.arange(0, SPLIT_P2)
    written = parts < SPLIT
    one_m, ls_c, scale = _constants(eps_hi, eps_lo, wpart_ptr, n_wpart, R, C, PROB, SMOOTH, GRAD, RED, ACC, WP2)
    w = 1.0
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=cmask, other=0).to(ACC)[None, :]
    w_all = _weight_total(wsum_ptr, C, PROB, HAS_W, SMOOTH, ACC)
    SHIFT: tl.constexpr = SMOOTH or PROB
    for row in tl.range(group, R, groups):
        r = tl.cast(row, tl.int64)
        m = (r // K) + tl.zeros([1], tl.int64)
        k = (r % K) + tl.zeros([1], tl.int64)
        ok = tl.full([1], 1, tl.int1)  # (one row, always in range: the masks below fold away)
        x_row = x_ptr + m * s_xm + k * s_xk
        x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=-INF).to(ACC)  # [1, BLOCK_N]
        wq = 0.0
        if PROB:
            wq = _weighted_q(q_ptr + m * s_qm + k * s_qk, w_ptr, cols, cmask, mask, s_qn, one_m, ls_c, HAS_W,
                             SMOOTH, ACC)
        mx = tl.reduce(x, 1, max_fn)
        m_at = tl.where(mx == -INF, 0.0, mx)
        ssum = tl.where(mx == -INF, 0.0, tl.sum(tl.exp(x - m_at[:, None]), 1))
        slot = r * SPLIT_P2 + part
        if PHASE != 2:
            tl.store(pm_ptr + slot + tl.zeros([1], tl.int64), mx)
            tl.store(ps_ptr + slot + tl.zeros([1], tl.int64), ssum)
            if SHIFT:
                if PROB:
                    v = wq
                else:
                    v = tl.where(mask, w, 0.0)
                d = tl.where(mask, v * (x - m_at[:, None]), 0.0)
                tl.store(pv_ptr + slot + tl.zeros([1], tl.int64), tl.sum(v, 1))
                tl.store(pa_ptr + slot + tl.zeros([1], tl.int64), tl.sum(d, 1))
        if PHASE == 3:
            group_barrier(count_ptr + r, SPLIT)
        if PHASE != 1:
            # .cg: read at L2, where the other programs' partials are (never a stale L1 line)
            at = r * SPLIT_P2 + parts
            pm = tl.load(pm_ptr + at, mask=written, other=-INF, cache_modifier=".cg")
            ps = tl.load(ps_ptr + at, mask=written, other=0, cache_modifier=".cg")
            row_max, row_sum = tl.reduce((pm, ps), 0, _online_fn)
            mxr = row_max + tl.zeros([1], ACC)
            ls = tl.log(row_sum) + tl.zeros([1], ACC)
            terms = tl.zeros([1], ACC)
            vsum = tl.zeros([1], ACC)
            if SHIFT:
                pv = tl.load(pv_ptr + at, mask=written, other=0, cache_modifier=".cg")
                pa = tl.load(pa_ptr + at, mask=written, other=0, cache_modifier=".cg")
                g_at = tl.where(pm == -INF, 0.0, pm)
                r_at = tl.where(row_max == -INF, 0.0, row_max)
                vsum = tl.sum(pv, 0) + tl.zeros([1], ACC)
                terms = vsum * ls - tl.sum(tl.where(written, pa - pv * (r_at - g_at), 0.0), 0)
            t, use, bad, w_t, x_t = _target(t_ptr + m * s_tm + k * s_tk, x_row, w_ptr, ok, s_xn, C, ignore_index,
                                            PROB, HAS_W, ACC)
            if GRAD:
                a, b, c = _coefficients(use, bad, w_t, w_all, vsum, scale, one_m, ls_c, PROB, SMOOTH)
                _emit(x, 0.0, wq, w, mask, g_ptr + (m * s_gm + k * s_gk)[:, None] + cols[None, :] * s_gn,
                      part.to(tl.int64) * BLOCK_N, mxr, ls, t, a, b, c, tl.zeros([1, BLOCK_N], ACC), PROB, SMOOTH,
                      GRAD, False, BLOCK_N)
            if part == 0:
                loss = _row_loss(terms, mxr, ls, x_t, w_t, use, bad, one_m, ls_c, PROB, SMOOTH)
                if SAVE_LSE:
                    tl.store(lse_ptr + r * 2 + tl.zeros([1], tl.int64), mxr)
                    tl.store(lse_ptr + r * 2 + 1 + tl.zeros([1], tl.int64), ls)
                if RED == 0:
                    tl.store(out_ptr + m * s_om + k * s_ok, loss)
                else:
                    tl.store(out_ptr + r + tl.zeros([1], tl.int64), loss)


def launch_split(rec: Recorder, cfg: LaunchConfig, view: rt.View, x: torch.Tensor, tensors: tuple[Any, ...],
                 strides: dict[str, Any], consts: dict[str, Any], acc: torch.dtype, reduction: int,
                 loss: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Launch the split rows of a call (``tensors``: x, t, q, w, g, out, lse, wpart, wsum as ``_xent_kernel``
    takes them; ``strides`` and ``consts`` its keyword arguments). Returns (the tensor the merge sums, its
    length): the per-row losses for 'mean' and 'sum'."""
    rows = view.M * view.K
    block_n, split = rt.split_row_chunks(cfg, view.N)
    parts = rt.next_pow2(split)
    slots = [rec.empty((rows, parts), acc, x.device) for _ in range(4)]
    out = tensors[5]
    per_row = None
    if reduction != 0:
        per_row = rec.empty((rows,), acc, x.device)
        out = per_row
    args = (*tensors[:5], out, *tensors[6:], *slots)
    rt.launch_split_rows(rec, _xent_split_kernel, x, rows, split, cfg.num_programs, args,
                         dict(R=rows, C=view.N, K=view.K, **strides, **consts, ACC=tl_dtype(acc), SPLIT=split,
                              SPLIT_P2=parts, BLOCK_N=block_n, num_warps=cfg.num_warps))
    return (per_row if per_row is not None else loss), rows
