"""The random suite: the same seed gives the same cases; the cases cover the kinds they should, within budget."""

from __future__ import annotations

import collections
import json
import math

from bench_helpers import CPU_ONLY
from tritred_bench import Case, build_inputs, load_suite, random_cases, run, torch_op
from tritred_bench.random_suite import BUDGETS, DTYPES, HUGE, OP_WEIGHTS, footprint
from tritred_core import get_registry


def test_same_seed_same_cases() -> None:
    a = random_cases(7, 60)
    assert a == random_cases(7, 60)
    assert random_cases(7, 20) == a[:20]  # case i depends on (seed, i) only
    assert random_cases(7, 20, first=40) == a[40:]
    assert random_cases(8, 60) != a
    assert [c.label for c in a] != [c.label for c in random_cases(7, 60, device="cpu")]  # the budget shrinks them
    for c in a:
        assert Case.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    cases, about = load_suite("random", seed=7, count=60)
    assert cases == a and about.startswith("random (seed 7, 60 cases)")
    assert load_suite("random", seed=7, count=20, first=40)[1].startswith("random (seed 7, cases 40-59)")


def test_variety_and_budget() -> None:
    cases = random_cases(1, 600)
    ops = collections.Counter(c.op for c in cases)
    assert set(ops) == set(OP_WEIGHTS)
    assert ops["softmax"] > ops["sum"]  # training's ops weigh twice
    assert {c.dtype for c in cases} == set(DTYPES)
    assert {c.params.get("view") for c in cases} == {None, "transposed", "sliced", "strided", "channels_last"}
    rows = [c for c in cases if c.op in ("softmax", "sum", "layer_norm", "amax") and c.shape]
    assert any(c.shape[-1] < 8 and math.prod(c.shape[:-1]) >= 1 << 16 for c in rows), "tiny rows"
    assert any(c.shape[-1] in HUGE for c in rows), "rows of about a million"
    assert any(c.shape[-1] % 2 == 1 and c.shape[-1] > 100 for c in rows), "odd sizes"
    assert any(c.has_dim and c.dim in (0, 1) and len(c.shape) >= 2 for c in cases), "non-last dims"
    assert any(c.has_dim and c.dim == (0, 2, 3) for c in cases), "per-channel statistics of feature maps"
    assert any(c.has_dim and c.dim is None for c in cases), "full reductions"
    bn = [c for c in cases if c.op == "batch_norm"]
    assert {len(c.shape) for c in bn} >= {2, 3, 4, 5} and {c.params["training"] for c in bn} == {True, False}
    ce = [c for c in cases if c.op == "cross_entropy"]
    assert any(len(c.shape) == 4 for c in ce) and any(c.shape[-1] >= 128000 for c in ce)
    assert any(c.params.get("target") == "probs" for c in ce) and any("ignored" in c.params for c in ce)
    assert any(len(c.shape) == 4 and c.op == "softmax" and c.dim == -1 for c in cases), "attention scores"
    for c in cases:
        assert footprint(c.op, c.shape, c.dtype, c.params) <= BUDGETS["cuda"], c.label
    tiny = random_cases(1, 200, budget=4096)
    assert all(footprint(c.op, c.shape, c.dtype, c.params) <= 4096 for c in tiny)
    only = random_cases(2, 30, ops=["softmax", "rms_norm"], dtypes=["float16"])
    assert {c.op for c in only} == {"softmax", "rms_norm"} and {c.dtype for c in only} == {"float16"}


@CPU_ONLY
def test_random_cases_build_and_run() -> None:
    """Every drawn case builds its inputs (views, targets, parameters) and torch eager runs it; a few run through
    the bench (tritred and eager, the interpreter) in both passes."""
    reg = get_registry().reductions(strict=False)
    cases = random_cases(3, 80, budget=2048)
    for i, c in enumerate(cases):
        if c.op not in reg:
            continue
        rec = reg[c.op]
        args, kwargs = build_inputs(rec, c, "cpu", seed=i)
        if c.params.get("view") in ("sliced", "strided", "transposed") and min(args[0].shape[-2:]) > 1:
            assert not args[0].is_contiguous(), c.label
        torch_op(rec)(*args, **kwargs)
    viewed = next(c for c in cases if c.op in reg and "view" in c.params)  # tritred on a view (interpreter: seconds)
    fwd = run([viewed], providers=["eager"], device="cpu", quick=True, progress=False, copy_gbps=1.0)
    for r in fwd.results:
        assert r.measurements["eager"].status == "ok", (r.case.label, r.measurements["eager"].message)
        assert r.measurements["tritred"].status == "ok", (r.case.label, r.measurements["tritred"].message)
    some = [c for c in cases if c.op in reg][:4]
    train = run(some, providers=["eager"], device="cpu", quick=True, progress=False, copy_gbps=1.0, pass_="both")
    for r in train.results:
        assert r.measurements["eager"].status == "ok", (r.case.label, r.measurements["eager"].message)


def test_every_draw_is_a_valid_torch_call() -> None:
    """Twenty seeds of 100 cases, on meta tensors: torch takes each drawn case's arguments (a prod over a tuple of
    dims, which torch.prod does not take, once slipped through)."""
    reg = get_registry().reductions(strict=False)
    for seed in range(20):
        for i, c in enumerate(random_cases(seed, 100)):
            if c.op in reg:
                args, kwargs = build_inputs(reg[c.op], c, "meta", seed=i)
                torch_op(reg[c.op])(*args, **kwargs)


@CPU_ONLY
def test_unregistered_ops_are_skipped_with_a_note() -> None:
    report = run([Case("no_such_norm", (4, 8), "float32")], providers=["eager"], device="cpu", quick=True,
                 progress=False, copy_gbps=1.0)
    m = report.results[0].measurements
    assert m["tritred"].status == m["eager"].status == "skipped"
    assert "not registered" in m["eager"].message
