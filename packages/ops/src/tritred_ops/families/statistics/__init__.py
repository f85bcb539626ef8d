"""var, std, var_mean, std_mean: one-sweep statistics, Welford lanes merged by Chan's formula.

Rows short enough for registers take the corrected two-pass algorithm in one tile; longer ones a per-lane
Welford loop merged once (Chan et al. 1979). Either way the input is read once and E[x^2] - E[x]^2 is never
formed, so rows with a large mean keep their precision. Kernels in :mod:`.kernels`, the host path in
:mod:`.launch`, the launch rules in :mod:`.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tritred_core import ReductionSpec

from .launch import stats_call

#: What the kernels take: a tail tile and a few threads a row on the row single pass, persistent row grids.
SPECS = {
    name: ReductionSpec(name=name, family="statistics", outputs=outputs, mirrors=f"torch.{name}", summary=summary,
                        strategies=("single_pass", "multi_pass", "split"),
                        knobs=("BLOCK_TAIL", "threads_per_row", "num_programs"))
    for name, outputs, summary in (
        ("var", ("var",), "variance with Bessel-style correction"),
        ("std", ("std",), "standard deviation with correction"),
        ("var_mean", ("var", "mean"), "(variance, mean) in one sweep"),
        ("std_mean", ("std", "mean"), "(standard deviation, mean) in one sweep"),
    )
}


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

    Algorithm: chunked two-pass in registers merged by Chan et al. (1979) (Welford 1962's pairwise form);
    fp32 accumulation for fp16/bf16; deterministic split for few outputs; over two reduced axes (dim (0, 2, 3)
    of NCHW) one partial per inner row, merged per output in a fixed order, without copying the input.
"""


def var(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Variance over ``dim`` — mirrors :func:`torch.var`. Returns a tensor of the kept shape in the input dtype.
    """
    return stats_call(SPECS["var"], input, dim, unbiased, keepdim, correction)[0]


def std(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> torch.Tensor:
    """Standard deviation (sqrt of :func:`var`) — mirrors :func:`torch.std`."""
    return stats_call(SPECS["std"], input, dim, unbiased, keepdim, correction)[0]


def var_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(variance, mean) in one sweep — mirrors :func:`torch.var_mean`; both in the input dtype."""
    return stats_call(SPECS["var_mean"], input, dim, unbiased, keepdim, correction)


def std_mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, unbiased: bool | None = None,
             keepdim: bool = False, *, correction: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(standard deviation, mean) in one sweep — mirrors :func:`torch.std_mean`."""
    return stats_call(SPECS["std_mean"], input, dim, unbiased, keepdim, correction)


for _f in (var, std, var_mean, std_mean):
    _f.__doc__ = (_f.__doc__ or "") + _ARGS_DOC
