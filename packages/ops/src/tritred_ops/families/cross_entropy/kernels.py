"""cross_entropy kernels: the loss of rows of logits, and with grad required their gradient, in one launch.

A row is the C logits of one sample (the class dim of the canonical M x C x K view: ``(N, C)`` rows, or the
``(N, C, d1, ...)`` columns, read in place). ``_xent_kernel`` computes each row's max and ``log(sum(exp(x - max)))``
in fp32 (fp64 for fp64 inputs), from registers (``SINGLE``) or by the online (max, sum of exp) of Milakov &
Gimelshein (2018) over chunks, one pair per 16-byte vector of lanes (no cross-warp reduction inside the loop).
Vocabularies of any size loop; no fp32 copy of the logits is ever made.

With ``GRAD`` it writes d loss / d logits during the same launch (as Liger-Kernel and quack do) into a new buffer
of the logits' dtype: for a class-index target t with weights w and label smoothing e,

    grad_j = scale * (p_j * ((1 - e) w_t + e/C * sum_c w_c) - (1 - e) w_t [j == t] - e/C * w_j)

and for class probabilities q (smoothed: q' = (1 - e) q + e/C), ``grad_j = scale * (p_j * sum_c w_c q'_c -
w_j q'_j)``, with p = softmax(x) and ``scale`` the reduction's (1, or 1 / the mean's denominator). The backward
then only scales that buffer by the loss's gradient (``backward.py``). A loop reads the row a second time for it
(from the end back: the chunks read last are the likeliest in L2). Without ``GRAD`` every loss reads the row once:
label smoothing's and probability targets' sums over the row are kept relative to each lane group's running max
(``SHIFT``), and moved to the row's max at the end.

Semantics follow torch's ``cross_entropy`` (log_softmax then nll_loss, or the label-smoothing and probability
formulas of aten's LossNLL.cpp) to NaN and inf: a row with NaN or +inf, or only -inf, has NaN log-probabilities,
hence a NaN loss and gradient; an ignored row has loss 0 and gradient ``0 * p`` (NaN only where p is NaN, as
torch's ``0 - exp(logp) * 0``); ``0 * inf`` products (a zero weight or probability at a -inf logit) give NaN.

``_targets_kernel`` runs first for class-index targets: the mean's denominator (the targets' weights, ignored
rows left out) as per-program partials, merged by every reader in the same fixed order; and on CUDA a device-side
assert on targets out of range (torch's CUDA kernels assert the same way; the host raises IndexError on the CPU).
``_merge_kernel`` sums the per-program loss partials in a fixed order (deterministic, no atomics) and divides.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels.combine import div_exact, max_fn

INF = tl.constexpr(float("inf"))


@triton.jit
def _online_fn(m_a, s_a, m_b, s_b):
    """Merge two (max, sum of exp(x - max)) pairs; an all -inf side has s = 0 and adds nothing (no NaN)."""
    m = max_fn(m_a, m_b)
    a = tl.where(m_a == -INF, 0.0, s_a * tl.exp(m_a - m))
    b = tl.where(m_b == -INF, 0.0, s_b * tl.exp(m_b - m))
    return m, a + b


@triton.jit
def narrow(v, ptr):
    """``v`` ready to store at ``ptr``: float64 values for a narrower float go through float32 first (the
    interpreter converts float64 to bfloat16 by reinterpreting bits)."""
    if v.dtype == tl.float64 and ptr.dtype.element_ty != tl.float64:
        v = v.to(tl.float32)
    return v


@triton.jit
def _rows(R, K, BLOCK_M: tl.constexpr, COLS: tl.constexpr):
    """(m, k, row_ok) of this program's BLOCK_M rows (int64). Rows: consecutive flat rows m * K + k. COLS: one m
    and BLOCK_M adjacent k (the kept axis after the class dim: contiguous loads across the rows)."""
    pid = tl.program_id(0)
    if COLS:
        k_blocks = tl.cdiv(K, BLOCK_M)
        k = (pid % k_blocks).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        m = (pid // k_blocks).to(tl.int64) + tl.zeros_like(k)
        ok = k < K
    else:
        rows = pid.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        ok = rows < R
        m = rows // K
        k = rows % K
    return m, k, ok


@triton.jit
def _scalar(hi, lo, ACC: tl.constexpr):
    """A host float passed as two float32 parts (``kernels.dtypes.f32_split``), joined in ACC."""
    if ACC == tl.float64:
        v = tl.cast(hi, tl.float64) + tl.cast(lo, tl.float64)
    else:
        v = tl.cast(hi, tl.float32)
    return v


@triton.jit
def _denominator(wpart_ptr, n_wpart, R, PROB: tl.constexpr, ACC: tl.constexpr, WP2: tl.constexpr):
    """The mean's denominator: the number of rows (probabilities), else the sum of the targets' weights over the
    rows not ignored, from ``_targets_kernel``'s partials in one fixed order (the same value in every program)."""
    if PROB:
        d = tl.cast(R, ACC)
    else:
        i = tl.arange(0, WP2)
        d = tl.sum(tl.load(wpart_ptr + i, mask=i < n_wpart, other=0).to(ACC), 0)
    return d


@triton.jit
def _constants(eps_hi, eps_lo, wpart_ptr, n_wpart, R, C, PROB: tl.constexpr, SMOOTH: tl.constexpr,
               GRAD: tl.constexpr, RED: tl.constexpr, ACC: tl.constexpr, WP2: tl.constexpr):
    """A launch's constants: label smoothing's (1 - e, e / C) (1 and 0 without SMOOTH), and the gradient's
    ``scale`` (mean with GRAD: 1 / the mean's denominator, read on the device; else 1)."""
    one_m = 1.0
    ls_c = 0.0
    if SMOOTH:
        eps = _scalar(eps_hi, eps_lo, ACC)
        one_m = 1.0 - eps
        ls_c = div_exact(eps, tl.cast(C, ACC), ACC)
    scale = 1.0
    if RED == 1 and GRAD:
        scale = div_exact(1.0, _denominator(wpart_ptr, n_wpart, R, PROB, ACC, WP2), ACC)
    return one_m, ls_c, scale


@triton.jit
def _weight_total(wsum_ptr, C, PROB: tl.constexpr, HAS_W: tl.constexpr, SMOOTH: tl.constexpr, ACC: tl.constexpr):
    """sum_c w_c, label smoothing's normalizer of class-index targets (from :func:`_targets_kernel` with HAS_W,
    else C); 0 where it is not used."""
    w_all = 0.0
    if SMOOTH and not PROB:
        if HAS_W:
            w_all = tl.load(wsum_ptr).to(ACC)
        else:
            w_all = tl.cast(C, ACC)
    return w_all


@triton.jit
def _target(t_at, x_row, w_ptr, row_ok, s_xn, C, ignore_index, PROB: tl.constexpr, HAS_W: tl.constexpr,
            ACC: tl.constexpr):
    """(t, use, bad, w_t, x_t) of rows whose class-index target is at ``t_at``: the target (0 where not used),
    whether it counts (in range, not ``ignore_index``), whether it is out of range (refused before the launch:
    the host's check, or the device assert on CUDA), its class weight (1 without weights, 0 where not used) and
    its logit. Probability targets (PROB): t = 0, every row counts, w_t and x_t unused."""
    if PROB:
        t = tl.zeros_like(row_ok.to(tl.int64))
        use = row_ok
        bad = use & False
        w_t = 0.0
        x_t = 0.0
    else:
        t = tl.load(t_at, mask=row_ok, other=0).to(tl.int64)
        valid = row_ok & (t != ignore_index)
        in_range = (t >= 0) & (t < C)
        use = valid & in_range
        bad = valid & ~in_range
        t = tl.where(use, t, 0)
        if HAS_W:
            w_t = tl.load(w_ptr + t, mask=use, other=0).to(ACC)
        else:
            w_t = tl.where(use, 1.0, 0.0).to(ACC)
        x_t = tl.load(x_row + t * s_xn, mask=use, other=0).to(ACC)
    return t, use, bad, w_t, x_t


@triton.jit
def _row_loss(terms, mx, ls, x_t, w_t, use, bad, one_m, ls_c, PROB: tl.constexpr, SMOOTH: tl.constexpr):
    """Each row's loss from its (max, log_sum): probabilities, ``terms`` (sum_c w_c q'_c (lse - x_c)); class
    indices, ``w_t (lse - x_t)``, smoothed with ``terms`` (sum_c w_c (lse - x_c)); 0 for an ignored row, NaN for
    a target out of range."""
    if PROB:
        loss = terms
    else:
        loss = w_t * ((mx - x_t) + ls)
        if SMOOTH:
            loss = one_m * loss + ls_c * terms
        loss = tl.where(use, loss, 0.0)
        loss = tl.where(bad, float("nan"), loss)
    return loss


@triton.jit
def _weighted_q(q_row, w_ptr, cols, cmask, mask, s_qn, one_m, ls_c, HAS_W: tl.constexpr, SMOOTH: tl.constexpr,
                ACC: tl.constexpr):
    """w_c * q'_c of a tile of probability targets (q' smoothed: (1 - e) q + e/C), 0 outside the rows."""
    q = tl.load(q_row[:, None] + cols[None, :] * s_qn, mask=mask, other=0).to(ACC)
    if SMOOTH:
        q = q * one_m + ls_c
    if HAS_W:
        q = q * tl.load(w_ptr + cols, mask=cmask, other=0).to(ACC)[None, :]
    return tl.where(mask, q, 0.0)


@triton.jit
def _chunk_cols(n0, C, row_ok, MASKED: tl.constexpr, BLOCK_N: tl.constexpr):
    """(columns, column mask, tile mask) of chunk [n0, n0 + BLOCK_N); not MASKED: the chunk lies inside the row
    (only rows are masked: a mask constant over each vector, and no element select)."""
    cols = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
    if MASKED:
        cmask = cols < C
    else:
        cmask = cols >= 0
    return cols, cmask, row_ok[:, None] & cmask[None, :]


@triton.jit
def _stats_chunk(x_row, q_row, w_ptr, n0, C, row_ok, s_xn, s_qn, m_acc, s_acc, bq, v_acc, a_acc, one_m, ls_c,
                 MASKED: tl.constexpr, PROB: tl.constexpr, GRAD: tl.constexpr, SHIFT: tl.constexpr,
                 HAS_W: tl.constexpr, SMOOTH: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr,
                 GROUP: tl.constexpr, EVICT: tl.constexpr):
    """The first sweep over chunk [n0, n0 + BLOCK_N): the running (max, sum of exp) per GROUP of lanes
    ([rows, BLOCK_N / GROUP]); for probability targets with GRAD the running sum of w q' (``bq``, per lane).

    SHIFT (the loss alone of label smoothing or probabilities, in this one sweep): per group the sum ``v_acc`` of
    v (w, or w q') and the sum ``a_acc`` of v (x - m) relative to the group's running max m (0 while it is -inf),
    rescaled as m grows: terms of one sign, no cancellation, where sum(v x) - lse sum(v) would lose the digits of
    large logits. :func:`_shifted_total` turns them into sum v (lse - x)."""
    cols, cmask, mask = _chunk_cols(n0, C, row_ok, MASKED, BLOCK_N)
    x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=-INF, eviction_policy=EVICT).to(ACC)
    G: tl.constexpr = BLOCK_N // GROUP
    x3 = tl.reshape(x, [x.shape[0], G, GROUP])
    m_new = max_fn(m_acc, tl.reduce(x3, 2, max_fn))
    # a group whose max is still -inf adds exp(-inf - 0) = 0; +inf or NaN makes the sum NaN (as torch's row)
    m_at = tl.where(m_new == -INF, 0.0, m_new)
    s_acc = s_acc * tl.exp(m_acc - m_at) + tl.sum(tl.exp(x3 - m_at[:, :, None]), 2)
    if PROB and GRAD:
        bq += _weighted_q(q_row, w_ptr, cols, cmask, mask, s_qn, one_m, ls_c, HAS_W, SMOOTH, ACC)
    if SHIFT:
        if PROB:
            v = _weighted_q(q_row, w_ptr, cols, cmask, mask, s_qn, one_m, ls_c, HAS_W, SMOOTH, ACC)
        elif HAS_W:
            v = tl.where(mask, tl.load(w_ptr + cols, mask=cmask, other=0).to(ACC)[None, :], 0.0)
        else:
            v = tl.where(mask, 1.0, 0.0).to(ACC)
        v3 = tl.reshape(v, [x.shape[0], G, GROUP])
        d = v3 * (x3 - m_at[:, :, None])
        if MASKED:  # (lanes past the row: 0 * -inf)
            d = tl.where(tl.reshape(mask, [x.shape[0], G, GROUP]), d, 0.0)
        a_acc = a_acc - v_acc * (m_at - tl.where(m_acc == -INF, 0.0, m_acc)) + tl.sum(d, 2)
        v_acc += tl.sum(v3, 2)
    return m_new, s_acc, bq, v_acc, a_acc


@triton.jit
def _shifted_total(m_acc, v_acc, a_acc, mx, ls):
    """sum over the row of v (lse - x) from the groups' shifted sums (:func:`_stats_chunk`): each group's sum moved
    to the row's max, then ``sum(v) * log_sum - sum(v (x - max))``."""
    m_at = tl.where(mx == -INF, 0.0, mx)
    g_at = tl.where(m_acc == -INF, 0.0, m_acc)
    a = tl.sum(a_acc - v_acc * (m_at[:, None] - g_at), 1)
    return tl.sum(v_acc, 1) * ls - a


@triton.jit
def _emit(x, p, wq, w, mask, g_ptrs, n0, mx, ls, t, a, b, c, acc, PROB: tl.constexpr, SMOOTH: tl.constexpr,
          GRAD: tl.constexpr, HAS_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """A tile of logits ``x`` (columns from n0) once the rows' (max, log of the sum of exp(x - max)) are known:
    the loss terms that need them (``acc``, per lane: probability targets, label smoothing) and with GRAD the
    gradient, stored at ``g_ptrs`` (row coefficients a, b, c: see the module docstring; ``wq``: w q' of
    probability targets, ``w``: class weights). log p = (x - max) - log_sum, as torch's log_softmax: the max is
    subtracted exactly first (lse = max + log_sum, rounded, would lose the digits of large logits). HAS_P: ``p``
    holds softmax(x) already (the single pass: exp(x - max) / sum, one exp per element, not two)."""
    logp = (x - mx[:, None]) - ls[:, None]
    if GRAD and not HAS_P:
        p = tl.exp(logp)
    if PROB:
        acc += tl.where(mask, wq * -logp, 0.0)
        if GRAD:
            grad = p * a[:, None] - wq * c[:, None]
    else:
        if SMOOTH:
            acc += tl.where(mask, w * -logp, 0.0)
        if GRAD:
            grad = p * a[:, None]
            hit = tl.arange(0, BLOCK_N)[None, :] == (t - n0).to(tl.int32)[:, None]
            grad = grad - tl.where(hit, b[:, None], 0.0)
            if SMOOTH:
                grad = grad - c[:, None] * w
    if GRAD:
        tl.store(g_ptrs, narrow(grad, g_ptrs), mask=mask, eviction_policy="evict_first")
    return acc


@triton.jit
def _emit_chunk(x_row, q_row, g_row, w_ptr, n0, C, row_ok, s_xn, s_qn, s_gn, mx, ls, t, a, b, c, acc, one_m, ls_c,
                MASKED: tl.constexpr, PROB: tl.constexpr, HAS_W: tl.constexpr, SMOOTH: tl.constexpr,
                GRAD: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    """The second sweep over chunk [n0, n0 + BLOCK_N): :func:`_emit` of the reloaded tile (evict-first: read for
    the last time)."""
    cols, cmask, mask = _chunk_cols(n0, C, row_ok, MASKED, BLOCK_N)
    x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=-INF,
                eviction_policy="evict_first").to(ACC)
    w = 1.0
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=cmask, other=0).to(ACC)[None, :]
    wq = 0.0
    if PROB:
        wq = _weighted_q(q_row, w_ptr, cols, cmask, mask, s_qn, one_m, ls_c, HAS_W, SMOOTH, ACC)
    return _emit(x, 0.0, wq, w, mask, g_row[:, None] + cols[None, :] * s_gn, n0, mx, ls, t, a, b, c, acc, PROB,
                 SMOOTH, GRAD, False, BLOCK_N)


@triton.jit
def _coefficients(use, bad, w_t, w_all, bq, scale, one_m, ls_c, PROB: tl.constexpr, SMOOTH: tl.constexpr):
    """The gradient's row coefficients (a, b, c) of ``grad = p * a - b [j == t] - c * w_j`` (class indices) or
    ``p * a - c * w_j q'_j`` (probabilities, ``bq``: the row's sum of w q'); ignored rows 0, bad ones NaN."""
    if PROB:
        a = bq * scale
        b = a
        c = tl.zeros_like(a) + scale
    else:
        if SMOOTH:
            a = tl.where(use, (one_m * w_t + ls_c * w_all) * scale, 0.0)
            b = tl.where(use, one_m * w_t * scale, 0.0)
            c = tl.where(use, ls_c * scale, 0.0)
        else:
            a = tl.where(use, w_t * scale, 0.0)
            b = a
            c = a
        a = tl.where(bad, float("nan"), a)
    return a, b, c


@triton.jit
def _xent_kernel(x_ptr, t_ptr, q_ptr, w_ptr, g_ptr, out_ptr, lse_ptr, wpart_ptr, wsum_ptr,
                 R, C, K, s_xm, s_xn, s_xk, s_tm, s_tk, s_qm, s_qn, s_qk, s_gm, s_gn, s_gk, s_om, s_ok,
                 ignore_index, eps_hi, eps_lo, n_wpart,
                 PROB: tl.constexpr, HAS_W: tl.constexpr, SMOOTH: tl.constexpr, GRAD: tl.constexpr,
                 RED: tl.constexpr, SAVE_LSE: tl.constexpr, ACC: tl.constexpr, SINGLE: tl.constexpr,
                 COLS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr = 1,
                 WP2: tl.constexpr = 1):
    """The loss (and with GRAD the gradient) of BLOCK_M rows of C logits.

    ``t_ptr``: class indices (int64 or uint8; PROB=False), or ``q_ptr``: class probabilities in the logits' view
    (PROB). ``w_ptr``: per-class weights (HAS_W, contiguous). RED (torch's enum): 0 ('none') stores each row's
    loss at ``out_ptr`` (the target's layout); 1 (mean) and 2 (sum) store this program's sum of row losses at
    ``out_ptr + pid`` for :func:`_merge_kernel`. The gradient is scaled for the reduction (mean: 1 / its
    denominator, read on the device). SAVE_LSE: each row's (max, log of the sum of exp(x - max)) at ``lse_ptr``
    (the target's or the weight's gradient). SINGLE: a row in one BLOCK_N tile; else loops over BLOCK_N chunks, a
    (max, sum of exp) pair per GROUP lanes. ``wsum_ptr``: the sum of the class weights (SMOOTH with HAS_W and
    class indices: from :func:`_targets_kernel`).
    """
    m, k, row_ok = _rows(R, K, BLOCK_M, COLS)
    x_row = x_ptr + m * s_xm + k * s_xk
    q_row = q_ptr + m * s_qm + k * s_qk
    g_row = g_ptr + m * s_gm + k * s_gk
    one_m, ls_c, scale = _constants(eps_hi, eps_lo, wpart_ptr, n_wpart, R, C, PROB, SMOOTH, GRAD, RED, ACC, WP2)
    t, use, bad, w_t, x_t = _target(t_ptr + m * s_tm + k * s_tk, x_row, w_ptr, row_ok, s_xn, C, ignore_index, PROB,
                                    HAS_W, ACC)
    w_all = _weight_total(wsum_ptr, C, PROB, HAS_W, SMOOTH, ACC)
    acc = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    if SINGLE:
        cols, cmask, mask = _chunk_cols(0, C, row_ok, True, BLOCK_N)
        x = tl.load(x_row[:, None] + cols[None, :] * s_xn, mask=mask, other=-INF).to(ACC)
        mx = tl.reduce(x, 1, max_fn)
        # (masked lanes add exp(-inf - max) = 0; a row whose max is not finite is NaN throughout, as torch's)
        e = tl.exp(x - mx[:, None])
        ssum = tl.sum(e, 1)
        ls = tl.log(ssum)
        w = 1.0
        if HAS_W:
            w = tl.load(w_ptr + cols, mask=cmask, other=0).to(ACC)[None, :]
        wq = 0.0
        bq = 0.0
        if PROB:
            wq = _weighted_q(q_row, w_ptr, cols, cmask, mask, s_qn, one_m, ls_c, HAS_W, SMOOTH, ACC)
            bq = tl.sum(wq, 1)
        a, b, c = _coefficients(use, bad, w_t, w_all, bq, scale, one_m, ls_c, PROB, SMOOTH)
        if GRAD or SMOOTH or PROB:
            acc = _emit(x, e * (1.0 / ssum)[:, None], wq, w, mask, g_row[:, None] + cols[None, :] * s_gn, 0, mx, ls,
                        t, a, b, c, acc, PROB, SMOOTH, GRAD, True, BLOCK_N)
        terms = tl.sum(acc, 1)
    else:
        G: tl.constexpr = BLOCK_N // GROUP
        m_acc = tl.full([BLOCK_M, G], -INF, ACC)
        s_acc = tl.zeros([BLOCK_M, G], ACC)
        bq = tl.zeros([BLOCK_M, BLOCK_N], ACC)
        v_acc = tl.zeros([BLOCK_M, G], ACC)
        a_acc = tl.zeros([BLOCK_M, G], ACC)
        SHIFT: tl.constexpr = (SMOOTH or PROB) and not GRAD  # the loss alone: one sweep (see _stats_chunk)
        EV1: tl.constexpr = "evict_last" if GRAD else "evict_first"
        n_full = C // BLOCK_N
        for i in range(0, n_full):
            m_acc, s_acc, bq, v_acc, a_acc = _stats_chunk(
                x_row, q_row, w_ptr, i * BLOCK_N, C, row_ok, s_xn, s_qn, m_acc, s_acc, bq, v_acc, a_acc, one_m, ls_c,
                False, PROB, GRAD, SHIFT, HAS_W, SMOOTH, ACC, BLOCK_N, GROUP, EV1)
        tail = n_full * BLOCK_N < C
        if tail:
            m_acc, s_acc, bq, v_acc, a_acc = _stats_chunk(
                x_row, q_row, w_ptr, n_full * BLOCK_N, C, row_ok, s_xn, s_qn, m_acc, s_acc, bq, v_acc, a_acc, one_m,
                ls_c, True, PROB, GRAD, SHIFT, HAS_W, SMOOTH, ACC, BLOCK_N, GROUP, EV1)
        mx, ssum = tl.reduce((m_acc, s_acc), 1, _online_fn)
        ls = tl.log(ssum)
        a, b, c = _coefficients(use, bad, w_t, w_all, tl.sum(bq, 1), scale, one_m, ls_c, PROB, SMOOTH)
        if GRAD:
            # the second sweep from the row's end back: the chunks the first sweep read last are likeliest in L2
            if tail:
                acc = _emit_chunk(x_row, q_row, g_row, w_ptr, n_full * BLOCK_N, C, row_ok, s_xn, s_qn, s_gn, mx,
                                  ls, t, a, b, c, acc, one_m, ls_c, True, PROB, HAS_W, SMOOTH, GRAD, ACC, BLOCK_N)
            for i in range(0, n_full):
                acc = _emit_chunk(x_row, q_row, g_row, w_ptr, (n_full - 1 - i) * BLOCK_N, C, row_ok, s_xn, s_qn,
                                  s_gn, mx, ls, t, a, b, c, acc, one_m, ls_c, False, PROB, HAS_W, SMOOTH, GRAD, ACC,
                                  BLOCK_N)
            terms = tl.sum(acc, 1)
        else:
            terms = _shifted_total(m_acc, v_acc, a_acc, mx, ls)
    loss = _row_loss(terms, mx, ls, x_t, w_t, use, bad, one_m, ls_c, PROB, SMOOTH)
    if SAVE_LSE:  # (max, log_sum) per row
        tl.store(lse_ptr + (m * K + k) * 2, mx, mask=row_ok)
        tl.store(lse_ptr + (m * K + k) * 2 + 1, ls, mask=row_ok)
    if RED == 0:
        tl.store(out_ptr + m * s_om + k * s_ok, loss, mask=row_ok)
    else:
        tl.store(out_ptr + tl.program_id(0), tl.sum(tl.where(row_ok, loss, 0.0), 0))


@triton.jit
def _targets_body(t_ptr, w_ptr, wpart_ptr, wsum_ptr, R, K, s_tm, s_tk, C, ignore_index, per_program,
                  HAS_W: tl.constexpr, CHECK: tl.constexpr, PARTS: tl.constexpr, WSUM: tl.constexpr,
                  ACC: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lo = pid.to(tl.int64) * per_program
    hi = tl.minimum(R, lo + per_program)
    wacc = tl.zeros([BLOCK], ACC)
    count = tl.zeros([BLOCK], tl.int64)
    for r0 in range(lo, hi, BLOCK):
        rows = r0 + tl.arange(0, BLOCK)
        ok = rows < hi
        t = tl.load(t_ptr + (rows // K) * s_tm + (rows % K) * s_tk, mask=ok, other=0).to(tl.int64)
        valid = ok & (t != ignore_index)
        in_range = (t >= 0) & (t < C)
        if CHECK:
            tl.device_assert(~valid | in_range, "tritred.cross_entropy(): Target out of bounds (0 <= target < C "
                                                "or target == ignore_index)")
        use = valid & in_range
        if PARTS:
            if HAS_W:
                wacc += tl.load(w_ptr + tl.where(use, t, 0), mask=use, other=0).to(ACC)
            else:
                count += use.to(tl.int64)
    if PARTS:
        if HAS_W:
            tl.store(wpart_ptr + pid, tl.sum(wacc, 0))
        else:
            tl.store(wpart_ptr + pid, tl.sum(count, 0).to(ACC))
    if WSUM:  # noqa: SIM102 (a constexpr branch around a runtime one)
        if pid == 0:
            wall = tl.zeros([BLOCK], ACC)
            for c0 in range(0, C, BLOCK):
                cols = c0 + tl.arange(0, BLOCK)
                wall += tl.load(w_ptr + cols, mask=cols < C, other=0).to(ACC)
            tl.store(wsum_ptr, tl.sum(wall, 0))


@triton.jit
def _targets_kernel(t_ptr, w_ptr, wpart_ptr, wsum_ptr, R, K, s_tm, s_tk, C, ignore_index, per_program,
                    HAS_W: tl.constexpr, CHECK: tl.constexpr, PARTS: tl.constexpr, WSUM: tl.constexpr,
                    ACC: tl.constexpr, BLOCK: tl.constexpr):
    """Class-index targets, before ``_xent_kernel``: program p takes rows [p * per_program, ...) and stores
    (PARTS) the sum of their targets' weights (1 without weights), ignored rows left out, at ``wpart_ptr + p``;
    program 0 stores (WSUM) the sum of all class weights at ``wsum_ptr`` (label smoothing's normalizer).
    Integer counts stay int64 until the end (exact past 2^24 rows)."""
    _targets_body(t_ptr, w_ptr, wpart_ptr, wsum_ptr, R, K, s_tm, s_tk, C, ignore_index, per_program, HAS_W,
                  CHECK, PARTS, WSUM, ACC, BLOCK)


@triton.jit(debug=True)
def _targets_check_kernel(t_ptr, w_ptr, wpart_ptr, wsum_ptr, R, K, s_tm, s_tk, C, ignore_index, per_program,
                          HAS_W: tl.constexpr, CHECK: tl.constexpr, PARTS: tl.constexpr, WSUM: tl.constexpr,
                          ACC: tl.constexpr, BLOCK: tl.constexpr):
    """:func:`_targets_kernel` compiled with device-side asserts (CUDA): a target out of range stops the launch
    with a message naming the op, as torch's CUDA loss kernels assert (no host synchronization)."""
    _targets_body(t_ptr, w_ptr, wpart_ptr, wsum_ptr, R, K, s_tm, s_tk, C, ignore_index, per_program, HAS_W,
                  CHECK, PARTS, WSUM, ACC, BLOCK)


@triton.jit
def _merge_kernel(part_ptr, n_parts, wpart_ptr, n_wpart, out_ptr, R, MEAN: tl.constexpr, PROB: tl.constexpr,
                  ACC: tl.constexpr, BLOCK: tl.constexpr, WP2: tl.constexpr):
    """One program: the sum of ``n_parts`` per-program loss partials, in one fixed order (lanes, then a tree),
    divided by the mean's denominator (MEAN), stored in the output's dtype. A zero denominator of class-index
    targets (every row ignored, or only zero-weight classes) gives NaN, as torch's mean: the weighted nll's 0 / 0
    plus, with label smoothing, its term's x / 0 (NaN + inf), where this sum's x / 0 would give inf."""
    acc = tl.zeros([BLOCK], ACC)
    for i0 in range(0, n_parts, BLOCK):
        i = i0 + tl.arange(0, BLOCK)
        acc += tl.load(part_ptr + i, mask=i < n_parts, other=0)
    total = tl.sum(acc, 0)
    if MEAN:
        d = _denominator(wpart_ptr, n_wpart, R, PROB, ACC, WP2)
        total = div_exact(total, d, ACC)
        if not PROB:
            total = tl.where(d == 0, float("nan"), total)
    tl.store(out_ptr, total)
