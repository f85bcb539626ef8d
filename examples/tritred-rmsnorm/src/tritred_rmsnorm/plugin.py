"""The tritred plugin of this package: the entry point ``tritred_rmsnorm = "tritred_rmsnorm.plugin"``.

Two hook implementations, both plain functions decorated with :data:`tritred_core.hookimpl`:

- :func:`tritred_register_reductions` adds one reduction, ``rms_norm``, with everything the CLI and the bench
  need (torch reference, random inputs, canonical problem, byte count);
- :func:`tritred_launch_config` decides launches for ``rms_norm`` only and returns None for every other op, so
  tritred's built-in launch rules (registered ``trylast``) still decide those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tritred_core import DeviceInfo, LaunchConfig, Problem, Reduction, ReductionSpec, hookimpl
from tritred_ops.plugin import random_tensor

from .rms_norm import SPEC, problem, rms_norm

Args = tuple[tuple[Any, ...], dict[str, Any]]


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def rms_norm_config(problem: Problem, device: DeviceInfo) -> LaunchConfig:
    """This plugin's launch heuristic for ``rms_norm`` (a pure function of the problem and the device).

    - Rows of up to 16384 elements on CUDA (1024 under the interpreter) stay in registers: ``single_pass`` with
      ``BLOCK_N = next_pow2(N)`` and several rows per program until a program holds 8192 elements (1024 under
      the interpreter), one warp per 1024 elements (at most 16 warps; 4 under the interpreter).
    - Longer rows sweep twice (``multi_pass``) in chunks of ``BLOCK_N = 2048`` with 8 warps (256 and 2 under the
      interpreter, so that tests reach this branch with small tensors).
    """
    gpu = device.backend == "cuda"
    resident = 16384 if gpu else 1024
    tile = 8192 if gpu else 1024
    max_warps = 16 if gpu else 4
    N = max(problem.N, 1)
    if N <= resident:
        block_n = _next_pow2(N)
        block_m = max(1, min(_next_pow2(max(problem.M, 1)), tile // block_n))
        warps = max(1, min(max_warps, _next_pow2(block_m * block_n // 1024)))
        return LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)
    return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=2048 if gpu else 256, num_warps=8 if gpu else 2)


@hookimpl
def tritred_launch_config(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """Decide ``rms_norm`` launches (see :func:`rms_norm_config`); None for any other reduction."""
    if spec.name != SPEC.name:
        return None
    return rms_norm_config(problem, device)


def make_inputs(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu", dim: Any = -1,
                seed: int = 0) -> Args:
    """A random ``rms_norm`` call: ``input`` of ``shape``, normalized over the dims from ``dim`` to the last.

    ``dim=-1`` (default) normalizes the last dim, ``dim=None`` all dims. ``weight`` is random of the same dtype
    and ``eps`` is left at torch's default (None). ``device="meta"`` gives meta tensors (``tritred explain``).
    """
    shape = tuple(int(s) for s in shape)
    if dim is None or len(shape) == 0:
        start = 0
    else:
        d = min(dim) if isinstance(dim, (tuple, list)) else int(dim)
        start = d % len(shape)
    normalized = shape[start:] or (1,)
    x = random_tensor(shape or (1,), dtype, device, seed)
    w = random_tensor(normalized, dtype, device, seed + 1)
    return (x, list(normalized), w), {"eps": None}


def byte_count(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None = None,
               eps: float | None = None) -> int:
    """Bytes read once (input, weight) plus written once (output, the input's dtype and shape)."""
    n = input.numel() * input.element_size()
    w = weight.numel() * weight.element_size() if weight is not None else 0
    return 2 * n + w


def reduction() -> Reduction:
    """The :class:`~tritred_core.Reduction` record of ``rms_norm`` (reference: ``torch.nn.functional.rms_norm``)."""
    return Reduction(spec=SPEC, impl=rms_norm, reference=F.rms_norm, make_inputs=make_inputs, problem=problem,
                     byte_count=byte_count)


@hookimpl
def tritred_register_reductions() -> list[Reduction]:
    """The reductions of this plugin: ``rms_norm``."""
    return [reduction()]
