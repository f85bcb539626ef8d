"""Autograd of var, std, var_mean, std_mean: the ``torch.library`` ops (compile) and the autograd Functions (eager).

The same three paths as the reductions (see :mod:`tritred_ops.families.reduce.autograd`): under
``torch.compile`` the opaque registered op, whose fake implementation is torch's own op on the fake tensors;
with grad needed the autograd Function below (forward: the launcher; ``setup_context`` and ``backward``: the
registered op's); else the launcher. The ops, arguments positional and already parsed (``unbiased`` and the
legacy ``var(x, True)`` turned into ``correction``):

- ``tritred::var(Tensor input, int[]? dim, float correction, bool keepdim) -> Tensor``, ``tritred::std`` as var;
- ``tritred::var_mean(...) -> (Tensor var, Tensor mean)``, ``tritred::std_mean(...) -> (Tensor std, Tensor mean)``.

The backward is :mod:`.backward`'s (torch's ``var_backward`` and its kin): torch's ops, traced into the compiled
backward graph. It saves the input (and std's result), as torch does. The eager Functions also have torch's
forward-mode formulas (:func:`stats_jvp`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ... import runtime as rt
from ...runtime import UNSET, Unset
from .backward import stats_backward
from .launch import parse_correction, stats_call
from .specs import SPECS


def given_dims(op: str, dim: object, ndim: int) -> tuple[int, ...] | None:
    """The reduced dims as torch's backward sees them: None for ``dim=None``, ``()`` for an empty list (which
    torch's ``var_backward`` counts as N = 1), else the wrapped dims, ascending."""
    if dim is None:
        return None
    if isinstance(dim, (tuple, list, torch.Size)) and len(dim) == 0:
        return ()
    return rt.wrap_dims(op, dim, ndim)  # type: ignore[arg-type]


def stats_jvp(name: str, t: Tensor, x: Tensor, result: Tensor | None, dims: tuple[int, ...] | None,
              correction: float, keepdim: bool) -> Any:
    """The output's tangent under forward-mode AD (torch's ``var_jvp``, ``std_jvp``), in float32 (float64 for
    float64), rounded to the output's dtype::

        var' = 2 / (N - correction) * sum(t * (x - mean(x))),  std' = var' / (2 std) (0 where std is 0)
        mean' = mean(t)

    ``dims``: as the backward's (None: every dim; ``()``: every dim, N counted as 1, as torch)."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    over = list(range(x.dim())) if not dims else list(dims)
    n = 1 if dims == () else math.prod(x.shape[d] for d in over) if x.dim() else 1
    xa, ta = x.to(acc), t.to(acc)
    factor = 2.0 / (n - correction) if n != correction else math.inf  # (N = correction: inf, as torch)
    var_t = (factor * (ta * (xa - xa.mean(over, keepdim=True)))).sum(over, keepdim)  # (factor first, as torch)
    out = var_t
    if name.startswith("std"):
        assert result is not None
        r = result.to(acc)
        out = torch.where(r == 0, 0.0, var_t / (2 * r))
    out = out.to(x.dtype)
    if name.endswith("_mean"):
        return out, ta.mean(over, keepdim).to(x.dtype)
    return out


def _define(name: str) -> Any:
    """Register ``tritred::<name>`` and return the autograd Function of its eager path."""
    spec, pair, std = SPECS[name], name.endswith("_mean"), name.startswith("std")
    torch_op = getattr(torch, name)

    def impl(input: Tensor, dim: Sequence[int] | None, correction: float, keepdim: bool) -> Any:
        out, mean = stats_call(spec, input, dim, UNSET, keepdim, correction)
        return (out, mean) if pair else out

    def fake(input: Tensor, dim: Sequence[int] | None, correction: float, keepdim: bool) -> Any:
        out = torch_op(input, dim, correction=correction, keepdim=keepdim)
        return tuple(out) if pair else out

    def setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, dim, correction, keepdim = inputs
        ctx.save_for_backward(x, (output[0] if pair else output) if std else None)
        rt.save_for_jvp(ctx, x, (output[0] if pair else output) if std else None)
        ctx.dims, ctx.correction, ctx.keepdim = given_dims(name, dim, x.dim()), correction, keepdim
        ctx.set_materialize_grads(False)  # (an unused output's gradient is undefined, not zeros: as torch)

    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        x, result = ctx.saved_tensors
        grad, grad_mean = (grads[0], grads[1]) if pair else (grads[0], None)
        dx = stats_backward(name, grad, grad_mean, x, result, ctx.dims, ctx.correction, ctx.keepdim)
        return dx, None, None, None

    def jvp(ctx: Any, t: Tensor | None, *_: Any) -> Any:
        if t is None:
            return (None, None) if pair else None
        x, result = ctx.saved_tensors
        return stats_jvp(name, t, x, result, ctx.dims, ctx.correction, ctx.keepdim)

    def vmap(info: Any, in_dims: tuple[Any, ...], x: Tensor, dim: Any, correction: float, keepdim: bool) -> Any:
        """torch.func.vmap's rule: the statistic over the shifted dims (a 0-d sample as a dim of one)."""
        x, n = rt.batch_front(name, in_dims, x)
        if isinstance(dim, (tuple, list)) and len(dim) == 0:  # (torch counts N = 1 there: not batched as one call)
            raise NotImplementedError(f"tritred {name}: dim=() under torch.func.vmap is not supported")
        dims = rt.batched_dims(name, dim, n)  # (wrapped against the sample, a 0-d one too: torch's IndexError)
        dims, keep = (dims, keepdim) if n else ([1], False)
        return FUNCTIONS[name].apply(x if n else x.unsqueeze(1), dims, correction, keep), ((0, 0) if pair else 0)

    outputs = "(Tensor var, Tensor mean)" if name == "var_mean" else \
        "(Tensor std, Tensor mean)" if name == "std_mean" else "Tensor"
    op = torch.library.custom_op(f"tritred::{name}", impl, mutates_args=(),
                                 schema=f"(Tensor input, int[]? dim, float correction, bool keepdim) -> {outputs}")
    op.register_fake(fake)
    op.register_autograd(backward, setup_context=setup)
    return type(f"{name.title().replace('_', '')}Function", (torch.autograd.Function,), {
        "__doc__": f"tritred.{name} with autograd (eager): the launcher forward, tritred::{name}'s backward.",
        "forward": staticmethod(impl), "setup_context": staticmethod(setup), "backward": staticmethod(backward),
        "jvp": staticmethod(rt.differentiable_jvp(jvp)), "vmap": staticmethod(vmap)})


FUNCTIONS: dict[str, Any] = {name: _define(name) for name in SPECS}


def stats_autograd(name: str, input: Tensor, dim: Any, unbiased: bool | Unset, keepdim: bool,
                   correction: float | None) -> Any:
    """A statistic with autograd (its Function): the statistic, or (statistic, mean) for var_mean/std_mean."""
    dim, corr = parse_correction(name, dim, unbiased, correction)
    return rt.apply_function(FUNCTIONS[name], input, dim, corr, keepdim)
