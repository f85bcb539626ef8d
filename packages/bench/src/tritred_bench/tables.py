"""Saved reports: read ``tritred bench --json`` files back, merge several runs, summarize, write a markdown table.

A large suite is often run in parts (one JSON per dtype or op group, so that a time limit loses one part only);
:func:`merge_reports` puts them back together in order, and the usual outputs (:func:`~tritred_bench.print_report`,
:func:`~tritred_bench.write_plot`, :func:`~tritred_bench.write_csv`) work on the result. :func:`markdown_table`
gives the table of the documentation's performance page, :func:`summarize` its summary figures and
:func:`write_points_plot` its figure (one column per case, a marker per provider: compact for a whole suite).

::

    from tritred_bench import read_json, merge_reports, markdown_table, summary_lines
    report = merge_reports([read_json(p) for p in ("bf16.json", "fp32.json")])
    print(markdown_table(report)); print("\\n".join(summary_lines(report)))
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .results import BenchReport, CaseResult, Measurement, geomean
from .suites import Case, filter_cases


def read_json(path: str | Path) -> BenchReport:
    """A :class:`BenchReport` from a file written by ``write_json`` (``tritred bench --json``).

    Raises FileNotFoundError, or ValueError when the file is not such a report.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"report file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text())
        meta, cases = _typed(data, "meta", dict), _typed(data, "cases", list)
        providers = _typed(meta, "providers", list)
        if not all(isinstance(p, str) for p in providers):
            raise ValueError(f"meta.providers must be a list of names, got {providers!r}")
        report = BenchReport(device=str(meta.get("device", "")), backend=str(meta.get("backend", "")),
                             copy_gbps=_number(meta.get("copy_gbps"), "meta.copy_gbps") or 0.0, providers=providers,
                             suite=str(meta.get("suite", "")), started=str(meta.get("started", "")),
                             timing=str(meta.get("timing", "")), versions=dict(meta.get("versions") or {}),
                             pass_=str(meta.get("pass") or "forward"), memory=bool(meta.get("memory")),
                             stopped=str(meta.get("stopped") or ""))
        for i, c in enumerate(cases):
            where = f"cases[{i}]"
            if not isinstance(c, dict):
                raise ValueError(f"{where} must be an object")
            result = CaseResult(case=Case.from_dict(_typed(c, "case", dict)), bytes=int(c.get("bytes") or 0),
                                config=c.get("tritred_config"), error=str(c.get("error") or ""),
                                backward_config=c.get("tritred_backward_config"))
            for name, m in _typed(c, "providers", dict).items():
                at = f"{where}.providers.{name}"
                if not isinstance(m, dict):
                    raise ValueError(f"{at} must be an object")
                nums = {k: _number(m.get(k), f"{at}.{k}")
                        for k in ("ms", "gbps", "pct_copy", "step_ms", "forward_ms", "peak_bytes")}
                peak = nums.pop("peak_bytes")
                result.measurements[name] = Measurement(name, str(m["status"]), message=str(m.get("message", "")),
                                                        peak_bytes=None if peak is None else int(peak), **nums)
            report.results.append(result)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{str(path)!r} is not a `tritred bench --json` report: {type(e).__name__}: {e}") from e
    return report


def _typed(d: Any, key: str, kind: type) -> Any:
    """``d[key]``, which must be a ``kind`` (ValueError naming the field otherwise)."""
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"missing field {key!r}")
    if not isinstance(d[key], kind):
        raise ValueError(f"field {key!r} must be a JSON {'object' if kind is dict else 'array'}, got {d[key]!r}")
    return d[key]


def _number(v: Any, field: str) -> float | None:
    """A report's numeric field (a time, a rate, bytes): None, or a number >= 0 (not a bool, string or list)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise ValueError(f"{field} must be a number >= 0 or null, got {v!r}")
    return float(v)


def merge_reports(reports: Sequence[BenchReport]) -> BenchReport:
    """One report holding every case of ``reports``, in order.

    The metadata is the first report's; the providers are every report's, in order of first appearance; the
    copy bandwidth is the mean of the parts' (each case keeps the % of copy computed in its own run); ``stopped``
    joins the parts' reasons. Reports of different passes (forward, backward, both) are not merged: ValueError.
    """
    if not reports:
        raise ValueError("no report to merge")
    first = reports[0]
    passes = sorted({r.pass_ for r in reports})
    if len(passes) > 1:
        raise ValueError(f"reports of different passes ({', '.join(passes)}) cannot be merged into one table")
    providers = list(dict.fromkeys(p for r in reports for p in r.providers))
    copy = statistics.fmean(r.copy_gbps for r in reports) if all(r.copy_gbps for r in reports) else first.copy_gbps
    merged = BenchReport(device=first.device, backend=first.backend, copy_gbps=copy, providers=providers,
                         suite=",".join(dict.fromkeys(r.suite for r in reports if r.suite)), started=first.started,
                         timing=first.timing, versions=dict(first.versions), pass_=first.pass_,
                         memory=any(r.memory for r in reports),
                         stopped="; ".join(r.stopped for r in reports if r.stopped))
    for r in reports:
        merged.results.extend(r.results)
    return merged


def filter_report(report: BenchReport, ops: list[str] | None = None, dtypes: list[str] | None = None) -> BenchReport:
    """The report's cases whose op is in ``ops`` and dtype in ``dtypes`` (None or empty: no filter)."""
    keep = {id(c) for c in filter_cases([r.case for r in report.results], ops, dtypes)}
    out = merge_reports([report])
    out.results = [r for r in report.results if id(r.case) in keep]
    return out


def format_config(config: dict[str, Any] | None) -> str:
    """``single_pass M1 N4096 K1 w4 s1`` (``+16`` after N: a tail tile; ``t8``: threads per row)."""
    if not config:
        return "-"
    tail = f"+{config['BLOCK_TAIL']}" if config.get("BLOCK_TAIL") else ""
    threads = f" t{config['threads_per_row']}" if config.get("threads_per_row") else ""
    return (f"{config.get('strategy', '?')} M{config.get('BLOCK_M')} N{config.get('BLOCK_N')}{tail} "
            f"K{config.get('BLOCK_K')} w{config.get('num_warps')} s{config.get('split')}{threads}")


def _pct(m: Measurement | None) -> str:
    if m is None or m.status == "skipped":
        return "-"
    if m.status != "ok":
        return m.status
    return f"{m.pct_copy:.0f}" if m.pct_copy is not None else "?"


def markdown_table(report: BenchReport) -> str:
    """The report as a markdown table: % of copy bandwidth per provider, the best peer, tritred's speedup over
    it and tritred's launch config, one row per case."""
    peers = [p for p in report.providers if p != "tritred"]
    head = ["case", "MB", "tritred", *peers, "best peer", "tritred / best peer", "tritred config"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report.results:
        best = r.best_peer(peers)
        ratio = r.speedup_vs_best(peers)
        row = [r.case.label, f"{r.bytes / 1e6:.0f}", _pct(r.measurements.get("tritred")),
               *(_pct(r.measurements.get(p)) for p in peers),
               best or "-", f"{ratio:.2f}x" if ratio else "-", format_config(r.config)
               + (f"; backward {format_config(r.backward_config)}" if r.backward_config else "")]
        lines.append("| " + " | ".join(row) + " |")
    if any(m.peak_bytes is not None for r in report.results for m in r.measurements.values()):
        lines += ["", "Peak extra memory of the timed call, GB:", "",
                  "| case | " + " | ".join(report.providers) + " |", "|" + "---|" * (len(report.providers) + 1)]
        for r in report.results:
            cells = []
            for p in report.providers:
                m = r.measurements.get(p)
                ok = m is not None and m.status == "ok" and m.peak_bytes is not None
                cells.append(f"{m.peak_bytes / 1e9:.3g}" if ok and m is not None and m.peak_bytes is not None else "-")
            lines.append("| " + " | ".join([r.case.label, *cells]) + " |")
    return "\n".join(lines) + "\n"


def summarize(report: BenchReport) -> dict[str, Any]:
    """The figures of a run: tritred's median and minimum % of copy bandwidth, the cases below 70 %, the
    geometric-mean speedup over each peer and over each case's best peer, and the cases below the best peer."""
    peers = [p for p in report.providers if p != "tritred"]
    ours = [(r.case.label, m.pct_copy) for r in report.results
            if (m := r.measurements.get("tritred")) is not None and m.status == "ok" and m.pct_copy is not None]
    pcts = sorted(pct for _, pct in ours)
    vs_best = [(r.case.label, s) for r in report.results if (s := r.speedup_vs_best(peers)) is not None]
    return {
        "cases": len(report.results),
        "median_pct_copy": statistics.median(pcts) if pcts else None,
        "min_pct_copy": pcts[0] if pcts else None,
        "below_70": [label for label, pct in ours if pct < 70],
        "geomean_vs": {p: geomean(r.speedup(p) for r in report.results) for p in peers},
        "geomean_vs_best": geomean(s for _, s in vs_best),
        "at_or_above_best": sum(s >= 1.0 for _, s in vs_best),
        "below_best": [(label, s) for label, s in vs_best if s < 1.0],
    }


def summary_lines(report: BenchReport) -> list[str]:
    """:func:`summarize` in words, a few lines."""
    s = summarize(report)
    out = [f"{s['cases']} cases"]
    if s["median_pct_copy"] is not None:
        out.append(f"tritred: median {s['median_pct_copy']:.1f} % of copy bandwidth, min {s['min_pct_copy']:.1f} %, "
                   f"{len(s['below_70'])} cases below 70 %")
    speedups = [f"{g:.2f}x {p}" for p, g in s["geomean_vs"].items() if g is not None]
    if s["geomean_vs_best"] is not None:
        speedups.append(f"{s['geomean_vs_best']:.2f}x the best peer of each case")
    if speedups:
        out.append("geometric-mean speedup: " + ", ".join(speedups))
    if s["geomean_vs_best"] is not None:
        below = ", ".join(f"{k} {v:.3f}x" for k, v in s["below_best"])
        out.append(f"at or above the best peer on {s['at_or_above_best']} cases"
                   + (f"; below it: {below}" if below else ""))
    return out


#: Markers per provider in :func:`write_points_plot`.
MARKERS = {"tritred": "o", "eager": "^", "compile": "s", "liger": "d", "flaggems": "v", "quack": "P"}


def write_points_plot(report: BenchReport, path: str | Path) -> Path:
    """% of copy bandwidth per case (one column each, in order) with a marker per provider, written as a PNG.

    tritred's markers are drawn larger; a dotted line marks 90 %. Providers that failed or were skipped have no
    marker. ``path`` may be a directory (existing, or without a suffix): the file is then ``bench.png`` in it.
    Returns the path written.
    """
    from .report import COLORS, new_figure, pct_copy, save_png

    fig, ax = new_figure(max(12.0, len(report.results) * 0.22), 6)
    xs = list(range(len(report.results)))
    for name in report.providers:
        ys = [float("nan") if (pct := pct_copy(r, name)) is None else pct for r in report.results]
        ours = name == "tritred"
        ax.plot(xs, ys, MARKERS.get(name, "x"), label=name, color=COLORS.get(name), markersize=6 if ours else 4,
                alpha=1 if ours else 0.6)
    ax.set_xticks(xs)
    ax.set_xticklabels([r.case.label for r in report.results], rotation=90, fontsize=6)
    ax.set_ylabel("% of measured copy bandwidth")
    ax.axhline(90, color="gray", lw=0.5, ls="--")
    what = {"forward": "", "both": ", training step", "backward": ", backward"}.get(report.pass_, "")
    ax.set_title(f"{report.device}{what}: % of the copy bandwidth ({report.copy_gbps:.0f} GB/s, bytes read + "
                 "written)", fontsize=9)
    ax.legend()
    return save_png(fig, path, dpi=120)
