"""A CPU stand-in for quack-kernels' public functions (signatures of quack 0.6.x)."""

from __future__ import annotations

from typing import Any

import torch

from .rmsnorm import rmsnorm

__version__ = "0.0-fake"
__all__ = ["cross_entropy", "rmsnorm", "softmax"]


def softmax(x: torch.Tensor) -> torch.Tensor:
    assert x.dim() == 2, "Input must be 2D"
    assert x.dtype in [torch.float16, torch.bfloat16, torch.float32], "Unsupported dtype"
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def cross_entropy(x: torch.Tensor, target: torch.Tensor, lse_partial: Any = None, weight: Any = None,
                  ignore_index: int = -100, reduction: str = "mean", inplace_backward: bool = False) -> torch.Tensor:
    assert x.dim() == 2, "Input must be 2D"
    assert target.dim() == 1, "Target must be 1D"
    loss = torch.nn.functional.cross_entropy(x.float(), target, weight=None if weight is None else weight.float(),
                                             ignore_index=ignore_index, reduction="none")  # float32, as quack's
    if reduction == "mean":
        if weight is not None:
            valid = target != ignore_index
            return loss.sum() / (weight.float()[target.clamp(min=0)] * valid).sum()
        return loss.sum() / (target != ignore_index).sum().float()
    if reduction == "sum":
        return loss.sum()
    return loss
