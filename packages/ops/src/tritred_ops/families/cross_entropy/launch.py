"""The host path of cross_entropy's forward: checks, the view, the launch decision, the launches, replay.

One call is up to three launches, all recorded for replay: ``_targets_kernel`` (class-index targets: the mean's
denominator as partials, the sum of the weights for label smoothing, the device-side range check on CUDA), then
``_xent_kernel`` (each row's loss, and with grad required the gradient into a new contiguous buffer),
then ``_merge_kernel`` (mean and sum: the per-program partials summed in a fixed order). The mean's denominator
stays on the device: no host synchronization. The launch decision is asked with ``direction="backward"`` when
the launch forms the gradient (two sweeps and a write per row), ``"forward"`` when it only computes the loss.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from tritred_core import ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import f32_split, tl_dtype
from ...runtime import Recorder, find_plan
from ...runtime.trace import active
from .checks import NAME, Call, check, target_values
from .kernels import _merge_kernel, _targets_check_kernel, _targets_kernel, _xent_kernel
from .split import launch_split

log = logging.getLogger("tritred")

#: ``_targets_kernel``: at most this many programs (the partials every ``_xent_kernel`` program merges), each
#: over at least TARGET_ROWS rows, in tiles of TARGET_BLOCK.
TARGET_PARTS = 32
TARGET_ROWS = 8192
TARGET_BLOCK = 1024

Outputs = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def grad_like(x: torch.Tensor) -> torch.Tensor:
    """The gradient buffer of logits ``x``: contiguous, whatever x's strides, as torch's gradient of
    cross_entropy (its log_softmax backward allocates a contiguous one)."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def forward(spec: ReductionSpec, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
            ignore_index: int, reduction: int, label_smoothing: float, grad_input: bool,
            save_lse: bool) -> Outputs:
    """(loss, d loss / d x for a loss gradient of 1 or None, each row's (max, log of the sum of exp(x - max)) or
    None) of a call: ``reduction`` is torch's enum (0 none, 1 mean, 2 sum). ``grad_input``: form the gradient (a
    new buffer, :func:`grad_like`); ``save_lse``: keep the rows' pairs, (rows, 2) in fp32 (fp64 for fp64)."""
    plan, key = find_plan(NAME, (ignore_index, reduction, label_smoothing, grad_input, save_lse), x, target, weight)
    if plan is not None:
        if x.device.type == "cpu" and target.shape != x.shape:
            target_values(target, x.shape[0 if x.dim() == 1 else 1], ignore_index)
        outs = iter(plan.run(x, target, weight))
        loss = next(outs)
        return loss, next(outs) if grad_input else None, next(outs) if save_lse else None
    call = check(x, target, weight, ignore_index, reduction, label_smoothing)
    x = rt.check_tensor(NAME, "input", x)
    target = rt.check_tensor(NAME, "target", target)
    weight = rt.check_tensor(NAME, "weight", weight) if weight is not None else None
    rt.check_runnable(NAME, x)
    if not call.prob and (x.device.type == "cpu" or (call.C == 0 and call.rows)):
        # (on CUDA the kernel checks the targets on the device; with no classes no kernel runs, so any target
        # but ignore_index is out of bounds, read here: torch's CPU IndexError instead of a silent NaN)
        target_values(target, call.C, ignore_index)
    rec = Recorder(x, target, weight)
    loss = rec.empty(call.loss_shape, call.loss_dtype, x.device)
    grad = rec.adopt(grad_like(x)) if grad_input else None
    lse = rec.empty((call.rows, 2), call.acc, x.device) if save_lse else None
    if call.rows == 0 or call.C == 0:
        # (class indices with label smoothing and no classes: torch's smoothing term is 0 * (ls / 0), NaN)
        return _empty(loss, grad, lse, reduction, nan=not call.prob and call.C == 0 and label_smoothing > 0)
    _launch(spec, rec, call, x, target, weight, loss, grad, lse, ignore_index, reduction, label_smoothing)
    rec.save(key, *(t for t in (loss, grad, lse) if t is not None))
    return loss, grad, lse


def _empty(loss: torch.Tensor, grad: torch.Tensor | None, lse: torch.Tensor | None, reduction: int,
           nan: bool = False) -> Outputs:
    """No rows or no classes, as torch: a mean is NaN (0 / 0), a sum 0, 'none' zeros (``nan``: every loss NaN);
    the gradient zeros and the rows' (max, log_sum) -inf (no classes)."""
    loss.fill_(float("nan") if reduction == 1 or nan else 0.0)
    if grad is not None:
        grad.zero_()
    if lse is not None:
        lse.fill_(float("-inf"))
    return loss, grad, lse


def _with_class_dim(t: torch.Tensor, x: torch.Tensor, class_dim: int) -> list[int]:
    """Strides of ``t`` (the input's shape without its class dim: targets, the 'none' loss) over the input's
    dims, 0 on the class dim; a 1-d input's 0-d or one-element target: [0]."""
    if x.dim() == 1:
        return [0]
    strides = list(t.stride())
    strides.insert(class_dim, 0)
    return strides


def _view(x: torch.Tensor, grad: torch.Tensor | None, q: torch.Tensor | None, t: torch.Tensor | None,
          out: torch.Tensor | None, class_dim: int) -> rt.View | None:
    """The joint M x C x K view of the tensors the kernel reads and writes, in the order given (absent ones
    skipped), reduced over the class dim in place."""
    strides = [list(x.stride())]
    strides += [list(u.stride()) for u in (grad, q) if u is not None]
    strides += [_with_class_dim(u, x, class_dim) for u in (t, out) if u is not None]
    return rt.canonical_view(x.shape, strides, (class_dim,), reorder_reduced=False)


def _launch(spec: ReductionSpec, rec: Recorder, call: Call, x: torch.Tensor, target: torch.Tensor,
            weight: torch.Tensor | None, loss: torch.Tensor, grad: torch.Tensor | None, lse: torch.Tensor | None,
            ignore_index: int, reduction: int, label_smoothing: float) -> None:
    q, t = (target, None) if call.prob else (None, target)
    out = loss if reduction == 0 else None  # ('mean' and 'sum': per-program or per-row partials, then a merge)
    w = rt.unit_stride(weight)
    layout = "strided"
    view = _view(x, grad, q, t, out, call.class_dim)
    if view is None and (q is not None or t is not None):  # targets of their own layout: a copy of the targets
        q = q.contiguous() if q is not None else None
        t = t.contiguous() if t is not None else None
        view = _view(x, grad, q, t, out, call.class_dim)
    grad_out = grad
    if view is None:  # logits whose kept dims do not merge into two axes: one copy (logged)
        log.debug("tritred.cross_entropy: a %s input with strides %s has no M x C x K view: gathered (one copy)",
                  tuple(x.shape), x.stride())
        x, layout = x.contiguous(), "gathered"
        q = q.contiguous() if q is not None else None
        if grad is not None and not grad.is_contiguous():
            grad = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # (copied into grad_out below)
        view = _view(x, grad, q, t, out, call.class_dim)
        assert view is not None
    it = iter(view.strides)
    sx = next(it)
    sg = next(it) if grad is not None else (0, 0, 0)
    sq = next(it) if q is not None else (0, 0, 0)
    st = next(it) if t is not None else (0, 0, 0)
    so = next(it) if out is not None else (0, 0, 0)
    cfg = rt.decide(spec, x, view, layout, direction="backward" if grad is not None else "forward")
    rows, C = view.M * view.K, view.N
    smooth = label_smoothing > 0.0
    acc = call.acc
    n_wpart, wpart, wsum = 1, None, None
    if not call.prob:
        wpart, wsum, n_wpart = _targets(rec, x, t, w, view, st, ignore_index, reduction, smooth, acc)  # type: ignore[arg-type]
    cols = not rt.rows_layout(view)
    hi, lo = f32_split(label_smoothing)
    tensors = (x, t if t is not None else x, q if q is not None else x, w if w is not None else x,
               grad if grad is not None else x, out, lse if lse is not None else x,
               wpart if wpart is not None else x, wsum if wsum is not None else x)
    consts = dict(ignore_index=ignore_index, eps_hi=hi, eps_lo=lo, n_wpart=n_wpart, PROB=call.prob,
                  HAS_W=w is not None, SMOOTH=smooth, GRAD=grad is not None, RED=reduction,
                  SAVE_LSE=lse is not None, WP2=rt.next_pow2(n_wpart))
    if cfg.strategy == "split_rows":
        if cols:
            raise ValueError(f"{NAME}: strategy 'split_rows' (config from {cfg.decided_by}) holds unit-stride rows; "
                             f"this call's classes have stride {sx[1]}: give it single_pass or multi_pass")
        strides = dict(zip(("s_xm", "s_xn", "s_xk"), sx)) | dict(s_tm=st[0], s_tk=st[2]) | \
            dict(zip(("s_qm", "s_qn", "s_qk"), sq)) | dict(zip(("s_gm", "s_gn", "s_gk"), sg)) | \
            dict(s_om=so[0], s_ok=so[2])
        part, programs = launch_split(rec, cfg, view, x, tensors, strides, consts, acc, reduction, loss)
    else:
        block_m = cfg.BLOCK_K if cols else cfg.BLOCK_M
        programs = view.M * rt.cdiv(view.K, block_m) if cols else rt.cdiv(rows, block_m)
        single = cfg.strategy == "single_pass"
        if cfg.strategy != "multi_pass" and not single:
            raise ValueError(f"{NAME}: strategy {cfg.strategy!r} (config from {cfg.decided_by}) is not implemented")
        if single and cfg.BLOCK_N < C:
            raise ValueError(f"{NAME}: single_pass needs BLOCK_N >= C ({cfg.BLOCK_N} < {C})")
        part = rec.empty((programs,), acc, x.device) if reduction != 0 else loss
        group = 1 if single or cols else min(16 // x.element_size(), cfg.BLOCK_N)
        rec.launch(_xent_kernel, (programs,), *tensors[:5], part, *tensors[6:], rows, C, view.K, *sx, st[0], st[2],
                   *sq, *sg, so[0], so[2], **consts, ACC=tl_dtype(acc), SINGLE=single, COLS=cols, BLOCK_M=block_m,
                   BLOCK_N=cfg.BLOCK_N, GROUP=group, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if reduction != 0:
        rec.launch(_merge_kernel, (1,), part, programs, wpart if wpart is not None else part, n_wpart, loss, rows,
                   MEAN=reduction == 1, PROB=call.prob, ACC=tl_dtype(acc), BLOCK=min(1024, rt.next_pow2(programs)),
                   WP2=rt.next_pow2(n_wpart), num_warps=4)
    if grad_out is not None and grad_out is not grad:
        grad_out.copy_(grad)  # type: ignore[arg-type]


def _targets(rec: Recorder, x: torch.Tensor, t: torch.Tensor, w: torch.Tensor | None, view: rt.View,
             st: tuple[int, int, int], ignore_index: int, reduction: int, smooth: bool,
             acc: torch.dtype) -> tuple[Any, Any, int]:
    """The launch of ``_targets_kernel`` when something needs it: (the weight partials or None, the weight sum
    or None, the partial count). On CUDA always (the device-side range check); else for the mean's denominator
    and for label smoothing's sum of weights. (The device's backend, not the tensor's: the sm_90 compile test
    compiles CUDA's variant from CPU tensors, ``tritred explain --device h200`` shows it for meta tensors.)"""
    rows = view.M * view.K
    trace = active()
    device = trace.device if trace is not None and trace.device is not None else rt.device_info(x.device)
    check = device.backend == "cuda"
    parts, wsum_needed = reduction == 1, smooth and w is not None
    if not (check or parts or wsum_needed):
        return None, None, 1
    n = max(1, min(TARGET_PARTS, rt.cdiv(rows, TARGET_ROWS)))
    per = rt.cdiv(rows, n)
    wpart = rec.empty((n,), acc, x.device) if parts else None
    wsum = rec.empty((1,), acc, x.device) if wsum_needed else None
    kernel = _targets_check_kernel if check else _targets_kernel
    rec.launch(kernel, (n,), t, w if w is not None else t, wpart if wpart is not None else t,
               wsum if wsum is not None else t, rows, view.K, st[0], st[2], view.N, ignore_index, per,
               HAS_W=w is not None, CHECK=check, PARTS=parts, WSUM=wsum_needed, ACC=tl_dtype(acc),
               BLOCK=TARGET_BLOCK, num_warps=4)
    return wpart, wsum, n

