"""Helpers of the CLI tests: torch-only fake reductions and a plugin registering them (a third party's view)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tritred_core import Problem, Reduction, ReductionSpec, hookimpl


def _randn_inputs(shape: Any, dtype: torch.dtype, device: Any = "cpu", dim: Any = -1, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g).to(dtype).to(device),), {"dim": dim}


def fake_reduction(name: str, impl: Callable[..., Any], reference: Callable[..., Any] = torch.sum,
                   dtypes: tuple[str, ...] = ("float32",), outputs: tuple[str, ...] = ("out",)) -> Reduction:
    """A torch-only record (no Triton): what a third-party plugin registers."""
    spec = ReductionSpec(name=name, family="reduce", dtypes=dtypes, outputs=outputs, mirrors="torch.sum")
    return Reduction(spec=spec, impl=impl, reference=reference, make_inputs=_randn_inputs,
                     problem=lambda *a, **k: Problem(op=name, dtype="float32", M=1, N=1, K=1))


class ReductionsPlugin:
    """Registers the given records through the same hook tritred_ops uses."""

    def __init__(self, *records: Reduction) -> None:
        self.records = list(records)

    @hookimpl
    def tritred_register_reductions(self) -> list[Reduction]:
        return self.records
