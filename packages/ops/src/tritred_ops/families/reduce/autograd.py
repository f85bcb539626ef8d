"""Autograd of the reductions: the ``torch.library`` ops (compile) and the autograd Functions (eager), one backward.

Each public function (:mod:`tritred_ops.families.reduce`) takes one of three paths:

- **compiling** (``torch.compiler.is_compiling()``: dynamo is tracing): ``torch.ops.tritred.<op>``, an opaque
  custom op. Its fake implementation is torch's own op on the fake tensors (the same shapes, dtypes and
  contiguous strides as the launchers' outputs, and torch's errors from torch's meta kernels); its autograd is
  registered with ``register_autograd``;
- **grad needed** (``runtime.grad_needed``): the autograd Function made here for the op, whose forward is the
  launcher and whose ``setup_context`` and ``backward`` are the registered op's;
- **inference**: the launcher itself (the replayed fast path), no op boundary.

The registered ops (arguments positional, as the launchers take them; outputs never alias inputs):

========================  =========================================================================================
``tritred::sum``          ``(Tensor input, int[]? dim, bool keepdim, ScalarType? dtype) -> Tensor``
``tritred::mean``         as sum
``tritred::prod``         ``(Tensor input, int? dim, bool keepdim, ScalarType? dtype) -> Tensor``
``tritred::amax``, amin   ``(Tensor input, int[] dim, bool keepdim) -> Tensor``
``tritred::max``, min     ``(Tensor input, int dim, bool keepdim) -> (Tensor values, Tensor indices)``
``tritred::max_all``, …   ``(Tensor input) -> Tensor``: ``max(input)`` / ``min(input)`` (``min_all``)
``tritred::prod_backward`` ``(Tensor grad, Tensor input, Tensor result, int? dim, bool keepdim) -> Tensor``
========================  =========================================================================================

The backward formulas are :mod:`.backward`'s (torch's ``derivatives.yaml``), written with torch's ops: AOTAutograd
traces them into the compiled backward graph. prod's backward branches on the data (zeros in the input), so it is
an op of its own, ``tritred::prod_backward``: a compiled graph then takes the branch eager takes, at run time.
The eager Functions also have torch's forward-mode formulas (``jvp``: ``torch.autograd.forward_ad``,
``torch.func.jvp``), in torch's ops on the tangent.

Why ``custom_op`` and not ``triton_op``/``wrap_triton``: the launchers choose kernels from the pointers' 16-byte
alignment and the device's occupancy and launch with programmatic dependent launch, none of which a fake-tensor
trace can express; the opaque op also keeps Python floats away from Inductor's fp64 scalars.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ... import runtime as rt
from ...kernels.combine import MAX, MIN, PROD, SUM
from ...runtime import UNSET
from . import backward as bw
from .launch import arg_call, reduce_call
from .specs import SPECS


def _fresh(out: Tensor, *inputs: Tensor) -> Tensor:
    """``out`` as a registered op may return it: contiguous and sharing no memory with ``inputs`` (else a copy)."""
    ptr = out.untyped_storage().data_ptr()
    if out.is_contiguous() and all(t.untyped_storage().data_ptr() != ptr for t in inputs):
        return out
    return out.clone(memory_format=torch.contiguous_format)


def _register(name: str, schema: str, impl: Callable[..., Any], fake: Callable[..., Any],
              setup: Callable[..., None], backward: Callable[..., Any], jvp: Callable[..., Any],
              compiled_backward: Callable[..., Any] | None = None, vmap: Callable[..., Any] | None = None) -> Any:
    """Define ``tritred::<name>`` (``impl``, its ``fake``, autograd from ``setup`` and ``compiled_backward`` or
    ``backward``) and return the autograd Function of the eager path: forward ``impl``, the same ``setup`` and
    ``backward``, ``jvp`` (forward-mode AD; an undefined input tangent gives an undefined output tangent) and
    ``vmap`` (``torch.func.vmap``'s rule: ``vmap(in_dims, *args)`` -> (output, out_dims))."""
    op = torch.library.custom_op(f"tritred::{name}", impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    n_inputs = len(inspect.signature(impl).parameters)

    def setup_undefined(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        setup(ctx, inputs, output)
        ctx.set_materialize_grads(False)

    def undefined(fn: Callable[..., Any]) -> Callable[..., Any]:
        """An output's undefined gradient gives undefined gradients (as torch's backward), not zeros."""
        def backward_of(ctx: Any, grad: Tensor | None, *rest: Any) -> Any:
            return (None,) * n_inputs if grad is None else fn(ctx, grad, *rest)
        return backward_of

    def jvp_of(ctx: Any, t: Tensor | None, *_: Any) -> Any:
        return None if t is None else jvp(ctx, t)

    op.register_autograd(undefined(compiled_backward or backward), setup_context=setup_undefined)
    attrs: dict[str, Any] = {
        "__doc__": f"tritred.{name} with autograd (eager): the launcher forward, tritred::{name}'s backward.",
        "forward": staticmethod(impl), "setup_context": staticmethod(setup_undefined),
        "backward": staticmethod(undefined(backward)), "jvp": staticmethod(rt.differentiable_jvp(jvp_of))}
    if vmap is not None:
        def vmap_rule(info: Any, in_dims: tuple[Any, ...], *args: Any) -> Any:
            return vmap(function, in_dims, *args)
        attrs["vmap"] = staticmethod(vmap_rule)
    function = type(f"{name.title().replace('_', '')}Function", (torch.autograd.Function,), attrs)
    return function


def _vmap_reduce(op: str) -> Callable[..., Any]:
    """The vmap rule of a reduction ``f(input, dim, keepdim, *rest)`` over a dim list (sum, mean, amax, amin): the
    same reduction of the batched input over the shifted dims; a 0-d sample reduced as a dim of one."""
    def rule(function: Any, in_dims: tuple[Any, ...], x: Tensor, dim: Any, keepdim: bool, *rest: Any) -> Any:
        x, n = rt.batch_front(op, in_dims, x)
        dims = rt.batched_dims(op, dim, n)  # (wrapped against the sample, a 0-d one too: torch's IndexError)
        if n == 0:
            return function.apply(x.unsqueeze(1), [1], False, *rest), 0
        return function.apply(x, dims, keepdim, *rest), 0
    return rule


def _vmap_prod(function: Any, in_dims: tuple[Any, ...], x: Tensor, dim: int | None, keepdim: bool,
               dtype: torch.dtype | None) -> Any:
    """prod's vmap rule: over the shifted dim, or over each sample flattened (``dim=None``)."""
    x, n = rt.batch_front("prod", in_dims, x)
    dims = rt.batched_dims("prod", dim, n)  # (wrapped against the sample, a 0-d one too: torch's IndexError)
    if dim is None or n == 0:
        out = function.apply(x.reshape(x.shape[0], -1), 1, False, dtype)
        return (out.reshape(x.shape[0], *(1,) * n) if keepdim and dim is None else out), 0
    return function.apply(x, dims[0], keepdim, dtype), 0


def _vmap_arg(op: str) -> Callable[..., Any]:
    """The vmap rule of max/min with a dim: over the shifted dim (indices along it, as the sample's)."""
    def rule(function: Any, in_dims: tuple[Any, ...], x: Tensor, dim: int, keepdim: bool) -> Any:
        x, n = rt.batch_front(op, in_dims, x)
        dims = rt.batched_dims(op, dim, n)  # (wrapped against the sample, a 0-d one too: torch's IndexError)
        if n == 0:
            return function.apply(x.unsqueeze(1), 1, False), (0, 0)
        return function.apply(x, dims[0], keepdim), (0, 0)
    return rule


def _vmap_all(op: str) -> Callable[..., Any]:
    """The vmap rule of max/min without a dim: amax/amin over each sample's dims (the same values, and the same
    gradient, shared evenly among equal elements)."""
    def rule(function: Any, in_dims: tuple[Any, ...], x: Tensor) -> Any:
        x, _ = rt.batch_front(op, in_dims, x)
        extremum = AmaxFunction if op == "max" else AminFunction
        return extremum.apply(x.reshape(x.shape[0], -1), [1], False), 0
    return rule


def _evenly_jvp(t: Tensor, x: Tensor, result: Tensor, dims: Sequence[int], keepdim: bool) -> Tensor:
    """The tangent of amax/amin and of max/min without dim (torch's ``amaxamin_jvp``, ``evenly_read_jvp``): the
    mean of the tangent over the elements equal to the result (NaN where the result is NaN)."""
    mask = x == bw.restore_dims(result, dims, keepdim)
    dims = list(dims) or list(range(x.dim()))
    return torch.where(mask, t, 0).sum(dims, keepdim) / mask.sum(dims, keepdim)


def _check_differentiable(dtype: torch.dtype | None) -> None:
    """RuntimeError, as torch's autograd raises it, for ``dtype=`` a non-floating dtype on an input that
    requires grad (``torch.sum(x, dtype=torch.int64)``)."""
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError(f"Autograd not support dtype: {rt.SCALAR_TYPE_NAMES.get(dtype, dtype)}")


# -- sum, mean -----------------------------------------------------------------------------------------------------

def _setup_sum(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, dim, keepdim, dtype = inputs
    _check_differentiable(dtype)
    ctx.shape, ctx.dtype, ctx.keepdim = x.shape, x.dtype, keepdim
    ctx.dims = rt.wrap_dims("sum", dim, x.dim())
    ctx.dim_arg, ctx.out_dtype = dim, dtype  # (the forward's own arguments: its jvp is the same linear op)


def _plain(name: str, code: int) -> Callable[..., Tensor]:
    spec = SPECS[name]

    def impl(input: Tensor, dim: Sequence[int] | None, keepdim: bool, dtype: torch.dtype | None) -> Tensor:
        return reduce_call(spec, code, input, dim, keepdim, dtype)
    return impl


def _sum_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    return bw.sum_backward(grad, ctx.shape, ctx.dims, ctx.keepdim, ctx.dtype), None, None, None


def _mean_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    return bw.mean_backward(grad, ctx.shape, ctx.dims, ctx.keepdim, ctx.dtype), None, None, None


_SUM_SCHEMA = "(Tensor input, int[]? dim, bool keepdim, ScalarType? dtype) -> Tensor"
SumFunction = _register("sum", _SUM_SCHEMA, _plain("sum", SUM),
                        lambda input, dim, keepdim, dtype: torch.sum(input, dim, keepdim, dtype=dtype),
                        _setup_sum, _sum_backward,
                        lambda ctx, t: torch.sum(t, ctx.dim_arg, ctx.keepdim, dtype=ctx.out_dtype),
                        vmap=_vmap_reduce("sum"))
MeanFunction = _register("mean", _SUM_SCHEMA, _plain("mean", SUM),
                         lambda input, dim, keepdim, dtype: torch.mean(input, dim, keepdim, dtype=dtype),
                         _setup_sum, _mean_backward,
                         lambda ctx, t: torch.mean(t, ctx.dim_arg, ctx.keepdim, dtype=ctx.out_dtype),
                         vmap=_vmap_reduce("mean"))


# -- prod ----------------------------------------------------------------------------------------------------------

def _prod_fake(input: Tensor, dim: int | None, keepdim: bool, dtype: torch.dtype | None) -> Tensor:
    if dim is None:
        out = torch.prod(input, dtype=dtype)
        return out.new_empty([1] * input.dim()) if keepdim else out
    return torch.prod(input, dim, keepdim, dtype=dtype)


def _setup_prod(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, dim, keepdim, dtype = inputs
    _check_differentiable(dtype)
    ctx.save_for_backward(x, output)
    rt.save_for_jvp(ctx, x, output)
    ctx.dim = None if dim is None else rt.wrap_dim("prod", dim, x.dim())
    ctx.keepdim = keepdim


def _prod_jvp(ctx: Any, t: Tensor) -> Tensor:
    """torch's prod jvp: the sum of the tangent times each element's product of the others (prod's backward with
    a gradient of ones: exact with zeros in the input)."""
    x, result = ctx.saved_tensors
    others = bw.prod_backward(torch.ones_like(result), x.to(result.dtype), result, ctx.dim, ctx.keepdim)
    terms = others * t.to(result.dtype)
    return (terms.sum() if ctx.dim is None else terms.sum(ctx.dim, ctx.keepdim)).reshape(result.shape)


def _prod_grad(ctx: Any, grad: Tensor, backward: Callable[..., Tensor]) -> tuple[Tensor | None, ...]:
    x, result = ctx.saved_tensors
    return backward(grad, x, result, ctx.dim, ctx.keepdim), None, None, None


def _prod_backward_op(grad: Tensor, input: Tensor, result: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    return _fresh(bw.prod_backward(grad, input, result, dim, keepdim), grad, input, result)


torch.library.custom_op(
    "tritred::prod_backward", _prod_backward_op, mutates_args=(),
    schema="(Tensor grad, Tensor input, Tensor result, int? dim, bool keepdim) -> Tensor",
).register_fake(lambda grad, input, result, dim, keepdim: input.new_empty(input.shape))

ProdFunction = _register(
    "prod", "(Tensor input, int? dim, bool keepdim, ScalarType? dtype) -> Tensor",
    _plain("prod", PROD), _prod_fake, _setup_prod,
    lambda ctx, grad: _prod_grad(ctx, grad, bw.prod_backward), _prod_jvp,
    lambda ctx, grad: _prod_grad(ctx, grad, torch.ops.tritred.prod_backward), _vmap_prod)


# -- amax, amin ----------------------------------------------------------------------------------------------------

def _setup_amax(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    x, dim, keepdim = inputs
    ctx.save_for_backward(x, output)
    rt.save_for_jvp(ctx, x, output)
    ctx.dims, ctx.keepdim = rt.wrap_dims("amax", dim, x.dim()), keepdim


def _amax_jvp(ctx: Any, t: Tensor) -> Tensor:
    x, result = ctx.saved_tensors
    return _evenly_jvp(t, x, result, ctx.dims, ctx.keepdim)


def _amax_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
    x, result = ctx.saved_tensors
    return bw.amax_backward(grad, x, result, ctx.dims, ctx.keepdim), None, None


def _extremum(name: str, code: int) -> Callable[..., Tensor]:
    spec = SPECS[name]

    def impl(input: Tensor, dim: Sequence[int], keepdim: bool) -> Tensor:
        return reduce_call(spec, code, input, dim, keepdim, None)
    return impl


_AMAX_SCHEMA = "(Tensor input, int[] dim, bool keepdim) -> Tensor"
AmaxFunction = _register("amax", _AMAX_SCHEMA, _extremum("amax", MAX),
                         lambda input, dim, keepdim: torch.amax(input, dim, keepdim), _setup_amax, _amax_backward,
                         _amax_jvp, vmap=_vmap_reduce("amax"))
AminFunction = _register("amin", _AMAX_SCHEMA, _extremum("amin", MIN),
                         lambda input, dim, keepdim: torch.amin(input, dim, keepdim), _setup_amax, _amax_backward,
                         _amax_jvp, vmap=_vmap_reduce("amin"))


# -- max, min: with dim (values, indices), and without (max_all, min_all) ------------------------------------------

def _setup_max(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    x, dim, keepdim = inputs
    ctx.save_for_backward(output[1])
    rt.save_for_jvp(ctx, output[1])
    ctx.shape, ctx.dim, ctx.keepdim = x.shape, rt.wrap_dim("max", dim, x.dim()), keepdim is True


def _max_jvp(ctx: Any, t: Tensor) -> tuple[Tensor, None]:
    """The values' tangent: the input's tangent at the indices (torch's ``gather_with_keepdimed_indices``)."""
    (indices,) = ctx.saved_tensors
    if t.dim() == 0:
        return t.clone(), None
    out = t.gather(ctx.dim, bw.restore_dims(indices, (ctx.dim,), ctx.keepdim))
    return (out if ctx.keepdim else out.squeeze(ctx.dim)), None


def _max_backward(ctx: Any, grad: Tensor, _grad_indices: Tensor | None) -> tuple[Tensor | None, ...]:
    (indices,) = ctx.saved_tensors
    return bw.max_dim_backward(grad, indices, ctx.shape, ctx.dim, ctx.keepdim), None, None


def _setup_max_all(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(inputs[0], output)
    rt.save_for_jvp(ctx, inputs[0], output)


def _max_all_jvp(ctx: Any, t: Tensor) -> Tensor:
    x, result = ctx.saved_tensors
    return _evenly_jvp(t, x, result, (), False)


def _max_all_backward(ctx: Any, grad: Tensor) -> Tensor:
    x, result = ctx.saved_tensors
    return bw.max_all_backward(grad, x, result)


def _arg(name: str) -> tuple[Callable[..., tuple[Tensor, Tensor]], Callable[..., Tensor]]:
    spec = SPECS[name]

    def impl(input: Tensor, dim: int, keepdim: bool) -> tuple[Tensor, Tensor]:
        values, indices = arg_call(spec, input, dim, keepdim)
        return values, indices

    def impl_all(input: Tensor) -> Tensor:
        out: Tensor = arg_call(spec, input, UNSET, UNSET)
        return out
    return impl, impl_all


_MAX_SCHEMA = "(Tensor input, int dim, bool keepdim) -> (Tensor values, Tensor indices)"
MaxFunction = _register("max", _MAX_SCHEMA, _arg("max")[0],
                        lambda input, dim, keepdim: tuple(torch.max(input, dim, keepdim)), _setup_max, _max_backward,
                        _max_jvp, vmap=_vmap_arg("max"))
MinFunction = _register("min", _MAX_SCHEMA, _arg("min")[0],
                        lambda input, dim, keepdim: tuple(torch.min(input, dim, keepdim)), _setup_max, _max_backward,
                        _max_jvp, vmap=_vmap_arg("min"))
MaxAllFunction = _register("max_all", "(Tensor input) -> Tensor", _arg("max")[1], lambda input: torch.max(input),
                           _setup_max_all, _max_all_backward, _max_all_jvp, vmap=_vmap_all("max"))
MinAllFunction = _register("min_all", "(Tensor input) -> Tensor", _arg("min")[1], lambda input: torch.min(input),
                           _setup_max_all, _max_all_backward, _max_all_jvp, vmap=_vmap_all("min"))
