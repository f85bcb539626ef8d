"""LigerLayerNormFunction(X, W, B, eps), a CPU stand-in (torch's autograd inside)."""

from __future__ import annotations

from typing import Any

import torch


class LigerLayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, X: torch.Tensor, W: torch.Tensor, B: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.save_for_backward(X, W, B)
        ctx.eps = eps
        return torch.nn.functional.layer_norm(X.float(), X.shape[-1:], W.float(), B.float(), eps).to(X.dtype)

    @staticmethod
    def backward(ctx: Any, dY: torch.Tensor) -> tuple[Any, ...]:
        X, W, B = ctx.saved_tensors
        with torch.enable_grad():
            x, w, b = (t.detach().float().requires_grad_() for t in (X, W, B))
            y = torch.nn.functional.layer_norm(x, X.shape[-1:], w, b, ctx.eps)
            dx, dw, db = torch.autograd.grad(y, (x, w, b), dY.float())
        return dx.to(X.dtype), dw.to(W.dtype), db.to(B.dtype), None
