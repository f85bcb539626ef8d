"""layer_norm: normalize each row over the trailing ``normalized_shape`` dims, then scale and shift (``y = (x -
mean) * rstd * weight + bias``, ``rstd = 1 / sqrt(var + eps)``, the biased variance, as torch).

The kernels and their strategies in :mod:`.kernels` (single pass, two sweeps, split rows), the host path in
:mod:`.launch`, the launch rules in :mod:`.rules` (forward and backward), the backward kernels in
:mod:`.backward_kernels` and their host path in :mod:`.backward` (shared with rms_norm), the autograd Function and
the registered torch ops in :mod:`.autograd`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tritred_core import ReductionSpec

from ...runtime import apply_function, compiles_to, grad_needed, replayed
from .launch import layer_norm_call

#: ``split_rows``: rows held by several programs meeting at a barrier (one read); the built-in choice for long rows
#: fewer than the SMs (``rules.few_rows``), else a plugin's or ``tritred tune``'s. A tail tile and a few threads a row
#: on the single pass; persistent row grids.
SPEC = ReductionSpec(name="layer_norm", family="normalize", outputs=("out",),
                     mirrors="torch.nn.functional.layer_norm",
                     summary="(x - mean) * rstd * weight + bias over the trailing normalized_shape dims",
                     strategies=("single_pass", "multi_pass", "split_rows"),
                     knobs=("BLOCK_TAIL", "threads_per_row", "num_programs"))

SPECS = {"layer_norm": SPEC}

from . import autograd as _autograd  # noqa: E402  (registers torch.ops.tritred.layer_norm*; reads SPEC)

# (bound once: under torch.compile each attribute read of a public function's branch is a dynamo guard, evaluated
# on every call of the compiled code, CUDA graph replays included)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred


def _layer_norm_with_stats_compiled(input: torch.Tensor, normalized_shape: Sequence[int],
                                    weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                                    eps: float = 1e-5, store_stats: bool = True,
                                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """layer_norm_with_stats as torch.compile traces it (``compiles_to``): the registered ``tritred::layer_norm``."""
    y, mean, rstd = _ops.layer_norm(input, _autograd._shape(normalized_shape), weight, bias, float(eps))
    return (y, mean, rstd) if store_stats else (y, None, None)


@compiles_to(_layer_norm_with_stats_compiled)
def layer_norm_with_stats(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, eps: float = 1e-5, store_stats: bool = True,
                          ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """:func:`layer_norm` that also returns the per-row mean and rstd — mirrors the forward of
    ``torch.native_layer_norm``.

    Args:
        input, normalized_shape, weight, bias, eps: as :func:`layer_norm`.
        store_stats: False returns None for mean and rstd (without autograd, the kernels then do not write
            them).

    Returns:
        ``(out, mean, rstd)``: ``out`` as :func:`layer_norm` returns it (contiguous, the input's shape and
        dtype); ``mean`` and ``rstd = 1 / sqrt(var + eps)`` (the biased variance) per row, float32 (float64 for
        float64 inputs) as torch's ``native_layer_norm``, shaped like the leading (non-normalized) dims, e.g.
        (32,) for a (32, 1024) input, where torch's keeps the normalized dims as size 1. Rows of no elements get
        mean 0 and rstd NaN, as torch. ``store_stats=False``: ``(out, None, None)``.

    Autograd: differentiable in ``out`` (input, weight and bias, as :func:`layer_norm`); ``mean`` and ``rstd``
    are not.

    Raises:
        As :func:`layer_norm`: RuntimeError for an input shape not ending in ``normalized_shape``, weight/bias
        of the wrong shape or dtype, tensors on different devices, or a tensor that is neither on CUDA nor on
        the CPU under the Triton interpreter; TypeError for a tensor argument that is not a Tensor or a
        ``normalized_shape`` element that is not an int; NotImplementedError for a non-floating input.
    """
    if _compiling():
        return _layer_norm_with_stats_compiled(input, normalized_shape, weight, bias, eps, store_stats)
    if not grad_needed(input, weight, bias):
        return layer_norm_call(SPEC, input, normalized_shape, weight, bias, eps, store_stats)
    y, mean, rstd = apply_function(_autograd.LayerNormFunction, input, normalized_shape, weight, bias, eps)
    return (y, mean, rstd) if store_stats else (y, None, None)


def _layer_norm_compiled(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
                         bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """layer_norm as torch.compile traces it (``compiles_to``): the registered ``tritred::layer_norm``'s output."""
    return _ops.layer_norm(input, _autograd._shape(normalized_shape), weight, bias, float(eps))[0]


@compiles_to(_layer_norm_compiled)
def layer_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalization — mirrors :func:`torch.nn.functional.layer_norm` (Ba, Kiros & Hinton 2016).

    Args:
        input: floating tensor ``[*, *normalized_shape]`` of any strides (float16/bfloat16/float32/float64).
        normalized_shape: the trailing dims to normalize over (int or sequence).
        weight, bias: optional tensors of shape ``normalized_shape``, of the input's dtype and device.
        eps: added to the biased variance inside the square root.

    Returns:
        Contiguous tensor of the input's shape and dtype (as torch's): ``(x - mean) / sqrt(var + eps) * weight +
        bias``, statistics in fp32 (fp64 for fp64 inputs).

    Autograd: differentiable in input, weight and bias (torch's formulas; gradients in fp32, fp64 for fp64
    inputs, rounded once). Three paths: under ``torch.compile`` the registered op ``torch.ops.tritred.layer_norm``
    (fake implementation and autograd registered: no graph break); in eager with a tensor that requires grad
    (grad mode on) an autograd.Function; otherwise the inference path, with no autograd boundary. The backward
    (``torch.ops.tritred.layer_norm_backward``) reads x and dy once and writes dx once per row when the row fits
    a program's registers (two sweeps otherwise); dw and db are per-program fp32 partials summed in a fixed
    order: deterministic, no atomics.

    Raises:
        RuntimeError: input shape not ending in ``normalized_shape`` (or an empty ``normalized_shape``),
            weight/bias of the wrong shape, of a non-floating dtype, or of another dtype than the input (as
            torch's CUDA kernel), tensors on different devices, or a tensor that is neither on CUDA nor on the
            CPU under the Triton interpreter (``TRITON_INTERPRET=1`` set before importing tritred_ops).
        TypeError: a tensor argument that is not a Tensor; a ``normalized_shape`` element that is not an int
            (floats and bools raise, as in torch).
        NotImplementedError: a non-floating input (as torch).
    """
    if _compiling():
        return _layer_norm_compiled(input, normalized_shape, weight, bias, eps)
    if (saved := replayed("layer_norm", (normalized_shape, eps, False), input, weight, bias)) is not None:
        return saved[0]  # a repeated inference call
    if grad_needed(input, weight, bias):
        return apply_function(_autograd.LayerNormFunction, input, normalized_shape, weight, bias, eps)[0]
    return layer_norm_call(SPEC, input, normalized_shape, weight, bias, eps, False)[0]
