"""softmax, log_softmax and logsumexp in PyTorch's own terms: gradcheck through the autograd Functions and the
registered ops, ``torch.library.opcheck`` on every registered op, ``torch.compile(fullgraph=True)`` (aot_eager,
static and dynamic shapes) with backward, the inference fast path free of the op boundary, the backward's
errors."""

from __future__ import annotations

import warnings

import pytest
import torch
import tritred_ops as tr
from ops_helpers import randn
from tritred_ops.families.softmax import autograd as ag

OPS = ("softmax", "log_softmax", "logsumexp")


def _public(name):
    return getattr(tr, name)


def _op(name):
    return getattr(torch.ops.tritred, name)


# -- gradcheck (float64, tiny inputs: each costs ~2 x numel interpreted launches) ---------------------------------

@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_gradcheck(name, device):
    """Through the public function (the eager Function) over the last dim, and through the registered op over
    the first dim of a transposed input with ``dtype=`` (fast mode: one random direction, the full gradients of
    both paths are compared with torch's elsewhere)."""
    x = randn((2, 5), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: _public(name)(t, 1), (x,))
    xt = randn((4, 2), torch.float64, device).t().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: _op(name)(t, 0, torch.float64), (xt,), fast_mode=True)


def test_gradcheck_logsumexp(device):
    x = randn((3, 2, 2), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: tr.logsumexp(t, (0, 2), keepdim=True), (x,))
    assert torch.autograd.gradcheck(lambda t: _op("logsumexp")(t, [-1], False), (x,), fast_mode=True)


# -- the registered ops ---------------------------------------------------------------------------------------------

def test_opcheck_every_registered_op(device):
    """Schema, fake implementation (shapes, dtypes, strides as the real op's), registered autograd and AOT
    dispatch, forward and backward ops, on strided inputs and dtype casts."""
    x = randn((4, 6), torch.float32, device)
    xt = randn((6, 4), torch.float32, device).t()
    for name in ("softmax", "log_softmax"):
        for args in [(x.clone().requires_grad_(), -1, None), (xt.bfloat16(), 0, torch.float32)]:
            torch.library.opcheck(_op(name), args)
        y = _public(name)(x, -1)
        torch.library.opcheck(_op(f"{name}_backward"), (randn((4, 6), torch.float32, device), y, -1, torch.float32))
        yt = _public(name)(xt, 0, torch.bfloat16)
        torch.library.opcheck(_op(f"{name}_backward"), (randn((6, 4), torch.bfloat16, device).t(), yt, 0,
                                                         torch.float32))
    x3 = randn((3, 4, 5), torch.float32, device)
    torch.library.opcheck(_op("logsumexp"), (x3.clone().requires_grad_(), [0, 2], False))
    torch.library.opcheck(_op("logsumexp"), (x3, [1], True))
    r = torch.logsumexp(x3, (0, 2))
    torch.library.opcheck(_op("logsumexp_backward"), (randn((4,), torch.float32, device), x3, r, [0, 2], False))


def test_fake_implementations_raise_torchs_errors(device):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 4, device=device)
        with pytest.raises(IndexError):
            _op("softmax")(x, 2, None)
        with pytest.raises(TypeError):
            _op("log_softmax")(x, None, None)
        with pytest.raises(IndexError):
            _op("logsumexp")(x, [3], False)
        with pytest.raises(RuntimeError, match="differ"):
            _op("softmax_backward")(x, torch.empty(4, 3, device=device), 1, torch.float32)


def test_backward_errors(device):
    y = tr.softmax(randn((3, 4), torch.float32, device), 1)
    with pytest.raises(RuntimeError, match="dtype"):
        _op("softmax_backward")(y.double(), y, 1, torch.float32)
    with pytest.raises(RuntimeError, match="differ"):
        _op("log_softmax_backward")(y[:, :2], y, 1, torch.float32)
    with pytest.raises(RuntimeError, match="input_dtype"):
        _op("softmax_backward")(y, y.clone(), 1, torch.int32)
    with pytest.raises(IndexError):
        _op("softmax_backward")(y, y.clone(), 2, torch.float32)


def test_double_backward_is_torchs(device):
    """A second-order gradient through softmax and log_softmax equals torch's (more in test_autograd_modes.py)."""
    x0 = randn((3, 4), torch.float64, device)
    for ours, theirs in ((tr.softmax, torch.softmax), (tr.log_softmax, torch.log_softmax)):
        got = []
        for f in (ours, theirs):
            x = x0.clone().requires_grad_()
            (g,) = torch.autograd.grad(f(x, 1)[:, 0].sum(), x, create_graph=True)
            got.append(torch.autograd.grad(g.square().sum(), x)[0])
        torch.testing.assert_close(got[0], got[1])


def test_only_inputs_that_need_a_gradient_get_one(device):
    """The output saved, not the input; an input modified after the call does not change the gradient, the
    output modified does raise (autograd's version check); integer inputs with dtype= need no graph."""
    x = randn((3, 5), torch.float32, device).requires_grad_()
    y = tr.softmax(x, 1)
    assert y.grad_fn is not None and x.grad is None
    ref = torch.autograd.grad(torch.softmax(x, 1), x, torch.ones_like(y))[0]
    with torch.no_grad():
        x.add_(1.0)
    y.backward(torch.ones_like(y))
    assert torch.allclose(x.grad, ref, atol=1e-6)
    z = tr.log_softmax(x, 0)
    with torch.no_grad():
        z.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    i = torch.arange(6, device=device).view(2, 3)
    assert tr.softmax(i, 1, dtype=torch.float32).grad_fn is None


# -- torch.compile --------------------------------------------------------------------------------------------------

def _model(x, w):
    """Each op forward and backward: softmax over the last dim, log_softmax over the first, logsumexp of both."""
    a = tr.softmax(x, -1) * w
    b = tr.log_softmax(x.transpose(0, 1), 1, dtype=torch.float64)
    return (a.sum() + tr.logsumexp(b, 0).sum()) + tr.logsumexp(x, (0, 1), keepdim=True).sum()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_with_backward(dynamic, device):
    """One graph (fullgraph) holding the tritred ops forward and backward, no graph break; outputs and gradients
    equal eager's, also on a second shape (dynamic: the same graph)."""
    import torch._dynamo.testing

    backend = torch._dynamo.testing.AotEagerAndRecordGraphs()
    compiled = torch.compile(_model, backend=backend, fullgraph=True, dynamic=dynamic)
    for shape in ((4, 6), (5, 7)):
        x = randn(shape, torch.float32, device).requires_grad_()
        w = randn(shape, torch.float32, device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # (the recording backend's boxed-arguments note)
            out = compiled(x, w)
            out.backward()
        got = x.grad.clone()
        x.grad = None
        ref = _model(x, w)
        ref.backward()
        assert torch.allclose(out, ref, rtol=1e-6, atol=1e-6)
        assert torch.allclose(got, x.grad, rtol=1e-5, atol=1e-6)
    forward, backward = backend.fw_graphs[0].code, backend.bw_graphs[0].code
    for name in OPS:
        assert f"torch.ops.tritred.{name}.default" in forward, forward
        assert f"torch.ops.tritred.{name}_backward.default" in backward, backward
    if dynamic:
        assert len(backend.fw_graphs) == 1


def test_compile_without_grad(device):
    x = randn((3, 8), torch.float32, device)
    compiled = torch.compile(lambda t: tr.softmax(t, 0) + tr.log_softmax(t, 1), backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(x), tr.softmax(x, 0) + tr.log_softmax(x, 1))


# -- the three paths --------------------------------------------------------------------------------------------

def test_inference_fast_path_is_free_of_the_op_boundary(device, monkeypatch):
    """No grad needed (no_grad, inference_mode, inputs that do not require grad): neither the autograd Function
    nor the registered op runs; grad needed: the Function (eager), never the op."""
    calls = []
    for name, fn in (("softmax", ag.SoftmaxFunction), ("log_softmax", ag.LogSoftmaxFunction),
                     ("logsumexp", ag.LogsumexpFunction)):
        real_forward, real_op = fn.forward, _op(name)
        monkeypatch.setattr(fn, "forward", staticmethod(
            lambda *a, _n=name, _f=real_forward: calls.append(("function", _n)) or _f(*a)))
        monkeypatch.setattr(torch.ops.tritred, name,
                            lambda *a, _n=name, _o=real_op: calls.append(("op", _n)) or _o(*a))
    x = randn((2, 5), torch.float32, device)
    leaf = x.clone().requires_grad_()
    call = {"softmax": lambda t: tr.softmax(t, 1), "log_softmax": lambda t: tr.log_softmax(t, 0),
            "logsumexp": lambda t: tr.logsumexp(t, 1)}
    for name in OPS:
        call[name](x)
        call[name](x)  # (the replayed plan)
        with torch.no_grad():
            assert call[name](leaf).grad_fn is None
        with torch.inference_mode():
            call[name](leaf)
    assert calls == []
    for name in OPS:
        assert call[name](leaf).grad_fn is not None
    assert calls == [("function", n) for n in OPS]
