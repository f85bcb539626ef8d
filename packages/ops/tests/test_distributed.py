"""tritred_ops.nn.SyncBatchNorm and tritred_ops.distributed's vocab-parallel ops across processes.

CPU (CI): groups of 2 and 4 gloo processes forked from the test process (the Triton interpreter, already imported:
no second import of torch), one process group each, every check of the suite run in turn inside each process
(``dist_checks.py``); each test reads one check's outcome on every process. GPU: the same checks and a few more
with NCCL, one process per GPU (``torch.cuda.device_count() >= 2``), started as fresh processes.

Each run draws a fresh seed (printed in failures); every process builds the same global tensors from it, and each
check compares this process's part with the single-device torch op on the global tensors in float64.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import dist_checks
import pytest
import torch
import torch.distributed as dist

#: A whole suite's time limit (gloo under the interpreter; NCCL, whose first calls compile every kernel variant). A
#: hung collective fails its check sooner: the process group's timeout (60 s gloo, 180 s NCCL).
TIMEOUT_S = {"gloo": 300, "nccl": 900}
_RESULTS: dict[tuple[int, str], tuple[int, list[dict[str, str]]]] = {}

needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0") or not dist.is_available() or not dist.is_gloo_available()
    or "fork" not in multiprocessing.get_all_start_methods(),
    reason="gloo on CPU tensors runs tritred's kernels under the Triton interpreter (forked processes)")
needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2 or not dist.is_available()
    or not dist.is_nccl_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
    reason="NCCL checks need 2 CUDA GPUs (compiled kernels, no interpreter)")


def _collect(out_dir: str, world: int, alive: list[bool], codes: list[int | None],
             limit: int) -> list[dict[str, str]]:
    results = []
    for r in range(world):
        path = os.path.join(out_dir, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
        else:
            why = f"timed out after {limit} s" if alive[r] else f"died (exit code {codes[r]})"
            results.append({"<worker>": f"process {r} {why} without a report"})
    return results


def _run(world: int, suite: str, backend: str) -> tuple[int, list[dict[str, str]]]:
    """Every process's report of ``suite`` (run once per test session)."""
    if (world, suite) in _RESULTS:
        return _RESULTS[(world, suite)]
    seed = int(torch.randint(0, 2**20, (1,)).item())
    out_dir = tempfile.mkdtemp(prefix=f"tritred-{suite}-")
    init = os.path.join(out_dir, "store")
    deadline = time.time() + TIMEOUT_S[backend]
    if backend == "gloo":  # forked: the interpreter and tritred are already imported here
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=dist_checks.run_worker, args=(r, world, init, out_dir, suite, seed))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(max(0.0, deadline - time.time()))
        alive = [p.is_alive() for p in procs]
        for p in procs:
            if p.is_alive():
                p.kill()
        codes = [p.exitcode for p in procs]
    else:  # fresh processes: CUDA cannot be forked
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        popens = [subprocess.Popen([sys.executable, dist_checks.__file__, str(r), str(world), init, out_dir, suite,
                                    str(seed), backend], env=env) for r in range(world)]
        for p in popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.time()))
        alive = [p.poll() is None for p in popens]
        for p in popens:
            if p.poll() is None:
                p.kill()
        codes = [p.returncode for p in popens]
    _RESULTS[(world, suite)] = seed, _collect(out_dir, world, alive, codes, TIMEOUT_S[backend])
    return _RESULTS[(world, suite)]


def _assert_ok(world: int, suite: str, backend: str, name: str) -> None:
    """``name`` passed on every process; else every process's failure (the first one is usually the cause: its
    peers then fail in their next collective)."""
    seed, reports = _run(world, suite, backend)
    problems = []
    for r, report in enumerate(reports):
        problem = report.get("<worker>") or report.get("<setup>")
        outcome = report.get(name)
        if problem is not None:
            problems.append(f"process {r}: {problem}")
        elif outcome is None:
            failed = [n for n, v in report.items() if v != "ok"]
            problems.append(f"process {r}: not run (after the failure of {failed})")
        elif outcome != "ok":
            problems.append(f"process {r}:\n{outcome}")
    assert not problems, f"seed {seed}\n" + "\n".join(problems)


@needs_interpreter
@pytest.mark.parametrize("name", dist_checks.suite("w2"))
def test_gloo_two_processes(name: str) -> None:
    _assert_ok(2, "w2", "gloo", name)


@needs_interpreter
@pytest.mark.parametrize("name", dist_checks.suite("w4"))
def test_gloo_four_processes(name: str) -> None:
    _assert_ok(4, "w4", "gloo", name)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("name", dist_checks.suite("nccl2"))
def test_nccl_two_gpus(name: str) -> None:
    _assert_ok(2, "nccl2", "nccl", name)


def test_single_process_without_a_group() -> None:
    """No initialized process group: the vocab-parallel ops are the single-device ones (no collective)."""
    import torch.nn.functional as F
    from tritred_ops.distributed import vocab_parallel_cross_entropy, vocab_parallel_logsumexp

    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    dev = "cuda" if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
    x = torch.randn(3, 6, dtype=torch.float64, device=dev, requires_grad=True)
    t = torch.tensor([0, 5, -100], device=dev)
    loss = vocab_parallel_cross_entropy(x, t, label_smoothing=0.1)
    ref = F.cross_entropy(x, t, label_smoothing=0.1)
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(torch.autograd.grad(loss, x)[0], torch.autograd.grad(ref, x)[0])
    torch.testing.assert_close(vocab_parallel_logsumexp(x), torch.logsumexp(x, -1))
    w = torch.tensor([0.0, 1, 1, 1, 1, 0], dtype=torch.float64, device=dev)  # only zero-weight targets: NaN, as torch
    loss = vocab_parallel_cross_entropy(x, t, weight=w, label_smoothing=0.3)
    torch.testing.assert_close(loss, F.cross_entropy(x, t, weight=w, label_smoothing=0.3), equal_nan=True)
    assert loss.isnan()
    with pytest.raises(RuntimeError, match="not initialized"):
        vocab_parallel_logsumexp(x, group=object())
