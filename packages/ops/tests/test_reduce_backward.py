"""Gradients of sum, mean, prod, amax, amin, max, min: torch's derivatives.yaml semantics, eager and registered.

gradcheck in float64 through the public functions (the autograd Functions) and through ``torch.ops.tritred.*``
(the registered autograd); gradients against torch's in float64 over dims, keepdim, layouts, dtypes and
non-contiguous output gradients; prod's zeros, the ties and NaNs of amax/max; dtype= casts; integer inputs.
"""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import LAYOUTS, assert_close, noncontiguous, randn, seed

OPS = torch.ops.tritred


#: Each overload: (id, tritred's call, the registered op's call, torch's call); inputs of shape (2, 4).
OVERLOADS = [
    ("sum-dim", lambda x: tr.sum(x, 1), lambda x: OPS.sum(x, [1], False, None), lambda x: torch.sum(x, 1)),
    ("sum-all", lambda x: tr.sum(x), lambda x: OPS.sum(x, None, False, None), lambda x: torch.sum(x)),
    ("sum-dtype", lambda x: tr.sum(x, (0, 1), True, dtype=torch.float64),
     lambda x: OPS.sum(x, [0, 1], True, torch.float64), lambda x: torch.sum(x, (0, 1), True, dtype=torch.float64)),
    ("mean-dim", lambda x: tr.mean(x, 0, True), lambda x: OPS.mean(x, [0], True, None),
     lambda x: torch.mean(x, 0, True)),
    ("mean-empty-list", lambda x: tr.mean(x, ()), lambda x: OPS.mean(x, [], False, None),
     lambda x: torch.mean(x, ())),
    ("prod-dim", lambda x: tr.prod(x, 1), lambda x: OPS.prod(x, 1, False, None), lambda x: torch.prod(x, 1)),
    ("prod-all", lambda x: tr.prod(x), lambda x: OPS.prod(x, None, False, None), lambda x: torch.prod(x)),
    ("amax", lambda x: tr.amax(x, 1), lambda x: OPS.amax(x, [1], False), lambda x: torch.amax(x, 1)),
    ("amin-all", lambda x: tr.amin(x, (), True), lambda x: OPS.amin(x, [], True), lambda x: torch.amin(x, (), True)),
    ("max-dim", lambda x: tr.max(x, 1).values, lambda x: OPS.max(x, 1, False)[0], lambda x: torch.max(x, 1).values),
    ("min-dim", lambda x: tr.min(x, 0, True).values, lambda x: OPS.min(x, 0, True)[0],
     lambda x: torch.min(x, 0, True).values),
    ("max-all", lambda x: tr.max(x), lambda x: OPS.max_all(x), lambda x: torch.max(x)),
    ("min-all", lambda x: tr.min(x), lambda x: OPS.min_all(x), lambda x: torch.min(x)),
]


@pytest.mark.parametrize("case", OVERLOADS, ids=[c[0] for c in OVERLOADS])
def test_gradcheck(case, device):
    """float64 gradcheck of the eager Function and of the registered op's autograd; the same gradient as torch."""
    _, ours, op, ref = case
    x = randn((2, 4), torch.float64, device, gen_seed=seed()).requires_grad_()
    assert torch.autograd.gradcheck(ours, (x,))
    assert torch.autograd.gradcheck(op, (x,), fast_mode=True)
    g = torch.randn_like(ref(x))
    (a,) = torch.autograd.grad(ours(x), x, g)
    (b,) = torch.autograd.grad(ref(x), x, g)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def _call(module, name, t, args, pick):
    out = getattr(module, name)(t, *args)
    return out if pick is None else out[pick]


def _grads(name, x, what, args=(), pick=None):
    """Our gradient of ``name(x, *args)`` (output ``pick`` of a tuple) on ``x`` (any dtype/layout) against
    torch's on ``x`` in float64, under one output gradient that is not contiguous (transposed, or strided)."""
    leaf = x.detach().requires_grad_()
    out = _call(tr, name, leaf, args, pick)
    g = noncontiguous(out.shape, x.device).to(out.dtype)
    (dx,) = torch.autograd.grad(out, leaf, g)
    ref_leaf = x.detach().double().requires_grad_()
    (ref,) = torch.autograd.grad(_call(torch, name, ref_leaf, args, pick), ref_leaf, g.double())
    assert dx.dtype == x.dtype and dx.shape == x.shape, what
    assert_close(dx, ref, what=what)


#: (shape, dim, keepdim): the last dim, the first, a middle one, tuples, every dim, size-1 and odd sizes.
CASES = [((5, 7), 1, False), ((5, 7), 0, True), ((3, 6, 5), 1, False), ((3, 6, 5), (0, 2), True),
         ((4, 9), None, False), ((2, 3, 4), (), False), ((1, 13), -1, True), ((6, 1, 3), (0, 1), False)]
DTYPES = (torch.float32, torch.bfloat16, torch.float64)


def _rotation():
    """Each case once in each layout and a dtype that rotates with it (every pair of a case's layout and
    dtype is met over the cases; the product would cost 4x more interpreted launches)."""
    for i, (shape, dim, keepdim) in enumerate(CASES):
        for j, layout in enumerate(LAYOUTS):
            yield shape, dim, keepdim, layout, DTYPES[(i + j) % len(DTYPES)]


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
def test_gradients_match_torch(name, device):
    for shape, dim, keepdim, layout, dtype in _rotation():
        if name in ("amax", "amin") and dim is None:
            dim = ()
        x = randn(shape, dtype, device, layout)
        _grads(name, x, f"{name} {shape} {dim} {layout} {dtype}", (dim, keepdim))


@pytest.mark.parametrize("name", ["prod", "max", "min"])
def test_gradients_match_torch_one_dim(name, device):
    """prod (one int dim or all), max and min (with dim: to the index; without: evenly among ties)."""
    for shape, dim, keepdim, layout, dtype in _rotation():
        if not isinstance(dim, int) and dim is not None:
            continue
        x = randn(shape, dtype, device, layout, offset=1.0 if name == "prod" else 0.0, scale=0.3)
        what = f"{name} {shape} {dim} {layout} {dtype}"
        if dim is None:
            _grads(name, x, what)
        else:
            _grads(name, x, what, (dim, keepdim), None if name == "prod" else 0)


def _exact(name, x, args=(), pick=None, g=None):
    """Our float64 gradient of ``name(x, *args)`` equals torch's (one rounding apart at most), NaN where
    torch's is NaN."""
    a_leaf, b_leaf = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = _call(tr, name, a_leaf, args, pick)
    g = torch.randn_like(out) if g is None else g
    (a,) = torch.autograd.grad(out, a_leaf, g)
    (b,) = torch.autograd.grad(_call(torch, name, b_leaf, args, pick), b_leaf, g)
    torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13, equal_nan=True)
    return a


def test_prod_zeros(device):
    """No zero: grad * result / input; one zero in a slice: the product of the others for the zero, 0 for the
    rest; several: 0. A zero anywhere takes every slice through the exclusive products, as torch."""
    x = randn((4, 6), torch.float64, device, offset=1.0, scale=0.5)
    x[0, 2] = 0  # one zero
    x[1, 1] = x[1, 4] = 0  # two zeros
    for dim, keepdim in ((1, False), (0, True), (-1, True)):
        a = _exact("prod", x, (dim, keepdim))
    assert (a[1] == 0).all() and (a[0, :2] == 0).all() and a[0, 2] != 0
    x[3, 0] = float("inf")  # a zero elsewhere: this slice too takes the products (finite for the inf), as torch
    a = _exact("prod", x, (1,))
    assert a[3, 0].isfinite() and a[3, 1:].isinf().all()
    y = randn((2, 5), torch.float64, device, offset=1.0, scale=0.5)
    y[0, 1] = y[1, 3] = 0
    y[1, 0] = float("inf")  # the full product of several zeros: zeros (torch's shortcut), not 0 * inf
    assert (_exact("prod", y) == 0).all()
    for zeros in ((), ((0, 3),), ((0, 3), (2, 4))):  # the full product: none, one zero, two zeros (all 0)
        y = randn((3, 5), torch.float64, device, offset=1.0, scale=0.5)
        for i, j in zeros:
            y[i, j] = 0
        a = _exact("prod", y)
        assert (a == 0).sum() == (14 if len(zeros) == 1 else 15 if zeros else 0)
    # dtype=: the gradient computed in the output's dtype and returned in the input's
    z = x.float()
    leaf = z.clone().requires_grad_()
    (a,) = torch.autograd.grad(tr.prod(leaf, 1, dtype=torch.float64).sum(), leaf)
    ref = z.clone().requires_grad_()
    (b,) = torch.autograd.grad(torch.prod(ref, 1, dtype=torch.float64).sum(), ref)
    assert a.dtype == torch.float32
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_ties_and_nans(device):
    """amax/amin split the gradient evenly among ties (a NaN slice: NaN), max/min with dim send it to the
    index (the first of ties, the first NaN), without dim evenly among ties (or among the NaNs)."""
    x = torch.randint(-2, 3, (4, 6), generator=torch.Generator().manual_seed(seed())).double().to(device)
    x[3, 1] = float("nan")
    x[3, 4] = float("nan")
    for name in ("amax", "amin"):
        for dim in (1, (0, 1), 0):
            a = _exact(name, x, (dim,))
        a = _exact(name, x, (1,))
        assert a[3].isnan().all() and not a[:3].isnan().any()
    for name in ("max", "min"):
        for dim in (0, 1):
            _exact(name, x, (dim,), pick=0)
        a = _exact(name, x)  # NaN wins: the two NaNs share it
        assert a.nonzero().tolist() == [[3, 1], [3, 4]]
        ties = x[:3].clone()
        a = _exact(name, ties, g=torch.tensor(6.0, dtype=torch.float64, device=device))
        extreme = ties.max() if name == "max" else ties.min()
        mask = (ties == extreme).double()
        assert torch.equal(a, mask * 6.0 / mask.sum())


def test_dtype_casts_and_integers(device):
    """dtype=: the gradient in the input's dtype; a non-floating dtype= on an input that requires grad raises
    as torch's autograd; integer inputs (which cannot require grad) take the inference path."""
    x = randn((3, 8), torch.bfloat16, device).requires_grad_()
    for fn in (lambda t: tr.sum(t, 1, dtype=torch.float32), lambda t: tr.mean(t, dtype=torch.float64),
               lambda t: tr.prod(t, 0, True, dtype=torch.float32)):
        out = fn(x)
        assert out.dtype != torch.bfloat16
        (g,) = torch.autograd.grad(out.sum(), x)
        assert g.dtype == torch.bfloat16
    for fn, ref in ((lambda t: tr.sum(t, dtype=torch.int64), lambda t: torch.sum(t, dtype=torch.int64)),
                    (lambda t: tr.prod(t, 1, dtype=torch.int32), lambda t: torch.prod(t, 1, dtype=torch.int32))):
        with pytest.raises(RuntimeError) as want:
            ref(x.detach().cpu().float().requires_grad_())
        with pytest.raises(RuntimeError, match=str(want.value)):
            fn(x)
    ints = torch.randint(-5, 5, (3, 8), device=device)
    for out in (tr.sum(ints, 1), tr.prod(ints), tr.amax(ints, 0), tr.max(ints, 1).values, tr.min(ints)):
        assert out.grad_fn is None and not out.requires_grad
    assert tr.sum(ints, dtype=torch.float32).grad_fn is None  # (an integer input does not require grad)


def test_double_backward_eager(device):
    """The eager backward is made of differentiable torch ops: create_graph works (gradgradcheck), as torch's."""
    x = randn((2, 4), torch.float64, device, offset=1.0, scale=0.5).requires_grad_()
    for fn in (lambda t: tr.prod(t, 1), lambda t: tr.amax(t, 1), lambda t: tr.mean(t, 0), lambda t: tr.max(t)):
        assert torch.autograd.gradgradcheck(fn, (x,))
