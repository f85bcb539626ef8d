"""sum, mean, prod, amax, amin, max, min: plain and arg (value + index) reductions.

Two kernel shapes serve every op of this family (:mod:`.kernels`, :mod:`.arg_kernels`): rows, where the reduced
axis is the fast one, and columns, where a kept axis is. Few outputs of long rows split N over several programs,
whose partials merge in a fixed order (deterministic). The host path (:mod:`.launch`) views the call's tensors as
M x N x K, decides the launch (:mod:`.rules` and any plugin) and launches; max and min with ``dim`` return
``torch.return_types.max`` / ``min``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tritred_core import Knob, ReductionSpec, Strategy

from ... import runtime as rt
from ...kernels.combine import MAX, MIN, PROD, SUM
from ...runtime import UNSET, Unset
from .launch import arg_call, reduce_call

#: What the kernels take. The plain reductions: a tail tile on their row single pass, persistent row grids. max and
#: min with indices: neither (their row and column kernels hold a row in one tile, one program per row block).
_STRATEGIES: tuple[Strategy, ...] = ("single_pass", "multi_pass", "split")
_PLAIN: tuple[Knob, ...] = ("BLOCK_TAIL", "num_programs")

SPECS = {
    "sum": ReductionSpec(name="sum", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.sum",
                         summary="sum over dims (integer and bool inputs sum into int64)",
                         strategies=_STRATEGIES, knobs=_PLAIN),
    "mean": ReductionSpec(name="mean", family="reduce", mirrors="torch.mean", summary="arithmetic mean over dims",
                          strategies=_STRATEGIES, knobs=_PLAIN),
    "prod": ReductionSpec(name="prod", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.prod",
                          summary="product over dims", strategies=_STRATEGIES, knobs=_PLAIN),
    "amax": ReductionSpec(name="amax", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.amax",
                          summary="maximum over dims (NaN propagates)", strategies=_STRATEGIES, knobs=_PLAIN),
    "amin": ReductionSpec(name="amin", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.amin",
                          summary="minimum over dims (NaN propagates)", strategies=_STRATEGIES, knobs=_PLAIN),
    "max": ReductionSpec(name="max", family="reduce", dtypes=rt.ALL_DTYPES, outputs=("values", "indices"),
                         mirrors="torch.max", summary="max, or (values, indices) of the first max along dim",
                         strategies=_STRATEGIES, knobs=()),
    "min": ReductionSpec(name="min", family="reduce", dtypes=rt.ALL_DTYPES, outputs=("values", "indices"),
                         mirrors="torch.min", summary="min, or (values, indices) of the first min along dim",
                         strategies=_STRATEGIES, knobs=()),
}


def sum(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
        dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum of ``input`` over ``dim`` — mirrors :func:`torch.sum`.

    Args:
        input: tensor of any shape and strides; float16/bfloat16/float32/float64, integer or bool, on CUDA (or
            CPU under ``TRITON_INTERPRET=1``).
        dim: int, tuple of ints, or None (all dims; ``()`` also means all dims, as in torch).
        keepdim: keep reduced dims with size 1.
        dtype: convert the input to this dtype before summing (and return it).

    Returns:
        Tensor of the kept shape; dtype: ``dtype``, else int64 for integer/bool inputs, else the input's.
        fp16/bf16 accumulate in fp32. Empty reductions return 0.

    Raises:
        TypeError: ``input`` not a Tensor, bad ``dim`` type. IndexError: dim out of range.
        RuntimeError: repeated dim, tensor not on CUDA (outside the interpreter).
        NotImplementedError: unsupported dtype (complex).

    Algorithm: strided tile sweep with an fp32 accumulator; deterministic two-stage split for few outputs.
    """
    return reduce_call(SPECS["sum"], SUM, input, dim, keepdim, dtype)


def mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Arithmetic mean over ``dim`` — mirrors :func:`torch.mean`.

    Shapes and arguments as :func:`sum`. Floating inputs only (or ``dtype=`` a floating dtype): integer inputs
    raise RuntimeError like torch. An empty reduction returns NaN. Sum accumulated in fp32 (fp64 for fp64),
    then divided by the number of reduced elements.
    """
    return reduce_call(SPECS["mean"], SUM, input, dim, keepdim, dtype)


def prod(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool = False, *,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Product over ``dim`` — mirrors :func:`torch.prod` (which takes one int dim or None).

    Shapes/dtypes as :func:`sum` (integer and bool products are int64 and wrap around like torch's); an empty
    reduction returns 1. Raises as :func:`sum`.
    """
    if dim is UNSET:
        if keepdim is not False:
            raise TypeError("prod(): keepdim needs an int dim")
        return reduce_call(SPECS["prod"], PROD, input, None, False, dtype)
    if dim is None and rt.torch_accepts("prod(x, None)",
                                       lambda: torch.prod(torch.empty(2, device="meta"), None)):  # type: ignore[call-overload]
        return reduce_call(SPECS["prod"], PROD, input, None, keepdim, dtype)
    if rt.as_index(dim) is None:
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    return reduce_call(SPECS["prod"], PROD, input, dim, keepdim, dtype)  # type: ignore[arg-type]


def amax(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim`` (``()``: all dims) — mirrors :func:`torch.amax`.

    Output dtype = input dtype. NaN propagates (any NaN in a slice gives NaN). Raises IndexError when a reduced
    dim has size 0, RuntimeError for an empty input without ``dim``, plus the errors of :func:`sum`.
    """
    return reduce_call(SPECS["amax"], MAX, input, dim, keepdim, None)


def amin(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Minimum over ``dim`` — mirrors :func:`torch.amin`; see :func:`amax`."""
    return reduce_call(SPECS["amin"], MIN, input, dim, keepdim, None)


def max(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool | Unset = UNSET) -> Any:
    """Maximum — mirrors :func:`torch.max` (the reduction overloads).

    ``max(input)`` returns a 0-d tensor (NaN if any element is NaN; RuntimeError on an empty input).
    ``max(input, dim, keepdim=False)`` returns ``torch.return_types.max(values, indices)``: values in the input dtype,
    int64 indices of the first maximal element along ``dim`` (the first NaN when the slice has one).

    Raises IndexError (dim out of range, or reducing a dim of size 0), TypeError (``dim=None``, a non-int dim, or
    keepdim without dim, as torch), NotImplementedError (complex).
    Split strategy: per-slice (value, index) partials combined in index order: ties stay first-occurrence.
    """
    return arg_call(SPECS["max"], input, dim, keepdim)


def min(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool | Unset = UNSET) -> Any:
    """Minimum — mirrors :func:`torch.min`; see :func:`max`."""
    return arg_call(SPECS["min"], input, dim, keepdim)
