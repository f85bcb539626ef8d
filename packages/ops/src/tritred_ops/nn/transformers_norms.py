"""The RMSNorm and LayerNorm classes of transformers' model families, recognized by their forward's source.

transformers defines one norm class per model family (``LlamaRMSNorm``, ``Qwen3RMSNorm``, ``GemmaRMSNorm``,
``T5LayerNorm`` ...), most of them copies of a few forms. A class is recognized when

- the class that defines its ``forward`` comes from a ``transformers.`` module and is named ``*RMSNorm`` or
  ``*LayerNorm``, and
- the source of its ``forward`` (and of the helpers that forward calls, e.g. ``_norm``), read with
  :func:`inspect.getsource` and normalized (comments, docstrings, annotations and formatting dropped), is one of
  the forms below, read from transformers 5.x.

Each form's replacement forward does the same arithmetic with :func:`tritred_ops.rms_norm` or
:func:`tritred_ops.layer_norm` and torch's pointwise ops: where the family rounds ``x * rstd`` to the input's dtype
before multiplying by the weight (Llama), tritred normalizes without a weight (rounding once to the input's dtype)
and torch multiplies; where it multiplies in float32 and rounds once (Gemma's ``1 + weight``), tritred's kernel
multiplies by the float32 weight and rounds once. The statistics are summed in float32 in tritred's order, not
torch's: outputs equal the original's within one rounding of the output dtype, and bit for bit where the sums are
exact. Any change to a family's forward in a later transformers release changes its source, so the class is no
longer recognized and is left alone. A call the form does not take (a device or dtype tritred refuses) runs the
original forward, logged at DEBUG.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..families.layer_norm import layer_norm
from ..families.rms_norm import rms_norm
from .common import log_fallback, refusal

_LOW = (torch.float16, torch.bfloat16, torch.float32)
_HALF = (torch.float16, torch.bfloat16)


# -- the replacement forwards ------------------------------------------------------------------------------------

def _refused(x: Any, *tensors: Any, fp64: bool = True) -> str | None:
    """Why a form's tritred forward does not take ``x`` (None: it does): :func:`.common.refusal` without autocast
    (these forwards are torch pointwise ops and float32 math either way), no rows to normalize, and float64 inputs
    for forms that multiply an unrounded float64 input (``fp64=False``)."""
    why = refusal(x, *tensors, dtypes=_LOW + (torch.float64,) if fp64 else _LOW, autocast=False)
    if why is None and (x.dim() == 0 or x.shape[-1] == 0):
        why = f"an input of shape {tuple(x.shape)}"
    return why


def _original(module: Any, x: Tensor, why: str) -> Tensor:
    log_fallback(module, why)
    return type(module)._tritred_original.forward(module, x)  # type: ignore[no-any-return]


def _rms(x: Tensor, weight: Tensor | None, eps: float | None) -> Tensor:
    """``(x.float() * rstd [* weight]).to(x.dtype)`` over the last dim, in float32, rounded once: tritred's rms_norm
    (float64 inputs: normalized as float32, as the families' ``.to(torch.float32)``, then widened back)."""
    if x.dtype == torch.float64:
        return rms_norm(x.float(), (x.shape[-1],), weight, eps).to(torch.float64)
    return rms_norm(x, (x.shape[-1],), weight, eps)


def _vector(x: Tensor, weight: Tensor, any_dtype: bool = False) -> str | None:
    """A weight that tritred's kernel multiplies must be a vector of the row's length, float16/bfloat16/float32
    (``any_dtype``: the form casts it to float32 itself)."""
    if (weight.dtype not in _LOW and not any_dtype) or tuple(weight.shape) != (x.shape[-1],):
        return f"a {weight.dtype} weight of shape {tuple(weight.shape)}"
    return None


def _llama(self: Any, hidden_states: Tensor) -> Tensor:
    """``weight * (x.float() * rstd).to(dtype)``: tritred normalizes (one rounding), torch multiplies."""
    why = _refused(hidden_states, self.weight)
    if why is not None:
        return _original(self, hidden_states, why)
    return self.weight * _rms(hidden_states, None, self.variance_epsilon)


def _llama4(self: Any, x: Tensor) -> Tensor:
    """``(x.float() * rstd).type_as(x) * weight`` (Llama's with the product's operands swapped)."""
    why = _refused(x, self.weight)
    if why is not None:
        return _original(self, x, why)
    return _rms(x, None, self.variance_epsilon) * self.weight


def _unweighted(self: Any, x: Tensor) -> Tensor:
    """``(x.float() * rstd).type_as(x)``, no weight."""
    why = _refused(x)
    if why is not None:
        return _original(self, x, why)
    return _rms(x, None, self.variance_epsilon)


def _gemma(self: Any, x: Tensor) -> Tensor:
    """``(x.float() * rstd * (1.0 + weight.float())).type_as(x)``: the float32 scale formed by torch (its gradient
    flows to the weight through it), the product and the one rounding in tritred's kernel."""
    why = _refused(x, self.weight) or _vector(x, self.weight, any_dtype=True)
    if why is not None:
        return _original(self, x, why)
    return _rms(x, 1.0 + self.weight.float(), self.eps)


def _moshi(self: Any, x: Tensor) -> Tensor:
    """``(x.float() * rstd * weight.float()).type_as(x)``."""
    why = _refused(x, self.weight) or _vector(x, self.weight, any_dtype=True)
    if why is not None:
        return _original(self, x, why)
    return _rms(x, self.weight.float(), self.eps)


def _gemma3n(self: Any, hidden_states: Tensor) -> Tensor:
    """``(x.float() * (mean(x^2) + eps) ** -0.5 [* weight.float()]).type_as(x)``, the weight only ``with_scale``."""
    weight = self.weight if self.with_scale else None
    why = _refused(hidden_states, weight)
    if why is None and weight is not None:
        why = _vector(hidden_states, weight, any_dtype=True)
    if why is not None:
        return _original(self, hidden_states, why)
    return _rms(hidden_states, None if weight is None else weight.float(), self.variance_epsilon)


def _olmo2(self: Any, hidden_states: Tensor) -> Tensor:
    """``(weight * (x.float() * rstd)).to(dtype)``: the product in float32 (a float16/bfloat16/float32 weight), one
    rounding, in tritred's kernel."""
    why = _refused(hidden_states, self.weight) or _vector(hidden_states, self.weight)
    if why is not None:
        return _original(self, hidden_states, why)
    return _rms(hidden_states, self.weight, self.variance_epsilon)


def _helium(self: Any, hidden_states: Tensor) -> Tensor:
    """``(weight.to(torch.float32) * (x.float() * rstd)).to(dtype)``."""
    why = _refused(hidden_states, self.weight) or _vector(hidden_states, self.weight, any_dtype=True)
    if why is not None:
        return _original(self, hidden_states, why)
    return _rms(hidden_states, self.weight.to(torch.float32), self.variance_epsilon)


def _t5(self: Any, hidden_states: Tensor) -> Tensor:
    """``weight * (x * rstd)[.to(weight.dtype) for a half weight]``; ``x * rstd`` is float32 (a float64 input
    would make it float64 of the unrounded input: refused). Normalized as float32 unless rounded to the input's
    dtype anyway (x and weight of one half dtype)."""
    x, weight = hidden_states, self.weight
    why = _refused(x, weight, fp64=False)
    if why is not None:
        return _original(self, x, why)
    if weight.dtype in _HALF and x.dtype == weight.dtype:
        normed = rms_norm(x, (x.shape[-1],), None, self.variance_epsilon)
    else:
        normed = rms_norm(x.float(), (x.shape[-1],), None, self.variance_epsilon)
        if weight.dtype in _HALF:
            normed = normed.to(weight.dtype)
    return weight * normed


def _cohere(self: Any, hidden_states: Tensor) -> Tensor:
    """``(weight.float() * ((x.float() - mean) * rsqrt(var + eps))).to(dtype)`` over the last dim, no bias: tritred's
    layer_norm of the float32 input (unrounded), torch's product (a weight of any shape that broadcasts)."""
    why = _refused(hidden_states, self.weight)
    if why is not None:
        return _original(self, hidden_states, why)
    x = hidden_states
    normed = layer_norm(x.to(torch.float32), (x.shape[-1],), None, None, self.variance_epsilon)
    return (self.weight.to(torch.float32) * normed).to(x.dtype)


def _olmo(self: Any, hidden_states: Tensor) -> Tensor:
    """``F.layer_norm(x.float(), normalized_shape, None, None, eps=1e-5).to(dtype)``: one rounding."""
    why = _refused(hidden_states)
    if why is not None:
        return _original(self, hidden_states, why)
    x = hidden_states
    if x.dtype == torch.float64:
        return layer_norm(x.float(), self.normalized_shape, None, None, 1e-05).to(torch.float64)
    return layer_norm(x, self.normalized_shape, None, None, 1e-05)


# -- the forms -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Form:
    """One form of a family's norm: its ``variants`` (the names of the methods it reads, ``forward`` first, and their
    normalized sources), the tritred op it runs and the replacement forward (None: the class calls
    ``super().forward``, served by tritred's LayerNorm put between it and ``torch.nn.LayerNorm``). ``example``:
    classes of the form in transformers 5.x."""

    name: str
    op: str
    variants: tuple[tuple[tuple[str, ...], str], ...]
    forward: Callable[[Any, Tensor], Tensor] | None
    example: str


def normalized(source: str) -> str | None:
    """A function's source without comments, docstring, annotations, decorators and formatting (``ast.unparse``)."""
    try:
        node = ast.parse(textwrap.dedent(source)).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.FunctionDef):
        return None
    node.decorator_list = []
    node.returns = None
    for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]:
        if arg is not None:
            arg.annotation = None
    first = node.body[0]
    if len(node.body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        node.body = node.body[1:]
    return ast.unparse(node)


def _form(name: str, op: str, forward: Callable[[Any, Tensor], Tensor] | None, example: str,
          *variants: str) -> Form:
    """A form from the source of its variants; each variant is the sources of the methods it reads, ``forward``
    first."""
    parsed = []
    for variant in variants:
        defs = ["def " + d for d in textwrap.dedent(variant).strip().split("def ")[1:]]
        methods = tuple(d[4:d.index("(")] for d in defs)
        parsed.append((methods, "\n".join(normalized(d) or "" for d in defs)))
    return Form(name, op, tuple(parsed), forward, example)


_NORM_RSQRT = """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
"""
_NORM_RSQRT_VE = """
def _norm(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
"""
_LLAMA_HEAD = """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
"""

FORMS: tuple[Form, ...] = (
    _form("llama", "rms_norm", _llama, "LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm, Qwen3RMSNorm, Phi3RMSNorm",
          _LLAMA_HEAD + "    return self.weight * hidden_states.to(input_dtype)\n"),
    _form("llama4", "rms_norm", _llama4, "Llama4TextRMSNorm", """
def forward(self, x):
    output = self._norm(x.float()).type_as(x)
    return output * self.weight
""" + _NORM_RSQRT_VE),
    _form("olmo2", "rms_norm", _olmo2, "Olmo2RMSNorm, GptOssRMSNorm",
          _LLAMA_HEAD + "    return (self.weight * hidden_states).to(input_dtype)\n"),
    _form("helium", "rms_norm", _helium, "HeliumRMSNorm, NemotronHRMSNorm",
          _LLAMA_HEAD + "    return (self.weight.to(torch.float32) * hidden_states).to(input_dtype)\n"),
    _form("gemma", "rms_norm", _gemma, "GemmaRMSNorm, Gemma2RMSNorm, Gemma3RMSNorm, Qwen3NextRMSNorm", """
def forward(self, x):
    output = self._norm(x.float())
    output = output * (1.0 + self.weight.float())
    return output.type_as(x)
""" + _NORM_RSQRT),
    _form("moshi", "rms_norm", _moshi, "MoshiRMSNorm", """
def forward(self, x):
    output = self._norm(x.float())
    output = output * self.weight.float()
    return output.type_as(x)
""" + _NORM_RSQRT),
    _form("gemma3n", "rms_norm", _gemma3n, "Gemma3nRMSNorm, Gemma4RMSNorm", """
def forward(self, hidden_states):
    normed_output = self._norm(hidden_states.float())
    if self.with_scale:
        normed_output = normed_output * self.weight.float()
    return normed_output.type_as(hidden_states)
def _norm(self, hidden_states):
    mean_squared = hidden_states.pow(2).mean(-1, keepdim=True) + self.variance_epsilon
    return hidden_states * torch.pow(mean_squared, -0.5)
"""),
    _form("unweighted", "rms_norm", _unweighted, "NanoChatRMSNorm, Llama4TextWeightlessRMSNorm", """
def forward(self, x):
    return self._norm(x.float()).type_as(x)
""" + _NORM_RSQRT_VE, """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.float()
    hidden_states = hidden_states * torch.rsqrt(hidden_states.square().mean(-1, keepdim=True) + self.variance_epsilon)
    return hidden_states.to(input_dtype)
"""),
    _form("t5", "rms_norm", _t5, "T5LayerNorm, MT5LayerNorm, UMT5LayerNorm, LongT5LayerNorm", """
def forward(self, hidden_states):
    variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    if self.weight.dtype in [torch.float16, torch.bfloat16]:
        hidden_states = hidden_states.to(self.weight.dtype)
    return self.weight * hidden_states
"""),
    _form("cohere", "layer_norm", _cohere, "CohereLayerNorm, Cohere2LayerNorm", """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    mean = hidden_states.mean(-1, keepdim=True)
    variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
    hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
    hidden_states = self.weight.to(torch.float32) * hidden_states
    return hidden_states.to(input_dtype)
"""),
    _form("olmo", "layer_norm", _olmo, "OlmoLayerNorm", """
def forward(self, hidden_states):
    orig_dtype = hidden_states.dtype
    return F.layer_norm(hidden_states.to(dtype=torch.float32), self.normalized_shape, None, None, eps=1e-5).to(
        orig_dtype
    )
"""),
    _form("layer_norm_super", "layer_norm", None, "ConvNextLayerNorm, SamLayerNorm, EsmcLayerNorm", """
def forward(self, features):
    if self.data_format == "channels_first":
        features = features.permute(0, 2, 3, 1)
        features = super().forward(features)
        features = features.permute(0, 3, 1, 2)
    else:
        features = super().forward(features)
    return features
""", """
def forward(self, hidden_states):
    return super().forward(hidden_states).to(hidden_states.dtype)
"""),
)

_BY_SOURCE = {variant: form for form in FORMS for variant in form.variants}
_METHOD_SETS = sorted({methods for methods, _ in _BY_SOURCE}, key=len, reverse=True)
_FORM_OF: weakref.WeakKeyDictionary[type, Form | None] = weakref.WeakKeyDictionary()


def _source_of(cls: type, method: str) -> str | None:
    fn = getattr(cls, method, None)
    if not inspect.isfunction(fn):
        return None
    try:
        return normalized(inspect.getsource(fn))
    except (OSError, TypeError):  # no source file (a class made at run time, a frozen install)
        return None


def form_of(cls: type) -> Form | None:
    """The form of a transformers norm class (cached per class), or None for any other class."""
    if cls in _FORM_OF:
        return _FORM_OF[cls]
    form = None
    owner = next((c for c in cls.__mro__ if "forward" in c.__dict__), None)
    if owner is not None and owner.__module__.startswith("transformers.") \
            and owner.__name__.endswith(("RMSNorm", "LayerNorm")) and issubclass(cls, torch.nn.Module):
        for methods in _METHOD_SETS:  # (the forms that also read a helper first: their forward alone is shorter)
            sources = [_source_of(cls, m) for m in methods]
            if None not in sources:
                form = _BY_SOURCE.get((methods, "\n".join(sources)))  # type: ignore[arg-type]
                if form is not None:
                    break
    if form is not None and form.forward is None and not issubclass(cls, torch.nn.LayerNorm):
        form = None
    _FORM_OF[cls] = form
    return form
