"""rms_norm: scale each row by the reciprocal root mean square over the trailing ``normalized_shape`` dims, then by
the weight (Zhang & Sennrich 2019, "Root Mean Square Layer Normalization").

``single_pass``: the row stays in registers (one read, one write); short rows (``threads_per_row``) are held with
each row over a few threads. ``multi_pass``: a sweep sums the squares, a second normalizes (the row's second read
usually hits L2). ``split_rows``: several programs hold a row and meet at a barrier (long rows fewer than the SMs).
The backward is layer_norm's kernel without the mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tritred_core import ReductionSpec

from ...runtime import apply_function, compiles_to, grad_needed, replayed
from .launch import resolve_eps, rms_norm_call

#: ``split_rows``: rows held by several programs meeting at a barrier (one read), for long rows fewer than the SMs.
#: A few threads a row on the single pass; persistent row grids.
SPEC = ReductionSpec(name="rms_norm", family="normalize", outputs=("out",),
                     mirrors="torch.nn.functional.rms_norm",
                     summary="x * rsqrt(mean(x^2) + eps) * weight over the trailing normalized_shape dims",
                     strategies=("single_pass", "multi_pass", "split_rows"), knobs=("threads_per_row", "num_programs"))

SPECS = {"rms_norm": SPEC}

from . import autograd as _autograd  # noqa: E402  (registers torch.ops.tritred.rms_norm*; reads SPEC)

# (bound once: under torch.compile each attribute read of a public function's branch is a dynamo guard, evaluated
# on every call of the compiled code, CUDA graph replays included)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred


def _rms_norm_compiled(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                       eps: float | None = None) -> torch.Tensor:
    """rms_norm as torch.compile traces it (``compiles_to``): the registered ``tritred::rms_norm``'s output."""
    return _ops.rms_norm(input, _autograd.shape_arg(normalized_shape), weight,
                         None if eps is None else resolve_eps(eps, input.dtype))[0]


@compiles_to(_rms_norm_compiled)
def rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """Root mean square layer normalization — mirrors :func:`torch.nn.functional.rms_norm`.

    ``y = x / sqrt(mean(x^2) + eps) * weight``, the mean over the trailing ``normalized_shape`` dims.

    Args:
        input: floating tensor ``[*, *normalized_shape]`` of any strides (float16/bfloat16/float32/float64).
        normalized_shape: the trailing dims to normalize over: a tuple or list of ints (an int is a TypeError, as
            in torch).
        weight: optional tensor of shape ``normalized_shape``, of any real dtype (as torch, which takes a weight of
            another dtype than the input: the product in their promoted dtype, the output in the input's).
        eps: added to the mean square; None (the default): the machine epsilon of the computation's dtype, as
            torch's: ``torch.finfo(torch.float32).eps`` (1.19e-07) for float16, bfloat16 and float32 inputs,
            ``torch.finfo(torch.float64).eps`` for float64 ones (not ``torch.finfo(input.dtype).eps``).

    Returns:
        Contiguous tensor of the input's shape and dtype (as torch's); the mean square and rstd in fp32 (fp64 for
        fp64 inputs), rounded once.

    Raises:
        RuntimeError: an empty ``normalized_shape``, an input shape not ending in it, a weight of another shape,
            tensors on different devices, not on CUDA (outside the interpreter), a complex weight (tritred only).
        ValueError: an input with fewer dims than ``normalized_shape`` (as torch).
        NotImplementedError: a non-float input dtype.
        TypeError: a tensor argument that is not a Tensor; a ``normalized_shape`` that is an int or has an element
            that is not an int; an ``eps`` that is not a number.

    Autograd: differentiable in input and weight, three paths as :func:`tritred_ops.layer_norm` (the registered op
    ``torch.ops.tritred.rms_norm`` under ``torch.compile``, an autograd.Function in eager training, the inference
    path otherwise). Backward: dx = rstd * (w * dy - x_hat * mean(w * dy * x_hat)), dw = sum over rows of
    dy * x_hat, in fp32 (fp64 for fp64 inputs or weights) with per-program partials summed in a fixed order
    (deterministic), rounded once.
    """
    if _compiling():
        return _rms_norm_compiled(input, normalized_shape, weight, eps)
    if (saved := replayed("rms_norm", (normalized_shape, eps, False), input, weight)) is not None:
        return saved[0]  # a repeated inference call
    if grad_needed(input, weight):
        return apply_function(_autograd.RMSNormFunction, input, normalized_shape, weight, eps)[0]
    return rms_norm_call(SPEC, input, normalized_shape, weight, eps, False)[0]
