"""Host-side dtype helpers of the kernels: Triton dtypes, accumulators, identities, float64 scalars."""

from __future__ import annotations

import math
import struct

import torch
import triton.language as tl

from .combine import MAX, PROD, SUM

TL_DTYPES = {
    torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32, torch.float64: tl.float64,
    torch.bool: tl.int1, torch.uint8: tl.uint8, torch.int8: tl.int8, torch.int16: tl.int16, torch.int32: tl.int32,
    torch.int64: tl.int64,
}


def tl_dtype(dtype: torch.dtype) -> tl.dtype:
    """The Triton dtype of a torch dtype (floating, integer or bool)."""
    return TL_DTYPES[dtype]


def f32_split(value: float) -> tuple[float, float]:
    """``value`` as two float32 parts (hi, lo) with hi + lo ~ value to 48 bits.

    Triton passes Python floats to kernels as float32; a float64 kernel (eps, momentum, divisors) joins the two
    parts in float64 so its scalars keep float64 precision.
    """
    if not math.isfinite(value):  # inf - inf would make the low part NaN
        return value, 0.0
    hi = struct.unpack("f", struct.pack("f", value))[0] if abs(value) < 3.0e38 else value
    # (a zero low part carries hi's sign: -0.0 + 0.0 would be +0.0)
    return hi, (value - hi) or math.copysign(0.0, hi)


def pre_cast(src: torch.dtype, cast: torch.dtype) -> tl.dtype:
    """First conversion of a loaded element on its way to ``cast`` (the ``dtype=`` argument).

    Anything but float32/half -> bfloat16/float16 goes through float32, as torch converts (c10's BFloat16 and
    Half are built from a float): the same double rounding, bit for bit. It also avoids the interpreter's
    integer and float64 -> bf16 conversions, which reinterpret bits.
    """
    if cast in (torch.bfloat16, torch.float16) and src not in (torch.float32, torch.bfloat16, torch.float16):
        return tl.float32
    return tl_dtype(cast)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulator dtype: fp32 for fp16/bf16/fp32, fp64 for fp64, int64 for integers and bool."""
    if dtype == torch.float64:
        return torch.float64
    if dtype.is_floating_point:
        return torch.float32
    return torch.int64


def identity(op: int, acc: torch.dtype) -> float | int:
    """The identity of ``op`` in ``acc``: what masked lanes hold so they never change the result."""
    if op == SUM:
        return 0
    if op == PROD:
        return 1
    if acc.is_floating_point:
        return float("-inf") if op == MAX else float("inf")
    info = torch.iinfo(acc)
    return info.min if op == MAX else info.max
