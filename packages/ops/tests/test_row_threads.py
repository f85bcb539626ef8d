"""Single passes with each row over a few threads (``threads_per_row``): a [BLOCK_M, BLOCK_N // COLS, COLS] tile
per program (``kernels.welford.short_rows_tile``, ``short_rows_stats``).

var/std/var_mean/std_mean and layer_norm against float64 torch for every dtype, on whole and partly masked tiles,
more rows per program than the call has, rows over 1 to 32 threads, strided rows, two reduced axes (per-row
partials), NaN and inf, rows far from 0, layer_norm with and without weight and bias and its stored statistics;
the other ops and the paths that keep their own layout refuse the config.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn

STATS = ("var", "std", "var_mean", "std_mean")


@pytest.fixture
def cols_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The COLS each statistics launch of the call received from ``runtime.row_cols`` (0: the kernel's layout)."""
    from tritred_ops import runtime as C

    seen: list[int] = []
    real = C.row_cols
    monkeypatch.setattr(C, "row_cols", lambda *a: seen.append(real(*a)) or seen[-1])
    return seen


def _check(name, x, dim, n, what, correction=1):
    out = getattr(tr, name)(x, dim, correction=correction)
    ref = getattr(torch, name)(x.double().cpu(), dim, correction=correction)
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        assert o.dtype == x.dtype and o.shape == r.shape, what
        assert not o.isnan().any() or r.isnan().any(), f"unwritten elements: {what}"
        scale = max(r.abs().nan_to_num(0, 0, 0).max().item(), 1.0)
        assert_close(o, r, n=n, scale=2 * scale, what=what)


@pytest.mark.parametrize("name", STATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_rows_over_a_few_threads(name, dtype, force, device, cols_spy):
    """Whole tiles (N = BLOCK_N = 64) and partly masked ones (N = 37, 50), 1 to 32 threads a row (COLS capped at
    the tile's width), BLOCK_M rows per program past the call's last row, contiguous rows and rows of a padded
    stride (the tile's rows not 16-byte aligned)."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for threads, block_m, warps in ((8, 4, 1), (2, 16, 1), (1, 8, 2), (32, 2, 1)):
        force(name, strategy="single_pass", BLOCK_M=block_m, BLOCK_N=64, num_warps=warps, threads_per_row=threads)
        for n in (64, 37, 50):
            padded = randn((11, 67), dtype, device, scale=2.0, offset=3.0)
            for x in (padded[:, :n].contiguous(), padded[:, :n]):
                cols_spy.clear()
                _check(name, x, -1, n, f"{name} {dtype} {n} t{threads} M{block_m} {x.stride()}")
                assert cols_spy == [min(64, threads * vec)], cols_spy


@pytest.mark.parametrize("name", STATS)
def test_non_finite_and_far_rows(name, force, device):
    """NaN, +inf, -inf, +inf and -inf in one row, a row far from 0 (1e4 + randn: the two-pass keeps its spread), a
    constant row, a row whose first element alone is far (1e4 among randn): what torch gives."""
    force(name, strategy="single_pass", BLOCK_M=4, BLOCK_N=64, num_warps=1, threads_per_row=4)
    x = randn((8, 64), torch.float32, device)
    inf = float("inf")
    x[0, 5], x[1, 63], x[2, 0], x[3, 7], x[3, 9] = float("nan"), inf, -inf, inf, -inf
    x[4] += 1e4
    x[5] = 2.5
    x[6, 0] = 1e4
    out = getattr(tr, name)(x, -1)
    ref = getattr(torch, name)(x.double().cpu(), -1)
    if name in ("var_mean", "std_mean"):  # (a row holding +-inf has a NaN mean: docs/semantics.md)
        ref = (ref[0], torch.where(ref[1].isinf(), float("nan"), ref[1]))
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        assert torch.equal(o.isnan().cpu(), r.isnan()), (o, r)
        assert_close(o, r, n=64, scale=max(r.abs().nan_to_num(0, 0, 0).max().item(), 1.0), what=f"{name} non-finite")
    assert out[0][5].item() == 0 if isinstance(out, tuple) else out[5].item() == 0  # (a constant row: exactly 0)


@pytest.mark.parametrize("correction", [0, 1, 2, 64, 70])
def test_corrections_and_keepdim(correction, force, device):
    """The divisor max(N - correction, 0), 0 included (inf, as torch); keepdim."""
    force("var", strategy="single_pass", BLOCK_M=8, BLOCK_N=64, num_warps=1, threads_per_row=4)
    x = randn((9, 64), torch.bfloat16, device)
    out = tr.var(x, -1, correction=correction, keepdim=True)
    ref = torch.var(x.double().cpu(), -1, correction=correction, keepdim=True)
    assert out.shape == ref.shape
    assert_close(out, ref, n=64, scale=2.0, what=f"correction {correction}")


def test_two_reduced_axes(force, device, cols_spy):
    """var over (0, 2) of [B, C, N]: one partial per inner row (PARTIAL) from the few-threads tile, merged per
    channel by the combine kernel."""
    force("var", strategy="single_pass", BLOCK_M=4, BLOCK_N=64, num_warps=1, threads_per_row=8)
    for n in (64, 40):
        x = randn((6, 5, n), torch.bfloat16, device, offset=2.0)
        cols_spy.clear()
        _check("var", x, (0, 2), 6 * n, f"two axes {n}")
        assert cols_spy == [64], cols_spy


def test_replay_takes_new_data(force, device):
    """A repeated call (a replayed plan) reads the new tensor."""
    force("std", strategy="single_pass", BLOCK_M=4, BLOCK_N=64, num_warps=1, threads_per_row=8)
    for _ in range(3):
        _check("std", randn((10, 64), torch.bfloat16, device), -1, 64, "replay")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_layer_norm_rows_over_a_few_threads(dtype, force, device, cols_spy):
    """layer_norm's single pass with rows over 1 to 32 threads: whole and masked tiles, padded rows, weight and
    bias each present or not, rows far from 0 and a constant row (all 0 out, as torch), and the per-row mean and
    rstd that ``layer_norm_with_stats`` stores."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for threads, block_m, warps in ((8, 4, 1), (2, 16, 1), (32, 2, 1), (4, 8, 2)):
        force("layer_norm", strategy="single_pass", BLOCK_M=block_m, BLOCK_N=64, num_warps=warps,
              threads_per_row=threads)
        for n in (64, 45):
            padded = randn((9, 70), dtype, device, offset=1.0)
            padded[3, :n] += 1e3
            padded[4, :n] = 0.75
            w, b = randn((n,), dtype, device), randn((n,), dtype, device)
            for x in (padded[:, :n].contiguous(), padded[:, :n]):
                for wb in ((w, b), (None, b), (w, None), (None, None)):
                    cols_spy.clear()
                    what = f"layer_norm {dtype} {n} t{threads} M{block_m} {x.stride()} {[t is None for t in wb]}"
                    out = tr.layer_norm(x, (n,), *wb)
                    ref = F.layer_norm(x.double().cpu(), (n,), *(t.double().cpu() if t is not None else None
                                                                for t in wb))
                    assert cols_spy == [min(64, threads * vec)], cols_spy
                    assert not out.isnan().any(), f"unwritten elements: {what}"
                    assert_close(out, ref, n=n, scale=8.0, what=what)
            y, mean, rstd = tr.layer_norm_with_stats(padded[:, :n], (n,), w, b)
            xd = padded[:, :n].double().cpu()
            assert_close(mean, xd.mean(-1), n=n, scale=1e3, what="mean")
            assert_close(rstd, 1 / torch.sqrt(xd.var(-1, correction=0) + 1e-5), n=n, scale=8.0, what="rstd")


@pytest.mark.parametrize("name", ["sum", "softmax", "logsumexp", "max", "batch_norm"])
def test_other_kernels_refuse_it(name, force, device):
    """threads_per_row given to an op whose kernels keep their own layout raises ValueError naming the op and who
    gave the config."""
    force(name, strategy="single_pass", BLOCK_M=4, BLOCK_N=64, num_warps=1, threads_per_row=8)
    x = randn((6, 64), torch.float32, device)
    with pytest.raises(ValueError, match=f"{name}: threads_per_row=8 \\(config from test-force-{name}"):
        if name == "batch_norm":
            tr.batch_norm(randn((4, 3, 5, 5), torch.float32, device), None, None, training=True)
        elif name == "max":
            tr.max(x, -1)
        else:
            getattr(tr, name)(x, -1)


def test_statistics_columns_refuse_it(force, device):
    """The statistics column kernel (a non-last dim) keeps its layout: ValueError, not a silently other launch."""
    force("var", strategy="single_pass", BLOCK_M=1, BLOCK_N=64, num_warps=1, threads_per_row=8)
    with pytest.raises(ValueError, match="var: threads_per_row=8 .*columns, loops and split slices"):
        tr.var(randn((64, 6), torch.float32, device), 0)



def test_config_validation():
    """threads_per_row: single passes only, a power of two <= 32, not with a tail tile."""
    from tritred_core import LaunchConfig

    for bad in (dict(strategy="multi_pass", threads_per_row=8), dict(strategy="split", split=2, threads_per_row=8),
                dict(strategy="single_pass", threads_per_row=3), dict(strategy="single_pass", threads_per_row=64),
                dict(strategy="single_pass", BLOCK_N=32, BLOCK_TAIL=16, threads_per_row=4)):
        with pytest.raises(ValueError, match="threads_per_row"):
            LaunchConfig(**bad)
    assert LaunchConfig(strategy="single_pass", threads_per_row=32).threads_per_row == 32
