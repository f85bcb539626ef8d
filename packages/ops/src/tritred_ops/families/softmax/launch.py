"""The host path of softmax, log_softmax and logsumexp: checks, the view, the launch decision, launches.

Rows go to ``_rows_kernel`` (single pass, or the online loop) or, held by several programs at once, to
``_split_rows_kernel``; a non-last dim to ``_cols_kernel``, or, too few column blocks, to the split columns:
``_cols_part_kernel`` stores a (max, sum of exp) partial per slice, ``_cols_emit_kernel`` merges them and writes
its slice (past :data:`MERGE_INLINE` slices ``_cols_merge_kernel`` merges them once, in a launch between the two;
on sm_90+ both later launches are dependent launches, ``runtime.dependent_launch``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tritred_core import LaunchConfig, ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, pre_cast, tl_dtype
from ...kernels.rows import single_load_evict
from ...runtime import Recorder, replay_plan
from .kernels import (
    _cols_emit_kernel,
    _cols_kernel,
    _cols_merge_kernel,
    _cols_part_kernel,
    _rows_kernel,
    _split_rows_kernel,
)

#: Split columns of more slices than this get the merge launch (:func:`_cols_merge_kernel`); with fewer, each
#: writing program merges its columns' partials itself (one launch less).
MERGE_INLINE = 8


def _launch(rec: Recorder, mode: int, x: torch.Tensor, view: rt.View, y: torch.Tensor, cast: torch.dtype,
            cfg: LaunchConfig) -> None:
    (sxm, sxn, sxk), (sym, syn, syk) = view.strides
    single = cfg.strategy == "single_pass"
    # EXACT: float32 softmax's exp and 1 / s within ~2 ulp (kernels._exp; its error was 1.2-1.75x eager's).
    # bfloat16/float16 outputs round far above that error; log_softmax and logsumexp take s only through log(s).
    exact = mode == 0 and cast == torch.float32
    common = dict(MODE=mode, PRE=pre_cast(x.dtype, cast), CAST=tl_dtype(cast), ACC=tl_dtype(acc_dtype(cast)),
                  SINGLE=single, EXACT=exact, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if rt.rows_layout(view) and cfg.strategy in ("split", "split_rows") and mode != 2:
        # Rows held by cfg.split programs together, cfg.BLOCK_N elements each (logsumexp reads a row once in any
        # strategy: it never takes this one). Plain exp: EXACT spilled there (sm_90 stack 496 -> 784 bytes) and
        # cost 90 -> 78 % of copy bandwidth on 1024x131072 float32 (H100), for 1.40 -> 1.16x eager's error.
        common["EXACT"] = False
        rows = view.M * view.K
        block_n, split = rt.split_row_chunks(cfg, view.N)
        parts = rt.next_pow2(split)
        part_m = rec.empty((rows, parts), acc_dtype(cast), x.device)
        part_s = rec.empty((rows, parts), part_m.dtype, x.device)
        rt.launch_split_rows(rec, _split_rows_kernel, x, rows, split, cfg.num_programs, (x, y, part_m, part_s),
                            dict(R=rows, N=view.N, K=view.K, s_xm=sxm, s_xn=sxn, s_xk=sxk, s_ym=sym, s_yn=syn,
                                 s_yk=syk, SPLIT=split, SPLIT_P2=parts, BLOCK_N=block_n,
                                 **{k: v for k, v in common.items() if k != "SINGLE"}))
        return
    if rt.rows_layout(view) and not (mode == 2 and cfg.strategy == "split"):
        rows = view.M * view.K
        programs, persist = rt.row_programs(cfg, rows)
        align = rt.row_align(x, view, cfg, single)
        # Row loops of 1024 threads: at most 32 registers each, so that two programs share an SM (65536
        # registers). The fp32 log_softmax loop otherwise takes 46 (one program per SM: 55 % of copy bandwidth on
        # 1024x131072, against 69 % for softmax's 32-register loop); capped, ptxas (sm_90a, Triton 3.6) fits it
        # in 32 with no spill. The other modes and dtypes already use 32 or fewer.
        cap = 32 if not single and cfg.num_warps == 32 and acc_dtype(cast) == torch.float32 else None
        if exact and single and cfg.num_warps < 32 and not rt.interpreting():
            # libdevice's expf (kernels._exp): float32 single passes within 1 % of eager's error at the same speed on
            # an H100 (16384x4096 1.02 -> 1.00x eager's error, 262144x256 1.06 -> 1.00x, 99 % of copy both); in a
            # 32-warp tile (4096x32768: 64 registers a thread) it cost 99 -> 93 % and keeps the split exp2 form.
            # The interpreter has no libdevice (Triton 3.9 returns None): it keeps the split form, and the GPU suite
            # and the sm_90 compile check cover this branch.
            common["EXACT"] = 2
        rec.launch(_rows_kernel, (programs,), x, y, rows, view.N, view.K, sxm, sxn, sxk, sym, syn,
                   syk, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, PERSIST=persist, LOOP_STAGES=cfg.num_stages,
                   ALIGN=align, ALIGN_Y=rt.row_align_out(y, x, view, align),
                   EVICT=single_load_evict("softmax", cfg.num_warps), DIV=rt.row_hint(view, align),
                   GROUP=1 if single else min(16 // x.element_size(), cfg.BLOCK_N),
                   TAIL=rt.single_tail(cfg, view, single), **common,
                   **({"maxnreg": cap} if cap else {}))
    elif cfg.strategy == "split" and cfg.split > 1:
        # Columns split along N (few column blocks): a launch of partial (max, sum of exp) per slice, then one that
        # merges them (past MERGE_INLINE slices, a merge launch in between) and writes its slice: the input is
        # read twice (softmax's loop over a column reads it twice too), but by cfg.split times more programs.
        # logsumexp's few long rows take it too, a row as a column of K = 1 (``rules.few_rows_split``): read once.
        rt.no_tail(cfg, ("softmax", "log_softmax", "logsumexp")[mode])
        split, nps = rt.split_plan(cfg, view.N)
        k_blocks = rt.cdiv(view.K, cfg.BLOCK_K)
        part_m = rec.empty((view.M * view.K, split), acc_dtype(cast), x.device)
        part_s = rec.empty((view.M * view.K, split), part_m.dtype, x.device)
        consts = {k: v for k, v in common.items() if k not in ("SINGLE", "MODE")}
        rec.launch(_cols_part_kernel, (view.M * k_blocks, split), x, part_m, part_s, view.M, view.N, view.K, sxm,
                   sxn, sxk, nps, split, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, DIV=rt.col_hint(view),
                   **consts)
        merged = split > MERGE_INLINE
        if merged:
            # Many slices: each column's partials merged once, by a launch of their own, into their slot 0; the writing
            # programs then read one pair per column (logsumexp's too: its one program per column block would otherwise
            # hold a [split, BLOCK_K] tile of partials, too large for registers: 32768x512 fp32 logsumexp at 264 slices
            # lost 26.2 -> 12.9 %).
            block_m, block_s = rt.combine_blocks(view.M * view.K, split)
            rec.launch(_cols_merge_kernel, (rt.cdiv(view.M * view.K, block_m),), part_m, part_s, view.M * view.K,
                       split, BLOCK_M=block_m, BLOCK_S=block_s, EXACT=exact, num_warps=4,
                       **rt.dependent_launch(x.device))
        rec.launch(_cols_emit_kernel, (view.M * k_blocks, 1 if mode == 2 else split), x, y, part_m, part_s, view.M,
                   view.N, view.K, sxm, sxn, sxk, sym, syn, syk, nps, split, MODE=mode,
                   SPLIT_P2=1 if merged else rt.next_pow2(split), BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K,
                   DIV=rt.col_hint(view), **rt.dependent_launch(x.device), **consts)
    else:
        rt.no_tail(cfg, ("softmax", "log_softmax", "logsumexp")[mode])
        rec.launch(_cols_kernel, (view.M * rt.cdiv(view.K, cfg.BLOCK_K),), x, y, view.M, view.N, view.K, sxm, sxn,
                   sxk, sym, syn, syk, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, DIV=rt.col_hint(view), **common)


def softmax_checks(name: str, x: torch.Tensor, dim: int | None, dtype: torch.dtype | None) -> tuple[int, torch.dtype]:
    """The argument checks of softmax and log_softmax, torch's errors (the launcher's and the registered op's
    fake implementation's): (the wrapped dim, the output dtype)."""
    if dim is None:
        raise TypeError(f"{name}(): argument 'dim' must be int (implicit dim choice is deprecated in torch)")
    d = rt.wrap_dim(name, dim, x.dim())
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name}(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")
    cast = dtype if dtype is not None else x.dtype
    # (torch's kernels check the dtype only for a non-empty input: an empty one of any dtype gives an empty output)
    if x.numel() and (x.dtype not in rt.FLOATS + rt.INTEGERS or cast not in rt.FLOATS):
        raise NotImplementedError(f"tritred.{name}(): not implemented for dtype {cast} (floating dtypes only)")
    return d, cast


def softmax_call(spec: ReductionSpec, mode: int, x: torch.Tensor, dim: int | None,
                 dtype: torch.dtype | None) -> torch.Tensor:
    """The host path of softmax (``mode`` 0) and log_softmax (1) over ``dim``."""
    name = spec.name
    saved, key = replay_plan(name, (dim, dtype), x)
    if saved is not None:
        return saved[0]
    x = rt.check_tensor(name, "input", x)
    d, cast = softmax_checks(name, x, dim, dtype)
    rt.check_runnable(name, x)
    rec = Recorder(x)
    y = rec.empty(x.shape, cast, x.device)  # contiguous, as torch's (whatever the input's layout)
    if x.numel() == 0:
        return y
    dims = (d,) if x.dim() else ()
    x, y, view = rt.map_view(x, y, dims)
    cfg = rt.decide(spec, x, view)
    _launch(rec, mode, x, view, y, cast, cfg)
    rec.save(key, y)
    return y


def logsumexp_checks(input: torch.Tensor, dim: int | Sequence[int] | None,
                     keepdim: bool) -> tuple[tuple[int, ...], list[int], torch.dtype]:
    """The argument checks of logsumexp, torch's errors (the launcher's and the registered op's fake
    implementation's): (the reduced dims, sorted; the output's shape; its dtype)."""
    rt.check_supported("logsumexp", input, allow_integers=True)
    rt.check_keepdim("logsumexp", keepdim)
    if dim is None and not rt.torch_accepts("logsumexp(x, None)",
                                           lambda: torch.logsumexp(torch.empty(2, device="meta"), None)):  # type: ignore[arg-type]
        raise TypeError("logsumexp(): argument 'dim' must be tuple of ints, not NoneType")
    dims = rt.wrap_dims("logsumexp", dim, input.dim())
    out_dtype = input.dtype if input.dtype in rt.FLOATS else torch.get_default_dtype()
    return dims, rt.reduced_shape(input.shape, dims, keepdim), out_dtype


def logsumexp_call(spec: ReductionSpec, input: torch.Tensor, dim: int | Sequence[int], keepdim: bool) -> torch.Tensor:
    """The host path of logsumexp over ``dim`` (the reduced view of the reductions, one value per row)."""
    saved, key = replay_plan("logsumexp", (dim, keepdim), input)
    if saved is not None:
        return saved[0]
    input = rt.check_tensor("logsumexp", "input", input)
    dims, shape, out_dtype = logsumexp_checks(input, dim, keepdim)
    rt.check_runnable("logsumexp", input)
    rec = Recorder(input)
    out = rec.empty(shape, out_dtype, input.device)
    if out.numel() == 0:
        return out
    if any(input.shape[d] == 0 for d in dims):
        return out.fill_(float("-inf"))
    src, view, layout = rt.gathering("logsumexp", input, dims, out, keepdim)
    # The output has no reduced axis: its n-stride is never used.
    cfg = rt.decide(spec, input, view, layout)
    _launch(rec, 2, src, view, out, out_dtype if input.dtype not in rt.FLOATS else input.dtype, cfg)
    rec.save(key, out)
    return out
