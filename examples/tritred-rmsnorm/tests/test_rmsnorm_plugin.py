"""The plugin as tritred sees it: registered by name, its heuristic wins for rms_norm and only for rms_norm."""

from __future__ import annotations

import importlib

import pytest
import torch
import tritred_core
import tritred_rmsnorm
import tritred_rmsnorm.plugin as plugin
from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER, assert_valid_launch_configs


def test_found_by_name(registry: tritred_core.Registry) -> None:
    rec = registry.get("rms_norm")
    assert rec.spec.plugin == "tritred_rmsnorm"
    assert rec.spec.version == tritred_rmsnorm.__version__
    assert rec.spec.mirrors == "torch.nn.functional.rms_norm"
    assert rec.impl is tritred_rmsnorm.rms_norm
    assert rec.reference is torch.nn.functional.rms_norm
    info = {p.name: p for p in registry.plugins()}["tritred_rmsnorm"]
    assert info.error is None
    assert info.hooks == ("tritred_launch_config", "tritred_register_reductions")


def test_coexists_with_the_builtins(registry: tritred_core.Registry) -> None:
    assert {"softmax", "layer_norm", "sum", "rms_norm"} <= set(registry.reductions())
    assert all(p.error is None for p in registry.plugins()), registry.plugins()


@pytest.mark.parametrize("device_info", [FAKE_INTERPRETER, FAKE_H200], ids=["interpreter", "h200"])
def test_plugin_decides_rms_norm_builtins_decide_softmax(registry: tritred_core.Registry,
                                                         device_info: tritred_core.DeviceInfo) -> None:
    rms = registry.get("rms_norm")
    softmax_spec = importlib.import_module("tritred_ops.families.softmax").SPECS["softmax"]
    problem = tritred_core.Problem(op="rms_norm", dtype="float32", M=8, N=1000, K=1, stride_m=1000)
    config = registry.launch_config(rms.spec, problem, device_info)
    assert config.decided_by == "tritred_rmsnorm"
    assert config == plugin.rms_norm_config(problem, device_info).model_copy(update={"decided_by": "tritred_rmsnorm"})
    sm_problem = problem.model_copy(update={"op": "softmax"})
    assert registry.launch_config(softmax_spec, sm_problem, device_info).decided_by == "tritred_ops"
    # The hook itself answers nothing but rms_norm.
    for name in ("softmax", "layer_norm", "sum", "var"):
        spec = tritred_core.ReductionSpec(name=name, family="reduce", mirrors=f"torch.{name}")
        assert plugin.tritred_launch_config(spec=spec, problem=sm_problem, device=device_info) is None


@pytest.mark.parametrize("device_info", [FAKE_INTERPRETER, FAKE_H200], ids=["interpreter", "h200"])
def test_configs_fit_the_problem_grid(registry: tritred_core.Registry, device_info: tritred_core.DeviceInfo) -> None:
    configs = assert_valid_launch_configs(registry, registry.get("rms_norm").spec, device_info)
    assert {c.decided_by for c in configs} == {"tritred_rmsnorm"}
    assert {c.strategy for c in configs} == {"single_pass", "multi_pass"}


def test_record_callables(registry: tritred_core.Registry, device: str) -> None:
    """make_inputs / problem / byte_count / impl / reference agree with one another (what the CLI relies on)."""
    rec = registry.get("rms_norm")
    args, kwargs = rec.make_inputs((8, 1000), torch.float32, device, -1, 0)
    problem = rec.problem(*args, **kwargs)
    assert (problem.op, problem.dtype, problem.M, problem.N, problem.K) == ("rms_norm", "float32", 8, 1000, 1)
    assert rec.byte_count is not None and rec.byte_count(*args, **kwargs) == (2 * 8 * 1000 + 1000) * 4
    torch.testing.assert_close(rec.impl(*args, **kwargs).cpu(),
                               rec.reference(*(a.cpu() if isinstance(a, torch.Tensor) else a for a in args), **kwargs))
    meta_args, meta_kwargs = rec.make_inputs((2, 3, 40), torch.float16, "meta", -2, 0)  # tritred explain: no data
    assert meta_args[0].device.type == "meta" and meta_args[1] == [3, 40]
    assert rec.problem(*meta_args, **meta_kwargs).N == 120


def test_duplicate_name_is_refused(registry: tritred_core.Registry) -> None:
    class Copycat:
        @tritred_core.hookimpl
        def tritred_register_reductions(self) -> list[tritred_core.Reduction]:
            return [plugin.reduction()]

    registry.register(Copycat(), name="copycat")
    with pytest.raises(tritred_core.DuplicateReductionError, match="rms_norm") as err:
        registry.reductions()
    assert "'tritred_rmsnorm'" in str(err.value) and "'copycat'" in str(err.value)


def test_entry_point_declared() -> None:
    """pyproject.toml declares the entry point tritred loads (checked on the installed metadata when installed)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        eps = distribution("tritred-rmsnorm").entry_points
    except PackageNotFoundError:
        from pathlib import Path

        tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

        data = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
        assert data["project"]["entry-points"]["tritred"] == {"tritred_rmsnorm": "tritred_rmsnorm.plugin"}
        return
    assert [(ep.group, ep.name, ep.value) for ep in eps if ep.group == "tritred"] == [
        ("tritred", "tritred_rmsnorm", "tritred_rmsnorm.plugin")
    ]


def test_conformance_kit(registry: tritred_core.Registry, device: str) -> None:
    """tritred's conformance kit (what ``tritred check`` runs): every dtype x shape x case against torch."""
    kit = pytest.importorskip("tritred_ops.testing")
    if not hasattr(kit, "assert_conforms"):
        pytest.skip("tritred_ops.testing has no assert_conforms")
    # Rows in one pass, two normalized dims (dim=1: [5, 129]), and a row long enough for the multi-pass branch.
    shapes = [((7, 33), -1), ((3, 5, 129), 1), ((2, 3000), -1)]
    results = kit.assert_conforms(registry.get("rms_norm"), device=device, shapes=shapes, seed=0)
    assert results and not any(r.skipped for r in results)
