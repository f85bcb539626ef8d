"""Each public op's compiled form (``runtime.compiled.compiles_to``): torch.compile traces it in the op's place, so
that the guards of the compiled code (checked on every call, CUDA graph replays included) name the op by its
identity only, never its code, its defaults or the ``is_compiling`` test; torch.export, which runs the op's own
body, reaches the same registered op; and the compiled form gives the eager op's result."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import randn

pytestmark = pytest.mark.skipif(not hasattr(torch.compiler, "substitute_in_graph"),
                                reason="torch without torch.compiler.substitute_in_graph traces the ops' bodies")


def _inputs(device):
    x = randn((3, 5), torch.float32, device)
    w, b = randn((5,), torch.float32, device), randn((5,), torch.float32, device)
    x4 = randn((2, 5, 3, 3), torch.float32, device)
    target = torch.randint(0, 5, (3,), device=device)
    return x, w, b, x4, target


#: (tritred's call, torch's) of each public op in its usual form, on the inputs of ``_inputs``.
CALLS = {
    "softmax": (lambda x, w, b, x4, t: tr.softmax(x, -1), lambda x, w, b, x4, t: torch.softmax(x, -1)),
    "log_softmax": (lambda x, w, b, x4, t: tr.log_softmax(x, 1), lambda x, w, b, x4, t: torch.log_softmax(x, 1)),
    "logsumexp": (lambda x, w, b, x4, t: tr.logsumexp(x, -1), lambda x, w, b, x4, t: torch.logsumexp(x, -1)),
    "sum": (lambda x, w, b, x4, t: tr.sum(x, -1), lambda x, w, b, x4, t: torch.sum(x, -1)),
    "mean": (lambda x, w, b, x4, t: tr.mean(x, 0), lambda x, w, b, x4, t: torch.mean(x, 0)),
    "prod": (lambda x, w, b, x4, t: tr.prod(x, 1), lambda x, w, b, x4, t: torch.prod(x, 1)),
    "amax": (lambda x, w, b, x4, t: tr.amax(x, -1), lambda x, w, b, x4, t: torch.amax(x, -1)),
    "amin": (lambda x, w, b, x4, t: tr.amin(x), lambda x, w, b, x4, t: torch.amin(x)),
    "max": (lambda x, w, b, x4, t: tr.max(x, 1), lambda x, w, b, x4, t: torch.max(x, 1)),
    "min": (lambda x, w, b, x4, t: tr.min(x), lambda x, w, b, x4, t: torch.min(x)),
    "var": (lambda x, w, b, x4, t: tr.var(x, -1), lambda x, w, b, x4, t: torch.var(x, -1)),
    "std": (lambda x, w, b, x4, t: tr.std(x, 0, correction=0), lambda x, w, b, x4, t: torch.std(x, 0, correction=0)),
    "var_mean": (lambda x, w, b, x4, t: tr.var_mean(x, 1), lambda x, w, b, x4, t: torch.var_mean(x, 1)),
    "std_mean": (lambda x, w, b, x4, t: tr.std_mean(x), lambda x, w, b, x4, t: torch.std_mean(x)),
    "layer_norm": (lambda x, w, b, x4, t: tr.layer_norm(x, (5,), w, b),
                   lambda x, w, b, x4, t: F.layer_norm(x, (5,), w, b)),
    "layer_norm_with_stats": (lambda x, w, b, x4, t: tr.layer_norm_with_stats(x, (5,), w, b)[0],
                              lambda x, w, b, x4, t: F.layer_norm(x, (5,), w, b)),
    "rms_norm": (lambda x, w, b, x4, t: tr.rms_norm(x, (5,), w), lambda x, w, b, x4, t: F.rms_norm(x, (5,), w)),
    "batch_norm": (lambda x, w, b, x4, t: tr.batch_norm(x4, None, None, w, b, True),
                   lambda x, w, b, x4, t: F.batch_norm(x4, None, None, w, b, True)),
    "cross_entropy": (lambda x, w, b, x4, t: tr.cross_entropy(x, t), lambda x, w, b, x4, t: F.cross_entropy(x, t)),
}


def _compiled_with_guards(fn, args):
    """(result, guards) of ``fn(*args)`` compiled by dynamo alone (backend "eager"), every guard kept."""
    guards = []

    def keep_all(entries):
        guards.extend(entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    out = torch.compile(fn, backend="eager", fullgraph=True, options={"guard_filter_fn": keep_all})(*args)
    return out, guards


@pytest.mark.parametrize("name", sorted(CALLS))
def test_compile_traces_the_compiled_form_in_the_ops_place(name, device):
    """The op is guarded by identity (ID_MATCH, where a traced function is guarded by its code), nothing reads
    its defaults or ``_compiling``, and the result is the eager op's (and torch's, to its tolerance)."""
    ours, theirs = CALLS[name]
    args = _inputs(device)
    out, guards = _compiled_with_guards(ours, args)
    names = {g.name: g.guard_type for g in guards}
    assert names.get(f"G['tr'].{name}") == "ID_MATCH", names
    read = [n for n in names if any(k in n for k in ("__defaults__", "__kwdefaults__", "__code__", "_compiling"))]
    assert not read, read
    eager = ours(*args)
    for a, e, t in zip(*(o if isinstance(o, tuple) else (o,) for o in (out, eager, theirs(*args))), strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
        torch.testing.assert_close(a, t, rtol=1e-5, atol=1e-5)


def test_export_runs_the_ops_body_into_the_registered_ops(device):
    """torch.export runs the op's own body, whose is_compiling branch calls the same compiled form."""

    class Model(torch.nn.Module):
        def forward(self, x):
            return tr.var(x, -1) + tr.softmax(x, -1).sum(-1) + tr.max(x, 1).values

    x = randn((3, 5), torch.float32, device)
    ep = torch.export.export(Model(), (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"tritred.var.default", "tritred.softmax.default", "tritred.max.default"} <= targets, targets
    torch.testing.assert_close(ep.module()(x), Model()(x), rtol=0, atol=0)


#: Arguments the registered ops' schemas would coerce (a bool dim to an int, 0 / 1 / None to a bool) but torch and
#: the eager ops refuse: each compiled form raises the eager op's TypeError while tracing.
REFUSED = {
    "softmax dim=True": (lambda x, x4: tr.softmax(x, True), "argument 'dim' must be int"),
    "log_softmax dim=False": (lambda x, x4: tr.log_softmax(x, False), "argument 'dim' must be int"),
    "sum keepdim=None": (lambda x, x4: tr.sum(x, 1, keepdim=None), "argument 'keepdim' must be bool"),
    "mean keepdim=1": (lambda x, x4: tr.mean(x, 1, 1), "argument 'keepdim' must be bool"),
    "prod keepdim=0": (lambda x, x4: tr.prod(x, 1, keepdim=0), "argument 'keepdim' must be bool"),
    "amax keepdim=1": (lambda x, x4: tr.amax(x, 1, keepdim=1), "argument 'keepdim' must be bool"),
    "amin keepdim=None": (lambda x, x4: tr.amin(x, 0, None), "argument 'keepdim' must be bool"),
    "logsumexp keepdim=None": (lambda x, x4: tr.logsumexp(x, 1, keepdim=None), "argument 'keepdim' must be bool"),
    "var keepdim=1": (lambda x, x4: tr.var(x, 1, keepdim=1), "argument 'keepdim' must be bool"),
    "std_mean keepdim=0": (lambda x, x4: tr.std_mean(x, 0, keepdim=0), "argument 'keepdim' must be bool"),
    "batch_norm training=1": (lambda x, x4: tr.batch_norm(x4, None, None, training=1),
                              "argument 'training' \\(position 6\\) must be bool"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_compiled_forms_refuse_what_the_eager_ops_refuse(case, device):
    fn, message = REFUSED[case]
    x, _, _, x4, _ = _inputs(device)
    with pytest.raises(TypeError, match=message):
        fn(x, x4)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):  # (dynamo reports the TypeError as an observed exception)
        torch.compile(fn, backend="eager", fullgraph=True)(x, x4)


@pytest.mark.parametrize(("legacy", "reduction"), [(dict(size_average=False), "sum"), (dict(reduce=False), "none"),
                                                   (dict(size_average=True, reduce=True), "mean")])
def test_cross_entropy_legacy_reduction_arguments_compile(legacy, reduction, device):
    """The deprecated ``size_average``/``reduce`` trace under ``fullgraph=True`` (the eager call's deprecation warning
    is not traced: dynamo cannot trace ``warnings.warn``) and give the reduction they name."""
    x, _, _, _, t = _inputs(device)
    torch._dynamo.reset()
    out = torch.compile(lambda x, t: tr.cross_entropy(x, t, **legacy), backend="aot_eager", fullgraph=True)(x, t)
    torch.testing.assert_close(out, F.cross_entropy(x, t, reduction=reduction))
