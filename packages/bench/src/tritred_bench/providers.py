"""Providers: who computes a case. ``tritred`` (the registry's record) and the peers it is measured against.

A provider turns ``(record, case, args, kwargs)`` into a zero-argument callable, or None when it does not offer
the op (Liger has only softmax over the last dim and layer_norm). :meth:`Provider.context` wraps both the
correctness check and the timing (FlagGems' ``use_gems()`` is entered once, not per call).

- ``tritred``: ``rec.impl``.
- ``eager``: the torch op the record mirrors (``spec.mirrors``, e.g. ``torch.nn.functional.layer_norm``).
- ``compile``: ``torch.compile(torch op, dynamic=False)``, with ``torch._dynamo.reset()`` before each case.
- ``liger``: ``liger_kernel.ops`` softmax / layer_norm autograd functions, when importable.
- ``flaggems``: the torch op inside ``flag_gems.use_gems()``, when importable.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tritred_core import Reduction

from .suites import Case

Fn = Callable[[], Any]


def torch_op(rec: Reduction) -> Callable[..., Any]:
    """The torch callable named by ``rec.spec.mirrors`` (``torch.softmax``, ``torch.nn.functional.layer_norm``);
    ``rec.reference`` when the name does not resolve."""
    parts = rec.spec.mirrors.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        if callable(obj):
            return obj  # type: ignore[no-any-return]
        break
    return rec.reference


class Provider:
    """Base class: ``name``, :meth:`available`, :meth:`prepare` and :meth:`context`."""

    name = "provider"

    def available(self) -> str | None:
        """None when usable, else why not (shown in the report)."""
        return None

    def version(self) -> str | None:
        """The version of the library behind the provider, for the report's metadata."""
        return None

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """A zero-argument callable computing the case on ``args``/``kwargs``, or None when not offered."""
        raise NotImplementedError

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """Entered around the check and the timing of each case."""
        yield


class TritredProvider(Provider):
    """The registered record's implementation."""

    name = "tritred"

    def version(self) -> str | None:
        """tritred-ops' version."""
        return _dist_version("tritred-ops")

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """``rec.impl(*args, **kwargs)``."""
        impl = rec.impl
        return lambda: impl(*args, **kwargs)


class EagerProvider(Provider):
    """torch eager: the op named by the spec's ``mirrors``."""

    name = "eager"

    def version(self) -> str | None:
        """torch's version."""
        return str(torch.__version__)

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """The torch op on the same arguments."""
        fn = torch_op(rec)
        return lambda: fn(*args, **kwargs)


class CompileProvider(Provider):
    """``torch.compile(op, dynamic=False)``, compiled afresh for each case."""

    name = "compile"

    def version(self) -> str | None:
        """torch's version."""
        return str(torch.__version__)

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """Reset dynamo, compile the torch op; compilation happens on the first (checking) call."""
        torch._dynamo.reset()
        compiled = torch.compile(torch_op(rec), dynamic=False)
        return lambda: compiled(*args, **kwargs)


def _import_error(module: str) -> str | None:
    """None when ``module`` imports, else why not (an optional peer that is not installed)."""
    try:
        importlib.import_module(module)
    except Exception as e:
        return f"{module} not importable ({type(e).__name__})"
    return None


class LigerProvider(Provider):
    """Liger-Kernel's softmax (last dim) and layer_norm (weight and bias over the last dim)."""

    name = "liger"

    def available(self) -> str | None:
        """Whether ``liger_kernel`` imports."""
        return _import_error("liger_kernel")

    def version(self) -> str | None:
        """liger-kernel's version."""
        return _dist_version("liger-kernel") or _dist_version("liger_kernel")

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """``LigerSoftmaxFunction.apply(x)`` / ``LigerLayerNormFunction.apply(x, w, b, eps)``, else None."""
        name = rec.spec.name
        if name == "softmax":
            x = args[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if dim is None or dim not in (-1, x.dim() - 1) or kwargs.get("dtype") is not None:
                return None
            fn = _liger_attr(("liger_kernel.ops.softmax", "liger_kernel.ops"), "LigerSoftmaxFunction")
            return lambda: fn.apply(x)
        if name == "layer_norm":
            x, normalized_shape, w, b = (list(args) + [None] * 4)[:4]
            w, b = kwargs.get("weight", w), kwargs.get("bias", b)
            eps = kwargs.get("eps", args[4] if len(args) > 4 else 1e-5)
            if w is None or b is None or len(tuple(normalized_shape)) != 1:
                return None
            fn = _liger_attr(("liger_kernel.ops.layer_norm", "liger_kernel.ops"), "LigerLayerNormFunction")
            return lambda: fn.apply(x, w, b, eps)
        return None

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """No autograd bookkeeping: forward only, like the other providers."""
        with torch.no_grad():
            yield


class FlagGemsProvider(Provider):
    """The torch op with FlagGems' kernels enabled (``flag_gems.use_gems()``)."""

    name = "flaggems"

    def available(self) -> str | None:
        """Whether ``flag_gems`` imports."""
        return _import_error("flag_gems")

    def version(self) -> str | None:
        """flag-gems' version."""
        return _dist_version("flag-gems") or _dist_version("flag_gems")

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """The torch op; :meth:`context` routes it to FlagGems."""
        fn = torch_op(rec)
        return lambda: fn(*args, **kwargs)

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """``with flag_gems.use_gems():``."""
        flag_gems = importlib.import_module("flag_gems")
        with flag_gems.use_gems():
            yield


def _liger_attr(modules: tuple[str, ...], attr: str) -> Any:
    err: Exception | None = None
    for mod in modules:
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            err = e
    raise RuntimeError(f"liger_kernel has no {attr} ({err})")


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


#: Provider classes by name (the order of report columns).
PROVIDERS: dict[str, type[Provider]] = {
    p.name: p for p in (TritredProvider, EagerProvider, CompileProvider, LigerProvider, FlagGemsProvider)
}
#: The peers ``tritred`` is compared with, in report order.
PEERS: tuple[str, ...] = ("eager", "compile", "liger", "flaggems")


def get_provider(name: str) -> Provider:
    """A provider by name; raises ValueError listing the known ones."""
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
    return PROVIDERS[name]()
