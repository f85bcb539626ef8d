"""What a run produces: one :class:`Measurement` per provider and case, a :class:`CaseResult` per case, the
:class:`BenchReport`; the passes (:data:`PASSES`) and the arithmetic of their times and rates."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .providers import PEERS
from .suites import Case

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
    normalized by, and one result per case. ``stopped``: why the run ended before its last case (the device
    lost: see :func:`tritred_bench.runner.run`), empty when it ran them all."""

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
    stopped: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``write_json``)."""
        return {
            "meta": {"device": self.device, "backend": self.backend, "copy_gbps": self.copy_gbps,
                     "providers": self.providers, "suite": self.suite, "started": self.started,
                     "timing": self.timing, "versions": self.versions, "pass": self.pass_, "memory": self.memory,
                     "stopped": self.stopped,
                     "bytes": f"{BYTES_RULE.get(self.pass_, '')}; pct_copy = GB/s / copy_gbps * 100"},
            "cases": [r.to_dict() for r in self.results],
        }


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


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values (None when there are none)."""
    vs = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else None
