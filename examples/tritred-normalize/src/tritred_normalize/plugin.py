"""The tritred plugin of this package: the entry point ``tritred_normalize = "tritred_normalize.plugin"``.

Two hook implementations, both plain functions decorated with :data:`tritred_core.hookimpl`:

- :func:`tritred_register_reductions` adds one reduction, ``normalize``, with everything the CLI and the bench
  need (torch reference, random inputs, canonical problem, byte count);
- :func:`tritred_launch_config` decides every ``normalize`` launch (:func:`normalize_config`), overrides tritred's
  built-in rule for one class of ``softmax`` / ``log_softmax`` problems (:func:`softmax_float64_config`), and
  returns None for everything else, so tritred's built-in launch rules (registered ``trylast``) decide those.

Both heuristics are pure functions of the :class:`~tritred_core.Problem` and the
:class:`~tritred_core.DeviceInfo`: tritred asks once per distinct problem and caches the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tritred_core import DeviceInfo, LaunchConfig, Problem, Reduction, ReductionSpec, hookimpl
from tritred_ops.plugin import random_tensor

from .normalize import SPEC, normalize, problem

Args = tuple[tuple[Any, ...], dict[str, Any]]

#: tritred's own ops whose launches this plugin decides for some problems (:func:`softmax_float64_config`).
SOFTMAX_OPS = ("softmax", "log_softmax")


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def normalize_config(problem: Problem, device: DeviceInfo) -> LaunchConfig:
    """This plugin's launch heuristic for ``normalize`` (sizes on CUDA; under the interpreter in parentheses,
    small so that tests reach every branch with small tensors).

    A program works on a tile of up to 8192 elements (1024), one warp per 1024 of them, at most 16 warps (4).
    Its lines (outputs) are ``BLOCK_M`` rows when ``K == 1``, ``BLOCK_K`` adjacent columns when ``K > 1``.

    - Unit-stride lines (``problem.inner``): a line of up to 16384 elements (1024) stays in registers
      (``single_pass``, ``BLOCK_N = next_pow2(N)``: 64 KB of fp32 accumulators; 8192 elements (512) for float64,
      whose accumulators take twice the registers), with as many lines a program as fill the tile. Longer lines
      sweep twice (``multi_pass``), one a program, in chunks of ``BLOCK_N = 2048`` (256) with 8 warps (2).
    - Strided lines (``K > 1``, e.g. ``dim=1`` of an NCHW tensor): ``BLOCK_K = min(next_pow2(K), 64)`` (16)
      adjacent lines, so that each load is a coalesced segment along K; ``single_pass`` when
      ``BLOCK_K x next_pow2(N)`` fits in the tile, else ``multi_pass`` over ``tile / BLOCK_K`` elements of N a step.
    """
    gpu = device.backend == "cuda"
    tile = 8192 if gpu else 1024
    max_warps = 16 if gpu else 4
    N = max(problem.N, 1)
    lines = problem.K if problem.K > 1 else max(problem.M, 1)

    def config(strategy: str, block_l: int, block_n: int, warps: int) -> LaunchConfig:
        block = {"BLOCK_K": block_l} if problem.K > 1 else {"BLOCK_M": block_l}
        return LaunchConfig(strategy=strategy, BLOCK_N=block_n, num_warps=warps, **block)  # type: ignore[arg-type]

    def warps(elements: int) -> int:
        return max(1, min(max_warps, elements // 1024))

    if problem.inner:
        resident = (16384 if gpu else 1024) // (2 if problem.dtype == "float64" else 1)
        if N <= resident:
            block_n = _next_pow2(N)
            block_l = max(1, min(_next_pow2(lines), tile // block_n))
            return config("single_pass", block_l, block_n, warps(block_l * block_n))
        return config("multi_pass", 1, 2048 if gpu else 256, 8 if gpu else 2)
    block_l = min(_next_pow2(lines), 64 if gpu else 16)
    if block_l * _next_pow2(N) <= tile:
        block_n = _next_pow2(N)
        return config("single_pass", block_l, block_n, warps(block_l * block_n))
    return config("multi_pass", block_l, tile // block_l, warps(tile))


def softmax_float64_config(problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """The example of overriding tritred's own heuristic: ``softmax`` / ``log_softmax`` over float64 rows of
    16385 to 32768 elements on CUDA (forward pass, row kernels). None for every other problem.

    tritred's built-in rule holds such a row in registers (``single_pass``, ``BLOCK_N=32768``, 32 warps), a size
    it chose for 2- and 4-byte elements. A float64 row of 32768 elements is 256 KB: the whole register file of an
    SM (64K 32-bit registers), 64 registers a thread for the row alone at 1024 threads, the most a thread of such
    a block may have, so it would spill. This plugin loops over the row instead, with the loop tritred's rule
    itself takes from 32769 elements on (``multi_pass``, ``BLOCK_N=16384``, 32 warps: 16 float64 values, 32
    registers a thread). The reasoning is from register bytes, not a measurement: this is an example of the
    mechanism. (float64 is in no bench suite of tritred's, so installing this example leaves its benchmarks and
    their launch decisions as they are.)
    """
    if (problem.direction != "forward" or problem.dtype != "float64" or device.backend != "cuda"
            or not problem.inner or not 16384 < problem.N <= 32768):
        return None
    return LaunchConfig(strategy="multi_pass", BLOCK_N=16384, num_warps=32)


@hookimpl
def tritred_launch_config(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """Decide ``normalize`` launches (:func:`normalize_config`), the float64 softmax rows of
    :func:`softmax_float64_config`, and nothing else (None: the next plugin, eventually tritred's rules, decides)."""
    if spec.name == SPEC.name:
        return normalize_config(problem, device)
    if spec.name in SOFTMAX_OPS:
        return softmax_float64_config(problem, device)
    return None


def make_inputs(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device = "cpu", dim: Any = 1,
                seed: int = 0) -> Args:
    """A random ``normalize`` call: ``input`` of ``shape`` normalized along ``dim`` with torch's ``p`` and ``eps``.

    ``dim`` is one int (a 1-tuple is taken as its int); ``None`` or several dims raise ValueError (the CLI and the
    conformance kit then skip the case). ``device="meta"`` gives a meta tensor (``tritred explain``).
    """
    if isinstance(dim, (tuple, list)) and len(dim) == 1:
        dim = dim[0]
    if not isinstance(dim, int):
        raise ValueError(f"normalize takes one dim, not {dim!r}")
    return (random_tensor(tuple(int(s) for s in shape), dtype, device, seed),), {"p": 2.0, "dim": dim, "eps": 1e-12}


def byte_count(input: torch.Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
               out: torch.Tensor | None = None) -> int:
    """Bytes read once (the input) plus written once (the output, of the input's dtype and shape)."""
    return 2 * input.numel() * input.element_size()


def reduction() -> Reduction:
    """The :class:`~tritred_core.Reduction` of ``normalize`` (reference: ``torch.nn.functional.normalize``)."""
    return Reduction(spec=SPEC, impl=normalize, reference=F.normalize, make_inputs=make_inputs, problem=problem,
                     byte_count=byte_count)


@hookimpl
def tritred_register_reductions() -> list[Reduction]:
    """The reductions of this plugin: ``normalize``."""
    return [reduction()]
