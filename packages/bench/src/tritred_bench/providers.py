"""Providers: who computes a case. ``tritred`` (the registry's record) and the peers it is measured against.

A provider turns ``(record, case, args, kwargs)`` into a zero-argument callable computing the op's forward, or
None when it does not offer the op; it raises :class:`Unsupported` (or an error its :meth:`Provider.refusal`
recognizes) for a call it refuses, which the report shows as skipped with the reason. For a training pass the
runner hands it inputs that require grad and differentiates the callable's output itself
(``torch.autograd.grad``), so a provider's forward must record its autograd graph. :meth:`Provider.context`
wraps the correctness check and the timing (FlagGems' ``use_gems()`` is entered once, not per call);
:meth:`Provider.adapt_inputs` converts inputs outside the timed region (quack's float32 layer_norm weights).

- ``tritred``: ``rec.impl``.
- ``eager``: the torch op the record mirrors (``spec.mirrors``, e.g. ``torch.nn.functional.layer_norm``).
- ``compile``: ``torch.compile(torch op, dynamic=False)``, with ``torch._dynamo.reset()`` before each case; in a
  training pass AOTAutograd compiles the backward too.
- ``liger``: Liger-Kernel's autograd functions (``liger_kernel.ops``: softmax over the last dim, layer_norm,
  rms_norm; ``liger_kernel.transformers.functional.liger_cross_entropy``), when importable.
- ``flaggems``: the torch op inside ``flag_gems.use_gems()`` (its backward through aten's backward ops), when
  importable.
- ``quack``: quack-kernels' CuTe-DSL kernels (``quack.softmax``, ``quack.rmsnorm``, ``quack.cross_entropy``,
  ``quack.rmsnorm.layernorm_fwd`` / ``layernorm_bwd``), when ``import quack`` works (CUDA only).
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


class Unsupported(Exception):
    """Raised by :meth:`Provider.prepare` for a call the provider does not take (a shape, a layout, a parameter):
    the case is skipped for it, with this message as the note."""


class Provider:
    """Base class: ``name``, :meth:`available`, :meth:`prepare`, :meth:`context`, :meth:`adapt_inputs` and
    :meth:`refusal`."""

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
    def context(self, training: bool = False) -> Iterator[None]:
        """Entered around the check and the timing of each case (``training``: a training pass)."""
        yield

    def adapt_inputs(self, rec: Reduction, case: Case, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The provider's copies of the inputs, converted as it needs them, before anything is timed (and before
        the runner marks the differentiable ones as requiring grad). Default: unchanged."""
        return args, kwargs

    def refusal(self, exc: Exception) -> str | None:
        """The note to show when ``exc``, raised by the provider, is how it refuses a call (skipped, not failed);
        None: a failure."""
        return None


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


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], pos: int, key: str, default: Any = None) -> Any:
    """The argument of torch's signature at ``pos`` / ``key``, wherever the call put it."""
    if key in kwargs:
        return kwargs[key]
    return args[pos] if len(args) > pos else default


def _last_dim(x: torch.Tensor, dim: Any) -> bool:
    return isinstance(dim, int) and x.dim() > 0 and dim % x.dim() == x.dim() - 1


def _norm_call(args: tuple[Any, ...], kwargs: dict[str, Any], op: str) -> tuple[Any, ...]:
    """``(x, normalized_shape, weight, bias, eps)`` of a layer_norm or rms_norm call (rms_norm: bias None; eps
    None resolved as torch does: ``finfo(x.dtype).eps`` for rms_norm, 1e-5 for layer_norm)."""
    x = args[0]
    ns = tuple(_arg(args, kwargs, 1, "normalized_shape", ()))
    w = _arg(args, kwargs, 2, "weight")
    if op == "layer_norm":
        b, eps = _arg(args, kwargs, 3, "bias"), _arg(args, kwargs, 4, "eps", 1e-5)
    else:
        b, eps = None, _arg(args, kwargs, 3, "eps")
    if eps is None:
        eps = torch.finfo(x.dtype).eps if op == "rms_norm" else 1e-5
    return x, ns, w, b, float(eps)


def _ce_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """``(x, target, weight, ignore_index, reduction, label_smoothing)`` of a cross_entropy call; raises
    :class:`Unsupported` for the legacy ``size_average``/``reduce`` arguments."""
    if _arg(args, kwargs, 3, "size_average") is not None or _arg(args, kwargs, 5, "reduce") is not None:
        raise Unsupported("legacy size_average/reduce arguments")
    return (args[0], _arg(args, kwargs, 1, "target"), _arg(args, kwargs, 2, "weight"),
            int(_arg(args, kwargs, 4, "ignore_index", -100)), str(_arg(args, kwargs, 6, "reduction", "mean")),
            float(_arg(args, kwargs, 7, "label_smoothing", 0.0)))


#: Liger-Kernel's fused row kernels (softmax, layer_norm, rms_norm) take rows of at most this many elements
#: (``liger_kernel.ops.utils.calculate_settings``: the next power of two of the row, at most 65536).
LIGER_MAX_ROW = 65536


class LigerProvider(Provider):
    """Liger-Kernel: softmax (last dim), layer_norm (weight and bias, last dim), rms_norm (last dim) and
    cross_entropy (2-D logits, class-index targets); autograd functions, so they train too."""

    name = "liger"

    def available(self) -> str | None:
        """Whether ``liger_kernel`` imports."""
        return _import_error("liger_kernel")

    def version(self) -> str | None:
        """liger-kernel's version."""
        return _dist_version("liger-kernel") or _dist_version("liger_kernel")

    @staticmethod
    def _row(n: int) -> None:
        if 1 << max(0, n - 1).bit_length() > LIGER_MAX_ROW:
            raise Unsupported(f"Liger-Kernel refuses rows over {LIGER_MAX_ROW} elements")

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """``LigerSoftmaxFunction.apply(x)``, ``LigerLayerNormFunction.apply(x, w, b, eps)``,
        ``LigerRMSNormFunction.apply(x, w, eps)`` (Llama casting, dY overwritten in place: Liger's defaults),
        ``liger_cross_entropy(x, target, ...)`` (which writes the logits' gradient into the logits during the
        forward when they require grad); None for other ops."""
        name = rec.spec.name
        if name == "softmax":
            x = args[0]
            if not _last_dim(x, _arg(args, kwargs, 1, "dim")) or _arg(args, kwargs, 2, "dtype") is not None:
                raise Unsupported("Liger's softmax is over the last dim, without dtype=")
            self._row(x.shape[-1])
            fn = _liger_attr(("liger_kernel.ops.softmax", "liger_kernel.ops"), "LigerSoftmaxFunction")
            return lambda: fn.apply(x)
        if name == "layer_norm":
            x, ns, w, b, eps = _norm_call(args, kwargs, name)
            if w is None or b is None or len(ns) != 1:
                raise Unsupported("Liger's layer_norm takes a weight and a bias over the last dim")
            self._row(x.shape[-1])
            fn = _liger_attr(("liger_kernel.ops.layer_norm", "liger_kernel.ops"), "LigerLayerNormFunction")
            return lambda: fn.apply(x, w, b, eps)
        if name == "rms_norm":
            x, ns, w, _, eps = _norm_call(args, kwargs, name)
            if len(ns) != 1:
                raise Unsupported("Liger's rms_norm is over the last dim")
            self._row(x.shape[-1])
            fn = _liger_attr(("liger_kernel.ops.rms_norm", "liger_kernel.ops"), "LigerRMSNormFunction")
            return lambda: fn.apply(x, w, eps)
        if name == "cross_entropy":
            x, target, weight, ignore_index, reduction, smoothing = _ce_call(args, kwargs)
            if x.dim() != 2 or target.dtype.is_floating_point:
                raise Unsupported("Liger's cross_entropy takes 2-D logits and class-index targets")
            ce = _liger_attr(("liger_kernel.transformers.functional",), "liger_cross_entropy")

            def call() -> Any:
                out = ce(x, target, weight=weight, ignore_index=ignore_index, reduction=reduction,
                         label_smoothing=smoothing)
                return out[0] if isinstance(out, tuple) else out
            return call
        return None

    def refusal(self, exc: Exception) -> str | None:
        """Liger's row limit (a RuntimeError from ``calculate_settings``)."""
        if isinstance(exc, RuntimeError) and "exceeds the recommended Triton blocksize" in str(exc):
            return f"Liger-Kernel refuses rows over {LIGER_MAX_ROW} elements"
        return None


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
    def context(self, training: bool = False) -> Iterator[None]:
        """``with flag_gems.use_gems():``."""
        flag_gems = importlib.import_module("flag_gems")
        with flag_gems.use_gems():
            yield


class _QuackLayerNorm(torch.autograd.Function):
    """quack's layer_norm as an autograd function (quack ships ``layernorm_fwd`` and ``layernorm_bwd``, no
    Function): the forward keeps the input, the float32 weight, rstd and mean for the backward."""

    fwd: Any = None
    bwd: Any = None

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                eps: float) -> torch.Tensor:
        out, rstd, mean = _QuackLayerNorm.fwd(x, weight, bias, eps=eps, return_rstd=True, return_mean=True)
        ctx.save_for_backward(x, weight, rstd, mean)
        ctx.has_bias = bias is not None
        return out  # type: ignore[no-any-return]

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd, mean = ctx.saved_tensors
        dx, dw, db = _QuackLayerNorm.bwd(x, weight, dy.contiguous(), rstd, mean, has_bias=ctx.has_bias)
        return dx, dw, db, None


class QuackProvider(Provider):
    """quack-kernels (Dao-AILab, CuTe-DSL): softmax (last dim), layer_norm (forward; the backward through
    ``layernorm_bwd``), rms_norm and cross_entropy (2-D logits, class-index targets, no label smoothing).

    quack takes contiguous rows whose length is a multiple of 16 bytes (8 bf16/fp16 or 4 fp32 elements), 2-D
    inputs for softmax, layer_norm and cross_entropy (N-D contiguous inputs are viewed as rows of the last dim)
    and float32 layer_norm weights (:meth:`adapt_inputs` converts them, outside the timed region). Other calls
    are skipped with the reason; quack's own assertions are refusals too.
    """

    name = "quack"
    #: Device types quack's kernels run on.
    devices: tuple[str, ...] = ("cuda",)

    def available(self) -> str | None:
        """Whether ``quack`` imports (it needs CUDA and the CUTLASS DSL)."""
        return _import_error("quack")

    def version(self) -> str | None:
        """quack-kernels' version."""
        try:
            return str(importlib.import_module("quack").__version__)
        except Exception:
            return _dist_version("quack-kernels")

    def adapt_inputs(self, rec: Reduction, case: Case, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """layer_norm: the weight and bias as float32 copies (quack's layernorm takes no other)."""
        if rec.spec.name != "layer_norm":
            return args, kwargs
        a, k = list(args), dict(kwargs)
        for pos, key in ((2, "weight"), (3, "bias")):
            holder: Any = k if key in k else a if len(a) > pos else None
            slot: Any = key if key in k else pos
            if holder is not None and isinstance(holder[slot], torch.Tensor) and holder[slot].dtype != torch.float32:
                holder[slot] = holder[slot].detach().to(torch.float32)
        return tuple(a), k

    def _rows(self, x: torch.Tensor) -> int:
        """The row length, after checking what quack takes."""
        if x.device.type not in self.devices:
            raise Unsupported("quack runs on CUDA only")
        if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise Unsupported(f"quack takes float16, bfloat16 and float32, not {x.dtype}")
        if x.dim() == 0 or not x.is_contiguous():
            raise Unsupported("quack takes contiguous rows")
        n = x.shape[-1]
        per16 = 16 // x.element_size()
        if n % per16:
            raise Unsupported(f"quack wants rows of a multiple of {per16} elements ({str(x.dtype)[6:]})")
        return int(n)

    def prepare(self, rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Fn | None:
        """``quack.softmax``, ``quack.rmsnorm``, ``quack.cross_entropy`` (its float32 loss cast to the logits'
        dtype, as torch returns it), layer_norm through :class:`_QuackLayerNorm` when the inputs require grad
        and ``layernorm_fwd`` otherwise; None for other ops."""
        name = rec.spec.name
        if name not in ("softmax", "layer_norm", "rms_norm", "cross_entropy"):
            return None
        quack = importlib.import_module("quack")
        x = args[0]
        n = self._rows(x)
        if name == "softmax":
            if not _last_dim(x, _arg(args, kwargs, 1, "dim")) or _arg(args, kwargs, 2, "dtype") is not None:
                raise Unsupported("quack's softmax is over the last dim, without dtype=")
            softmax = quack.softmax
            return lambda: softmax(x.reshape(-1, n)).view(x.shape)
        if name == "rms_norm":
            _, ns, w, _, eps = _norm_call(args, kwargs, name)
            if len(ns) != 1:
                raise Unsupported("quack's rmsnorm is over the last dim")
            rmsnorm = quack.rmsnorm
            return lambda: rmsnorm(x, w, eps=eps)
        if name == "layer_norm":
            _, ns, w, b, eps = _norm_call(args, kwargs, name)
            if len(ns) != 1 or w is None:
                raise Unsupported("quack's layernorm takes a weight, over the last dim")
            mod = importlib.import_module("quack.rmsnorm")
            training = any(isinstance(t, torch.Tensor) and t.requires_grad for t in (x, w, b))
            if training:
                if not hasattr(mod, "layernorm_bwd"):
                    raise Unsupported("this quack has no layer_norm backward")
                _QuackLayerNorm.fwd, _QuackLayerNorm.bwd = mod.layernorm_fwd, mod.layernorm_bwd
                return lambda: _QuackLayerNorm.apply(x.reshape(-1, n), w, b, eps).view(x.shape)
            fwd = mod.layernorm_fwd
            return lambda: fwd(x.reshape(-1, n), w, b, eps=eps).view(x.shape)
        x, target, weight, ignore_index, reduction, smoothing = _ce_call(args, kwargs)
        if x.dim() != 2 or target.dtype.is_floating_point or smoothing != 0.0:
            raise Unsupported("quack's cross_entropy takes 2-D logits, class-index targets, no label smoothing")
        ce = quack.cross_entropy
        return lambda: ce(x, target, weight=weight, ignore_index=ignore_index, reduction=reduction).to(x.dtype)

    def refusal(self, exc: Exception) -> str | None:
        """quack states what it takes with assertions (and a few ValueErrors); the CuTe DSL's own errors (a row
        that does not fit on chip across a cluster) are refusals too."""
        module = type(exc).__module__ or ""
        if isinstance(exc, (AssertionError, ValueError, NotImplementedError)) or module.startswith(("cutlass",
                                                                                                      "quack")):
            return f"quack refused: {type(exc).__name__}: {exc}".splitlines()[0][:200]
        return None


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
    p.name: p for p in (TritredProvider, EagerProvider, CompileProvider, LigerProvider, FlagGemsProvider,
                        QuackProvider)
}
#: The peers ``tritred`` is compared with, in report order.
PEERS: tuple[str, ...] = ("eager", "compile", "liger", "flaggems", "quack")


def get_provider(name: str) -> Provider:
    """A provider by name; raises ValueError listing the known ones."""
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
    return PROVIDERS[name]()
