"""tritred_ops registers through the entry point like any plugin; records and heuristics are complete."""

from __future__ import annotations

import pytest
import torch
from tritred_core import get_registry
from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER, assert_valid_launch_configs, problem_grid

BUILTINS = {"sum", "mean", "prod", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "softmax",
            "log_softmax", "logsumexp", "layer_norm", "batch_norm", "rms_norm"}


def test_every_builtin_registered_by_tritred_ops():
    reds = get_registry().reductions()
    assert BUILTINS <= set(reds)
    for name in BUILTINS:
        assert reds[name].spec.plugin == "tritred_ops", name
        assert reds[name].spec.version == "0.1.0"


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_record_problem_and_bytes_on_meta(name):
    rec = get_registry().get(name)
    shape = (4, 6, 10) if name != "batch_norm" else (4, 6, 5, 5)
    args, kwargs = rec.make_inputs(shape, torch.float32, device="meta", dim=-1 if name != "batch_norm" else None)
    problem = rec.problem(*args, **kwargs)
    assert problem.op == name and problem.numel == (240 if name != "batch_norm" else 600)
    assert rec.byte_count(*args, **kwargs) > args[0].numel() * 4  # the input read once, and an output written


@pytest.mark.parametrize("device", [FAKE_H200, FAKE_INTERPRETER], ids=["h200", "interpreter"])
@pytest.mark.parametrize("name", sorted(BUILTINS - {"batch_norm"}))
def test_builtin_heuristic_answers_the_grid(name, device):
    reg = get_registry()
    configs = assert_valid_launch_configs(reg, reg.get(name).spec, device, problem_grid(name, "bfloat16"))
    assert {c.decided_by for c in configs} == {"tritred_ops"}
    strategies = {c.strategy for c in configs}
    assert "single_pass" in strategies and "multi_pass" in strategies
    if reg.get(name).spec.family in ("reduce", "statistics"):
        assert "split" in strategies  # few outputs with long rows split N


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var", "std_mean"])
def test_record_problem_is_the_first_launch_of_a_staged_call(name, monkeypatch, device):
    """`tritred explain` and `tune` read Reduction.problem: for reduced dims that go in stages it must be the
    first decision the call makes (the stage over the whole input), not a gathered problem the call never runs."""
    import tritred_ops.runtime as C
    from tritred_ops.runtime.caches import caches

    x = torch.randn(4, 6, 5, 7, device=device)
    problem = get_registry().get(name).problem(x, (0, 2, 3))
    seen = []
    real = C.decide

    def spy(spec, t, view, layout="strided", make_problem=None):  # noqa: ANN001, ANN202
        seen.append(C.problem_of(spec.name, t, view, layout))
        return real(spec, t, view, layout, make_problem)

    monkeypatch.setattr(C, "decide", spy)
    caches().clear()
    getattr(__import__("tritred_ops"), name)(x, (0, 2, 3))
    assert len(seen) == (1 if name in ("var", "std_mean") else 2) and seen[0] == problem
    if name in ("var", "std_mean"):  # one decision: the inner rows (per image, per channel: M=4 x K=6 rows of 35)
        assert (problem.M, problem.N, problem.K, problem.layout) == (4, 35, 6, "strided")
    else:
        assert (problem.M, problem.N, problem.K, problem.layout) == (24, 35, 1, "strided")


def test_launch_config_hooks_get_the_stamped_spec(device):
    """docs/plugins.md: the registry stamps each spec with its plugin and version; a launch-config hook sees that
    stamped spec, not the unstamped one the ops module defines."""
    from tritred_core import hookimpl

    seen = []

    class Spy:
        @hookimpl
        def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001, ANN202
            seen.append((spec.name, spec.plugin))

    reg = get_registry()
    name = reg.register(Spy(), name="test-spy-stamped-spec")
    try:
        import tritred_ops as tr

        tr.softmax(torch.randn(3, 5, device=device), -1)
        tr.var(torch.randn(4, 6, device=device), 0)
    finally:
        reg.unregister(name)
    assert ("softmax", "tritred_ops") in seen and ("var", "tritred_ops") in seen, seen


def test_every_built_in_decision_names_its_rules() -> None:
    """Every config the built-in rules give names the rules that produced it (``LaunchConfig.rule``), each an
    importable function with a docstring, for ``tritred explain`` to print, and gives reasons for its knobs
    (``LaunchConfig.why``) that name the config's own values: over the public, training and off-suite cases on an
    H200 and under the interpreter, forward and backward."""
    import importlib

    from tritred_bench.inputs import build_inputs
    from tritred_bench.suites import load_suite
    from tritred_core import get_registry
    from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER

    reg = get_registry()
    seen = set()
    explained = decided = 0
    for case in load_suite("h200")[0] + load_suite("training")[0] + load_suite("offsuite")[0]:
        rec = reg.get(case.op)
        args, kwargs = build_inputs(rec, case, "meta")
        problem = rec.problem(*args, **kwargs)
        for device in (FAKE_H200, FAKE_INTERPRETER):
            for direction in ("forward", "backward"):
                p = problem.model_copy(update={"direction": direction})
                config = reg.launch_config(rec.spec, p, device)
                assert config.rule, (case.label, direction)
                for name in config.rule.split(" > "):
                    module, _, function = name.partition(":")
                    assert importlib.import_module(module).__dict__[function].__doc__, name
                    seen.add(name)
                _check_why(config, f"{case.label} {direction} {device.name}")
                explained += bool(config.why)
                decided += 1
    assert len(seen) >= 12  # (the shared builders and the families' own rules)
    assert explained == decided, (explained, decided)  # (every rule that builds a config gives its knobs' reasons)


def _check_why(config, where: str) -> None:
    """Each reason in ``config.why`` opens with the knobs it explains, as ``KNOB=value`` (or the strategy's name),
    and those are the config's values: a reason cannot outlive an outer rule that changed its knob."""
    for reason in config.why.split("; ") if config.why else ():
        head, sep, text = reason.partition(": ")
        assert sep and text, (where, reason)
        for part in head.split(", "):
            knob, eq, value = part.partition("=")
            if eq:
                assert str(getattr(config, knob)) == value, (where, reason, config)
            else:
                assert part == config.strategy, (where, reason, config)
