"""The host path of batch_norm: argument checks, the (batch, spatial, channel) view, the launch decision, launches.

The input ``[B, C, *spatial]`` is viewed as (B, C, S) with its own strides (NCHW, channels-last and sliced
inputs alike; spatial dims that do not merge are gathered, logged). When the batch stride equals S times the
spatial stride (channels-last), batch and spatial merge into one axis.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable
from typing import Literal

import torch
from torch._prims_common import suggest_memory_format
from tritred_core import LaunchConfig, Problem, ReductionSpec

from ... import runtime as rt
from ...kernels.dtypes import acc_dtype, f32_split, tl_dtype
from ...runtime import Recorder, replay_plan
from .kernels import _apply_kernel, _stats_kernel
from .rules import finish_block, merge_inline
from .sync_kernels import _moments_kernel

log = logging.getLogger("tritred")


def _spatial_order(t: torch.Tensor) -> list[int]:
    """``t``'s spatial dims (2 onwards) of more than one element, in the order of their strides, largest first: the
    order in which :func:`_bsc` merges them when they are laid out as one axis (channels-last: memory order)."""
    return sorted((d for d in range(2, t.dim()) if t.shape[d] != 1), key=lambda d: -t.stride()[d])


def _bsc(t: torch.Tensor, order: list[int]) -> tuple[int, int, int, int] | None:
    """(S, stride_b, stride_s, stride_c) of ``t`` viewed as (B, C, S) with its spatial dims merged in ``order``
    (any order: the statistics ignore it and the output uses the same one), or None if they don't merge."""
    S = rt.prod([t.shape[d] for d in order])
    s_s = t.stride(order[-1]) if order else 1
    for a, b in zip(order, order[1:]):
        if t.stride(a) != t.stride(b) * t.shape[b]:
            return None
    return S, t.stride(0), s_s, t.stride(1)


def _out_format(x: torch.Tensor) -> torch.memory_format:
    """The output's memory format, as torch's batch_norm picks it: contiguous for a contiguous input (also when
    size-1 dims make it channels-last too), else the format the input's strides suggest (channels-last for a
    sliced channels-last input, contiguous for a permuted one)."""
    if x.is_contiguous():
        return torch.contiguous_format
    return suggest_memory_format(x)


def _cudnn_would_run(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
                     eps: float) -> bool:
    """Whether torch's batch_norm takes cuDNN for this CUDA call (aten's ``_select_batch_norm_backend``): at least
    3 dims, no bfloat16, a float32 weight for a float16 input, weight and bias, both running statistics (or
    neither, in training), a batch of at most 880801 (65535 in eval), fewer than 2^31 - 1 elements, eps at least
    cuDNN's minimum (0 since cuDNN 7.5: a NaN eps fails it), cuDNN enabled."""
    if weight is None or bias is None or input.dim() < 3 or torch.version.hip is not None or not eps >= 0.0:
        return False
    if torch.bfloat16 in (input.dtype, weight.dtype):
        return False
    if input.dtype == torch.float16 and weight.dtype != torch.float32:
        return False
    has_running = running_mean is not None and running_var is not None
    if not (has_running or (running_mean is None and running_var is None and training)):
        return False
    return (input.shape[0] <= (880801 if training else 65535) and input.numel() < 2**31 - 1
            and bool(torch.backends.cudnn.enabled) and torch.backends.cudnn.is_available())


def out_empty(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool, eps: float,
              native: bool = False) -> torch.Tensor:
    """batch_norm's output, uninitialized, in torch's layout: on CUDA where torch runs its own kernel (not cuDNN:
    :func:`_cudnn_would_run`; ``native``: aten's ``native_batch_norm`` and ``_native_batch_norm_legit*``, which are
    that kernel), ``empty_like(input)``, which keeps a dense input's strides (a transposed (N, C) input gives a
    transposed output); elsewhere (the CPU, cuDNN) the format the strides suggest (:func:`_out_format`). A dense
    permuted input whose spatial dims do not merge in one order (which the kernels need: :func:`_canonical`) takes
    the suggested format as well: a layout torch would keep, left. The call plans' keys hold
    ``torch.backends.cudnn.enabled`` (:func:`_cudnn_key`)."""
    if input.device.type == "cuda" and (native or not _cudnn_would_run(input, weight, bias, running_mean,
                                                                       running_var, training, eps)) \
            and _bsc(input, _spatial_order(input)) is not None:
        return torch.empty_like(input)
    return torch.empty(input.shape, dtype=input.dtype, device=input.device, memory_format=_out_format(input))


def _canonical(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int, int],
                                                          tuple[int, ...], tuple[int, ...]]:
    """(x, y, (B, S, C), x strides (b, s, c), y strides (b, s, c)); batch merges into spatial when both allow.
    ``y`` (contiguous or channels-last: :func:`_out_format`) may have another layout than ``x``: both are read
    with their own strides, in one spatial order; where no order merges the spatial dims of both (a permuted
    input beside its contiguous output), the input is gathered (one copy, logged)."""
    order = _spatial_order(x)
    vx, vy = _bsc(x, order), _bsc(y, order)
    if vx is None or vy is None:
        log.debug("tritred.batch_norm: spatial dims of strides %s are gathered (one copy)", x.stride())
        x = x.contiguous()
        order = [d for d in range(2, x.dim()) if x.shape[d] != 1]
        vx, vy = _bsc(x, order), _bsc(y, order)
        if vy is None:  # (an output's dims merge in the standard order: contiguous and channels-last both do)
            y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            vy = _bsc(y, order)
        assert vx is not None and vy is not None
    B, Ch = x.shape[0], x.shape[1]
    (S, xb, xs, xc), (_, yb, ys, yc) = vx, vy
    if S == 1:  # [B, C]: the batch is the spatial axis
        return x, y, (1, B, Ch), (0, xb, xc), (0, yb, yc)
    if B == 1 or (xb == S * xs and yb == S * ys):  # channels-last (or one image): batch and spatial merge
        return x, y, (1, B * S, Ch), (0, xs, xc), (0, ys, yc)
    return x, y, (B, S, Ch), (xb, xs, xc), (yb, ys, yc)


def check_args(op: str, input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float,
               eps: float) -> torch.Tensor:
    """torch's checks of a batch_norm call, with its exceptions and messages; the input (a negative-bit view
    materialized). Also run on fake tensors (the registered op's fake implementation): shapes, dtypes and devices
    only. An empty 1-D input passes (torch: an empty output)."""
    input = parse_args(op, input, running_mean, running_var, weight, bias, training, momentum, eps)
    if input.dim() == 0:
        raise IndexError(f"{op}(): expected an input of at least 1 dim [B, C, *] (channels: dim 1), got a 0-d tensor")
    rt.check_float(op, input)
    # A 1-D input has no channel dim: torch counts 0 channels (an empty one gives an empty output, below).
    Ch = input.shape[1] if input.dim() > 1 else 0
    empty_1d = input.dim() == 1 and input.numel() == 0
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is None:
            continue
        rt.check_tensor(op, name, t)
        if t.numel() != Ch and not empty_1d:
            raise RuntimeError(f"{op}(): {name} should contain {Ch} elements not {t.numel()}")
        if name.startswith("running") and t.dim() != 1:  # torch's kernels index them as 1-D
            raise RuntimeError(f"{op}(): {name} should be a 1-D tensor of {Ch} elements, got shape {list(t.shape)}")
        rt.check_float(op, t, what=name)
    if not training and (running_mean is None or running_var is None):  # (torch checks eval mode first)
        missing = "running_mean" if running_mean is None else "running_var"
        raise RuntimeError(f"{op}(): {missing} must be defined in evaluation mode")
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}(): running_mean and running_var must either both be None or neither be None")
    # torch's rule: parameters share the input's dtype, except float32 ones beside a half/bfloat16 input; its
    # CUDA kernels also take running statistics of any floating dtype (they are updated in their own dtype).
    checked = [("weight", weight), ("bias", bias)]
    if input.device.type != "cuda":
        checked += [("running_mean", running_mean), ("running_var", running_var)]
    for name, t in checked:
        if t is not None and t.dtype != input.dtype and not (
                t.dtype == torch.float32 and input.dtype in (torch.float16, torch.bfloat16)):
            raise RuntimeError(f"{op}(): mixed dtype: {name} is {t.dtype}, expected {input.dtype}"
                               + (" or torch.float32" if input.dtype in (torch.float16, torch.bfloat16) else ""))
    # torch's CPU kernel also takes them all in one dtype (a float32 weight beside float16 statistics: refused);
    # its CUDA kernels the weight and bias (a float16 weight beside a float32 bias: refused, as cuDNN's)
    given = [(name, t.dtype) for name, t in checked if t is not None]
    if len({dtype for _, dtype in given}) > 1:
        what = "the weight and bias" if input.device.type == "cuda" else "the parameters and running statistics"
        raise RuntimeError(f"{op}(): mixed dtype: " + ", ".join(f"{name} is {dtype}" for name, dtype in given)
                           + f": {what} must share one dtype")
    rt.check_same_device(op, input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    if input.dim() == 1:  # (torch: an empty 1-D input gives an empty output; a non-empty one has no dim 1)
        if empty_1d:
            return input
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    return input


def parse_args(op: str, input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float,
               eps: float) -> torch.Tensor:
    """What torch checks before its batch_norm op sees the tensors' values: ``F.batch_norm``'s Python checks
    (:func:`python_checks`), then its argument parser's types (every tensor argument a tensor, ``training`` a bool,
    ``momentum`` and ``eps`` numbers); the input (a negative-bit view materialized)."""
    python_checks(input, training, eps)
    input = rt.check_tensor(op, "input", input)
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if t is not None:
            rt.check_tensor(op, name, t)
    check_training(op, training)
    rt.float_arg(op, "momentum", 7, momentum)  # (a bool is a number to torch: True is 1.0)
    rt.float_arg(op, "eps", 8, eps)
    return input


def check_training(op: str, training: object) -> None:
    """TypeError, as torch's argument parser, for a ``training`` that is not a bool (torch takes no 1 or None)."""
    if not isinstance(training, bool):
        raise TypeError(f"{op}(): argument 'training' (position 6) must be bool, not {type(training).__name__}")


def empty_batch_norm(input: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                     weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float,
                     eps: float) -> torch.Tensor:
    """batch_norm of an input of no elements, as torch's ``batch_norm`` (its composite, on every device) takes it
    after :func:`parse_args`: no other check (shapes, dtypes, devices, the running statistics of eval mode), the
    running statistics left as they are, and the output ``input.clone() * weight[0] + bias[0]`` (each term where
    given): torch's dtype promotion and layout, an IndexError for a weight or bias of no elements, a broadcast
    error for a weight whose rows do not broadcast, gradients to the weight and bias through the graph."""
    input = parse_args("batch_norm", input, running_mean, running_var, weight, bias, training, momentum, eps)
    out = input.clone()
    if weight is not None:
        out = out * weight[0]
    if bias is not None:
        out = out + bias[0]
    return out


def _cudnn_key() -> bool:
    """The part of a call plan's key that no argument holds: whether cuDNN is enabled, on which torch's choice of
    kernel, and so the output's layout, depends (:func:`out_empty`)."""
    return bool(torch.backends.cudnn.enabled)


def _torch_release() -> tuple[int, ...]:
    """The installed torch's (major, minor) release ("2.11.0+cu130" -> (2, 11))."""
    return tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])


def python_checks(input: torch.Tensor, training: bool, eps: float) -> None:
    """The checks ``torch.nn.functional.batch_norm`` runs in Python before torch's op parses its arguments, in its
    order and with its exceptions: one value per channel in training (the batch size times the spatial sizes, the
    channels left out: a ``(1,)`` or ``(1, 0)`` input too; an input that is not a tensor has no ``size()``:
    AttributeError, as torch's), then eps: ValueError for ``eps <= 0`` in training and ``eps < 0`` otherwise (a NaN
    eps passes and gives NaN; a value that does not compare with a float: TypeError). As the installed torch: torch
    2.10 and 2.11 raise for ``eps <= 0`` in either mode, with one message (PyTorch pull request 175508 allowed an
    eps of 0 in eval from 2.12), and torch before 2.10 checks no eps (pull request 166756 added the check)."""
    if training:
        size = input.size()
        values = size[0]
        for s in size[2:]:
            values *= s
        if values == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")
    release = _torch_release()
    if release < (2, 10):  # (no eps check before torch 2.10: PyTorch pull request 166756)
        return
    if release < (2, 12):
        if eps <= 0.0:
            raise ValueError(f"batch_norm eps must be positive, but got {eps}")
    elif training and eps <= 0.0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    elif eps < 0.0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")


#: What :func:`batch_norm_stats_call` returns: (y, batch mean, batch invstd, new running_mean, new running_var).
Outputs = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


def batch_norm_call(spec: ReductionSpec, input: torch.Tensor, running_mean: torch.Tensor | None,
                    running_var: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    training: bool, momentum: float, eps: float) -> torch.Tensor:
    """The host path of batch_norm (see the package's docstring): y, the running statistics updated in place."""
    saved, key = replay_plan("batch_norm", (training, momentum, eps, _cudnn_key()), input, running_mean, running_var,
                            weight, bias)
    if saved is not None:
        return saved[0]
    return _forward(spec, key, input, running_mean, running_var, weight, bias, training, momentum, eps, False,
                    False)[0]


def batch_norm_stats_call(spec: ReductionSpec, input: torch.Tensor, running_mean: torch.Tensor | None,
                          running_var: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None,
                          training: bool, momentum: float, eps: float, functional: bool,
                          native: bool = False) -> Outputs:
    """The host path of batch_norm for autograd: (y, mean, invstd, new_running_mean, new_running_var).

    Training: ``mean`` and ``invstd`` are the batch statistics ``[C]`` in fp32 (fp64 for fp64 inputs), torch's
    save_mean and save_invstd; None in eval. ``functional=False`` updates the running statistics in place (new
    ones None); ``functional=True`` (the registered op) leaves them untouched and returns the updated values as
    new ``[C]`` tensors of their dtype (None without running statistics or in eval), as aten's
    ``_batch_norm_with_update_functional``. ``native``: the output's layout is that of torch's own CUDA kernel
    (:func:`out_empty`; the aten overrides of its ops).
    """
    args = (training, momentum, eps, True, functional, native, _cudnn_key())
    saved, key = replay_plan("batch_norm", args, input, running_mean, running_var, weight, bias)
    if saved is not None:
        return _unpack(saved, training,
                       functional and running_mean is not None)
    return _forward(spec, key, input, running_mean, running_var, weight, bias, training, momentum, eps, True,
                    functional, native)


def _unpack(outs: list[torch.Tensor], training: bool, new_running: bool) -> Outputs:
    """A replayed plan's outputs (y, then mean and invstd in training, then the new running statistics) as
    :data:`Outputs`."""
    y, rest = outs[0], outs[1:]
    mean, invstd = (rest[0], rest[1]) if training else (None, None)
    new_rm, new_rv = (rest[2], rest[3]) if training and new_running else (None, None)
    return y, mean, invstd, new_rm, new_rv


def _forward(spec: ReductionSpec, key: Hashable, input: torch.Tensor, running_mean: torch.Tensor | None,
             running_var: torch.Tensor | None, weight: torch.Tensor | None, bias: torch.Tensor | None,
             training: bool, momentum: float, eps: float, stats: bool, functional: bool,
             native: bool = False) -> Outputs:
    """The full host path: checks, view, decision, launches; saves the plan under ``key``."""
    op = "batch_norm"
    input = check_args(op, input, running_mean, running_var, weight, bias, training, momentum, eps)
    has_running = running_mean is not None and running_var is not None
    new_running = functional and training and has_running
    acc = acc_dtype(input.dtype)  # fp32 statistics, fp64 for fp64 inputs
    if input.dim() == 1:  # an empty 1-D input (check_args refused the others): an empty output, as torch
        return _empty_outputs(torch.empty_like(input), 0, acc, training and stats, new_running, running_mean,
                              running_var)
    Ch = input.shape[1]
    rt.check_runnable(op, input)
    rec = Recorder(input, running_mean, running_var, weight, bias)
    y = rec.adopt(out_empty(input, weight, bias, running_mean, running_var, training, eps, native))
    if input.numel() == 0:  # (torch leaves the running statistics as they are)
        return _empty_outputs(y, Ch, acc, training and stats, new_running, running_mean, running_var)
    dev = input.device
    outs = [y]
    mean_out = invstd_out = new_rm = new_rv = None
    if stats and training:
        mean_out, invstd_out = rec.empty((Ch,), acc, dev), rec.empty((Ch,), acc, dev)
        outs += [mean_out, invstd_out]
    if new_running:
        assert running_mean is not None and running_var is not None
        new_rm = rec.empty((Ch,), running_mean.dtype, dev)
        new_rv = rec.empty((Ch,), running_var.dtype, dev)
        outs += [new_rm, new_rv]
    x, y, (B, S, _), (xb, xs, xc), (yb, ys, yc) = _canonical(input, y)
    cfg = _decide(spec, x, B, S, Ch, ((xb, xs, xc),))
    # Per-channel vectors are read with unit stride: strided or expanded ones are copied (C elements). Running
    # stats updated in place go through a contiguous buffer that is copied back.
    w = rt.unit_stride(weight) if weight is not None else y
    b = rt.unit_stride(bias) if bias is not None else y
    rm_buf, rv_buf = rt.unit_stride(running_mean), rt.unit_stride(running_var)
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    resident = training and tiles == 1  # one tile holds each channel block: statistics from it, one launch
    if training and not resident:
        split, tiles_per_split = rt.slices(tiles, cfg.split)
        pm, pm2, pn, psum = (rec.empty((Ch, split), acc, dev) for _ in range(4))
        rec.launch(
            _stats_kernel, (rt.cdiv(Ch, cfg.BLOCK_K), split), x, pm, pm2, pn, psum, B, S, Ch, xb, xs, xc,
            tiles_per_split, ACC=tl_dtype(acc), SPLIT=split, GROUP=_groups(x, cfg), BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, DIV_S=_nchw_hint(S, (xb, xs, xc)), PREFETCH=cfg.num_stages > 1,
            num_warps=cfg.num_warps, num_stages=1)  # (the prefetch is by hand; Triton's own stages: SASS identical)
    else:
        split, tiles_per_split, pm = 1, tiles, y
        pm2 = pn = psum = pm
    # The normalize launch (its channel block's statistics merged once per program)
    tiles_per_program, grid = _tiles_per_program(cfg, rt.cdiv(Ch, cfg.BLOCK_K), split * tiles_per_split)
    rm_in, rv_in = (rm_buf, rv_buf) if has_running else (y, y)
    rm_to, rv_to = (new_rm, new_rv) if new_running else (rm_in, rv_in)
    stats_to = (mean_out if mean_out is not None else y, invstd_out if invstd_out is not None else y)
    flags = dict(FROM_RUNNING=not training, HAS_W=weight is not None, HAS_B=bias is not None, ACC=tl_dtype(acc),
                 SPLIT=split, BLOCK_S=rt.next_pow2(split))
    scalars = (*f32_split(float(eps)), *f32_split(float(momentum)))
    finish = training and not resident and not merge_inline(cfg.BLOCK_K, split)
    if finish:  # the partials merged once per channel (mean, rstd, the running statistics), then normalize
        stats_to = (mean_out if mean_out is not None else rec.empty((Ch,), acc, dev),
                    invstd_out if invstd_out is not None else rec.empty((Ch,), acc, dev))
        block_c, warps = finish_block(Ch, split, rt.device_info(dev).sm_count)
        rec.launch(_apply_kernel, (rt.cdiv(Ch, block_c),), x, y, pm, pm2, pn, psum, rm_in, rv_in, rm_to, rv_to, w,
                   b, *stats_to, B, S, Ch, xb, xs, xc, yb, ys, yc, tiles_per_split, 0, *scalars, RESIDENT=False,
                   HAS_RUNNING=has_running, BLOCK_M=1, BLOCK_N=1, BLOCK_K=block_c, STATS=True, num_warps=warps,
                   **flags, **rt.dependent_launch(dev))  # (after the statistics launch)
    rec.launch(_apply_kernel, grid, x, y, pm, pm2, pn, psum, rm_in, rv_in, rm_to, rv_to, w, b, *stats_to,
               B, S, Ch, xb, xs, xc, yb, ys, yc, tiles_per_split, tiles_per_program, *scalars, RESIDENT=resident,
               HAS_RUNNING=has_running and not finish, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
               BLOCK_K=cfg.BLOCK_K, DIV_S=_nchw_hint(S, (xb, xs, xc), (yb, ys, yc)), num_warps=cfg.num_warps,
               STATS=mean_out is not None and not finish, COEFS=finish, **flags,
               **(rt.dependent_launch(dev) if training and not resident else {}))  # (after the statistics launch)
    if not new_running:
        _copy_back_running(rec, training, running_mean, rm_buf, running_var, rv_buf)
    rec.save(key, *outs)
    return y, mean_out, invstd_out, new_rm, new_rv


def _empty_outputs(y: torch.Tensor, Ch: int, acc: torch.dtype, stats: bool, new_running: bool,
                   running_mean: torch.Tensor | None, running_var: torch.Tensor | None) -> Outputs:
    """The outputs of an empty input (no launch): statistics of no values (NaN, never read: the backward of an
    empty input launches nothing), the running statistics unchanged (as torch)."""
    mean = torch.full((Ch,), float("nan"), dtype=acc, device=y.device) if stats else None
    invstd = torch.full((Ch,), float("nan"), dtype=acc, device=y.device) if stats else None
    if new_running:
        assert running_mean is not None and running_var is not None
        return y, mean, invstd, running_mean.clone(), running_var.clone()
    return y, mean, invstd, None, None


def _decide(spec: ReductionSpec, x: torch.Tensor, B: int, S: int, Ch: int,
            strides: tuple[tuple[int, int, int], ...],
            direction: Literal["forward", "backward"] = "forward") -> LaunchConfig:
    """The launch config of a (B, S, C) view of ``x`` for ``direction``: ``strides`` are the (b, s, c) strides of
    the tensors the kernels read, x's first; the Problem is M = batch, N = spatial, K = channels with x's strides.
    batch_norm's tiles have no trailing tile (``rt.no_tail``)."""
    xb, xs, xc = strides[0]
    cfg: LaunchConfig = rt.decide(spec, x, rt.View(B, S, Ch, strides), direction=direction,
                                  make_problem=lambda: Problem(
                                      op="batch_norm", dtype=rt.dtype_name(x.dtype), direction=direction, M=B, N=S,
                                      K=Ch, stride_m=xb, stride_n=xs, stride_k=xc))
    rt.no_tail(cfg, "batch_norm")
    return cfg


def _groups(x: torch.Tensor, cfg: LaunchConfig) -> int:
    """The lanes of a statistics or sums tile summed inside one thread first: one 16-byte vector of spatial
    neighbours (NCHW), the elements one thread loads together; single lanes when channels are the contiguous axis
    (the vector runs across channels)."""
    return min(16 // x.element_size(), cfg.BLOCK_M * cfg.BLOCK_N) if cfg.BLOCK_K == 1 else 1


def _tiles_per_program(cfg: LaunchConfig, c_blocks: int, units: int) -> tuple[int, tuple[int]]:
    """(tiles per program, grid) of a launch over ``units`` tiles of each of ``c_blocks`` channel blocks:
    ``cfg.num_programs`` > 0 spreads each channel block's tiles over num_programs / c_blocks programs (what they
    share, such as merged statistics, read once per program), 0 gives one tile per program."""
    per_block = max(1, cfg.num_programs // c_blocks) if cfg.num_programs > 0 else units
    tiles_per_program = rt.cdiv(units, min(per_block, units))
    return tiles_per_program, (c_blocks * rt.cdiv(units, tiles_per_program),)


def _nchw_hint(S: int, *strides: tuple[int, int, int]) -> int:
    """DIV_S of the NCHW kernels: the largest power of two (2-8) dividing S and every tensor's batch and channel
    strides, when Triton cannot see it (it specializes on 16 only); 1 otherwise, or when the spatial axis is not
    unit-stride. 14x14 maps (S = 196): 8-byte loads instead of scalar ones, as ``runtime.row_hint`` for rows."""
    if S <= 1 or any(s != 1 for _, s, _ in strides):
        return 1
    d = rt.pow2_divisor(S, *(b for b, _, _ in strides), *(c for _, _, c in strides))
    return d if 1 < d < 16 else 1


def _copy_back_running(rec: Recorder, training: bool, running_mean: torch.Tensor | None, rm_buf: torch.Tensor | None,
                       running_var: torch.Tensor | None, rv_buf: torch.Tensor | None) -> None:
    """Training: copy the updated running statistics back where a strided one went through a contiguous buffer."""
    if training:
        for given, buf in ((running_mean, rm_buf), (running_var, rv_buf)):
            if given is not None and buf is not None and buf is not given:
                given.copy_(buf.view_as(given))
                rec.replayable = False  # the copy back is not a launch


# -- pieces of a batch_norm whose statistics are shared across processes (tritred_ops.nn.SyncBatchNorm) ---------

def _read_view(input: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int], tuple[int, int, int]]:
    """(x, (B, S), x's (b, s, c) strides) of a tensor read but not written: :func:`_canonical` with the input as
    its own output; spatial dims that merge in no order are gathered first (one copy, logged)."""
    if _bsc(input, _spatial_order(input)) is None:
        log.debug("tritred.batch_norm: spatial dims of strides %s are gathered (one copy)", input.stride())
        input = input.contiguous()
    x, _, (B, S, _), (xb, xs, xc), _ = _canonical(input, input)
    return x, (B, S), (xb, xs, xc)


def _check_local(op: str, input: torch.Tensor, *params: tuple[str, torch.Tensor | None]) -> torch.Tensor:
    """The checks of a local piece of a distributed batch_norm: a floating input of at least 2 dims and per-channel
    tensors of C elements on its device (torch's errors, as :func:`check_args`)."""
    input = rt.check_tensor(op, "input", input)
    rt.check_float(op, input)
    if input.dim() < 2:
        raise ValueError(f"{op}(): expected at least 2D input (got {input.dim()}D input)")
    for name, t in params:
        if t is not None and t.numel() != input.shape[1]:
            raise RuntimeError(f"{op}(): {name} should contain {input.shape[1]} elements not {t.numel()}")
    rt.check_same_device(op, input, **dict(params))
    return input


def batch_norm_moments_call(spec: ReductionSpec, input: torch.Tensor) -> torch.Tensor:
    """This process's per-channel statistics of a training batch_norm, as one ``[3, C]`` tensor in fp32 (fp64 for
    fp64 inputs): ``[0]`` the mean, ``[1]`` M2 (the sum of squared deviations from it), ``[2]`` the count
    B * prod(spatial), all channels alike. An empty input gives zeros (a count of 0: the identity of Chan's merge).

    The forward's statistics launch (its config, tiles and per-channel shift), then :func:`_moments_kernel`
    merging each channel's partials once (``rules.finish_block``), a dependent launch on sm_90+. Nothing is
    normalized and no running statistic is touched: :func:`batch_norm_normalize_call` does the one and
    ``sync.merge_ranks_call`` the other, once every rank's statistics are merged.

    Raises:
        ValueError: fewer than 2 dims. NotImplementedError: non-floating input. RuntimeError: not runnable here.
    """
    op = "batch_norm"
    saved, key = replay_plan("batch_norm_moments", (), input)
    if saved is not None:
        return saved[0]
    input = _check_local(op, input)
    Ch, dev, acc = input.shape[1], input.device, acc_dtype(input.dtype)
    if input.numel() == 0:
        return torch.zeros((3, Ch), dtype=acc, device=dev)
    rt.check_runnable(op, input)
    rec = Recorder(input)
    x, (B, S), (xb, xs, xc) = _read_view(input)
    cfg = _decide(spec, x, B, S, Ch, ((xb, xs, xc),))
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    split, tiles_per_split = rt.slices(tiles, cfg.split)
    pm, pm2, pn, psum = (rec.empty((Ch, split), acc, dev) for _ in range(4))
    rec.launch(_stats_kernel, (rt.cdiv(Ch, cfg.BLOCK_K), split), x, pm, pm2, pn, psum, B, S, Ch, xb, xs, xc,
               tiles_per_split, ACC=tl_dtype(acc), SPLIT=split, GROUP=_groups(x, cfg), BLOCK_M=cfg.BLOCK_M,
               BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K, DIV_S=_nchw_hint(S, (xb, xs, xc)), PREFETCH=cfg.num_stages > 1,
               num_warps=cfg.num_warps, num_stages=1)
    out = rec.empty((3, Ch), acc, dev)
    block_c, warps = finish_block(Ch, split)
    rec.launch(_moments_kernel, (rt.cdiv(Ch, block_c),), x, pm, pm2, pn, out, Ch, xc, ACC=tl_dtype(acc),
               SPLIT=split, BLOCK_S=rt.next_pow2(split), BLOCK_K=block_c, num_warps=warps,
               **rt.dependent_launch(dev))  # (after the statistics launch)
    rec.save(key, out)
    return out


def batch_norm_normalize_call(spec: ReductionSpec, input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
                              weight: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    """``y = (x - mean) * (invstd * weight) + bias`` with given per-channel ``mean`` and ``invstd`` (``[C]``, fp32;
    fp64 for fp64 inputs): the forward's normalize launch reading its coefficients (``COEFS``) instead of merging
    statistics. y has the input's shape and dtype, in batch_norm's output memory format (:func:`_out_format`).

    Raises:
        ValueError: fewer than 2 dims. RuntimeError: per-channel tensors of another size than C or on another
        device; statistics not in the input's accumulation dtype.
    """
    op = "batch_norm"
    saved, key = replay_plan("batch_norm_normalize", (), input, mean, invstd, weight, bias)
    if saved is not None:
        return saved[0]
    input = _check_local(op, input, ("mean", mean), ("invstd", invstd), ("weight", weight), ("bias", bias))
    acc = acc_dtype(input.dtype)
    if mean.dtype != acc or invstd.dtype != acc:
        raise RuntimeError(f"{op}(): mean and invstd must be {acc} for a {input.dtype} input")
    Ch, dev = input.shape[1], input.device
    rec = Recorder(input, mean, invstd, weight, bias)
    y = rec.adopt(torch.empty(input.shape, dtype=input.dtype, device=dev, memory_format=_out_format(input)))
    if input.numel() == 0:
        return y
    rt.check_runnable(op, input)
    x, y, (B, S, _), (xb, xs, xc), (yb, ys, yc) = _canonical(input, y)
    cfg = _decide(spec, x, B, S, Ch, ((xb, xs, xc),))
    mean_v, invstd_v = rt.unit_stride(mean), rt.unit_stride(invstd)
    w = rt.unit_stride(weight) if weight is not None else y
    b = rt.unit_stride(bias) if bias is not None else y
    tiles = rt.cdiv(B, cfg.BLOCK_M) * rt.cdiv(S, cfg.BLOCK_N)
    tiles_per_program, grid = _tiles_per_program(cfg, rt.cdiv(Ch, cfg.BLOCK_K), tiles)
    rec.launch(_apply_kernel, grid, x, y, y, y, y, y, y, y, y, y, w, b, mean_v, invstd_v, B, S, Ch, xb, xs, xc,
               yb, ys, yc, tiles, tiles_per_program, 0.0, 0.0, 0.0, 0.0, FROM_RUNNING=False, RESIDENT=False,
               HAS_RUNNING=False, HAS_W=weight is not None, HAS_B=bias is not None, ACC=tl_dtype(acc), SPLIT=1,
               BLOCK_S=1, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=cfg.BLOCK_K,
               DIV_S=_nchw_hint(S, (xb, xs, xc), (yb, ys, yc)), num_warps=cfg.num_warps, COEFS=True)
    rec.save(key, y)
    return y
