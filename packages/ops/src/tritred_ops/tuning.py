"""Launch-config tuning: search configs for one call on this GPU and remember the fastest.

``tritred tune OP --shape ... --dtype ...`` times :func:`candidates` (the call's current config and its neighbours
among the strategies and knobs the op's spec declares: block sizes, warps, stages, split counts) and stores the
winner in a JSON cache file under the key (device name, triton version, op, dtype, shape bucket). The built-in
launch rules consult that cache first (:func:`lookup`) and mark what it returns ``tuned=True``, which
``tritred explain`` reports. A plugin's ``tritred_launch_config`` still wins over both (the built-in hook is
``trylast``). The Problem tuned is the op's own first launch decision (``Reduction.problem``).

The cache file is ``$TRITRED_TUNE_CACHE``, else ``~/.cache/tritred/tuning.json``. A missing or unreadable file
means "nothing tuned" (logged), never an error.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.testing
from pydantic import BaseModel, ConfigDict
from tritred_core import DeviceInfo, LaunchConfig, Problem, Reduction, ReductionSpec, get_registry, hookimpl

from . import runtime as rt
from .runtime.caches import caches

log = logging.getLogger("tritred")

CACHE_ENV = "TRITRED_TUNE_CACHE"


def cache_path() -> Path:
    """Where tuned configs are read from and written to."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "tritred" / "tuning.json"


def shape_bucket(problem: Problem) -> str:
    """The shapes one tuned entry stands for: layout, N and the number of outputs rounded up to powers of two."""
    layout = "rows" if problem.inner else "cols"
    outputs = rt.next_pow2(max(problem.outputs, 1))
    return f"{layout}-N{rt.next_pow2(max(problem.N, 1))}-out{outputs}-K{'1' if problem.K == 1 else 'n'}"


def cache_key(device: DeviceInfo, op: str, problem: Problem) -> str:
    """The key of a tuned entry: device name, triton version, op, ``backward`` for a backward problem, dtype and
    :func:`shape_bucket`."""
    direction = () if problem.direction == "forward" else (problem.direction,)
    return "|".join((device.name, f"triton {triton.__version__}", op, *direction, problem.dtype,
                     shape_bucket(problem)))


def _read_file(path: Path) -> dict[str, Any]:
    """The cache file as a JSON object with an ``entries`` object (an empty one for a missing file); OSError, or
    ValueError for a file of another form."""
    if not path.exists():
        return {"entries": {}}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.setdefault("entries", {}), dict):
        raise ValueError("not a tritred tuning cache (an object whose 'entries' is an object)")
    return data  # type: ignore[no-any-return]


def _load() -> dict[str, Any]:
    """The cache file's entries, read once per process (``caches().tuning``; re-read after a tune)."""
    def read() -> dict[str, Any]:
        path = cache_path()
        try:
            entries = _read_file(path)["entries"]
        except (OSError, ValueError) as e:
            log.warning("tritred: ignoring unreadable tuning cache %s: %s", path, e)
            return {}
        # (entries that are not objects, hand-edited: ignored one by one)
        return {k: v for k, v in entries.items() if isinstance(v, dict) and isinstance(v.get("config"), dict)}
    return caches().tuning.get_or_make(str(cache_path()), read)


def lookup(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """The tuned config for this call's bucket, if one was stored, the op takes its strategy and knobs (an entry
    written by another version, or edited by hand, may not) and it still fits the problem."""
    entry = _load().get(cache_key(device, spec.name, problem))
    if entry is None:
        return None
    try:
        config = LaunchConfig(**{**entry["config"], "tuned": True, "decided_by": None, "rule": None, "why": None})
        spec.check_takes(config)
        config.check_fits(problem)
    except (ValueError, TypeError, KeyError) as e:
        log.debug("tritred: tuned entry for %s does not apply: %s", spec.name, e)
        return None
    return config


def candidates(spec: ReductionSpec, base: LaunchConfig, problem: Problem, sm_count: int = 132) -> list[LaunchConfig]:
    """``base`` and its neighbours, among the strategies and knobs ``spec`` declares: x0.5/x2 block sizes and
    warps, 1 or 3 stages, other split counts, persistent row grids of 2 or 4 programs per SM, single passes with or
    without a tail tile, rows with or without a few threads each (``threads_per_row``), rows held by several
    programs (``split_rows``: softmax, log_softmax, layer_norm, rms_norm, cross_entropy), and batch_norm's normalize
    programs looping over several tiles."""
    out: dict[tuple[Any, ...], LaunchConfig] = {}
    N = max(problem.N, 1)
    batch_norm = spec.name == "batch_norm"  # (its Problem is (batch, spatial, channel), not rows)
    split_rows = problem.inner and not batch_norm and "split_rows" in spec.strategies  # (a row over programs)

    def add(**changes: Any) -> None:
        fields = {**base.launch_fields(), **changes}
        if fields["strategy"] not in ("split", "split_rows"):
            fields["split"] = 1
        if fields["strategy"] != "single_pass":
            fields["BLOCK_TAIL"] = 0  # (a tail base's loop and split neighbours: a tail is for single passes)
        if fields["strategy"] != "single_pass" or fields["BLOCK_TAIL"]:
            fields["threads_per_row"] = 0  # (likewise: rows over a few threads are single passes of one tile)
        if split_rows and fields["strategy"] in ("split", "split_rows"):
            # split counts for the bucket's longest row (N rounded up to a power of two), so that a stored entry
            # gives every row of its bucket programs of BLOCK_N elements (split is a lower bound on the programs:
            # a smaller one would widen them for longer rows; this row's own launch is the same)
            fields["split"] = rt.cdiv(rt.next_pow2(N), fields["BLOCK_N"])
        try:
            cfg = LaunchConfig(**fields)
            spec.check_takes(cfg)
            cfg.check_fits(problem)
        except ValueError:
            return
        key = tuple(sorted(cfg.launch_fields().items()))
        out.setdefault(key, cfg)

    add()
    for w in (base.num_warps // 2, base.num_warps * 2):
        if 1 <= w <= 32:
            add(num_warps=w)
    for bn in (base.BLOCK_N // 2, base.BLOCK_N * 2):
        if bn >= 1:
            add(BLOCK_N=bn, BLOCK_TAIL=0,
                strategy=base.strategy if base.strategy != "single_pass" or bn >= N else "multi_pass")
    for bm in (base.BLOCK_M // 2, base.BLOCK_M * 2):
        if bm >= 1 and problem.inner:
            add(BLOCK_M=bm)
    for bk in (base.BLOCK_K // 2, base.BLOCK_K * 2):
        if bk >= 1 and not problem.inner:
            add(BLOCK_K=bk)
    if base.strategy == "single_pass" and problem.inner and "BLOCK_TAIL" in spec.knobs:
        # a row in one power-of-two tile, or in that tile's half plus a tail tile (BLOCK_TAIL) when it fits
        if base.BLOCK_TAIL:
            add(BLOCK_N=rt.next_pow2(N), BLOCK_TAIL=0)
        elif base.BLOCK_N >= 32 and N + 15 - base.BLOCK_N // 2 <= base.BLOCK_N // 2:
            add(BLOCK_N=base.BLOCK_N // 2, BLOCK_TAIL=max(16, rt.next_pow2(N + 15 - base.BLOCK_N // 2)))
    if base.strategy == "single_pass" and problem.inner and "threads_per_row" in spec.knobs:
        # each row over a few threads (threads_per_row: 32 elements a thread), or the kernel's own layout
        if base.threads_per_row:
            add(threads_per_row=0)
        elif not base.BLOCK_TAIL:
            add(threads_per_row=min(32, max(1, base.BLOCK_N // 32)))
    if base.strategy != "single_pass":
        add(num_stages=3 if base.num_stages == 1 else 1)
    if base.strategy == "split" and not split_rows:
        for s in (max(2, base.split // 2), base.split * 2):
            add(split=s)
    if problem.inner and not batch_norm and "num_programs" in spec.knobs and base.strategy != "split" \
            and base.num_programs == 0:
        # Persistent row grids: a few programs per SM, each looping over row blocks (loads pipelined).
        for per_sm in (2, 4):
            add(num_programs=per_sm * sm_count, num_stages=2)
    if batch_norm and base.num_programs == 0:
        # Normalize programs looping over several tiles of one channel block (its statistics merged once each).
        for per_sm in (4, 16):
            add(num_programs=per_sm * sm_count)
    if split_rows and N > 32768:
        # Rows past one program's registers held by programs of 8192 elements on 8 warps together (split rows).
        add(strategy="split_rows", BLOCK_M=1, BLOCK_N=8192, num_warps=8, num_programs=0, num_stages=1)
    return list(out.values())


class Trial(BaseModel):
    """One timed candidate."""

    model_config = ConfigDict(frozen=True)

    config: LaunchConfig
    ms: float | None
    error: str | None = None
    current: bool = False  # the config a call uses now: the plugins' (or a stored tuning entry), the first candidate


class _Force:
    def __init__(self, op: str, config: LaunchConfig) -> None:
        self.op, self.config = op, config

    @hookimpl(tryfirst=True)  # (asked before the plugins: a tryfirst plugin of the op would win every candidate)
    def tritred_launch_config(self, spec: Any, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
        return self.config if spec.name == self.op else None


def _time(fn: Callable[[], Any], device: torch.device) -> float:
    if device.type == "cuda":
        return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    samples = []
    for _ in range(3):  # the interpreter: only shows the mechanism works
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def tune(rec: Reduction, shape: tuple[int, ...], dtype: torch.dtype, dim: Any, device: torch.device,
         save: bool = True) -> tuple[Problem, list[Trial], LaunchConfig | None]:
    """Time every candidate for one call of ``rec`` and (``save``) store the fastest correct one.

    Returns the problem, the trials (fastest first; failures last) and the stored config. Candidates are
    forced through a temporary plugin and checked against ``rec.reference`` before they are timed.
    """
    reg = get_registry()
    args, kwargs = rec.make_inputs(shape, dtype, device=device, dim=dim, seed=0)
    problem = rec.problem(*args, **kwargs)
    info = rt.device_info(device)
    key = cache_key(info, rec.spec.name, problem)
    base = reg.launch_config(rec.spec, problem, info)
    from .testing import compare

    def fresh() -> tuple[list[Any], dict[str, Any]]:  # batch_norm updates its running stats in place
        return ([a.clone() if isinstance(a, torch.Tensor) else a for a in args],
                {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})

    a0, k0 = fresh()
    expected = rec.reference(*a0, **k0)
    trials = []
    for i, cfg in enumerate(candidates(rec.spec, base.model_copy(update={"tuned": False}), problem,
                                       max(info.sm_count, 1))):
        name = reg.register(_Force(rec.spec.name, cfg), name=f"tritred-tune-{i}")
        trial = functools.partial(Trial, config=cfg, current=i == 0)  # (the first candidate is the call's own)
        try:
            used = reg.launch_config(rec.spec, problem, info)
            if used.decided_by != name:  # (a plugin's hook wrapper changed it: what would run is not the candidate)
                trials.append(trial(ms=None, error=f"not run: plugin {used.decided_by!r} decided the call instead"))
                continue
            a1, k1 = fresh()
            check = compare(rec.impl(*a1, **k1), expected, dtype, relative_to_max=True)
            if not check.ok:
                trials.append(trial(ms=None, error=f"wrong result: {check.message}"))
                continue
            a2, k2 = fresh()
            trials.append(trial(ms=_time(functools.partial(rec.impl, *a2, **k2), device)))
        except Exception as e:  # a candidate that does not compile or run is skipped, not fatal
            trials.append(trial(ms=None, error=f"{type(e).__name__}: {e}"))
        finally:
            reg.unregister(name)
    trials.sort(key=lambda t: (t.ms is None, t.ms or 0.0))
    best = trials[0].config if trials and trials[0].ms is not None else None
    if save and best is not None:
        path = cache_path()
        if path.is_dir():
            raise ValueError(f"the tuning cache {str(path)!r} ($TRITRED_TUNE_CACHE) is a directory, not a file")
        try:
            data = _read_file(path)
        except ValueError:
            log.warning("tritred: overwriting unreadable tuning cache %s", path)
            data = {"entries": {}}
        data["entries"][key] = {
            "config": best.launch_fields(), "ms": trials[0].ms,
            "shape": list(shape), "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
        caches().clear()  # the next decision reads the new entry
    return problem, trials, best
