"""Combine functions: how two partial results of a reduction become one (sum, product, max/min, with indices).

Each combine rule is written once here; the op families' kernels call them on tiles (:func:`tile_reduce`), on
running accumulators (:func:`combine`, :func:`arg_step`) and on split partials.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Reduction op codes (constexpr in kernels).
SUM, PROD, MAX, MIN = 0, 1, 2, 3


@triton.jit
def mul_fn(a, b):
    """Product combine (``tl.reduce`` of a product)."""
    return a * b


@triton.jit
def max_fn(a, b):
    # NaN-propagating max (torch.amax returns NaN when any element is NaN): one max.NaN instruction on sm_80+,
    # against four (compare, compare, or, select) for the where-based form; bf16 rows are compute-tight.
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def min_fn(a, b):
    """NaN-propagating min (as :func:`max_fn`)."""
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def combine(a, b, OP: tl.constexpr):
    """Elementwise combine of two accumulators for op code OP."""
    if OP == 0:
        r = a + b
    elif OP == 1:
        r = a * b
    elif OP == 2:
        r = max_fn(a, b)
    else:
        r = min_fn(a, b)
    return r


@triton.jit
def tile_reduce(x, axis: tl.constexpr, OP: tl.constexpr):
    """Reduce a tile along ``axis`` with op code OP (a fixed tree: deterministic for a given config)."""
    if OP == 0:
        r = tl.sum(x, axis)
    elif OP == 1:
        r = tl.reduce(x, axis, mul_fn)
    elif OP == 2:
        r = tl.reduce(x, axis, max_fn)
    else:
        r = tl.reduce(x, axis, min_fn)
    return r


@triton.jit
def div_exact(a, b, ACC: tl.constexpr):
    """IEEE-rounded a / b in ACC (fp32 or fp64): compiled Triton's fp32 '/' is approximate, and a constant row
    must get exactly its value as mean. Used per row or per chunk, never per element."""
    if ACC == tl.float64:
        r = tl.cast(a, tl.float64) / tl.cast(b, tl.float64)
    else:
        r = tl.div_rn(tl.cast(a, tl.float32), tl.cast(b, tl.float32))
    return r


@triton.jit
def sqrt_exact(a, ACC: tl.constexpr):
    """IEEE-rounded sqrt(a) in ACC (fp32 or fp64): compiled Triton's fp32 sqrt is approximate."""
    if ACC == tl.float64:
        r = tl.sqrt(tl.cast(a, tl.float64))
    else:
        r = tl.sqrt_rn(tl.cast(a, tl.float32))
    return r


@triton.jit
def argmax_fn(va, ia, vb, ib):
    """(value, index) combine for max: NaN wins (it is the max in torch), ties keep the smaller index."""
    a_nan = va != va
    b_nan = vb != vb
    pick_a = (va > vb) | ((va == vb) & (ia < ib)) | (a_nan & (~b_nan | (ia < ib)))
    return tl.where(pick_a, va, vb), tl.where(pick_a, ia, ib)


@triton.jit
def argmin_fn(va, ia, vb, ib):
    """(value, index) combine for min: NaN wins, ties keep the smaller index (as :func:`argmax_fn`)."""
    a_nan = va != va
    b_nan = vb != vb
    pick_a = (va < vb) | ((va == vb) & (ia < ib)) | (a_nan & (~b_nan | (ia < ib)))
    return tl.where(pick_a, va, vb), tl.where(pick_a, ia, ib)


@triton.jit
def arg_combine(acc_v, acc_i, v, i, IS_MAX: tl.constexpr):
    """Elementwise (value, index) update of a max (IS_MAX) or min accumulator."""
    if IS_MAX:
        r_v, r_i = argmax_fn(acc_v, acc_i, v, i)
    else:
        r_v, r_i = argmin_fn(acc_v, acc_i, v, i)
    return r_v, r_i


@triton.jit
def arg_reduce(v, i, axis: tl.constexpr, IS_MAX: tl.constexpr):
    """(value, first index) of the max (IS_MAX) or min of a tile along ``axis``."""
    if IS_MAX:
        r_v, r_i = tl.reduce((v, i), axis, argmax_fn)
    else:
        r_v, r_i = tl.reduce((v, i), axis, argmin_fn)
    return r_v, r_i


@triton.jit
def arg_step(acc_v, acc_c, v, chunk, IS_MAX: tl.constexpr):
    """Per-lane update of a running max (IS_MAX) or min and the chunk number ``chunk`` where it was reached.

    A lane sees its positions in increasing order, so a tie keeps the earlier chunk, and the first NaN wins and
    stays (NaN is the max and the min in torch).
    """
    if IS_MAX:
        better = v > acc_v
    else:
        better = v < acc_v
    better = better | ((v != v) & (acc_v == acc_v))
    return tl.where(better, v, acc_v), tl.where(better, chunk, acc_c)


@triton.jit
def arg_finish(v, pos, past, axis: tl.constexpr, IS_MAX: tl.constexpr):
    """(extreme value, smallest position holding it) along ``axis`` of lanes ``v`` at positions ``pos`` (``past``:
    a position beyond every lane's).

    Lanes beyond the data hold the identity at positions past every real one: they can tie with the result only
    when all real values equal the identity, and then a real position is smaller. When the extreme is NaN, only
    NaN lanes hit (v == NaN is false); otherwise no lane is NaN.
    """
    if IS_MAX:
        best = tl.reduce(v, axis, max_fn)
    else:
        best = tl.reduce(v, axis, min_fn)
    if axis == 0:
        hit = (v == best[None, :]) | (v != v)
    else:
        hit = (v == best[:, None]) | (v != v)
    return best, tl.min(tl.where(hit, pos, past), axis).to(tl.int64)
