"""The host path of var, std, var_mean, std_mean: argument checks, the view, the launch decision, launches.

Two reduced axes (var over (0, 2, 3) of NCHW: the batch and H*W) need no copy: each (channel, image) row of H*W
elements gets its own (mean, M2) partial from the rows kernel (``PARTIAL``), and the combine kernel merges each
channel's batch of partials, as it merges split slices.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tritred_core import LaunchConfig, ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, f32_split, tl_dtype
from ...kernels.rows import loop_evicts
from ...runtime import UNSET, Recorder, Unset, replay_plan
from .kernels import _stats_cols_kernel, _stats_combine_kernel, _stats_rows_kernel

#: Chunks of BLOCK_N rows a float32 column program sweeps, at least, for the columns' shift (see _launch).
SHIFT_SWEEP = 32


def _launch(rec: Recorder, x: torch.Tensor, view: rt.View, out: torch.Tensor, mean_out: torch.Tensor, divisor: float,
            std: bool, want_mean: bool, cfg: LaunchConfig) -> None:
    (sxm, sxn, sxk), (som, _, sok) = view.strides
    acc = acc_dtype(x.dtype)
    R = view.M * view.K
    split, nps = rt.split_plan(cfg, view.N)
    consts = dict(ACC=tl_dtype(acc), STD=std, WANT_MEAN=want_mean, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    single = cfg.strategy == "single_pass"
    # float32 column loops: statistics of x less each column's first chunk's mean (the columns kernel's SHIFT),
    # where a program sweeps at least SHIFT_SWEEP chunks: a short sweep rounds little (H100, 100 sigma offsets:
    # 256x262144 dim=0, 8 chunks, 0.72x eager's error unshifted) and its first chunk, read twice, is a large part
    # of it (87 -> 81 % of copy, 1.03 -> 0.97x eager). Long sweeps: 16384x4096 dim=0 and 64x4096x256 dim=1 (64
    # chunks a slice) 1.20 and 1.29x eager's error -> 0.34 and 0.20x, for 86 -> 84 and 84 -> 83 %.
    shift = not rt.rows_layout(view) and not single and x.dtype == torch.float32 and nps >= SHIFT_SWEEP * cfg.BLOCK_N
    if split > 1:
        p_m2 = rec.empty((R, split), acc, x.device)
        p_mean = rec.empty((R, split), acc, x.device)
        p_shift = rec.empty((R,), acc, x.device) if shift else p_mean
    else:
        p_m2, p_mean, p_shift = out, mean_out, out
    name = ("std" if std else "var") + ("_mean" if want_mean else "")
    cols = rt.row_cols(cfg, x, name, rt.rows_layout(view), single, split)
    if rt.rows_layout(view):
        programs, persist = rt.row_programs(cfg, R, split)
        align = rt.row_align(x, view, cfg, single, True)  # (a split's slices too: each shifted as a row)
        rec.launch(
            _stats_rows_kernel, (programs, split), x, p_m2, p_mean, R, view.N, view.K, sxm, sxn, sxk, som,
            sok, nps, *f32_split(divisor), SPLIT=split, SINGLE=single, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
            PERSIST=persist, LOOP_STAGES=cfg.num_stages, ALIGN=align, EVICT_LOOP=not single and loop_evicts(x),
            EVEN=split == 1 and rt.even_rows(view, cfg, single, align), DIV=rt.row_hint(view, align),
            UNROLL=rt.unrolled_chunks(view.N, cfg) if not single and split == 1 and not align else 0,
            TAIL=rt.single_tail(cfg, view, single), COLS=cols, **consts)
    else:
        rt.no_tail(cfg, name)
        rec.launch(
            _stats_cols_kernel, (view.M * rt.cdiv(view.K, cfg.BLOCK_K), split), x, p_m2, p_mean, view.M, view.N, view.K,
            sxm, sxn, sxk, som, sok, nps, *f32_split(divisor), p_shift, SPLIT=split, SINGLE=single, BLOCK_N=cfg.BLOCK_N,
            BLOCK_K=cfg.BLOCK_K, DIV=rt.col_hint(view), SHIFT=shift, **consts)
    if split > 1:
        block_m, block_s = rt.combine_blocks(R, split)
        rec.launch(
            _stats_combine_kernel, (rt.cdiv(R, block_m),), p_m2, p_mean, out, mean_out, R, view.N, view.K, nps, som,
            sok, *f32_split(divisor), split, split, 1, p_shift, BLOCK_M=block_m, BLOCK_S=block_s,
            SHIFT=shift, **rt.dependent_launch(x.device), **{**consts, "num_warps": 4})


#: Most partials per output the two-axes merge takes (one tile holds all of an output's partials).
_MAX_SLICES = 1024


def _two_axes(x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor, keepdim: bool) -> tuple[rt.View, int] | None:
    """Reduced dims that make two strided axes of ``x``, the inner one unit-stride, beside at most one kept axis
    (var over (0, 2, 3) of NCHW: the batch, then H*W, the channels kept): (the rows view M = outer, N = inner,
    K = kept: row (m, k), the m-th inner row of output k, is its m-th partial; the output's stride along the kept
    axis). Rows in that order are adjacent in memory (NCHW: image by image), so short inner rows (7x7) share
    their sectors. None for other layouts, or past ``_MAX_SLICES`` outer slices (the caller gathers)."""
    strides = [list(x.stride()), rt.out_strides(out, x.dim(), dims, keepdim)]
    kg, rg = rt.dim_groups(x.shape, strides, dims)
    if len(rg) != 2 or len(kg) > 1:
        return None
    (slices, s_outer), (inner, s_inner) = rg  # (sorted by stride: the outer axis first)
    if s_inner[0] != 1 or slices > _MAX_SLICES:
        return None
    kept, s_kept = kg[0] if kg else (1, [0, 0])
    view = rt.View(M=slices, N=inner, K=kept, strides=((s_outer[0], 1, s_kept[0]), (0, 0, 0)))
    return view, s_kept[1]


def _launch_two_axes(rec: Recorder, x: torch.Tensor, view: rt.View, out_stride: int, out: torch.Tensor,
                     mean_out: torch.Tensor, divisor: float, std: bool, want_mean: bool, cfg: LaunchConfig) -> None:
    """Statistics over two reduced axes without a copy: the rows kernel gives each inner row (one channel of
    one image) its (mean, M2) partial (PARTIAL), the combine kernel merges each output's ``view.M`` partials in a
    fixed order (Chan et al. 1979) and divides. ``cfg`` was decided for those rows; a split of them (long inner
    rows, few of them) becomes the loop over each row instead, as partials cannot be split twice."""
    if cfg.strategy == "split":
        cfg = cfg.model_copy(update={"strategy": "multi_pass", "split": 1})
    (sxm, sxn, sxk), _ = view.strides
    acc = acc_dtype(x.dtype)
    R = view.M * view.K
    p_m2, p_mean = rec.empty((R,), acc, x.device), rec.empty((R,), acc, x.device)
    consts = dict(ACC=tl_dtype(acc), STD=std, WANT_MEAN=want_mean, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages)
    single = cfg.strategy == "single_pass"
    programs, persist = rt.row_programs(cfg, R)
    cols = rt.row_cols(cfg, x, ("std" if std else "var") + ("_mean" if want_mean else ""), True, single, 1)
    align = rt.row_align(x, view, cfg, single, True)
    rec.launch(
        _stats_rows_kernel, (programs, 1), x, p_m2, p_mean, R, view.N, view.K, sxm, sxn, sxk, 0, 0, view.N,
        *f32_split(divisor), SPLIT=1, SINGLE=single, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, PERSIST=persist,
        LOOP_STAGES=cfg.num_stages, ALIGN=align, EVICT_LOOP=not single and loop_evicts(x),
        EVEN=rt.even_rows(view, cfg, single, align), PARTIAL=True, DIV=rt.row_hint(view, align),
        TAIL=rt.single_tail(cfg, view, single), COLS=cols,
        UNROLL=0 if single or align else rt.unrolled_chunks(view.N, cfg), **consts)
    block_m, block_s = rt.combine_blocks(view.K, view.M)  # (output k's partials at k + m * K: rows * 1 + s * K)
    rec.launch(
        _stats_combine_kernel, (rt.cdiv(view.K, block_m),), p_m2, p_mean, out, mean_out, view.K, view.M * view.N, 1,
        view.N, out_stride, 0, *f32_split(divisor), view.M, 1, view.K, p_mean, BLOCK_M=block_m, BLOCK_S=block_s,
        **rt.dependent_launch(x.device), **{**consts, "num_warps": 4})


def parse_correction(name: str, dim: int | Sequence[int] | None, unbiased: bool | Unset,
                      correction: float | None) -> tuple[int | Sequence[int] | None, float]:
    """(dim, correction as a float) from torch's argument forms: ``var(x, True)`` (the legacy ``unbiased``),
    ``unbiased=`` (UNSET: not given), ``correction=`` (default 1); TypeError as torch's."""
    if correction is None and unbiased is UNSET and type(dim) is not bool:
        return dim, 1.0  # (the default first: under torch.compile each check below is a guard per call)
    if isinstance(dim, bool):  # torch's legacy overload var(input, unbiased)
        if unbiased is not UNSET:
            raise TypeError(f"{name}() received an invalid combination of arguments: unbiased given twice")
        unbiased, dim = dim, None
    # (torch takes no var(x, 1, 1), nor an explicit unbiased=None: no overload matches)
    if unbiased is not UNSET and not isinstance(unbiased, bool):
        raise TypeError(f"{name}() received an invalid combination of arguments: 'unbiased' must be bool, "
                        f"not {type(unbiased).__name__}")
    if unbiased is not UNSET and correction is not None:
        raise TypeError(f"{name}() received an invalid combination of arguments: "
                        "got both 'unbiased' and 'correction'")
    value = rt.scalar_of(correction)
    if value is None:
        value = 0 if unbiased is False else 1
    if rt.numpy_scalar(value):  # (torch reads the number it holds; a numpy array: TypeError, below)
        value = value.item()  # type: ignore[attr-defined]
    if not isinstance(value, (int, float)):  # bool is an int for torch too: correction=True is 1
        raise TypeError(f"{name}(): argument 'correction' must be Number, not {type(value).__name__}")
    return dim, float(value)


def stats_call(spec: ReductionSpec, x: torch.Tensor, dim: int | Sequence[int] | None, unbiased: bool | Unset,
               keepdim: bool, correction: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The host path of var, std, var_mean and std_mean: (the statistic, the mean; var/std's is the first)."""
    name = spec.name
    saved, key = replay_plan(name, (dim, unbiased, keepdim, correction), x)
    if saved is not None:
        outs = saved
        return outs[0], outs[-1]
    x = rt.check_tensor(name, "input", x)
    rt.check_keepdim(name, keepdim)
    dim, corr = parse_correction(name, dim, unbiased, correction)
    if x.dtype not in rt.FLOATS:
        if x.dtype.is_complex:
            raise NotImplementedError(f"tritred.{name}(): complex inputs are not supported")
        raise RuntimeError(f"{name}(): std and var only support floating point and complex dtypes, got {x.dtype}")
    dims = rt.wrap_dims(name, dim, x.dim())  # type: ignore[arg-type]
    rt.check_runnable(name, x)
    shape = rt.reduced_shape(x.shape, dims, keepdim)
    rec = Recorder(x)
    out = rec.empty(shape, x.dtype, x.device)
    want_mean = name.endswith("_mean")
    # var/std write no mean: its pointer is out's, never stored to (one allocation less per call)
    mean_out = rec.empty(shape, x.dtype, x.device) if want_mean else out
    n = rt.prod([x.shape[d] for d in dims])
    if out.numel() == 0:
        return out, mean_out
    warn = n - corr <= 0
    if warn:  # (as torch warns; such a call is not saved as a plan, so that every call warns as torch's does)
        rt.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                "factor (input numel divided by output numel).")
    if n == 0:
        return out.fill_(float("nan")), mean_out.fill_(float("nan"))
    divisor = n - corr if n - corr > 0 else 0.0  # torch's max(N - correction, 0), which takes NaN to 0
    two = _two_axes(x, dims, out, keepdim)
    if two is not None:
        view, out_stride = two
        _launch_two_axes(rec, x, view, out_stride, out, mean_out, divisor, name.startswith("std"), want_mean,
                         rt.decide(spec, x, view))
    else:
        src, view, layout = rt.gathering(name, x, dims, out, keepdim)
        cfg = rt.decide(spec, x, view, layout)
        _launch(rec, src, view, out, mean_out, divisor, name.startswith("std"), want_mean, cfg)
    if not warn:
        rec.save(key, *((out, mean_out) if want_mean else (out,)))
    return out, mean_out
