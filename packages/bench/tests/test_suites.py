"""Suites: the public suite is shipped intact, cases parse and label as the reports name them."""

from __future__ import annotations

import json

import pytest
from tritred_bench import Case, builtin_suites, filter_cases, load_suite


def test_builtin_suites_are_package_data() -> None:
    assert {"h200", "offsuite", "odd", "quick", "latency", "training", "random"} <= set(builtin_suites())


def test_public_suite() -> None:
    cases, about = load_suite("h200")
    assert len(cases) == 103
    assert "read once" in about
    labels = [c.label for c in cases]
    assert len(set(labels)) == len(labels), "labels identify cases"
    assert load_suite("public")[0] == cases
    full = [c for c in cases if c.op == "sum" and c.has_dim and c.dim is None]
    assert {c.dtype for c in full} == {"bfloat16", "float32"}
    assert full[0].op_label == "sum (all)" and full[0].shape == (268435456,)
    ln = next(c for c in cases if c.op == "layer_norm")
    assert not ln.has_dim and ln.params["normalized_shape"] == (ln.shape[-1],) and ln.params["weight"] is True
    rms = next(c for c in cases if c.op == "rms_norm")
    assert rms.params == {"normalized_shape": (rms.shape[-1],), "weight": True}
    bn = next(c for c in cases if c.op == "batch_norm")
    assert bn.op_label == "batch_norm (train)" and bn.params["training"] is True
    sm = next(c for c in cases if c.op == "softmax")
    assert sm.label == "softmax dim=-1 16384x4096 bfloat16"


def test_case_roundtrip() -> None:
    for c in load_suite("h200")[0] + load_suite("quick")[0]:
        assert Case.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_filter_cases() -> None:
    cases, _ = load_suite("h200")
    only = filter_cases(cases, ops=["softmax", "max"], dtypes=["float32"])
    assert only and {c.op for c in only} == {"softmax", "max"} and {c.dtype for c in only} == {"float32"}
    assert filter_cases(cases) == cases


def test_suite_file_and_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "s.json"
    f.write_text(json.dumps([{"op": "sum", "shape": [4, 5], "dim": 0, "dtype": "float32"}]))
    cases, about = load_suite(f)
    assert cases == [Case("sum", (4, 5), "float32", 0, True, {})] and about == ""
    with pytest.raises(ValueError, match="unknown suite"):
        load_suite("nope")
    with pytest.raises(FileNotFoundError):
        load_suite(tmp_path / "missing.json")
    f.write_text(json.dumps({"cases": [{"op": "sum", "dtype": "float32"}]}))
    with pytest.raises(ValueError, match="shape"):
        load_suite(f)
    f.write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        load_suite(f)
