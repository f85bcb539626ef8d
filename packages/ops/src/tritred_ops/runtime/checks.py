"""Argument checks that mirror torch's: types, dtypes, devices, dims, with torch's exceptions and messages.

Every public op runs its arguments through these before any work, so that a call torch refuses is refused the
same way (same exception type, a message naming the argument), and a call torch accepts reaches the kernels in
the form they expect (wrapped dims, materialized negative-bit views).
"""

from __future__ import annotations

import enum
import operator
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd import forward_ad
from tritred_core import FLOAT_DTYPES, INTEGER_DTYPES

from .caches import caches
from .trace import active

#: The floating dtypes every op takes; integer and bool dtypes (sum, prod, amax, amin, max, min, logsumexp).
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTEGERS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
#: Every dtype a spec can declare, by torch's name (``tritred_core`` spells dtypes as strings).
ALL_DTYPES = FLOAT_DTYPES + INTEGER_DTYPES
#: torch's own names for integer dtypes in error messages (c10::ScalarType).
SCALAR_TYPE_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                     torch.uint8: "Byte", torch.bool: "Bool"}


class Unset(enum.Enum):
    """Marks an argument that was not passed (torch's overloads tell ``prod(x)`` from ``prod(x, None)``). Its repr
    is what ``help()`` and ``inspect.signature`` show as the default: ``max(input, dim=<not given>, ...)``. An
    enum member: dynamo builds it as a constant where it is a compiled form's default (``runtime.compiled``)."""

    UNSET = "<not given>"

    def __repr__(self) -> str:
        return "<not given>"


UNSET = Unset.UNSET


def dtype_name(dtype: torch.dtype) -> str:
    """torch's name of ``dtype`` without the ``torch.`` prefix (``"bfloat16"``), as :class:`~tritred_core.Problem`
    spells it."""
    return str(dtype).removeprefix("torch.")


# -- argument checks ---------------------------------------------------------------------------------------------

_functorch_active = torch._C._are_functorch_transforms_active


def grad_needed(*tensors: object) -> bool:
    """Whether a call must take its autograd Function: grad mode is enabled and a tensor argument requires grad
    (``torch.is_grad_enabled()``, then one attribute per tensor: the common inference call pays little), or
    forward-mode AD is on (inside ``torch.autograd.forward_ad.dual_level()``: a dual input's tangent must not be
    dropped by the inference path), or a torch.func transform (vmap, grad, jvp) is: the Functions have its rules."""
    if torch.is_grad_enabled():
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return True
    return forward_ad._current_level >= 0 or _functorch_active()


def check_tensor(op: str, name: str, t: Any) -> torch.Tensor:
    """``t`` if it is a tensor (TypeError naming the argument otherwise), with a negative-bit view
    (``torch._neg_view``) materialized: kernels read memory, which holds the values un-negated."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(t).__name__}")
    return t.resolve_neg() if t.is_neg() else t


def unit_stride(t: torch.Tensor | None) -> torch.Tensor | None:
    """A parameter vector (weight, bias, running statistics) as kernels read it: flat with unit stride. A
    contiguous one is passed as is; a strided, expanded or negative-bit view is copied (its own size, not the
    input's): the caller copies an in-place updated one back."""
    if t is None or (t.is_contiguous() and not t.is_neg()):
        return t
    return t.resolve_neg().contiguous()


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET set to anything but "" or "0")."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_runnable(op: str, x: torch.Tensor) -> None:
    """Kernels run on CUDA tensors, or on CPU tensors under the Triton interpreter (TRITON_INTERPRET=1); a traced
    call (:func:`~.trace.tracing`, which launches nothing) on meta tensors too."""
    if x.device.type == "cuda":
        return
    if x.device.type == "cpu" and interpreting():
        return
    if x.device.type == "meta" and active() is not None:
        return
    raise RuntimeError(
        f"tritred.{op}(): input is on {x.device}; tritred runs on CUDA tensors, or on CPU tensors only under "
        "the Triton interpreter (set TRITON_INTERPRET=1 before importing tritred_ops)"
    )


def check_same_device(op: str, x: torch.Tensor, **others: torch.Tensor | None) -> None:
    """RuntimeError, as torch's, for a tensor argument (``others``: name -> tensor or None) on another device
    than ``x``."""
    for name, t in others.items():
        if t is not None and t.device != x.device:
            raise RuntimeError(
                f"{op}(): Expected all tensors to be on the same device, but argument '{name}' is on {t.device} "
                f"and input is on {x.device}"
            )


def check_float(op: str, x: torch.Tensor, what: str = "input") -> None:
    """Floating tensors only; like torch, a non-floating input has no kernel (NotImplementedError), a
    non-floating parameter is a RuntimeError."""
    if x.dtype not in FLOATS:
        kind = NotImplementedError if what == "input" else RuntimeError
        raise kind(f"tritred.{op}(): {what} dtype must be float16, bfloat16, float32 or float64, got {x.dtype}")


def check_supported(op: str, x: torch.Tensor, allow_integers: bool) -> None:
    """NotImplementedError, as torch's, for a dtype without a kernel: floating ones only, or with
    ``allow_integers`` the integer and bool ones too (complex never)."""
    if x.dtype in FLOATS or (allow_integers and x.dtype in INTEGERS):
        return
    kinds = "floating point, integer and bool" if allow_integers else "floating point"
    # torch raises NotImplementedError for dtypes without a kernel (e.g. complex); so do we.
    raise NotImplementedError(f"tritred.{op}(): not implemented for dtype {x.dtype}; supported: {kinds} dtypes")


def as_index(value: object) -> int | None:
    """``value`` as a Python int when it is integer-like (int, numpy integer, 0-d integer tensor), else None."""
    if isinstance(value, (bool, tuple, list)):  # (a sequence is never one; and torch 2.11's dynamo turns
        return None                              # operator.index's TypeError on it into an internal error)
    if isinstance(value, int):
        return value
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def scalar_of(value: object) -> object:
    """A 0-d tensor that does not require grad as the Python number it holds, as torch's argument parser reads a
    Number or float argument (``var(x, 1, correction=torch.tensor(1))``, ``batch_norm(..., momentum=torch.tensor(
    0.1))``); anything else as it is, for the caller's type check (a 1-d tensor or one that requires grad: torch's
    TypeError)."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.requires_grad and not value.is_complex():
        return value.item()
    return value


def torch_accepts(name: str, call: Callable[[], object]) -> bool:
    """Whether the installed torch accepts ``call`` (on meta tensors): for argument forms that torch releases
    disagree on (``logsumexp(x, None)``, ``prod(x, None)``). Asked once per process, cached."""
    def accepted() -> bool:
        try:
            call()
        except TypeError:
            return False
        return True
    return caches().accepts.get_or_make(name, accepted)


#: The Python types torch's argument parser reads as a dtype (``sum(x, dtype=float)`` is a float64 sum).
PYTHON_DTYPES = {float: torch.float64, int: torch.int64, bool: torch.bool, complex: torch.complex128}


def dtype_arg(dtype: Any) -> Any:
    """A ``dtype=`` argument as torch's parser reads it: a Python scalar type as its dtype; anything else as it is
    (a torch.dtype, None, or a wrong type for the caller's TypeError)."""
    return PYTHON_DTYPES.get(dtype, dtype) if isinstance(dtype, type) else dtype


def check_keepdim(op: str, keepdim: object) -> bool:
    """``keepdim`` if it is a bool (TypeError, as torch's, otherwise)."""
    if not isinstance(keepdim, bool):
        raise TypeError(f"{op}(): argument 'keepdim' must be bool, not {type(keepdim).__name__}")
    return keepdim


def float_arg(op: str, name: str, position: int, value: object) -> float:
    """``value`` as a float, as torch's argument parser takes a ``float`` argument: a Python int, float or bool, a
    numpy scalar (a complex one: its real part), a 0-d tensor that does not require grad (a complex one only with
    no imaginary part: RuntimeError otherwise, as torch's). TypeError naming the argument and its position for
    anything else: a string, a Decimal or Fraction, a 0-d numpy array, a tensor of one element and some dims."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 and not value.requires_grad:
            number = value.item()
            if isinstance(number, complex):
                if number.imag:
                    raise RuntimeError(f"{op}(): argument '{name}': value cannot be converted to type double "
                                       "without overflow")
                number = number.real
            return float(number)
    elif isinstance(value, (int, float)):
        return float(value)
    elif numpy_scalar(value):
        return float(value.real)  # type: ignore[attr-defined]
    raise TypeError(f"{op}(): argument '{name}' (position {position}) must be float, not {type_name(value)}")


def numpy_scalar(value: object) -> bool:
    """Whether ``value`` is a numpy bool or number scalar (numpy is not imported for this: without it loaded no
    value is one)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.bool_, np.number))


def type_name(value: object) -> str:
    """The type's name as torch's argument parser writes it (CPython's ``tp_name``): the qualified name of a type
    defined in C (``numpy.ndarray``, ``decimal.Decimal``), the bare name of one defined in Python (``Fraction``)."""
    t = type(value)
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # (Py_TPFLAGS_HEAPTYPE: a class statement's)
        return t.__name__
    return f"{t.__module__}.{t.__qualname__}"


def int_list(op: str, name: str, position: int, value: object) -> list[Any]:
    """An ``int[]`` argument (``normalized_shape``) as torch's argument parser reads it: a tuple, list or torch.Size
    (no other iterable) of ints, numpy ints or integer 0-d tensors, symbolic sizes as they are. The parser tells an
    int list by its first element, which must not be a bool, and then reads a bool after it as an int
    (``(4, True)`` is ``[4, 1]``). TypeError naming the argument otherwise."""
    if not isinstance(value, (tuple, list, torch.Size)):
        raise TypeError(f"{op}(): argument '{name}' (position {position}) must be tuple of ints, not "
                        f"{type_name(value)}")
    sizes = []
    for pos, s in enumerate(value):
        size = s if isinstance(s, torch.SymInt) else as_index(int(s) if pos and isinstance(s, bool) else s)
        if size is None:
            raise TypeError(f"{op}(): argument '{name}' (position {position}) must be tuple of ints, but found "
                            f"element of type {type_name(s)} at pos {pos}")
        sizes.append(size)
    return sizes


def dim_list(op: str, dim: object) -> list[int] | None:
    """``dim`` (None, an int, or a sequence of ints) as an ``int[]?``, as torch's argument parser reads it: it
    tells a list from its first element, which must not be a bool, and then reads a bool element after it as an
    int (``sum(x, (True,))`` raises, ``mean(x, [0, True])`` reduces dims 0 and 1); TypeError as torch's for
    anything else. Its range is checked later, by :func:`wrap_dims`, as torch's kernels do."""
    if dim is None:
        return None
    if type(dim) is int:  # (the common form first: under torch.compile each check below is a guard per call)
        return [dim]
    index = as_index(dim)
    if index is not None:
        return [index]
    _first_not_bool(op, dim)
    if isinstance(dim, (tuple, list, torch.Size)):
        dims = [as_index(int(d) if isinstance(d, bool) else d) for d in dim]
        if all(d is not None for d in dims):
            return dims  # type: ignore[return-value]
    raise TypeError(f"{op}(): argument 'dim' must be int or tuple of ints, not {type(dim).__name__}")


def _first_not_bool(op: str, dim: object) -> None:
    """TypeError, as torch's argument parser, for a dim list whose first element is a bool (the parser tells an
    int list by its first element)."""
    if isinstance(dim, (tuple, list, torch.Size)) and len(dim) and isinstance(dim[0], bool):
        raise TypeError(f"{op}(): argument 'dim' must be tuple of ints, but found element of type bool at pos 0")


def wrap_dim(op: str, dim: int, ndim: int) -> int:
    """torch's dim wrapping: a 0-d tensor accepts dims -1 and 0; any integer-like dim is accepted."""
    index = as_index(dim)
    if index is None:
        raise TypeError(f"{op}(): argument 'dim' must be int or tuple of ints, not {type(dim).__name__}")
    dim = index
    lo, hi = (-1, 0) if ndim == 0 else (-ndim, ndim - 1)
    if not lo <= dim <= hi:
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim % max(ndim, 1)


def wrap_dims(op: str, dim: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Normalize ``dim`` (None, int, tuple or list) to sorted non-negative dims; None and () mean all dims."""
    if dim is None:
        return tuple(range(ndim))
    if as_index(dim) is not None:
        dims = [wrap_dim(op, dim, ndim)]  # type: ignore[arg-type]
    elif isinstance(dim, (tuple, list, torch.Size)):
        # (torch's int-list arguments take a bool element after the first as an int: sum(x, (0, True)) is a sum
        # over dims 0, 1)
        _first_not_bool(op, dim)
        dims = [wrap_dim(op, int(d) if isinstance(d, bool) else d, ndim) for d in dim]
        if not dims:  # torch treats dim=() / [] as a full reduction
            return tuple(range(ndim))
    else:
        raise TypeError(f"{op}(): argument 'dim' must be int or tuple of ints, not {type(dim).__name__}")
    seen: set[int] = set()
    for d in dims:
        if d in seen:
            raise RuntimeError(f"{op}(): dim {d} appears multiple times in the list of dims")
        seen.add(d)
    return tuple(sorted(d for d in dims if ndim > 0))


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> list[int]:
    """The output shape of reducing ``dims`` of ``shape``: those dims dropped, or kept as 1 with ``keepdim``."""
    return [1 if i in dims else s for i, s in enumerate(shape) if keepdim or i not in dims]


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tritred_ops/
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the user's line: the first caller outside tritred_ops and torch (whose
    autograd and dispatch frames sit between, at depths that vary with the call's path), as torch's own warnings
    from C++ are."""
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith((_PACKAGE, _TORCH)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
