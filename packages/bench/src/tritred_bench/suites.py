"""Benchmark cases and suites.

A suite is a JSON file ``{"about": "...", "cases": [...]}`` (a bare list of cases works too). Each case has ``op``,
``shape`` and ``dtype``; reductions with a dim give ``dim`` (``null`` = every dim, e.g. ``sum (all)``);
``layer_norm`` gives ``normalized_shape`` and ``weight``/``bias`` flags (``rms_norm``: ``weight``); ``batch_norm``
gives ``training`` (the training forward updates the running statistics) and ``weight``/``bias`` flags.

Built-in suites, shipped as package data: ``h200`` (the public suite, see docs/performance.md),
``offsuite`` (shapes outside it: other vocabulary and hidden sizes, odd sizes, non-last dims, 5-D and eval
batch_norm, a float16 subset), ``odd`` (rows that are not whole 16-byte vectors, 999 to 131071 elements, across
the row families: the shifted-tile paths), ``training`` (the ten training-step cases of softmax, layer_norm,
rms_norm and cross_entropy, meant for ``--pass both``), ``quick`` (a handful of small cases that run in seconds
under the CPU interpreter) and ``latency`` (tiny calls, for :func:`~tritred_bench.measure_latency`). ``public`` is
an alias of ``h200``. ``random`` is not a file: :func:`load_suite` draws it from a seed
(:func:`tritred_bench.random_suite.random_cases`).

Keys of a case entry besides ``op``, ``shape``, ``dtype`` and ``dim`` are op parameters, passed to the op as
keyword arguments, except those the bench interprets itself (:data:`BENCH_KEYS`): ``normalized_shape``,
``weight`` and ``bias`` (layer_norm, rms_norm: flags for the affine parameters; batch_norm: the same; for
cross_entropy ``weight`` asks for random class weights), ``view`` (the input's layout: ``transposed``, ``sliced``,
``strided``, ``channels_last``), and cross_entropy's ``target`` (``probs``: class probabilities instead of class
indices) and ``ignored`` (the fraction of class-index targets set to ``ignore_index``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

#: Other names of the built-in suites.
ALIASES = {"public": "h200"}

#: Keys of a case entry that are not op parameters.
_CORE_KEYS = ("op", "shape", "dtype", "dim")

#: Case parameters the bench interprets itself (not passed to the op as they are): see the module's docstring.
BENCH_KEYS = ("normalized_shape", "weight", "bias", "view", "target", "ignored")

#: Input layouts a case's ``view`` may ask for (:func:`tritred_bench.inputs.with_view`).
VIEWS = ("transposed", "sliced", "strided", "channels_last")

def sliced_row(n: int) -> int:
    """The row stride of a ``sliced`` view of rows of ``n`` elements: ``n`` rounded up to a multiple of 64, or
    ``n + 64`` when it is one (a padded vocabulary; the first part of a fused projection's rows)."""
    return n + (64 - n % 64)


def view_storage_numel(shape: Sequence[int], view: str | None) -> int:
    """Elements of the storage behind an input of ``shape`` read through ``view`` (:data:`VIEWS`, or None)."""
    numel = math.prod(shape)
    if not shape or numel == 0:
        return numel
    if view == "sliced":
        return math.prod(shape[:-1]) * sliced_row(shape[-1])
    if view == "strided":
        return 2 * numel
    return numel


#: Parameters left out of a case's label (the usual ones; any other parameter is shown as ``[key=value]``).
_QUIET = ("normalized_shape", "weight", "bias", "training")


@dataclass
class Case:
    """One benchmark case: an op, an input shape and dtype, the reduced dim and op-specific parameters.

    ``has_dim`` is False for ops called without a dim (layer_norm, batch_norm); ``dim=None`` with ``has_dim``
    means a full reduction. ``params`` holds the other keys of the suite entry (``normalized_shape``,
    ``weight``, ``bias``, ``training``...).
    """

    op: str
    shape: tuple[int, ...]
    dtype: str
    dim: Any = None
    has_dim: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Case:
        """Parse one suite entry; raises ValueError naming the missing or malformed key."""
        for key in ("op", "shape", "dtype"):
            if key not in d:
                raise ValueError(f"suite case {d!r} lacks {key!r}")
        shape = d["shape"]
        if isinstance(shape, int):
            shape = [shape]
        if not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"suite case {d!r}: shape must be a list of non-negative ints")
        dim = d.get("dim")
        if isinstance(dim, list):
            dim = tuple(dim)
        params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k not in _CORE_KEYS}
        return cls(op=str(d["op"]), shape=tuple(shape), dtype=str(d["dtype"]).removeprefix("torch."), dim=dim,
                   has_dim="dim" in d, params=params)

    def to_dict(self) -> dict[str, Any]:
        """The suite-entry form (JSON-serializable)."""
        d: dict[str, Any] = {"op": self.op, "shape": list(self.shape)}
        if self.has_dim:
            d["dim"] = list(self.dim) if isinstance(self.dim, tuple) else self.dim
        d.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params.items()})
        d["dtype"] = self.dtype
        return d

    @property
    def shape_label(self) -> str:
        """``16384x4096``."""
        return "x".join(map(str, self.shape)) or "scalar"

    @property
    def op_label(self) -> str:
        """``softmax dim=-1``, ``sum (all)``, ``batch_norm (train)``, ``layer_norm``."""
        if self.has_dim:
            if self.dim is None:
                return f"{self.op} (all)"
            dim = ",".join(map(str, self.dim)) if isinstance(self.dim, tuple) else self.dim
            return f"{self.op} dim={dim}"
        if self.op == "batch_norm":
            return f"{self.op} ({'train' if self.params.get('training', True) else 'eval'})"
        return self.op

    @property
    def params_label(self) -> str:
        """``[view=sliced, reduction=sum]``: the parameters that are not the usual ones ('' when none).

        layer_norm's and rms_norm's ``normalized_shape`` shows when it spans more than the last dim;
        cross_entropy's ``weight`` (class weights) shows.
        """
        shown = []
        for k, v in self.params.items():
            if k == "normalized_shape" and isinstance(v, (tuple, list)) and len(v) > 1:
                shown.append(f"normalized_shape={'x'.join(map(str, v))}")
            elif k not in _QUIET or (k == "weight" and self.op == "cross_entropy" and v):
                shown.append(f"{k}={v}")
        return f"[{', '.join(shown)}]" if shown else ""

    @property
    def label(self) -> str:
        """``softmax dim=-1 16384x4096 bfloat16``: unique within the public suite (other parameters, such as a
        view, follow in brackets: ``softmax dim=-1 4096x50257 bfloat16 [view=sliced]``)."""
        extra = self.params_label
        return f"{self.op_label} {self.shape_label} {self.dtype}" + (f" {extra}" if extra else "")


def builtin_suites() -> list[str]:
    """Names of the suites shipped with tritred-bench (``h200``, ``offsuite``, ``odd``, ``training``, ``quick``,
    ``latency``) and ``random`` (drawn from a seed)."""
    root = resources.files("tritred_bench") / "suites"
    return sorted([p.name.removesuffix(".json") for p in root.iterdir() if p.name.endswith(".json")] + ["random"])


def load_suite(suite: str | Path, *, seed: int = 0, count: int = 100, ops: list[str] | None = None,
               dtypes: list[str] | None = None, budget: int | None = None, device: str = "cuda",
               first: int = 0) -> tuple[list[Case], str]:
    """Load a suite: a built-in name (``h200`` alias ``public``, ``offsuite``, ``odd``, ``training``, ``quick``,
    ``latency``), ``random`` or a JSON file path.

    ``random`` draws ``count`` cases from ``seed``, from case ``first`` on
    (:func:`~tritred_bench.random_suite.random_cases`; ``ops``, ``dtypes``, ``budget`` and ``device`` are passed on
    to it); the keyword arguments only apply to it.
    Returns ``(cases, about)``; raises ValueError (unknown name, malformed JSON or case) or FileNotFoundError.
    """
    if str(suite) == "random":
        from .random_suite import random_about, random_cases

        cases = random_cases(seed, count, ops=ops, dtypes=dtypes, budget=budget, device=device, first=first)
        return cases, random_about(seed, count, budget=budget, device=device, first=first)
    text: str
    path = Path(suite)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise FileNotFoundError(f"suite file {str(path)!r} does not exist")
        text = path.read_text()
    else:
        name = ALIASES.get(str(suite), str(suite))
        if name not in builtin_suites():
            raise ValueError(f"unknown suite {name!r}: give a JSON file or one of {', '.join(builtin_suites())}")
        text = (resources.files("tritred_bench") / "suites" / f"{name}.json").read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"suite {str(suite)!r} is not valid JSON: {e}") from e
    about = ""
    if isinstance(data, dict):
        about = str(data.get("about", ""))
        data = data.get("cases")
    if not isinstance(data, list):
        raise ValueError(f"suite {str(suite)!r}: expected a list of cases or {{'cases': [...]}}")
    return [Case.from_dict(d) for d in data], about


def filter_cases(cases: list[Case], ops: list[str] | None = None, dtypes: list[str] | None = None) -> list[Case]:
    """The cases whose op is in ``ops`` and dtype in ``dtypes`` (None or empty: no filter)."""
    return [c for c in cases if (not ops or c.op in ops) and (not dtypes or c.dtype in dtypes)]
