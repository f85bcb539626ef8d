"""The row kernels' DIV hint (``runtime.row_hint``): rows whose width and strides are multiples of 2-8 elements
but not of 16 are restated as ``v // DIV * DIV`` so that the compiler vectorizes; the values must not change."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn
from tritred_ops import runtime as C
from tritred_ops.runtime import View


def test_row_hint_values():
    def view(n, sxm, out=((0, 0, 0),)):
        return View(M=3, N=n, K=1, strides=((sxm, 1, 0), *out))

    assert C.row_hint(view(300, 300), 0) == 4
    assert C.row_hint(view(200, 300), 0) == 4  # (a slice of wider rows: the stride decides)
    assert C.row_hint(view(1000, 1000, ((1000, 1, 0),)), 0) == 8
    assert C.row_hint(view(1000, 1000, ((1002, 1, 0),)), 0) == 2  # a row output with its own stride
    assert C.row_hint(view(1024, 1024), 0) == 1  # Triton already knows multiples of 16
    assert C.row_hint(view(999, 999), 0) == 1
    assert C.row_hint(view(300, 300), 4) == 1  # shifted tiles (ALIGN) instead
    assert C.row_hint(view(300, 300, ((1, 300, 0),)), 0) == 1  # an output whose rows are not unit-stride
    assert C.row_hint(View(M=3, N=300, K=1, strides=((1, 3, 0), (0, 0, 0))), 0) == 1  # columns


CASES = ["softmax", "log_softmax", "logsumexp", "layer_norm", "sum", "amax", "var_mean", "max"]


def _run(name, x):
    if name == "layer_norm":
        w = randn(x.shape[-1:], x.dtype, x.device)
        b = randn(x.shape[-1:], x.dtype, x.device)
        return F.layer_norm(x.double().cpu(), x.shape[-1:], w.double().cpu(), b.double().cpu()), \
            tr.layer_norm(x, x.shape[-1:], w, b)
    ref = getattr(torch, name)(x.double().cpu(), -1)
    out = getattr(tr, name)(x, -1)
    return (tuple(ref), tuple(out)) if isinstance(ref, tuple) else (ref, out)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cfg", [dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=1024, num_warps=1),
                                 dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=64, num_warps=1)],
                         ids=["single", "loop"])
def test_hinted_rows_match_torch(name, dtype, cfg, force, monkeypatch, device):
    """Widths 300 (DIV 4) and 200-of-300 slices (DIV 4), 6 (DIV 2), 1000 (DIV 8), with several rows per program
    and ALIGN off (the path the GPU takes): every kernel that takes DIV gets it and computes the same values."""
    if name == "max" and cfg["strategy"] == "multi_pass":
        cfg = dict(cfg, BLOCK_N=128)
    force(name, **cfg)
    monkeypatch.setattr(C, "row_align", lambda *a, **k: 0)
    seen = []
    real = C.row_hint
    monkeypatch.setattr(C, "row_hint", lambda *a: seen.append(real(*a)) or seen[-1])
    for shape, sl in (((7, 300), None), ((5, 300), slice(50, 250)), ((9, 6), None), ((3, 1000), None)):
        x = randn(shape, dtype, device, offset=3.0)
        if sl is not None:
            x = x[:, sl]
        ref, out = _run(name, x)
        if name == "max":
            assert_close(out[0], ref[0], what=f"{name} {shape}")
            assert torch.equal(out[1].cpu(), ref[1])
            continue
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            assert_close(o, r, n=x.shape[-1], scale=10.0, what=f"{name} {shape} {sl}")
    assert {4, 2, 8} <= set(seen), seen


def test_hint_covers_align_on_the_gpu_only(device):
    """Whole 16-byte vectors from DIV (bf16 multiples of 8, fp32 multiples of 4) replace ALIGN's shifted tiles on
    a GPU; the interpreter keeps ALIGN (its tests reach the shifted path)."""
    def covers(shape, dtype):
        x = torch.empty(shape, dtype=dtype, device=device)
        return C.hint_covers_align(x, View(M=shape[0], N=shape[1], K=1, strides=((shape[1], 1, 0), (0, 0, 0))))

    gpu = torch.device(device).type == "cuda"
    assert covers((4, 3000), torch.bfloat16) == gpu
    assert covers((4, 300), torch.float32) == gpu
    assert not covers((4, 300), torch.bfloat16)  # 8-byte vectors only: ALIGN's 16-byte ones stay
    assert not covers((4, 999), torch.float32)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(3, 5, 6, 2), (2, 3, 14, 14), (4, 2, 10)])
def test_batch_norm_nchw_hint(shape, training, monkeypatch, device):
    """batch_norm over NCHW maps whose size is a multiple of 2-8 but not 16 (14x14: DIV_S 4): the same values."""
    from tritred_ops.families.batch_norm import launch as bn
    seen = []
    real = bn._nchw_hint
    monkeypatch.setattr(bn, "_nchw_hint", lambda *a: seen.append(real(*a)) or seen[-1])
    ch = shape[1]
    x = randn(shape, torch.float32, device, offset=2.0)
    w, b = randn((ch,), torch.float32, device), randn((ch,), torch.float32, device)
    rm, rv = randn((ch,), torch.float32, device), randn((ch,), torch.float32, device).abs() + 0.5
    ref_rm, ref_rv = rm.double().cpu(), rv.double().cpu()
    ref = F.batch_norm(x.double().cpu(), ref_rm, ref_rv, w.double().cpu(), b.double().cpu(), training, 0.1, 1e-5)
    out = tr.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)
    n = x.numel() // ch
    assert_close(out, ref, n=n, scale=10.0, what=f"batch_norm {shape} {training}")
    assert_close(rm, ref_rm, n=n, what="running_mean")
    assert_close(rv, ref_rv, n=n, what="running_var")
    assert max(seen) > 1, seen


def test_col_hint_values():
    def view(k, sxn, sxm=0, out=((0, 0, 1),)):
        return View(M=3, N=5, K=k, strides=((sxm, sxn, 1), *out))

    assert C.col_hint(view(300, 300)) == 4
    assert C.col_hint(view(200, 300, 1500)) == 4  # (a slice of wider rows: the strides decide)
    assert C.col_hint(view(1000, 1000, 5000, ((1000, 0, 1),))) == 8
    assert C.col_hint(view(1000, 1000, 5000, ((1002, 0, 1),))) == 2  # an output with its own m stride
    assert C.col_hint(view(1024, 1024)) == 1  # Triton already knows multiples of 16
    assert C.col_hint(view(999, 999)) == 1
    assert C.col_hint(View(M=3, N=5, K=300, strides=((0, 300, 2), (0, 0, 1)))) == 1  # k not unit-stride


COL_CASES = ["softmax", "log_softmax", "logsumexp", "sum", "amax", "var_mean"]  # (max/min columns: no hint)


@pytest.mark.parametrize("name", COL_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cfg", [dict(strategy="single_pass", BLOCK_N=8, BLOCK_K=16, num_warps=1),
                                 dict(strategy="multi_pass", BLOCK_N=2, BLOCK_K=32, num_warps=1),
                                 dict(strategy="split", BLOCK_N=2, BLOCK_K=16, split=2, num_warps=1)],
                         ids=["single", "loop", "split"])
def test_hinted_columns_match_torch(name, dtype, cfg, force, monkeypatch, device):
    """Reductions over dim 0 and a middle dim with k widths 300 (DIV 4), 200-of-300 slices (DIV 4), 6 (DIV 2),
    1000 (DIV 8): every column kernel that takes DIV gets it and computes the same values."""
    if cfg["strategy"] == "split" and name in ("softmax", "log_softmax", "logsumexp"):
        pytest.skip("softmax does not split N")
    force(name, **cfg)
    seen = []
    real = C.col_hint
    monkeypatch.setattr(C, "col_hint", lambda *a: seen.append(real(*a)) or seen[-1])
    for shape, sl, dim in (((7, 300), None, 0), ((5, 300), slice(50, 250), 0), ((3, 7, 6), None, 1),
                           ((2, 5, 1000), None, 1)):
        x = randn(shape, dtype, device, offset=3.0)
        if sl is not None:
            x = x[:, sl]
        ref = getattr(torch, name)(x.double().cpu(), dim)
        out = getattr(tr, name)(x, dim)
        if name == "max":
            assert_close(out[0], ref[0], what=f"{name} {shape}")
            assert torch.equal(out[1].cpu(), ref[1])
            continue
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            assert_close(o, r, n=x.shape[dim], scale=10.0, what=f"{name} {shape} {sl} dim={dim}")
    assert {4, 2, 8} <= set(seen), seen
