"""The training passes (CPU interpreter, tiny shapes): byte counts, timing arithmetic, the gradient check, notes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from bench_helpers import CPU_ONLY
from tritred_bench import (
    PROVIDERS,
    TRAINING,
    Case,
    Provider,
    Unsupported,
    load_suite,
    pass_times,
    rates,
    run,
    run_case,
    torch_op,
    with_view,
)
from tritred_bench import runner as runner_mod
from tritred_bench.inputs import clone_inputs
from tritred_bench.providers import LigerProvider, QuackProvider
from tritred_core import get_registry

pytestmark = CPU_ONLY


def _run(cases: list[Case], providers: list[str], pass_: str = "both", **kw: Any) -> Any:
    return run(cases, providers=providers, device="cpu", quick=True, progress=False, copy_gbps=1.0, pass_=pass_, **kw)


# -- arithmetic --------------------------------------------------------------------------------------------------------

def test_pass_times_and_rates() -> None:
    assert pass_times(5.0, 2.0, "backward") == 3.0
    assert pass_times(5.0, None, "both") == 5.0 and pass_times(5.0, 2.0, "both") == 5.0
    assert pass_times(5.0, None, "forward") == 5.0
    with pytest.raises(ValueError):
        pass_times(5.0, None, "backward")
    gbps, pct = rates(3_000_000, 1.5, copy_gbps=4.0)  # 3 MB in 1.5 ms: 2 GB/s, half of 4
    assert gbps == pytest.approx(2.0) and pct == pytest.approx(50.0)
    assert rates(100, 0.0, 4.0) == (None, None) and rates(100, -1.0, 4.0) == (None, None)


def test_backward_is_the_step_minus_the_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step and the forward are timed apart (no retain_graph); backward reports their medians' difference."""
    timed: list[str] = []

    def fake_time_fn(fn: Any, device: Any, **kw: Any) -> float:
        fn()  # it runs
        name = getattr(fn, "__name__", "")
        timed.append(name)
        return 5.0 if name == "training_step" else 2.0

    monkeypatch.setattr(runner_mod, "time_fn", fake_time_fn)
    case = Case("softmax", (4, 64), "float32", -1, True)
    m = _run([case], ["eager"], pass_="backward").results[0]
    e = m.measurements["eager"]
    assert e.status == "ok", e.message
    assert (e.step_ms, e.forward_ms, e.ms) == (5.0, 2.0, 3.0)
    assert m.bytes == 3 * 4 * 64 * 4  # backward: y and dy read, dx written
    assert e.gbps == pytest.approx(m.bytes / 3e6)
    # (tritred and eager: each timed once as a step and once as a forward)
    assert timed.count("training_step") == len(m.measurements) and len(timed) == 2 * len(m.measurements)
    both = _run([case], ["eager"], pass_="both").results[0]
    assert both.measurements["eager"].ms == 5.0 and both.measurements["eager"].forward_ms is None
    assert both.bytes == 5 * 4 * 64 * 4


# -- bytes -------------------------------------------------------------------------------------------------------------

def _bytes(case: Case, pass_: str = "both", registry: Any = None) -> int:
    """The case's byte count for ``pass_`` (no provider run)."""
    r = run_case((registry or get_registry()).get(case.op), case, [], torch.device("cpu"), 1.0, pass_=pass_)
    assert not r.error, r.error
    return int(r.bytes)


def test_step_bytes_per_op() -> None:
    n, f32, bf16 = 8 * 64, 4, 2
    assert _bytes(Case("softmax", (8, 64), "float32", -1, True)) == 5 * n * f32
    assert _bytes(Case("log_softmax", (8, 64), "bfloat16", -1, True)) == 5 * n * bf16
    ln = {"normalized_shape": (64,), "weight": True, "bias": True}
    assert _bytes(Case("layer_norm", (8, 64), "float32", params=ln)) == 5 * n * f32 + 3 * 64 * f32 + 2 * 64 * f32
    no_affine = {"normalized_shape": (64,), "weight": False, "bias": False}
    assert _bytes(Case("layer_norm", (8, 64), "float32", params=no_affine)) == 5 * n * f32
    forward = _bytes(Case("softmax", (8, 64), "float32", -1, True), "forward")
    assert forward == 2 * n * f32
    assert _bytes(Case("softmax", (8, 64), "float32", -1, True), "backward") == 3 * n * f32
    # other ops: forward + the saved tensors and dy read, dx written
    s = Case("sum", (8, 64), "float32", -1, True)
    assert _bytes(s) == _bytes(s, "forward") + 8 * f32 + n * f32  # dy (8 sums) read, dx written
    a = Case("amax", (8, 64), "float32", -1, True)
    assert _bytes(a) == _bytes(a, "forward") + n * f32 + 2 * 8 * f32 + n * f32  # x and y saved, dy, dx
    mx = Case("max", (8, 64), "float32", -1, True)
    assert _bytes(mx) == _bytes(mx, "forward") + 8 * 8 + 8 * f32 + n * f32  # int64 indices, dy, dx
    assert set(TRAINING) >= {"softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "batch_norm"}


def test_step_bytes_rms_norm_and_cross_entropy(training_registry: Any) -> None:
    """(tritred's records, or torch-only stand-ins where tritred does not register these ops yet)"""
    c = Case("rms_norm", (8, 64), "float32", params={"normalized_shape": (64,), "weight": True})
    assert _bytes(c, registry=training_registry) == 5 * 8 * 64 * 4 + 3 * 64 * 4
    c = Case("rms_norm", (8, 64), "bfloat16", params={"normalized_shape": (64,), "weight": False})
    assert _bytes(c, registry=training_registry) == 5 * 8 * 64 * 2
    c = Case("cross_entropy", (8, 100), "bfloat16")
    # logits read, their gradient written, int64 targets read
    assert _bytes(c, registry=training_registry) == 2 * 8 * 100 * 2 + 8 * 8
    c = Case("cross_entropy", (8, 100), "float32", params={"weight": True, "reduction": "sum"})
    assert _bytes(c, registry=training_registry) == 2 * 8 * 100 * 4 + 8 * 8 + 100 * 4  # + class weights


# -- the gradient check ------------------------------------------------------------------------------------------------

class _Scaled(torch.autograd.Function):
    """The identity whose backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        return g * ctx.scale, None


class _WrongGrad(Provider):
    """torch's op, its input's gradient 1 % off."""

    name = "wrong_grad"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        fn = torch_op(rec)
        return lambda: fn(_Scaled.apply(args[0], 1.01), *args[1:], **kwargs)


class _WrongWeightGrad(Provider):
    """layer_norm with its weight's gradient 1 % off."""

    name = "wrong_weight_grad"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        fn = torch_op(rec)
        x, ns, w, b = args[:4]
        return lambda: fn(x, ns, _Scaled.apply(w, 1.01), b, *args[4:], **kwargs)


class _Detached(Provider):
    """A forward without autograd (as tritred's ops before their backward)."""

    name = "detached"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        fn = torch_op(rec)
        return lambda: fn(*args, **kwargs).detach()


class _Refuses(Provider):
    name = "refuses"

    def prepare(self, rec: Any, case: Any, args: Any, kwargs: Any) -> Any:
        raise Unsupported("takes rows of a multiple of 8 elements")


def test_gradient_check_catches_wrong_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    for p in (_WrongGrad, _WrongWeightGrad, _Detached, _Refuses):
        monkeypatch.setitem(PROVIDERS, p.name, p)
    sm = Case("softmax", (4, 32), "float32", -1, True)
    ln = Case("layer_norm", (4, 32), "float32", params={"normalized_shape": (32,), "weight": True, "bias": True})
    report = _run([sm, ln], ["eager", "wrong_grad", "wrong_weight_grad", "detached", "refuses"])
    r_sm, r_ln = report.results
    assert r_sm.measurements["eager"].status == "ok" and r_ln.measurements["eager"].status == "ok"
    w = r_sm.measurements["wrong_grad"]
    assert w.status == "failed" and "wrong gradient: gradient of input" in w.message and w.ms is None
    assert r_ln.measurements["wrong_grad"].status == "failed"
    ww = r_ln.measurements["wrong_weight_grad"]
    assert ww.status == "failed" and "gradient of weight" in ww.message, ww.message
    d = r_sm.measurements["detached"]
    assert d.status == "skipped" and "no autograd" in d.message
    assert r_sm.measurements["refuses"].status == "skipped"
    assert r_sm.measurements["refuses"].message == "takes rows of a multiple of 8 elements"
    assert r_sm.best_peer(["eager", "wrong_grad", "detached"]) == "eager"


def test_training_over_views_and_tuples_and_ties() -> None:
    """Inputs read through views keep their layout; outputs with several tensors (var_mean) and indices
    (max, whose bfloat16 rows tie) get their gradients checked; batch_norm's weight and bias train."""
    cases = [Case("softmax", (6, 40), "bfloat16", -1, True, {"view": "sliced"}),
             Case("var_mean", (6, 40), "float32", 1, True),
             Case("max", (64, 512), "bfloat16", -1, True),
             Case("batch_norm", (4, 3, 5, 5), "float32", params={"training": True, "weight": True, "bias": True})]
    report = _run(cases, ["eager"])
    for r in report.results:
        e = r.measurements["eager"]
        assert e.status == "ok", (r.case.label, e.message)
        assert r.bytes > 0
    t = report.results[0].measurements["tritred"]  # no autograd yet: a note; once it has one, checked like eager
    assert t.status == "ok" or (t.status == "skipped" and "no autograd" in t.message), t.message


def test_views_and_clones_keep_their_layout() -> None:
    x = torch.randn(3, 5, 10)
    for view, check in (("transposed", lambda v: v.stride()[-2:] == (1, 5)),
                        ("sliced", lambda v: v.stride() == (5 * 64, 64, 1)),
                        ("strided", lambda v: v.stride()[-1] == 2)):
        v = with_view(x, view)
        assert torch.equal(v, x) and check(v), view
        c = clone_inputs(v)
        assert c.stride() == v.stride() and torch.equal(c, v) and c.data_ptr() != v.data_ptr(), view
    cl = with_view(torch.randn(2, 3, 4, 4), "channels_last")
    assert cl.is_contiguous(memory_format=torch.channels_last)


# -- providers that are not installed, and what the peers take ---------------------------------------------------------

def test_missing_peers_are_skipped_with_a_note() -> None:
    case = Case("softmax", (4, 64), "float32", -1, True)
    r = _run([case], ["liger", "flaggems", "quack"]).results[0]
    for p in ("liger", "flaggems", "quack"):
        m = r.measurements[p]
        if PROVIDERS[p]().available():  # not installed here
            assert m.status == "skipped" and "not importable" in m.message, (p, m.message)


def test_peer_constraints_are_notes() -> None:
    rec = get_registry().get("softmax")
    x = torch.randn(4, 70000)
    with pytest.raises(Unsupported, match="65536"):
        LigerProvider().prepare(rec, Case("softmax", (4, 70000), "float32", -1, True), (x,), {"dim": -1})
    with pytest.raises(Unsupported, match="last dim"):
        LigerProvider().prepare(rec, Case("softmax", (4, 6), "float32", 0, True), (torch.randn(4, 6),), {"dim": 0})
    q = QuackProvider()
    with pytest.raises(Unsupported, match="CUDA"):
        q._rows(torch.randn(4, 64))
    assert q.refusal(AssertionError("Input must be 2D")) == "quack refused: AssertionError: Input must be 2D"
    assert q.refusal(RuntimeError("CUDA error")) is None
    ln = get_registry().get("layer_norm")
    case = Case("layer_norm", (4, 8), "bfloat16")
    args = (torch.randn(4, 8).bfloat16(), (8,), torch.randn(8).bfloat16(), torch.randn(8).bfloat16())
    a, _ = q.adapt_inputs(ln, case, args, {"eps": 1e-5})
    assert a[2].dtype == a[3].dtype == torch.float32 and torch.equal(a[2], args[2].float())
    assert a[0] is args[0]


def test_training_suite() -> None:
    cases, about = load_suite("training")
    assert "--pass both" in about
    got = [(c.op, c.shape, c.dtype) for c in cases]
    bf, f32 = "bfloat16", "float32"
    assert got == [("softmax", (16384, 4096), bf), ("softmax", (4096, 32768), bf), ("softmax", (65536, 1024), f32),
                   ("layer_norm", (16384, 4096), bf), ("layer_norm", (4096, 16384), bf),
                   ("layer_norm", (65536, 1024), f32), ("rms_norm", (16384, 4096), bf),
                   ("rms_norm", (65536, 1024), bf), ("cross_entropy", (8192, 128256), bf),
                   ("cross_entropy", (16384, 32000), f32)]
    assert all(c.params.get("weight") is True for c in cases if c.op in ("layer_norm", "rms_norm"))
    assert len({c.label for c in cases}) == 10


def test_readme_states_each_ops_step_bytes() -> None:
    """packages/bench/README.md's table quotes TRAINING's rules (one place: the table keyed by op)."""
    from pathlib import Path

    from tritred_bench.training import DEFAULT_STEP

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for op, spec in TRAINING.items():
        assert f"| {spec.rule} |" in readme, op
        row = next(line for line in readme.splitlines() if line.endswith(f"| {spec.rule} |"))
        assert op in row.split("|")[1], op
    assert DEFAULT_STEP.rule in readme


def test_training_reports_round_trip(tmp_path: Any) -> None:
    from tritred_bench import merge_reports, read_json, write_json

    case = Case("softmax", (4, 32), "float32", -1, True)
    both = _run([case], ["eager"], memory=True)
    back = read_json(write_json(both, tmp_path / "b.json"))
    assert back.pass_ == "both" and back.to_dict() == both.to_dict()
    m = back.results[0].measurements["eager"]
    assert m.step_ms is not None and m.peak_bytes is None  # (memory is measured on CUDA only)
    fwd = _run([case], ["eager"], pass_="forward")
    with pytest.raises(ValueError, match="different passes"):
        merge_reports([both, fwd])
