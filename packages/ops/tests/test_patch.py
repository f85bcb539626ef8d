"""tritred_ops.patch / unpatch on a small hand-built model mixing every module kind: outputs, gradients and running
statistics against the unpatched model, the same parameter and buffer objects, state_dict keys, hooks,
include/exclude, idempotence, unpatch, pickling, and torch.compile(fullgraph=True) of the patched model."""

from __future__ import annotations

import copy
import io
import logging

import pytest
import torch
import tritred_ops as tr
from nn_helpers import randomize, spy_ops
from torch.nn.utils import parametrize

TOL = dict(rtol=1e-5, atol=1e-5)


class PlainSub(torch.nn.LayerNorm):
    """A subclass that keeps torch's forward (patched: a class made of it and tritred's LayerNorm)."""

    def __init__(self, n: int) -> None:
        super().__init__(n, eps=0.1)


class OwnForward(torch.nn.LayerNorm):
    """A subclass with its own forward: left alone."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2


class Net(torch.nn.Module):
    def __init__(self, cumulative: bool = True) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)
        self.bn2 = torch.nn.BatchNorm2d(4)
        self.bn3 = torch.nn.BatchNorm3d(4, momentum=None if cumulative else 0.2)
        self.lin = torch.nn.Linear(16, 12)
        self.ln = torch.nn.LayerNorm(12)
        self.sub = PlainSub(12)
        self.own = OwnForward(12)
        self.rms = torch.nn.RMSNorm(12, eps=0.05)
        self.shared = torch.nn.LayerNorm(12, bias=False)
        self.again = self.shared  # one module under two names
        self.bn1 = torch.nn.BatchNorm1d(12)
        self.head = torch.nn.Linear(12, 5)
        self.sm = torch.nn.Softmax(-1)
        self.lsm = torch.nn.LogSoftmax(1)
        self.loss = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = self.bn2(self.conv(x))
        h = self.bn3(h.unsqueeze(2)).squeeze(2)
        h = self.lin(h.flatten(1))
        h = self.again(self.shared(self.rms(self.own(self.sub(self.ln(h))))))
        logits = self.head(self.bn1(h))
        return self.loss(logits, target) + self.lsm(logits).mean() + self.sm(logits).square().mean()


PATCHED = {"bn2": "batch_norm", "bn3": "batch_norm", "ln": "layer_norm", "sub": "layer_norm", "rms": "rms_norm",
           "shared": "layer_norm", "bn1": "batch_norm", "sm": "softmax", "lsm": "log_softmax",
           "loss": "cross_entropy"}


def _inputs(device, step=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(6, 3, 2, 2, generator=g, dtype=torch.float64) + step
    return x.to(device=device, dtype=dtype), torch.randint(0, 5, (6,), generator=g).to(device)


def _step(model, device, step=0):
    """A forward and backward from zeroed gradients; the loss, the parameters' gradients and the buffers."""
    model.zero_grad()
    out = model(*_inputs(device, step, next(model.parameters()).dtype))
    out.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return out.detach(), grads, [b.clone() for b in model.buffers()]


def _close(a, b, what=""):
    for x, y in zip(a, b):
        if isinstance(x, list):
            _close(x, y, what)
        elif x.dtype.is_floating_point:
            torch.testing.assert_close(x, y, **TOL, msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(x, y), what


def _as_accurate(ours, theirs, exact, what=""):
    """``ours`` (the patched model's float32 results) as close to ``exact`` (torch's model in float64) as
    ``theirs`` (torch's model in float32), within 4x and an absolute 1e-6 of the tensor's scale: chains of
    normalizations amplify float32 rounding alike in both (a LayerNorm weight's gradient off by 1.4e-5 in torch's)."""
    for x, y, r in zip(ours, theirs, exact):
        if isinstance(x, list):
            _as_accurate(x, y, r, what)
        elif x.dtype.is_floating_point:
            r = r.double()
            err, ref_err = (x.double() - r).abs().max().item(), (y.double() - r).abs().max().item()
            assert err <= 4 * ref_err + 1e-6 * (1 + r.abs().max().item()), f"{what}: {err:.3e} vs torch's {ref_err:.3e}"
        else:
            assert torch.equal(x, y) and torch.equal(x, r), what


def _kinds(model):
    return {name: type(m) for name, m in model.named_children()}


def test_patch_mixed_model(device, monkeypatch):
    """The patched model's loss, gradients and running statistics equal the unpatched model's over training steps
    and in eval (as close to torch's float64 results as torch's float32 ones); the modules are the same objects
    with the same parameter and buffer tensors, state_dict keys and hooks; every tritred op ran."""
    ref = randomize(Net()).to(device)
    model = copy.deepcopy(ref)
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    children, keys = dict(model.named_children()), list(model.state_dict())
    seen = []
    model.ln.register_forward_hook(lambda m, i, o: seen.append("ln"))
    model.bn1.register_forward_pre_hook(lambda m, i: seen.append("bn1"))

    assert tr.patch(model) is model
    calls = spy_ops(monkeypatch)
    for name, child in model.named_children():
        assert child is children[name]
        original = type(ref.get_submodule(name))
        assert isinstance(child, original)
        assert (type(child) is not original) == (name in PATCHED), name
    assert type(model.ln) is tr.nn.LayerNorm and type(model.bn2) is tr.nn.BatchNorm2d
    assert isinstance(model.sub, PlainSub) and isinstance(model.sub, tr.nn.LayerNorm) and model.sub.eps == 0.1
    assert type(model.own) is OwnForward and model.again is model.shared
    assert all(p is params[n] for n, p in model.named_parameters())
    assert all(b is buffers[n] for n, b in model.named_buffers())
    assert list(model.state_dict()) == keys

    exact = copy.deepcopy(ref).double()
    for step in range(2):
        ours, theirs = _step(model, device, step), _step(ref, device, step)
        _as_accurate(ours, theirs, _step(exact, device, step), f"training step {step}")
        for m in (model, ref, exact):
            torch.optim.SGD(m.parameters(), lr=0.1).step()
    assert seen == ["ln", "bn1"] * 2
    assert model.bn3.num_batches_tracked.item() == 2
    for m in (model, ref, exact):
        m.eval()
    _as_accurate(_step(model, device, 5), _step(ref, device, 5), _step(exact, device, 5), "eval")
    assert calls == {"batch_norm": 9, "layer_norm": 12, "rms_norm": 3, "cross_entropy": 3, "log_softmax": 3,
                     "softmax": 3}


@pytest.mark.parametrize("include, exclude, patched", [
    ({"LayerNorm"}, None, {"ln", "sub", "shared"}),
    ("batch_norm", None, {"bn1", "bn2", "bn3"}),
    ([torch.nn.BatchNorm2d, "Softmax"], None, {"bn2", "sm"}),
    (("PlainSub", "rms_norm", "CrossEntropyLoss"), None, {"sub", "rms", "loss"}),
    (None, {"layer_norm", torch.nn.CrossEntropyLoss}, {"bn1", "bn2", "bn3", "rms", "sm", "lsm"}),
    ({"LayerNorm"}, {"PlainSub"}, {"ln", "shared"}),
    ("layer_norm", "layer_norm", set()),
    ("transformers", None, set()),
    (torch.nn.Module, "log_softmax", set(PATCHED) - {"lsm"}),
])
def test_include_exclude(include, exclude, patched):
    """include/exclude by class name (the class's or a base's), module kind, class (and its subclasses), alone or
    in an iterable; exclude wins."""
    model = tr.patch(Net(), include=include, exclude=exclude)
    assert {n for n, c in _kinds(model).items() if c is not type(Net().get_submodule(n))} == patched


def test_bad_arguments():
    with pytest.raises(TypeError, match="include must be None, a class name"):
        tr.patch(Net(), include=3)
    with pytest.raises(TypeError, match="exclude must be None"):
        tr.patch(Net(), exclude=["LayerNorm", 1.5])
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        tr.patch("LayerNorm")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        tr.unpatch(None)


def test_idempotent_and_unpatch(device):
    """Patching twice changes nothing; unpatch gives every module its class back (the unpatched forward: the
    same bits as the model never patched), also to modules built as tritred_ops.nn modules; the root module
    itself is patched."""
    ref = randomize(Net()).to(device)
    model = tr.patch(copy.deepcopy(ref))
    first = _kinds(model)
    assert _kinds(tr.patch(model)) == first
    assert tr.unpatch(model) is model
    assert _kinds(model) == _kinds(ref)
    assert torch.equal(model(*_inputs(device)), ref(*_inputs(device)))
    assert _kinds(tr.patch(model)) == first

    root = tr.patch(torch.nn.LayerNorm(4))
    assert type(root) is tr.nn.LayerNorm
    built = torch.nn.Sequential(tr.nn.LayerNorm(4), tr.nn.Softmax(1))
    assert [type(m) for m in tr.unpatch(built)] == [torch.nn.LayerNorm, torch.nn.Softmax]
    assert tr.patching.patched_class(tr.nn.LayerNorm) is None
    sync = tr.patch(torch.nn.Sequential(torch.nn.SyncBatchNorm(4)))  # (convert_sync_batchnorm's modules too)
    assert type(sync[0]) is tr.nn.SyncBatchNorm
    assert type(tr.unpatch(sync)[0]) is torch.nn.SyncBatchNorm


def test_pickle_and_deepcopy(device):
    """torch.save / torch.load and copy.deepcopy of a patched model keep it patched (the made classes pickle by
    name) with its state."""
    model = tr.patch(randomize(Net()).to(device))
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    for other in (loaded, copy.deepcopy(model)):
        assert _kinds(other) == _kinds(model)
        for (k, a), b in zip(other.state_dict().items(), model.state_dict().values()):
            assert torch.equal(a, b), k


def test_instance_forward_left_alone(caplog):
    """A module whose forward was set on the instance (accelerate's hooks do this) is skipped, and logged."""
    caplog.set_level(logging.DEBUG, logger="tritred")
    model = Net()
    model.ln.forward = lambda x: x
    tr.patch(model)
    assert type(model.ln) is torch.nn.LayerNorm and type(model.shared) is tr.nn.LayerNorm
    assert "ln (LayerNorm) left alone: its forward is set on the instance" in caplog.text


def test_parametrized_left_alone(device, caplog):
    """A parametrized module keeps parametrize's class (its removal strips that class again); patched first and
    parametrized after, both work."""
    class Double(torch.nn.Module):
        def forward(self, w):
            return w * 2

    caplog.set_level(logging.DEBUG, logger="tritred")
    x = torch.randn(3, 4, device=device)
    for patch_first in (False, True):
        ln = torch.nn.LayerNorm(4).to(device)
        if patch_first:
            tr.patch(ln)
        parametrize.register_parametrization(ln, "weight", Double())
        tr.patch(ln)
        assert "left alone: parametrized" in caplog.text
        y = ln(x)
        parametrize.remove_parametrizations(ln, "weight")
        assert type(ln) is (tr.nn.LayerNorm if patch_first else torch.nn.LayerNorm)
        assert sorted(ln.state_dict()) == ["bias", "weight"]
        torch.testing.assert_close(ln(x), y)


@pytest.mark.parametrize("training", [True, False])
def test_compile_fullgraph(training, device):
    """torch.compile(fullgraph=True) of the patched model (aot_eager on the CPU interpreter, Inductor on CUDA):
    loss, gradients and running statistics equal the eager patched model's. (Not with a BatchNorm of
    momentum=None in training: its factor 1 / num_batches_tracked is data-dependent, and fullgraph fails for
    torch's own module too.)"""
    torch._dynamo.reset()
    eager = tr.patch(randomize(Net(cumulative=False)).to(device)).train(training)
    exact = tr.unpatch(copy.deepcopy(eager)).double()
    compiled = torch.compile(copy.deepcopy(eager), fullgraph=True,
                             backend="aot_eager" if device == "cpu" else "inductor")
    for step in range(2):
        got, want = _step(compiled, device, step), _step(eager, device, step)
        if device == "cpu":  # the same kernels, through the registered ops: the same bits
            for a, b in zip([got[0], *got[1], *got[2]], [want[0], *want[1], *want[2]]):
                assert torch.equal(a, b), f"step {step}"
        else:  # Inductor's own kernels for the torch ops around tritred's: as accurate as eager
            _as_accurate(got, want, _step(exact, device, step), f"step {step}")


@pytest.mark.parametrize("lazy", [torch.nn.LazyBatchNorm1d, torch.nn.LazyBatchNorm2d])
def test_lazy_modules_become_tritreds(lazy, device, monkeypatch):
    """A lazy batch norm patched before its first forward becomes tritred's class there (torch's would become its
    torch class), and its later calls run tritred, with torch's results; unpatch before the forward gives torch's
    class back."""
    x = torch.randn((6, 5) if lazy is torch.nn.LazyBatchNorm1d else (4, 5, 3, 3), device=device)
    ref = lazy(device=device)
    model = tr.patch(torch.nn.Sequential(lazy(device=device)))
    assert type(model[0]) is lazy
    calls = spy_ops(monkeypatch)
    model(x), ref(x)  # (torch's module call takes the lazy class's forward before its hook changes the class)
    assert type(model[0]).__dict__.get("_tritred_original") is type(ref)  # (BatchNorm1d/2d after the forward)
    assert not calls
    out, want = model(x), ref(x)
    assert calls == {"batch_norm": 1}
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(model[0].running_mean, ref.running_mean)
    undone = tr.unpatch(tr.patch(torch.nn.Sequential(lazy(device=device))))
    undone(x)
    assert type(undone[0]) is type(ref)
