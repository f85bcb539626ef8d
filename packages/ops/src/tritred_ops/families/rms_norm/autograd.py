"""Autograd of rms_norm: an autograd.Function for eager training and the torch.library ops for torch.compile,
sharing one ``setup_context`` and one backward (as layer_norm's: see ``families.layer_norm.autograd`` for why the
ops are opaque custom ops).

- ``RMSNormFunction`` (eager, grad needed): forward = the launcher with rstd stored; backward = layer_norm's
  backward launcher with ``rms=True`` (``families.layer_norm.backward.norm_backward``).
- ``torch.ops.tritred.rms_norm`` -> (out, rstd) and ``torch.ops.tritred.rms_norm_backward`` -> (dx, dw).

Saved for backward (torch's ``_fused_rms_norm``: input, weight, rstd): the input, the weight and the per-row rstd
(float32; float64 for float64 inputs). dx = rstd * (w * dy - x_hat * mean(w * dy * x_hat)), dw = the sum over rows
of dy * x_hat (x_hat = x * rstd), as per-program fp32 partials summed in a fixed order (fp64 for a float64 input or
weight), rounded once to the weight's dtype. dx is laid out as torch's (``launch.input_grad_like``): as dy where
torch runs its composite (channels-last inputs, a weight of another dtype, off CUDA), else contiguous. Gradients
not needed (``ctx.needs_input_grad``) are not computed. In eager, gradients taken with ``create_graph=True`` can be
differentiated again (:func:`composite_backward`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype
from ..layer_norm.backward import norm_backward
from . import launch

Tensor = torch.Tensor
Backward = Callable[..., tuple[Tensor | None, Tensor | None]]


def shape_arg(normalized_shape: Any) -> list[Any]:
    """``normalized_shape`` as the registered op takes it (a list); TypeError, as torch's, for an int."""
    if not isinstance(normalized_shape, (tuple, list, torch.Size)):
        raise TypeError(f"rms_norm(): argument 'normalized_shape' (position 2) must be tuple of ints, not "
                        f"{type(normalized_shape).__name__}")
    return list(normalized_shape)


def _spec() -> Any:
    from . import SPEC  # (the package imports this module)
    return SPEC


def forward(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, eps: float | None,
            ) -> tuple[Tensor, Tensor]:
    """(out, rstd): the forward host path with rstd stored."""
    y, rstd = launch.rms_norm_call(_spec(), input, normalized_shape, weight, eps, True)
    assert rstd is not None
    return y, rstd


def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    input, normalized_shape, weight, _ = inputs
    ctx.normalized_shape, ctx.eps = list(normalized_shape), inputs[3]
    ctx.save_for_backward(input, weight, output[1])
    rt.save_for_jvp(ctx, input, weight, output[1])
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)  # (rstd's gradient: None, not a zero-filled launch a step)


def backward(ctx: Any, grad: Tensor | None, bwd: Backward) -> tuple[Tensor | None, None, Tensor | None, None]:
    """The gradients of (input, normalized_shape, weight, eps) from the output's gradient ``grad``, through ``bwd``
    (the launcher in eager, the registered backward op under compile)."""
    input, weight, rstd = ctx.saved_tensors
    needs = ctx.needs_input_grad
    mask = [bool(needs[0]), bool(needs[2]) and weight is not None]
    if grad is None or not any(mask):
        return None, None, None, None
    dx, dw = bwd(grad, input, ctx.normalized_shape, rstd, weight, mask)
    return dx if mask[0] else None, None, dw if mask[1] else None, None


def composite_backward(ctx: Any, grad: Tensor | None, *_: Any) -> tuple[Tensor | None, None, Tensor | None, None]:
    """The gradients of :func:`backward` in torch's differentiable ops, for a backward with ``create_graph=True``
    (``rt.twice_differentiable``), rstd recomputed from the input so that a double backward differentiates it too;
    in float32 (float64 for a float64 input or weight)::

        x_hat = x * rstd,  g = dy * weight,  dx = rstd * (g - x_hat * mean(g * x_hat)),  dweight = sum(dy * x_hat)
    """
    input, weight, _ = ctx.saved_tensors
    needs = ctx.needs_input_grad
    if grad is None or not (needs[0] or needs[2]):
        return None, None, None, None
    wide = input.dtype == torch.float64 or (weight is not None and weight.dtype == torch.float64)
    acc = torch.float64 if wide else torch.float32
    dims = tuple(range(input.dim() - len(ctx.normalized_shape), input.dim()))
    x, dy = input.to(acc), grad.to(acc)
    x_hat, rstd = rt.normalized(x, dims, launch.resolve_eps(ctx.eps, input.dtype), centered=False)
    g = dy * weight.to(acc) if weight is not None else dy
    dx = rt.normalized_product(x_hat, rstd, g, dims, centered=False)
    lead = tuple(range(input.dim() - len(ctx.normalized_shape)))
    dw = (dy * x_hat).sum(lead).to(weight.dtype) if needs[2] and weight is not None else None
    return _laid_out(dx.to(input.dtype), grad, input, weight) if needs[0] else None, None, dw, None


def _laid_out(dx: Tensor, grad: Tensor, input: Tensor, weight: Tensor | None) -> Tensor:
    """``dx`` in torch's layout for the input's gradient (:func:`launch.input_grad_like`), copied where its strides
    differ (a differentiable copy)."""
    want = launch.new_input_grad(grad, input, weight)
    return dx if want.stride() == dx.stride() else want.copy_(dx)


def jvp(ctx: Any, t_input: Tensor | None, _ns: Any, t_weight: Tensor | None, _eps: Any,
        ) -> tuple[Tensor | None, None]:
    """The output's tangent (forward-mode AD) for the tangents of the input and the weight, from the forward's rstd
    (recomputed from the input in torch's ops when the tangent is differentiated again, ``rt.jvp_differentiated``),
    in float32 (float64 for a float64 input or weight)::

        x_hat' = rstd * (t - x_hat * mean(x_hat * t)),  y' = x_hat' * weight + x_hat * weight'
    """
    input, weight, rstd = ctx.saved_tensors
    wide = input.dtype == torch.float64 or (weight is not None and weight.dtype == torch.float64)
    acc = torch.float64 if wide else torch.float32
    k = len(ctx.normalized_shape)
    dims = tuple(range(input.dim() - k, input.dim()))
    if rt.jvp_differentiated(input):
        x_hat, scale = rt.normalized(input.to(acc), dims, launch.resolve_eps(ctx.eps, input.dtype), centered=False)
    else:
        scale = rstd.to(acc).reshape(*input.shape[: input.dim() - k], *(1,) * k)
        x_hat = input.to(acc) * scale
    dx_hat = None if t_input is None else rt.normalized_product(x_hat, scale, t_input.to(acc), dims, centered=False)
    # (the output in the input's dtype, whatever the weight's)
    return rt.affine_tangent(x_hat, dx_hat, weight, t_weight, None, input.dtype), None


def _eager_backward(grad: Tensor, input: Tensor, normalized_shape: Sequence[int], rstd: Tensor,
                    weight: Tensor | None, mask: Sequence[bool]) -> tuple[Tensor | None, Tensor | None]:
    dx, dw, _ = norm_backward(_spec(), grad, input, normalized_shape, None, rstd, weight, None,
                              (mask[0], mask[1], False), rms=True,
                              dx_like=launch.input_grad_like(grad, input, weight))
    return dx, dw


class RMSNormFunction(torch.autograd.Function):
    """rms_norm with autograd in eager mode: ``apply(input, normalized_shape, weight, eps)`` -> (out, rstd), rstd
    not differentiable."""

    @staticmethod
    def forward(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None,  # type: ignore[override]
                eps: float | None) -> tuple[Tensor, Tensor]:
        return forward(input, normalized_shape, weight, eps)

    setup_context = staticmethod(setup_context)  # type: ignore[assignment]

    @staticmethod
    @rt.twice_differentiable("rms_norm", composite_backward)
    def backward(ctx: Any, grad: Tensor | None, _rstd: Any) -> tuple[Any, ...]:  # type: ignore[override]
        return backward(ctx, grad, _eager_backward)

    jvp = staticmethod(rt.differentiable_jvp(jvp))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], input: Tensor, normalized_shape: Sequence[int],
             weight: Tensor | None, eps: float | None) -> tuple[Any, tuple[int, int]]:
        """torch.func.vmap's rule: the batch dim in front, a leading dim (the weight unbatched)."""
        x, _ = rt.batch_front("rms_norm", in_dims, input)
        return RMSNormFunction.apply(x, normalized_shape, weight, eps), (0, 0)


# -- the registered ops (torch.compile) ----------------------------------------------------------------------------

@torch.library.custom_op("tritred::rms_norm", mutates_args=())
def rms_norm_op(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, eps: float | None,
                ) -> tuple[Tensor, Tensor]:
    """``torch.ops.tritred.rms_norm``: (out, rstd)."""
    return forward(input, normalized_shape, weight, eps)


@rms_norm_op.register_fake
def _rms_norm_fake(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, eps: float | None,
                   ) -> tuple[Tensor, Tensor]:
    ns = launch.check_args(input, list(normalized_shape), weight)
    lead = input.shape[: input.dim() - len(ns)]
    return launch.new_output(input), input.new_empty(lead, dtype=acc_dtype(input.dtype))


@torch.library.custom_op("tritred::rms_norm_backward", mutates_args=())
def rms_norm_backward_op(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], rstd: Tensor,
                         weight: Tensor | None, output_mask: Sequence[bool]) -> tuple[Tensor, Tensor]:
    """``torch.ops.tritred.rms_norm_backward``: (dx, dw); a gradient not asked for by ``output_mask`` (or dw
    without a weight) is an empty tensor."""
    grads = _eager_backward(grad_out, input, normalized_shape, rstd, weight, output_mask)
    return tuple(g if g is not None else input.new_empty(0) for g in grads)  # type: ignore[return-value]


@rms_norm_backward_op.register_fake
def _rms_norm_backward_fake(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], rstd: Tensor,
                            weight: Tensor | None, output_mask: Sequence[bool]) -> tuple[Tensor, Tensor]:
    dx = launch.new_input_grad(grad_out, input, weight) if output_mask[0] else input.new_empty(0)
    dw = input.new_empty(weight.shape, dtype=weight.dtype) if output_mask[1] and weight is not None \
        else input.new_empty(0)
    return dx, dw


def _compiled_backward(grad: Tensor, input: Tensor, normalized_shape: Sequence[int], rstd: Tensor,
                       weight: Tensor | None, mask: Sequence[bool]) -> tuple[Tensor, Tensor]:
    return torch.ops.tritred.rms_norm_backward(grad, input, list(normalized_shape), rstd, weight, list(mask))


def _op_backward(ctx: Any, grad: Tensor | None, _rstd: Any) -> tuple[Any, ...]:
    return backward(ctx, grad, _compiled_backward)


rms_norm_op.register_autograd(_op_backward, setup_context=setup_context)
