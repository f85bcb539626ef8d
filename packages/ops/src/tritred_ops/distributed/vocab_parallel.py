"""Softmax-type ops over a class dimension split across the processes of a group (tensor parallelism).

Each process holds a contiguous shard of the last dim (the vocabulary), ordered by rank, of any size (0 too); the
rows (every other dim) and the targets are the same on every process. The logits are never gathered:

    local = logsumexp of this shard's row (tritred's kernel, fp32 for fp16/bf16/fp32, fp64 for fp64)
    m     = all_reduce(MAX) of local                         rows x 1 values  (+ 2 per process: shard sizes)
    terms = all_reduce(SUM) of [exp(local - m), ...]         rows x k values
    lse   = m + log(sum of exp(local - m))

``k`` is 1 for logsumexp and log_softmax, 2 for cross_entropy (the target's logit, added by the one process whose
shard holds it) and 3 with label smoothing (the row's sum of logits, weighted by the class weights if given). The
MAX only shifts the exponentials (any value at least the row's maximum keeps them at most 1; the local logsumexp
is one), so NaN and inf reach the result through the SUM: torch's NaN/inf results whatever order the collectives
combine values in. The scheme is Megatron-LM's vocab-parallel cross entropy (Shoeybi et al. 2019), with the local
logsumexp in place of the local max (one pass over the logits instead of two).

Backward passes are local pointwise work (torch ops), except log_softmax's, which needs the row's global
sum(dy): one all_reduce of rows x 1 values.

Eager only: each public function is ``torch.compiler.disable``d, so that under ``torch.compile`` it runs eagerly at
a graph break (the rest of the model still compiles; ``fullgraph=True`` refuses it). Dynamo's functional
collectives could trace the all_reduces, but not tritred's launchers inside a custom autograd Function.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import runtime as rt
from ..families.reduce import sum as _tsum
from ..families.softmax import logsumexp as _tlogsumexp
from . import _comm
from ._comm import ProcessGroup

Tensor = torch.Tensor

_SIZE_BITS = 20  # a shard size travels in the MAX all_reduce as two values below 2**20: exact in fp32


def _acc(x: Tensor) -> Tensor:
    """``x`` in its accumulation dtype: fp32 for fp16/bf16 (one copy of the local shard, as Megatron-LM's
    ``.float()``), itself for fp32 and fp64."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _rows(op: str, input: Any) -> tuple[Tensor, int, int]:
    """(input as [rows, shard] in its accumulation dtype, rows, shard size) after torch's checks."""
    input = rt.check_tensor(op, "input", input)
    rt.check_float(op, input)
    if input.dim() == 0:
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [-1, 0], but got -1)")
    rt.check_runnable(op, input)
    v = input.shape[-1]
    r = math.prod(input.shape[:-1])
    return _acc(input.reshape(r, v)), r, v


def _global_lse(local: Tensor, world: int, group: ProcessGroup | None, extra: Tensor | None = None
                ) -> tuple[Tensor, Tensor, Tensor | None]:
    """(m, m_safe, extra maximized): the MAX all_reduce of the rows' local logsumexp, with ``extra`` values
    appended (shard sizes), and the finite shift ``m_safe`` (0 where m is +-inf or NaN)."""
    if world > 1:
        buf = local.clone() if extra is None else torch.cat([local, extra])  # (local is still needed)
        if buf.numel():
            _comm.all_reduce(buf, "max", group)
        m, extra = buf[: local.numel()], (None if extra is None else buf[local.numel():])
    else:
        m = local
    return m, torch.where(torch.isfinite(m), m, torch.zeros_like(m)), extra


def _sum_terms(terms: list[Tensor], world: int, group: ProcessGroup | None) -> Tensor:
    """The per-row terms stacked as [rows, k] and summed over the group (one all_reduce)."""
    s = torch.stack(terms, 1)
    if world > 1 and s.numel():
        _comm.all_reduce(s, "sum", group)
    return s


def _lse(x: Tensor, world: int, group: ProcessGroup | None) -> Tensor:
    """The rows' global logsumexp in x's dtype (the accumulation dtype): two collectives."""
    local = _tlogsumexp(x, -1)
    _, m_safe, _ = _global_lse(local, world, group)
    return m_safe + torch.log(_sum_terms([torch.exp(local - m_safe)], world, group)[:, 0])


# -- logsumexp ----------------------------------------------------------------------------------------------------

class _LogsumexpFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: Tensor, group: ProcessGroup | None, world: int) -> Tensor:  # type: ignore[override]
        x, _, _ = _rows("vocab_parallel_logsumexp", input)
        lse = _lse(x, world, group)
        ctx.save_for_backward(input, lse)
        return lse.to(input.dtype).reshape(input.shape[:-1])

    @staticmethod
    @rt.once_differentiable("vocab_parallel_logsumexp")
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        input, lse = ctx.saved_tensors
        x = _acc(input.reshape(lse.numel(), input.shape[-1]))
        dx = grad.reshape(-1, 1).to(x.dtype) * torch.exp(x - lse[:, None])  # torch's dy * exp(x - result)
        return dx.to(input.dtype).reshape(input.shape), None, None


@torch.compiler.disable
def vocab_parallel_logsumexp(input: Tensor, group: ProcessGroup | None = None) -> Tensor:
    """log(sum(exp(x))) over the last dim split across the processes of ``group`` — equals
    ``torch.logsumexp(full, -1)`` of the logits gathered along the last dim in rank order.

    Args:
        input: ``[*, V_r]`` floating tensor (fp16, bf16, fp32, fp64; any strides), this process's contiguous shard
            of the last dim; ``V_r`` may differ between processes and be 0. The leading dims are the same
            everywhere.
        group: the tensor-parallel process group (None: the default group; without an initialized default group,
            the input is the whole row and no collective runs).

    Returns:
        ``[*]`` in the input's dtype (computed in fp32, fp64 for fp64), the same on every process. Rows holding
        +inf give +inf, all -inf rows -inf, NaN propagates (torch's).

    Collectives: forward a MAX and a SUM all_reduce of ``rows`` values each; backward none
    (``dx = dy * exp(x - lse)``, local).

    Raises:
        NotImplementedError: non-floating input. IndexError: a 0-d input. RuntimeError: not runnable here.
    """
    return _LogsumexpFunction.apply(input, group, _comm.world_size(group))


# -- log_softmax --------------------------------------------------------------------------------------------------

class _LogSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: Tensor, group: ProcessGroup | None, world: int) -> Tensor:  # type: ignore[override]
        x, _, _ = _rows("vocab_parallel_log_softmax", input)
        lse = _lse(x, world, group)
        lse = torch.where(lse == float("inf"), torch.full_like(lse, float("nan")), lse)  # a row holding +inf: NaN
        y = (x - lse[:, None]).to(input.dtype).reshape(input.shape)
        ctx.save_for_backward(y)  # the output, as torch's log_softmax saves
        ctx.group, ctx.world = group, world
        return y

    @staticmethod
    @rt.once_differentiable("vocab_parallel_log_softmax")
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        r, v = math.prod(y.shape[:-1]), y.shape[-1]
        g = grad.reshape(r, v)
        acc = torch.float64 if y.dtype == torch.float64 else torch.float32
        s = _sum_terms([_tsum(g, -1, dtype=acc)], ctx.world, ctx.group)  # the row's global sum(dy)
        dx = g.to(acc) - torch.exp(y.reshape(r, v).to(acc)) * s  # torch's dy - exp(y) * sum(dy)
        return dx.to(y.dtype).reshape(y.shape), None, None


@torch.compiler.disable
def vocab_parallel_log_softmax(input: Tensor, group: ProcessGroup | None = None) -> Tensor:
    """x - logsumexp(x) over the last dim split across the processes of ``group`` — this process's shard of
    ``torch.log_softmax(full, -1)`` of the logits gathered along the last dim in rank order.

    Args:
        input: ``[*, V_r]`` floating tensor, this process's contiguous shard of the last dim (see
            :func:`vocab_parallel_logsumexp`). group: the tensor-parallel process group.

    Returns:
        ``[*, V_r]`` contiguous, in the input's dtype (computed in fp32, fp64 for fp64). As torch's: rows holding
        +inf or NaN are NaN, all -inf rows NaN.

    Collectives: forward a MAX and a SUM all_reduce of ``rows`` values each; backward one SUM all_reduce of
    ``rows`` values (the row's sum of dy: ``dx = dy - exp(y) * sum(dy)``).

    Raises:
        NotImplementedError: non-floating input. IndexError: a 0-d input. RuntimeError: not runnable here.
    """
    return _LogSoftmaxFunction.apply(input, group, _comm.world_size(group))


# -- cross_entropy ------------------------------------------------------------------------------------------------

def _check_ce(input: Any, target: Any, weight: Tensor | None, reduction: str, label_smoothing: float) -> None:
    """torch.nn.functional.cross_entropy's checks of class-index targets, with its exceptions and messages."""
    op = "vocab_parallel_cross_entropy"
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    input = rt.check_tensor(op, "input", input)
    target = rt.check_tensor(op, "target", target)
    if target.dtype.is_floating_point:
        raise NotImplementedError(f"{op}(): class-probability targets are not supported (class indices only)")
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{rt.SCALAR_TYPE_NAMES.get(target.dtype, target.dtype)}")
    if input.dim() == 2 and target.dim() == 1 and input.shape[0] != target.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}).")
    if input.dim() == 0 or tuple(input.shape[:-1]) != tuple(target.shape):
        raise RuntimeError(f"{op}(): expected target size {list(input.shape[:-1])} (the input's shape without "
                           f"its last dim), got {list(target.shape)}")
    if weight is not None:
        rt.check_tensor(op, "weight", weight)
        rt.check_float(op, weight, what="weight")
        if weight.dim() != 1:
            raise RuntimeError(f"{op}(): weight must be 1-D [V] (every class of the gathered logits), got "
                               f"{list(weight.shape)}")
        if weight.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(f"The function '{op}' is not differentiable with respect to argument 'weight'. "
                               "This input cannot have requires_grad True.")
    rt.check_same_device(op, input, target=target, weight=weight)


class _CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, input: Tensor, target: Tensor, weight: Tensor | None,  # type: ignore[override]
                ignore_index: int, reduction: str, eps: float, group: ProcessGroup | None, world: int,
                rank: int) -> Tensor:
        op = "vocab_parallel_cross_entropy"
        x, r, v = _rows(op, input)
        dev, acc = x.device, x.dtype
        local = _tlogsumexp(x, -1)
        # The MAX all_reduce also carries every shard's size (each process writes its own two slots, -1 elsewhere):
        # the shard's offset and the vocabulary's size, with no host synchronization.
        sizes_in = None
        if world > 1:
            sizes_in = torch.full((world, 2), -1.0, dtype=acc, device=dev)
            sizes_in[rank, 0], sizes_in[rank, 1] = v >> _SIZE_BITS, v & ((1 << _SIZE_BITS) - 1)
        m, m_safe, sizes_max = _global_lse(local, world, group, None if sizes_in is None else sizes_in.view(-1))
        if sizes_max is not None:
            sizes = sizes_max.view(world, 2).to(torch.int64)
            sizes = sizes[:, 0] * (1 << _SIZE_BITS) + sizes[:, 1]
            offset, total = sizes[:rank].sum(), sizes.sum()
        else:
            offset, total = torch.zeros((), dtype=torch.int64, device=dev), torch.full((), v, device=dev)
        t = target.reshape(r).to(torch.int64)
        valid = t != ignore_index
        bad = valid & ((t < 0) | (t >= total))
        if dev.type == "cpu":  # (torch's CPU kernel raises; on CUDA the rows' losses are NaN: no host sync)
            if bool(bad.any()):
                raise IndexError(f"Target {int(t[bad][0])} is out of bounds.")
            if weight is not None and weight.numel() != int(total):
                raise RuntimeError(f"weight tensor should be defined either for all {int(total)} classes or no "
                                   f"classes but got weight tensor of shape: {list(weight.shape)}")
        local_t = t - offset
        in_shard = (local_t >= 0) & (local_t < v)
        idx = local_t.clamp(0, max(v - 1, 0))
        x_t = x.gather(1, idx[:, None])[:, 0] if v else torch.zeros(r, dtype=acc, device=dev)
        x_t = torch.where(bad, torch.full_like(x_t, float("nan")), torch.where(in_shard, x_t, torch.zeros_like(x_t)))
        terms = [torch.exp(local - m_safe), x_t]
        w = weight.to(acc) if weight is not None else None
        w_local = w.index_select(0, offset + torch.arange(v, device=dev)) if w is not None else None
        if eps > 0:  # the row's (weighted) sum of logits: smoothing's -sum_c w_c log p_c = lse * sum(w) - sum(w x)
            terms.append(_tsum(x * w_local if w_local is not None else x, -1))
        s = _sum_terms(terms, world, group)
        lse = m_safe + torch.log(s[:, 0])
        safe_t = torch.where(valid & ~bad, t, torch.zeros_like(t))
        w_t = (w.gather(0, safe_t) if w is not None else torch.ones(r, dtype=acc, device=dev)) * valid
        zero = torch.zeros_like(lse)
        loss = torch.where(valid, (1 - eps) * w_t * (lse - s[:, 1]), zero)
        w_sum = _tsum(w) if w is not None else total.to(acc)
        if eps > 0:
            loss = loss + torch.where(valid, (eps / total.to(acc)) * (lse * w_sum - s[:, 2]), zero)
        denom = _tsum(w_t)
        if reduction == "none":
            out = loss.reshape(target.shape)
        elif reduction == "sum":
            out = _tsum(loss)
        else:
            # A zero denominator (no row counted, or only zero-weight classes) gives NaN, as torch's: its mean is
            # the weighted nll's 0 / 0 plus the smoothing term's x / 0 (NaN + inf), not this sum's x / 0.
            out = torch.where(denom == 0, torch.nan, _tsum(loss) / denom)
        ctx.save_for_backward(input, lse, idx, in_shard, valid, w_t, w_sum, w_local, total, denom)
        ctx.reduction, ctx.eps = reduction, eps
        return out.to(input.dtype)

    @staticmethod
    @rt.once_differentiable("vocab_parallel_cross_entropy")
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        input, lse, idx, in_shard, valid, w_t, w_sum, w_local, total, denom = ctx.saved_tensors
        eps, v = ctx.eps, input.shape[-1]
        x = _acc(input.reshape(lse.numel(), v))
        g = grad.to(x.dtype)
        if ctx.reduction == "none":
            g = g.reshape(-1)
        elif ctx.reduction == "mean":
            g = g / denom
        g = torch.where(valid, g.expand(lse.shape), torch.zeros_like(lse))
        # d loss_i / d x_c = g_i ((1 - eps) w_t (p_c - [c = t]) + eps / V (sum(w) p_c - w_c)), p = softmax(x)
        smooth = eps / total.to(x.dtype)
        dx = torch.exp(x - lse[:, None]) * (g * ((1 - eps) * w_t + smooth * w_sum))[:, None]
        if v:
            dx.scatter_add_(1, idx[:, None], (-(1 - eps) * g * w_t * in_shard)[:, None])
        if eps > 0:
            dx -= (g * smooth)[:, None] * (w_local[None, :] if w_local is not None else 1.0)
        return dx.to(input.dtype).reshape(input.shape), None, None, None, None, None, None, None, None


@torch.compiler.disable
def vocab_parallel_cross_entropy(input: Tensor, target: Tensor, group: ProcessGroup | None = None,
                                 weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                                 label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits whose class dim (the last) is split across the processes of ``group`` — equals
    ``torch.nn.functional.cross_entropy(full.reshape(-1, V), target.reshape(-1), weight, ignore_index=...,
    reduction=..., label_smoothing=...)`` of the logits gathered along the last dim in rank order (``'none'``:
    reshaped to the target's shape), forward and backward.

    Args:
        input: ``[*, V_r]`` floating logits (fp16, bf16, fp32, fp64; any strides), this process's contiguous shard
            of the V classes; ``V_r`` may differ between processes and be 0.
        target: ``[*]`` int64 (or uint8) global class indices in ``[0, V)`` or ``ignore_index``, the same on every
            process (class-probability targets are not supported).
        group: the tensor-parallel process group (None: the default group; without an initialized default group,
            the input holds every class and no collective runs).
        weight: ``[V]`` class weights (all classes, the same on every process) or None.
        ignore_index: rows with this target add nothing (nor count in ``'mean'``'s denominator).
        reduction: ``'none'`` (``[*]``), ``'mean'`` (the sum over rows divided by the sum of the valid rows' target
            weights, or their count: NaN when none is valid), ``'sum'``.
        label_smoothing: in [0, 1]: ``(1 - s) * nll + s / V * sum_c w_c * (-log p_c)``, as torch.

    Returns:
        The loss in the input's dtype (computed in fp32, fp64 for fp64), the same on every process.

    Collectives: forward a MAX all_reduce of ``rows + 2 * W`` values (the local logsumexp, the shard sizes) and a
    SUM all_reduce of ``rows x k`` values (k = 2: sum of exponentials and the target's logit; 3 with label
    smoothing: the row's weighted sum of logits); backward none (``dx = g * (softmax - one_hot ...)``, local).
    No host synchronization on CUDA.

    Raises:
        ValueError: unknown reduction; 2-D input and 1-D target of different batch sizes. RuntimeError:
        label_smoothing outside [0, 1]; target not int64/uint8; target shape not the input's without its last dim;
        weight not 1-D or requiring grad; weight of another size than V (CPU; on CUDA no host sync checks it).
        IndexError: a target outside [0, V) (CPU; on CUDA those rows' losses are NaN). NotImplementedError:
        floating targets, non-floating input.
    """
    _check_ce(input, target, weight, reduction, label_smoothing)
    world = _comm.world_size(group)
    return _CrossEntropyFunction.apply(input, target, weight, int(ignore_index), reduction, float(label_smoothing),
                                       group, world, _comm.rank(group) if world > 1 else 0)
