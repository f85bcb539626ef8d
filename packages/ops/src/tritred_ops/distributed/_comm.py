"""The few torch.distributed calls tritred's distributed ops make (NCCL on GPUs, gloo on the CPU), in one place."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

ProcessGroup = Any  # torch.distributed.ProcessGroup (absent from builds without torch.distributed)


def initialized() -> bool:
    """Whether torch.distributed is built and its default process group initialized."""
    return dist.is_available() and dist.is_initialized()


def world_size(group: ProcessGroup | None) -> int:
    """The number of processes of ``group`` (None: the default group); 1 without an initialized default group and
    no group given (the ops then are the single-device ones)."""
    if not initialized():
        if group is not None:
            raise RuntimeError("a process group was given but torch.distributed is not initialized")
        return 1
    return dist.get_world_size(group)


def rank(group: ProcessGroup | None) -> int:
    """This process's rank in ``group`` (0 without an initialized default group)."""
    return dist.get_rank(group) if initialized() else 0


def all_gather_flat(out: torch.Tensor, inp: torch.Tensor, group: ProcessGroup | None) -> torch.Tensor:
    """Every process's contiguous ``inp`` concatenated into the flat ``out`` (``[W * inp.numel()]``) in rank
    order: one collective (``all_gather_single``, formerly ``all_gather_into_tensor``; NCCL and gloo both take a
    flat output)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, inp.reshape(-1), group=group)
    return out


def all_reduce(t: torch.Tensor, op: str, group: ProcessGroup | None) -> torch.Tensor:
    """``t`` summed (``op="sum"``) or maximized (``"max"``) over the processes of ``group``, in place."""
    dist.all_reduce(t, dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX, group=group)
    return t
