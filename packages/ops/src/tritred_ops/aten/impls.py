"""The implementations behind :func:`tritred_ops.enable`: aten's signatures, tritred's launchers.

Each function takes the arguments of one aten overload exactly as the dispatcher passes them (positional, the
keyword-only ones by keyword, trailing defaults possibly left out) and returns what that overload returns, computed
by the family's launcher (the host path with its replayed plans: no autograd here, the dispatcher's autograd key
above has already recorded the call). A call it does not take raises :class:`Decline` before any work; the
kernel wrapper (:mod:`.scope`) then hands the call to torch's own kernel.

What every function declines: dtypes the launcher has no kernel for (complex, and integers where the op is
floating-only), mixed dtypes torch's kernel takes and tritred's does not, and the argument forms listed at each
function. Outputs follow torch's CUDA kernels: statistics in the accumulation dtype (fp32, fp64 for fp64 inputs)
shaped as torch shapes them, gradients left out by ``output_mask`` undefined (None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..families.batch_norm.backward import batch_norm_backward_call
from ..families.batch_norm.launch import batch_norm_stats_call
from ..families.batch_norm.spec import SPEC as BATCH_NORM
from ..families.layer_norm import SPEC as LAYER_NORM
from ..families.layer_norm.backward import norm_backward
from ..families.layer_norm.launch import layer_norm_call
from ..families.reduce.launch import arg_call, reduce_call
from ..families.reduce.specs import SPECS as REDUCE
from ..families.rms_norm import SPEC as RMS_NORM
from ..families.rms_norm.launch import output_format, rms_norm_call
from ..families.softmax.autograd import softmax_backward, softmax_forward
from ..families.softmax.launch import logsumexp_call
from ..families.softmax.specs import SPECS as SOFTMAX
from ..families.statistics.launch import stats_call
from ..families.statistics.specs import SPECS as STATISTICS
from ..kernels.combine import MAX, MIN, PROD, SUM
from ..kernels.dtypes import acc_dtype
from ..runtime import FLOATS, INTEGERS, UNSET, dtype_name

Tensor = torch.Tensor
_REAL = FLOATS + INTEGERS


class Decline(Exception):
    """A call an implementation leaves to torch's own kernel; ``reason`` is counted by ``enabled_stats()``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _need(ok: bool, reason: str) -> None:
    if not ok:
        raise Decline(reason)


def _dtypes(t: Tensor, allowed: tuple[torch.dtype, ...], what: str = "input") -> None:
    if t.dtype not in allowed:
        raise Decline(f"{what} dtype {dtype_name(t.dtype)}")


def _same_dtype(input: Tensor, **others: Tensor | None) -> None:
    """Decline a tensor argument of another dtype than ``input`` (torch's kernels take some such mixes)."""
    for name, t in others.items():
        if t is not None and t.dtype != input.dtype:
            raise Decline(f"{name} dtype {dtype_name(t.dtype)} differs from the input's {dtype_name(input.dtype)}")


def _dims(dim: Sequence[int] | None) -> tuple[int, ...] | None:
    """aten's ``int[1]?`` dims as the launchers take them: None, or a tuple (``()``: every dim, as aten's ``[]``)."""
    return None if dim is None else tuple(dim)


def _stat_shape(input: Tensor, normalized: int) -> list[int]:
    """The shape of native_layer_norm's and _fused_rms_norm's statistics: the leading dims, then ones."""
    lead = input.dim() - normalized
    return [*input.shape[:lead], *([1] * normalized)]


# -- softmax, log_softmax, logsumexp -------------------------------------------------------------------------------

def _softmax_forward(mode: int) -> Any:
    def impl(self: Tensor, dim: int, half_to_float: bool) -> Tensor:
        if half_to_float:  # torch.softmax(half, dim, dtype=torch.float32) on CUDA: computed from the half input
            _need(self.dtype == torch.float16, "half_to_float with a non-half input")
            _need(self.device.type != "cpu", "half_to_float on the CPU (torch's CPU kernel refuses it)")
            return softmax_forward(mode, self, dim, torch.float32)
        _dtypes(self, FLOATS)
        return softmax_forward(mode, self, dim, None)
    return impl


def _softmax_backward(mode: int) -> Any:
    def impl(grad_output: Tensor, output: Tensor, dim: int, input_dtype: torch.dtype) -> Tensor:
        _dtypes(output, FLOATS, "output")
        _need(grad_output.dtype == output.dtype, "grad_output dtype differs from the output's")
        _need(input_dtype in FLOATS, f"input_dtype {input_dtype}")
        return softmax_backward(mode, grad_output, output, dim, input_dtype)
    return impl


softmax = _softmax_forward(0)
log_softmax = _softmax_forward(1)
softmax_backward_data = _softmax_backward(0)
log_softmax_backward_data = _softmax_backward(1)


def logsumexp(self: Tensor, dim: Sequence[int], keepdim: bool = False) -> Tensor:
    _dtypes(self, _REAL)
    # (torch's dim=() is version-dependent, where tritred's own op reduces every dim: torch's kernel decides)
    _need(len(dim) > 0 or self.dim() == 0, "dim=() (torch's kernel decides)")
    return logsumexp_call(SOFTMAX["logsumexp"], self, tuple(dim), keepdim)


# -- layer_norm, rms_norm -------------------------------------------------------------------------------------------

def native_layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, bias: Tensor | None,
                      eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(out, mean, rstd); mean and rstd fp32 (fp64 for fp64), shaped ``[*lead, 1, ...]`` as torch's."""
    _dtypes(input, FLOATS)
    _same_dtype(input, weight=weight, bias=bias)
    y, mean, rstd = layer_norm_call(LAYER_NORM, input, tuple(normalized_shape), weight, bias, eps, True)
    assert mean is not None and rstd is not None
    shape = _stat_shape(input, len(normalized_shape))
    return y, mean.view(shape), rstd.view(shape)


def native_layer_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], mean: Tensor,
                               rstd: Tensor, weight: Tensor | None, bias: Tensor | None, output_mask: Sequence[bool],
                               ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    _dtypes(input, FLOATS)
    _same_dtype(input, grad_out=grad_out, weight=weight, bias=bias)
    _dtypes(mean, FLOATS, "mean")
    _dtypes(rstd, FLOATS, "rstd")
    return norm_backward(LAYER_NORM, grad_out, input, tuple(normalized_shape), mean, rstd, weight, bias,
                         [bool(m) for m in output_mask])


def fused_rms_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, eps: float | None,
                   ) -> tuple[Tensor, Tensor]:
    """(out, rstd); declines channels-last inputs (tritred keeps their format, torch's fused kernel does not)."""
    _dtypes(input, FLOATS)
    _same_dtype(input, weight=weight)
    _need(output_format(input) is None, "channels-last input (torch's fused kernel returns a contiguous output)")
    y, rstd = rms_norm_call(RMS_NORM, input, tuple(normalized_shape), weight, eps, True)
    assert rstd is not None
    return y, rstd.view(_stat_shape(input, len(normalized_shape)))


def fused_rms_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Sequence[int], rstd: Tensor,
                            weight: Tensor | None, output_mask: Sequence[bool]) -> tuple[Tensor | None, Tensor | None]:
    _dtypes(input, FLOATS)
    _same_dtype(input, grad_out=grad_out, weight=weight)
    _dtypes(rstd, FLOATS, "rstd")
    dx, dw, _ = norm_backward(RMS_NORM, grad_out, input, tuple(normalized_shape), None, rstd, weight, None,
                              (bool(output_mask[0]), bool(output_mask[1]), False), rms=True)
    return dx, dw


# -- batch_norm -----------------------------------------------------------------------------------------------------

def _bn_params(input: Tensor, **params: Tensor | None) -> None:
    """torch's dtype rule for batch_norm's parameters, as tritred's kernels take it: the input's dtype, or
    float32 beside a half/bfloat16 input."""
    low = input.dtype in (torch.float16, torch.bfloat16)
    for name, t in params.items():
        if t is not None and t.dtype != input.dtype and not (low and t.dtype == torch.float32):
            raise Decline(f"{name} dtype {dtype_name(t.dtype)} with a {dtype_name(input.dtype)} input")


def _bn_forward(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                running_var: Tensor | None, training: bool, momentum: float, eps: float, native: bool = True,
                ) -> tuple[Tensor, Tensor, Tensor]:
    """(out, save_mean, save_invstd), the running statistics updated in place in training. In eval the saved
    statistics are empty ``[0]`` tensors, as torch's CPU kernel and cuDNN return them (torch's CUDA kernel returns
    the running mean and the running invstd there; every backward reads the running statistics in eval).
    ``native``: the op is torch's own kernel, whose CUDA output keeps a dense input's strides (``empty_like``),
    whatever cuDNN could take (``families.batch_norm.launch.out_empty``)."""
    _dtypes(input, FLOATS)
    _need(input.dim() >= 2 and input.numel() > 0, "an empty or 1-D input")
    _bn_params(input, weight=weight, bias=bias, running_mean=running_mean, running_var=running_var)
    if training:  # (tritred raises for these as F.batch_norm does; aten's kernels compute them)
        _need(input.numel() // input.shape[1] > 1, "one value per channel in training")
        _need(eps > 0, "eps <= 0 in training")
    else:
        _need(running_mean is not None and running_var is not None, "eval without running statistics")
    y, mean, invstd, _, _ = batch_norm_stats_call(BATCH_NORM, input, running_mean, running_var, weight, bias,
                                                  training, momentum, eps, functional=False, native=native)
    if mean is None or invstd is None:
        acc = acc_dtype(input.dtype)
        return y, input.new_empty((0,), dtype=acc), input.new_empty((0,), dtype=acc)
    return y, mean, invstd


def native_batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                      running_var: Tensor | None, training: bool, momentum: float, eps: float,
                      ) -> tuple[Tensor, Tensor, Tensor]:
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


def native_batch_norm_legit_no_stats(input: Tensor, weight: Tensor | None, bias: Tensor | None, training: bool,
                                     momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    return _bn_forward(input, weight, bias, None, None, training, momentum, eps)


def native_batch_norm_legit_no_training(input: Tensor, weight: Tensor | None, bias: Tensor | None,
                                        running_mean: Tensor, running_var: Tensor, momentum: float, eps: float,
                                        ) -> tuple[Tensor, Tensor, Tensor]:
    return _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)


def cudnn_batch_norm(input: Tensor, weight: Tensor, bias: Tensor | None, running_mean: Tensor | None,
                     running_var: Tensor | None, training: bool, exponential_average_factor: float, epsilon: float,
                     ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out, save_mean, save_invstd, reserve): cuDNN's outputs (its ``save_var`` is the inverse standard
    deviation, as tritred's), an empty reserve. F.batch_norm takes this op on CUDA for affine float16 (float32
    weights), float32 and float64 inputs of 3+ dims."""
    y, mean, invstd = _bn_forward(input, weight, bias, running_mean, running_var, training,
                                  exponential_average_factor, epsilon, native=False)
    return y, mean, invstd, input.new_empty((0,), dtype=torch.uint8)


def native_batch_norm_backward(grad_out: Tensor, input: Tensor, weight: Tensor | None, running_mean: Tensor | None,
                               running_var: Tensor | None, save_mean: Tensor | None, save_invstd: Tensor | None,
                               train: bool, eps: float, output_mask: Sequence[bool],
                               ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Training: from the saved batch mean and invstd; eval: from the running statistics (as torch's)."""
    _dtypes(input, FLOATS)
    _same_dtype(input, grad_out=grad_out)
    _need(input.dim() >= 2 and input.numel() > 0, "an empty or 1-D input")
    _bn_params(input, weight=weight)
    if train:
        _need(save_mean is not None and save_invstd is not None and save_mean.numel() > 0,
              "training without saved statistics")
        mean, var = save_mean, save_invstd
    else:
        _need(running_mean is not None and running_var is not None, "eval without running statistics")
        mean, var = running_mean, running_var
    assert mean is not None and var is not None
    mask = (bool(output_mask[0]), bool(output_mask[1]), bool(output_mask[2]))
    return batch_norm_backward_call(BATCH_NORM, grad_out, input, weight, mean, var, train, eps, mask, None)


def cudnn_batch_norm_backward(input: Tensor, grad_output: Tensor, weight: Tensor, running_mean: Tensor | None,
                              running_var: Tensor | None, save_mean: Tensor | None, save_var: Tensor | None,
                              epsilon: float, reserveSpace: Tensor,  # noqa: N803 (aten's name)
                              ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """cuDNN's training backward (all three gradients) from the saved mean and inverse standard deviation."""
    return native_batch_norm_backward(grad_output, input, weight, running_mean, running_var, save_mean, save_var,
                                      True, epsilon, (True, True, True))


def cudnn_backward_fallback(args: tuple[Any, ...]) -> Any:
    """torch's computation of a declined ``cudnn_batch_norm_backward`` call: cuDNN's own kernel when the forward
    was cuDNN's (a reserve space), else (an empty reserve: tritred's forward, or cuDNN's without one) torch's
    ``native_batch_norm_backward``, whose training formula reads the same saved statistics. None: use cuDNN's."""
    input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon, reserve = args
    if reserve.numel():
        return None
    return torch.ops.aten.native_batch_norm_backward.default(grad_output, input, weight, running_mean, running_var,
                                                             save_mean, save_var, True, epsilon, [True, True, True])


# -- the reductions and statistics ----------------------------------------------------------------------------------

def _reduce_dtypes(self: Tensor, dtype: torch.dtype | None, allowed: tuple[torch.dtype, ...] = _REAL) -> None:
    _dtypes(self, _REAL)
    cast = self.dtype if dtype is None else dtype
    _need(cast in allowed, f"result dtype {dtype_name(cast)}")


def sum_dim(self: Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
            dtype: torch.dtype | None = None) -> Tensor:
    _reduce_dtypes(self, dtype)
    return reduce_call(REDUCE["sum"], SUM, self, _dims(dim), keepdim, dtype)


def mean_dim(self: Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> Tensor:
    _reduce_dtypes(self, dtype, FLOATS)  # (torch raises for an integer result dtype: its error, from its kernel)
    return reduce_call(REDUCE["mean"], SUM, self, _dims(dim), keepdim, dtype)


def prod(self: Tensor, *, dtype: torch.dtype | None = None) -> Tensor:
    _reduce_dtypes(self, dtype)
    return reduce_call(REDUCE["prod"], PROD, self, None, False, dtype)


def prod_dim(self: Tensor, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Tensor:
    _reduce_dtypes(self, dtype)
    return reduce_call(REDUCE["prod"], PROD, self, dim, keepdim, dtype)


def _extremum(name: str, code: int) -> Any:
    def impl(self: Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> Tensor:
        _dtypes(self, _REAL)
        return reduce_call(REDUCE[name], code, self, tuple(dim), keepdim, None)
    return impl


amax = _extremum("amax", MAX)
amin = _extremum("amin", MIN)


def _arg(name: str) -> tuple[Any, Any]:
    def full(self: Tensor) -> Tensor:
        _dtypes(self, _REAL)
        return arg_call(REDUCE[name], self, UNSET, UNSET)  # type: ignore[no-any-return]

    def with_dim(self: Tensor, dim: int, keepdim: bool = False) -> tuple[Tensor, Tensor]:
        _dtypes(self, _REAL)
        values, indices = arg_call(REDUCE[name], self, dim, keepdim)
        return values, indices
    return full, with_dim


max_all, max_dim = _arg("max")
min_all, min_dim = _arg("min")


def _statistic(name: str) -> Any:
    spec = STATISTICS[name]
    pair = name.endswith("_mean")

    def impl(self: Tensor, dim: Sequence[int] | None = None, *, correction: float | None = None,
             keepdim: bool = False) -> Any:
        _dtypes(self, FLOATS)  # (torch: complex inputs too; integers raise, its error from its kernel)
        out, mean = stats_call(spec, self, _dims(dim), UNSET, keepdim, correction)
        return (out, mean) if pair else out
    return impl


var = _statistic("var")
std = _statistic("std")
var_mean = _statistic("var_mean")
std_mean = _statistic("std_mean")
