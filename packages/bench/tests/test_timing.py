"""Timing keeps one-off costs out: a call that is slow the first time(s) must not show in the reported time."""

from __future__ import annotations

import gc
import time
from typing import Any, ClassVar

import pytest
import torch
from bench_helpers import CPU_ONLY
from tritred_bench import PROVIDERS, Provider, load_suite, run, time_fn, torch_op

SLOW_S = 0.2  # a one-off cost far above any timed call here (a few microseconds to ~100 ms under the interpreter)


class _SlowAtFirst:
    """A callable whose first ``slow_calls`` calls sleep (a lazily built plan, a cache filled on first use...)."""

    def __init__(self, inner: Any, slow_calls: int) -> None:
        self.inner, self.slow_calls, self.calls = inner, slow_calls, 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.calls <= self.slow_calls:
            time.sleep(SLOW_S)
        return self.inner()


@pytest.mark.parametrize("quick", [True, False])
def test_time_fn_keeps_the_first_call_out(device: str, quick: bool) -> None:
    fn = _SlowAtFirst(lambda: torch.ones(4, device=device).sum(), slow_calls=1)
    ms = time_fn(fn, torch.device(device), quick=quick)
    assert fn.calls >= 2
    assert ms < SLOW_S * 1e3 / 4, f"the first call's {SLOW_S * 1e3:.0f} ms leaked into the time: {ms:.1f} ms"


def test_time_fn_pauses_the_garbage_collector(device: str) -> None:
    seen: list[bool] = []
    ms = time_fn(lambda: seen.append(gc.isenabled()), torch.device(device), quick=True)
    assert ms >= 0 and seen and seen[-1] is False  # the timed calls ran with the collector paused
    assert gc.isenabled()  # and it is back on afterwards


class _SlowUntilWarm(Provider):
    """torch eager, its first two calls slow: the correctness check's call and the next one."""

    name = "slow_until_warm"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        fn = torch_op(rec)
        return _SlowAtFirst(lambda: fn(*args, **kwargs), slow_calls=2)


def test_bench_warms_every_provider_before_timing(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    monkeypatch.setitem(PROVIDERS, "slow_until_warm", _SlowUntilWarm)
    cases = [c for c in load_suite("quick")[0] if c.op == "softmax"]
    report = run(cases, providers=["eager", "slow_until_warm"], device=device, quick=True, progress=False,
                 copy_gbps=1.0)
    m = report.results[0].measurements["slow_until_warm"]
    assert m.status == "ok", m.message
    assert m.ms is not None and m.ms < SLOW_S * 1e3 / 4, f"a one-off cost was timed: {m.ms:.1f} ms"


class _ThreadsSeen(Provider):
    """torch eager, recording how many intra-op threads torch had at each call."""

    name = "threads_seen"
    seen: ClassVar[list[int]] = []

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        fn = torch_op(rec)

        def call() -> Any:
            _ThreadsSeen.seen.append(torch.get_num_threads())
            return fn(*args, **kwargs)

        return call


@CPU_ONLY
def test_cpu_timing_runs_torch_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine a tiny eager op split over intra-op threads waits milliseconds for a core (log_softmax
    of 4x96 bf16: 8 ms instead of 3 us with both cores of a 2-core machine loaded): the CPU timing runs torch on
    one thread, as the interpreter runs tritred's kernels, and restores the setting afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setitem(PROVIDERS, "threads_seen", _ThreadsSeen)
        _ThreadsSeen.seen = []
        cases = [c for c in load_suite("quick")[0] if c.op == "log_softmax"]
        report = run(cases, providers=["threads_seen"], device="cpu", quick=True, progress=False, copy_gbps=1.0)
        assert report.results[0].measurements["threads_seen"].status == "ok"
        reps = 3  # CPU_REPS["quick"]: the timed calls are the last ones
        assert _ThreadsSeen.seen[-reps:] == [1] * reps, _ThreadsSeen.seen
        assert torch.get_num_threads() == 2
        assert "one intra-op thread" in report.timing
    finally:
        torch.set_num_threads(threads)
