"""More than 2^31 elements (int64 offsets and indices), compiled on a GPU with room for them.

Skipped without CUDA or with less than 48 GiB free (CI has no GPU; the H200 runs them). Each case puts the
elements that matter past offset 2^31: the last rows of a [2^21 + 3, 1024] tensor, a maximum planted past index
2^31, the last channels' data of a batch_norm input.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close


def _free_gib() -> float:
    if not torch.cuda.is_available():
        return 0.0
    return torch.cuda.mem_get_info()[0] / 2**30


pytestmark = [
    pytest.mark.skipif(_free_gib() < 48, reason="needs a CUDA GPU with 48 GiB free (more than 2^31 elements)"),
    pytest.mark.large,
]

ROWS = 2**21 + 3  # x 1024 columns: 2^31 + 3072 elements, the last rows start past offset 2^31


@pytest.fixture(scope="module")
def big() -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(1234)
    return torch.randn((ROWS, 1024), generator=g, device="cuda", dtype=torch.bfloat16)


def test_rows_past_2_31(big):
    tail = big[-64:].double()
    assert_close(tr.softmax(big, -1)[-64:], torch.softmax(tail, -1), n=1024, scale=4, what="softmax")
    assert_close(tr.logsumexp(big, -1)[-64:], torch.logsumexp(tail, -1), n=1024, scale=8, what="logsumexp")
    assert_close(tr.var(big, -1)[-64:], torch.var(tail, -1), n=1024, scale=4, what="var")
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    y = tr.layer_norm(big, (1024,), w, None)
    assert_close(y[-64:], F.layer_norm(tail, (1024,), w.double()), n=1024, scale=8, what="layer_norm")
    values, indices = tr.max(big, -1)
    ref = torch.max(big[-64:].float(), -1)
    assert torch.equal(values[-64:].float(), ref.values)
    assert torch.equal(big[-64:].gather(1, indices[-64:, None]).float()[:, 0], ref.values)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_input_gradients_past_2_31(big, name):
    """The backward kernels' int64 offsets: the input gradient of the last 64 rows (past offset 2^31) against
    torch's in float64 from the same bf16 inputs and output gradient, row by row (a relative error of 2e-2 per
    row holds bf16's roundings of y and dx; a row read or written at a wrapped offset is off by far more)."""
    g = torch.Generator(device="cuda").manual_seed(4321)
    dy = torch.randn(big.shape, generator=g, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, generator=g, device="cuda", dtype=torch.bfloat16)
    calls = {"softmax": (lambda m, t: m.softmax(t, -1)), "log_softmax": (lambda m, t: m.log_softmax(t, -1)),
             "layer_norm": (lambda m, t: m.layer_norm(t, (1024,), w if m is tr else w.double())),
             "rms_norm": (lambda m, t: m.rms_norm(t, (1024,), w if m is tr else w.double()))}
    call = calls[name]
    x = big.detach().requires_grad_()
    (dx,) = torch.autograd.grad(call(tr, x), x, dy)
    del x
    tail = big[-64:].double().requires_grad_()
    (ref,) = torch.autograd.grad(call(F if "norm" in name else torch, tail), tail, dy[-64:].double())
    err = (dx[-64:].double() - ref).norm(dim=1) / ref.norm(dim=1)
    assert bool((err < 2e-2).all()), f"{name}: worst row relative error {err.max().item():.3e}"


def test_columns_past_2_31(big):
    """Values planted in the last two rows (past offset 2^31) decide every column's sum and maximum: a kernel that
    misses them is off by far more than the bf16 rounding of the sum (a random row changes a column sum of ~1500
    by ~1, under half an ulp)."""
    rows = big.shape[0]
    top = 32768.0  # above every value (normal draws), and 20+ standard deviations of a column's random sum
    saved = big[-2:].clone()
    try:
        big[-2] = top
        big[-1, ::2] = top  # even columns: tied again one row later, the first occurrence wins
        ref = torch.zeros(1024, dtype=torch.float64, device=big.device)
        for chunk in big.split(2**18):
            ref += chunk.double().sum(0)
        assert (ref > top / 2).all()  # (the planted values dominate the reference)
        assert_close(tr.sum(big, 0), ref, what="sum dim=0")  # one bf16 rounding of the fp64 sum
        values, indices = tr.max(big, 0)
        assert torch.equal(values.float(), torch.full((1024,), top, device=big.device).to(big.dtype).float())
        assert torch.equal(indices, torch.full((1024,), rows - 2, device=big.device))
    finally:
        big[-2:] = saved


def test_flat_reductions_and_index_past_2_31(big):
    flat = big.view(-1)
    saved_tail = flat[2**31:].clone()
    try:
        flat[2**31:] = 64.0  # the 3072 elements past 2^31 hold 196608 of the sum: missing them shows
        ref = sum(chunk.double().sum() for chunk in flat.split(2**28))
        assert_close(tr.sum(flat), ref.reshape(()), what="sum")
    finally:
        flat[2**31:] = saved_tail
    top = flat.float().abs().max().item() * 2
    saved = flat[2**31 + 5].clone(), flat[2**31 + 9].clone()
    try:
        flat[2**31 + 5] = top  # unique maximum past 2^31, tied once later: the first index wins
        flat[2**31 + 9] = top
        values, indices = tr.max(flat, 0)
        assert indices.item() == 2**31 + 5 and values.item() == top
        assert tr.amax(flat).item() == top
    finally:
        flat[2**31 + 5], flat[2**31 + 9] = saved


def test_batch_norm_past_2_31():
    g = torch.Generator(device="cuda").manual_seed(99)
    x = torch.randn((2, 4, 2**28 + 1), generator=g, device="cuda", dtype=torch.bfloat16)  # 2^31 + 8 elements
    rm, rv = torch.zeros(4, device="cuda"), torch.ones(4, device="cuda")
    y = tr.batch_norm(x, rm, rv, None, None, True, 0.1, 1e-5)
    xs = x[:, 3].double()  # the last channel of the last image starts past 2^31
    mean, var = xs.mean(), xs.var(correction=0)
    assert_close(rm[3:], (0.1 * mean).reshape(1), scale=0.1, what="running_mean")
    assert_close(rv[3:], (0.9 + 0.1 * xs.var()).reshape(1), what="running_var")
    assert_close(y[1, 3, -4096:], ((xs[1, -4096:] - mean) / (var + 1e-5).sqrt()), n=64, scale=8, what="y")


@pytest.mark.parametrize("n", [1025, 2049, 4097])
def test_strided_row_past_2_31(big, n):
    """One row of n elements 2^31 / (n - 1) apart (a column of a huge matrix, K = 1): its last element lies at
    offset 2^31, reached inside one single-pass tile (an int32 column offset times the stride wraps). That element
    is planted at 8 (exact in bf16), so every op that misses or misreads it is off."""
    flat = big.view(-1)
    step = 2**31 // (n - 1)
    saved = flat[2**31].clone()
    try:
        flat[2**31] = 8.0
        x = flat[::step][:n]
        assert x.stride() == (step,) and x.shape == (n,)
        ref = x.double()
        for name in ("sum", "mean", "amax", "var", "std", "logsumexp"):
            assert_close(getattr(tr, name)(x, 0), getattr(torch, name)(ref, 0), n=n, scale=8, what=name)
        assert tr.amin(-x, 0).item() == -8.0
        values, indices = tr.max(x, 0)
        assert values.item() == 8.0 and indices.item() == n - 1
        for name in ("softmax", "log_softmax"):
            assert_close(getattr(tr, name)(x, 0), getattr(torch, name)(ref, 0), n=n, scale=8, what=name)
        assert_close(tr.layer_norm(x, (n,)), F.layer_norm(ref, (n,)), n=n, scale=8, what="layer_norm")
    finally:
        flat[2**31] = saved
