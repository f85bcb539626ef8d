"""The host side of batch_norm with statistics shared across processes: the pieces ``tritred_ops.nn.SyncBatchNorm``
(through ``tritred_ops.distributed.sync_batch_norm``) runs around its two collectives.

Forward, per process (``W`` processes, ``C`` channels)::

    local = batch_norm_moments_call(x)                 [3, C]: mean, M2, count        (launch.py)
    all_gather(local) -> gathered                      [W, 3, C]                       (the caller)
    stats = merge_ranks_call(gathered, running ...)    [4, C]: mean, invstd, 1/n, invstd/n; running stats updated
    y = batch_norm_normalize_call(x, stats[0], stats[1], weight, bias)                 (launch.py)

Backward::

    sums = batch_norm_backward_sums_call(dy, x, stats[0], stats[1])   [2, C]: sum(dy), sum(dy * x_hat) (backward.py)
    all_reduce(sums)                                                  (the caller; the local sums are db and dw)
    dx = batch_norm_backward_dx_call(dy, x, weight, stats[0], stats[1], sums * stats[2:4])

The merge is Chan et al.'s (1979) over (mean, M2, count) triples in rank order, so every process computes the same
bits, and a process with an empty batch (count 0) changes nothing, exactly.
"""

from __future__ import annotations

import torch

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, f32_split, tl_dtype
from ...runtime import Recorder, replay_plan
from .backward import batch_norm_backward_dx_call, batch_norm_backward_sums_call
from .launch import batch_norm_moments_call, batch_norm_normalize_call
from .rules import merge_ranks_block
from .sync_kernels import _merge_ranks_kernel

__all__ = ["batch_norm_backward_dx_call", "batch_norm_backward_sums_call", "batch_norm_moments_call",
           "batch_norm_normalize_call", "merge_ranks_call"]


def merge_ranks_call(gathered: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                     momentum: float, eps: float) -> torch.Tensor:
    """The global statistics of a batch_norm from every process's (mean, M2, count).

    Args:
        gathered: ``[W, 3, C]`` contiguous, fp32 or fp64: process r's :func:`batch_norm_moments_call` at ``[r]``
            (what ``all_gather`` of the flat ``[3 * C]`` statistics gives, viewed as 3-D).
        running_mean, running_var: ``[C]`` floating tensors or None, updated in place (once):
            ``r = (1 - momentum) * r + momentum * batch statistic``, the variance unbiased over the global count.
        momentum: a float (torch's SyncBatchNorm passes 1 / num_batches_tracked for ``momentum=None``).
        eps: added to the biased variance inside the square root.

    Returns:
        ``[4, C]`` in the gathered dtype: mean, invstd, 1 / n and invstd / n, n the global count per channel.

    Raises:
        RuntimeError: ``gathered`` not a contiguous floating ``[W, 3, C]``; running statistics of another size,
        only one of them given, or on another device.
    """
    op = "sync_batch_norm"
    if (not isinstance(gathered, torch.Tensor) or gathered.dim() != 3 or gathered.shape[1] != 3
            or not gathered.is_contiguous() or gathered.dtype not in (torch.float32, torch.float64)):
        raise RuntimeError(f"{op}(): gathered statistics must be a contiguous fp32/fp64 [W, 3, C] tensor, got "
                           f"{getattr(gathered, 'shape', type(gathered))}")
    W, _, Ch = gathered.shape
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}(): running_mean and running_var must either both be None or neither be None")
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None:
            rt.check_tensor(op, name, t)
            rt.check_float(op, t, what=name)
            if t.numel() != Ch:
                raise RuntimeError(f"{op}(): {name} should contain {Ch} elements not {t.numel()}")
    rt.check_same_device(op, gathered, running_mean=running_mean, running_var=running_var)
    saved, key = replay_plan("batch_norm_merge_ranks", (float(momentum), float(eps)), gathered, running_mean,
                            running_var)
    if saved is not None:
        return saved[0]
    rt.check_runnable(op, gathered)
    dev = gathered.device
    rec = Recorder(gathered, running_mean, running_var)
    stats = rec.empty((4, Ch), gathered.dtype, dev)
    if Ch == 0:
        return stats
    has_running = running_mean is not None and running_var is not None
    rm, rv = rt.unit_stride(running_mean), rt.unit_stride(running_var)
    block_w, block_c, warps = merge_ranks_block(W, Ch)
    rec.launch(_merge_ranks_kernel, (rt.cdiv(Ch, block_c),), gathered, stats, rm if has_running else stats,
               rv if has_running else stats, W, Ch, *f32_split(float(eps)), *f32_split(float(momentum)),
               HAS_RUNNING=has_running, ACC=tl_dtype(acc_dtype(gathered.dtype)), BLOCK_W=block_w,
               BLOCK_K=block_c, num_warps=warps)
    for given, buf in ((running_mean, rm), (running_var, rv)):
        if given is not None and buf is not None and buf is not given:  # a strided one went through a copy
            given.copy_(buf.view_as(given))
            rec.replayable = False
    rec.save(key, stats)
    return stats
