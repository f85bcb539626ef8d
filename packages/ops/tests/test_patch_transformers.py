"""tritred_ops.patch on transformers' RMSNorm/LayerNorm classes (skipped without transformers): every recognized form
against the family's own forward (bit for bit where the sums are exact, within one rounding otherwise; gradients),
the classes left alone, tiny random-weight Llama/Qwen3/Gemma2 models built from their configs, and
torch.compile(fullgraph=True) of patched norms. No download: the modules are built directly."""

from __future__ import annotations

import copy
import importlib
import logging

import pytest
import torch
import tritred_ops as tr
from nn_helpers import spy_ops
from tritred_ops.nn.transformers_norms import form_of

transformers = pytest.importorskip("transformers")

H = 16
TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
       torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-5, atol=1e-5)}


#: The transformers release whose classes CASES describe (names, constructor arguments, forward sources); an older
#: one (the GPU machine's image) may lack a class or take other arguments: those cases are skipped there.
CASES_RELEASE = "5.25"


def _older_transformers() -> bool:
    from packaging.version import Version

    return Version(transformers.__version__) < Version(CASES_RELEASE)


def _cls(family: str, name: str) -> type:
    try:
        return getattr(importlib.import_module(f"transformers.models.{family}.modeling_{family}"), name)
    except (ImportError, AttributeError):
        if _older_transformers():
            pytest.skip(f"{name}: not in this older transformers")
        raise


#: (form, family, class, constructor arguments, input shape, exact): one class of every form; ``exact``: the same
#: arithmetic as the family's forward (bit for bit on exact sums; the LayerNorm forms differ from torch's CPU
#: layer_norm, which computes x * rstd - mean * rstd).
CASES = [
    ("llama", "llama", "LlamaRMSNorm", dict(hidden_size=H, eps=1e-6), (3, 5, H), True),
    ("llama", "qwen3", "Qwen3RMSNorm", dict(hidden_size=H, eps=0.25), (2, 3, 2, H), True),
    ("llama4", "llama4", "Llama4TextRMSNorm", dict(hidden_size=H), (3, 5, H), True),
    ("olmo2", "olmo2", "Olmo2RMSNorm", dict(hidden_size=H), (3, 5, H), True),
    ("helium", "helium", "HeliumRMSNorm", dict(hidden_size=H), (3, 5, H), True),
    ("gemma", "gemma", "GemmaRMSNorm", dict(hidden_size=H, eps=0.1), (3, 5, H), True),
    ("gemma", "gemma3", "Gemma3RMSNorm", dict(hidden_size=H), (3, 5, H), True),
    ("moshi", "moshi", "MoshiRMSNorm", dict(hidden_size=H), (3, 5, H), True),
    ("gemma3n", "gemma3n", "Gemma3nRMSNorm", dict(hidden_size=H), (3, 5, H), True),
    ("gemma3n", "gemma3n", "Gemma3nRMSNorm", dict(hidden_size=H, with_scale=False), (3, 5, H), True),
    ("unweighted", "nanochat", "NanoChatRMSNorm", dict(), (3, 5, H), True),
    ("unweighted", "inkling2", "Inkling2UnweightedRMSNorm", dict(eps=0.3), (3, 5, H), True),
    ("t5", "t5", "T5LayerNorm", dict(hidden_size=H), (3, 5, H), True),
    ("cohere", "cohere", "CohereLayerNorm", dict(hidden_size=H), (3, 5, H), True),
    ("cohere", "cohere", "CohereLayerNorm", dict(hidden_size=(2, 8)), (3, 2, 8), True),  # per-head weight
    ("olmo", "olmo", "OlmoLayerNorm", dict(hidden_size=H), (3, 5, H), False),
    ("layer_norm_super", "convnext", "ConvNextLayerNorm", dict(normalized_shape=H, data_format="channels_first"),
     (2, H, 3, 2), False),
    ("layer_norm_super", "convnext", "ConvNextLayerNorm", dict(normalized_shape=H), (2, 3, 2, H), False),
    ("layer_norm_super", "esmc", "EsmcLayerNorm", dict(normalized_shape=H), (3, 5, H), False),
]
IDS = [f"{c[2]}-{i}" for i, c in enumerate(CASES)]


def _module(family, name, kwargs, seed=0):
    try:
        module = _cls(family, name)(**kwargs)
    except TypeError:
        if _older_transformers():
            pytest.skip(f"{name}: other constructor arguments in this older transformers")
        raise
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # weights of few bits (products exact), around 1 (and around 0 for Gemma's 1 + weight)
        for p in module.parameters():
            p.copy_(torch.randint(-6, 7, p.shape, generator=g) / 4 + (0 if "Gemma" in name else 1))
    return module


def _module_or_none(family, name, kwargs):
    """:func:`_module`, or None where this older transformers lacks the class or its arguments."""
    try:
        return _module(family, name, kwargs)
    except pytest.skip.Exception:
        return None


def _run(module, x, dy):
    x = x.detach().clone().requires_grad_()
    out = module(x)
    out.backward(dy)
    return out, x.grad, [p.grad for p in module.parameters()]


@pytest.mark.parametrize("form, family, name, kwargs, shape, exact", CASES, ids=IDS)
def test_form(form, family, name, kwargs, shape, exact, device, monkeypatch):
    """The class is recognized as its form; patched, the module keeps its parameters and state_dict keys; outputs
    equal the family's forward bit for bit on inputs whose sums are exact (float16, float32, and float64, which the
    families normalize in float32) and within one rounding of the dtype on random inputs (bfloat16 too: Triton's
    interpreter truncates to bfloat16 where torch rounds); input and weight gradients within one rounding."""
    original = _module(family, name, kwargs).to(device)
    if form_of(type(original)) is None and _older_transformers():
        pytest.skip(f"{name}: its forward in this older transformers is none of the recognized forms (not patched)")
    assert form_of(type(original)).name == form
    module = copy.deepcopy(original)
    params, keys = list(module.parameters()), list(module.state_dict())
    tr.patch(module)
    assert isinstance(module, type(original)) and type(module) is not type(original)
    assert all(a is b for a, b in zip(module.parameters(), params)) and list(module.state_dict()) == keys
    calls = spy_ops(monkeypatch)
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float16, torch.float32, torch.float64, torch.bfloat16):
        ours, theirs = module.to(dtype), copy.deepcopy(original).to(dtype)
        if exact and dtype != torch.bfloat16:
            x = (torch.randint(-16, 17, shape, generator=g) / 8).to(device=device, dtype=dtype)  # exact sums
            got, want = ours(x), theirs(x)
            assert got.dtype == want.dtype
            if device == "cpu":
                assert torch.equal(got, want), f"{dtype}: {(got.double() - want.double()).abs().max()}"
            else:  # (torch's CUDA rsqrt is rsqrtf, not IEEE-rounded)
                torch.testing.assert_close(got, want, **TOL[dtype])
        x = torch.randn(shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
        dy = torch.randn(shape, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
        got, want = _run(ours, x, dy), _run(theirs, x, dy)
        for what, a, b in zip(["out", "dx", *(f"d{n}" for n, _ in ours.named_parameters())], [*got[:2], *got[2]],
                              [*want[:2], *want[2]]):
            # (the tensor's scale: a weight's gradient sums rows whose roundings differ by an ulp, e.g. where
            # Triton's interpreter truncates to bfloat16 and torch rounds)
            tol = dict(rtol=TOL[dtype]["rtol"], atol=TOL[dtype]["atol"] * max(1.0, b.abs().max().item()))
            torch.testing.assert_close(a, b, **tol, msg=lambda m, w=what, d=dtype: f"{w} {d}: {m}")
        ours.zero_grad()
    # one call per forward: (exact sums +) random inputs, float16, float32, float64 and bfloat16; in float64 T5 and
    # OLMo2 run their own forward (T5's x * rstd would be float64, OLMo2 multiplies by the float64 weight)
    assert sum(calls.values()) == (5 if form in ("t5", "olmo2") else 7 if exact else 4)


def test_fallback_to_the_original_forward(device, monkeypatch, caplog):
    """Calls a form does not take run the family's own forward, logged: meta tensors, a Gemma weight that is not a
    vector of the row's length, a T5 float64 input."""
    caplog.set_level(logging.DEBUG, logger="tritred")
    calls = spy_ops(monkeypatch)
    llama = tr.patch(_module("llama", "LlamaRMSNorm", dict(hidden_size=H)).to("meta"))
    assert llama(torch.randn(2, H, device="meta")).device.type == "meta"
    gemma = _module("gemma", "GemmaRMSNorm", dict(hidden_size=(2, H))).to(device)  # a weight of shape (2, H)
    x = torch.randn(3, 2, H, device=device)
    want = gemma(x)
    assert torch.equal(tr.patch(gemma)(x), want)
    t5 = tr.patch(_module("t5", "T5LayerNorm", dict(hidden_size=H)).double().to(device))
    t5(torch.randn(3, H, device=device, dtype=torch.float64))
    assert calls == {}
    for reason in ["on meta", "a torch.float32 weight of shape (2, 16)", "no kernel for torch.float64"]:
        assert reason in caplog.text


def test_classes_left_alone():
    """Only transformers' *RMSNorm/*LayerNorm classes whose forward (and its helpers) read as a known form: not a
    subclass that changes the arithmetic (forward or _norm), not the same source outside transformers, not a
    family whose arithmetic tritred does not reproduce (DeepseekV4's rstd rounded to the input's dtype first); a
    subclass that changes nothing is recognized."""
    llama, gemma = _cls("llama", "LlamaRMSNorm"), _cls("gemma", "GemmaRMSNorm")

    class Doubled(llama):
        def forward(self, hidden_states):
            return super().forward(hidden_states) * 2

    class OtherNorm(gemma):
        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 2 * self.eps)

    class Same(llama):
        pass

    class MyRMSNorm(torch.nn.Module):  # transformers' functions, held by a class of another module
        __init__ = llama.__init__
        forward = llama.forward

    class CopiedRMSNorm(torch.nn.Module):
        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    deepseek = _cls("deepseek_v4", "DeepseekV4UnweightedRMSNorm")
    assert [form_of(c) for c in (Doubled, OtherNorm, CopiedRMSNorm, MyRMSNorm, deepseek)] == [None] * 5
    assert form_of(Same).name == "llama"
    model = tr.patch(torch.nn.ModuleList([Doubled(4), OtherNorm(4), CopiedRMSNorm(), deepseek(), Same(4)]))
    assert [type(m).__module__ == "tritred_ops.patching" for m in model] == [False] * 4 + [True]


def _tiny(family, config_name, model_name, **extra):
    config = getattr(transformers, config_name)(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=64, max_position_embeddings=32, attn_implementation="eager", **extra)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # (RMSNorm weights start at 1, or at 0 for Gemma's 1 + weight)
            p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.mark.parametrize("family, config_name, model_name, norms", [
    ("llama", "LlamaConfig", "LlamaForCausalLM", 3),
    ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", 5),  # + q_norm and k_norm over the heads' dims
    ("gemma2", "Gemma2Config", "Gemma2ForCausalLM", 5),
])
def test_tiny_model(family, config_name, model_name, norms, device, monkeypatch):
    """A one-layer random-weight model from its config: every RMSNorm patched, the state_dict keys and parameter
    objects unchanged, the loss and every gradient as close to float64's as the unpatched model's."""
    original = _tiny(family, config_name, model_name).to(device)
    model = copy.deepcopy(original)
    keys, params = list(model.state_dict()), list(model.parameters())
    tr.patch(model, include="transformers")
    patched = [n for n, m in model.named_modules() if type(m).__module__ == "tritred_ops.patching"]
    assert len(patched) == norms and all(n.endswith("norm") for n in patched), patched
    assert list(model.state_dict()) == keys and all(a is b for a, b in zip(model.parameters(), params))
    calls = spy_ops(monkeypatch)
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(2)).to(device)

    def loss_and_grads(m):
        m.zero_grad()
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return [loss.detach()] + [p.grad for p in m.parameters()]

    ours, theirs, exact = (loss_and_grads(m) for m in (model, original, copy.deepcopy(original).double()))
    assert calls == {"rms_norm": norms}
    for a, b, r in zip(ours, theirs, exact):
        err, ref_err = (a.double() - r).abs().max().item(), (b.double() - r).abs().max().item()
        assert err <= 4 * ref_err + 1e-6 * (1 + r.abs().max().item()), (err, ref_err)


def test_compile_fullgraph(device):
    """torch.compile(fullgraph=True) of patched transformers norms, one of each form (aot_eager on the interpreter,
    Inductor on CUDA): forward and backward equal eager's."""
    torch._dynamo.reset()
    modules = [_module_or_none(f, n, k) for _, f, n, k, s, _ in CASES if s == (3, 5, H)]
    model = torch.nn.Sequential(*(m for m in modules if m is not None)).to(device)
    assert len(model) >= 4  # (an older transformers lacks some classes: the others run)
    eager = tr.patch(model)
    compiled = torch.compile(copy.deepcopy(eager), fullgraph=True,
                             backend="aot_eager" if device == "cpu" else "inductor")
    x = torch.randn(3, 5, H, device=device)
    results = []
    for m in (eager, compiled):
        out = m(x)
        out.square().sum().backward()
        results.append([out, *(p.grad for p in m.parameters())])
    for a, b in zip(*results):
        if device == "cpu":  # the same kernels through the registered ops: the same bits
            assert torch.equal(a, b)
        else:  # (Inductor fuses the torch pointwise ops around tritred's)
            torch.testing.assert_close(a, b, **TOL[torch.float32])
