"""cross_entropy's autograd and torch integration: gradcheck (eager Function and the registered op), opcheck,
torch.compile (aot_eager, fullgraph, static and dynamic), the gradient formed in the forward (one logits-sized
buffer, scaled in place), a second backward, the gradients of probability targets and weights, the three-way
dispatch."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
import tritred_ops.families.cross_entropy as xe
from ops_helpers import assert_close, randn
from tritred_ops.families.cross_entropy import autograd as xa

IGNORE = -100


def _class_call(device, dtype=torch.float64):
    x = randn((3, 5), dtype, device, scale=2).requires_grad_()
    t = torch.tensor([1, IGNORE, 4], device=device)
    w = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.7], dtype=dtype, device=device)
    return x, t, w


def _fd_check(f, x, seed_=0, h=1e-6):
    """The eager path's input gradient against central differences in float64, in a few random directions (what
    ``gradcheck(fast_mode=True)`` does, with a fresh forward per backward: the eager backward hands its formed
    gradient to autograd, so that it refuses the second backward through one graph that gradcheck makes)."""
    gen = torch.Generator().manual_seed(seed_)
    x = x.detach()
    out = f(x)
    v = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(x.device)
    for _ in range(3):
        u = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.device)
        numeric = ((f(x + h * u) - f(x - h * u)) * v).sum() / (2 * h)
        xg = x.clone().requires_grad_()
        f(xg).backward(v)
        analytic = (xg.grad * u).sum()
        assert torch.allclose(analytic, numeric, rtol=1e-5, atol=1e-7), (analytic, numeric)


def test_gradcheck_class_indices(device):
    x, t, w = _class_call(device)
    for kw in (dict(label_smoothing=0.2), dict(reduction="none")):
        _fd_check(lambda a, kw=kw: tr.cross_entropy(a, t, w, **kw), x)


def test_gradcheck_probabilities_input_target_weight(device):
    """Probability targets: the target's and the weight's gradients (torch's composite formula) by gradcheck
    (no formed gradient: the logits do not require grad), the input's by central differences."""
    x = randn((2, 4), torch.float64, device)
    q = torch.softmax(randn((2, 4), torch.float64, device), 1).requires_grad_()
    w = (torch.rand(4, dtype=torch.float64) + 0.5).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda b, c: tr.cross_entropy(x, b, c, label_smoothing=0.3), (q, w),
                                    fast_mode=True)
    _fd_check(lambda a: tr.cross_entropy(a, q.detach(), w.detach(), label_smoothing=0.3), x)


def test_gradcheck_registered_op(device):
    """The registered autograd of ``torch.ops.tritred.cross_entropy`` (what torch.compile traces)."""
    x, t, w = _class_call(device)
    assert torch.autograd.gradcheck(
        lambda a: torch.ops.tritred.cross_entropy(a, t, w, IGNORE, 1, 0.1, True, False)[0], (x,), fast_mode=True)
    q = torch.softmax(randn((2, 4), torch.float64, device), 1).requires_grad_()
    y = randn((2, 4), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, b: torch.ops.tritred.cross_entropy(a, b, None, IGNORE, 2, 0.0, True, True)[0], (y, q),
        fast_mode=True)


def test_opcheck(device):
    x = randn((4, 6), torch.float32, device).requires_grad_()
    t = torch.tensor([0, 5, IGNORE, 2], device=device)
    q = torch.softmax(randn((4, 6), torch.float32, device), 1)
    w = torch.rand(6, device=device)
    samples = [(x, t, w, IGNORE, 1, 0.1, True, False), (x, q, None, IGNORE, 0, 0.0, True, False),
               (x.detach(), t, None, IGNORE, 2, 0.0, False, False)]
    for args in samples:
        torch.library.opcheck(torch.ops.tritred.cross_entropy.default, args)
    g = torch.randn(4, 6, device=device)
    torch.library.opcheck(torch.ops.tritred.cross_entropy_backward.default, (g, torch.tensor(0.5, device=device), t,
                                                                             IGNORE))
    torch.library.opcheck(torch.ops.tritred.cross_entropy_backward.default, (g, torch.rand(4, device=device), None,
                                                                             IGNORE))


def _step(f, x, t, w):
    x = x.detach().clone().requires_grad_()
    loss = f(x, t, w)
    loss.backward()
    return loss.detach(), x.grad


@pytest.mark.parametrize("dynamic", (False, True))
def test_compile_fullgraph(dynamic, device):
    """torch.compile(fullgraph=True, backend="aot_eager") traces the op and its backward without a graph break;
    loss and gradient equal eager's (static and dynamic shapes: a second shape reuses the dynamic graph)."""
    torch._dynamo.reset()

    def f(x, t, w):
        return tr.cross_entropy(x * 2.0, t, w, label_smoothing=0.1) + 1.0

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    for rows in (4, 6):
        x = randn((rows, 7), torch.float32, device)
        t = torch.randint(0, 7, (rows,), device=device)
        t[1] = IGNORE
        w = torch.rand(7, device=device)
        (l1, g1), (l2, g2) = _step(compiled, x, t, w), _step(f, x, t, w)
        assert torch.allclose(l1, l2, rtol=1e-6) and torch.allclose(g1, g2, rtol=1e-5, atol=1e-7)
    ref = _step(lambda a, b, c: F.cross_entropy(a * 2.0, b, c, label_smoothing=0.1) + 1.0, x.double(), t,
                w.double())
    assert_close(l1, ref[0], n=7, scale=4) and assert_close(g1, ref[1], n=7)


def test_compile_probabilities_and_no_grad(device):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, q: tr.cross_entropy(x, q, reduction="sum"), backend="aot_eager",
                             fullgraph=True)
    x = randn((3, 5), torch.float32, device)
    q = torch.softmax(randn((3, 5), torch.float32, device), 1).requires_grad_()
    xg = x.clone().requires_grad_()
    compiled(xg, q).backward()
    ref_x = x.double().requires_grad_()
    ref_q = q.detach().double().requires_grad_()
    F.cross_entropy(ref_x, ref_q, reduction="sum").backward()
    assert_close(xg.grad, ref_x.grad, n=5) and assert_close(q.grad, ref_q.grad, n=5)
    with torch.no_grad():
        assert_close(compiled(x, q), F.cross_entropy(x.double(), q.double(), reduction="sum"), n=5, scale=5)


class _Allocation(NamedTuple):
    shape: torch.Size
    dtype: torch.dtype
    nbytes: int
    ptr: int


def _allocation_spy(monkeypatch):
    """Every tensor allocated through torch.empty / empty_like / empty_strided from now on, as (shape, dtype,
    bytes, pointer): no reference to the tensor. (A compiled plan built while the spy is in place binds it and
    calls it on every later replay: a spy that kept the tensors would keep each replay's gradient buffer alive,
    and autograd would then copy the buffer into x.grad instead of taking it.)"""
    seen = []
    for name in ("empty", "empty_like", "empty_strided"):
        real = getattr(torch, name)

        def spy(*a, _real=real, **k):
            t = _real(*a, **k)
            seen.append(_Allocation(t.shape, t.dtype, t.numel() * t.element_size(), t.data_ptr()))
            return t
        monkeypatch.setattr(torch, name, spy)
    return seen


def test_one_logits_sized_buffer(monkeypatch, device):
    """The forward with grad allocates exactly one tensor of the logits' size (the gradient, formed there), the
    backward none: the buffer, scaled in place, becomes ``x.grad``. Twice: the second call replays its plan (on
    CUDA through a compiled plan, which binds torch's allocators when it is built: there the CUDA allocator's
    count of bytes shows it)."""
    from tritred_ops.runtime.caches import caches

    caches().clear()  # (the first call takes the full path, whatever this worker ran before)
    for replay in (False, True):
        # (logits of 64 KB: the CUDA allocator's 512-byte blocks of the small tensors, the loss and the upstream
        # gradient, stay well below one logits-sized buffer)
        x = randn((16, 2048), torch.bfloat16, device).requires_grad_()
        t = torch.randint(0, 2048, (16,), device=device)
        size = x.numel() * x.element_size()
        seen = _allocation_spy(monkeypatch)
        before = torch.cuda.memory_allocated() if device == "cuda" else 0
        loss = tr.cross_entropy(x, t)
        if replay and device == "cuda":
            assert size <= torch.cuda.memory_allocated() - before < size + 4096
            ptr = None
        else:
            big = [a for a in seen if a.nbytes >= size]
            assert len(big) == 1 and big[0].shape == x.shape and big[0].dtype == x.dtype, [a.shape for a in seen]
            ptr = big[0].ptr
            del big
        seen.clear()
        before = torch.cuda.memory_allocated() if device == "cuda" else 0
        loss.backward(torch.tensor(3.0, dtype=loss.dtype, device=device))  # (a factor of 3: scaled in place)
        assert not [a for a in seen if a.nbytes >= size]
        if device == "cuda":
            assert torch.cuda.memory_allocated() - before < size
        assert ptr is None or x.grad.data_ptr() == ptr
        monkeypatch.undo()
        ref = _step(lambda a, b, c: 3 * F.cross_entropy(a, b), x.detach().double(), t, None)[1]
        assert_close(x.grad, ref, n=2048, scale=ref.abs().max().item())
        # (the loss's graph holds x, and with it x.grad, through its AccumulateGrad node: freed here, not while
        # the next call is counted, where they made the count 5 KB lower)
        del loss


def test_second_backward_raises(device):
    """retain_graph=True: a second backward would scale the buffer (now x.grad) again: a RuntimeError naming the
    op instead of a silently wrong gradient; through the registered op (compile's path) it is correct."""
    x = randn((3, 8), torch.float32, device).requires_grad_()
    t = torch.tensor([1, 2, 3], device=device)
    loss = tr.cross_entropy(x, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=r"tritred\.cross_entropy\(\): .*second backward"):
        loss.backward()
    y = x.detach().clone().requires_grad_()
    out = torch.ops.tritred.cross_entropy(y, t, None, IGNORE, 1, 0.0, True, False)[0]
    out.backward(retain_graph=True)
    first = y.grad.clone()
    out.backward()
    assert torch.allclose(y.grad, 2 * first)


def test_loss_gradient_scales_rows(device):
    """'none' with a strided per-row loss gradient, factors of exactly 1 (rows skipped) among others; 'sum' with
    an infinite factor: ignored rows keep a zero gradient, as torch's (never multiplied)."""
    x = randn((5, 9), torch.float32, device, scale=2).requires_grad_()
    t = torch.tensor([1, IGNORE, 4, 8, 0], device=device)
    g = torch.tensor([[1.0, 0], [2.5, 0], [1.0, 0], [-0.5, 0], [0.0, 0]], device=device)[:, 0]
    tr.cross_entropy(x, t, reduction="none").backward(g)
    ref = _step(lambda a, b, c: (F.cross_entropy(a, b, reduction="none") * g.double()).sum(), x.detach().double(),
                t, None)[1]
    assert_close(x.grad, ref, n=9)
    x.grad = None
    tr.cross_entropy(x, t, reduction="sum").backward(torch.tensor(float("inf"), device=device))
    assert torch.equal(x.grad[1], torch.zeros(9, device=device)) and x.grad[0].isinf().any()


def test_inference_takes_no_function_and_no_op(monkeypatch, device):
    """No grad: no autograd.Function, no op boundary (the replayed fast path); grad: the Function, not the op."""
    calls = []
    monkeypatch.setattr(xa.CrossEntropyFunction, "forward", staticmethod(lambda *a: calls.append("function") or 0))
    monkeypatch.setattr(xe, "_cross_entropy_compiled", lambda *a: calls.append("op") or 0)
    x = randn((3, 6), torch.float32, device).requires_grad_()
    t = torch.tensor([0, 1, 2], device=device)
    with torch.no_grad():
        tr.cross_entropy(x, t)
    with torch.inference_mode():
        tr.cross_entropy(x, t)
    tr.cross_entropy(x.detach(), t)
    assert calls == []
    tr.cross_entropy(x, t)
    assert calls == ["function"]


def test_gradients_are_deterministic_and_target_grad_dtypes(device):
    """Probability targets in another dtype than the logits: each gradient in its tensor's dtype."""
    x = randn((4, 10), torch.bfloat16, device).requires_grad_()
    q = torch.softmax(randn((4, 10), torch.float32, device), 1).requires_grad_()
    w = torch.rand(10, device=device).requires_grad_()
    tr.cross_entropy(x, q, w, reduction="mean", label_smoothing=0.1).backward()
    assert (x.grad.dtype, q.grad.dtype, w.grad.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    xr, qr, wr = (a.detach().double().requires_grad_() for a in (x, q, w))
    F.cross_entropy(xr, qr, wr, label_smoothing=0.1).backward()
    assert_close(x.grad, xr.grad, n=10, scale=xr.grad.abs().max().item())
    assert_close(q.grad, qr.grad, n=10, scale=qr.grad.abs().max().item())
    assert_close(w.grad, wr.grad, n=40, scale=wr.grad.abs().max().item())


@pytest.mark.parametrize("case", ["C input, (1,) target", "no classes, smoothing", "all ignored, smoothing",
                                  "no samples, probabilities"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_composite_edges_are_torchs(case, reduction, device):
    """The composite path (forward-mode AD here) at the edges: a (C,) input with a (1,) target (without label
    smoothing, which torch 2.13 refuses there), no classes or every target ignored under label smoothing (NaN, not
    a ZeroDivisionError), no samples with probability targets (a NaN mean whose tangent is torch's -0); values and
    tangents as torch's."""
    import torch.autograd.forward_ad as fwAD

    f64 = torch.float64
    x, target, smoothing = {
        "C input, (1,) target": (randn((5,), f64, device), torch.tensor([2], device=device), 0.0),
        "no classes, smoothing": (randn((3, 0), f64, device), torch.ones(3, 0, dtype=f64, device=device), 0.1),
        "all ignored, smoothing": (randn((3, 4), f64, device), torch.full((3,), -100, device=device), 0.1),
        "no samples, probabilities": (randn((0, 5), f64, device), torch.zeros(0, 5, dtype=f64, device=device), 0.0),
    }[case]
    v = randn(tuple(x.shape), f64, device)
    results = []
    for f in (tr.cross_entropy, F.cross_entropy):
        with fwAD.dual_level():
            out = fwAD.unpack_dual(f(fwAD.make_dual(x, v), target, reduction=reduction, label_smoothing=smoothing))
        results.append((out.primal, out.tangent))
    (p, t), (p_ref, t_ref) = results
    assert p.shape == p_ref.shape
    torch.testing.assert_close(p, p_ref, equal_nan=True)
    if t_ref is not None:
        torch.testing.assert_close(t, t_ref, equal_nan=True)


def test_composite_errors_name_the_op(device):
    """A class index out of range on the composite path: torch's error, prefixed with the op's name (on the CPU;
    on CUDA torch's nll_loss stops with a device-side assert, which ends the process's CUDA context)."""
    if device != "cpu":
        pytest.skip("torch's nll_loss refuses the index with a device-side assert on CUDA")
    x = randn((3, 4), torch.float64, device)
    with pytest.raises(IndexError, match=r"cross_entropy\(\): Target 5 is out of bounds"):
        torch.func.grad(lambda u: tr.cross_entropy(u, torch.tensor([1, 5, 0], device=device)))(x)
