"""The conformance kit: run a registered reduction against its torch reference (``tritred check``).

Plugin authors run it on their own records::

    from tritred_core import get_registry
    from tritred_ops.testing import assert_conforms, check_reduction

    results = check_reduction(get_registry().get("my_op"), device="cuda")
    assert_conforms(get_registry().get("my_op"), device="cuda")   # raises AssertionError listing mismatches

How one check runs (:func:`check_reduction`): ``rec.make_inputs`` builds a random call; a *case* transforms its
first tensor (``random`` leaves it, ``strided`` gives it a non-contiguous layout with the same values,
``offset`` adds 1000, ``nan``/``inf`` inject non-finite values). Then

- ``rec.reference`` runs on float64-upcast copies of the floating inputs: the values to compare against;
- ``rec.reference`` runs on copies in the original dtypes: the output structure, shape and dtype torch gives,
  and torch's own rounding error in that dtype;
- ``rec.impl`` runs on the inputs themselves.

:func:`compare` then requires the same structure (tensor, tuple, named tuple with the same field names), shapes
and dtypes as torch's dtype-exact call, NaN and ±inf in exactly the same positions as the float64 reference
(cast to the output dtype, so values that overflow that dtype count as inf), integer/bool/index outputs exactly
equal, and floats within ``atol + rtol * |ref|`` with ``(atol, rtol)`` from :data:`TOLERANCES` for the output
dtype. ``atol`` is widened to twice torch's own error in the same dtype when that is larger (tritred must be about
as accurate as torch, not more accurate than the dtype allows), and to :data:`OFFSET_ATOL` in the ``offset`` case
(an fp32 mean of values around 1000 is off by ~1e-4 however it is summed; cancellation errs by 1e-1 and more).

Inputs must not be modified by ``impl``, except those the reference modifies too (batch_norm's running
statistics): those must end up as torch's in-place update left them, within the same tolerances. When the
reference raises for an input, ``impl`` must raise a compatible exception.

:class:`Sm90Driver` stands in for Triton's active driver so that kernels compile for an H200 (sm_90) without a GPU
(``kernel.warmup``): what only compiling shows, checked on any machine; :func:`registers` reads a compiled kernel's
registers per thread from its cubin (occupancy without a GPU).
"""

from .check import (
    CASES,
    DEFAULT_SHAPES,
    QUICK_SHAPES,
    CheckResult,
    ShapeCase,
    assert_conforms,
    check_reduction,
    fresh_seed,
)
from .compare import OFFSET_ATOL, TOLERANCES, TORCH_ERROR_SLACK, Comparison, compare, tolerance
from .sm90 import Sm90Driver, ptx_param_sizes, registers

__all__ = [
    "CASES",
    "DEFAULT_SHAPES",
    "OFFSET_ATOL",
    "QUICK_SHAPES",
    "TOLERANCES",
    "TORCH_ERROR_SLACK",
    "CheckResult",
    "Comparison",
    "ShapeCase",
    "Sm90Driver",
    "assert_conforms",
    "check_reduction",
    "compare",
    "fresh_seed",
    "ptx_param_sizes",
    "registers",
    "tolerance",
]
