"""The latency mode: tiny calls timed one at a time, tritred against eager, checked first (CPU interpreter here)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from tritred_bench import Case, LatencyResult, load_suite, measure_latency, print_latency, write_latency_json
from tritred_bench.latency import per_call_us
from tritred_core import Problem, Reduction, ReductionSpec, Registry, hookimpl

TINY = [Case("sum", (4, 8), "float32", -1, True), Case("softmax", (2, 16), "float32", -1, True),
        Case("layer_norm", (2, 16), "float32", params={"normalized_shape": (16,), "weight": True, "bias": True}),
        Case("batch_norm", (2, 3, 2, 2), "float32", params={"training": True, "weight": True, "bias": True})]
COUNTS = {"rounds": 2, "batches": 1, "calls": 2, "warmup": 1}


def test_latency_suite_is_built_in() -> None:
    cases, about = load_suite("latency")
    assert len(cases) == 13 and "tritred bench --latency" in about
    # (every op of the latency goal: softmax, sum, var, layer_norm, rms_norm, batch_norm)
    assert {"softmax", "sum", "var", "layer_norm", "rms_norm", "batch_norm"} <= {c.op for c in cases}
    assert {c.shape for c in cases} == {(8, 1024), (8, 16, 8, 8)}
    assert [c.label for c in cases if c.op == "batch_norm"] == ["batch_norm (train) 8x16x8x8 float32",
                                                                "batch_norm (eval) 8x16x8x8 float32"]


def test_measure_latency_times_tritred_and_eager(device: str, tmp_path: Any) -> None:
    report = measure_latency(TINY, device=device, **COUNTS)  # type: ignore[arg-type]
    assert [r.case for r in report.results] == TINY
    for r in report.results:
        assert r.message == "", (r.case.label, r.message)
        assert r.tritred_us and r.tritred_us > 0 and r.eager_us and r.eager_us > 0
        assert r.ratio == pytest.approx(r.tritred_us / r.eager_us)
    assert (report.rounds, report.batches, report.calls, report.warmup) == (2, 1, 2, 1)
    assert "alternated over 2 rounds" in report.method
    data = json.loads(write_latency_json(report, tmp_path / "lat.json").read_text())
    assert data["meta"]["kind"] == "latency" and data["meta"]["versions"]["torch"]
    assert [c["label"] for c in data["cases"]] == [c.label for c in TINY]
    assert all(c["tritred_us"] > 0 and c["ratio"] > 0 for c in data["cases"])

    from rich.console import Console

    console = Console(record=True, width=200)
    print_latency(report, console=console)
    text = console.export_text()
    assert "µs per call" in text and "sum dim=-1 4x8 float32" in text and "ratio" in text


def test_graphs_time_compiled_calls_of_both_sides(device: str, tmp_path: Any) -> None:
    """--graphs: each side compiled (CUDA graph replays with reduce-overhead on a GPU; ``aot_eager`` here, which
    traces tritred's registered ops), checked against eager's compiled call first, and said so in the report."""
    if device == "cuda":
        pytest.skip("the CPU variant of the machinery (the GPU run is the benchmark itself)")
    import torch._dynamo

    torch._dynamo.reset()
    counted: list[int] = []
    real = torch.compile

    def compile_counted(fn: Any, **kwargs: Any) -> Any:
        counted.append(1)
        assert kwargs == {"backend": "aot_eager"}
        return real(fn, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", compile_counted)
        report = measure_latency(TINY[:2], device=device, graphs=True, backend="aot_eager",
                                 **COUNTS)  # type: ignore[arg-type]
    assert len(counted) == 4  # (both sides of both cases)
    for r in report.results:
        assert r.message == "" and r.tritred_us and r.eager_us, (r.case.label, r.message)
    assert report.graphs and "compiled" in report.method and "CUDA graph replays" not in report.method  # (a CPU)
    data = json.loads(write_latency_json(report, tmp_path / "lat.json").read_text())
    assert data["meta"]["graphs"] is True

    from rich.console import Console

    console = Console(record=True, width=200)
    print_latency(report, console=console)
    assert "compiled" in console.export_text() and "CUDA graph" not in console.export_text()


def test_graphs_compile_every_case_afresh(device: str) -> None:
    """The providers' closures share code objects across cases: without a reset per case, dynamo's recompile limit
    (8) left the later cases running uncompiled, timed as if compiled. Twelve cases of one op, all compiled, none
    recompiled while timed (which fails the case)."""
    if device == "cuda":
        pytest.skip("the CPU variant of the machinery")
    import torch._dynamo

    torch._dynamo.reset()
    cases = [Case("sum", (2, 4 + k), "float32", -1, True) for k in range(12)]
    frames: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        real = torch._dynamo.reset
        mp.setattr(torch._dynamo, "reset", lambda: (frames.append(1), real())[1])
        report = measure_latency(cases, device=device, graphs=True, backend="aot_eager",
                                 **COUNTS)  # type: ignore[arg-type]
    assert len(frames) == 12
    assert all(r.message == "" and r.tritred_us for r in report.results), [r.message for r in report.results]


def test_per_call_us_divides_by_the_calls_and_keeps_the_warm_up_out() -> None:
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        if len(calls) == 1:
            import time

            time.sleep(0.2)

    us = per_call_us(fn, torch.device("cpu"), batches=3, calls=10, warmup=1)
    assert len(calls) == 31 and us < 20_000  # 1 warm-up + 3 x 10 timed; the slow first call is not among them


def _plugin(impl: Any) -> Any:
    def make_inputs(shape: Any, dtype: Any, device: Any = "cpu", dim: Any = -1, seed: int = 0) -> Any:
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(tuple(shape), generator=g).to(dtype).to(device),), {"dim": dim}

    spec = ReductionSpec(name="sum", family="reduce", dtypes=("float32",), outputs=("out",), mirrors="torch.sum")
    rec = Reduction(spec=spec, impl=impl, reference=torch.sum, make_inputs=make_inputs,
                    problem=lambda *a, **k: Problem(op="sum", dtype="float32", M=1, N=1, K=1))

    class Plugin:
        @hookimpl
        def tritred_register_reductions(self) -> list[Reduction]:
            return [rec]

    reg = Registry(autoload=False)
    reg.register(Plugin(), name="fake", version="0")
    return reg


def test_a_wrong_or_failing_call_is_reported_not_timed(device: str) -> None:
    case = [Case("sum", (4, 8), "float32", -1, True)]
    wrong = measure_latency(case, device=device, registry=_plugin(lambda x, dim=None: torch.sum(x, dim) + 1),
                            **COUNTS)  # type: ignore[arg-type]
    r: LatencyResult = wrong.results[0]
    assert "wrong result" in r.message and r.tritred_us is None and r.ratio is None

    def boom(x: Any, dim: Any = None) -> Any:
        raise RuntimeError("no kernel for this")

    failing = measure_latency(case, device=device, registry=_plugin(boom), **COUNTS)  # type: ignore[arg-type]
    assert "no kernel for this" in failing.results[0].message
    unknown = measure_latency([Case("no_such_op", (4,), "float32")], device=device, **COUNTS)  # type: ignore[arg-type]
    assert unknown.results[0].message
