"""cross_entropy's autograd: an autograd.Function for eager calls and the ``tritred`` torch.library ops for
``torch.compile``, sharing one setup and one backward.

- Eager (:class:`CrossEntropyFunction`): the forward forms the gradient into a buffer of its own, kept on the
  context; the backward scales it in place (``backward.scale``: rows whose factor is exactly 1 are skipped) and
  hands it to autograd, so that forward plus backward allocate one logits-sized buffer. A second backward through
  the same graph (``retain_graph=True``) finds the buffer already given away and raises a RuntimeError naming the
  op, rather than scale it twice. The gradient is not itself differentiable (``once_differentiable``).
- Compiled (``torch.ops.tritred.cross_entropy``, a ``torch.library.custom_op``): returns (loss, gradient buffer,
  per-row lse); its registered autograd scales the buffer out of place with
  ``torch.ops.tritred.cross_entropy_backward`` (a registered op must not mutate its inputs), so a second backward
  is correct there, at the cost of a second buffer.

Both are opaque to Inductor: the launchers choose kernels from the tensors' alignment and device, which a fake
tensor trace cannot see, and keep Python floats off the kernels' arguments (label smoothing is split into fp32
parts on the host).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ... import runtime as rt
from . import backward as bwd
from .checks import NAME, check, no_weight_grad
from .launch import forward, grad_like
from .spec import SPEC

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def _setup(ctx: Any, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
           reduction: int, label_smoothing: float, grad_input: bool, lse: torch.Tensor | None,
           formed: torch.Tensor | None = None) -> None:
    """What the backward needs: the class indices (ignored rows), or for the target's and the weight's gradients
    the logits, the target, the weight and each row's lse; ``formed``: the gradient buffer when it is an output
    of the registered op (saved with save_for_backward: an output kept as a context attribute would make a
    reference cycle; the eager Function keeps its own buffer, which is no output, as ``ctx.formed``)."""
    prob = x.shape == target.shape
    ctx.prob, ctx.ignore_index, ctx.reduction, ctx.label_smoothing = prob, ignore_index, reduction, label_smoothing
    ctx.grad_input = grad_input
    ctx.grad_target = prob and target.requires_grad
    ctx.grad_weight = prob and weight is not None and weight.requires_grad
    others = ctx.grad_target or ctx.grad_weight
    ctx.save_for_backward(target, x if others else None, weight if others else None, lse if others else None,
                          formed)


def _backward(ctx: Any, grad_loss: torch.Tensor | None, scale: Callable[[Any, torch.Tensor, torch.Tensor | None],
              torch.Tensor]) -> Grads:
    """(d/d input, d/d target, d/d weight) from the loss's gradient; ``scale(ctx, grad_loss, class indices or
    None)`` applies it to the formed gradient."""
    if grad_loss is None:
        return None, None, None
    target, x, weight, lse, _ = ctx.saved_tensors
    gi = scale(ctx, grad_loss, None if ctx.prob else target) if ctx.grad_input else None
    gq = gw = None
    if ctx.grad_target or ctx.grad_weight:
        gq, gw = bwd.target_weight_grads(grad_loss, x, target, weight, lse, ctx.reduction, ctx.label_smoothing,
                                         ctx.grad_target, ctx.grad_weight)
    return gi, gq, gw


def _scale_in_place(ctx: Any, grad_loss: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    grad = ctx.formed
    if grad is None:
        raise RuntimeError(f"tritred.{NAME}(): the gradient formed by the forward pass was already used by a backward "
                           "pass through this graph; a second backward (retain_graph=True) is not supported: call "
                           f"{NAME} again (or use it under torch.compile, whose backward does not reuse the buffer)")
    ctx.formed = None  # handed to autograd below: never scaled twice, and freed with the input's gradient
    return bwd.scale(SPEC, grad, grad_loss, target, ctx.ignore_index, inplace=True)


class CrossEntropyFunction(torch.autograd.Function):
    """Eager autograd of :func:`tritred_ops.cross_entropy` (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,  # type: ignore[override]
                ignore_index: int, reduction: int, label_smoothing: float) -> torch.Tensor:
        grad_input, grad_target, grad_weight = ctx.needs_input_grad[:3]
        prob = x.shape == target.shape
        no_weight_grad(prob, grad_weight)
        save_lse = prob and (grad_target or grad_weight)
        loss, grad, lse = forward(SPEC, x, target, weight, ignore_index, reduction, label_smoothing, grad_input,
                                  save_lse)
        _setup(ctx, x, target, weight, ignore_index, reduction, label_smoothing, grad_input, lse)
        ctx.formed = grad
        ctx.set_materialize_grads(False)  # (an undefined loss gradient: undefined gradients, as torch)
        return loss

    @staticmethod
    @rt.once_differentiable("cross_entropy")
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        return (*_backward(ctx, grad_loss, _scale_in_place), None, None, None)


# -- torch.library ops (torch.compile) ---------------------------------------------------------------------------

@torch.library.custom_op("tritred::cross_entropy", mutates_args=())
def cross_entropy_op(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                     reduction: int, label_smoothing: float, grad_input: bool,
                     save_lse: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, d loss / d input for a loss gradient of 1 or an empty tensor, each row's (max, log of the sum of
    exp(x - max)) or an empty tensor);
    ``reduction``: torch's enum (0 none, 1 mean, 2 sum)."""
    loss, grad, lse = forward(SPEC, input, target, weight, ignore_index, reduction, label_smoothing, grad_input,
                              save_lse)
    return (loss, grad if grad is not None else input.new_empty((0,)),
            lse if lse is not None else input.new_empty((0,), dtype=torch.float32))


@cross_entropy_op.register_fake
def _fake(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, reduction: int,
          label_smoothing: float, grad_input: bool, save_lse: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    call = check(input, target, weight, ignore_index, reduction, label_smoothing)
    loss = input.new_empty(call.loss_shape, dtype=call.loss_dtype)
    grad = grad_like(input) if grad_input else input.new_empty((0,))
    lse = input.new_empty((call.rows, 2), dtype=call.acc) if save_lse else input.new_empty((0,), dtype=torch.float32)
    return loss, grad, lse


@torch.library.custom_op("tritred::cross_entropy_backward", mutates_args=())
def cross_entropy_backward_op(grad: torch.Tensor, grad_output: torch.Tensor, target: torch.Tensor | None,
                              ignore_index: int) -> torch.Tensor:
    """The formed gradient ``grad`` times ``grad_output`` per row, into a new buffer of its layout (rows whose
    class index is ``ignore_index`` copied as formed)."""
    return bwd.scale(SPEC, grad, grad_output, target, ignore_index, inplace=False)


@cross_entropy_backward_op.register_fake
def _fake_backward(grad: torch.Tensor, grad_output: torch.Tensor, target: torch.Tensor | None,
                   ignore_index: int) -> torch.Tensor:
    return torch.empty_like(grad)


def _setup_op(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    x, target, weight, ignore_index, reduction, label_smoothing, grad_input, save_lse = inputs
    _setup(ctx, x, target, weight, ignore_index, reduction, label_smoothing, grad_input,
           output[2] if save_lse else None, output[1] if grad_input else None)
    ctx.set_materialize_grads(False)


def _scale_op(ctx: Any, grad_loss: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    formed = ctx.saved_tensors[4]
    if formed is None:
        raise RuntimeError(f"tritred.{NAME}(): the gradient of 'input' was not formed by the forward pass "
                           "(grad_input=False)")
    return torch.ops.tritred.cross_entropy_backward(formed, grad_loss, target, ctx.ignore_index)


def _backward_op(ctx: Any, grad_loss: torch.Tensor | None, *unused: Any) -> tuple[Any, ...]:
    return (*_backward(ctx, grad_loss, _scale_op), None, None, None, None, None)


cross_entropy_op.register_autograd(_backward_op, setup_context=_setup_op)
