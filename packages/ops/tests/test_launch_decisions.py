"""The launch decisions of every built-in bench suite's cases on an H200, as ``tritred explain --device h200``
prints them, against the recorded ones in ``data/launch_configs.json``.

A refactor must leave them equal; a change of a launch rule changes some of them on purpose: then regenerate
the file (``TRITRED_UPDATE_LAUNCH_CONFIGS=1 python -m pytest packages/ops/tests/test_launch_decisions.py``) and
let the diff show which cases the rule moved.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "launch_configs.json"


def _decisions() -> dict[str, dict[str, object]]:
    from tritred_bench.inputs import build_inputs
    from tritred_bench.suites import builtin_suites, load_suite
    from tritred_core import get_registry
    from tritred_core.testing import FAKE_H200

    reg = get_registry()
    out: dict[str, dict[str, object]] = {}
    for suite in builtin_suites():
        for case in load_suite(suite)[0]:
            rec = reg.get(case.op)
            args, kwargs = build_inputs(rec, case, "meta")
            problem = rec.problem(*args, **kwargs)
            config = reg.launch_config(rec.spec, problem, FAKE_H200)
            params = json.dumps(case.params, sort_keys=True)
            out[f"{suite} | {case.label} | {params}"] = {
                "problem": problem.model_dump(exclude={"op", "dtype"}),
                "config": config.model_dump(exclude_defaults=True, exclude={"decided_by", "rule", "why"}),
            }
    return out


def test_suite_cases_keep_their_launch_decisions() -> None:
    pytest.importorskip("tritred_bench")
    got = _decisions()
    if os.environ.get("TRITRED_UPDATE_LAUNCH_CONFIGS") == "1":
        DATA.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(DATA.read_text())
    assert sorted(got) == sorted(want), "suite cases added or removed: regenerate data/launch_configs.json"
    moved = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
    assert not moved, f"{len(moved)} launch decisions changed, e.g. {next(iter(moved.items()))}"
