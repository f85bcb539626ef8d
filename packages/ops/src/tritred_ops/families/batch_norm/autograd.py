"""batch_norm's autograd: an ``autograd.Function`` (eager) and the ``torch.library`` ops (torch.compile).

Both share :func:`_setup_context` (what is saved) and :func:`_backward` (which gradients, from which
statistics); the Function calls the backward launcher directly, the registered op's autograd calls
``torch.ops.tritred.batch_norm_backward``.

- ``torch.ops.tritred.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
  -> (out, save_mean, save_invstd, new_running_mean, new_running_var)`` mutates none of its inputs (as aten's
  ``_batch_norm_with_update_functional``): in training with running statistics it returns their updated values,
  which the public function copies back with ``copy_`` outside the op (dynamo sees the mutation as its own).
  ``save_mean``/``save_invstd``: the batch statistics ``[C]`` in fp32 (fp64 for fp64 inputs) in training. Absent
  outputs (statistics in eval, new running statistics without them) are empty ``[0]`` tensors.
- ``torch.ops.tritred.batch_norm_backward(grad_out, input, weight, mean, var, training, eps, output_mask,
  bias_dtype) -> (grad_input, grad_weight, grad_bias)``: torch's ``native_batch_norm_backward`` (``mean``,
  ``var``: the saved batch mean and invstd in training, the running statistics in eval); gradients left out by
  ``output_mask`` are empty ``[0]`` tensors.

Saved for the backward pass, as torch: the input, the weight, and the fp32 batch mean and invstd (training) or
the running statistics (eval). The running statistics are updated exactly once per forward: in place by the
launcher (eager, with or without grad), or by the public function's copy (compiled).

Why opaque ``custom_op``s and not ``triton_op``/``wrap_triton``: the launchers choose kernels from the pointers'
alignment and the device, launch with programmatic dependent launch and replay recorded plans, none of which a
FakeTensor trace can express; the opaque op also keeps Inductor from passing Python floats (eps, momentum) to the
kernels as fp64: the launchers split them into fp32 pairs themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype
from .backward import Grads, batch_norm_backward_call
from .launch import _out_format, batch_norm_stats_call, check_args, out_empty
from .spec import SPEC

Tensor = torch.Tensor


def _setup_context(ctx: Any, inputs: Sequence[Any], output: Sequence[Any]) -> None:
    """What the backward pass needs: the input, the weight and the batch statistics (training) or the running
    ones (eval); eps, the mode and the bias's dtype (its gradient's)."""
    input, running_mean, running_var, weight, bias, training, _momentum, eps = inputs
    ctx.training, ctx.eps = training, eps
    ctx.bias_dtype = bias.dtype if bias is not None else None
    if training:
        ctx.save_for_backward(input, weight, output[1], output[2])
        rt.save_for_jvp(ctx, input, weight, output[1], output[2])
    else:
        ctx.save_for_backward(input, weight, running_mean, running_var)
        rt.save_for_jvp(ctx, input, weight, running_mean, running_var)
    ctx.mark_non_differentiable(*(t for t in output[1:] if t is not None))
    ctx.set_materialize_grads(False)  # (the statistics' gradients: None, not zero-filled launches; dy may be None)


def _backward(ctx: Any, dy: Tensor | None, bwd: Callable[..., Grads]) -> tuple[Tensor | None, ...]:
    """Gradients of (input, running_mean, running_var, weight, bias, training, momentum, eps): those of the
    tensors that need one (``ctx.needs_input_grad``; no launch for the others), None for the rest."""
    need = ctx.needs_input_grad
    mask = (bool(need[0]), bool(need[3]), bool(need[4]))
    if dy is None or not any(mask):
        return (None,) * 8
    input, weight, mean, var = ctx.saved_tensors
    dx, dw, db = bwd(dy, input, weight, mean, var, ctx.training, ctx.eps, mask, ctx.bias_dtype)
    return (dx if mask[0] else None, None, None, dw if mask[1] else None, db if mask[2] else None, None, None, None)


def _composite_backward(ctx: Any, dy: Tensor | None, *_: Any) -> tuple[Tensor | None, ...]:
    """:func:`_backward`'s gradients in torch's differentiable ops, for a backward with ``create_graph=True``
    (``rt.twice_differentiable``): torch's ``batchnorm_backward`` formulas in float32 (float64 for float64), the
    batch statistics recomputed from the input in training (two passes) so that a double backward differentiates
    them too; in eval the running statistics are constants::

        training: x_hat = (x - mean) * invstd,  g = dy * weight
                  dx = invstd * (g - mean(g) - x_hat * mean(g * x_hat))    (means over the batch and spatial dims)
        eval:     dx = dy * weight * invstd
        dweight = sum(dy * x_hat),  dbias = sum(dy)
    """
    need = ctx.needs_input_grad
    if dy is None or not (need[0] or need[3] or need[4]):
        return (None,) * 8
    input, weight, mean, var = ctx.saved_tensors
    acc = acc_dtype(input.dtype)
    dims = (0, *range(2, input.dim()))
    channel = (1, -1) + (1,) * (input.dim() - 2)  # (a [C] tensor as [1, C, 1, ...])
    x, g = input.to(acc), dy.to(acc)
    if ctx.training:
        x_hat, invstd = rt.normalized(x, dims, ctx.eps, centered=True)
    else:
        invstd = torch.rsqrt(var.detach().to(acc).view(channel) + ctx.eps)
        x_hat = (x - mean.detach().to(acc).view(channel)) * invstd
    gw = g * weight.to(acc).view(channel) if weight is not None else g
    dx = None
    if need[0]:
        dx = rt.normalized_product(x_hat, invstd, gw, dims, centered=True) if ctx.training else gw * invstd
        dx = dx.to(input.dtype).contiguous(memory_format=_out_format(input))  # (torch's layout, as the kernels')
    dw = (g * x_hat).sum(dims).to(weight.dtype) if need[3] and weight is not None else None
    db = g.sum(dims).to(ctx.bias_dtype) if need[4] and ctx.bias_dtype is not None else None
    return dx, None, None, dw, db, None, None, None


def _jvp(ctx: Any, t_input: Tensor | None, t_running_mean: Tensor | None, t_running_var: Tensor | None,
         t_weight: Tensor | None, t_bias: Tensor | None, *_: Any) -> tuple[Tensor | None, None, None]:
    """The output's tangent (forward-mode AD) for the tangents of the input, weight and bias (torch's
    ``batch_norm_jvp``), in float32 (float64 for float64), from the forward's statistics (in training recomputed
    from the input in torch's ops when the tangent is differentiated again, ``rt.jvp_differentiated``)::

        training: x_hat' = invstd * (t - mean(t) - x_hat * mean(x_hat * t))   (over the batch and spatial dims)
        eval:     x_hat' = invstd * t
        y' = x_hat' * weight + x_hat * weight' + bias'

    In eval, a tangent of the running statistics raises NotImplementedError rather than being dropped."""
    input, weight, mean, var = ctx.saved_tensors
    acc = acc_dtype(input.dtype)
    dims = (0, *range(2, input.dim()))
    channel = (1, -1) + (1,) * (input.dim() - 2)  # (a [C] tensor as [1, C, 1, ...])
    x = input.to(acc)
    if ctx.training and rt.jvp_differentiated(input):
        x_hat, scale = rt.normalized(x, dims, ctx.eps, centered=True)
    elif ctx.training:
        scale = var.to(acc).view(channel)  # (the saved invstd)
        x_hat = (x - mean.to(acc).view(channel)) * scale
    else:
        if any(s is not None and bool(s.ne(0).any()) for s in (t_running_mean, t_running_var)):
            raise NotImplementedError("tritred.batch_norm(): forward-mode AD with a tangent of the running "
                                      "statistics in eval is not supported")
        scale = torch.rsqrt(var.to(acc).view(channel) + ctx.eps)
        x_hat = (x - mean.to(acc).view(channel)) * scale
    dx_hat = None
    if t_input is not None:
        t = t_input.to(acc)
        dx_hat = rt.normalized_product(x_hat, scale, t, dims, centered=True) if ctx.training else t * scale
    return rt.affine_tangent(x_hat, dx_hat, weight, t_weight, t_bias, input.dtype, channel), None, None


def _launch_backward(dy: Tensor, input: Tensor, weight: Tensor | None, mean: Tensor, var: Tensor, training: bool,
                     eps: float, mask: tuple[bool, bool, bool], bias_dtype: torch.dtype | None) -> Grads:
    return batch_norm_backward_call(SPEC, dy, input, weight, mean, var, training, eps, mask, bias_dtype)


def _op_backward(dy: Tensor, input: Tensor, weight: Tensor | None, mean: Tensor, var: Tensor, training: bool,
                 eps: float, mask: tuple[bool, bool, bool], bias_dtype: torch.dtype | None) -> Grads:
    dx, dw, db = torch.ops.tritred.batch_norm_backward(dy, input, weight, mean, var, training, eps, list(mask),
                                                       bias_dtype)
    return dx, dw, db


class BatchNormFunction(torch.autograd.Function):
    """Eager autograd of batch_norm: forward ``(y, save_mean, save_invstd)`` (the statistics None in eval; the
    running statistics updated in place, once), backward through the Triton backward launcher; under
    ``create_graph=True`` through torch's ops (``twice_differentiable``: a double backward works, as torch's)."""

    @staticmethod
    def forward(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # type: ignore[override]
                weight: Tensor | None, bias: Tensor | None, training: bool, momentum: float,
                eps: float) -> tuple[Tensor, Tensor | None, Tensor | None]:
        y, mean, invstd, _, _ = batch_norm_stats_call(SPEC, input, running_mean, running_var, weight, bias, training,
                                                      momentum, eps, functional=False)
        return y, mean, invstd

    setup_context = staticmethod(_setup_context)  # type: ignore[assignment]

    @staticmethod
    @rt.twice_differentiable("batch_norm", _composite_backward)
    def backward(ctx: Any, dy: Tensor, *_: Any) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        return _backward(ctx, dy, _launch_backward)

    jvp = staticmethod(rt.differentiable_jvp(_jvp))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], input: Tensor, running_mean: Tensor | None,
             running_var: Tensor | None, weight: Tensor | None, bias: Tensor | None, training: bool, momentum: float,
             eps: float) -> Any:
        """torch.func.vmap's rule: each sample (N, C, ...) normalized on its own, as one launch of the samples side
        by side as channels, (N, B x C, ...), the weight, bias and running statistics repeated per sample. In
        training with running statistics (one unbatched buffer updated by every sample) RuntimeError, as torch's
        vmap raises."""
        x, n = rt.batch_front("batch_norm", in_dims, input)
        if training and (running_mean is not None or running_var is not None):
            raise RuntimeError("tritred batch_norm: torch.func.vmap in training with running statistics: every sample "
                               "would update the one unbatched running_mean and running_var (as torch, not supported)")
        if n < 2:
            return BatchNormFunction.apply(input, running_mean, running_var, weight, bias, training, momentum, eps), 0
        samples = x.shape[0]
        side = x.movedim(0, 1)  # (N, B, C, ...)
        flat = side.reshape(side.shape[0], samples * side.shape[2], *side.shape[3:])

        def repeat(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.repeat(samples)

        y, mean, invstd = BatchNormFunction.apply(flat, repeat(running_mean), repeat(running_var), repeat(weight),
                                                  repeat(bias), training, momentum, eps)
        stats = [None if t is None else t.reshape(samples, -1) for t in (mean, invstd)]
        return (y.reshape(side.shape).movedim(1, 0), *stats), (0, *(None if t is None else 0 for t in stats))


# -- the registered ops (torch.compile) ---------------------------------------------------------------------------

def _none_to_empty(t: Tensor | None, like: Tensor, dtype: torch.dtype) -> Tensor:
    return t if t is not None else like.new_empty((0,), dtype=dtype)


@torch.library.custom_op("tritred::batch_norm", mutates_args=())
def batch_norm_op(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None,
                  bias: Tensor | None, training: bool, momentum: float,
                  eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """batch_norm without mutation: (out, save_mean, save_invstd, new_running_mean, new_running_var)."""
    y, mean, invstd, new_mean, new_var = batch_norm_stats_call(SPEC, input, running_mean, running_var, weight, bias,
                                                               training, momentum, eps, functional=True)
    acc = acc_dtype(input.dtype)
    return (y, _none_to_empty(mean, input, acc), _none_to_empty(invstd, input, acc),
            _none_to_empty(new_mean, input, acc), _none_to_empty(new_var, input, acc))


@batch_norm_op.register_fake
def _batch_norm_fake(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None,
                     bias: Tensor | None, training: bool, momentum: float,
                     eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The launcher's allocations, after its (torch's) argument checks."""
    input = check_args("batch_norm", input, running_mean, running_var, weight, bias, training, momentum, eps)
    acc = acc_dtype(input.dtype)
    if input.dim() == 1:
        y, ch = torch.empty_like(input), 0
    else:
        y = out_empty(input, weight, bias, running_mean, running_var, training, eps)
        ch = input.shape[1]
    stats = (ch,) if training else (0,)
    running = training and running_mean is not None and running_var is not None
    new_mean = running_mean.new_empty((ch,)) if running and running_mean is not None else input.new_empty(
        (0,), dtype=acc)
    new_var = running_var.new_empty((ch,)) if running and running_var is not None else input.new_empty(
        (0,), dtype=acc)
    return y, input.new_empty(stats, dtype=acc), input.new_empty(stats, dtype=acc), new_mean, new_var


@torch.library.custom_op("tritred::batch_norm_backward", mutates_args=())
def batch_norm_backward_op(grad_out: Tensor, input: Tensor, weight: Tensor | None, mean: Tensor, var: Tensor,
                           training: bool, eps: float, output_mask: list[bool],
                           bias_dtype: torch.dtype | None) -> tuple[Tensor, Tensor, Tensor]:
    """torch's native_batch_norm_backward: (grad_input, grad_weight, grad_bias), left-out ones empty."""
    mask = (bool(output_mask[0]), bool(output_mask[1]), bool(output_mask[2]))
    dx, dw, db = batch_norm_backward_call(SPEC, grad_out, input, weight, mean, var, training, eps, mask, bias_dtype)
    w_dtype = weight.dtype if weight is not None else input.dtype
    return (_none_to_empty(dx, input, input.dtype), _none_to_empty(dw, input, w_dtype),
            _none_to_empty(db, input, bias_dtype or w_dtype))


@batch_norm_backward_op.register_fake
def _batch_norm_backward_fake(grad_out: Tensor, input: Tensor, weight: Tensor | None, mean: Tensor, var: Tensor,
                              training: bool, eps: float, output_mask: list[bool],
                              bias_dtype: torch.dtype | None) -> tuple[Tensor, Tensor, Tensor]:
    """The backward launcher's allocations: dx in the forward output's format, dw and db ``[C]``."""
    ch = input.shape[1] if input.dim() > 1 else 0
    w_dtype = weight.dtype if weight is not None else input.dtype
    dx = torch.empty(input.shape, dtype=input.dtype, device=input.device, memory_format=_out_format(input)) \
        if output_mask[0] else input.new_empty((0,))
    dw = input.new_empty((ch,) if output_mask[1] else (0,), dtype=w_dtype)
    db = input.new_empty((ch,) if output_mask[2] else (0,), dtype=bias_dtype or w_dtype)
    return dx, dw, db


def _op_autograd_backward(ctx: Any, dy: Tensor | None, *_: Any) -> tuple[Tensor | None, ...]:
    """The registered op's backward: :func:`_backward` through ``torch.ops.tritred.batch_norm_backward``."""
    return _backward(ctx, dy, _op_backward)


batch_norm_op.register_autograd(_op_autograd_backward, setup_context=_setup_context)
