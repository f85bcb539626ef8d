"""The random suite: realistic cases drawn from a seed, for every op and three dtypes.

``random_cases(seed, count)`` draws ``count`` cases; case ``i`` depends only on ``(seed, i)`` (its own
``random.Random`` seeded with the string ``"tritred-bench:{seed}:{i}"``), so the same seed gives the same cases on
any machine, and the first 100 cases of a seed are the same whether 100 or 300 are asked for. What a case can be
(the distribution, documented in packages/bench/README.md):

- the op: every op of :data:`OP_WEIGHTS` (the built-in ops, ``rms_norm`` and ``cross_entropy``), the ops that
  training uses weighted twice; ``ops=`` restricts the draw (an op not in the table gets generic row and column
  reductions);
- the dtype: bfloat16, float16 or float32, uniformly;
- the shape, from the op's kinds: transformer activations (tokens x hidden, batch x seq x hidden, hidden sizes
  and MLP widths of real models), logits over real vocabularies, attention scores, CNN feature maps (N, C, H, W),
  2-D (N, C) features, non-last and middle dims, tiny rows (fewer than 8 elements, up to millions of rows), huge
  rows (about a million elements), odd sizes and full reductions;
- the layout: 15 % of the cases whose op takes it read a view (transposed, sliced from a padded row, every
  other element, or channels-last for feature maps);
- a memory budget: the input's storage plus an output of the input's size stays within ``budget`` bytes
  (default :data:`BUDGETS`: 2 GiB on CUDA, 256 KiB under the interpreter), the leading (batch) dims halved
  first, then the others, odd sizes kept odd.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .suites import Case, view_storage_numel

#: The dtypes drawn from.
DTYPES = ("bfloat16", "float16", "float32")

#: Default budget in bytes per case (input storage + an output of the input's size), per device type.
BUDGETS = {"cuda": 2 * 1024**3, "cpu": 256 * 1024}

#: The ops drawn from and their weights: training's ops twice as often as the others.
OP_WEIGHTS: dict[str, int] = {
    "sum": 1, "mean": 1, "prod": 1, "amax": 1, "amin": 1, "max": 1, "min": 1, "var": 1, "std": 1, "var_mean": 1,
    "std_mean": 1, "logsumexp": 1,
    "softmax": 2, "log_softmax": 2, "layer_norm": 2, "rms_norm": 2, "cross_entropy": 2, "batch_norm": 2,
}

#: Share of the cases (whose op takes a view) that read a non-contiguous view.
VIEW_SHARE = 0.15

#: Hidden sizes of transformer models (GPT-2 / BERT to 70B-class) and MLP widths.
HIDDEN = (256, 384, 512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 12288, 16384)
FFN = (2816, 3072, 5504, 8960, 11008, 13824, 14336, 18944, 28672)
#: Vocabularies: BERT, Llama 2, Phi-3, Mistral, StarCoder, GPT-2 (and padded), NeoX-style 64K, cl100k, DeepSeek,
#: Llama 3, Qwen 2 (and padded), Gemma, 2^18.
VOCAB = (30522, 32000, 32064, 32768, 49152, 50257, 50304, 65536, 100277, 102400, 128256, 151646, 152064, 256000,
         262144)
SEQ = (128, 256, 512, 1024, 2048, 4096, 8192)
BATCH = (1, 2, 4, 8, 16, 32, 64)
HEADS = (8, 12, 16, 32, 40, 64)
#: CNN channels and spatial sizes (ResNet, VGG, U-Net, EfficientNet-like).
CHANNELS = (3, 16, 24, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1280, 2048)
SPATIAL = (7, 8, 14, 16, 28, 32, 56, 64, 112, 128, 224)
#: Classification and segmentation class counts.
CLASSES = (2, 3, 5, 10, 100, 1000, 21843)
SEG_CLASSES = (2, 19, 21, 81, 150)
#: Row lengths of about a million elements.
HUGE = (999_983, 1_000_000, 1 << 20, (1 << 20) + 1, 1_572_864, 1 << 21, 3 * (1 << 20) + 7)

_SAME_SIZE = ("softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm")
_REDUCE = ("sum", "mean", "prod", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean")
_INT_DIM = ("max", "min")  # a single int dim (or none at all)
_ONE_DIM = (*_INT_DIM, "prod")  # one dim of a feature map: torch.prod takes no tuple of dims
_SOFTMAX = ("softmax", "log_softmax", "logsumexp")
_NORM = ("layer_norm", "rms_norm")
_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass
class _Draw:
    """A case being drawn: its shape, dim and parameters, and the order in which its dims shrink to the budget."""

    kind: str
    shape: list[int]
    shrink: tuple[int | tuple[int, ...], ...]  # dims (or groups of dims halved together), in order
    dim: Any = None
    has_dim: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    odd: tuple[int, ...] = ()  # dims whose size stays odd when halved
    floor: dict[int, int] = field(default_factory=dict)  # dims that stop halving at this size (default 1)
    views: tuple[str, ...] = ("transposed", "sliced", "strided")


def _loguniform(rng: random.Random, lo: int, hi: int) -> int:
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _odd(rng: random.Random, lo: int, hi: int) -> int:
    return _loguniform(rng, lo, hi) | 1


# -- kinds: (rng) -> _Draw, the reduced dim last in ``shrink`` ---------------------------------------------------------

def _rows(rng: random.Random) -> _Draw:
    """Transformer activations: tokens x hidden, or batch x seq x hidden; reduced over the hidden dim."""
    b, s, h = rng.choice(BATCH), rng.choice(SEQ), rng.choice(HIDDEN + FFN)
    if rng.random() < 0.5:
        return _Draw("rows", [b * s, h], (0, 1), dim=-1)
    return _Draw("rows", [b, s, h], (0, 1, 2), dim=-1)


def _vocab(rng: random.Random) -> _Draw:
    """Logits: tokens x vocabulary."""
    tokens = rng.choice((1, 2, 4, 8)) * rng.choice(SEQ)
    return _Draw("vocab", [tokens, rng.choice(VOCAB)], (0, 1), dim=-1)


def _attention(rng: random.Random) -> _Draw:
    """Attention scores: batch x heads x queries x keys, over the keys."""
    s = rng.choice(SEQ[:5])
    return _Draw("attention", [rng.choice(BATCH[:5]), rng.choice(HEADS), s, s], (0, 1, (2, 3)), dim=-1)


def _feature_map(rng: random.Random) -> _Draw:
    """A CNN feature map N x C x H x W."""
    hw = rng.choice(SPATIAL)
    return _Draw("feature_map", [rng.choice((1, 2, 4, 8, 16, 32, 64, 128, 256)), rng.choice(CHANNELS), hw, hw],
                 (0, (2, 3), 1), views=("channels_last", "sliced"))


def _columns(rng: random.Random) -> _Draw:
    """2-D features N x C (after a linear layer), reduced over the rows (dim 0)."""
    return _Draw("columns", [_loguniform(rng, 256, 262144), rng.choice(CHANNELS[3:] + (4096, 8192))], (0, 1), dim=0)


def _middle(rng: random.Random) -> _Draw:
    """B x L x D over the middle dim L; D short (1-16) or a hidden size."""
    d = rng.choice((1, 2, 3, 4, 8, 16)) if rng.random() < 0.5 else rng.choice(HIDDEN[:10])
    draw = _Draw("middle", [rng.choice(BATCH), _loguniform(rng, 16, 8192), d], (0, 2, 1), dim=1)
    if rng.random() < 0.25:  # or over the first dim of M x N
        draw = _Draw("middle", [_loguniform(rng, 64, 65536), rng.choice(HIDDEN)], (1, 0), dim=0)
    return draw


def _tiny(rng: random.Random) -> _Draw:
    """Rows of fewer than 8 elements, up to millions of them."""
    return _Draw("tiny", [_loguniform(rng, 1 << 16, 1 << 23), rng.randint(2, 7)], (0,), dim=-1)


def _huge(rng: random.Random) -> _Draw:
    """A few rows of about a million elements."""
    return _Draw("huge", [rng.choice((1, 2, 3, 4, 8, 16, 32, 64)), rng.choice(HUGE)], (0, 1), dim=-1)


def _odd_rows(rng: random.Random) -> _Draw:
    """Odd sizes: M x N with N odd (and M anything), over the last or the first dim."""
    draw = _Draw("odd", [_loguniform(rng, 1, 32768), _odd(rng, 3, 65535)], (0, 1), dim=-1, odd=(1,))
    if rng.random() < 0.3:
        draw.dim, draw.shrink = 0, (1, 0)
    return draw


def _full(rng: random.Random) -> _Draw:
    """A full reduction: a flat tensor, or a weight matrix (hidden x MLP width)."""
    if rng.random() < 0.6:
        return _Draw("full", [_loguniform(rng, 1 << 10, 1 << 29)], (0,), dim=None, views=("strided",))
    h = rng.choice(HIDDEN)
    return _Draw("full", [h, rng.choice(FFN)], (0, 1), dim=None)


def _pick(rng: random.Random, kinds: Sequence[tuple[Callable[[random.Random], _Draw], float]]) -> _Draw:
    fns, weights = zip(*kinds)
    return rng.choices(fns, weights=weights)[0](rng)


# -- ops -------------------------------------------------------------------------------------------------------------

def _reduce_op(rng: random.Random, op: str) -> _Draw:
    kinds: list[tuple[Callable[[random.Random], _Draw], float]] = [
        (_rows, 3), (_feature_map, 2), (_columns, 1), (_middle, 2), (_tiny, 1), (_huge, 1), (_odd_rows, 1.5),
        (_full, 1)]
    if op != "prod":
        kinds.append((_vocab, 1))
    draw = _pick(rng, kinds)
    if draw.kind == "feature_map":
        if op in _ONE_DIM:
            draw.dim = rng.choice((1, -1))
        else:
            draw.dim = rng.choice(((0, 2, 3), (2, 3), 1, (1, 2, 3)))
    if op not in _INT_DIM and draw.dim is not None and rng.random() < 0.1:
        draw.params["keepdim"] = True
    if op in ("var", "std", "var_mean", "std_mean") and rng.random() < 0.3:
        draw.params["correction"] = 0
    return draw


def _softmax_op(rng: random.Random, op: str) -> _Draw:
    draw = _pick(rng, [(_rows, 2), (_vocab, 2), (_attention, 2), (_feature_map, 1), (_middle, 1.5), (_tiny, 1),
                       (_huge, 1), (_odd_rows, 1.5)])
    if draw.kind == "feature_map":
        draw.dim = 1  # over the channels (segmentation)
    if op == "logsumexp" and rng.random() < 0.1:
        draw.params["keepdim"] = True
    return draw


def _norm_op(rng: random.Random, op: str) -> _Draw:
    draw = _pick(rng, [(_rows, 5), (_tiny, 1), (_huge, 1), (_odd_rows, 1.5), (_feature_map, 1)])
    draw.has_dim = False
    if draw.kind == "feature_map":
        if op == "layer_norm" and rng.random() < 0.5:  # LayerNorm([C, H, W])
            draw.params["normalized_shape"] = list(draw.shape[1:])
            draw.shrink = (0, (2, 3), 1)
        else:  # channels-last N x H x W x C over C
            n, c, h, w = draw.shape
            draw.shape, draw.shrink = [n, h, w, c], (0, (1, 2), 3)
        draw.views = ("sliced",)
    if draw.kind == "odd":
        draw.shrink = (0, 1)
    draw.dim = None
    draw.params.setdefault("normalized_shape", [draw.shape[-1]])
    draw.params["weight"] = rng.random() < 0.9
    if op == "layer_norm":
        draw.params["bias"] = rng.random() < 0.8
    return draw


def _cross_entropy_op(rng: random.Random, op: str) -> _Draw:
    u = rng.random()
    if u < 0.55:
        draw = _vocab(rng)
    elif u < 0.7:  # classification: N x classes (tiny rows when the classes are few)
        c = rng.choice(CLASSES)
        draw = _Draw("classes", [_loguniform(rng, 256, 1 << 22 if c < 8 else 1 << 17), c], (0, 1))
    elif u < 0.85:  # segmentation: N x classes x H x W, the classes in dim 1
        hw = rng.choice((64, 128, 256, 512))
        draw = _Draw("segmentation", [rng.choice((1, 2, 4, 8, 16)), rng.choice(SEG_CLASSES), hw, hw], (0, (2, 3), 1),
                     views=())
    else:
        draw = _Draw("odd", [_loguniform(rng, 16, 16384), _odd(rng, 3, 262143)], (0, 1), odd=(1,))
    draw.has_dim, draw.dim = False, None
    r = rng.random()
    if r < 0.1:
        draw.params["reduction"] = "sum"
    elif r < 0.2:
        draw.params["reduction"] = "none"
    if rng.random() < 0.15:
        draw.params["label_smoothing"] = 0.1
    if len(draw.shape) == 2 and rng.random() < 0.1:
        draw.params["target"] = "probs"
    elif rng.random() < 0.3:
        draw.params["ignored"] = rng.choice((0.1, 0.5))
    if rng.random() < 0.1:
        draw.params["weight"] = True
    if draw.kind == "segmentation":
        draw.views = ()
    else:
        draw.views = ("sliced",)
    return draw


def _batch_norm_op(rng: random.Random, op: str) -> _Draw:
    u = rng.random()
    if u < 0.5:
        draw = _feature_map(rng)
        draw.views = ("channels_last",)
    elif u < 0.75:  # BatchNorm1d after a linear layer: N x C
        draw = _Draw("columns", [_loguniform(rng, 256, 262144), rng.choice(CHANNELS[3:] + (4096,))], (0, 1), views=())
    elif u < 0.9:  # BatchNorm1d over sequences: N x C x L
        draw = _Draw("sequence", [rng.choice(BATCH), rng.choice(CHANNELS[3:]), _loguniform(rng, 16, 4096)], (0, 2, 1),
                     views=())
    else:  # BatchNorm3d: N x C x D x H x W
        hw = rng.choice((8, 16, 28, 32, 56))
        shape = [rng.choice((1, 2, 4, 8)), rng.choice(CHANNELS[2:9]), rng.choice((4, 8, 16, 32)), hw, hw]
        draw = _Draw("volume", shape, (0, (2, 3, 4), 1), views=())
    draw.has_dim, draw.dim = False, None
    draw.floor = {0: 2}  # training statistics need more than one value per channel
    draw.params["training"] = rng.random() < 0.75
    affine = rng.random() < 0.9
    draw.params["weight"] = draw.params["bias"] = affine
    return draw


def _generic_op(rng: random.Random, op: str) -> _Draw:
    """An op the table does not know (a plugin's): row and column reductions of every kind."""
    return _pick(rng, [(_rows, 3), (_vocab, 1), (_middle, 2), (_tiny, 1), (_huge, 1), (_odd_rows, 1.5)])


def _draw_op(rng: random.Random, op: str) -> _Draw:
    if op in _REDUCE:
        return _reduce_op(rng, op)
    if op in _SOFTMAX:
        return _softmax_op(rng, op)
    if op in _NORM:
        return _norm_op(rng, op)
    if op == "cross_entropy":
        return _cross_entropy_op(rng, op)
    if op == "batch_norm":
        return _batch_norm_op(rng, op)
    return _generic_op(rng, op)


# -- the budget ------------------------------------------------------------------------------------------------------

def footprint(op: str, shape: Sequence[int], dtype: str, params: dict[str, Any]) -> int:
    """Bytes a case holds on the device besides small outputs: the input's storage (its view's padding included),
    an output of the input's size (softmax, the norms), probability targets of the logits' size."""
    item = _ITEMSIZE.get(dtype, 4)
    numel = math.prod(shape)
    total = view_storage_numel(shape, params.get("view")) * item
    if op in _SAME_SIZE:
        total += numel * item
    if op == "cross_entropy" and params.get("target") == "probs":
        total += numel * item
    return total


def _fit(draw: _Draw, op: str, dtype: str, budget: int) -> None:
    """Halve dims in ``draw.shrink`` order (each, or each group of dims in turn, down to 1 before the next) until
    the case fits ``budget``."""
    normalized = draw.params.get("normalized_shape")

    def over() -> bool:
        return footprint(op, draw.shape, dtype, draw.params) > budget

    for group in draw.shrink:
        dims = group if isinstance(group, tuple) else (group,)
        while over() and any(draw.shape[d] > draw.floor.get(d, 1) for d in dims):
            for d in dims:
                s, low = draw.shape[d], draw.floor.get(d, 1)
                if s <= low or not over():
                    continue
                half = s // 2
                if d in draw.odd and s % 2 and half > 1:
                    half |= 1
                draw.shape[d] = max(low, half)
        if not over():
            break
    if normalized is not None:  # the normalized dims follow the shape's trailing dims
        draw.params["normalized_shape"] = list(draw.shape[len(draw.shape) - len(normalized):])


# -- the suite -------------------------------------------------------------------------------------------------------

def default_budget(device: str = "cuda") -> int:
    """:data:`BUDGETS` for ``device`` (``cuda`` or ``cpu``; anything else: the CUDA budget)."""
    return BUDGETS.get(str(device).split(":")[0], BUDGETS["cuda"])


def random_case(seed: int, i: int, ops: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
                budget: int | None = None, device: str = "cuda") -> Case:
    """Case ``i`` of seed ``seed`` (see the module's docstring); ``ops``/``dtypes`` restrict the draw."""
    rng = random.Random(f"tritred-bench:{seed}:{i}")
    names = list(ops) if ops else list(OP_WEIGHTS)
    op = rng.choices(names, weights=[OP_WEIGHTS.get(n, 1) for n in names])[0]
    dtype = rng.choice(list(dtypes) if dtypes else list(DTYPES))
    draw = _draw_op(rng, op)
    views = [v for v in draw.views if v != "transposed" or len(draw.shape) >= 2]
    views = [v for v in views if v != "channels_last" or len(draw.shape) == 4]
    if views and rng.random() < VIEW_SHARE:
        draw.params["view"] = rng.choice(views)
    _fit(draw, op, dtype, budget if budget is not None else default_budget(device))
    params = dict(draw.params)
    for k, v in params.items():
        if isinstance(v, list):
            params[k] = tuple(v)
    return Case(op=op, shape=tuple(draw.shape), dtype=dtype, dim=draw.dim if draw.has_dim else None,
                has_dim=draw.has_dim, params=params)


def random_cases(seed: int, count: int, ops: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
                 budget: int | None = None, device: str = "cuda", first: int = 0) -> list[Case]:
    """``count`` cases drawn from ``seed``: case ``i`` is :func:`random_case` ``(seed, i, ...)``, for ``i`` from
    ``first`` (a long suite run in parts: cases 0-49, then 50-99, are the first 100 cases).

    Args:
        seed: the suite's seed (reports name it).
        count: how many cases.
        first: the index of the first case.
        ops: draw only these ops (default: every op of :data:`OP_WEIGHTS`, whether registered or not: a case of
            an op that is not registered is skipped by the run, with a note).
        dtypes: draw only these dtypes (default :data:`DTYPES`).
        budget: bytes per case (default :data:`BUDGETS` for ``device``).
        device: ``cuda`` or ``cpu``, for the default budget.
    """
    if count < 0 or first < 0:
        raise ValueError(f"count and first must be >= 0, got {count} and {first}")
    return [random_case(seed, i, ops, dtypes, budget, device) for i in range(first, first + count)]


def random_name(seed: int, count: int, first: int = 0) -> str:
    """``random (seed 3, 100 cases)`` or ``random (seed 3, cases 50-99)``: the suite's name in reports."""
    if first:
        return f"random (seed {seed}, cases {first}-{first + count - 1})"
    return f"random (seed {seed}, {count} cases)"


def random_about(seed: int, count: int, budget: int | None = None, device: str = "cuda", first: int = 0) -> str:
    """The suite's description, naming the seed (shown in reports)."""
    b = budget if budget is not None else default_budget(device)
    return (f"{random_name(seed, count, first)}: drawn from the seed by tritred_bench.random_suite, "
            f"at most {b / 2**20:.4g} MiB per case")
