"""tritred's own plugin: registers every built-in reduction and the built-in (``trylast``) launch rules.

Loaded through the entry point group ``tritred`` exactly like a third-party plugin (see pyproject.toml). Each
:class:`~tritred_core.Reduction` is built from a family's ``SPECS`` and carries, besides the op, what the CLI and
the bench need: a torch reference, a random-input maker, the Problem of a call (the op's own first launch
decision: ``runtime.trace.first_problem``) and its byte count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tritred_core import Problem, Reduction, ReductionSpec, hookimpl

from .families import batch_norm as _bn
from .families import cross_entropy as _xent
from .families import layer_norm as _ln
from .families import reduce as _red
from .families import rms_norm as _rms
from .families import softmax as _sm
from .families import statistics as _st
from .rules import tritred_launch_config  # noqa: F401  (the built-in rules' hookimpl)
from .runtime.trace import first_problem

Args = tuple[tuple[Any, ...], dict[str, Any]]


def random_tensor(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device, seed: int) -> torch.Tensor:
    """Fresh random values for ``dtype``: normal floats, small signed integers, random bools.

    ``device="meta"`` returns an uninitialized meta tensor (shapes only: ``tritred explain``).
    """
    if str(device) == "meta":
        return torch.empty(tuple(shape), dtype=dtype, device="meta")
    g = torch.Generator(device="cpu").manual_seed(seed)
    if dtype == torch.bool:
        t = torch.rand(tuple(shape), generator=g) > 0.5
    elif not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -4
        t = torch.randint(lo, 5, tuple(shape), generator=g, dtype=torch.int64).to(dtype)
    else:
        t = torch.randn(tuple(shape), generator=g, dtype=torch.float32).to(dtype)
    return t.to(device)


def _itemsize(t: torch.Tensor) -> int:
    return t.element_size()


def _bytes(*tensors: Any) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            total += t.numel() * _itemsize(t)
        elif isinstance(t, (tuple, list)):
            total += _bytes(*t)
    return total


def _problem(impl: Callable[..., Any]) -> Callable[..., Problem]:
    """``Reduction.problem`` of a built-in op: the Problem of the first launch decision the op itself makes for
    the call (run on meta tensors, nothing launched: :func:`~tritred_ops.runtime.trace.first_problem`)."""
    return functools.partial(first_problem, impl)


# -- per-family record builders -----------------------------------------------------------------------------------

def _reduce_inputs(spec: ReductionSpec) -> Callable[..., Args]:
    def make(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu", dim: Any = -1,
             seed: int = 0) -> Args:
        x = random_tensor(shape, dtype, device, seed)
        if dim is None and spec.name in ("max", "min", "prod"):
            return (x,), {}  # torch.max(x), torch.prod(x): the all-reduce; dim=None a TypeError (prod: some torch)
        return (x,), {"dim": dim}
    return make


def _meta(a: Any) -> Any:
    return a.to("meta") if isinstance(a, torch.Tensor) else a


def _io_bytes(reference: Callable[..., Any]) -> Callable[..., int]:
    """Tensor arguments read once + outputs written once; output sizes from torch's op on meta tensors."""
    def count(*args: Any, **kwargs: Any) -> int:
        meta_args = [_meta(a) for a in args]
        meta_kwargs = {k: _meta(v) for k, v in kwargs.items()}
        return _bytes(*args, *kwargs.values()) + _bytes(reference(*meta_args, **meta_kwargs))
    return count


def _layer_norm_inputs(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu",
                       dim: Any = -1, seed: int = 0) -> Args:
    x = random_tensor(shape, dtype, device, seed)
    n = tuple(shape[-1:])
    w = random_tensor(n, dtype, device, seed + 1)
    b = random_tensor(n, dtype, device, seed + 2)
    return (x, n, w, b), {"eps": 1e-5}


def _rms_norm_inputs(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu",
                     dim: Any = -1, seed: int = 0) -> Args:
    x = random_tensor(shape, dtype, device, seed)
    n = tuple(shape[-1:])
    return (x, n, random_tensor(n, dtype, device, seed + 1)), {"eps": 1e-6}


def _batch_norm_inputs(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu",
                       dim: Any = None, seed: int = 0) -> Args:
    if len(shape) < 2:
        raise ValueError(f"batch_norm needs an input of at least 2 dims [B, C, *], got shape {tuple(shape)}")
    x = random_tensor(shape, dtype, device, seed)
    c = shape[1]
    pdt = torch.float64 if dtype == torch.float64 else torch.float32  # parameters: torch's dtype rule
    rm = random_tensor((c,), pdt, device, seed + 1)
    rv = random_tensor((c,), pdt, device, seed + 2).abs() + 0.5
    w = random_tensor((c,), pdt, device, seed + 3)
    b = random_tensor((c,), pdt, device, seed + 4)
    return (x, rm, rv, w, b), {"training": True, "momentum": 0.1, "eps": 1e-5}


def _batch_norm_bytes(x: torch.Tensor, rm: Any, rv: Any, w: Any = None, b: Any = None, training: bool = False,
                      **kwargs: Any) -> int:
    running = _bytes(rm, rv) * (2 if training else 1)  # read, and written back in training
    return 2 * _bytes(x) + _bytes(w, b) + running


def _cross_entropy_inputs(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu",
                          dim: Any = None, seed: int = 0, requires_grad: bool = False) -> Args:
    """Logits of ``shape`` ((C,), (N, C) or (N, C, d1, ...): the class dim is 1) and random class indices, about
    one in 16 of them ``ignore_index`` (-100); ``requires_grad``: logits that require grad (training: the
    gradient is formed by the forward)."""
    x = random_tensor(shape, dtype, device, seed)
    class_dim = 0 if len(shape) == 1 else 1
    kept = tuple(s for i, s in enumerate(shape) if i != class_dim)
    if str(device) == "meta":
        t = torch.empty(kept, dtype=torch.int64, device="meta")
    else:
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        t = torch.randint(0, max(1, shape[class_dim]), kept, generator=g)
        t[torch.rand(kept, generator=g) < 1 / 16] = -100
        t = t.to(device)
    return (x.requires_grad_(requires_grad), t), {}


def _cross_entropy_bytes(x: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    """The logits read once, plus their gradient written once when they require grad (2 x numel x itemsize:
    the minimum of a training step); the targets and the loss are left out (a few bytes per row)."""
    return _bytes(x) * (2 if x.requires_grad else 1)


def _torch_reference(name: str) -> Callable[..., Any]:
    fn = getattr(torch, name)

    def reference(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    reference.__name__ = f"torch_{name}"
    return reference


def _records() -> list[Reduction]:
    records = []
    for name in ("sum", "mean", "prod", "amax", "amin", "max", "min"):
        impl = getattr(_red, name)
        records.append(Reduction(spec=_red.SPECS[name], impl=impl, reference=_torch_reference(name),
                                 make_inputs=_reduce_inputs(_red.SPECS[name]),
                                 problem=_problem(impl),
                                 byte_count=_io_bytes(_torch_reference(name))))
    for name, spec in _st.SPECS.items():
        impl = getattr(_st, name)
        records.append(Reduction(spec=spec, impl=impl, reference=_torch_reference(name),
                                 make_inputs=_reduce_inputs(spec), problem=_problem(impl),
                                 byte_count=_io_bytes(_torch_reference(name))))
    for name in ("softmax", "log_softmax"):
        impl = getattr(_sm, name)
        records.append(Reduction(spec=_sm.SPECS[name], impl=impl, reference=_torch_reference(name),
                                 make_inputs=_reduce_inputs(_sm.SPECS[name]), problem=_problem(impl),
                                 byte_count=_io_bytes(_torch_reference(name))))
    records.append(Reduction(spec=_sm.SPECS["logsumexp"], impl=_sm.logsumexp, reference=_torch_reference("logsumexp"),
                             make_inputs=_reduce_inputs(_sm.SPECS["logsumexp"]),
                             problem=_problem(_sm.logsumexp), byte_count=_io_bytes(_torch_reference("logsumexp"))))
    records.append(Reduction(spec=_ln.SPEC, impl=_ln.layer_norm, reference=F.layer_norm,
                             make_inputs=_layer_norm_inputs, problem=_problem(_ln.layer_norm),
                             byte_count=_io_bytes(F.layer_norm)))
    records.append(Reduction(spec=_rms.SPEC, impl=_rms.rms_norm, reference=F.rms_norm,
                             make_inputs=_rms_norm_inputs, problem=_problem(_rms.rms_norm),
                             byte_count=_io_bytes(F.rms_norm)))
    records.append(Reduction(spec=_bn.SPEC, impl=_bn.batch_norm, reference=F.batch_norm,
                             make_inputs=_batch_norm_inputs, problem=_problem(_bn.batch_norm),
                             byte_count=_batch_norm_bytes))
    records.append(Reduction(spec=_xent.SPEC, impl=_xent.cross_entropy, reference=F.cross_entropy,
                             make_inputs=_cross_entropy_inputs, problem=_problem(_xent.cross_entropy),
                             byte_count=_cross_entropy_bytes))
    return records


@hookimpl
def tritred_register_reductions() -> list[Reduction]:
    """Every built-in reduction (the same hook a third-party plugin implements)."""
    return _records()
