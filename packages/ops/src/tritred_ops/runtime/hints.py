"""Per-launch kernel knobs derived from a call's view and its config: divisibility hints, shifted tiles, tails.

The config says how a problem is tiled; these say what the kernel may assume about this call's tensors (their
alignment, their strides' divisibility) and refuse the knobs a path cannot honour (a tail tile on a column
reduction), with a message naming who gave the config.
"""

from __future__ import annotations

import torch
from tritred_core import LaunchConfig

from .view import View


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
    ALIGN for its tests). H200, against the shifted tiles: layer_norm 65536x1000 bf16 44 -> 89 % of copy
    bandwidth, mean 65536x3000 bf16 52 -> 93 %, softmax 8192x3000 bf16 50 -> 80 %; no case lost."""
    return x.device.type == "cuda" and _row_divisor(view) * x.element_size() >= 16


def row_align(x: torch.Tensor, view: View, cfg: LaunchConfig, single: bool, head_chunk: bool = False) -> int:
    """ALIGN for the row kernels: elements per 16 bytes when unit-stride rows start off 16-byte boundaries as
    Triton sees them (a row stride not divisible by 16) and tiles can start at the boundary below each row
    (see ``kernels.rows.aligned_rows``); 0 otherwise. A single-pass tile must hold the row plus the shift;
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


def row_align_out(y: torch.Tensor, x: torch.Tensor, view: View, align: int) -> bool:
    """Whether the output's rows share the input's shift (same element size, row stride and 16-byte base)."""
    return bool(align) and y.element_size() == x.element_size() and view.strides[1][0] == view.strides[0][0] \
        and view.strides[1][1] == 1 and y.data_ptr() % 16 == 0


def single_tail(cfg: LaunchConfig, view: View, single: bool) -> int:
    """TAIL of a single-pass row kernel: the lanes of its second tile (``cfg.BLOCK_TAIL``) when the row, plus a
    shift, reaches past its first tile, else 0 (a tail of masked lanes only would be read for nothing)."""
    return cfg.BLOCK_TAIL if single and cfg.BLOCK_TAIL and view.N + 16 > cfg.BLOCK_N else 0


def even_rows(view: View, cfg: LaunchConfig, single: bool, align: int) -> bool:
    """EVEN for the single-pass row kernels: each row fills its tile exactly (N == BLOCK_N, unshifted), so every
    lane of a row is one of its elements and the kernel needs no select per element
    (``kernels.welford.chunk_stats``)."""
    return single and align == 0 and view.N == cfg.BLOCK_N and cfg.BLOCK_TAIL == 0


def row_cols(cfg: LaunchConfig, x: torch.Tensor, op: str, rows: bool, single: bool, split: int) -> int:
    """COLS of a statistics or layer_norm single pass with ``cfg.threads_per_row``: the columns that the row's
    threads hold side by side, one 16-byte vector each (at most the tile's width); 0 without it. Raises ValueError
    where it is asked of a path that keeps its own layout (columns, loops, split slices)."""
    if not cfg.threads_per_row:
        return 0
    if not (rows and single and split == 1):
        no_row_threads(cfg, op, " (columns, loops and split slices)")
    return min(cfg.BLOCK_N, cfg.threads_per_row * max(1, 16 // x.element_size()))



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
    (H200, layer_norm 8192x12288 bf16 in 2048-wide chunks on 16 warps: 60 -> 87 % of copy bandwidth; the built-in
    loops it reaches with no rule of their own: sum of 8192x16384 bf16 83 -> 88 %, fp32 and mean 12288-wide fp32
    level). The per-chunk bound keeps the built-in loops over
    16384-wide chunks on 32 warps (16 elements per thread per chunk) rolled, as measured: unrolled, layer_norm
    2048x65536 fp32 lost 75 -> 65 %, bf16 58 -> 56."""
    chunks, rest = divmod(N, cfg.BLOCK_N)
    per_thread = max(1, cfg.BLOCK_M * cfg.BLOCK_N // (32 * cfg.num_warps))
    ok = rest == 0 and 2 <= chunks <= UNROLL_CHUNKS and per_thread <= UNROLL_CHUNK_PER_THREAD \
        and chunks * per_thread <= UNROLL_PER_THREAD
    return chunks if ok else 0


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



def no_row_threads(cfg: LaunchConfig, op: str, where: str = "") -> None:
    """Raise ValueError for a ``threads_per_row`` given to a path that keeps its own layout: the column, loop and
    split kernels of var/std/var_mean/std_mean and layer_norm (``where`` names the path; the ops whose specs do
    not declare the knob are refused by the registry before any launch)."""
    if cfg.threads_per_row:
        raise ValueError(
            f"{op}: threads_per_row={cfg.threads_per_row} (config from {cfg.decided_by or 'the launch-config hook'}) "
            f"is not supported by this call's kernel{where}: only the single passes of var/std/var_mean/std_mean "
            f"and layer_norm over rows spread a row over a few threads")
