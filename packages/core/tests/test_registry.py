"""The Registry: plugin registration, duplicate names, broken plugins, firstresult launch configs, autoload."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
import tritred_core.registry as registry_mod
from tritred_core import (
    DeviceInfo,
    DuplicateReductionError,
    InvalidLaunchConfigError,
    LaunchConfig,
    PluginInfo,
    Problem,
    Reduction,
    ReductionSpec,
    Registry,
    RegistryError,
    UnknownReductionError,
    get_registry,
    hookimpl,
    set_registry,
)
from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER

# -- registering plugins ----------------------------------------------------------------------------------------


def test_fresh_registry_has_only_core(registry: Registry) -> None:
    assert registry.reductions() == {}
    infos = registry.plugins()
    assert [i.name for i in infos] == ["tritred_core"]
    assert infos[0].hooks == ()  # (the winning config is validated by Registry.launch_config, not by a hook)
    assert infos[0].error is None


def test_register_plugin_object(registry: Registry, toys: Any) -> None:
    name = registry.register(toys.ReductionsPlugin(toys.make_reduction("toy_sum")), name="toys", version="1.2")
    assert name == "toys"
    reds = registry.reductions()
    assert list(reds) == ["toy_sum"]
    spec = reds["toy_sum"].spec
    assert spec.plugin == "toys"  # stamped by the registry
    assert spec.version == "1.2"
    assert registry.get("toy_sum") is reds["toy_sum"]
    info = {i.name: i for i in registry.plugins()}["toys"]
    assert info == PluginInfo(name="toys", version="1.2", hooks=("tritred_register_reductions",), error=None)


def test_register_module_object(registry: Registry, toys: Any) -> None:
    mod = types.ModuleType("tritred_toy_plugin")

    @hookimpl
    def tritred_register_reductions() -> list[Reduction]:
        return [toys.make_reduction("toy_b"), toys.make_reduction("toy_a", family="statistics")]

    @hookimpl
    def tritred_launch_config(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig:
        return LaunchConfig(strategy="multi_pass", BLOCK_N=128)

    mod.tritred_register_reductions = tritred_register_reductions  # type: ignore[attr-defined]
    mod.tritred_launch_config = tritred_launch_config  # type: ignore[attr-defined]
    name = registry.register(mod)
    assert name  # pluggy names an unnamed plugin itself
    assert list(registry.reductions()) == ["toy_a", "toy_b"]  # sorted by name
    assert registry.reductions()["toy_a"].spec.plugin == name
    cfg = registry.launch_config(registry.get("toy_a").spec, toys.toy_problem(), FAKE_H200)
    assert cfg.decided_by == name
    hooks = {i.name: i.hooks for i in registry.plugins()}[name]
    assert hooks == ("tritred_launch_config", "tritred_register_reductions")


def test_register_class_object_with_static_hookimpls(registry: Registry, toys: Any) -> None:
    class ClassPlugin:
        # marker on the function (staticmethod outermost): older pluggy releases only see it there
        @staticmethod
        @hookimpl
        def tritred_register_reductions() -> list[Reduction]:
            return [toys.make_reduction("toy_cls")]

    registry.register(ClassPlugin, name="cls")
    assert registry.get("toy_cls").spec.plugin == "cls"


def test_register_same_name_twice_is_refused(registry: Registry, toys: Any) -> None:
    registry.register(toys.ReductionsPlugin(), name="p")
    with pytest.raises(ValueError):
        registry.register(toys.ReductionsPlugin(), name="p")


def test_blocked_plugin_name(registry: Registry, toys: Any) -> None:
    registry.pm.set_blocked("nope")
    with pytest.raises(RegistryError, match="blocked"):
        registry.register(toys.ReductionsPlugin(), name="nope")


def test_unregister_invalidates(registry: Registry, toys: Any) -> None:
    registry.register(toys.ReductionsPlugin(toys.make_reduction("toy_sum")), name="toys")
    assert "toy_sum" in registry.reductions()
    held = registry.state("ops", dict)
    held["k"] = "v"
    registry.unregister("toys")
    assert registry.reductions() == {}
    assert registry.state("ops", dict) == {} and registry.state("ops", dict) is not held
    assert "toys" not in {i.name for i in registry.plugins()}


def test_register_invalidates_reductions_and_state(registry: Registry, toys: Any) -> None:
    registry.register(toys.ReductionsPlugin(toys.make_reduction("toy_a")), name="a")
    assert list(registry.reductions()) == ["toy_a"]
    registry.state("ops", dict)["key"] = "cached"
    registry.register(toys.ReductionsPlugin(toys.make_reduction("toy_b")), name="b")
    assert registry.state("ops", dict) == {}
    assert list(registry.reductions()) == ["toy_a", "toy_b"]


def test_state_is_made_once_per_owner(registry: Registry) -> None:
    """state(owner, factory): the factory runs on first use only; each owner has its own object."""
    made: list[int] = []

    def factory() -> list[int]:
        made.append(1)
        return []

    first = registry.state("a", factory)
    assert registry.state("a", factory) is first and made == [1]
    assert registry.state("b", factory) is not first and made == [1, 1]


def test_unknown_reduction_lists_known(registry: Registry, toys: Any) -> None:
    with pytest.raises(UnknownReductionError, match="unknown reduction 'nope'; registered: none"):
        registry.get("nope")
    registry.register(toys.ReductionsPlugin(toys.make_reduction("toy_a"), toys.make_reduction("toy_b")), name="t")
    with pytest.raises(UnknownReductionError) as info:
        registry.get("nope")
    assert str(info.value) == "unknown reduction 'nope'; registered: toy_a, toy_b"
    assert isinstance(info.value, KeyError)  # also catchable as a KeyError


# -- duplicates and broken plugins ------------------------------------------------------------------------------


def test_duplicate_reduction_names_both_plugins(registry: Registry, toys: Any) -> None:
    registry.register(toys.ReductionsPlugin(toys.make_reduction("softmax", family="softmax")), name="first_plugin")
    registry.register(toys.ReductionsPlugin(toys.make_reduction("softmax", family="softmax")), name="second_plugin")
    with pytest.raises(DuplicateReductionError) as info:
        registry.reductions()
    msg = str(info.value)
    assert "'softmax'" in msg
    assert "first_plugin" in msg and "second_plugin" in msg
    with pytest.raises(DuplicateReductionError):  # raised again, not silently cached
        registry.get("softmax")
    # non-strict: one of the two is kept (for listing plugins)
    assert registry.reductions(strict=False)["softmax"].spec.plugin in ("first_plugin", "second_plugin")


def test_duplicates_still_raise_after_plugins_listing(registry: Registry, toys: Any) -> None:
    """plugins() lists with strict=False; that must not make a later strict lookup forget the duplicate."""
    registry.register(toys.ReductionsPlugin(toys.make_reduction("dup")), name="one")
    registry.register(toys.ReductionsPlugin(toys.make_reduction("dup")), name="two")
    assert {"one", "two"} <= {i.name for i in registry.plugins()}
    with pytest.raises(DuplicateReductionError, match=r"one.*two|two.*one"):
        registry.reductions()


def test_broken_register_hook_is_reported_others_load(registry: Registry, toys: Any,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        @hookimpl
        def tritred_register_reductions(self) -> list[Reduction]:
            raise RuntimeError("kaboom")

    class WrongType:
        @hookimpl
        def tritred_register_reductions(self) -> list[Any]:
            return ["not a Reduction"]

    registry.register(toys.ReductionsPlugin(toys.make_reduction("good_a")), name="good_a")
    registry.register(Broken(), name="broken", version="0.0.1")
    registry.register(WrongType(), name="wrong_type")
    registry.register(toys.ReductionsPlugin(toys.make_reduction("good_b")), name="good_b")
    with caplog.at_level(logging.WARNING, logger="tritred"):
        assert list(registry.reductions()) == ["good_a", "good_b"]
    assert "broken" in caplog.text and "kaboom" in caplog.text
    infos = {i.name: i for i in registry.plugins()}
    assert infos["broken"].error == "RuntimeError: kaboom"
    assert infos["broken"].version == "0.0.1"
    assert infos["broken"].hooks == ("tritred_register_reductions",)
    assert infos["wrong_type"].error is not None and "expected tritred_core.Reduction" in infos["wrong_type"].error
    assert infos["good_a"].error is None and infos["good_b"].error is None


def test_register_hook_returning_none_is_fine(registry: Registry) -> None:
    class Nothing:
        @hookimpl
        def tritred_register_reductions(self) -> None:
            return None

    registry.register(Nothing(), name="nothing")
    assert registry.reductions() == {}
    assert {i.name: i.error for i in registry.plugins()}["nothing"] is None


# -- launch configs: firstresult, trylast built-ins, decided_by, validation --------------------------------------


@pytest.fixture
def spec(toys: Any) -> ReductionSpec:
    return toys.make_reduction("toy").spec  # type: ignore[no-any-return]


def test_builtin_answers_when_alone(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    cfg = registry.launch_config(spec, toys.toy_problem(N=1000), FAKE_INTERPRETER)
    assert cfg == LaunchConfig(strategy="single_pass", BLOCK_N=1024, decided_by="builtin")


def test_plugin_beats_trylast_builtin(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    # registered *before* the built-in: trylast, not registration order, decides who is asked first
    plugin = toys.ConfigPlugin(lambda s, p, d: LaunchConfig(strategy="multi_pass", BLOCK_N=256, num_warps=8))
    registry.register(plugin, name="my_plugin")
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    cfg = registry.launch_config(spec, toys.toy_problem(), FAKE_H200)
    assert cfg.strategy == "multi_pass" and cfg.BLOCK_N == 256 and cfg.num_warps == 8
    assert cfg.decided_by == "my_plugin"
    assert plugin.calls == 1


def test_plugin_returning_none_falls_through(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    only_huge = toys.ConfigPlugin(
        lambda s, p, d: LaunchConfig(strategy="split", BLOCK_N=4096, split=16) if p.N >= 1 << 20 else None)
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    registry.register(only_huge, name="only_huge")
    small = registry.launch_config(spec, toys.toy_problem(N=100), FAKE_H200)
    assert small.decided_by == "builtin" and small.strategy == "single_pass"
    huge = registry.launch_config(spec, toys.toy_problem(N=1 << 21), FAKE_H200)
    assert huge.decided_by == "only_huge" and huge.strategy == "split" and huge.split == 16
    assert only_huge.calls == 2


def test_plugin_can_dispatch_on_spec_and_device(registry: Registry, toys: Any) -> None:
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    registry.register(toys.ConfigPlugin(
        lambda s, p, d: LaunchConfig(strategy="multi_pass", BLOCK_N=64)
        if s.name == "softmax" and d.backend == "cuda" else None), name="softmax_on_gpu")
    softmax = toys.make_reduction("softmax", family="softmax").spec
    other = toys.make_reduction("other").spec
    assert registry.launch_config(softmax, toys.toy_problem(), FAKE_H200).decided_by == "softmax_on_gpu"
    assert registry.launch_config(softmax, toys.toy_problem(), FAKE_INTERPRETER).decided_by == "builtin"
    assert registry.launch_config(other, toys.toy_problem(), FAKE_H200).decided_by == "builtin"


def test_explicit_decided_by_is_kept(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    registry.register(toys.ConfigPlugin(
        lambda s, p, d: LaunchConfig(strategy="multi_pass", decided_by="tuning-cache", tuned=True)), name="tuner")
    cfg = registry.launch_config(spec, toys.toy_problem(), FAKE_H200)
    assert cfg.decided_by == "tuning-cache" and cfg.tuned


def test_invalid_config_names_the_plugin(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    registry.register(toys.ConfigPlugin(lambda s, p, d: LaunchConfig(strategy="single_pass", BLOCK_N=256)),
                      name="sloppy_plugin")
    with pytest.raises(InvalidLaunchConfigError, match="sloppy_plugin") as info:
        registry.launch_config(spec, toys.toy_problem(N=1000), FAKE_H200)
    assert "BLOCK_N + BLOCK_TAIL >= N" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RegistryError)
    # the same plugin's config is fine where it fits
    assert registry.launch_config(spec, toys.toy_problem(N=200), FAKE_H200).decided_by == "sloppy_plugin"


def test_config_the_spec_does_not_declare_names_the_plugin(registry: Registry, toys: Any) -> None:
    """A strategy or a knob the reduction's spec does not declare is refused (InvalidLaunchConfigError, a
    ValueError), naming the field and the plugin; the same config passes for a spec that declares it."""
    narrow = toys.make_reduction("narrow", strategies=("single_pass", "multi_pass"), knobs=("BLOCK_TAIL",)).spec
    registry.register(toys.ConfigPlugin(lambda s, p, d: LaunchConfig(strategy="multi_pass", num_programs=8)),
                      name="persistent_plugin")
    with pytest.raises(InvalidLaunchConfigError, match=r"persistent_plugin.*narrow: num_programs=8 \(config from "
                                                       r"persistent_plugin\)") as info:
        registry.launch_config(narrow, toys.toy_problem(), FAKE_H200)
    assert isinstance(info.value, ValueError)
    assert registry.launch_config(toys.make_reduction("wide").spec, toys.toy_problem(), FAKE_H200).num_programs == 8
    registry.unregister("persistent_plugin")
    registry.register(toys.ConfigPlugin(lambda s, p, d: LaunchConfig(strategy="split", split=4)), name="split_plugin")
    with pytest.raises(InvalidLaunchConfigError, match="split_plugin.*strategy 'split'"):
        registry.launch_config(narrow, toys.toy_problem(), FAKE_H200)


def test_config_failing_model_validation_names_the_plugin(registry: Registry, toys: Any,
                                                          spec: ReductionSpec) -> None:
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    registry.register(toys.ConfigPlugin(lambda s, p, d: LaunchConfig(strategy="multi_pass", BLOCK_N=1000)),
                      name="not_pow2_plugin")
    with pytest.raises(InvalidLaunchConfigError, match="not_pow2_plugin") as info:
        registry.launch_config(spec, toys.toy_problem(), FAKE_H200)
    assert "power of two" in str(info.value)


def test_config_that_skipped_validation_is_validated(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    """A config whose fields were changed past the validators (``model_copy(update=...)``: a tail tile beside
    threads_per_row, which the kernels cannot combine) is rejected, naming the plugin."""
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    bypass = LaunchConfig(strategy="single_pass", BLOCK_N=64, BLOCK_TAIL=16).model_copy(update={"threads_per_row": 8})
    registry.register(toys.ConfigPlugin(lambda s, p, d: bypass), name="bypass_plugin")
    with pytest.raises(InvalidLaunchConfigError, match="(?s)bypass_plugin.*threads_per_row and BLOCK_TAIL"):
        registry.launch_config(spec, toys.toy_problem(N=70), FAKE_H200)


def test_wrong_return_type_is_rejected(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    registry.register(toys.ConfigPlugin(lambda s, p, d: {"strategy": "multi_pass"}), name="dict_plugin")
    with pytest.raises(InvalidLaunchConfigError, match=r"'dict_plugin' returned dict instead of a LaunchConfig"):
        registry.launch_config(spec, toys.toy_problem(), FAKE_H200)


def test_no_config_at_all(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    with pytest.raises(InvalidLaunchConfigError, match="no plugin returned a launch config for toy"):
        registry.launch_config(spec, toys.toy_problem(), FAKE_H200)
    registry.register(toys.ConfigPlugin(lambda s, p, d: None), name="shy")
    with pytest.raises(InvalidLaunchConfigError, match="no plugin returned"):
        registry.launch_config(spec, toys.toy_problem(), FAKE_H200)


def test_plugin_exception_propagates(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    def boom(s: Any, p: Any, d: Any) -> None:
        raise ZeroDivisionError("heuristic bug")

    registry.register(toys.BuiltinHeuristic(), name="builtin")
    registry.register(toys.ConfigPlugin(boom), name="buggy")
    with pytest.raises(ZeroDivisionError, match="heuristic bug") as info:
        registry.launch_config(spec, toys.toy_problem(), FAKE_H200)
    if hasattr(info.value, "add_note"):  # (Python 3.11+: the plugin is named in a note)
        assert info.value.__notes__ == ["raised by plugin 'buggy''s tritred_launch_config for toy"]


@pytest.mark.parametrize("tryfirst", [False, True])
def test_a_wrapper_of_the_hook_cannot_bypass_validation(registry: Registry, toys: Any, spec: ReductionSpec,
                                                        tryfirst: bool) -> None:
    """A plugin's hook wrapper runs outside the others (pluggy: later registered, further out): the config it
    hands back is validated after the hook returns, and a float field it set is read as the int it means."""
    class Wrap:
        def __init__(self, update: dict[str, Any]) -> None:
            self.update = update

        @hookimpl(wrapper=True, tryfirst=tryfirst)
        def tritred_launch_config(self, spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> Any:
            config = yield
            return config.model_copy(update=self.update)

    registry.register(toys.BuiltinHeuristic(), name="builtin")
    base = registry.launch_config(spec, toys.toy_problem(N=300), FAKE_H200)
    name = registry.register(Wrap({"strategy": "single_pass", "BLOCK_N": 16}), name="wrap")
    with pytest.raises(InvalidLaunchConfigError, match="(?s)or a wrapper of the launch-config hook.*BLOCK_N"):
        registry.launch_config(spec, toys.toy_problem(N=300), FAKE_H200)
    registry.unregister(name)
    registry.register(Wrap({"BLOCK_N": float(base.BLOCK_N)}), name="wrap")
    got = registry.launch_config(spec, toys.toy_problem(N=300), FAKE_H200)
    assert got.BLOCK_N == base.BLOCK_N and type(got.BLOCK_N) is int


def test_tryfirst_plugin_beats_plain_plugin(registry: Registry, toys: Any, spec: ReductionSpec) -> None:
    class First:
        @hookimpl(tryfirst=True)
        def tritred_launch_config(self, spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig:
            return LaunchConfig(strategy="multi_pass", BLOCK_N=32)

    registry.register(First(), name="first")
    registry.register(toys.ConfigPlugin(lambda s, p, d: LaunchConfig(strategy="multi_pass")), name="plain")
    registry.register(toys.BuiltinHeuristic(), name="builtin")
    assert registry.launch_config(spec, toys.toy_problem(), FAKE_H200).decided_by == "first"


# -- entry points: autoload switch, broken entry points ----------------------------------------------------------


class FakeDist:
    name = "fake-dist"
    version = "9.9.9"


class FakeEntryPoint:
    def __init__(self, name: str, load: Any, value: str | None = None) -> None:
        self.name = name
        self.value = value or f"{name}.plugin"
        self.dist = FakeDist()
        self._load = load
        self.loads = 0

    def load(self) -> Any:
        self.loads += 1
        return self._load()


def _fake_entry_points(monkeypatch: pytest.MonkeyPatch, *eps: FakeEntryPoint) -> list[str]:
    groups: list[str] = []

    def entry_points(*, group: str) -> list[FakeEntryPoint]:
        groups.append(group)
        return list(eps)

    monkeypatch.setattr(registry_mod, "entry_points", entry_points)
    return groups


def test_disable_autoload_env(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_be_called(**kwargs: Any) -> Any:
        raise AssertionError("entry points were loaded although autoload is disabled")

    monkeypatch.setattr(registry_mod, "entry_points", must_not_be_called)
    monkeypatch.setenv("TRITRED_DISABLE_PLUGIN_AUTOLOAD", "1")
    reg = Registry()
    assert reg.reductions() == {}
    assert [i.name for i in reg.plugins()] == ["tritred_core"]


@pytest.mark.parametrize("value", ["", "0"])
def test_autoload_on_by_default(monkeypatch: pytest.MonkeyPatch, toys: Any, value: str) -> None:
    monkeypatch.setenv("TRITRED_DISABLE_PLUGIN_AUTOLOAD", value)
    ep = FakeEntryPoint("fake_plugin", lambda: toys.ReductionsPlugin(toys.make_reduction("toy_ep")))
    groups = _fake_entry_points(monkeypatch, ep)
    reg = Registry()
    assert groups == []  # lazy: nothing at construction
    assert reg.get("toy_ep").spec.plugin == "fake_plugin"
    assert reg.get("toy_ep").spec.version == "9.9.9"
    assert groups == ["tritred"]
    reg.reductions()
    reg.plugins()
    assert ep.loads == 1 and groups == ["tritred"]  # loaded once


def test_explicit_autoload_false_wins_over_env(monkeypatch: pytest.MonkeyPatch, toys: Any) -> None:
    monkeypatch.delenv("TRITRED_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    groups = _fake_entry_points(monkeypatch, FakeEntryPoint("x", lambda: toys.ReductionsPlugin()))
    Registry(autoload=False).plugins()
    assert groups == []
    Registry(autoload=True).plugins()
    assert groups == ["tritred"]


def test_broken_entry_point_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch, toys: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Any:
        raise ImportError("No module named 'tritred_missing_dep'")

    good = FakeEntryPoint("good_plugin", lambda: toys.ReductionsPlugin(toys.make_reduction("toy_good")))
    bad = FakeEntryPoint("bad_plugin", broken)
    _fake_entry_points(monkeypatch, bad, good)
    reg = Registry(autoload=True)
    with caplog.at_level(logging.WARNING, logger="tritred"):
        assert list(reg.reductions()) == ["toy_good"]
    assert "bad_plugin" in caplog.text
    infos = {i.name: i for i in reg.plugins()}
    assert infos["bad_plugin"].error == "ImportError: No module named 'tritred_missing_dep'"
    assert infos["bad_plugin"].version == "9.9.9"
    assert infos["bad_plugin"].hooks == ()
    assert infos["good_plugin"].error is None
    reg.load_entrypoints()
    assert bad.loads == 1  # not retried


def test_entry_point_with_bad_signature_is_reported(monkeypatch: pytest.MonkeyPatch, toys: Any) -> None:
    class BadSignature:
        @hookimpl
        def tritred_launch_config(self, spec: Any, problem: Any, device: Any, extra: Any) -> None: ...

    good = FakeEntryPoint("good_plugin", lambda: toys.ReductionsPlugin(toys.make_reduction("toy_good")))
    _fake_entry_points(monkeypatch, FakeEntryPoint("bad_sig", lambda: BadSignature()), good)
    reg = Registry(autoload=True)
    assert list(reg.reductions()) == ["toy_good"]
    infos = {i.name: i for i in reg.plugins()}
    assert infos["bad_sig"].error is not None and "extra" in infos["bad_sig"].error


# -- tracing and the process-wide registry ------------------------------------------------------------------------


def test_trace_env_prints_hook_calls(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                     toys: Any) -> None:
    monkeypatch.setenv("TRITRED_TRACE", "1")
    reg = Registry(autoload=False)
    reg.register(toys.BuiltinHeuristic(), name="builtin")
    reg.launch_config(toys.make_reduction("toy").spec, toys.toy_problem(), FAKE_H200)
    err = capsys.readouterr().err
    assert "tritred_launch_config" in err


def test_get_and_set_registry(registry: Registry) -> None:
    assert get_registry() is registry  # the fixture installed it
    other = Registry(autoload=False)
    assert set_registry(other) is registry
    assert get_registry() is other
    assert set_registry(registry) is other


def test_get_registry_creates_one_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITRED_DISABLE_PLUGIN_AUTOLOAD", "1")
    previous = set_registry(None)
    try:
        reg = get_registry()
        assert isinstance(reg, Registry)
        assert get_registry() is reg
        assert reg.reductions() == {}
    finally:
        set_registry(previous)


def test_an_entry_point_name_taken_by_another_distribution(monkeypatch: pytest.MonkeyPatch, toys: Any,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Two distributions declare one entry-point name (a third party's ``tritred_ops = "mypkg"`` beside
    tritred's own): the one whose object lives in the module of that name is loaded, whatever the discovery
    order; the other is not loaded, and is logged and listed with the reason."""
    real = FakeEntryPoint("toy_pkg", lambda: toys.ReductionsPlugin(toys.make_reduction("toy_real")), "toy_pkg.plugin")
    shadow = FakeEntryPoint("toy_pkg", lambda: toys.ReductionsPlugin(toys.make_reduction("toy_shadow")),
                            "aaa_shadow:plugin")
    _fake_entry_points(monkeypatch, shadow, real)
    reg = Registry(autoload=True)
    with caplog.at_level(logging.WARNING, logger="tritred"):
        assert list(reg.reductions()) == ["toy_real"]
    assert real.loads == 1 and shadow.loads == 0
    assert "plugin name 'toy_pkg' of fake-dist (aaa_shadow:plugin) is taken by toy_pkg.plugin" in caplog.text
    infos = {i.name: i for i in reg.plugins()}
    assert infos["toy_pkg"].error is None
    assert infos["toy_pkg (fake-dist)"].error == ("entry point 'toy_pkg' = 'aaa_shadow:plugin': the name is taken by "
                                                  "'toy_pkg.plugin'")


def test_a_misspelt_hook_is_refused(registry: Registry, monkeypatch: pytest.MonkeyPatch, toys: Any) -> None:
    """A hookimpl that matches no hookspec would never be called: registering it fails, naming the hook; loaded
    from an entry point, it is a load error."""
    class Typo:
        @hookimpl
        def tritred_launch_configs(self, spec: Any, problem: Any, device: Any) -> None: ...

    with pytest.raises(RegistryError, match="(?s)'typo'.*tritred_launch_configs"):
        registry.register(Typo(), name="typo")
    assert "typo" not in [i.name for i in registry.plugins()]
    _fake_entry_points(monkeypatch, FakeEntryPoint("typo_plugin", lambda: Typo()))
    reg = Registry(autoload=True)
    infos = {i.name: i for i in reg.plugins()}
    assert "tritred_launch_configs" in (infos["typo_plugin"].error or "") and infos["typo_plugin"].hooks == ()
