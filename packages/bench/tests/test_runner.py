"""The runner and reports on the quick suite (CPU interpreter): tritred and eager only."""

from __future__ import annotations

import csv
import json
from typing import Any

import pytest
import torch
from tritred_bench import (
    PROVIDERS,
    CaseResult,
    Measurement,
    Provider,
    build_inputs,
    check_output,
    geomean,
    load_suite,
    run,
    torch_op,
    write_csv,
    write_json,
    write_plot,
)
from tritred_core import get_registry


def test_quick_suite_runs(quick_report: Any) -> None:
    cases, _ = load_suite("quick")
    assert [r.case for r in quick_report.results] == cases
    assert quick_report.copy_gbps > 0 and quick_report.providers == ["tritred", "eager"]
    for r in quick_report.results:
        assert r.bytes > 0, r.case.label
        for p in ("tritred", "eager"):
            m = r.measurements[p]
            assert m.status == "ok", (r.case.label, p, m.message)
            assert m.ms > 0 and m.gbps > 0 and m.pct_copy > 0
        assert r.speedup("eager") == pytest.approx(r.ms("eager") / r.ms("tritred"))
        assert r.best_peer() == "eager" and r.speedup_vs_best() == r.speedup("eager")
        assert r.config is not None and r.config["decided_by"] == "tritred_ops"


def test_json_csv_png(quick_report: Any, tmp_path: Any) -> None:
    j = write_json(quick_report, tmp_path / "out" / "b.json")
    data = json.loads(j.read_text())
    assert data["meta"]["copy_gbps"] == pytest.approx(quick_report.copy_gbps)
    assert data["meta"]["providers"] == ["tritred", "eager"] and data["meta"]["versions"]["torch"]
    assert len(data["cases"]) == len(quick_report.results)
    first = data["cases"][0]
    assert first["label"] == quick_report.results[0].case.label
    assert first["providers"]["tritred"]["status"] == "ok" and first["providers"]["eager"]["ms"] > 0
    assert first["speedup"]["eager"] > 0 and first["best_peer"] == "eager"

    c = write_csv(quick_report, tmp_path / "b.csv")
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 2 * len(quick_report.results)
    assert {r["provider"] for r in rows} == {"tritred", "eager"}
    assert all(r["status"] == "ok" and float(r["gbps"]) > 0 for r in rows)
    assert all(float(r["tritred_speedup"]) > 0 for r in rows if r["provider"] == "eager")

    png = write_plot(quick_report, tmp_path / "b.png")
    head = png.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert write_plot(quick_report, tmp_path).name == "bench.png"  # a directory gets bench.png


class _Wrong(Provider):
    name = "wrong"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        fn = torch_op(rec)
        return lambda: fn(*args, **kwargs) + 1


class _Raises(Provider):
    name = "raises"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        def boom() -> None:
            raise RuntimeError("no kernel for this")
        return boom


def test_wrong_or_failing_provider_is_not_timed(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.setitem(PROVIDERS, "wrong", _Wrong)
    monkeypatch.setitem(PROVIDERS, "raises", _Raises)
    cases = [c for c in load_suite("quick")[0] if c.op == "sum" and c.dim == -1]
    report = run(cases, providers=["eager", "wrong", "raises", "liger"], device=device, quick=True, progress=False,
                 copy_gbps=1.0)
    r = report.results[0]
    assert r.measurements["wrong"].status == "failed" and r.measurements["wrong"].ms is None
    assert "wrong result" in r.measurements["wrong"].message
    assert r.measurements["raises"].status == "failed" and "no kernel" in r.measurements["raises"].message
    assert r.measurements["liger"].status == "skipped"  # not installed here, or sum not offered
    assert r.best_peer() == "eager" and r.speedup("wrong") is None


def test_a_lost_device_stops_the_run_keeping_the_cases_so_far(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                               device: str) -> None:
    """After a case that ends the CUDA context (a peer's illegal memory access), the run stops: the cases measured
    are kept, ``stopped`` names the case and the first provider that failed on it, and the JSON keeps it."""
    import tritred_bench.runner as runner
    from tritred_bench import read_json

    monkeypatch.setitem(PROVIDERS, "raises", _Raises)
    cases = [c for c in load_suite("quick")[0] if c.op in ("sum", "amax")][:3]
    assert len(cases) == 3
    seen, real = [], runner.device_lost

    def lost_after_second(dev: Any, result: CaseResult, index: int, total: int) -> str:
        """The device check itself, after the second case, on a fake CUDA device whose synchronization fails as
        after an illegal access (patched here only: on a GPU the providers' own synchronizations stay real)."""
        seen.append(result.case)
        if index != 1:
            return ""
        with monkeypatch.context() as m:
            m.setattr(torch.cuda, "synchronize", lambda dev=None: (_ for _ in ()).throw(
                RuntimeError("CUDA error: an illegal memory access was encountered")))
            return real(torch.device("cuda"), result, index, total)
    monkeypatch.setattr(runner, "device_lost", lost_after_second)
    report = run(cases, providers=["eager", "raises"], device=device, quick=True, progress=False, copy_gbps=1.0)
    assert [r.case for r in report.results] == cases[:2] == seen
    assert report.stopped.startswith(f"the CUDA context was lost at case 1 ({cases[1].label}; first failed there: "
                                     "raises: RuntimeError: no kernel for this)")
    assert report.stopped.endswith("the run stopped after 2 of 3 cases")
    back = read_json(write_json(report, tmp_path / "r.json"))
    assert back.stopped == report.stopped and len(back.results) == 2


def test_a_working_device_does_not_stop_the_run(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    import tritred_bench.runner as runner

    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    result = CaseResult(case=load_suite("quick")[0][0], bytes=1)
    assert runner.device_lost(torch.device("cuda"), result, 0, 1) == "" and calls == ["sync", "empty"]
    assert runner.device_lost(torch.device("cpu"), result, 0, 1) == ""


def test_build_inputs_follow_case_params(device: str) -> None:
    reg = get_registry()
    from tritred_bench import Case

    ln = Case("layer_norm", (4, 6), "float32", params={"normalized_shape": (6,), "weight": False, "bias": True})
    args, kwargs = build_inputs(reg.get("layer_norm"), ln, device)
    assert args[1] == (6,) and args[2] is None and args[3].shape == (6,)
    bn = Case("batch_norm", (2, 3, 4), "bfloat16", params={"training": True, "weight": True, "bias": False})
    args, kwargs = build_inputs(reg.get("batch_norm"), bn, device)
    assert args[0].dtype == torch.bfloat16 and args[4] is None and kwargs["training"] is True
    full = Case("sum", (10,), "float32", dim=None, has_dim=True)
    args, kwargs = build_inputs(reg.get("sum"), full, device)
    assert kwargs["dim"] is None


def test_check_output_accepts_index_ties() -> None:
    rec = get_registry().get("max")
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    ref = torch.max(x, 1)
    tie = type(ref)((ref.values, torch.tensor([2, 2])))
    assert check_output(tie, ref, rec, (x,), {"dim": 1}) == ""
    wrong = type(ref)((ref.values, torch.tensor([0, 1])))
    assert "differ" in check_output(wrong, ref, rec, (x,), {"dim": 1})


def test_speedups_and_geomean() -> None:
    from tritred_bench import Case

    r = CaseResult(Case("sum", (4,), "float32"), bytes=16)
    r.measurements = {"tritred": Measurement("tritred", "ok", ms=1.0), "eager": Measurement("eager", "ok", ms=2.0),
                      "compile": Measurement("compile", "ok", ms=1.5), "liger": Measurement("liger", "skipped"),
                      "flaggems": Measurement("flaggems", "failed", message="x")}
    assert r.speedup("eager") == 2.0 and r.best_peer() == "compile" and r.speedup_vs_best() == 1.5
    assert r.speedup("liger") is None and r.speedup("flaggems") is None
    assert geomean([2.0, 8.0, None]) == pytest.approx(4.0) and geomean([]) is None
