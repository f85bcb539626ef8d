"""``tritred check``: each reduction against its torch reference (float64), with edge cases; exit 1 on a
mismatch."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..common import UsageError, clean_errors, dtype_name, interpreting, load_registry, make_console, split_values


@clean_errors
def check_cmd(
    ops: Annotated[list[str] | None, typer.Argument(help="Reductions to check (default: all).")] = None,
    dtype: Annotated[list[str] | None, typer.Option("--dtype", "-t", help="Dtypes (repeat or comma-separate).")]
    = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, max=2**62, help="Base seed: check i of each op "
                                              "uses seed + i (default: a fresh one, printed with any failure).")]
    = None,
    full: Annotated[bool, typer.Option("--full/--quick", help="--full: every dtype of each spec on six shapes "
                                       "(on CUDA each dtype/layout compiles its kernels: minutes; on the CPU "
                                       "interpreter 10+ minutes for all ops on two cores); --quick (default, the "
                                       "CPU check): float32 and bfloat16 on four small shapes.")] = False,
    case: Annotated[list[str] | None, typer.Option("--case", help="Cases to run (random, strided, offset, nan, "
                                                   "inf); default all.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="List every check, not only the failures.")] = False,
) -> None:
    """Check each reduction against its torch reference (float64), with edge cases; exit 1 on any mismatch."""
    reg = load_registry()
    names = list(ops or [])
    if names:
        for n in names:
            reg.get(n)  # UnknownReductionError -> exit 2
    else:
        names = list(reg.reductions(strict=False))
        if not names:
            errors = "; ".join(f"{p.name}: {p.error}" for p in reg.plugins() if p.error)
            raise UsageError("no reductions are registered" + (f" (plugin errors: {errors})" if errors else ""))
    from tritred_ops import testing

    device = "cpu" if interpreting() else "cuda"
    dtypes = [dtype_name(d) for d in split_values(dtype)]
    for d in dtypes:  # a dtype no selected op takes would check nothing and pass: a usage error instead
        if not any(d in reg.get(n).spec.dtypes for n in names):
            raise UsageError(f"no reduction of {', '.join(names)} supports --dtype {d!r}")
    shapes = testing.DEFAULT_SHAPES if full else testing.QUICK_SHAPES
    cases = split_values(case) or None
    if cases:
        bad = set(cases) - set(testing.CASES)
        if bad:
            raise UsageError(f"unknown --case {sorted(bad)}; known: {', '.join(testing.CASES)}")
    con = make_console()
    results: list[Any] = []
    if seed is None:  # drawn here, not per op, so that a failure names the --seed that reproduces it
        seed = testing.fresh_seed()
    from rich.progress import Progress

    with Progress(console=con, transient=True) as bar:
        task = bar.add_task("checking", total=len(names))
        for n in names:
            rec = reg.get(n)
            bar.update(task, description=f"checking {n}")
            want = dtypes or ([d for d in rec.spec.dtypes if d in ("float32", "bfloat16")] if not full else None)
            if want == []:  # an op without float32/bfloat16 (e.g. integer-only): its first dtype
                want = [rec.spec.dtypes[0]]
            results.extend(testing.check_reduction(rec, device, dtypes=want, shapes=shapes, seed=seed,
                                                   cases=cases))
            bar.advance(task)
    _print_check(results, con, show_all, device, full)
    if any(not r.ok for r in results):
        failing = dict.fromkeys(r.op for r in results if not r.ok)
        flags = "".join([" --full" if full else "", *(f" --dtype {d}" for d in dtypes),
                         *(f" --case {c}" for c in cases or [])])
        con.print(f"rerun the failing checks with: tritred check {' '.join(failing)} --seed {seed}{flags}",
                  markup=False, soft_wrap=True)
        raise typer.Exit(1)


def _print_check(results: list[Any], con: Console, show_all: bool, device: str, full: bool) -> None:
    summary = Table(title=f"tritred check on {device} ({'full' if full else 'quick'})")
    for col in ("op", "dtype", "passed", "skipped", "worst abs err", "status"):
        summary.add_column(col, no_wrap=True, justify="right" if col in ("passed", "skipped") else "left")
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in results:
        groups.setdefault((r.op, r.dtype), []).append(r)
    for (op, dt), rs in groups.items():
        run = [r for r in rs if not r.skipped]
        passed = sum(r.ok for r in run)
        worst = max((r.max_abs_err for r in run if r.max_abs_err == r.max_abs_err), default=0.0)  # (failed too)
        status = "[green]ok[/]" if passed == len(run) else "[red]FAIL[/]"
        if not run:
            status = "[dim]skipped[/]"
        summary.add_row(op, dt, f"{passed}/{len(run)}", str(len(rs) - len(run)), f"{worst:.3g}", status)
    summary.caption = ("a check passes when every element is within atol + rtol * |reference| (float64 "
                       "reference; tolerances of the output dtype's rounding): the worst absolute error of a large "
                       "bf16 sum or product, or of bf16 values near 1000 (the offset case: one bf16 step is 4), is "
                       "large and still within them")
    con.print(summary)
    if show_all:
        for r in results:
            verdict = "[dim]skip[/]" if r.skipped else "[green]ok[/]  " if r.ok else "[red]FAIL[/]"
            con.print(f"{verdict} {_check_label(r)}: {_check_detail(r)}", markup=True, soft_wrap=True)
    else:  # failures, one line per (op, dtype, error): the first check of each group reproduces it
        seen: dict[tuple[str, str, str], list[Any]] = {}
        for r in results:
            if not r.ok:
                seen.setdefault((r.op, r.dtype, _check_detail(r)), []).append(r)
        for (_, _, detail), rs in seen.items():
            more = f" [dim](and {len(rs) - 1} more checks)[/]" if len(rs) > 1 else ""
            con.print(f"[red]FAIL[/] {_check_label(rs[0])}: {detail}{more}", markup=True, soft_wrap=True)
    failed = sum(not r.ok for r in results)
    total = sum(not r.skipped for r in results)
    con.print(f"[{'red' if failed else 'green'}]{total - failed}/{total} checks passed[/]", markup=True)


def _check_label(r: Any) -> str:
    shape = "x".join(map(str, r.shape)) or "scalar"
    return f"{r.op} {r.dtype} {shape} dim={r.dim} case={r.case} seed={r.seed}"


def _check_detail(r: Any) -> str:
    text = " ".join(x for x in (r.error or "", r.message) if x) or "ok"
    text = " ".join(text.split())  # one line
    return escape(text if len(text) <= 400 else text[:400] + "...")

