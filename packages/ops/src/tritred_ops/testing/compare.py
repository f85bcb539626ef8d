"""Comparing an op's output with its torch reference: tolerances per dtype, structure, NaN and inf positions.

:func:`compare` is the rule ``tritred check`` and the bench apply (see :mod:`tritred_ops.testing`): the same
structure (tensor, tuple, named tuple with the same field names), shapes and dtypes as torch's, NaN and ±inf in
exactly the same positions as the float64 reference, integer/bool/index outputs exactly equal, and floats within
``atol + rtol * |ref|`` with ``(atol, rtol)`` from :data:`TOLERANCES` for the output dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: (atol, rtol) per floating output dtype; integer, bool and index outputs must be exactly equal.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-10, 1e-10),
}

#: How much of torch's own error (dtype-exact call vs the float64 reference) tritred may make.
TORCH_ERROR_SLACK = 2.0

#: ``atol`` floor of the ``offset`` case (inputs around 1000, spread 1): about 8 x 1000 x the epsilon of the
#: float32 (float64) accumulator. Catastrophic cancellation (E[x^2] - E[x]^2, unshifted exp) errs by far more.
OFFSET_ATOL: dict[str, float] = {"float32": 1e-3, "float64": 2e-12}


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`: ``ok``, the worst absolute/relative error seen and what went wrong."""

    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    message: str = ""


def _dtype_name(dtype: torch.dtype | str) -> str:
    return str(dtype).removeprefix("torch.")


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    d = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return d


def tolerance(dtype: torch.dtype | str) -> tuple[float, float]:
    """``(atol, rtol)`` for outputs of ``dtype``; ``(0, 0)`` (exact) for integer and bool dtypes."""
    return TOLERANCES.get(_dtype_name(dtype), (0.0, 0.0))


def _field_names(obj: Any) -> tuple[str, ...] | None:
    names = getattr(type(obj), "_fields", None) or getattr(type(obj), "__match_args__", None)
    return tuple(names) if names else None


def _leaves(out: Any, ref: Any, path: str = "out") -> tuple[list[tuple[str, Any, Any]], str | None]:
    """Pair up the tensors of ``out`` and ``ref``; the second item is a structure mismatch message, if any."""
    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)):
            return [], f"{path}: expected a tuple of {len(ref)} tensors (like torch), got {type(out).__name__}"
        if len(out) != len(ref):
            return [], f"{path}: expected {len(ref)} outputs (like torch), got {len(out)}"
        names = _field_names(ref)
        if names:
            for i, name in enumerate(names):
                if getattr(out, name, None) is not out[i]:
                    return [], (f"{path}: torch returns a named tuple ({', '.join(names)}); "
                                f"the output has no field {name!r} at position {i}")
        pairs: list[tuple[str, Any, Any]] = []
        for i, (o, r) in enumerate(zip(out, ref)):
            sub = f"{path}.{names[i]}" if names else f"{path}[{i}]"
            more, err = _leaves(o, r, sub)
            if err:
                return [], err
            pairs.extend(more)
        return pairs, None
    if ref is None:
        return ([], None) if out is None else ([], f"{path}: expected None, got {type(out).__name__}")
    if not isinstance(ref, torch.Tensor):
        ref = torch.as_tensor(ref)
    if not isinstance(out, torch.Tensor):
        if isinstance(out, (int, float, bool)):
            out = torch.as_tensor(out)
        else:
            return [], f"{path}: expected a Tensor, got {type(out).__name__}"
    return [(path, out, ref)], None


def _where(mask: torch.Tensor) -> str:
    idx = mask.nonzero()
    return str(tuple(idx[0].tolist())) if idx.numel() else "()"


def _compare_leaf(path: str, o: torch.Tensor, r: torch.Tensor, tol_dtype: torch.dtype | str | None,
                  atol: float | None, rtol: float | None, check_dtype: bool, relative_to_max: bool) -> Comparison:
    if tuple(o.shape) != tuple(r.shape):
        return Comparison(False, math.inf, math.inf, f"{path}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
    if check_dtype and o.dtype != r.dtype:
        return Comparison(False, math.inf, math.inf, f"{path}: dtype {_dtype_name(o.dtype)}, "
                                                     f"expected {_dtype_name(r.dtype)}")
    o, r = o.detach(), r.detach().to(o.device)  # compared where they are (a GPU is faster at it)
    if o.numel() == 0:
        return Comparison(True)
    floating = o.dtype.is_floating_point or o.dtype.is_complex
    if not floating:  # integers, bool, indices: exact
        rr = r if not r.dtype.is_floating_point else r.to(o.dtype)
        bad = o.to(torch.int64) != rr.to(torch.int64)
        if bad.any():
            first = _where(bad)
            i = tuple(int(v) for v in bad.nonzero()[0])
            return Comparison(False, math.inf, math.inf,
                              f"{path}: {int(bad.sum())} of {o.numel()} values differ; first at {first}: "
                              f"got {o[i].item()}, expected {rr[i].item()}")
        return Comparison(True)
    d_atol, d_rtol = tolerance(tol_dtype if tol_dtype is not None else o.dtype)
    atol = d_atol if atol is None else atol
    rtol = d_rtol if rtol is None else rtol
    od = o.to(torch.float64)
    # NaN/inf pattern against the reference rounded to the output dtype: overflow in that dtype is inf.
    rs = r.to(o.dtype).to(torch.float64) if r.dtype.is_floating_point else r.to(torch.float64)
    rd = r.to(torch.float64)
    for what, fo, fr in (("NaN", od.isnan(), rs.isnan()),
                         ("+inf", od == math.inf, rs == math.inf),
                         ("-inf", od == -math.inf, rs == -math.inf)):
        diff = fo != fr
        if diff.any():
            i = tuple(int(v) for v in diff.nonzero()[0])
            return Comparison(False, math.inf, math.inf,
                              f"{path}: {what} positions differ at {int(diff.sum())} of {o.numel()} elements; "
                              f"first at {i}: got {o[i].item()}, expected {rs[i].item()}")
    finite = od.isfinite() & rs.isfinite()
    if not finite.any():
        return Comparison(True)
    err = torch.where(finite, (od - rd).abs(), torch.zeros_like(od))
    mag = rd.abs()
    if relative_to_max:  # norm-wise: rtol relative to the largest finite reference value
        allowed = torch.full_like(mag, atol + rtol * float(mag[finite].max()))
    else:
        allowed = atol + rtol * mag
    bad = finite & (err > allowed)
    max_abs = float(err.max())
    rel_mask = finite & (mag > max(atol, 1e-300))
    max_rel = float((err[rel_mask] / mag[rel_mask]).max()) if rel_mask.any() else 0.0
    if bad.any():
        worst = torch.where(bad, err - allowed, torch.full_like(err, -math.inf)).argmax()
        i = tuple(int(v) for v in torch.unravel_index(worst, od.shape))
        return Comparison(False, max_abs, max_rel,
                          f"{path}: {int(bad.sum())} of {o.numel()} values outside atol={atol:.3g} rtol={rtol:.3g}; "
                          f"worst at {i}: got {o[i].item():.8g}, expected {rd[i].item():.8g} "
                          f"(abs err {float(err[i]):.3g})")
    return Comparison(True, max_abs, max_rel)


def compare(out: Any, ref: Any, dtype: torch.dtype | str | Sequence[torch.dtype | str | None] | None = None, *,
            atol: float | Sequence[float | None] | None = None, rtol: float | None = None,
            check_dtype: bool = True, relative_to_max: bool = False) -> Comparison:
    """Compare an output (tensor, tuple or named tuple) with a reference result.

    Args:
        out: what the implementation returned.
        ref: what the reference returned: the same structure; named tuples must keep their field names.
        dtype: the dtype whose tolerance (:data:`TOLERANCES`) applies to floating tensors: one dtype for all,
            one per tensor (in flattening order), or None for each output tensor's own dtype.
        atol, rtol: override the tolerance (``atol`` may also be given per tensor).
        check_dtype: require ``out`` tensors to have the reference's dtypes. Pass False when ``ref`` is a
            float64 reference: NaN/inf positions are then taken from ``ref`` cast to each output's dtype.
        relative_to_max: scale ``rtol`` by the largest finite ``|ref|`` of each tensor instead of each element's
            (a norm-wise check, for comparing two results that both carry rounding error, e.g. in the bench).

    Returns:
        A :class:`Comparison`. Rules: same structure and shapes; integer/bool tensors exactly equal; floating
        tensors with NaN, +inf and -inf in exactly the same positions and the other values within
        ``atol + rtol * |ref|`` (computed in float64).
    """
    pairs, err = _leaves(out, ref)
    if err:
        return Comparison(False, math.inf, math.inf, err)
    n = len(pairs)
    dtypes: list[torch.dtype | str | None] = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * n  # type: ignore[list-item]
    atols: list[float | None] = list(atol) if isinstance(atol, (list, tuple)) else [atol] * n  # type: ignore[list-item]
    if len(dtypes) != n or len(atols) != n:
        raise ValueError(f"compare(): {n} output tensors but {len(dtypes)} dtypes / {len(atols)} atols")
    worst_abs = worst_rel = 0.0
    for (path, o, r), d, a in zip(pairs, dtypes, atols):
        c = _compare_leaf(path, o, r, d, a, rtol, check_dtype, relative_to_max)
        if not c.ok:
            return c
        worst_abs, worst_rel = max(worst_abs, c.max_abs_err), max(worst_rel, c.max_rel_err)
    return Comparison(True, worst_abs, worst_rel)
