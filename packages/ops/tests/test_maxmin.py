"""max/min with indices: first occurrence on ties, first NaN, every strategy and layout."""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import LAYOUTS, config_id, h200_config, randn

CONFIGS = [
    None,
    dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=64),
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=8),
    dict(strategy="split", BLOCK_M=1, BLOCK_N=8, split=4),
    # num_stages of a row loop: whole chunks per iteration, unrolled (45 = 2 x (2 x 8) + 8 + 5; split: slices of
    # 16, 16, 13 = 3 x 4 + 4, ..., 3 x 4 + 1)
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=8, num_stages=2),
    dict(strategy="split", BLOCK_M=1, BLOCK_N=4, split=3, num_stages=3),
    dict(strategy="single_pass", BLOCK_N=64, BLOCK_K=4),
    dict(strategy="multi_pass", BLOCK_N=4, BLOCK_K=8),
    dict(strategy="split", BLOCK_N=4, BLOCK_K=4, split=6),
]


def _check(name, x, dim, keepdim=False):
    out = getattr(tr, name)(x, dim, keepdim)
    ref = getattr(torch, name)(x.cpu(), dim, keepdim)
    assert out.values.dtype == ref.values.dtype and out.indices.dtype == torch.int64
    assert torch.equal(out.indices.cpu(), ref.indices), f"{name} dim={dim}\n{out.indices}\n{ref.indices}"
    assert torch.equal(out.values.cpu().isnan(), ref.values.isnan())
    ok = ~ref.values.isnan()
    assert torch.equal(out.values.cpu()[ok], ref.values[ok])
    assert type(out) is type(ref) and out[0] is out.values  # torch.return_types.max / min, as torch's


@pytest.mark.triton_compat
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_ties_and_nans_every_strategy(name, cfg, force, device):
    if cfg is not None:
        force(name, **cfg)
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        x = randn((6, 45), dtype, device)
        if dtype.is_floating_point:
            x = (x * 2).round()  # many ties
            x[1, 30] = float("nan")
            x[1, 40] = float("nan")
            x[2, :] = float("-inf") if name == "max" else float("inf")
            x[3, 44] = float("nan")
        else:
            x = x.clamp(-2, 2)
        _check(name, x, 1)
        _check(name, x.t().contiguous(), 0)  # the column kernels
        _check(name, x, 1, keepdim=True)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("cfg", [dict(BLOCK_M=1, BLOCK_N=8), dict(BLOCK_M=2, BLOCK_N=16),
                                 dict(BLOCK_M=1, BLOCK_N=8, num_stages=2), dict(BLOCK_M=1, BLOCK_N=8, num_stages=3),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=8, split=3),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=8, split=5, num_stages=2)],
                         ids=str)
def test_loops_over_shifted_rows(name, cfg, force, device, align_spy):
    """Row loops over odd-width rows take the shifted tiles (head chunk and tails masked, whole chunks between, PART
    per iteration), a split's slices each shifted as a row of its own (positions offset by the slice's start):
    first-occurrence ties, the extreme in the first and the last element, a NaN in an inner chunk, a row of the
    identity only (its index 0, not a lane before the row), every shift, rows and slices shorter than a chunk."""
    force(name, **{"strategy": "multi_pass", **cfg})
    ident = float("-inf") if name == "max" else float("inf")
    for dtype in (torch.bfloat16, torch.float32):
        for n in (3, 7, 17, 45, 8 * 16 + 5):
            x = (randn((9, n), dtype, device) * 2).round()  # many ties
            x[0, 0] = 99 if name == "max" else -99
            x[1, -1] = 99 if name == "max" else -99
            x[2, :] = ident
            if n > 40:
                x[3, 33] = float("nan")
            align_spy.clear()
            _check(name, x, 1)
            want = 16 // x.element_size() if cfg["BLOCK_M"] == 1 or device == "cpu" else 0  # (GPU: one row)
            assert align_spy == [want], (n, align_spy)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_layouts(layout, dim, device):
    x = randn((5, 6, 20), torch.float32, device, layout)
    _check("max", x, dim)
    _check("min", x, dim)


def test_bool_and_uint8(device):
    b = randn((4, 33), torch.bool, device)
    _check("max", b, 1)
    _check("min", b, 0)
    u = randn((4, 33), torch.uint8, device)
    _check("max", u, 1)


def test_no_dim_returns_tensor(device):
    x = randn((7, 9), torch.float32, device)
    assert tr.max(x).item() == x.max().item() and tr.min(x).shape == ()
    with pytest.raises(RuntimeError, match="max"):
        tr.max(torch.empty(0, device=device))


def test_empty_and_zero_dim(device):
    e = torch.empty(0, 3, device=device)
    r = tr.max(e, 1)
    assert r.values.shape == (0,) and r.indices.shape == (0,)
    with pytest.raises(IndexError, match="max"):
        tr.max(e, 0)
    s = torch.tensor(4.0, device=device)
    r = tr.min(s, 0)
    assert r.values.item() == 4.0 and r.indices.item() == 0 and r.indices.shape == ()


def test_single_element_dim(device):
    x = randn((5, 1), torch.float32, device)
    _check("max", x, 1)


@pytest.mark.parametrize("n", [1024, 2048, 4096])
@pytest.mark.parametrize("name", ["max", "min"])
def test_wide_float32_rows_in_the_built_in_h200_tiles(name, n, force, device):
    """The configs the built-in gives float32 rows of 1024-4096 on an H200 (``rules.wide_rows``: one row on
    N / 256 warps, or two on 16), forced so that the interpreter and the GPU alike run them: an odd row count (the
    last two-row tile half empty), ties, a NaN, the extreme in the last element."""
    from tritred_core import Problem

    cfg = h200_config(Problem(op=name, dtype="float32", M=65536, N=n, K=1, stride_m=n, stride_n=1, stride_k=1))
    assert cfg.decided_by == "tritred_ops" and cfg.num_warps in (4, 8, 16), cfg
    force(name, **cfg.launch_fields())
    x = (randn((5, n), torch.float32, device) * 2).round()  # many ties
    x[2, n // 3] = float("nan")
    x[4, -1] = 99 if name == "max" else -99
    _check(name, x, 1)
