"""rms_norm: root-mean-square normalization over the trailing ``normalized_shape`` dims (Zhang & Sennrich 2019).

``y = x / sqrt(mean(x**2) + eps) * weight``, mirroring :func:`torch.nn.functional.rms_norm` (torch >= 2.4):

- the statistic is computed in the input's *opmath* dtype: fp32 for float16/bfloat16/float32, fp64 for float64;
- ``eps=None`` means the machine epsilon of that opmath dtype (``torch.finfo(torch.float32).eps`` for
  float16/bfloat16/float32 inputs, not ``torch.finfo(float16).eps``);
- ``x * rrms`` is formed in the opmath dtype, multiplied by ``weight`` in the promotion of the opmath dtype and
  the weight's dtype, and the result is cast to the input's dtype (the output always has the input's dtype and is
  contiguous).

Two strategies, chosen by the ``tritred_launch_config`` hook (this package's own implementation in
:mod:`tritred_rmsnorm.plugin`, which any other plugin may override):

- ``single_pass``: ``BLOCK_M`` rows per program, each row held in registers (``BLOCK_N >= N``); one read, one write.
- ``multi_pass``: one sweep accumulates ``x**2`` lane-wise in a ``BLOCK_M x BLOCK_N`` fp32 tile (reduced once at
  the end), a second sweep normalizes and writes (its read usually hits L2).

A ``split`` config (from some other plugin) runs as ``multi_pass``; ``BLOCK_K`` and ``num_programs`` are not used
(the problem is always ``M x N x 1``, one program per ``BLOCK_M`` rows). Masked lanes load 0, which adds nothing
to the sum of squares.

Host-side helpers (device check, device info, the cached launch decision) come from :mod:`tritred_ops.host`,
the same ones tritred's own ops use; the rest is this module's own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from tritred_core import Problem, ReductionSpec
from tritred_ops.host import check_runnable, launch_config

log = logging.getLogger("tritred")


SPEC = ReductionSpec(
    name="rms_norm",
    family="normalize",
    outputs=("out",),
    mirrors="torch.nn.functional.rms_norm",
    summary="x / sqrt(mean(x**2) + eps) * weight over the trailing normalized_shape dims",
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TL = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32, torch.float64: tl.float64}


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, R, N, s_xm, s_xn, s_ym, eps,
                     HAS_W: tl.constexpr, ACC: tl.constexpr, W_ACC: tl.constexpr, FP64: tl.constexpr,
                     SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < R
    x_row = x_ptr + rows * s_xm
    y_row = y_ptr + rows * s_ym  # the output is contiguous: unit stride along N
    if SINGLE:
        cols = tl.arange(0, BLOCK_N).to(tl.int64)
        mask = row_ok[:, None] & (cols < N)[None, :]
        x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0).to(ACC)
        sum_sq = tl.sum(x * x, 1)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        for n0 in range(0, N, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = row_ok[:, None] & (cols < N)[None, :]
            x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0).to(ACC)
            acc += x * x
        sum_sq = tl.sum(acc, 1)
    ms = sum_sq / N + eps
    if FP64:
        rrms = 1.0 / tl.sqrt(ms)  # fp64 sqrt is IEEE-exact
    else:
        rrms = tl.div_rn(1.0, tl.sqrt_rn(ms))  # as torch's fp32 rsqrt, not the fast approximation
    if SINGLE:
        y = x * rrms[:, None]
        if HAS_W:
            y = y.to(W_ACC) * tl.load(w_ptr + cols, mask=cols < N, other=0).to(W_ACC)[None, :]
        tl.store(y_row[:, None] + cols[None, :], y, mask=mask)
    else:
        for n0 in range(0, N, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = row_ok[:, None] & (cols < N)[None, :]
            x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=0).to(ACC)
            y = x * rrms[:, None]
            if HAS_W:
                y = y.to(W_ACC) * tl.load(w_ptr + cols, mask=cols < N, other=0).to(W_ACC)[None, :]
            tl.store(y_row[:, None] + cols[None, :], y, mask=mask)


# -- host side ----------------------------------------------------------------------------------------------------

def _normalized_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        return (normalized_shape,)
    if not isinstance(normalized_shape, (tuple, list, torch.Size)):
        raise TypeError("rms_norm(): argument 'normalized_shape' must be tuple of ints, not "
                        f"{type(normalized_shape).__name__}")
    return tuple(int(s) for s in normalized_shape)


def _check(input: Any, normalized_shape: int | Sequence[int], weight: Any) -> tuple[int, ...]:
    """torch's argument checks, with torch's messages; returns ``normalized_shape`` as a tuple."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"rms_norm(): argument 'input' must be Tensor, not {type(input).__name__}")
    shape = _normalized_shape(normalized_shape)
    if not shape:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    D = len(shape)
    if input.dim() < D or tuple(input.shape[input.dim() - D:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    if weight is not None:
        if not isinstance(weight, torch.Tensor):
            raise TypeError(f"rms_norm(): argument 'weight' must be Tensor, not {type(weight).__name__}")
        if tuple(weight.shape) != shape:
            raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                               f"{list(weight.shape)} and normalized_shape = {list(shape)}")
    return shape


def _rows(input: torch.Tensor, D: int) -> tuple[torch.Tensor, str]:
    """``input`` as an ``R x N`` matrix: a free view when its strides allow it, else a logged contiguous copy."""
    N = math.prod(input.shape[input.dim() - D:])
    R = math.prod(input.shape[: input.dim() - D])
    try:
        return input.view(R, N), "strided"
    except RuntimeError:
        log.info("tritred.rms_norm: input of shape %s and strides %s is not viewable as %dx%d; copying it",
                 tuple(input.shape), input.stride(), R, N)
        return input.reshape(R, N).contiguous(), "gathered"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def problem(input: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
            eps: float | None = None) -> Problem:
    """The canonical :class:`~tritred_core.Problem` of an ``rms_norm`` call (what ``tritred explain`` prints).

    The input is viewed as ``M x N x 1`` (``M`` rows of ``N = prod(normalized_shape)`` elements); meta tensors are
    fine (no data is read). ``layout="gathered"`` when the leading dims cannot be merged into one strided axis
    and the launcher copies the input first.

    Raises:
        RuntimeError, TypeError: the same argument errors as :func:`rms_norm`.
    """
    shape = _check(input, normalized_shape, weight)
    x2, layout = _rows(input, len(shape))
    return Problem(op=SPEC.name, dtype=_dtype_name(input.dtype), M=x2.shape[0], N=x2.shape[1], K=1,
                   stride_m=x2.stride(0), stride_n=x2.stride(1), stride_k=1, layout=layout)  # type: ignore[arg-type]


def rms_norm(input: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """RMS normalization — mirrors :func:`torch.nn.functional.rms_norm` (Zhang & Sennrich 2019).

    Args:
        input: floating tensor ``[*, *normalized_shape]`` (float16, bfloat16, float32 or float64), any strides.
        normalized_shape: the trailing dims to normalize over (a sequence of ints; an int is also accepted).
        weight: optional tensor of shape ``normalized_shape`` on the input's device (any real dtype).
        eps: added to the mean of squares inside the square root; ``None`` means the machine epsilon of the
            computation dtype: ``torch.finfo(torch.float32).eps`` for float16/bfloat16/float32 inputs,
            ``torch.finfo(torch.float64).eps`` for float64 (torch's rule).

    Returns:
        A contiguous tensor of the input's shape and dtype: ``x * rsqrt(mean(x**2) + eps) * weight``, the
        statistic accumulated in fp32 (fp64 for float64 inputs).

    Raises:
        RuntimeError: empty ``normalized_shape``, input shape not ending in ``normalized_shape``, weight of the
            wrong shape, tensors on different devices, input not on CUDA (outside the Triton interpreter).
        NotImplementedError: a non-floating input dtype (as torch, e.g. ``"rms_norm" not implemented for 'Long'``).
        TypeError: a non-Tensor ``input``/``weight`` or a malformed ``normalized_shape``.
        tritred_core.InvalidLaunchConfigError: no plugin returned a launch config (the plugin is not registered).

    Source: this package's ``_rms_norm_kernel`` (single pass or two sweeps, see the module docstring).
    """
    shape = _check(input, normalized_shape, weight)
    if input.dtype not in _FLOATS:
        raise NotImplementedError(f'"rms_norm" not implemented for \'{_dtype_name(input.dtype)}\'')
    if weight is not None and weight.device != input.device:
        raise RuntimeError(f"rms_norm(): Expected all tensors to be on the same device, but argument 'weight' is on "
                           f"{weight.device} and input is on {input.device}")
    if weight is not None and (weight.is_complex() or (weight.dtype.is_floating_point and weight.dtype not in _FLOATS)):
        raise NotImplementedError(f"tritred.rms_norm(): weight dtype {weight.dtype} is not supported")
    check_runnable("rms_norm", input)
    y = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    if input.numel() == 0:
        return y
    x2, layout = _rows(input, len(shape))
    prob = Problem(op=SPEC.name, dtype=_dtype_name(input.dtype), M=x2.shape[0], N=x2.shape[1], K=1,
                   stride_m=x2.stride(0), stride_n=x2.stride(1), stride_k=1, layout=layout)  # type: ignore[arg-type]
    cfg = launch_config(SPEC, prob, input.device)
    acc = torch.float64 if input.dtype == torch.float64 else torch.float32
    w = weight.reshape(-1) if weight is not None else None  # tiny: a copy only if non-contiguous
    w_acc = torch.float64 if w is not None and w.dtype == torch.float64 else acc
    if eps is None:
        eps = torch.finfo(acc).eps
    R, N = prob.M, prob.N
    _rms_norm_kernel[(triton.cdiv(R, cfg.BLOCK_M),)](
        x2, w if w is not None else y, y, R, N, prob.stride_m, prob.stride_n, N, float(eps),
        HAS_W=w is not None, ACC=_TL[acc], W_ACC=_TL[w_acc], FP64=acc == torch.float64,
        SINGLE=cfg.strategy == "single_pass", BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return y
