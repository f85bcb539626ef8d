"""The launch decision of a call and the grid arithmetic around it.

:func:`decide` asks the ``tritred_launch_config`` hook for the config of a call's canonical view (once per op,
dtype, view and device; then cached); the other functions turn a config into grids: row programs, split slices,
the merge launches' tiles, split rows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tritred_core import LaunchConfig, Problem, ReductionSpec, get_registry

from . import device as devices
from .caches import caches
from .checks import dtype_name
from .trace import Decision, Stopped, active
from .view import View

log = logging.getLogger("tritred")


def decide(spec: ReductionSpec, x: torch.Tensor, view: View, layout: str = "strided",
           make_problem: Callable[[], Problem] | None = None, direction: str = "forward") -> LaunchConfig:
    """The launch config of a call: asked from the hook once per (op, direction, dtype, view, device), then
    cached.

    The key is plain tuples, so pydantic and pluggy stay off the hot path; ``make_problem`` builds the Problem
    on a miss when it is not the one of ``view`` (batch_norm describes its own). ``direction="backward"``: the
    decision of a backward kernel over ``view`` (``x``: the tensor whose dtype the kernel reads). Under
    :func:`~.trace.tracing` the decision is recorded and not cached.
    """
    trace = active()
    if trace is not None:
        p = make_problem() if make_problem is not None else problem_of(spec.name, x, view, layout, direction)
        if trace.stop_at_problem:
            trace.decisions.append(Decision(spec, p, None))
            raise Stopped
        cfg = get_registry().launch_config(spec, p, trace.device or devices.device_info(x.device))
        trace.decisions.append(Decision(spec, p, cfg))
        return cfg
    key = (spec.name, x.dtype, view, layout, x.device) if direction == "forward" else \
        (spec.name, x.dtype, view, layout, x.device, direction)

    def ask() -> LaunchConfig:
        p = make_problem() if make_problem is not None else problem_of(spec.name, x, view, layout, direction)
        return get_registry().launch_config(spec, p, devices.device_info(x.device))
    return caches().configs.get_or_make(key, ask)


def problem_of(op: str, x: torch.Tensor, view: View, layout: str = "strided",
               direction: str = "forward") -> Problem:
    """The :class:`~tritred_core.Problem` of ``op`` on ``x`` (its dtype) seen as ``view`` (the first tensor's
    strides); ``layout="gathered"`` when the view is of a contiguous copy; ``direction``: which pass."""
    sm, sn, sk = view.strides[0]
    return Problem(op=op, dtype=dtype_name(x.dtype), direction=direction, M=view.M, N=view.N,  # type: ignore[arg-type]
                   K=view.K, stride_m=sm, stride_n=sn, stride_k=sk, layout=layout)  # type: ignore[arg-type]


def row_programs(cfg: LaunchConfig, rows: int, split: int = 1) -> tuple[int, int]:
    """(programs along the row axis, PERSIST) of a row kernel: one program per BLOCK_M rows, or a persistent grid
    of ``cfg.num_programs`` programs (no more than the row blocks) looping over them; never with a split of N."""
    blocks = cdiv(rows, cfg.BLOCK_M)
    persist = min(cfg.num_programs, blocks) if cfg.num_programs > 0 and split == 1 else 0
    return persist or blocks, persist


def slices(total: int, parts: int, granule: int = 1) -> tuple[int, int]:
    """Cut ``total`` items into at most ``parts`` slices of whole ``granule``s: (slice count, items per slice;
    the last slice may be shorter). No slice is empty, so every split partial holds data."""
    per = cdiv(cdiv(max(total, 1), max(parts, 1)), granule) * granule
    return cdiv(max(total, 1), per), per


def split_plan(cfg: LaunchConfig, N: int) -> tuple[int, int]:
    """(split, n_per_split) of a reduction over N: one slice unless the strategy is ``split``."""
    if cfg.strategy != "split" or cfg.split <= 1:
        return 1, max(N, 1)
    return slices(N, cfg.split, cfg.BLOCK_N)


def combine_blocks(rows: int, split: int, tile: int = 512) -> tuple[int, int]:
    """(rows per program, BLOCK over the partials) of a launch that merges ``split`` partials of ``rows``
    outputs: every partial of a row in one tile, several rows per program up to ``tile`` elements.

    Small tiles: the merge is a few hundred KB, and latency-bound with few programs (H200, sum dim=1 of
    64x4096x256 bf16 split 4: 4096-element tiles gave 16 programs and cost ~8 us of a ~45 us call)."""
    block_s = next_pow2(split)
    return max(1, min(next_pow2(rows), tile // block_s)), block_s


def split_row_chunks(cfg: LaunchConfig, N: int) -> tuple[int, int]:
    """(BLOCK_N, programs per row) of a split-rows launch: ``cfg.split`` programs of at least ``cfg.BLOCK_N``
    columns, widened to cover the row but never past Triton's largest tile (2**20 elements: more programs
    instead), so that any config computes the row, and without a program past its end."""
    block_n = min(1 << 20, max(cfg.BLOCK_N, next_pow2(cdiv(max(N, 1), cfg.split))))
    return block_n, cdiv(max(N, 1), block_n)


def launch_split_rows(rec: Any, kernel: Any, x: torch.Tensor, rows: int, split: int, num_programs: int,
                      args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Launch a split-rows kernel (``split`` programs hold each row: the ``_split_rows_kernel`` of softmax,
    layer_norm and rms_norm, cross_entropy's ``_xent_split_kernel``).

    On a GPU, one cooperative launch of a persistent grid: as many groups of ``split`` programs as the device
    holds at once (from the compiled kernel's registers, shared memory and warps), each group looping over rows,
    its programs meeting at a barrier per row (``PHASE=3``). Under the interpreter, or when not even one group
    fits, two launches (``PHASE=1`` writes the partials, ``PHASE=2`` reads the row again and merges them): the
    same arithmetic with a second read. ``args`` start with the input and the output and continue with the
    kernel's per-row workspace (partials) and the barrier counters (int32 zeros, one per row: a replayed call
    zeroes them in its workspace).
    """
    counts = rec.zeros((rows,), torch.int32, x.device)
    groups = _coop_groups(kernel, x, (*args, counts), kwargs, split) if x.device.type == "cuda" else 0
    if num_programs:  # (the config's program count caps the persistent grid)
        groups = min(groups, max(1, num_programs // split))
    groups = min(groups, rows)
    if groups >= 1:
        rec.launch(kernel, (groups * split,), *args, counts, **kwargs, PHASE=3, launch_cooperative_grid=True)
        return
    if x.device.type == "cuda":
        log.info("split rows of %d programs: no group fits on the device at once; two launches", split)
    for phase in (1, 2):
        rec.launch(kernel, (rows * split,), *args, counts, **kwargs, PHASE=phase)


def _coop_groups(kernel: Any, x: torch.Tensor, args: Sequence[Any], kwargs: dict[str, Any], split: int) -> int:
    """Groups of ``split`` programs of the compiled ``kernel`` (``args``: every positional argument of the launch)
    that are resident on ``x``'s device at once."""
    return devices.resident_programs(kernel, x, args, {**kwargs, "PHASE": 3}) // split


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for integers."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def prod(xs: Sequence[int]) -> int:
    """The product of ``xs`` (1 for none)."""
    return math.prod(xs)


def launch_config(spec: ReductionSpec, problem: Problem, device: torch.device) -> LaunchConfig:
    """The launch config of ``problem`` on the torch device ``device``, for a plugin's own op: asked from the
    ``tritred_launch_config`` hook (plugins first, tritred's built-in rules last) once, then cached in the registry's
    state (dropped whenever a plugin is registered or unregistered).

    Raises:
        tritred_core.InvalidLaunchConfigError: no plugin answered for ``spec``, or the winner cannot compute
            ``problem``.
    """
    key = (spec.name, problem, str(device))
    return caches().launch_configs.get_or_make(
        key, lambda: get_registry().launch_config(spec, problem, devices.device_info(device)))
