"""sum, mean, prod, amax, amin, max, min: plain and arg (value + index) reductions, with autograd.

Two kernel shapes serve every op of this family (:mod:`.kernels`, :mod:`.arg_kernels`): rows, where the reduced
axis is the fast one, and columns, where a kept axis is. Few outputs of long rows split N over several programs,
whose partials merge in a fixed order (deterministic). The host path (:mod:`.launch`) views the call's tensors as
M x N x K, decides the launch (:mod:`.rules` and any plugin) and launches; max and min with ``dim`` return
``torch.return_types.max`` / ``min``.

Each public function takes one of three paths (:mod:`.autograd`): under ``torch.compile`` the registered op
``torch.ops.tritred.<op>``; when its input requires grad (and grad mode is on) the op's autograd Function;
else the launcher (the replayed fast path, no op boundary). Gradients follow torch's ``derivatives.yaml``
(:mod:`.backward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ... import runtime as rt
from ...kernels.combine import MAX, MIN, PROD, SUM
from ...runtime import UNSET, Unset
from . import autograd as ag
from .launch import arg_call, check_arg_form, reduce_call
from .specs import SPECS

#: (bound once: a call's test costs one global lookup; dynamo folds it to True while tracing)
# (bound once: under torch.compile each attribute read of a public function's branch is a dynamo guard, evaluated
# on every call of the compiled code, CUDA graph replays included)
_compiling = torch.compiler.is_compiling
_ops = torch.ops.tritred
_MAX_RESULT, _MIN_RESULT = torch.return_types.max, torch.return_types.min


def _sum_compiled(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    """sum as torch.compile traces it (``rt.compiles_to``): the registered ``tritred::sum``."""
    if keepdim is not False and keepdim is not True:  # (the op's bool argument would take 0, 1 or None)
        rt.check_keepdim("sum", keepdim)
    dims = [dim] if type(dim) is int else rt.dim_list("sum", dim)  # (the common form first: fewer guards)
    return _ops.sum(input, dims, keepdim, None if dtype is None else rt.dtype_arg(dtype))


@rt.compiles_to(_sum_compiled)
def sum(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
        dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum of ``input`` over ``dim`` — mirrors :func:`torch.sum`.

    Args:
        input: tensor of any shape and strides; float16/bfloat16/float32/float64, integer or bool, on CUDA (or
            CPU under ``TRITON_INTERPRET=1``).
        dim: int, tuple of ints, or None (all dims; ``()`` also means all dims, as in torch).
        keepdim: keep reduced dims with size 1.
        dtype: convert the input to this dtype before summing (and return it).

    Returns:
        Tensor of the kept shape; dtype: ``dtype``, else int64 for integer/bool inputs, else the input's.
        fp16/bf16 accumulate in fp32. Empty reductions return 0.

    Raises:
        TypeError: ``input`` not a Tensor, bad ``dim`` type. IndexError: dim out of range.
        RuntimeError: repeated dim, tensor not on CUDA (outside the interpreter).
        NotImplementedError: unsupported dtype (complex).

    Gradient: the output's gradient broadcast back over the reduced dims (a view), in the input's dtype.

    Algorithm: strided tile sweep with an fp32 accumulator; deterministic two-stage split for few outputs.
    """
    if _compiling():
        return _sum_compiled(input, dim, keepdim, dtype=dtype)
    if dtype is not None:
        dtype = rt.dtype_arg(dtype)
    if (saved := rt.replayed("sum", (dim, keepdim, dtype), input)) is not None:  # a repeated inference call
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(ag.SumFunction, input, dim, keepdim, dtype)  # type: ignore[no-any-return]
    return reduce_call(SPECS["sum"], SUM, input, dim, keepdim, dtype)


def _mean_compiled(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """mean as torch.compile traces it: the registered ``tritred::mean``."""
    if keepdim is not False and keepdim is not True:
        rt.check_keepdim("mean", keepdim)
    dims = [dim] if type(dim) is int else rt.dim_list("mean", dim)
    return _ops.mean(input, dims, keepdim, None if dtype is None else rt.dtype_arg(dtype))


@rt.compiles_to(_mean_compiled)
def mean(input: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Arithmetic mean over ``dim`` — mirrors :func:`torch.mean`.

    Shapes and arguments as :func:`sum`. Floating inputs only (or ``dtype=`` a floating dtype): integer inputs
    raise RuntimeError like torch. An empty reduction returns NaN. Sum accumulated in fp32 (fp64 for fp64),
    then divided by the number of reduced elements.

    Gradient: the output's gradient divided by the number of reduced elements (in the output's dtype), broadcast
    back over the reduced dims, in the input's dtype.
    """
    if _compiling():
        return _mean_compiled(input, dim, keepdim, dtype=dtype)
    if dtype is not None:
        dtype = rt.dtype_arg(dtype)
    if (saved := rt.replayed("mean", (dim, keepdim, dtype), input)) is not None:  # a repeated inference call
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(ag.MeanFunction, input, dim, keepdim, dtype)  # type: ignore[no-any-return]
    return reduce_call(SPECS["mean"], SUM, input, dim, keepdim, dtype)


def _prod_compiled(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool = False, *,
                   dtype: torch.dtype | None = None) -> torch.Tensor:
    """prod as torch.compile traces it: the registered ``tritred::prod``."""
    if keepdim is not False and keepdim is not True:
        rt.check_keepdim("prod", keepdim)
    return _ops.prod(input, _prod_dim(dim, keepdim), keepdim, None if dtype is None else rt.dtype_arg(dtype))


@rt.compiles_to(_prod_compiled)
def prod(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool = False, *,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Product over ``dim`` — mirrors :func:`torch.prod` (which takes one int dim or None).

    ``dim`` not given (the signature's ``<not given>``): ``prod(input)``, the product of all elements, a 0-d
    tensor (``keepdim=True`` then raises TypeError, as torch). ``prod(input, dim, keepdim=False)``: over that
    one dim.
    Shapes/dtypes as :func:`sum` (integer and bool products are int64 and wrap around like torch's); an empty
    reduction returns 1. Raises as :func:`sum`.

    Special values: a slice holding a NaN, or both an inf and a 0, gives NaN; else one holding a 0 gives +-0 and
    one holding an inf gives +-inf (the sign: the parity of the sign bits), also where the finite values' partial
    products underflow or overflow first (docs/semantics.md; torch's result there depends on its order).

    Gradient (torch's ``prod_backward``): ``grad * result / input`` when the input holds no zero; else each
    element's product of the others in its slice (exclusive cumulative products from both ends: exact with one
    zero, 0 with several), in the output's dtype (float32 for float16/bfloat16), returned in the input's.
    """
    if _compiling():
        return _prod_compiled(input, dim, keepdim, dtype=dtype)
    d = _prod_dim(dim, keepdim)
    if dtype is not None:
        dtype = rt.dtype_arg(dtype)
    if rt.grad_needed(input):
        return rt.apply_function(ag.ProdFunction, input, d, keepdim, dtype)  # type: ignore[no-any-return]
    return reduce_call(SPECS["prod"], PROD, input, d, keepdim, dtype)


def _prod_dim(dim: int | Unset | None, keepdim: bool) -> int | None:
    """prod's ``dim`` as the launcher and ``tritred::prod`` take it: None for the full reduction (``prod(x)``,
    or ``prod(x, None)`` where the installed torch takes it), else the int-like dim; TypeError as torch's."""
    if dim is UNSET:
        if keepdim is not False:
            raise TypeError("prod(): keepdim needs an int dim")
        return None
    if dim is None and rt.torch_accepts("prod(x, None)",
                                       lambda: torch.prod(torch.empty(2, device="meta"), None)):  # type: ignore[call-overload]
        return None
    index = rt.as_index(dim)
    if index is None:
        raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
    return index


def _amax_compiled(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """amax as torch.compile traces it: the registered ``tritred::amax`` (None: every dim)."""
    if keepdim is not False and keepdim is not True:
        rt.check_keepdim("amax", keepdim)
    return _ops.amax(input, [dim] if type(dim) is int else rt.dim_list("amax", dim) or [], keepdim)


@rt.compiles_to(_amax_compiled)
def amax(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim`` (``()``: all dims) — mirrors :func:`torch.amax`.

    Output dtype = input dtype. NaN propagates (any NaN in a slice gives NaN). Raises IndexError when a reduced
    dim has size 0, RuntimeError for an empty input without ``dim``, plus the errors of :func:`sum`.

    Gradient (torch's ``scale_grad_by_count``): split evenly among the elements equal to their slice's maximum
    (ties share it); a slice whose maximum is NaN gets NaN.
    """
    if _compiling():
        return _amax_compiled(input, dim, keepdim)
    if (saved := rt.replayed("amax", (dim, keepdim, None), input)) is not None:
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(ag.AmaxFunction, input, dim, keepdim)  # type: ignore[no-any-return]
    return reduce_call(SPECS["amax"], MAX, input, dim, keepdim, None)


def _amin_compiled(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """amin as torch.compile traces it: the registered ``tritred::amin`` (None: every dim)."""
    if keepdim is not False and keepdim is not True:
        rt.check_keepdim("amin", keepdim)
    return _ops.amin(input, [dim] if type(dim) is int else rt.dim_list("amin", dim) or [], keepdim)


@rt.compiles_to(_amin_compiled)
def amin(input: torch.Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Minimum over ``dim`` — mirrors :func:`torch.amin`; see :func:`amax`."""
    if _compiling():
        return _amin_compiled(input, dim, keepdim)
    if (saved := rt.replayed("amin", (dim, keepdim, None), input)) is not None:
        return saved[0]
    if rt.grad_needed(input):
        return rt.apply_function(ag.AminFunction, input, dim, keepdim)  # type: ignore[no-any-return]
    return reduce_call(SPECS["amin"], MIN, input, dim, keepdim, None)


def _max_compiled(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool | Unset = UNSET) -> Any:
    """max as torch.compile traces it: the registered ``tritred::max`` or ``tritred::max_all``."""
    return _arg_compiled("max", _ops.max_all, _ops.max, _MAX_RESULT, input, dim, keepdim)


@rt.compiles_to(_max_compiled)
def max(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool | Unset = UNSET) -> Any:
    """Maximum — mirrors :func:`torch.max` (the reduction overloads).

    ``max(input)`` (``dim`` and ``keepdim`` not given: the signature's ``<not given>``) returns a 0-d tensor, the
    maximum of all elements (NaN if any element is NaN; RuntimeError on an empty input).
    ``max(input, dim, keepdim=False)`` returns ``torch.return_types.max(values, indices)``: values in the input dtype,
    int64 indices of the first maximal element along ``dim`` (the first NaN when the slice has one).

    Raises IndexError (dim out of range, or reducing a dim of size 0), TypeError (``dim=None``, a non-int dim, or
    keepdim without dim, as torch), NotImplementedError (complex).
    Split strategy: per-slice (value, index) partials combined in index order: ties stay first-occurrence.

    Gradient: with ``dim``, to the element at the index (torch's ``value_selecting_reduction_backward``);
    without, split evenly among the elements equal to the maximum (torch's ``evenly_distribute_backward``: among
    the NaN elements when the maximum is NaN).
    """
    if _compiling():
        return _max_compiled(input, dim, keepdim)
    if rt.grad_needed(input):
        return _arg_autograd("max", input, dim, keepdim)
    return arg_call(SPECS["max"], input, dim, keepdim)


def _min_compiled(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool | Unset = UNSET) -> Any:
    """min as torch.compile traces it: the registered ``tritred::min`` or ``tritred::min_all``."""
    return _arg_compiled("min", _ops.min_all, _ops.min, _MIN_RESULT, input, dim, keepdim)


@rt.compiles_to(_min_compiled)
def min(input: torch.Tensor, dim: int | Unset = UNSET, keepdim: bool | Unset = UNSET) -> Any:
    """Minimum — mirrors :func:`torch.min`; see :func:`max`.

    ``min(input)`` (``dim`` and ``keepdim`` not given: the signature's ``<not given>``) returns a 0-d tensor;
    ``min(input, dim, keepdim=False)`` returns ``torch.return_types.min(values, indices)``.
    """
    if _compiling():
        return _min_compiled(input, dim, keepdim)
    if rt.grad_needed(input):
        return _arg_autograd("min", input, dim, keepdim)
    return arg_call(SPECS["min"], input, dim, keepdim)


def _arg_compiled(name: str, all_op: Any, op: Any, result: Any, input: torch.Tensor, dim: int | Unset,
                  keepdim: bool | Unset) -> Any:
    """max/min as torch.compile traces them (their compiled forms): ``all_op`` (``tritred::max_all`` /
    ``min_all``, a 0-d tensor) without ``dim``, else ``result`` (``torch.return_types.max`` / ``min``) of ``op``
    (``tritred::max`` / ``min``: values, indices)."""
    if keepdim is UNSET:  # (the common forms first: fewer guards)
        if dim is UNSET:
            return all_op(input)
        if type(dim) is int:
            return result(op(input, dim, False))
    has_dim, keep = check_arg_form(name, dim, keepdim)
    if not has_dim:
        return all_op(input)
    keep = rt.check_keepdim(name, keep)
    index = rt.as_index(dim)
    if index is None:
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
    return result(op(input, index, keep))


def _arg_autograd(name: str, input: torch.Tensor, dim: int | Unset, keepdim: bool | Unset) -> Any:
    """max/min with autograd (their Functions): a 0-d tensor without ``dim``, else ``torch.return_types.max`` /
    ``min`` (values, indices)."""
    has_dim, keep = check_arg_form(name, dim, keepdim)
    if not has_dim:
        return rt.apply_function(ag.MaxAllFunction if name == "max" else ag.MinAllFunction, input)
    keep = rt.check_keepdim(name, keep)
    values, indices = rt.apply_function(ag.MaxFunction if name == "max" else ag.MinFunction, input, dim, keep)
    return (_MAX_RESULT if name == "max" else _MIN_RESULT)((values, indices))
