"""The other modes of ``tritred bench``: ``--latency`` (tiny calls, µs per call) and ``--report`` (saved runs).

::

    tritred bench --latency                               # the latency suite: tritred vs eager, µs per call
    tritred bench --report a.json --report b.json --markdown table.md --plot peers.png
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def latency(cases: list[Any], device: str, quick: bool, seed: int, json_out: Path | None, console: Any) -> int:
    """Measure and print the latency of ``cases``; write JSON when asked. Returns the exit status (1: a case
    failed its correctness check or did not run)."""
    from tritred_bench.latency import measure_latency, print_latency, write_latency_json

    report = measure_latency(cases, device=device, quick=quick, seed=seed)
    print_latency(report, console=console)
    if json_out is not None:
        console.print(f"wrote {write_latency_json(report, json_out)}")
    return 1 if any(r.message for r in report.results) else 0


def saved_reports(paths: list[Path], ops: list[str] | None, dtypes: list[str] | None, markdown_out: Path | None,
                  json_out: Path | None, csv_out: Path | None, plot_out: Path | None, console: Any) -> None:
    """Merge saved ``--json`` reports (in order), print the table and the summary, and write the outputs asked.

    The plot is :func:`~tritred_bench.tables.write_points_plot`'s (a column per case, a marker per provider), which
    stays readable for a whole suite.
    """
    import tritred_bench as tb
    from tritred_bench.tables import (
        filter_report,
        markdown_table,
        merge_reports,
        read_json,
        summary_lines,
        write_points_plot,
    )

    report = filter_report(merge_reports([read_json(p) for p in paths]), ops=ops, dtypes=dtypes)
    if not report.results:
        raise ValueError(f"no case of {', '.join(map(str, paths))} matches ops={ops or 'all'} dtypes={dtypes or 'all'}")
    tb.print_report(report, console=console, show_failures=False)
    for line in summary_lines(report):
        console.print(line, highlight=False)
    if markdown_out is not None:
        markdown_out.parent.mkdir(parents=True, exist_ok=True)
        markdown_out.write_text(markdown_table(report) + "\n" + "\n".join(summary_lines(report)) + "\n")
        console.print(f"wrote {markdown_out}")
    for path, writer in ((json_out, tb.write_json), (csv_out, tb.write_csv), (plot_out, write_points_plot)):
        if path is not None:
            console.print(f"wrote {writer(report, path)}")
