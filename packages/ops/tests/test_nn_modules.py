"""tritred_ops.nn: each module against its torch.nn class for every constructor option (forward, backward, running
statistics, num_batches_tracked, errors, state_dict both ways), and the logged fallback to torch's forward."""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch
import tritred_ops as tr
from nn_helpers import randomize, spy_ops
from ops_helpers import randn

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2), torch.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.fixture
def calls(monkeypatch):
    return spy_ops(monkeypatch)


def _pair(torch_cls, tritred_cls, kwargs, dtype=torch.float32, device="cpu"):
    """A torch module with random parameters and buffers, and tritred's with the same state."""
    ref = randomize(torch_cls(**kwargs)).to(device=device, dtype=dtype)
    ours = tritred_cls(**kwargs).to(device=device, dtype=dtype)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _run(module, *inputs):
    """Forward and backward (a random output gradient, the same for both modules of a comparison); the output, the
    inputs' and the parameters' gradients."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = module(*leaves)
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(out.numel()), dtype=torch.float64)
    out.backward(dy.to(device=out.device, dtype=out.dtype))
    return out, [t.grad for t in leaves if t.requires_grad], [p.grad for p in module.parameters()]


def _same(ours, ref, tol, what=""):
    """tritred's module against torch's after the same calls: outputs, gradients, parameters and buffers."""
    for a, b in zip(ours, ref):
        if isinstance(a, list):
            _same(a, b, tol, what)
        elif a is None:
            assert b is None, what
        elif a.dtype.is_floating_point:
            torch.testing.assert_close(a, b, **tol, msg=lambda m: f"{what}: {m}")
        else:
            assert torch.equal(a, b), what


CASES = [
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=12), (3, 5, 12)),
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=(5, 12), eps=0.3), (3, 5, 12)),
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=12, elementwise_affine=False, eps=0.2), (4, 12)),
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=12, bias=False), (4, 12)),
    (torch.nn.RMSNorm, tr.nn.RMSNorm, dict(normalized_shape=[12]), (3, 5, 12)),
    (torch.nn.RMSNorm, tr.nn.RMSNorm, dict(normalized_shape=(5, 12), eps=0.4), (3, 5, 12)),
    (torch.nn.RMSNorm, tr.nn.RMSNorm, dict(normalized_shape=12, elementwise_affine=False, eps=0.3), (4, 12)),
    (torch.nn.Softmax, tr.nn.Softmax, dict(dim=1), (3, 7, 2)),
    (torch.nn.Softmax, tr.nn.Softmax, dict(dim=-1), (3, 7)),
    (torch.nn.LogSoftmax, tr.nn.LogSoftmax, dict(dim=0), (5, 3)),
    (torch.nn.LogSoftmax, tr.nn.LogSoftmax, dict(dim=-2), (2, 5, 3)),
]


@pytest.mark.parametrize("torch_cls, tritred_cls, kwargs, shape", CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_module_matches_torch(torch_cls, tritred_cls, kwargs, shape, device, calls, caplog):
    """Forward and backward (input, weight, bias gradients) equal torch's module's, every constructor option."""
    caplog.set_level(logging.DEBUG, logger="tritred")
    ref, ours = _pair(torch_cls, tritred_cls, kwargs, device=device)
    assert isinstance(ours, torch_cls) and repr(ours) == repr(ref)
    x = randn(shape, torch.float32, device, scale=2.0, offset=0.5)
    _same(_run(ours, x), _run(ref, x), TOL[torch.float32], tritred_cls.__name__)
    assert sum(calls.values()) == 1 and "runs torch's forward" not in caplog.text


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_rms_norm_half(dtype, device, calls):
    """float16/bfloat16 modules (parameters of the input's dtype), and an RMSNorm with a float32 weight beside a
    bfloat16 input (torch's promotion), within one rounding of the dtype."""
    x = randn((4, 16), dtype, device)
    for torch_cls, tritred_cls in [(torch.nn.LayerNorm, tr.nn.LayerNorm), (torch.nn.RMSNorm, tr.nn.RMSNorm)]:
        ref, ours = _pair(torch_cls, tritred_cls, dict(normalized_shape=16), dtype=dtype, device=device)
        _same(_run(ours, x)[:2], _run(ref, x)[:2], TOL[dtype], tritred_cls.__name__)
    ref, ours = _pair(torch.nn.RMSNorm, tr.nn.RMSNorm, dict(normalized_shape=16), device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "Mismatch dtype between input and weight"
        _same(_run(ours, x), _run(ref, x), TOL[dtype], "RMSNorm mixed")
    assert calls == {"layer_norm": 1, "rms_norm": 2}


BN = [(torch.nn.BatchNorm1d, tr.nn.BatchNorm1d, (6, 3)), (torch.nn.BatchNorm1d, tr.nn.BatchNorm1d, (4, 3, 5)),
      (torch.nn.BatchNorm2d, tr.nn.BatchNorm2d, (3, 3, 4, 2)),
      (torch.nn.BatchNorm3d, tr.nn.BatchNorm3d, (2, 3, 2, 3, 2))]
BN_OPTIONS = [dict(), dict(momentum=0.3, eps=0.2), dict(momentum=None), dict(affine=False),
              dict(track_running_stats=False), dict(track_running_stats=False, momentum=None, affine=False)]
#: Every class and input rank with the defaults, every option on one of them in turn.
BN_CASES = [(*bn, {}) for bn in BN] + [(*BN[i % len(BN)], o) for i, o in enumerate(BN_OPTIONS[1:])]


@pytest.mark.parametrize("torch_cls, tritred_cls, shape, options", BN_CASES,
                         ids=[f"{c[0].__name__}-{len(c[2])}d-" + ("-".join(f"{k}={v}" for k, v in c[3].items())
                                                                 or "default") for c in BN_CASES])
def test_batch_norm_matches_torch(torch_cls, tritred_cls, shape, options, device, calls):
    """Three training steps then an eval step, every constructor option: outputs, gradients, running statistics
    (momentum=None: the cumulative moving average) and num_batches_tracked equal torch's after each step."""
    kwargs = dict(num_features=3, **options)
    ref, ours = _pair(torch_cls, tritred_cls, kwargs, device=device)
    for step, training in enumerate([True, True, True, False]):
        ref.train(training)
        ours.train(training)
        x = randn(shape, torch.float32, device, scale=1.5, offset=float(step))
        _same(_run(ours, x), _run(ref, x), TOL[torch.float32], f"step {step}")
        _same(list(ours.buffers()), list(ref.buffers()), TOL[torch.float32], f"buffers after step {step}")
    if options.get("track_running_stats", True):
        assert ours.num_batches_tracked.item() == 3
    assert calls == {"batch_norm": 4}


def test_batch_norm_errors_and_half(device, calls):
    """torch's input-dim checks (ValueError, torch's message), training with one value per channel (ValueError,
    with num_batches_tracked counted first, as torch), and a float16 input beside float32 parameters (AMP's case:
    tritred runs it)."""
    ref, ours = _pair(torch.nn.BatchNorm2d, tr.nn.BatchNorm2d, dict(num_features=3), device=device)
    for module in (ref, ours):
        with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
            module(torch.randn(3, 3, 4, device=device))
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
            module(torch.randn(1, 3, 1, 1, device=device))
    assert ours.num_batches_tracked.item() == ref.num_batches_tracked.item() == 1
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        tr.nn.BatchNorm1d(3)(torch.randn(2, 3, 4, 4, device=device))
    x = randn((4, 3, 2, 2), torch.float16, device)
    _same(_run(ours, x), _run(ref, x), TOL[torch.float16], "float16 input")
    _same(list(ours.buffers()), list(ref.buffers()), TOL[torch.float16], "buffers")
    assert calls == {"batch_norm": 2}


@pytest.mark.parametrize("cls_name", ["Softmax", "LogSoftmax"])
def test_softmax_dim_none(cls_name, device, calls):
    """dim=None: torch's legacy implicit dim (0 for 1-D and 3-D inputs, else 1) and its deprecation warning, same
    message, category and frame as torch's module's."""
    torch_cls, tritred_cls = getattr(torch.nn, cls_name), getattr(tr.nn, cls_name)
    for shape in [(5,), (3, 4), (3, 4, 2), (2, 3, 2, 2)]:
        x = randn(shape, torch.float32, device)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            ours = tritred_cls()(x)
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            ref = torch_cls()(x)
        torch.testing.assert_close(ours, ref, **TOL[torch.float32])
        got = [(str(w.message), w.category, w.filename, w.lineno) for w in got if w.category is not RuntimeWarning]
        assert got == [(str(w.message), w.category, w.filename, w.lineno) for w in want]  # (not the interpreter's)
        assert len(got) == 1 and "Implicit dimension choice" in got[0][0]
    assert sum(calls.values()) == 4


TARGETS = {"index": lambda n, c, g: torch.randint(0, c, n, generator=g),
           "ignored": lambda n, c, g: torch.where(torch.rand(n, generator=g) < 0.3, 2,
                                                  torch.randint(0, c, n, generator=g)),
           "probs": lambda n, c, g: torch.rand((n[0], c, *n[1:]), generator=g).softmax(1)}
CE_OPTIONS = [dict(), dict(reduction="sum"), dict(reduction="none", label_smoothing=0.2),
              dict(weight=True, ignore_index=2), dict(weight=True, reduction="none", ignore_index=2),
              dict(weight=True, label_smoothing=0.3), dict(size_average=False), dict(reduce=False)]


CE_CASES = [(o, "index") for o in CE_OPTIONS] + [
    (dict(weight=True, ignore_index=2), "ignored"), (dict(weight=True, reduction="none", ignore_index=2), "ignored"),
    (dict(), "probs"), (dict(weight=True, label_smoothing=0.3), "probs"), (dict(reduction="none"), "probs")]


@pytest.mark.parametrize("options, target", CE_CASES,
                         ids=[("-".join(f"{k}={v}" for k, v in o.items()) or "default") + f"-{t}" for o, t in CE_CASES])
def test_cross_entropy_loss_matches_torch(options, target, device, calls):
    """weight (a buffer), ignore_index, the reductions (also through the deprecated size_average/reduce),
    label_smoothing; class-index and probability targets; (N, C) and (N, C, d) logits; loss and gradient."""
    g = torch.Generator().manual_seed(3)
    kwargs = dict(options)
    if kwargs.get("weight"):
        kwargs["weight"] = torch.rand(5, generator=g) + 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # size_average/reduce are deprecated
        ref = torch.nn.CrossEntropyLoss(**kwargs).to(device)
        ours = tr.nn.CrossEntropyLoss(**kwargs).to(device)
    assert isinstance(ours, torch.nn.CrossEntropyLoss) and repr(ours) == repr(ref)
    for n in [(6,), (2, 3)]:
        logits = randn((n[0], 5, *n[1:]), torch.float32, device, scale=2.0)
        t = TARGETS[target](n, 5, g).to(device)
        _same(_run(ours, logits, t), _run(ref, logits, t), TOL[torch.float32], f"{options} {target} {n}")
    assert calls == {"cross_entropy": 2}
    if target == "probs":  # a class to ignore beside probabilities: torch's RuntimeError from both
        ours.ignore_index = ref.ignore_index = 1
        for module in (ours, ref):
            with pytest.raises(RuntimeError, match="ignore_index is not supported for floating point target"):
                module(logits, t)


@pytest.mark.parametrize("torch_cls, tritred_cls, kwargs", [
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=(2, 4))),
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=4, bias=False)),
    (torch.nn.LayerNorm, tr.nn.LayerNorm, dict(normalized_shape=4, elementwise_affine=False)),
    (torch.nn.RMSNorm, tr.nn.RMSNorm, dict(normalized_shape=4, eps=1e-3)),
    (torch.nn.RMSNorm, tr.nn.RMSNorm, dict(normalized_shape=4, elementwise_affine=False)),
    (torch.nn.BatchNorm1d, tr.nn.BatchNorm1d, dict(num_features=4)),
    (torch.nn.BatchNorm2d, tr.nn.BatchNorm2d, dict(num_features=4, affine=False)),
    (torch.nn.BatchNorm3d, tr.nn.BatchNorm3d, dict(num_features=4, track_running_stats=False)),
    (torch.nn.Softmax, tr.nn.Softmax, dict(dim=1)),
    (torch.nn.LogSoftmax, tr.nn.LogSoftmax, dict()),
    (torch.nn.CrossEntropyLoss, tr.nn.CrossEntropyLoss, dict(weight=torch.rand(4), label_smoothing=0.1)),
    (torch.nn.CrossEntropyLoss, tr.nn.CrossEntropyLoss, dict()),
], ids=lambda v: getattr(v, "__name__", None))
def test_state_dict_both_ways(torch_cls, tritred_cls, kwargs):
    """A subclass of torch's class with torch's constructor defaults, parameters (names, shapes, dtypes), buffers,
    state_dict keys and repr; each loads the other's state_dict (strict) and holds its values."""
    ref, ours = torch_cls(**kwargs), tritred_cls(**kwargs)
    assert isinstance(ours, torch_cls) and repr(ours) == repr(ref)
    assert vars(ours).keys() == vars(ref).keys()
    assert {k: v for k, v in vars(ours).items() if not k.startswith("_")} == \
        {k: v for k, v in vars(ref).items() if not k.startswith("_")}
    assert [(n, p.shape, p.dtype) for n, p in ours.named_parameters()] == \
        [(n, p.shape, p.dtype) for n, p in ref.named_parameters()]
    assert [(n, b.shape, b.dtype) for n, b in ours.named_buffers()] == \
        [(n, b.shape, b.dtype) for n, b in ref.named_buffers()]
    assert list(ours.state_dict()) == list(ref.state_dict())
    for src, dst in [(randomize(copy.deepcopy(ref), 1), ours), (randomize(copy.deepcopy(ours), 2), ref)]:
        dst.load_state_dict(src.state_dict())
        for (k, a), b in zip(dst.state_dict().items(), src.state_dict().values()):
            assert torch.equal(a, b), k


# -- the fallback to torch's forward -----------------------------------------------------------------------------

class Tagged(torch.Tensor):
    """A ``__torch_function__`` subclass (as DTensor or a tensor wrapper): tritred leaves it to torch."""


def test_fallback(device, calls, caplog, monkeypatch):
    """Inputs tritred does not take run torch's forward, logged at DEBUG with the reason; tritred's ops are not
    called: meta tensors, tensor subclasses, integer inputs (torch's own error), a LayerNorm weight of another dtype
    than the input, autocast regions (LayerNorm; BatchNorm is no autocast op and stays on tritred), CPU tensors
    without Triton's interpreter."""
    caplog.set_level(logging.DEBUG, logger="tritred")

    def falls_back(module, *inputs, reason):
        caplog.clear()
        before = sum(calls.values())
        ref = copy.deepcopy(module)
        out = module(*inputs)
        assert sum(calls.values()) == before, f"tritred ran: {reason}"
        assert f"{type(module).__name__} runs torch's forward" in caplog.text and reason in caplog.text, caplog.text
        want = type(module)._tritred_original.forward(ref, *inputs)
        assert out.dtype == want.dtype and out.device == want.device
        if out.device.type != "meta":
            assert torch.equal(out, want)
        return out

    x = torch.randn(4, 8, device=device)
    falls_back(tr.nn.LayerNorm(8, device="meta"), x.to("meta"), reason="on meta")
    falls_back(tr.nn.BatchNorm1d(8, device="meta"), x.to("meta"), reason="on meta")
    falls_back(tr.nn.SyncBatchNorm(8, device="meta"), x.to("meta"), reason="on meta")
    falls_back(tr.nn.Softmax(1), x.as_subclass(Tagged), reason="Tagged")
    falls_back(tr.nn.CrossEntropyLoss(), x, torch.zeros(4, dtype=torch.long, device=device).as_subclass(Tagged),
               reason="Tagged")
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):  # (the kernel's name: torch's)
        tr.nn.Softmax(1)(torch.ones(2, 3, dtype=torch.long, device=device))  # torch's message, not tritred's
    if device == "cpu":  # (torch's CPU kernel takes a float32 weight beside a bfloat16 input)
        falls_back(tr.nn.LayerNorm(8), x.bfloat16(), reason="another dtype")
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        falls_back(tr.nn.LayerNorm(8, device=device), x, reason="autocast")  # (CUDA's autocast: float32 out)
        falls_back(tr.nn.LogSoftmax(1), x.bfloat16(), reason="autocast")
        before = calls.get("batch_norm", 0)
        tr.nn.BatchNorm1d(8, device=device)(x.bfloat16())
        assert calls["batch_norm"] == before + 1
    if device == "cpu":
        monkeypatch.setattr(tr.nn.common, "CPU_RUNS", False)
        falls_back(tr.nn.RMSNorm(8), x, reason="on cpu")
        falls_back(tr.nn.SyncBatchNorm(8).eval(), x, reason="on cpu")


@pytest.mark.parametrize("layer", ["LayerNorm", "RMSNorm", "BatchNorm1d", "SyncBatchNorm"])
def test_model_ensembling_falls_back(layer, device, caplog):
    """Model ensembling (``stack_module_state`` and ``vmap(functional_call)``) batches a module's parameters, which
    tritred's ops do not take: the modules run torch's forward there (logged), equal to torch's modules; the input
    alone batched stays on tritred."""
    from torch.func import functional_call, stack_module_state

    caplog.set_level(logging.DEBUG, logger="tritred")
    make = {"LayerNorm": lambda m: m.LayerNorm(6), "RMSNorm": lambda m: m.RMSNorm(6),
            "BatchNorm1d": lambda m: m.BatchNorm1d(6).eval(), "SyncBatchNorm": lambda m: m.SyncBatchNorm(6).eval()}
    x = torch.randn(5, 6, dtype=torch.float64, device=device)
    outs = []
    for m in (tr.nn, torch.nn):
        torch.manual_seed(0)
        models = [make[layer](m).to(device, torch.float64) for _ in range(3)]
        for k, model in enumerate(models):  # (each member its own parameters and statistics)
            for t in (*model.parameters(), *model.buffers()):
                if t.is_floating_point():
                    t.data.add_(0.1 * (k + 1))
        params, buffers = stack_module_state(models)
        base = copy.deepcopy(models[0]).to("meta")
        outs.append(torch.func.vmap(lambda p, b, u, base=base: functional_call(base, (p, b), (u,)),
                                    in_dims=(0, 0, None))(params, buffers, x))
    torch.testing.assert_close(outs[0], outs[1])
    assert "batched by torch.func.vmap" in caplog.text
