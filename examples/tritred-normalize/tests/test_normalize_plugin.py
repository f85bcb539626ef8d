"""The plugin as tritred sees it: registered by name; its launch hook decides normalize, overrides the built-in
rule for float64 softmax rows of 16385 to 32768 elements on CUDA, and leaves everything else to the built-ins."""

from __future__ import annotations

import pytest
import torch
import tritred_core
import tritred_normalize
import tritred_normalize.plugin as plugin
from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER, assert_valid_launch_configs, problem_grid

DEVICES = pytest.mark.parametrize("device_info", [FAKE_INTERPRETER, FAKE_H200], ids=["interpreter", "h200"])


def rows(op: str, N: int, dtype: str = "float64", M: int = 64, **update: object) -> tritred_core.Problem:
    return tritred_core.Problem(op=op, dtype=dtype, M=M, N=N, K=1, stride_m=N).model_copy(update=update)


def test_found_by_name(registry: tritred_core.Registry) -> None:
    rec = registry.get("normalize")
    assert rec.spec.plugin == "tritred_normalize"
    assert rec.spec.version == tritred_normalize.__version__
    assert rec.spec.mirrors == "torch.nn.functional.normalize"
    assert rec.impl is tritred_normalize.normalize
    assert rec.reference is torch.nn.functional.normalize
    info = {p.name: p for p in registry.plugins()}["tritred_normalize"]
    assert info.error is None
    assert info.hooks == ("tritred_launch_config", "tritred_register_reductions")


def test_coexists_with_the_builtins(registry: tritred_core.Registry) -> None:
    assert {"softmax", "layer_norm", "sum", "normalize"} <= set(registry.reductions())
    assert all(p.error is None for p in registry.plugins()), registry.plugins()


@DEVICES
def test_plugin_decides_normalize(registry: tritred_core.Registry, device_info: tritred_core.DeviceInfo) -> None:
    spec = registry.get("normalize").spec
    for problem in (rows("normalize", 1000, "float32", M=8),
                    tritred_core.Problem(op="normalize", dtype="bfloat16", M=8, N=64, K=196, stride_m=64 * 196,
                                         stride_n=196)):
        config = registry.launch_config(spec, problem, device_info)
        assert config == plugin.normalize_config(problem, device_info).model_copy(
            update={"decided_by": "tritred_normalize"})


@pytest.mark.parametrize("op", plugin.SOFTMAX_OPS)
def test_overrides_float64_softmax_rows_of_16385_to_32768_on_cuda(registry: tritred_core.Registry, op: str) -> None:
    """The override: its config, and the built-ins' decision everywhere around it."""
    spec = registry.get(op).spec
    for N in (16385, 20000, 32768):
        config = registry.launch_config(spec, rows(op, N), FAKE_H200)
        assert (config.decided_by, config.strategy, config.BLOCK_N, config.num_warps) == (
            "tritred_normalize", "multi_pass", 16384, 32)
        config.check_fits(rows(op, N))
        assert config.model_dump(exclude={"decided_by"}) == plugin.softmax_float64_config(
            rows(op, N), FAKE_H200).model_dump(exclude={"decided_by"})  # type: ignore[union-attr]
    builtins = [
        (rows(op, 16384), FAKE_H200), (rows(op, 32769), FAKE_H200),  # outside the range
        (rows(op, 20000, "float32"), FAKE_H200), (rows(op, 20000, "bfloat16"), FAKE_H200),  # other dtypes
        (rows(op, 20000), FAKE_INTERPRETER),  # not CUDA
        (rows(op, 20000, direction="backward"), FAKE_H200),  # the backward pass's kernel
        (rows(op, 20000, K=8, stride_n=8, stride_m=160000), FAKE_H200),  # columns
    ]
    for problem, device_info in builtins:
        assert plugin.softmax_float64_config(problem, device_info) is None, problem
        if problem.direction == "forward":
            assert registry.launch_config(spec, problem, device_info).decided_by == "tritred_ops", problem


def test_answers_no_other_op() -> None:
    for name in ("sum", "layer_norm", "var", "logsumexp", "rms_norm", "cross_entropy"):
        spec = tritred_core.ReductionSpec(name=name, family="reduce", mirrors=f"torch.{name}")
        for device_info in (FAKE_H200, FAKE_INTERPRETER):
            for dtype in ("float64", "float32"):
                problem = rows(name, 20000, dtype)
                assert plugin.tritred_launch_config(spec=spec, problem=problem, device=device_info) is None


def test_every_bench_suite_decision_is_the_builtins(registry: tritred_core.Registry) -> None:
    """Installed, this example must not move tritred's benchmarks: every case of every built-in suite gets the
    same launch config with the plugin registered as without it."""
    pytest.importorskip("tritred_bench")
    import tritred_ops.plugin
    from tritred_bench.inputs import build_inputs
    from tritred_bench.suites import builtin_suites, load_suite

    bare = tritred_core.Registry(autoload=False)
    bare.register(tritred_ops.plugin, name="tritred_ops")
    cases = 0
    for suite in builtin_suites():
        for case in load_suite(suite)[0]:
            rec = registry.get(case.op)
            args, kwargs = build_inputs(rec, case, "meta")
            problem = rec.problem(*args, **kwargs)
            for device_info in (FAKE_H200, FAKE_INTERPRETER):
                assert registry.launch_config(rec.spec, problem, device_info) == bare.launch_config(
                    rec.spec, problem, device_info), (suite, case)
            cases += 1
    assert cases > 50


@DEVICES
def test_configs_fit_the_problem_grid(registry: tritred_core.Registry, device_info: tritred_core.DeviceInfo) -> None:
    spec = registry.get("normalize").spec
    configs = []
    for dtype in ("bfloat16", "float64"):
        configs += assert_valid_launch_configs(registry, spec, device_info, problem_grid("normalize", dtype))
    assert {c.decided_by for c in configs} == {"tritred_normalize"}
    assert {c.strategy for c in configs} == {"single_pass", "multi_pass"}
    assert all(c.BLOCK_M * c.BLOCK_N * c.BLOCK_K <= (8192 if device_info.backend == "cuda" else 1024)
               for c in configs if c.strategy == "single_pass")


def test_record_callables(registry: tritred_core.Registry, device: str) -> None:
    """make_inputs / problem / byte_count / impl / reference agree with one another (what the CLI relies on)."""
    rec = registry.get("normalize")
    args, kwargs = rec.make_inputs((8, 1000), torch.float32, device, -1, 0)
    assert kwargs == {"p": 2.0, "dim": -1, "eps": 1e-12}
    problem = rec.problem(*args, **kwargs)
    assert (problem.op, problem.dtype, problem.M, problem.N, problem.K) == ("normalize", "float32", 8, 1000, 1)
    assert rec.byte_count is not None and rec.byte_count(*args, **kwargs) == 2 * 8 * 1000 * 4
    torch.testing.assert_close(rec.impl(*args, **kwargs).cpu(), rec.reference(args[0].cpu(), **kwargs))
    meta_args, meta_kwargs = rec.make_inputs((2, 3, 40), torch.float16, "meta", (1,), 0)  # tritred explain
    assert meta_args[0].device.type == "meta" and meta_kwargs["dim"] == 1
    meta = rec.problem(*meta_args, **meta_kwargs)
    assert (meta.M, meta.N, meta.K, meta.stride_n) == (2, 3, 40, 40)
    for dim in (None, (0, 1)):
        with pytest.raises(ValueError, match="one dim"):
            rec.make_inputs((2, 3), torch.float32, "meta", dim, 0)


def test_duplicate_name_is_refused(registry: tritred_core.Registry) -> None:
    class Copycat:
        @tritred_core.hookimpl
        def tritred_register_reductions(self) -> list[tritred_core.Reduction]:
            return [plugin.reduction()]

    registry.register(Copycat(), name="copycat")
    with pytest.raises(tritred_core.DuplicateReductionError, match="normalize") as err:
        registry.reductions()
    assert "'tritred_normalize'" in str(err.value) and "'copycat'" in str(err.value)


def test_entry_point_declared() -> None:
    """pyproject.toml declares the entry point tritred loads (checked on the installed metadata when installed)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        eps = distribution("tritred-normalize").entry_points
    except PackageNotFoundError:
        from pathlib import Path

        tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

        data = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
        assert data["project"]["name"] == "tritred-normalize"
        assert data["project"]["entry-points"]["tritred"] == {"tritred_normalize": "tritred_normalize.plugin"}
        return
    assert [(ep.group, ep.name, ep.value) for ep in eps if ep.group == "tritred"] == [
        ("tritred", "tritred_normalize", "tritred_normalize.plugin")
    ]


def test_conformance_kit(registry: tritred_core.Registry, device: str) -> None:
    """tritred's conformance kit (what ``tritred check`` runs): every dtype x shape x case against torch."""
    from tritred_ops.testing import assert_conforms

    # Rows in one pass and in two sweeps (past the interpreter's 1024), columns (dim=1 of NCHW, dim=0), a 1-D input.
    shapes = [((7, 33), -1), ((2, 3000), -1), ((2, 4, 6, 2), 1), ((300, 40), 0), ((50,), 0)]
    results = assert_conforms(registry.get("normalize"), device=device, shapes=shapes, seed=0)
    assert results and not any(r.skipped for r in results)
