"""The host path of rms_norm: torch's argument checks, the joint view of input and output, the launch decision,
the launch, replay.

The weight is read flat with unit stride (a strided one is copied: its own size). Any real weight dtype is taken,
as torch's (a weight of another dtype than the input takes torch's composite path there: the product in the
promoted dtype, the output in the input's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._prims_common import suggest_memory_format
from tritred_core import ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, f32_split, tl_dtype
from ...kernels.rows import single_load_evict
from ...runtime import Recorder, replay_plan
from .kernels import _rms_norm_kernel, _split_rows_kernel

OP = "rms_norm"


def check_args(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None) -> tuple[int, ...]:
    """torch's checks of rms_norm's arguments (``input`` already a tensor), with its exception types and messages:
    the normalized shape as a tuple. Shared with the registered op's fake implementation (symbolic sizes pass)."""
    shape = tuple(rt.int_list(OP, "normalized_shape", 2, normalized_shape))
    D = len(shape)
    if D == 0:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           f"element, but got normalized_shape = {list(shape)}")
    if weight is not None:
        rt.check_tensor(OP, "weight", weight)
        if tuple(weight.shape) != shape:
            raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                               f"{list(weight.shape)} and normalized_shape = {list(shape)}")
        if weight.dtype.is_complex:
            raise RuntimeError(f"tritred.{OP}(): a complex weight is not supported (torch keeps the real part of the "
                               f"complex product)")
    if input.dim() < D:
        raise ValueError(f"Input tensor must have at least {D} dimensions, but got {input.dim()}")
    if tuple(input.shape[input.dim() - D:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    if input.dtype not in rt.FLOATS:
        raise NotImplementedError(f'"{OP}" not implemented for \'{rt.dtype_name(input.dtype)}\' (tritred: float16, '
                                  f'bfloat16, float32 and float64 inputs)')
    rt.check_same_device(OP, input, weight=weight)
    return shape  # type: ignore[return-value]


def resolve_eps(eps: Any, dtype: torch.dtype) -> float:
    """``eps`` as a float; None: the machine epsilon of the computation's dtype, as torch's (float32's for float16,
    bfloat16 and float32 inputs, 1.19e-07; float64's for float64, 2.2e-16; not the input dtype's own, which
    ``torch.nn.RMSNorm``'s documentation suggests). TypeError, as torch's, for what is not a number."""
    if eps is None:
        return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    return rt.float_arg(OP, "eps", 4, eps)


def output_format(input: torch.Tensor) -> torch.memory_format | None:
    """The output's memory format where it is not contiguous: torch's rms_norm keeps a channels-last input's
    format (its composite path for them), where layer_norm returns a contiguous output."""
    fmt = suggest_memory_format(input)
    return fmt if fmt in (torch.channels_last, torch.channels_last_3d) else None


def input_grad_like(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None,
                    ) -> torch.Tensor | None:
    """The tensor whose layout (``torch.empty_like``'s) torch gives the input's gradient, or None for contiguous.
    torch's composite rms_norm (pointwise ops: the input's gradient laid out as the output's gradient) runs for
    channels-last inputs, for a weight of another dtype than the input's, and off CUDA (its fused kernel is
    CUDA's); the fused kernel's gradient is contiguous."""
    composite = (not input.is_cuda or output_format(input) is not None
                 or (weight is not None and weight.dtype != input.dtype))
    return grad_out if composite else None


def new_input_grad(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """An uninitialized input gradient laid out as torch's (:func:`input_grad_like`; the fake op's too)."""
    like = input_grad_like(grad_out, input, weight)
    return input.new_empty(input.shape) if like is None else torch.empty_like(like, dtype=input.dtype)


def new_output(input: torch.Tensor) -> torch.Tensor:
    """An uninitialized output of the input's shape, dtype and device, laid out as torch's (the fake op's too)."""
    fmt = output_format(input)
    if fmt is None:
        return input.new_empty(input.shape)
    return torch.empty_like(input, memory_format=fmt)


def rms_norm_call(spec: ReductionSpec, input: torch.Tensor, normalized_shape: Sequence[int],
                  weight: torch.Tensor | None, eps: float | None, store_rstd: bool,
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(output, rstd or None without ``store_rstd``): rstd per row, float32 (float64 for float64 inputs), shaped
    like the leading dims."""
    saved, key = replay_plan(OP, (normalized_shape, eps, store_rstd), input, weight)
    if saved is not None:
        outs = saved
        return (outs[0], outs[1]) if store_rstd else (outs[0], None)
    input = rt.check_tensor(OP, "input", input)
    shape = check_args(input, normalized_shape, weight)
    eps_value = resolve_eps(eps, input.dtype)
    rt.check_runnable(OP, input)
    D = len(shape)
    rec = Recorder(input, weight)
    fmt = output_format(input)  # contiguous, as torch's, but for channels-last inputs
    y = rec.empty(input.shape, input.dtype, input.device) if fmt is None else \
        rec.adopt(torch.empty_like(input, memory_format=fmt))
    lead = input.shape[: input.dim() - D]
    acc = acc_dtype(input.dtype)
    rstd = rec.empty(lead, acc, input.device) if store_rstd else None
    if input.numel() == 0:
        if rstd is not None:  # rows of no elements: 1 / sqrt(0 / 0 + eps) = NaN, as torch's
            rstd.fill_(float("nan"))
        return y, rstd
    dims = tuple(range(input.dim() - D, input.dim()))
    x, out, view = rt.map_view(input, y, dims)
    w = rt.unit_stride(weight)
    cfg = rt.decide(spec, x, view)
    (sxm, sxn, sxk), (sym, syn, syk) = view.strides
    R = view.M * view.K
    wacc = torch.float64 if w is not None and w.dtype == torch.float64 else acc
    eps_hi, eps_lo = f32_split(eps_value)
    if cfg.strategy == "split_rows":  # rows held by cfg.split programs together (one read; see the kernel)
        block_n, split = rt.split_row_chunks(cfg, view.N)
        parts = rt.next_pow2(split)
        rt.launch_split_rows(
            rec, _split_rows_kernel, x, R, split, cfg.num_programs,
            (x, w if w is not None else out, out, rstd if rstd is not None else out,
             rec.empty((R * parts,), acc, x.device)),
            dict(R=R, N=view.N, K=view.K, s_xm=sxm, s_xn=sxn, s_xk=sxk, s_ym=sym, s_yn=syn, s_yk=syk, eps=eps_hi,
                 eps_lo=eps_lo, HAS_W=w is not None, STORE_RSTD=store_rstd, ACC=tl_dtype(acc), WACC=tl_dtype(wacc),
                 SPLIT=split, SPLIT_P2=parts, BLOCK_N=block_n, num_warps=cfg.num_warps))
        return _finish(rec, key, y, out, rstd, fmt, store_rstd)
    programs, persist = rt.row_programs(cfg, R)
    single = cfg.strategy == "single_pass"
    cols = rt.row_cols(cfg, x, OP, True, single, 1)
    rec.launch(_rms_norm_kernel, (programs,), x, w if w is not None else out, out,
               rstd if rstd is not None else out, R, view.N, view.K, sxm, sxn, sxk, sym, syn, syk, eps_hi, eps_lo,
               HAS_W=w is not None, STORE_RSTD=store_rstd, ACC=tl_dtype(acc), WACC=tl_dtype(wacc), SINGLE=single,
               BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, PERSIST=persist, LOOP_STAGES=cfg.num_stages,
               EVEN=rt.even_rows(view, cfg, single, 0), DIV=rt.row_hint(view, 0),
               EVICT=single_load_evict("layer_norm", cfg.num_warps) if single else "", COLS=cols,
               num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return _finish(rec, key, y, out, rstd, fmt, store_rstd)


def _finish(rec: Recorder, key: Any, y: torch.Tensor, out: torch.Tensor, rstd: torch.Tensor | None,
            fmt: torch.memory_format | None, store_rstd: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The call's result, saved for replay unless the input was gathered into a contiguous copy."""
    if out is not y:  # (the input was gathered into a contiguous copy: so is the output; torch keeps the format)
        return out.contiguous(memory_format=fmt or torch.contiguous_format), rstd
    if store_rstd:
        rec.save(key, y, rstd)  # type: ignore[arg-type]
    else:
        rec.save(key, y)
    return y, rstd
