"""cross_entropy as tritred's log_softmax and torch's differentiable loss ops, for what the fused launch cannot serve:
torch.func transforms (vmap, grad, jvp, jacrev, hessian) and forward-mode AD (dual inputs).

The fused launch forms the input's gradient in the forward pass, for a backward that only scales it; no transform
has a rule for a gradient made before the loss's own gradient is known, and a dual input has no tangent there.
Here the class dim's log-sum-exp, the reduction over C, is tritred's ``log_softmax`` (taken in float32, float64 for
float64; its Function carries vmap, jvp and double-backward rules), and the loss is assembled from it with torch's
formulas (aten's ``cross_entropy_loss``: ``nll_loss_nd``, ``cross_entropy_loss_label_smoothing``,
``cross_entropy_loss_prob_target``), which every transform differentiates and batches. The path is explicit: it
is taken only under a transform or a dual level, and logged at debug level.
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F

from ..softmax import log_softmax
from .checks import check

log = logging.getLogger("tritred")

_REDUCTIONS = ("none", "mean", "sum")


def cross_entropy(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                  reduction: int, label_smoothing: float) -> torch.Tensor:
    """The loss of :func:`tritred_ops.cross_entropy` (same arguments, ``reduction`` as torch's enum), in
    differentiable ops: log-probabilities from tritred's ``log_softmax``, then torch's loss formulas, in float32
    (float64 for float64), rounded once to the fused path's loss dtype. Raises what the fused path raises (its
    argument checks), and ``nll_loss``'s errors for class indices out of range."""
    call = check(x, target, weight, ignore_index, reduction, label_smoothing)
    log.debug("tritred cross_entropy: under a torch.func transform or forward-mode AD: tritred's log_softmax and "
              "torch's loss formulas (the fused launch forms its gradient in the forward)")
    d, C = call.class_dim, call.C
    uniform = label_smoothing / C if C else math.inf  # (torch's double division: inf for no classes)
    logp = log_softmax(x, d, call.acc)
    w = None if weight is None else weight.to(call.acc)
    wb = None if w is None else w.view([C if i == d else 1 for i in range(x.dim())])  # (broadcast over the class dim)
    red = _REDUCTIONS[reduction]
    if call.prob:
        q = target.to(call.acc)
        if label_smoothing > 0:
            q = q * (1 - label_smoothing) + uniform
        terms = logp * q if wb is None else logp * q * wb
        if reduction == 0:
            loss = -terms.sum(d)
        elif reduction == 2:
            loss = -terms.sum()
        else:  # (torch: over the samples, input.numel() / C; NaN for no samples, its tangent -0 as torch's)
            loss = -terms.sum() / (x.numel() // C) if x.numel() else -terms.sum() + math.nan
        return loss.to(call.loss_dtype)
    index = target.long()
    try:  # (a (C,) input takes a 0-d or a (1,) target: nll_loss reads them as one sample of a (1, C) input)
        loss = F.nll_loss(logp if x.dim() > 1 else logp.unsqueeze(0), index if x.dim() > 1 else index.reshape(1),
                          w, ignore_index=ignore_index, reduction=red)
    except (IndexError, RuntimeError) as e:  # (a class index out of range: torch's error, naming the op)
        raise type(e)(f"cross_entropy(): {e}") from e
    if x.dim() == 1 and reduction == 0:
        loss = loss.reshape(call.loss_shape)
    if label_smoothing > 0:
        ignored = index == ignore_index
        smooth = -(logp if wb is None else logp * wb).sum(d).reshape(ignored.shape).masked_fill(ignored, 0.0)
        if reduction == 1:  # (over the targets' weights, ignored targets left out, as nll_loss's mean)
            if w is None:
                smooth = smooth.sum() / (~ignored).sum()
            else:
                picked = w.gather(0, index.masked_fill(ignored, 0).flatten()).view(index.shape)
                smooth = smooth.sum() / picked.masked_fill(ignored, 0.0).sum()
        elif reduction == 2:
            smooth = smooth.sum()
        loss = (1 - label_smoothing) * loss + smooth * uniform
    return loss.to(call.loss_dtype)
