"""``tritred bench``: the benchmark suite against the peers (tritred-bench), and its other modes: ``--latency``
(tiny calls, µs per call), ``--accuracy`` (relative error against float64, tritred and eager) and ``--report``
(saved runs, merged).

::

    tritred bench --quick --json out.json                 # the quick suite, tritred and eager
    tritred bench --suite training --pass both --memory   # training steps, peak memory
    tritred bench --latency                               # the latency suite: tritred vs eager, µs per call
    tritred bench --latency --graphs                      # the same as CUDA graph replays (reduce-overhead)
    tritred bench --accuracy --suite random --seed 7      # errors against float64: tritred vs eager
    tritred bench --report a.json --report b.json --markdown table.md --plot peers.png
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from ..common import (
    UsageError,
    clean_errors,
    dtype_name,
    interpreting,
    load_registry,
    make_console,
    prepare_backend,
    split_values,
)

#: Cases larger than this run for minutes or more under the Triton interpreter (bench warns).
INTERPRETER_ELEMENTS = 1 << 20
#: Most cases of one --suite random run (the cases are drawn up front).
RANDOM_MAX_COUNT = 100_000


@clean_errors
def bench_cmd(
    ops: Annotated[list[str] | None, typer.Argument(help="Only cases of these ops (default: all).")] = None,
    suite: Annotated[str | None, typer.Option(
        "--suite", help="A suite JSON file, or a built-in name: h200 (the default on CUDA), offsuite, odd, training "
        "(for --pass both), random (drawn from --seed, --count cases), quick (the default without a GPU), latency "
        "(the default of --latency).")] = None,
    peers: Annotated[str | None, typer.Option("--peers", help="Comma-separated: eager,compile,liger,flaggems,quack "
                                              "(default: all on CUDA, eager on CPU).")] = None,
    dtype: Annotated[list[str] | None, typer.Option("--dtype", "-t", help="Only cases of these dtypes.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report as JSON.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per case and provider.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="Write a PNG: % of copy bandwidth per case.")]
    = None,
    quick: Annotated[bool, typer.Option("--quick", help="The quick suite (unless --suite) and short timing.")]
    = False,
    seed: Annotated[int, typer.Option("--seed", help="Inputs of case i use seed + i; --suite random: the suite's "
                                      "seed too.")] = 0,
    warmup: Annotated[int | None, typer.Option("--warmup", help="do_bench warmup in ms (CUDA).")] = None,
    rep: Annotated[int | None, typer.Option("--rep", help="do_bench rep in ms (CUDA) / calls (CPU).")] = None,
    latency: Annotated[bool, typer.Option("--latency", help="Time tiny calls one at a time against torch eager "
                                          "(µs per call; suite `latency` unless --suite).")] = False,
    graphs: Annotated[bool, typer.Option("--graphs", help="With --latency: each side torch.compile(mode="
                                         "'reduce-overhead'), timing CUDA graph replays.")] = False,
    accuracy: Annotated[bool, typer.Option("--accuracy", help="Measure each case's relative error against float64, "
                                           "tritred and torch eager, on plain inputs and inputs far from zero "
                                           "(no timing).")] = False,
    saved: Annotated[list[Path] | None, typer.Option("--report", help="Read saved --json reports instead of "
                                                      "running (repeat to merge runs, in order).")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="With --report: write a markdown table "
                                                      "and the summary.")] = None,
    pass_: Annotated[str, typer.Option("--pass", help="forward (default), both (a training step: forward on inputs "
                                       "that require grad, then backward; gradients checked against float64) or "
                                       "backward (the step's median minus the forward's).")] = "forward",
    memory: Annotated[bool, typer.Option("--memory", help="Also measure each provider's peak extra memory during "
                                         "the timed call (CUDA only).")] = False,
    count: Annotated[int, typer.Option("--count", help="--suite random: how many cases to draw from --seed.")]
    = 100,
    first: Annotated[int, typer.Option("--first", help="--suite random: the index of the first case (a suite run "
                                       "in parts: --first 0 --count 50, then --first 50 --count 50).")] = 0,
    budget_mb: Annotated[float | None, typer.Option("--budget-mb", help="--suite random: MiB per case (input "
                                                    "storage + a same-size output; default 2048 on CUDA, 0.25 "
                                                    "under the interpreter).")] = None,
) -> None:
    """Benchmark tritred against its peers on a suite; exit 1 if tritred failed a case's correctness check or
    the device was lost (a kernel's illegal memory access: the run stops there, keeping the cases measured).

    --pass both times a training step (backward: the step minus the forward); --suite random --seed S --count N
    draws N realistic cases from seed S. --latency times tiny calls (host-bound) against torch eager instead;
    --accuracy measures the errors of tritred and eager against float64 instead of time; --report reads saved
    --json reports (several runs merged) and prints, plots or tabulates them without running anything.
    """
    prepare_backend()
    import tritred_bench as tb

    dtypes = [dtype_name(d) for d in split_values(dtype)]  # (torch's aliases too: half, float, double)
    if saved:
        show_saved_reports(list(saved), list(ops or []) or None, dtypes or None, markdown_out,
                                  json_out, csv_out, plot_out, make_console())
        return
    if markdown_out is not None:
        raise UsageError("--markdown needs --report (the saved reports to tabulate)")
    on_cuda = not interpreting()
    if pass_ not in tb.PASSES:
        raise UsageError(f"--pass must be one of {', '.join(tb.PASSES)}, not {pass_!r}")
    if suite is None:
        suite = "latency" if latency else "quick" if quick or not on_cuda else "h200"
    input_seed = seed
    if suite == "random":
        if count < 1 or first < 0:
            raise UsageError("--count must be at least 1 and --first at least 0")
        if count > RANDOM_MAX_COUNT:
            raise UsageError(f"--count {count}: at most {RANDOM_MAX_COUNT} cases a run (--first F --count N runs a "
                             "seed's cases in parts)")
        if budget_mb is not None and not 0 < budget_mb < math.inf:
            raise UsageError(f"--budget-mb must be a positive number, not {budget_mb}")
        from tritred_bench.random_suite import DTYPES, random_name

        reg = load_registry()
        specs = [reg.get(name).spec for name in ops or []]  # (an unknown op: a usage error naming the known ones)
        for dt in dtypes:
            refused = [spec.name for spec in specs if dt not in spec.dtypes]
            if dt not in DTYPES + ("float64",) or refused:
                raise UsageError(f"--dtype {dt!r}: the random suite draws {', '.join(DTYPES)} or float64"
                                 + (f", and {', '.join(refused)} does not take it" if refused else ""))

        budget = None if budget_mb is None else int(budget_mb * 2**20)
        cases, _about = tb.load_suite("random", seed=seed, count=count, ops=list(ops or []) or None,
                                      dtypes=dtypes or None, budget=budget,
                                      device="cuda" if on_cuda else "cpu", first=first)
        suite = random_name(seed, count, first)
        input_seed = seed + first  # case i's inputs use seed + i, whichever part of the suite it runs in
    else:
        cases, _about = tb.load_suite(suite)
    cases = tb.filter_cases(cases, ops=list(ops or []) or None, dtypes=dtypes or None)
    if not cases:
        raise UsageError(f"no case of suite {suite!r} matches ops={ops or 'all'} dtypes={dtype or 'all'}")
    if graphs and not latency:
        raise UsageError("--graphs times CUDA graph replays of the latency mode: it needs --latency")
    if accuracy:
        if latency or pass_ != "forward" or memory or peers or csv_out or plot_out:
            raise UsageError("--accuracy compares the forward's errors of tritred and torch eager and writes --json "
                             "only; --latency, --pass, --memory, --peers, --csv and --plot do not apply")
        status = run_accuracy(cases, "cuda" if on_cuda else "cpu", input_seed, json_out, make_console())
        if status:
            raise typer.Exit(status)
        return
    if latency:
        if pass_ != "forward" or memory:
            raise UsageError("--latency times the forward call; --pass and --memory do not apply")
        if peers or csv_out or plot_out:
            raise UsageError("--latency compares tritred with torch eager and writes --json only")
        if not on_cuda:
            make_console().print("[yellow]no CUDA: running under the Triton interpreter on CPU (times are not "
                             "meaningful)[/]", markup=True)
        status = run_latency(cases, "cuda" if on_cuda else "cpu", quick, seed, json_out, make_console(), graphs)
        if status:
            raise typer.Exit(status)
        return
    outputs = [out for out in (json_out, csv_out, plot_out) if out is not None]
    for out in outputs:
        if out.is_dir():
            raise UsageError(f"{out} is a directory: --json, --csv and --plot take file paths")
    if len({out.resolve() for out in outputs}) < len(outputs):
        raise UsageError("--json, --csv and --plot must be different files")
    providers = split_values([peers]) if peers else (list(tb.PEERS) if on_cuda else ["eager"])
    for p in providers:
        if p not in tb.PROVIDERS:
            raise UsageError(f"unknown peer {p!r}; known: {', '.join(tb.PEERS)}")
    con = make_console()
    if not on_cuda:
        con.print("[yellow]no CUDA: running under the Triton interpreter on CPU (times are not meaningful)[/]",
                  markup=True)
        biggest = max(math.prod(c.shape) for c in cases)
        if biggest > INTERPRETER_ELEMENTS:
            con.print(f"[yellow]the largest case has {biggest:,} elements: under the interpreter expect minutes to "
                      "hours per case (--quick, or a suite of small shapes, runs in seconds)[/]", markup=True)
    if memory and not on_cuda:
        con.print("[yellow]--memory measures CUDA memory: not measured under the interpreter[/]", markup=True)
    report = tb.run(cases, providers=providers, device="cuda" if on_cuda else "cpu", quick=quick, seed=input_seed,
                    console=con, suite=str(suite), warmup=warmup, rep=rep, pass_=pass_, memory=memory,
                    on_case=None if json_out is None else partial(_save_so_far, json_out))
    tb.print_report(report, console=con)
    for path, writer in ((json_out, tb.write_json), (csv_out, tb.write_csv), (plot_out, tb.write_plot)):
        if path is not None:
            con.print(f"wrote {writer(report, path)}")
    if report.stopped or any(r.measurements.get("tritred") is not None and r.measurements["tritred"].status == "failed"
                             for r in report.results):
        raise typer.Exit(1)


def _save_so_far(path: Path, report: Any, total: int) -> None:
    """The ``--json`` report after each case, marked as cut short until the run ends and writes it whole: a run
    killed by a time limit (``timeout``, a batch job's) keeps the cases it measured, and says so in ``stopped``."""
    import tritred_bench as tb

    done = len(report.results)
    if done < total and not report.stopped:  # (a copy says so; the run's own report stays as it is)
        report = dataclasses.replace(report, stopped=f"the run had measured {done} of {total} cases when this "
                                     "report was written; it did not finish")
    tb.write_json(report, path)


def run_latency(cases: list[Any], device: str, quick: bool, seed: int, json_out: Path | None, console: Any,
                graphs: bool = False) -> int:
    """Measure and print the latency of ``cases`` (``graphs``: as CUDA graph replays); write JSON when asked.
    Returns the exit status (1: a case failed its correctness check or did not run)."""
    from tritred_bench.latency import measure_latency, print_latency, write_latency_json

    report = measure_latency(cases, device=device, quick=quick, seed=seed, graphs=graphs)
    print_latency(report, console=console)
    if json_out is not None:
        console.print(f"wrote {write_latency_json(report, json_out)}")
    return 1 if any(r.message for r in report.results) else 0


def run_accuracy(cases: list[Any], device: str, seed: int, json_out: Path | None, console: Any) -> int:
    """Measure and print the errors of ``cases`` against float64; write JSON when asked. Returns the exit status
    (1: a case did not run)."""
    from tritred_bench.accuracy import measure_accuracy, print_accuracy, write_accuracy_json

    report = measure_accuracy(cases, device=device, seed=seed)
    print_accuracy(report, console=console)
    if json_out is not None:
        console.print(f"wrote {write_accuracy_json(report, json_out)}")
    return 1 if any(r.message for r in report.results) else 0


def show_saved_reports(paths: list[Path], ops: list[str] | None, dtypes: list[str] | None, markdown_out: Path | None,
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
