"""The peers' providers against CPU stand-ins of quack, Liger-Kernel and FlagGems (tests/fake_peers), with the real
packages' signatures: forward and training passes, their conventions (2-D rows, float32 weights, a float32 loss,
gradients written in place) and the cases they refuse, skipped with a note."""

from __future__ import annotations

from typing import Any

import pytest
from bench_helpers import CPU_ONLY
from tritred_bench import Case, run

pytestmark = CPU_ONLY

PEERS = ["eager", "liger", "flaggems", "quack"]
LN = {"normalized_shape": (64,), "weight": True, "bias": True}


def _run(cases: list[Case], pass_: str, registry: Any = None) -> Any:
    return run(cases, providers=PEERS, device="cpu", quick=True, progress=False, copy_gbps=1.0, pass_=pass_,
               registry=registry)


def _status(report: Any) -> dict[str, dict[str, tuple[str, str]]]:
    return {r.case.label: {p: (m.status, m.message) for p, m in r.measurements.items()} for r in report.results}


def test_peers_train_and_refuse(fake_peers: str, training_registry: Any) -> None:
    cases = [Case("softmax", (4, 64), "bfloat16", -1, True),
             Case("layer_norm", (2, 3, 64), "bfloat16", params=LN),
             Case("rms_norm", (4, 64), "float32", params={"normalized_shape": (64,), "weight": True}),
             Case("cross_entropy", (8, 96), "bfloat16"),
             Case("cross_entropy", (8, 96), "float32", params={"reduction": "none", "ignored": 0.25}),
             Case("softmax", (4, 60), "bfloat16", -1, True),  # rows quack does not take
             Case("softmax", (4, 64), "float32", 0, True),  # not over the last dim
             Case("softmax", (4, 64), "float32", -1, True, {"view": "sliced"}),
             Case("cross_entropy", (8, 96), "float32", params={"label_smoothing": 0.1}),
             Case("log_softmax", (4, 64), "float32", -1, True)]
    labels = [c.label for c in cases]
    got = _status(_run(cases, "both", training_registry))
    for label in labels[:5]:  # every peer checked and timed
        for p in PEERS:
            assert got[label][p][0] == "ok", (label, p, got[label][p])
    assert got[labels[5]]["quack"] == ("skipped", "quack wants rows of a multiple of 8 elements (bfloat16)")
    assert got[labels[5]]["liger"][0] == "ok"
    assert got[labels[6]]["quack"][0] == got[labels[6]]["liger"][0] == "skipped"
    assert "last dim" in got[labels[6]]["liger"][1]
    assert got[labels[7]]["quack"] == ("skipped", "quack takes contiguous rows")
    assert got[labels[8]]["quack"][0] == "skipped" and "label smoothing" in got[labels[8]]["quack"][1]
    assert got[labels[8]]["liger"][0] == "ok"
    assert got[labels[9]]["quack"] == ("skipped", "not offered")
    assert got[labels[9]]["liger"] == ("skipped", "not offered")
    assert got[labels[9]]["flaggems"][0] == "ok"
    t = got[labels[3]]["tritred"]  # tritred's op or its stand-in record (torch's, with autograd)
    assert t[0] == "ok" or (t[0] == "skipped" and "no autograd" in t[1]), t
    # the forward pass (tritred under the interpreter: a few cases)
    fwd = _status(_run(cases[:5:2], "forward", training_registry))
    for label in labels[:5:2]:
        for p in PEERS:
            assert fwd[label][p][0] == "ok", (label, p, fwd[label][p])


def test_backward_pass_with_peers(fake_peers: str) -> None:
    report = _run([Case("layer_norm", (4, 64), "float32", params=LN)], "backward")
    r = report.results[0]
    for p in PEERS:
        m = r.measurements[p]
        assert m.status in ("ok", "skipped"), (p, m.message)
        assert m.step_ms is not None and m.forward_ms is not None, p
        if m.status == "ok":
            assert m.ms == pytest.approx(m.step_ms - m.forward_ms)
    assert report.versions["quack"] == "0.0-fake"
