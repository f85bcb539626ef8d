"""Fixtures for tritred-core's tests: a fresh Registry per test, toy specs and plugins. Torch-free."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tritred_core import LaunchConfig, Problem, Reduction, ReductionSpec, Registry, hookimpl, set_registry


def _noop(*args: Any, **kwargs: Any) -> Any:
    return None


def make_reduction(name: str, family: str = "reduce", **spec_kwargs: Any) -> Reduction:
    """A Reduction record whose callables are stand-ins (core never calls impl/reference)."""
    spec = ReductionSpec(name=name, family=family, mirrors=f"torch.{name}", **spec_kwargs)  # type: ignore[arg-type]
    return Reduction(spec=spec, impl=_noop, reference=_noop, make_inputs=_noop,
                     problem=lambda *a, **k: Problem(op=name, dtype="float32", M=1, N=1, K=1))


def toy_problem(N: int = 1000, M: int = 4, op: str = "toy") -> Problem:
    return Problem(op=op, dtype="float32", M=M, N=N, K=1, stride_m=N, stride_n=1)


class ReductionsPlugin:
    """A plugin object that registers the given reductions."""

    def __init__(self, *records: Reduction) -> None:
        self.records = list(records)

    @hookimpl
    def tritred_register_reductions(self) -> list[Reduction]:
        return self.records


class BuiltinHeuristic:
    """Stands in for tritred_ops' built-in heuristic: trylast, answers every problem."""

    @hookimpl(trylast=True)
    def tritred_launch_config(self, spec: ReductionSpec, problem: Problem, device: Any) -> LaunchConfig:
        block = 1 << max(problem.N - 1, 0).bit_length()
        if block <= 4096:
            return LaunchConfig(strategy="single_pass", BLOCK_N=block)
        return LaunchConfig(strategy="multi_pass", BLOCK_N=4096)


class ConfigPlugin:
    """A plugin whose launch-config hook calls ``decide(spec, problem, device)``."""

    def __init__(self, decide: Callable[[ReductionSpec, Problem, Any], Any]) -> None:
        self.decide = decide
        self.calls = 0

    @hookimpl
    def tritred_launch_config(self, spec: ReductionSpec, problem: Problem, device: Any) -> Any:
        self.calls += 1
        return self.decide(spec, problem, device)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    """A fresh registry that never loads entry points, installed as the process-wide one for the test."""
    monkeypatch.delenv("TRITRED_TRACE", raising=False)
    reg = Registry(autoload=False)
    previous = set_registry(reg)
    try:
        yield reg
    finally:
        set_registry(previous)


class Toys:
    """The helpers above, handed to tests as a fixture (``--import-mode=importlib`` cannot import conftest)."""

    make_reduction = staticmethod(make_reduction)
    toy_problem = staticmethod(toy_problem)
    ReductionsPlugin = ReductionsPlugin
    BuiltinHeuristic = BuiltinHeuristic
    ConfigPlugin = ConfigPlugin


@pytest.fixture
def toys() -> type[Toys]:
    return Toys
