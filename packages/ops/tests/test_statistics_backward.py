"""Gradients of var, std, var_mean, std_mean (torch's var_backward and kin, to the letter), their torch.library
ops (opcheck, torch.compile with backward) and the inference fast path."""

from __future__ import annotations

import warnings

import pytest
import torch
import tritred_ops as tr
from ops_helpers import EPS, LAYOUTS, assert_compiled_matches_eager, noncontiguous, randn, seed
from tritred_ops.families.statistics.autograd import FUNCTIONS

OPS = torch.ops.tritred
NAMES = ("var", "std", "var_mean", "std_mean")



def _loss(out, weights):
    """A scalar of the output(s): each output times its weight tensor, summed."""
    outs = out if isinstance(out, tuple) else (out,)
    return sum((o * w).sum() for o, w in zip(outs, weights))


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck(name, device):
    """float64 gradcheck of the eager Function and of the registered op's autograd, over a dim, all dims, and
    keepdim."""
    x = randn((2, 5), torch.float64, device, gen_seed=seed()).requires_grad_()
    ours = getattr(tr, name)
    assert torch.autograd.gradcheck(lambda t: ours(t, 1), (x,))
    assert torch.autograd.gradcheck(lambda t: ours(t, None, keepdim=True, correction=0), (x,))
    assert torch.autograd.gradcheck(lambda t: getattr(OPS, name)(t, [0], 1.0, False), (x,), fast_mode=True)


#: (shape, dim, keepdim): the last dim, the first, a middle one, tuples, every dim.
CASES = [((5, 7), 1, False), ((5, 7), 0, True), ((3, 6, 5), 1, False), ((3, 6, 5), (0, 2), True),
         ((4, 9), None, False), ((2, 1, 11), (-1, 0), False)]
DTYPES = (torch.float32, torch.bfloat16, torch.float64)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_match_torch(name, device):
    """Every case in every layout, the dtype rotating (float16/bfloat16 gradients: float32 math, one rounding),
    output gradients not contiguous (transposed)."""
    ours, ref = getattr(tr, name), getattr(torch, name)
    for i, (shape, dim, keepdim) in enumerate(CASES):
        for j, layout in enumerate(LAYOUTS):
            dtype = DTYPES[(i + j) % len(DTYPES)]
            x = randn(shape, dtype, device, layout, offset=3.0)  # (a mean away from 0)
            leaf, ref_leaf = x.detach().requires_grad_(), x.detach().double().requires_grad_()
            out = ours(leaf, dim, keepdim=keepdim)
            outs = out if isinstance(out, tuple) else (out,)
            weights = [noncontiguous(o.shape, device) for o in outs]
            weights = [w.to(dtype) for w in weights]  # (the reference takes the same rounded weights)
            (dx,) = torch.autograd.grad(outs, leaf, weights)
            (want,) = torch.autograd.grad(_loss(ref(ref_leaf, dim, keepdim=keepdim), [w.double() for w in weights]),
                                          ref_leaf)
            assert dx.dtype == dtype
            # one rounding of the saved outputs (std) and of the result, relative to the terms' size
            eps = EPS[dtype] * 4
            err, bound = (dx.double() - want).abs(), eps * (want.abs() + want.abs().max())
            assert (err <= bound).all(), f"{name} {shape} {dim} {layout} {dtype}: max error {err.max().item()}"


def _call(module, name, t, args, kwargs, pick):
    out = getattr(module, name)(t, *args, **kwargs)
    return out if pick is None else out[pick]


def _exact(name, x, weights, args=(), kwargs=None, pick=None):
    """Our float64 gradient of ``name(x, *args, **kwargs)`` (output ``pick``, or every output) under the
    output gradients ``weights`` equals torch's (NaN and inf where torch's are)."""
    kwargs = kwargs or {}
    a_leaf, b_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    (a,) = torch.autograd.grad(_loss(_call(tr, name, a_leaf, args, kwargs, pick), weights), a_leaf)
    (b,) = torch.autograd.grad(_loss(_call(torch, name, b_leaf, args, kwargs, pick), weights), b_leaf)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)
    return a


@pytest.mark.parametrize("name", NAMES)
def test_correction_edge_cases(name, device):
    """N - correction > 0, == 0 and < 0, with dim=None (torch: NaN where x == mean, else inf, when <= 0), a dim
    list (torch: the factor 2 / (N - correction) as is: inf, negative), dim=() (torch counts N = 1), fractional
    corrections, a 0-d input; var_mean/std_mean with only one output used (the other's gradient undefined, not
    zero: a used mean stays finite)."""
    x = randn((3, 4), torch.float64, device, gen_seed=seed())
    x[2] = 0.5  # a constant row: std 0 (its gradient masked to 0 before var's formula)
    ref = getattr(torch, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "degrees of freedom is <= 0"
        # N = 12, 12, 4, 3 (and 1 for dim=() in torch's backward): N - correction > 0, == 0, < 0 for each
        for dim, corrections in ((None, (1, 12, 13)), ((0, 1), (2.5, 12, 13)), (1, (0, 4, 5)), (0, (1, 3, 4)),
                                 ((), (0, 1, 2.5))):
            for correction in corrections:
                probe = ref(x, dim, correction=correction)
                kw = {"correction": correction}
                if not isinstance(probe, tuple):
                    _exact(name, x, [torch.rand_like(probe)], (dim,), kw)
                    continue
                weights = [torch.rand_like(o) for o in probe]
                _exact(name, x, weights, (dim,), kw)
                for k in (0, 1):  # one output used: the other's gradient is undefined
                    _exact(name, x, [weights[k]], (dim,), kw, pick=k)
        x0 = x[0, 0].clone()
        for correction in (0, 1, 2):
            weights = [torch.rand((), dtype=torch.float64, device=device) for _ in range(2)]
            _exact(name, x0, weights, (0,), {"correction": correction})
            _exact(name, x0, weights, (), {"correction": correction})


def test_nan_and_legacy_forms(device):
    """A NaN in a slice gives that slice NaN gradients (as torch); unbiased= and var(x, False) give the same
    gradients as their corrections."""
    x = randn((3, 6), torch.float64, device)
    x[1, 2] = float("nan")
    w = [torch.rand(3, dtype=torch.float64, device=device)]
    a = _exact("std", x, w, (1,))
    assert a[1].isnan().all() and not a[[0, 2]].isnan().any()
    y = randn((3, 6), torch.float64, device)
    _exact("var", y, [torch.rand((), dtype=torch.float64, device=device)], (False,))
    _exact("var_mean", y, [torch.rand(6, dtype=torch.float64, device=device) for _ in range(2)], (0,),
           {"unbiased": False})


@pytest.mark.parametrize("name", NAMES)
def test_opcheck(name, device):
    x = randn((3, 5), torch.float32, device).requires_grad_()
    for args in ((x, [1], 1.0, False), (x.t(), None, 0.0, True), (x, [], 2.0, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.library.opcheck(getattr(OPS, name).default, args)


def _model(x):
    v, m = tr.var_mean(x, 1, keepdim=True)
    s, m2 = tr.std_mean(x, (0, 1), correction=0)
    return tr.var(x, 0).sum() + tr.std(x, 1, unbiased=False).sum() + (v * m).sum() + s * m2 + m.sum()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_with_backward(dynamic, device):
    """torch.compile(fullgraph=True, backend="aot_eager"): outputs and gradients equal eager's; dynamic: a second
    shape without recompiling."""
    shapes = [(3, 5), (4, 7)] if dynamic else [(3, 5)]
    assert_compiled_matches_eager(_model, [randn(s, torch.float32, device).requires_grad_() for s in shapes], dynamic)


def test_inference_fast_path_has_no_op_boundary(monkeypatch, device):
    """No Function and no registered op without grad; every call through its Function with grad."""
    used: list[str] = []
    for fn in FUNCTIONS.values():
        real = fn.forward
        monkeypatch.setattr(fn, "forward", staticmethod(
            lambda *a, _real=real, _n=fn.__name__: used.append(_n) or _real(*a)))

    class Ops(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "tritred":
                used.append(str(func))
            return func(*args, **(kwargs or {}))

    def calls(t):
        return [tr.var(t, 1), tr.std(t), tr.var_mean(t, 0)[0], tr.std_mean(t, 1, keepdim=True)[1]]

    x = randn((3, 5), torch.float32, device).requires_grad_()
    with Ops():
        with torch.no_grad():
            calls(x)
        calls(x.detach())
    assert used == []
    assert all(o.requires_grad for o in calls(x)) and len(used) == 4


def test_double_backward_eager(device):
    x = randn((2, 4), torch.float64, device).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda t: tr.std_mean(t, 1), (x,))
