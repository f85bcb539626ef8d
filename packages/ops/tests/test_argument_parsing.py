"""Arguments as torch reads them before any kernel: ``F.batch_norm``'s Python checks and their order, torch's
argument parser for float and int-list arguments, and batch_norm of an input of no elements (torch's composite
returns ``input.clone() * weight[0] + bias[0]`` before any shape or dtype check). Each case compares with the
installed torch on the same inputs: the same exception type, or the same values (float64 where torch rounds).
"""

from __future__ import annotations

import decimal
import fractions
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from tritred_ops.runtime.caches import caches


def _same(tr_call, torch_call) -> None:
    """Both raise the same exception type, or both return equal values (within a float32 rounding)."""
    try:
        expected = torch_call()
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            tr_call()
        return
    got = tr_call()
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, equal_nan=True)


def _batch_norm_calls(x, training, **kw):
    """torch's and tritred's batch_norm calls on ``x``, each with its own copy of one set of random running
    statistics, which it returns beside the output (their in-place updates compared too)."""
    C = x.shape[1] if x.dim() > 1 else 0
    stats = torch.randn(C, device=x.device), torch.rand(C, device=x.device) + 0.5

    def call(fn):
        rm, rv = stats[0].clone(), stats[1].clone()
        return fn(x, rm, rv, training=training, **kw), rm, rv
    return lambda: call(tr.batch_norm), lambda: call(F.batch_norm)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("eps", [-1e-3, 0.0, torch.tensor(-0.5), float("nan")])
def test_batch_norm_eps_sign(device, training, eps):
    """torch 2.13's F.batch_norm: ValueError for eps <= 0 in training and for eps < 0 in eval (an eps of 0 in
    eval computes; a NaN passes both tests). tritred computed with a negative eps in eval."""
    x = torch.randn(4, 3, 5, device=device)
    _same(*_batch_norm_calls(x, training, eps=eps))


@pytest.mark.parametrize(("version", "training", "message"), [
    ("2.9.1+cu128", False, None), ("2.9.1+cu128", True, None),  # (no eps check before torch 2.10)
    ("2.10.0", False, "positive, but"), ("2.11.0+cu130", True, "positive, but"),  # (one check, one message)
    ("2.12.0", False, None), ("2.13.0", True, "positive during training, but")])
def test_batch_norm_eps_zero_follows_the_torch_release(device, monkeypatch, version, training, message):
    """An eps of 0 as each torch release's F.batch_norm takes it: no check before 2.10 (PyTorch pull request
    166756 added it), ValueError in both modes with one message in 2.10 and 2.11, allowed in eval from 2.12 (pull
    request 175508). tritred asks the installed torch's release; the test above compares the installed one."""
    x = torch.randn(4, 3, 5, device=device)
    tr_call, _ = _batch_norm_calls(x, training, eps=0.0)
    monkeypatch.setattr(torch, "__version__", version)
    caches().clear()  # (a saved call plan of an earlier test replays without the checks: the release is per process)
    if message is not None:
        with pytest.raises(ValueError, match=f"batch_norm eps must be {message} got 0.0"):
            tr_call()
    else:
        y, _, _ = tr_call()
        assert y.shape == x.shape


def test_batch_norm_python_checks_come_first(device):
    """F.batch_norm checks the values per channel and eps in Python, before torch's op checks the weight's size or
    the running statistics: a ValueError where tritred raised the weight's RuntimeError (or nothing, for a (1, 0)
    input, whose batch size times spatial sizes is 1)."""
    x = torch.randn(4, 3, 5, device=device)
    w = torch.randn(4, device=device)
    _same(lambda: tr.batch_norm(x, None, None, w, training=True, eps=0.0),
          lambda: F.batch_norm(x, None, None, w, training=True, eps=0.0))
    _same(lambda: tr.batch_norm(x[:1, :, :1], None, None, w, training=True),
          lambda: F.batch_norm(x[:1, :, :1], None, None, w, training=True))
    _same(lambda: tr.batch_norm(x, torch.zeros(3, device=device), torch.ones(3, device=device), momentum=None,
                                eps=-1.0),
          lambda: F.batch_norm(x, torch.zeros(3, device=device), torch.ones(3, device=device), momentum=None,
                               eps=-1.0))
    for shape in [(1,), (1, 0)]:
        x1 = torch.randn(shape, device=device)
        _same(partial(tr.batch_norm, x1, None, None, training=True),
              partial(F.batch_norm, x1, None, None, training=True))


_NOT_FLOATS = [decimal.Decimal("0.25"), fractions.Fraction(1, 4), np.array(0.25), "0.25"]
_FLOATS = [np.float32(0.25), np.int64(1), np.bool_(True), 1, True]


def _float_arg_calls(value, device):
    """(name, tritred call, torch call) of each float argument of the ops: eps of the norms, batch_norm's momentum
    and label_smoothing."""
    x = torch.randn(4, 6, device=device)
    w = torch.randn(6, device=device)
    t = torch.randint(0, 6, (4,), device=device)
    stats = lambda: (torch.zeros(6, device=device), torch.ones(6, device=device))  # noqa: E731
    return [
        ("layer_norm eps", lambda f: f(x, (6,), w, eps=value), (tr.layer_norm, F.layer_norm)),
        ("rms_norm eps", lambda f: f(x, (6,), w, eps=value), (tr.rms_norm, F.rms_norm)),
        ("batch_norm eps", lambda f: f(x, *stats(), eps=value), (tr.batch_norm, F.batch_norm)),
        ("batch_norm momentum", lambda f: f(x, *stats(), training=True, momentum=value), (tr.batch_norm, F.batch_norm)),
        ("label_smoothing", lambda f: f(x, t, label_smoothing=value), (tr.cross_entropy, F.cross_entropy)),
    ]


@pytest.mark.parametrize("value", _NOT_FLOATS + _FLOATS, ids=lambda v: type(v).__name__)
def test_float_arguments_as_torch_parses_them(device, value):
    """torch's parser takes a Python int, float or bool, a numpy scalar and a 0-d tensor that does not require grad
    as a float argument; a Decimal, a Fraction, a 0-d numpy array or a string is a TypeError. tritred took
    anything float() takes (a Decimal, a 0-d array; a string as cross_entropy's label_smoothing) and refused numpy
    scalars as batch_norm's momentum."""
    for _name, call, (tr_fn, torch_fn) in _float_arg_calls(value, device):
        _same(partial(call, tr_fn), partial(call, torch_fn))


@pytest.mark.parametrize("value", ["1d", "requires_grad"])
def test_float_arguments_refuse_tensors_torch_refuses(device, value):
    """A tensor of one element but one dim, or a 0-d one that requires grad: TypeError in torch's parser; tritred
    read its number."""
    t = torch.tensor([0.25]) if value == "1d" else torch.tensor(0.25, requires_grad=True)
    for _name, call, (tr_fn, torch_fn) in _float_arg_calls(t, device):
        with pytest.raises(TypeError):
            call(torch_fn)
        with pytest.raises(TypeError, match="must be float"):
            call(tr_fn)


@pytest.mark.parametrize("shape", [(4, True), [4, False], range(5, 6), np.array([4, 5]), {5: 0}, {5}, b"\x05"],
                         ids=["bool_second", "bool_second_list", "range", "ndarray", "dict", "set", "bytes"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_normalized_shape_as_torch_parses_it(device, op, shape):
    """torch reads a bool after an int list's first element as an int (``(4, True)`` is ``[4, 1]``: the shape
    check's RuntimeError, not tritred's TypeError) and takes only a tuple, list or torch.Size (layer_norm took any
    iterable: a range, a dict's keys, bytes)."""
    x = torch.randn(3, 4, 5, device=device)
    _same(lambda: getattr(tr, op)(x, shape), lambda: getattr(F, op)(x, shape))
    y = torch.randn(3, 4, 1, device=device)
    if isinstance(shape, tuple):
        _same(lambda: getattr(tr, op)(y, shape), lambda: getattr(F, op)(y, shape))


@pytest.mark.parametrize("case", ["wrong_sizes", "int_input", "float64_weight", "no_channels_weight",
                                  "no_channels_bias", "eval_without_stats", "weight_rows", "half_bias64"])
def test_batch_norm_of_no_elements(device, case):
    """torch's batch_norm returns ``input.clone() * weight[0] + bias[0]`` for an input of no elements, before its
    shape, dtype and eval-mode checks: parameters of any size and dtype (the dtype promotion of that product), an
    integer input, eval without running statistics; an IndexError for a weight or bias of no elements. tritred
    raised its checks' errors there, and gave an empty output for zero channels with a weight."""
    x = torch.randn(0, 3, 2, device=device)
    rm = rv = w = b = None
    training = True
    if case == "wrong_sizes":
        rm, rv, w, b = (torch.randn(n, device=device) for n in (5, 5, 4, 2))
        training = False
    elif case == "int_input":
        x, w = x.long(), torch.randn(3, device=device)
    elif case == "float64_weight":
        w = torch.randn(3, device=device, dtype=torch.float64)
    elif case in ("no_channels_weight", "no_channels_bias"):
        x = torch.randn(4, 0, device=device)
        none = torch.randn(0, device=device)
        w, b = (none, None) if case == "no_channels_weight" else (None, none)
    elif case == "eval_without_stats":
        training = False
    elif case == "weight_rows":
        w = torch.randn(3, 5, device=device)  # (weight[0] of 5 does not broadcast against the last dim of 2)
    elif case == "half_bias64":
        x, b = x.half(), torch.randn(3, device=device, dtype=torch.float64)
    _same(lambda: tr.batch_norm(x, rm, rv, w, b, training=training),
          lambda: F.batch_norm(x, rm, rv, w, b, training=training))


def test_batch_norm_of_no_elements_gradients(device):
    """The weight and bias of an empty input get torch's gradients (zeros of their shape), the input an empty one;
    running statistics that require grad are no error there (torch's op takes no derivative of them)."""
    grads = []
    for fn in (F.batch_norm, tr.batch_norm):
        x = torch.randn(0, 3, 2, device=device, requires_grad=True)
        w = torch.randn(3, device=device, requires_grad=True)
        b = torch.randn(3, device=device, requires_grad=True)
        rm = torch.randn(3, device=device, requires_grad=True)
        y = fn(x, rm, torch.rand(3, device=device), w, b, training=True)
        y.sum().backward()
        grads.append((y.detach(), x.grad, w.grad, b.grad))
    for got, want in zip(grads[1], grads[0]):
        assert got.shape == want.shape and torch.equal(got, want)
