"""Autograd of layer_norm: an autograd.Function for eager training and the torch.library ops for torch.compile,
sharing one ``setup_context`` and one backward.

- ``_LayerNormFunction`` (eager, grad needed): forward = the launcher with the statistics stored; backward = the
  backward launcher (:func:`.backward.norm_backward`) called directly.
- ``torch.ops.tritred.layer_norm`` -> (out, mean, rstd) and ``torch.ops.tritred.layer_norm_backward`` ->
  (dx, dw, db): opaque custom ops (``torch.library.custom_op``) with fake implementations and the autograd
  formula registered on the forward op, so that ``torch.compile(fullgraph=True)`` traces a call without a graph
  break. Opaque rather than ``triton_op``: the launchers choose kernels from the tensors' 16-byte alignment and
  the device's occupancy and launch with programmatic dependent launch, which a fake-tensor trace cannot express,
  and eps stays a host value (split into float32 pairs by the launcher) instead of reaching a kernel as a float64
  scalar under Inductor.

Saved for backward (torch's ``native_layer_norm``: input, weight, mean, rstd): the input, the weight, the bias
(only its shape and dtype are used: the gradient's), and the forward's per-row mean and rstd (float32; float64 for
float64 inputs). Gradients that are not needed (``ctx.needs_input_grad``) are not computed: no dw/db partials
without a weight/bias that requires grad, no dx for an input that does not. In eager, gradients taken with
``create_graph=True`` can be differentiated again (:func:`composite_backward`), as torch's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype
from . import launch
from .backward import norm_backward

Tensor = torch.Tensor
Backward = Callable[..., tuple[Tensor | None, Tensor | None, Tensor | None]]


def _shape(normalized_shape: Sequence[int] | int) -> list[int]:
    """``normalized_shape`` as the registered ops take it: a list of ints (an int is one dim)."""
    if type(normalized_shape) in (tuple, list) and all(type(d) is int for d in normalized_shape):  # type: ignore[union-attr]
        return list(normalized_shape)  # type: ignore[arg-type]  # (the common form first: fewer guards per call)
    launch.shape_type("layer_norm", normalized_shape)
    return [normalized_shape] if isinstance(normalized_shape, (int, torch.SymInt)) else list(normalized_shape)


def _spec() -> Any:
    from . import SPEC  # (the package imports this module)
    return SPEC


def forward(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, bias: Tensor | None,
            eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(out, mean, rstd): the forward host path with the statistics stored."""
    y, mean, rstd = launch.layer_norm_call(_spec(), input, normalized_shape, weight, bias, eps, True)
    assert mean is not None and rstd is not None
    return y, mean, rstd


def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor, Tensor]) -> None:
    input, normalized_shape, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.normalized_shape, ctx.eps = _shape(normalized_shape), inputs[4]
    ctx.save_for_backward(input, weight, bias, mean, rstd)
    rt.save_for_jvp(ctx, input, weight, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)
    ctx.set_materialize_grads(False)  # (mean's and rstd's gradients: None, not two zero-filled launches a step)


def backward(ctx: Any, grad: Tensor | None, bwd: Backward,
             ) -> tuple[Tensor | None, None, Tensor | None, Tensor | None, None]:
    """The gradients of (input, normalized_shape, weight, bias, eps) from the output's gradient ``grad``, through
    ``bwd`` (the launcher in eager, the registered backward op under compile)."""
    input, weight, bias, mean, rstd = ctx.saved_tensors
    needs = ctx.needs_input_grad
    mask = [bool(needs[0]), bool(needs[2]) and weight is not None, bool(needs[3]) and bias is not None]
    if grad is None or not any(mask):
        return None, None, None, None, None
    dx, dw, db = bwd(grad, input, ctx.normalized_shape, mean, rstd, weight, bias, mask)
    return dx if mask[0] else None, None, dw if mask[1] else None, db if mask[2] else None, None


def composite_backward(ctx: Any, grad: Tensor | None, *_: Any,
                       ) -> tuple[Tensor | None, None, Tensor | None, Tensor | None, None]:
    """The gradients of :func:`backward` in torch's differentiable ops, for a backward with ``create_graph=True``
    (``rt.twice_differentiable``): torch's formulas (``layer_norm_backward``), in float32 (float64 for float64),
    the mean and rstd recomputed from the input (two passes) so that a double backward differentiates them too::

        x_hat = (x - mean) * rstd,  g = dy * weight
        dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),  dweight = sum(dy * x_hat),  dbias = sum(dy)
    """
    input, weight, bias, _, _ = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if grad is None or not (needs[0] or needs[2] or needs[3]):
        return None, None, None, None, None
    acc = acc_dtype(input.dtype)
    dims = tuple(range(input.dim() - len(ctx.normalized_shape), input.dim()))
    lead = tuple(range(input.dim() - len(ctx.normalized_shape)))
    x, dy = input.to(acc), grad.to(acc)
    x_hat, rstd = rt.normalized(x, dims, ctx.eps, centered=True)
    g = dy * weight.to(acc) if weight is not None else dy
    dx = rt.normalized_product(x_hat, rstd, g, dims, centered=True)
    dw = (dy * x_hat).sum(lead).to(weight.dtype) if needs[2] and weight is not None else None
    db = dy.sum(lead).to(bias.dtype) if needs[3] and bias is not None else None
    return dx.to(input.dtype) if needs[0] else None, None, dw, db, None


def jvp(ctx: Any, t_input: Tensor | None, _ns: Any, t_weight: Tensor | None, t_bias: Tensor | None, _eps: Any,
        ) -> tuple[Tensor | None, None, None]:
    """The output's tangent (forward-mode AD) for the tangents of the input, weight and bias (torch's
    ``layer_norm_jvp``), in float32 (float64 for float64), from the forward's mean and rstd (recomputed from the
    input in torch's ops when the tangent is differentiated again, ``rt.jvp_differentiated``: the saved ones are
    constants to autograd)::

        x_hat' = rstd * (t - mean(t) - x_hat * mean(x_hat * t)),  y' = x_hat' * weight + x_hat * weight' + bias'
    """
    input, weight, mean, rstd = ctx.saved_tensors
    acc = acc_dtype(input.dtype)
    k = len(ctx.normalized_shape)
    dims = tuple(range(input.dim() - k, input.dim()))
    if rt.jvp_differentiated(input):
        x_hat, scale = rt.normalized(input.to(acc), dims, ctx.eps, centered=True)
    else:
        stat = (*input.shape[: input.dim() - k], *(1,) * k)  # (mean and rstd broadcast over the normalized dims)
        scale = rstd.to(acc).reshape(stat)
        x_hat = (input.to(acc) - mean.to(acc).reshape(stat)) * scale
    dx_hat = None if t_input is None else rt.normalized_product(x_hat, scale, t_input.to(acc), dims, centered=True)
    return rt.affine_tangent(x_hat, dx_hat, weight, t_weight, t_bias, input.dtype), None, None


def _eager_backward(grad: Tensor, input: Tensor, normalized_shape: Sequence[int], mean: Tensor, rstd: Tensor,
                    weight: Tensor | None, bias: Tensor | None, mask: Sequence[bool],
                    ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    return norm_backward(_spec(), grad, input, normalized_shape, mean, rstd, weight, bias, mask)


class LayerNormFunction(torch.autograd.Function):
    """layer_norm with autograd in eager mode: ``apply(input, normalized_shape, weight, bias, eps)`` ->
    (out, mean, rstd), mean and rstd not differentiable."""

    @staticmethod
    def forward(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None,  # type: ignore[override]
                bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
        return forward(input, normalized_shape, weight, bias, eps)

    setup_context = staticmethod(setup_context)  # type: ignore[assignment]

    @staticmethod
    @rt.twice_differentiable("layer_norm", composite_backward)
    def backward(ctx: Any, grad: Tensor | None, _mean: Any, _rstd: Any) -> tuple[Any, ...]:  # type: ignore[override]
        return backward(ctx, grad, _eager_backward)

    jvp = staticmethod(rt.differentiable_jvp(jvp))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], input: Tensor, normalized_shape: Sequence[int],
             weight: Tensor | None, bias: Tensor | None, eps: float) -> tuple[Any, tuple[int, int, int]]:
        """torch.func.vmap's rule: the batch dim in front, a leading dim (the weight and bias unbatched)."""
        x, _ = rt.batch_front("layer_norm", in_dims, input)
        return LayerNormFunction.apply(x, normalized_shape, weight, bias, eps), (0, 0, 0)


# -- the registered ops (torch.compile) ----------------------------------------------------------------------------

@torch.library.custom_op("tritred::layer_norm", mutates_args=())
def layer_norm_op(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, bias: Tensor | None,
                  eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.ops.tritred.layer_norm``: (out, mean, rstd) of :func:`tritred_ops.layer_norm_with_stats`."""
    return forward(input, normalized_shape, weight, bias, eps)


@layer_norm_op.register_fake
def _layer_norm_fake(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, bias: Tensor | None,
                     eps: float) -> tuple[Tensor, Tensor, Tensor]:
    ns = launch.check_args("layer_norm", input, normalized_shape, weight, bias)
    lead = input.shape[: input.dim() - len(ns)]
    stats = acc_dtype(input.dtype)
    return input.new_empty(input.shape), input.new_empty(lead, dtype=stats), input.new_empty(lead, dtype=stats)


@torch.library.custom_op("tritred::layer_norm_backward", mutates_args=())
def layer_norm_backward_op(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], mean: Tensor,
                           rstd: Tensor, weight: Tensor | None, bias: Tensor | None, output_mask: Sequence[bool],
                           ) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.ops.tritred.layer_norm_backward``: (dx, dw, db); a gradient not asked for by ``output_mask`` (or
    without its weight/bias) is an empty tensor."""
    grads = norm_backward(_spec(), grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    return tuple(g if g is not None else input.new_empty(0) for g in grads)  # type: ignore[return-value]


@layer_norm_backward_op.register_fake
def _layer_norm_backward_fake(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], mean: Tensor,
                              rstd: Tensor, weight: Tensor | None, bias: Tensor | None, output_mask: Sequence[bool],
                              ) -> tuple[Tensor, Tensor, Tensor]:
    return _backward_fake(input, weight, bias, output_mask)


def _backward_fake(input: Tensor, weight: Tensor | None, bias: Tensor | None, output_mask: Sequence[bool],
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """The backward ops' outputs as their launcher allocates them: dx contiguous in the input's dtype, dw and db
    contiguous in the weight's and bias's (empty where not computed)."""
    def like(t: Tensor | None, need: bool) -> Tensor:
        if t is None or not need:
            return input.new_empty(0)
        return input.new_empty(t.shape, dtype=t.dtype)
    return like(input, output_mask[0]), like(weight, output_mask[1]), like(bias, output_mask[2])


def _compiled_backward(grad: Tensor, input: Tensor, normalized_shape: Sequence[int], mean: Tensor, rstd: Tensor,
                       weight: Tensor | None, bias: Tensor | None, mask: Sequence[bool],
                       ) -> tuple[Tensor, Tensor, Tensor]:
    return torch.ops.tritred.layer_norm_backward(grad, input, list(normalized_shape), mean, rstd, weight, bias,
                                                 list(mask))


def _op_backward(ctx: Any, grad: Tensor | None, _mean: Any, _rstd: Any) -> tuple[Any, ...]:
    return backward(ctx, grad, _compiled_backward)


layer_norm_op.register_autograd(_op_backward, setup_context=setup_context)
