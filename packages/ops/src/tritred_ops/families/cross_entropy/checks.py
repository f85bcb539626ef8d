"""cross_entropy's argument checks, in torch's order and with torch's exceptions and messages (aten's
``cross_entropy_loss``, ``nll_loss_nd``, ``nll_loss`` and ``nll_loss2d`` checks, CPU wording), each message prefixed
with the op's name. They read shapes and dtypes only, so that the registered op's fake implementation runs them
too (``torch.compile`` then raises them while tracing); the targets' values are checked by :func:`target_values`
(CPU) or on the device (``kernels._targets_check_kernel``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import torch

from ... import runtime as rt

NAME = "cross_entropy"
#: torch's reduction enum (``torch.nn._reduction.get_enum``), which the registered op takes.
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


class Call(NamedTuple):
    """What the checks found: probability targets or class indices, the class dim and count, the loss's shape
    and dtype, the accumulation dtype, and the rows (the input's elements over C)."""

    prob: bool
    class_dim: int
    C: int
    loss_shape: tuple[int, ...]
    loss_dtype: torch.dtype
    acc: torch.dtype
    rows: int


def _fail(kind: type[Exception], message: str) -> Exception:
    return kind(f"{NAME}(): {message}")


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def reduction_enum(reduction: Any, size_average: Any = None, reduce: Any = None) -> int:
    """torch's reduction enum of ``reduction`` (or of the legacy ``size_average``/``reduce`` pair, with torch's
    deprecation warning, in eager calls only); ValueError, as torch's, for another value."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        reduction = "none" if not reduce else ("mean" if size_average else "sum")
        if not torch.compiler.is_compiling():  # (dynamo cannot trace warnings.warn: fullgraph would fail on it)
            warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{reduction}' "
                          "instead.", stacklevel=3)
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise _fail(ValueError, f"{reduction} is not a valid value for reduction")
    return REDUCTIONS[reduction]


def scalars(ignore_index: Any, label_smoothing: Any) -> tuple[int, float]:
    """``ignore_index`` as an int and ``label_smoothing`` as a float (:func:`~tritred_ops.runtime.float_arg`: a 0-d
    tensor, a bool or a numpy scalar is taken, as torch's argument parser takes them); TypeError naming the
    argument otherwise."""
    index = rt.as_index(ignore_index)
    if index is None:
        raise _fail(TypeError, f"argument 'ignore_index' must be int, not {type(ignore_index).__name__}")
    return index, rt.float_arg(NAME, "label_smoothing", 6, label_smoothing)


def check(x: Any, target: Any, weight: Any, ignore_index: int, reduction: int, label_smoothing: float) -> Call:
    """Check a call as torch does; returns its :class:`Call`."""
    for pos, (name, t) in enumerate((("input", x), ("target", target)), 1):
        if not isinstance(t, torch.Tensor):
            raise _fail(TypeError, f"argument '{name}' (position {pos}) must be Tensor, not {type(t).__name__}")
    if weight is not None and not isinstance(weight, torch.Tensor):
        raise _fail(TypeError, f"argument 'weight' (position 3) must be Tensor, not {type(weight).__name__}")
    if x.dtype not in rt.FLOATS:
        raise _fail(NotImplementedError, f"not implemented for '{x.dtype}' input (floating dtypes only)")
    rt.check_same_device(NAME, x, target=target, weight=weight)
    if x.dim() == 0:
        raise _fail(IndexError, "Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    class_dim = 0 if x.dim() == 1 else 1
    C = x.shape[class_dim]
    rows = math.prod(x.shape) // C if C else math.prod(s for i, s in enumerate(x.shape) if i != class_dim)
    kept = tuple(s for i, s in enumerate(x.shape) if i != class_dim)
    if x.shape == target.shape:
        return _prob(x, target, weight, ignore_index, reduction, label_smoothing, class_dim, C, kept, rows)
    if label_smoothing > 0.0 and label_smoothing > 1.0:
        raise _fail(RuntimeError, f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing:g}")
    _class_shapes(x, target, weight)
    if weight is not None and weight.dtype != x.dtype:
        raise _fail(RuntimeError, f"expected scalar type {_scalar_name(x.dtype)} but found "
                                  f"{_scalar_name(weight.dtype)}")
    if x.dim() <= 2:
        if target.dtype not in (torch.int64, torch.uint8):
            raise _fail(RuntimeError, f"expected target dtype to be Long or Byte, but got "
                                      f"{_scalar_name(target.dtype)}")
    elif target.dtype != torch.int64:
        raise _fail(RuntimeError, f"expected scalar type Long but found {_scalar_name(target.dtype)}")
    loss_shape = () if reduction != 0 or x.dim() == 1 else tuple(target.shape)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return Call(False, class_dim, C, loss_shape, x.dtype, acc, rows)


def _prob(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, reduction: int,
          label_smoothing: float, class_dim: int, C: int, kept: tuple[int, ...], rows: int) -> Call:
    """Class probabilities (the target has the input's shape): aten's ``cross_entropy_loss_prob_target``."""
    if not target.dtype.is_floating_point:
        raise _fail(RuntimeError, f"Expected floating point type for target with class probabilities, got "
                                  f"{_scalar_name(target.dtype)}")
    if target.dtype not in rt.FLOATS:
        raise _fail(NotImplementedError, f"not implemented for '{target.dtype}' target (floating dtypes only)")
    if ignore_index >= 0:
        raise _fail(RuntimeError, "ignore_index is not supported for floating point target")
    if weight is not None and (weight.dim() != 1 or weight.numel() != C):
        raise _fail(RuntimeError, f"cross_entropy: weight tensor should be defined either for all {C} classes or no "
                                  f"classes but got weight tensor of shape: {_shape(weight)}")
    if weight is not None and weight.dtype not in rt.FLOATS:
        raise _fail(RuntimeError, f"weight dtype must be floating, got {weight.dtype}")
    if label_smoothing > 0.0 and label_smoothing > 1.0:
        raise _fail(RuntimeError, f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing:g}")
    dtype = torch.promote_types(x.dtype, target.dtype)
    if weight is not None:
        dtype = torch.promote_types(dtype, weight.dtype)
    acc = torch.float64 if torch.float64 in (x.dtype, target.dtype, weight.dtype if weight is not None else None) \
        else torch.float32
    return Call(True, class_dim, C, kept if reduction == 0 else (), dtype, acc, rows)


def _class_shapes(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None) -> None:
    """Shapes of class-index targets: aten's ``nll_loss_nd`` (batch), ``nll_loss`` (1-2 dims: target of at most one
    dim), ``nll_loss2d`` (4 dims: a 3-dim target of the same sizes), the others (target of the input's sizes
    without the class dim); and the weight (C elements)."""
    if x.dim() != 1:
        batch = target.shape[0] if target.dim() else 0
        if x.shape[0] != batch:
            raise _fail(ValueError, f"Expected input batch_size ({x.shape[0]}) to match target batch_size ({batch}).")
    C = x.shape[0 if x.dim() == 1 else 1]
    if x.dim() <= 2:
        if target.dim() > 1:
            raise _fail(RuntimeError, "0D or 1D target tensor expected, multi-target not supported")
        if x.dim() == 1 and target.dim() == 1 and target.shape[0] != 1:
            raise _fail(RuntimeError, f"size mismatch (got input: {_shape(x)}, target: {_shape(target)})")
    elif x.dim() == 4:
        if target.dim() != 3:
            raise _fail(RuntimeError, f"only batches of spatial targets supported (3D tensors) but got targets of "
                                      f"dimension: {target.dim()}")
        if tuple(target.shape) != (x.shape[0], x.shape[2], x.shape[3]):
            raise _fail(RuntimeError, f"size mismatch (got input: {_shape(x)} , target: {_shape(target)}")
    elif tuple(target.shape[1:]) != tuple(x.shape[2:]):
        want = "[" + ", ".join(str(s) for s in (x.shape[0], *x.shape[2:])) + "]"
        raise _fail(RuntimeError, f"Expected target size {want}, got {_shape(target)}")
    if weight is not None and (weight.dim() != 1 or weight.numel() != C):
        raise _fail(RuntimeError, f"weight tensor should be defined either for all {C} classes or no classes but got "
                                  f"weight tensor of shape: {_shape(weight)}")


def _scalar_name(dtype: torch.dtype) -> str:
    """c10's name of a dtype in torch's messages (``Float``, ``Long``, ``BFloat16``)."""
    names = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}
    return names.get(dtype) or rt.SCALAR_TYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def target_values(target: torch.Tensor, C: int, ignore_index: int) -> None:
    """IndexError, as torch's CPU kernels raise it, for a class index outside [0, C) that is not ``ignore_index``
    (the first one in the target's order). Reads the values: CPU tensors, and inputs of no classes on CUDA (there
    no kernel runs; with classes the targets are checked on the device, without a host synchronization)."""
    bad = (target != ignore_index) & ((target < 0) | (target >= C))
    if bool(bad.any()):
        value = int(target[bad].reshape(-1)[0])
        raise _fail(IndexError, f"Target {value} is out of bounds.")


def no_weight_grad(prob: bool, weight_grad: bool) -> None:
    """RuntimeError, as torch's, for class-index targets with a weight whose gradient is asked (``nll_loss`` is not
    differentiable with respect to it); probability targets take it."""
    if not prob and weight_grad:
        raise _fail(RuntimeError, "the function is not differentiable with respect to argument 'weight'. This input "
                                  "cannot have requires_grad True.")
