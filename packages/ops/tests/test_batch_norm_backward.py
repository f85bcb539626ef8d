"""batch_norm's backward pass and torch integration: gradients against torch's (float64) in training and eval,
every backward launch branch, running statistics updated once, the registered ops (opcheck, torch.compile)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn
from tritred_ops.families.batch_norm import autograd as bn_autograd
from tritred_ops.runtime.caches import caches

NEEDS = {"all": (True, True, True), "input": (True, False, False), "weight": (False, True, False),
         "bias": (False, False, True), "params": (False, True, True), "input+bias": (True, False, True)}


def _launched(monkeypatch):
    """The launches from now on (through ``Recorder.launch``), in order: the forward's ``apply`` last of its own;
    the backward's ``sums``, ``finish`` (the partials merged once per channel), ``tile`` (the sums from one tile),
    ``dx(merge)`` (merging the partials itself), ``dx(coefs)`` (after a finish) and ``dx`` (eval: dy alone)."""
    from tritred_ops.runtime import replay

    seen: list[str] = []
    real = replay.Recorder.launch

    def label(name, kw):  # noqa: ANN001
        if name != "_dx_kernel":
            return name.strip("_").removesuffix("_kernel")
        if kw["RESIDENT"]:
            return "tile"
        if not kw["HAS_DX"]:
            return "finish"
        return "dx(merge)" if kw["SUMS"] else "dx(coefs)" if kw.get("COEFS") else "dx"

    def spy(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        seen.append(label(kernel.fn.__name__, kwargs))
        return real(self, kernel, grid, *args, **kwargs)

    monkeypatch.setattr(replay.Recorder, "launch", spy)
    return seen


def _check(x, training, need=(True, True, True), dy=None, affine=True, running=True, momentum=0.1, eps=1e-5,
           call=None, scale=8.0):
    """Forward and backward through ``call`` (default: the public function) against torch in float64 on the CPU:
    y, the gradients of the tensors in ``need`` (input, weight, bias), the running statistics after both."""
    c, dev = x.shape[1], x.device
    pdt = torch.float64 if x.dtype == torch.float64 else torch.float32  # fp32 parameters beside 2-byte inputs
    w, b = randn((c,), pdt, dev), randn((c,), pdt, dev)
    rm, rv = randn((c,), pdt, dev), randn((c,), pdt, dev).abs() + 0.5
    if not affine:
        w = b = None
    if not running:
        rm = rv = None
    if dy is None:
        dy = randn(x.shape, x.dtype, dev)
    d = lambda t: None if t is None else t.detach().double().cpu().clone()  # noqa: E731
    ref_in = [d(x), d(w), d(b)]
    rm_ref, rv_ref = d(rm), d(rv)
    leaves = [t.detach().requires_grad_(n) if t is not None else None for t, n in zip((x, w, b), need)]
    ref_leaves = [t.requires_grad_(n) if t is not None else None for t, n in zip(ref_in, need)]
    ref = F.batch_norm(ref_in[0], rm_ref, rv_ref, ref_in[1], ref_in[2], training, momentum, eps)
    fn = call or tr.batch_norm
    y = fn(leaves[0], rm, rv, leaves[1], leaves[2], training, momentum, eps)
    wanted = [i for i in range(3) if need[i] and leaves[i] is not None]
    assert_close(y, ref, n=16, scale=8, what="y")
    if not wanted:
        assert y.grad_fn is None
        return None
    grads = torch.autograd.grad(y, [leaves[i] for i in wanted], dy)
    refs = torch.autograd.grad(ref, [ref_leaves[i] for i in wanted], d(dy))
    n = x.numel() // max(c, 1)
    for i, g, r in zip(wanted, grads, refs):
        assert g.dtype == leaves[i].dtype, f"grad {i} dtype {g.dtype}"
        assert_close(g, r, n=n, scale=scale, what=f"grad of {('input', 'weight', 'bias')[i]} training={training}")
    if running:
        assert_close(rm, rm_ref, n=n, scale=2, what="running_mean")
        assert_close(rv, rv_ref, n=n, scale=4, what="running_var")
    return grads


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_gradcheck_float64(training, device):
    """torch.autograd.gradcheck through the public function (the eager Function) and through the registered op."""
    x = randn((3, 2, 4), torch.float64, device).requires_grad_()
    w = randn((2,), torch.float64, device).requires_grad_()
    b = randn((2,), torch.float64, device).requires_grad_()
    rm, rv = torch.zeros(2, dtype=torch.float64, device=device), torch.ones(2, dtype=torch.float64, device=device)

    def public(x, w, b):
        return tr.batch_norm(x, rm.clone(), rv.clone(), w, b, training, 0.1, 1e-5)

    def op(x, w, b):
        return torch.ops.tritred.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)[0]

    assert torch.autograd.gradcheck(public, (x, w, b), eps=1e-6, atol=1e-7, fast_mode=True)
    assert torch.autograd.gradcheck(op, (x, w, b), eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 3)], ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_dims(shape, training, device):
    _check(randn(shape, torch.float32, device, offset=2.0), training)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
def test_dtypes(dtype, device):
    """Gradients in the tensors' dtypes (dx the input's, dw and db the fp32 parameters' beside 2-byte inputs),
    computed in fp32 and rounded once."""
    x = randn((4, 3, 5, 3), dtype, device)
    _check(x, True)
    _check(x, False, need=NEEDS["params"])


@pytest.mark.parametrize("which", ["cl", "cl-dy-nchw", "nchw-dy-cl", "cl3d", "permuted", "sliced"])
def test_layouts(which, device):
    """x and dy in their own layouts: channels-last, a dy in another layout than x, a permuted or sliced x."""
    base = randn((3, 4, 5, 6), torch.float32, device)
    dy = randn((3, 4, 5, 6), torch.float32, device)
    cl = torch.channels_last
    x, g = {"cl": (base.to(memory_format=cl), dy.to(memory_format=cl)),
            "cl-dy-nchw": (base.to(memory_format=cl), dy),
            "nchw-dy-cl": (base, dy.to(memory_format=cl)),
            "cl3d": (randn((2, 4, 3, 2, 5), torch.float32, device).to(memory_format=torch.channels_last_3d), None),
            "permuted": (base.permute(0, 1, 3, 2), dy.permute(0, 1, 3, 2)),
            "sliced": (randn((3, 8, 5, 12), torch.float32, device)[:, ::2, :, 1::2], dy)}[which]
    for training in (True, False):
        grads = _check(x, training, dy=g)
        assert grads is not None
        # dx in torch's (CPU) memory format for the input: contiguous, or channels-last where x suggests it
        xr = x.detach().cpu().requires_grad_()
        yr = F.batch_norm(xr, torch.zeros(x.shape[1]), torch.ones(x.shape[1]), None, None, training)
        (ref_dx,) = torch.autograd.grad(yr, xr, g.cpu() if g is not None else torch.ones_like(yr))
        assert grads[0].stride() == ref_dx.stride(), (grads[0].stride(), ref_dx.stride())


@pytest.mark.parametrize("dy_layout", ["expanded", "transposed", "sliced"])
def test_non_contiguous_dy(dy_layout, device):
    """dy read through its strides: expanded (``y.sum().backward()`` gives stride-0 dy), transposed, sliced."""
    x = randn((4, 3, 5, 6), torch.float32, device)
    dy = randn((4, 3, 5, 6), torch.float32, device, layout=dy_layout)
    _check(x, True, dy=dy)
    _check(x, False, dy=dy)


@pytest.mark.parametrize("need", list(NEEDS), ids=str)
def test_which_gradients(need, device):
    """Only the gradients asked for (weight without input: no dx launch), with and without affine and running
    statistics."""
    x = randn((4, 3, 7), torch.float32, device)
    _check(x, True, need=NEEDS[need])
    _check(x, False, need=NEEDS[need])
    _check(x, True, need=NEEDS[need], running=False)


def test_without_affine(device):
    x = randn((4, 3, 7), torch.float32, device)
    _check(x, True, affine=False)
    _check(x, False, affine=False)


def test_weight_only_and_bias_only(device):
    """An affine with one of the two: the other's absence changes nothing (dx's weight is 1 without one)."""
    x = randn((4, 3, 7), torch.bfloat16, device)
    w = randn((3,), torch.float32, device).requires_grad_()
    b = randn((3,), torch.float32, device).requires_grad_()
    for weight, bias in ((w, None), (None, b)):
        xx = x.clone().requires_grad_()
        y = tr.batch_norm(xx, None, None, weight, bias, True)
        dy = randn(x.shape, x.dtype, device)
        ins = [t for t in (xx, weight, bias) if t is not None]
        got = torch.autograd.grad(y, ins, dy)
        # (the reference on the CPU: torch 2.11's CUDA batch_norm backward without a weight fails, "tensor does
        # not have a device")
        rx = x.double().cpu().requires_grad_()
        rins = [rx] + [t.detach().double().cpu().requires_grad_() for t in (weight, bias) if t is not None]
        rw = rins[1] if weight is not None else None
        rb = rins[1] if bias is not None else None
        want = torch.autograd.grad(F.batch_norm(rx, None, None, rw, rb, True), rins, dy.double().cpu())
        for g, r, t in zip(got, want, ins):
            assert g.dtype == t.dtype
            assert_close(g, r, n=28, scale=8, what="grad")


def test_strided_parameters_and_running_stats(device):
    """Strided weight, bias and running statistics (read through unit-stride copies; the running statistics updated
    once, in place or through the registered op's new ones), bf16 parameters and statistics beside a bf16 input
    (their gradients in bf16; torch's CPU kernel takes them all in one dtype)."""
    x = randn((4, 3, 5), torch.bfloat16, device)
    p = randn((12,), torch.bfloat16, device)
    for training in (True, False):
        for fn in (tr.batch_norm, torch.compile(tr.batch_norm, backend="aot_eager", fullgraph=True)):
            stats = torch.stack([torch.zeros(3, device=device), torch.ones(3, device=device)], 1).bfloat16()  # strided
            w, b = p[::4].clone().requires_grad_(), p[1::4]
            xx = x.clone().requires_grad_()
            y = fn(xx, stats[:, 0], stats[:, 1], w[None].expand(2, 3)[0], b, training, 0.5, 1e-5)
            dy = randn(x.shape, x.dtype, device)
            dx, dw = torch.autograd.grad(y, (xx, w), dy)
            rstats = torch.stack([torch.zeros(3), torch.ones(3)], 1).double()
            rx, rw = x.double().cpu().requires_grad_(), w.detach().double().cpu().requires_grad_()
            ry = F.batch_norm(rx, rstats[:, 0], rstats[:, 1], rw, b.double().cpu(), training, 0.5, 1e-5)
            rdx, rdw = torch.autograd.grad(ry, (rx, rw), dy.double().cpu())
            assert dx.dtype == dw.dtype == torch.bfloat16
            assert_close(dx, rdx, n=20, scale=8, what=f"dx training={training}")
            assert_close(dw, rdw, n=20, scale=8, what=f"dw training={training}")
            assert_close(stats, rstats, n=20, scale=4, what="running statistics")
    torch._dynamo.reset()


def test_errors_as_the_forward(device):
    """A call that needs grad raises torch's errors, as the inference path does."""
    x = randn((4, 3, 2), torch.float32, device).requires_grad_()
    with pytest.raises(RuntimeError, match="running_mean"):
        tr.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        tr.batch_norm(x[:1, :, :1], None, None, training=True)


# Every backward launch branch: training (sums, then dx merging the partials itself, or a finish launch merging
# them once per channel and dx reading its coefficients; one tile), eval (dx alone; sums writing dx, then the
# finish; one tile), weight/bias gradients without dx (sums, finish), db without dw (no dot product).
BRANCHES = {
    "split-edges": dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3),
    "split-1": dict(strategy="split", BLOCK_M=2, BLOCK_N=4, BLOCK_K=1, split=1),
    "many-slices": dict(strategy="split", BLOCK_M=1, BLOCK_N=2, BLOCK_K=1, split=200),
    "channel-blocks": dict(strategy="split", BLOCK_M=2, BLOCK_N=4, BLOCK_K=2, split=2),
    "loop-programs": dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3, num_programs=10),
    "finish": dict(strategy="split", BLOCK_M=1, BLOCK_N=1, BLOCK_K=16, split=100),  # 16 x 32: merged once
    "one-tile": dict(strategy="split", BLOCK_M=4, BLOCK_N=32, BLOCK_K=1, split=1),
}
EXPECTED = {  # need -> (training, eval) backward launches, for configs that merge inline / finish / one tile
    "all": {"inline": (["sums", "dx(merge)"], ["sums", "finish"]),
            "finish": (["sums", "finish", "dx(coefs)"], ["sums", "finish"]),
            "one-tile": (["tile"], ["tile"])},
    "input": {"inline": (["sums", "dx(merge)"], ["dx"]), "finish": (["sums", "finish", "dx(coefs)"], ["dx"]),
              "one-tile": (["tile"], ["dx"])},
    "params": {"inline": (["sums", "finish"],) * 2, "finish": (["sums", "finish"],) * 2,
               "one-tile": (["tile"], ["tile"])},
    "bias": {"inline": (["sums", "finish"],) * 2, "finish": (["sums", "finish"],) * 2,
             "one-tile": (["tile"], ["tile"])},
}


@pytest.mark.triton_compat
@pytest.mark.parametrize("cfg", list(BRANCHES), ids=str)
def test_forced_branches(cfg, force, monkeypatch, device):
    force("batch_norm", direction="backward", **BRANCHES[cfg])
    mode = cfg if cfg in ("finish", "one-tile") else "inline"
    launched = _launched(monkeypatch)
    for need, modes in EXPECTED.items():
        for training, kernels in zip((True, False), modes[mode]):
            # (many slices of one tile each, groups of 2 lanes: small inputs, the interpreter runs every program)
            shape = {"many-slices": (2, 2, 5), "finish": (3, 2, 6)}.get(cfg, (3, 5, 7, 3))
            x = randn(shape, torch.float32, device)
            if cfg == "channel-blocks":
                x = x.to(memory_format=torch.channels_last)
            launched.clear()
            caches().clear()  # (no replayed plans: every launch goes through the recorder)
            assert _check(x, training, need=NEEDS[need]) is not None
            last_forward = max(i for i, k in enumerate(launched) if k == "apply")
            assert launched[last_forward + 1:] == kernels, (training, need, launched)


def test_statistics_far_from_zero(force, device):
    """Channels at 1e3 +- 1: the sums take x less the saved mean (no E[x*dy] - E[x]E[dy] cancellation). The
    float32 mean itself rounds by up to 6e-5 at 1000 (torch saves the same), which moves every x_hat by that
    and dw by that times sum(dy) (~sqrt(n)): ~32 float32 roundings of 1000 / sqrt(n) per sqrt(n) terms."""
    force("batch_norm", direction="backward", strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3)
    _check(randn((8, 3, 40), torch.float32, device, offset=1000.0), True, scale=128.0)
    _check(randn((8, 3, 40), torch.float32, device, offset=-1000.0), False, need=NEEDS["params"], scale=2e3)


def test_deterministic(force, device):
    """The same gradients bit for bit across runs (split partials merged in a fixed order, no atomics)."""
    force("batch_norm", direction="backward", strategy="split", BLOCK_M=2, BLOCK_N=4, BLOCK_K=1, split=5)
    x = randn((4, 3, 5, 3), torch.float32, device)
    dy = randn((4, 3, 5, 3), torch.float32, device)
    w, b = randn((3,), torch.float32, device), randn((3,), torch.float32, device)
    runs = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        y = tr.batch_norm(leaves[0], None, None, leaves[1], leaves[2], True)
        runs.append(torch.autograd.grad(y, leaves, dy))
    for a, b_ in zip(*runs):
        assert torch.equal(a, b_)


def test_running_stats_updated_once(device):
    """Forward and backward (eager with grad) update the running statistics once, as torch's."""
    x = randn((4, 3, 6), torch.float32, device)
    _check(x, True, momentum=0.5)  # (compares the running statistics after forward and backward)
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    rm_ref, rv_ref = rm.double().cpu(), rv.double().cpu()
    xx = x.clone().requires_grad_()
    tr.batch_norm(xx, rm, rv, None, None, True, 0.5).sum().backward()
    F.batch_norm(x.double().cpu(), rm_ref, rv_ref, None, None, True, 0.5)
    assert_close(rm, rm_ref, n=24, scale=2, what="running_mean")
    assert_close(rv, rv_ref, n=24, scale=4, what="running_var")


def test_empty_input(device):
    """No values: an empty dx, zero dw and db (torch's)."""
    x = torch.empty((0, 3, 4), device=device, requires_grad=True)
    w, b = torch.ones(3, device=device, requires_grad=True), torch.ones(3, device=device, requires_grad=True)
    y = tr.batch_norm(x, torch.zeros(3, device=device), torch.ones(3, device=device), w, b, True)
    dx, dw, db = torch.autograd.grad(y, (x, w, b), torch.empty_like(y))
    assert dx.shape == x.shape and torch.equal(dw, torch.zeros_like(dw)) and torch.equal(db, torch.zeros_like(db))


def test_inference_takes_no_function_or_op(monkeypatch, device):
    """No grad -> the launcher, no autograd Function, no op boundary (the replayed fast path)."""
    used: list[str] = []
    monkeypatch.setattr(bn_autograd.BatchNormFunction, "forward", staticmethod(lambda *a: used.append("Function")))
    monkeypatch.setattr(torch.ops.tritred, "batch_norm", lambda *a: used.append("op"))
    x = randn((4, 3, 5), torch.float32, device).requires_grad_()
    with torch.no_grad():
        y = tr.batch_norm(x, None, None, None, None, True)
    tr.batch_norm(x.detach(), None, None, None, None, True)
    assert used == [] and y.grad_fn is None


def test_double_backward_is_torchs(device):
    """A second-order gradient through batch_norm in training equals torch's (more in test_autograd_modes.py)."""
    x0, dy = randn((4, 3, 5), torch.float64, device), randn((4, 3, 5), torch.float64, device)
    got = []
    for f in (tr.batch_norm, torch.nn.functional.batch_norm):
        x = x0.clone().requires_grad_()
        (g,) = torch.autograd.grad(f(x, None, None, None, None, True), x, dy, create_graph=True)
        got.append(torch.autograd.grad(g.square().sum(), x)[0])
    torch.testing.assert_close(got[0], got[1])


OPCHECK = {
    "train-affine-running": ((4, 3, 5), torch.float32, True, True, True),
    "eval": ((4, 3, 5), torch.float32, False, True, True),
    "train-bare": ((4, 3, 2, 2), torch.float32, True, False, False),
    "bf16-fp32-params-cl": ((2, 3, 2, 3), torch.bfloat16, True, True, True),
}


@pytest.mark.parametrize("case", list(OPCHECK), ids=str)
def test_opcheck(case, device):
    """torch.library.opcheck of both registered ops: schema, fake implementation, autograd registration, no input
    mutated (training returns the new running statistics instead)."""
    shape, dtype, training, affine, running = OPCHECK[case]
    x = randn(shape, dtype, device)
    if case.endswith("-cl"):
        x = x.to(memory_format=torch.channels_last)
    c = shape[1]
    w = randn((c,), torch.float32 if dtype != torch.float64 else dtype, device) if affine else None
    b = randn((c,), torch.float32, device) if affine else None
    rm, rv = (torch.zeros(c, device=device), torch.ones(c, device=device)) if running else (None, None)
    x.requires_grad_()
    if w is not None:
        w.requires_grad_()
    args = (x, rm, rv, w, b, training, 0.1, 1e-5)
    torch.library.opcheck(torch.ops.tritred.batch_norm.default, args)
    _, mean, invstd, _, _ = torch.ops.tritred.batch_norm(*args)
    saved = (mean, invstd) if training else (rm, rv)
    dy = randn(shape, dtype, device)
    torch.library.opcheck(torch.ops.tritred.batch_norm_backward.default,
                          (dy, x.detach(), w.detach() if w is not None else None, *saved, training, 1e-5,
                           [True, affine, affine], torch.float32 if affine else None))


def _model_step(x, w, b, rm, rv, training):
    y = tr.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)
    return (y * y.detach().cos()).sum()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph(dynamic, device):
    """torch.compile(fullgraph=True, aot_eager) of forward + backward: loss, gradients and running statistics equal
    eager's, over two steps (the second in another shape when dynamic) and in eval."""
    torch._dynamo.reset()
    step = torch.compile(_model_step, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    w, b = randn((3,), torch.float32, device), randn((3,), torch.float32, device)
    stats = [torch.zeros(3, device=device), torch.ones(3, device=device)]
    stats_ref = [t.clone() for t in stats]
    for shape, training in (((4, 3, 5), True), ((6, 3, 5) if dynamic else (4, 3, 5), True), ((4, 3, 5), False)):
        x = randn(shape, torch.float32, device)
        got, want = [], []
        for fn, st, out in ((step, stats, got), (_model_step, stats_ref, want)):
            leaves = [t.clone().requires_grad_() for t in (x, w, b)]
            loss = fn(*leaves, *st, training)
            loss.backward()
            out += [loss.detach(), *(t.grad for t in leaves)]
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
        for a, e in zip(stats, stats_ref):
            torch.testing.assert_close(a, e, rtol=0, atol=0)  # (once per forward, as eager)
