"""Shared host-side machinery: argument checks, the one canonicalization, device info and the launch decision.

Every op goes through :func:`canonical_view`, which describes its tensors as M x N x K index spaces (reduced over
N) with per-tensor strides, merging dims exactly like torch's TensorIterator does. Kernels then read the
caller's layout directly: a transposed, sliced or expanded input is never copied unless its reduced dims cannot
be expressed as one strided axis (``layout="gathered"``, logged).
"""

from __future__ import annotations

import ctypes
import logging
import math
import operator
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tritred_core import FLOAT_DTYPES, INTEGER_DTYPES, DeviceInfo, LaunchConfig, Problem, ReductionSpec, get_registry

log = logging.getLogger("tritred")

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTEGERS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
ALL_DTYPES = FLOAT_DTYPES + INTEGER_DTYPES
#: torch's own names for integer dtypes in error messages (c10::ScalarType).
SCALAR_TYPE_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                     torch.uint8: "Byte", torch.bool: "Bool"}


class Unset:
    """Marks an argument that was not passed (torch's overloads tell ``prod(x)`` from ``prod(x, None)``)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = Unset()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# -- argument checks ---------------------------------------------------------------------------------------------

def check_tensor(op: str, name: str, t: Any) -> torch.Tensor:
    """``t`` if it is a tensor (TypeError naming the argument otherwise), with a negative-bit view
    (``torch._neg_view``) materialized: kernels read memory, which holds the values un-negated."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(t).__name__}")
    return t.resolve_neg() if t.is_neg() else t


def unit_stride(t: torch.Tensor | None) -> torch.Tensor | None:
    """A parameter vector (weight, bias, running statistics) as kernels read it: flat with unit stride. A
    contiguous one is passed as is; a strided, expanded or negative-bit view is copied (its own size, not the
    input's): the caller copies an in-place updated one back."""
    if t is None or (t.is_contiguous() and not t.is_neg()):
        return t
    return t.resolve_neg().contiguous()


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET set to anything but "" or "0")."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_runnable(op: str, x: torch.Tensor) -> None:
    """Kernels run on CUDA tensors, or on CPU tensors under the Triton interpreter (TRITON_INTERPRET=1)."""
    if x.device.type == "cuda":
        return
    if x.device.type == "cpu" and interpreting():
        return
    raise RuntimeError(
        f"tritred.{op}(): input is on {x.device}; tritred runs on CUDA tensors, or on CPU tensors only under "
        "the Triton interpreter (set TRITON_INTERPRET=1 before importing tritred_ops)"
    )


def check_same_device(op: str, x: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.device != x.device:
            raise RuntimeError(
                f"{op}(): Expected all tensors to be on the same device, but argument '{name}' is on {t.device} "
                f"and input is on {x.device}"
            )


def check_float(op: str, x: torch.Tensor, what: str = "input") -> None:
    """Floating tensors only; like torch, a non-floating input has no kernel (NotImplementedError), a
    non-floating parameter is a RuntimeError."""
    if x.dtype not in FLOATS:
        kind = NotImplementedError if what == "input" else RuntimeError
        raise kind(f"tritred.{op}(): {what} dtype must be float16, bfloat16, float32 or float64, got {x.dtype}")


def check_supported(op: str, x: torch.Tensor, allow_integers: bool) -> None:
    if x.dtype in FLOATS or (allow_integers and x.dtype in INTEGERS):
        return
    kinds = "floating point, integer and bool" if allow_integers else "floating point"
    # torch raises NotImplementedError for dtypes without a kernel (e.g. complex); so do we.
    raise NotImplementedError(f"tritred.{op}(): not implemented for dtype {x.dtype}; supported: {kinds} dtypes")


def as_index(value: object) -> int | None:
    """``value`` as a Python int when it is integer-like (int, numpy integer, 0-d integer tensor), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def torch_accepts(name: str, call: Callable[[], object]) -> bool:
    """Whether the installed torch accepts ``call`` (on meta tensors): for argument forms that torch releases
    disagree on (``logsumexp(x, None)``, ``prod(x, None)``). Asked once per process, cached."""
    def probe() -> bool:
        try:
            call()
        except TypeError:
            return False
        return True
    return _cached(("torch_accepts", name), probe)  # type: ignore[no-any-return]


def check_keepdim(op: str, keepdim: object) -> bool:
    if not isinstance(keepdim, bool):
        raise TypeError(f"{op}(): argument 'keepdim' must be bool, not {type(keepdim).__name__}")
    return keepdim


def wrap_dim(op: str, dim: int, ndim: int) -> int:
    """torch's dim wrapping: a 0-d tensor accepts dims -1 and 0; any integer-like dim is accepted."""
    index = as_index(dim)
    if index is None:
        raise TypeError(f"{op}(): argument 'dim' must be int or tuple of ints, not {type(dim).__name__}")
    dim = index
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim % max(ndim, 1)


def wrap_dims(op: str, dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Normalize ``dim`` (None, int, tuple or list) to sorted non-negative dims; None and () mean all dims."""
    if dim is None:
        return tuple(range(ndim))
    if as_index(dim) is not None:
        dims = [wrap_dim(op, dim, ndim)]  # type: ignore[arg-type]
    elif isinstance(dim, (tuple, list, torch.Size)):
        # (torch's int-list arguments take a bool element as an int: sum(x, (0, True)) is a sum over dims 0, 1)
        dims = [wrap_dim(op, int(d) if isinstance(d, bool) else d, ndim) for d in dim]
        if not dims:  # torch treats dim=() / [] as a full reduction
            return tuple(range(ndim))
    else:
        raise TypeError(f"{op}(): argument 'dim' must be int or tuple of ints, not {type(dim).__name__}")
    seen: set[int] = set()
    for d in dims:
        if d in seen:
            raise RuntimeError(f"{op}(): dim {d} appears multiple times in the list of dims")
        seen.add(d)
    return tuple(sorted(d for d in dims if ndim > 0))


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> list[int]:
    return [1 if i in dims else s for i, s in enumerate(shape) if keepdim or i not in dims]


# -- canonical view ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class View:
    """M x N x K index space shared by several tensors; ``strides[i] = (s_m, s_n, s_k)`` of tensor i."""

    M: int
    N: int
    K: int
    strides: tuple[tuple[int, int, int], ...]


_CACHE_LIMIT = 1 << 14  # entries in the registry's launch cache before it is cleared (unbounded shape streams)


def _cached(key: Hashable, make: Any) -> Any:
    """registry.cache[key], computed by ``make()`` once (the hot path of a repeated call is dict lookups)."""
    cache = get_registry().cache
    try:
        return cache[key]
    except KeyError:
        value = make()
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value
        return value


def canonical_view(shape: Sequence[int], strides: Sequence[Sequence[int]], reduced: Sequence[int],
                   reorder_reduced: bool = True) -> View | None:
    """Cached :func:`_canonical_view` (see there)."""
    key = ("view", tuple(shape), tuple(tuple(s) for s in strides), tuple(reduced), reorder_reduced)
    return _cached(key, lambda: _canonical_view(shape, strides, reduced, reorder_reduced))  # type: ignore[no-any-return]


def _canonical_view(shape: Sequence[int], strides: Sequence[Sequence[int]], reduced: Sequence[int],
                    reorder_reduced: bool = True) -> View | None:
    """Describe tensors of one logical ``shape`` (per-tensor ``strides``; 0 on dims a tensor lacks) as M x N x K.

    Dims of size 1 are dropped. Adjacent kept dims merge when they merge in every tensor; reduced dims merge the
    same way (sorted by the first tensor's strides first when ``reorder_reduced``: fine for order-insensitive
    reductions, not for ops whose weights are indexed by the reduced position). Returns None when more than one
    reduced group or more than two kept groups remain (the caller gathers).
    """
    kg, rg = dim_groups(shape, strides, reduced, reorder_reduced)
    if len(rg) > 1 or len(kg) > 2:
        return None
    return view_of_groups(kg, rg, len(strides))


Group = tuple[int, list[int]]  # (size, per-tensor stride of the innermost dim) of dims that merge into one axis


def dim_groups(shape: Sequence[int], strides: Sequence[Sequence[int]], reduced: Sequence[int],
               reorder_reduced: bool = True) -> tuple[list[Group], list[Group]]:
    """(kept groups, reduced groups): adjacent dims of size > 1 merged where they merge in every tensor (reduced
    dims sorted by the first tensor's strides first when ``reorder_reduced``)."""
    red = set(reduced)
    kept_dims = [d for d in range(len(shape)) if d not in red and shape[d] != 1]
    red_dims = [d for d in range(len(shape)) if d in red and shape[d] != 1]
    if reorder_reduced:
        red_dims.sort(key=lambda d: -abs(strides[0][d]))

    def groups(dims: list[int]) -> list[Group]:
        out: list[Group] = []
        for d in dims:
            st = [s[d] for s in strides]
            if out and all(prev == cur * shape[d] for prev, cur in zip(out[-1][1], st)):
                out[-1] = (out[-1][0] * shape[d], st)
            else:
                out.append((shape[d], st))
        return out

    return groups(kept_dims), groups(red_dims)


def view_of_groups(kg: list[Group], rg: list[Group], ntensors: int) -> View:
    """The M x N x K view of at most two kept groups and at most one reduced group."""
    N, sn = (rg[0][0], rg[0][1]) if rg else (1, [0] * ntensors)
    if len(kg) == 2:
        (M, sm), (K, sk) = kg
    elif len(kg) == 1:
        size, st = kg[0]
        # A single kept group that moves faster than the reduced axis is the inner one (K): outer reduction.
        if rg and abs(st[0]) < abs(sn[0]):
            M, sm, K, sk = 1, [0] * ntensors, size, st
        else:
            M, sm, K, sk = size, st, 1, [0] * ntensors
    else:
        M, sm, K, sk = 1, [0] * ntensors, 1, [0] * ntensors
    return View(M, N, K, tuple((sm[i], sn[i], sk[i]) for i in range(ntensors)))


# -- device and launch decision ------------------------------------------------------------------------------

def rows_layout(view: View) -> bool:
    """True when the row kernels apply (reduced axis unit-stride, or no kept axis faster than it).

    Must agree with :attr:`tritred_core.Problem.inner`, which the heuristics read.
    """
    return view.strides[0][1] == 1 or view.K == 1 or view.N <= 1


def row_programs(cfg: LaunchConfig, rows: int, split: int = 1) -> tuple[int, int]:
    """(programs along the row axis, PERSIST) of a row kernel: one program per BLOCK_M rows, or a persistent grid
    of ``cfg.num_programs`` programs (no more than the row blocks) looping over them; never with a split of N."""
    blocks = cdiv(rows, cfg.BLOCK_M)
    persist = min(cfg.num_programs, blocks) if cfg.num_programs > 0 and split == 1 else 0
    return persist or blocks, persist


UNROLL_CHUNKS = 8  # longest first sweep unrolled (one compile per chunk count: at most 8 per BLOCK_N)
UNROLL_PER_THREAD = 64  # most elements per thread that an unrolled sweep keeps in flight
UNROLL_CHUNK_PER_THREAD = 8  # most elements per thread of one unrolled chunk


def unrolled_chunks(N: int, cfg: LaunchConfig) -> int:
    """UNROLL of a row loop: the chunk count when rows are exactly 2 to ``UNROLL_CHUNKS`` full chunks of
    ``cfg.BLOCK_N`` whose loads take at most ``UNROLL_CHUNK_PER_THREAD`` elements per thread each and
    ``UNROLL_PER_THREAD`` in all, else 0.

    A loop whose trip count is a runtime value keeps one chunk's loads in flight per iteration (each iteration
    waits for its load before the next is issued); unrolled, all of the row's loads are issued before the
    first Welford step uses one, as torch.compile's loops, whose widths are constants, get from the compiler
    (H200, ``tools/loop_exp.py``, layer_norm 8192x12288 bf16 in 2048-wide chunks on 16 warps: 60 -> 87 % of copy
    bandwidth; ``tools/unroll_ab.py onoff``, the built-in loops it reaches with no rule: sum of 8192x16384 bf16
    83 -> 88 %, fp32 and mean 12288-wide fp32 level). The per-chunk bound keeps the built-in loops over
    16384-wide chunks on 32 warps (16 elements per thread per chunk) rolled, as measured: unrolled, layer_norm
    2048x65536 fp32 lost 75 -> 65 %, bf16 58 -> 56."""
    chunks, rest = divmod(N, cfg.BLOCK_N)
    per_thread = max(1, cfg.BLOCK_M * cfg.BLOCK_N // (32 * cfg.num_warps))
    ok = rest == 0 and 2 <= chunks <= UNROLL_CHUNKS and per_thread <= UNROLL_CHUNK_PER_THREAD \
        and chunks * per_thread <= UNROLL_PER_THREAD
    return chunks if ok else 0


def split_row_chunks(cfg: LaunchConfig, N: int) -> tuple[int, int]:
    """(BLOCK_N, programs per row) of a split-rows launch: ``cfg.split`` programs of at least ``cfg.BLOCK_N``
    columns, widened to cover the row but never past Triton's largest tile (2**20 elements: more programs
    instead), so that any config computes the row, and without a program past its end."""
    block_n = min(1 << 20, max(cfg.BLOCK_N, next_pow2(cdiv(max(N, 1), cfg.split))))
    return block_n, cdiv(max(N, 1), block_n)


def launch_split_rows(rec: Any, kernel: Any, x: torch.Tensor, rows: int, split: int, num_programs: int,
                      args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Launch a split-rows kernel (``split`` programs hold each row: softmax's ``_split_rows_kernel``).

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
    return resident_programs(kernel, x, args, {**kwargs, "PHASE": 3}) // split


def resident_programs(kernel: Any, x: torch.Tensor, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """Programs of the compiled ``kernel`` (``args``, ``kwargs``: every argument of the launch) that are resident
    on ``x``'s device at once: the largest grid of a cooperative launch."""
    compiled = kernel.warmup(*args, grid=(1,), **kwargs, launch_cooperative_grid=True)
    key = ("coop", id(compiled), x.device)

    def fit() -> int:
        init = getattr(compiled, "_init_handles", None)
        if init is not None:
            init()
        regs = int(getattr(compiled, "n_regs", 0) or 255)
        meta = compiled.metadata
        warps, shared = int(meta.num_warps), int(getattr(meta, "shared", 0))
        props = torch.cuda.get_device_properties(x.device)
        per_sm = programs_per_sm(regs, warps, shared, int(getattr(props, "regs_per_multiprocessor", 65536)),
                                 int(getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)),
                                 int(getattr(props, "max_threads_per_multi_processor", 2048)))
        # The driver's count is the one a cooperative launch is checked against (H200: "too many blocks in
        # cooperative launch" when the estimate divided the registers as one pool). Never more than the estimate:
        # the grids measured so far.
        driver = _driver_occupancy(compiled, 32 * warps, shared)
        if driver is not None and driver < per_sm:
            log.debug("resident programs per SM: %d by the driver, %d estimated (%d registers)", driver, per_sm, regs)
            per_sm = driver
        return max(0, per_sm) * props.multi_processor_count
    return _cached(key, fit)  # type: ignore[no-any-return]


def programs_per_sm(regs: int, num_warps: int, shared: int = 0, regs_per_sm: int = 65536,
                    smem_per_sm: int = 228 * 1024, threads_per_sm: int = 2048) -> int:
    """Resident programs per SM of a kernel of ``regs`` registers per thread, ``num_warps`` warps and ``shared``
    bytes of shared memory (defaults: an H100/H200). Registers are allocated per warp in units of 256 and per
    quarter SM (a warp lives in one quarter): 2-warp programs of 108 registers fit 8 per SM, not the 9 that
    65536 / (112 * 64) gives (the driver's count on the H200). The driver reserves 1 KB of shared memory per
    program; at most 32 programs per SM."""
    per_warp = -(-regs * 32 // 256) * 256
    warps = 4 * (regs_per_sm // 4 // per_warp)
    return min(warps // num_warps, threads_per_sm // (32 * num_warps), smem_per_sm // (shared + 1024), 32)


def _driver_occupancy(compiled: Any, threads: int, shared: int) -> int | None:
    """Programs per SM of a compiled kernel by the CUDA driver's occupancy calculator (the count a cooperative
    launch is checked against), or None where it cannot be asked (no libcuda, no function handle)."""
    handle = getattr(compiled, "function", None)
    if not handle:
        return None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    n = ctypes.c_int(0)
    rc = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), ctypes.c_void_p(handle),
                                                          ctypes.c_int(threads), ctypes.c_size_t(shared))
    return n.value if rc == 0 else None


def row_hint(view: View, align: int) -> int:
    """DIV for the row kernels: the largest power of two (2-8) dividing the row width and every row stride of
    the tensors with a row axis (the input; softmax's and layer_norm's output, whose row stride the kernels
    restate too), when Triton cannot see it; 1 otherwise (or with ALIGN's shifted tiles, or an output whose rows
    are not unit-stride). A reduction's output (n-stride 0) takes no part.

    Triton specializes integer arguments on divisibility by 16 only, so a 300-wide row (stride 300) gets scalar
    2-byte loads and stores, and masks that cannot be vectorized, where its true alignment allows 8-byte ones.
    The kernels restate the values as ``v // DIV * DIV`` (equal at run time), whose divisibility the compiler
    derives. A compile per distinct DIV (2, 4 or 8), not per width.
    """
    d = 1 if align else _row_divisor(view)
    return d if 1 < d < 16 else 1


def col_hint(view: View) -> int:
    """DIV for the column kernels (the kept k axis unit-stride in the input): the largest power of two (2-8)
    dividing K and the m and n strides of every tensor, when Triton cannot see it; 1 otherwise. As
    :func:`row_hint`: mean over dim 1 of 16x4096x1000 steps 1000 elements per n, which Triton takes for any
    stride (scalar loads) though every 8-element k group is 16-byte aligned. The kernels restate K and those
    strides (never a unit stride)."""
    if view.K <= 1 or view.strides[0][2] != 1:
        return 1
    d = pow2_divisor(view.K, *(s[0] for s in view.strides), *(s[1] for s in view.strides))
    return d if 1 < d < 16 else 1


def pow2_divisor(*values: int) -> int:
    """The largest power of two up to 16 dividing every value (zeros divide by anything)."""
    d = 16
    for v in values:
        if v:
            d = min(d, v & -v)
    return d


def _row_divisor(view: View) -> int:
    """The largest power of two up to 16 dividing the row width and the row strides of the tensors with a row
    axis; 1 when the rows are not unit-stride."""
    (sxm, sxn, _), *outs = view.strides
    if sxn != 1 or view.N <= 1 or any(s[1] not in (0, 1) for s in outs):
        return 1
    return pow2_divisor(view.N, sxm, *(s[0] for s in outs if s[1] == 1))


def hint_covers_align(x: torch.Tensor, view: View) -> bool:
    """Whether DIV alone gives whole 16-byte vectors (a 3000-wide bf16 row: multiples of 8 elements), so
    that the shifted tiles of ALIGN, with their per-row masks, are not needed (GPU only: the interpreter keeps
    ALIGN for its tests). H200, tools/div_ab.py, against the shifted tiles: layer_norm 65536x1000 bf16 44 -> 89 %
    of copy bandwidth, mean 65536x3000 bf16 52 -> 93 %, softmax 8192x3000 bf16 50 -> 80 %; no case lost."""
    return x.device.type == "cuda" and _row_divisor(view) * x.element_size() >= 16


def row_align(x: torch.Tensor, view: View, cfg: LaunchConfig, single: bool, head_chunk: bool = False) -> int:
    """ALIGN for the row kernels: elements per 16 bytes when unit-stride rows start off 16-byte boundaries as
    Triton sees them (a row stride not divisible by 16) and tiles can start at the boundary below each row
    (see ``_kernels.aligned_rows``); 0 otherwise. A single-pass tile must hold the row plus the shift;
    ``head_chunk`` (loops that take the shift's lanes in one masked head chunk: var/std, layer_norm, max/min),
    loop chunks of at least ALIGN elements.

    On a GPU only for one row per program: there the shift turns scalar loads into vector ones (H200, softmax
    2048x50257 bf16: 19% -> 43% of copy bandwidth), while several short rows per program lose to the per-row
    masks (softmax 100000x300: 49% -> 38%, var 65536x100 fp32: 38% -> 33%). The interpreter takes it whenever
    it applies, so that tests reach the shifted path with small tensors.

    An output with a row axis (softmax: ``view.strides[1]``) is stored with the same shift (``shifted_out``), so
    its rows must have unit stride as well; a contiguous output of a transposed input does not (its n-stride is
    not 1: no shift). Reductions' outputs have no row axis (n-stride 0). Rows over a few threads each
    (``threads_per_row``) have no shifted form: their partial tiles are masked.
    """
    if cfg.threads_per_row:
        return 0
    (sxm, sxn, _) = view.strides[0]
    vec = 16 // x.element_size()
    if vec < 2 or sxn != 1 or view.K != 1 or view.N <= 1 or sxm % 16 == 0 or x.data_ptr() % 16:
        return 0
    if any(s[1] not in (0, 1) for s in view.strides[1:]):
        return 0
    if single and cfg.BLOCK_N + cfg.BLOCK_TAIL < view.N + vec - 1:
        return 0
    if head_chunk and not single and cfg.BLOCK_N < vec:
        return 0
    if x.device.type == "cuda" and cfg.BLOCK_M > 1:
        return 0
    if hint_covers_align(x, view):  # (plain vector loads of the DIV hint: faster than the shifted tiles)
        return 0
    return vec


def single_tail(cfg: LaunchConfig, view: View, single: bool) -> int:
    """TAIL of a single-pass row kernel: the lanes of its second tile (``cfg.BLOCK_TAIL``) when the row, plus a
    shift, reaches past its first tile, else 0 (a tail of masked lanes only would be read for nothing)."""
    return cfg.BLOCK_TAIL if single and cfg.BLOCK_TAIL and view.N + 16 > cfg.BLOCK_N else 0


def no_tail(cfg: LaunchConfig, op: str) -> None:
    """Raise ValueError for a ``BLOCK_TAIL`` given to a kernel that holds rows in one tile only (strided column
    reductions, max/min with indices, batch_norm): it would leave the row's last elements unread."""
    if cfg.BLOCK_TAIL:
        raise ValueError(
            f"{op}: BLOCK_TAIL={cfg.BLOCK_TAIL} (config from {cfg.decided_by or 'the launch-config hook'}) is not "
            f"supported by this call's kernel: a tail tile exists only in the single passes over unit-stride rows "
            f"of sum/mean/prod/amax/amin (and max/min without dim), softmax/log_softmax/logsumexp, var/std/var_mean/"
            f"std_mean and layer_norm; strided (column) reductions, max/min with indices and batch_norm hold a row "
            f"in one tile")


#: The ops whose kernels take ``threads_per_row`` (their row single passes).
ROW_THREADS_OPS = frozenset({"var", "std", "var_mean", "std_mean", "layer_norm"})


def no_row_threads(cfg: LaunchConfig, op: str, where: str = "") -> None:
    """Raise ValueError for a ``threads_per_row`` given to a kernel that keeps its own layout: every op but
    var/std/var_mean/std_mean and layer_norm, and their column, loop and split kernels (``where`` names the
    path)."""
    if cfg.threads_per_row:
        raise ValueError(
            f"{op}: threads_per_row={cfg.threads_per_row} (config from {cfg.decided_by or 'the launch-config hook'}) "
            f"is not supported by this call's kernel{where}: only the single passes of var/std/var_mean/std_mean "
            f"and layer_norm over rows spread a row over a few threads")


def row_cols(cfg: LaunchConfig, x: torch.Tensor, op: str, rows: bool, single: bool, split: int) -> int:
    """COLS of a statistics or layer_norm single pass with ``cfg.threads_per_row``: the columns that the row's
    threads hold side by side, one 16-byte vector each (at most the tile's width); 0 without it. Raises ValueError
    where it is asked of a path that keeps its own layout (columns, loops, split slices)."""
    if not cfg.threads_per_row:
        return 0
    if not (rows and single and split == 1):
        no_row_threads(cfg, op, " (columns, loops and split slices)")
    return min(cfg.BLOCK_N, cfg.threads_per_row * max(1, 16 // x.element_size()))


def even_rows(view: View, cfg: LaunchConfig, single: bool, align: int) -> bool:
    """EVEN for the single-pass row kernels: each row fills its tile exactly (N == BLOCK_N, unshifted), so every
    lane of a row is one of its elements and the kernel needs no select per element (``_kernels.chunk_stats``)."""
    return single and align == 0 and view.N == cfg.BLOCK_N and cfg.BLOCK_TAIL == 0


def row_align_out(y: torch.Tensor, x: torch.Tensor, view: View, align: int) -> bool:
    """Whether the output's rows share the input's shift (same element size, row stride and 16-byte base)."""
    return bool(align) and y.element_size() == x.element_size() and view.strides[1][0] == view.strides[0][0] \
        and view.strides[1][1] == 1 and y.data_ptr() % 16 == 0


def device_info(device: torch.device) -> DeviceInfo:
    """What the heuristics need to know about ``device``; cached per device in the registry's cache."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())

    def read() -> DeviceInfo:
        if device.type != "cuda":
            return DeviceInfo(name="cpu (TRITON_INTERPRET=1)", backend="interpreter")
        p = torch.cuda.get_device_properties(device)
        return DeviceInfo(
            name=p.name, backend="cuda", compute_capability=(p.major, p.minor),
            sm_count=p.multi_processor_count,
            max_shared_mem=int(getattr(p, "shared_memory_per_block_optin", 48 * 1024)),
            regs_per_sm=int(getattr(p, "regs_per_multiprocessor", 65536)),
            l2_bytes=int(getattr(p, "L2_cache_size", 0)),
        )
    return _cached(("device", str(device)), read)  # type: ignore[no-any-return]


def dependent_launch(device: torch.device) -> dict[str, bool]:
    """Launch options of a kernel that reads what the launch just before it wrote (the merge of a split's
    partials, batch_norm training's normalize launch after its statistics, the split softmax columns' merge and
    writing launches): programmatic dependent launch on Hopper and later GPUs (``launch_pdl``), the kernel waiting in
    ``griddepcontrol.wait`` (``WAIT``, :func:`_kernels.wait_for_previous_launch`) until the previous launch has
    finished and its writes are visible; nothing on older GPUs, on ROCm (whose devices torch also names
    ``cuda``: no ``griddepcontrol``) and under the interpreter, whatever the tensors' device (it has no inline
    assembly): there a plain launch, which starts after the previous one in stream order.

    Why: the merge launch starts while the previous launch's last programs finish instead of after it, which
    hides most of the gap between two launches (H200, ``tools/s27_probe.py``: 1-2 us of a 44-136 us split
    reduction, e.g. sum dim=0 of 16384x4096 bf16 44.1 -> 43.6 us, var 48.8 -> 47.3, sum of 2^28 bf16 136.4 ->
    134.5; twenty-eighth session, ``tools/s28_probe.py``: 1.3-1.6 us of batch_norm training, 64x256x56x56 bf16
    94.0 -> 92.5 us, against 0.5-0.7 us of noise on its one-launch control, and 1.4-3.5 us of split softmax
    columns, except log_softmax dim=0 of 16384x256 bf16, 158.4 -> 159.0 us, then at 256 slices, a call dominated
    by its merge). The result is the plain launch's, bit for bit.
    """
    info = device_info(device)
    hopper = info.backend == "cuda" and info.compute_capability >= (9, 0) and torch.version.hip is None
    if hopper and not interpreting():
        return {"WAIT": True, "launch_pdl": True}
    return {}


def decide(spec: ReductionSpec, x: torch.Tensor, view: View, layout: str = "strided",
           make_problem: Callable[[], Problem] | None = None) -> LaunchConfig:
    """The launch config of a call: asked from the hook once per (op, dtype, view, device), then cached.

    The key is plain tuples, so pydantic and pluggy stay off the hot path; ``make_problem`` builds the Problem
    on a miss when it is not the one of ``view`` (batch_norm describes its own).
    """
    key = ("config", spec.name, x.dtype, view, layout, x.device)

    def ask() -> LaunchConfig:
        p = make_problem() if make_problem is not None else problem_of(spec.name, x, view, layout)
        cfg = get_registry().launch_config(spec, p, device_info(x.device))
        if spec.name not in ROW_THREADS_OPS:
            no_row_threads(cfg, spec.name)
        return cfg
    return _cached(key, ask)  # type: ignore[no-any-return]


def problem_of(op: str, x: torch.Tensor, view: View, layout: str = "strided") -> Problem:
    sm, sn, sk = view.strides[0]
    return Problem(op=op, dtype=dtype_name(x.dtype), M=view.M, N=view.N, K=view.K,
                   stride_m=sm, stride_n=sn, stride_k=sk, layout=layout)  # type: ignore[arg-type]


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


def map_view(x: torch.Tensor, y: torch.Tensor, dims: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, View]:
    """Joint view of an input and its same-shaped output (softmax, layer_norm), reduced over ``dims`` in order.

    Exotic strides that do not give one (they are rare: a non-mergeable strided normalized group) are
    normalized to contiguous copies of ``x`` and a fresh contiguous ``y``.
    """
    view = canonical_view(x.shape, [x.stride(), y.stride()], dims, reorder_reduced=False)
    if view is None:
        log.debug("dims %s of a %s tensor with strides %s and its output share no strided view: the input is "
                  "gathered (one copy)", dims, tuple(x.shape), x.stride())
        x, y = x.contiguous(), torch.empty(x.shape, dtype=y.dtype, device=x.device)
        view = canonical_view(x.shape, [x.stride(), y.stride()], dims, reorder_reduced=False)
        assert view is not None
    return x, y, view


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def prod(xs: Sequence[int]) -> int:
    return math.prod(xs)
