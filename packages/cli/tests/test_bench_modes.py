"""`tritred bench --latency` and `tritred bench --report` (saved runs merged, tabulated, plotted)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def test_bench_latency(cli: Callable[..., Any], tmp_path: Path) -> None:
    suite = tmp_path / "tiny.json"
    suite.write_text(json.dumps([{"op": "sum", "shape": [4, 8], "dim": -1, "dtype": "float32"},
                                 {"op": "softmax", "shape": [2, 16], "dim": -1, "dtype": "float32"}]))
    out = tmp_path / "lat.json"
    r = cli("bench", "--latency", "--quick", "--suite", str(suite), "--json", str(out))
    assert r.exit_code == 0, r.output
    assert "µs per call" in r.output and "sum dim=-1 4x8 float32" in r.output and "ratio" in r.output
    data = json.loads(out.read_text())
    assert data["meta"]["kind"] == "latency"
    assert [c["label"] for c in data["cases"]] == ["sum dim=-1 4x8 float32", "softmax dim=-1 2x16 float32"]
    assert all(c["tritred_us"] > 0 and c["eager_us"] > 0 for c in data["cases"])
    # only tritred and eager: no peers, no CSV or plot
    assert cli("bench", "--latency", "--suite", str(suite), "--peers", "compile").exit_code == 2
    assert cli("bench", "--graphs", "--suite", str(suite)).exit_code == 2  # (graph replays of the latency mode)


def test_bench_latency_graphs_reach_the_measurement(cli: Callable[..., Any], tmp_path: Path,
                                                    monkeypatch: Any) -> None:
    import tritred_bench.latency as latency

    seen: dict[str, Any] = {}

    def measure(cases: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return latency.LatencyReport(device="x", backend="cpu", rounds=1, batches=1, calls=1, warmup=1,
                                     graphs=kwargs["graphs"])

    monkeypatch.setattr(latency, "measure_latency", measure)
    suite = tmp_path / "tiny.json"
    suite.write_text(json.dumps([{"op": "sum", "shape": [4, 8], "dim": -1, "dtype": "float32"}]))
    r = cli("bench", "--latency", "--graphs", "--suite", str(suite))
    assert r.exit_code == 0, r.output
    assert seen["graphs"] is True and "compiled calls" in r.output


def test_bench_accuracy(cli: Callable[..., Any], tmp_path: Path) -> None:
    suite = tmp_path / "tiny.json"
    suite.write_text(json.dumps([{"op": "sum", "shape": [4, 40], "dim": 0, "dtype": "float32"},
                                 {"op": "prod", "shape": [3, 9], "dim": -1, "dtype": "float32"}]))
    out = tmp_path / "acc.json"
    r = cli("bench", "--accuracy", "--suite", str(suite), "--json", str(out))
    assert r.exit_code == 0, r.output
    assert "relative error against float64" in r.output and "at or below torch eager's error" in r.output
    data = json.loads(out.read_text())
    assert data["meta"]["kind"] == "accuracy"
    assert [(c["label"], c["inputs"]) for c in data["cases"]] == [
        ("sum dim=0 4x40 float32", "plain"), ("sum dim=0 4x40 float32", "offset"), ("prod dim=-1 3x9 float32", "plain")]
    assert all(c["tritred"] is not None and c["eager"] is not None for c in data["cases"])
    for extra in (["--latency"], ["--peers", "compile"], ["--pass", "both"], ["--csv", str(tmp_path / "a.csv")]):
        assert cli("bench", "--accuracy", "--suite", str(suite), *extra).exit_code == 2, extra


def test_bench_report_merges_saved_runs(cli: Callable[..., Any], tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert cli("bench", "--quick", "sum", "--json", str(a)).exit_code == 0
    assert cli("bench", "--quick", "softmax", "--json", str(b)).exit_code == 0
    md, png, merged = tmp_path / "t.md", tmp_path / "p.png", tmp_path / "m.json"
    r = cli("bench", "--report", str(a), "--report", str(b), "--markdown", str(md), "--plot", str(png),
            "--json", str(merged))
    assert r.exit_code == 0, r.output
    labels = [c["label"] for c in json.loads(a.read_text())["cases"] + json.loads(b.read_text())["cases"]]
    assert [c["label"] for c in json.loads(merged.read_text())["cases"]] == labels
    table = md.read_text()
    assert table.startswith("| case | MB | tritred | eager |")  # (then the other peers run here, if any)
    assert "| best peer | tritred / best peer | tritred config |" in table.splitlines()[0]
    assert all(label in table for label in labels) and f"{len(labels)} cases" in table
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "geometric-mean speedup" in r.output and f"{len(labels)} cases" in r.output

    only = cli("bench", "--report", str(a), "--report", str(b), "softmax", "--markdown", str(md))
    assert only.exit_code == 0 and "sum dim" not in md.read_text() and "softmax" in md.read_text()
    assert cli("bench", "--report", str(tmp_path / "missing.json")).exit_code == 2
    assert cli("bench", "--quick", "--markdown", str(md)).exit_code == 2  # --markdown needs --report


def test_bench_training_pass_on_the_random_suite(cli: Callable[..., Any], tmp_path: Path) -> None:
    """--suite random --seed S --count N draws the cases (the report names the seed); --pass both times a
    training step: eager checked and timed, tritred a note until its ops have autograd."""
    out = tmp_path / "train.json"
    r = cli("bench", "--suite", "random", "--seed", "5", "--count", "3", "--budget-mb", "0.002", "--pass", "both",
            "softmax", "log_softmax", "--json", str(out), "--memory")
    assert r.exit_code == 0, r.output
    assert "training step" in r.output and "random (seed 5, 3 cases)" in r.output
    data = json.loads(out.read_text())
    assert data["meta"]["pass"] == "both" and data["meta"]["suite"] == "random (seed 5, 3 cases)"
    assert len(data["cases"]) == 3 and {c["case"]["op"] for c in data["cases"]} <= {"softmax", "log_softmax"}
    for c in data["cases"]:
        eager = c["providers"]["eager"]
        assert eager["status"] == "ok" and eager["step_ms"] > 0, eager
        assert c["bytes"] > 0
    assert cli("bench", "--quick", "--pass", "sideways").exit_code == 2
    assert cli("bench", "--latency", "--pass", "both").exit_code == 2


def test_bench_json_is_kept_case_by_case(cli: Callable[..., Any], tmp_path: Path,
                                         monkeypatch: Any) -> None:
    """--json is rewritten after every case, marked as cut short until the run ends: a run killed by a time limit
    keeps the cases it measured. Here the second case reads the file the first one left, then the run ends whole."""
    import tritred_bench.runner as runner

    suite = tmp_path / "two.json"
    suite.write_text(json.dumps([{"op": "sum", "shape": [4, 8], "dim": -1, "dtype": "float32"},
                                 {"op": "amax", "shape": [3, 5], "dim": 0, "dtype": "float32"}]))
    out, seen, real = tmp_path / "r.json", [], runner.run_case
    out.write_text('{"an earlier run": 1}')  # (replaced before the first case)

    def spy(rec: Any, case: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(json.loads(out.read_text()) if out.exists() else None)
        return real(rec, case, *args, **kwargs)
    monkeypatch.setattr(runner, "run_case", spy)
    r = cli("bench", "--quick", "--suite", str(suite), "--json", str(out))
    assert r.exit_code == 0, r.output
    assert seen[0]["cases"] == [] and seen[0]["meta"]["stopped"].startswith("the run had measured 0 of 2 cases")
    assert [c["label"] for c in seen[1]["cases"]] == ["sum dim=-1 4x8 float32"]
    assert seen[1]["meta"]["stopped"] == ("the run had measured 1 of 2 cases when this report was written; it did "
                                          "not finish")
    final = json.loads(out.read_text())
    assert len(final["cases"]) == 2 and not final["meta"]["stopped"]
    assert not list(tmp_path.glob("*.part"))


def test_bench_output_paths_are_checked_before_the_run(cli: Callable[..., Any], tmp_path: Path) -> None:
    r = cli("bench", "--quick", "sum", "--json", str(tmp_path))
    assert r.exit_code == 2 and "is a directory" in r.output, r.output
    same = tmp_path / "out"
    r = cli("bench", "--quick", "sum", "--json", str(same), "--csv", str(same))
    assert r.exit_code == 2 and "must be different files" in r.output and not same.exists(), r.output
