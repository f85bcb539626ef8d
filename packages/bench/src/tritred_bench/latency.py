"""Latency of tiny calls: the host time of one call, tritred against torch eager.

On tiny inputs a call's time is its host path (argument checks, the launch decision or the replayed plan, the
allocation and the launch), not the kernel. Each op is called many times in a row and the wall time is divided
by the number of calls, synchronizing once per batch of calls (so that the GPU's queue does not grow without
bound and the last kernels are counted). tritred and eager are measured in alternation, several rounds, and
each side's median over the rounds is kept: the host's speed drifts over a run, the ratio of medians much less.
Compare ratios within a run; times move with the host machine.

With ``graphs=True`` (``tritred bench --latency --graphs``) each side is ``torch.compile(fn, mode="reduce-overhead")``
instead: on CUDA every timed call is a CUDA graph replay (``torch.compiler.cudagraph_mark_step_begin()`` before
each; the inputs marked static, so no replay copies them), so what is compared is the replayed graphs: tritred's
registered ops (opaque to Inductor) against the same function of torch's ops as Inductor compiles them, with no host
path in either. Goal: tritred's graph no slower. (A case that mutates an input, batch_norm training's running
statistics, is compiled but not graphed: Inductor's cudagraphs skip mutated inputs.)

Under the CPU interpreter the counts are tiny (one round, a couple of calls): the machinery runs and a test can
check it, the numbers mean nothing.

::

    from tritred_bench import load_suite, measure_latency, print_latency
    cases, _ = load_suite("latency")
    print_latency(measure_latency(cases))
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from tritred_core import Registry, get_registry

from .checks import check_output
from .inputs import build_inputs, clone_inputs
from .providers import get_provider
from .suites import Case
from .timing import device_name, no_gc, one_cpu_thread, select_device, sync

#: (rounds, batches per round, calls per batch, warm-up calls) per device type and mode.
LATENCY_COUNTS: dict[str, dict[str, tuple[int, int, int, int]]] = {
    "cuda": {"full": (9, 5, 100, 20), "quick": (3, 3, 100, 20)},
    "cpu": {"full": (1, 1, 2, 1), "quick": (1, 1, 1, 1)},
}


@dataclass
class LatencyResult:
    """One case: microseconds per call of tritred and of eager (None when it failed: see ``message``)."""

    case: Case
    tritred_us: float | None = None
    eager_us: float | None = None
    message: str = ""

    @property
    def ratio(self) -> float | None:
        """tritred's time over eager's (< 1: tritred's call is shorter)."""
        if self.tritred_us is None or not self.eager_us:
            return None
        return self.tritred_us / self.eager_us

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"label": self.case.label, "case": self.case.to_dict(), "tritred_us": self.tritred_us,
                "eager_us": self.eager_us, "ratio": self.ratio, "message": self.message}


@dataclass
class LatencyReport:
    """A latency run: where, how (the counts), and one result per case."""

    device: str
    backend: str
    rounds: int
    batches: int
    calls: int
    warmup: int
    results: list[LatencyResult] = field(default_factory=list)
    started: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)
    graphs: bool = False

    @property
    def method(self) -> str:
        """How the times were taken, in words."""
        what = "" if not self.graphs else (
            "each side torch.compile(mode='reduce-overhead'): CUDA graph replays; " if self.backend == "cuda" else
            "each side compiled (reduce-overhead: CUDA graphs on a GPU only); ")
        return (f"{what}wall time per call: {self.warmup} warm-up calls, then {self.batches} batches of {self.calls} "
                f"calls (synchronized after each batch), median per call; tritred and eager alternated over "
                f"{self.rounds} rounds, median of the rounds")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (:func:`write_latency_json`)."""
        return {"meta": {"kind": "latency", "device": self.device, "backend": self.backend, "rounds": self.rounds,
                         "batches": self.batches, "calls": self.calls, "warmup": self.warmup,
                         "method": self.method, "started": self.started, "versions": self.versions,
                         "graphs": self.graphs},
                "cases": [r.to_dict() for r in self.results]}


def per_call_us(fn: Callable[[], Any], device: torch.device, batches: int, calls: int, warmup: int) -> float:
    """Median over ``batches`` of the wall time of ``calls`` calls of ``fn`` (then a synchronize), per call, in µs.

    ``warmup`` calls come first (at least one), outside the timed region; the garbage collector is paused while
    timing, and on CPU torch runs on one intra-op thread (as the interpreter does).
    """
    samples = []
    with one_cpu_thread(device):
        for _ in range(max(1, warmup)):
            fn()
        sync(device)
        with no_gc():
            for _ in range(max(1, batches)):
                t0 = time.perf_counter()
                for _ in range(max(1, calls)):
                    fn()
                sync(device)
                samples.append((time.perf_counter() - t0) / max(1, calls) * 1e6)
    return statistics.median(samples)


def interleaved_us(ours: Callable[[], Any], eager: Callable[[], Any], device: torch.device, rounds: int,
                   batches: int, calls: int, warmup: int) -> tuple[float, float]:
    """``(ours, eager)`` µs per call, measured in alternation over ``rounds`` rounds (median of the rounds)."""
    a, e = [], []
    for _ in range(max(1, rounds)):
        a.append(per_call_us(ours, device, batches, calls, warmup))
        e.append(per_call_us(eager, device, batches, calls, warmup))
    return statistics.median(a), statistics.median(e)


def measure_latency(cases: Sequence[Case], device: str | None = None, quick: bool = False,
                    registry: Registry | None = None, seed: int = 0, rounds: int | None = None,
                    batches: int | None = None, calls: int | None = None,
                    warmup: int | None = None, graphs: bool = False, backend: str | None = None) -> LatencyReport:
    """Measure each case's per-call time for tritred and torch eager (see the module's docstring).

    Each case is checked against eager first (a wrong or failing call is reported, not timed). ``rounds``,
    ``batches``, ``calls`` and ``warmup`` override :data:`LATENCY_COUNTS`. ``graphs``: both sides compiled with
    ``mode="reduce-overhead"`` (CUDA graphs), or with ``backend`` where given (``"aot_eager"``: the CPU tests).
    """
    dev = select_device(device)
    reg = registry or get_registry()
    r0, b0, c0, w0 = LATENCY_COUNTS["cuda" if dev.type == "cuda" else "cpu"]["quick" if quick else "full"]
    counts = (rounds or r0, batches or b0, calls or c0, warmup if warmup is not None else w0)
    versions: dict[str, str | None] = {"torch": str(torch.__version__), "python": platform.python_version()}
    try:
        import triton

        versions["triton"] = str(triton.__version__)
    except Exception:
        versions["triton"] = None
    versions["tritred-ops"] = get_provider("tritred").version()
    report = LatencyReport(device=device_name(dev), backend=dev.type, rounds=counts[0], batches=counts[1],
                           calls=counts[2], warmup=counts[3],
                           started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           versions=versions, graphs=graphs)
    tritred, eager = get_provider("tritred"), get_provider("eager")
    for i, case in enumerate(cases):
        result = LatencyResult(case)
        report.results.append(result)
        if graphs:  # every case's functions compile afresh: they share one code object (the providers' closures),
            torch._dynamo.reset()  # whose recompile limit would otherwise leave the later cases uncompiled
        try:
            rec = reg.get(case.op)
            args, kwargs = build_inputs(rec, case, dev, seed + i)
            fns = []
            for prov in (tritred, eager):
                a, k = clone_inputs(args), clone_inputs(kwargs)
                if graphs:  # the graphs read the inputs where they are (not copied into the graph's own per replay)
                    for t in pytree.tree_leaves((a, k)):
                        if isinstance(t, torch.Tensor):
                            torch._dynamo.mark_static_address(t)
                fn = prov.prepare(rec, case, a, k)
                if fn is None:
                    raise RuntimeError(f"{prov.name} does not offer {case.op}")
                fns.append(_graphed(fn, backend) if graphs else fn)
            with one_cpu_thread(dev):  # (the thread count the timing runs with: a compiled call guards on it)
                ours = fns[0]()
                if graphs:  # (the next call's new cudagraph step frees this one's outputs)
                    ours = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, ours)
                ref = fns[1]()
            sync(dev)
            wrong = check_output(ours, ref, rec, args, kwargs)
            del ours, ref
            if wrong:
                result.message = f"wrong result: {wrong}"
                continue
            # (compiled: a recompile while timing would time something else; it fails the case instead)
            with torch._dynamo.config.patch(error_on_recompile=True) if graphs else contextlib.nullcontext():
                result.tritred_us, result.eager_us = interleaved_us(fns[0], fns[1], dev, *counts)
        except Exception as e:
            result.message = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return report


def _graphed(fn: Callable[[], Any], backend: str | None) -> Callable[[], Any]:
    """``fn`` compiled for CUDA graph replays (``mode="reduce-overhead"``; ``backend`` instead where given), each
    call a new step: the outputs of the last replay are not kept, so the graph replays without copying them out."""
    compiled = torch.compile(fn, backend=backend) if backend else torch.compile(fn, mode="reduce-overhead")
    mark = torch.compiler.cudagraph_mark_step_begin

    def call() -> Any:
        mark()
        return compiled()
    return call


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def print_latency(report: LatencyReport, console: Any = None) -> None:
    """Print the latency report as a rich table: µs per call of tritred and eager, and their ratio."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if console is None:
        console = Console()
    note = " (interpreter on CPU: not a speed figure)" if report.backend != "cuda" else ""
    what = ("µs per call" if not report.graphs else "CUDA graph replays (reduce-overhead), µs per call"
            if report.backend == "cuda" else "compiled calls, µs per call")
    table = Table(title=f"tritred latency on {report.device}: {what}{note}")
    table.add_column("case", no_wrap=True)
    for col in ("tritred µs", "eager µs", "ratio"):
        table.add_column(col, justify="right", no_wrap=True)
    table.caption = "ratio: tritred's time over eager's (below 1: tritred's call is shorter)"
    for r in report.results:
        ratio = r.ratio
        cell = "[red]failed[/]" if r.message else "-" if ratio is None else (
            f"[{'green' if ratio <= 1.0 else 'red'}]{ratio:.2f}x[/]")
        table.add_row(r.case.label, _us(r.tritred_us), _us(r.eager_us), cell)
    console.print(table)
    console.print(report.method, highlight=False)
    for r in report.results:
        if r.message:
            console.print(f"[red]failed[/] {r.case.label}: {escape(r.message)}", markup=True, highlight=False)


def write_latency_json(report: LatencyReport, path: str | Path) -> Path:
    """Write ``report.to_dict()`` as JSON; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    return path
