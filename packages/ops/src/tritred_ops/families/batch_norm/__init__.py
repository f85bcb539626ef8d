"""batch_norm: per-channel statistics over (batch, *spatial), then normalize; training and eval, running stats.

The input ``[B, C, *spatial]`` is viewed as (B, C, S) with its own strides (NCHW, channels-last and sliced
inputs alike; spatial dims that do not merge are gathered, logged). When the batch stride equals S times the
spatial stride (channels-last), batch and spatial merge into one axis.

Training runs two launches, both deterministic:
1. ``_stats_kernel``: programs own BLOCK_K channels and a contiguous range of [BLOCK_M batch, BLOCK_N
   spatial, BLOCK_K channel] tiles (about 8 programs per SM). In a full tile each group of lanes that one
   thread loads as one 16-byte vector gets its two-pass statistics in registers and merges into the group's
   running (mean, M2) (Chan et al. 1979; one scalar division per tile); partial tiles (edges of B and S) take
   the corrected two-pass over the tile; everything merges once at the end, all of it on x less the channel's
   first element (channels far from 0 keep their spread). NCHW tiles run along the spatial axis, channels-last
   along C. With ``num_stages`` > 1 each tile's load is issued one iteration ahead (the built-in choice for
   2-byte planes of several tiles).
2. ``_apply_kernel``: merges each channel's partials in a fixed order into mean and rstd (the first program
   of each channel block also updates ``running_mean``/``running_var`` in place with ``momentum``, the unbiased
   variance, as torch), then ``y = (x - mean) * (rstd * weight) + bias``, in the input's layout, in the mirror
   order of the statistics pass (the tiles it read last, likeliest in L2, first); one tile per program, or
   ``num_programs`` programs looping over their channel block's tiles. In training, after the statistics
   launch, on sm_90+ a programmatic dependent launch (``runtime.dependent_launch``): it starts while the
   statistics' last programs finish and waits for their partials.
When one tile holds a whole channel block (``B * S`` small: 32x2048x7x7), training is one launch: the apply
kernel takes the statistics from its own tile (one read, one write). Eval runs 2 alone, with the running
statistics. Channel blocks of many slices (channels-last: 64 channels, ~260 slices) have their partials merged
once per channel by a finish launch of 2 (no tiles) before the normalize launch reads mean and rstd
(``rules.merge_inline``).

Backward (:mod:`.backward`, torch's ``native_batch_norm_backward``): per-channel sums of dy and dy * (x - mean)
over the same tiles, then dx; autograd in :mod:`.autograd`. The public function takes one of three paths: the
registered op ``torch.ops.tritred.batch_norm`` under ``torch.compile`` (no mutation: it returns the new running
statistics, copied back here), the autograd Function when a tensor argument requires grad, else the launcher
(the replayed fast path). Saved for backward: the input, the weight, the fp32 batch mean and invstd (training) or
the running statistics (eval).

Statistics shared across processes (``tritred_ops.nn.SyncBatchNorm``): :mod:`.sync` exposes the same launches in
pieces (local mean/M2/count, the merge of every process's statistics with the running update in
:mod:`.sync_kernels`, normalize with given statistics, backward sums only, dx from given coefficients), between
which ``tritred_ops.distributed`` runs its collectives.
"""

from __future__ import annotations

import torch

from ...runtime import apply_function, compiles_to, grad_needed, scalar_of
from .autograd import BatchNormFunction
from .launch import batch_norm_call, check_training, empty_batch_norm
from .spec import SPEC

# (bound once: under torch.compile each attribute read of a public function's branch is a dynamo guard, evaluated
# on every call of the compiled code, CUDA graph replays included)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred

SPECS = {"batch_norm": SPEC}


def _batch_norm_compiled(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                         weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
                         momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """batch_norm as torch.compile traces it (``compiles_to``): the registered ``tritred::batch_norm`` (no
    mutation), the new running statistics copied back as torch's update does."""
    if training is not True and training is not False:  # (the op's bool argument would take 0 or 1)
        check_training("batch_norm", training)
    momentum = _momentum(running_mean, running_var, momentum)
    y, _, _, new_mean, new_var = _ops.batch_norm(
        input, running_mean, running_var, weight, bias, training,
        float(momentum) if isinstance(momentum, (int, float)) else momentum, eps)
    if training and running_mean is not None and running_var is not None:
        with torch.no_grad():
            running_mean.copy_(new_mean)
            running_var.copy_(new_var)
    return y  # type: ignore[no-any-return]


@compiles_to(_batch_norm_compiled)
def batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """Batch normalization — mirrors :func:`torch.nn.functional.batch_norm` (Ioffe & Szegedy 2015).

    Args:
        input: floating tensor ``[B, C, *spatial]`` (2-D to 5-D and beyond; NCHW, channels-last or any strides).
        running_mean, running_var: ``[C]`` floating tensors or None. In training they are updated in place:
            ``r = (1 - momentum) * r + momentum * batch_stat`` with the unbiased batch variance. Required in eval.
        weight, bias: optional ``[C]`` affine parameters.
        training: use batch statistics (and update the running ones) instead of the running statistics.
        momentum: float (or a 0-d tensor, as torch) in the update above. eps: added to the variance inside the
            square root.

    Autograd: gradients of input, weight and bias as torch's (training: through the batch statistics; eval: the
    running ones), in their tensors' dtypes, computed in fp32 (fp64 for fp64 inputs); not twice differentiable.
    Under ``torch.compile`` the call is the registered op ``torch.ops.tritred.batch_norm`` (fullgraph-safe).

    Returns:
        Tensor of the input's shape and dtype, in the layout torch gives it on the same device: on the CPU and
        where torch runs cuDNN, contiguous, or channels-last (2-D or 3-D) where the input's strides suggest it (a
        sliced channels-last input included; a permuted input gives a contiguous output); on CUDA where torch
        runs its own kernel (2-D inputs, no weight or bias, bfloat16, cuDNN disabled...), a dense input's own
        strides (``empty_like``). Statistics in fp32 (fp64 for fp64 inputs). An input of no elements
        gives torch's ``input.clone() * weight[0] + bias[0]`` (its dtype promotion and layout; the running
        statistics untouched), with only the argument checks that torch runs before that (the ValueErrors and
        TypeErrors below), as torch's ``batch_norm`` on every device.

    Raises:
        ValueError: training with one value per channel (B * prod(spatial) == 1, a ``(1,)`` input too); eps as the
            installed torch's ``F.batch_norm`` checks it, before any other check: from torch 2.12 eps <= 0 in
            training or eps < 0 in eval, in 2.10-2.11 eps <= 0, before 2.10 no check (a NaN eps passes, as in
            torch); only one of running_mean and running_var given in training.
        RuntimeError: running_mean or running_var missing in eval (naming it, as torch), parameters with the wrong
            number of elements, non-float dtypes, mixed dtypes (weight, bias, running stats neither the input's
            dtype nor float32 beside a half input; a weight and bias of two dtypes; off CUDA, running stats of
            another dtype than theirs), tensors on different devices,
            not on CUDA (outside the interpreter); running statistics that require grad while grad mode is on
            (torch's "not differentiable with respect to argument").
        IndexError: a 0-d input, or a non-empty 1-D one (no channel dim; an empty 1-D input gives an empty
            output, as torch).
        TypeError: momentum or eps not a number as torch's argument parser reads one (torch's functional form
            takes no ``momentum=None``; a 0-d tensor or a numpy scalar is one, a 1-element tensor of some dims is
            not), training not a bool (as torch: no ``training=1``).
    """
    if _compiling():  # the registered op (no mutation), the running stats copied back
        return _batch_norm_compiled(input, running_mean, running_var, weight, bias, training, momentum, eps)
    if isinstance(input, torch.Tensor) and input.numel() == 0:
        return empty_batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    momentum = _momentum(running_mean, running_var, momentum)
    if grad_needed(input, weight, bias):  # eager training: the autograd Function (updates the running stats once)
        return apply_function(BatchNormFunction, input, running_mean, running_var, weight, bias, training, momentum,
                              eps)[0]
    return batch_norm_call(SPEC, input, running_mean, running_var, weight, bias, training, momentum, eps)


def _momentum(running_mean: torch.Tensor | None, running_var: torch.Tensor | None, momentum: float) -> float:
    """``momentum`` as the ops take it (a 0-d tensor is its number, as torch's parser reads it), after torch's
    refusal of running statistics that require grad; both paths' first checks."""
    if getattr(running_mean, "requires_grad", False) or getattr(running_var, "requires_grad", False):
        _stats_need_no_grad(running_mean, running_var)
    if isinstance(momentum, torch.Tensor):
        momentum = scalar_of(momentum)  # type: ignore[assignment]
    return momentum


def _stats_need_no_grad(running_mean: object, running_var: object) -> None:
    """torch's autograd error for running statistics that require grad while grad mode is on."""
    for name, stat in (("running_mean", running_mean), ("running_var", running_var)):
        if getattr(stat, "requires_grad", False) and torch.is_grad_enabled():
            raise RuntimeError(f"The function 'native_batch_norm' is not differentiable with respect to argument "
                               f"'{name}'. This input cannot have requires_grad True.")
