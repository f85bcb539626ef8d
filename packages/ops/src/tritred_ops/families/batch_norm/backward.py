"""batch_norm's backward pass: torch's ``native_batch_norm_backward``, with Triton kernels.

With ``n = B * prod(spatial)`` values per channel and ``x_hat = (x - mean) * invstd`` (torch's
derivatives.yaml, ``_native_batch_norm_legit`` / ``_native_batch_norm_legit_no_training``):

- training (the batch statistics the forward saved: fp32 mean and invstd, fp64 for fp64 inputs)::

      db = sum(dy),  dw = sum(dy * x_hat),  dx = w * invstd * (dy - db / n - x_hat * dw / n)

- eval (the running statistics: ``invstd = 1 / sqrt(running_var + eps)``, ``x_hat`` from ``running_mean``)::

      dx = dy * w * invstd,  dw = sum(dy * x_hat),  db = sum(dy)

Sums over batch and spatial dims per channel; ``w`` is 1 without a weight. dx has the input's dtype and torch's
memory format for it (the forward output's), dw the weight's dtype, db the bias's; all computed in fp32 (fp64 for
fp64 inputs) and rounded once.

Launches (the forward's tiles, each tensor read through its own strides; deterministic, no atomics):

1. ``_sums_kernel``: per channel block and slice of its tiles, fp32 partials of sum(dy) and sum(dy * (x - mean))
   (``[C, split]``). In eval it also writes dx, which does not depend on them.
2. ``_dx_kernel``: merges each channel's partials in a fixed order; its first program per channel block stores dw
   and db; then training's dx, tiles in the mirror order of launch 1 (a dependent launch after it on sm_90+).

When one tile holds a whole channel block (small ``B * S``), launch 2 alone takes the sums from its tile in
registers: one read of x and dy. Eval without weight or bias gradients is launch 2 alone, reading dy only. Where
each channel block has too many partials to merge in every program (channels-last: 64 channels x ~260 slices,
``rules.merge_inline``), and whenever launch 2 has no dx to write, a finish launch of ``_dx_kernel`` (no tiles)
merges them once per channel into dw, db and training's two per-channel dx coefficients, which launch 2 reads.

Bytes (N elements of s bytes): training reads x and dy twice and writes dx once, 5·N·s (the one-launch path:
3·N·s); eval 3·N·s with weight or bias gradients, 2·N·s without.
"""

from __future__ import annotations

import logging

import torch
from tritred_core import ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, f32_split, tl_dtype
from ...runtime import Recorder, replay_plan
from .backward_kernels import _dx_kernel, _sums_kernel
from .launch import _bsc, _decide, _groups, _nchw_hint, _out_format, _spatial_order, _tiles_per_program
from .rules import finish_block, merge_inline
from .sync_kernels import _sums_finish_kernel

log = logging.getLogger("tritred")

Grads = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def batch_norm_backward_call(spec: ReductionSpec, grad_out: torch.Tensor, input: torch.Tensor,
                             weight: torch.Tensor | None, mean: torch.Tensor, var: torch.Tensor, training: bool,
                             eps: float, output_mask: tuple[bool, bool, bool],
                             bias_dtype: torch.dtype | None = None) -> Grads:
    """(grad_input, grad_weight, grad_bias) of batch_norm, each None where ``output_mask`` leaves it out.

    Args:
        grad_out: ``[B, C, *spatial]``, the input's shape and dtype, any strides (expanded ones included).
        input, weight: the forward's (weight None: 1).
        mean, var: training, the batch mean and invstd ``[C]`` the forward saved (``batch_norm_stats_call``);
            eval, running_mean and running_var ``[C]``.
        training: which of the two formulas (module docstring). eps: as the forward's (eval's invstd).
        output_mask: which of (grad_input, grad_weight, grad_bias) to compute.
        bias_dtype: grad_bias's dtype (the bias's); None: the weight's, else the input's.

    Raises:
        RuntimeError: grad_out of another shape or dtype than the input; statistics not of ``C`` elements.
    """
    op = "batch_norm_backward"
    mask = tuple(bool(m) for m in output_mask)
    saved, key = replay_plan(op, (training, eps, mask, bias_dtype), grad_out, input, weight, mean, var)
    if saved is not None:
        outs = iter(saved)
        return tuple(next(outs) if m else None for m in mask)  # type: ignore[return-value]
    return _backward(spec, key, grad_out, input, weight, mean, var, training, eps, mask, bias_dtype)


def _backward(spec: ReductionSpec, key: object, grad_out: torch.Tensor, input: torch.Tensor,
              weight: torch.Tensor | None, mean: torch.Tensor, var: torch.Tensor, training: bool, eps: float,
              mask: tuple[bool, ...], bias_dtype: torch.dtype | None) -> Grads:
    """The full host path of :func:`batch_norm_backward_call`; saves the plan under ``key``."""
    op = "batch_norm_backward"
    need_dx, need_dw, need_db = mask
    _check_grad_out(op, grad_out, input)
    grad_out, input = grad_out.resolve_neg(), input.resolve_neg()
    Ch = input.shape[1] if input.dim() > 1 else 0  # (an empty 1-D input has no channel: torch's 0)
    for name, t in (("mean", mean), ("var", var), ("weight", weight)):
        if t is not None and t.numel() != Ch:
            raise RuntimeError(f"{op}(): {name} should contain {Ch} elements not {t.numel()}")
    rt.check_same_device(op, input, grad_out=grad_out, weight=weight, mean=mean, var=var)
    rt.check_runnable(op, input)
    dev = input.device
    w_dtype = weight.dtype if weight is not None else input.dtype
    rec = Recorder(grad_out, input, weight, mean, var)
    dx = rec.adopt(torch.empty(input.shape, dtype=input.dtype, device=dev, memory_format=_out_format(input))) \
        if need_dx else None
    dw = rec.empty((Ch,), w_dtype, dev) if need_dw else None
    db = rec.empty((Ch,), bias_dtype or w_dtype, dev) if need_db else None
    outs = [t for t in (dx, dw, db) if t is not None]
    if not outs:
        return None, None, None
    if input.numel() == 0:  # sums of no values (torch: zeros), no dx to write
        for t in (dw, db):
            if t is not None:
                t.zero_()
        return dx, dw, db
    x, dy, (B, S), strides = _canonical(input, grad_out, dx)
    (xb, xs, xc), (gb, gs, gc), (eb, es, ec) = strides
    cfg = _decide(spec, x, B, S, Ch, strides[:2], direction="backward")
    acc = acc_dtype(x.dtype)
    w = rt.unit_stride(weight) if weight is not None else dy
    mean_v, var_v = rt.unit_stride(mean), rt.unit_stride(var)
    dxp = dx if dx is not None else dy  # (a pointer the kernels never touch without HAS_DX / WRITE_DX)
    dwp, dbp = (dw if dw is not None else dy), (db if db is not None else dy)
    dot = need_dw or (training and need_dx)  # sum(dy * (x - mean)) needed
    sums = dot or need_db  # any per-channel sum needed
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    resident = sums and tiles == 1  # one tile holds each channel block: the sums from it, one launch
    c_blocks = rt.cdiv(Ch, cfg.BLOCK_K)
    common = (B, S, Ch, xb, xs, xc, gb, gs, gc, eb, es, ec)
    scalars = f32_split(float(eps))
    div_s = _nchw_hint(S, (xb, xs, xc), (gb, gs, gc), (eb, es, ec))
    split, tiles_per_split = 1, tiles
    psum = pdot = dy
    after_sums = sums and not resident
    if after_sums:
        split, tiles_per_split = rt.slices(tiles, cfg.split)
        psum = rec.empty((Ch, split), acc, dev)
        pdot = rec.empty((Ch, split), acc, dev) if dot else psum
        rec.launch(_sums_kernel, (c_blocks, split), x, dy, dxp, mean_v, var_v, w, psum, pdot, *common,
                   tiles_per_split, *scalars, ACC=tl_dtype(acc), SPLIT=split, GROUP=_groups(x, cfg),
                   BLOCK_M=cfg.BLOCK_M,
                   BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, FROM_RUNNING=not training, DOT=dot,
                   WRITE_DX=need_dx and not training, HAS_W=weight is not None, DIV_S=div_s,
                   num_warps=cfg.num_warps)
    dx_launch = need_dx and (training or not after_sums)  # (eval's dx came with the sums)
    finish = after_sums and not (dx_launch and merge_inline(cfg.BLOCK_K, split))
    dx_args = (x, dy, dxp, mean_v, var_v, w, psum, pdot, dwp, dbp)
    flags = dict(FROM_RUNNING=not training, DOT=dot, HAS_W=weight is not None, ACC=tl_dtype(acc), SPLIT=split,
                 BLOCK_S=rt.next_pow2(split))
    coef = psum
    if finish:  # the partials merged once per channel: dw, db, and training's per-channel dx coefficients
        coefs = training and need_dx
        coef = rec.empty((2, Ch), acc, dev) if coefs else psum
        block_c, warps = finish_block(Ch, split)
        rec.launch(_dx_kernel, (rt.cdiv(Ch, block_c),), *dx_args, coef, *common, tiles_per_split, 1, *scalars,
                   RESIDENT=False, SUMS=True, HAS_DX=False, HAS_DW=need_dw, HAS_DB=need_db, BLOCK_M=1, BLOCK_N=1,
                   BLOCK_K=block_c, STORE_COEFS=coefs, num_warps=warps, **flags,
                   **rt.dependent_launch(dev))  # (after the sums launch)
    if dx_launch or not finish:
        units = split * tiles_per_split
        if dx_launch:
            tiles_per_program, grid = _tiles_per_program(cfg, c_blocks, units)
        else:  # dw and db only (the sums from one tile): one program per channel block
            tiles_per_program, grid = units, (c_blocks,)
        rec.launch(_dx_kernel, grid, *dx_args, coef, *common, tiles_per_split, tiles_per_program, *scalars,
                   RESIDENT=resident, SUMS=after_sums and not finish, HAS_DX=dx_launch,
                   HAS_DW=need_dw and not finish, HAS_DB=need_db and not finish, BLOCK_M=cfg.BLOCK_M,
                   BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, DIV_S=div_s, COEFS=finish, num_warps=cfg.num_warps,
                   **flags, **(rt.dependent_launch(dev) if after_sums else {}))  # (after the sums or finish launch)
    rec.save(key, *outs)
    return dx, dw, db


def _check_grad_out(op: str, grad_out: torch.Tensor, input: torch.Tensor) -> None:
    """RuntimeError unless ``grad_out`` is a tensor of the input's shape and dtype."""
    if not isinstance(grad_out, torch.Tensor) or grad_out.shape != input.shape or grad_out.dtype != input.dtype:
        raise RuntimeError(f"{op}(): grad_out must have the input's shape {list(input.shape)} and dtype "
                           f"{input.dtype}, got {getattr(grad_out, 'shape', type(grad_out))}")


def _canonical(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor | None) -> tuple[
        torch.Tensor, torch.Tensor, tuple[int, int], tuple[tuple[int, int, int], ...]]:
    """(x, dy, (B, S), ((b, s, c) strides of x, dy, dx)) over one (batch, spatial, channel) view.

    The spatial dims are merged in the order of x's strides (channels-last: the order of memory) when x, dy and
    dx all merge in it, else in the standard order, gathering x or dy into a contiguous copy where they do not
    (logged: a permuted input, a dy in another layout than x). dx is contiguous or channels-last: it always
    merges in the standard order. Batch merges into spatial where every tensor allows (channels-last)."""
    order = _spatial_order(x)
    tensors = [x, dy] + ([dx] if dx is not None else [])
    views = [_bsc(t, order) for t in tensors]
    if any(v is None for v in views):
        order = [d for d in range(2, x.dim()) if x.shape[d] != 1]
        for i in range(2):  # (dx, contiguous or channels-last, merges in the standard order)
            if _bsc(tensors[i], order) is None:
                log.debug("tritred.batch_norm backward: strides %s are gathered (one copy)", tensors[i].stride())
                tensors[i] = tensors[i].contiguous()
        views = [_bsc(t, order) for t in tensors]
    x, dy = tensors[0], tensors[1]
    full = [v for v in views if v is not None]
    assert len(full) == len(views), "dx merges in the standard order"
    if dx is None:
        full.append(full[1])  # (no dx: its strides are never used)
    B = x.shape[0]
    S = full[0][0]
    if S == 1:  # [B, C]: the batch is the spatial axis
        return x, dy, (1, B), tuple((0, v[1], v[3]) for v in full)
    if B == 1 or all(v[1] == S * v[2] for v in full):  # channels-last (or one image): batch and spatial merge
        return x, dy, (1, B * S), tuple((0, v[2], v[3]) for v in full)
    return x, dy, (B, S), tuple((v[1], v[2], v[3]) for v in full)


# -- pieces of a batch_norm whose statistics are shared across processes (tritred_ops.nn.SyncBatchNorm) ---------

def _check_pieces(op: str, grad_out: torch.Tensor, input: torch.Tensor,
                  **per_channel: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_out, input) of a backward piece, negative-bit views materialized, after the checks of
    :func:`_backward`: grad_out of the input's shape and dtype, per-channel tensors of C elements, one device."""
    _check_grad_out(op, grad_out, input)
    if input.dim() < 2:
        raise ValueError(f"{op}(): expected at least 2D input (got {input.dim()}D input)")
    for name, t in per_channel.items():
        if t is not None and t.numel() != input.shape[1]:
            raise RuntimeError(f"{op}(): {name} should contain {input.shape[1]} elements not {t.numel()}")
    rt.check_same_device(op, input, grad_out=grad_out, **per_channel)
    return grad_out.resolve_neg(), input.resolve_neg()


def batch_norm_backward_sums_call(spec: ReductionSpec, grad_out: torch.Tensor, input: torch.Tensor,
                                  mean: torch.Tensor, invstd: torch.Tensor) -> torch.Tensor:
    """This process's per-channel sums of a training batch_norm's backward, as one ``[2, C]`` tensor in fp32 (fp64
    for fp64 inputs): ``[0]`` sum(dy), ``[1]`` sum(dy * x_hat) with ``x_hat = (x - mean) * invstd`` (the given
    statistics, ``[C]`` in that dtype). They are also this process's bias and weight gradients. An empty input
    gives zeros.

    The backward's sums launch (its config and tiles; no dx written), then :func:`_sums_finish_kernel` summing each
    channel's partials once in a fixed order, a dependent launch on sm_90+.
    """
    op = "batch_norm_backward"
    saved, key = replay_plan("batch_norm_backward_sums", (), grad_out, input, mean, invstd)
    if saved is not None:
        return saved[0]
    grad_out, input = _check_pieces(op, grad_out, input, mean=mean, invstd=invstd)
    Ch, dev, acc = input.shape[1], input.device, acc_dtype(input.dtype)
    if input.numel() == 0:
        return torch.zeros((2, Ch), dtype=acc, device=dev)
    rt.check_runnable(op, input)
    rec = Recorder(grad_out, input, mean, invstd)
    x, dy, (B, S), strides = _canonical(input, grad_out, None)
    (xb, xs, xc), (gb, gs, gc), _ = strides
    cfg = _decide(spec, x, B, S, Ch, strides[:2], direction="backward")
    mean_v, invstd_v = rt.unit_stride(mean), rt.unit_stride(invstd)
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    split, tiles_per_split = rt.slices(tiles, cfg.split)
    psum, pdot = rec.empty((Ch, split), acc, dev), rec.empty((Ch, split), acc, dev)
    rec.launch(_sums_kernel, (rt.cdiv(Ch, cfg.BLOCK_K), split), x, dy, dy, mean_v, invstd_v, dy, psum, pdot, B, S,
               Ch, xb, xs, xc, gb, gs, gc, gb, gs, gc, tiles_per_split, 0.0, 0.0, ACC=tl_dtype(acc), SPLIT=split,
               GROUP=_groups(x, cfg), BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, FROM_RUNNING=False,
               DOT=True, WRITE_DX=False, HAS_W=False, DIV_S=_nchw_hint(S, (xb, xs, xc), (gb, gs, gc)),
               num_warps=cfg.num_warps)
    out = rec.empty((2, Ch), acc, dev)
    block_c, warps = finish_block(Ch, split)
    rec.launch(_sums_finish_kernel, (rt.cdiv(Ch, block_c),), psum, pdot, invstd_v, out, Ch, SPLIT=split,
               BLOCK_S=rt.next_pow2(split), BLOCK_K=block_c, num_warps=warps,
               **rt.dependent_launch(dev))  # (after the sums launch)
    rec.save(key, out)
    return out


def batch_norm_backward_dx_call(spec: ReductionSpec, grad_out: torch.Tensor, input: torch.Tensor,
                                weight: torch.Tensor | None, mean: torch.Tensor, invstd: torch.Tensor,
                                coef: torch.Tensor) -> torch.Tensor:
    """A training batch_norm's grad_input from given per-channel coefficients: ``dx = weight * invstd * (dy -
    coef[0] - (x - mean) * coef[1])``, the backward's dx launch reading ``coef`` (``COEFS``) instead of merging
    sums. With sums over the whole (global) batch of n values per channel, ``coef[0] = sum(dy) / n`` and
    ``coef[1] = sum(dy * x_hat) * invstd / n`` give torch's ``batch_norm_backward_elemt``.

    Args:
        grad_out, input: ``[B, C, *spatial]``, the same shape and dtype, any strides.
        weight: ``[C]`` or None (1). mean, invstd: ``[C]`` in fp32 (fp64 for fp64 inputs).
        coef: ``[2, C]`` contiguous, in that dtype.

    Returns:
        dx of the input's shape and dtype, in batch_norm's output memory format.
    """
    op = "batch_norm_backward"
    saved, key = replay_plan("batch_norm_backward_dx", (), grad_out, input, weight, mean, invstd, coef)
    if saved is not None:
        return saved[0]
    grad_out, input = _check_pieces(op, grad_out, input, weight=weight, mean=mean, invstd=invstd)
    Ch, dev, acc = input.shape[1], input.device, acc_dtype(input.dtype)
    if coef.shape != (2, Ch) or not coef.is_contiguous() or coef.dtype != acc:
        raise RuntimeError(f"{op}(): coef must be a contiguous [2, {Ch}] tensor of {acc}, got "
                           f"{list(coef.shape)} {coef.dtype}")
    rec = Recorder(grad_out, input, weight, mean, invstd, coef)
    dx = rec.adopt(torch.empty(input.shape, dtype=input.dtype, device=dev, memory_format=_out_format(input)))
    if input.numel() == 0:
        return dx
    rt.check_runnable(op, input)
    x, dy, (B, S), strides = _canonical(input, grad_out, dx)
    (xb, xs, xc), (gb, gs, gc), (eb, es, ec) = strides
    cfg = _decide(spec, x, B, S, Ch, strides[:2], direction="backward")
    mean_v, invstd_v = rt.unit_stride(mean), rt.unit_stride(invstd)
    w = rt.unit_stride(weight) if weight is not None else dy
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    tiles_per_program, grid = _tiles_per_program(cfg, rt.cdiv(Ch, cfg.BLOCK_K), tiles)
    rec.launch(_dx_kernel, grid, x, dy, dx, mean_v, invstd_v, w, dy, dy, dy, dy, coef, B, S, Ch, xb, xs, xc, gb, gs,
               gc, eb, es, ec, tiles, tiles_per_program, 0.0, 0.0, FROM_RUNNING=False, RESIDENT=False, SUMS=False,
               DOT=True, HAS_DX=True, HAS_DW=False, HAS_DB=False, HAS_W=weight is not None, ACC=tl_dtype(acc),
               SPLIT=1, BLOCK_S=1, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K,
               DIV_S=_nchw_hint(S, (xb, xs, xc), (gb, gs, gc), (eb, es, ec)), num_warps=cfg.num_warps, COEFS=True)
    rec.save(key, dx)
    return dx
