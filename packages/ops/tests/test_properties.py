"""Property-based: random shapes, dims, keepdim, layouts and dtypes; every op against torch in fp64.

The number of examples comes from the hypothesis profile (conftest: ``ci`` under the interpreter, ``gpu``
compiled on CUDA).
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F
import tritred_ops as tr
from hypothesis import given
from hypothesis import strategies as st
from ops_helpers import LAYOUTS, assert_close, randn

MAX_NUMEL = 2048 if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") else 1 << 20
DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64])


@st.composite
def tensors(draw, min_dims=1, max_dims=4):
    ndim = draw(st.integers(min_dims, max_dims))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=ndim, max_size=ndim)))
    while torch.Size(shape).numel() > MAX_NUMEL:  # bounded: the interpreter runs every program in Python
        shape = tuple(max(1, s // 2) for s in shape)
    return shape, draw(DTYPES), draw(st.sampled_from(LAYOUTS)), draw(st.integers(0, 2**31 - 1))


@st.composite
def dims_for(draw, ndim):
    kind = draw(st.sampled_from(["int", "tuple", "none"]))
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    if kind == "none":
        return None
    return tuple(draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim)))


def _specials(x, seed):
    """Sprinkle NaN/inf into ~1% of a float tensor (a copy: the values, not the layout, change)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(x.shape, generator=g) < 0.01
    vals = torch.tensor([float("nan"), float("inf"), float("-inf")])[torch.randint(0, 3, x.shape, generator=g)]
    y = x.clone()
    y[mask.to(x.device)] = vals[mask].to(x.dtype).to(x.device)
    return y


@given(t=tensors(), data=st.data(), keepdim=st.booleans(), special=st.booleans())
def test_reductions(t, data, keepdim, special, device):
    shape, dtype, layout, seed = t
    x = randn(shape, dtype, device, layout, gen_seed=seed)
    if special:
        x = _specials(x, seed)
    dim = data.draw(dims_for(len(shape)))
    outputs = torch.empty(shape, device="meta").sum(dim if dim is not None else (), keepdim).numel()
    n = max(x.numel() // max(outputs, 1), 1) if dim is not None else x.numel()
    name = data.draw(st.sampled_from(["sum", "mean", "amax", "amin", "var", "std", "logsumexp"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("amax", "amin"):
            d = () if dim is None else dim
            out, ref = getattr(tr, name)(x, d, keepdim), getattr(torch, name)(x.double().cpu(), d, keepdim)
        elif name == "logsumexp":
            d = tuple(range(x.dim())) if dim is None else dim
            out, ref = tr.logsumexp(x, d, keepdim), torch.logsumexp(x.double().cpu(), d, keepdim)
        elif dim is None:
            out, ref = getattr(tr, name)(x), getattr(torch, name)(x.double().cpu())
        else:
            out = getattr(tr, name)(x, dim, keepdim=keepdim)
            ref = getattr(torch, name)(x.double().cpu(), dim, keepdim=keepdim)
    assert out.dtype == dtype
    scale = 4.0 * max(x.double().abs().nan_to_num(0, 0, 0).max().item(), 1.0)
    if name == "sum":
        scale *= n ** 0.5
    if name in ("var", "std"):
        scale = scale * scale if name == "var" else scale
    assert_close(out, ref, n=n, scale=scale, what=f"{name} {shape} {dtype} {layout} dim={dim} keepdim={keepdim}")


@given(t=tensors(), data=st.data())
def test_max_min_indices(t, data, device):
    shape, dtype, layout, seed = t
    x = randn(shape, dtype, device, layout, gen_seed=seed)
    x = (x * 2).round()  # ties
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    for name in ("max", "min"):
        out, ref = getattr(tr, name)(x, dim), getattr(torch, name)(x.cpu(), dim)
        assert torch.equal(out.indices.cpu(), ref.indices), (name, shape, dim)
        assert torch.equal(out.values.cpu(), ref.values)


@given(t=tensors(), data=st.data(), special=st.booleans())
def test_softmax_family(t, data, special, device):
    shape, dtype, layout, seed = t
    x = randn(shape, dtype, device, layout, gen_seed=seed, scale=4.0)
    if special:
        x = _specials(x, seed)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    for name in ("softmax", "log_softmax"):
        out, ref = getattr(tr, name)(x, dim), getattr(torch, name)(x.double().cpu(), dim)
        assert_close(out, ref, n=16, scale=16, what=f"{name} {shape} {dtype} {layout} dim={dim}")


@given(t=tensors(min_dims=1, max_dims=4), data=st.data(), affine=st.booleans())
def test_layer_norm(t, data, affine, device):
    shape, dtype, layout, seed = t
    x = randn(shape, dtype, device, layout, gen_seed=seed, offset=data.draw(st.sampled_from([0.0, 100.0])))
    k = data.draw(st.integers(1, len(shape)))
    ns = shape[len(shape) - k:]
    w = randn(ns, dtype, device, gen_seed=seed + 1) if affine else None
    b = randn(ns, dtype, device, gen_seed=seed + 2) if affine else None
    out = tr.layer_norm(x, ns, w, b)
    d = lambda v: None if v is None else v.double().cpu()  # noqa: E731
    ref = F.layer_norm(x.double().cpu(), ns, d(w), d(b))
    assert_close(out, ref, n=16, scale=16, what=f"layer_norm {shape} {dtype} {layout} {ns}")


@given(t=tensors(min_dims=2, max_dims=5), training=st.booleans(), channels_last=st.booleans())
def test_batch_norm(t, training, channels_last, device):
    shape, dtype, layout, seed = t
    x = randn(shape, dtype, device, layout, gen_seed=seed, offset=2.0)
    if channels_last and x.dim() in (4, 5):
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    c = shape[1]
    if training and x.numel() // c <= 1:
        return
    pdt = torch.float64 if dtype == torch.float64 else torch.float32  # torch's parameter dtype rule
    rm = randn((c,), pdt, device, gen_seed=seed)
    rv = randn((c,), pdt, device, gen_seed=seed).abs() + 1
    rm_ref, rv_ref = rm.double().cpu(), rv.double().cpu()
    out = tr.batch_norm(x, rm, rv, None, None, training, 0.2, 1e-5)
    ref = F.batch_norm(x.double().cpu(), rm_ref, rv_ref, None, None, training, 0.2, 1e-5)
    assert_close(out, ref, n=16, scale=16, what=f"batch_norm {shape} {dtype} {layout} {training}")
    assert_close(rm, rm_ref, n=x.numel() // c, scale=4, what="running_mean")
    assert_close(rv, rv_ref, n=x.numel() // c, scale=16, what="running_var")
