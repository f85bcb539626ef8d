"""The normalizations' shared output arithmetic: a row's ``rstd`` and ``d * rstd * weight + bias`` per element
(layer_norm, rms_norm).

A float32 output of torch's kernels rounds ``rstd`` four times (``m2 / N``, ``+ eps``, ``sqrt``, ``1 /``; one error
shared by the whole row) and each element at least twice (``d * rstd``, ``* weight``): rms_norm 16384x4096 float32
on an H100 had 5.6e-8 norm-wise relative error in torch and 6.0e-8 in tritred, where the float64 result rounded to
float32 has 2.5e-8. With ``ONCE`` (float32 accumulator and output) :func:`rstd_of` computes rstd in float64 and
returns it as a float32 pair ``hi + lo``, and :func:`normalized` multiplies by the pair and the weight with one
rounding (an fma's exact error term, as in Dekker's product, 1971): the interpreter's rms_norm 5.8e-8 -> 3.4e-8.
Three flops more an element and a few float64 operations a row; bytes unchanged.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .combine import div_exact, sqrt_exact


@triton.jit
def rstd_of(m2, N, eps, eps_lo, ACC: tl.constexpr, ONCE: tl.constexpr):
    """(rstd, rstd_lo) of rows whose squared deviations sum to ``m2`` over ``N`` elements: 1 / sqrt(m2 / N + eps)
    IEEE-rounded in ACC and 0s (eps arrives as two float32 parts, ``f32_split``). ONCE: computed in float64, ``hi``
    the float32 rounding of it and ``lo`` the rest (0 where ``hi`` is not finite: m2 and eps 0)."""
    if ONCE:
        r = 1.0 / tl.sqrt(m2.to(tl.float64) / N + (tl.cast(eps, tl.float64) + tl.cast(eps_lo, tl.float64)))
        hi = r.to(tl.float32)
        lo = tl.where(tl.abs(hi) < float("inf"), (r - hi.to(tl.float64)).to(tl.float32), 0.0)
    else:
        eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)
        hi = div_exact(1.0, sqrt_exact(div_exact(m2, N, ACC) + eps, ACC), ACC)
        lo = tl.zeros_like(hi)
    return hi, lo


@triton.jit
def normalized(d, rstd, rstd_lo, w, b, HAS_W: tl.constexpr, HAS_B: tl.constexpr, WACC: tl.constexpr,
               ONCE: tl.constexpr):
    """``d * rstd * w + b`` (``w``, ``b``: loaded values, used where HAS_W, HAS_B) in WACC, the promoted dtype of
    the accumulator and the weight. ONCE: p = fl(d rstd) and its rounding error e = d rstd - p exactly (an fma),
    plus d rstd_lo; then fl(p w + fl(e w + b)): one rounding of the product where torch's has two (e w's own rounding
    is u^2 small; with a bias, one more of the bias's size, as torch's). A row whose rstd is inf (m2 and eps 0)
    takes the plain product, as torch's: d * inf."""
    if ONCE:
        p = d * rstd
        e = tl.where(tl.abs(rstd) < float("inf"), tl.fma(d, rstd, -p) + d * rstd_lo, 0.0)
        if HAS_W:
            w = w.to(tl.float32)
            if HAS_B:
                y = tl.fma(p, w, tl.fma(e, w, b.to(tl.float32)))
            else:
                y = tl.fma(p, w, e * w)
        elif HAS_B:
            y = p + (e + b.to(tl.float32))
        else:
            y = p + e
    else:
        y = d * rstd
        if HAS_W:
            y = y.to(WACC) * w.to(WACC)
        if HAS_B:
            y = y + b.to(WACC)
    return y
