"""cross_entropy: the loss of logits against class indices or class probabilities, and its gradient.

Each row of C logits takes one program (or several rows, one program): its log-sum-exp by the online softmax of
Milakov & Gimelshein (2018) in fp32 (fp64 for fp64 inputs), over chunks for vocabularies of any size, never an
fp32 copy of the logits. With grad required the same launch forms the gradient (as Liger-Kernel and quack do) in
a buffer of the logits' layout; the backward scales it by the loss's gradient in place, skipping rows whose factor
is 1. Kernels in :mod:`.kernels` (rows held by several programs: :mod:`.split`), the host path in :mod:`.launch`,
the backward in :mod:`.backward`, autograd and the ``tritred`` torch.library ops in :mod:`.autograd`, the argument
checks in :mod:`.checks`, the launch rules in :mod:`.rules`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd import forward_ad

from ... import runtime as rt
from . import autograd, composite
from .checks import no_weight_grad, reduction_enum, scalars
from .launch import forward
from .spec import SPEC

# (bound once: under torch.compile each attribute read of a public function's branch is a dynamo guard, evaluated
# on every call of the compiled code, CUDA graph replays included)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred
_grad_enabled = torch.is_grad_enabled

SPECS = {"cross_entropy": SPEC}


def _cross_entropy_compiled(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                            size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                            reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """cross_entropy as torch.compile traces it (``rt.compiles_to``): the registered op, told which gradients to
    prepare."""
    red = reduction_enum(reduction, size_average, reduce)
    index, smoothing = scalars(ignore_index, label_smoothing)
    grad_mode = _grad_enabled()
    prob = input.shape == target.shape
    grad_input = grad_mode and input.requires_grad
    others = grad_mode and prob and (target.requires_grad or (weight is not None and weight.requires_grad))
    no_weight_grad(prob, grad_mode and weight is not None and weight.requires_grad)
    return _ops.cross_entropy(  # type: ignore[no-any-return]
        input, target, weight, index, red, smoothing, grad_input, others)[0]


@rt.compiles_to(_cross_entropy_compiled)
def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  size_average: Any = None, ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """The cross entropy between logits and targets — mirrors :func:`torch.nn.functional.cross_entropy` (the same
    signature, ``size_average`` and ``reduce`` included, deprecated there too).

    Args:
        input: logits, ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)`` (the class dim is dim 1, read in place: no
            transposed copy), any strides; float16, bfloat16, float32 or float64; on CUDA (or CPU under
            ``TRITON_INTERPRET=1``).
        target: class indices (int64; uint8 for 1-2 dim inputs, as torch), of the input's shape without the class
            dim (a 0-d one for a ``(C,)`` input), each in ``[0, C)`` or ``ignore_index``; or class probabilities
            (floating, the input's shape, used as given: not checked to sum to 1).
        weight: a rescaling weight per class, ``(C,)`` (the input's dtype for class indices).
        ignore_index: class indices equal to it contribute no loss and no gradient, and leave the mean's
            denominator (class indices only; probability targets require it negative).
        reduction: ``'none'`` (a loss per sample), ``'mean'`` (class indices: the sum of the losses over the sum of
            the targets' weights, ignored samples left out: NaN when every sample is ignored; probabilities: over
            the number of samples), ``'sum'``.
        label_smoothing: in [0, 1]: the target mixes ``1 - label_smoothing`` of itself with a uniform
            distribution (with class weights, as torch's formula: the uniform part weighted by each class's weight).

    Returns:
        The loss: 0-d for 'mean' and 'sum', else of the target's shape (probability targets: the input's shape
        without the class dim); the input's dtype (probability targets: promoted with the target's and the
        weight's). Computed in fp32 (fp64), rounded once. Differentiable in ``input`` and, for probability targets,
        in ``target`` and ``weight``; the input's gradient is formed in the forward launch (one logits-sized buffer,
        which becomes ``input.grad``), so that a second backward through the same graph raises RuntimeError.

    Raises:
        TypeError, ValueError, IndexError, RuntimeError, NotImplementedError: as torch, naming the op: wrong
        shapes or dtypes, a reduction or label smoothing out of range; a class index out of range raises IndexError
        on the CPU and fails a device-side assert on CUDA (as torch's CUDA kernels do; no host synchronization).
        RuntimeError: a weight that requires grad with class-index targets (as torch), not on CUDA; a gradient
            taken with ``create_graph=True`` on logits that require grad (no double backward).

    Under a torch.func transform (vmap, grad, jvp, jacrev, hessian) or forward-mode AD (a dual level) the fused
    launch, which forms the gradient in the forward, gives way to :mod:`.composite`: tritred's ``log_softmax`` in
    fp32 (fp64) and torch's loss formulas, which those transforms batch and differentiate (logged at debug level).

    NaN and inf as torch: a sample whose logits hold NaN or +inf, or are all -inf, has a NaN loss and gradient
    (unless ignored: its loss is then 0 and its gradient 0, NaN only where torch's is); ``0 * inf`` products (a
    zero weight or probability at a -inf logit) make the loss NaN.
    """
    if _compiling():
        return _cross_entropy_compiled(input, target, weight, size_average, ignore_index, reduce, reduction,
                                       label_smoothing)
    red = reduction_enum(reduction, size_average, reduce)
    index, smoothing = scalars(ignore_index, label_smoothing)
    if rt.grad_needed(input, target, weight):
        if torch._C._are_functorch_transforms_active() or forward_ad._current_level >= 0:
            return composite.cross_entropy(input, target, weight, index, red, smoothing)
        return rt.apply_function(autograd.CrossEntropyFunction, input, target, weight, index, red, smoothing)  # type: ignore[no-any-return]
    return forward(SPEC, input, target, weight, index, red, smoothing, False, False)[0]
