"""Accuracy against float64: each case's error for tritred and for torch eager, on the same inputs.

For each case and each kind of input (:data:`INPUTS`), tritred and torch eager run on copies of the same inputs,
and torch on float64 copies of them gives the reference. An output's error is norm-wise and relative:
``||out - ref|| / ||ref||`` over the positions where the reference, rounded to the output's dtype, is finite
(``NaN`` and ``inf`` must sit where the rounded reference has them, else the error is infinite). Its floor is
the same figure for the reference rounded to the output's dtype: no result of that dtype can be closer. A case's
error is the largest of its floating outputs' (indices are not counted: ties are the checks' business).

A case passes when tritred's error is at or below eager's, or at the floor, each within :data:`TIE`: a result
that is correctly rounded cannot do better, and bfloat16 and float16 outputs are mostly rounding. float64 cases
are measured but not ranked (``note``): their reference is eager's own float64 result, so eager's error is 0. The inputs
whose mean is far from zero (``offset``: the input plus :data:`OFFSET`, about 100 of its standard deviations)
are the hard ones for sums of float32 and for variances (Welford, Chan et al. 1979); prod's are left out (its
products overflow).

Measure on the GPU. Under the Triton interpreter the figures say little: its conversion of float32 to bfloat16
truncates (about twice the error of rounding to nearest, which the GPU does), and eager is torch's CPU code, whose
sums accumulate differently from its CUDA kernels'.

::

    from tritred_bench import load_suite
    from tritred_bench.accuracy import measure_accuracy, print_accuracy
    cases, _ = load_suite("h200")
    print_accuracy(measure_accuracy(cases))
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tritred_core import Registry, get_registry

from .inputs import build_inputs, clone_inputs
from .providers import get_provider, torch_op
from .report import _clean
from .suites import Case
from .timing import device_name, select_device, sync
from .training import tensors, upcast

#: The kinds of input: the case's own (``plain``: mostly standard normal) and the same shifted by :data:`OFFSET`.
INPUTS = ("plain", "offset")
#: The shift of the ``offset`` inputs: a mean about 100 standard deviations from zero.
OFFSET = 100.0
#: Relative slack of the pass test (errors within 2 % count as equal: one last-bit rounding in a row's output).
TIE = 0.02
#: Ops whose ``offset`` inputs are not drawn (a product of many values near 100 overflows any dtype).
NO_OFFSET = frozenset({"prod"})


@dataclass
class AccuracyResult:
    """One case and kind of input: the relative errors of tritred and eager, and the floor of the output dtype."""

    case: Case
    inputs: str
    tritred: float | None = None
    eager: float | None = None
    floor: float | None = None
    message: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """tritred's error over eager's (1.0 when both are 0)."""
        if self.tritred is None or self.eager is None:
            return None
        if self.eager == 0:
            return 1.0 if self.tritred == 0 else math.inf
        return self.tritred / self.eager

    @property
    def ok(self) -> bool | None:
        """tritred's error at or below eager's, or at the floor (each within :data:`TIE`); None if not measured or
        not ranked (``note``)."""
        if self.tritred is None or self.eager is None or self.floor is None or self.note:
            return None
        return self.tritred <= (1 + TIE) * max(self.eager, self.floor)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"label": self.case.label, "case": self.case.to_dict(), "inputs": self.inputs,
                "tritred": self.tritred, "eager": self.eager, "floor": self.floor, "ratio": self.ratio,
                "ok": self.ok, "message": self.message, "note": self.note}


@dataclass
class AccuracyReport:
    """An accuracy run: where, and one result per case and kind of input."""

    device: str
    backend: str
    results: list[AccuracyResult] = field(default_factory=list)
    started: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)

    def summary(self) -> str:
        """'N of M at or below eager's error (P %)', per kind of input and in all."""
        parts = []
        for kind in (None, *INPUTS):
            rs = [r for r in self.results if r.ok is not None and (kind is None or r.inputs == kind)]
            if rs:
                good = sum(bool(r.ok) for r in rs)
                parts.append(f"{kind or 'all'}: {good} of {len(rs)} ({100 * good / len(rs):.1f} %)")
        return "at or below torch eager's error: " + ("; ".join(parts) if parts else "no case measured")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (:func:`write_accuracy_json`)."""
        return {"meta": {"kind": "accuracy", "device": self.device, "backend": self.backend, "offset": OFFSET,
                         "tie": TIE, "started": self.started, "versions": self.versions,
                         "summary": self.summary()},
                "cases": [_clean(r.to_dict()) for r in self.results]}  # (JSON has no inf: null)


def relative_error(out: Any, ref: Any) -> float:
    """The largest norm-wise relative error of ``out``'s floating leaves against ``ref``'s (float64) ones: over
    the positions where the reference rounded to the output's dtype is finite; infinite where a NaN or an inf of
    ``out`` is not where that rounded reference has it, or where the structures differ."""
    outs, refs = tensors(out), tensors(ref)
    if len(outs) != len(refs):
        return math.inf
    worst = 0.0
    for o, r in zip(outs, refs):
        if not isinstance(o, torch.Tensor) or not o.dtype.is_floating_point:
            continue
        if not isinstance(r, torch.Tensor) or tuple(o.shape) != tuple(r.shape):
            return math.inf
        o64, r64 = o.detach().to(torch.float64), r.detach().to(torch.float64)
        rounded = r64.to(o.dtype).to(torch.float64)
        finite = torch.isfinite(rounded)
        special = ~finite
        if not torch.equal(torch.isnan(o64), torch.isnan(rounded)) \
                or not torch.equal(o64[special & ~torch.isnan(rounded)], rounded[special & ~torch.isnan(rounded)]):
            return math.inf
        if not bool(finite.any()):
            continue
        diff, scale = (o64 - r64)[finite].norm(), r64[finite].norm()
        err = float(diff / scale) if scale > 0 else float(diff)
        worst = max(worst, err if math.isfinite(err) else math.inf)
    return worst


def rounding_floor(ref: Any, out: Any) -> float:
    """The error of ``ref`` (float64) rounded to the dtypes of ``out``'s leaves: the least any result can have."""
    rounded = [r.to(o.dtype) if isinstance(r, torch.Tensor) and isinstance(o, torch.Tensor) else r
               for r, o in zip(tensors(ref), tensors(out))]
    return relative_error(rounded, ref)


def shifted(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with the input (the first argument, in its own layout) plus :data:`OFFSET`, in place."""
    x = args[0]
    if isinstance(x, torch.Tensor) and x.dtype.is_floating_point:
        with torch.no_grad():
            x.add_(OFFSET)
    return args


def measure_accuracy(cases: Sequence[Case], device: str | None = None, registry: Registry | None = None,
                     seed: int = 0, inputs: Sequence[str] = INPUTS) -> AccuracyReport:
    """Each case's relative error against float64, for tritred and torch eager (see the module's docstring).

    Case i's inputs use seed ``seed + i``; both kinds of input start from the same draw. A call that raises is
    reported in ``message``, not counted.
    """
    dev = select_device(device)
    reg = registry or get_registry()
    versions: dict[str, str | None] = {"torch": str(torch.__version__), "python": platform.python_version(),
                                       "tritred-ops": get_provider("tritred").version()}
    report = AccuracyReport(device=device_name(dev), backend=dev.type,
                            started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            versions=versions)
    tritred, eager = get_provider("tritred"), get_provider("eager")
    for i, case in enumerate(cases):
        for kind in inputs:
            if kind not in INPUTS:
                raise ValueError(f"unknown kind of input {kind!r}; known: {', '.join(INPUTS)}")
            if kind == "offset" and case.op in NO_OFFSET:
                continue
            result = AccuracyResult(case, kind)
            report.results.append(result)
            try:
                rec = reg.get(case.op)
                args, kwargs = build_inputs(rec, case, dev, seed + i)
                if kind == "offset":
                    args = shifted(args)
                ref = torch_op(rec)(*upcast(clone_inputs(args)), **upcast(clone_inputs(kwargs)))
                outs = []
                for prov in (tritred, eager):
                    fn = prov.prepare(rec, case, clone_inputs(args), clone_inputs(kwargs))
                    if fn is None:
                        raise RuntimeError(f"{prov.name} does not offer {case.op}")
                    outs.append(fn())
                sync(dev)
                result.tritred, result.eager = relative_error(outs[0], ref), relative_error(outs[1], ref)
                result.floor = rounding_floor(ref, outs[1])
                if case.dtype == "float64":
                    result.note = "not ranked: the float64 reference is eager's own result"
            except Exception as e:
                result.message = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return report


def _err(v: float | None) -> str:
    return "-" if v is None else "0" if v == 0 else f"{v:.2e}"


def print_accuracy(report: AccuracyReport, console: Any = None, only_failing: bool = False) -> None:
    """Print the report as a rich table (errors, their ratio, the floor) and its summary."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if console is None:
        console = Console()
    console.print(f"tritred accuracy on {report.device}: relative error against float64", highlight=False)
    table = Table()
    table.add_column("case", no_wrap=True)
    table.add_column("inputs", no_wrap=True)
    for col in ("tritred", "eager", "ratio", "floor"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in report.results:
        if only_failing and r.ok is not False:
            continue
        ratio = r.ratio
        cell = "[red]failed[/]" if r.message else "-" if ratio is None else (
            f"{ratio:.2f}x" if r.ok is None else f"[{'green' if r.ok else 'red'}]{ratio:.2f}x[/]")
        table.add_row(r.case.label, r.inputs, _err(r.tritred), _err(r.eager), cell, _err(r.floor))
    console.print(table)
    console.print(report.summary(), highlight=False)
    notes = sum(bool(r.note) for r in report.results)
    if notes:
        console.print(f"{notes} not ranked: float64 cases, whose reference is eager's own result", highlight=False)
    for r in report.results:
        if r.message:
            console.print(f"[red]failed[/] {r.case.label} ({r.inputs}): {escape(r.message)}", markup=True,
                          highlight=False)


def write_accuracy_json(report: AccuracyReport, path: str | Path) -> Path:
    """Write ``report.to_dict()`` as JSON; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    return path
