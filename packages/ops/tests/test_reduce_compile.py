"""The reductions' torch.library ops: opcheck, torch.compile(fullgraph=True) with backward (static and dynamic
shapes), and the inference fast path, which stays outside the op boundary."""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import assert_compiled_matches_eager, randn
from tritred_ops.families.reduce import autograd as ag

OPS = torch.ops.tritred


def _x(device, shape=(3, 5), requires_grad=True):
    x = randn(shape, torch.float32, device, offset=1.0, scale=0.5)
    return x.requires_grad_(requires_grad)


#: Every registered op of the family, with a few argument forms (a transposed input among them).
SAMPLES = {
    "sum": lambda x: [(x, [1], False, None), (x.t(), None, True, torch.float64), (x, [], False, None)],
    "mean": lambda x: [(x, [0, 1], True, None), (x.t(), [-1], False, None)],
    "prod": lambda x: [(x, 1, False, None), (x, None, False, torch.float64), (x.t(), 0, True, None)],
    "amax": lambda x: [(x, [1], False), (x.t(), [], True)],
    "amin": lambda x: [(x, [0, 1], False)],
    "max": lambda x: [(x, 1, False), (x.t(), 0, True)],
    "min": lambda x: [(x, 0, False)],
    "max_all": lambda x: [(x,)],
    "min_all": lambda x: [(x.t(),)],
    "prod_backward": lambda x: [(torch.randn(3, device=x.device), x.detach(), torch.randn(3, device=x.device), 1,
                                 False),
                                (torch.randn((), device=x.device), x.detach(), torch.randn((), device=x.device),
                                 None, False)],
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_opcheck(name, device):
    """Schema, fake implementation (shapes, dtypes, strides as the real outputs), registered autograd, and AOT
    dispatch with dynamic shapes."""
    for args in SAMPLES[name](_x(device)):
        torch.library.opcheck(getattr(OPS, name).default, args)


def _model(x):
    """A representative use: several reductions in one graph, their sum as the loss."""
    return (tr.sum(x, 1).pow(2).sum() + tr.mean(x, (0, 1), keepdim=True).sum() + tr.prod(x, 1).sum()
            + tr.prod(x) + tr.amax(x, 0).sum() + tr.amin(x, (), True).sum() + tr.amax(x, None) + tr.amin(x, None)
            + tr.max(x, 1).values.sum()
            + tr.min(x, 0, keepdim=True)[0].sum() + tr.max(x) + tr.min(x) + tr.sum(x, dtype=torch.float64).float())


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_with_backward(dynamic, device):
    """torch.compile(fullgraph=True, backend="aot_eager"): outputs and gradients equal eager's, for inputs with
    and without a zero (prod's backward branch is taken at run time inside the compiled graph) and, dynamic,
    for a second shape without recompiling."""
    shapes = [(3, 5), (3, 5), (4, 7)] if dynamic else [(3, 5), (3, 5)]
    inputs = [_x(device, shape) for shape in shapes]
    with torch.no_grad():
        inputs[1][1, 2] = 0  # prod: the zeros branch
    assert_compiled_matches_eager(_model, inputs, dynamic)


def test_compile_sees_the_registered_ops(device):
    """The compiled graph calls tritred::sum and tritred::max (opaque ops), not their decompositions."""
    seen: list[str] = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    torch._dynamo.reset()
    f = torch.compile(lambda x: tr.sum(x, 1) + tr.max(x, 1).values, backend=backend, fullgraph=True)
    f(_x(device, requires_grad=False))
    assert "tritred.sum" in seen and "tritred.max" in seen, seen


FUNCTIONS = [ag.SumFunction, ag.MeanFunction, ag.ProdFunction, ag.AmaxFunction, ag.AminFunction, ag.MaxFunction,
             ag.MinFunction, ag.MaxAllFunction, ag.MinAllFunction]


def _calls(x):
    return [tr.sum(x, 1), tr.mean(x), tr.prod(x, 0), tr.prod(x), tr.amax(x, 1), tr.amin(x), tr.max(x, 1).values,
            tr.min(x, 0).values, tr.max(x), tr.min(x)]


def test_inference_fast_path_has_no_op_boundary(monkeypatch, device):
    """Under no_grad, on a detached input, or under inference_mode: no autograd Function, no registered op, the
    launcher only; with grad, every call goes through its Function (so the spies can see it)."""
    used: list[str] = []
    for fn in FUNCTIONS:
        real = fn.forward
        monkeypatch.setattr(fn, "forward", staticmethod(
            lambda *a, _real=real, _n=fn.__name__: used.append(_n) or _real(*a)))

    class Ops(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "tritred":
                used.append(str(func))
            return func(*args, **(kwargs or {}))

    x = _x(device)
    with Ops():
        with torch.no_grad():
            _calls(x)
        _calls(x.detach())
        with torch.inference_mode():
            _calls(x)
    assert used == []
    outs = _calls(x)
    assert len(used) == len(outs) and all(o.requires_grad for o in outs)
