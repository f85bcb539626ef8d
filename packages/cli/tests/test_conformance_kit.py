"""tritred_ops.testing, the conformance kit behind `tritred check`: what it accepts and what it catches.

Mostly torch-only fake reductions (what a third-party plugin registers), so these run in a blink.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from cli_helpers import fake_reduction
from tritred_core import Problem, Reduction, ReductionSpec, get_registry
from tritred_ops.testing import CASES, ShapeCase, assert_conforms, check_reduction, compare, tolerance

SMALL = [ShapeCase((7, 33), -1), ShapeCase((3, 5, 9), 1), ShapeCase((50,), -1)]


def _bad(results: list[Any]) -> list[Any]:
    return [r for r in results if not r.ok]


# -- compare -------------------------------------------------------------------------------------------------------

def test_compare_rules() -> None:
    a = torch.tensor([1.0, 2.0, math.nan, math.inf])
    assert compare(a, a.clone(), torch.float32).ok
    assert compare(a + 1e-7, a, "float32").ok
    c = compare(a + 1e-3, a)
    assert not c.ok and "outside atol" in c.message and c.max_abs_err == pytest.approx(1e-3, rel=1e-3)
    assert "shape" in compare(a[:3], a).message
    assert "dtype" in compare(a.double(), a).message
    assert compare(a.double(), a, check_dtype=False).ok
    b = a.clone()
    b[2] = 0.0
    assert "NaN positions" in compare(b, a).message
    b = a.clone()
    b[3] = -math.inf
    assert "inf positions" in compare(b, a).message
    assert not compare(torch.tensor([1, 2]), torch.tensor([1, 3])).ok  # integers: exact
    assert tolerance("int64") == (0.0, 0.0) and tolerance(torch.bfloat16) == (1e-2, 1e-2)
    # a float64 reference that overflows the output dtype counts as inf
    assert compare(torch.tensor([math.inf]), torch.tensor([1e39], dtype=torch.float64), check_dtype=False).ok
    # norm-wise: rtol relative to the largest reference value
    assert not compare(torch.tensor([100.0, 1e-3]), torch.tensor([100.0, 0.0])).ok
    assert compare(torch.tensor([100.0, 1e-3]), torch.tensor([100.0, 0.0]), relative_to_max=True).ok


def test_compare_structures() -> None:
    x = torch.randn(4, 5)
    ref = torch.max(x, 1)
    assert compare(torch.max(x, 1), ref).ok
    plain = tuple(ref)
    c = compare(plain, ref)
    assert not c.ok and "named tuple" in c.message
    assert "2 outputs" in compare((ref[0],), ref).message
    assert "Tensor" in compare("x", ref[0]).message
    assert "tuple" in compare(ref[0], ref).message
    assert compare(torch.var_mean(x, 1), torch.var_mean(x, 1)).ok


# -- check_reduction on fakes ----------------------------------------------------------------------------------------

def test_a_correct_reduction_conforms() -> None:
    rec = fake_reduction("good_sum", lambda x, dim=None: torch.sum(x, dim), dtypes=("float32", "bfloat16"))
    results = check_reduction(rec, "cpu", shapes=SMALL)
    assert results and not _bad(results)
    assert {r.case for r in results} == set(CASES) and {r.dtype for r in results} == {"float32", "bfloat16"}
    assert len({r.seed for r in results}) == len(results)
    again = check_reduction(rec, "cpu", shapes=SMALL[:1], cases=["random"])
    assert again[0].seed != results[0].seed  # a fresh seed per call
    fixed = check_reduction(rec, "cpu", shapes=SMALL[:1], cases=["random"], seed=7)
    assert fixed[0].seed == 7 and fixed[0].plugin is None
    assert assert_conforms(rec, shapes=SMALL[:1])


def test_wrong_values_fail() -> None:
    rec = fake_reduction("broken_sum", lambda x, dim=None: torch.sum(x, dim) * 1.01)
    bad = _bad(check_reduction(rec, "cpu", shapes=SMALL, seed=0))
    assert bad and "outside atol" in bad[0].message
    with pytest.raises(AssertionError, match="broken_sum"):
        assert_conforms(rec, shapes=SMALL[:1])


def test_mutating_the_input_fails() -> None:
    def impl(x: torch.Tensor, dim: Any = None) -> torch.Tensor:
        s = torch.sum(x, dim)
        x.mul_(2)
        return s

    bad = _bad(check_reduction(fake_reduction("mutating", impl), "cpu", shapes=SMALL[:1], cases=["random"]))
    assert bad and "argument 0 was modified" in bad[0].message


def test_wrong_dtype_or_structure_fails() -> None:
    rec = fake_reduction("f64_sum", lambda x, dim=None: torch.sum(x.double(), dim))
    bad = _bad(check_reduction(rec, "cpu", shapes=SMALL[:1], cases=["random"]))
    assert bad and "dtype float64, torch gives float32" in bad[0].message
    rec = fake_reduction("plain_max", lambda x, dim=None: tuple(torch.max(x, dim)), reference=torch.max,
                         outputs=("values", "indices"))
    bad = _bad(check_reduction(rec, "cpu", shapes=SMALL[:1], cases=["random"]))
    assert bad and "named tuple" in bad[0].message
    rec = fake_reduction("first_max", lambda x, dim=None: torch.max(x, dim), reference=torch.max)
    assert not _bad(check_reduction(rec, "cpu", shapes=SMALL, cases=["random", "nan", "inf"]))


def test_nan_and_inf_must_propagate() -> None:
    rec = fake_reduction("nansum", lambda x, dim=None: torch.nansum(x, dim))
    results = check_reduction(rec, "cpu", shapes=SMALL[:1])
    assert {r.case for r in _bad(results)} == {"nan"}
    assert "NaN positions" in _bad(results)[0].message


def test_large_mean_catches_cancellation() -> None:
    def naive_var(x: torch.Tensor, dim: Any = None) -> torch.Tensor:  # E[x^2] - E[x]^2 in float32
        n = x.shape[dim] if dim is not None else x.numel()
        mean = x.sum(dim) / n
        return ((x * x).sum(dim) / n - mean * mean) * n / (n - 1)

    rec = fake_reduction("naive_var", naive_var, reference=torch.var)
    results = check_reduction(rec, "cpu", shapes=SMALL[:1], cases=["random", "offset"])
    assert [r.case for r in _bad(results)] == ["offset"]


def test_reference_errors_must_be_mirrored() -> None:
    shapes = [ShapeCase((3, 4), 5)]  # dim out of range: torch raises IndexError
    assert not _bad(check_reduction(fake_reduction("ok", lambda x, dim=None: torch.sum(x, dim)), "cpu",
                                    shapes=shapes, cases=["random"]))
    rec = fake_reduction("lenient", lambda x, dim=None: x.sum())
    bad = _bad(check_reduction(rec, "cpu", shapes=shapes, cases=["random"]))
    assert bad and "torch raises IndexError" in bad[0].message


def test_skipped_checks() -> None:
    rec = fake_reduction("only_f32", lambda x, dim=None: torch.sum(x, dim))
    results = check_reduction(rec, "cpu", dtypes=["float64"], shapes=SMALL[:1])
    assert len(results) == 1 and results[0].skipped and results[0].ok

    def picky(shape: Any, dtype: Any, device: Any = "cpu", dim: Any = -1, seed: int = 0) -> Any:
        if len(shape) < 2:
            raise IndexError("needs [B, C, ...]")
        return (torch.randn(shape).to(dtype),), {"dim": dim}

    rec = rec.model_copy(update={"make_inputs": picky})
    results = check_reduction(rec, "cpu", shapes=[ShapeCase((50,), -1)], cases=["random"])
    assert results[0].skipped and "make_inputs rejects" in results[0].message
    with pytest.raises(ValueError, match="unknown cases"):
        check_reduction(rec, "cpu", cases=["bogus"])


def test_a_broken_input_builder_fails_the_check() -> None:
    """An exception other than the "does not apply" ones (a bug in make_inputs) fails the check: it must not
    pass by skipping every case."""
    def broken(shape: Any, dtype: Any, device: Any = "cpu", dim: Any = -1, seed: int = 0) -> Any:
        return (torch.randn(shape, devce=device).to(dtype),), {"dim": dim}  # (a typo: TypeError)

    rec = fake_reduction("broken_inputs", lambda x, dim=None: torch.sum(x, dim))
    rec = rec.model_copy(update={"make_inputs": broken})
    results = check_reduction(rec, "cpu", shapes=SMALL[:1], cases=["random"])
    assert results and not any(r.ok or r.skipped for r in results)
    assert results[0].error == "harness" and "make_inputs raised TypeError" in results[0].message


def _bn_inputs(shape: Any, dtype: Any, device: Any = "cpu", dim: Any = None, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = torch.randn(shape, generator=g).to(dtype)
    rm, rv = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.5
    return (x, rm, rv, None, None), {"training": True, "momentum": 0.1, "eps": 1e-5}


def _bn_record(name: str, impl: Any) -> Reduction:
    spec = ReductionSpec(name=name, family="normalize", dtypes=("float32",), mirrors="torch.nn.functional.batch_norm")
    return Reduction(spec=spec, impl=impl, reference=F.batch_norm, make_inputs=_bn_inputs,
                     problem=lambda *a, **k: Problem(op=name, dtype="float32", M=1, N=1, K=1))


def test_running_stats_must_match_torchs_update() -> None:
    shapes = [ShapeCase((4, 3, 5))]
    assert not _bad(check_reduction(_bn_record("bn", F.batch_norm), "cpu", shapes=shapes))

    def forgetful(x: Any, rm: Any, rv: Any, *args: Any, **kwargs: Any) -> Any:
        return F.batch_norm(x, rm.clone(), rv.clone(), *args, **kwargs)

    bad = _bad(check_reduction(_bn_record("bn_forgetful", forgetful), "cpu", shapes=shapes, cases=["random"]))
    assert bad and "in-place update of argument 1" in bad[0].message


def test_builtin_batch_norm_updates_running_stats(device: str) -> None:
    rec = get_registry().get("batch_norm")
    results = check_reduction(rec, device, dtypes=["float32"], shapes=[ShapeCase((4, 3, 5))], cases=["random"])
    assert results and not _bad(results), _bad(results)
