"""LigerSoftmaxFunction (last dim), a CPU stand-in."""

from __future__ import annotations

from typing import Any

import torch


class LigerSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input_: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(input_.float(), dim=-1).to(input_.dtype)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        yf = y.float()
        return (yf * (dy.float() - (dy.float() * yf).sum(-1, keepdim=True))).to(y.dtype)
