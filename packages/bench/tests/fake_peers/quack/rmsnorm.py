"""quack.rmsnorm's rmsnorm, layernorm_fwd and layernorm_bwd (CPU stand-ins)."""

from __future__ import annotations

from typing import Any

import torch


def rmsnorm(x: torch.Tensor, weight: Any = None, bias: Any = None, residual: Any = None, out_dtype: Any = None,
            residual_dtype: Any = None, eps: float = 1e-6, prenorm: bool = False,
            weight_offset: float = 0.0) -> torch.Tensor:
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    y = x2.float() * torch.rsqrt(x2.float().pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype).reshape(shape)


def layernorm_fwd(x: torch.Tensor, weight: torch.Tensor, bias: Any = None, eps: float = 1e-6,
                  return_rstd: bool = False, return_mean: bool = False) -> Any:
    assert x.dim() == 2, "Input must be 2D"
    assert weight.dim() == 1, "Weight must be 1D"
    assert weight.dtype == torch.float32, "Weight must be float32"
    if bias is not None:
        assert bias.dtype == torch.float32, "Bias must be float32"
    xf = x.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False) + eps)
    y = (xf - mean[:, None]) * rstd[:, None] * weight
    if bias is not None:
        y = y + bias
    out = y.to(x.dtype)
    if return_rstd and return_mean:
        return out, rstd, mean
    if return_rstd:
        return out, rstd
    if return_mean:
        return out, mean
    return out


def layernorm_bwd(x: torch.Tensor, weight: torch.Tensor, dout: torch.Tensor, rstd: torch.Tensor, mean: torch.Tensor,
                  has_bias: bool = True) -> tuple[Any, ...]:
    assert x.dim() == 2, "Input must be 2D"
    xhat = (x.float() - mean[:, None]) * rstd[:, None]
    g = dout.float() * weight
    n = x.shape[-1]
    dx = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).sum(-1, keepdim=True) / n)
    dw = (dout.float() * xhat).sum(0).to(weight.dtype)
    db = dout.float().sum(0).to(weight.dtype) if has_bias else None
    return dx.to(x.dtype), dw, db
