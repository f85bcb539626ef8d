"""What autograd can ask beyond a first-order gradient: each op either does it as torch does or raises, never a
silently wrong or missing result.

Second order: the ops whose backward is a Triton kernel (the norms, batch_norm, softmax, log_softmax, logsumexp,
cross_entropy) do not support a double backward. Under ``create_graph=True`` their gradients must still depend on
the inputs that require grad, so that differentiating them raises (naming the op) instead of silently dropping a
second-order term: the case here is a gradient penalty through an op whose output enters the loss linearly, where
the incoming gradient is a constant (torch's own ``once_differentiable`` returns a constant gradient there).

Forward mode (``torch.autograd.forward_ad``) and torch.func transforms (vmap, grad, jvp) and batched gradients are
not supported: they raise NotImplementedError; a dual input's tangent is never dropped.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import randn

T = torch.tensor


def _cases(device):
    t = T([1, 2, 0, 4], device=device)
    return {
        "layer_norm": ((4, 6), lambda f, x, w: f.layer_norm(x, (6,), w)),
        "rms_norm": ((4, 6), lambda f, x, w: f.rms_norm(x, (6,), w)),
        "batch_norm": ((4, 6, 3), lambda f, x, w: f.batch_norm(x, None, None, w, None, True)),
        "softmax": ((4, 6), lambda f, x, w: f.softmax(x * w, -1)),
        "log_softmax": ((4, 6), lambda f, x, w: f.log_softmax(x * w, -1)),
        "logsumexp": ((4, 6), lambda f, x, w: (tr if f is tr else torch).logsumexp(x * w, -1)),
        "cross_entropy": ((4, 6), lambda f, x, w: f.cross_entropy(x * w, t)),
    }


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "batch_norm", "softmax", "log_softmax", "logsumexp",
                                "cross_entropy"])
def test_gradient_penalty_raises_instead_of_a_cut_gradient(op, device):
    shape, call = _cases(device)[op]
    x0 = randn(shape, torch.float64, device)
    w0 = randn((shape[1],), torch.float64, device)
    out_shape = call(F, x0, w0).shape
    v = randn(tuple(out_shape), torch.float64, device) if len(out_shape) else T(1.3, dtype=torch.float64,
                                                                                  device=device)
    named = rf"tritred\.{op}\(\): its backward is not differentiable"
    grads = []
    for f in (tr, F):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        critic = (call(f, x, w) * v).sum()  # (linear in the op's output: a constant incoming gradient)
        if f is tr and op == "cross_entropy":  # (it saves no logits to link its gradient to: refused at once)
            with pytest.raises(RuntimeError, match=named + ".*create_graph=True"):
                torch.autograd.grad(critic, x, create_graph=True)
            (gx,) = torch.autograd.grad(critic, x)
            grads.append(gx)
            continue
        (gx,) = torch.autograd.grad(critic, x, create_graph=True)
        assert gx.requires_grad, f  # (never a gradient cut from the graph)
        grads.append(gx.detach())
        if f is tr:
            with pytest.raises(RuntimeError, match=named):
                torch.autograd.grad((gx.norm() - 1) ** 2, w, retain_graph=True)
            with pytest.raises(RuntimeError, match=named):
                ((gx.norm() - 1) ** 2).backward()
    torch.testing.assert_close(grads[0], grads[1])  # the first-order gradient itself is torch's



def test_forward_mode_ad_raises_instead_of_dropping_the_tangent(device):
    import torch.autograd.forward_ad as fwAD

    x = randn((3, 5), torch.float64, device)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, torch.ones_like(x))
        for call in (lambda t: tr.softmax(t, -1), lambda t: tr.sum(t, 1), lambda t: tr.layer_norm(t, (5,)),
                     lambda t: tr.var(t, 1)):
            with pytest.raises(NotImplementedError, match="jvp"):
                call(dual)
        # (no dual input inside a dual level: the result as usual)
        torch.testing.assert_close(tr.softmax(x, -1), torch.softmax(x, -1))


def test_torch_func_and_batched_gradients_raise(device):
    x = randn((3, 5), torch.float64, device)
    message = "torch.func transforms .* not supported"
    with pytest.raises(NotImplementedError, match="tritred sum: " + message):
        torch.func.vmap(lambda t: tr.sum(t, 0))(x)
    with pytest.raises(NotImplementedError, match="tritred layer_norm_backward: " + message):
        torch.func.grad(lambda t: (tr.layer_norm(t, (5,)) * x).sum())(x)
    leaf = x.clone().requires_grad_()
    with pytest.raises(NotImplementedError, match="tritred softmax_backward: " + message):
        torch.autograd.grad(tr.softmax(leaf, -1), leaf, randn((2, 3, 5), torch.float64, device),
                            is_grads_batched=True)


class _DropGrad(torch.autograd.Function):
    """Passes its input on and gives back no gradient: the op before it gets an undefined output gradient."""

    @staticmethod
    def forward(ctx, y):
        return y.clone()

    @staticmethod
    def backward(ctx, g):
        return None


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "batch_norm", "softmax", "log_softmax", "logsumexp",
                                "cross_entropy", "sum", "prod", "amax", "max", "var"])
def test_an_undefined_output_gradient_leaves_the_gradients_undefined(op, device):
    """As torch's backward: no zero-filled gradient for a weight whose only path carries no gradient."""
    calls = dict(_cases(device))
    calls.update({"sum": ((4, 6), lambda f, x, w: (tr if f is tr else torch).sum(x * w, 1)),
                  "prod": ((4, 6), lambda f, x, w: (tr if f is tr else torch).prod(x * w, 1)),
                  "amax": ((4, 6), lambda f, x, w: (tr if f is tr else torch).amax(x * w, 1)),
                  "max": ((4, 6), lambda f, x, w: (tr if f is tr else torch).max(x * w, 1)[0]),
                  "var": ((4, 6), lambda f, x, w: (tr if f is tr else torch).var(x * w, 1))})
    shape, call = calls[op]
    x = randn(shape, torch.float64, device)
    for f in (tr, F):
        w = randn((shape[1],), torch.float64, device).requires_grad_()
        other = torch.ones((), dtype=torch.float64, device=device, requires_grad=True)
        (_DropGrad.apply(call(f, x, w)).sum() + other).backward()
        assert w.grad is None, f
