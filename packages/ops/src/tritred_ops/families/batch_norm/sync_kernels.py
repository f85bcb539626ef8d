"""batch_norm kernels for statistics shared across processes (``tritred_ops.nn.SyncBatchNorm``).

Three small per-channel launches around the family's tile kernels (:mod:`.kernels`, :mod:`.backward_kernels`):

- :func:`_moments_kernel` merges the statistics launch's partials of each channel into the rank's own (mean, M2,
  count), stacked as one ``[3, C]`` buffer: what one ``all_gather`` sends.
- :func:`_merge_ranks_kernel` merges the gathered ``[W, 3, C]`` statistics of every rank (Chan et al. 1979, in
  rank order: every rank computes the same bits) into the global mean and invstd, the backward's per-channel
  factors, and updates the running statistics.
- :func:`_sums_finish_kernel` merges the backward sums launch's partials into ``[2, C]``: sum(dy) and
  sum(dy * x_hat), what one ``all_reduce`` adds up.

All in fp32 (fp64 for fp64 inputs), deterministic (partials merged in a fixed order, no atomics).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact
from ...kernels.rows import wait_for_previous_launch
from ...kernels.welford import chan_fn
from .kernels import _channel_shift, _channels, _invstd, _merged_stats, _merged_sum, _partials, _update_running


@triton.jit
def _moments_kernel(x_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, out_ptr, C, s_c, ACC: tl.constexpr, SPLIT: tl.constexpr,
                    BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr, WAIT: tl.constexpr = False):
    """BLOCK_K channels' SPLIT partials (mean, M2, count) of ``_stats_kernel`` (``[C, SPLIT]``, their means less
    the channel's first element) merged in a fixed order: ``out[0] = mean``, ``out[1] = M2``, ``out[2] = count``
    (``[3, C]``, ACC). WAIT: a dependent launch after the statistics launch."""
    wait_for_previous_launch(WAIT)
    cs, c_ok = _channels(tl.program_id(0), C, BLOCK_K)
    poffs, pmask = _partials(cs, c_ok, SPLIT, BLOCK_S)
    shift = _channel_shift(x_ptr, cs, c_ok, s_c, ACC)
    mean, m2, n = _merged_stats(pmean_ptr, pm2_ptr, pcnt_ptr, poffs, pmask)
    tl.store(out_ptr + cs, mean + shift, mask=c_ok)
    tl.store(out_ptr + C + cs, m2, mask=c_ok)
    tl.store(out_ptr + 2 * C + cs, n, mask=c_ok)


@triton.jit
def _merge_ranks_kernel(g_ptr, stats_ptr, rm_ptr, rv_ptr, W, C, eps, eps_lo, momentum, momentum_lo,
                        HAS_RUNNING: tl.constexpr, ACC: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_K: tl.constexpr):
    """The global statistics of BLOCK_K channels from every rank's ``[3, C]`` (mean, M2, count), gathered as
    ``[W, 3, C]``: Chan's merge over ranks in a fixed order (BLOCK_W ranks at a time; a rank of count 0, an empty
    batch, is exactly the identity), then ``stats`` (``[4, C]``, ACC): mean, invstd = 1 / sqrt(M2 / n + eps) (the
    biased variance, as torch normalizes), 1 / n and invstd / n (the backward's factors of the summed sum(dy) and
    sum(dy * x_hat)). HAS_RUNNING: ``running = (1 - momentum) * running + momentum * batch statistic`` in place,
    the variance unbiased over the global count (torch's ``batch_norm_gather_stats_with_counts``)."""
    cs, c_ok = _channels(tl.program_id(0), C, BLOCK_K)
    mean = tl.zeros([BLOCK_K], ACC)
    m2 = tl.zeros([BLOCK_K], ACC)
    n = tl.zeros([BLOCK_K], ACC)
    for w0 in range(0, W, BLOCK_W):
        ws = w0 + tl.arange(0, BLOCK_W)
        mask = (ws < W)[:, None] & c_ok[None, :]
        offs = ws.to(tl.int64)[:, None] * (3 * C) + cs[None, :]
        mean_w, m2_w, n_w = tl.reduce((tl.load(g_ptr + offs, mask=mask, other=0).to(ACC),
                                       tl.load(g_ptr + offs + C, mask=mask, other=0).to(ACC),
                                       tl.load(g_ptr + offs + 2 * C, mask=mask, other=0).to(ACC)), 0, chan_fn)
        mean, m2, n = chan_fn(mean, m2, n, mean_w, m2_w, n_w)
    n = tl.where(c_ok, n, 2)  # (lanes past C: no 0 / 0 here nor in the unbiased variance)
    eps = tl.cast(eps, ACC) + tl.cast(eps_lo, ACC)  # float64 scalars arrive as two float32 parts (f32_split)
    invstd = _invstd(div_exact(m2, n, ACC), eps, ACC)
    inv_n = div_exact(1.0, n, ACC)
    tl.store(stats_ptr + cs, mean, mask=c_ok)
    tl.store(stats_ptr + C + cs, invstd, mask=c_ok)
    tl.store(stats_ptr + 2 * C + cs, inv_n, mask=c_ok)
    tl.store(stats_ptr + 3 * C + cs, invstd * inv_n, mask=c_ok)
    if HAS_RUNNING:  # (the plain sum is mean * n: the batch mean is the merged one, as torch's)
        _update_running(rm_ptr, rv_ptr, rm_ptr, rv_ptr, cs, c_ok, mean, m2, n, mean * n, momentum, momentum_lo, ACC)


@triton.jit
def _sums_finish_kernel(psum_ptr, pdot_ptr, invstd_ptr, out_ptr, C, SPLIT: tl.constexpr, BLOCK_S: tl.constexpr,
                        BLOCK_K: tl.constexpr, WAIT: tl.constexpr = False):
    """BLOCK_K channels' SPLIT partials of ``_sums_kernel`` (sum(dy), sum(dy * (x - mean)); ``[C, SPLIT]``) summed
    in a fixed order: ``out[0] = sum(dy)``, ``out[1] = invstd * sum(dy * (x - mean))`` = sum(dy * x_hat) (``[2, C]``,
    their dtype). WAIT: a dependent launch after the sums launch."""
    wait_for_previous_launch(WAIT)
    cs, c_ok = _channels(tl.program_id(0), C, BLOCK_K)
    poffs, pmask = _partials(cs, c_ok, SPLIT, BLOCK_S)
    s_dy = _merged_sum(psum_ptr, poffs, pmask)
    s_dot = _merged_sum(pdot_ptr, poffs, pmask)
    invstd = tl.load(invstd_ptr + cs, mask=c_ok, other=0)
    tl.store(out_ptr + cs, s_dy, mask=c_ok)
    tl.store(out_ptr + C + cs, s_dot * invstd, mask=c_ok)
