"""A case's inputs: the call ``(args, kwargs)`` built from the record's ``make_inputs`` and the case's parameters,
its layout (:func:`with_view`), and copies that keep the layout (:func:`clone_inputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tritred_core import Reduction

from .suites import VIEWS, Case, sliced_row


def _param(shape: Sequence[int], dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float32).to(dtype).to(device)


def with_view(x: torch.Tensor, view: str | None) -> torch.Tensor:
    """``x``'s values in the layout ``view`` asks for (:data:`~tritred_bench.suites.VIEWS`), or ``x``.

    ``transposed``: the last two dims' strides swapped (a column-major matrix); ``sliced``: each row the first part
    of a wider row (:func:`~tritred_bench.suites.sliced_row` elements apart); ``strided``: every other element of
    rows twice as long; ``channels_last``: a 4-D input in channels-last memory format.
    """
    if view is None or x.numel() == 0:
        return x
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
    if view == "transposed":
        if x.dim() < 2:
            raise ValueError("view 'transposed' needs at least 2 dims")
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if view == "channels_last":
        if x.dim() != 4:
            raise ValueError("view 'channels_last' needs a 4-D input")
        return x.contiguous(memory_format=torch.channels_last)
    n = x.shape[-1] if x.dim() else 1
    if x.dim() == 0:
        return x
    wide = sliced_row(n) if view == "sliced" else 2 * n
    buf = torch.zeros((*x.shape[:-1], wide), dtype=x.dtype, device=x.device)
    out = buf[..., :n] if view == "sliced" else buf[..., ::2]
    out.copy_(x)
    return out


def _norm_params(op: str, args: list[Any], kwargs: dict[str, Any], params: dict[str, Any], dtype: torch.dtype,
                 dev: torch.device, seed: int) -> None:
    """layer_norm / rms_norm: ``normalized_shape`` and the ``weight``/``bias`` flags (False gives None), wherever
    the record's ``make_inputs`` put them (positions 1-3 of torch's signature, or keywords)."""
    def get(pos: int, key: str) -> Any:
        return args[pos] if len(args) > pos else kwargs.get(key)

    def put(pos: int, key: str, value: Any) -> None:
        if len(args) > pos:
            args[pos] = value
        else:
            kwargs[key] = value

    ns = tuple(int(s) for s in params.pop("normalized_shape", get(1, "normalized_shape") or args[0].shape[-1:]))
    put(1, "normalized_shape", ns if op == "layer_norm" else list(ns))
    names = (("weight", 2, 1), ("bias", 3, 2)) if op == "layer_norm" else (("weight", 2, 1),)
    for key, pos, off in names:
        if not params.pop(key, True):
            if len(args) > pos or key in kwargs:
                put(pos, key, None)
            continue
        cur = get(pos, key)
        if not isinstance(cur, torch.Tensor) or tuple(cur.shape) != ns:
            put(pos, key, _param(ns, dtype, dev, seed + off))


def _cross_entropy_params(args: list[Any], kwargs: dict[str, Any], params: dict[str, Any], dtype: torch.dtype,
                          dev: torch.device, seed: int) -> None:
    """cross_entropy: the target (class indices, a share of them ``ignore_index``; or class probabilities with
    ``target="probs"``) and random positive class weights with ``weight=True``; the target replaces the record's
    (``args[1]`` or ``kwargs["target"]``)."""
    x = args[0]
    classes = x.shape[1] if x.dim() >= 2 else x.shape[0]
    tshape = (x.shape[0], *x.shape[2:]) if x.dim() >= 2 else ()
    g = torch.Generator(device="cpu").manual_seed(seed + 3)
    kind = params.pop("target", "index")
    ignored = float(params.pop("ignored", 0.0))
    if kind == "probs":
        target = torch.softmax(torch.randn(tuple(x.shape), generator=g), dim=1 if x.dim() >= 2 else 0).to(dtype)
    elif kind == "index":
        target = torch.randint(0, max(1, classes), tshape, generator=g, dtype=torch.int64)
        if ignored > 0:
            ignore_index = int(params.get("ignore_index", kwargs.get("ignore_index", -100)))
            target[torch.rand(tshape, generator=g) < ignored] = ignore_index
    else:
        raise ValueError(f"cross_entropy: unknown target {kind!r} (index or probs)")
    target = target.to(dev)
    if len(args) > 1:
        args[1] = target
    else:
        kwargs["target"] = target
    if params.pop("weight", False):
        w = (torch.rand((classes,), generator=g) + 0.5).to(dtype).to(dev)
        if len(args) > 2:
            args[2] = w
        else:
            kwargs["weight"] = w


def build_inputs(rec: Reduction, case: Case, device: torch.device | str,
                 seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call ``(args, kwargs)`` of ``case``: ``rec.make_inputs`` adjusted to the case's parameters.

    layer_norm and rms_norm: ``normalized_shape`` and ``weight``/``bias`` flags (False gives None); batch_norm:
    ``weight``/``bias`` flags; cross_entropy: the target (``target``, ``ignored``) and class weights
    (``weight``); any op: ``view`` (the input's layout, :func:`with_view`). Any other parameter (``training``,
    ``eps``, ``keepdim``, ``correction``, ``reduction``...) is passed as a keyword argument.
    """
    dtype = getattr(torch, case.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{case.label}: unknown dtype {case.dtype!r}")
    dim = case.dim if case.has_dim else -1
    args_t, kwargs = rec.make_inputs(case.shape, dtype, device=device, dim=dim, seed=seed)
    args, kwargs = list(args_t), dict(kwargs)
    params = dict(case.params)
    view = params.pop("view", None)
    dev = torch.device(device)
    if case.op in ("layer_norm", "rms_norm") and args:
        _norm_params(case.op, args, kwargs, params, dtype, dev, seed)
    elif case.op == "batch_norm" and len(args) >= 5:
        for pos, key in ((3, "weight"), (4, "bias")):
            if not params.pop(key, True):
                args[pos] = None
    elif case.op == "cross_entropy" and args:
        _cross_entropy_params(args, kwargs, params, dtype, dev, seed)
    if view is not None and args and isinstance(args[0], torch.Tensor):
        args[0] = with_view(args[0], view)
    kwargs.update(params)
    return tuple(args), kwargs


def _clone_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy with ``t``'s strides, also for views with gaps (sliced or strided rows), which ``clone()`` would
    make contiguous."""
    if t.numel() == 0 or t.dim() == 0 or any(st <= 0 for st in t.stride()):
        return t.clone()
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    if extent == t.numel():  # dense (contiguous, transposed, channels-last): clone keeps the strides
        return t.clone()
    buf = torch.zeros(extent, dtype=t.dtype, device=t.device)
    out = buf.as_strided(tuple(t.shape), tuple(t.stride()))
    out.copy_(t)
    return out


def clone_inputs(obj: Any) -> Any:
    """A copy of a call's arguments (tensors, nested in tuples, lists and dicts), each tensor with its strides."""
    if isinstance(obj, torch.Tensor):
        return _clone_tensor(obj)
    if isinstance(obj, tuple):
        return tuple(clone_inputs(o) for o in obj)
    if isinstance(obj, list):
        return [clone_inputs(o) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_inputs(v) for k, v in obj.items()}
    return obj


def nbytes_of(obj: Any) -> int:
    """The bytes of the tensors in ``obj`` (nested in tuples, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(nbytes_of(o) for o in obj)
    if isinstance(obj, dict):
        return sum(nbytes_of(o) for o in obj.values())
    return 0
