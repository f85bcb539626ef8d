"""Batch normalization over the batches of several processes: the function behind ``tritred_ops.nn.SyncBatchNorm``.

Per step (``W`` processes of a group, ``C`` channels), one collective each way (Ioffe & Szegedy 2015's batch
statistics over the concatenated global batch; Chan, Golub & LeVeque 1979's merge)::

    forward   local (mean, M2, count) [3, C] --all_gather--> [W, 3, C] --merge--> mean, invstd; normalize
    backward  local (sum dy, sum dy * x_hat) [2, C] --all_reduce(SUM)--> dx (elementwise)

Every step but the two collectives runs in tritred's batch_norm kernels (``families.batch_norm.sync``). The local
statistics are exact (M2, not an invstd that the merge would have to undo as torch's does), every process merges
the gathered statistics in rank order (the same bits everywhere), and a process with an empty batch sends a count
of 0, which Chan's merge skips exactly: no host synchronization to filter it out (torch's filter reads the counts
on the host). Bytes per step and process: 3 * C * W accumulator values gathered, 2 * C reduced.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import runtime as rt
from ..families.batch_norm.spec import SPEC
from ..families.batch_norm.sync import (
    batch_norm_backward_dx_call,
    batch_norm_backward_sums_call,
    batch_norm_moments_call,
    batch_norm_normalize_call,
    merge_ranks_call,
)
from . import _comm
from ._comm import ProcessGroup

Tensor = torch.Tensor


class SyncBatchNormFunction(torch.autograd.Function):
    """Autograd of :func:`sync_batch_norm`: torch's ``torch.nn.modules._functions.SyncBatchNorm`` with tritred's
    kernels. Saves the input, the weight and the merged statistics ``[4, C]`` (mean, invstd, 1 / n, invstd / n).
    Gradients: grad_input through the global sums (one all_reduce), grad_weight and grad_bias of this process's
    batch only (DistributedDataParallel sums the parameters' gradients over processes, as for torch's). Not
    twice differentiable."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, weight: Tensor | None, bias: Tensor | None,  # type: ignore[override]
                running_mean: Tensor | None, running_var: Tensor | None, eps: float, momentum: float,
                group: ProcessGroup | None, world_size: int) -> Tensor:
        ch = input.shape[1]
        local = batch_norm_moments_call(SPEC, input)  # [3, C]; zeros (a count of 0) for an empty batch
        gathered = torch.empty(world_size * 3 * ch, dtype=local.dtype, device=input.device)
        _comm.all_gather_flat(gathered, local, group)
        stats = merge_ranks_call(gathered.view(world_size, 3, ch), running_mean, running_var, momentum, eps)
        y = batch_norm_normalize_call(SPEC, input, stats[0], stats[1], weight, bias)
        ctx.save_for_backward(input, weight, stats)
        ctx.group = group
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y

    @staticmethod
    @rt.once_differentiable("sync_batch_norm")
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        input, weight, stats = ctx.saved_tensors
        need_dx, need_dw, need_db = (bool(n) for n in ctx.needs_input_grad[:3])
        ch, dev = input.shape[1], input.device
        dx = dw = db = None
        if input.numel() > 0:
            sums = batch_norm_backward_sums_call(SPEC, dy, input, stats[0], stats[1])  # [2, C]: db, dw of this batch
            if need_dw:
                dw = sums[1].to(weight.dtype, copy=True)
            if need_db:
                db = sums[0].to(ctx.bias_dtype, copy=True)
            if need_dx:  # (torch's condition for the collective: every process of the group takes the same branch)
                _comm.all_reduce(sums, "sum", ctx.group)
                coef = sums.mul_(stats[2:4])  # mean(dy) and mean(dy * x_hat) * invstd over the global batch
                dx = batch_norm_backward_dx_call(SPEC, dy, input, weight, stats[0], stats[1], coef)
        else:  # an empty batch still takes part in the collective (its sums are 0), as torch's
            if need_dx:
                _comm.all_reduce(torch.zeros((2, ch), dtype=stats.dtype, device=dev), "sum", ctx.group)
                dx = torch.zeros_like(input)
            # zeros rather than torch's None: every parameter gets a gradient on every process (DDP waits for all)
            if need_dw:
                dw = torch.zeros(ch, dtype=weight.dtype, device=dev)
            if need_db:
                db = torch.zeros(ch, dtype=ctx.bias_dtype, device=dev)
        return dx, dw, db, None, None, None, None, None, None


@torch.compiler.disable  # collectives inside a custom Function: eager only (torch.compile breaks the graph here)
def sync_batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                    running_var: Tensor | None, eps: float = 1e-5, momentum: float = 0.1,
                    process_group: ProcessGroup | None = None, world_size: int | None = None) -> Tensor:
    """Training-mode batch_norm with the batch statistics of every process of ``process_group`` — torch's
    ``torch.nn.modules._functions.SyncBatchNorm.apply`` (what ``torch.nn.SyncBatchNorm`` runs in training), with
    tritred's kernels, on CUDA (NCCL) or on CPU tensors under the Triton interpreter (gloo).

    Args:
        input: ``[B, C, *spatial]`` floating tensor, any strides; B may differ between processes and be 0.
        weight, bias: ``[C]`` or None. running_mean, running_var: ``[C]`` or None (both or neither), updated in
            place once: ``r = (1 - momentum) * r + momentum * s`` with the global batch mean and the unbiased
            global variance (torch's ``batch_norm_gather_stats_with_counts``).
        eps: added to the biased variance. momentum: a float (``nn.SyncBatchNorm`` turns ``momentum=None`` into
            1 / num_batches_tracked).
        process_group: the group whose batches are one (None: the default group). world_size: its size (None: asked).

    Returns:
        y of the input's shape and dtype (statistics in fp32, fp64 for fp64 inputs).

    Collectives (each process must call it the same number of times, with the same C and dtype): forward one
    all_gather of ``[3, C]`` statistics; backward, when the input needs a gradient, one all_reduce of ``[2, C]``.
    Under ``torch.compile`` it runs eagerly at a graph break (``fullgraph=True`` refuses it).

    Raises:
        ValueError: fewer than 2 dims. RuntimeError: parameters of another size than C or on another device; not
        runnable here (CPU without the interpreter); torch.distributed errors of the collectives.
    """
    if not isinstance(input, torch.Tensor) or input.dim() < 2:
        raise ValueError(f"expected at least 2D input (got {getattr(input, 'dim', lambda: 0)()}D input)")
    if world_size is None:
        world_size = _comm.world_size(process_group)
    return SyncBatchNormFunction.apply(input, weight, bias, running_mean, running_var, eps, momentum,
                                       process_group, world_size)


__all__ = ["SyncBatchNormFunction", "sync_batch_norm"]
