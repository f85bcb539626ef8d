"""softmax, log_softmax, logsumexp.

The row maximum is subtracted before ``exp`` (values up to 1e38 stay finite). A row that fits on chip is loaded
once, reduced and written from registers; longer rows take the online softmax of Milakov & Gimelshein (2018), or
are held by several programs that merge their partials at a per-row barrier. NaN and inf follow torch. Kernels
in :mod:`.kernels`, the host path in :mod:`.launch`, the launch rules in :mod:`.rules` (forward and backward), the
backward kernels and their host path in :mod:`.backward`, the autograd Functions and the registered torch ops in
:mod:`.autograd`.

Each public function takes one of three paths: under ``torch.compile``, the registered op
(``torch.ops.tritred.<op>``: fake implementation, registered autograd); in eager when a gradient is needed (grad
mode on and the input requires grad), the autograd Function; otherwise the launcher itself (its replayed plan on
repeated calls), with no op boundary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ... import runtime as rt
from .autograd import LogSoftmaxFunction, LogsumexpFunction, SoftmaxFunction, logsumexp_dims
from .launch import logsumexp_call, softmax_call
from .specs import SPECS

__all__ = ["SPECS", "log_softmax", "logsumexp", "softmax"]

# (bound once: under torch.compile each attribute read of a public function's branch is a dynamo guard, evaluated
# on every call of the compiled code, CUDA graph replays included)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred


_SOFTMAX_DOC = """
    Args:
        input: tensor of any shape and strides on CUDA (or CPU under ``TRITON_INTERPRET=1``); floating, or any
            dtype when ``dtype`` is a floating dtype.
        dim: the dim to normalize over (negative dims count from the end).
        dtype: convert the input to this dtype first; the output has it.

    Returns:
        Contiguous tensor of the input's shape (as torch's, whatever the input's strides), dtype ``dtype`` or
        the input's. Computed in fp32 (fp16/bf16/fp32 inputs).

    Raises:
        IndexError: dim out of range.
        TypeError: an input that is not a Tensor; dim missing (None) or not an int; a ``dtype`` that is not a
            ``torch.dtype``.
        NotImplementedError: a non-floating ``dtype``, an integer or bool input without a floating ``dtype``,
            a complex input.
        RuntimeError: a tensor that is neither on CUDA nor on the CPU under the Triton interpreter (CPU tensors
            run when ``TRITON_INTERPRET=1`` was set before importing tritred_ops).

    Gradient: torch's, from the saved output (:mod:`.backward`), in the input's dtype (with ``dtype=`` too);
    computed in fp32 for fp16/bf16/fp32. Differentiable twice in eager (under ``create_graph=True`` through torch's
    ``_softmax_backward_data``/``_log_softmax_backward_data``); forward-mode AD and ``torch.func.vmap`` as torch's.
"""


def _softmax_compiled(input: torch.Tensor, dim: int | None = None,
                      dtype: torch.dtype | None = None) -> torch.Tensor:
    """softmax as torch.compile traces it (``rt.compiles_to``): the registered ``tritred::softmax``."""
    if dim is True or dim is False:  # (the op's int argument would take it as 0 or 1; torch refuses it)
        rt.wrap_dim("softmax", dim, input.dim())
    return _ops.softmax(input, dim, None if dtype is None else rt.dtype_arg(dtype))


@rt.compiles_to(_softmax_compiled)
def softmax(input: torch.Tensor, dim: int | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim`` — mirrors :func:`torch.softmax`.

    Single pass when the row fits on chip; float32 rows of 64K+ elements held by several programs that merge their
    partials at a per-row barrier; else the online softmax (Milakov & Gimelshein 2018).
    """
    if _compiling():  # an opaque registered op: fake implementation, registered autograd
        return _softmax_compiled(input, dim, dtype)
    if dtype is not None:
        dtype = rt.dtype_arg(dtype)
    if (saved := rt.replayed("softmax", (dim, dtype), input)) is not None:  # a repeated inference call
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(SoftmaxFunction, input, dim, dtype)
    return softmax_call(SPECS["softmax"], 0, input, dim, dtype)  # inference: the replayed fast path


def _log_softmax_compiled(input: torch.Tensor, dim: int | None = None,
                          dtype: torch.dtype | None = None) -> torch.Tensor:
    """log_softmax as torch.compile traces it: the registered ``tritred::log_softmax``."""
    if dim is True or dim is False:
        rt.wrap_dim("log_softmax", dim, input.dim())
    return _ops.log_softmax(input, dim, None if dtype is None else rt.dtype_arg(dtype))


@rt.compiles_to(_log_softmax_compiled)
def log_softmax(input: torch.Tensor, dim: int | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """x - max - log(sum(exp(x - max))) along ``dim`` — mirrors :func:`torch.log_softmax`."""
    if _compiling():
        return _log_softmax_compiled(input, dim, dtype)
    if dtype is not None:
        dtype = rt.dtype_arg(dtype)
    if (saved := rt.replayed("log_softmax", (dim, dtype), input)) is not None:
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(LogSoftmaxFunction, input, dim, dtype)
    return softmax_call(SPECS["log_softmax"], 1, input, dim, dtype)


softmax.__doc__ = (softmax.__doc__ or "") + _SOFTMAX_DOC
log_softmax.__doc__ = (log_softmax.__doc__ or "") + _SOFTMAX_DOC


def _logsumexp_compiled(input: torch.Tensor, dim: int | Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """logsumexp as torch.compile traces it: the registered ``tritred::logsumexp``."""
    if keepdim is not False and keepdim is not True:  # (the op's bool argument would take 0, 1 or None)
        rt.check_keepdim("logsumexp", keepdim)
    return _ops.logsumexp(input, [dim] if type(dim) is int else logsumexp_dims(dim), keepdim)  # (int: no guard)


@rt.compiles_to(_logsumexp_compiled)
def logsumexp(input: torch.Tensor, dim: int | Sequence[int], keepdim: bool = False) -> torch.Tensor:
    """log(sum(exp(x))) over ``dim`` — mirrors :func:`torch.logsumexp`.

    Args:
        input: tensor of any shape/strides; floating, integer or bool (integers give the default float dtype).
        dim: int or tuple of ints (``()`` means all dims, as in torch).
        keepdim: keep reduced dims with size 1.

    Returns:
        Tensor of the kept shape. Max-shifted: ``m + log(sum(exp(x - m)))``; rows holding +inf give +inf, all -inf
        rows give -inf, NaN propagates. An empty reduction gives -inf.

    Raises:
        IndexError: dim out of range.
        RuntimeError: a repeated dim; a tensor that is neither on CUDA nor on the CPU under the Triton
            interpreter (CPU tensors run when ``TRITON_INTERPRET=1`` was set before importing tritred_ops).
        TypeError: an input that is not a Tensor, a non-bool ``keepdim``, a dim that is not an int or a
            sequence of ints (None too where the installed torch refuses it).
        NotImplementedError: complex input.

    Gradient: torch's ``dy * exp(x - result)`` (pointwise torch ops, fp32 for fp16/bf16), from the saved input and
    result; differentiable twice in eager. Forward-mode AD and ``torch.func.vmap`` as torch's.
    """
    if _compiling():
        return _logsumexp_compiled(input, dim, keepdim)
    if (saved := rt.replayed("logsumexp", (dim, keepdim), input)) is not None:
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(LogsumexpFunction, input, dim, keepdim)
    return logsumexp_call(SPECS["logsumexp"], input, dim, keepdim)
