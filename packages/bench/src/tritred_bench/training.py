"""The training step of an op: which inputs get gradients, the bytes a step moves at least, the float64 reference.

``tritred bench --pass both`` times a training step: the forward on inputs that require grad, then
``torch.autograd.grad(outputs, inputs, grad_outputs)`` with a fixed random upstream gradient (one per
differentiable output; 1 for a scalar output such as a loss, as ``loss.backward()`` gives it). ``--pass
backward`` reports the step's median minus the forward's (both with inputs that require grad), so no provider
runs with ``retain_graph``.

:data:`TRAINING` is the one place that says, per op, which arguments are differentiable and how many bytes a
step moves at least (the figure its GB/s and % of copy are computed from). Ops it does not name differentiate
every floating tensor argument and count :data:`DEFAULT_STEP` bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

#: A differentiable argument: a position in ``args`` or a keyword in ``kwargs``.
Slot = int | str


@dataclass(frozen=True)
class StepIO:
    """Byte sizes of one call, from which a training step's byte count is computed.

    ``x``: the input (``args[0]``), its elements x itemsize (not its storage). ``forward``: the forward pass's
    count (``Reduction.byte_count``: inputs read once + outputs written once). ``outputs``: the floating outputs
    (the size of their upstream gradients dy). ``indices``: integer outputs (max/min's indices). ``grads``: every
    gradient written (the input's and the parameters'). ``weight``, ``bias``: the affine parameters.
    ``other``: the other tensor arguments read (targets, class weights, running statistics).
    """

    x: int
    forward: int
    outputs: int
    indices: int
    grads: int
    weight: int = 0
    bias: int = 0
    other: int = 0


@dataclass(frozen=True)
class TrainingSpec:
    """How one op trains: its differentiable arguments (None: every floating tensor argument) and the minimum
    bytes of its training step, in words (``rule``, quoted in packages/bench/README.md) and as a function."""

    rule: str
    count: Callable[[StepIO], int]
    grads: tuple[Slot, ...] | None = None


_SAVED_X_Y = "forward + x and y read (saved), dy read, the gradients written"
_INDICES = "forward + the indices and dy read, dx written (without a dim: as amax, amin)"

#: Per op: the differentiable arguments and the bytes of a training step (forward + backward).
TRAINING: dict[str, TrainingSpec] = {
    "softmax": TrainingSpec("x read, y written; y and dy read, dx written: 5 x numel x itemsize",
                            lambda io: 5 * io.x),
    "log_softmax": TrainingSpec("x read, y written; y and dy read, dx written: 5 x numel x itemsize",
                                lambda io: 5 * io.x),
    "layer_norm": TrainingSpec("x, weight, bias read, y written; x, dy, weight read, dx, dweight, dbias written: "
                               "5 x numel x itemsize + 3 x weight + 2 x bias",
                               lambda io: 5 * io.x + 3 * io.weight + 2 * io.bias),
    "rms_norm": TrainingSpec("x, weight read, y written; x, dy, weight read, dx, dweight written: "
                             "5 x numel x itemsize + 3 x weight",
                             lambda io: 5 * io.x + 3 * io.weight),
    "cross_entropy": TrainingSpec("logits read, their gradient written, targets (and class weights) read: "
                                  "2 x numel x itemsize + targets",
                                  lambda io: 2 * io.x + io.other, grads=(0, "input")),
    "batch_norm": TrainingSpec("forward + x, dy, weight read, dx, dweight, dbias written",
                               lambda io: io.forward + io.x + io.outputs + io.weight + io.grads,
                               grads=(0, 3, 4, "input", "weight", "bias")),
    "sum": TrainingSpec("forward + dy read, dx written", lambda io: io.forward + io.outputs + io.grads),
    "mean": TrainingSpec("forward + dy read, dx written", lambda io: io.forward + io.outputs + io.grads),
    "prod": TrainingSpec(_SAVED_X_Y, lambda io: io.forward + io.x + 2 * io.outputs + io.grads),
    "amax": TrainingSpec(_SAVED_X_Y, lambda io: io.forward + io.x + 2 * io.outputs + io.grads),
    "amin": TrainingSpec(_SAVED_X_Y, lambda io: io.forward + io.x + 2 * io.outputs + io.grads),
    "logsumexp": TrainingSpec(_SAVED_X_Y, lambda io: io.forward + io.x + 2 * io.outputs + io.grads),
    "max": TrainingSpec(_INDICES,
                        lambda io: io.forward + (io.indices or io.x + io.outputs) + io.outputs + io.grads),
    "min": TrainingSpec(_INDICES,
                        lambda io: io.forward + (io.indices or io.x + io.outputs) + io.outputs + io.grads),
    "var": TrainingSpec("forward + x and dy read, dx written", lambda io: io.forward + io.x + io.outputs + io.grads),
    "var_mean": TrainingSpec("forward + x and dy read, dx written",
                             lambda io: io.forward + io.x + io.outputs + io.grads),
    "std": TrainingSpec(_SAVED_X_Y, lambda io: io.forward + io.x + 2 * io.outputs + io.grads),
    "std_mean": TrainingSpec(_SAVED_X_Y, lambda io: io.forward + io.x + 2 * io.outputs + io.grads),
}

#: Any other op: the forward, then the saved input and dy read and the gradients written.
DEFAULT_STEP = TrainingSpec("forward + x (saved) and dy read, the gradients written",
                            lambda io: io.forward + io.x + io.outputs + io.grads)


def training_spec(op: str) -> TrainingSpec:
    """``TRAINING[op]``, or :data:`DEFAULT_STEP`."""
    return TRAINING.get(op, DEFAULT_STEP)


# -- the differentiable arguments ------------------------------------------------------------------------------------

def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point


def grad_slots(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Slot]:
    """The slots of ``args``/``kwargs`` holding the floating tensors whose gradients a step computes."""
    allowed = training_spec(op).grads
    slots: list[Slot] = [i for i, a in enumerate(args) if _is_float(a)]
    slots += [k for k, v in kwargs.items() if _is_float(v)]
    if allowed is not None:
        slots = [s for s in slots if s in allowed]
    return slots


def get_slot(args: tuple[Any, ...], kwargs: dict[str, Any], slot: Slot) -> Any:
    """The argument at ``slot``."""
    return args[slot] if isinstance(slot, int) else kwargs[slot]


def set_slots(args: tuple[Any, ...], kwargs: dict[str, Any], slots: list[Slot],
              fn: Callable[[torch.Tensor], torch.Tensor]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with ``fn`` applied to the tensors at ``slots``."""
    a, k = list(args), dict(kwargs)
    for s in slots:
        if isinstance(s, int):
            a[s] = fn(a[s])
        else:
            k[s] = fn(k[s])
    return tuple(a), k


def require_grad(args: tuple[Any, ...], kwargs: dict[str, Any],
                 slots: list[Slot]) -> tuple[tuple[Any, ...], dict[str, Any], list[torch.Tensor]]:
    """Mark the tensors at ``slots`` as requiring grad (in place: they are the caller's fresh copies); returns
    ``(args, kwargs, those tensors)``."""
    for s in slots:
        get_slot(args, kwargs, s).requires_grad_(True)
    return args, kwargs, [get_slot(args, kwargs, s) for s in slots]


# -- outputs ---------------------------------------------------------------------------------------------------------

def tensors(out: Any) -> list[Any]:
    """The leaves of an output (tensor, tuple, named tuple, list), in order (non-tensors kept as they are)."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in tensors(o)]
    return [out]


def differentiable(out: Any) -> list[int]:
    """Positions (in :func:`tensors` order) of the floating outputs that carry a gradient (``requires_grad``)."""
    return [i for i, t in enumerate(tensors(out)) if _is_float(t) and t.requires_grad]


def nbytes(t: Any) -> int:
    """Elements x itemsize of a tensor (0 for anything else)."""
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def step_io(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], slots: list[Slot], forward_bytes: int,
            out: Any, diff: list[int]) -> StepIO:
    """The :class:`StepIO` of a call: ``out`` is any provider's (or the reference's) output, ``diff`` its
    differentiable positions; sizes are taken in the input's dtype."""
    x = args[0] if args else None
    item = x.element_size() if isinstance(x, torch.Tensor) else 4
    leaves = tensors(out)
    outputs = sum(leaves[i].numel() * item for i in diff)
    indices = sum(nbytes(t) for t in leaves if isinstance(t, torch.Tensor) and not t.dtype.is_floating_point)
    grads = sum(nbytes(get_slot(args, kwargs, s)) for s in slots)
    weight = bias = other = 0
    named = {"weight": (2, "weight"), "bias": (3, "bias")} if op in ("layer_norm", "rms_norm") else {}
    if op == "batch_norm":
        named = {"weight": (3, "weight"), "bias": (4, "bias")}
    taken: set[Slot] = {0, "input"}
    for name, (pos, key) in named.items():
        t = args[pos] if len(args) > pos else kwargs.get(key)
        taken |= {pos, key}
        if name == "weight":
            weight = nbytes(t)
        else:
            bias = nbytes(t)
    for i, a in enumerate(args):
        if i not in taken:
            other += nbytes(a)
    for k, v in kwargs.items():
        if k not in taken:
            other += nbytes(v)
    return StepIO(x=nbytes(x), forward=forward_bytes, outputs=outputs, indices=indices, grads=grads, weight=weight,
                  bias=bias, other=other)


def step_bytes(op: str, io: StepIO) -> int:
    """The bytes of a training step of ``op`` (:data:`TRAINING`)."""
    return int(training_spec(op).count(io))


# -- the float64 reference -------------------------------------------------------------------------------------------

def upcast(obj: Any) -> Any:
    """Floating tensors to float64 (detached copies); everything else as it is."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to(torch.float64) if obj.dtype.is_floating_point else obj
    if isinstance(obj, tuple):
        return tuple(upcast(o) for o in obj)
    if isinstance(obj, list):
        return [upcast(o) for o in obj]
    if isinstance(obj, dict):
        return {k: upcast(v) for k, v in obj.items()}
    return obj


def upstream_gradients(out: Any, diff: list[int], dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """A fixed random upstream gradient per differentiable output (normal, seeded, in ``dtype``); a scalar output
    (a loss: cross_entropy's ``mean`` and ``sum``, a full reduction) gets 1, as ``loss.backward()`` gives it (Liger's
    cross_entropy skips a pass over the logits' gradient for exactly that upstream gradient)."""
    leaves = tensors(out)
    g = torch.Generator(device="cpu").manual_seed(seed)
    dys = []
    for i in diff:
        t = leaves[i]
        d = torch.ones(()) if t.dim() == 0 else torch.randn(tuple(t.shape), generator=g, dtype=torch.float32)
        dys.append(d.to(dtype).to(t.device))
    return dys


def index_gradient(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                   dy: torch.Tensor) -> torch.Tensor | None:
    """max/min with a dim: the input's gradient that ``out``'s own indices give (dy scattered at them, float64).

    Ties have several correct indices; a provider's gradient is checked against the one its indices give.
    None for other ops or calls.
    """
    if op not in ("max", "min") or not isinstance(out, tuple) or len(out) != 2:
        return None
    x = args[0]
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    if not isinstance(dim, int):
        return None
    keep = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    idx, g = out[1], dy.to(torch.float64)
    if not keep:
        idx, g = idx.unsqueeze(dim), g.unsqueeze(dim)
    return torch.zeros(tuple(x.shape), dtype=torch.float64, device=x.device).scatter_(dim, idx, g)
