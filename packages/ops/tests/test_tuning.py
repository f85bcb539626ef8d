"""tritred tune's machinery: candidates, the cache file, and the built-in heuristic consulting it."""

from __future__ import annotations

import json

import pytest
import torch
import tritred_ops as tr
from tritred_core import Problem, get_registry
from tritred_core.testing import FAKE_H200
from tritred_ops import tuning
from tritred_ops.runtime import device_info
from tritred_ops.runtime.caches import caches


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "tuning.json"
    monkeypatch.setenv(tuning.CACHE_ENV, str(path))
    caches().clear()
    yield path
    caches().clear()


def _spec(op: str):
    return get_registry().get(op).spec


def _problem(N: int = 3000, M: int = 6) -> Problem:
    return Problem(op="softmax", dtype="float32", M=M, N=N, K=1, stride_m=N, stride_n=1)


def test_candidates_are_valid_neighbours():
    reg = get_registry()
    for problem in (_problem(), _problem(N=200), Problem(op="sum", dtype="float32", M=1, N=9000, K=64,
                                                         stride_m=9000 * 64, stride_n=64, stride_k=1)):
        spec = reg.get(problem.op).spec
        base = reg.launch_config(spec, problem, FAKE_H200)
        cands = tuning.candidates(spec, base, problem)
        assert cands[0].launch_fields() == base.launch_fields()
        assert len(cands) > 2
        for c in cands:
            c.check_fits(problem)  # every candidate can compute the problem
            spec.check_takes(c)  # with a strategy and knobs its kernels take


def test_candidates_with_and_without_a_tail_tile():
    """A single pass of one power-of-two tile gets the two-tile neighbour (half the tile plus a tail) when the row
    fits it, and a two-tile base gets the one tile and its loop neighbours (the tail dropped: single passes only)."""
    problem = Problem(op="softmax", dtype="bfloat16", M=32768, N=2049, K=1, stride_m=2049, stride_n=1)
    from tritred_core import LaunchConfig

    spec = _spec(problem.op)
    one = tuning.candidates(spec, LaunchConfig(strategy="single_pass", BLOCK_N=4096, num_warps=4), problem)
    assert any(c.BLOCK_N == 2048 and c.BLOCK_TAIL == 16 and c.strategy == "single_pass" for c in one)
    two = tuning.candidates(spec, LaunchConfig(strategy="single_pass", BLOCK_N=2048, BLOCK_TAIL=16, num_warps=1),
                            problem)
    assert any(c.BLOCK_N == 4096 and c.BLOCK_TAIL == 0 and c.strategy == "single_pass" for c in two)
    assert any(c.strategy == "multi_pass" and c.BLOCK_N == 1024 and c.BLOCK_TAIL == 0 for c in two)
    assert not any(c.BLOCK_TAIL and c.BLOCK_N >= 4096 for c in two)  # (a tail past a row that fits: none)
    for c in one + two:
        c.check_fits(problem)


def test_statistics_candidates_with_and_without_a_few_threads_a_row():
    """A statistics single pass gets the neighbour that spreads each row over a few threads (threads_per_row: 32
    elements a thread), and such a base gets the kernel's own layout back; loop neighbours drop it (single passes
    only), and the plain reductions get none."""
    from tritred_core import LaunchConfig

    problem = Problem(op="var", dtype="bfloat16", M=262144, N=256, K=1, stride_m=256, stride_n=1)
    spec = _spec(problem.op)
    one = tuning.candidates(spec, LaunchConfig(strategy="single_pass", BLOCK_M=4, BLOCK_N=256, num_warps=1), problem)
    assert any(c.threads_per_row == 8 and c.BLOCK_N == 256 for c in one)
    few = tuning.candidates(spec, LaunchConfig(strategy="single_pass", BLOCK_M=16, BLOCK_N=256, num_warps=4,
                                               threads_per_row=8), problem)
    assert any(c.threads_per_row == 0 and c.strategy == "single_pass" for c in few)
    assert any(c.strategy == "multi_pass" for c in few)
    assert all(c.threads_per_row == 0 for c in few if c.strategy != "single_pass")
    plain = Problem(op="sum", dtype="bfloat16", M=262144, N=256, K=1, stride_m=256, stride_n=1)
    assert all(c.threads_per_row == 0 for c in tuning.candidates(
        _spec("sum"), LaunchConfig(strategy="single_pass", BLOCK_M=4, BLOCK_N=256, num_warps=1), plain))


def test_batch_norm_candidates_are_its_split_and_normalize_programs():
    """batch_norm's candidates keep its one strategy (``split``: its spec declares no other) and add normalize
    programs looping over several tiles of a channel block (``num_programs``: 4 and 16 per SM)."""
    reg = get_registry()
    spec = reg.get("batch_norm").spec
    nchw = Problem(op="batch_norm", dtype="bfloat16", M=64, N=3136, K=256, stride_m=256 * 3136, stride_n=1,
                   stride_k=3136)
    cands = tuning.candidates(spec, reg.launch_config(spec, nchw, FAKE_H200), nchw)
    assert {c.strategy for c in cands} == {"split"}
    assert sorted({c.num_programs for c in cands}) == [0, 4 * 132, 16 * 132]


def test_split_rows_candidates_keep_their_program_width_across_the_bucket():
    """A tuned split_rows entry serves every row of its shape bucket with programs of its BLOCK_N (split counts
    for the bucket's longest row: a split of the tuned row's own would widen the programs of longer rows), whether
    the built-in config is the loop (256 rows) or the split itself (64 rows: fewer than the SMs) and its
    neighbours."""
    from tritred_ops.runtime import split_row_chunks

    reg = get_registry()
    spec = reg.get("layer_norm").spec
    for M, want in ((256, {(8192, 8, 8)}), (64, {(8192, 8, 8), (4096, 16, 8), (16384, 4, 8), (8192, 8, 4),
                                                (8192, 8, 16)})):
        tuned = Problem(op="layer_norm", dtype="float32", M=M, N=40000, K=1, stride_m=40000, stride_n=1)
        split_rows = [c for c in tuning.candidates(spec, reg.launch_config(spec, tuned, FAKE_H200), tuned)
                      if c.strategy == "split_rows"]
        assert {(c.BLOCK_N, c.split, c.num_warps) for c in split_rows} == want
        for cfg in split_rows:
            for n in (32769, 40000, 60000, 65536):  # the bucket (32768, 65536]
                assert split_row_chunks(cfg, n)[0] == cfg.BLOCK_N


def test_tune_stores_the_fastest_and_the_heuristic_uses_it(cache_file, device):
    reg = get_registry()
    rec = reg.get("softmax")
    problem, trials, best = tuning.tune(rec, (6, 300), torch.float32, -1, torch.device(device))
    assert best is not None and trials[0].config == best and trials[0].ms is not None
    data = json.loads(cache_file.read_text())
    (key, entry), = data["entries"].items()
    assert "softmax" in key and "float32" in key and tuning.shape_bucket(problem) in key
    info = device_info(torch.device(device))
    decided = reg.launch_config(rec.spec, problem, info)
    assert decided.tuned and decided.decided_by == "tritred_ops"
    assert decided.launch_fields() == best.launch_fields()
    # same bucket, other exact shape: the tuned entry applies (when it fits), and computes it
    other = Problem(op="softmax", dtype="float32", M=5, N=290, K=1, stride_m=290, stride_n=1)
    assert tuning.shape_bucket(other) == tuning.shape_bucket(problem)
    used = reg.launch_config(rec.spec, other, info)
    assert used.tuned and used.launch_fields() == best.launch_fields()
    x = torch.randn(5, 290, device=device)
    torch.testing.assert_close(tr.softmax(x, -1), torch.softmax(x, -1))


def test_unreadable_cache_is_ignored(cache_file):
    cache_file.write_text("{not json")
    assert tuning.lookup(_spec("softmax"), _problem(), FAKE_H200) is None


def test_entry_that_does_not_fit_is_skipped(cache_file):
    problem = _problem(N=3000)
    key = tuning.cache_key(FAKE_H200, "softmax", problem)
    cache_file.write_text(json.dumps({"entries": {key: {"config": {"strategy": "single_pass", "BLOCK_N": 16}}}}))
    assert tuning.lookup(_spec("softmax"), problem, FAKE_H200) is None  # single_pass with BLOCK_N < N
    cache_file.write_text(json.dumps({"entries": {key: {"config": {"strategy": "multi_pass", "BLOCK_N": 512,
                                                                   "num_warps": 8}}}}))
    caches().clear()
    hit = tuning.lookup(_spec("softmax"), problem, FAKE_H200)
    assert hit is not None and hit.tuned and hit.BLOCK_N == 512


@pytest.mark.parametrize("text", ['{"entries": null}', '{"entries": [1]}', "[1, 2]", '"entries"',
                                  '{"entries": {"k": 1, "k2": {"config": null}}}'])
def test_malformed_cache_is_ignored_and_ops_still_run(cache_file, text, device):
    """A cache file of valid JSON but the wrong form (hand-edited, another tool's) means "nothing tuned": the ops
    run on their rules, never raise."""
    cache_file.write_text(text)
    assert tuning.lookup(_spec("softmax"), _problem(), FAKE_H200) is None
    x = torch.randn(4, 8, device=device)
    torch.testing.assert_close(tr.sum(x, 1), x.sum(1))


def test_entry_of_a_strategy_the_op_does_not_take_is_skipped(cache_file):
    """An entry the op's spec does not take (another version's, or hand-edited: sum has no split_rows) is ignored,
    as one that does not fit, instead of failing every call of its bucket."""
    problem = Problem(op="sum", dtype="float32", M=6, N=3000, K=1, stride_m=3000, stride_n=1)
    key = tuning.cache_key(FAKE_H200, "sum", problem)
    cache_file.write_text(json.dumps({"entries": {key: {"config": {"strategy": "split_rows", "BLOCK_N": 1024,
                                                                   "split": 4}}}}))
    assert tuning.lookup(_spec("sum"), problem, FAKE_H200) is None


def test_tune_forces_its_candidates_past_a_tryfirst_plugin(cache_file, device):
    """A user's tryfirst plugin for the op does not take the tuner's candidates' place: each candidate is the
    config that runs (else the stored "best" would be the plugin's config, never timed as itself)."""
    from tritred_core import LaunchConfig, hookimpl

    class First:
        asked = 0

        @hookimpl(tryfirst=True)
        def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
            if spec.name != "softmax":
                return None
            First.asked += 1
            return LaunchConfig(strategy="multi_pass", BLOCK_N=64)

    reg = get_registry()
    name = reg.register(First(), name="first")
    try:
        _, trials, best = tuning.tune(reg.get("softmax"), (6, 300), torch.float32, -1, torch.device(device),
                                      save=False)
    finally:
        reg.unregister(name)
    assert len(trials) > 1 and all(t.ms is not None for t in trials), [t.error for t in trials]
    assert First.asked == 1  # the call's own config (the first candidate's base), never a candidate's place
    assert best is not None and best == trials[0].config


def test_a_cache_path_that_is_a_directory_is_a_clear_error(tmp_path, monkeypatch, device):
    monkeypatch.setenv(tuning.CACHE_ENV, str(tmp_path))
    caches().clear()
    with pytest.raises(ValueError, match="is a directory"):
        tuning.tune(get_registry().get("sum"), (4, 8), torch.float32, -1, torch.device(device))
    caches().clear()
