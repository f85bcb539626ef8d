"""The accuracy mode: tritred's and eager's errors against float64, on plain inputs and inputs far from zero."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
import torch
from tritred_bench import Case
from tritred_bench.accuracy import (
    INPUTS,
    OFFSET,
    TIE,
    AccuracyResult,
    measure_accuracy,
    print_accuracy,
    relative_error,
    rounding_floor,
    shifted,
    write_accuracy_json,
)
from tritred_bench.providers import TritredProvider

TINY = [Case("sum", (6, 40), "float32", -1, True), Case("var", (5, 33), "float32", 0, True),
        Case("prod", (3, 17), "float32", -1, True), Case("max", (4, 9), "float32", -1, True),
        Case("softmax", (3, 50), "float16", -1, True)]


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_relative_error_is_norm_wise_over_floating_leaves() -> None:
    ref = _rand(7, 5)
    delta = _rand(7, 5, seed=1)
    got = (ref + 1e-3 * delta).float()
    want = float((got.double() - ref).norm() / ref.norm())
    assert relative_error(got, ref) == pytest.approx(want) and 5e-4 < want < 5e-3
    # the largest of the floating leaves; integer leaves (indices) are not counted
    idx = torch.arange(7)
    assert relative_error((got, idx), (ref, idx + 1)) == pytest.approx(want)
    assert relative_error((ref.float(), got), (ref, ref)) == pytest.approx(want)
    # structures or shapes that differ: infinite
    assert relative_error((got,), (ref, ref)) == math.inf
    assert relative_error(got[:3], ref) == math.inf


def test_relative_error_places_nan_and_inf_where_the_rounded_reference_has_them() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf"), 1e300])  # 1e300 rounds to inf in float32
    ok = torch.tensor([1.0, float("nan"), float("inf"), float("inf")])
    assert relative_error(ok, ref) == 0.0
    for bad in ([1.0, 0.0, float("inf"), float("inf")], [1.0, float("nan"), float("-inf"), float("inf")],
                [1.0, float("nan"), float("inf"), 3.0e38], [float("nan"), float("nan"), float("inf"), float("inf")]):
        assert relative_error(torch.tensor(bad), ref) == math.inf, bad


def test_rounding_floor_is_the_least_error_of_the_dtype() -> None:
    ref = _rand(64, 3)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        floor = rounding_floor(ref, ref.to(dtype))
        assert 0 < floor < {torch.float32: 1e-7, torch.float16: 1e-3, torch.bfloat16: 5e-3}[dtype]
        # no result of the dtype is closer: the rounded values moved by a few ulps are farther
        noisy = (ref.to(dtype).double() * (1 + 2 * torch.finfo(dtype).eps)).to(dtype)
        assert relative_error(noisy, ref) > floor
    assert rounding_floor(ref, ref) == 0.0


def test_result_passes_at_or_below_eager_or_at_the_floor() -> None:
    case = TINY[0]
    assert AccuracyResult(case, "plain", 1.0e-7, 1.0e-7, 5e-8).ok
    assert AccuracyResult(case, "plain", (1 + TIE / 2) * 1e-7, 1.0e-7, 5e-8).ok  # within the tie
    assert not AccuracyResult(case, "plain", 1.5e-7, 1.0e-7, 5e-8).ok
    assert AccuracyResult(case, "plain", 3.0e-3, 2.0e-3, 3.0e-3).ok  # correctly rounded: at the floor
    assert AccuracyResult(case, "plain", 0.0, 0.0, 0.0).ok and AccuracyResult(case, "plain", 0.0, 0.0, 0.0).ratio == 1
    assert AccuracyResult(case, "plain", 1e-9, 0.0, 0.0).ratio == math.inf
    assert AccuracyResult(case, "plain").ok is None


def test_shifted_moves_the_input_in_its_own_layout() -> None:
    x = torch.randn(4, 6).t()
    before = x.clone()
    out = shifted((x, 0))
    assert out[0] is x and x.stride() == (1, 6) and torch.equal(x, before + OFFSET)


def test_measure_accuracy_on_both_kinds_of_input(device: str, tmp_path: Any) -> None:
    report = measure_accuracy(TINY, device=device)
    kinds = [(r.case.op, r.inputs) for r in report.results]
    # prod has no offset inputs (its products would overflow)
    assert kinds == [(c.op, k) for c in TINY for k in INPUTS if not (c.op == "prod" and k == "offset")]
    for r in report.results:
        assert r.message == "", (r.case.label, r.message)
        assert r.tritred is not None and r.eager is not None and r.floor is not None
        assert r.floor <= r.eager and r.floor <= r.tritred  # (the floor is a lower bound)
        assert r.tritred < {"float32": 1e-5, "float16": 2e-3}[r.case.dtype], r.case.label
    maxes = [r for r in report.results if r.case.op == "max"]
    assert all(r.tritred == r.eager == 0.0 and r.ok for r in maxes)  # (exact on both sides)
    # the offset inputs are the hard ones for var: both sides see a mean 100 deviations from zero
    assert "of 9" in report.summary() and "offset: " in report.summary()
    data = json.loads(write_accuracy_json(report, tmp_path / "acc.json").read_text())
    assert data["meta"]["kind"] == "accuracy" and data["meta"]["offset"] == OFFSET
    assert [c["inputs"] for c in data["cases"]] == [r.inputs for r in report.results]


def test_float64_cases_are_measured_not_ranked_and_the_json_is_strict(device: str, tmp_path: Any) -> None:
    """A float64 reference is eager's own result (eager's error 0): those cases are not counted either way; an
    infinite ratio or error is written as null (strict JSON)."""
    report = measure_accuracy([Case("softmax", (4, 300), "float64", -1, True), TINY[0]], device=device)
    f64 = [r for r in report.results if r.case.dtype == "float64"]
    assert len(f64) == 2 and all(r.eager == 0 and r.ok is None and r.note for r in f64)
    assert all(r.tritred is not None and r.tritred < 1e-14 for r in f64)
    assert re.search(r"all: \d of 2 ", report.summary())  # (the float32 case's two kinds only, whichever passed)
    report.results[-1].tritred = math.inf  # (a NaN where the reference has none)
    text = write_accuracy_json(report, tmp_path / "acc.json").read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert data["cases"][-1]["tritred"] is None and data["cases"][-1]["ok"] is False


def test_measure_accuracy_finds_a_less_accurate_result(device: str, monkeypatch: Any, capsys: Any) -> None:
    """A provider whose sums carry a relative error of 1e-4 fails every case; one that raises is reported."""
    def noisy(self: Any, rec: Any, case: Case, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        impl = rec.impl
        return lambda: impl(*args, **kwargs) * (1 + 1e-4)

    monkeypatch.setattr(TritredProvider, "prepare", noisy)
    report = measure_accuracy(TINY[:1], device=device)
    assert [r.ok for r in report.results] == [False, False]
    assert all(r.ratio is not None and r.ratio > 10 for r in report.results)
    print_accuracy(report, only_failing=True)
    out = capsys.readouterr().out
    assert "sum dim=-1 6x40 float32" in out and "0 of 2" in out

    monkeypatch.setattr(TritredProvider, "prepare", lambda *a: (_ for _ in ()).throw(ValueError("no such op")))
    report = measure_accuracy(TINY[:1], device=device, inputs=("plain",))
    assert report.results[0].message == "ValueError: no such op" and report.results[0].ok is None
    with pytest.raises(ValueError, match="unknown kind of input"):
        measure_accuracy(TINY[:1], device=device, inputs=("zeros",))
