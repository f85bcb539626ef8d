"""The built-in launch rules: the ``trylast`` implementation of ``tritred_launch_config``.

Any plugin's implementation is asked first; this one answers every problem of tritred's own ops, and None for a
plugin's op. A config stored by ``tritred tune`` (for the device, the triton version, the op, the dtype and the
shape bucket) comes first; else the op's family rules decide (``tritred_ops.families.<family>.rules``), built on
the shared pieces of this module. The rules read only the :class:`~tritred_core.Problem` and the
:class:`~tritred_core.DeviceInfo`: ``tritred explain`` prints their decisions, and tests check them without a GPU.

The model. Every op is bound by memory: a rule's job is to keep enough bytes in flight per SM to stream HBM at
full speed, without spilling registers and without spending lanes on masked elements.

- Register tiles. A program keeps about 4096 accumulator elements in registers, ~32 per thread on 4 warps. A row
  that fits is reduced in one pass (``single_pass``): up to 8192 elements for the plain reductions, 16384 on 16
  warps for var/std and 2-byte softmax rows, 32768 on 32 warps for other softmax rows and layer_norm. Where the
  per-element work is small (the plain reductions; float32 var/std and max/min rows of 1024-8192), fewer elements
  per thread on more warps keep more loads in flight.
- Short rows. Rows of up to 512 elements (1024 for softmax and layer_norm) take one-warp tiles of several rows:
  their reductions are shuffles, with no shared-memory barrier; 2-byte rows take twice the elements. var/std and
  layer_norm rows of 128-1024 go further: each row over a few threads, the rest of it in their registers.
- Loops. Longer rows loop over chunks (``multi_pass``): 4096 elements on 8-16 warps, 16384 on 32 for softmax and
  layer_norm, whose two sweeps read a row twice (the second read hits L2 while the rows in flight fit it). Rows of
  a few whole chunks have their loads unrolled, so that all of them are in flight at once; rows that are not whole
  16-byte vectors loop over 1024-wide chunks of tiles shifted to 16-byte boundaries.
- Splits. Few outputs of long rows split N over several programs (``split``), up to about one wave of programs;
  their partials merge in a fixed order (deterministic). float32 softmax rows of 64K+ elements are held by several
  programs that meet at a per-row barrier (one read instead of two).
- Tails. A row just past a power of two (2049 elements) is a single pass over that power of two plus a small tail
  tile, not a tile twice as wide and half masked.
- Columns. A non-last dim tiles the contiguous kept axis (up to 64 outputs by 8-32 rows); too few column blocks
  split N, or, for softmax, take narrower blocks or split columns.

The figures in the rules' docstrings are percentages of the H200's copy bandwidth (the bytes a call must move
against those a device-to-device copy moves in the same time), with inputs rotated so that no call finds the
last one's data in L2, unless said otherwise. They support rules on sizes, not a table of the benchmark's shapes.
Under the Triton interpreter the sizes are small (:class:`Caps`), so that tests reach every branch.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from tritred_core import DeviceInfo, LaunchConfig, Problem, ReductionSpec, hookimpl
from tritred_core.models import Strategy

from .runtime.hints import unrolled_chunks
from .runtime.launch import cdiv, next_pow2
from .tuning import lookup

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "bool": 1, "uint8": 1, "int8": 1,
             "int16": 2, "int32": 4, "int64": 8}


class Caps:
    """Per-backend sizes: measured on an H200 for CUDA (config sweeps), tiny for the interpreter (so that small
    test tensors reach every branch)."""

    def __init__(self, device: DeviceInfo) -> None:
        gpu = device.backend == "cuda"
        self.gpu = gpu
        self.tile = 4096 if gpu else 512            # elements per program for reductions (~32 per thread, 4 warps)
        self.row_single = 8192 if gpu else 256      # longest row reduced in one pass (reduce/statistics)
        self.softmax_resident = 32768 if gpu else 256   # longest softmax row kept in registers (32 warps)
        self.norm_resident = 32768 if gpu else 256  # longest layer_norm row kept in registers
        self.chunk = 4096 if gpu else 128           # BLOCK_N of multi-pass loops (16 warps: 8 per thread)
        self.norm_chunk = 16384 if gpu else 256     # BLOCK_N of softmax/layer_norm loops (two sweeps: wider wins)
        self.short_row = 512 if gpu else 0          # rows this short: 1024-element tiles of one warp (no barrier)
        self.norm_short_row = 1024 if gpu else 0    # the same for softmax and layer_norm
        self.arg_tile = 2048 if gpu else 256        # elements per program of max/min with indices (value + index)
        self.programs = 4 * device.sm_count if gpu else 4  # enough programs to fill the device
        self.col_programs = 8 * device.sm_count if gpu else 8  # column kernels: more, narrower programs win
        self.sm_count = device.sm_count if gpu else 2
        self.l2_bytes = device.l2_bytes                 # 0 where unknown
        self.max_warps = 32 if gpu else 4           # 32 for 32768-wide rows kept in registers
        self.loop_warps = 16 if gpu else 4          # loops: 8 elements per thread per 4096-wide chunk
        self.stats_loop_warps = 8 if gpu else 4     # var/std loops: 16 Welford lanes per thread per chunk
        self.stats_resident = 16384 if gpu else 256  # longest var/std row kept in registers (16 warps)
        self.split_rows = 65536 if gpu else 512     # float32 softmax rows this long are split over programs
        self.split_chunk = 8192 if gpu else 128     # softmax split rows: elements per program (8 warps)
        self.split_warps = 8 if gpu else 4


#: A family's rules: the config of a problem of one of its ops (``tritred_ops.families.<family>.rules.config``).
Rule = Callable[[ReductionSpec, Problem, Caps], LaunchConfig]

F = TypeVar("F", bound=Callable[..., "LaunchConfig | None"])


def because(config: LaunchConfig, *reasons: str) -> LaunchConfig:
    """``config`` with ``why``: each knob's constraint in the rule that sets it (``"BLOCK_N=4096: ..."``, no
    ``"; "`` inside a reason: it separates them), for ``tritred explain``; an outer rule that changes a knob adds
    its own reason after the inner ones."""
    text = "; ".join(reasons)
    return config.model_copy(update={"why": f"{config.why}; {text}" if config.why else text})


def named(fn: F) -> F:
    """Mark a function of the launch rules: a config it returns carries its name in ``LaunchConfig.rule``, before
    the names of the rules it took the config from (``softmax.rules:config > softmax.rules:loop``), so that
    ``tritred explain`` can print the docstrings that give each rule, its reason and its figures."""
    name = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> LaunchConfig | None:
        config = fn(*args, **kwargs)
        if config is None:
            return config
        return config.model_copy(update={"rule": f"{name} > {config.rule}" if config.rule else name})
    return wrapper  # type: ignore[return-value]

#: The packages under ``tritred_ops.families`` whose ops these rules decide.
FAMILIES = ("reduce", "statistics", "softmax", "layer_norm", "batch_norm", "rms_norm", "cross_entropy")


@hookimpl(trylast=True)
def tritred_launch_config(spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig | None:
    """tritred's built-in rules (see the module docstring); None for reductions they do not know.

    A config stored by ``tritred tune`` for this device, triton version, op, dtype and shape bucket comes first.
    """
    rule = _rules().get(spec.name)
    if rule is None:
        return None
    tuned = lookup(spec, problem, device)
    if tuned is not None:
        return tuned.model_copy(update={"rule": f"{lookup.__module__}:{lookup.__qualname__}"})
    return rule(spec, problem, Caps(device))


@functools.cache
def _rules() -> dict[str, Rule]:
    """Each built-in op's family rule, from the families' ``SPECS`` (imported on first use: the family rules import
    this module's builders)."""
    table: dict[str, Rule] = {}
    for family in FAMILIES:
        package = importlib.import_module(f"{__package__}.families.{family}")
        rules = importlib.import_module(f"{__package__}.families.{family}.rules")
        table.update(dict.fromkeys(package.SPECS, rules.config))
    return table


# -- sizes ---------------------------------------------------------------------------------------------------------

def itemsize(problem: Problem) -> int:
    """Bytes per element of ``problem.dtype`` (torch's name; a name it does not know counts as 4 bytes)."""
    return _ITEMSIZE.get(problem.dtype, 4)


def warps(elements: int, caps: Caps, lo: int = 4) -> int:
    """~32 elements per thread for register tiles: 4 warps for 4096 elements, up to 16 for 16384+ (measured:
    fewer, fuller threads beat many threads with one vector each)."""
    return max(min(lo, caps.max_warps), min(caps.max_warps, next_pow2(max(1, elements // 1024))))


def prev_pow2(n: int) -> int:
    """The largest power of two <= n (1 for n < 1)."""
    return 1 << (max(1, n).bit_length() - 1)


def vector_warps(problem: Problem, elements: int, caps: Caps) -> int:
    """Warps giving each thread two 16-byte loads of an ``elements`` tile.

    For the plain reductions' single pass, whose per-element work is one add: more loads in flight per SM beat
    fuller threads (sum of 16384x4096 rows fp32 4 -> 16 warps 88 -> 94 %, bf16 4 -> 8 warps 83 -> 87 %; partly
    masked tiles lost up to 10 points: not taken for them)."""
    return max(4, min(16, caps.max_warps, next_pow2(max(1, elements * itemsize(problem) // (32 * 32)))))


def plain_reduction(spec: ReductionSpec) -> bool:
    """sum, mean, prod, amax, amin: one value per row (max and min with indices have two outputs)."""
    return spec.family == "reduce" and len(spec.outputs) == 1


# -- the shared builders -------------------------------------------------------------------------------------------

@named
def rows_config(problem: Problem, caps: Caps, allow_split: bool, single_cap: int, rows_tile: int, chunk: int,
                loop_warps: int, one_warp_rows: int = 0, vector_tiles: bool = False,
                half_rows: bool = False) -> LaunchConfig:
    """The row kernels' config: a single pass for rows up to ``single_cap`` (several rows per program, up to
    ``rows_tile`` elements), else a loop over ``chunk``-wide chunks on ``loop_warps`` warps (wider chunks than
    8192 on ``caps.max_warps``), split over several programs per row when ``allow_split`` and the rows are too
    few to fill the device.

    - ``one_warp_rows``: the longest (power-of-two) row given one-warp tiles (0: none). Ops with several
      reductions per row: one warp per 1024-element tile reduces with shuffles only, no shared-memory barrier
      (262144x256: var 72 -> 87 %, layer_norm 80 -> 89, softmax 88 -> 92, max with indices bf16 60 -> 67, fp32
      level; layer_norm 65536x1024 bf16 83 -> 90, fp32 94 -> 96). A plain sum loses (77 -> 70): not for it.
    - ``half_rows``: 2-byte rows of 512-1024 elements take one-warp tiles of 2048 elements. A 2-byte element fills
      half the bytes per thread of a float32 one, so one warp takes twice the elements (var 65536x1024 bf16
      64 -> 85 %, 131072x512 69 -> 82; max 59 -> 76, 70 -> 73). float32 did not gain, and 256-wide bf16 rows lost
      3 points (var 68 -> 65): not taken for them.
    - ``vector_tiles``: whole-row tiles take :func:`vector_warps`, also for tiles of several rows (sum of
      65536x1024 fp32 90 -> 95 % on 16 warps, bf16 80 -> 85 on 8; 262144x256 fp32 88 -> 94).
    - The split: few long rows give each row several programs, so that the whole device streams.
    """
    N, R = max(problem.N, 1), problem.outputs
    if N <= single_cap:
        block_n = next_pow2(N)
        whole = f"single_pass, BLOCK_N={block_n}: a row in one register tile (N={N} <= {single_cap})"
        if half_rows and caps.gpu and itemsize(problem) == 2 and 512 <= block_n <= 1024:
            block_m = max(1, min(next_pow2(R), 2048 // block_n))
            return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=1),
                           whole, f"BLOCK_M={block_m}, num_warps=1: 2-byte rows of 512-1024 in one-warp tiles of "
                           "2048 elements (shuffles, no shared-memory barrier)")
        if block_n <= one_warp_rows:
            whole_tile = block_m = max(1, min(next_pow2(R), 1024 // block_n))
            # Few rows: the grid cannot put several programs on each SM, so nothing hides a program's serial chain
            # of ~1500 instructions on one warp (float32 log_softmax 2794x21, 88 programs: 18 us against eager's
            # 4.6 on an H100). Smaller tiles, down to 4 elements a thread, until the grid fills.
            while block_m > max(1, 128 // block_n) and cdiv(R, block_m) < caps.programs:
                block_m //= 2
            tile_why = (f"BLOCK_M={block_m}, num_warps=1: rows up to {one_warp_rows} in one-warp tiles of 1024 "
                        "elements (shuffles, no shared-memory barrier)" if block_m == whole_tile else
                        f"BLOCK_M={block_m}, num_warps=1: {R} rows, too few for {caps.programs} programs of "
                        "1024-element one-warp tiles: smaller tiles, shorter chains")
            return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=1),
                           whole, tile_why)
        block_m = max(1, min(next_pow2(R), rows_tile // block_n))
        tile_warps = warps(block_m * block_n, caps)
        warps_why = f"num_warps={tile_warps}: about 32 elements a thread"
        if vector_tiles and caps.gpu and block_n == N:  # (measured on whole-row tiles only)
            tile_warps = vector_warps(problem, block_m * block_n, caps)
            warps_why = f"num_warps={tile_warps}: two 16-byte loads a thread (one add an element)"
        return because(LaunchConfig(strategy="single_pass", BLOCK_M=block_m, BLOCK_N=block_n, num_warps=tile_warps),
                       whole, f"BLOCK_M={block_m}: rows in a tile of up to {rows_tile} elements", warps_why)
    block_n = chunk
    loop_why = f"BLOCK_N={block_n}: the loop's chunk (N={N} > {single_cap} in registers)"
    warps_why = f"num_warps={loop_warps}: the family's loop warps"
    if chunk > 8192:
        loop_warps = caps.max_warps
        warps_why = f"num_warps={loop_warps}: chunks wider than 8192 on the most warps"
    if allow_split and R < caps.programs:
        split = max(2, min(cdiv(caps.programs, R), cdiv(N, block_n)))
        return because(LaunchConfig(strategy="split", BLOCK_M=1, BLOCK_N=block_n, split=split, num_warps=loop_warps),
                       loop_why, warps_why, f"split={split}: {R} rows fill fewer than {caps.programs} programs")
    return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=block_n, num_warps=loop_warps),
                   loop_why, warps_why)


@named
def cols_config(problem: Problem, caps: Caps, allow_split: bool, single_cap: int, col_warps: int,
                target_programs: int, rows: int = 32, loads: int = 1, narrow: bool = False,
                short_tiles: bool = False, split_cols: bool = False, short_slices: bool = False) -> LaunchConfig:
    """The column kernels' config: [BLOCK_N, BLOCK_K] tiles of ``rows`` rows x 64 contiguous outputs, ``loads``
    tiles loaded per loop iteration (``num_stages``; the plain reductions' kernel only). Few column blocks split N
    up to ``target_programs`` programs, never past them: a last partial wave costs more than the extra parallelism
    brings (sum dim=0 of 16384x4096 fp32 51 -> 80 %; a split of 16 against 17, bf16 61 -> 65).

    - ``split_cols`` (softmax: its column kernel cannot split N itself): too few column blocks split N into slices,
      a (max, sum of exp) partial per slice, then a launch that merges them and writes its slice. The input is read
      twice, as by the loop, but the blocks keep 128 columns (256-512 contiguous bytes a row) in 16-row tiles on 4
      warps, at least 8 slices (softmax dim=0 of 8192x8192 bf16 35 -> 39 %, fp32 42 -> 52, log_softmax bf16
      35 -> 40, dim=1 of 16x4096x1000 bf16 29 -> 37, of 64x4096x256 bf16 36 -> 42; 32768x1024 bf16 9 -> 31 with 33
      slices of 64-column blocks; fewer slices lost). Over 128-column blocks, slices until 8 programs per SM
      (``caps.col_programs``; softmax dim=0 8192x8192 bf16 39.5 -> 43.2 % with 16 slices, fp32 52.5 -> 57.2;
      32768x1024 bf16 35.3 -> 40.1 with 128, fp32 47.6 -> 53.1; 32768x512 bf16 24.6 -> 35.5 with 256, fp32
      34.0 -> 49.3; log_softmax dim=0 16384x256 bf16 11.9 -> 17.8, fp32 19.3 -> 31.9): past
      ``MERGE_INLINE`` slices the partials of each column are merged once by a launch of their own, so the merge
      grows as K x split, not K x split^2. Fewer than 128 columns: 32-row tiles of 64. Columns that fit a tile of
      16 keep the narrowed single pass below (not measured split).
    - ``narrow`` (softmax): too few column blocks take narrower ones, down to 16 columns, in tiles of as many
      elements (more rows) on twice the warps, until they fill ``target_programs`` (softmax dim=0 of 8192x8192
      bf16: 128 programs of 32x64 15 % -> 512 of 128x16 35 %).
    - ``short_tiles`` (the plain reductions): column blocks for one to eight programs per SM run unsplit (no merge
      launch), as torch.compile's, on the warps that fill the SM (64 per SM over the programs: 8 or 16), two
      16-byte vectors per thread per iteration, as two tiles loaded one after the other or, 2-byte tiles on 16
      warps, one tile of 128 rows (against the split: sum dim=1 64x4096x256 bf16 66 -> 75 %, fp32 79 -> 83,
      128x2048x512 bf16 53 -> 82 on 8 warps; mean dim=1 16x4096x1000 fp32 67 -> 77, 32x1000x777 bf16 29 -> 38,
      amax dim=1 48x3000x640 fp32 77 -> 86; mean dim=0 1000x50000 fp32/bf16 80/68 -> 80/66, 782 programs). Other
      unsplit blocks take tiles of 8 rows x 64 outputs, two loaded per iteration, as torch.compile's: 8 elements
      per thread instead of 32 per tile, so more programs share an SM (sum dim=0 of 256x262144 bf16 67 -> 77 %,
      fp32 81 -> 88, mean dim=0 of 1000x50000 fp32 75 -> 81). Split launches keep the 32-row tiles: their few
      programs need the long tiles (sum dim=1 of 64x4096x256 bf16 67 -> 42 % with short ones).
    - ``short_slices`` (the plain reductions and prod): fewer column blocks than SMs, whose slices of four loop
      steps would give fewer than ``caps.programs`` programs, split into slices as short as one tile. A slice's
      steps run one after another, one memory round trip each, so a few long slices are latency, not bandwidth
      (H100, amax dim=1 of 4x2048x8x8 fp32: 4 slices 30.1 -> 64 slices 8.0 us, eager 13.0; prod dim=0 of 5976x512
      bf16 12 -> 132 slices 37.4 -> 13.9 us, eager 17.9; transposed 116x1519 bf16 97.9 -> 7.2, eager 29.4). The
      statistics' Welford slices lost (var dim=0 of a strided 1516x1024 fp16 46 -> 70 us, std_mean 8-37 % slower):
      not for them; more column blocks keep four steps a slice (not measured shorter).
    """
    N, K = max(problem.N, 1), problem.K
    block_k = min(next_pow2(K), 64 if caps.gpu else 32)
    if split_cols and N > min(max(1, caps.tile // (16 if caps.gpu else block_k)), single_cap):
        wide = caps.gpu and K >= 128
        split_k, split_n = (128, 16) if wide else (block_k, rows if caps.gpu else 8)
        split = min(max(8 if wide else 1, (caps.col_programs if wide else target_programs)
                        // (problem.M * cdiv(K, split_k))), cdiv(N, 4 * split_n))
        if split > 1 and problem.M * cdiv(K, block_k) < target_programs:  # (too few 64-column blocks)
            return because(LaunchConfig(strategy="split", BLOCK_N=split_n, BLOCK_K=split_k, split=split,
                                        num_warps=min(col_warps, caps.max_warps)),
                           f"split={split}: {problem.M * cdiv(K, block_k)} column blocks fill fewer than "
                           f"{target_programs} programs, slices of N merged by a second launch",
                           f"BLOCK_K={split_k}, BLOCK_N={split_n}: " + (
                               "128-column blocks in 16-row tiles" if wide else "the column block's tile"))
    if narrow and caps.gpu:
        narrowed = block_k
        while narrowed > 16 and problem.M * cdiv(K, narrowed) < target_programs:
            narrowed //= 2
        if narrowed < block_k:
            rows, col_warps, block_k = rows * block_k // narrowed, 2 * col_warps, narrowed
    rows_fit = max(1, caps.tile // block_k)
    cols_why = f"BLOCK_K={block_k}: contiguous outputs a tile (K={K})"
    if N <= min(rows_fit, single_cap):
        return because(LaunchConfig(strategy="single_pass", BLOCK_N=next_pow2(N), BLOCK_K=block_k,
                                    num_warps=min(col_warps, caps.max_warps)),
                       f"single_pass, BLOCK_N={next_pow2(N)}: the reduced rows in one tile (N={N} <= "
                       f"{min(rows_fit, single_cap)})", cols_why)
    programs = problem.M * cdiv(K, block_k)
    if short_tiles and caps.gpu and block_k == 64 and caps.sm_count <= programs < target_programs \
            and itemsize(problem) in (2, 4):
        fill_warps = min(16, prev_pow2(64 * caps.sm_count // programs))  # (>= 8: programs < 8 per SM)
        tile_rows = fill_warps * (16 // itemsize(problem)) // 2  # one vector a thread: 32 threads x 16 B / 64
        tiles = 2
        if fill_warps == 16 and itemsize(problem) == 2:
            tile_rows, tiles = 2 * tile_rows, 1
        if N >= 2 * tile_rows * tiles:
            return because(LaunchConfig(strategy="multi_pass", BLOCK_N=tile_rows, BLOCK_K=block_k,
                                        num_warps=fill_warps, num_stages=tiles),
                           cols_why, f"num_warps={fill_warps}: {programs} unsplit programs fill the SMs' warps",
                           f"BLOCK_N={tile_rows}, num_stages={tiles}: one 16-byte vector a thread a tile, {tiles} "
                           "tiles loaded an iteration")
    block_n = min(rows if caps.gpu else 8, next_pow2(N))
    loads = max(1, min(loads, cdiv(N, block_n)))
    step = block_n * loads  # rows per loop iteration
    few = short_slices and programs < caps.sm_count
    if allow_split and programs < target_programs and N > (1 if few else 4) * step:
        split = min(target_programs // programs, cdiv(N, 4 * step))
        short = few and programs * split < caps.programs
        if short:
            split = min(target_programs // programs, cdiv(N, block_n))
            loads = max(1, min(loads, cdiv(cdiv(N, split), block_n)))
        if split > 1:
            return because(LaunchConfig(strategy="split", BLOCK_N=block_n, BLOCK_K=block_k, split=split,
                                        num_warps=min(col_warps, caps.max_warps), num_stages=loads),
                           cols_why, f"split={split}: {programs} column blocks fill fewer than {target_programs} "
                           "programs (never past them: a partial wave costs more)" + (
                               ", in slices as short as one tile (fewer blocks than SMs)" if short else ""),
                           f"BLOCK_N={block_n}, num_stages={loads}: rows a tile, tiles loaded an iteration")
    tiles_why = f"BLOCK_N={block_n}, num_stages={loads}: rows a tile, tiles loaded an iteration"
    if short_tiles and caps.gpu and block_k == 64:  # (narrower column blocks keep their rows: not measured)
        block_n, loads = min(8, block_n), min(2, loads)
        tiles_why = f"BLOCK_N={block_n}, num_stages={loads}: short tiles, so that more programs share an SM"
    return because(LaunchConfig(strategy="multi_pass", BLOCK_N=block_n, BLOCK_K=block_k,
                                num_warps=min(col_warps, caps.max_warps), num_stages=loads),
                   f"multi_pass: N={N} rows past one tile", cols_why, tiles_why)


# -- rules shared by several families -------------------------------------------------------------------------------

@named
def tail_rows(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig | None:
    """Rows just past a power of two of 512-8192 (513, 1025, 2049, 4097, 8193 elements: up to 1/8 of it more, the
    16-byte shift of an odd width included): a single pass over a tile of that power of two plus a small tail tile
    (``BLOCK_TAIL``) instead of a tile twice as wide, half of its lanes masked; None elsewhere. Warps for 128 bytes
    of the first tile per thread, at most 4 (bfloat16 2048: 1 warp, 4096: 2, 8192: 4; float32 2048: 2, 4096 and
    8192: 4; layer_norm and var fp32 8192x8193 on 8 warps: 51 and 80 %, on 4: 73 and 91).

    Against single passes of the next power of two (or the 1024-wide loops of :func:`odd_rows_loop` past 4096):
    softmax bf16 32768x2049 45 -> 86 %, 65536x1025 35 -> 75, 16384x4097 62 -> 79, fp32 32768x2049 91 -> 97,
    16384x4097 85 -> 97, 65536x1025 82 -> 97; log_softmax 16384x4097 bf16 68 -> 79; logsumexp 32768x2049 bf16
    30 -> 54; var bf16 32768x2049 38 -> 57, 65536x1025 33 -> 58, 16384x4097 43 -> 53 (std the same), fp32
    32768x2049 69 -> 91, 16384x4097 67 -> 92; var_mean 32768x2049 bf16 36 -> 56; layer_norm bf16 32768x2049
    34 -> 54, 65536x1025 25 -> 56, fp32 32768x2049 63 -> 81, 16384x4097 73 -> 76, 65536x1025 64 -> 86; sum bf16
    32768x2049 48 -> 71, 65536x1025 45 -> 69. Rows of whole 16-byte vectors too: layer_norm 16384x4104 bf16
    50 -> 77, softmax 32768x2056 bf16 75 -> 91. Past 8192 and just past 512: softmax 8192x8193 bf16 69 -> 78, fp32
    85 -> 96, 131072x513 bf16 49 -> 58, fp32 94 -> 97; layer_norm 8192x8193 bf16 50 -> 61, fp32 69 -> 73,
    131072x513 bf16 37 -> 41; var 8192x8193 fp32 73 -> 91, 131072x513 fp32 61 -> 74.

    Not taken: the plain reductions' float32 rows (+1-2 points) and 2-byte rows past 4096 (sum 16384x4097 bf16:
    65 % against 72 for its loop) and at 8192 and 512 (8192x8193 bf16 71 built-in, 67 the tail; 131072x513 52
    against 38); 2-byte var rows at 512 and 8192 (131072x513 bf16: 45 % built-in, 38 the tail; 8192x8193: 54 its
    loop, 52 the tail); odd-width 2-byte layer_norm rows of 4097-4608, which loop over 512-wide chunks on one warp
    (16384x4097 42 -> 58 %, the tail 50; 8192x8193: 54 that loop, 61 the tail); rows that fill 3/4 of their power
    of two (16384x3000 bf16: softmax 88 % either way); widths not measured.
    """
    N, size = problem.N, itemsize(problem)
    if problem.stride_n != 1 or size > 4 or N <= 512:
        return None
    bn = prev_pow2(N - 1)
    rest = N + 16 // size - 1 - bn  # (the row plus its largest shift, past the first tile)
    if not (512 <= bn <= 8192 and 0 < rest <= bn // 8):
        return None
    if spec.family == "reduce":
        if not plain_reduction(spec) or size != 2 or not 1024 <= bn <= 2048:
            return None
    elif spec.family == "statistics":
        if size == 2 and bn in (512, 8192):
            return None
    elif spec.family != "softmax" and spec.name != "layer_norm":
        return None
    if spec.name == "layer_norm" and size == 2 and bn == 4096 and (N * size) % 16:
        return because(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=512, num_warps=1),
                       f"multi_pass, BLOCK_N=512, num_warps=1: 2-byte layer_norm rows of {N}, not whole 16-byte "
                       "vectors, loop over unmasked 512-wide chunks (16384x4097 bf16 42 -> 58 %, the tail 50)")
    tail, tile_warps = max(16, next_pow2(rest)), min(4, max(1, bn * size // 4096))
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=bn, BLOCK_TAIL=tail, num_warps=tile_warps),
                   f"single_pass, BLOCK_N={bn}, BLOCK_TAIL={tail}: a row of {N} just past {bn} takes a {bn} tile and a "
                   f"{tail} tail, not a {2 * bn} tile half masked",
                   f"num_warps={tile_warps}: 128 bytes of the first tile a thread, at most 4 warps")


@named
def odd_rows_loop(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig | None:
    """Unit-stride rows past 4096 elements that are not whole 16-byte vectors (odd widths: 4097, 12289, 50257),
    in rows that do not start on 16-byte boundaries: loops over 1024-wide chunks; None elsewhere.

    Why: the loops take tiles shifted to the 16-byte boundary below each row, whose inner chunks are unmasked
    16-byte loads, while a single pass would hold a power-of-two tile up to half masked (4097 in 8192 lanes, plus
    the shift). Against single passes or 4096-16384-wide loops: layer_norm bf16 16384x4097 24 -> 42 % (2 warps),
    8192x12289 39 -> 56 (4), fp32 16384x4097 50 -> 73 (4), and past 16384 2048-wide chunks on 8 warps: bf16
    4096x50257 33 -> 50, 1024x131071 43 -> 47, fp32 4096x50257 46 -> 59 (the best of each within 1.5 points); var
    bf16 16384x4097 28 -> 44, 8192x12289 32 -> 63, 4096x50257 62 -> 71, fp32 16384x4097 51 -> 68 (2 warps each);
    softmax bf16 16384x4097 38 -> 62 (2), 8192x12289 58 -> 71 (4), fp32 16384x4097 79 -> 85 (4); max (loops only,
    two chunks per iteration) bf16 4096x50257 71 -> 82, 8192x32001 65 -> 83, min fp32 2048x100001 90 -> 92; the
    plain reductions up to 16384 (4 warps): sum bf16 16384x4097 35 -> 70, 8192x12289 71 -> 81, fp32 16384x5001
    79 -> 91, 3000x4097 53 -> 57.

    Not reached: rows whose starts are 16-byte aligned (padded rows: no shifted tiles, not measured); few rows
    (their split); float32 softmax rows past 8192 (8192x12289 in one 16384 tile: 98 % against 84 for the best
    loop) and 2-byte ones past 16384 (the L2 rule of ``softmax.rules.loop``); the plain reductions' longer rows
    (4096x50257 bf16: 90 % built-in); rows up to 4096 (layer_norm 32768x2049 bf16: 28 % either way).
    """
    N, size = problem.N, itemsize(problem)
    if N <= 4096 or (N * size) % 16 == 0 or problem.stride_n != 1 or (problem.stride_m * size) % 16 == 0:
        return None
    if few_rows(problem, caps):  # (no SM runs two programs: the loop's round trips, one a chunk, are its time)
        return None
    cfg = _odd_rows_choice(spec, problem, caps)
    if cfg is None:
        return None
    reasons = [f"multi_pass, BLOCK_N={cfg.BLOCK_N}: rows of {N}, not whole 16-byte vectors, loop over chunks shifted "
               "to the 16-byte boundary below each row (unmasked inner chunks)",
               f"num_warps={cfg.num_warps}: the best measured for {spec.name} rows of this width and dtype"]
    if cfg.num_stages == 2:
        reasons.append("num_stages=2: two chunks an iteration (the reductions with indices)")
    return because(cfg, *reasons)


def _odd_rows_choice(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig | None:
    """:func:`odd_rows_loop`'s loop by op, width and dtype (its docstring gives the figures)."""
    N, size = problem.N, itemsize(problem)
    if spec.name == "layer_norm":
        if N > 16384:
            return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=2048, num_warps=8)
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=2 if size == 2 and N <= 8192
                            else 4)
    if problem.outputs < caps.programs:
        return None  # (few rows: the split of the reductions that have one)
    if spec.family == "statistics":
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=2)
    if spec.name in ("softmax", "log_softmax") and size == 2 and N <= 16384:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=2 if N <= 8192 else 4)
    if spec.name in ("softmax", "log_softmax") and size == 4 and N <= 8192:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=4)
    if spec.family == "reduce" and not plain_reduction(spec) and N > caps.row_single:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=4, num_stages=2)
    if plain_reduction(spec) and N <= 16384:
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=1024, num_warps=4)
    return None

@named
def short_rows(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig | None:
    """Whole power-of-two rows of 128-512 elements (var/std/var_mean/std_mean: 2-byte ones) or 128-1024
    (layer_norm and rms_norm: 2- and 4-byte ones), each spread over a few threads (``threads_per_row``) on 4 warps:
    32 elements a thread (16 for float32 norm rows of up to 512); None elsewhere. rms_norm takes layer_norm's
    figures (one reduction a row where layer_norm has two: not measured on its own).

    Why: the rows' own layout puts a warp across each row, and these single passes are then bound by instructions:
    five shuffle levels per sum for 8 elements a thread, and every per-row division computed by 32 threads (SASS,
    sm_90a: var of 262144x256 bf16 16.5 instructions per element, 8.5 with 8 threads a row; layer_norm 944 -> 640
    per program). var 262144x256 bf16 69 -> 83 %, std 70 -> 85, 524288x128 70 -> 83, fp16 262144x256 69 -> 83,
    131072x512 84 -> 84; float32 var within a point (not taken). layer_norm, weight and bias loaded with the row:
    262144x256 bf16 91 -> 94, 131072x512 93 -> 94, 65536x1024 91 -> 94, 524288x128 81 -> 94; fp32 96-97 ->
    97-98.5. Rows whose tile is partly masked lost (var 200000x300 bf16 64 -> 38 %: a mask per element, no 16-byte
    loads), as did var's 768 (86 -> 82 %).
    """
    N, size = problem.N, itemsize(problem)
    if not caps.gpu or N & (N - 1) or not 128 <= N <= 1024 or size > 4:
        return None
    if spec.name in ("layer_norm", "rms_norm"):
        per_thread = 32 if size <= 2 or N > 512 else 16
    elif size == 2 and N <= 512:
        per_thread = 32
    else:
        return None
    tile_warps = 4
    threads = min(32, N // per_thread)
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=32 * tile_warps // threads, BLOCK_N=N,
                                num_warps=tile_warps, threads_per_row=threads),
                   f"single_pass, BLOCK_N={N}, threads_per_row={threads}: a whole row of {N} over {threads} threads "
                   "(fewer shuffle levels, per-row arithmetic on fewer threads)",
                   f"BLOCK_M={32 * tile_warps // threads}, num_warps={tile_warps}: {per_thread} elements a thread "
                   f"on {tile_warps} warps")


@named
def wide_rows(spec: ReductionSpec, problem: Problem, caps: Caps) -> LaunchConfig | None:
    """float32 var/std/var_mean/std_mean (rows of 1024-8192) and max/min with indices (1024-4096) of whole
    power-of-two unit-stride rows: 1024-2048-wide rows one a program on N / 256 warps (two 16-byte loads a thread,
    as the plain reductions' whole rows), 4096-8192 two a program on 16 warps (16-32 elements a thread) where the
    grid has at least ~4 waves of them and the rows have no kept axis inside them (K = 1); None elsewhere
    (integer max/min, strided rows: not measured).

    Why: the generic tile (~32 elements a thread on 4 warps) left these rows 2-5 points under the plain reductions
    of the same shapes; a row's reductions cross its warps, and two rows a program share those exchanges. Against
    the tiles they replace: var 65536x1024 fp32 88 -> 92-93.5 % (M4 w4 -> M1 w4), std 88 -> 93, 100000x1024
    92 -> 95, 32768x2048 88-89 -> 92-92.6 (M2 w4 -> M1 w8), var_mean 40000x2048 90 -> 92, 16384x4096 88-89 ->
    91-92 (M1 w4 -> M2 w16; std and var_mean alike), 8192x8192 88 -> 89.5-90 (M1 w8 -> M2 w16); max 65536x1024
    88 -> 90, 32768x2048 88 -> 91, 16384x4096 88 -> 90. Lost: 3000x4096 (1500 programs of 16 warps, under 3 waves)
    65 -> 60, hence the rows bound; var over (0, 2, 3) of 256x64x64x64 (4096-wide planes of two reduced axes)
    85 -> 82, so two-row programs are for plain rows (K = 1) only (its 1024- and 2048-wide planes took the one-row
    tiles: 64x256x32x32 59 -> 61, 64x128x32x64 level). A row over 16 warps alone (4096: 89 -> 86) and tiles of
    more rows on more warps (4096, M4 w32: 50 %) lost too. 16384-wide rows kept theirs (M1 w16: level); bfloat16
    gained nothing beyond the run-to-run spread (+-1.5 points), 256-512-wide rows lost (their one-warp tiles
    stay). Partly masked tiles are not covered (the plain reductions' version of this lost up to 10 points there).
    """
    N, R = problem.N, problem.outputs
    widest = 4096 if spec.family == "reduce" else 8192  # (max/min's 8192 with two rows: not measured)
    if not caps.gpu or N & (N - 1) or not 1024 <= N <= widest or problem.dtype != "float32" or problem.stride_n != 1:
        return None
    if N <= 2048:
        one_warps = min(caps.max_warps, N // 256)
        return because(LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=N, num_warps=one_warps),
                       f"single_pass, BLOCK_M=1, BLOCK_N={N}, num_warps={one_warps}: a float32 row of {N} a program, "
                       "two 16-byte loads a thread")
    if R < 32 * caps.sm_count or problem.K > 1:
        return None  # (fewer than ~4 waves of 2-row programs on 16 warps; or rows of two reduced axes)
    two_warps = min(caps.max_warps, 16)
    return because(LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=N, num_warps=two_warps),
                   f"single_pass, BLOCK_M=2, BLOCK_N={N}, num_warps={two_warps}: two float32 rows of {N} a program "
                   f"share the exchanges across warps ({R} rows: 4 waves or more)")


@named
def unrolled_loop(problem: Problem, caps: Caps, statistics: bool = False) -> LaunchConfig | None:
    """2-byte rows over 4096 elements that are 2-8 chunks of 1024, 2048 or 4096 elements (the smallest such chunk):
    a loop over those chunks, 8 elements per thread, whose first sweep is unrolled (``runtime.unrolled_chunks``);
    None elsewhere. For var/std (``statistics``) not the rows of 8192-element tiles less than a quarter masked.

    Why: a power-of-two tile leaves lanes of such rows masked, and the loop keeps the whole row's loads in flight
    with a quarter of the single pass's registers, as torch.compile's loops of constant width do. Against the
    single pass (or the config it replaced), bf16 unless named: layer_norm 5120 78 -> 81 %, 6144 69 -> 82, 7168 74 ->
    83, 10240 76 -> 82, 12288 71 -> 82 (fp16 67 -> 88), 14336 77 -> 83, 20480 66 -> 83, 24576 55 -> 82, 28672 64 -> 79,
    and the power of two 32768 70 -> 76 (whose single pass needs 32 warps); var 5120 66 -> 78, 6144 77 -> 79, 10240 56
    -> 75, 12288 65 -> 78, 14336 73 -> 79. Lost, so left to the single pass: powers of two up to 16384 (layer_norm 8192
    84 -> 82, 16384 85 -> 81), var rows of 8192-element tiles less than a quarter masked (7168: 85 -> 81), float32, the
    plain reductions (sum of the same widths: 88-92 % either way).
    """
    N = problem.N
    if not caps.gpu or itemsize(problem) != 2 or N <= 4096 or (N & (N - 1) == 0 and N <= 16384):
        return None
    if statistics and N <= 8192 and 4 * N > 3 * next_pow2(N):
        return None
    return smallest_unrolled_chunk(N, (1024, 2048, 4096))


@named
def smallest_unrolled_chunk(N: int, chunks: tuple[int, ...]) -> LaunchConfig | None:
    """The loop over the first of ``chunks`` whose rows of N unroll (``runtime.unrolled_chunks``), one warp per
    256 elements (8 per thread); None if none does."""
    for chunk in chunks:
        cfg = LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=chunk, num_warps=chunk // 256)
        if unrolled_chunks(N, cfg):
            return because(cfg, f"multi_pass, BLOCK_N={chunk}: the smallest of {'/'.join(map(str, chunks))} whose "
                           f"chunks make up the row of {N} (the first sweep unrolled, no lane masked)",
                           f"num_warps={chunk // 256}: 8 elements a thread")
    return None


def few_rows(problem: Problem, caps: Caps) -> bool:
    """Fewer rows than SMs: a loop's grid of one program per row leaves SMs idle, so the long rows of the ops that
    can split a row over programs (softmax, log_softmax, layer_norm and rms_norm) take the split
    (:func:`split_rows_config`) whatever its barrier costs: bf16 softmax 8x2097152 ran on 8 of 132 SMs, where the
    split runs 256 programs a row. Predicted from the grid alone: R programs on R SMs stream at most R / SMs of the
    device's bandwidth."""
    return problem.outputs < caps.sm_count


@named
def split_rows_config(problem: Problem, caps: Caps, strategy: Strategy = "split_rows") -> LaunchConfig:
    """Each row held by programs of ``caps.split_chunk`` elements on ``caps.split_warps`` warps that meet at a
    per-row barrier (one read of the row; ``runtime.launch_split_rows``). ``strategy``: the name the family's
    launcher takes for it (softmax's rows: ``split``)."""
    split = cdiv(problem.N, caps.split_chunk)
    return because(LaunchConfig(strategy=strategy, BLOCK_M=1, BLOCK_N=caps.split_chunk, split=split,
                                num_warps=caps.split_warps),
                   f"{strategy}, split={split}: each row held by {split} programs of {caps.split_chunk} elements "
                   "that meet at a barrier (one read of the row)")
