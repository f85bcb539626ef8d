"""tritred_core.testing: the torch-free conformance helpers a plugin author runs on its heuristic."""

from __future__ import annotations

from typing import Any

import pytest
from tritred_core import DeviceInfo, LaunchConfig, Problem, ReductionSpec, Registry, hookimpl
from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER, assert_valid_launch_configs, problem_grid


class ToyHeuristic:
    """A plugin author's heuristic: rows in registers up to 8192, a loop beyond, split for few long rows."""

    @hookimpl
    def tritred_launch_config(self, spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
        if spec.name != "toy_norm":
            return None
        cap = 8192 if device.backend == "cuda" else 256
        if problem.N <= cap:
            return LaunchConfig(strategy="single_pass", BLOCK_N=max(1, 1 << (problem.N - 1).bit_length()))
        if problem.outputs < 8:  # few long rows: split N across programs
            return LaunchConfig(strategy="split", BLOCK_N=1024, split=4)
        return LaunchConfig(strategy="multi_pass", BLOCK_N=1024)


@pytest.fixture
def toy_registry(registry: Registry, toys: Any) -> Registry:
    registry.register(toys.ReductionsPlugin(toys.make_reduction("toy_norm", family="normalize")), name="toy_plugin")
    registry.register(ToyHeuristic(), name="toy_heuristic")
    return registry


def test_problem_grid_covers_layouts_and_sizes() -> None:
    grid = list(problem_grid("sum"))
    assert all(p.op == "sum" and p.dtype == "float32" for p in grid)
    assert {p.K for p in grid} == {1, 33}
    assert any(p.inner for p in grid) and any(not p.inner for p in grid)
    assert min(p.N for p in grid) == 1 and max(p.N for p in grid) == 1 << 20
    assert min(p.outputs for p in grid) == 1
    assert {p.dtype for p in problem_grid("sum", dtype="bfloat16")} == {"bfloat16"}
    assert len(set(grid)) == len(grid)  # hashable and distinct


@pytest.mark.parametrize("device", [FAKE_H200, FAKE_INTERPRETER], ids=["h200", "interpreter"])
def test_assert_valid_launch_configs_with_toy_heuristic(toy_registry: Registry, device: DeviceInfo) -> None:
    spec = toy_registry.get("toy_norm").spec
    configs = assert_valid_launch_configs(toy_registry, spec, device)
    assert len(configs) == len(list(problem_grid("toy_norm")))
    assert {c.decided_by for c in configs} == {"toy_heuristic"}
    assert {c.strategy for c in configs} == {"single_pass", "multi_pass", "split"}


def test_assert_valid_launch_configs_custom_problems(toy_registry: Registry) -> None:
    spec = toy_registry.get("toy_norm").spec
    problems = [Problem(op="toy_norm", dtype="float16", M=2, N=n, K=1) for n in (1, 2, 3, 100)]
    configs = assert_valid_launch_configs(toy_registry, spec, FAKE_H200, iter(problems))
    assert [c.BLOCK_N for c in configs] == [1, 2, 4, 128]


def test_assert_valid_launch_configs_catches_a_bad_heuristic(registry: Registry, toys: Any) -> None:
    class OffByOne:
        @hookimpl
        def tritred_launch_config(self, spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig:
            # forgets that N=1000 needs BLOCK_N=1024
            return LaunchConfig(strategy="single_pass", BLOCK_N=max(1, 1 << (problem.N.bit_length() - 1)))

    registry.register(OffByOne(), name="off_by_one")
    spec = toys.make_reduction("toy_norm").spec
    with pytest.raises(ValueError, match="off_by_one"):  # (the registry's own check names the plugin)
        assert_valid_launch_configs(registry, spec, FAKE_H200)


def test_assert_valid_launch_configs_checks_each_answer_itself(toys: Any) -> None:
    """The helper's own checks, behind a registry that validates nothing: a config that does not fit its problem,
    then one whose deciding plugin is not recorded."""
    class Unchecked:
        def __init__(self, config: LaunchConfig) -> None:
            self.config = config

        def launch_config(self, spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig:
            return self.config

    spec = toys.make_reduction("toy_norm").spec
    problems = [Problem(op="toy_norm", dtype="float32", M=2, N=1000, K=1)]
    too_short = LaunchConfig(strategy="single_pass", BLOCK_N=512, decided_by="stub")
    with pytest.raises(ValueError, match="single_pass needs BLOCK_N \\+ BLOCK_TAIL >= N"):
        assert_valid_launch_configs(Unchecked(too_short), spec, FAKE_H200, iter(problems))  # type: ignore[arg-type]
    anonymous = LaunchConfig(strategy="single_pass", BLOCK_N=1024)
    with pytest.raises(AssertionError, match="decided_by not recorded"):
        assert_valid_launch_configs(Unchecked(anonymous), spec, FAKE_H200, iter(problems))  # type: ignore[arg-type]


def test_assert_valid_launch_configs_needs_an_answer(registry: Registry, toys: Any) -> None:
    spec = toys.make_reduction("unknown_to_everyone").spec
    with pytest.raises(Exception, match="no plugin returned a launch config"):
        assert_valid_launch_configs(registry, spec, FAKE_INTERPRETER)


def test_fake_devices() -> None:
    assert FAKE_H200.backend == "cuda" and FAKE_H200.sm_count == 132 and FAKE_H200.compute_capability == (9, 0)
    assert FAKE_INTERPRETER.backend == "interpreter"
