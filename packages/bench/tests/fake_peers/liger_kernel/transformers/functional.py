"""liger_cross_entropy, a CPU stand-in: like Liger's, its forward writes the logits' gradient into the logits when
they require grad, and its backward scales that stored gradient."""

from __future__ import annotations

from typing import Any

import torch


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, target: torch.Tensor, weight: Any, ignore_index: int, reduction: str,
                label_smoothing: float) -> torch.Tensor:
        with torch.enable_grad():
            xf = x.detach().float().requires_grad_()
            loss = torch.nn.functional.cross_entropy(xf, target, weight=None if weight is None else weight.float(),
                                                     ignore_index=ignore_index, reduction=reduction,
                                                     label_smoothing=label_smoothing)
            if x.requires_grad:  # the gradient, written over the logits (as Liger does)
                grad = torch.autograd.grad(loss, xf, torch.ones_like(loss))[0]
                x.data.copy_(grad)
        if x.requires_grad:
            ctx.save_for_backward(x.detach())
        return loss.detach().to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        (grad,) = ctx.saved_tensors
        scale = g if g.dim() == 0 else g[:, None]
        return (grad * scale).to(grad.dtype), None, None, None, None, None


def liger_cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: Any = None, size_average: Any = None,
                        ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                        label_smoothing: float = 0.0, lse_square_scale: float = 0.0, softcap: Any = None,
                        return_z_loss: bool = False) -> torch.Tensor:
    return _CrossEntropy.apply(input, target, weight, ignore_index, reduction, label_smoothing)
