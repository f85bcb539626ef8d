"""Correctness checks: a provider's output against eager's, its gradients against a float64 reference.

:func:`eager_reference` and :func:`training_reference` compute what every provider of a case is checked against
(once per case, in a :class:`Reference`); :func:`check_output` and :func:`check_gradients` compare one provider's
results with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tritred_core import Reduction

from .inputs import clone_inputs
from .providers import torch_op
from .suites import Case
from .timing import sync
from .training import differentiable, grad_slots, require_grad, tensors, upcast, upstream_gradients

log = logging.getLogger("tritred.bench")


def check_output(out: Any, ref: Any, rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """'' when ``out`` matches the eager result ``ref``, else why not.

    Floats within the dtype's tolerance (``tritred_ops.testing.TOLERANCES``) relative to the largest reference
    magnitude (both sides carry rounding error); NaN/inf positions and integers exact; ``indices`` may differ
    at ties (the input values they point at must be equal).
    """
    from tritred_ops.testing import compare

    cmp = compare(out, ref, relative_to_max=True)
    if cmp.ok:
        return ""
    if "indices" in rec.spec.outputs and isinstance(out, tuple) and len(out) == 2 and args:
        # Ties: accept other indices when the values there are the same (and the values output matches).
        values_cmp = compare(out[0], ref[0], relative_to_max=True)
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        x = args[0]
        if values_cmp.ok and isinstance(dim, int) and isinstance(x, torch.Tensor) and out[1].shape == ref[1].shape:
            keep = kwargs.get("keepdim", False)
            oi, ri = (out[1], ref[1]) if keep else (out[1].unsqueeze(dim), ref[1].unsqueeze(dim))
            if oi.dtype == ri.dtype == torch.int64 and bool((oi >= 0).all() and (oi < x.shape[dim]).all()):
                a, b = x.gather(dim, oi), x.gather(dim, ri)
                if bool(((a == b) | (a.isnan() & b.isnan())).all()):
                    return ""
    return cmp.message


def _slot_name(op: str, slot: Any) -> str:
    if isinstance(slot, str):
        return slot
    names = {"layer_norm": {2: "weight", 3: "bias"}, "rms_norm": {2: "weight"},
             "batch_norm": {3: "weight", 4: "bias"}}.get(op, {})
    return "input" if slot == 0 else names.get(slot, f"args[{slot}]")


def check_gradients(grads: Sequence[torch.Tensor | None], ref: Sequence[torch.Tensor | None], op: str,
                    slots: Sequence[Any], dtype: torch.dtype, atols: Sequence[float | None] | None = None) -> str:
    """'' when each gradient matches the float64 reference's, else why not.

    Each within the case dtype's tolerance (``tritred_ops.testing.TOLERANCES``) relative to the largest reference
    magnitude (``atols`` may widen the absolute part per gradient: to twice torch eager's own error); a missing
    gradient where the reference has one fails, one where it has none must be zero.
    """
    from tritred_ops.testing import compare

    for k, (g, r) in enumerate(zip(grads, ref)):
        name = _slot_name(op, slots[k])
        if g is None and r is None:
            continue
        if g is None:
            return f"no gradient for {name}"
        if r is None:
            r = torch.zeros(tuple(g.shape), dtype=torch.float64, device=g.device)
        atol = atols[k] if atols is not None else None
        cmp = compare(g, r, dtype=dtype, atol=atol, check_dtype=False, relative_to_max=True)
        if not cmp.ok:
            return f"gradient of {name}: {cmp.message}"
    return ""


# -- results -----------------------------------------------------------------------------------------------------

#: The passes ``run`` times: the forward call (as torch's op is called in inference), a training step (forward on


@dataclass
class Reference:
    """What every provider of a case is checked against: eager's forward result in the case dtype and, for the
    training passes, the float64 reference's gradients, the differentiable outputs, the upstream gradients and
    eager's own gradient error (the tolerance's floor)."""

    out: Any = None
    error: str = ""
    slots: list[Any] = field(default_factory=list)
    diff: list[int] = field(default_factory=list)
    n_leaves: int = 0
    dy: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor | None] = field(default_factory=list)
    atols: list[float | None] | None = None


def eager_reference(rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any],
                    device: torch.device) -> tuple[Any, str]:
    """Eager's forward result (the record's reference when eager raises), or ``(None, why)``."""
    why = ""
    for fn in (torch_op(rec), rec.reference):
        try:
            with torch.no_grad():
                out = fn(*clone_inputs(args), **clone_inputs(kwargs))
            sync(device)
            return out, ""
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
    return None, why


def training_reference(rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any],
                       device: torch.device, seed: int, ref: Reference) -> None:
    """Fill ``ref``'s training part: torch on float64 copies of the inputs, a step with a seeded upstream
    gradient; then eager's own step in the case dtype, whose gradient error widens the tolerance."""
    from tritred_ops.testing import tolerance

    op = case.op
    ref.slots = grad_slots(op, args, kwargs)
    if not ref.slots:
        raise ValueError(f"{op}: no floating input to differentiate")
    a64, k64 = upcast(clone_inputs(args)), upcast(clone_inputs(kwargs))
    a64, k64, ins64 = require_grad(a64, k64, ref.slots)
    out64: Any = None
    why = ""
    for fn in (torch_op(rec), rec.reference):
        try:
            with torch.enable_grad():
                out64 = fn(*a64, **k64)
            break
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
    if out64 is None:
        raise ValueError(f"no float64 reference: {why}")
    ref.diff = differentiable(out64)
    leaves = tensors(out64)
    ref.n_leaves = len(leaves)
    if not ref.diff:
        raise ValueError(f"{op}: the reference's output carries no gradient")
    dtype = getattr(torch, case.dtype)
    ref.dy = upstream_gradients(out64, ref.diff, dtype, seed + 7919)
    grads = torch.autograd.grad([leaves[i] for i in ref.diff], ins64, [d.to(torch.float64) for d in ref.dy],
                                allow_unused=True)
    ref.grads = [None if g is None else g.detach() for g in grads]
    del out64, leaves, grads, a64, k64, ins64
    # eager's own error against float64: the tolerance's floor (2x it), as tritred's forward checks allow
    try:
        ea, ek = clone_inputs(args), clone_inputs(kwargs)
        ea, ek, eins = require_grad(ea, ek, ref.slots)
        eout = torch_op(rec)(*ea, **ek)
        el = tensors(eout)
        eg = torch.autograd.grad([el[i] for i in ref.diff], eins, [d.clone() for d in ref.dy], allow_unused=True)
        atol0 = tolerance(dtype)[0]
        atols: list[float | None] = []
        for g, r in zip(eg, ref.grads):
            if g is None or r is None or g.numel() == 0:
                atols.append(None)
                continue
            err = (g.detach().to(torch.float64) - r).abs()
            err = err[err.isfinite()]
            atols.append(max(atol0, 2.0 * float(err.max())) if err.numel() else None)
        ref.atols = atols
        del eout, el, eg
    except Exception as e:
        log.debug("eager's training step failed on %s: %s", case.label, e)
        ref.atols = None
