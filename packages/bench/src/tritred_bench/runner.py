"""The benchmark run: build each case's inputs, check every provider once, then time it.

Three passes (:data:`~tritred_bench.results.PASSES`): ``forward`` times the op's call, checked against eager;
``both`` times a training step (the forward on inputs that require grad, then ``torch.autograd.grad`` with fixed
upstream gradients), the forward checked against eager and the gradients against a float64 reference;
``backward`` times the step and the forward and reports the difference of their medians
(:mod:`tritred_bench.training` says which inputs are differentiated and how many bytes a step moves).

The pieces: :mod:`.inputs` (a case's call), :mod:`.checks` (the references and the comparisons),
:mod:`.timing` (devices, ``time_fn``, copy bandwidth, peak memory), :mod:`.results` (the report's records).
Bytes are inputs read once + outputs written once (``rec.byte_count``; a training step's: ``TRAINING``); GB/s is
also given as a percentage of the device's copy bandwidth, measured once per run with a large ``dst.copy_(src)``
(bytes read + written).
"""

from __future__ import annotations

import datetime as _dt
import logging
import platform
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tritred_core import Reduction, Registry, get_registry

from .checks import Reference, check_gradients, check_output, eager_reference, training_reference
from .inputs import build_inputs, clone_inputs, nbytes_of
from .providers import Provider, Unsupported, get_provider
from .results import PASSES, BenchReport, CaseResult, Measurement, pass_times, rates
from .suites import Case
from .timing import (
    CPU_REPS,
    CPU_WARMUP,
    CUDA_TIMING,
    device_name,
    measure_copy_bandwidth,
    peak_extra_bytes,
    select_device,
    sync,
    time_fn,
)
from .training import index_gradient, require_grad, step_bytes, step_io, tensors

log = logging.getLogger("tritred.bench")


def _launch_config(registry: Registry, rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any],
                   device: torch.device, direction: str = "forward") -> dict[str, Any] | None:
    """tritred's launch config of the call for ``direction``, for the report (None when it cannot be derived)."""
    try:
        from tritred_ops.runtime import device_info

        problem = rec.problem(*args, **kwargs)
        if direction != "forward":
            problem = problem.model_copy(update={"direction": direction})
        cfg = registry.launch_config(rec.spec, problem, device_info(device))
        return cfg.model_dump()
    except Exception as e:  # informational only
        log.debug("no %s launch config for %s: %s", direction, rec.spec.name, e)
        return None


def run_case(rec: Reduction, case: Case, providers: Sequence[Provider], device: torch.device, copy_gbps: float,
             quick: bool = False, seed: int = 0, registry: Registry | None = None,
             warmup: int | None = None, rep: int | None = None, pass_: str = "forward",
             memory: bool = False) -> CaseResult:
    """Check and time every provider on ``case`` for ``pass_``; failures are recorded, never raised."""
    if pass_ not in PASSES:
        raise ValueError(f"unknown pass {pass_!r}; known: {', '.join(PASSES)}")
    pristine_args, pristine_kwargs = build_inputs(rec, case, device, seed)
    try:
        nbytes = rec.byte_count(*pristine_args, **pristine_kwargs) if rec.byte_count else 0
    except Exception as e:
        log.debug("byte_count failed for %s: %s", case.label, e)
        nbytes = 0
    result = CaseResult(case=case, bytes=nbytes)
    if registry is not None:
        result.config = _launch_config(registry, rec, pristine_args, pristine_kwargs, device)
        if pass_ != "forward":
            result.backward_config = _launch_config(registry, rec, pristine_args, pristine_kwargs, device, "backward")
    ref = Reference()
    ref.out, ref.error = eager_reference(rec, pristine_args, pristine_kwargs, device)
    if ref.out is None:
        result.error = f"no eager reference: {ref.error}"
    if not nbytes and ref.out is not None:
        result.bytes = nbytes = nbytes_of(pristine_args) + nbytes_of(pristine_kwargs) + nbytes_of(ref.out)
    if pass_ != "forward":
        try:
            training_reference(rec, case, pristine_args, pristine_kwargs, device, seed, ref)
            io = step_io(case.op, pristine_args, pristine_kwargs, ref.slots, nbytes, ref.out, ref.diff)
            step = step_bytes(case.op, io)
            result.bytes = step if pass_ == "both" else step - nbytes
        except Exception as e:
            result.error = f"no training reference: {type(e).__name__}: {e}".splitlines()[0][:300]
            ref.grads = []
    for prov in providers:
        if pass_ == "forward":
            m = _measure(prov, rec, case, pristine_args, pristine_kwargs, ref, device, result.bytes, copy_gbps,
                         quick, warmup, rep, memory)
        else:
            m = _measure_training(prov, rec, case, pristine_args, pristine_kwargs, ref, device, result.bytes,
                                  copy_gbps, quick, warmup, rep, pass_, memory)
        result.measurements[prov.name] = m
    return result


def _failure(prov: Provider, e: Exception, device: torch.device, training: bool) -> Measurement:
    """A provider that raised: skipped when it refused the case (:class:`Unsupported`, the provider's own
    :meth:`~Provider.refusal`, or NotImplementedError in a training pass: no backward), else failed."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    if isinstance(e, Unsupported):
        return Measurement(prov.name, "skipped", message=str(e))
    refused = prov.refusal(e)
    if refused:
        return Measurement(prov.name, "skipped", message=refused)
    if training and isinstance(e, NotImplementedError):
        return Measurement(prov.name, "skipped", message=f"no autograd: {msg}")
    return Measurement(prov.name, "failed", message=msg)


def _measure(prov: Provider, rec: Reduction, case: Case, pristine_args: tuple[Any, ...],
             pristine_kwargs: dict[str, Any], ref: Reference, device: torch.device, nbytes: int, copy_gbps: float,
             quick: bool, warmup: int | None, rep: int | None, memory: bool = False) -> Measurement:
    why = prov.available()
    if why:
        return Measurement(prov.name, "skipped", message=why)
    args, kwargs = clone_inputs(pristine_args), clone_inputs(pristine_kwargs)
    peak: int | None = None
    try:
        args, kwargs = prov.adapt_inputs(rec, case, args, kwargs)
        with prov.context():
            fn = prov.prepare(rec, case, args, kwargs)
            if fn is None:
                return Measurement(prov.name, "skipped", message="not offered")
            out = fn()
            sync(device)
            if ref.out is None:
                return Measurement(prov.name, "failed", message="no eager reference to check against")
            wrong = check_output(out, ref.out, rec, pristine_args, pristine_kwargs)
            del out
            if wrong:
                return Measurement(prov.name, "failed", message=f"wrong result: {wrong}")
            ms = time_fn(fn, device, quick=quick, warmup=warmup, rep=rep)
            if memory:
                peak = peak_extra_bytes(fn, device)
    except Exception as e:
        return _failure(prov, e, device, training=False)
    gbps, pct = rates(nbytes, ms, copy_gbps)
    return Measurement(prov.name, "ok", ms=ms, gbps=gbps, pct_copy=pct, peak_bytes=peak)


def _measure_training(prov: Provider, rec: Reduction, case: Case, pristine_args: tuple[Any, ...],
                      pristine_kwargs: dict[str, Any], ref: Reference, device: torch.device, nbytes: int,
                      copy_gbps: float, quick: bool, warmup: int | None, rep: int | None, pass_: str,
                      memory: bool) -> Measurement:
    """The training step of one provider: checked (forward against eager, gradients against float64), then
    timed (the step; with ``backward`` also the forward on inputs that require grad)."""
    why = prov.available()
    if why:
        return Measurement(prov.name, "skipped", message=why)
    if not ref.grads or ref.out is None:
        return Measurement(prov.name, "failed", message="no reference to check against")
    dtype = getattr(torch, case.dtype)
    args, kwargs = clone_inputs(pristine_args), clone_inputs(pristine_kwargs)
    peak: int | None = None
    fwd_ms: float | None = None
    try:
        args, kwargs = prov.adapt_inputs(rec, case, args, kwargs)
        args, kwargs, inputs = require_grad(args, kwargs, ref.slots)
        with prov.context(training=True):
            fn = prov.prepare(rec, case, args, kwargs)
            if fn is None:
                return Measurement(prov.name, "skipped", message="not offered")
            out = fn()
            sync(device)
            leaves = tensors(out)
            if len(leaves) != ref.n_leaves:
                return Measurement(prov.name, "failed", message=f"{len(leaves)} outputs, torch has {ref.n_leaves}")
            outs = [leaves[i] for i in ref.diff]
            if not all(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
                return Measurement(prov.name, "skipped", message="no autograd: its output has no grad_fn")
            dys = [d.to(o.dtype) if d.dtype != o.dtype else d.clone() for d, o in zip(ref.dy, outs)]
            wrong = check_output(out, ref.out, rec, pristine_args, pristine_kwargs)
            if wrong:
                return Measurement(prov.name, "failed", message=f"wrong result: {wrong}")
            grads = list(torch.autograd.grad(outs, inputs, dys, allow_unused=True))
            sync(device)
            expected = list(ref.grads)
            by_index = index_gradient(case.op, pristine_args, pristine_kwargs, out, ref.dy[0])
            if by_index is not None:
                expected[0] = by_index
            wrong = check_gradients(grads, expected, case.op, ref.slots, dtype, ref.atols)
            del out, leaves, outs, grads, expected
            if wrong:
                return Measurement(prov.name, "failed", message=f"wrong gradient: {wrong}")
            diff = ref.diff

            def training_step() -> Any:
                got = tensors(fn())
                return torch.autograd.grad([got[i] for i in diff], inputs, dys, allow_unused=True)

            step_ms = time_fn(training_step, device, quick=quick, warmup=warmup, rep=rep)
            if pass_ == "backward":
                fwd_ms = time_fn(fn, device, quick=quick, warmup=warmup, rep=rep)
            if memory:
                peak = peak_extra_bytes(training_step, device)
    except Exception as e:
        return _failure(prov, e, device, training=True)
    ms = pass_times(step_ms, fwd_ms, pass_)
    if ms <= 0:
        return Measurement(prov.name, "skipped", step_ms=step_ms, forward_ms=fwd_ms, peak_bytes=peak,
                           message=f"step {step_ms:.4g} ms - forward {fwd_ms:.4g} ms <= 0: no backward time resolved")
    gbps, pct = rates(nbytes, ms, copy_gbps)
    return Measurement(prov.name, "ok", ms=ms, gbps=gbps, pct_copy=pct, step_ms=step_ms, forward_ms=fwd_ms,
                       peak_bytes=peak)


def run(cases: Sequence[Case], providers: Sequence[str] = ("tritred", "eager"), device: str | None = None,
        quick: bool = False, registry: Registry | None = None, seed: int = 0, progress: bool = True,
        console: Any = None, suite: str = "", warmup: int | None = None, rep: int | None = None,
        copy_gbps: float | None = None, pass_: str = "forward", memory: bool = False,
        on_case: Callable[[BenchReport, int], None] | None = None) -> BenchReport:
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
        pass_: ``forward`` (default), ``both`` (a training step: forward + backward) or ``backward`` (the step's
            median minus the forward's): :data:`PASSES`.
        memory: also measure each provider's peak extra memory during the timed call (CUDA only).
        on_case: called before the first case and after each case with the report so far and the number of cases
            in the run (the CLI rewrites its ``--json`` report there, so that a run killed by a time limit keeps
            what it measured).

    A case after which the CUDA device no longer works (a kernel's illegal memory access or device-side assert)
    ends the run: the report keeps the cases so far and says why in ``stopped`` (:func:`device_lost`).
    """
    if pass_ not in PASSES:
        raise ValueError(f"unknown pass {pass_!r}; known: {', '.join(PASSES)}")
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
    timing += {"forward": "", "both": "; a training step: forward on inputs that require grad, then "
               "torch.autograd.grad with a fixed random upstream gradient (1 for a scalar output)",
               "backward": "; backward = the training step's median minus the forward's (inputs requiring grad)"}[pass_]
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
                         timing=timing, versions=versions, pass_=pass_, memory=memory and dev.type == "cuda")

    def _one_case(i: int, case: Case) -> CaseResult:
        try:
            rec = reg.get(case.op)
        except Exception as e:  # an op this install does not register (yet): a note, not a failure
            cr = CaseResult(case=case, bytes=0, error=str(e))
            note = f"{case.op} is not registered here"
            cr.measurements = {n: Measurement(n, "skipped", message=note) for n in names}
            return cr
        try:
            return run_case(rec, case, provs, dev, copy_gbps, quick=quick, seed=seed + i, registry=reg,
                            warmup=warmup, rep=rep, pass_=pass_, memory=memory)
        except Exception as e:  # building the inputs failed
            msg = f"{type(e).__name__}: {e}"
            cr = CaseResult(case=case, bytes=0, error=msg)
            cr.measurements = {n: Measurement(n, "failed", message=msg) for n in names}
            return cr

    def _record(i: int, case: Case) -> bool:
        """Run case ``i`` into the report; False when the device is lost and the run must stop."""
        result = _one_case(i, case)
        report.results.append(result)
        report.stopped = device_lost(dev, result, i, len(cases))
        if on_case is not None:
            on_case(report, len(cases))
        return not report.stopped

    if on_case is not None:
        on_case(report, len(cases))  # (before the first case: no earlier run's file stays as if it were this one's)
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, transient=True) as bar:
            task = bar.add_task("", total=len(cases))
            for i, case in enumerate(cases):
                bar.update(task, description=case.label)
                if not _record(i, case):
                    break
                bar.advance(task)
    else:
        for i, case in enumerate(cases):
            if not _record(i, case):
                break
    return report


def device_lost(dev: torch.device, result: CaseResult, index: int, total: int) -> str:
    """Empty while ``dev`` still works after a case (its memory cache emptied); else why the run stops there.

    An illegal memory access or a device-side assert in any provider's kernel ends the process's CUDA context:
    every later CUDA call fails, so the remaining cases could only fail. The run stops, keeping the cases measured
    so far, and names the case and the first provider that failed on it (each provider's first call is followed by a
    synchronization, so an asynchronous error surfaces at the provider whose kernel raised it).
    """
    if dev.type != "cuda":
        return ""
    try:
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        return ""
    except RuntimeError as e:  # (torch.AcceleratorError is a RuntimeError)
        first = next((m for m in result.measurements.values() if m.status == "failed"), None)
        who = f"first failed there: {first.provider}: {first.message}" if first is not None else \
            f"{type(e).__name__}: {str(e).splitlines()[0]}"
        return (f"the CUDA context was lost at case {index} ({result.case.label}; {who}); the run stopped after "
                f"{index + 1} of {total} cases")
