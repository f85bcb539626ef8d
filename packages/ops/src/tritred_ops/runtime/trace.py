"""Explain a call: run an op's own host path on meta tensors, recording its launch decisions and its launches.

``tritred explain`` and ``tritred tune`` need the :class:`~tritred_core.Problem` a call decides its launch for.
Rather than derive it beside the op (where it could drift from what the op launches), they run the op itself
under :func:`tracing`, which changes four things while it is active (in this thread or task only):

- :func:`~.launch.decide` records each decision (spec, Problem, config) and asks the hook with the trace's
  :class:`~tritred_core.DeviceInfo`, caching nothing (or stops at the first Problem: :func:`first_problem`);
- :meth:`~.replay.Recorder.launch` records each launch (kernel, grid, arguments) instead of running it;
- :func:`~.checks.check_runnable` accepts meta tensors, so that no memory is touched and any shape works;
- :meth:`~.replay.Recorder.save` saves no plan.

A plugin's reduction has its own ``Reduction.problem``; the built-ins' is :func:`first_problem` of the op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
from tritred_core import DeviceInfo, LaunchConfig, Problem, ReductionSpec


@dataclass(frozen=True)
class Decision:
    """One launch decision of a traced call: the op's spec, the Problem it asked for, the config it got (None
    when the trace stopped at the Problem)."""

    spec: ReductionSpec
    problem: Problem
    config: LaunchConfig | None


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a traced call: the kernel's name, its grid, its arguments (tensors as
    ``("tensor", shape, strides, dtype)``) and its keyword arguments (constexprs and launch options)."""

    kernel: str
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @classmethod
    def of(cls, kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Launch:
        name = getattr(getattr(kernel, "fn", kernel), "__name__", repr(kernel))
        return cls(name, tuple(grid), tuple(map(_describe, args)), {k: _describe(v) for k, v in kwargs.items()})


@dataclass
class Trace:
    """What a traced call decided and launched, in order."""

    device: DeviceInfo | None = None
    stop_at_problem: bool = False
    decisions: list[Decision] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)


class Stopped(Exception):  # noqa: N818 (not an error: the end of a trace that needed one Problem)
    """Raised by :func:`~.launch.decide` under a trace that stops at the first Problem."""


_ACTIVE: ContextVar[Trace | None] = ContextVar("tritred_trace", default=None)


def active() -> Trace | None:
    """The trace of the running call, or None (the usual case: the call launches)."""
    return _ACTIVE.get()


@contextmanager
def tracing(device: DeviceInfo | None = None, *, stop_at_problem: bool = False) -> Iterator[Trace]:
    """Record the launch decisions and launches of the op calls made inside the block, launching nothing.

    ``device``: the DeviceInfo the decisions are made for (None: the tensors' own device's, the interpreter's for
    meta tensors). ``stop_at_problem``: the first decision raises :class:`Stopped` once it has recorded its Problem
    (no hook is asked).
    """
    trace = Trace(device=device, stop_at_problem=stop_at_problem)
    token = _ACTIVE.set(trace)
    try:
        yield trace
    finally:
        _ACTIVE.reset(token)


def first_problem(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Problem:
    """The Problem of the first launch decision of ``fn(*args, **kwargs)``, on meta copies of its tensors (a
    staged reduction's first stage, the inner rows of statistics over two reduced axes): what the call asks the
    ``tritred_launch_config`` hook for.

    Raises:
        the call's own argument errors (TypeError, IndexError, RuntimeError, ...), and RuntimeError when the call
        decides no launch (an empty input or output: it launches nothing).
    """
    with tracing(stop_at_problem=True) as trace, suppress(Stopped):
        fn(*to_meta(args), **to_meta(kwargs))
    if not trace.decisions:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}() launches no kernel for these arguments (an empty input "
                           "or output): there is no Problem to decide a launch for")
    return trace.decisions[0].problem


def explain(fn: Callable[..., Any], *args: Any, device: DeviceInfo | None = None, **kwargs: Any) -> Trace:
    """Every launch decision and launch of ``fn(*args, **kwargs)`` on meta copies of its tensors, decided for
    ``device`` (default: the interpreter's DeviceInfo), nothing launched or cached.

    The launches' arguments are the host path's for meta tensors: what depends on the tensors' device or address
    (the shifted tiles of a GPU launch, dependent launches on sm_90+) is as on the interpreter.
    """
    with tracing(device=device) as trace:
        fn(*to_meta(args), **to_meta(kwargs))
    return trace


def to_meta(value: Any) -> Any:
    """``value`` with every tensor (inside tuples, lists and dicts too) replaced by a meta tensor of its shape,
    strides and dtype."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(tuple(value.shape), value.stride(), dtype=value.dtype, device="meta")
    if type(value) in (tuple, list):
        return type(value)(to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: to_meta(v) for k, v in value.items()}
    return value


def _describe(value: Any) -> Any:
    """A launch argument as a trace keeps it: tensors by shape, strides and dtype (not their memory)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), tuple(value.stride()), str(value.dtype).removeprefix("torch."))
    return value
