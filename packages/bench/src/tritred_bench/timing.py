"""Devices and timing: where the bench runs, how one callable is timed, the copy bandwidth and peak memory.

Timing: on CUDA ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (warmup/rep in ms); on CPU
(the Triton interpreter) the median of a few ``time.perf_counter`` calls, which only smoke-tests the machinery.
Either way each callable is called before its timed region (a first call's one-off costs, such as building a
call plan, stay out of it) and Python's garbage collector is paused while it is timed, as ``timeit`` does (one
collection after the interpreter's calls can take over 100 ms, which a call of a few microseconds would carry).
On CPU torch runs on one intra-op thread while timed, as the interpreter does: on a busy machine a tiny eager op
split over several threads waits milliseconds for a core.
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

#: do_bench settings (ms) per mode.
CUDA_TIMING = {"full": (25, 100), "quick": (5, 20)}
#: perf_counter repetitions per mode on CPU (odd: the median is one of the calls, and one outlier cannot move it).
CPU_REPS = {"full": 5, "quick": 3}
#: Calls made before the timed ones on CPU, at least (also in quick mode and when ``warmup`` asks for fewer).
CPU_WARMUP = 1


@contextlib.contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
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
def no_gc() -> Iterator[None]:
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


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA; nothing on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn: Callable[[], Any], device: torch.device, quick: bool = False,
            warmup: int | None = None, rep: int | None = None) -> float:
    """Median milliseconds of one call of ``fn``, its first call outside the timed region.

    ``fn`` is called once and synchronized first, then timed with the garbage collector paused. CUDA:
    ``triton.testing.do_bench(fn, warmup, rep, return_mode="median")`` (warmup/rep in ms, defaults from
    :data:`CUDA_TIMING`). CPU: median of ``rep`` (default :data:`CPU_REPS`) ``perf_counter`` calls after ``warmup``
    calls (at least :data:`CPU_WARMUP`), on one intra-op thread (see :func:`one_cpu_thread`).
    """
    mode = "quick" if quick else "full"
    fn()
    sync(device)
    if device.type == "cuda":
        import triton.testing

        w, r = CUDA_TIMING[mode]
        with no_gc():
            return float(triton.testing.do_bench(fn, warmup=warmup if warmup is not None else w,
                                                 rep=rep if rep is not None else r, return_mode="median"))
    reps = rep if rep is not None else CPU_REPS[mode]
    times = []
    with one_cpu_thread(device):
        for _ in range(max(CPU_WARMUP, warmup or 0) - 1):  # (the call above was the first)
            fn()
        with no_gc():
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
