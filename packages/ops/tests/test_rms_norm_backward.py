"""rms_norm's backward: gradients of input and weight against torch's (float64 references on fresh random inputs),
gradcheck, every backward branch, strided inputs and gradients, weights of other dtypes, determinism, skipped
gradients, and the registered torch.library ops (opcheck, torch.compile)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn
from tritred_ops.families.rms_norm import autograd as rms_autograd

BRANCHES = [dict(strategy="single_pass", BLOCK_M=1, BLOCK_N=64),
            dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=64, num_programs=3, num_stages=2),
            dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=16),
            dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16, num_programs=2)]


def _leaf(t, grad=True):
    return None if t is None else t.detach().clone().requires_grad_(grad)


def grads(fn, dy, *inputs):
    out = fn(*inputs)
    out.backward(dy)
    return out, [None if t is None else t.grad for t in inputs]


def _eps(x, eps):
    """The eps tritred (and torch) add for ``x``'s dtype: the reference runs in float64, whose default differs."""
    return torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps if eps is None else eps


def check(x, ns, w, dy, what, eps=None):
    out, got = grads(lambda a, b: tr.rms_norm(a, ns, b, eps), dy, x, w)
    d = [None if t is None else t.detach().double().cpu().requires_grad_(t.requires_grad) for t in (x, w)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_out, want = grads(lambda a, b: F.rms_norm(a, ns, b, _eps(x, eps)), dy.detach().double().cpu(), *d)
    assert_close(out, ref_out, n=16, scale=4, what=f"out {what}")
    rows = x.numel() // max(1, torch.Size(ns).numel())
    for name, g, r, t in zip(("dx", "dw"), got, want, (x, w)):
        if r is None:
            assert g is None, f"{name} {what}: a gradient where torch has none"
            continue
        assert g.dtype == t.dtype and g.shape == t.shape, f"{name} {what}: {g.dtype} {tuple(g.shape)}"
        # (a float64 weight of a float32 input: x_hat is a float32 value, in torch's composite path too)
        g = g.to(x.dtype) if g.dtype == torch.float64 and x.dtype != torch.float64 else g
        assert_close(g, r, n=rows if name == "dw" else 64, scale=16, what=f"{name} {what}")


@pytest.mark.parametrize("op", ["public", "registered"])
def test_gradcheck(op, device):
    """gradcheck in float64 through the eager Function and through the registered op's autograd: every Jacobian
    entry of a tiny call, a random projection (fast mode) over two normalized dims and without a weight."""
    fn = {"public": lambda x, ns, w: tr.rms_norm(x, ns, w, 1e-3),
          "registered": lambda x, ns, w: torch.ops.tritred.rms_norm(x, list(ns), w, 1e-3)[0]}[op]
    for shape, ns, fast in (((2, 5), (5,), False), ((2, 3, 4), (3, 4), True)):
        x = randn(shape, torch.float64, device, offset=0.5).requires_grad_()
        w = randn(ns, torch.float64, device).requires_grad_()
        assert torch.autograd.gradcheck(lambda x, w, ns=ns: fn(x, ns, w), (x, w), fast_mode=fast)
    x = randn((3, 7), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: fn(x, (7,), None), (x,), fast_mode=True)


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_gradients_match_torch(dtype, D, device):
    """Normalized shapes of 1-3 dims (N = 9, 63, 315: the interpreter's single pass and its loop), eps None."""
    shape = (4, 5, 7, 9)
    ns = shape[4 - D:]
    x = randn(shape, dtype, device, offset=1.0).requires_grad_()
    w = randn(ns, dtype, device).requires_grad_()
    check(x, ns, w, randn(shape, dtype, device), f"{dtype} D={D}")


@pytest.mark.triton_compat
@pytest.mark.parametrize("cfg", BRANCHES, ids=str)
def test_every_backward_branch(cfg, force, device):
    """Each branch forced (``direction="backward"``) on 11 rows of 37 (a partial last row block, a partial last
    chunk), with and without a weight."""
    force("rms_norm", direction="backward", **cfg)
    x = randn((11, 37), torch.float32, device, offset=-1.0)
    w, dy = randn((37,), torch.float32, device), randn((11, 37), torch.float32, device)
    for weight in (w, None):
        check(_leaf(x), (37,), _leaf(weight), dy, f"{cfg} {weight is None}", eps=1e-5)


@pytest.mark.parametrize(("x_layout", "dy_layout"), [("transposed", "contiguous"), ("sliced", "expanded"),
                                                     ("contiguous", "transposed"), ("expanded", "sliced")])
def test_strided_inputs_and_output_gradients(x_layout, dy_layout, device):
    for ns in ((6,), (5, 6)):
        x = randn((4, 5, 6), torch.float32, device, x_layout).requires_grad_()
        w = randn(ns, torch.float32, device).requires_grad_()
        check(x, ns, w, randn((4, 5, 6), torch.float32, device, dy_layout), f"x {x_layout} dy {dy_layout} {ns}")


@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(torch.bfloat16, torch.float32), (torch.float32, torch.float64)])
def test_weights_of_other_dtypes(x_dtype, w_dtype, device):
    """dx in the input's dtype, dw in the weight's (float64 partials for a float64 weight), as torch's."""
    x = randn((9, 40), x_dtype, device, offset=1.0).requires_grad_()
    w = randn((40,), w_dtype, device).requires_grad_()
    check(x, (40,), w, randn((9, 40), x_dtype, device), f"{x_dtype} {w_dtype}", eps=1e-6)


def test_gradients_not_needed_are_not_computed(device):
    """A frozen input: no dx (NEED_DX off); a frozen weight: no dw partials and no summing launch."""
    from test_layer_norm_backward import launches

    x, w, dy = (randn(s, torch.float32, device) for s in ((5, 24), (24,), (5, 24)))
    for gx, gw in ((True, False), (False, True)):
        xs, ws = _leaf(x, gx), _leaf(w, gw)
        y = tr.rms_norm(xs, [24], ws)
        with launches() as seen:
            y.backward(dy)
        assert [(n, kw.get("NEED_DX"), kw.get("NEED_DW")) for n, kw in seen][:1] == [("_norm_backward_kernel", gx, gw)]
        assert len(seen) == 1 + gw and (xs.grad is None) != gx and (ws.grad is None) != gw


def test_gradients_are_deterministic(force, device):
    """dx and dw bit for bit on a second run (per-program partials summed in a fixed order)."""
    force("rms_norm", direction="backward", strategy="single_pass", BLOCK_M=2, BLOCK_N=128, num_programs=3)
    x, w, dy = (randn(s, torch.bfloat16, device) for s in ((19, 100), (100,), (19, 100)))
    runs = [grads(lambda a, b: tr.rms_norm(a, [100], b), dy, _leaf(x), _leaf(w))[1] for _ in range(2)]
    for name, g0, g1 in zip(("dx", "dw"), *runs):
        assert torch.equal(g0.view(torch.int16), g1.view(torch.int16)), name


def test_inference_takes_no_autograd_path(device, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("autograd path taken")
    x, w = randn((4, 16), torch.float32, device), randn((16,), torch.float32, device).requires_grad_()
    monkeypatch.setattr(rms_autograd.RMSNormFunction, "forward", staticmethod(refuse))
    with torch.no_grad():
        tr.rms_norm(x, [16], w)
    tr.rms_norm(x, [16], w.detach())
    with pytest.raises(AssertionError, match="autograd path"):
        tr.rms_norm(x, [16], w)


def test_opcheck(device):
    x, w = randn((3, 5), torch.float64, device, offset=1.0), randn((5,), torch.float64, device)
    for weight, eps in ((w, None), (None, 1e-3)):
        torch.library.opcheck(torch.ops.tritred.rms_norm.default,
                              (x.clone().requires_grad_(), [5], _leaf(weight), eps))
    _, rstd = torch.ops.tritred.rms_norm(x, [5], w, None)
    dy = randn((3, 5), torch.float64, device)
    for mask, weight in (([True, True], w), ([False, True], w), ([True, False], None)):
        torch.library.opcheck(torch.ops.tritred.rms_norm_backward.default, (dy, x, [5], rstd, weight, mask))


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_forward_and_backward(dynamic, device):
    """torch.compile(fullgraph=True, backend="aot_eager"), static and dynamic: outputs and gradients equal eager's."""
    def f(x, w):
        return (tr.rms_norm(x, [x.shape[-1]], w) * x).sum()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    for shape in ((3, 8), (5, 8), (4, 12)):
        x, w = randn(shape, torch.float32, device, offset=1.0), randn(shape[-1:], torch.float32, device)
        got, want = grads(compiled, None, _leaf(x), _leaf(w)), grads(f, None, _leaf(x), _leaf(w))
        assert torch.equal(got[0], want[0]) and all(torch.equal(g, r) for g, r in zip(got[1], want[1])), shape
