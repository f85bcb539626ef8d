"""Autograd of softmax, log_softmax and logsumexp: autograd Functions for eager training, and the registered
torch ops ``torch.ops.tritred.{softmax, log_softmax, logsumexp}`` and their ``*_backward`` ops for
``torch.compile``, both sharing one ``setup_context`` and one backward per op (a ``_grad(ctx, grad, backward)``
helper that takes the callable computing the input's gradient: the launcher in eager, the registered backward
op under compile).

What is saved: softmax and log_softmax save their output (not the input: torch's ``derivatives.yaml``), logsumexp
its input and result. Non-tensor arguments get no gradient; an input that does not need one gets None (no
launch). In eager a gradient taken with ``create_graph=True`` can be differentiated again, as torch's: the
backward then computes it with torch's differentiable ops (``_softmax_backward_data``, ``_log_softmax_backward_data``,
whose own derivatives torch defines; logsumexp's backward is torch ops anyway). Under torch.compile the registered
backward ops have no autograd: a double backward raises there.

Why opaque ``custom_op``s and not ``triton_op``/``wrap_triton``: the launchers choose kernels from each call's
tensors (the canonical view of its strides, 16-byte alignment), replay recorded plans and, for split rows,
launch cooperative grids sized from the device's occupancy, none of which a FakeTensor trace can express; and
the opaque op keeps Python floats from reaching the kernels as fp64 under Inductor. The fake implementations run
the launchers' own argument checks (torch's errors under compile) and allocate the outputs as the launchers do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import runtime as rt
from ..reduce.backward import restore_dims
from .backward import check_backward, logsumexp_backward, softmax_backward_call
from .launch import logsumexp_call, logsumexp_checks, softmax_call, softmax_checks
from .specs import SPECS

_NAMES = ("softmax", "log_softmax")


# -- the launchers, as the registered ops and the Functions call them ----------------------------------------------

def softmax_forward(mode: int, input: torch.Tensor, dim: int | None, dtype: torch.dtype | None) -> torch.Tensor:
    """softmax (``mode`` 0) or log_softmax (1): the forward launcher."""
    return softmax_call(SPECS[_NAMES[mode]], mode, input, dim, dtype)


def softmax_backward(mode: int, grad: torch.Tensor, output: torch.Tensor, dim: int,
                     input_dtype: torch.dtype) -> torch.Tensor:
    """The gradient of softmax (``mode`` 0) or log_softmax (1) from its output: the backward launcher."""
    return softmax_backward_call(SPECS[_NAMES[mode]], mode, grad, output, dim, input_dtype)


# -- setup_context and the backward, shared by the Functions and the registered ops -------------------------------

def _setup_softmax(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    input, dim, _ = inputs
    ctx.save_for_backward(output)
    rt.save_for_jvp(ctx, output)
    ctx.dim, ctx.input_dtype = dim, input.dtype
    ctx.set_materialize_grads(False)  # (an undefined output gradient: an undefined input gradient, as torch)


def _softmax_grad(ctx: Any, grad: torch.Tensor | None, backward: Callable[..., torch.Tensor],
                  ) -> tuple[Any, None, None]:
    """(d input, None, None): ``backward(grad, output, dim, input_dtype)``, or None when the input needs none."""
    if grad is None or not ctx.needs_input_grad[0]:
        return None, None, None
    (output,) = ctx.saved_tensors
    return backward(grad, output, ctx.dim, ctx.input_dtype), None, None


def _softmax_composite(mode: int) -> Callable[..., tuple[Any, None, None]]:
    """The gradient of softmax (``mode`` 0) or log_softmax (1) in torch's differentiable ops, for a backward
    with ``create_graph=True`` (``rt.twice_differentiable``): torch's own backward functions of the output."""
    def composite(ctx: Any, grad: torch.Tensor | None) -> tuple[Any, None, None]:
        if grad is None or not ctx.needs_input_grad[0]:
            return None, None, None
        (output,) = ctx.saved_tensors
        d = check_backward(_NAMES[mode], grad, output, ctx.dim, ctx.input_dtype)
        backward = torch._softmax_backward_data if mode == 0 else torch._log_softmax_backward_data
        return backward(grad, output, d, output.dtype).to(ctx.input_dtype), None, None
    return composite


def _softmax_jvp(mode: int) -> Callable[..., torch.Tensor | None]:
    """The output's tangent of softmax (``mode`` 0) or log_softmax (1) for the input's tangent ``t`` (forward-mode
    AD; torch's formulas, in float32, float64 for float64): ``y * (t - sum(t * y))``, ``t - sum(t * exp(y))``."""
    def jvp(ctx: Any, t: torch.Tensor | None, *_: Any) -> torch.Tensor | None:
        if t is None:  # (an undefined tangent: the output's too)
            return None
        (output,) = ctx.saved_tensors
        d = check_backward(_NAMES[mode], output, output, ctx.dim, ctx.input_dtype)
        acc = torch.float64 if output.dtype == torch.float64 else torch.float32
        y, t = output.to(acc), t.to(acc)
        if mode == 0:
            return (y * (t - (t * y).sum(d, keepdim=True))).to(output.dtype)
        return (t - (t * y.exp()).sum(d, keepdim=True)).to(output.dtype)
    return jvp


def _logsumexp_jvp(ctx: Any, t: torch.Tensor | None, *_: Any) -> torch.Tensor | None:
    """The result's tangent of logsumexp for the input's tangent ``t`` (forward-mode AD): ``sum(t * exp(x -
    result))`` over the reduced dims, in float32 (float64 for float64)."""
    if t is None:
        return None
    input, result = ctx.saved_tensors
    acc = torch.float64 if input.dtype == torch.float64 else torch.float32
    r = restore_dims(result.to(acc), ctx.dims, ctx.keepdim)
    dims = ctx.dims if ctx.dims else list(range(input.dim()))
    return (t.to(acc) * (input.to(acc) - r).exp()).sum(dims, keepdim=ctx.keepdim).to(result.dtype)


def _setup_logsumexp(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    input, dim, keepdim = inputs
    ctx.save_for_backward(input, output)
    rt.save_for_jvp(ctx, input, output)
    ctx.dims, ctx.keepdim = list(rt.wrap_dims("logsumexp", dim, input.dim())), keepdim
    ctx.set_materialize_grads(False)


def _logsumexp_grad(ctx: Any, grad: torch.Tensor | None, backward: Callable[..., torch.Tensor],
                    ) -> tuple[Any, None, None]:
    """(d input, None, None): ``backward(grad, input, result, dims, keepdim)``, or None when not needed."""
    if grad is None or not ctx.needs_input_grad[0]:
        return None, None, None
    input, result = ctx.saved_tensors
    return backward(grad, input, result, ctx.dims, ctx.keepdim), None, None


# -- eager: autograd Functions (no op boundary: a few microseconds cheaper per call than the registered ops) -------

def _softmax_function(mode: int) -> type[torch.autograd.Function]:
    """The autograd Function of softmax (``mode`` 0) or log_softmax (1): ``(input, dim, dtype)`` with its backward
    kernel."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(input: torch.Tensor, dim: int | None, dtype: torch.dtype | None) -> torch.Tensor:  # type: ignore[override]
            return softmax_forward(mode, input, dim, dtype)

        setup_context = staticmethod(_setup_softmax)  # type: ignore[assignment]

        @staticmethod
        @rt.twice_differentiable(_NAMES[mode], _softmax_composite(mode))
        def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, None, None]:  # type: ignore[override]
            return _softmax_grad(ctx, grad, lambda *a: softmax_backward(mode, *a))

        jvp = staticmethod(rt.differentiable_jvp(_softmax_jvp(mode)))

        @staticmethod
        def vmap(info: Any, in_dims: tuple[Any, ...], input: torch.Tensor, dim: int | None,
                 dtype: torch.dtype | None) -> tuple[torch.Tensor, int]:
            """torch.func.vmap's rule: over the shifted dim (a 0-d sample as a dim of one)."""
            x, n = rt.batch_front(_NAMES[mode], in_dims, input)
            dims = rt.batched_dims(_NAMES[mode], dim, n)  # (wrapped against the sample, a 0-d one too)
            if n == 0:
                return Function.apply(x.unsqueeze(1), 1, dtype).squeeze(1), 0
            return Function.apply(x, dims[0], dtype), 0

    Function.__name__ = Function.__qualname__ = ("SoftmaxFunction", "LogSoftmaxFunction")[mode]
    Function.__doc__ = f"{_NAMES[mode]}(input, dim, dtype) with its backward kernel."
    return Function


#: softmax(input, dim, dtype) with its backward kernel.
SoftmaxFunction = _softmax_function(0)
#: log_softmax(input, dim, dtype) with its backward kernel.
LogSoftmaxFunction = _softmax_function(1)


class LogsumexpFunction(torch.autograd.Function):
    """logsumexp(input, dim, keepdim) with torch's pointwise backward (differentiable: a double backward works)."""

    @staticmethod
    def forward(input: torch.Tensor, dim: Any, keepdim: bool) -> torch.Tensor:  # type: ignore[override]
        return logsumexp_call(SPECS["logsumexp"], input, dim, keepdim)

    setup_context = staticmethod(_setup_logsumexp)  # type: ignore[assignment]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, None, None]:  # type: ignore[override]
        return _logsumexp_grad(ctx, grad, logsumexp_backward)

    jvp = staticmethod(rt.differentiable_jvp(_logsumexp_jvp))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], input: torch.Tensor, dim: Any,
             keepdim: bool) -> tuple[torch.Tensor, int]:
        """torch.func.vmap's rule: over the shifted dims (a 0-d sample as a dim of one)."""
        x, n = rt.batch_front("logsumexp", in_dims, input)
        dims = rt.batched_dims("logsumexp", dim, n)  # (wrapped against the sample, a 0-d one too)
        if n == 0:
            return LogsumexpFunction.apply(x.unsqueeze(1), [1], False), 0
        return LogsumexpFunction.apply(x, dims, keepdim), 0


# -- torch.compile: the registered ops, their fake implementations and autograd ------------------------------------

def _register_softmax(mode: int) -> None:
    name = _NAMES[mode]

    @torch.library.custom_op(f"tritred::{name}", mutates_args=(),
                             schema="(Tensor input, int? dim, ScalarType? dtype) -> Tensor")
    def forward(input: torch.Tensor, dim: int | None, dtype: torch.dtype | None) -> torch.Tensor:
        return softmax_forward(mode, input, dim, dtype)

    @forward.register_fake
    def _(input: torch.Tensor, dim: int | None, dtype: torch.dtype | None) -> torch.Tensor:
        _, cast = softmax_checks(name, rt.check_tensor(name, "input", input), dim, dtype)
        return torch.empty(input.shape, dtype=cast, device=input.device)  # (contiguous, as the launcher's)

    @torch.library.custom_op(f"tritred::{name}_backward", mutates_args=(),
                             schema="(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor")
    def backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
        return softmax_backward(mode, grad_output, output, dim, input_dtype)

    @backward.register_fake
    def _(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
        check_backward(name, grad_output, output, dim, input_dtype)
        return torch.empty(output.shape, dtype=input_dtype, device=output.device)

    op_backward = getattr(torch.ops.tritred, f"{name}_backward").default
    forward.register_autograd(lambda ctx, grad: _softmax_grad(ctx, grad, op_backward), setup_context=_setup_softmax)


def _register_logsumexp() -> None:
    @torch.library.custom_op("tritred::logsumexp", mutates_args=(),
                             schema="(Tensor input, int[]? dim, bool keepdim) -> Tensor")
    def forward(input: torch.Tensor, dim: Sequence[int] | None, keepdim: bool) -> torch.Tensor:
        return logsumexp_call(SPECS["logsumexp"], input, dim, keepdim)  # type: ignore[arg-type]

    @forward.register_fake
    def _(input: torch.Tensor, dim: Sequence[int] | None, keepdim: bool) -> torch.Tensor:
        _, shape, dtype = logsumexp_checks(rt.check_tensor("logsumexp", "input", input), dim, keepdim)
        return torch.empty(shape, dtype=dtype, device=input.device)

    @torch.library.custom_op("tritred::logsumexp_backward", mutates_args=(),
                             schema="(Tensor grad, Tensor input, Tensor result, int[] dim, bool keepdim) -> Tensor")
    def backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: Sequence[int],
                 keepdim: bool) -> torch.Tensor:
        return logsumexp_backward(grad, input, result, dim, keepdim)

    backward.register_fake(logsumexp_backward)  # (torch ops: the same code on fake tensors, the same strides)

    op_backward = torch.ops.tritred.logsumexp_backward.default
    forward.register_autograd(lambda ctx, grad: _logsumexp_grad(ctx, grad, op_backward),
                              setup_context=_setup_logsumexp)


def logsumexp_dims(dim: Any) -> Any:
    """``dim`` as the registered op's ``int[]?`` takes it: an int as a one-element list, a sequence as a list."""
    index = rt.as_index(dim)
    if index is not None:
        return [index]
    return list(dim) if isinstance(dim, (tuple, list, torch.Size)) else dim


_register_softmax(0)
_register_softmax(1)
_register_logsumexp()
