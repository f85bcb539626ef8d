"""The batch_norm pieces behind SyncBatchNorm (``families.batch_norm.sync``), in one process: the batches of a few
simulated processes (one empty) go through local moments -> merge -> normalize and backward sums -> summed ->
dx, and must give batch_norm over the concatenated batch (float64 reference); every launch branch forced (one
slice and several, NCHW tiles and channel tiles, normalize/dx programs looping over tiles, gathered inputs),
strided running statistics, replayed plans, errors. The collectives themselves: ``test_distributed.py``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from ops_helpers import randn
from tritred_ops.families.batch_norm import sync
from tritred_ops.families.batch_norm.spec import SPEC

FORCED = {
    "built-in": None,
    "nchw slices": dict(strategy="split", BLOCK_M=2, BLOCK_N=4, BLOCK_K=1, split=3, num_warps=2),
    "channel tiles, looping programs": dict(strategy="split", BLOCK_M=1, BLOCK_N=4, BLOCK_K=2, split=2,
                                            num_programs=2, num_warps=2),
}


def _layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "channels_last":
        return x.to(memory_format=torch.channels_last)
    if layout == "permuted":  # spatial dims that merge in no order: gathered (one copy)
        return x.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)[:, :, :, 1:]
    return x


def _pieces(parts: list[torch.Tensor], dys: list[torch.Tensor], w: torch.Tensor | None, b: torch.Tensor | None,
            rm: torch.Tensor, rv: torch.Tensor, momentum: float, eps: float):
    """What SyncBatchNorm's processes compute, with the collectives replaced by a stack and a sum."""
    gathered = torch.stack([sync.batch_norm_moments_call(SPEC, p) for p in parts]).contiguous()
    stats = sync.merge_ranks_call(gathered, rm, rv, momentum, eps)
    ys = [sync.batch_norm_normalize_call(SPEC, p, stats[0], stats[1], w, b) for p in parts]
    sums = [sync.batch_norm_backward_sums_call(SPEC, d, p, stats[0], stats[1]) for d, p in zip(dys, parts)]
    coef = (torch.stack(sums).sum(0) * stats[2:4]).contiguous()
    dxs = [sync.batch_norm_backward_dx_call(SPEC, d, p, w, stats[0], stats[1], coef) for d, p in zip(dys, parts)]
    return ys, dxs, torch.stack(sums).sum(0), stats


@pytest.mark.triton_compat
@pytest.mark.parametrize("forced", list(FORCED))
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "permuted"])
def test_pieces_give_batch_norm_of_the_whole_batch(forced, layout, device, force):
    if FORCED[forced] is not None:
        force("batch_norm", direction=None, **FORCED[forced])
    sizes, C = [3, 0, 2], 3
    full = randn((sum(sizes), C, 4, 5), torch.float64, "cpu", offset=2.0, scale=3.0)
    dy = randn(full.shape, torch.float64, "cpu")
    w, b = randn((C,), torch.float64, device), randn((C,), torch.float64, device)
    rm, rv = randn((C,), torch.float64, device), randn((C,), torch.float64, device).abs() + 0.5
    rm_ref, rv_ref = rm.cpu().clone(), rv.cpu().clone()
    parts = [_layout(p.to(device), layout) for p in full.split(sizes)]
    dys = [d.to(device).transpose(2, 3).contiguous().transpose(2, 3) for d in dy.split(sizes)]  # dy in another layout
    dys = [d if layout != "permuted" else d[:, :, :, 1:] for d in dys]
    ys, dxs, sums, _ = _pieces(parts, dys, w, b, rm, rv, 0.3, 1e-5)

    xr = torch.cat([p.cpu() for p in parts]).requires_grad_()
    wr, br = w.cpu().requires_grad_(), b.cpu().requires_grad_()
    ref = F.batch_norm(xr, rm_ref, rv_ref, wr, br, True, 0.3, 1e-5)
    ref.backward(torch.cat([d.cpu() for d in dys]))
    torch.testing.assert_close(torch.cat([y.cpu() for y in ys]), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat([d.cpu() for d in dxs]), xr.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sums[1].cpu(), wr.grad, rtol=1e-12, atol=1e-12)  # sum(dy * x_hat): grad_weight
    torch.testing.assert_close(sums[0].cpu(), br.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rm.cpu(), rm_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rv.cpu(), rv_ref, rtol=1e-12, atol=1e-12)
    if layout == "channels_last":
        assert all(y.is_contiguous(memory_format=torch.channels_last) for y in ys if y.numel())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pieces_low_precision_strided_running_stats_and_replay(dtype, device):
    """fp32/bf16 inputs (fp32 statistics), running statistics read through strides (copied back), no weight; a
    second identical call replays the saved plans and gives the same bits."""
    sizes, C = [2, 1], 4
    full = randn((sum(sizes), C, 6), dtype, device, offset=100.0)  # far from 0: the shift keeps the spread
    dy = randn(full.shape, dtype, device)
    parts, dys = list(full.split(sizes)), list(dy.split(sizes))
    rm_buf, rv_buf = torch.zeros(2 * C, device=device), torch.ones(2 * C, device=device)
    rm, rv = rm_buf[::2], rv_buf[::2]
    first = _pieces(parts, dys, None, None, rm, rv, 0.1, 1e-3)
    xr = full.double().requires_grad_()
    rm_ref, rv_ref = torch.zeros(C, dtype=torch.float64), torch.ones(C, dtype=torch.float64)
    ref = F.batch_norm(xr.cpu(), rm_ref, rv_ref, None, None, True, 0.1, 1e-3)
    ref.backward(dy.double().cpu())
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat(first[0]).double().cpu(), ref, **tol)
    torch.testing.assert_close(torch.cat(first[1]).double().cpu(), xr.grad.cpu(), **tol)
    torch.testing.assert_close(rm.double().cpu(), rm_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rv.double().cpu(), rv_ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(rm_buf[1::2], torch.zeros(C, device=device))  # (the other elements untouched)
    again = _pieces(parts, dys, None, None, None, None, 0.1, 1e-3)  # (no running statistics: another plan)
    again2 = _pieces(parts, dys, None, None, None, None, 0.1, 1e-3)  # replayed
    for a, b in zip(again[0] + again[1], again2[0] + again2[1]):
        assert torch.equal(a, b)
    assert torch.equal(again[3][:2], first[3][:2])


def test_merge_of_many_ranks_and_empty_ones(device):
    """More ranks than one step of the merge's loop (64), most of them empty: Chan's merge is exact for them."""
    C, W = 3, 70
    gathered = torch.zeros(W, 3, C, dtype=torch.float64, device=device)
    full = randn((9, C), torch.float64, "cpu", offset=-5.0)
    for r, rows in ((0, slice(0, 2)), (41, slice(2, 3)), (69, slice(3, 9))):
        gathered[r] = sync.batch_norm_moments_call(SPEC, full[rows].to(device))
    stats = sync.merge_ranks_call(gathered, None, None, 0.1, 1e-5)
    var = full.var(0, unbiased=False)
    torch.testing.assert_close(stats[0].cpu(), full.mean(0), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(stats[1].cpu(), (var + 1e-5).rsqrt(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(stats[2].cpu(), torch.full((C,), 1 / 9, dtype=torch.float64))
    torch.testing.assert_close(stats[3].cpu(), (var + 1e-5).rsqrt() / 9)


def test_errors(device):
    x = torch.randn(2, 3, 4, device=device)
    st = torch.zeros(3, device=device)
    with pytest.raises(ValueError, match="at least 2D"):
        sync.batch_norm_moments_call(SPEC, torch.randn(5, device=device))
    with pytest.raises(NotImplementedError):
        sync.batch_norm_moments_call(SPEC, torch.ones(2, 3, dtype=torch.int64, device=device))
    with pytest.raises(RuntimeError, match="mean and invstd must be"):
        sync.batch_norm_normalize_call(SPEC, x, st.double(), st.double(), None, None)
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 4"):
        sync.batch_norm_normalize_call(SPEC, x, st, st, torch.ones(4, device=device), None)
    with pytest.raises(RuntimeError, match="contiguous fp32/fp64"):
        sync.merge_ranks_call(torch.zeros(2, 2, 3, device=device), None, None, 0.1, 1e-5)
    with pytest.raises(ValueError, match="both be None"):
        sync.merge_ranks_call(torch.zeros(2, 3, 3, device=device), st, None, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="running_var should contain 3 elements"):
        sync.merge_ranks_call(torch.zeros(2, 3, 3, device=device), st, torch.ones(2, device=device), 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="grad_out must have"):
        sync.batch_norm_backward_sums_call(SPEC, x[:1], x, st, st)
    with pytest.raises(RuntimeError, match="coef must be"):
        sync.batch_norm_backward_dx_call(SPEC, x, x, None, st, st, torch.zeros(3, 2, device=device))
    empty = torch.empty(0, 3, 4, device=device)  # an empty batch: zeros (a count of 0), no launch
    assert torch.equal(sync.batch_norm_moments_call(SPEC, empty), torch.zeros(3, 3, device=device))
    assert torch.equal(sync.batch_norm_backward_sums_call(SPEC, empty, empty, st, st), torch.zeros(2, 3,
                                                                                                  device=device))
    assert sync.batch_norm_normalize_call(SPEC, empty, st, st, None, None).shape == empty.shape
