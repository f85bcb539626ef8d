"""LigerRMSNormFunction(X, W, eps, offset, casting_mode, in_place, row_mode), a CPU stand-in: like Liger's, its
backward writes dX into dY's memory when ``in_place``."""

from __future__ import annotations

from typing import Any

import torch


class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, X: torch.Tensor, W: Any, eps: float, offset: float = 0.0, casting_mode: str = "llama",
                in_place: bool = True, row_mode: Any = None) -> torch.Tensor:
        ctx.save_for_backward(X, W)
        ctx.eps, ctx.in_place = eps, in_place
        return torch.nn.functional.rms_norm(X.float(), X.shape[-1:], None if W is None else W.float(), eps).to(X.dtype)

    @staticmethod
    def backward(ctx: Any, dY: torch.Tensor) -> tuple[Any, ...]:
        X, W = ctx.saved_tensors
        with torch.enable_grad():
            x = X.detach().float().requires_grad_()
            w = None if W is None else W.detach().float().requires_grad_()
            y = torch.nn.functional.rms_norm(x, X.shape[-1:], w, ctx.eps)
            grads = torch.autograd.grad(y, (x,) if w is None else (x, w), dY.float())
        dx = grads[0].to(X.dtype)
        if ctx.in_place:
            dY.copy_(dx)
            dx = dY
        dw = None if W is None else grads[1].to(W.dtype)
        return dx, dw, None, None, None, None, None
