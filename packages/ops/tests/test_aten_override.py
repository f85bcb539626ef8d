"""tritred_ops.enable(): torch's own aten ops routed to tritred, on the device's dispatch key.

Under the interpreter the table is registered at the CPU key (``enable(device="cpu")``, a test-only switch), so
torch.softmax, F.layer_norm ... on CPU tensors really run tritred's kernels: outputs and gradients against torch's
(float64, fresh random inputs), the counters, the fallbacks, scopes (exit, nesting, the global switch), and
torch.compile (aot_eager). The same tests run on CUDA (TRITRED_TEST_DEVICE=cuda); the ``gpu`` ones at the end add
what only CUDA has (cuDNN's batch norm, half_to_float, Inductor).
"""

from __future__ import annotations

import copy
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from tritred_ops.aten import impls, scope
from tritred_ops.aten.table import TABLE, select


@pytest.fixture(autouse=True)
def clean():
    """Every test starts and ends with no scope open."""
    tr.disable()
    yield
    tr.disable()
    assert not scope._registered and not scope._routed


def _counts(stats, name):
    return stats.get(f"aten::{name}", scope.OpCounts())


def _weights(t):
    """A fixed, non-uniform cotangent for ``t``: (t * w).sum() has a gradient that differs per element."""
    return torch.linspace(-1, 2, t.numel(), dtype=t.dtype, device=t.device).view(t.shape)


def _ops_and_grads(x, w, b):
    outs = [torch.softmax(x, 1), torch.log_softmax(x, 0), F.layer_norm(x, x.shape[1:], w, b),
            F.rms_norm(x, x.shape[1:], w), x.sum(1), x.mean(), torch.sum(x, (0, 1), keepdim=True), x.var(0),
            x.std(1, keepdim=True, correction=0), torch.logsumexp(x, 1), x.amax(0), x.amin(1), x.max(1).values,
            x.min(0).values, x.prod(1), x.max(), *torch.var_mean(x, 1), *torch.std_mean(x, 0)]
    loss = sum((o * _weights(o)).sum() for o in outs)
    grads = torch.autograd.grad(loss, [x, w, b])
    return [o.detach() for o in outs], grads


def test_routes_forward_and_backward(device):
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(6, 10, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    w = torch.randn(10, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    b = torch.randn(10, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    ref, gref = _ops_and_grads(x, w, b)
    with tr.enable(device=device) as on:
        assert on.active and tr.aten.active_scopes() == (on,)
        got, grads = _ops_and_grads(x, w, b)
    assert not on.active
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    for a, r in zip(grads, gref):
        torch.testing.assert_close(a, r, rtol=1e-11, atol=1e-11)
    stats = on.stats()
    for name in ("_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data",
                 "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
                 "sum.dim_IntList", "mean.dim", "var.correction", "std.correction", "logsumexp", "amax", "amin",
                 "max.dim", "min.dim", "prod.dim_int", "max", "var_mean.correction", "std_mean.correction"):
        assert _counts(stats, name).tritred >= 1, name
    assert all(c.fallback == 0 for c in stats.values()), stats


def test_batch_norm_training_and_eval(device):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 5, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    w = torch.randn(3, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    b = torch.randn(3, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    stats0 = (torch.randn(3, generator=gen, dtype=torch.float64).to(device),
              torch.rand(3, generator=gen, dtype=torch.float64).to(device) + 0.5)

    def run(training):
        rm, rv = stats0[0].clone(), stats0[1].clone()
        y = F.batch_norm(x, rm, rv, w, b, training=training, momentum=0.3, eps=1e-4)
        grads = torch.autograd.grad((y * _weights(y)).sum(), [x, w, b])
        return y.detach(), grads, rm, rv

    for training in (True, False):
        ref = run(training)
        with tr.enable(device=device) as on:
            got = run(training)
        torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
        for a, r in zip(got[1], ref[1]):
            torch.testing.assert_close(a, r, rtol=1e-11, atol=1e-11)
        torch.testing.assert_close(got[2], ref[2], rtol=1e-13, atol=1e-13)  # running statistics, updated once
        torch.testing.assert_close(got[3], ref[3], rtol=1e-13, atol=1e-13)
        stats = on.stats()
        cudnn = device == "cuda" and torch.backends.cudnn.is_available()
        forward = "cudnn_batch_norm" if cudnn else "native_batch_norm"
        assert _counts(stats, forward).tritred == 1
        assert _counts(stats, "native_batch_norm_backward").tritred + _counts(
            stats, "cudnn_batch_norm_backward").tritred == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_inputs(device, dtype):
    """fp32 and bf16 calls routed as they are (statistics in fp32, float32 batch-norm parameters beside bf16)."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(4, 6, 33, generator=gen).to(device=device, dtype=dtype)
    w = torch.randn(33, generator=gen).to(device=device, dtype=dtype)
    bw = torch.randn(6, generator=gen).to(device)
    calls = (lambda: torch.softmax(x, -1), lambda: F.layer_norm(x, (33,), w, w),
             lambda: F.rms_norm(x, (33,), w), lambda: F.batch_norm(x, None, None, bw, bw, training=True),
             lambda: x.sum(-1), lambda: x.mean((0, 2)), lambda: x.float().var(1))
    refs = [c() for c in calls]
    with tr.enable(device=device) as on:
        got = [c() for c in calls]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for a, r in zip(got, refs):
        assert a.dtype == r.dtype and a.shape == r.shape
        torch.testing.assert_close(a, r, **tol)
    stats = on.stats()
    assert stats and all(c.fallback == 0 for c in stats.values()), stats


def test_batch_norm_functional_overloads(device):
    """The functional forms (torch.export's and compile's) called directly: outputs and saved statistics."""
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64).to(device)
    w, b = (torch.randn(4, generator=gen, dtype=torch.float64).to(device) for _ in range(2))
    rm, rv = torch.randn(4, dtype=torch.float64, device=device), torch.rand(4, dtype=torch.float64, device=device)
    aten = torch.ops.aten
    calls = (lambda: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
             lambda: aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0],
             lambda: aten.native_batch_norm(x, None, None, rm.clone(), rv.clone(), True, 0.2, 1e-5))
    refs = [c() for c in calls]
    with tr.enable(device=device) as on:
        got = [c() for c in calls]
    for a, r in zip(got, refs):
        for t, u in zip(a if isinstance(a, tuple) else (a,), r if isinstance(r, tuple) else (r,)):
            torch.testing.assert_close(t, u, rtol=1e-12, atol=1e-12)
    stats = on.stats()
    for name in ("_native_batch_norm_legit.no_stats", "_native_batch_norm_legit_no_training", "native_batch_norm"):
        assert _counts(stats, name) == scope.OpCounts(1, 0, {}), (name, stats)


def test_double_backward_uses_torch_formulas(device):
    """Autograd stays torch's: the backward ops' own derivative formulas (composites of routed ops) give second
    derivatives, which tritred's autograd Functions do not have."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 7, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    w = torch.randn(7, generator=gen, dtype=torch.float64).to(device).requires_grad_()

    def second():
        y = torch.softmax(x, 1) + F.layer_norm(x, (7,), w)
        (g,) = torch.autograd.grad((y * _weights(y)).sum(), [x], create_graph=True)
        return torch.autograd.grad((g * g).sum(), [x, w])

    ref = second()
    with tr.enable(device=device) as on:
        got = second()
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-11)
    assert _counts(on.stats(), "_softmax_backward_data").tritred >= 2  # the first backward, and in the second


def test_cudnn_batch_norm_mapping(device, monkeypatch):
    """cuDNN's ops (F.batch_norm's CUDA path) called directly, routed on any device: forward (with an empty
    reserve) and backward from the saved mean and invstd; a declined backward goes to native_batch_norm_backward
    (the empty reserve is not cuDNN's)."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 2, 3, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    w = torch.randn(4, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    b = torch.randn(4, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    rm, rv = torch.zeros(4, dtype=torch.float64, device=device), torch.ones(4, dtype=torch.float64, device=device)
    y_ref = F.batch_norm(x, rm.clone(), rv.clone(), w, b, training=True, eps=1e-5)
    g_ref = torch.autograd.grad((y_ref * _weights(y_ref)).sum(), [x, w, b])
    for decline in (False, True):
        if decline:
            def refuse(*args, **kwargs):
                raise impls.Decline("test")
            monkeypatch.setattr(impls, "native_batch_norm_backward", refuse)  # (what cudnn's backward calls)
        with tr.enable(device=device) as on:
            y, mean, invstd, reserve = torch.ops.aten.cudnn_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1,
                                                                      1e-5)
            grads = torch.autograd.grad((y * _weights(y)).sum(), [x, w, b])
        assert reserve.numel() == 0 and mean.shape == invstd.shape == (4,)
        torch.testing.assert_close(y.detach(), y_ref.detach(), rtol=1e-12, atol=1e-12)
        for a, r in zip(grads, g_ref):
            torch.testing.assert_close(a, r, rtol=1e-11, atol=1e-11)
        stats = on.stats()
        assert _counts(stats, "cudnn_batch_norm").tritred == 1
        backward = _counts(stats, "cudnn_batch_norm_backward")
        if decline:
            assert (backward.tritred, backward.fallback, backward.reasons) == (0, 1, {"test": 1})
            assert _counts(stats, "native_batch_norm_backward").tritred == 1  # the redirect, routed in turn
        else:
            assert (backward.tritred, backward.fallback) == (1, 0)


def _outcome(call):
    """What ``call()`` gives: ("ok", tensor) or ("error", exception type, message)."""
    try:
        return ("ok", call())
    except Exception as e:  # noqa: BLE001 (torch's error, whatever it is, compared as it is)
        return ("error", type(e), str(e))


def test_fallbacks_counted_and_torch_semantics(device):
    """Calls tritred does not take go to torch's kernel: the same values (and strides), or torch's own error."""
    gen = torch.Generator().manual_seed(8)
    z = torch.randn(3, 5, generator=gen, dtype=torch.complex64).to(device)
    i = torch.randint(-5, 5, (3, 5), generator=gen).to(device)
    h = torch.randn(3, 8, generator=gen).to(device=device, dtype=torch.bfloat16)
    w32 = torch.randn(8, generator=gen).to(device)
    cl = torch.randn(2, 3, 4, 4, generator=gen).to(device).contiguous(memory_format=torch.channels_last)
    calls = {
        "sum.dim_IntList": lambda: torch.sum(z, 1),                      # complex
        "native_layer_norm": lambda: F.layer_norm(h, (8,), w32, None),   # mixed dtypes
        "_fused_rms_norm": lambda: torch.ops.aten._fused_rms_norm(cl, [4], None, None)[0],  # channels-last
        "mean.dim": lambda: i.mean(1),                                   # integer mean: torch's error
        "_softmax": lambda: torch.softmax(i.double(), 5),                # dim out of range: torch's error
        "logsumexp": lambda: torch.logsumexp(h.float(), ()),             # dim=(): version-dependent in torch
    }
    if device == "cpu":  # half to float: torch's CPU kernel refuses it (CUDA: test_gpu_half_to_float_softmax)
        calls["_log_softmax"] = lambda: torch.ops.aten._log_softmax(h.half(), 1, True)
    refs = {name: _outcome(c) for name, c in calls.items()}
    with tr.enable(device=device) as on:
        got = {name: _outcome(c) for name, c in calls.items()}
        ints = i.sum(1), i.prod(1), i.amax(0)                            # integer reductions: tritred's
    for name, ref in refs.items():
        out = got[name]
        assert out[0] == ref[0], (name, out, ref)
        if ref[0] == "ok":
            torch.testing.assert_close(out[1], ref[1], rtol=0, atol=0)
            assert out[1].stride() == ref[1].stride()
        else:
            assert out[1:] == ref[1:]
    assert [t.dtype for t in ints] == [torch.int64, torch.int64, torch.int64]
    assert torch.equal(ints[0], i.sum(1)) and torch.equal(ints[1], i.prod(1)) and torch.equal(ints[2], i.amax(0))
    stats = on.stats()
    for name in calls:
        assert _counts(stats, name).fallback == 1, (name, stats)
    assert _counts(stats, "sum.dim_IntList") == scope.OpCounts(1, 1, {"input dtype complex64": 1})
    assert _counts(stats, "mean.dim").reasons == {"result dtype int64": 1}
    assert "weight dtype float32 differs from the input's bfloat16" in _counts(stats, "native_layer_norm").reasons
    assert next(iter(_counts(stats, "_fused_rms_norm").reasons)).startswith("channels-last")
    assert next(iter(_counts(stats, "_softmax").reasons)).startswith("IndexError")


def test_exit_restores_torch(device, monkeypatch):
    x = torch.randn(4, 6, device=device)
    dump = torch._C._dispatch_dump("aten::_softmax")
    with tr.enable(device=device):
        assert torch._C._dispatch_dump("aten::_softmax") != dump  # (a kernel of ours at the key)
        torch.softmax(x, 1)
    assert torch._C._dispatch_dump("aten::_softmax") == dump

    def boom(*args, **kwargs):
        raise AssertionError("tritred called after the scope closed")
    monkeypatch.setattr(impls, "softmax_forward", boom)
    monkeypatch.setattr(impls, "reduce_call", boom)
    before = tr.enabled_stats()
    torch.testing.assert_close(torch.softmax(x, 1), torch.exp(x) / torch.exp(x).sum(1, keepdim=True))
    x.sum()
    assert tr.enabled_stats() == before


def test_nested_scopes_and_global_switch(device):
    x = torch.randn(4, 6, device=device)

    def routed():
        tr.enabled_stats(reset=True)
        torch.softmax(x, 1)
        x.sum(0)
        torch.var(x, 1)
        stats = tr.enabled_stats()
        return {n for n in ("_softmax", "sum.dim_IntList", "var.correction") if _counts(stats, n).tritred}

    outer = tr.enable(device=device)  # the global switch
    assert routed() == {"_softmax", "sum.dim_IntList", "var.correction"}
    with tr.enable(include=["sum"], device=device):
        assert routed() == {"sum.dim_IntList"}
        with tr.enable(exclude=("softmax", "aten::var.correction"), device=device) as inner:
            assert routed() == {"sum.dim_IntList"}
            assert "_softmax" not in inner.overloads and "_log_softmax" in inner.overloads
        assert routed() == {"sum.dim_IntList"}
    assert routed() == {"_softmax", "sum.dim_IntList", "var.correction"}
    with tr.enable(include=[], device=device):  # routes nothing: a pause
        assert routed() == set()
    middle = tr.enable(include=["softmax", "var"], device=device)
    with tr.enable(include=["sum"], device=device):
        middle.close()  # closed out of order: the innermost open scope still decides
        assert routed() == {"sum.dim_IntList"}
    assert routed() == {"_softmax", "sum.dim_IntList", "var.correction"}
    with tr.enable(include="var", device=device) as inner:
        tr.disable()  # closes every scope, this one too: its exit is then a no-op
        assert not inner.active and not outer.active
        assert routed() == set()
    assert routed() == set()
    with pytest.raises(RuntimeError, match="closed"), inner:
        pass


def test_process_wide_and_threads(device):
    x = torch.randn(8, device=device)
    done = []
    with tr.enable(include=["sum"], device=device) as on:
        t = threading.Thread(target=lambda: done.append(x.sum()))
        t.start()
        t.join()
    assert _counts(on.stats(), "sum.dim_IntList").tritred == 1
    torch.testing.assert_close(done[0], x.sum())


def test_names(device):
    every = select(None, None)
    assert every == TABLE
    assert {e.overload for e in select(["layer_norm"], None)} == {"native_layer_norm", "native_layer_norm_backward"}
    assert {e.overload for e in select([torch.ops.aten.max.dim, "aten::min"], None)} == {"max.dim", "min", "min.dim"}
    assert {e.overload for e in select(["_softmax.default"], None)} == {"_softmax"}
    # (a default overload named as such is that overload alone; the bare name is the packet's every overload)
    for default in (torch.ops.aten.max.default, "max.default", "aten::max.default"):
        assert {e.overload for e in select([default], None)} == {"max"}
    assert {e.overload for e in select(["aten::max"], None)} == {"max", "max.dim"}
    assert len(select(None, ["batch_norm", torch.ops.aten.sum])) == len(TABLE) - 8
    with pytest.raises(ValueError, match="log_softmax"):
        tr.enable(include=["cross_entropy"], device=device)
    with pytest.raises(ValueError, match="unknown op name 'sofmax'"):
        tr.enable(exclude=["sofmax"], device=device)
    with pytest.raises(ValueError, match="device"):
        tr.enable(device="mps")
    assert not scope._scopes


def test_cpu_key_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        tr.enable(device="cpu")


def test_cuda_scope_without_a_cuda_device_warns(monkeypatch):
    """enable() on a machine without CUDA opens (code written for GPUs keeps running) but says that nothing
    will be routed; with a CUDA device it does not warn."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="no CUDA device"), tr.enable() as on:
        assert on.active and on.dispatch_key == "CUDA"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tr.enable().close()


def test_compile_aot_eager_under_enable(device):
    torch._dynamo.reset()

    def f(x, w, rm, rv):
        h = F.batch_norm(x.unsqueeze(0), rm, rv, training=True).squeeze(0)  # the running statistics mutated
        return (torch.softmax(x, -1) * F.layer_norm(h, (8,), w)).sum(0) + x.var(1).mean()

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 8, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    w = torch.randn(8, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    running = [torch.zeros(5, dtype=torch.float64, device=device), torch.ones(5, dtype=torch.float64, device=device)]
    mine = [t.clone() for t in running]
    ref = f(x, w, *running)
    gref = torch.autograd.grad(ref.sum(), [x, w])
    with tr.enable(device=device) as on:
        out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w, *mine)
        grads = torch.autograd.grad(out.sum(), [x, w])
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-12, atol=1e-12)
    for a, r in zip(grads + tuple(mine), gref + tuple(running)):
        torch.testing.assert_close(a, r, rtol=1e-11, atol=1e-11)
    # aot_eager runs its aten graph eagerly: the graph's ops reach the override (Inductor's kernels would not)
    stats = on.stats()
    for name in ("native_layer_norm", "native_layer_norm_backward", "_native_batch_norm_legit",
                 "native_batch_norm_backward", "_softmax"):
        assert _counts(stats, name).tritred == 1, (name, stats)
    torch._dynamo.reset()


def test_model_trains_one_step(device):
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                   torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8), torch.nn.RMSNorm(8),
                                   torch.nn.Linear(8, 5)).to(device=device, dtype=torch.float64)

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(10, 12, generator=gen, dtype=torch.float64).to(device)
    target = torch.randint(0, 5, (10,), generator=gen).to(device)

    def step(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = F.cross_entropy(m(x), target)
        loss.backward()
        grads = [p.grad.clone() for p in m.parameters()]
        opt.step()
        return loss.detach(), grads, [t.detach().clone() for t in m.state_dict().values()]

    ref = step(model())
    m = model()
    with tr.enable(device=device) as on:
        got = step(m)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
    for a, r in zip(got[1] + got[2], ref[1] + ref[2]):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    stats = on.stats()
    for name in ("native_layer_norm_backward", "_log_softmax_backward_data", "_fused_rms_norm_backward",
                 "native_batch_norm_backward"):
        assert _counts(stats, name).tritred == 1, (name, stats)


# -- CUDA only -----------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_gpu_batch_norm_module_takes_cudnn_path(memory_format):
    """nn.BatchNorm2d on CUDA float32 goes through cudnn_batch_norm (cuDNN enabled) or native_batch_norm."""
    m = torch.nn.BatchNorm2d(8).cuda()
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-1, 1)
    m_ref = copy.deepcopy(m)
    x = torch.randn(4, 8, 6, 6, device="cuda").contiguous(memory_format=memory_format).requires_grad_()
    ref = m_ref(x)
    gref = torch.autograd.grad((ref * _weights(ref)).sum(), [x, m_ref.weight, m_ref.bias])
    with tr.enable() as on:
        y = m(x)
        grads = torch.autograd.grad((y * _weights(y)).sum(), [x, m.weight, m.bias])
    torch.testing.assert_close(y, ref)
    for a, r in zip(grads, gref):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(m.running_var, m_ref.running_var)
    forward = "cudnn_batch_norm" if torch.backends.cudnn.is_available() else "native_batch_norm"
    assert _counts(on.stats(), forward) == scope.OpCounts(1, 0, {}), on.stats()
    assert _counts(on.stats(), f"{forward}_backward").tritred == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_half_to_float_softmax():
    x = torch.randn(16, 300, device="cuda", dtype=torch.float16, requires_grad=True)
    ref = torch.softmax(x, 1, dtype=torch.float32)
    (gref,) = torch.autograd.grad((ref * _weights(ref)).sum(), [x])
    with tr.enable(include=["softmax"]) as on:
        y = torch.softmax(x, 1, dtype=torch.float32)  # _softmax(half, 1, half_to_float=True)
        (grad,) = torch.autograd.grad((y * _weights(y)).sum(), [x])
    assert y.dtype == torch.float32 and grad.dtype == torch.float16
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(grad, gref, rtol=2e-3, atol=2e-3)
    assert _counts(on.stats(), "_softmax") == scope.OpCounts(1, 0, {})
    assert _counts(on.stats(), "_softmax_backward_data") == scope.OpCounts(1, 0, {})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_inductor_under_enable(dtype):
    """Inductor compiles above the CUDA key: the compiled function runs under enable() and equals eager."""
    torch._dynamo.reset()

    def f(x, w, b):
        h = F.layer_norm(x, (64,), w, b)
        return torch.softmax(h, -1).sum(0) + F.rms_norm(x, (64,), w).var(1).mean()

    x = torch.randn(32, 64, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(64, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(64, device="cuda", dtype=dtype, requires_grad=True)
    ref = f(x, w, b)
    gref = torch.autograd.grad(ref.float().sum(), [x, w, b])
    with tr.enable():
        eager = f(x, w, b)
        out = torch.compile(f, fullgraph=True)(x, w, b)
        grads = torch.autograd.grad(out.float().sum(), [x, w, b])
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(eager, ref, **tol)
    torch.testing.assert_close(out, ref, **tol)
    for a, r in zip(grads, gref):
        torch.testing.assert_close(a, r, **tol)
    torch._dynamo.reset()
