"""What autograd can ask beyond a first-order gradient: each op either does it as torch does or raises, never a
silently wrong or missing result.

Second order: every op's gradients taken with ``create_graph=True`` can be differentiated again, as torch's (the
backward kernels' ops through torch's differentiable formulas, ``rt.twice_differentiable``), except cross_entropy,
which keeps no logits for its backward and refuses ``create_graph=True`` with an input that requires grad. The case
here is a gradient penalty through an op whose output enters the loss linearly, where the incoming gradient is a
constant (torch's own ``once_differentiable`` would return a constant gradient there and lose the second-order
term).

Forward mode (``torch.autograd.forward_ad``, torch.func.jvp): every op gives torch's tangents (its Function's jvp;
cross_entropy through its composite path), and those tangents can be differentiated again (forward over forward:
jvp of jvp, jacfwd of jacfwd, jacfwd of the hessian; reverse over forward), as torch's ops (``rt.differentiable_jvp``).
torch.func: grad and jacrev take the create_graph path; vmap takes each Function's vmap rule, so per-sample
gradients, jacfwd and the hessian work; cross_entropy under any transform takes its composite path (tritred's
log_softmax and torch's loss formulas); batched gradients raise NotImplementedError naming the op.
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
def test_gradient_penalty_is_torchs(op, device):
    shape, call = _cases(device)[op]
    x0 = randn(shape, torch.float64, device)
    w0 = randn((shape[1],), torch.float64, device)
    out_shape = call(F, x0, w0).shape
    v = randn(tuple(out_shape), torch.float64, device) if len(out_shape) else T(1.3, dtype=torch.float64,
                                                                                  device=device)
    firsts, seconds = [], []
    for f in (tr, F):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        critic = (call(f, x, w) * v).sum()  # (linear in the op's output: a constant incoming gradient)
        if f is tr and op == "cross_entropy":  # (it saves no logits to link its gradient to: refused at once)
            with pytest.raises(RuntimeError, match=r"tritred\.cross_entropy\(\): its backward is not differentiable"
                               ".*create_graph=True"):
                torch.autograd.grad(critic, x, create_graph=True)
            (gx,) = torch.autograd.grad(critic, x)
            firsts.append(gx)
            continue
        (gx,) = torch.autograd.grad(critic, x, create_graph=True)
        assert gx.requires_grad, f  # (never a gradient cut from the graph)
        firsts.append(gx.detach())
        penalty = (gx.norm() - 1) ** 2 + (gx * x).sum()  # (x enters both through gx and directly)
        seconds.append(torch.autograd.grad(penalty, (x, w)))
    torch.testing.assert_close(firsts[0], firsts[1])  # the first-order gradient itself is torch's
    if op != "cross_entropy":
        for ours, theirs in zip(*seconds):  # and the second-order ones, through x and through w
            torch.testing.assert_close(ours, theirs)


SECOND_ORDER = {
    "layer_norm": ([(3, 5), (5,), (5,)], lambda x, w, b: tr.layer_norm(x, (5,), w, b)),
    "layer_norm 2 dims": ([(4, 2, 3), (2, 3)], lambda x, w: tr.layer_norm(x, (2, 3), w, None, 1e-3)),
    "rms_norm": ([(3, 5), (5,)], lambda x, w: tr.rms_norm(x, (5,), w)),
    "rms_norm eps": ([(2, 3, 4)], lambda x: tr.rms_norm(x, (3, 4), None, 0.1)),
    "batch_norm training": ([(4, 3, 2), (3,), (3,)], lambda x, w, b: tr.batch_norm(x, None, None, w, b, True)),
    "batch_norm 2-D": ([(5, 3), (3,)], lambda x, w: tr.batch_norm(x, None, None, w, None, True, 0.1, 1e-3)),
    "batch_norm eval": ([(4, 3, 2, 2), (3,), (3,)], lambda x, w, b: tr.batch_norm(
        x, T([0.5, -1.0, 0.2], dtype=x.dtype, device=x.device), T([0.7, 1.5, 2.0], dtype=x.dtype, device=x.device),
        w, b, False)),
    "softmax": ([(3, 5)], lambda x: tr.softmax(x, 0)),
    "softmax dtype": ([(3, 5)], lambda x: tr.softmax(x, 1, dtype=torch.float64)),
    "log_softmax": ([(2, 3, 4)], lambda x: tr.log_softmax(x, 1)),
    "logsumexp": ([(2, 3, 4)], lambda x: tr.logsumexp(x, (0, 2), keepdim=True)),
}


@pytest.mark.parametrize("case", list(SECOND_ORDER))
def test_double_backward_gradgradcheck(case, device):
    """Second derivatives by finite differences of the first (float64), through every input that takes one."""
    shapes, fn = SECOND_ORDER[case]
    inputs = [randn(s, torch.float64, device).requires_grad_() for s in shapes]
    assert torch.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_create_graph_keeps_the_first_order_gradients(dtype, device, caplog):
    """Under create_graph=True the gradients come from torch's ops (logged), and equal the kernels' (float32
    accumulation in both); without it the kernels run (nothing logged)."""
    x0, w0 = randn((6, 40), dtype, device), randn((40,), dtype, device)
    dy = randn((6, 40), dtype, device)
    for name, call in (("layer_norm", lambda x, w: tr.layer_norm(x, (40,), w, w)),
                       ("rms_norm", lambda x, w: tr.rms_norm(x, (40,), w)),
                       ("softmax", lambda x, w: tr.softmax(x * w, -1)),
                       ("log_softmax", lambda x, w: tr.log_softmax(x * w, 0, dtype=torch.float32).to(x.dtype)),
                       ("batch_norm", lambda x, w: tr.batch_norm(x, None, None, w, None, True))):
        grads = []
        for create_graph in (False, True):
            x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
            caplog.clear()
            with caplog.at_level("DEBUG", logger="tritred"):
                grads.append(torch.autograd.grad(call(x, w), (x, w), dy, create_graph=create_graph))
            composite = [r for r in caplog.records if "create_graph=True" in r.getMessage()]
            assert [r.getMessage() for r in composite] == (
                [f"tritred.{name}: a backward with create_graph=True: its gradients from torch's ops"]
                if create_graph else []), name
        for kernel, composite_grad in zip(*grads):
            assert composite_grad.dtype == kernel.dtype and composite_grad.requires_grad
            # (relative to the largest gradient: a weight gradient's sum over rows can cancel to a small value
            # whose bfloat16 terms were rounded at the scale of the whole sum)
            tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
            torch.testing.assert_close(composite_grad.detach().float(), kernel.float(), rtol=tol,
                                       atol=tol * max(1.0, kernel.float().abs().max().item()))


def test_cross_entropy_forward_mode_ad_is_torchs(device):
    """A dual input of cross_entropy takes the composite path (tritred's log_softmax, torch's loss formulas): its
    tangent equals torch's, never dropped; without a dual input, inside a dual level, results as usual."""
    import torch.autograd.forward_ad as fwAD

    x, v = randn((3, 5), torch.float64, device), randn((3, 5), torch.float64, device)
    t = T([1, -100, 0], device=device)
    tangents = []
    for f in (tr, F):
        with fwAD.dual_level():
            loss = f.cross_entropy(fwAD.make_dual(x, v), t, label_smoothing=0.1)
            tangents.append(fwAD.unpack_dual(loss).tangent)
            torch.testing.assert_close(tr.sum(x, -1), torch.sum(x, -1))
    torch.testing.assert_close(tangents[0], tangents[1])


def _cross_entropy_case(shape, prob, weighted, device):
    """A target (class indices with an ignored one, or probabilities) and class weights or None for ``shape``."""
    C = shape[0] if len(shape) == 1 else shape[1]
    if prob:
        target = randn(shape, torch.float64, device).softmax(0 if len(shape) == 1 else 1)
    else:
        target = torch.randint(0, C, () if len(shape) == 1 else (shape[0], *shape[2:]), device=device)
        if len(shape) > 1:
            target.view(-1)[0] = -100
    weight = randn((C,), torch.float64, device).abs() + 0.5 if weighted else None
    return target, weight


@pytest.mark.parametrize("shape", [(5,), (4, 6), (3, 5, 2)])
@pytest.mark.parametrize("prob", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_under_torch_func_is_torchs(shape, prob, weighted, reduction, label_smoothing, device):
    """grad, jvp, vmap, per-sample gradients and the hessian of cross_entropy (the composite path) equal torch's,
    for class indices (one ignored) and probabilities, with and without class weights and label smoothing."""
    target, weight = _cross_entropy_case(shape, prob, weighted, device)
    kw = {"weight": weight, "reduction": reduction, "label_smoothing": label_smoothing}
    x, v = randn(shape, torch.float64, device), randn(shape, torch.float64, device)
    xs = randn((3, *shape), torch.float64, device)
    results = []
    for f in (tr, F):
        def loss(u, q=target, f=f):
            return f.cross_entropy(u, q, **kw).sum()
        got = [torch.func.grad(loss)(x), *torch.func.jvp(lambda u, f=f: f.cross_entropy(u, target, **kw), (x,), (v,))]
        if len(shape) > 1:
            got += [torch.func.vmap(lambda u, f=f: f.cross_entropy(u, target, **kw))(xs),
                    torch.func.vmap(torch.func.grad(loss))(xs), torch.func.hessian(loss)(x)]
            if prob:
                got.append(torch.func.grad(lambda q, f=f: loss(x, q, f))(target))
        results.append(got)
    for ours, theirs in zip(*results):
        torch.testing.assert_close(ours, theirs)


def test_cross_entropy_composite_is_logged_and_rounds_once(caplog, device):
    """The composite path is logged at debug level, only under a transform; bfloat16 logits give the fused path's
    loss dtype and a float32-accurate loss (rounded once)."""
    x = randn((4, 7), torch.bfloat16, device)
    t = T([1, 2, 0, 6], device=device)
    with caplog.at_level("DEBUG", logger="tritred"):
        tr.cross_entropy(x, t)
        assert not [r for r in caplog.records if "torch.func transform" in r.getMessage()]
        grad, loss = torch.func.grad_and_value(lambda u: tr.cross_entropy(u, t))(x)
    assert [r for r in caplog.records if "torch.func transform" in r.getMessage()]
    assert loss.dtype == grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), F.cross_entropy(x.double(), t), rtol=2 ** -8, atol=0)
    torch.testing.assert_close(grad.double(), torch.func.grad(lambda u: F.cross_entropy(u, t))(x.double()),
                               rtol=2 ** -7, atol=1e-3)


def _op(f, name):
    """tritred's op, or torch's (``torch.nn.functional`` has no reductions)."""
    return getattr(tr if f is tr else torch, name)


FORWARD_AD = {
    "sum": ([(2, 3, 4)], lambda f, x: _op(f, "sum")(x, (0, 2))),
    "sum all": ([(2, 3, 4)], lambda f, x: _op(f, "sum")(x)),
    "mean keepdim": ([(2, 3, 4)], lambda f, x: _op(f, "mean")(x, 1, keepdim=True)),
    "prod": ([(3, 4)], lambda f, x: _op(f, "prod")(x, 1)),
    "prod all": ([(2, 3)], lambda f, x: _op(f, "prod")(x)),
    "amax": ([(2, 3, 4)], lambda f, x: _op(f, "amax")(x, (0, 2))),
    "amin keepdim": ([(3, 4)], lambda f, x: _op(f, "amin")(x, 1, keepdim=True)),
    "max dim": ([(3, 4)], lambda f, x: _op(f, "max")(x, 1)[0]),
    "min dim keepdim": ([(2, 3, 4)], lambda f, x: _op(f, "min")(x, 0, keepdim=True)[0]),
    "max all": ([(3, 4)], lambda f, x: _op(f, "max")(x)),
    "var": ([(2, 3, 4)], lambda f, x: _op(f, "var")(x, (0, 2))),
    "std correction": ([(3, 4)], lambda f, x: _op(f, "std")(x, 1, correction=0, keepdim=True)),
    "var_mean all": ([(3, 4)], lambda f, x: _op(f, "var_mean")(x)),
    "std_mean": ([(3, 4)], lambda f, x: _op(f, "std_mean")(x, 0, correction=2)),
    "softmax": ([(3, 5)], lambda f, x: f.softmax(x, 0)),
    "log_softmax dtype": ([(3, 5)], lambda f, x: f.log_softmax(x, 1, dtype=torch.float64)),
    "logsumexp": ([(2, 3, 4)], lambda f, x: (tr if f is tr else torch).logsumexp(x, (0, 2))),
    "layer_norm": ([(3, 5), (5,), (5,)], lambda f, x, w, b: f.layer_norm(x, (5,), w, b)),
    "layer_norm 2 dims": ([(4, 2, 3)], lambda f, x: f.layer_norm(x, (2, 3))),
    "rms_norm": ([(3, 5), (5,)], lambda f, x, w: f.rms_norm(x, (5,), w)),
    "rms_norm eps": ([(2, 3, 4)], lambda f, x: f.rms_norm(x, (3, 4), None, 0.1)),
    "batch_norm training": ([(4, 3, 2), (3,), (3,)], lambda f, x, w, b: f.batch_norm(x, None, None, w, b, True)),
    "batch_norm 2-D": ([(5, 3), (3,)], lambda f, x, w: f.batch_norm(x, None, None, w, None, True)),
    "batch_norm eval": ([(4, 3, 2, 2), (3,), (3,)], lambda f, x, w, b: f.batch_norm(
        x, T([0.5, -1.0, 0.2], dtype=x.dtype, device=x.device), T([0.7, 1.5, 2.0], dtype=x.dtype, device=x.device),
        w, b, False)),
}


@pytest.mark.parametrize("case", list(FORWARD_AD))
def test_forward_mode_ad_is_torchs(case, device):
    """Forward-mode AD (the Functions' jvp): torch.func.jvp gives torch's tangent, and gradcheck's forward-mode
    check (finite differences, undefined tangents) passes, in float64."""
    shapes, call = FORWARD_AD[case]
    primals = tuple(randn(s, torch.float64, device) for s in shapes)
    tangents = tuple(randn(s, torch.float64, device) for s in shapes)
    ours = torch.func.jvp(lambda *a: call(tr, *a), primals, tangents)
    theirs = torch.func.jvp(lambda *a: call(F, *a), primals, tangents)
    torch.testing.assert_close(ours, theirs)
    assert torch.autograd.gradcheck(lambda *a: call(tr, *a), [p.clone().requires_grad_() for p in primals],
                                     check_forward_ad=True)


def test_forward_mode_ad_special_values_are_torchs(device):
    """Ties (the tangent shared evenly by amax and max without dim; the first index's by max with dim), NaN
    (NaN tangents), zeros in a product, a constant row's std (0), and var over dim=[] (N counted as 1: NaN)."""
    nan = float("nan")
    x = T([[1.0, 3.0, 3.0, 0.5], [2.0, nan, 0.0, 1.0], [0.0, 0.0, 2.0, 1.0]], dtype=torch.float64, device=device)
    t = randn((3, 4), torch.float64, device)
    for name, call in (("amax", lambda m, u: m.amax(u, 1)), ("max dim", lambda m, u: m.max(u, 1)[0]),
                       ("max all", lambda m, u: m.max(u[0])), ("prod", lambda m, u: m.prod(u, 1)),
                       ("std of a constant row", lambda m, u: m.std(u * 0 + 1, 1)),
                       ("var dim=[]", lambda m, u: m.var(u, []))):
        ours = torch.func.jvp(lambda u, c=call: c(tr, u), (x,), (t,))[1]
        theirs = torch.func.jvp(lambda u, c=call: c(torch, u), (x,), (t,))[1]
        torch.testing.assert_close(ours, theirs, equal_nan=True, msg=name)


def test_forward_mode_ad_in_half_precision(device):
    """The tangent in the output's dtype, from float32 arithmetic: bfloat16 within its rounding of torch's."""
    import torch.autograd.forward_ad as fwAD

    x, t = randn((4, 64), torch.bfloat16, device), randn((4, 64), torch.bfloat16, device)
    w = randn((64,), torch.bfloat16, device)
    for ours, theirs in ((lambda u: tr.layer_norm(u, (64,), w), lambda u: F.layer_norm(u, (64,), w.double())),
                         (lambda u: tr.softmax(u, -1), lambda u: torch.softmax(u, -1))):
        with fwAD.dual_level():
            a = fwAD.unpack_dual(ours(fwAD.make_dual(x, t))).tangent
            b = fwAD.unpack_dual(theirs(fwAD.make_dual(x.double(), t.double()))).tangent
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a.double(), b, rtol=2e-2, atol=2e-2)


VMAP = {
    "sum": lambda f, u: _op(f, "sum")(u, 1),
    "sum all, keepdim": lambda f, u: _op(f, "sum")(u, (0, 1), keepdim=True),
    "mean of a 0-d sample": lambda f, u: _op(f, "mean")(u[0, 0]),
    "prod": lambda f, u: _op(f, "prod")(u, 0),
    "prod all": lambda f, u: _op(f, "prod")(u),
    "amax": lambda f, u: _op(f, "amax")(u, -1),
    "max with dim": lambda f, u: _op(f, "max")(u, 1),
    "min of a 0-d sample": lambda f, u: _op(f, "min")(u[0, 0], 0, keepdim=True),
    "max all": lambda f, u: _op(f, "max")(u),
    "var": lambda f, u: _op(f, "var")(u, 1),
    "std_mean all": lambda f, u: _op(f, "std_mean")(u, correction=0),
    "softmax": lambda f, u: f.softmax(u, -1),
    "log_softmax": lambda f, u: f.log_softmax(u, 0),
    "logsumexp": lambda f, u: _op(f, "logsumexp")(u, (0, 1)),
    "layer_norm": lambda f, u: f.layer_norm(u, (5,), torch.linspace(0.5, 1.5, 5, dtype=u.dtype, device=u.device)),
    "rms_norm": lambda f, u: f.rms_norm(u, (4, 5)),
}


@pytest.mark.parametrize("case", list(VMAP))
@pytest.mark.parametrize("in_dim", [0, 2])
def test_vmap_is_torchs(case, in_dim, device):
    """torch.func.vmap (each Function's vmap rule: the batch dim in front, the dims shifted) equals torch's."""
    x = randn((3, 4, 5), torch.float64, device).movedim(0, in_dim)
    ours = torch.func.vmap(lambda u: VMAP[case](tr, u), in_dims=in_dim)(x)
    theirs = torch.func.vmap(lambda u: VMAP[case](F, u), in_dims=in_dim)(x)
    torch.testing.assert_close(ours, theirs)


def test_torch_func_composes_as_torchs(device):
    """Per-sample gradients (vmap of grad), jacfwd, jacrev and the hessian through tritred equal torch's."""
    x = randn((6, 5), torch.float64, device)
    w = randn((5,), torch.float64, device)

    def loss(f, wt, xs):
        h = f.layer_norm(xs * wt, (5,))
        return _op(f, "logsumexp")(h, -1).sum() + _op(f, "var")(f.softmax(h, -1), -1).sum()

    per_sample = [torch.func.vmap(torch.func.grad(lambda wt, xs, f=f: loss(f, wt, xs)), in_dims=(None, 0))(w, x)
                  for f in (tr, F)]
    torch.testing.assert_close(per_sample[0], per_sample[1])
    for transform in (torch.func.jacfwd, torch.func.jacrev, torch.func.hessian):
        ours = transform(lambda u: loss(tr, w, u))(x[:2])
        theirs = transform(lambda u: loss(F, w, u))(x[:2])
        torch.testing.assert_close(ours, theirs)


def _normalized_ref(x, dims, w, b, view, eps=1e-5):
    """layer_norm / batch_norm (training) in torch's ops: the statistics' own dependence on the input included."""
    c = x - x.mean(dims, keepdim=True)
    y = c * torch.rsqrt(c.square().mean(dims, keepdim=True) + eps)
    return y * (w.view(view) if w is not None else 1) + (b.view(view) if b is not None else 0)


def _pair(out):
    return torch.stack(out) if isinstance(out, tuple) else out


#: (input shape, weight/bias size, call(f, x, w, b)): f is tr or torch.nn.functional. aten's native_layer_norm and
#: native_batch_norm (training) take their saved mean and rstd as constants in their own forward-over-forward and
#: reverse-over-forward (finite differences disagree with them): their reference is the normalization in torch's ops.
NESTED = {
    "sum": ((2, 3, 4), 0, lambda f, x, w, b: _op(f, "sum")(x, (0, 2))),
    "sum all": ((2, 3), 0, lambda f, x, w, b: _op(f, "sum")(x)),
    "mean keepdim": ((2, 3, 4), 0, lambda f, x, w, b: _op(f, "mean")(x, 1, keepdim=True)),
    "prod": ((3, 4), 0, lambda f, x, w, b: _op(f, "prod")(x, 1)),
    "prod all": ((2, 3), 0, lambda f, x, w, b: _op(f, "prod")(x)),
    "amax": ((2, 3, 4), 0, lambda f, x, w, b: _op(f, "amax")(x, (0, 2))),
    "amin keepdim": ((3, 4), 0, lambda f, x, w, b: _op(f, "amin")(x, 1, keepdim=True)),
    "max dim": ((3, 4), 0, lambda f, x, w, b: _op(f, "max")(x, 1)[0]),
    "min dim keepdim": ((2, 3, 4), 0, lambda f, x, w, b: _op(f, "min")(x, 0, keepdim=True)[0]),
    "max all": ((3, 4), 0, lambda f, x, w, b: _op(f, "max")(x)),
    "min all": ((3, 4), 0, lambda f, x, w, b: _op(f, "min")(x)),
    "var": ((2, 3, 4), 0, lambda f, x, w, b: _op(f, "var")(x, (0, 2))),
    "std": ((3, 4), 0, lambda f, x, w, b: _op(f, "std")(x, 1, correction=0, keepdim=True)),
    "var_mean": ((3, 4), 0, lambda f, x, w, b: _pair(_op(f, "var_mean")(x, 1))),
    "std_mean all": ((3, 4), 0, lambda f, x, w, b: _pair(_op(f, "std_mean")(x, correction=2))),
    "softmax": ((3, 5), 0, lambda f, x, w, b: f.softmax(x, 0)),
    "log_softmax": ((3, 5), 0, lambda f, x, w, b: f.log_softmax(x, 1)),
    "logsumexp": ((2, 3, 4), 0, lambda f, x, w, b: _op(f, "logsumexp")(x, (0, 2))),
    "layer_norm": ((3, 5), 5, lambda f, x, w, b: tr.layer_norm(x, (5,), w, b) if f is tr else
                   _normalized_ref(x, (1,), w, b, (5,))),
    "layer_norm 2 dims": ((2, 2, 3), 0, lambda f, x, w, b: tr.layer_norm(x, (2, 3)) if f is tr else
                          _normalized_ref(x, (1, 2), None, None, None)),
    "rms_norm": ((3, 5), 5, lambda f, x, w, b: f.rms_norm(x, (5,), w)),
    "rms_norm eps": ((2, 3, 4), 0, lambda f, x, w, b: f.rms_norm(x, (3, 4), None, 0.1)),
    "batch_norm": ((4, 3, 2), 3, lambda f, x, w, b: tr.batch_norm(x, None, None, w, b, True) if f is tr else
                   _normalized_ref(x, (0, 2), w, b, (1, 3, 1))),
    "batch_norm 2-D": ((5, 3), 3, lambda f, x, w, b: tr.batch_norm(x, None, None, w, None, True) if f is tr else
                       _normalized_ref(x, (0,), w, None, (1, 3))),
    "batch_norm eval": ((4, 3, 2), 3, lambda f, x, w, b: f.batch_norm(
        x, T([0.5, -1.0, 0.2], dtype=x.dtype, device=x.device), T([0.7, 1.5, 2.0], dtype=x.dtype, device=x.device),
        w, b, False)),
}


@pytest.mark.parametrize("case", list(NESTED))
def test_nested_forward_mode_is_torchs(case, device):
    """Forward over forward: jvp of a jvp (the inner tangent constant, and depending on the point), jacfwd of jacfwd
    and jacfwd of the hessian equal torch's, as does reverse over forward (jacrev of jacfwd), in float64; the
    second-order tangent also equals finite differences of the first-order one. (torch runs a Function's jvp with
    forward-mode AD off at every level: without ``rt.differentiable_jvp`` these second-order terms were zeros.)"""
    shape, size, call = NESTED[case]
    x, v, v2 = (randn(shape, torch.float64, device) for _ in range(3))
    w, b = (randn((size,), torch.float64, device) if size else None for _ in range(2))
    ours, theirs = (lambda u: call(tr, u, w, b)), (lambda u: call(F, u, w, b))
    c = randn(tuple(ours(x).shape), torch.float64, device)  # (the hessian's scalar: a weighted sum of the output)

    def first(g, a, t=v):
        return torch.func.jvp(g, (a,), (t,))[1]

    modes = {
        "jvp of jvp": lambda g: torch.func.jvp(lambda a: first(g, a), (x,), (v2,))[1],
        "jvp of jvp, tangent of the point": lambda g: torch.func.jvp(lambda a: first(g, a, a * v), (x,), (v2,))[1],
        "jacfwd of jacfwd": lambda g: torch.func.jacfwd(torch.func.jacfwd(g))(x),
        "jacfwd of hessian": lambda g: torch.func.jacfwd(torch.func.hessian(lambda a: (g(a) * c).sum()))(x),
        "jacrev of jacfwd": lambda g: torch.func.jacrev(torch.func.jacfwd(g))(x),
    }
    for mode, transform in modes.items():
        torch.testing.assert_close(transform(ours), transform(theirs), msg=lambda m, mode=mode: f"{mode}: {m}")
    h = 1e-6
    finite = (first(ours, x + h * v2) - first(ours, x - h * v2)) / (2 * h)
    torch.testing.assert_close(modes["jvp of jvp"](ours), finite, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm", "batch_norm", "prod", "std"])
def test_backward_through_a_forward_ad_tangent_is_torchs(op, device):
    """Reverse over forward outside torch.func: a gradient of ``torch.autograd.forward_ad``'s tangent with respect
    to the input (the norms' statistics recomputed in torch's ops: the forward's are constants to autograd)."""
    import torch.autograd.forward_ad as fwAD

    shape, _, call = NESTED[op]
    x0, t = randn(shape, torch.float64, device), randn(shape, torch.float64, device)
    grads = []
    for f in (tr, F):
        x = x0.clone().requires_grad_()
        with fwAD.dual_level():
            tangent = fwAD.unpack_dual(call(f, fwAD.make_dual(x, t), None, None)).tangent
        weights = torch.linspace(-1, 2, tangent.numel(), dtype=tangent.dtype, device=device).view(tangent.shape)
        grads.append(torch.autograd.grad((tangent * weights).sum(), x)[0])
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("in_dim", [0, 1])
def test_vmap_of_batch_norm_is_torchs(in_dim, device):
    """Each sample normalized on its own (one launch: the samples side by side as channels), in training and in
    eval, and per-sample gradients through it."""
    x = randn((3, 4, 2, 5), torch.float64, device).movedim(0, in_dim)
    w, b = randn((2,), torch.float64, device), randn((2,), torch.float64, device)
    rm, rv = randn((2,), torch.float64, device), randn((2,), torch.float64, device).abs() + 0.5
    for call in (lambda f, u: f.batch_norm(u, None, None, w, b, True),
                 lambda f, u: f.batch_norm(u, rm, rv, w, b, False),
                 lambda f, u: f.batch_norm(u[:, :, 0], None, None, w, None, True, 0.1, 1e-3)):
        torch.testing.assert_close(torch.func.vmap(lambda u, c=call: c(tr, u), in_dims=in_dim)(x),
                                   torch.func.vmap(lambda u, c=call: c(F, u), in_dims=in_dim)(x))
    grads = [torch.func.vmap(torch.func.grad(lambda wt, u, f=f: (f.batch_norm(u, None, None, wt, b, True) ** 3).sum()),
                             in_dims=(None, in_dim))(w, x) for f in (tr, F)]
    torch.testing.assert_close(grads[0], grads[1])


def test_torch_func_refusals_name_the_op(device):
    """What vmap cannot batch raises naming the op: a batched weight, batch_norm's running statistics in training
    (RuntimeError, as torch), and batched gradients (is_grads_batched: the
    backward kernels)."""
    x = randn((3, 5), torch.float64, device)
    with pytest.raises(NotImplementedError, match="tritred layer_norm: under torch.func.vmap only the input"):
        torch.func.vmap(lambda wt: tr.layer_norm(x, (5,), wt))(randn((2, 5), torch.float64, device))
    with pytest.raises(RuntimeError, match="tritred batch_norm: torch.func.vmap in training with running statistics"):
        torch.func.vmap(lambda u: tr.batch_norm(u, torch.zeros(5, dtype=u.dtype, device=u.device),
                                                torch.ones(5, dtype=u.dtype, device=u.device), None, None, True))(
            randn((2, 3, 5), torch.float64, device))
    leaf = x.clone().requires_grad_()
    with pytest.raises(NotImplementedError, match="tritred softmax_backward: torch.func transforms .* not supported"):
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


def test_per_sample_gradients_of_prod_with_zeros(device):
    """prod's backward under vmap(grad) takes the branch-free formula (no ``.item()`` of a batched tensor):
    samples with no zero, one zero and two zeros equal torch's, over a dim and over all."""
    x = randn((3, 4), torch.float64, device)
    x[1, 2] = 0
    x[2, 0] = x[2, 3] = 0
    for call in (lambda f, r: f.prod(r), lambda f, r: f.prod(r, 0)):
        ours, theirs = (torch.func.vmap(torch.func.grad(lambda r, f=f, c=call: c(f, r)))(x) for f in (tr, torch))
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("op", ["sum", "amax", "prod", "max", "var", "logsumexp", "softmax"])
def test_vmap_of_0d_samples_checks_dim(op, device):
    """A 0-d sample under vmap takes dims 0 and -1 only: another dim raises torch's IndexError, as outside vmap."""
    x = randn((3,), torch.float64, device)
    call = {"softmax": lambda s, d: tr.softmax(s, d)}.get(op, lambda s, d: getattr(tr, op)(s, d))
    torch.testing.assert_close(torch.func.vmap(lambda s: call(s, -1))(x),
                               torch.func.vmap(lambda s: (torch.softmax(s, -1) if op == "softmax" else
                                                          getattr(torch, op)(s, -1)))(x), equal_nan=True)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.func.vmap(lambda s: call(s, 2))(x)
