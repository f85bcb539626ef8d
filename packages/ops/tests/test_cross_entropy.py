"""cross_entropy: loss and input gradient against torch's in float64 over every argument (class indices and
probabilities, weights, ignore_index, reductions, label smoothing), dtypes, layouts, (N, C, d1, ...) inputs, every
launch branch, NaN and inf, empty inputs, torch's errors, replay and determinism.

Interpreter cost: a launch costs per program and per chunk, so the shapes are small (C of 5-300) and loops are
forced with few programs."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn, seed

INF, NAN = float("inf"), float("nan")
IGNORE = -100


def _targets(x, kind, gen, dtype=None, ignore=IGNORE, class_dim=None):
    """Class indices (some of them ``ignore``) or class probabilities for logits ``x``."""
    cd = class_dim if class_dim is not None else (0 if x.dim() == 1 else 1)
    C = x.shape[cd]
    kept = tuple(s for i, s in enumerate(x.shape) if i != cd)
    if kind == "class":
        t = torch.randint(0, C, kept, generator=gen)
        if t.dim():
            t.view(-1)[torch.randperm(t.numel(), generator=gen)[: max(1, t.numel() // 4)]] = ignore
        return t.to(x.device)
    q = torch.softmax(torch.randn(x.shape, generator=gen, dtype=torch.float64) * 2, cd)
    return q.to(dtype or x.dtype).to(x.device)


def _ref(x, target, weight=None, grad_output=None, **kw):
    """torch's loss and input gradient in float64 (on the CPU)."""
    xr = x.detach().double().cpu().requires_grad_()
    tr_ = target.cpu().double() if target.is_floating_point() else target.cpu()
    wr = weight.cpu().double() if weight is not None else None
    loss = F.cross_entropy(xr, tr_, wr, **kw)
    g = grad_output.cpu().double() if grad_output is not None else torch.ones_like(loss)
    loss.backward(g)
    return loss.detach(), xr.grad


def _check(x, target, weight=None, what="", grad_output=None, **kw):
    """Forward with grad, backward with a random (or the given) loss gradient, and the no-grad forward, against
    torch in float64; returns the loss."""
    C = x.shape[0 if x.dim() == 1 else 1]
    xx = x.detach().requires_grad_()  # (a leaf of x's strides)
    loss = tr.cross_entropy(xx, target, weight, **kw)
    g = grad_output
    if g is None:
        g = torch.randn(loss.shape, generator=torch.Generator().manual_seed(seed()), dtype=torch.float64)
    ref_loss, ref_grad = _ref(x, target, weight, g, **kw)
    out_dtype = x.dtype
    if target.is_floating_point():
        out_dtype = torch.promote_types(x.dtype, target.dtype)
        out_dtype = torch.promote_types(out_dtype, weight.dtype) if weight is not None else out_dtype
    assert loss.dtype == out_dtype and loss.shape == ref_loss.shape, what
    scale = max(1.0, ref_loss.abs().nan_to_num(posinf=0).max().item()) if ref_loss.numel() else 1.0
    assert_close(loss, ref_loss, n=C, scale=scale, what=f"{what} loss")
    loss.backward(g.to(loss.dtype).to(loss.device))
    assert xx.grad.dtype == x.dtype and xx.grad.shape == x.shape
    gscale = ref_grad.abs().nan_to_num(posinf=0).max().item() if ref_grad.numel() else 1.0
    assert_close(xx.grad, ref_grad, n=C, scale=max(gscale, 1e-30), what=f"{what} grad")
    with torch.no_grad():
        again = tr.cross_entropy(xx, target, weight, **kw)
    assert_close(again, ref_loss, n=C, scale=scale, what=f"{what} no grad")
    return loss


@pytest.mark.parametrize("kind,weighted,smoothing,reduction",
                         list(itertools.product(("class", "prob"), (False, True), (0.0, 0.25),
                                                ("none", "mean", "sum"))))
def test_every_argument(kind, weighted, smoothing, reduction, device):
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((6, 37), torch.float32, device, gen_seed=s, scale=2)
    t = _targets(x, kind, gen)
    w = (torch.rand(37, generator=gen) + 0.1).to(device) if weighted else None
    _check(x, t, w, f"{kind} w={weighted} ls={smoothing} {reduction} seed={s}", reduction=reduction,
           label_smoothing=smoothing)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32, torch.float64))
def test_dtypes(dtype, device):
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((5, 53), dtype, device, gen_seed=s, scale=3)
    w = (torch.rand(53, generator=gen) + 0.1).to(dtype).to(device)
    _check(x, _targets(x, "class", gen), w, f"{dtype} class seed={s}", label_smoothing=0.1)
    _check(x, _targets(x, "prob", gen), None, f"{dtype} prob seed={s}", reduction="sum")


def test_probabilities_of_other_dtypes(device):
    """Probability targets and weights of another dtype: the loss's dtype is promoted, as torch's."""
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((4, 20), torch.bfloat16, device, gen_seed=s)
    _check(x, _targets(x, "prob", gen, torch.float32), None, f"bf16 logits, fp32 targets seed={s}")
    w = torch.rand(20, generator=gen, dtype=torch.float64).to(device)
    _check(x, _targets(x, "prob", gen, torch.float16), w, f"fp16 targets, fp64 weight seed={s}", reduction="none")


@pytest.mark.parametrize("layout", ("transposed", "sliced", "expanded"))
def test_strided_logits(layout, device):
    """Logits read in place through their strides: a transposed (class-major), a sliced and an expanded matrix."""
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((6, 24), torch.float32, device, layout, gen_seed=s)
    _check(x, _targets(x, "class", gen), None, f"{layout} class seed={s}", label_smoothing=0.2)
    _check(x, _targets(x, "prob", gen), None, f"{layout} prob seed={s}", reduction="none")


@pytest.mark.parametrize("shape", ((3, 7, 4), (2, 5, 3, 2), (2, 4, 2, 3, 2)))
def test_spatial_inputs(shape, device):
    """(N, C, d1, ...): the class dim is dim 1, read in place (columns), targets (N, d1, ...)."""
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn(shape, torch.float32, device, gen_seed=s)
    w = (torch.rand(shape[1], generator=gen) + 0.1).to(device)
    for reduction in ("none", "mean"):
        _check(x, _targets(x, "class", gen), w, f"{shape} class {reduction} seed={s}", reduction=reduction)
    _check(x, _targets(x, "prob", gen), None, f"{shape} prob seed={s}", reduction="sum", label_smoothing=0.3)


def test_channels_last_and_transposed_spatial(device):
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((2, 5, 3, 4), torch.float32, device, gen_seed=s).contiguous(memory_format=torch.channels_last)
    _check(x, _targets(x, "class", gen), None, f"channels_last seed={s}", reduction="none")
    y = randn((3, 4, 6), torch.float32, device, gen_seed=s).transpose(1, 2)  # (3, 6, 4): classes of stride 1
    _check(y, _targets(y, "class", gen), None, f"transposed (N, C, d) seed={s}", label_smoothing=0.1)


def test_one_sample(device):
    """A (C,) input: a 0-d class index (or a one-element one, as torch's CPU takes), or probabilities."""
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((11,), torch.float32, device, gen_seed=s)
    for reduction in ("none", "mean"):
        _check(x, torch.tensor(4, device=device), None, f"0-d {reduction}", reduction=reduction)
        # (torch's forward takes a (1,) target there without label smoothing, its backward refuses it)
        one = torch.tensor([4], device=device)
        ref = F.cross_entropy(x.double().cpu(), one.cpu(), reduction=reduction)
        assert_close(tr.cross_entropy(x, one, reduction=reduction), ref, n=11)
    _check(x, _targets(x, "prob", gen), None, "prob (C,)", reduction="none")
    assert tr.cross_entropy(x, torch.tensor(IGNORE, device=device)).isnan()


CONFIGS = [
    dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128),                  # rows in registers, 4 per program
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=32),                    # loop: 3 whole chunks and a tail
    dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=64, num_warps=8),       # loop: one whole chunk and a tail
    dict(strategy="single_pass", BLOCK_N=128, BLOCK_K=4),                  # columns in registers
    dict(strategy="multi_pass", BLOCK_N=16, BLOCK_K=2),                    # columns, loop
    dict(strategy="split_rows", BLOCK_N=32, split=4),                      # 4 programs a row, the last short
]


@pytest.mark.triton_compat
@pytest.mark.parametrize("cfg", CONFIGS,
                         ids=lambda c: f"{c['strategy']}-M{c.get('BLOCK_M', 1)}-K{c.get('BLOCK_K', 1)}")
def test_branches(cfg, force, device):
    """Every kernel path, forced for the loss alone (forward), the gradient-forming launch and the backward's scale
    (backward): rows (4, 100) and columns (2, 100, 3)."""
    force("cross_entropy", direction=None, **cfg)
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    shape = (4, 100) if "BLOCK_K" not in cfg else (2, 100, 3)
    if cfg["strategy"] == "split_rows":  # (rows only: columns refuse it)
        with pytest.raises(ValueError, match="split_rows"):
            tr.cross_entropy(randn((2, 100, 3), torch.float32, device), torch.zeros(2, 3, dtype=torch.long,
                                                                                   device=device))
    x = randn(shape, torch.float32, device, gen_seed=s, scale=3)
    w = (torch.rand(100, generator=gen) + 0.1).to(device)
    _check(x, _targets(x, "class", gen), w, f"{cfg} class seed={s}", label_smoothing=0.2)
    _check(x, _targets(x, "class", gen), None, f"{cfg} class none seed={s}", reduction="none")
    _check(x, _targets(x, "prob", gen), w, f"{cfg} prob seed={s}", reduction="sum")


def test_loop_of_many_chunks_bfloat16(force, device):
    """A long row in 16-wide chunks (19 of them, the last partial), bf16 logits: fp32 accumulation."""
    force("cross_entropy", direction=None, strategy="multi_pass", BLOCK_M=2, BLOCK_N=16)
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((2, 300), torch.bfloat16, device, gen_seed=s, scale=4)
    _check(x, _targets(x, "class", gen), None, f"bf16 300 seed={s}", reduction="sum")


@pytest.mark.parametrize("loop", (False, True))
def test_large_logits(loop, force, device):
    """Logits around 1e4 (fp32): the max is subtracted before exp, the loss keeps its digits; the loss alone of a
    loop sums label smoothing's and probabilities' terms relative to running maxima (no cancellation)."""
    if loop:
        force("cross_entropy", direction=None, strategy="multi_pass", BLOCK_M=2, BLOCK_N=16)
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((4, 50), torch.float32, device, gen_seed=s, offset=1e4, scale=5)
    w = (torch.rand(50, generator=gen) + 0.1).to(device)
    _check(x, _targets(x, "class", gen), w, f"1e4 seed={s}", label_smoothing=0.1)
    _check(x, _targets(x, "prob", gen), None, f"1e4 prob seed={s}", reduction="none", label_smoothing=0.1)


def _nan_inf_logits(device, dtype=torch.float64):
    x = torch.randn(9, 6, dtype=dtype)
    x[1, 2] = NAN          # NaN: the row's loss and gradient are NaN
    x[2, 3] = INF          # +inf: NaN too
    x[3] = -INF            # all -inf: NaN
    x[4, 1] = -INF         # -inf at the target: loss +inf, gradient finite
    x[5, 4] = -INF         # -inf elsewhere: finite
    x[6, 0] = NAN          # ignored: loss 0, gradient NaN (torch's 0 - exp(logp) * 0)
    x[7, 2] = INF          # ignored, +inf
    return x.to(device)


@pytest.mark.parametrize("cfg", [None, dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=4)],
                         ids=("heuristic", "loop"))
def test_nan_and_inf_as_torch(cfg, force, device):
    if cfg is not None:
        force("cross_entropy", direction=None, **cfg)
    x = _nan_inf_logits(device)
    t = torch.tensor([0, 1, 2, 3, 1, 0, IGNORE, IGNORE, 5], device=device)
    w = torch.tensor([1.0, 0.0, 2.0, 0.5, 1.0, 3.0], dtype=torch.float64, device=device)  # 0 weight at a -inf
    for weight, smoothing, reduction in itertools.product((None, w), (0.0, 0.3), ("none", "mean", "sum")):
        _check(x, t, weight, f"nan/inf w={weight is not None} ls={smoothing} {reduction}",
               grad_output=torch.tensor(1.5, dtype=torch.float64).expand(t.shape) if reduction == "none" else
               torch.tensor(1.5, dtype=torch.float64), reduction=reduction, label_smoothing=smoothing)
    q = torch.softmax(torch.randn(9, 6, dtype=torch.float64), 1)
    q[5, 4] = 0.0  # a zero probability at a -inf logit: NaN, as torch's 0 * -inf
    for weight in (None, w):
        _check(x, q.to(device), weight, f"nan/inf prob w={weight is not None}", reduction="none",
               label_smoothing=0.0)


def test_every_row_ignored(device):
    """'mean' over no counted sample is NaN (0 / 0) and the gradient zeros, as torch; 'sum' is 0."""
    x = randn((3, 8), torch.float32, device)
    t = torch.full((3,), 5, device=device)
    for reduction in ("mean", "sum"):
        for smoothing in (0.0, 0.2):
            _check(x, t, None, f"all ignored {reduction} {smoothing}", ignore_index=5, reduction=reduction,
                   label_smoothing=smoothing)
    w = torch.zeros(8, device=device)  # zero weights: the mean's denominator 0 too
    _check(x, torch.tensor([1, 2, 3], device=device), w, "zero weights")
    # Only zero-weight classes, with label smoothing: torch's mean is the nll's 0 / 0 plus the smoothing term's
    # x / 0, NaN (not the x / 0 = inf of one sum over one denominator); the other classes' weights are not 0.
    w = torch.rand(8, device=device) + 0.5
    w[1] = 0.0
    t = torch.tensor([1, 1, 5], device=device)
    for smoothing in (0.0, 0.3):
        _check(x, t, w, f"zero-weight targets {smoothing}", ignore_index=5, label_smoothing=smoothing)
        assert tr.cross_entropy(x, t, w, ignore_index=5, label_smoothing=smoothing).isnan()


def test_uint8_targets_and_ignore_index(device):
    x = randn((5, 9), torch.float32, device)
    t = torch.tensor([0, 3, 8, 2, 3], dtype=torch.uint8, device=device)
    _check(x, t, None, "uint8")
    _check(x, t.long(), None, "ignore 3", ignore_index=3, label_smoothing=0.2)
    _check(x, torch.tensor([0, -5, 8, -5, 3], device=device), None, "negative ignore", ignore_index=-5)


def test_empty(device):
    """No samples: 'mean' NaN, 'sum' 0, 'none' empty; no classes (all ignored); as torch."""
    for reduction in ("none", "mean", "sum"):
        x = torch.empty(0, 5, device=device)
        t = torch.empty(0, dtype=torch.long, device=device)
        for tt in (t, torch.empty(0, 5, device=device)):
            out = tr.cross_entropy(x, tt, reduction=reduction)
            ref = F.cross_entropy(x.cpu(), tt.cpu(), reduction=reduction)
            assert out.shape == ref.shape and torch.equal(out.cpu().isnan(), ref.isnan())
    x = torch.empty(2, 0, device=device)
    for reduction in ("none", "mean", "sum"):
        out = tr.cross_entropy(x, torch.empty(2, 0, device=device), reduction=reduction)
        ref = F.cross_entropy(x.cpu(), torch.empty(2, 0), reduction=reduction)
        assert out.shape == ref.shape
        assert torch.equal(out.cpu().isnan(), ref.isnan()) and torch.equal(out.cpu().nan_to_num(), ref.nan_to_num())
    # no classes, every class index ignored, with and without label smoothing (torch's smoothing term: 0 * (ls / 0))
    for shape in ((4, 0), (0, 0)):
        t = torch.full(shape[:1], -100, dtype=torch.long, device=device)
        for reduction in ("none", "mean", "sum"):
            for ls in (0.0, 0.1):
                out = tr.cross_entropy(torch.empty(shape, device=device), t, reduction=reduction, label_smoothing=ls)
                ref = F.cross_entropy(torch.empty(shape), t.cpu(), reduction=reduction, label_smoothing=ls)
                assert out.shape == ref.shape and torch.equal(out.cpu().isnan(), ref.isnan()), (shape, reduction, ls)
                assert torch.equal(out.cpu().nan_to_num(), ref.nan_to_num())
    x = torch.empty(0, 5, requires_grad=True, device=device)
    tr.cross_entropy(x, torch.empty(0, dtype=torch.long, device=device), reduction="sum").backward()
    assert x.grad.shape == (0, 5)


def _bad_calls(device):
    r = lambda *s, **k: torch.randn(*s, device=device, **k)  # noqa: E731
    i = lambda v, **k: torch.tensor(v, device=device, **k)  # noqa: E731
    z = lambda *s, **k: torch.zeros(*s, dtype=torch.long, device=device, **k)  # noqa: E731
    return [
        ((r(4, 5), i([1, 2, 5, 0])), {}),                                  # out of range
        ((r(4, 5), i([1, 2, -1, 0])), {}),
        ((r(2, 5, 3, 4), torch.full((2, 3, 4), 7, device=device)), {}),
        ((r(5), i(9)), {}),
        ((r(4, 5), i([1.0, 2, 3, 0])), {}),                                # float class indices
        ((r(4, 5), i([1, 2, 3])), {}),                                     # batch
        ((r(4, 5), i([1, 2, 3, 0], dtype=torch.int32)), {}),
        ((r(4, 5), r(4, 6)), {}),
        ((r(4, 5, 3), z(4, 5)), {}),
        ((r(4, 5, 3), z(4, 4)), {}),
        ((r(2, 5, 3, 4), z(2, 3)), {}),
        ((r(2, 5, 3, 4), z(2, 3, 5)), {}),
        ((r(2, 5, 3, 4), z(2, 3, 4).to(torch.uint8)), {}),
        ((r(2, 5, 3, 4, 5), z(2, 3, 5, 5)), {}),
        ((r(5), i([[2]])), {}),
        ((r(2, 5), i([[1, 2]])), {}),
        ((r(4, 5), i([1, 2, 3, 0]), r(4)), {}),                            # weight shape
        ((r(4, 5), r(4, 5), r(4)), {}),
        ((r(4, 5), i([1, 2, 3, 0]), r(5).double()), {}),                   # weight dtype
        ((r(4, 5), r(4, 5).long()), {}),                                   # integer probabilities
        ((r(4, 5).int(), i([1, 2, 3, 0])), {}),                            # integer logits
        ((r(4, 5), i([1, 2, 3, 0])), {"reduction": "foo"}),
        ((r(4, 5), i([1, 2, 3, 0])), {"reduction": None}),
        ((r(4, 5), i([1, 2, 3, 0])), {"label_smoothing": 1.5}),
        ((r(4, 5), r(4, 5)), {"label_smoothing": 2.0}),
        ((r(4, 5), r(4, 5)), {"ignore_index": 0}),
        ((r(4, 5), [1, 2, 3, 0]), {}),
        (([1.0], i([1, 2])), {}),
        ((r(4, 0), z(4)), {}),
    ]


#: The first calls of :func:`_bad_calls`: class indices out of range. On CUDA they are refused by a device-side
#: assert, as torch's own loss kernels refuse them (no host synchronization), which ends the process's CUDA
#: context: test_out_of_range_targets_assert_on_the_device runs one in a child process. (The last call, an input
#: of no classes, is refused on the host on CUDA too: no kernel runs.)
OUT_OF_RANGE = 4


#: Messages of an older torch (2.11, the GPU machine's image) and the ones tritred gives, those of the torch it is
#: developed against (2.13).
OLDER_TORCH = {f"expected scalar type Long but found {t}": f"expected target dtype to be Long or Byte, but got {t}"
               for t in ("Float", "Int", "Short", "Char", "Bool", "Double", "Half", "BFloat16")}


def test_errors_as_torch(device):
    """Each call torch refuses is refused with torch's exception type and message, prefixed with the op's name."""
    for args, kwargs in _bad_calls(device)[OUT_OF_RANGE if device == "cuda" else 0:]:
        cpu = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(Exception) as want:
            F.cross_entropy(*cpu, **kwargs)
        with pytest.raises(want.type) as got:
            tr.cross_entropy(*args, **kwargs)
        message = str(want.value).replace("torch.Size(", "").replace("cross_entropy_loss(): ", "")
        assert str(got.value).startswith("cross_entropy(): "), str(got.value)
        if want.type is not NotImplementedError:  # (torch names its CPU kernel)
            first = message.split("\n")[0]
            first = OLDER_TORCH.get(first, first)
            assert first in str(got.value), (args, kwargs, str(got.value), message)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the device-side assert is CUDA's")
def test_out_of_range_targets_assert_on_the_device():
    """A class index out of range on CUDA stops the kernel with a device-side assert naming the op (a child
    process: the assert ends its CUDA context)."""
    code = ("import torch, tritred_ops as tr\n"
            "x = torch.randn(4, 5, device='cuda')\n"
            "tr.cross_entropy(x, torch.tensor([1, 2, 5, 0], device='cuda'))\n"
            "torch.cuda.synchronize()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                         env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert run.returncode != 0
    assert "tritred.cross_entropy(): Target out of bounds" in run.stderr, run.stderr[-2000:]


def test_weight_that_requires_grad_with_class_indices(device):
    x = randn((3, 4), torch.float32, device).requires_grad_()
    w = torch.ones(4, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"cross_entropy\(\): .*not differentiable with respect to argument "
                                           r"'weight'"):
        tr.cross_entropy(x, torch.tensor([0, 1, 2], device=device), w)
    with torch.no_grad():
        tr.cross_entropy(x, torch.tensor([0, 1, 2], device=device), w)


def test_legacy_size_average_and_reduce(device):
    x = randn((3, 4), torch.float32, device)
    t = torch.tensor([0, 1, 3], device=device)
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        out = tr.cross_entropy(x, t, size_average=False)
    assert_close(out, F.cross_entropy(x.double().cpu(), t.cpu(), reduction="sum"), n=4)
    with pytest.warns(UserWarning):
        assert tr.cross_entropy(x, t, reduce=False).shape == (3,)


def test_replay_checks_targets_and_matches(device):
    """A repeated call replays its plan (the same results); on the CPU the targets' range is still checked."""
    x = randn((4, 30), torch.float32, device)
    t = torch.tensor([1, 2, IGNORE, 29], device=device)
    first = tr.cross_entropy(x, t, label_smoothing=0.1)
    again = tr.cross_entropy(x, t, label_smoothing=0.1)
    assert torch.equal(first, again)
    if device == "cpu":
        with pytest.raises(IndexError, match=r"cross_entropy\(\): Target 30 is out of bounds."):
            tr.cross_entropy(x, torch.tensor([1, 2, IGNORE, 30], device=device), label_smoothing=0.1)


def test_deterministic(force, device):
    """The same loss and gradient bit for bit across runs (partials merged in a fixed order, no atomics)."""
    force("cross_entropy", direction=None, strategy="single_pass", BLOCK_M=2, BLOCK_N=64)
    x = randn((16, 40), torch.float32, device, scale=3).requires_grad_()
    t = torch.randint(0, 40, (16,), device=device)
    runs = []
    for _ in range(2):
        x.grad = None
        loss = tr.cross_entropy(x, t, label_smoothing=0.1)
        loss.backward()
        runs.append((loss.detach().clone(), x.grad.clone()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_strided_targets_and_weight(device):
    """Class indices, probabilities and a weight of strides of their own (a sliced target, a transposed
    probability matrix, a strided weight), read in place or copied (small), the results as torch's."""
    s = seed()
    gen = torch.Generator().manual_seed(s + 1)  # (not the logits' stream)
    x = randn((4, 6, 3), torch.float32, device, gen_seed=s)
    wide = torch.randint(0, 6, (4, 3, 2), generator=gen).to(device)
    w = (torch.rand(12, generator=gen) + 0.1).to(device)[::2]
    _check(x, wide[..., 0], w, f"sliced target seed={s}", reduction="none", label_smoothing=0.1)
    y = randn((5, 7), torch.float32, device, gen_seed=s)
    q = torch.softmax(torch.randn(7, 5, generator=gen), 0).to(device).t()
    w7 = (torch.rand(14, generator=gen, dtype=torch.float64) + 0.1).to(device)[::2]
    _check(y, q, w7, f"transposed probabilities, fp64 weight seed={s}", reduction="sum")


def test_directions_decide_the_launches(force, device, monkeypatch):
    """With grad required the gradient-forming launch and the backward's scale take the ``backward`` decision,
    the loss alone the ``forward`` one (each forced here to a different strategy)."""
    from tritred_ops.runtime import replay

    seen = []
    real = replay.Recorder.launch

    def spy(self, kernel, grid, *args, **kwargs):
        seen.append((kernel.fn.__name__, kwargs.get("SINGLE"), kwargs.get("BLOCK_N")))
        return real(self, kernel, grid, *args, **kwargs)

    monkeypatch.setattr(replay.Recorder, "launch", spy)
    force("cross_entropy", direction="forward", strategy="single_pass", BLOCK_M=2, BLOCK_N=64)
    force("cross_entropy", direction="backward", strategy="multi_pass", BLOCK_M=1, BLOCK_N=16)
    x = randn((3, 40), torch.float32, device)
    t = torch.tensor([1, 39, IGNORE], device=device)
    with torch.no_grad():
        tr.cross_entropy(x, t, reduction="none")
    assert ("_xent_kernel", True, 64) in seen and ("_xent_kernel", False, 16) not in seen
    seen.clear()
    _check(x, t, None, "forced directions", reduction="none")
    assert ("_xent_kernel", False, 16) in seen and ("_scale_kernel", None, 16) in seen


@pytest.mark.skipif(not torch.cuda.is_available(), reason="2^31 elements: GPU only")
def test_more_than_2_31_elements(device):
    """16400 x 131072 bf16 logits (2.15e9 elements): int64 offsets in every kernel; loss and sampled gradient rows
    against torch's, row blocks computed by torch in float32."""
    if device != "cuda":
        pytest.skip("GPU only")
    n, c = 16400, 131072
    x = torch.randn(n, c, device="cuda", dtype=torch.bfloat16).requires_grad_()
    t = torch.randint(0, c, (n,), device="cuda")
    t[::9] = IGNORE
    loss = tr.cross_entropy(x, t, reduction="sum")
    loss.backward()
    ref = sum(F.cross_entropy(x.detach()[i:i + 2048].float(), t[i:i + 2048], reduction="sum")
              for i in range(0, n, 2048))
    assert torch.allclose(loss.float(), ref, rtol=2e-2)
    for row in (0, 1, n // 2, n - 1):
        xr = x.detach()[row:row + 1].double().requires_grad_()
        F.cross_entropy(xr, t[row:row + 1], reduction="sum").backward()
        assert_close(x.grad[row:row + 1], xr.grad, n=c, scale=1.0, what=f"row {row}")
