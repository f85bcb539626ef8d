"""The host path of the reductions: checks, the canonical view, stages, the launch decision, launches, replay.

With ``strategy="split"`` each output's N range is cut into ``split`` slices reduced by separate programs into a
partials buffer [outputs, split]; ``_rows_kernel`` then combines the partials in a fixed order (deterministic,
no atomics). Accumulation is fp32 for fp16/bf16/fp32, fp64 for fp64, int64 for integers and bool.

Reduced dims that are not one strided axis (``sum(x, (0, 2, 3))`` of NCHW: per-channel sums) go in stages, one
launch per group of dims, through contiguous temporaries in the accumulation dtype (:func:`_reduce_into`): each
(n, c) row of H*W first, then n. Each stage reads its input once; only the last divides (mean) and rounds.
Inputs whose dims cannot even be staged (sliced in several dims) are gathered into one copy, logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tritred_core import LaunchConfig, ReductionSpec

from ... import runtime as rt
from ...kernels.combine import MAX, MIN, PROD
from ...kernels.dtypes import acc_dtype, f32_split, identity, pre_cast, tl_dtype
from ...kernels.rows import loop_evicts
from ...runtime import Recorder, Unset, replay_plan
from .arg_kernels import _arg_cols_kernel, _arg_rows_kernel
from .kernels import _cols_kernel, _rows_kernel


def _values_indices(name: str, values: torch.Tensor, indices: torch.Tensor) -> Any:
    """``torch.return_types.max`` / ``min`` of (values, indices): the type torch's own max/min with dim return."""
    return (torch.return_types.max if name == "max" else torch.return_types.min)((values, indices))


def _launch_reduce(rec: Recorder, op: int, name: str, x: torch.Tensor, view: rt.View, out: torch.Tensor,
                   cast: torch.dtype, acc: torch.dtype, mean_divisor: float, cfg: LaunchConfig,
                   staged: tuple[bool, bool] = (False, False)) -> None:
    """Run one plain reduction of ``x`` (described by ``view``) into ``out`` with config ``cfg``. ``staged``: (``x``
    is, ``out`` is) a stage's temporary; a float product then passes its marks of partials out of float range
    (``kernels._prod_specials``)."""
    (sxm, sxn, sxk), (som, _, sok) = view.strides
    R = view.M * view.K
    ident = identity(op, acc)
    consts = dict(OP=op, IDENT=ident, ACC=tl_dtype(acc), MEAN=mean_divisor > 0, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    marks = op == PROD and acc.is_floating_point
    if marks:  # (other ops: no such arguments, no other compiled variants)
        consts.update(MARK_IN=staged[0], MARK_OUT=staged[1])
    split, nps = rt.split_plan(cfg, view.N)
    target = rec.empty((R, split), acc, x.device) if split > 1 else out
    if rt.rows_layout(view):
        programs, persist = rt.row_programs(cfg, R, split)
        grid = (programs, split)
        single = split == 1 and cfg.BLOCK_N + cfg.BLOCK_TAIL >= view.N
        align = rt.row_align(x, view, cfg, single)  # (a split's slices too: each shifted as a row of its own)
        rec.launch(
            _rows_kernel, grid, x, target, R, view.N, view.K, sxm, sxn, sxk, som, sok, nps, *f32_split(mean_divisor),
            PRE=pre_cast(x.dtype, cast), CAST=tl_dtype(cast), SPLIT=split, SINGLE=single, BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N, PERSIST=persist, LOOP_STAGES=cfg.num_stages, ALIGN=align,
            DIV=rt.row_hint(view, align),
            UNROLL=rt.unrolled_chunks(view.N, cfg) if not single and split == 1 and not align else 0,
            PART=1 if single else cfg.num_stages, TAIL=rt.single_tail(cfg, view, single), **consts)
    else:
        rt.no_tail(cfg, name)
        grid = (view.M * rt.cdiv(view.K, cfg.BLOCK_K), split)
        # num_stages of a column config: tiles loaded per loop iteration (see _cols_kernel)
        rec.launch(
            _cols_kernel, grid, x, target, view.M, view.N, view.K, sxm, sxn, sxk, som, sok, nps,
            *f32_split(mean_divisor), PRE=pre_cast(x.dtype, cast), CAST=tl_dtype(cast), SPLIT=split,
            BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, LOADS=cfg.num_stages, DIV=rt.col_hint(view),
            **{**consts, "num_stages": 1})
    if split > 1:  # combine the partials of each output in a fixed order
        block_m, block_n = rt.combine_blocks(R, split)
        rec.launch(_rows_kernel, (rt.cdiv(R, block_m), 1), target, out, R, split, view.K, view.K * split, 1, split,
                   som, sok, split, *f32_split(mean_divisor), PRE=tl_dtype(acc), CAST=tl_dtype(acc), SPLIT=1,
                   SINGLE=True, BLOCK_M=block_m, BLOCK_N=block_n, **rt.dependent_launch(x.device),
                   **{**consts, **({"MARK_IN": True} if marks else {})})


def _first_stage(x: torch.Tensor, dims: tuple[int, ...]) -> tuple[tuple[int, ...], list[int], rt.View] | None:
    """A first stage for reduced dims that are not one strided axis of ``x`` (dims (0, 2, 3) of NCHW): the
    most reduced dims, taken in order of stride (smallest first), that are one strided axis; returns (those
    dims, the shape of the contiguous temporary that keeps every other dim, the joint view of ``x`` and that
    temporary), or None when not even one dim can go first on its own."""
    order = sorted(dims, key=lambda d: (x.stride(d), d))
    for k in range(len(order) - 1, 0, -1):
        first = tuple(sorted(order[:k]))
        shape = [s for d, s in enumerate(x.shape) if d not in first]
        temp = torch.empty(shape, device="meta")  # (its strides over x's dims, as the output's)
        view = rt.canonical_view(x.shape, [list(x.stride()), rt.out_strides(temp, x.dim(), first, False)], first)
        if view is not None:
            return first, shape, view
    return None


def _reduce_into(rec: Recorder, op: int, spec: ReductionSpec, x: torch.Tensor, dims: tuple[int, ...],
                 out: torch.Tensor, out_flat: torch.Tensor, cast: torch.dtype, acc: torch.dtype,
                 mean_divisor: float, staged: bool = False) -> bool:
    """Reduce ``dims`` of ``x`` into ``out`` (``out_flat``: ``out`` viewed without its reduced dims, for strides
    only: the kernels get ``out`` itself, so the call stays replayable). Reduced dims that are not one strided
    axis go in stages through contiguous temporaries in the accumulation dtype, smallest strides first (sum over
    (0, 2, 3) of NCHW: each (n, c) row of H*W, then n of the (N, C) partials): every stage reads its input once,
    and only the last divides (mean) and rounds to the output dtype. False when not even a first stage exists
    (the caller gathers). ``staged``: ``x`` is a stage's temporary."""
    view = rt.canonical_view(x.shape, [list(x.stride()), rt.out_strides(out_flat, x.dim(), dims, False)], dims)
    if view is not None:  # one strided axis: straight into the output
        _launch_reduce(rec, op, spec.name, x, view, out, cast, acc, mean_divisor, rt.decide(spec, x, view),
                       (staged, False))
        return True
    stage = _first_stage(x, dims)
    if stage is None:
        return False
    first, shape, view = stage
    temp = rec.empty(shape, acc, x.device)
    _launch_reduce(rec, op, spec.name, x, view, temp, cast, acc, 0.0, rt.decide(spec, x, view), (staged, True))
    rest = tuple(d - sum(f < d for f in first) for d in dims if d not in first)  # temp's dims
    return _reduce_into(rec, op, spec, temp, rest, out, out_flat, acc, acc, mean_divisor, True)


def reduce_call(spec: ReductionSpec, op: int, x: torch.Tensor, dim: int | Sequence[int] | None, keepdim: bool,
                dtype: torch.dtype | None) -> torch.Tensor:
    """The host path of sum, mean, prod, amax, amin (and max/min without dim): op code ``op`` over ``dim``."""
    name = spec.name
    saved, key = replay_plan(name, (dim, keepdim, dtype), x)
    if saved is not None:
        return saved[0]
    x = rt.check_tensor(name, "input", x)
    rt.dim_list(name, dim)  # (its TypeError: torch's argument parser's, before any check of the values)
    rt.check_supported(name, x, allow_integers=True)  # mean: integer inputs need dtype= (checked below)
    rt.check_keepdim(name, keepdim)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")
    cast = dtype if dtype is not None else x.dtype
    if cast.is_complex:
        raise NotImplementedError(f"tritred.{name}(): dtype={cast} is not supported (complex)")
    if name == "mean" and cast not in rt.FLOATS:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                           f"or complex dtype. Got: {rt.SCALAR_TYPE_NAMES.get(cast, cast)}")
    if cast not in rt.FLOATS + rt.INTEGERS:
        raise NotImplementedError(f"tritred.{name}(): dtype={cast} is not supported")
    if name in ("sum", "prod") and dtype is None and x.dtype in rt.INTEGERS:
        out_dtype = torch.int64  # torch promotes integer and bool sums/products to int64
    else:
        out_dtype = cast
    if name in ("amax", "amin") and x.numel() == 0:
        _check_nonzero_dims(name, x, dim)
    dims = rt.wrap_dims(name, dim, x.dim())
    rt.check_runnable(name, x)
    if x.numel() == 0 or any(x.shape[d] == 0 for d in dims):
        fill = {"sum": 0, "prod": 1, "mean": float("nan")}.get(name, 0)  # amax/amin: the result is empty
        return torch.full(rt.reduced_shape(x.shape, dims, keepdim), fill, dtype=out_dtype, device=x.device)
    acc = acc_dtype(cast)
    rec = Recorder(x)
    out = rec.empty(rt.reduced_shape(x.shape, dims, keepdim), out_dtype, x.device)
    count = rt.prod([x.shape[d] for d in dims])
    divisor = float(count) if name == "mean" else 0.0
    out_flat = out.view(rt.reduced_shape(x.shape, dims, False))
    if not _reduce_into(rec, op, spec, x, dims, out, out_flat, cast, acc, divisor):
        src, view, layout = rt.gathering(name, x, dims, out, keepdim)
        _launch_reduce(rec, op, name, src, view, out, cast, acc, divisor, rt.decide(spec, x, view, layout))
    rec.save(key, out)
    return out


def _check_nonzero_dims(name: str, x: torch.Tensor, dim: int | Sequence[int] | None) -> None:
    """amax/amin of an empty input, torch's checks (before the dims are wrapped and checked for repeats): a dim must
    be given, and each given dim, in order, must have a non-zero size (IndexError naming the dim as given)."""
    index = rt.as_index(dim)
    given: list[int] = [index] if index is not None else [int(d) for d in dim or ()]  # type: ignore[union-attr]
    if not given:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    for d in given:
        if x.shape[rt.wrap_dim(name, d, x.dim())] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def check_arg_form(name: str, dim: object, keepdim: object) -> tuple[bool, object]:
    """TypeError, as torch's, for the forms of max/min that tritred does not take: a tensor second argument
    (torch's elementwise binary overload), ``dim=None``, and ``keepdim`` without ``dim``. Returns (whether ``dim``
    was given, ``keepdim`` or its default False)."""
    if isinstance(dim, torch.Tensor):  # torch.max(x, other): the elementwise binary overload, not a reduction
        raise TypeError(f"tritred.{name}(): a tensor second argument is torch's binary {name}(input, other) "
                        f"(elementwise); tritred has only the reductions: use torch.{name}imum, or an int dim")
    if dim is None:  # as torch: max(input) or max(input, int dim), no max(input, None)
        raise TypeError(f"{name}() received an invalid combination of arguments - got (Tensor, NoneType): "
                        "'dim' must be an int (or omitted for the full reduction)")
    # (isinstance, not `is UNSET`: under torch.compile an identity with a default is a Python guard on every call)
    has_dim, has_keepdim = not isinstance(dim, Unset), not isinstance(keepdim, Unset)
    if has_keepdim and not has_dim:
        raise TypeError(f"{name}(): keepdim needs a dim ({name}(input) takes no keepdim)")
    return has_dim, keepdim if has_keepdim else False


def arg_call(spec: ReductionSpec, x: torch.Tensor, dim: int | Unset, keepdim: bool | Unset) -> Any:
    """The host path of max and min: with ``dim``, (values, indices); without, the full reduction."""
    name = spec.name
    saved, key = replay_plan(name, (dim, keepdim), x)
    if saved is not None:
        return _values_indices(name, *saved)
    x = rt.check_tensor(name, "input", x)
    _, keep = check_arg_form(name, dim, keepdim)
    rt.check_supported(name, x, allow_integers=True)
    keepdim = rt.check_keepdim(name, keep)
    if isinstance(dim, Unset):
        if x.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return reduce_call(spec, MAX if name == "max" else MIN, x, None, False, None)
    d = rt.wrap_dim(name, dim, x.dim())
    rt.check_runnable(name, x)
    shape = rt.reduced_shape(x.shape, (d,) if x.dim() else (), keepdim)
    rec = Recorder(x)
    values = rec.empty(shape, x.dtype, x.device)
    indices = rec.empty(shape, torch.int64, x.device)
    if x.dim() == 0:
        values.copy_(x)
        indices.zero_()
        return _values_indices(name, values, indices)
    if x.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    if x.numel() == 0:
        return _values_indices(name, values, indices)
    src, view, layout = rt.gathering(name, x, (d,), values, keepdim, reorder=False)
    cfg = rt.decide(spec, x, view, layout)
    (sxm, sxn, sxk), (som, _, sok) = view.strides
    acc = acc_dtype(x.dtype)
    R = view.M * view.K
    is_max = name == "max"
    consts = dict(IS_MAX=is_max, IDENT=identity(MAX if is_max else MIN, acc), ACC=tl_dtype(acc),
                  num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    split, nps = rt.split_plan(cfg, view.N)
    if split > 1:
        pv = rec.empty((R, split), acc, x.device)
        pi = rec.empty((R, split), torch.int64, x.device)
    else:
        pv, pi = values, indices
    rt.no_tail(cfg, name)
    if rt.rows_layout(view):
        single = cfg.strategy == "single_pass"
        # odd widths, loops only: the shifted tiles (the single pass keeps its plain masked tiles: not measured)
        align = rt.row_align(src, view, cfg, False, True) if not single else 0  # (a split's slices too)
        rec.launch(
            _arg_rows_kernel, (rt.cdiv(R, cfg.BLOCK_M), split), src, src, pv, pi, R, view.N, view.K, sxm, sxn, sxk, som,
            sok, nps, HAS_IDX_IN=False, SPLIT=split, SINGLE=single, BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N, EVICT_LOOP=not single and loop_evicts(src),
            DIV=rt.row_hint(view, align), PART=1 if single else cfg.num_stages, ALIGN=align, **consts)
    else:
        rec.launch(
            _arg_cols_kernel, (view.M * rt.cdiv(view.K, cfg.BLOCK_K), split), src, pv, pi, view.M, view.N, view.K, sxm,
            sxn, sxk, som, sok, nps, SPLIT=split, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, **consts)
    if split > 1:
        block_m, block_n = rt.combine_blocks(R, split)
        rec.launch(
            _arg_rows_kernel, (rt.cdiv(R, block_m), 1), pv, pi, values, indices, R, split, view.K, view.K * split, 1,
            split, som, sok, split, HAS_IDX_IN=True, SPLIT=1, SINGLE=False, BLOCK_M=block_m, BLOCK_N=block_n,
            **rt.dependent_launch(x.device), **consts)
    rec.save(key, values, indices)
    return _values_indices(name, values, indices)
