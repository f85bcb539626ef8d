"""The gradients of var, std, var_mean and std_mean: torch's ``derivatives.yaml`` formulas, to the letter.

Pointwise given the input (and std's result): written with torch's ops, traced into the backward graph under
``torch.compile``. The mean inside the formula is torch's (float32 accumulation for float16/bfloat16, read from
the input without a copy). float16/bfloat16 gradients are computed in float32 and rounded once.

Sources (PyTorch, ``torch/csrc/autograd/FunctionsManual.cpp``): ``var_backward``, ``std_backward``,
``var_mean_backward``, ``std_mean_backward``, ``mean_backward``. What torch does, kept here:

- ``dim=None`` (or a 0-d input): ``2 / (N - correction) * grad * (x - mean)``; when ``N - correction <= 0``,
  ``grad * where(x == mean, nan, inf)`` (the forward's variance is inf there, or NaN);
- a ``dim`` list: ``2 / (N - correction) * grad * (x - mean(dim))`` with N the product of the listed dims'
  sizes, without the ``<= 0`` branch: ``N - correction == 0`` gives inf (and NaN where ``x == mean``), a
  negative ``N - correction`` a negative factor. An empty list ``dim=()`` reduces every dim in the forward but
  counts N = 1 here, as torch does (its ``_safe_size`` of no dims);
- std: ``grad / (2 std)``, 0 where std is 0, then var's formula;
- var_mean/std_mean: the sum of the statistic's and the mean's gradients, each only when its output was used
  (an unused output's gradient is undefined in torch, not zeros: with ``N - correction <= 0`` a zero gradient
  would give NaN).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...runtime import prod as _numel
from ..reduce.backward import mean_backward, restore_dims

_HALF = (torch.float16, torch.bfloat16)


def _compute(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in _HALF else t


def var_backward(grad: torch.Tensor, x: torch.Tensor, dims: Sequence[int] | None, correction: float,
                 keepdim: bool) -> torch.Tensor:
    """d var / d x in the compute dtype (float32 for float16/bfloat16 ``x``, else ``x``'s).

    ``dims``: the reduced dims as given, wrapped and ascending (None: ``dim=None``; ``()``: the empty list)."""
    g, xc = _compute(grad), x
    acc = torch.float32 if x.dtype in _HALF else x.dtype
    if x.dim() == 0 or dims is None:
        mean = x.mean(dtype=acc)
        dof = x.numel() - correction
        if dof <= 0:
            special = torch.where(xc == mean, float("nan"), float("inf"))
            return g * special
        return (2.0 / dof) * g * (xc - mean)
    if not keepdim and x.dim() > 1:
        g = restore_dims(g, dims, False)
    dof = _numel([x.shape[d] for d in dims]) - correction
    scale = float("inf") if dof == 0 else 2.0 / dof  # (C++'s 2.0 / 0.0)
    mean = x.mean(tuple(dims), keepdim=True, dtype=acc)
    return (scale * g) * (xc - mean)


def std_backward(result: torch.Tensor, grad: torch.Tensor, x: torch.Tensor, dims: Sequence[int] | None,
                 correction: float, keepdim: bool) -> torch.Tensor:
    """d std / d x (compute dtype): ``grad / (2 std)`` (0 where std is 0) through :func:`var_backward`."""
    r = _compute(result)
    # (in place on the fresh quotient, as torch's: the out-of-place masked_fill would return a contiguous copy)
    grad_var = (_compute(grad) / (r * 2)).masked_fill_(r == 0, 0)
    return var_backward(grad_var, x, dims, correction, keepdim)


def stats_backward(name: str, grad: torch.Tensor | None, grad_mean: torch.Tensor | None, x: torch.Tensor,
                   result: torch.Tensor | None, dims: Sequence[int] | None, correction: float,
                   keepdim: bool) -> torch.Tensor | None:
    """d (var | std | var_mean | std_mean) / d x in ``x``'s dtype, or None when no output's gradient is
    defined. ``grad``/``grad_mean``: the statistic's and the mean's output gradients (None: unused);
    ``result``: std's output (std, std_mean)."""
    out: torch.Tensor | None = None
    if grad is not None:
        if name.startswith("std"):
            assert result is not None
            out = std_backward(result, grad, x, dims, correction, keepdim)
        else:
            out = var_backward(grad, x, dims, correction, keepdim)
    if grad_mean is not None:
        gm = _compute(grad_mean)
        # (torch: mean_backward(..., dim.value_or({}), ...): no dims, as None, is every dim)
        aux = mean_backward(gm, x.shape, list(dims) if dims else list(range(x.dim())), keepdim, gm.dtype)
        out = aux if out is None else out + aux
    return None if out is None else out.to(x.dtype)
