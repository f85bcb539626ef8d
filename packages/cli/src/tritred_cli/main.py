"""The ``tritred`` command.

::

    tritred list                          # every registered reduction
    tritred plugins                       # plugins, their hooks, versions and load errors
    tritred explain softmax --shape 4096x32768 --dtype bfloat16 --device h200
    tritred check softmax sum             # each op against its torch reference (exit 1 on a mismatch)
    tritred bench --quick --json out.json # the benchmark suite (tritred-bench)
    tritred tune softmax --shape 4096x32768 --dtype bfloat16   # time configs here, store the fastest

Nothing heavy is imported at module level: the registry loads ``tritred_ops`` (and torch) through the
``tritred`` entry points when a command needs them, after :func:`prepare_backend` has set ``TRITON_INTERPRET=1``
on machines without CUDA. Usage errors (unknown op, bad shape...) print one line and exit with status 2.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tritred_core import Registry, RegistryError, get_registry

log = logging.getLogger("tritred.cli")

app = typer.Typer(
    name="tritred",
    help="Triton reduction kernels that mirror torch: list, explain, check and benchmark them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

F = TypeVar("F", bound=Callable[..., Any])

#: Short dtype names for tables.
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "bool": "bool", "uint8": "u8",
          "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}


class UsageError(Exception):
    """A user mistake: printed as one line, exit status 2."""


#: Cases larger than this run for minutes or more under the Triton interpreter (bench warns).
_INTERPRETER_ELEMENTS = 1 << 20

#: Width of tables written to a file or a pipe (rich's default there, 80 columns, clips the bench and tune
#: tables); a positive ``COLUMNS`` still sets it.
_PIPE_WIDTH = 200


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    columns = os.environ.get("COLUMNS", "")
    if not (columns.isdigit() and int(columns) > 0):  # unset or unusable (rich takes 0 and prints nothing)
        if not console.is_terminal:
            console.width = _PIPE_WIDTH
        elif console.width <= 0:
            console.width = 80
    return console


def _clean_errors(fn: F) -> F:
    """Turn usage errors (unknown op, bad option values, missing files) into one line and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except (UsageError, RegistryError, ValueError, FileNotFoundError) as e:
            _console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", markup=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def prepare_backend() -> None:
    """Set ``TRITON_INTERPRET=1`` when there is no CUDA device, before anything imports ``tritred_ops``.

    Left alone when the variable is already set (either way). Imports torch (which tritred_ops needs anyway).
    """
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        if "tritred_ops" in sys.modules:
            log.warning("tritred_ops was imported before TRITON_INTERPRET=1 could be set: CPU runs will fail")
        os.environ["TRITON_INTERPRET"] = "1"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _registry() -> Registry:
    prepare_backend()
    return get_registry()


def _split(values: list[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    out: list[str] = []
    for v in values or ():
        out.extend(s.strip() for s in v.split(",") if s.strip())
    return out


def _dtype_list(dtypes: tuple[str, ...]) -> str:
    return ",".join(_SHORT.get(d, d) for d in dtypes)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages (tritred.*).")] = False,
         ) -> None:
    """tritred: Triton reduction kernels that mirror torch."""
    level = logging.DEBUG if verbose else logging.WARNING
    from rich.logging import RichHandler

    handler = RichHandler(console=_console(stderr=True), show_time=False, show_path=False)
    logger = logging.getLogger("tritred")
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False


# -- list / plugins ------------------------------------------------------------------------------------------------

@app.command("list")
@_clean_errors
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
             ) -> None:
    """Every registered reduction: name, family, mirrored torch op, dtypes, the strategies its kernels implement
    and the plugin providing it."""
    reg = _registry()
    reds = reg.reductions(strict=False)
    if as_json:
        typer.echo(json.dumps([r.spec.model_dump() for r in reds.values()], indent=1))
        return
    table = Table(title=f"{len(reds)} reductions")
    for col in ("name", "family", "mirrors", "dtypes", "strategies", "plugin", "version"):
        table.add_column(col, no_wrap=col in ("name", "plugin"), overflow="fold")
    for name, rec in reds.items():
        s = rec.spec
        table.add_row(name, s.family, s.mirrors, _dtype_list(s.dtypes), ", ".join(s.strategies), s.plugin or "?",
                      s.version or "?")
    con = _console()
    con.print(table)
    _print_load_errors(reg, con)


def _print_load_errors(reg: Registry, con: Console) -> None:
    for p in reg.plugins():
        if p.error:
            con.print(f"[yellow]plugin {p.name} failed:[/] {escape(p.error)}", markup=True)


@app.command("plugins")
@_clean_errors
def plugins_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
                ) -> None:
    """Every plugin the registry knows: version, implemented hooks, and the error of those that failed."""
    reg = _registry()
    infos = reg.plugins()
    if as_json:
        typer.echo(json.dumps([p.model_dump() for p in infos], indent=1))
        return
    table = Table(title=f"{len(infos)} plugins")
    table.add_column("name", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("hooks")
    table.add_column("status")
    for p in infos:
        status = f"[red]error: {escape(p.error)}[/]" if p.error else "[green]ok[/]"
        table.add_row(p.name, p.version or "-", ", ".join(p.hooks) or "-", status)
    _console().print(table)


# -- explain -------------------------------------------------------------------------------------------------------

def parse_shape(text: str) -> tuple[int, ...]:
    """``4096x32768`` (or ``4096,32768``; ``scalar`` or ``""`` for 0-d) -> ``(4096, 32768)``."""
    t = text.strip().lower()
    if t in ("", "scalar", "()"):
        return ()
    parts = t.replace(",", "x").replace("*", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(f"bad --shape {text!r}: expected sizes like 4096x32768") from None
    if any(s < 0 for s in shape):
        raise UsageError(f"bad --shape {text!r}: sizes must be >= 0")
    return shape


def parse_dim(text: str) -> int | tuple[int, ...] | None:
    """``-1`` -> -1, ``0,1`` -> (0, 1), ``none``/``all`` -> None (every dim)."""
    t = text.strip().lower()
    if t in ("none", "all", ""):
        return None
    try:
        if "," in t:
            return tuple(int(p) for p in t.split(",") if p.strip())
        return int(t)
    except ValueError:
        raise UsageError(f"bad --dim {text!r}: expected an int, a comma-separated list or 'none'") from None


def _device_info(device: str) -> Any:
    """The DeviceInfo to plan for: ``h200`` (``tritred_core.testing.FAKE_H200``), ``cuda`` (the real GPU) or ``cpu``
    (the Triton interpreter), the latter two as ``tritred_ops.runtime.device_info`` reads them."""
    from tritred_core.testing import FAKE_H200

    d = device.lower()
    if d == "h200":
        return FAKE_H200
    if d == "auto":
        import torch

        d = "cuda" if torch.cuda.is_available() else "cpu"
    if d.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device here (use --device h200 to plan for an H200)")
        from tritred_ops.runtime import device_info

        return device_info(torch.device(d))
    if d in ("cpu", "interpreter"):
        import torch
        from tritred_ops.runtime import device_info

        return device_info(torch.device("cpu"))  # what the ops plan with under the interpreter
    raise UsageError(f"bad --device {device!r}: expected auto, cuda, cpu or h200")


def _fields_table(title: str, obj: Any, extra: dict[str, Any] | None = None) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    data = obj.model_dump() if hasattr(obj, "model_dump") else dict(obj)
    data.update(extra or {})
    for k, v in data.items():
        table.add_row(str(k), str(v))
    return table


@app.command("explain")
@_clean_errors
def explain_cmd(
    op: Annotated[str, typer.Argument(help="Reduction name (see `tritred list`).")],
    shape: Annotated[str, typer.Option("--shape", "-s", help="Input shape, e.g. 4096x32768.")] = "4096x32768",
    dtype: Annotated[str, typer.Option("--dtype", "-t", help="Input dtype, e.g. bfloat16.")] = "float32",
    dim: Annotated[str | None, typer.Option(
        "--dim", "-d", help="Reduced dim: int, 0,1 or none (default -1; not for normalize ops).")] = None,
    device: Annotated[str, typer.Option(
        "--device", help="auto, cuda, cpu (interpreter) or h200 (a fake H200: the GPU's decision on any machine).")]
    = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """How OP would run: its canonical Problem, the device, and the LaunchConfig the plugins decide (and who).

    Inputs are meta tensors (no memory, no kernel launch), so any shape works on any machine. With --json, a
    built-in op also lists every launch decision and kernel launch of the call (its host path run on the meta
    tensors, nothing launched).
    """
    reg = _registry()
    rec = reg.get(op)
    import torch

    dt = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise UsageError(f"bad --dtype {dtype!r}: expected a torch dtype name like bfloat16")
    if dtype.removeprefix("torch.") not in rec.spec.dtypes:
        raise UsageError(f"{op} does not support {dtype}; supported: {', '.join(rec.spec.dtypes)}")
    normalize = rec.spec.family == "normalize"
    if normalize and dim is not None:  # (their dims come from the op: normalized_shape, channels)
        raise UsageError(f"--dim does not apply to {op}: a normalize op takes its dims from its own arguments")
    shp, d = parse_shape(shape), parse_dim("-1" if dim is None else dim)
    try:
        args, kwargs = rec.make_inputs(shp, dt, device="meta", dim=d)
        problem = rec.problem(*args, **kwargs)
    except (IndexError, RuntimeError, TypeError, ValueError) as e:
        raise UsageError(f"{op} rejects shape {shape} dim={dim}: {e}") from None
    info = _device_info(device)
    config = reg.launch_config(rec.spec, problem, info)
    nbytes = None
    if rec.byte_count is not None:
        try:
            nbytes = rec.byte_count(*args, **kwargs)
        except Exception as e:  # informational
            log.debug("byte_count failed: %s", e)
    if as_json:
        report = {"op": op, "shape": list(shp), "dtype": dtype, "dim": None if normalize else d,
                  "spec": rec.spec.model_dump(), "problem": problem.model_dump(), "device": info.model_dump(),
                  "config": config.model_dump(), "bytes": nbytes}
        if rec.spec.plugin == "tritred_ops":
            report.update(_call_trace(rec, args, kwargs, info))
        typer.echo(json.dumps(report, indent=1, default=str))
        return
    con = _console()
    con.print(f"[bold]{op}[/] ({rec.spec.mirrors}) from plugin [bold]{rec.spec.plugin}[/] {rec.spec.version or ''}"
              f"\ncall: shape {shp}, dtype {dtype}" + ("" if normalize else f", dim {d}")
              + (f", {nbytes / 1e6:.4g} MB moved" if nbytes else ""),
              markup=True)
    if op == "batch_norm":  # (its Problem maps the channels to K: statistics over batch and spatial, per channel)
        con.print(_fields_table("Problem (batch_norm: M = batch, N = spatial, K = channels; statistics over M and "
                                "N, one per channel)", problem, {"channels (K)": problem.K}))
    else:
        con.print(_fields_table("Problem (input viewed as M x N x K, reduced over N)", problem,
                                {"outputs (M*K)": problem.outputs, "inner (row kernels)": problem.inner}))
    con.print(_fields_table("DeviceInfo", info))
    con.print(_fields_table("LaunchConfig", config))
    tuned = "tuned (from a tuning cache)" if config.tuned else "not tuned (heuristic)"
    con.print(f"decided by plugin [bold]{config.decided_by}[/]; {tuned}", markup=True)
    kept = _kept_outputs(shp, d) if rec.spec.family in ("reduce", "statistics") else None
    if kept is not None and problem.layout == "strided" and problem.outputs != kept:
        if rec.spec.family == "statistics":
            con.print(f"the call's {kept} outputs each merge {problem.outputs // kept} partials (its reduced dims "
                      "make two strided axes): the rows above are one per output and outer slice (docs/api.md)")
        else:
            con.print(f"the call's {kept} outputs come in stages (its reduced dims are not one strided axis): this "
                      "is the first, over the whole input, into a temporary (docs/api.md)")


def _call_trace(rec: Any, args: Any, kwargs: dict[str, Any], info: Any) -> dict[str, Any]:
    """Every launch decision and kernel launch of a built-in op's call on ``info`` (meta tensors, nothing launched;
    ``tritred_ops.runtime.trace.explain``), or the error the call raised on the way."""
    from tritred_ops.runtime.trace import explain

    try:
        trace = explain(rec.impl, *args, device=info, **kwargs)
    except Exception as e:  # informational: the Problem and config above stand
        return {"trace_error": f"{type(e).__name__}: {e}"}
    return {"decisions": [{"op": dec.spec.name, "problem": dec.problem.model_dump(),
                           "config": dec.config.model_dump() if dec.config is not None else None}
                          for dec in trace.decisions],
            "launches": [{"kernel": launch.kernel, "grid": list(launch.grid), "args": list(launch.args),
                          "kwargs": launch.kwargs} for launch in trace.launches]}


def _kept_outputs(shape: tuple[int, ...], dim: Any) -> int | None:
    """Outputs of a reduction of ``shape`` over ``dim`` (None when dim is not a plain int or tuple of ints)."""
    if dim is None:
        return 1
    dims = (dim,) if isinstance(dim, int) else dim
    if not isinstance(dims, tuple) or not all(isinstance(x, int) for x in dims):
        return None
    wrapped = {x % len(shape) for x in dims} if shape else set()
    return math.prod(size for i, size in enumerate(shape) if i not in wrapped)


@app.command("tune")
@_clean_errors
def tune_cmd(
    op: Annotated[str, typer.Argument(help="Reduction name (see `tritred list`).")],
    shape: Annotated[str, typer.Option("--shape", "-s", help="Input shape, e.g. 4096x32768.")],
    dtype: Annotated[str, typer.Option("--dtype", "-t", help="Input dtype, e.g. bfloat16.")] = "float32",
    dim: Annotated[str, typer.Option("--dim", "-d", help="Reduced dim: int, 0,1 or none.")] = "-1",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Time the candidates, store nothing.")] = False,
) -> None:
    """Time launch configs for one call of OP on this device and store the fastest in the tuning cache.

    The cache ($TRITRED_TUNE_CACHE, else ~/.cache/tritred/tuning.json) is keyed by device, triton version, op,
    dtype and shape bucket; tritred's built-in launch rules use its entries first, and `tritred explain` says so.
    Only built-in reductions are tuned (a plugin decides its own configs). Without CUDA the candidates run under
    the interpreter: the mechanism works, the timings mean nothing.
    """
    prepare_backend()
    reg = _registry()
    rec = reg.get(op)
    if rec.spec.plugin != "tritred_ops":
        raise UsageError(f"{op} comes from plugin {rec.spec.plugin}: only tritred's own reductions are tuned")
    import torch
    from tritred_ops import tuning

    dt = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype) or dtype.removeprefix("torch.") not in rec.spec.dtypes:
        raise UsageError(f"bad --dtype {dtype!r} for {op}; supported: {', '.join(rec.spec.dtypes)}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem, trials, best = tuning.tune(rec, parse_shape(shape), dt, parse_dim(dim), device, save=not dry_run)
    con = _console()
    table = Table(title=f"tritred tune {op} {shape} {dtype} on {device} ({tuning.shape_bucket(problem)})")
    for col in ("strategy", "BLOCK_M", "BLOCK_N", "BLOCK_K", "warps", "stages", "programs", "split", "threads/row",
                "ms", ""):
        table.add_column(col, justify="right" if col not in ("strategy", "") else "left", no_wrap=col == "strategy",
                         min_width=len("single_pass") if col == "strategy" else None)
    for t in trials:
        c = t.config
        table.add_row(c.strategy, str(c.BLOCK_M), f"{c.BLOCK_N}+{c.BLOCK_TAIL}" if c.BLOCK_TAIL else str(c.BLOCK_N),
                      str(c.BLOCK_K), str(c.num_warps),
                      str(c.num_stages), str(c.num_programs), str(c.split), str(c.threads_per_row or "-"),
                      f"{t.ms:.4f}" if t.ms is not None else escape(t.error or "?"),
                      "current" if t.current else "")
    con.print(table)
    if best is None:
        raise UsageError("no candidate ran correctly: nothing stored")
    where = "not stored (--dry-run)" if dry_run else f"stored in {tuning.cache_path()}"
    con.print(f"best: {best.strategy} BLOCK_M={best.BLOCK_M} BLOCK_N={best.BLOCK_N} BLOCK_TAIL={best.BLOCK_TAIL} "
              f"BLOCK_K={best.BLOCK_K} "
              f"num_warps={best.num_warps} num_stages={best.num_stages} num_programs={best.num_programs} "
              f"split={best.split} threads_per_row={best.threads_per_row}; {where}")


# -- check ---------------------------------------------------------------------------------------------------------

@app.command("check")
@_clean_errors
def check_cmd(
    ops: Annotated[list[str] | None, typer.Argument(help="Reductions to check (default: all).")] = None,
    dtype: Annotated[list[str] | None, typer.Option("--dtype", "-t", help="Dtypes (repeat or comma-separate).")]
    = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Base seed: check i of each op uses seed + i "
                                              "(default: a fresh one, printed with any failure).")] = None,
    full: Annotated[bool, typer.Option("--full/--quick", help="--full: every dtype of each spec on five shapes "
                                       "(on CUDA each dtype/layout compiles its kernels: minutes); --quick "
                                       "(default): float32 and bfloat16 on three small shapes.")] = False,
    case: Annotated[list[str] | None, typer.Option("--case", help="Cases to run (random, strided, offset, nan, "
                                                   "inf); default all.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="List every check, not only the failures.")] = False,
) -> None:
    """Check each reduction against its torch reference (float64), with edge cases; exit 1 on any mismatch."""
    reg = _registry()
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

    device = "cpu" if _interpreting() else "cuda"
    dtypes = _split(dtype)
    for d in dtypes:  # a dtype no selected op takes would check nothing and pass: a usage error instead
        if not any(d.removeprefix("torch.") in reg.get(n).spec.dtypes for n in names):
            raise UsageError(f"no reduction of {', '.join(names)} supports --dtype {d!r}")
    dtypes = [d.removeprefix("torch.") for d in dtypes]
    shapes = testing.DEFAULT_SHAPES if full else testing.QUICK_SHAPES
    cases = _split(case) or None
    if cases:
        bad = set(cases) - set(testing.CASES)
        if bad:
            raise UsageError(f"unknown --case {sorted(bad)}; known: {', '.join(testing.CASES)}")
    con = _console()
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


# -- bench ---------------------------------------------------------------------------------------------------------

@app.command("bench")
@_clean_errors
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
    """Benchmark tritred against its peers on a suite; exit 1 if tritred failed a case's correctness check.

    --pass both times a training step (backward: the step minus the forward); --suite random --seed S --count N
    draws N realistic cases from seed S. --latency times tiny calls (host-bound) against torch eager instead;
    --report reads saved --json reports (several runs merged) and prints, plots or tabulates them without running
    anything.
    """
    prepare_backend()
    import tritred_bench as tb

    from . import bench_modes

    if saved:
        bench_modes.saved_reports(list(saved), list(ops or []) or None, _split(dtype) or None, markdown_out,
                                  json_out, csv_out, plot_out, _console())
        return
    if markdown_out is not None:
        raise UsageError("--markdown needs --report (the saved reports to tabulate)")
    on_cuda = not _interpreting()
    if pass_ not in tb.PASSES:
        raise UsageError(f"--pass must be one of {', '.join(tb.PASSES)}, not {pass_!r}")
    if suite is None:
        suite = "latency" if latency else "quick" if quick or not on_cuda else "h200"
    input_seed = seed
    if suite == "random":
        if count < 1 or first < 0:
            raise UsageError("--count must be at least 1 and --first at least 0")
        from tritred_bench.random_suite import random_name

        budget = None if budget_mb is None else int(budget_mb * 2**20)
        cases, _about = tb.load_suite("random", seed=seed, count=count, ops=list(ops or []) or None,
                                      dtypes=_split(dtype) or None, budget=budget, device="cuda" if on_cuda else "cpu",
                                      first=first)
        suite = random_name(seed, count, first)
        input_seed = seed + first  # case i's inputs use seed + i, whichever part of the suite it runs in
    else:
        cases, _about = tb.load_suite(suite)
    cases = tb.filter_cases(cases, ops=list(ops or []) or None, dtypes=_split(dtype) or None)
    if not cases:
        raise UsageError(f"no case of suite {suite!r} matches ops={ops or 'all'} dtypes={dtype or 'all'}")
    if latency:
        if pass_ != "forward" or memory:
            raise UsageError("--latency times the forward call; --pass and --memory do not apply")
        if peers or csv_out or plot_out:
            raise UsageError("--latency compares tritred with torch eager and writes --json only")
        if not on_cuda:
            _console().print("[yellow]no CUDA: running under the Triton interpreter on CPU (times are not "
                             "meaningful)[/]", markup=True)
        status = bench_modes.latency(cases, "cuda" if on_cuda else "cpu", quick, seed, json_out, _console())
        if status:
            raise typer.Exit(status)
        return
    providers = _split([peers]) if peers else (list(tb.PEERS) if on_cuda else ["eager"])
    for p in providers:
        if p not in tb.PROVIDERS:
            raise UsageError(f"unknown peer {p!r}; known: {', '.join(tb.PEERS)}")
    con = _console()
    if not on_cuda:
        con.print("[yellow]no CUDA: running under the Triton interpreter on CPU (times are not meaningful)[/]",
                  markup=True)
        biggest = max(math.prod(c.shape) for c in cases)
        if biggest > _INTERPRETER_ELEMENTS:
            con.print(f"[yellow]the largest case has {biggest:,} elements: under the interpreter expect minutes to "
                      "hours per case (--quick, or a suite of small shapes, runs in seconds)[/]", markup=True)
    if memory and not on_cuda:
        con.print("[yellow]--memory measures CUDA memory: not measured under the interpreter[/]", markup=True)
    report = tb.run(cases, providers=providers, device="cuda" if on_cuda else "cpu", quick=quick, seed=input_seed,
                    console=con, suite=str(suite), warmup=warmup, rep=rep, pass_=pass_, memory=memory)
    tb.print_report(report, console=con)
    for path, writer in ((json_out, tb.write_json), (csv_out, tb.write_csv), (plot_out, tb.write_plot)):
        if path is not None:
            con.print(f"wrote {writer(report, path)}")
    if any(r.measurements.get("tritred") is not None and r.measurements["tritred"].status == "failed"
           for r in report.results):
        raise typer.Exit(1)


def run() -> None:
    """Entry point for ``python -m tritred_cli``."""
    app()


if __name__ == "__main__":
    run()
