"""The backward host path of layer_norm and rms_norm: the joint view of input, output gradient and input gradient,
the backward launch decision, the gradient launch and the launch that sums the weight-gradient partials.

Kernels: :mod:`.backward_kernels`. rms_norm (``tritred_ops.families.rms_norm``) takes the same path with
``rms=True`` (no mean, no bias). What the launches read and write, per row of N elements: x and dy once, dx once
(the loop: x and dy twice), plus one fp32 partial row of dw and one of db per program (a few hundred programs),
written once and read once more by the summing launch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from tritred_core import LaunchConfig, ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, tl_dtype
from ...runtime import Recorder, replay_plan
from .backward_kernels import _norm_backward_kernel, _partials_sum_kernel
from .rules import partials_sum_tile

log = logging.getLogger("tritred")


def _joint_view(x: torch.Tensor, g: torch.Tensor, out_strides: Sequence[int], dims: tuple[int, ...],
                ) -> tuple[torch.Tensor, torch.Tensor, rt.View | None]:
    """The M x N x K view shared by the input, the output gradient (any strides: expanded, transposed) and the
    input gradient, reduced over the normalized ``dims`` in order; where their strides share none, the input and
    the gradient are read from contiguous copies (logged). None where even those share none with ``out_strides``
    (an input gradient that is not contiguous)."""
    view = rt.canonical_view(x.shape, [x.stride(), g.stride(), out_strides], dims, reorder_reduced=False)
    if view is None:
        log.debug("norm backward: dims %s of a %s input (strides %s) and its gradient (strides %s) share "
                          "no strided view: both are read from contiguous copies", dims, tuple(x.shape), x.stride(),
                          g.stride())
        x, g = x.contiguous(), g.contiguous()
        view = rt.canonical_view(x.shape, [x.stride(), g.stride(), out_strides], dims, reorder_reduced=False)
    return x, g, view


def _check_config(cfg: LaunchConfig, op: str) -> bool:
    """Whether ``cfg`` is a single pass (else the loop); ValueError for what the backward kernel does not take."""
    who = cfg.decided_by or "the launch-config hook"
    if cfg.strategy not in ("single_pass", "multi_pass"):
        raise ValueError(f"{op} backward: strategy {cfg.strategy!r} (config from {who}) is not supported by the "
                         f"backward kernel: single_pass or multi_pass")
    if cfg.BLOCK_TAIL or cfg.threads_per_row:
        raise ValueError(f"{op} backward: BLOCK_TAIL and threads_per_row (config from {who}) are forward knobs; the "
                         f"backward kernel holds a row block in one [BLOCK_M, BLOCK_N] tile")
    return cfg.strategy == "single_pass"


def _div_hint(view: rt.View) -> int:
    """DIV of the backward kernel: the largest power of two (2-8) dividing N and the three tensors' row strides
    when the input's rows are unit-stride and Triton cannot see it (it specializes on 16 only); else 1."""
    if view.strides[0][1] != 1 or view.N <= 1:
        return 1
    d = rt.pow2_divisor(view.N, *(s[0] for s in view.strides))
    return d if 1 < d < 16 else 1


def norm_backward(spec: ReductionSpec, grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int],
                  mean: torch.Tensor | None, rstd: torch.Tensor, weight: torch.Tensor | None,
                  bias: torch.Tensor | None, output_mask: Sequence[bool], rms: bool = False,
                  dx_like: torch.Tensor | None = None,
                  ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(dx, dw, db) of layer_norm (``rms``: rms_norm, whose ``mean`` and ``bias`` are None) from the forward's
    saved input, weight and per-row ``mean``/``rstd`` (fp32, fp64 for fp64 inputs; shaped like the leading dims,
    any shape of that many elements). ``output_mask``: which of the three to compute (None for the others, and for
    dw/db without a weight/bias).

    dx: the input's shape and dtype, contiguous (as torch's layer_norm), or laid out as ``torch.empty_like(dx_like)``
    where ``dx_like`` is given; dw, db: the weight's/bias's shape and dtype, summed in fp32 (fp64 for fp64 inputs
    or weights) and rounded once.

    Raises:
        RuntimeError: ``grad_out`` not of the input's shape, or statistics of the wrong size.
        ValueError: a launch config the backward kernel cannot run (another strategy, a forward-only knob).
    """
    op = spec.name
    need_dx = bool(output_mask[0])
    need_dw = bool(output_mask[1]) and weight is not None
    need_db = bool(output_mask[2]) and bias is not None and not rms
    ns = tuple(int(s) for s in normalized_shape)
    # (the key's arguments flat, all ints and bools: a key of plain scalars is built without typing each element)
    saved, key = replay_plan(f"{op}_backward", (len(ns), *ns, need_dx, need_dw, need_db), grad_out, input, mean, rstd,
                            weight, bias)
    if saved is not None:
        found = iter(saved)
        return tuple(next(found) if need else None for need in (need_dx, need_dw, need_db))  # type: ignore[return-value]
    D = len(ns)
    if tuple(grad_out.shape) != tuple(input.shape):
        raise RuntimeError(f"{op}_backward(): expected grad_out of the input's shape {list(input.shape)}, got "
                           f"{list(grad_out.shape)}")
    if D == 0 or tuple(input.shape[input.dim() - D:]) != ns:
        raise RuntimeError(f"{op}_backward(): normalized_shape={list(ns)} does not end the input's shape "
                           f"{list(input.shape)}")
    lead = input.shape[: input.dim() - D]
    R, N = rt.prod(lead), rt.prod(ns)
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t is not None and t.numel() != R:
            raise RuntimeError(f"{op}_backward(): expected {name} of {R} elements (one per row), got {t.numel()}")
    rec = Recorder(grad_out, input, mean, rstd, weight, bias)
    dx = None
    if need_dx:
        dx = rec.adopt(torch.empty_like(dx_like, dtype=input.dtype)) if dx_like is not None else \
            rec.empty(input.shape, input.dtype, input.device)
    dw = rec.empty(weight.shape, weight.dtype, input.device) if need_dw else None  # type: ignore[union-attr]
    db = rec.empty(bias.shape, bias.dtype, input.device) if need_db else None  # type: ignore[union-attr]
    if not (need_dx or need_dw or need_db):
        return None, None, None
    if input.numel() == 0:  # no rows (dw, db: sums of nothing) or rows of no elements (nothing to compute)
        for t in (dw, db):
            if t is not None:
                t.zero_()
        return dx, dw, db
    dims = tuple(range(input.dim() - D, input.dim()))
    out = dx  # (what the kernel writes: dx, or a contiguous buffer copied into it)
    out_strides = list(dx.stride()) if dx is not None else list(rt.contiguous_strides(input.shape))
    x, g, view = _joint_view(input, grad_out, out_strides, dims)
    if view is None:  # (a dx laid out as a dy whose strides no view shares with contiguous copies: one more copy)
        out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
        view = rt.canonical_view(x.shape, [x.stride(), g.stride(), out.stride()], dims, reorder_reduced=False)
        assert view is not None
    assert view.M * view.K == R and view.N == N
    cfg = rt.decide(spec, x, view, direction="backward")
    single = _check_config(cfg, op)
    acc = acc_dtype(x.dtype)
    pacc = torch.float64 if acc == torch.float64 or (weight is not None and weight.dtype == torch.float64) \
        else torch.float32
    w = rt.unit_stride(weight) if weight is not None else None
    (sxm, sxn, sxk), (sgm, sgn, sgk), (som, son, sok) = view.strides
    dummy = x
    # (the statistics are read flat: a contiguous tensor as it is, so that the call's plan can name it)
    stats = [t if t.is_contiguous() else t.contiguous() for t in (mean if mean is not None else rstd, rstd)]

    # (the loop's per-row sums, [R, 2])
    cs = rec.empty((R, 2), acc, x.device) if need_dx and not single else None

    def args(pw: torch.Tensor | None, pb: torch.Tensor | None) -> tuple[object, ...]:
        return (x, g, w if w is not None else dummy, stats[0], stats[1], out if out is not None else dummy,
                pw if pw is not None else dummy, pb if pb is not None else dummy, cs if cs is not None else dummy,
                R, N, view.K, sxm, sxn, sxk, sgm, sgn, sgk, som, son, sok)
    kwargs = dict(RMS=rms, HAS_W=w is not None, NEED_DX=need_dx, NEED_DW=need_dw, NEED_DB=need_db,
                  ACC=tl_dtype(acc), PACC=tl_dtype(pacc), SINGLE=single, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
                  LOOP_STAGES=cfg.num_stages if single else 1, EVEN=single and N == cfg.BLOCK_N,
                  DIV=_div_hint(view), num_warps=cfg.num_warps)
    programs = rt.cdiv(R, cfg.BLOCK_M)
    if cfg.num_programs:
        programs = min(programs, cfg.num_programs)
    if x.device.type == "cuda":  # a persistent grid of what the device holds at once (the compiled kernel's)
        part = torch.empty(1, dtype=pacc, device=x.device)  # (a placeholder of the partials' alignment)
        programs = min(programs, max(1, rt.resident_programs(_norm_backward_kernel, x, args(part, part), kwargs)))
    elif not cfg.num_programs:
        programs = min(programs, 4)
    pw = rec.empty((programs, N), pacc, x.device) if need_dw else None
    pb = rec.empty((programs, N), pacc, x.device) if need_db else None
    rec.launch(_norm_backward_kernel, (programs,), *args(pw, pb), **kwargs)
    if need_dw or need_db:
        block_p, block_n = partials_sum_tile(N)
        rec.launch(_partials_sum_kernel, (rt.cdiv(N, block_n),), pw if pw is not None else dummy,
                   pb if pb is not None else dummy, dw if dw is not None else dummy,
                   db if db is not None else dummy, programs, N, HAS_W=need_dw, HAS_B=need_db, PACC=tl_dtype(pacc),
                   BLOCK_P=block_p, BLOCK_N=block_n, num_warps=4, **rt.dependent_launch(x.device))
    if dx is not None and out is not None and out is not dx:  # (a buffer the plan cannot name: no plan is kept)
        dx.copy_(out)
    outs = [t for t in (dx, dw, db) if t is not None]
    rec.save(key, *outs)
    return dx, dw, db
