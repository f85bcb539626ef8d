"""The backward passes of softmax, log_softmax (Triton kernels and their host path) and logsumexp (torch ops).

torch's formulas (``derivatives.yaml``: ``_softmax_backward_data``, ``_log_softmax_backward_data``,
``logsumexp_backward``), from the saved output ``y`` and the incoming gradient ``dy``, along the forward's dim:

- softmax:      ``dx = y * (dy - sum(dy * y))``
- log_softmax:  ``dx = dy - exp(y) * sum(dy)``
- logsumexp:    ``dx = dy * exp(x - lse)`` (``dy`` and ``lse`` unsqueezed at the reduced dims without keepdim)

The row's sum is itself a reduction: ``y`` and ``dy`` are read through the canonical view of (y, dy, dx) with
their own strides (any dim, a transposed or expanded ``dy``), one row per program (``_bwd_rows_kernel``, the
reduced axis unit-stride or no kept axis inside it) or BLOCK_K adjacent columns per program (``_bwd_cols_kernel``).
A row that fits registers is read once and written once (``single_pass``: 3 x numel x itemsize bytes); a longer
one takes two sweeps (``multi_pass``): the row's sum (softmax reads ``y`` and ``dy``, log_softmax ``dy`` only),
then ``dx`` from the row's end back, whose reads hit L2 while the rows in flight fit it. Sums in fp32 for
fp16/bf16/fp32 (fp64 for fp64), in one fixed order per row (deterministic: no atomics), int64 offsets.

dtypes, as torch: ``dy`` has the output's dtype; ``dx`` has the forward input's (``softmax(x, dim, dtype=...)``
is ``softmax(x.to(dtype))``, whose gradient is rounded to ``dtype`` and then to ``x.dtype``: the kernels round
the same two times, in registers, and write ``x.dtype`` once).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from tritred_core import LaunchConfig, ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, pre_cast, tl_dtype
from ...kernels.rows import col_block, restate_multiple, row_block
from ...runtime import Recorder, replay_plan
from ..reduce.backward import restore_dims


@triton.jit
def _row_term(y, g, MODE: tl.constexpr):
    """The summand of the row's sum: ``dy * y`` (softmax), ``dy`` (log_softmax)."""
    if MODE == 0:
        t = y * g
    else:
        t = g
    return t


@triton.jit
def _grad(y, g, s, CAST: tl.constexpr, MID: tl.constexpr, OUT: tl.constexpr, MODE: tl.constexpr):
    """dx from y, dy and the row's sum ``s`` (broadcast), rounded to the output's dtype (CAST), then, through
    MID (fp32 where torch converts through float), to the forward input's (OUT): torch's two roundings."""
    if MODE == 0:
        dx = y * (g - s)
    else:
        dx = g - tl.exp(y) * s
    return dx.to(CAST).to(MID).to(OUT)


@triton.jit
def _rows_chunk_sum(y_row, g_row, cols, N, row_ok, s_yn, s_gn, MODE: tl.constexpr, ACC: tl.constexpr,
                    INNER: tl.constexpr):
    """The row sum's terms of tile columns ``cols`` (0 outside a row). INNER: every lane lies inside each row
    (only rows past the end are masked). Evict-last: the second sweep reads the same lines again."""
    if INNER:
        mask = row_ok[:, None] & (cols >= 0)[None, :]
    else:
        mask = row_ok[:, None] & (cols < N)[None, :]
    g = tl.load(g_row[:, None] + cols[None, :] * s_gn, mask=mask, other=0, eviction_policy="evict_last").to(ACC)
    y = g
    if MODE == 0:
        y = tl.load(y_row[:, None] + cols[None, :] * s_yn, mask=mask, other=0, eviction_policy="evict_last").to(ACC)
    return _row_term(y, g, MODE)


@triton.jit
def _rows_chunk_grad(y_row, g_row, x_row, cols, N, row_ok, s_yn, s_gn, s_xn, s, MODE: tl.constexpr,
                     ACC: tl.constexpr, CAST: tl.constexpr, MID: tl.constexpr, OUT: tl.constexpr,
                     INNER: tl.constexpr):
    """The second sweep's dx at tile columns ``cols``, given each row's sum ``s``: read and written once more
    (evict-first)."""
    if INNER:
        mask = row_ok[:, None] & (cols >= 0)[None, :]
    else:
        mask = row_ok[:, None] & (cols < N)[None, :]
    y = tl.load(y_row[:, None] + cols[None, :] * s_yn, mask=mask, other=0, eviction_policy="evict_first").to(ACC)
    g = tl.load(g_row[:, None] + cols[None, :] * s_gn, mask=mask, other=0, eviction_policy="evict_first").to(ACC)
    tl.store(x_row[:, None] + cols[None, :] * s_xn, _grad(y, g, s[:, None], CAST, MID, OUT, MODE), mask=mask,
             eviction_policy="evict_first")


@triton.jit
def _bwd_rows_block(y_ptr, g_ptr, x_ptr, blk, R, N, K, s_ym, s_yn, s_yk, s_gm, s_gn, s_gk, s_xm, s_xn, s_xk,
                    MODE: tl.constexpr, ACC: tl.constexpr, CAST: tl.constexpr, MID: tl.constexpr,
                    OUT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    GROUP: tl.constexpr):
    rows, row_ok, m_idx, k_idx = row_block(blk, R, K, BLOCK_M)
    y_row = y_ptr + m_idx * s_ym + k_idx * s_yk
    g_row = g_ptr + m_idx * s_gm + k_idx * s_gk
    x_row = x_ptr + m_idx * s_xm + k_idx * s_xk
    if SINGLE:
        # The row in registers: y and dy read once, dx written once. Masked lanes load 0 (no term in the sum).
        cols = tl.arange(0, BLOCK_N).to(tl.int64)
        mask = row_ok[:, None] & (cols < N)[None, :]
        y = tl.load(y_row[:, None] + cols[None, :] * s_yn, mask=mask, other=0).to(ACC)
        g = tl.load(g_row[:, None] + cols[None, :] * s_gn, mask=mask, other=0).to(ACC)
        s = tl.sum(_row_term(y, g, MODE), 1)
        tl.store(x_row[:, None] + cols[None, :] * s_xn, _grad(y, g, s[:, None], CAST, MID, OUT, MODE), mask=mask)
    else:
        # Two sweeps over BLOCK_N-wide chunks: per-lane partial sums (no cross-warp reduction inside the loop),
        # reduced once per row; then dx from the row's end back (the chunks read last are the likeliest in L2).
        # The chunks inside every row (all but a partial last one) take no element mask.
        # Each thread first sums the GROUP elements of its own 16-byte vector (one partial per vector, not per
        # element: fewer registers across the loop).
        G: tl.constexpr = BLOCK_N // GROUP
        inner = N // BLOCK_N
        n_chunks = tl.cdiv(N, BLOCK_N)
        acc = tl.zeros([BLOCK_M, G], ACC)
        for k in range(0, inner):
            cols = k * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
            t = _rows_chunk_sum(y_row, g_row, cols, N, row_ok, s_yn, s_gn, MODE, ACC, True)
            acc += tl.sum(tl.reshape(t, [BLOCK_M, G, GROUP]), 2)
        for k in range(inner, n_chunks):
            cols = k * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
            t = _rows_chunk_sum(y_row, g_row, cols, N, row_ok, s_yn, s_gn, MODE, ACC, False)
            acc += tl.sum(tl.reshape(t, [BLOCK_M, G, GROUP]), 2)
        s = tl.sum(acc, 1)
        for i in range(0, n_chunks - inner):
            cols = (n_chunks - 1 - i) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
            _rows_chunk_grad(y_row, g_row, x_row, cols, N, row_ok, s_yn, s_gn, s_xn, s, MODE, ACC, CAST, MID, OUT,
                             False)
        for i in range(0, inner):
            cols = (inner - 1 - i) * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
            _rows_chunk_grad(y_row, g_row, x_row, cols, N, row_ok, s_yn, s_gn, s_xn, s, MODE, ACC, CAST, MID, OUT,
                             True)


@triton.jit
def _bwd_rows_kernel(y_ptr, g_ptr, x_ptr, R, N, K, s_ym, s_yn, s_yk, s_gm, s_gn, s_gk, s_xm, s_xn, s_xk,
                     MODE: tl.constexpr, ACC: tl.constexpr, CAST: tl.constexpr, MID: tl.constexpr,
                     OUT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     PERSIST: tl.constexpr = 0, DIV: tl.constexpr = 1, GROUP: tl.constexpr = 1):
    """Rows of the backward (``y``, ``dy`` -> ``dx``; MODE 0 softmax, 1 log_softmax): BLOCK_M rows per program,
    in one tile (SINGLE) or two sweeps over BLOCK_N-wide chunks. PERSIST > 0: a persistent grid looping over
    row blocks. DIV: N and the three row strides are multiples of DIV (every tensor's rows unit-stride: restated
    so that the compiler sees it, as the forward's ``runtime.row_hint``). GROUP (loops): lanes per partial sum of
    the first sweep (a power of two dividing BLOCK_N: the elements of one thread's 16-byte vector)."""
    N = restate_multiple(N, DIV)
    s_ym, s_gm, s_xm = restate_multiple(s_ym, DIV), restate_multiple(s_gm, DIV), restate_multiple(s_xm, DIV)
    if PERSIST > 0:
        for blk in tl.range(tl.program_id(0), tl.cdiv(R, BLOCK_M), PERSIST):
            _bwd_rows_block(y_ptr, g_ptr, x_ptr, blk, R, N, K, s_ym, s_yn, s_yk, s_gm, s_gn, s_gk, s_xm, s_xn, s_xk,
                            MODE, ACC, CAST, MID, OUT, SINGLE, BLOCK_M, BLOCK_N, GROUP)
    else:
        _bwd_rows_block(y_ptr, g_ptr, x_ptr, tl.program_id(0), R, N, K, s_ym, s_yn, s_yk, s_gm, s_gn, s_gk, s_xm,
                        s_xn, s_xk, MODE, ACC, CAST, MID, OUT, SINGLE, BLOCK_M, BLOCK_N, GROUP)


@triton.jit
def _bwd_cols_kernel(y_ptr, g_ptr, x_ptr, M, N, K, s_ym, s_yn, s_yk, s_gm, s_gn, s_gk, s_xm, s_xn, s_xk,
                     MODE: tl.constexpr, ACC: tl.constexpr, CAST: tl.constexpr, MID: tl.constexpr,
                     OUT: tl.constexpr, SINGLE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     DIV: tl.constexpr = 1):
    """Columns of the backward (a non-last dim): BLOCK_K adjacent k of one m over N, in one [BLOCK_N, BLOCK_K]
    tile (SINGLE) or two sweeps of such tiles (sums, then dx). DIV: K and every tensor's m and n strides are
    multiples of DIV (``runtime.col_hint``)."""
    K = restate_multiple(K, DIV)
    s_ym, s_yn = restate_multiple(s_ym, DIV), restate_multiple(s_yn, DIV)
    s_gm, s_gn = restate_multiple(s_gm, DIV), restate_multiple(s_gn, DIV)
    s_xm, s_xn = restate_multiple(s_xm, DIV), restate_multiple(s_xn, DIV)
    m_idx, ks, k_ok = col_block(K, BLOCK_K)
    y_col = y_ptr + m_idx * s_ym + ks * s_yk
    g_col = g_ptr + m_idx * s_gm + ks * s_gk
    x_col = x_ptr + m_idx * s_xm + ks * s_xk
    if SINGLE:
        ns = tl.arange(0, BLOCK_N).to(tl.int64)
        mask = (ns < N)[:, None] & k_ok[None, :]
        y = tl.load(y_col[None, :] + ns[:, None] * s_yn, mask=mask, other=0).to(ACC)
        g = tl.load(g_col[None, :] + ns[:, None] * s_gn, mask=mask, other=0).to(ACC)
        s = tl.sum(_row_term(y, g, MODE), 0)
        tl.store(x_col[None, :] + ns[:, None] * s_xn, _grad(y, g, s[None, :], CAST, MID, OUT, MODE), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_K], ACC)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = (ns < N)[:, None] & k_ok[None, :]
            g = tl.load(g_col[None, :] + ns[:, None] * s_gn, mask=mask, other=0,
                        eviction_policy="evict_last").to(ACC)
            y = g
            if MODE == 0:
                y = tl.load(y_col[None, :] + ns[:, None] * s_yn, mask=mask, other=0,
                            eviction_policy="evict_last").to(ACC)
            acc += _row_term(y, g, MODE)
        s = tl.sum(acc, 0)
        for n0 in range(0, N, BLOCK_N):
            ns = n0 + tl.arange(0, BLOCK_N).to(tl.int64)
            mask = (ns < N)[:, None] & k_ok[None, :]
            y = tl.load(y_col[None, :] + ns[:, None] * s_yn, mask=mask, other=0,
                        eviction_policy="evict_first").to(ACC)
            g = tl.load(g_col[None, :] + ns[:, None] * s_gn, mask=mask, other=0,
                        eviction_policy="evict_first").to(ACC)
            tl.store(x_col[None, :] + ns[:, None] * s_xn, _grad(y, g, s[None, :], CAST, MID, OUT, MODE), mask=mask,
                     eviction_policy="evict_first")


# -- host path ---------------------------------------------------------------------------------------------------

def _row_div(view: rt.View) -> int:
    """DIV of the backward row kernel: the largest power of two (2-8) dividing N and the row strides of y, dy
    and dx when all three have unit-stride rows; 1 otherwise (Triton sees multiples of 16 itself)."""
    if view.N <= 1 or any(s[1] != 1 for s in view.strides):
        return 1
    d = rt.pow2_divisor(view.N, *(s[0] for s in view.strides))
    return d if 1 < d < 16 else 1


def _check_config(name: str, cfg: LaunchConfig) -> None:
    """ValueError for what the backward kernels do not have: split rows or columns, tail tiles."""
    who = cfg.decided_by or "the launch-config hook"
    if cfg.strategy not in ("single_pass", "multi_pass"):
        raise ValueError(f"{name} backward: strategy {cfg.strategy!r} (config from {who}) has no backward kernel; "
                         "the backward kernels take 'single_pass' and 'multi_pass'")
    if cfg.BLOCK_TAIL:
        raise ValueError(f"{name} backward: BLOCK_TAIL={cfg.BLOCK_TAIL} (config from {who}) is not taken by the "
                         "backward kernels (a row is one tile or a loop of chunks)")


def _launch(rec: Recorder, mode: int, y: torch.Tensor, g: torch.Tensor, dx: torch.Tensor, view: rt.View,
            cfg: LaunchConfig) -> None:
    (sym, syn, syk), (sgm, sgn, sgk), (sxm, sxn, sxk) = view.strides
    single = cfg.strategy == "single_pass"
    common = dict(MODE=mode, ACC=tl_dtype(acc_dtype(y.dtype)), CAST=tl_dtype(y.dtype), MID=pre_cast(y.dtype, dx.dtype),
                  OUT=tl_dtype(dx.dtype), SINGLE=single, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if rt.rows_layout(view):
        rows = view.M * view.K
        programs, persist = rt.row_programs(cfg, rows)
        # Loops of 1024 threads: at most 32 registers each, so that two programs share an SM (65536 registers), as
        # the forward's loop. ptxas (sm_90a, Triton 3.9) fits the built-in loops in 32 with no spill (per-vector
        # partial sums; per-element ones took 38: one program per SM); the cap keeps it so for the other variants.
        cap = 32 if not single and cfg.num_warps == 32 and acc_dtype(y.dtype) == torch.float32 else None
        rec.launch(_bwd_rows_kernel, (programs,), y, g, dx, rows, view.N, view.K, sym, syn, syk, sgm, sgn, sgk,
                   sxm, sxn, sxk, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, PERSIST=persist, DIV=_row_div(view),
                   GROUP=1 if single else min(16 // y.element_size(), cfg.BLOCK_N), **common,
                   **({"maxnreg": cap} if cap else {}))
    else:
        rec.launch(_bwd_cols_kernel, (view.M * rt.cdiv(view.K, cfg.BLOCK_K),), y, g, dx, view.M, view.N, view.K,
                   sym, syn, syk, sgm, sgn, sgk, sxm, sxn, sxk, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K,
                   DIV=rt.col_hint(view), **common)


def check_backward(name: str, grad: object, output: object, dim: object, input_dtype: object) -> int:
    """The checks of softmax's and log_softmax's backward (torch's ``_softmax_backward_data`` arguments): tensors
    of one shape, device and floating dtype, an input dtype that is floating; returns the wrapped dim."""
    op = f"{name}_backward"
    grad = rt.check_tensor(op, "grad_output", grad)
    output = rt.check_tensor(op, "output", output)
    if grad.shape != output.shape:
        raise RuntimeError(f"{op}(): grad_output of shape {tuple(grad.shape)} and output of shape "
                           f"{tuple(output.shape)} differ")
    rt.check_same_device(op, output, grad_output=grad)
    rt.check_float(op, output, "output")
    if grad.dtype != output.dtype:
        raise RuntimeError(f"{op}(): expected grad_output of the output's dtype {output.dtype}, got {grad.dtype}")
    if not isinstance(input_dtype, torch.dtype) or input_dtype not in rt.FLOATS:
        raise RuntimeError(f"{op}(): input_dtype must be a floating dtype, got {input_dtype}")
    return rt.wrap_dim(op, dim, output.dim())  # type: ignore[arg-type]


def softmax_backward_call(spec: ReductionSpec, mode: int, grad: torch.Tensor, output: torch.Tensor, dim: int,
                          input_dtype: torch.dtype) -> torch.Tensor:
    """The gradient of softmax (``mode`` 0) or log_softmax (1) over ``dim`` with respect to its input, from the
    saved ``output`` and the incoming ``grad`` (of the output's shape and dtype, any strides); a contiguous
    tensor of ``input_dtype``. The launch decision is ``spec``'s with ``direction="backward"`` over the joint
    view of (output, grad, dx); replayed by later calls with the same key, as the forward."""
    name = f"{spec.name}_backward"
    saved, key = replay_plan(name, (dim, input_dtype), output, grad)
    if saved is not None:
        return saved[0]
    d = check_backward(spec.name, grad, output, dim, input_dtype)
    rt.check_runnable(name, output)
    rec = Recorder(output, grad)
    dx = rec.empty(output.shape, input_dtype, output.device)
    if output.numel() == 0:
        return dx
    dims = (d,) if output.dim() else ()
    y, g = output, grad
    view = rt.canonical_view(y.shape, [y.stride(), g.stride(), dx.stride()], dims, reorder_reduced=False)
    if view is None:  # (no strided view shared by the three: y and dy gathered, one copy each)
        y, g = y.contiguous(), g.contiguous()
        view = rt.canonical_view(y.shape, [y.stride(), g.stride(), dx.stride()], dims, reorder_reduced=False)
        assert view is not None
    cfg = rt.decide(spec, y, view, direction="backward")
    _check_config(spec.name, cfg)
    _launch(rec, mode, y, g, dx, view, cfg)
    rec.save(key, dx)
    return dx


def logsumexp_backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: Sequence[int],
                       keepdim: bool) -> torch.Tensor:
    """The gradient of logsumexp over ``dim`` with respect to ``input``: ``grad * exp(input - result)``, ``grad``
    and ``result`` unsqueezed at the reduced dims without ``keepdim`` (torch's ``logsumexp_backward``). Pointwise,
    in torch ops: fp32 for fp16/bf16 inputs (fp64 for fp64), rounded once to the input's dtype. ``dim`` as the
    forward's (``()``: every dim). A fresh tensor of the input's shape and dtype (never one of the arguments)."""
    dims = rt.wrap_dims("logsumexp_backward", list(dim), input.dim())
    grad, result = restore_dims(grad, dims, keepdim), restore_dims(result, dims, keepdim)
    acc = torch.float64 if input.dtype == torch.float64 else torch.float32
    # (out of place: under create_graph=True these ops are the graph a double backward differentiates; grad
    # first, as in torch's formula, and still broadcast, so that the product is laid out as torch's)
    dx = _to_keeping_broadcast(grad, acc) * (input.to(acc) - result.to(acc)).exp()
    return dx.to(input.dtype)


def _to_keeping_broadcast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype`` with its broadcast (stride-0) dims still broadcast: one slice along them converted, then
    expanded (a plain conversion, or the CPU's promotion inside a mixed-dtype product, materializes them
    contiguous, and a pointwise op's result then takes that layout instead of the other operand's)."""
    if t.dtype == dtype:
        return t
    one = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for st, n in zip(t.stride(), t.shape))
    return t[one].to(dtype).expand(t.shape)
