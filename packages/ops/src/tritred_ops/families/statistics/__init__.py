"""var, std, var_mean, std_mean: one-sweep statistics, Welford lanes merged by Chan's formula.

Rows short enough for registers take the corrected two-pass algorithm in one tile; longer ones a per-lane
Welford loop merged once (Chan et al. 1979). Either way the input is read once and E[x^2] - E[x]^2 is never
formed, so rows with a large mean keep their precision. Kernels in :mod:`.kernels`, the host path in
:mod:`.launch`, the launch rules in :mod:`.rules`; autograd and the registered ops ``torch.ops.tritred.*`` in
:mod:`.autograd` (under ``torch.compile``, or when the input requires grad; else the launcher directly), the
gradients in :mod:`.backward`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ... import runtime as rt
from .autograd import stats_autograd
from .launch import stats_call
from .specs import SPECS

#: (bound once: a call's test costs one global lookup; dynamo folds it to True while tracing)
_compiling = torch.compiler.is_compiling

_ARGS_DOC = """
    Args:
        input: floating tensor (float16, bfloat16, float32, float64) of any shape and strides.
        dim: int, tuple of ints, or None (all dims). ``var(input, True)`` is torch's legacy ``unbiased`` form.
        unbiased: legacy alias: True is ``correction=1``, False ``correction=0``.
        keepdim: keep reduced dims with size 1.
        correction: the divisor is ``max(N - correction, 0)`` (default 1, Bessel). A divisor of 0 gives inf
            (or NaN when the deviations are 0), as torch does.

    Raises:
        RuntimeError: integer/bool input, repeated dim, tensor not on CUDA (outside the interpreter).
        TypeError: both ``unbiased`` and ``correction``, or an ``unbiased`` that is not a bool.
        IndexError: dim out of range.
        NotImplementedError: complex input.

    Gradient (torch's ``var_backward``, ``std_backward``, ``var_mean_backward``, ``std_mean_backward``):
        ``2 / (N - correction) * grad * (input - mean)`` (std: ``grad / (2 std)`` first, 0 where std is 0;
        ``_mean``: plus the mean's gradient ``grad_mean / N``), in float32 for float16/bfloat16 inputs, rounded
        once. As torch: with ``dim=None``, ``N - correction <= 0`` gives ``grad * (NaN where input == mean, else
        inf)``; with a dim list the factor is ``2 / (N - correction)`` as is (inf at 0, negative below), and
        ``dim=()`` counts N = 1.

    Algorithm: chunked two-pass in registers merged by Chan et al. (1979) (Welford 1962's pairwise form);
    fp32 accumulation for fp16/bf16; deterministic split for few outputs; over two reduced axes (dim (0, 2, 3)
    of NCHW) one partial per inner row, merged per output in a fixed order, without copying the input.
"""


def var(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Variance over ``dim`` — mirrors :func:`torch.var`. Returns a tensor of the kept shape in the input dtype.
    """
    if _compiling() or rt.grad_needed(input):
        return stats_autograd("var", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["var"], input, dim, unbiased, keepdim, correction)[0]


def std(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Standard deviation (sqrt of :func:`var`) — mirrors :func:`torch.std`."""
    if _compiling() or rt.grad_needed(input):
        return stats_autograd("std", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["std"], input, dim, unbiased, keepdim, correction)[0]


def var_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(variance, mean) in one sweep — mirrors :func:`torch.var_mean`; both in the input dtype."""
    if _compiling() or rt.grad_needed(input):
        return stats_autograd("var_mean", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["var_mean"], input, dim, unbiased, keepdim, correction)


def std_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(standard deviation, mean) in one sweep — mirrors :func:`torch.std_mean`."""
    if _compiling() or rt.grad_needed(input):
        return stats_autograd("std_mean", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["std_mean"], input, dim, unbiased, keepdim, correction)


for _f in (var, std, var_mean, std_mean):
    _f.__doc__ = (_f.__doc__ or "") + _ARGS_DOC
