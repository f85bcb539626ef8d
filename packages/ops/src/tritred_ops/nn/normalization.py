"""LayerNorm, RMSNorm and BatchNorm1d/2d/3d: torch's modules whose forward runs tritred's ops.

Each class subclasses its ``torch.nn`` class and only replaces ``forward``: the constructor (arguments, defaults,
``reset_parameters``), the parameters and buffers, ``state_dict`` keys, ``extra_repr`` and BatchNorm's
``_check_input_dim`` and ``_load_from_state_dict`` are torch's own, so ``isinstance`` holds and state dicts load
both ways. A call tritred does not take (:func:`.common.refusal`) runs torch's forward, logged at DEBUG.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..families.batch_norm import batch_norm
from ..families.layer_norm import layer_norm
from ..families.rms_norm import rms_norm
from .common import log_fallback, refusal

_HALF = (torch.float16, torch.bfloat16)


class LayerNorm(torch.nn.LayerNorm):
    """:class:`torch.nn.LayerNorm` (same constructor, parameters, state_dict) whose forward is
    :func:`tritred_ops.layer_norm`: ``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing
    ``normalized_shape`` dims, statistics in fp32 (fp64 for fp64 inputs), any input strides.

    torch's forward runs instead (logged) for inputs tritred does not take: weight/bias of another dtype than the
    input (torch's mixed-dtype kernels), under ``torch.autocast`` (torch's autocast runs layer_norm in fp32),
    devices and tensor types of :func:`.common.refusal`.
    """

    _tritred_original = torch.nn.LayerNorm

    def forward(self, input: Tensor) -> Tensor:
        why = refusal(input, self.weight, self.bias)
        if why is None and any(p is not None and p.dtype != input.dtype for p in (self.weight, self.bias)):
            why = "weight or bias of another dtype than the input"
        if why is not None:
            log_fallback(self, why)
            return super().forward(input)
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(torch.nn.RMSNorm):
    """:class:`torch.nn.RMSNorm` (same constructor, parameters, state_dict) whose forward is
    :func:`tritred_ops.rms_norm`: ``x / sqrt(mean(x^2) + eps) * weight``, ``eps=None`` meaning the machine epsilon
    of the computation's dtype as torch's; the weight may have another floating dtype (the product in the promoted
    dtype, the output in the input's, as torch's).

    torch's forward runs instead (logged) under ``torch.autocast`` (torch's autocast recasts rms_norm) and for the
    devices and tensor types of :func:`.common.refusal`.
    """

    _tritred_original = torch.nn.RMSNorm

    def forward(self, x: Tensor) -> Tensor:
        why = refusal(x, self.weight)
        if why is None and self.weight is not None and self.weight.dtype not in (*_HALF, torch.float32,
                                                                                  torch.float64):
            why = f"a {self.weight.dtype} weight"
        if why is not None:
            log_fallback(self, why)
            return super().forward(x)
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)


if TYPE_CHECKING:
    _Base = torch.nn.modules.batchnorm._BatchNorm
else:
    _Base = object


class _BatchNormForward(_Base):
    """The forward of tritred's BatchNorm1d/2d/3d: torch's ``_BatchNorm.forward`` to the letter (the input-dim
    check, ``num_batches_tracked``, ``momentum=None`` as a cumulative moving average, ``track_running_stats``,
    eval with and without running statistics), calling :func:`tritred_ops.batch_norm`."""

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        why = batch_norm_refusal(self, input)
        if why is not None:  # (torch's forward checks the dims again and counts the batch itself)
            log_fallback(self, why)
            return super().forward(input)

        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats  # buffers passed only to be used or updated
        return batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                          self.weight, self.bias, bn_training, factor, self.eps)


def batch_norm_refusal(module: torch.nn.modules.batchnorm._NormBase, input: Tensor) -> str | None:
    """Why tritred's batch_norm does not take ``module``'s call on ``input`` (None: it does), for BatchNorm*d and
    SyncBatchNorm alike: :func:`.common.refusal` over the input, parameters and running statistics (not an autocast
    op), then their dtypes (:func:`_param_dtypes`)."""
    params = (module.weight, module.bias, module.running_mean, module.running_var)
    why = refusal(input, *params, autocast=False)
    return why if why is not None else _param_dtypes(input, *params)


def _param_dtypes(input: Tensor, *params: Tensor | None) -> str | None:
    """tritred's batch_norm takes parameters of the input's dtype, and float32 ones beside a float16/bfloat16 input
    (torch's rule; on CUDA running statistics of any floating dtype). Anything else goes to torch, which decides."""
    for i, p in enumerate(params):
        if p is None or p.dtype == input.dtype or (p.dtype == torch.float32 and input.dtype in _HALF):
            continue
        if i >= 2 and input.device.type == "cuda" and p.dtype in (*_HALF, torch.float32, torch.float64):
            continue
        return f"a {p.dtype} parameter or buffer beside a {input.dtype} input"
    return None


class BatchNorm1d(_BatchNormForward, torch.nn.BatchNorm1d):
    """:class:`torch.nn.BatchNorm1d` (same constructor, parameters, buffers, state_dict; 2-D or 3-D inputs, torch's
    ValueError otherwise) whose forward is :func:`tritred_ops.batch_norm`. torch's forward runs instead (logged)
    for parameters of dtypes tritred's batch_norm does not take and the devices and tensor types of
    :func:`.common.refusal`. Not an autocast op in torch: under ``torch.autocast`` it runs tritred as torch runs its
    own kernel (a float16 input beside float32 parameters)."""

    _tritred_original = torch.nn.BatchNorm1d


class BatchNorm2d(_BatchNormForward, torch.nn.BatchNorm2d):
    """:class:`torch.nn.BatchNorm2d` (4-D inputs) on :func:`tritred_ops.batch_norm`; as :class:`BatchNorm1d`."""

    _tritred_original = torch.nn.BatchNorm2d


class BatchNorm3d(_BatchNormForward, torch.nn.BatchNorm3d):
    """:class:`torch.nn.BatchNorm3d` (5-D inputs) on :func:`tritred_ops.batch_norm`; as :class:`BatchNorm1d`."""

    _tritred_original = torch.nn.BatchNorm3d
