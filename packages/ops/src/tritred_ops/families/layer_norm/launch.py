"""The host path of layer_norm: argument checks, the joint view of input and output, the launch decision, launches.

Weight and bias are read flat with unit stride (a strided one is copied: its own size, not the input's); odd-width
rows whose tiles are shifted to 16-byte boundaries read shifted copies of them (``_shift_affine_kernel``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tritred_core import ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, f32_split, tl_dtype
from ...kernels.rows import single_load_evict
from ...runtime import Recorder, replay_plan
from .kernels import _layer_norm_kernel, _shift_affine_kernel, _split_rows_kernel


def _register_cap(single: bool, num_warps: int) -> dict[str, int]:
    """``maxnreg`` for single-pass programs of 16 warps: 64 registers per thread, so that two programs share an SM
    (65536 registers); uncapped, ptxas (sm_90a, Triton 3.6) takes 104 for fp32 16384-wide rows, one program per
    SM, whose load, statistics and store then run one after the other (ptxas: no spill at 64)."""
    return {"maxnreg": 64} if single and num_warps == 16 else {}


def _preload_affine(dtype: torch.dtype, single: bool, align: int, num_warps: int) -> bool:
    """PRELOAD_WB: the single pass loads weight and bias beside the row, before the statistics, so that their
    latency hides under the reductions' instead of following them. float32 rows on 1-8 warps only (H200, rotating
    inputs: 16384x4096 91% -> 98%, 8192x8192 93% -> 97%, 65536x1024 96% -> 96%); bfloat16 rows lost (16384x4096
    90% -> 73%), and so did 16-32 warps, whose registers spill."""
    return single and align == 0 and dtype == torch.float32 and num_warps <= 8


#: Row loops whose first sweep is unrolled (UNROLL chunks) unroll the normalizing sweep too when the row is at most
#: UNROLL_SECOND chunks, so that all of its loads (x from L2, weight and bias) are issued before the first chunk is
#: normalized, as in torch.compile's loops of constant width (both sweeps of layer_norm 8192x12288 bf16 unrolled).
#: H200, rolled -> unrolled second sweep, % of copy bandwidth: bf16 12288 80.2 -> 83.1, 10240 78.3 -> 83.1, 6144
#: 74.6 -> 78.6, 5120 78.3 -> 84.2, 2560 73.7 -> 78.5, fp16 5120 84.3 -> 87.4; level: 24576 (6 chunks of 4096 on 16
#: warps) 78.9 -> 79.3, fp16 12288 85.1 -> 84.3. Rows of 7-8 chunks: 4096-wide chunks on 16 warps lost (28672
#: 73.0 -> 70.5, 32768 75.6 -> 74.4), narrower ones moved within a point (14336 82.3 -> 81.9, 7168 77.0 -> 77.8):
#: the bound keeps them rolled. Read when a launch is decided.
UNROLL_SECOND = 6


def shape_type(op: str, normalized_shape: object) -> None:
    """TypeError, as torch's argument parser, for a tensor ``normalized_shape`` (its elements would read as ints)."""
    if isinstance(normalized_shape, torch.Tensor):
        raise TypeError(f"{op}(): argument 'normalized_shape' (position 2) must be tuple of ints, not Tensor")


def check_args(op: str, input: torch.Tensor, normalized_shape: Sequence[int] | int, weight: torch.Tensor | None,
               bias: torch.Tensor | None, weight_dtype: bool = True) -> tuple[int, ...]:
    """torch's argument checks of layer_norm (shapes, dtypes, devices; ``input`` already a tensor): the normalized
    shape as a tuple. Shared with the registered op's fake implementation (symbolic sizes pass as they are).
    ``weight_dtype``: weight and bias must have the input's dtype (torch's CUDA kernel; rms_norm takes others)."""
    shape_type(op, normalized_shape)
    if isinstance(normalized_shape, (int, torch.SymInt)):
        normalized_shape = (normalized_shape,)
    shape = tuple(rt.int_list(op, "normalized_shape", 2, normalized_shape))
    D = len(shape)
    if D == 0 or input.dim() < D or tuple(input.shape[input.dim() - D:]) != shape:
        raise RuntimeError(f"{op}(): Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        rt.check_tensor(op, name, t)
        if tuple(t.shape) != shape:
            raise RuntimeError(f"{op}(): Expected {name} to be of same shape as normalized_shape, but got {name} of "
                               f"shape {list(t.shape)} and normalized_shape = {list(shape)}")
        rt.check_float(op, t, what=name)
    rt.check_float(op, input)
    for name, t in (("weight", weight), ("bias", bias)):  # as torch's CUDA kernel (its CPU one is laxer)
        if weight_dtype and t is not None and t.dtype != input.dtype:
            raise RuntimeError(f"{op}(): expected scalar type {input.dtype} but found {t.dtype} ({name}): weight and "
                               f"bias must have the input's dtype")
    rt.check_same_device(op, input, weight=weight, bias=bias)
    return shape  # type: ignore[return-value]


def layer_norm_call(spec: ReductionSpec, input: torch.Tensor, normalized_shape: Sequence[int],
                    weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, store_stats: bool,
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The host path of layer_norm: (output, mean, rstd; None without ``store_stats``). mean and rstd: float32
    (float64 for float64 inputs), shaped like the leading dims."""
    op = "layer_norm"
    saved, key = replay_plan(op, (normalized_shape, eps, store_stats), input, weight, bias)
    if saved is not None:
        outs = saved
        return (outs[0], outs[1], outs[2]) if store_stats else (outs[0], None, None)
    input = rt.check_tensor(op, "input", input)
    normalized_shape = check_args(op, input, normalized_shape, weight, bias)
    eps = rt.float_arg(op, "eps", 5, eps)
    D = len(normalized_shape)
    rt.check_runnable(op, input)
    rec = Recorder(input, weight, bias)
    y = rec.empty(input.shape, input.dtype, input.device)  # contiguous, as torch's (whatever the input's layout)
    lead = input.shape[: input.dim() - D]
    rows = rt.prod(lead)
    stats = acc_dtype(input.dtype)  # (float32; float64 for float64 inputs, as torch.native_layer_norm's)
    mean = rec.empty(lead, stats, input.device) if store_stats else None
    rstd = rec.empty(lead, stats, input.device) if store_stats else None
    if input.numel() == 0:
        if mean is not None and rstd is not None:  # rows of no elements (torch: mean 0, rstd 1 / sqrt(0 / 0) = NaN)
            mean.zero_()
            rstd.fill_(float("nan"))
        return y, mean, rstd
    dims = tuple(range(input.dim() - D, input.dim()))
    x, y, view = rt.map_view(input, y, dims)
    # Weights are indexed by the flat position in normalized_shape with unit stride: a strided or expanded one
    # is copied (N elements, not the input); a contiguous one is passed as is (the kernel reads it flat).
    w, b = rt.unit_stride(weight), rt.unit_stride(bias)
    cfg = rt.decide(spec, x, view)
    (sxm, sxn, sxk), (sym, syn, syk) = view.strides
    R = view.M * view.K
    assert R == rows
    dummy = y
    eps_hi, eps_lo = f32_split(float(eps))
    if cfg.strategy == "split_rows":
        # Rows held by cfg.split programs together, cfg.BLOCK_N elements each (one read; see the kernel).
        block_n, split = rt.split_row_chunks(cfg, view.N)
        parts = rt.next_pow2(split)
        rt.launch_split_rows(
            rec, _split_rows_kernel, x, R, split, cfg.num_programs,
            (x, w if w is not None else dummy, b if b is not None else dummy, y,
             mean if mean is not None else dummy, rstd if rstd is not None else dummy,
             rec.empty((R * 3 * parts,), acc_dtype(x.dtype), x.device)),
            dict(R=R, N=view.N, K=view.K, s_xm=sxm, s_xn=sxn, s_xk=sxk, s_ym=sym, s_yn=syn, s_yk=syk,
                 eps=eps_hi, eps_lo=eps_lo, HAS_W=w is not None,
                 HAS_B=b is not None, STORE_STATS=store_stats, ACC=tl_dtype(acc_dtype(x.dtype)), SPLIT=split,
                 SPLIT_P2=parts, BLOCK_N=block_n, num_warps=cfg.num_warps))
        if store_stats:
            rec.save(key, y, mean, rstd)  # type: ignore[arg-type]
        else:
            rec.save(key, y)
        return y, mean, rstd
    programs, persist = rt.row_programs(cfg, R)
    single = cfg.strategy == "single_pass"
    cols = rt.row_cols(cfg, x, op, True, single, 1)
    align = rt.row_align(x, view, cfg, single, True)
    tail = rt.single_tail(cfg, view, single)
    s_wl = 0
    if align and (w is not None or b is not None):
        # shifted tiles read the shifted copies of weight and bias (see _shift_affine_kernel)
        s_wl = rt.cdiv(view.N + 2 * align, 16) * 16
        w_sh = rec.empty((align, s_wl), x.dtype, x.device) if w is not None else None
        b_sh = rec.empty((align, s_wl), x.dtype, x.device) if b is not None else None
        rec.launch(_shift_affine_kernel, (rt.cdiv(s_wl, 1024), align), w if w is not None else dummy,
                   b if b is not None else dummy, w_sh if w_sh is not None else dummy,
                   b_sh if b_sh is not None else dummy, view.N, s_wl, HAS_W=w is not None, HAS_B=b is not None,
                   BLOCK=1024, num_warps=4)
        w, b = w_sh, b_sh
    unroll = 0 if single or align else rt.unrolled_chunks(view.N, cfg)
    rec.launch(
        _layer_norm_kernel, (programs,), x, w if w is not None else dummy, b if b is not None else dummy,
        y, mean if mean is not None else dummy, rstd if rstd is not None else dummy, R, view.N, view.K, sxm, sxn, sxk,
        sym, syn, syk, eps_hi, eps_lo, s_wl, HAS_W=w is not None, HAS_B=b is not None, STORE_STATS=store_stats,
        ACC=tl_dtype(acc_dtype(x.dtype)), SINGLE=single, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
        PERSIST=persist, LOOP_STAGES=cfg.num_stages, ALIGN=align, ALIGN_Y=rt.row_align_out(y, x, view, align),
        EVEN=rt.even_rows(view, cfg, single, align), EVICT=single_load_evict("layer_norm", cfg.num_warps),
        PRELOAD_WB=_preload_affine(x.dtype, single, align, cfg.num_warps) and not tail, DIV=rt.row_hint(view, align),
        TAIL=tail, COLS=cols,
        UNROLL=unroll, UNROLL_OUT=0 < unroll <= UNROLL_SECOND, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages, **_register_cap(single, cfg.num_warps))
    if store_stats:
        rec.save(key, y, mean, rstd)  # type: ignore[arg-type]
    else:
        rec.save(key, y)
    return y, mean, rstd
