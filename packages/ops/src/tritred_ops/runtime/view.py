"""The canonical M x N x K view: the one way every op describes its tensors to the kernels and the launch rules.

Every op goes through :func:`canonical_view`, which describes its tensors as M x N x K index spaces (reduced over
N) with per-tensor strides, merging dims exactly like torch's TensorIterator does. Kernels then read the
caller's layout directly: a transposed, sliced or expanded input is never copied unless its reduced dims cannot
be expressed as one strided axis (``layout="gathered"``, logged: :func:`gathering`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .caches import caches

log = logging.getLogger("tritred")


@dataclass(frozen=True)
class View:
    """M x N x K index space shared by several tensors; ``strides[i] = (s_m, s_n, s_k)`` of tensor i."""

    M: int
    N: int
    K: int
    strides: tuple[tuple[int, int, int], ...]


def canonical_view(shape: Sequence[int], strides: Sequence[Sequence[int]], reduced: Sequence[int],
                   reorder_reduced: bool = True) -> View | None:
    """Cached :func:`_canonical_view` (see there)."""
    key = (tuple(shape), tuple(tuple(s) for s in strides), tuple(reduced), reorder_reduced)
    return caches().views.get_or_make(key, lambda: _canonical_view(shape, strides, reduced, reorder_reduced))


def _canonical_view(shape: Sequence[int], strides: Sequence[Sequence[int]], reduced: Sequence[int],
                    reorder_reduced: bool = True) -> View | None:
    """Describe tensors of one logical ``shape`` (per-tensor ``strides``; 0 on dims a tensor lacks) as M x N x K.

    Dims of size 1 are dropped. Adjacent kept dims merge when they merge in every tensor; reduced dims merge the
    same way (sorted by the first tensor's strides first when ``reorder_reduced``: fine for order-insensitive
    reductions, not for ops whose weights are indexed by the reduced position). Returns None when more than one
    reduced group or more than two kept groups remain (the caller gathers).
    """
    kg, rg = dim_groups(shape, strides, reduced, reorder_reduced)
    if len(rg) > 1 or len(kg) > 2:
        return None
    return view_of_groups(kg, rg, len(strides))


Group = tuple[int, list[int]]  # (size, per-tensor stride of the innermost dim) of dims that merge into one axis


def dim_groups(shape: Sequence[int], strides: Sequence[Sequence[int]], reduced: Sequence[int],
               reorder_reduced: bool = True) -> tuple[list[Group], list[Group]]:
    """(kept groups, reduced groups): adjacent dims of size > 1 merged where they merge in every tensor (reduced
    dims sorted by the first tensor's strides first when ``reorder_reduced``)."""
    red = set(reduced)
    kept_dims = [d for d in range(len(shape)) if d not in red and shape[d] != 1]
    red_dims = [d for d in range(len(shape)) if d in red and shape[d] != 1]
    if reorder_reduced:
        red_dims.sort(key=lambda d: -abs(strides[0][d]))

    def groups(dims: list[int]) -> list[Group]:
        out: list[Group] = []
        for d in dims:
            st = [s[d] for s in strides]
            if out and all(prev == cur * shape[d] for prev, cur in zip(out[-1][1], st)):
                out[-1] = (out[-1][0] * shape[d], st)
            else:
                out.append((shape[d], st))
        return out

    return groups(kept_dims), groups(red_dims)


def view_of_groups(kg: list[Group], rg: list[Group], ntensors: int) -> View:
    """The M x N x K view of at most two kept groups and at most one reduced group."""
    N, sn = (rg[0][0], rg[0][1]) if rg else (1, [0] * ntensors)
    if len(kg) == 2:
        (M, sm), (K, sk) = kg
    elif len(kg) == 1:
        size, st = kg[0]
        # A single kept group that moves faster than the reduced axis is the inner one (K): outer reduction.
        if rg and abs(st[0]) < abs(sn[0]):
            M, sm, K, sk = 1, [0] * ntensors, size, st
        else:
            M, sm, K, sk = size, st, 1, [0] * ntensors
    else:
        M, sm, K, sk = 1, [0] * ntensors, 1, [0] * ntensors
    return View(M, N, K, tuple((sm[i], sn[i], sk[i]) for i in range(ntensors)))


def rows_layout(view: View) -> bool:
    """True when the row kernels apply (reduced axis unit-stride, or no kept axis faster than it).

    Must agree with :attr:`tritred_core.Problem.inner`, which the launch rules read.
    """
    return view.strides[0][1] == 1 or view.K == 1 or view.N <= 1


def map_view(x: torch.Tensor, y: torch.Tensor, dims: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, View]:
    """Joint view of an input and its same-shaped output (softmax, layer_norm), reduced over ``dims`` in order.

    Exotic strides that do not give one (they are rare: a non-mergeable strided normalized group) are
    normalized to contiguous copies of ``x`` and a fresh contiguous ``y``.
    """
    view = canonical_view(x.shape, [x.stride(), y.stride()], dims, reorder_reduced=False)
    if view is None:
        log.debug("dims %s of a %s tensor with strides %s and its output share no strided view: the input is "
                  "gathered (one copy)", dims, tuple(x.shape), x.stride())
        x, y = x.contiguous(), torch.empty(x.shape, dtype=y.dtype, device=x.device)
        view = canonical_view(x.shape, [x.stride(), y.stride()], dims, reorder_reduced=False)
        assert view is not None
    return x, y, view



def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (torch's: a dim of size 0 or 1 steps as if it were 1)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def out_strides(out: torch.Tensor, ndim: int, dims: Sequence[int], keepdim: bool) -> list[int]:
    """Strides of ``out`` over the input's dims (0 on reduced dims), for the joint canonical view."""
    strides, j = [], 0
    for d in range(ndim):
        if d in dims:
            strides.append(0)
            j += keepdim
        else:
            strides.append(out.stride(j))
            j += 1
    return strides


#: Inputs of at least this many bytes whose kept dims merge in no order are copied in their own order (then the column
#: kernels); smaller ones take the permuted copy (then the row kernels). H100, dim=1 of sliced views, us, the
#: permuted copy -> the in-order one: amax 128x768x28x28 bf16 (154 MB) 633 -> 267 (eager 91), var 64x256x28x28 fp32
#: (52 MB) 129 -> 121 (eager 46), amin 32x192x8x8 fp16 (0.8 MB) 121 -> 242 (eager 22: a gathered call runs its
#: whole host path, and the in-order one launched three kernels, the copy and a split's two). 32 MiB: chosen between.
IN_ORDER_BYTES = 32 << 20


def gathering(name: str, x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor, keepdim: bool,
             reorder: bool = True) -> tuple[torch.Tensor, View, str]:
    """Joint canonical view of ``x`` and ``out``; gathers ``x`` (one copy, logged) when its reduced dims are not one
    strided axis or its kept dims more than two: in its own order from ``IN_ORDER_BYTES`` where that gives a view,
    else kept dims first. Returns (the tensor to read, the view, ``"strided"`` or ``"gathered"``)."""
    strides = [list(x.stride()), out_strides(out, x.dim(), dims, keepdim)]
    view = canonical_view(x.shape, strides, dims, reorder_reduced=reorder)
    if view is not None:
        return x, view, "strided"
    if not x.is_contiguous() and x.numel() * x.element_size() >= IN_ORDER_BYTES:
        # Kept dims that merge in no order (a middle dim of a sliced NCHW view: H and W rows 64 apart, 28 long)
        # merge in a contiguous copy in x's own order, which reads and writes at copy speed; the permuted copy
        # below reads the reduced dim across rows, one sector an element.
        dense = list(contiguous_strides(x.shape))  # (the copy's strides, before copying)
        view = canonical_view(x.shape, [dense, strides[1]], dims, reorder_reduced=reorder)
        if view is not None:
            log.debug("tritred.%s: the kept dims of a %s tensor with strides %s merge in no order: gathered "
                      "in order (one contiguous copy)", name, tuple(x.shape), x.stride())
            return x.contiguous(), view, "gathered"
    kept = [d for d in range(x.dim()) if d not in dims]
    log.debug("tritred.%s: reduced dims %s of a %s tensor with strides %s are gathered (one copy)",
                name, dims, tuple(x.shape), x.stride())
    g = x.permute(*kept, *dims).reshape(out.numel(), -1)
    view = View(out.numel(), g.shape[1], 1, ((g.stride(0), g.stride(1), 0), (1, 0, 0)))
    return g, view, "gathered"
