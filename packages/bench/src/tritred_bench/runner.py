"""The benchmark runner: build each case's inputs, check every provider once, then time it.

Three passes (:data:`PASSES`): ``forward`` times the op's call, checked against eager; ``both`` times a training
step (the forward on inputs that require grad, then ``torch.autograd.grad`` with fixed upstream gradients), the
forward checked against eager and the gradients against a float64 reference; ``backward`` times the step and the
forward and reports the difference of their medians (:mod:`tritred_bench.training` says which inputs are
differentiated and how many bytes a step moves).

Timing: on CUDA ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (warmup/rep in ms); on CPU
(the Triton interpreter) the median of a few ``time.perf_counter`` calls, which only smoke-tests the machinery.
Either way each callable is called before its timed region (a first call's one-off costs, such as building a
call plan, stay out of it) and Python's garbage collector is paused while it is timed, as ``timeit`` does (one
collection after the interpreter's calls can take over 100 ms, which a call of a few microseconds would carry).
On CPU torch runs on one intra-op thread while timed, as the interpreter does: on a busy machine a tiny eager op
split over several threads waits milliseconds for a core.
Bytes are inputs read once + outputs written once (``rec.byte_count``; a training step's: ``TRAINING``); GB/s is
also given as a percentage of the device's copy bandwidth, measured once per run with a large ``dst.copy_(src)``
(bytes read + written).
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

from .providers import PEERS, Provider, Unsupported, get_provider, torch_op
from .suites import VIEWS, Case, sliced_row
from .training import (
    differentiable,
    grad_slots,
    index_gradient,
    require_grad,
    step_bytes,
    step_io,
    tensors,
    upcast,
    upstream_gradients,
)

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


def with_view(x: torch.Tensor, view: str | None) -> torch.Tensor:
    """``x``'s values in the layout ``view`` asks for (:data:`~tritred_bench.suites.VIEWS`), or ``x``.

    ``transposed``: the last two dims' strides swapped (a column-major matrix); ``sliced``: each row the first part
    of a wider row (:func:`~tritred_bench.suites.sliced_row` elements apart); ``strided``: every other element of
    rows twice as long; ``channels_last``: a 4-D input in channels-last memory format.
    """
    if view is None or x.numel() == 0:
        return x
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; known: {', '.join(VIEWS)}")
    if view == "transposed":
        if x.dim() < 2:
            raise ValueError("view 'transposed' needs at least 2 dims")
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if view == "channels_last":
        if x.dim() != 4:
            raise ValueError("view 'channels_last' needs a 4-D input")
        return x.contiguous(memory_format=torch.channels_last)
    n = x.shape[-1] if x.dim() else 1
    if x.dim() == 0:
        return x
    wide = sliced_row(n) if view == "sliced" else 2 * n
    buf = torch.zeros((*x.shape[:-1], wide), dtype=x.dtype, device=x.device)
    out = buf[..., :n] if view == "sliced" else buf[..., ::2]
    out.copy_(x)
    return out


def _norm_params(op: str, args: list[Any], kwargs: dict[str, Any], params: dict[str, Any], dtype: torch.dtype,
                 dev: torch.device, seed: int) -> None:
    """layer_norm / rms_norm: ``normalized_shape`` and the ``weight``/``bias`` flags (False gives None), wherever
    the record's ``make_inputs`` put them (positions 1-3 of torch's signature, or keywords)."""
    def get(pos: int, key: str) -> Any:
        return args[pos] if len(args) > pos else kwargs.get(key)

    def put(pos: int, key: str, value: Any) -> None:
        if len(args) > pos:
            args[pos] = value
        else:
            kwargs[key] = value

    ns = tuple(int(s) for s in params.pop("normalized_shape", get(1, "normalized_shape") or args[0].shape[-1:]))
    put(1, "normalized_shape", ns if op == "layer_norm" else list(ns))
    names = (("weight", 2, 1), ("bias", 3, 2)) if op == "layer_norm" else (("weight", 2, 1),)
    for key, pos, off in names:
        if not params.pop(key, True):
            if len(args) > pos or key in kwargs:
                put(pos, key, None)
            continue
        cur = get(pos, key)
        if not isinstance(cur, torch.Tensor) or tuple(cur.shape) != ns:
            put(pos, key, _param(ns, dtype, dev, seed + off))


def _cross_entropy_params(args: list[Any], kwargs: dict[str, Any], params: dict[str, Any], dtype: torch.dtype,
                          dev: torch.device, seed: int) -> None:
    """cross_entropy: the target (class indices, a share of them ``ignore_index``; or class probabilities with
    ``target="probs"``) and random positive class weights with ``weight=True``; the target replaces the record's
    (``args[1]`` or ``kwargs["target"]``)."""
    x = args[0]
    classes = x.shape[1] if x.dim() >= 2 else x.shape[0]
    tshape = (x.shape[0], *x.shape[2:]) if x.dim() >= 2 else ()
    g = torch.Generator(device="cpu").manual_seed(seed + 3)
    kind = params.pop("target", "index")
    ignored = float(params.pop("ignored", 0.0))
    if kind == "probs":
        target = torch.softmax(torch.randn(tuple(x.shape), generator=g), dim=1 if x.dim() >= 2 else 0).to(dtype)
    elif kind == "index":
        target = torch.randint(0, max(1, classes), tshape, generator=g, dtype=torch.int64)
        if ignored > 0:
            ignore_index = int(params.get("ignore_index", kwargs.get("ignore_index", -100)))
            target[torch.rand(tshape, generator=g) < ignored] = ignore_index
    else:
        raise ValueError(f"cross_entropy: unknown target {kind!r} (index or probs)")
    target = target.to(dev)
    if len(args) > 1:
        args[1] = target
    else:
        kwargs["target"] = target
    if params.pop("weight", False):
        w = (torch.rand((classes,), generator=g) + 0.5).to(dtype).to(dev)
        if len(args) > 2:
            args[2] = w
        else:
            kwargs["weight"] = w


def build_inputs(rec: Reduction, case: Case, device: torch.device | str,
                 seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call ``(args, kwargs)`` of ``case``: ``rec.make_inputs`` adjusted to the case's parameters.

    layer_norm and rms_norm: ``normalized_shape`` and ``weight``/``bias`` flags (False gives None); batch_norm:
    ``weight``/``bias`` flags; cross_entropy: the target (``target``, ``ignored``) and class weights
    (``weight``); any op: ``view`` (the input's layout, :func:`with_view`). Any other parameter (``training``,
    ``eps``, ``keepdim``, ``correction``, ``reduction``...) is passed as a keyword argument.
    """
    dtype = getattr(torch, case.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{case.label}: unknown dtype {case.dtype!r}")
    dim = case.dim if case.has_dim else -1
    args_t, kwargs = rec.make_inputs(case.shape, dtype, device=device, dim=dim, seed=seed)
    args, kwargs = list(args_t), dict(kwargs)
    params = dict(case.params)
    view = params.pop("view", None)
    dev = torch.device(device)
    if case.op in ("layer_norm", "rms_norm") and args:
        _norm_params(case.op, args, kwargs, params, dtype, dev, seed)
    elif case.op == "batch_norm" and len(args) >= 5:
        for pos, key in ((3, "weight"), (4, "bias")):
            if not params.pop(key, True):
                args[pos] = None
    elif case.op == "cross_entropy" and args:
        _cross_entropy_params(args, kwargs, params, dtype, dev, seed)
    if view is not None and args and isinstance(args[0], torch.Tensor):
        args[0] = with_view(args[0], view)
    kwargs.update(params)
    return tuple(args), kwargs


def _clone_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy with ``t``'s strides, also for views with gaps (sliced or strided rows), which ``clone()`` would
    make contiguous."""
    if t.numel() == 0 or t.dim() == 0 or any(st <= 0 for st in t.stride()):
        return t.clone()
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    if extent == t.numel():  # dense (contiguous, transposed, channels-last): clone keeps the strides
        return t.clone()
    buf = torch.zeros(extent, dtype=t.dtype, device=t.device)
    out = buf.as_strided(tuple(t.shape), tuple(t.stride()))
    out.copy_(t)
    return out


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return _clone_tensor(obj)
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


def _slot_name(op: str, slot: Any) -> str:
    if isinstance(slot, str):
        return slot
    names = {"layer_norm": {2: "weight", 3: "bias"}, "rms_norm": {2: "weight"},
             "batch_norm": {3: "weight", 4: "bias"}}.get(op, {})
    return "input" if slot == 0 else names.get(slot, f"args[{slot}]")


def check_gradients(grads: Sequence[torch.Tensor | None], ref: Sequence[torch.Tensor | None], op: str,
                    slots: Sequence[Any], dtype: torch.dtype, atols: Sequence[float | None] | None = None) -> str:
    """'' when each gradient matches the float64 reference's, else why not.

    Each within the case dtype's tolerance (``tritred_ops.testing.TOLERANCES``) relative to the largest reference
    magnitude (``atols`` may widen the absolute part per gradient: to twice torch eager's own error); a missing
    gradient where the reference has one fails, one where it has none must be zero.
    """
    from tritred_ops.testing import compare

    for k, (g, r) in enumerate(zip(grads, ref)):
        name = _slot_name(op, slots[k])
        if g is None and r is None:
            continue
        if g is None:
            return f"no gradient for {name}"
        if r is None:
            r = torch.zeros(tuple(g.shape), dtype=torch.float64, device=g.device)
        atol = atols[k] if atols is not None else None
        cmp = compare(g, r, dtype=dtype, atol=atol, check_dtype=False, relative_to_max=True)
        if not cmp.ok:
            return f"gradient of {name}: {cmp.message}"
    return ""


# -- results -----------------------------------------------------------------------------------------------------

#: The passes ``run`` times: the forward call (as torch's op is called in inference), a training step (forward on
#: inputs that require grad, then ``torch.autograd.grad``), or its backward (the step's median minus the
#: forward's).
PASSES = ("forward", "backward", "both")

#: What the byte count of each pass is, for the report's metadata.
BYTES_RULE = {
    "forward": "inputs read once + outputs written once",
    "both": "the minimum of a training step (tritred_bench.training.TRAINING): e.g. softmax, layer_norm, rms_norm "
            "5 x numel x itemsize (+ weights), cross_entropy 2 x numel x itemsize (+ targets)",
    "backward": "the training step's bytes minus the forward's (tritred_bench.training.TRAINING)",
}


@dataclass
class Measurement:
    """One provider on one case: ``status`` is ``ok``, ``failed`` (raised or wrong: not timed) or ``skipped``
    (not offered, not installed, a shape the provider refuses, no autograd: ``message`` says which).

    ``ms`` is the pass's median time: the forward call, the training step (``both``) or the step minus the
    forward (``backward``), whose two medians are kept in ``step_ms`` and ``forward_ms``. ``peak_bytes``: with
    ``memory``, the peak memory the timed call allocated beyond what was allocated before it (CUDA only).
    """

    provider: str
    status: str
    ms: float | None = None
    gbps: float | None = None
    pct_copy: float | None = None
    message: str = ""
    step_ms: float | None = None
    forward_ms: float | None = None
    peak_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"status": self.status, "ms": self.ms, "gbps": self.gbps, "pct_copy": self.pct_copy,
                "message": self.message, "step_ms": self.step_ms, "forward_ms": self.forward_ms,
                "peak_bytes": self.peak_bytes}


@dataclass
class CaseResult:
    """All providers on one case, with the case's byte count (for the run's pass) and tritred's launch config
    (``backward_config``: the backward pass's, for the training passes)."""

    case: Case
    bytes: int
    measurements: dict[str, Measurement] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    error: str = ""
    backward_config: dict[str, Any] | None = None

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
            "tritred_config": self.config, "tritred_backward_config": self.backward_config, "error": self.error,
        }


@dataclass
class BenchReport:
    """A whole run: where and how it ran (``pass_``: forward, backward or both), the copy bandwidth it is
    normalized by, and one result per case."""

    device: str
    backend: str
    copy_gbps: float
    providers: list[str]
    results: list[CaseResult] = field(default_factory=list)
    suite: str = ""
    started: str = ""
    timing: str = ""
    versions: dict[str, str | None] = field(default_factory=dict)
    pass_: str = "forward"
    memory: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``write_json``)."""
        return {
            "meta": {"device": self.device, "backend": self.backend, "copy_gbps": self.copy_gbps,
                     "providers": self.providers, "suite": self.suite, "started": self.started,
                     "timing": self.timing, "versions": self.versions, "pass": self.pass_, "memory": self.memory,
                     "bytes": f"{BYTES_RULE.get(self.pass_, '')}; pct_copy = GB/s / copy_gbps * 100"},
            "cases": [r.to_dict() for r in self.results],
        }


# -- the run -----------------------------------------------------------------------------------------------------

def _launch_config(registry: Registry, rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any],
                   device: torch.device, direction: str = "forward") -> dict[str, Any] | None:
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


def peak_extra_bytes(fn: Callable[[], Any], device: torch.device) -> int | None:
    """The peak memory one call of ``fn`` allocates beyond what is allocated before it (its inputs and anything
    else alive), in bytes: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``. None on CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    res = fn()
    torch.cuda.synchronize(device)
    peak = int(torch.cuda.max_memory_allocated(device)) - base
    del res
    return max(0, peak)


def pass_times(step_ms: float, forward_ms: float | None, pass_: str) -> float:
    """The reported time of a pass from its medians: the step's (``both``), or the step's minus the forward's
    (``backward``); ``forward``: ``forward_ms`` (or ``step_ms`` when it is the forward call that was timed)."""
    if pass_ == "backward":
        if forward_ms is None:
            raise ValueError("the backward pass needs the forward's median")
        return step_ms - forward_ms
    if pass_ == "forward":
        return forward_ms if forward_ms is not None else step_ms
    return step_ms


def rates(nbytes: int, ms: float | None, copy_gbps: float) -> tuple[float | None, float | None]:
    """``(GB/s, % of copy)`` of ``nbytes`` moved in ``ms`` (None when either is not positive)."""
    gbps = nbytes / (ms * 1e6) if ms is not None and ms > 0 and nbytes > 0 else None
    pct = 100.0 * gbps / copy_gbps if gbps is not None and copy_gbps > 0 else None
    return gbps, pct


@dataclass
class _Reference:
    """What every provider of a case is checked against: eager's forward result in the case dtype and, for the
    training passes, the float64 reference's gradients, the differentiable outputs, the upstream gradients and
    eager's own gradient error (the tolerance's floor)."""

    out: Any = None
    error: str = ""
    slots: list[Any] = field(default_factory=list)
    diff: list[int] = field(default_factory=list)
    n_leaves: int = 0
    dy: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor | None] = field(default_factory=list)
    atols: list[float | None] | None = None


def _eager_reference(rec: Reduction, args: tuple[Any, ...], kwargs: dict[str, Any],
                     device: torch.device) -> tuple[Any, str]:
    """Eager's forward result (the record's reference when eager raises), or ``(None, why)``."""
    why = ""
    for fn in (torch_op(rec), rec.reference):
        try:
            with torch.no_grad():
                out = fn(*_clone(args), **_clone(kwargs))
            _sync(device)
            return out, ""
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
    return None, why


def _training_reference(rec: Reduction, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any],
                        device: torch.device, seed: int, ref: _Reference) -> None:
    """Fill ``ref``'s training part: torch on float64 copies of the inputs, a step with a seeded upstream
    gradient; then eager's own step in the case dtype, whose gradient error widens the tolerance."""
    from tritred_ops.testing import tolerance

    op = case.op
    ref.slots = grad_slots(op, args, kwargs)
    if not ref.slots:
        raise ValueError(f"{op}: no floating input to differentiate")
    a64, k64 = upcast(_clone(args)), upcast(_clone(kwargs))
    a64, k64, ins64 = require_grad(a64, k64, ref.slots)
    out64: Any = None
    why = ""
    for fn in (torch_op(rec), rec.reference):
        try:
            with torch.enable_grad():
                out64 = fn(*a64, **k64)
            break
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
    if out64 is None:
        raise ValueError(f"no float64 reference: {why}")
    ref.diff = differentiable(out64)
    leaves = tensors(out64)
    ref.n_leaves = len(leaves)
    if not ref.diff:
        raise ValueError(f"{op}: the reference's output carries no gradient")
    dtype = getattr(torch, case.dtype)
    ref.dy = upstream_gradients(out64, ref.diff, dtype, seed + 7919)
    grads = torch.autograd.grad([leaves[i] for i in ref.diff], ins64, [d.to(torch.float64) for d in ref.dy],
                                allow_unused=True)
    ref.grads = [None if g is None else g.detach() for g in grads]
    del out64, leaves, grads, a64, k64, ins64
    # eager's own error against float64: the tolerance's floor (2x it), as tritred's forward checks allow
    try:
        ea, ek = _clone(args), _clone(kwargs)
        ea, ek, eins = require_grad(ea, ek, ref.slots)
        eout = torch_op(rec)(*ea, **ek)
        el = tensors(eout)
        eg = torch.autograd.grad([el[i] for i in ref.diff], eins, [d.clone() for d in ref.dy], allow_unused=True)
        atol0 = tolerance(dtype)[0]
        atols: list[float | None] = []
        for g, r in zip(eg, ref.grads):
            if g is None or r is None or g.numel() == 0:
                atols.append(None)
                continue
            err = (g.detach().to(torch.float64) - r).abs()
            err = err[err.isfinite()]
            atols.append(max(atol0, 2.0 * float(err.max())) if err.numel() else None)
        ref.atols = atols
        del eout, el, eg
    except Exception as e:
        log.debug("eager's training step failed on %s: %s", case.label, e)
        ref.atols = None


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
    ref = _Reference()
    ref.out, ref.error = _eager_reference(rec, pristine_args, pristine_kwargs, device)
    if ref.out is None:
        result.error = f"no eager reference: {ref.error}"
    if not nbytes and ref.out is not None:
        result.bytes = nbytes = _nbytes(pristine_args) + _nbytes(pristine_kwargs) + _nbytes(ref.out)
    if pass_ != "forward":
        try:
            _training_reference(rec, case, pristine_args, pristine_kwargs, device, seed, ref)
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
             pristine_kwargs: dict[str, Any], ref: _Reference, device: torch.device, nbytes: int, copy_gbps: float,
             quick: bool, warmup: int | None, rep: int | None, memory: bool = False) -> Measurement:
    why = prov.available()
    if why:
        return Measurement(prov.name, "skipped", message=why)
    args, kwargs = _clone(pristine_args), _clone(pristine_kwargs)
    peak: int | None = None
    try:
        args, kwargs = prov.adapt_inputs(rec, case, args, kwargs)
        with prov.context():
            fn = prov.prepare(rec, case, args, kwargs)
            if fn is None:
                return Measurement(prov.name, "skipped", message="not offered")
            out = fn()
            _sync(device)
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
                      pristine_kwargs: dict[str, Any], ref: _Reference, device: torch.device, nbytes: int,
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
    args, kwargs = _clone(pristine_args), _clone(pristine_kwargs)
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
            _sync(device)
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
            _sync(device)
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
        copy_gbps: float | None = None, pass_: str = "forward", memory: bool = False) -> BenchReport:
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
