"""Reports of a :class:`~tritred_bench.results.BenchReport`: a rich table, JSON, CSV and a matplotlib PNG."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from .results import BenchReport, CaseResult, geomean

CSV_FIELDS = ("label", "op", "shape", "dim", "dtype", "bytes", "provider", "status", "ms", "gbps", "pct_copy",
              "tritred_speedup", "message", "pass", "step_ms", "forward_ms", "peak_bytes")

#: How each pass is named in titles.
PASS_TITLES = {"forward": "forward", "both": "training step (forward + backward)",
               "backward": "backward (training step - forward)"}


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def _cell(r: CaseResult, provider: str, percent: bool) -> str:
    m = r.measurements.get(provider)
    if m is None or m.status == "skipped":
        return "[dim]-[/]"
    if m.status == "failed":
        return "[red]failed[/]"
    if percent and m.pct_copy is not None:
        return f"{m.pct_copy:.0f}%"
    return f"{m.ms:.3g}ms" if m.ms is not None else "?"


def _ratio(s: float) -> str:
    """A speedup as 1.23x; below 0.1x with 2 significant digits (the interpreter's 0.0012x, not 0.00x)."""
    return f"{s:.2f}x" if s >= 0.1 else f"{s:.2g}x"


def _speedup_cell(s: float | None) -> str:
    if s is None:
        return "[dim]-[/]"
    color = "green" if s >= 1.0 else "red"
    return f"[{color}]{_ratio(s)}[/]"


def print_report(report: BenchReport, console: Any = None, show_failures: bool = True) -> None:
    """Print the report as a rich table: % of copy bandwidth (and ms) per provider, tritred's speedup over the
    best peer, then a geometric-mean summary and the failures' messages."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if console is None:
        console = Console()
        columns = os.environ.get("COLUMNS", "")
        if not console.is_terminal and not (columns.isdigit() and int(columns) > 0):
            console.width = 200  # in a pipe or file rich falls back to 80 columns, which clips the table
    peers = [p for p in report.providers if p != "tritred"]
    percent = report.backend == "cuda"  # under the CPU interpreter only the times mean something (little)
    what = "% of the copy bandwidth" if percent else "median time"
    title = (f"tritred bench on {report.device} (copy {report.copy_gbps:.0f} GB/s), "
             f"{PASS_TITLES.get(report.pass_, report.pass_)}: {what}")
    # (the title on its own line: as a table title rich wraps it to the table's width, and where a narrow table's
    # wrap falls moves with the copy figure's digits)
    console.print(title, style="table.title", markup=False, highlight=False)
    table = Table(show_lines=False)
    table.add_column("case", no_wrap=True)
    table.add_column("MB", justify="right", no_wrap=True)
    for p in report.providers:
        table.add_column(p, justify="right", no_wrap=True)
    table.add_column("vs best", justify="right", no_wrap=True)
    for r in report.results:
        table.add_row(r.case.label, f"{r.bytes / 1e6:.3g}",
                      *(_cell(r, p, percent) for p in report.providers), _speedup_cell(r.speedup_vs_best(peers)))
    console.print(table)
    note = " (interpreter on CPU: not a speed figure)" if report.backend != "cuda" else ""
    for p in peers:
        g = geomean(r.speedup(p) for r in report.results)
        if g is not None:
            console.print(f"tritred vs {p}: geometric-mean speedup {_ratio(g)}{note}")
    g = geomean(r.speedup_vs_best(peers) for r in report.results)
    if g is not None:
        console.print(f"tritred vs best peer: geometric-mean speedup {_ratio(g)}{note}")
    if report.suite:
        console.print(f"suite: {report.suite}", highlight=False)
    if any(m.peak_bytes is not None for r in report.results for m in r.measurements.values()):
        print_memory(report, console)
    for line in skip_notes(report):
        console.print(f"[dim]skipped[/] {escape(line)}", markup=True, highlight=False)
    if report.stopped:
        console.print(f"[red]stopped[/] {escape(report.stopped)}", markup=True, highlight=False)
    if show_failures:
        for r in report.results:
            for m in r.measurements.values():
                if m.status == "failed":
                    console.print(f"[red]failed[/] {m.provider} on {r.case.label}: {escape(m.message)}",
                                  markup=True, highlight=False)


def skip_notes(report: BenchReport, examples: int = 3) -> list[str]:
    """One line per (provider, reason) of the skipped measurements, with how many cases and a few of them:
    ``quack on 3 cases (softmax dim=1 ..., ...): quack takes contiguous rows``. "not offered" is left out."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in report.results:
        for m in r.measurements.values():
            if m.status == "skipped" and m.message and m.message != "not offered":
                seen.setdefault((m.provider, m.message), []).append(r.case.label)
    lines = []
    for (prov, msg), labels in seen.items():
        shown = ", ".join(labels[:examples]) + (", ..." if len(labels) > examples else "")
        lines.append(f"{prov} on {len(labels)} case{'s' if len(labels) > 1 else ''} ({shown}): {msg}")
    return lines


def _gb(v: int | None) -> str:
    return "-" if v is None else f"{v / 1e9:.3g}"


def print_memory(report: BenchReport, console: Any) -> None:
    """A table of each provider's peak extra memory (GB) per case: what the timed call (the training step, or
    the forward call) allocated beyond what was allocated before it."""
    from rich.table import Table

    table = Table(title="peak extra memory of the timed call, GB (max_memory_allocated - allocated before)")
    table.add_column("case", no_wrap=True)
    table.add_column("input GB", justify="right", no_wrap=True)
    for p in report.providers:
        table.add_column(p, justify="right", no_wrap=True)
    for r in report.results:
        table.add_row(r.case.label, _gb(_input_bytes(r)),
                      *(_gb(m.peak_bytes) if (m := r.measurements.get(p)) is not None and m.status == "ok" else "-"
                        for p in report.providers))
    console.print(table)


def _input_bytes(r: CaseResult) -> int:
    item = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}.get(r.case.dtype, 4)
    return math.prod(r.case.shape) * item


def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: they become None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def write_json(report: BenchReport, path: str | Path) -> Path:
    """Write ``report.to_dict()`` as JSON (``{"meta": ..., "cases": [...]}``); returns the path. The file is
    replaced whole (written beside it, then renamed), so a reader or a killed run never leaves half a report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    try:
        part.write_text(json.dumps(_clean(report.to_dict()), indent=1) + "\n")
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return path


def write_csv(report: BenchReport, path: str | Path) -> Path:
    """Write one row per (case, provider) with :data:`CSV_FIELDS`; ``tritred_speedup`` is the provider's time
    over tritred's (> 1: tritred is faster). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in report.results:
            c = r.case
            dim = "" if not c.has_dim else ("all" if c.dim is None else str(c.dim))
            for p, m in r.measurements.items():
                w.writerow({
                    "label": c.label, "op": c.op, "shape": c.shape_label, "dim": dim, "dtype": c.dtype,
                    "bytes": r.bytes, "provider": p, "status": m.status,
                    "ms": "" if m.ms is None else f"{m.ms:.6g}", "gbps": "" if m.gbps is None else f"{m.gbps:.6g}",
                    "pct_copy": "" if m.pct_copy is None else f"{m.pct_copy:.4g}",
                    "tritred_speedup": _fmt(r.speedup(p), ".4g") if p != "tritred" else "",
                    "message": m.message, "pass": report.pass_,
                    "step_ms": "" if m.step_ms is None else f"{m.step_ms:.6g}",
                    "forward_ms": "" if m.forward_ms is None else f"{m.forward_ms:.6g}",
                    "peak_bytes": "" if m.peak_bytes is None else m.peak_bytes,
                })
    return path


#: Bar colours per provider (matplotlib's tab10).
COLORS = {"tritred": "tab:red", "eager": "tab:blue", "compile": "tab:orange", "liger": "tab:green",
          "flaggems": "tab:purple", "quack": "tab:brown"}


def pct_copy(r: CaseResult, provider: str) -> float | None:
    """``provider``'s % of copy bandwidth on the case, None unless it ran correctly (the plots leave it out)."""
    m = r.measurements.get(provider)
    return m.pct_copy if m is not None and m.status == "ok" else None


def new_figure(width: float, height: float) -> tuple[Any, Any]:
    """(figure, axes) of one plot on the Agg canvas (no pyplot, no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def save_png(fig: Any, path: str | Path, dpi: int) -> Path:
    """Write ``fig`` as a PNG at ``path``, or at ``bench.png`` in it when it is a directory (existing, or without a
    suffix); returns the path written."""
    path = Path(path)
    if path.is_dir() or not path.suffix:
        path = path / "bench.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(str(path), dpi=dpi, format="png")
    return path


def write_plot(report: BenchReport, path: str | Path) -> Path:
    """Horizontal bars: % of copy bandwidth per case (rows) and provider (bars), written as a PNG.

    Uses the Agg canvas directly (no pyplot, no display needed). Providers that failed or were skipped have no
    bar. ``path`` may be a directory (existing, or without a suffix): the file is then ``bench.png`` in it.
    Returns the path written.
    """
    providers = report.providers
    n_cases, n_prov = len(report.results), max(1, len(providers))
    bar_h = 0.8 / n_prov
    height = min(600.0, max(3.0, 0.16 * n_cases * n_prov + 0.3 * n_cases + 1.5))
    fig, ax = new_figure(11, height)
    for j, p in enumerate(providers):
        ys, xs = [], []
        for i, r in enumerate(report.results):
            pct = pct_copy(r, p)
            if pct is not None:
                ys.append(i + (j - (n_prov - 1) / 2) * bar_h)
                xs.append(pct)
        bars = ax.barh(ys, xs, height=bar_h, label=p, color=COLORS.get(p))
        if n_cases * n_prov <= 600:
            ax.bar_label(bars, fmt="%.0f", fontsize=5, padding=1)
    ax.set_yticks(range(n_cases))
    ax.set_yticklabels([r.case.label for r in report.results],
                       fontsize=7)
    ax.set_ylim(n_cases - 0.5, -0.5)  # first case on top
    ax.axvline(100, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel(f"% of copy bandwidth ({report.copy_gbps:.0f} GB/s, bytes read + written)")
    ax.set_title(f"tritred bench: {report.device}, {PASS_TITLES.get(report.pass_, report.pass_)}", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return save_png(fig, path, dpi=100)
