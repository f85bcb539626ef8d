"""runtime/trace.py: an op's own host path run on meta tensors, its decisions and launches recorded, nothing run.

``Reduction.problem`` of every built-in is the first decision of the op itself (what ``tritred explain`` and
``tritred tune`` print and tune), and :func:`explain` lists all of them: these tests check both against the
registry and the op, and that a trace launches, caches and saves nothing.
"""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from tritred_core import get_registry
from tritred_core.testing import FAKE_H200
from tritred_ops.runtime import replay
from tritred_ops.runtime.caches import caches
from tritred_ops.runtime.trace import active, explain, first_problem, to_meta

OPS = sorted(n for n, r in get_registry().reductions().items() if r.spec.plugin == "tritred_ops")


@pytest.mark.parametrize("name", OPS)
def test_problem_is_the_first_decision_of_the_call(name):
    """For every built-in: Reduction.problem equals the first decision of the call explained on a fake H200,
    whose config is the registry's; the trace launches nothing, caches and saves nothing, and ends."""
    reg = get_registry()
    rec = reg.get(name)
    args, kwargs = rec.make_inputs((6, 40, 3) if name == "batch_norm" else (6, 300), torch.float32, device="meta",
                                   dim=-1)
    problem = rec.problem(*args, **kwargs)
    configs, plans = len(caches().configs), len(caches().plans)
    trace = explain(rec.impl, *args, device=FAKE_H200, **kwargs)
    assert trace.decisions[0].problem == problem and trace.decisions[0].spec.name == name
    assert trace.decisions[0].config == reg.launch_config(rec.spec, problem, FAKE_H200)
    assert trace.launches and all(launch.grid for launch in trace.launches)
    assert (len(caches().configs), len(caches().plans)) == (configs, plans) and active() is None


def test_staged_reduction_records_each_stage(device):
    """sum over (0, 2, 3) of NCHW: two decisions (each image's planes, then the batch), two launches; the Problem
    is the first; the arguments of the launches are described, not kept (tensors by shape, strides, dtype)."""
    x = torch.randn(4, 6, 5, 7, device=device)
    trace = explain(tr.sum, x, (0, 2, 3))
    assert [(d.problem.M, d.problem.N, d.problem.K) for d in trace.decisions] == [(24, 35, 1), (1, 4, 6)]
    assert [launch.kernel for launch in trace.launches] == ["_rows_kernel", "_cols_kernel"]
    assert trace.launches[0].args[0] == ("tensor", (4, 6, 5, 7), (210, 35, 7, 1), "float32")
    assert first_problem(tr.sum, x, (0, 2, 3)) == trace.decisions[0].problem


def test_real_tensors_are_traced_as_meta_and_nothing_runs(device, monkeypatch):
    """A call on real tensors is traced on meta copies (same shapes and strides, sliced ones too): no kernel runs
    (a plan of the same call saved before is not replayed either)."""
    x = torch.randn(8, 64, device=device)[:, ::2]
    tr.softmax(x, -1)  # (a plan for this key, if the call saves one)
    monkeypatch.setattr(replay.Plan, "run_generic", lambda *a: pytest.fail("a traced call replayed a plan"))
    trace = explain(tr.softmax, x, -1)
    assert (trace.decisions[0].problem.stride_m, trace.decisions[0].problem.stride_n) == (64, 2)
    assert len(trace.launches) == 1
    assert to_meta((x, [x], {"w": x}, 3))[1][0].stride() == x.stride()


def test_meta_tensors_outside_a_trace_and_calls_that_launch_nothing():
    """Meta tensors run only under a trace (check_runnable); a call that decides nothing (an empty output) has no
    Problem; the call's own argument errors come through."""
    with pytest.raises(RuntimeError, match="input is on meta"):
        tr.sum(torch.empty(4, 5, device="meta"), -1)
    with pytest.raises(RuntimeError, match="launches no kernel"):
        first_problem(tr.sum, torch.empty(0, 5), -1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        first_problem(tr.softmax, torch.empty(4, 5), 2)
