"""The gradients of sum, mean, prod, amax, amin, max and min: torch's ``derivatives.yaml`` formulas, to the letter.

Every backward here is pointwise given what the forward saved (the input's shape, the input, the result, the
indices), so it is written with torch's ops: under ``torch.compile`` AOTAutograd traces it into the backward
graph (Inductor fuses it), in eager it runs as torch's own backward would. Only prod's backward branches on the
data (whether the input holds zeros), as torch's does: it is the registered op ``tritred::prod_backward``
(:mod:`.autograd`), so that a compiled graph takes the same branch as eager at run time.

Sources (PyTorch, ``tools/autograd/derivatives.yaml`` and ``torch/csrc/autograd/FunctionsManual.cpp``):

- sum: ``sum_backward``: the output gradient with the reduced dims restored, expanded (a broadcast view);
- mean: ``mean_backward``: the same, divided by the number of reduced elements (numel for a full reduction): a
  dense tensor, as torch's division of the broadcast gradient;
- prod: ``prod_backward``: ``grad * result / input`` when the input has no zero, else the product of the other
  elements of each slice as exclusive cumulative products from both ends (``prod_safe_zeros_backward``), which
  is exact with one zero and gives 0 with several; a full reduction with several zeros is all zeros;
- amax/amin: ``scale_grad_by_count``: the gradient split evenly among the elements equal to the result (a slice
  whose result is NaN has no such element: 0/0, its gradient is NaN);
- max/min with dim: ``value_selecting_reduction_backward``: the gradient to the index, zeros elsewhere;
- max/min without dim: ``evenly_distribute_backward``: split evenly among the elements equal to the result
  (among the NaN elements when the result is NaN); CUDA's formula, contiguous off CUDA as torch's CPU result.

With ``dtype=`` (sum, mean, prod), the gradient is computed in the output's dtype, as torch's formulas are, and
returned in the input's. prod's gradient of float16/bfloat16 is computed in float32 and rounded once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...runtime import prod as _numel

#: Dtypes whose gradients are computed in float32 and rounded once.
_HALF = (torch.float16, torch.bfloat16)


def restore_dims(t: torch.Tensor, dims: Sequence[int], keepdim: bool) -> torch.Tensor:
    """``t`` (a reduction's output or its gradient) with the reduced ``dims`` (wrapped, ascending) back as size 1
    (torch's ``unsqueeze_multiple`` / ``restore_reduced_dims``); as is with ``keepdim``."""
    if not keepdim:
        for d in dims:
            t = t.unsqueeze(d)
    return t


def sum_backward(grad: torch.Tensor, shape: Sequence[int], dims: Sequence[int], keepdim: bool,
                 dtype: torch.dtype) -> torch.Tensor:
    """d sum / d input: ``grad`` [reduced shape] broadcast back to ``shape`` (a view: no copy), in ``dtype``
    (the input's; ``grad`` is in the output's). ``dims``: the reduced dims, wrapped, ascending."""
    return restore_dims(grad, dims, keepdim).to(dtype).expand(shape)


def mean_backward(grad: torch.Tensor, shape: Sequence[int], dims: Sequence[int], keepdim: bool,
                  dtype: torch.dtype) -> torch.Tensor:
    """d mean / d input: ``grad / N`` (N: the reduced elements' count), as torch's ``mean_backward``: ``grad``
    broadcast to ``shape``, then divided in ``grad``'s dtype (a dense tensor, laid out as torch's division of the
    broadcast gradient lays it out), then in ``dtype``."""
    n = _numel([shape[d] for d in dims])
    return (restore_dims(grad, dims, keepdim).expand(shape) / n).to(dtype)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


def _exclusive_products(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Each element's product of the other elements of its slice along ``dim``: exclusive cumulative products
    from the front times those from the back (torch's ``prod_safe_zeros_backward``: no division, so exact with
    zeros). ``x`` has size >= 2 along ``dim``."""
    n = x.shape[dim]
    ones = torch.ones_like(x.narrow(dim, 0, 1))
    front = torch.cat([ones, x.narrow(dim, 0, n - 1)], dim).cumprod(dim)
    back = torch.cat([ones, x.narrow(dim, 1, n - 1).flip(dim)], dim).cumprod(dim).flip(dim)
    return front * back


def _safe_zeros(grad: torch.Tensor, x: torch.Tensor, dim: int) -> torch.Tensor:
    """torch's ``prod_safe_zeros_backward``: ``grad`` times each element's product of the others."""
    if x.numel() == 0 or x.shape[dim] == 1:
        return grad.expand_as(x)
    return grad * _exclusive_products(x, dim)


def prod_backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int | None,
                  keepdim: bool) -> torch.Tensor:
    """d prod / d input, torch's ``prod_backward``: a tensor of ``input``'s shape and dtype (possibly a view of
    ``grad``: the registered op copies such a result).

    ``grad`` and ``result``: the output's gradient and value (in the output dtype: ``dtype=`` or the input's);
    ``dim``: the wrapped reduced dim, or None for the full reduction. Computed in the output dtype (float32 for
    float16/bfloat16) as torch: no zero in the input (anywhere: one ``.item()``, as torch) -> ``grad * result /
    input``; else the exclusive products of each slice; a full reduction with several zeros: zeros (outside
    double backward, as torch). Branches on the data: the registered ``tritred::prod_backward`` carries it into
    compiled graphs, where it takes the same branch as eager at run time.
    """
    compute = _compute_dtype(grad.dtype)
    g, r = grad.to(compute), result.to(compute)
    x = input.to(grad.dtype).to(compute)  # (torch: self.to(grad.scalar_type()))
    if input.dim() == 0:
        return g.to(input.dtype)
    if dim is not None and not keepdim:
        g, r = g.unsqueeze(dim), r.unsqueeze(dim)
    if torch._C._are_functorch_transforms_active():  # (a batched input has no .item(): the branch-free
        # formula, as torch's own prod_backward takes for wrapped tensors)
        res = _safe_zeros(g, x.reshape(-1), 0).reshape(input.shape) if dim is None else _safe_zeros(g, x, dim)
        return res.to(input.dtype)
    zeros = int((x == 0).sum().item())
    if zeros == 0:
        res = g * (r / x)
    elif dim is None:
        if zeros > 1 and not torch.is_grad_enabled():
            return torch.zeros(input.shape, dtype=input.dtype, device=input.device)
        res = _safe_zeros(g, x.reshape(-1), 0).reshape(input.shape)
    else:
        res = _safe_zeros(g, x, dim)
    return res.to(input.dtype)


def amax_backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dims: Sequence[int],
                  keepdim: bool) -> torch.Tensor:
    """d amax (amin) / d input, torch's ``scale_grad_by_count``: ``grad / count * mask`` where ``mask`` marks the
    elements equal to their slice's result and ``count`` is their number per slice (ties share evenly; a NaN
    result matches nothing: 0/0 gives the slice NaN, as torch)."""
    mask = restore_dims(result, dims, keepdim) == input
    return (restore_dims(grad, dims, keepdim) / mask.sum(tuple(dims), keepdim=True)) * mask


def max_dim_backward(grad: torch.Tensor, indices: torch.Tensor, shape: Sequence[int], dim: int,
                     keepdim: bool) -> torch.Tensor:
    """d max(input, dim) (min) / d input, torch's ``value_selecting_reduction_backward``: ``grad`` scattered to
    ``indices`` along ``dim`` into zeros of ``shape`` (the gradient goes to the selected element only)."""
    if not keepdim:
        grad, indices = grad.unsqueeze(dim), indices.unsqueeze(dim)
    return torch.zeros(shape, dtype=grad.dtype, device=grad.device).scatter(dim, indices, grad)


def max_all_backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """d max(input) (min) / d input, torch's ``evenly_distribute_backward``: the 0-d ``grad`` split evenly among
    the elements equal to ``result`` (the NaN elements when ``result`` is NaN), zeros elsewhere."""
    mask = (input == result).logical_or_(input.isnan().logical_and_(result.isnan()))
    res = mask * (grad / mask.sum())
    # (the layout of torch's: CUDA's formula above follows the input's layout; off CUDA torch fills a new
    # contiguous tensor of zeros instead)
    return res if input.is_cuda else res.contiguous()
