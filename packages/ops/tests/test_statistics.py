"""var/std/var_mean/std_mean: fp64 references, corrections, large means, every branch."""

from __future__ import annotations

import warnings

import pytest
import torch
import tritred_ops as tr
from ops_helpers import LAYOUTS, assert_close, config_id, randn

CONFIGS = [
    None,
    dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128),
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
    dict(strategy="single_pass", BLOCK_M=1, BLOCK_N=128, num_programs=2, num_stages=2),  # persistent rows
    dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=16, num_programs=3),
    dict(strategy="split", BLOCK_M=1, BLOCK_N=16, split=3),
    dict(strategy="split", BLOCK_M=1, BLOCK_N=8, split=40),
    dict(strategy="single_pass", BLOCK_N=128, BLOCK_K=4),
    dict(strategy="multi_pass", BLOCK_N=8, BLOCK_K=4),
    dict(strategy="split", BLOCK_N=8, BLOCK_K=4, split=3),
]


def _ref(name, x, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(torch, name)(x.double().cpu(), *args, **kwargs)


def _cmp(out, ref, n, what, scale=1.0):
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == 2
        assert_close(out[0], ref[0], n=n, scale=scale * max(ref[0].abs().max().item(), 1.0), what=what)
        assert_close(out[1], ref[1], n=n, scale=scale * max(ref[1].abs().max().item(), 1.0), what=what)
    else:
        assert_close(out, ref, n=n, scale=scale * max(ref.abs().max().item(), 1.0), what=what)


@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_branches_large_mean(name, cfg, force, device):
    if cfg is not None:
        force(name, **cfg)
    # mean far from 0 and non-power-of-two length: E[x^2]-E[x]^2 would lose every digit
    x = randn((5, 99), torch.float32, device, offset=1e4)
    _cmp(getattr(tr, name)(x, 1), _ref(name, x, 1), 99, f"{name} rows", scale=1e4 / 100)
    _cmp(getattr(tr, name)(x.t().contiguous(), 0), _ref(name, x.t(), 0), 99, f"{name} cols", scale=1e4 / 100)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("correction", [0, 1, 2.5])
def test_dtypes_and_corrections(dtype, correction, device):
    x = randn((4, 7, 30), dtype, device)
    for dim in (2, 0, (0, 2), None):
        out = tr.var(x, dim, correction=correction)
        assert out.dtype == dtype
        _cmp(out, _ref("var", x, dim, correction=correction), 30, f"var {dtype} {dim} {correction}")
    out = tr.std_mean(x, 1, correction=correction, keepdim=True)
    _cmp(out, _ref("std_mean", x, 1, correction=correction, keepdim=True), 7, "std_mean keepdim")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(layout, device):
    x = randn((6, 5, 40), torch.float32, device, layout)
    for dim in (0, 1, 2, (0, 2)):
        _cmp(tr.var_mean(x, dim), _ref("var_mean", x, dim), 40, f"{layout} {dim}")


def test_legacy_unbiased(device):
    x = randn((3, 20), torch.float32, device)
    _cmp(tr.var(x, 1, False), _ref("var", x, 1, False), 20, "unbiased=False")
    _cmp(tr.std(x, 1, True, True), _ref("std", x, 1, True, True), 20, "unbiased=True keepdim")
    _cmp(tr.var(x, unbiased=False), _ref("var", x, unbiased=False), 60, "unbiased kw")
    with pytest.raises(TypeError):
        tr.var(x, 1, True, correction=1)


def test_degenerate_divisor(device):
    one = randn((3, 1), torch.float32, device)
    assert tr.var(one, 1).isnan().all()  # 0 / 0
    two = randn((3, 2), torch.float32, device)
    assert tr.var(two, 1, correction=3).isinf().all()  # m2 / 0
    assert torch.equal(tr.var(one, 1, correction=0).cpu(), torch.zeros(3))


def test_empty(device):
    e = torch.empty(0, 4, device=device)
    assert tr.var(e, 0).isnan().all() and tr.var(e, 0).shape == (4,)
    v, m = tr.var_mean(e, 0)
    assert v.isnan().all() and m.isnan().all()
    assert tr.std(e, 1).shape == (0,)


def test_nan_and_inf(device):
    x = randn((3, 40), torch.float32, device)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    ref = _ref("var", x, 1)
    out = tr.var(x, 1).cpu()
    assert torch.equal(out.isnan(), ref.isnan())


def test_integer_input_raises(device):
    with pytest.raises(RuntimeError, match="var"):
        tr.var(torch.arange(6, device=device))


@pytest.mark.parametrize("cfg", CONFIGS[:3], ids=config_id)
def test_rows_off_16_byte_boundaries(cfg, force, device):
    """Odd row strides take the shifted (ALIGN) single-pass tiles; unaligned bases and loops do not."""
    base = randn((7, 123), torch.bfloat16, device, offset=30.0)
    for name in ("var", "std_mean"):
        if cfg is not None:
            force(name, **cfg)
        for x in (base[:, :101], base[:, 3:104]):
            _cmp(getattr(tr, name)(x, 1), _ref(name, x, 1), 101, f"{name} {x.stride()}", scale=30)
