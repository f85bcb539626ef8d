"""The benchmark runner: build each case's inputs, check every provider against eager once, then time it.

Timing: on CUDA ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (warmup/rep in ms); on CPU
(the Triton interpreter) the median of a few ``time.perf_counter`` calls, which only smoke-tests the machinery.
Either way each callable is called before its timed region (a first call's one-off costs, such as building a
call plan, stay out of it) and Python's garbage collector is paused while it is timed, as ``timeit`` does (one
collection after the interpreter's calls can take over 100 ms, which a call of a few microseconds would carry).
On CPU torch runs on one intra-op thread while timed, as the interpreter does: on a busy machine a tiny eager op
split over several threads waits milliseconds for a core.
Bytes are inputs read once + outputs written once (``rec.byte_count``); GB/s is also given as a percentage of
the device's copy bandwidth, measured once per run with a large ``dst.copy_(src)`` (bytes read + written).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import logging
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tritred_core import Reduction, Registry, get_registry

from .providers import PEERS, Provider, get_provider, torch_op
from .suites import Case

log = logging.getLogger("tritred.bench")

#: do_bench settings (ms) per mode.
CUDA_TIMING = {"full": (25, 100), "quick": (5, 20)}
#: perf_counter repetitions per mode on CPU (odd: the median is one of the calls, and one outlier cannot move it).
CPU_REPS = {"full": 5, "quick": 3}
#: Calls made before the timed ones on CPU, at least (also in quick mode and when ``warmup`` asks for fewer).
CPU_WARMUP = 1


@contextlib.contextmanager
def _one_cpu_thread(device: torch.device) -> Iterator[None]:
    """On CPU, time with one intra-op thread (restored afterwards); nothing on CUDA.

    The interpreter runs tritred's kernels on one thread anyway. torch's CPU ops split even tiny inputs over its
    intra-op threads (softmax rows, batch_norm channels), and on a busy machine each call then waits for a worker
    thread to get a core: log_softmax of 4x96 takes 8 ms instead of 3 us with two cores loaded, which would pose
    as eager's time.
    """
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the garbage collector while timing (restored afterwards, as ``timeit`` does)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- device ------------------------------------------------------------------------------------------------------

def select_device(device: str | torch.device | None = None) -> torch.device:
    """The device to run on: CUDA when available (or asked), else CPU under the Triton interpreter.

    For CPU this sets ``TRITON_INTERPRET=1`` when unset; that only works before ``tritred_ops`` is imported, so
    a RuntimeError explains the fix if it was imported without it.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA was asked for but torch.cuda.is_available() is False")
        return dev
    if dev.type != "cpu":
        raise RuntimeError(f"unsupported device {dev}: use cuda, or cpu (Triton interpreter)")
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        if "tritred_ops" in sys.modules:
            raise RuntimeError("tritred_ops was imported without TRITON_INTERPRET=1; on CPU set it before "
                               "anything imports tritred_ops")
        os.environ["TRITON_INTERPRET"] = "1"
    return dev


def device_name(device: torch.device) -> str:
    """``NVIDIA H200`` or the CPU's name, for the report."""
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return f"cpu {platform.processor() or platform.machine()} (TRITON_INTERPRET=1)"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn: Callable[[], Any], device: torch.device, quick: bool = False,
            warmup: int | None = None, rep: int | None = None) -> float:
    """Median milliseconds of one call of ``fn``, its first call outside the timed region.

    ``fn`` is called once and synchronized first, then timed with the garbage collector paused. CUDA:
    ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (warmup/rep in ms, defaults from
    :data:`CUDA_TIMING`). CPU: median of ``rep`` (default :data:`CPU_REPS`) ``perf_counter`` calls after ``warmup``
    calls (at least :data:`CPU_WARMUP`), on one intra-op thread (see :func:`_one_cpu_thread`).
    """
    mode = "quick" if quick else "full"
    fn()
    _sync(device)
    if device.type == "cuda":
        import triton.testing

        w, r = CUDA_TIMING[mode]
        with _no_gc():
            return float(triton.testing.do_bench(fn, warmup=warmup if warmup is not None else w,
                                                 rep=rep if rep is not None else r, return_mode="median"))
    reps = rep if rep is not None else CPU_REPS[mode]
    times = []
    with _one_cpu_thread(device):
        for _ in range(max(CPU_WARMUP, warmup or 0) - 1):  # (the call above was the first)
            fn()
        with _no_gc():
            for _ in range(max(1, reps)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def measure_copy_bandwidth(device: torch.device, nbytes: int | None = None, quick: bool = False) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written, median), the reference for "% of copy".

    Default sizes: 1 GiB on CUDA (well past L2), 64 MiB on CPU.
    """
    if nbytes is None:
        nbytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = time_fn(lambda: dst.copy_(src), device, quick=quick)
    return 2 * nbytes / (ms * 1e6)


# -- inputs ------------------------------------------------------------------------------------------------------

def _param(shape: Sequence[int], dtype: torch.dtype, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float32).to(dtype).to(device)


def build_inputs(rec: Reduction, case: Case, device: torch.device | str,
                 seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call ``(args, kwargs)`` of ``case``: ``rec.make_inputs`` adjusted to the case's parameters.

    layer_norm: ``normalized_shape`` and ``weight``/``bias`` flags (False gives None); rms_norm: ``normalized_shape``
    and ``weight``; batch_norm: ``weight``/``bias`` flags; any other parameter (``training``, ``eps``, ``keepdim``,
    ``correction``...) is passed as a keyword argument.
    """
    dtype = getattr(torch, case.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{case.label}: unknown dtype {case.dtype!r}")
    dim = case.dim if case.has_dim else -1
    args_t, kwargs = rec.make_inputs(case.shape, dtype, device=device, dim=dim, seed=seed)
    args, kwargs = list(args_t), dict(kwargs)
    params = dict(case.params)
    dev = torch.device(device)
    if case.op in ("layer_norm", "rms_norm") and len(args) >= 3:  # (rms_norm: no bias)
        ns = tuple(int(s) for s in params.pop("normalized_shape", args[1]))
        args[1] = ns
        for pos, key, off in ((2, "weight", 1), (3, "bias", 2))[: len(args) - 2]:
            if not params.pop(key, True):
                args[pos] = None
            elif not isinstance(args[pos], torch.Tensor) or tuple(args[pos].shape) != ns:
                args[pos] = _param(ns, dtype, dev, seed + off)
    elif case.op == "batch_norm" and len(args) >= 5:
        for pos, key in ((3, "weight"), (4, "bias")):
            if not params.pop(key, True):
                args[pos] = None
    kwargs.update(params)
    return tuple(args), kwargs


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, tuple):
        return tuple(_clone(o) for o in obj)
    if isinstance(obj, list):
        return [_clone(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def _nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_nbytes(o) for o in obj.values())
    return 0


# -- correctness -------------------------------------------------------------------------------------------------

def check_output(out: Any, ref: Any, rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """'' when ``out`` matches the eager result ``ref``, else why not.

    Floats within the dtype's tolerance (``tritred_ops.testing.TOLERANCES``) relative to the largest reference
    magnitude (both sides carry rounding error); NaN/inf positions and integers exact; ``indices`` may differ
    at ties (the input values they point at must be equal).
    """
    from tritred_ops.testing import compare

    cmp = compare(out, ref, relative_to_max=True)
    if cmp.ok:
        return ""
    if "indices" in rec.spec.outputs and isinstance(out, tuple) and len(out) == 2 and args:
        # Ties: accept other indices when the values there are the same (and the values output matches).
        values_cmp = compare(out[0], ref[0], relative_to_max=True)
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        x = args[0]
        if values_cmp.ok and isinstance(dim, int) and isinstance(x, torch.Tensor) and out[1].shape == ref[1].shape:
            keep = kwargs.get("keepdim", False)
            oi, ri = (out[1], ref[1]) if keep else (out[1].unsqueeze(dim), ref[1].unsqueeze(dim))
            if oi.dtype == ri.dtype == torch.int64 and bool((oi >= 0).all() and (oi < x.shape[dim]).all()):
                a, b = x.gather(dim, oi), x.gather(dim, ri)
                if bool(((a == b) | (a.isnan() & b.isnan())).all()):
                    return ""
    return cmp.message


# -- results -----------------------------------------------------------------------------------------------------

@dataclass
class Measurement:
    """One provider on one case: ``status`` is ``ok``, ``failed`` (raised or wrong: not timed) or ``skipped``
    (not offered or not installed)."""

    provider: str
    status: str
    ms: float | None = None
    gbps: float | None = None
    pct_copy: float | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"status": self.status, "ms": self.ms, "gbps": self.gbps, "pct_copy": self.pct_copy,
                "message": self.message}


@dataclass
class CaseResult:
    """All providers on one case, with the case's byte count and tritred's launch config."""

    case: Case
    bytes: int
    measurements: dict[str, Measurement] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    error: str = ""

    def ms(self, provider: str) -> float | None:
        """Median ms of ``provider`` if it ran correctly."""
        m = self.measurements.get(provider)
        return m.ms if m is not None and m.status == "ok" else None

    def speedup(self, peer: str, provider: str = "tritred") -> float | None:
        """``peer``'s time / ``provider``'s time (> 1: ``provider`` is faster); None if either did not run."""
        a, b = self.ms(provider), self.ms(peer)
        return b / a if a and b else None

    def best_peer(self, peers: Iterable[str] = PEERS) -> str | None:
        """The fastest correct peer (lowest ms), or None."""
        timed = [(self.ms(p), p) for p in peers if p in self.measurements and self.ms(p)]
        return min(timed)[1] if timed else None

    def speedup_vs_best(self, peers: Iterable[str] = PEERS) -> float | None:
        """tritred's speedup over the fastest correct peer."""
        best = self.best_peer(peers)
        return self.speedup(best) if best else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the case, bytes, every provider and the speedups."""
        peers = [p for p in self.measurements if p != "tritred"]
        return {
            "label": self.case.label, "case": self.case.to_dict(), "bytes": self.bytes,
            "providers": {p: m.to_dict() for p, m in self.measurements.items()},
            "speedup": {p: self.speedup(p) for p in peers},
            "best_peer": self.best_peer(peers), "speedup_vs_best_peer": self.speedup_vs_best(peers),
            "tritred_config": self.config, "error": self.error,
        }


@dataclass
class BenchReport:
    """A whole run: where and how it ran, the copy bandwidth it is normalized by, and one result per case."""

    device: str
    backend: str
    copy_gbps: float
    providers: list[str]
    results: list[CaseResult] = field(default_factory=list)
    suite: str = ""
    started: str = ""
    timing: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``write_json``)."""
        return {
            "meta": {"device": self.device, "backend": self.backend, "copy_gbps": self.copy_gbps,
                     "providers": self.providers, "suite": self.suite, "started": self.started,
                     "timing": self.timing, "versions": self.versions,
                     "bytes": "inputs read once + outputs written once; pct_copy = GB/s / copy_gbps * 100"},
            "cases": [r.to_dict() for r in self.results],
        }


# -- the run -----------------------------------------------------------------------------------------------------

def _launch_config(registry: Registry, rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any],
                   device: torch.device) -> dict[str, Any] | None:
    try:
        from tritred_ops.runtime import device_info

        problem = rec.problem(*args, **kwargs)
        cfg = registry.launch_config(rec.spec, problem, device_info(device))
        return cfg.model_dump()
    except Exception as e:  # informational only
        log.debug("no launch config for %s: %s", rec.spec.name, e)
        return None


def run_case(rec: Reduction, case: Case, providers: Sequence[Provider], device: torch.device, copy_gbps: float,
             quick: bool = False, seed: int = 0, registry: Registry | None = None,
             warmup: int | None = None, rep: int | None = None) -> CaseResult:
    """Check and time every provider on ``case``; failures are recorded, never raised."""
    pristine_args, pristine_kwargs = build_inputs(rec, case, device, seed)
    try:
        nbytes = rec.byte_count(*pristine_args, **pristine_kwargs) if rec.byte_count else 0
    except Exception as e:
        log.debug("byte_count failed for %s: %s", case.label, e)
        nbytes = 0
    result = CaseResult(case=case, bytes=nbytes)
    if registry is not None:
        result.config = _launch_config(registry, rec, pristine_args, pristine_kwargs, device)
    # The eager result every provider is checked against (the reference when eager itself fails).
    ref: Any = None
    ref_error = ""
    for fn in (torch_op(rec), rec.reference):
        try:
            a, k = _clone(pristine_args), _clone(pristine_kwargs)
            ref = fn(*a, **k)
            _sync(device)
            break
        except Exception as e:
            ref_error = f"{type(e).__name__}: {e}"
    if ref is None:
        result.error = f"no eager reference: {ref_error}"
    if not nbytes and ref is not None:
        result.bytes = nbytes = _nbytes(pristine_args) + _nbytes(pristine_kwargs) + _nbytes(ref)
    for prov in providers:
        result.measurements[prov.name] = _measure(prov, rec, case, pristine_args, pristine_kwargs, ref, device,
                                                  nbytes, copy_gbps, quick, warmup, rep)
    return result


def _measure(prov: Provider, rec: Reduction, case: Case, pristine_args: tuple[Any, ...],
             pristine_kwargs: dict[str, Any], ref: Any, device: torch.device, nbytes: int, copy_gbps: float,
             quick: bool, warmup: int | None, rep: int | None) -> Measurement:
    why = prov.available()
    if why:
        return Measurement(prov.name, "skipped", message=why)
    args, kwargs = _clone(pristine_args), _clone(pristine_kwargs)
    try:
        with prov.context():
            fn = prov.prepare(rec, case, args, kwargs)
            if fn is None:
                return Measurement(prov.name, "skipped", message="not offered")
            out = fn()
            _sync(device)
            if ref is None:
                return Measurement(prov.name, "failed", message="no eager reference to check against")
            wrong = check_output(out, ref, rec, pristine_args, pristine_kwargs)
            del out
            if wrong:
                return Measurement(prov.name, "failed", message=f"wrong result: {wrong}")
            ms = time_fn(fn, device, quick=quick, warmup=warmup, rep=rep)
    except Exception as e:
        if device.type == "cuda":
            torch.cuda.empty_cache()
        msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        return Measurement(prov.name, "failed", message=msg)
    gbps = nbytes / (ms * 1e6) if ms > 0 and nbytes else None
    pct = 100.0 * gbps / copy_gbps if gbps is not None and copy_gbps > 0 else None
    return Measurement(prov.name, "ok", ms=ms, gbps=gbps, pct_copy=pct)


def run(cases: Sequence[Case], providers: Sequence[str] = ("tritred", "eager"), device: str | None = None,
        quick: bool = False, registry: Registry | None = None, seed: int = 0, progress: bool = True,
        console: Any = None, suite: str = "", warmup: int | None = None, rep: int | None = None,
        copy_gbps: float | None = None) -> BenchReport:
    """Run ``cases`` with ``providers`` and return the :class:`BenchReport`.

    Args:
        cases: from :func:`tritred_bench.load_suite`.
        providers: names from :data:`tritred_bench.PROVIDERS`; ``tritred`` is added first when missing.
        device: ``cuda``/``cpu``; default CUDA when available, else CPU under the Triton interpreter.
        quick: short timing (fewer repetitions).
        registry: default the process-wide registry.
        seed: inputs of case ``i`` use ``seed + i``.
        progress: show a rich progress bar (on ``console``).
        warmup, rep: override the timing settings (ms on CUDA, call counts on CPU).
        copy_gbps: skip measuring the copy bandwidth and use this value.
    """
    dev = select_device(device)
    reg = registry or get_registry()
    names = list(dict.fromkeys(["tritred", *providers]))
    provs = [get_provider(n) for n in names]
    if copy_gbps is None:
        copy_gbps = measure_copy_bandwidth(dev, quick=quick)
    mode = "quick" if quick else "full"
    if dev.type == "cuda":
        w, r = CUDA_TIMING[mode]
        timing = (f"triton.testing.do_bench(warmup={warmup if warmup is not None else w} ms, "
                  f"rep={rep if rep is not None else r} ms, return_mode='median')")
    else:
        timing = (f"median of {rep if rep is not None else CPU_REPS[mode]} time.perf_counter calls after "
                  f"{max(CPU_WARMUP, warmup or 0)} warm-up call(s), one intra-op thread, garbage collector paused "
                  "(CPU interpreter)")
    versions: dict[str, str | None] = {"torch": str(torch.__version__), "python": platform.python_version()}
    try:
        import triton

        versions["triton"] = str(triton.__version__)
    except Exception:
        versions["triton"] = None
    for p in provs:
        if p.name != "eager" and p.available() is None:
            versions[p.name] = p.version()
    report = BenchReport(device=device_name(dev), backend=dev.type, copy_gbps=copy_gbps, providers=names,
                         suite=suite, started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                         timing=timing, versions=versions)

    def _one_case(i: int, case: Case) -> CaseResult:
        try:
            rec = reg.get(case.op)
        except Exception as e:
            cr = CaseResult(case=case, bytes=0, error=str(e))
            cr.measurements = {n: Measurement(n, "failed", message=str(e)) for n in names}
            return cr
        try:
            return run_case(rec, case, provs, dev, copy_gbps, quick=quick, seed=seed + i, registry=reg,
                            warmup=warmup, rep=rep)
        except Exception as e:  # building the inputs failed
            msg = f"{type(e).__name__}: {e}"
            cr = CaseResult(case=case, bytes=0, error=msg)
            cr.measurements = {n: Measurement(n, "failed", message=msg) for n in names}
            return cr
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()

    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, transient=True) as bar:
            task = bar.add_task("", total=len(cases))
            for i, case in enumerate(cases):
                bar.update(task, description=case.label)
                report.results.append(_one_case(i, case))
                bar.advance(task)
    else:
        for i, case in enumerate(cases):
            report.results.append(_one_case(i, case))
    return report


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there are none)."""
    vs = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else None
