"""Saved reports: read back, merged, summarized, tabulated in markdown."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tritred_bench import (
    BenchReport,
    Case,
    CaseResult,
    Measurement,
    filter_report,
    format_config,
    markdown_table,
    merge_reports,
    read_json,
    summarize,
    summary_lines,
    write_json,
    write_plot,
    write_points_plot,
)


def _result(op: str, dtype: str, tritred: float, eager: float, compile_: float | None, pct: float) -> CaseResult:
    r = CaseResult(Case(op, (1024, 4096), dtype, -1, True), bytes=8_000_000,
                   config={"strategy": "single_pass", "BLOCK_M": 1, "BLOCK_N": 4096, "BLOCK_K": 1, "num_warps": 8,
                           "split": 1, "BLOCK_TAIL": 0, "threads_per_row": 0})
    r.measurements = {"tritred": Measurement("tritred", "ok", ms=tritred, gbps=1.0, pct_copy=pct),
                      "eager": Measurement("eager", "ok", ms=eager, gbps=1.0, pct_copy=pct * tritred / eager)}
    r.measurements["compile"] = (Measurement("compile", "ok", ms=compile_, gbps=1.0, pct_copy=pct * tritred / compile_)
                                 if compile_ else Measurement("compile", "failed", message="boom"))
    return r


def _report(*results: CaseResult, copy: float = 4000.0) -> BenchReport:
    rep = BenchReport(device="NVIDIA H200", backend="cuda", copy_gbps=copy, providers=["tritred", "eager", "compile"],
                      suite="h200", timing="do_bench", versions={"torch": "2.13.0"})
    rep.results = list(results)
    return rep


def test_json_round_trip(quick_report: Any, tmp_path: Any) -> None:
    path = write_json(quick_report, tmp_path / "q.json")
    back = read_json(path)
    assert back.to_dict() == json.loads(path.read_text())
    assert [r.case for r in back.results] == [r.case for r in quick_report.results]
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"cases": []}')
    with pytest.raises(ValueError, match="not a `tritred bench --json` report"):
        read_json(tmp_path / "bad.json")
    (tmp_path / "taken").mkdir()  # a write that cannot land leaves no half-written file beside it
    with pytest.raises(OSError):
        write_json(quick_report, tmp_path / "taken")
    assert not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(meta=[]), "field 'meta' must be a JSON object"),
    (lambda d: d["meta"].update(providers="eager"), "field 'providers' must be a JSON array"),
    (lambda d: d["cases"][0]["providers"]["tritred"].update(ms="fast"), "cases[0].providers.tritred.ms"),
    (lambda d: d["cases"][0]["providers"]["tritred"].update(pct_copy=[1]), "cases[0].providers.tritred.pct_copy"),
    (lambda d: d["cases"][0]["providers"]["eager"].update(ms=-1.0), "cases[0].providers.eager.ms"),
    (lambda d: d["cases"][0]["providers"].update(tritred=3), "cases[0].providers.tritred must be an object"),
])
def test_a_malformed_report_names_the_file_and_the_field(quick_report: Any, tmp_path: Any, edit: Any,
                                                         field: str) -> None:
    """A hand-edited report is refused as a whole, before anything is printed or written, naming the field."""
    data = quick_report.to_dict()
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="edited.json' is not a `tritred bench --json` report") as info:
        read_json(path)
    assert field in str(info.value)


def test_merge_summarize_and_markdown() -> None:
    a = _report(_result("sum", "bfloat16", 1.0, 2.0, 1.25, 90.0), _result("var", "bfloat16", 1.0, 4.0, None, 60.0))
    b = _report(_result("sum", "float32", 2.0, 1.0, 4.0, 95.0), copy=4200.0)
    merged = merge_reports([a, b])
    assert [r.case.dtype for r in merged.results] == ["bfloat16", "bfloat16", "float32"]
    assert merged.copy_gbps == pytest.approx(4100.0) and merged.providers == ["tritred", "eager", "compile"]

    s = summarize(merged)
    assert s["cases"] == 3 and s["median_pct_copy"] == 90.0 and s["min_pct_copy"] == 60.0
    assert s["below_70"] == ["var dim=-1 1024x4096 bfloat16"]
    assert s["geomean_vs"]["eager"] == pytest.approx((2.0 * 4.0 * 0.5) ** (1 / 3))
    assert s["geomean_vs_best"] == pytest.approx((1.25 * 4.0 * 0.5) ** (1 / 3))  # best: compile, eager, eager
    assert s["at_or_above_best"] == 2 and s["below_best"] == [("sum dim=-1 1024x4096 float32", 0.5)]
    lines = summary_lines(merged)
    assert "median 90.0 % of copy bandwidth, min 60.0 %, 1 cases below 70 %" in lines[1]
    assert "below it: sum dim=-1 1024x4096 float32 0.500x" in lines[-1]

    table = markdown_table(merged).splitlines()
    assert table[0] == ("| case | MB | tritred | eager | compile | best peer | tritred / best peer | "
                        "tritred config |")
    assert table[2] == ("| sum dim=-1 1024x4096 bfloat16 | 8 | 90 | 45 | 72 | compile | 1.25x | "
                        "single_pass M1 N4096 K1 w8 s1 |")
    assert table[3].split(" | ")[4] == "failed" and len(table) == 5

    only = filter_report(merged, dtypes=["float32"])
    assert [r.case.dtype for r in only.results] == ["float32"] and len(merged.results) == 3
    with pytest.raises(ValueError):
        merge_reports([])


def test_format_config() -> None:
    assert format_config(None) == "-"
    cfg = {"strategy": "single_pass", "BLOCK_M": 16, "BLOCK_N": 2048, "BLOCK_K": 1, "num_warps": 4, "split": 1,
           "BLOCK_TAIL": 16, "threads_per_row": 0}
    assert format_config(cfg) == "single_pass M16 N2048+16 K1 w4 s1"
    assert format_config({**cfg, "BLOCK_TAIL": 0, "threads_per_row": 8}) == "single_pass M16 N2048 K1 w4 s1 t8"


def test_plot_of_a_merged_report(tmp_path: Any) -> None:
    merged = merge_reports([_report(_result("sum", "bfloat16", 1.0, 2.0, 1.5, 90.0)),
                            _report(_result("sum", "float32", 1.0, 2.0, None, 95.0))])
    assert write_plot(merged, tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    points = write_points_plot(merged, tmp_path / "points.png")
    assert points.read_bytes()[:4] == b"\x89PNG" and points.stat().st_size > 5000
    assert write_points_plot(merged, tmp_path).name == "bench.png"  # a directory gets bench.png
