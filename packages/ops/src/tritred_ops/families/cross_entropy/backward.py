"""cross_entropy's backward: the gradient formed by the forward launch, scaled by the loss's gradient.

The forward (with grad required) wrote d loss / d logits for a loss gradient of 1 into a buffer of its own
(``launch.grad_like``). The backward multiplies it by ``grad_output`` (one value for 'mean' and 'sum', one per row
for 'none') row by row, ``_scale_kernel``:

- in place (eager): rows whose factor is exactly 1 are skipped (``loss.backward()`` of a mean or a sum: nothing
  is read or written, so that forward plus backward move the logits' bytes twice: read once, gradient written
  once); the buffer is then handed to autograd as the input's gradient (no second buffer);
- out of place (the registered op ``tritred::cross_entropy_backward``, which must not mutate its inputs): a new
  buffer, every row written.

Rows whose class index is ``ignore_index`` keep their formed gradient (0, or NaN where the row's
log-probabilities are NaN), whatever ``grad_output`` holds: torch's ``nll_loss_backward`` never multiplies them.

The gradients of probability targets and of class weights (probability targets only: torch's ``nll_loss`` takes
no weight gradient) are pointwise formulas of the saved lse and one column sum, computed with torch ops
(:func:`target_weight_grads`); they materialize a float32 (float64) tensor of the logits' shape.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from tritred_core import ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import tl_dtype
from ...runtime import Recorder, replay_plan
from .checks import NAME
from .kernels import _rows, narrow
from .launch import _with_class_dim


@triton.jit
def _scale_kernel(g_ptr, go_ptr, y_ptr, t_ptr, R, C, K, s_gm, s_gn, s_gk, s_ym, s_yn, s_yk, s_om, s_ok, s_tm, s_tk,
                  ignore_index, HAS_T: tl.constexpr, INPLACE: tl.constexpr, COLS: tl.constexpr, ACC: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``y = g * grad_output`` over BLOCK_M rows in BLOCK_N chunks (``go_ptr``: the row's factor, strides 0 for one
    value). HAS_T: class indices at ``t_ptr``, rows equal to ``ignore_index`` left as formed. INPLACE (y is g):
    only rows whose factor is not 1 are read and written, and a program with none returns after reading its
    factors."""
    m, k, row_ok = _rows(R, K, BLOCK_M, COLS)
    go = tl.load(go_ptr + m * s_om + k * s_ok, mask=row_ok, other=1).to(ACC)
    keep = row_ok
    if HAS_T:
        t = tl.load(t_ptr + m * s_tm + k * s_tk, mask=row_ok, other=0).to(tl.int64)
        keep = keep & (t != ignore_index)
    g_row = g_ptr + m * s_gm + k * s_gk
    y_row = y_ptr + m * s_ym + k * s_yk
    if INPLACE:
        todo = keep & (go != 1.0)
        if tl.max(todo.to(tl.int32), 0) > 0:
            for n0 in range(0, C, BLOCK_N):
                cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
                mask = todo[:, None] & (cols < C)[None, :]
                g = tl.load(g_row[:, None] + cols[None, :] * s_gn, mask=mask, other=0).to(ACC)
                tl.store(y_row[:, None] + cols[None, :] * s_yn, narrow(g * go[:, None], y_row), mask=mask)
    else:
        for n0 in range(0, C, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = row_ok[:, None] & (cols < C)[None, :]
            g = tl.load(g_row[:, None] + cols[None, :] * s_gn, mask=mask, other=0).to(ACC)
            y = tl.where(keep[:, None], g * go[:, None], g)
            tl.store(y_row[:, None] + cols[None, :] * s_yn, narrow(y, y_row), mask=mask)


def scale(spec: ReductionSpec, grad: torch.Tensor, grad_output: torch.Tensor, target: torch.Tensor | None,
          ignore_index: int, inplace: bool) -> torch.Tensor:
    """``grad`` (the forward's formed gradient, the logits' shape) times ``grad_output`` per row, in place
    (returns ``grad``) or into a new buffer of ``grad``'s layout. ``target``: the class indices (their ignored
    rows are left as formed), None for probability targets."""
    saved, key = replay_plan(f"{NAME}_backward", (ignore_index, inplace), grad, grad_output, target)
    if saved is not None:
        outs = saved
        return grad if inplace else outs[0]
    rec = Recorder(grad, grad_output, target)
    y = grad if inplace else rec.adopt(torch.empty_like(grad))
    if grad.numel() == 0:
        return y
    class_dim = 0 if grad.dim() == 1 else 1
    strides = [list(grad.stride())] + ([] if inplace else [list(y.stride())])
    if target is not None:
        strides.append(_with_class_dim(target, grad, class_dim))
    strides.append(_with_class_dim(grad_output, grad, class_dim) if grad_output.dim() else [0] * grad.dim())
    view = rt.canonical_view(grad.shape, strides, (class_dim,), reorder_reduced=False)
    if view is None:  # (a grad_output or target of a layout of its own: small, copied)
        grad_output = grad_output.contiguous()
        target = target.contiguous() if target is not None else None
        strides[-1] = _with_class_dim(grad_output, grad, class_dim) if grad_output.dim() else [0] * grad.dim()
        if target is not None:
            strides[-2] = _with_class_dim(target, grad, class_dim)
        view = rt.canonical_view(grad.shape, strides, (class_dim,), reorder_reduced=False)
    if view is None:  # (logits whose kept dims do not merge, and so neither do their gradient's: torch ops)
        return _torch_scale(grad, grad_output, target, ignore_index, inplace)
    it = iter(view.strides)
    sg = next(it)
    sy = sg if inplace else next(it)
    st = next(it) if target is not None else (0, 0, 0)
    so = next(it)
    cfg = rt.decide(spec, grad, view, direction="backward")
    cols = not rt.rows_layout(view)
    block_m = cfg.BLOCK_K if cols else cfg.BLOCK_M
    programs = view.M * rt.cdiv(view.K, block_m) if cols else rt.cdiv(view.M * view.K, block_m)
    acc = torch.float64 if torch.float64 in (grad.dtype, grad_output.dtype) else torch.float32
    rec.launch(_scale_kernel, (programs,), grad, grad_output, y, target if target is not None else grad,
               view.M * view.K, view.N, view.K, *sg, *sy, so[0], so[2], st[0], st[2], ignore_index,
               HAS_T=target is not None, INPLACE=inplace, COLS=cols, ACC=tl_dtype(acc), BLOCK_M=block_m,
               BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps)
    if inplace:
        rec.save(key)
    else:
        rec.save(key, y)
    return y


def _torch_scale(grad: torch.Tensor, grad_output: torch.Tensor, target: torch.Tensor | None, ignore_index: int,
                 inplace: bool) -> torch.Tensor:
    """:func:`scale` with torch ops, for gradients with no M x C x K view (the same rule for ignored rows)."""
    class_dim = 0 if grad.dim() == 1 else 1
    go = grad_output.unsqueeze(class_dim) if grad_output.dim() else grad_output
    y = grad * go
    if target is not None:
        ignored = target == ignore_index
        ignored = ignored.unsqueeze(class_dim) if grad.dim() > 1 else ignored.reshape(())
        y = torch.where(ignored, grad, y)
    return grad.copy_(y) if inplace else y


def target_weight_grads(grad_output: torch.Tensor, x: torch.Tensor, target: torch.Tensor,
                        weight: torch.Tensor | None, lse: torch.Tensor, reduction: int, label_smoothing: float,
                        need_target: bool, need_weight: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Probability targets: (d loss / d target, d loss / d weight) from the rows' saved (max, log_sum) pairs
    ``lse`` (torch ops).

    With ``logp = (x - max) - log_sum`` (as torch's log_softmax), ``q' = (1 - e) q + e/C`` and the rows' factor
    ``s`` (grad_output, / rows for 'mean'): ``d/dq = -(1 - e) s w logp`` and
    ``d/dw_c = -sum over rows of s q'_c logp_c``.
    """
    class_dim = 0 if x.dim() == 1 else 1
    C = x.shape[class_dim]
    acc = lse.dtype
    kept = [s for i, s in enumerate(x.shape) if i != class_dim]
    mx, ls = (v.reshape(kept).unsqueeze(class_dim) for v in lse.unbind(1))
    # (contiguous, as torch's log-probabilities: the target's gradient takes their layout)
    logp = (x.contiguous().to(acc) - mx) - ls
    g = grad_output.to(acc)
    if reduction == 1:
        g = g / (lse.shape[0] if lse.shape[0] else float("nan"))
    if reduction == 0 and g.dim():
        g = g.unsqueeze(class_dim)
    shape = [1] * x.dim()
    shape[class_dim] = C
    w = weight.to(acc).view(shape) if weight is not None else None
    smooth = label_smoothing > 0.0
    gq = gw = None
    if need_target:
        gq = logp * g * (-(1.0 - label_smoothing) if smooth else -1.0)
        if w is not None:
            gq = gq * w
        gq = gq.to(target.dtype)
    if need_weight and weight is not None:
        q = target.to(acc)
        if smooth:
            q = q * (1.0 - label_smoothing) + label_smoothing / C
        dims = [i for i in range(x.dim()) if i != class_dim]
        gw = (-(q * logp * g)).sum(dims) if dims else -(q * logp * g)
        gw = gw.to(weight.dtype)
    return gq, gw
