"""normalize: L2 normalization along one dim, mirroring :func:`torch.nn.functional.normalize` with ``p=2``.

``y = x / max(||x||_2, eps)`` along ``dim``, computed as torch computes it
(``input / input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)``):

- the sum of squares is accumulated in fp32 (fp64 for float64 inputs); its square root is IEEE-rounded;
- the denominator ``max(norm, eps)`` is rounded to the input's dtype before the division, because torch's
  ``norm`` returns the input's dtype: in float16 ``eps=1e-12`` is 0, so an all-zero row gives NaN, and a norm
  past 65504 is inf, so the row gives zeros (both as torch);
- a NaN norm stays NaN (``clamp_min`` keeps NaN): a row holding a NaN normalizes to NaN;
- ``x / d`` is IEEE-rounded and the output has the input's dtype and shape, and torch's strides (those of
  ``torch.empty_like(input)``: the input's own when it is dense, contiguous otherwise).

Only ``p=2`` has a kernel; any other ``p`` raises NotImplementedError (call torch.nn.functional.normalize).

The kernel reduces *lines*: the ``N`` elements along ``dim`` of one output position. The input is viewed as
``M x N x K`` (``M``: the dims before ``dim``, ``K``: those after it; a free view when the strides allow it,
else a logged copy, ``Problem.layout == "gathered"``). A program normalizes ``BLOCK_L`` adjacent lines: along
``K`` when ``K > 1`` (``BLOCK_L = BLOCK_K`` of the launch config; neighbouring lines are neighbours in memory for
``dim=1`` of an NCHW tensor, so every load is a coalesced segment), along ``M`` when ``K == 1`` (rows;
``BLOCK_L = BLOCK_M``). Two strategies, chosen by the ``tritred_launch_config`` hook
(:func:`tritred_normalize.plugin.normalize_config`, which any other plugin may override):

- ``single_pass``: the lines are held in registers (``BLOCK_N >= N``): one read, one write;
- ``multi_pass``: a first sweep accumulates ``x**2`` lane-wise in a ``BLOCK_L x BLOCK_N`` tile (reduced once at
  the end), a second sweep divides and writes (its reads usually hit L2).

Masked lanes load 0, which adds nothing to the sum of squares. Offsets are int64. The host helpers (device
check, the cached launch decision) come from :mod:`tritred_ops.host`, the ones tritred's own ops use.
"""

from __future__ import annotations

import logging
import math
import struct
from typing import Any

import torch
import triton
import triton.language as tl
from tritred_core import Problem, ReductionSpec
from tritred_ops.host import check_runnable, launch_config

log = logging.getLogger("tritred")

SPEC = ReductionSpec(
    name="normalize",
    family="normalize",
    outputs=("out",),
    mirrors="torch.nn.functional.normalize",
    summary="x / max(||x||_2, eps) along dim (p=2)",
    strategies=("single_pass", "multi_pass"),
    knobs=(),
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: torch's names of integer dtypes in its error messages
_TORCH_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                torch.uint8: "Byte", torch.bool: "Bool"}
_TL = {torch.float32: tl.float32, torch.float64: tl.float64}


@triton.jit
def _normalize_kernel(x_ptr, y_ptr, L, N, LINE_BLOCKS, x_sg, x_sl, x_sn, y_sg, y_sl, y_sn, eps_hi, eps_lo,
                      ACC: tl.constexpr, FP64: tl.constexpr, SINGLE: tl.constexpr,
                      BLOCK_L: tl.constexpr, BLOCK_N: tl.constexpr):
    # Program p normalizes lines [l0, l0 + BLOCK_L) of group g: line l of group g starts at g * sg + l * sl and
    # its N elements are sn apart (for x and y each).
    pid = tl.program_id(0).to(tl.int64)
    group = pid // LINE_BLOCKS
    lines = (pid % LINE_BLOCKS) * BLOCK_L + tl.arange(0, BLOCK_L)
    line_ok = lines < L
    x_line = x_ptr + group * x_sg + lines * x_sl
    y_line = y_ptr + group * y_sg + lines * y_sl
    if SINGLE:
        cols = tl.arange(0, BLOCK_N).to(tl.int64)
        mask = line_ok[:, None] & (cols < N)[None, :]
        x = tl.load(x_line[:, None] + cols[None, :] * x_sn, mask=mask, other=0).to(ACC)
        sum_sq = tl.sum(x * x, 1)
    else:
        acc = tl.zeros([BLOCK_L, BLOCK_N], ACC)
        for n0 in range(0, N, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = line_ok[:, None] & (cols < N)[None, :]
            x = tl.load(x_line[:, None] + cols[None, :] * x_sn, mask=mask, other=0).to(ACC)
            acc += x * x
        sum_sq = tl.sum(acc, 1)
    eps = tl.cast(eps_hi, ACC) + tl.cast(eps_lo, ACC)  # float64 kernels: eps to 48 bits (floats arrive as fp32)
    if FP64:
        norm = tl.sqrt(sum_sq)  # (fp64 sqrt is IEEE-rounded)
    else:
        norm = tl.sqrt_rn(sum_sq)  # torch's sqrtf, not the fast approximation
    d = tl.where(norm < eps, eps, norm)  # clamp_min(eps); a NaN norm stays NaN
    d = d.to(y_ptr.dtype.element_ty).to(ACC)[:, None]  # torch's norm is in the input's dtype
    if SINGLE:
        if FP64:
            y = x / d  # (fp64 division is IEEE-rounded)
        else:
            y = tl.div_rn(x, d)  # torch's division, not the fast approximation
        tl.store(y_line[:, None] + cols[None, :] * y_sn, y, mask=mask)
    else:
        for n0 in range(0, N, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = line_ok[:, None] & (cols < N)[None, :]
            x = tl.load(x_line[:, None] + cols[None, :] * x_sn, mask=mask, other=0).to(ACC)
            if FP64:
                y = x / d
            else:
                y = tl.div_rn(x, d)
            tl.store(y_line[:, None] + cols[None, :] * y_sn, y, mask=mask)


# -- host side ----------------------------------------------------------------------------------------------------

def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _f32_split(value: float) -> tuple[float, float]:
    """``value`` as float32 parts ``hi + lo`` (48 bits): a float64 kernel joins them into its float64 eps."""
    if not math.isfinite(value) or abs(value) >= 3.0e38:
        return value, 0.0
    hi = struct.unpack("f", struct.pack("f", value))[0]
    return hi, value - hi


def _check(input: Any, p: Any, dim: Any, eps: Any, out: Any) -> int:
    """torch's argument checks (torch's exceptions and messages), then this plugin's limits; returns ``dim``
    wrapped to ``[0, ndim)`` (a 0-d input counts as 1-d, as torch wraps its dims)."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"normalize(): argument 'input' must be Tensor, not {type(input).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"normalize(): argument 'dim' must be int, not {type(dim).__name__}")
    ndim = max(input.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    if not (input.is_floating_point() or input.is_complex()):
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{_TORCH_NAMES.get(input.dtype, _dtype_name(input.dtype))}")
    if p != 2:
        raise NotImplementedError(f"tritred_normalize.normalize(): p={p} is not implemented (only p=2); use "
                                  "torch.nn.functional.normalize")
    if input.dtype not in _FLOATS:
        raise NotImplementedError(f"tritred_normalize.normalize(): dtype {_dtype_name(input.dtype)} is not "
                                  "supported (float16, bfloat16, float32, float64)")
    if out is not None:
        raise NotImplementedError("tritred_normalize.normalize(): out= is not supported")
    return dim % ndim


def _view3(t: torch.Tensor, dim: int) -> torch.Tensor | None:
    """``t`` viewed as ``M x N x K`` around ``dim`` (no copy), or None when its strides do not allow it."""
    shape = tuple(t.shape) or (1,)
    M, N, K = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    try:
        return t.view(M, N, K)
    except RuntimeError:
        return None


def _input_view(input: torch.Tensor, dim: int) -> tuple[torch.Tensor, str]:
    """The input as ``M x N x K``: a free view (``"strided"``), else a logged contiguous copy (``"gathered"``)."""
    x3 = _view3(input, dim)
    if x3 is not None:
        return x3, "strided"
    log.info("tritred.normalize: input of shape %s and strides %s has no M x N x K view around dim %d; copying it",
             tuple(input.shape), input.stride(), dim)
    x3 = _view3(input.contiguous(), dim)
    assert x3 is not None
    return x3, "gathered"


def _problem(x3: torch.Tensor, dtype: torch.dtype, layout: str) -> Problem:
    M, N, K = x3.shape
    return Problem(op=SPEC.name, dtype=_dtype_name(dtype), M=M, N=N, K=K, stride_m=x3.stride(0),
                   stride_n=x3.stride(1), stride_k=x3.stride(2), layout=layout)  # type: ignore[arg-type]


def problem(input: torch.Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
            out: torch.Tensor | None = None) -> Problem:
    """The canonical :class:`~tritred_core.Problem` of a ``normalize`` call (what ``tritred explain`` prints):
    ``M x N x K`` around ``dim`` with the input's strides. Meta tensors are fine (no data is read).

    Raises:
        IndexError, RuntimeError, TypeError, NotImplementedError: as :func:`normalize`.
    """
    d = _check(input, p, dim, eps, out)
    x3, layout = _input_view(input, d)
    return _problem(x3, input.dtype, layout)


def launch(input: torch.Tensor, dim: int, eps: float) -> torch.Tensor:
    """The forward kernel's launcher (``dim`` already wrapped): decides through the hook, allocates, launches."""
    check_runnable("normalize", input)
    y = torch.empty_like(input)  # torch's layout (a division's output follows the input's strides)
    if input.numel() == 0:
        return y
    x3, layout = _input_view(input, dim)
    y3 = _view3(y, dim)
    out = y3 if y3 is not None else torch.empty(x3.shape, dtype=y.dtype, device=y.device)
    prob = _problem(x3, input.dtype, layout)
    cfg = launch_config(SPEC, prob, input.device)
    M, N, K = x3.shape
    if K > 1:  # lines along K (BLOCK_K of them a program), one group per index of M
        L, G, block_l = K, M, cfg.BLOCK_K
        xs, ys = (x3.stride(0), x3.stride(2)), (out.stride(0), out.stride(2))
    else:  # rows: lines along M (BLOCK_M of them a program), one group
        L, G, block_l = M, 1, cfg.BLOCK_M
        xs, ys = (0, x3.stride(0)), (0, out.stride(0))
    acc = torch.float64 if input.dtype == torch.float64 else torch.float32
    eps_hi, eps_lo = _f32_split(float(eps))
    line_blocks = triton.cdiv(L, block_l)
    _normalize_kernel[(G * line_blocks,)](
        x3, out, L, N, line_blocks, xs[0], xs[1], x3.stride(1), ys[0], ys[1], out.stride(1), eps_hi, eps_lo,
        ACC=_TL[acc], FP64=acc == torch.float64, SINGLE=cfg.strategy == "single_pass",
        BLOCK_L=block_l, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if y3 is None:  # (only after a gathered input whose own layout has no M x N x K view)
        y.copy_(out.view(y.shape))
    return y


def backward(grad: torch.Tensor, input: torch.Tensor, dim: int, eps: float) -> torch.Tensor:
    """The input's gradient, with torch ops (no kernel of this plugin), in fp32 (fp64 for float64), rounded once.

    With ``n = ||x||``, ``d = max(n, eps)`` (rounded to the input's dtype, as in the forward) and ``y = x / d``,
    as torch's ``derivatives.yaml`` chains them: ``dx = g / d + grad_n * dn/dx`` with
    ``grad_n = -sum(g * x) / d**2`` where ``n >= eps`` and 0 elsewhere (``clamp_min`` passes its gradient where
    ``n >= eps`` only), and ``dn/dx = x / n``, 0 where ``n == 0`` (the norm's backward: there a finite
    ``grad_n`` gives 0, a NaN or infinite one NaN).
    """
    acc = torch.float64 if input.dtype == torch.float64 else torch.float32
    x, g = input.to(acc), grad.to(acc)
    n = torch.linalg.vector_norm(x, 2, dim, keepdim=True)
    d = n.clamp_min(eps).to(input.dtype).to(acc)
    grad_n = torch.where(n >= eps, -(g * x).sum(dim, keepdim=True) / (d * d), 0.0)
    return (g / d + grad_n * torch.where(n == 0, 0.0, x / n)).to(input.dtype)


class _Normalize(torch.autograd.Function):
    """Autograd for :func:`normalize`: the Triton forward, the torch-ops :func:`backward` (saves the input)."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, dim: int, eps: float) -> torch.Tensor:
        ctx.save_for_backward(input)
        ctx.dim, ctx.eps = dim, eps
        return launch(input, dim, eps)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (input,) = ctx.saved_tensors
        return backward(grad, input, ctx.dim, ctx.eps), None, None


def normalize(input: torch.Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """L2 normalization along ``dim`` — mirrors :func:`torch.nn.functional.normalize` for ``p=2``.

    Args:
        input: floating tensor of any shape (float16, bfloat16, float32 or float64), any strides; 0-d is taken
            as one element (as torch).
        p: the exponent of the norm: only 2 (other values raise NotImplementedError).
        dim: the dim to normalize along (default 1, as torch); negative values count from the end.
        eps: the smallest denominator: ``y = x / max(||x||_2, eps)``.
        out: not supported (must be None).

    Returns:
        A tensor of the input's shape and dtype, with torch's strides (``torch.empty_like(input)``'s), the sum
        of squares accumulated in fp32 (fp64 for float64). Differentiable: the backward pass runs torch ops
        (:func:`backward`); no double backward.

    Raises:
        IndexError: ``dim`` out of range (torch's message).
        RuntimeError: an integer or bool input (torch's message); tensors Triton cannot run on (input not on
            CUDA, outside the Triton interpreter).
        NotImplementedError: ``p != 2``, a complex input, ``out=`` (all accepted by torch).
        TypeError: a non-Tensor ``input`` or a non-int ``dim``.
        tritred_core.InvalidLaunchConfigError: no plugin returned a launch config (the plugin is not registered).

    Source: this module's ``_normalize_kernel`` (see the module docstring).
    """
    d = _check(input, p, dim, eps, out)
    if torch.is_grad_enabled() and input.requires_grad:
        out_: torch.Tensor = _Normalize.apply(input, d, eps)
        return out_
    return launch(input, d, eps)
