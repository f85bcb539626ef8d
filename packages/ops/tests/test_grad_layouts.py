"""Memory layouts of every differentiable op's gradient and output for non-contiguous inputs (channels-last 4-D,
transposed 2-D, every other column of a wider 2-D tensor): the input's gradient has the strides torch eager's has
on the same device, for output gradients laid out four ways (broadcast, as ``y.sum()`` gives; contiguous; the
output's own layout; dims in reversed memory order); the output has torch's layout; the values match float64
references on fresh random inputs.

The gradient is the op's own (``torch.autograd.grad`` of the tensor the op was given): ``x.grad`` of a dense leaf
is re-laid out as the leaf by autograd's accumulation, which would hide a difference.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, seed
from torch._subclasses.fake_tensor import FakeTensorMode

_NN = ("layer_norm", "rms_norm", "batch_norm", "cross_entropy")
_NAMES = ("softmax", "log_softmax", "logsumexp", "sum", "mean", "amax", "amin", "max", "min", "var", "std",
          "var_mean", "std_mean", "prod", *_NN)
#: torch's ops under tritred's names (torch.nn.functional for the nn ops)
REF = SimpleNamespace(**{n: getattr(F if n in _NN else torch, n) for n in _NAMES})

LAYOUTS = ("channels_last", "transposed", "sliced")
DY = ("broadcast", "contiguous", "like_output", "reversed")


def _make(layout: str, base: torch.Tensor, device: str) -> torch.Tensor:
    """``base``'s values (4-D for channels_last, else 2-D) on ``device`` in ``layout``, a leaf or a view of one."""
    if layout == "channels_last":
        return base.to(device).contiguous(memory_format=torch.channels_last).requires_grad_()
    if layout == "transposed":
        return base.t().contiguous().to(device).requires_grad_().t()
    wide = torch.zeros(base.shape[0], 2 * base.shape[1], dtype=base.dtype)
    wide[:, ::2] = base
    return wide.to(device).requires_grad_()[:, ::2]


def _base(layout: str, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed())
    shape = (2, 6, 5, 4) if layout == "channels_last" else (6, 8)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _targets(x: torch.Tensor, probs: bool) -> torch.Tensor:
    """Fixed targets for logits ``x`` (classes on dim 1): class indices, or probabilities of x's dtype."""
    g = torch.Generator().manual_seed(7)
    kept = (x.shape[0], *x.shape[2:])
    if probs:
        return torch.softmax(torch.randn(x.shape, generator=g, dtype=torch.float64), 1).to(x.dtype).to(x.device)
    return torch.randint(0, x.shape[1], kept, generator=g).to(x.device)


def _affine(x: torch.Tensor, shape: tuple[int, ...], lo: float) -> torch.Tensor:
    """Weights (or biases) of ``shape`` from ``lo`` in steps of 1/8, exact in every dtype (the float64 reference
    gets the same values)."""
    n = torch.Size(shape).numel()
    return (lo + (torch.arange(n, dtype=torch.float64) % 9) / 8).reshape(shape).to(x.dtype).to(x.device)


def _bn(m, x):
    C = x.shape[1]
    stats = [torch.zeros(C, dtype=x.dtype, device=x.device), torch.ones(C, dtype=x.dtype, device=x.device)]
    return m.batch_norm(x, *stats, _affine(x, (C,), 0.5), _affine(x, (C,), -0.5), True)


def _cases(nd: int) -> dict[str, object]:
    """Case id -> fn(m, x), m being ``tr`` or :data:`REF`; ``nd``: the input's dims."""
    dims = (1, 3) if nd == 4 else (0, 1)
    multi = ((2, 3), (0, 2, 3)) if nd == 4 else ((0, 1),)
    cases: dict[str, object] = {}
    for d in dims:
        cases[f"softmax-{d}"] = lambda m, x, d=d: m.softmax(x, d)
        cases[f"log_softmax-{d}"] = lambda m, x, d=d: m.log_softmax(x, d)
        cases[f"logsumexp-{d}"] = lambda m, x, d=d: m.logsumexp(x, d)
        for name in ("sum", "mean", "amax", "amin", "var", "std", "var_mean", "std_mean", "prod"):
            cases[f"{name}-{d}"] = lambda m, x, d=d, name=name: getattr(m, name)(x, d)
        for name in ("max", "min"):
            cases[f"{name}-{d}"] = lambda m, x, d=d, name=name: getattr(m, name)(x, d).values
    for ds in multi:
        key = "-".join(map(str, ds))
        cases[f"logsumexp-{key}-keepdim"] = lambda m, x, ds=ds: m.logsumexp(x, ds, True)
        for name in ("sum", "mean", "amax", "var", "std_mean"):
            cases[f"{name}-{key}"] = lambda m, x, ds=ds, name=name: getattr(m, name)(x, ds)
    for name in ("sum", "mean", "amax", "max", "min", "var", "std", "prod"):
        cases[f"{name}-all"] = lambda m, x, name=name: getattr(m, name)(x)
    for k in (1, 2):
        cases[f"layer_norm-{k}"] = lambda m, x, k=k: m.layer_norm(x, x.shape[-k:], _affine(x, x.shape[-k:], .5),
                                                                  _affine(x, x.shape[-k:], -.5))
        cases[f"rms_norm-{k}"] = lambda m, x, k=k: m.rms_norm(x, x.shape[-k:], _affine(x, x.shape[-k:], .5))
    cases["rms_norm-noweight"] = lambda m, x: m.rms_norm(x, x.shape[-1:])
    cases["batch_norm"] = _bn
    for red in ("none", "mean"):
        cases[f"cross_entropy-{red}"] = lambda m, x, red=red: m.cross_entropy(
            x, _targets(x, False), _affine(x, (x.shape[1],), .5), reduction=red, label_smoothing=0.1)
        cases[f"cross_entropy-probs-{red}"] = lambda m, x, red=red: m.cross_entropy(x, _targets(x, True),
                                                                                    reduction=red)
    return cases


CASES = [(layout, case) for layout in LAYOUTS for case in _cases(4 if layout == "channels_last" else 2)]


def _outputs(out) -> list[torch.Tensor]:
    outs = list(out) if isinstance(out, tuple) else [out]
    return [o for o in outs if o.dtype.is_floating_point]


def _dy(o: torch.Tensor, mode: str, gen: torch.Generator) -> torch.Tensor:
    """An output gradient of ``o``'s shape laid out as ``mode`` says: float64 values exact in ``o``'s dtype
    (converted by the caller)."""
    if mode == "broadcast":
        return torch.randn((), generator=gen, dtype=torch.float64).to(o.dtype).double().expand(o.shape)
    v = torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype).double()
    if mode == "reversed":
        order = list(reversed(range(o.dim())))
        return v.permute(order).contiguous().permute(order)
    return v


def _laid_out(dy: torch.Tensor, o: torch.Tensor, mode: str) -> torch.Tensor:
    """``dy`` in ``o``'s dtype and device, keeping its layout (or taking ``o``'s for like_output)."""
    if mode == "broadcast":
        return dy[(0,) * dy.dim()].to(o.dtype).to(o.device).expand(o.shape) if dy.dim() else dy.to(o)
    if mode == "like_output":
        return torch.empty_like(o).copy_(dy)
    return torch.empty_like(dy, dtype=o.dtype, device=o.device).copy_(dy)


def _grad(m, fn, x: torch.Tensor, mode: str, dys: list[torch.Tensor] | None = None):
    """(outputs, x's gradient, the output gradients used) of ``fn(m, x)`` for output gradients of ``mode``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = _outputs(fn(m, x))
        if dys is None:
            gen = torch.Generator().manual_seed(seed())
            dys = [_dy(o, mode, gen) for o in outs]
        (gx,) = torch.autograd.grad(outs, x, [_laid_out(dy, o, mode) for dy, o in zip(dys, outs)])
    return outs, gx, dys


def _assert_as_close_as_torch(gx: torch.Tensor, ref_gx: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """``gx`` within assert_close's tolerance of the float64 gradient ``want``, or within twice the error of torch's
    own gradient ``ref_gx`` in the same dtype: some draws are ill-conditioned (rms_norm with a broadcast dy over a
    4-element row of small values: rstd * (w c - x_hat mean(w c x_hat)) cancels, and torch's float32 gradient misses
    by 1e-4 there as tritred's does; about 1 draw in 150)."""
    try:
        assert_close(gx, want, n=64, scale=8, what=what)
    except AssertionError:
        err = (gx.detach().cpu().double() - want).abs().max().item()
        torch_err = (ref_gx.detach().cpu().double() - want).abs().max().item()
        assert err <= 2 * torch_err, f"{what}: error {err:.3e}, more than twice torch's own ({torch_err:.3e})"


def _strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides that place the elements: those of dims of more than one element."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


@pytest.mark.parametrize(("layout", "case"), CASES, ids=[f"{lay}-{c}" for lay, c in CASES])
def test_gradient_and_output_layouts_match_torch(layout, case, device):
    fn = _cases(4 if layout == "channels_last" else 2)[case]
    base = _base(layout, torch.float32)
    for mode in DY:
        outs, gx, dys = _grad(tr, fn, _make(layout, base, device), mode)
        ref_outs, ref_gx, _ = _grad(REF, fn, _make(layout, base, device), mode, dys)  # torch, same device
        what = f"{layout} {case} dy={mode}"
        assert gx.stride() == ref_gx.stride(), f"{what}: gradient strides {gx.stride()}, torch's {ref_gx.stride()}"
        for o, r in zip(outs, ref_outs):
            assert _strides(o) == _strides(r), f"{what}: output strides {o.stride()}, torch's {r.stride()}"
        _, want, _ = _grad(REF, fn, _make(layout, base.double(), "cpu"), mode, dys)  # float64 values
        _assert_as_close_as_torch(gx, ref_gx, want, what)


@pytest.mark.parametrize("case", ["logsumexp-1", "logsumexp-2-3-keepdim", "mean-1", "std-3", "rms_norm-1",
                                  "cross_entropy-none", "max-all"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_other_dtypes_keep_torchs_layouts(case, dtype, device):
    """The ops whose gradient's layout came from the computation's own steps, in float64 and in bfloat16
    (computed in float32 by tritred, in bfloat16 by torch: the layouts still agree)."""
    fn = _cases(4)[case]
    base = _base("channels_last", dtype)
    for mode in DY:
        _, gx, dys = _grad(tr, fn, _make("channels_last", base, device), mode)
        _, ref_gx, _ = _grad(REF, fn, _make("channels_last", base, device), mode, dys)
        assert gx.stride() == ref_gx.stride(), f"{case} {dtype} dy={mode}: {gx.stride()}, torch's {ref_gx.stride()}"
        _, want, _ = _grad(REF, fn, _make("channels_last", base.double(), "cpu"), mode, dys)
        _assert_as_close_as_torch(gx, ref_gx, want, f"{case} {dtype} dy={mode}")


def test_rms_norm_backward_fake_has_the_real_layout(device):
    """The registered backward op's fake implementation lays dx out as the real one (torch.compile's graphs
    rely on it): channels-last input and dy, a contiguous input with a reversed dy, a weight of another dtype."""
    for x_fmt, dy_order, w_dtype in ((torch.channels_last, None, torch.float32),
                                     (torch.contiguous_format, (3, 2, 1, 0), torch.float32),
                                     (torch.contiguous_format, (0, 2, 3, 1), torch.float64)):
        g = torch.Generator().manual_seed(seed())
        x = torch.randn(2, 6, 5, 4, generator=g).to(device).contiguous(memory_format=x_fmt)
        w = torch.randn(4, generator=g, dtype=w_dtype).to(device)
        dy = torch.randn(2, 6, 5, 4, generator=g).to(device)
        if dy_order is not None:
            inv = [dy_order.index(i) for i in range(4)]
            dy = dy.permute(dy_order).contiguous().permute(inv)
        _, rstd = torch.ops.tritred.rms_norm(x, [4], w, None)
        real, _ = torch.ops.tritred.rms_norm_backward(dy, x, [4], rstd, w, [True, True])
        with FakeTensorMode() as mode:
            args = [mode.from_tensor(t) for t in (dy, x, rstd, w)]
            fake, _ = torch.ops.tritred.rms_norm_backward(args[0], args[1], [4], args[2], args[3], [True, True])
        assert fake.stride() == real.stride(), (x_fmt, dy_order, w_dtype, fake.stride(), real.stride())
        torch.library.opcheck(torch.ops.tritred.rms_norm_backward.default, (dy, x, [4], rstd, w, [True, True]))


def test_batch_norm_output_keeps_a_transposed_input_on_cuda_and_not_on_cpu(device):
    """torch's own CUDA kernel allocates batch_norm's output with ``empty_like`` (an H100 with torch 2.11: a
    transposed (6, 8) input of strides (1, 6) gives an output of strides (1, 6)); the CPU kernel, and cuDNN (3
    dims or more), take the suggested format. Checked on fake CUDA tensors (any machine), the CPU branch on real
    ones; the suite's layout test above compares real CUDA calls with torch's."""
    from tritred_ops.families.batch_norm.launch import out_empty

    with FakeTensorMode():
        x = torch.empty(6, 8, device="cuda").t()
        w = torch.empty(6, device="cuda")
        for weight, bias in ((w, w), (None, None)):
            for training in (True, False):
                assert out_empty(x, weight, bias, w, w, training, 1e-5).stride() == (1, 8)
        assert out_empty(torch.empty(8, 6, device="cuda"), w, w, w, w, True, 1e-5).stride() == (6, 1)
    x = torch.empty(6, 8).t()
    w = torch.empty(6)
    assert out_empty(x, w, w, w, w, True, 1e-5).stride() == (6, 1)
    x = torch.randn(6, 8, device=device).t()
    assert tr.batch_norm(x, None, None, training=True).stride() == F.batch_norm(x, None, None, training=True).stride()


def test_batch_norm_output_layout_follows_torch_kernel_choice_on_cuda(monkeypatch):
    """Which kernel torch runs decides the layout: cuDNN (a 3-d+ float32 input with weight, bias and running
    statistics) the suggested format, its own kernel ``empty_like``: so also with a NaN eps (cuDNN's eps bound
    fails), with cuDNN disabled (and the call plans' keys hold that flag), and for aten's ``native_batch_norm``,
    which is that kernel (``native``: the aten overrides). Fake CUDA tensors, cuDNN made available (found by an
    adversarial review)."""
    from tritred_ops.families.batch_norm.launch import _cudnn_key, out_empty
    from tritred_ops.runtime.replay import find_plan

    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    with FakeTensorMode():
        x = torch.empty(5, 3, 4, device="cuda").permute(2, 1, 0)  # (4, 3, 5), strides (1, 4, 12): dense
        p = torch.empty(3, device="cuda")
        for training in (False, True):
            assert out_empty(x, p, p, p, p, training, 1e-5).stride() == (15, 5, 1)  # cuDNN
            assert out_empty(x, p, p, p, p, training, float("nan")).stride() == x.stride()
            assert out_empty(x, p, p, p, p, training, 1e-5, native=True).stride() == x.stride()
            y = torch.ops.tritred.batch_norm(x, p, p, p, p, training, 0.1, float("nan"))[0]
            assert y.stride() == x.stride()
            with torch.backends.cudnn.flags(enabled=False):
                assert out_empty(x, p, p, p, p, training, 1e-5).stride() == x.stride()
    xc = torch.randn(4, 3, 5)
    keys = []
    for enabled in (True, False):
        with torch.backends.cudnn.flags(enabled=enabled):
            keys.append(find_plan("batch_norm", (False, 0.1, 1e-5, _cudnn_key()), xc)[1])
    assert keys[0] != keys[1]
