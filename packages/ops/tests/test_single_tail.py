"""Single passes of two tiles (``BLOCK_TAIL``): a row just past a power of two held in BLOCK_N + BLOCK_TAIL lanes.

Every kernel that takes a tail (the plain reductions, softmax/log_softmax/logsumexp, var/std/var_mean/std_mean,
layer_norm) against float64 torch, on widths whose last elements lie only in the tail, with and without the
16-byte shift of odd-width rows (a padded row stride: unshifted tiles), NaN and inf placed in the tail. Kernels
without one (columns, max/min, batch_norm) refuse the config instead of leaving the row's end unread.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn

BLOCK_N, TAIL = 32, 16
REDUCE = ("sum", "mean", "prod", "amax", "amin")
SOFTMAX = ("softmax", "log_softmax", "logsumexp")
STATS = ("var", "std", "var_mean", "std_mean")


def _call(name, x, n):
    """(tritred's result, float64 torch's) of ``name`` over the last dim of ``x`` (rows of ``n`` elements)."""
    xd = x.double().cpu()
    if name == "layer_norm":
        w, b = randn((n,), x.dtype, x.device), randn((n,), x.dtype, x.device)
        return (tr.layer_norm(x, (n,), w, b),
                F.layer_norm(xd, (n,), w.double().cpu(), b.double().cpu()))
    if name in STATS:
        return getattr(tr, name)(x, -1, correction=1), getattr(torch, name)(xd, -1, correction=1)
    return getattr(tr, name)(x, -1), getattr(torch, name)(xd, -1)


def _check(out, ref, name, n, what):
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        assert not o.isnan().any() or r.isnan().any(), f"unwritten elements: {what}"
        scale = max(r.abs().nan_to_num(0, 0, 0).max().item(), 1.0)
        assert_close(o, r, n=n, scale=scale * (8 if name in ("layer_norm", "prod") else 2), what=what)


@pytest.mark.parametrize("name", [*REDUCE, *SOFTMAX, *STATS, "layer_norm"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rows_past_the_first_tile(name, dtype, force, device, tail_spy, align_spy):
    """Rows of BLOCK_N + 1 to BLOCK_N + TAIL elements, contiguous (odd widths: shifted tiles whose tail also holds
    the shift's overflow) and as views of padded rows (row strides of 16 elements: unshifted tiles, the tail masked by
    N alone); prod on values near 1 (a product of 48 randn values over- or underflows bfloat16)."""
    force(name, strategy="single_pass", BLOCK_N=BLOCK_N, BLOCK_TAIL=TAIL, num_warps=1)
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n in (BLOCK_N + 1, BLOCK_N + 3, BLOCK_N + TAIL - vec + 1, BLOCK_N + TAIL - 1, BLOCK_N + TAIL):
        padded = randn((7, (n // 16 + 2) * 16), dtype, device, scale=0.05 if name == "prod" else 1.0,
                       offset=1.0 if name == "prod" else 0.5)
        for x, shifted in ((padded[:, :n].contiguous(), n % vec != 0 and n + vec - 1 <= BLOCK_N + TAIL),
                           (padded[:, :n], False)):
            tail_spy.clear()
            align_spy.clear()
            out, ref = _call(name, x, n)
            assert tail_spy == [TAIL], (n, tail_spy)
            assert align_spy[-1:] == [vec if shifted else 0], (n, x.stride(), align_spy)
            _check(out, ref, name, n, f"{name} {dtype} {n} {x.stride()}")


@pytest.mark.parametrize("name", [*REDUCE, *SOFTMAX, *STATS, "layer_norm"])
def test_non_finite_values_in_the_tail(name, force, device):
    """NaN, +inf and -inf as a row's last element (in the tail tile), +inf as its first (in the first tile), a large
    last element (1e4: a mean far from most values): the results torch gives (NaN rows, inf sums and maxima,
    softmax of an -inf lane 0)."""
    force(name, strategy="single_pass", BLOCK_N=BLOCK_N, BLOCK_TAIL=TAIL, num_warps=1)
    n = BLOCK_N + 5
    x = randn((7, n), torch.float32, device)
    x[0, -1], x[1, -1], x[2, -1], x[3, 0], x[4, -1] = float("nan"), float("inf"), float("-inf"), float("inf"), 1e4
    out, ref = _call(name, x, n)
    if name in ("var_mean", "std_mean"):  # (a row holding +-inf has a NaN mean wherever it sits: docs/semantics.md)
        ref = (ref[0], torch.where(ref[1].isinf(), float("nan"), ref[1]))
    _check(out, ref, name, n, f"{name} non-finite")


@pytest.mark.parametrize("name", ["sum", "softmax", "var", "layer_norm"])
def test_short_rows_skip_the_tail(name, force, device, tail_spy):
    """A row that fits the first tile with its shift leaves the tail out (TAIL 0: no load of masked lanes)."""
    force(name, strategy="single_pass", BLOCK_N=BLOCK_N, BLOCK_TAIL=TAIL, num_warps=1)
    n = BLOCK_N - 16
    x = randn((5, n), torch.float32, device)
    out, ref = _call(name, x, n)
    assert tail_spy == [0]
    _check(out, ref, name, n, f"{name} short")


@pytest.mark.parametrize("name", ["sum", "softmax", "var", "max", "batch_norm"])
def test_kernels_without_a_tail_refuse_it(name, force, device):
    """A tail given to a kernel that holds a row in one tile (strided column reductions, max/min with indices,
    batch_norm) raises ValueError naming the op and who gave the config, rather than leave the row's end unread."""
    force(name, strategy="single_pass", BLOCK_N=BLOCK_N, BLOCK_TAIL=TAIL, num_warps=1)
    x = randn((BLOCK_N + 5, 6), torch.float32, device)
    with pytest.raises(ValueError, match=f"{name}: BLOCK_TAIL=16 \\(config from test-force-{name}"):
        if name == "batch_norm":
            tr.batch_norm(randn((4, 3, 5, 5), torch.float32, device), None, None, training=True)
        elif name == "max":
            tr.max(x.t(), -1)
        else:
            getattr(tr, name)(x, 0)


def test_config_validation():
    """BLOCK_TAIL is for single passes only, a power of two no wider than BLOCK_N, and counts toward N."""
    from tritred_core import LaunchConfig, Problem

    for bad in (dict(strategy="multi_pass", BLOCK_TAIL=16), dict(strategy="single_pass", BLOCK_N=32, BLOCK_TAIL=24),
                dict(strategy="single_pass", BLOCK_N=32, BLOCK_TAIL=64)):
        with pytest.raises(ValueError, match="BLOCK_TAIL"):
            LaunchConfig(**bad)
    cfg = LaunchConfig(strategy="single_pass", BLOCK_N=32, BLOCK_TAIL=16)
    cfg.check_fits(Problem(op="sum", dtype="float32", M=4, N=48, K=1))
    with pytest.raises(ValueError, match="BLOCK_N \\+ BLOCK_TAIL >= N"):
        cfg.check_fits(Problem(op="sum", dtype="float32", M=4, N=49, K=1))
