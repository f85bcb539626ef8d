"""The table of :func:`tritred_ops.enable`: one (aten overload, implementation) pair per row, and the names
``include=`` and ``exclude=`` accept.

A row names the overload (``"sum.dim_IntList"``; ``"_softmax"`` for a default overload), the tritred op whose
launcher computes it (``"sum"``; forward and backward overloads share it) and the implementation
(:mod:`.impls`). Only functional overloads are here: ``out=`` variants and in-place ops keep torch's kernels.

Why these overloads: they are where torch's eager calls land at the CUDA dispatch key, below autograd. The
composite functions above them (``torch.softmax``, ``F.layer_norm``, ``F.rms_norm``, ``F.batch_norm``,
``torch.sum(x)``, ``torch.mean(x)``, ``F.cross_entropy``) decompose into them before the backend key, and their
autograd formulas call the backward overloads listed here. F.batch_norm takes ``cudnn_batch_norm`` on CUDA for
affine 3+-dim float16 (float32 weights), float32 and float64 inputs with cuDNN enabled, ``native_batch_norm``
otherwise; ``_native_batch_norm_legit*`` are the functional forms torch.export and the compile stack use.
Cross entropy: ``F.cross_entropy`` is ``_log_softmax`` then ``nll_loss`` (a gather, no reduction tritred has), so
its log-softmax forward and backward run on tritred and ``nll_loss_forward``/``nll_loss_backward`` stay torch's;
``cross_entropy_loss`` itself is a CompositeImplicitAutograd function without a CUDA kernel or an autograd formula
of its own: overriding it at the CUDA key would cut its gradient (the fused ``tritred_ops.cross_entropy`` is
reached through the functional op, the modules and ``patch``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from . import impls as im


@dataclass(frozen=True)
class Entry:
    """One row: the aten overload, the tritred op that computes it, the implementation, and an optional
    ``torch_fallback(args)`` that computes a declined call some other way than the overload's own kernel (or
    returns None for the kernel)."""

    overload: str
    op: str
    impl: Callable[..., Any]
    torch_fallback: Callable[[tuple[Any, ...]], Any] | None = None

    @property
    def qualname(self) -> str:
        """``aten::name.overload`` (``aten::name`` for the default overload), as the dispatcher names it."""
        return f"aten::{self.overload}"

    @property
    def packet(self) -> str:
        return self.overload.split(".")[0]

    def resolve(self) -> torch._ops.OpOverload | None:
        """The installed torch's OpOverload, or None where this torch has no such overload."""
        packet = getattr(torch.ops.aten, self.packet, None)
        if packet is None:
            return None
        name = self.overload.split(".")[1] if "." in self.overload else "default"
        return getattr(packet, name, None) if name in packet.overloads() else None


TABLE: tuple[Entry, ...] = (
    Entry("_softmax", "softmax", im.softmax),
    Entry("_softmax_backward_data", "softmax", im.softmax_backward_data),
    Entry("_log_softmax", "log_softmax", im.log_softmax),
    Entry("_log_softmax_backward_data", "log_softmax", im.log_softmax_backward_data),
    Entry("logsumexp", "logsumexp", im.logsumexp),
    Entry("native_layer_norm", "layer_norm", im.native_layer_norm),
    Entry("native_layer_norm_backward", "layer_norm", im.native_layer_norm_backward),
    Entry("_fused_rms_norm", "rms_norm", im.fused_rms_norm),
    Entry("_fused_rms_norm_backward", "rms_norm", im.fused_rms_norm_backward),
    Entry("native_batch_norm", "batch_norm", im.native_batch_norm),
    Entry("_native_batch_norm_legit", "batch_norm", im.native_batch_norm),
    Entry("_native_batch_norm_legit.no_stats", "batch_norm", im.native_batch_norm_legit_no_stats),
    Entry("_native_batch_norm_legit_no_training", "batch_norm", im.native_batch_norm_legit_no_training),
    Entry("cudnn_batch_norm", "batch_norm", im.cudnn_batch_norm),
    Entry("native_batch_norm_backward", "batch_norm", im.native_batch_norm_backward),
    Entry("cudnn_batch_norm_backward", "batch_norm", im.cudnn_batch_norm_backward, im.cudnn_backward_fallback),
    Entry("sum.dim_IntList", "sum", im.sum_dim),
    Entry("mean.dim", "mean", im.mean_dim),
    Entry("prod", "prod", im.prod),
    Entry("prod.dim_int", "prod", im.prod_dim),
    Entry("amax", "amax", im.amax),
    Entry("amin", "amin", im.amin),
    Entry("max", "max", im.max_all),
    Entry("max.dim", "max", im.max_dim),
    Entry("min", "min", im.min_all),
    Entry("min.dim", "min", im.min_dim),
    Entry("var.correction", "var", im.var),
    Entry("std.correction", "std", im.std),
    Entry("var_mean.correction", "var_mean", im.var_mean),
    Entry("std_mean.correction", "std_mean", im.std_mean),
)

BY_OVERLOAD: dict[str, Entry] = {e.overload: e for e in TABLE}

#: Names that are not selectable, with what to use instead.
_INSTEAD = {
    "cross_entropy": "cross entropy is routed through its log-softmax: select 'log_softmax' (nll_loss stays torch's)",
    "cross_entropy_loss": "cross_entropy_loss is CompositeImplicitAutograd (no CUDA kernel): select 'log_softmax'",
    "nll_loss": "nll_loss has no tritred implementation: select 'log_softmax' for cross entropy's log-softmax",
    "layer_norm_with_stats": "select 'layer_norm'",
}


def _normalize(name: object) -> str:
    """A selector as a plain name: strings as given less an ``aten::``/``aten.``/``torch.ops.aten.`` prefix and a
    ``.default`` suffix; an OpOverload or OpOverloadPacket by its name."""
    if isinstance(name, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = name.name() if isinstance(name, torch._ops.OpOverload) else name._qualified_op_name
    if not isinstance(name, str):
        raise TypeError(f"tritred_ops.enable(): op names must be strings or torch.ops.aten ops, not "
                        f"{type(name).__name__}")
    for prefix in ("torch.ops.aten.", "aten::", "aten."):
        name = name.removeprefix(prefix)
    return name.removesuffix(".default")


def matching(name: object) -> tuple[Entry, ...]:
    """The rows a selector names: a tritred op name (``"layer_norm"``: its forward and backward overloads), an
    aten overload (``"sum.dim_IntList"``, ``"_softmax"``) or an aten op with all its overloads here (``"max"``).
    ValueError for a name that matches none, listing the accepted ones."""
    n = _normalize(name)
    # (an overload named as such, ``torch.ops.aten.max.default`` or ``"max.default"``, is that overload alone, not
    # its packet's others, which the bare ``"max"`` names)
    overload = isinstance(name, torch._ops.OpOverload) or (isinstance(name, str) and name.endswith(".default"))
    rows = tuple(e for e in TABLE if (n == e.overload if overload else n in (e.op, e.overload, e.packet)))
    if not rows:
        hint = _INSTEAD.get(n)
        raise ValueError(f"tritred_ops.enable(): unknown op name {name!r}" + (f": {hint}" if hint else "")
                         + f". Accepted: tritred op names {sorted({e.op for e in TABLE})} or aten overloads "
                         f"{[e.overload for e in TABLE]}")
    return rows


def select(include: Iterable[object] | None, exclude: Iterable[object] | None) -> tuple[Entry, ...]:
    """The rows ``include`` (None: all) names, less those ``exclude`` names, in table order."""
    if isinstance(include, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        include = [include]
    if isinstance(exclude, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        exclude = [exclude]
    chosen = set(TABLE) if include is None else {e for n in include for e in matching(n)}
    dropped = set() if exclude is None else {e for n in exclude for e in matching(n)}
    return tuple(e for e in TABLE if e in chosen and e not in dropped)
