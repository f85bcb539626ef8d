"""The eager autograd Functions' plumbing: applying one without torch's per-call signature binding
(:func:`apply_function`), backward passes that are not themselves differentiable (:func:`once_differentiable`),
backward kernels whose gradients can be differentiated again through torch's ops (:func:`twice_differentiable`),
and forward-mode formulas whose tangents can be (:func:`differentiable_jvp`).

``torch.autograd.Function.apply`` of a Function with a separate ``setup_context`` (the style that
``torch.library.register_autograd`` and torch.func share) binds the call's arguments to ``forward``'s signature with
``inspect`` on every call, to fill in defaults: ~20 us of host time a call (measured on a 2-core CI machine: 29 us
against 6 us, the rest of ``apply`` being torch's C++). tritred's ops pass every argument positionally, so there
is nothing to fill in, and :func:`apply_function` calls torch's C++ ``apply`` (which runs ``forward`` and then
``setup_context``) directly. Under a torch.func transform (vmap, grad, jvp) it takes the documented path.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch._C import _functions
from torch._C._functorch import TransformType, _unwrap_for_grad, _wrap_for_grad, get_interpreter_stack
from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter
from torch._functorch.utils import unwrap_dead_wrappers
from torch.autograd import forward_ad
from torch.utils._pytree import tree_leaves, tree_map_only

from .checks import wrap_dims

Backward = Callable[..., Any]
Jvp = Callable[..., Any]

log = logging.getLogger("tritred")


def apply_function(function: type[torch.autograd.Function], *args: Any) -> Any:
    """``function.apply(*args)``, every argument of ``function.forward`` given positionally (no defaults filled
    in: a missing one is a TypeError from ``forward``)."""
    if torch._C._are_functorch_transforms_active():
        return function.apply(*args)
    return super(torch.autograd.Function, function).apply(*unwrap_dead_wrappers(args))  # type: ignore[misc]


def once_differentiable(op: str) -> Callable[[Backward], Backward]:
    """A backward that is not itself differentiable, for ``op``'s autograd Function: run without grad, and under
    ``create_graph=True`` its gradients carry a node that raises ``RuntimeError`` naming the op when they are
    differentiated (a double backward), as torch's ``once_differentiable``.

    torch's decorator attaches that node only when an incoming gradient requires grad. tritred's gradients also
    depend on the op's saved inputs (the norms' on x and the weight, softmax's on its output): when the op's
    output enters the loss linearly (a gradient penalty, ``torch.autograd.grad(critic, x, create_graph=True)``),
    the incoming gradient is a constant, and the gradient would come back cut from the graph, its share of a
    second-order term silently lost. Here the node is attached whenever an input of the op requires grad
    (``ctx.needs_input_grad``) or an incoming gradient does, and it has the saved tensors that require grad among
    its inputs: ``torch.autograd.grad(penalty, x)`` reaches it, not only ``penalty.backward()``. An op that saves
    none of its inputs (cross_entropy) refuses ``create_graph=True`` with an input that requires grad at once.
    """
    message = (f"tritred.{op}(): its backward is not differentiable: a double backward (a gradient of a gradient "
               f"taken with create_graph=True) is not supported").encode()

    def decorate(fn: Backward) -> Backward:
        @functools.wraps(fn)
        def wrapper(ctx: Any, *grads: Any) -> Any:
            graph = _graph_wanted(ctx, grads)  # (False under create_graph=False: the common backward)
            links: list[torch.Tensor] = []
            if graph:
                # The error node's inputs: the gradients, and the saved tensors that require grad (the op's inputs,
                # or its output: softmax's), so that a gradient taken with respect to those inputs reaches the node
                # and raises. An op that saved none of them (cross_entropy keeps no logits) cannot link its
                # gradients to its inputs: it refuses create_graph=True before it runs (a detached alias, as
                # torch's decorator makes, would let torch.autograd.grad with respect to an input skip the error
                # node and return a partial gradient).
                links = [t for t in ctx.saved_tensors if isinstance(t, torch.Tensor) and t.requires_grad]
                if not links and any(ctx.needs_input_grad):
                    raise RuntimeError(message.decode() + " (create_graph=True with an input that requires grad)")
            with torch.no_grad():
                outputs = fn(ctx, *grads)
            if not links:
                return outputs
            outs = outputs if isinstance(outputs, tuple) else (outputs,)
            ins = [t.detach() if isinstance(t, torch.Tensor) else t for t in outs]
            wrapped = _functions.DelayedError(message, len(ins) + len(links))(*ins, *links)[:len(outs)]
            return tuple(wrapped) if isinstance(outputs, tuple) else wrapped[0]
        return wrapper
    return decorate


def _graph_wanted(ctx: Any, grads: tuple[Any, ...]) -> bool:
    """Whether a backward must build a graph of its gradients: under ``create_graph=True`` (grad mode on inside a
    backward), when an input of the op needs a gradient or an incoming gradient requires grad."""
    return torch.is_grad_enabled() and (
        any(ctx.needs_input_grad) or any(isinstance(g, torch.Tensor) and g.requires_grad for g in grads))


def twice_differentiable(op: str, composite: Backward) -> Callable[[Backward], Backward]:
    """A backward that runs ``op``'s backward kernels, and under ``create_graph=True`` gives gradients that can be
    differentiated again (a double backward, a gradient penalty), as torch's.

    The common backward (``create_graph=False``) runs the decorated function: the kernels, without grad. Under
    ``create_graph=True``, when the op's inputs need gradients or an incoming gradient requires grad, the gradients
    are ``composite(ctx, *grads)``'s instead: the same formulas (torch's ``derivatives.yaml``) written in torch's
    differentiable ops on the saved tensors, the statistics recomputed from the input so that their own
    dependence on it is in the graph. That path is torch's work, logged (debug) on the ``tritred`` logger; it is
    only taken when a graph of the gradients is asked for.
    """
    def decorate(fn: Backward) -> Backward:
        @functools.wraps(fn)
        def wrapper(ctx: Any, *grads: Any) -> Any:
            if _graph_wanted(ctx, grads):
                log.debug("tritred.%s: a backward with create_graph=True: its gradients from torch's ops", op)
                return composite(ctx, *grads)
            with torch.no_grad():
                return fn(ctx, *grads)
        return wrapper
    return decorate


def save_for_jvp(ctx: Any, *tensors: torch.Tensor | None) -> None:
    """``ctx.save_for_forward(*tensors)`` inside a forward-mode AD level (``torch.autograd.forward_ad``), where a
    Function's ``jvp`` reads them; nothing otherwise (no reference kept by the common call)."""
    if forward_ad._current_level >= 0:
        ctx.save_for_forward(*tensors)


def differentiable_jvp(fn: Jvp) -> Jvp:
    """A Function's ``jvp`` whose tangents can be differentiated again: forward over forward (``torch.func.jvp`` of
    a jvp, ``jacfwd(jacfwd(f))``, ``jacfwd(hessian(f))``) and reverse over forward (``jacrev(jacfwd(f))``), as
    torch's ops.

    torch calls an autograd Function's ``jvp`` with forward-mode AD disabled (``_set_fwd_grad_enabled(False)``,
    thread-local, for every level at once), on the tensors wrapped at the transform's level. Under nested
    ``torch.func.jvp`` levels, the outer levels' interpreters do not turn it back on when the formula's ops reach
    them, so the tangent comes back as a constant there: its own derivative (the second-order term) is silently
    zero, even though the saved tensors (the op's output, its input) carry the outer tangents. torch's generated
    single-level Function re-enables it for a Function's *forward* only (``autograd_function.py``:
    ``generate_single_level_function``). Here, under a torch.func ``jvp`` transform, the formula runs as that
    forward does: the saved tensors and the tangents unwrapped from the transform's level, forward-mode AD enabled,
    the interpreter lowered (the levels below differentiate the formula's torch ops, each with its own grad mode),
    and the tangents wrapped back at the level. Outside torch.func (``torch.autograd.forward_ad``, one level) the
    formula runs as it is. The formula takes its tensors from ``ctx.saved_tensors`` and the tangents (its other
    ``ctx`` attributes are not tensors); one whose saved tensors are constants to autograd (the norms' statistics,
    outputs marked non-differentiable) recomputes them from the input where :func:`jvp_differentiated` says its
    tangent will be differentiated. The first-order call (no transform below that differentiates) computes what
    it computed before, from the saved tensors."""
    @functools.wraps(fn)
    def wrapper(ctx: Any, *tangents: Any) -> Any:
        if not torch._C._are_functorch_transforms_active():
            return fn(ctx, *tangents)
        interpreter = retrieve_current_functorch_interpreter()
        if interpreter.key() != TransformType.Jvp:
            return fn(ctx, *tangents)
        level = interpreter.level()

        def unwrap(t: Any) -> Any:
            return _unwrap_for_grad(t, level) if isinstance(t, torch.Tensor) else t

        lowered = _SavedTensors(ctx, tuple(unwrap(t) for t in ctx.saved_tensors))
        with forward_ad._set_fwd_grad_enabled(True), interpreter.lower():
            out = fn(lowered, *(unwrap(t) for t in tangents))
        return tree_map_only(torch.Tensor, lambda t: _wrap_for_grad(t, level), out)
    return wrapper


class _SavedTensors:
    """A Function's ctx with other ``saved_tensors`` (the lowered ones): every other attribute the ctx's."""

    def __init__(self, ctx: Any, saved: tuple[Any, ...]) -> None:
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "saved_tensors", saved)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def jvp_differentiated(*tensors: torch.Tensor | None) -> bool:
    """Whether a ``jvp`` formula's tangent (see :func:`differentiable_jvp`) will itself be differentiated: a
    torch.func ``jvp`` or ``grad`` transform below the one it serves, or autograd recording it (grad mode on and
    one of ``tensors`` requires grad: a backward through ``torch.autograd.forward_ad``'s tangent). The norms
    then recompute their statistics from the input (the forward's saved ones are constants to autograd)."""
    if any(i.key() in (TransformType.Jvp, TransformType.Grad) for i in get_interpreter_stack() or ()):
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def normalized(x: torch.Tensor, dims: tuple[int, ...], eps: float, centered: bool,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_hat, scale)``: ``x`` normalized over ``dims`` with the statistics computed here in torch's ops (two
    passes, so that autograd differentiates them), ``scale`` (rstd) broadcast over ``dims``: ``(x - mean(x)) *
    rsqrt(var(x) + eps)``, or ``x * rsqrt(mean(x^2) + eps)`` (rms_norm: ``centered`` False). For the norms'
    backward under create_graph and their jvp when its tangent is differentiated."""
    c = x - x.mean(dims, keepdim=True) if centered else x
    scale = torch.rsqrt(c.square().mean(dims, keepdim=True) + eps)
    return c * scale, scale


def normalized_product(x_hat: torch.Tensor, scale: torch.Tensor, v: torch.Tensor, dims: tuple[int, ...],
                       centered: bool) -> torch.Tensor:
    """``v`` times the Jacobian of ``x_hat``, the input normalized over ``dims`` (``scale``: rstd or invstd,
    broadcast): ``scale * (v - mean(v) - x_hat * mean(x_hat * v))``, without ``mean(v)`` for rms_norm
    (``centered`` False). The Jacobian is symmetric, so this is both x_hat's tangent for an input tangent ``v``
    (the norms' jvp) and the input's gradient for x_hat's gradient ``v`` (their backward under create_graph).
    All in the accumulation dtype."""
    c = v - v.mean(dims, keepdim=True) if centered else v
    return scale * (c - x_hat * (x_hat * v).mean(dims, keepdim=True))


def affine_tangent(x_hat: torch.Tensor, dx_hat: torch.Tensor | None, weight: torch.Tensor | None,
                   t_weight: torch.Tensor | None, t_bias: torch.Tensor | None, dtype: torch.dtype,
                   view: tuple[int, ...] | None = None) -> torch.Tensor | None:
    """The tangent of ``y = x_hat * weight + bias`` (the norms' jvp): ``dx_hat * weight + x_hat * weight' +
    bias'``, each term where its tangent (and the weight) is defined. The weight and the tangents are taken to
    ``x_hat``'s (accumulation) dtype and, with ``view``, viewed as it (batch_norm's [1, C, 1, ...]); the result has
    ``x_hat``'s shape and ``dtype``, None (an undefined tangent) when every tangent is undefined."""
    def param(t: torch.Tensor) -> torch.Tensor:
        t = t.to(x_hat.dtype)
        return t.view(view) if view is not None else t

    terms = []
    if dx_hat is not None:
        terms.append(dx_hat * param(weight) if weight is not None else dx_hat)
    if weight is not None and t_weight is not None:
        terms.append(x_hat * param(t_weight))
    if t_bias is not None:
        terms.append(param(t_bias))
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out.expand(x_hat.shape).to(dtype).contiguous()


def batch_front(op: str, in_dims: tuple[Any, ...], x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A Function's ``vmap`` rule's input with its batch dim moved to the front, and its logical (per-sample)
    number of dims. Only the input may be batched (a batched weight, target or statistic: NotImplementedError
    naming the op); the caller handles an unbatched input (``in_dims[0] is None``)."""
    if any(d is not None for d in tree_leaves(in_dims[1:])):  # (a list argument's in_dims are a list)
        raise NotImplementedError(f"tritred {op}: under torch.func.vmap only the input may be batched (not its "
                                  "weight, bias, target or statistics)")
    return x.movedim(in_dims[0], 0), x.dim() - 1


def batched_dims(op: str, dim: Any, ndim: int) -> list[int]:
    """The logical ``dim`` argument of a reduction (None, an int or a list; None and ``()``: every dim) as the dims
    of the input with its batch dim in front: each wrapped (torch's errors) and shifted by one; none for a 0-d
    sample (``ndim`` 0), whose dim is still checked (0 and -1 only)."""
    return [d + 1 for d in wrap_dims(op, dim, ndim)]
