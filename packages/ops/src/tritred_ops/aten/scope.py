"""The machinery of :func:`tritred_ops.enable`: kernel registration, scopes, the re-entrancy guard, counters.

Registration: one ``torch.library.Library("aten", "IMPL")`` per (dispatch key, overload), so that a scope that
adds or drops a few overloads touches only those. Before registering, the kernel the dispatcher computes for that
key (torch's, or whatever was registered there before) is captured with ``torch.library.get_kernel``; the
registered kernel (``with_keyset=True``) calls it with the call's dispatch key set for every call it hands back.
A dropped registration is destroyed (``Library._destroy``), which restores the previous kernel in the dispatcher.

Scopes: every :func:`enable` call opens a scope and pushes it; the overloads registered at a key are the union of
the open scopes' selections for it; the overloads routed to tritred are the innermost (last opened, still open)
scope's. Closing a scope (``with`` exit, ``close()``) pops it wherever it is; :func:`disable` closes them all.
State changes are serialized by one lock. Registrations are process-wide (the dispatcher has no per-thread
tables, and autograd runs CUDA backward ops on its own threads), so the routing applies to every thread.

The guard: while a tritred implementation runs, every overridden op called on that thread (the launchers' own
torch calls, Triton's interpreter on CPU tensors) goes straight to torch's kernel, uncounted. Calls during
dynamo's tracing (``torch.compiler.is_compiling()``) also go to torch's kernels.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from ..runtime import interpreting
from .impls import Decline
from .table import Entry, select

#: Errors of tritred's argument checks (torch's types): the call goes to torch, which raises its own or computes.
_ARG_ERRORS = (NotImplementedError, TypeError, ValueError, IndexError, RuntimeError)
#: Distinct fallback reasons kept per overload (the rest are counted under "other").
_MAX_REASONS = 32


@dataclass(frozen=True)
class OpCounts:
    """Calls of one aten overload that the override decided: ``tritred`` ran tritred's launcher, ``fallback``
    went to torch's kernel (``reasons``: how many for each reason)."""

    tritred: int = 0
    fallback: int = 0
    reasons: Mapping[str, int] = field(default_factory=dict)


class _Guard(threading.local):
    busy = False


_guard = _Guard()
_lock = threading.RLock()
_scopes: list[AtenOverride] = []
_registered: dict[tuple[str, str], Any] = {}     # (dispatch key, overload) -> Library
_ENTRIES: dict[str, Entry] = {}                  # overload -> its row (those enable() has seen)
_routed: dict[str, frozenset[str]] = {}          # dispatch key -> overloads routed to tritred now
_counts: dict[str, list[Any]] = {}               # overload -> [tritred, fallback, Counter of reasons]
_baseline: dict[str, OpCounts] = {}              # enabled_stats(reset=True) subtracts this
_compiling = torch.compiler.is_compiling


def _count(overload: str, reason: str | None) -> None:
    with _lock:
        c = _counts.get(overload)
        if c is None:
            c = _counts[overload] = [0, 0, Counter()]
        if reason is None:
            c[0] += 1
            return
        c[1] += 1
        reasons = c[2]
        reason = reason if len(reason) <= 160 else reason[:157] + "..."
        reasons[reason if reason in reasons or len(reasons) < _MAX_REASONS else "other"] += 1


def _snapshot() -> dict[str, OpCounts]:
    with _lock:
        return {k: OpCounts(c[0], c[1], dict(c[2])) for k, c in _counts.items()}


def _diff(now: Mapping[str, OpCounts], then: Mapping[str, OpCounts]) -> dict[str, OpCounts]:
    out = {}
    for name, c in now.items():
        b = then.get(name, OpCounts())
        reasons = {r: n - b.reasons.get(r, 0) for r, n in c.reasons.items() if n - b.reasons.get(r, 0)}
        if c.tritred - b.tritred or c.fallback - b.fallback:
            out[f"aten::{name}"] = OpCounts(c.tritred - b.tritred, c.fallback - b.fallback, reasons)
    return out


def enabled_stats(reset: bool = False) -> dict[str, OpCounts]:
    """Which aten calls the override decided, per overload (``"aten::sum.dim_IntList"``): how many ran on
    tritred, how many fell back to torch's kernel and why. Counted since the process started or the last
    ``reset=True`` (which returns the counts, then starts over). Calls made while no scope routes the overload,
    calls from inside tritred, and calls during dynamo tracing are not counted."""
    global _baseline
    with _lock:
        now = _snapshot()
        out = _diff(now, _baseline)
        if reset:
            _baseline = now
        return out


def _kernel(key: str, entry: Entry, original: Any) -> Any:
    """The kernel registered for ``entry`` at ``key``: tritred's implementation when the override routes the
    overload and the call is not re-entrant; torch's kernel (``original``) for everything else."""
    name, impl, redirect = entry.overload, entry.impl, entry.torch_fallback
    guard, routed = _guard, _routed
    if key == "CUDA" and torch.cuda.device_count() > 1:
        impl = _on_tensor_device(impl)

    def torch_kernel(keyset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if redirect is not None:
            out = redirect(args)
            if out is not None:
                return out
        if original is None:
            raise NotImplementedError(f"Could not run '{entry.qualname}' with arguments from the '{key}' backend: "
                                      "torch has no kernel for it there")
        return original.call_boxed(keyset, *args, **kwargs)

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if guard.busy or name not in routed.get(key, ()) or _compiling():
            return torch_kernel(keyset, args, kwargs)
        guard.busy = True
        try:
            out = impl(*args, **kwargs)
        except Decline as e:
            reason = e.reason
        except _ARG_ERRORS as e:  # tritred refuses the call: torch's kernel computes it or raises its own error
            reason = f"{type(e).__name__}: {e}"
        else:
            _count(name, None)
            return out
        finally:
            guard.busy = False
        _count(name, reason)
        return torch_kernel(keyset, args, kwargs)

    kernel.__name__ = kernel.__qualname__ = f"tritred_{name.replace('.', '_')}"
    return kernel


def _on_tensor_device(impl: Any) -> Any:
    """``impl`` run with the first tensor argument's device current, as torch's CUDA kernels run under a device
    guard (Triton launches on the current device)."""
    def guarded(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if isinstance(a, torch.Tensor):
                with torch.cuda.device(a.device):
                    return impl(*args, **kwargs)
        return impl(*args, **kwargs)
    return guarded


def _get_kernel(qualname: str, key: str) -> Any:
    """torch's computed kernel of ``qualname`` at ``key``, or None where there is none (the CPU key of a
    CUDA-only op)."""
    try:
        return torch.library.get_kernel(qualname, key)
    except RuntimeError:
        return None


def _register(key: str, entry: Entry) -> Any:
    original = _get_kernel(entry.qualname, key)
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # (torch warns once that a registered kernel is overridden: that is the point)
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            lib.impl(entry.overload, _kernel(key, entry, original), key, with_keyset=True)
    except BaseException:
        lib._destroy()
        raise
    return lib


def _sync() -> None:
    """Make the registrations and the routed sets match the open scopes (under ``_lock``)."""
    wanted = {(s.dispatch_key, o) for s in _scopes for o in s.overloads}
    for reg in [reg for reg in _registered if reg not in wanted]:
        _registered.pop(reg)._destroy()
    for key, overload in sorted(wanted - _registered.keys()):
        _registered[(key, overload)] = _register(key, _ENTRIES[overload])
    innermost: dict[str, frozenset[str]] = {}
    for s in _scopes:
        innermost[s.dispatch_key] = s.overloads
    for key in [key for key in _routed if key not in innermost]:  # (item by item: a call sees either state)
        del _routed[key]
    _routed.update(innermost)



def _dispatch_key(device: object) -> str:
    kind = torch.device(device).type if isinstance(device, (str, torch.device)) else None
    if kind == "cuda":
        return "CUDA"
    if kind == "cpu":
        if not interpreting():
            raise RuntimeError("tritred_ops.enable(device='cpu') is for tests: it routes CPU tensors to the Triton "
                               "interpreter and needs TRITON_INTERPRET=1 set before tritred_ops is imported")
        return "CPU"
    raise ValueError(f"tritred_ops.enable(): device must be 'cuda' (or 'cpu' under TRITON_INTERPRET=1), got {device!r}")


class AtenOverride:
    """An open scope of :func:`enable`: a context manager (``with``: closed on exit) and a handle (``close()``).

    Attributes:
        overloads: the aten overloads this scope routes to tritred (``"sum.dim_IntList"``, ``"_softmax"``).
        missing: overloads selected but absent from the installed torch (kept by torch, if it ever calls them).
        dispatch_key: ``"CUDA"`` (``"CPU"`` for the interpreter tests).
    """

    def __init__(self, dispatch_key: str, overloads: frozenset[str], missing: tuple[str, ...]) -> None:
        self.dispatch_key, self.overloads, self.missing = dispatch_key, overloads, missing
        self._start: dict[str, OpCounts] = {}
        self._end: dict[str, OpCounts] | None = None

    @property
    def active(self) -> bool:
        """Whether the scope is open (it may be shadowed by an inner one)."""
        return self in _scopes

    def close(self) -> None:
        """Close the scope (again: nothing): the overrides go back to the enclosing scope's, or torch's."""
        with _lock:
            if self in _scopes:
                _scopes.remove(self)
                self._end = _snapshot()
                _sync()

    def stats(self) -> dict[str, OpCounts]:
        """:func:`enabled_stats` counted while this scope was open (by any scope routing the call)."""
        return _diff(self._end if self._end is not None else _snapshot(), self._start)

    def __enter__(self) -> AtenOverride:
        if not self.active:
            raise RuntimeError("this tritred_ops.enable() scope is closed: call tritred_ops.enable() again")
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self.active else "closed"
        return f"<tritred_ops.enable {state}, {self.dispatch_key}: {len(self.overloads)} aten overloads>"


def enable(include: Iterable[object] | str | None = None, exclude: Iterable[object] | str | None = None, *,
           device: str | torch.device = "cuda") -> AtenOverride:
    """Route torch's own aten ops on CUDA tensors to tritred's kernels; see :mod:`tritred_ops.aten`.

    Args:
        include: the ops to route (None: every row of the table): tritred op names (``"softmax"``,
            ``"layer_norm"``: forward and backward overloads), aten overloads (``"sum.dim_IntList"``,
            ``"aten::_softmax"``, ``torch.ops.aten.max.dim``) or aten ops (``"max"``: all its overloads here).
        exclude: names (the same forms) to leave to torch.
        device: ``"cuda"`` (the CUDA dispatch key: every CUDA device). ``"cpu"`` is for tests: it registers the
            same table at the CPU key and needs ``TRITON_INTERPRET=1`` (RuntimeError otherwise).

    Returns:
        The open scope: use it as a context manager (``with tritred_ops.enable(): ...``) or keep it and call
        ``close()`` / :func:`disable`. Nested scopes route the innermost one's selection.

    Raises:
        ValueError: an unknown name or device. RuntimeError: ``device="cpu"`` without the interpreter, or a torch
        without ``torch.library.get_kernel`` (before 2.9).

    Warns:
        UserWarning: ``device="cuda"`` where torch sees no CUDA device (the scope opens and routes nothing).
    """
    key = _dispatch_key(device)
    if key == "CUDA" and not torch.cuda.is_available():
        # (not an error: code written for GPUs keeps running; but nothing it does on the CPU is routed)
        warnings.warn("tritred_ops.enable(): no CUDA device, so no call is routed to tritred (it routes CUDA "
                      "tensors; under TRITON_INTERPRET=1, enable(device='cpu') routes CPU tensors)", UserWarning,
                      stacklevel=2)
    if not hasattr(torch.library, "get_kernel"):
        raise RuntimeError(f"tritred_ops.enable() needs torch >= 2.9 (torch.library.get_kernel); this is torch "
                           f"{torch.__version__}")
    rows = select(include, exclude)
    present = tuple(e for e in rows if e.resolve() is not None)
    missing = tuple(e.overload for e in rows if e not in present)
    scope = AtenOverride(key, frozenset(e.overload for e in present), missing)
    with _lock:
        _ENTRIES.update((e.overload, e) for e in present)
        scope._start = _snapshot()
        _scopes.append(scope)
        try:
            _sync()
        except BaseException:
            _scopes.remove(scope)
            _sync()
            raise
    return scope


def disable() -> None:
    """Close every open :func:`enable` scope: torch's kernels are back for every op (their ``with`` blocks then
    exit without effect)."""
    with _lock:
        if _scopes:
            end = _snapshot()
            for s in _scopes:
                s._end = end
            _scopes.clear()
            _sync()


def active_scopes() -> tuple[AtenOverride, ...]:
    """The open scopes, outermost first."""
    with _lock:
        return tuple(_scopes)
