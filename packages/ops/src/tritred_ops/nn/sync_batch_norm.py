"""``tritred_ops.nn.SyncBatchNorm``: torch.nn.SyncBatchNorm with tritred's batch_norm kernels."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..distributed import _comm
from ..distributed.batch_norm import sync_batch_norm
from ..families.batch_norm import batch_norm
from .common import log_fallback
from .normalization import batch_norm_refusal

Tensor = torch.Tensor


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """Batch normalization over the batches of all processes of a group — a :class:`torch.nn.SyncBatchNorm` (same
    constructor: ``num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
    process_group=None, device=None, dtype=None, *, bias=True``; same parameters, buffers and ``state_dict``;
    ``isinstance`` holds) whose statistics, merge and normalization run in tritred's kernels.

    Training with an initialized process group of 2+ processes: :func:`tritred_ops.distributed.sync_batch_norm`
    (forward: local mean, M2 and count, one all_gather of ``[3, C]`` per process, Chan's merge, normalize;
    backward: local sums of dy and dy * x_hat, one all_reduce of ``[2, C]``, then dx). Batches may differ in
    size between processes, and be empty. The running statistics, and the gradients summed over processes, are
    those of batch_norm over the concatenated global batch. Otherwise (eval, one process, no process group):
    :func:`tritred_ops.batch_norm`, as torch's falls back to ``F.batch_norm``.

    Differences from torch's: it runs on CPU tensors under the Triton interpreter with gloo (torch's refuses
    non-GPU inputs), where tritred's kernels run (CUDA, or the interpreter); a process with an empty batch gets
    zero weight and bias gradients instead of None (so that DistributedDataParallel sees every parameter's
    gradient on every process); the local statistics are exact (no invstd round trip). Under ``torch.compile``
    the synchronized call runs eagerly at a graph break (``fullgraph=True`` refuses it); eval and one-process
    calls are tritred's registered batch_norm op.

    Shapes: input ``[B, C, *]`` (2-D to 5-D and beyond), output the same. Raises ValueError for inputs of fewer
    than 2 dims or of 0 channels (torch's messages).
    """

    _tritred_original = torch.nn.SyncBatchNorm

    def forward(self, input: Tensor) -> Tensor:
        """torch.nn.SyncBatchNorm.forward's logic, with tritred's kernels (no device check: CPU under the
        interpreter runs too); a call tritred does not take (:func:`.normalization.batch_norm_refusal`, as
        BatchNorm's) runs torch's forward, logged at DEBUG."""
        self._check_input_dim(input)
        why = batch_norm_refusal(self, input)
        if why is not None:
            log_fallback(self, why)
            return super().forward(input)
        self._check_non_zero_input_channels(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            assert self.num_batches_tracked is not None
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / self.num_batches_tracked.item()
            else:
                factor = self.momentum
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        running_mean = self.running_mean if not self.training or self.track_running_stats else None
        running_var = self.running_var if not self.training or self.track_running_stats else None
        need_sync = bn_training and self.training and _comm.initialized()
        group: Any = None
        world = 1
        if need_sync:
            group = self.process_group if self.process_group else dist.group.WORLD
            world = dist.get_world_size(group)
            need_sync = world > 1
        if not need_sync:
            return batch_norm(input, running_mean, running_var, self.weight, self.bias, bn_training, factor,
                              self.eps)
        return sync_batch_norm(input, self.weight, self.bias, running_mean, running_var, self.eps, factor, group,
                               world)

    @classmethod
    def convert_sync_batchnorm(cls, module: torch.nn.Module, process_group: Any = None) -> torch.nn.Module:
        """Every ``BatchNorm*d`` (and SyncBatchNorm) layer of ``module`` replaced by this class, sharing its
        parameters and buffers (``state_dict`` keys and values unchanged); returns ``module`` (or the new layer
        when ``module`` itself is one), as :meth:`torch.nn.SyncBatchNorm.convert_sync_batchnorm`, which makes
        torch's class whatever class it is called on."""
        out = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group, bias=module.bias is not None)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        del module
        return out
