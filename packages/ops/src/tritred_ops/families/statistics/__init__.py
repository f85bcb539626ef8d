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
from typing import Any

import torch

from ... import runtime as rt
from ...runtime import UNSET, Unset
from .autograd import stats_autograd
from .launch import parse_correction, stats_call
from .specs import SPECS

#: (bound once: a call's test costs one global lookup; dynamo folds it to True while tracing)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred

_ARGS_DOC = """

    Args:
        input: floating tensor (float16, bfloat16, float32, float64) of any shape and strides, on CUDA (or on
            the CPU under ``TRITON_INTERPRET=1``).
        dim: int, tuple or list of ints, or None (all dims; ``()`` too, as torch). ``{name}(input, True)``, a
            bool in dim's place, is torch's legacy ``unbiased`` form over all dims.
        unbiased: legacy alias: True is ``correction=1``, False ``correction=0`` (not given: neither).
        keepdim: keep reduced dims with size 1.
        correction: a number, or a 0-d tensor that does not require grad (as torch); the divisor is
            ``max(N - correction, 0)`` (default 1, Bessel). A divisor of 0 gives inf (or NaN when the deviations
            are 0), as torch does.

    Returns:
{returns}

    Raises:
        RuntimeError: integer or bool input, a repeated dim, or a tensor that is neither on CUDA nor on the CPU
            under the Triton interpreter (``TRITON_INTERPRET=1`` set before importing tritred_ops).
        TypeError: an input that is not a Tensor; both ``unbiased`` and ``correction``; an ``unbiased`` that is
            not a bool (``None`` included); a ``correction`` that is not a number; a ``keepdim`` that is not a
            bool; a dim that is not an int or a sequence of ints (or whose first element is a bool).
        IndexError: dim out of range.
        NotImplementedError: complex input.

    Warns:
        UserWarning: ``N - correction <= 0`` ("degrees of freedom is <= 0", as torch), at the caller's line.

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


def _stats_compiled(name: str, op: Any, input: torch.Tensor, dim: Any, unbiased: bool | Unset, keepdim: bool,
                    correction: float | None) -> Any:
    """A statistic as torch.compile traces it (the four ops' compiled forms, ``rt.compiles_to``): ``op``, the
    registered ``torch.ops.tritred.<name>``, gives the statistic, or (statistic, mean) for var_mean/std_mean."""
    if keepdim is not False and keepdim is not True:  # (the op's bool argument would take 0, 1 or None)
        rt.check_keepdim(name, keepdim)
    if correction is None and unbiased is UNSET and type(dim) is int:  # (the default form first: fewer guards)
        return op(input, [dim], 1.0, keepdim)
    dim, corr = parse_correction(name, dim, unbiased, correction)
    return op(input, rt.dim_list(name, dim), corr, keepdim)


def _var_compiled(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
                  keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """var as torch.compile traces it (``rt.compiles_to``): the registered ``tritred::var``."""
    return _stats_compiled("var", _ops.var, input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]


@rt.compiles_to(_var_compiled)
def var(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Variance over ``dim`` — mirrors :func:`torch.var`."""
    if _compiling():
        return _var_compiled(input, dim, unbiased, keepdim, correction=correction)
    if (saved := rt.replayed("var", (dim, unbiased, keepdim, correction), input)) is not None:
        return saved[0]  # a repeated inference call
    if rt.grad_needed(input):
        return stats_autograd("var", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["var"], input, dim, unbiased, keepdim, correction)[0]


def _std_compiled(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
                  keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """std as torch.compile traces it (``rt.compiles_to``): the registered ``tritred::std``."""
    return _stats_compiled("std", _ops.std, input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]


@rt.compiles_to(_std_compiled)
def std(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Standard deviation over ``dim`` — mirrors :func:`torch.std`."""
    if _compiling():
        return _std_compiled(input, dim, unbiased, keepdim, correction=correction)
    if (saved := rt.replayed("std", (dim, unbiased, keepdim, correction), input)) is not None:
        return saved[0]  # a repeated inference call
    if rt.grad_needed(input):
        return stats_autograd("std", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["std"], input, dim, unbiased, keepdim, correction)[0]


def _var_mean_compiled(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
                       keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """var_mean as torch.compile traces it (``rt.compiles_to``): the registered ``tritred::var_mean``."""
    return _stats_compiled("var_mean", _ops.var_mean, input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]


@rt.compiles_to(_var_mean_compiled)
def var_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Variance and mean over ``dim`` in one sweep — mirrors :func:`torch.var_mean`."""
    if _compiling():
        return _var_mean_compiled(input, dim, unbiased, keepdim, correction=correction)
    if (saved := rt.replayed("var_mean", (dim, unbiased, keepdim, correction), input)) is not None:
        return saved[0], saved[-1]  # a repeated inference call
    if rt.grad_needed(input):
        return stats_autograd("var_mean", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["var_mean"], input, dim, unbiased, keepdim, correction)


def _std_mean_compiled(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
                       keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """std_mean as torch.compile traces it (``rt.compiles_to``): the registered ``tritred::std_mean``."""
    return _stats_compiled("std_mean", _ops.std_mean, input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]


@rt.compiles_to(_std_mean_compiled)
def std_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | Unset = UNSET,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Standard deviation and mean over ``dim`` in one sweep — mirrors :func:`torch.std_mean`."""
    if _compiling():
        return _std_mean_compiled(input, dim, unbiased, keepdim, correction=correction)
    if (saved := rt.replayed("std_mean", (dim, unbiased, keepdim, correction), input)) is not None:
        return saved[0], saved[-1]  # a repeated inference call
    if rt.grad_needed(input):
        return stats_autograd("std_mean", input, dim, unbiased, keepdim, correction)  # type: ignore[no-any-return]
    return stats_call(SPECS["std_mean"], input, dim, unbiased, keepdim, correction)


#: Each function's Returns section (``{returns}`` in :data:`_ARGS_DOC`).
_RETURNS = {
    "var": """
        Tensor of the kept shape (reduced dims dropped, or size 1 with ``keepdim``) in the input's dtype:
        ``sum((input - mean)^2) / max(N - correction, 0)`` over the N reduced elements; NaN where N is 0.""",
    "std": """
        Tensor of the kept shape (reduced dims dropped, or size 1 with ``keepdim``) in the input's dtype:
        ``sqrt(sum((input - mean)^2) / max(N - correction, 0))`` over the N reduced elements (the square root of
        :func:`var`'s result, taken in the same kernel); NaN where N is 0.""",
    "var_mean": """
        The tuple ``(var, mean)``, in torch's order: two tensors of the kept shape (reduced dims dropped, or
        size 1 with ``keepdim``), both in the input's dtype. ``var`` as :func:`var` computes it; ``mean`` the
        mean of the reduced elements (``correction`` does not affect it). Both NaN where N is 0.""",
    "std_mean": """
        The tuple ``(std, mean)``, in torch's order: two tensors of the kept shape (reduced dims dropped, or
        size 1 with ``keepdim``), both in the input's dtype. ``std`` as :func:`std` computes it; ``mean`` the
        mean of the reduced elements (``correction`` does not affect it). Both NaN where N is 0.""",
}

for _f in (var, std, var_mean, std_mean):
    _f.__doc__ = (_f.__doc__ or "") + _ARGS_DOC.format(name=_f.__name__, returns=_RETURNS[_f.__name__].lstrip("\n"))
