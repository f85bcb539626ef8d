"""Running a registered reduction against its torch reference over dtypes, shapes and cases (``tritred check``).

See :mod:`tritred_ops.testing` for how one check runs; :func:`check_reduction` returns one :class:`CheckResult` per
(dtype, shape, case), :func:`assert_conforms` raises listing the mismatches.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tritred_core import Reduction

from .compare import OFFSET_ATOL, TORCH_ERROR_SLACK, Comparison, _dtype_name, _leaves, _torch_dtype, compare, tolerance

#: The input transformations :func:`check_reduction` applies (``offset``/``nan``/``inf`` to floating inputs only).
CASES: tuple[str, ...] = ("random", "strided", "offset", "nan", "inf")

@dataclass(frozen=True)
class ShapeCase:
    """An input shape and the ``dim`` passed to ``make_inputs`` (ops without a dim, e.g. layer_norm, ignore it)."""

    shape: tuple[int, ...]
    dim: Any = -1

    def label(self) -> str:
        """``7x33 dim=-1``."""
        return f"{'x'.join(map(str, self.shape)) or 'scalar'} dim={self.dim}"


#: The full set: non-power-of-two rows, a middle dim (column kernels), one long row (split), several long rows
#: (multi pass) and a tall dim=0 reduction; every branch of the built-in launch rules under the interpreter.
DEFAULT_SHAPES: tuple[ShapeCase, ...] = (
    ShapeCase((7, 33), -1),
    ShapeCase((3, 5, 129), 1),
    ShapeCase((1000,), -1),
    ShapeCase((5, 1000), -1),
    ShapeCase((300, 40), 0),
    ShapeCase((4, 6, 14, 14), 1),  # NCHW: batch_norm's 4-D path (14x14 maps); a middle dim of the others
)

#: A short set for ``tritred check`` under the CPU interpreter: rows, columns, one row that needs chunks, and a
#: 4-D NCHW input.
QUICK_SHAPES: tuple[ShapeCase, ...] = (
    ShapeCase((7, 33), -1),
    ShapeCase((3, 4, 9), 1),
    ShapeCase((300,), -1),
    # NCHW: batch_norm's 4-D path (maps of 12: its alignment hint); a middle dim of the others. 4 channels, not 3:
    # the "inf" case's infinities then sit mid-slice, where torch's var_mean gives a NaN mean as tritred does (an
    # inf last in its slice gives torch +-inf: order-dependent, docs/semantics.md).
    ShapeCase((2, 4, 6, 2), 1),
)


@dataclass(frozen=True)
class CheckResult:
    """One check of :func:`check_reduction`: an op, a dtype, a shape and a case.

    ``error`` holds the exception (``Type: message``) when ``impl`` or the harness raised; ``skipped`` marks checks
    that do not apply (``make_inputs`` rejects the shape, dtype outside the spec) and count as ok.
    """

    op: str
    dtype: str
    shape: tuple[int, ...]
    case: str
    ok: bool
    error: str | None = None
    message: str = ""
    dim: Any = -1
    seed: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    skipped: bool = False
    plugin: str | None = field(default=None, compare=False)


def _map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(fn, o) for o in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_tensors(fn, o) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(fn, v) for k, v in obj.items()}
    return obj


def _flat_tensors(args: Sequence[Any], kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    out = [(f"argument {i}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    out += [(f"argument {k!r}", v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return out


def _upcast(t: torch.Tensor) -> torch.Tensor:
    """A float64 copy on the CPU: the value reference is torch's CPU float64 result on every device (torch's
    CUDA kernels differ from its CPU ones on some non-finite inputs, e.g. rms_norm rows holding inf)."""
    if t.dtype.is_floating_point:
        return t.detach().to("cpu", torch.float64, copy=True)
    return t.detach().to("cpu", copy=True)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach().to(a.device)
    eq = a == b
    if a.dtype.is_floating_point:
        eq = eq | (a.isnan() & b.isnan())
    return bool(eq.all())


def _non_contiguous(x: torch.Tensor) -> torch.Tensor:
    """Same values, another layout: reversed dim order in memory (ndim >= 2), every other element (1-D)."""
    if x.dim() >= 2:
        rev = list(range(x.dim()))[::-1]
        return x.permute(rev).contiguous().permute(rev)
    if x.dim() == 1:
        buf = torch.empty(2 * x.shape[0], dtype=x.dtype, device=x.device)
        buf[::2] = x
        return buf[::2]
    return x


def _apply_case(case: str, x: torch.Tensor) -> torch.Tensor | None:
    """``x`` transformed for ``case``; None when the case does not apply to ``x``."""
    if case == "random":
        return x
    if case == "strided":
        return _non_contiguous(x) if x.dim() >= 1 and x.numel() > 1 else None
    if not x.dtype.is_floating_point or x.numel() == 0:
        return None
    if case == "offset":  # a large mean: catches E[x^2] - E[x]^2 and unshifted exp
        return x + 1000
    x = x.clone()
    flat = x.view(-1)
    if case == "nan":
        flat[flat.numel() // 2] = math.nan
        return x
    if case == "inf":
        flat[flat.numel() // 3] = math.inf
        flat[(2 * flat.numel()) // 3] = -math.inf
        return x
    raise ValueError(f"unknown case {case!r}; known: {', '.join(CASES)}")


def _shape_cases(shapes: Iterable[Any] | None) -> list[ShapeCase]:
    if shapes is None:
        return list(DEFAULT_SHAPES)
    out = []
    for s in shapes:
        if isinstance(s, ShapeCase):
            out.append(s)
        elif isinstance(s, (tuple, list)) and len(s) == 2 and isinstance(s[0], (tuple, list)):
            out.append(ShapeCase(tuple(int(v) for v in s[0]), s[1]))
        else:
            out.append(ShapeCase(tuple(int(v) for v in s), -1))
    return out


def _exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _compatible(impl_exc: BaseException, ref_exc: BaseException) -> bool:
    return isinstance(impl_exc, type(ref_exc)) or isinstance(ref_exc, type(impl_exc))


def _run_one(rec: Reduction, device: str | torch.device, dtype: torch.dtype, sc: ShapeCase, case: str,
             seed: int) -> CheckResult | None:
    """One check; None when ``case`` does not apply to this input."""
    name, dt = rec.spec.name, _dtype_name(dtype)

    def _result(ok: bool, message: str = "", error: str | None = None, cmp: Comparison | None = None,
               skipped: bool = False) -> CheckResult:
        return CheckResult(op=name, dtype=dt, shape=sc.shape, case=case, ok=ok, error=error, message=message,
                           dim=sc.dim, seed=seed, max_abs_err=cmp.max_abs_err if cmp else 0.0,
                           max_rel_err=cmp.max_rel_err if cmp else 0.0, skipped=skipped, plugin=rec.spec.plugin)

    try:
        args, kwargs = rec.make_inputs(sc.shape, dtype, device=device, dim=sc.dim, seed=seed)
    except (ValueError, IndexError, NotImplementedError) as e:  # the contract's "this shape, dim or dtype does not
        # apply" (tritred_core.Reduction)
        return _result(True, f"not applicable: make_inputs rejects this shape ({_exc(e)})", skipped=True)
    except Exception as e:  # a bug in the record's input builder: the check fails, it does not pass by skipping
        return _result(False, f"make_inputs raised {_exc(e)}", error="harness")
    args = list(args)
    if not args or not isinstance(args[0], torch.Tensor):
        return _result(False, "make_inputs must return the input tensor first", error="harness")
    x = _apply_case(case, args[0])
    if x is None:
        return None
    args[0] = x

    pristine = [(label, t.detach().clone()) for label, t in _flat_tensors(args, kwargs)]
    # float64 reference (values) and dtype-exact reference (structure, dtypes, torch's own error).
    args64 = [_upcast(a) if isinstance(a, torch.Tensor) else a for a in args]
    kwargs64 = {k: _upcast(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    before64 = [t.clone() for _, t in _flat_tensors(args64, kwargs64)]
    native_args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    native_kwargs = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    ref64: Any = None
    ref64_exc: BaseException | None = None
    native: Any = None
    native_exc: BaseException | None = None
    try:
        ref64 = rec.reference(*args64, **kwargs64)
    except Exception as e:
        ref64_exc = e
    try:
        native = rec.reference(*native_args, **native_kwargs)
    except Exception as e:
        native_exc = e

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's numpy warns on NaN/inf
        try:
            out = rec.impl(*args, **kwargs)
            impl_exc: BaseException | None = None
        except Exception as e:
            out, impl_exc = None, e

    if ref64_exc is not None and native_exc is not None:  # the reference rejects this input: so must impl
        if impl_exc is None:
            return _result(False, f"torch raises {_exc(native_exc)} but the implementation returned a result")
        if _compatible(impl_exc, native_exc):
            return _result(True, f"both raise ({type(native_exc).__name__} / {type(impl_exc).__name__})")
        return _result(False, f"torch raises {type(native_exc).__name__}, the implementation {_exc(impl_exc)}",
                      error=_exc(impl_exc))
    if impl_exc is not None:
        return _result(False, "the implementation raised", error=_exc(impl_exc))

    # Structure, shapes, dtypes: torch's dtype-exact call (or its meta kernel when CPU torch lacks the dtype).
    expected = native
    if native_exc is not None:
        try:
            expected = rec.reference(*_map_tensors(lambda t: t.to("meta"), native_args),
                                     **_map_tensors(lambda t: t.to("meta"), native_kwargs))
        except Exception:
            expected = None
    values_ref = ref64 if ref64_exc is None else native
    if expected is not None:
        shape_check = _structure(out, expected, device)
        if shape_check:
            return _result(False, shape_check)
    pairs, err = _leaves(out, values_ref)
    if err:
        return _result(False, err)
    out_dtypes = [o.dtype for _, o, _ in pairs]
    exp_pairs = _leaves(expected, values_ref)[0] if expected is not None else []
    tol_dtypes = [o.dtype for _, o, _ in exp_pairs] if len(exp_pairs) == len(pairs) else out_dtypes
    atols: list[float | None] = [None] * len(pairs)
    if native_exc is None and values_ref is ref64:
        npairs = _leaves(native, ref64)[0]
        atols = [_slack_atol(n, r, d) for (_, n, r), d in zip(npairs, tol_dtypes)] if len(npairs) == len(pairs) \
            else atols
    if case == "offset":
        atols = [_offset_atol(a, d) for a, d in zip(atols, tol_dtypes)]
    cmp = compare(out, values_ref, tol_dtypes, atol=atols, check_dtype=False)
    if not cmp.ok:
        return _result(False, cmp.message, cmp=cmp)

    # Inputs: untouched, unless the reference updates them in place too (batch_norm's running statistics).
    after = _flat_tensors(args, kwargs)
    after64 = _flat_tensors(args64, kwargs64)
    native_after = _flat_tensors(native_args, native_kwargs)
    for i, ((label, orig), (_, now)) in enumerate(zip(pristine, after)):
        ref_changed = ref64_exc is None and not _same_bits(before64[i], after64[i][1])
        if not ref_changed:
            if not _same_bits(orig, now):
                return _result(False, f"{label} was modified by the implementation (torch leaves it untouched)",
                              cmp=cmp)
            continue
        a = None
        if native_exc is None:
            a = _slack_atol(native_after[i][1], after64[i][1], now.dtype)
        c = compare(now, after64[i][1], now.dtype, atol=a, check_dtype=False)
        if not c.ok:
            return _result(False, f"in-place update of {label} differs from torch's: {c.message}", cmp=c)
    return _result(True, cmp=cmp)


def _offset_atol(atol: float | None, dtype: torch.dtype) -> float | None:
    floor = OFFSET_ATOL.get(_dtype_name(dtype))
    if floor is None:
        return atol
    return max(floor, atol if atol is not None else tolerance(dtype)[0])


def _slack_atol(native: torch.Tensor, ref64: torch.Tensor, dtype: torch.dtype) -> float | None:
    """``atol`` widened to TORCH_ERROR_SLACK x torch's own error in ``dtype`` (None: the dtype's default)."""
    if not dtype.is_floating_point or native.shape != ref64.shape or native.numel() == 0:
        return None
    n, r = native.detach().to(torch.float64), ref64.detach().to(native.device, torch.float64)
    ok = n.isfinite() & r.isfinite()
    if not ok.any():
        return None
    torch_err = float((n - r).abs()[ok].max())
    return max(tolerance(dtype)[0], TORCH_ERROR_SLACK * torch_err)


def _structure(out: Any, expected: Any, device: str | torch.device) -> str:
    """'' when ``out`` has torch's structure, shapes and dtypes (and lives on ``device``), else the mismatch."""
    pairs, err = _leaves(out, expected)
    if err:
        return err
    want = torch.device(device)
    for path, o, e in pairs:
        if tuple(o.shape) != tuple(e.shape):
            return f"{path}: shape {tuple(o.shape)}, torch gives {tuple(e.shape)}"
        if o.dtype != e.dtype:
            return f"{path}: dtype {_dtype_name(o.dtype)}, torch gives {_dtype_name(e.dtype)}"
        if o.device.type != want.type:
            return f"{path}: on {o.device}, expected {want}"
    return ""


def fresh_seed() -> int:
    """A fresh base seed for :func:`check_reduction` (from the OS: independent of torch's and random's state)."""
    return random.SystemRandom().randrange(1 << 30)


def check_reduction(rec: Reduction, device: str | torch.device = "cpu",
                    dtypes: Iterable[torch.dtype | str] | None = None, shapes: Iterable[Any] | None = None,
                    seed: int | None = None, cases: Iterable[str] | None = None) -> list[CheckResult]:
    """Run ``rec.impl`` against ``rec.reference`` over dtypes x shapes x cases; one :class:`CheckResult` each.

    Args:
        rec: a registered reduction (``get_registry().get(name)``).
        device: where inputs are built and everything runs (``"cuda"``, or ``"cpu"`` under
            ``TRITON_INTERPRET=1``).
        dtypes: dtypes to check (names or torch dtypes); default ``rec.spec.dtypes``. Dtypes outside the spec
            give a skipped result.
        shapes: :class:`ShapeCase` objects, ``(shape, dim)`` pairs or plain shapes (``dim=-1``); default
            :data:`DEFAULT_SHAPES`.
        seed: base seed (check ``i`` uses ``seed + i``); default a fresh random seed per call. Each result
            records its seed, so a failure reproduces with ``rec.make_inputs(shape, dtype, ..., seed=seed)``.
        cases: a subset of :data:`CASES`; default all of them.

    Returns:
        Results in order; ``all(r.ok for r in results)`` means the reduction conforms.
    """
    base = fresh_seed() if seed is None else int(seed)
    wanted_cases = tuple(CASES if cases is None else cases)
    unknown = set(wanted_cases) - set(CASES)
    if unknown:
        raise ValueError(f"unknown cases {sorted(unknown)}; known: {', '.join(CASES)}")
    results: list[CheckResult] = []
    i = 0
    for dt in (rec.spec.dtypes if dtypes is None else dtypes):
        name = _dtype_name(dt)
        if name not in rec.spec.dtypes:
            results.append(CheckResult(op=rec.spec.name, dtype=name, shape=(), case="-", ok=True, skipped=True,
                                       message=f"dtype {name} is not in the spec ({', '.join(rec.spec.dtypes)})",
                                       plugin=rec.spec.plugin))
            continue
        dtype = _torch_dtype(dt)
        for sc in _shape_cases(shapes):
            for case in wanted_cases:
                try:
                    r = _run_one(rec, device, dtype, sc, case, base + i)
                except Exception as e:  # a bug of the harness or of a record's helper: report, keep going
                    r = CheckResult(op=rec.spec.name, dtype=name, shape=sc.shape, case=case, ok=False,
                                    error=_exc(e), message="the check itself failed", dim=sc.dim, seed=base + i,
                                    plugin=rec.spec.plugin)
                i += 1
                if r is not None:
                    results.append(r)
    return results


def assert_conforms(rec: Reduction, device: str | torch.device = "cpu", **kwargs: Any) -> list[CheckResult]:
    """:func:`check_reduction`, raising AssertionError that lists every mismatch; returns the results."""
    results = check_reduction(rec, device, **kwargs)
    bad = [r for r in results if not r.ok]
    if bad:
        lines = [f"{r.op} {r.dtype} shape={r.shape} dim={r.dim} case={r.case} seed={r.seed}: "
                 f"{r.error or ''} {r.message}".strip() for r in bad]
        raise AssertionError(f"{rec.spec.name}: {len(bad)} of {len(results)} checks failed:\n" + "\n".join(lines))
    return results
