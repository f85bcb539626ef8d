"""Built-in launch heuristics: the ``trylast`` implementation of ``tritred_launch_config``.

Any plugin's implementation is asked first; this one answers every problem of tritred's own ops. It reads only
the :class:`~tritred_core.Problem` and :class:`~tritred_core.DeviceInfo`, so its decisions can be printed by
``tritred explain`` and tested without a GPU.

Register-tile budget: a program keeps at most ``_TILE`` accumulator elements (per live array) in registers,
spread over ``num_warps`` warps; rows that fit in one tile are single pass, longer rows loop (multi pass), and
few outputs with long rows split N across programs (two-stage, deterministic). Under the Triton interpreter the
caps are small so that tests reach every branch with small tensors.
"""

from __future__ import annotations

from tritred_core import DeviceInfo, LaunchConfig, Problem, ReductionSpec, hookimpl

from ._common import cdiv, next_pow2

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "bool": 1, "uint8": 1, "int8": 1,
             "int16": 2, "int32": 4, "int64": 8}


class _Caps:
    """Per-backend sizes: GPU numbers for CUDA, tiny ones for the interpreter (every branch reachable)."""

    def __init__(self, device: DeviceInfo) -> None:
        gpu = device.backend == "cuda"
        self.tile = 4096 if gpu else 512            # elements of one accumulator tile
        self.row_single = 8192 if gpu else 256      # longest row reduced in one pass (reduce/statistics)
        self.row_resident = 32768 if gpu else 256   # longest row kept on chip (softmax, layer_norm)
        self.chunk = 4096 if gpu else 128           # BLOCK_N of multi-pass loops
        self.programs = 4 * device.sm_count if gpu else 4  # enough programs to fill the device
        self.max_warps = 16 if gpu else 4


def _warps(elements: int, caps: _Caps) -> int:
    """~8 accumulator elements per thread (fp32 in registers), within [1, max_warps] warps."""
    return max(1, min(caps.max_warps, next_pow2(max(1, elements // 256))))


def _rows_config(problem: Problem, caps: _Caps, allow_split: bool, single_cap: int) -> LaunchConfig:
    N, R = max(problem.N, 1), problem.outputs
    if N <= single_cap:
        block_n = next_pow2(N)
        block_m = max(1, min(next_pow2(R), caps.tile // block_n if block_n <= caps.tile else 1))
        return LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n,
                            num_warps=_warps(block_m * block_n, caps))
    block_n = caps.chunk
    if allow_split and R < caps.programs:
        # Few long rows: give each row several programs so the whole device streams.
        split = max(2, min(cdiv(caps.programs, R), cdiv(N, block_n)))
        if split > 1:
            return LaunchConfig(strategy="split", BLOCK_M=1, BLOCK_N=block_n, split=split,
                                num_warps=_warps(block_n, caps))
    return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=_warps(block_n, caps))


def _cols_config(problem: Problem, caps: _Caps, allow_split: bool, single_cap: int) -> LaunchConfig:
    N, K = max(problem.N, 1), problem.K
    block_k = min(next_pow2(K), 128 if caps.tile >= 4096 else 32)
    rows_fit = max(1, caps.tile // block_k)
    if N <= min(rows_fit, single_cap):
        return LaunchConfig(strategy="single_pass", BLOCK_N=next_pow2(N), BLOCK_K=block_k,
                            num_warps=_warps(next_pow2(N) * block_k, caps))
    block_n = min(rows_fit, next_pow2(N))
    programs = problem.M * cdiv(K, block_k)
    if allow_split and programs < caps.programs and N > 4 * block_n:
        split = min(cdiv(caps.programs, programs), cdiv(N, 4 * block_n))
        if split > 1:
            return LaunchConfig(strategy="split", BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                                num_warps=_warps(block_n * block_k, caps))
    return LaunchConfig(strategy="multi_pass", BLOCK_N=block_n, BLOCK_K=block_k,
                        num_warps=_warps(block_n * block_k, caps))


def _batch_norm_config(problem: Problem, caps: _Caps) -> LaunchConfig:
    """batch_norm: Problem is (M=batch, N=spatial, K=channels) with the input's strides; tiles are
    [BLOCK_M batch, BLOCK_N spatial, BLOCK_K channels] along whichever of spatial (NCHW) or channels
    (channels-last) is contiguous."""
    N, K = max(problem.N, 1), problem.K
    channels_fast = problem.stride_k == 1 and problem.stride_n != 1
    block_k = min(next_pow2(K), 64 if caps.tile >= 4096 else 16) if channels_fast else 1
    block_n = max(1, min(next_pow2(N), caps.tile // block_k))
    block_m = max(1, min(next_pow2(problem.M), caps.tile // (block_k * block_n)))
    tiles = cdiv(problem.M, block_m) * cdiv(N, block_n)
    channel_blocks = cdiv(K, block_k)
    split = max(1, min(tiles, cdiv(caps.programs, channel_blocks)))
    return LaunchConfig(strategy="split", BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                        num_warps=_warps(block_m * block_n * block_k, caps))


@hookimpl(trylast=True)
def tritred_launch_config(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """tritred's built-in heuristic (see the module docstring); returns None for reductions it does not know."""
    caps = _Caps(device)
    name = spec.name
    if name == "batch_norm":
        return _batch_norm_config(problem, caps)
    if name in ("softmax", "log_softmax", "layer_norm"):
        single_cap = caps.row_resident
        allow_split = False  # the output needs the row's final statistics: one program per row sweeps twice
    elif name == "logsumexp":
        single_cap, allow_split = caps.row_resident, False
    elif name in ("sum", "mean", "prod", "amax", "amin", "max", "min",
                  "var", "std", "var_mean", "std_mean"):
        single_cap, allow_split = caps.row_single, True
    else:
        return None
    if problem.inner:
        return _rows_config(problem, caps, allow_split, single_cap)
    return _cols_config(problem, caps, allow_split, single_cap)
