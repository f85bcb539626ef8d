"""var/std/var_mean/std_mean: fp64 references, corrections, large means, every branch."""

from __future__ import annotations

import warnings

import pytest
import torch
import tritred_ops as tr
from ops_helpers import LAYOUTS, assert_close, config_id, h200_config, randn, seed

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
    """``scale`` widens the variance's tolerance (its error grows with the data's offset); a var_mean/std_mean mean
    is held to the roundings of its own size."""
    if isinstance(ref, tuple):
        assert isinstance(out, tuple) and len(out) == 2
        assert_close(out[0], ref[0], n=n, scale=scale * max(ref[0].abs().max().item(), 1.0), what=what)
        assert_close(out[1], ref[1], n=n, scale=max(ref[1].abs().max().item(), 1.0), what=f"{what} (mean)")
    else:
        assert_close(out, ref, n=n, scale=scale * max(ref.abs().max().item(), 1.0), what=what)


@pytest.mark.triton_compat
@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_branches_large_mean(name, cfg, force, device):
    if cfg is not None:
        force(name, **cfg)
    # mean far from 0 and non-power-of-two length: E[x^2]-E[x]^2 would lose every digit
    x = randn((5, 99), torch.float32, device, offset=1e4)
    for what, out, ref in (("rows", getattr(tr, name)(x, 1), _ref(name, x, 1)),
                           ("cols", getattr(tr, name)(x.t().contiguous(), 0), _ref(name, x.t(), 0))):
        _cmp(out, ref, 99, f"{name} {what}", scale=1e4 / 100)
        if name.endswith("_mean"):  # a few float32 roundings of 1e4 (measured: at most 2e-7), not 1e-3 of the spread
            err = ((out[1].double().cpu() - ref[1]).abs() / ref[1].abs()).max().item()
            assert err <= 1e-6, f"{name} {what}: mean relative error {err:.1e}"


@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128)], ids=config_id)
def test_spread_tiny_against_the_mean_needs_the_correction(cfg, force, device):
    """float32 rows whose mean is 10^6 times their spread: the float32 sum's rounding moves the first mean by a
    good part of the spread, which the plain two-pass would add to the variance squared (~1e-2 relative); the
    corrected two-pass (``kernels.welford.chunk_stats``) removes it: held to 1e-4 relative."""
    if cfg is not None:
        force("var", **cfg)
    x = randn((64, 99), torch.float32, device, offset=1e4, scale=1e-2)
    ref = _ref("var", x, 1)
    err = ((tr.var(x, 1).double().cpu() - ref).abs() / ref).max().item()
    assert err <= 1e-4, f"var: relative error {err:.1e}"


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_mean_near_zero_is_the_plain_sum(name, force, device):
    """A single pass's mean of rows whose mean is near zero against their spread: the corrected two-pass's
    ``mean + c / n`` carried the deviations' rounding bias (each ``x - mean`` rounds the same way across a binade:
    it grows as n u sigma), 1.08e-6 relative on an H100 for 4096x16384 randn rows against 1.05e-7 for ``mean``;
    below |mean| = sigma / 5 the plain sum's mean is reported (``kernels.welford.reported_mean``). Held to 3e-7
    (norm-wise, float64 reference); the rows far from zero keep the correction (the test above and the large-mean
    branches)."""
    N = 4096
    force(name, strategy="single_pass", BLOCK_M=1, BLOCK_N=N, num_warps=4)
    x = randn((16, N), torch.float32, device)
    mean = getattr(tr, name)(x, 1)[1].double().cpu()
    ref = x.double().cpu().mean(1)
    err = ((mean - ref).norm() / ref.norm()).item()
    assert err <= 3e-7, f"{name}: mean relative error {err:.1e}"


@pytest.mark.parametrize(("scale", "offset", "spread"), [(1.0, 1e30, 1e23), (1e18, 10.0, 1.0), (1e-30, 100.0, 1.0)])
def test_mean_far_from_zero_keeps_the_correction_at_the_float32_extremes(scale, offset, spread, force, device):
    """Rows far from zero whose M2 overflows float32 (1e30 +- 1e23, 1e19 +- 1e18) or whose squares underflow
    (1e-28 +- 1e-30) keep the corrected mean: a test of squares lost it (0.15 -> 1.41 float32 ulps for the first;
    an adversarial review). Held to half an ulp of the mean, the corrected mean's error there; a row of -0.0
    reports +0.0, as torch."""
    N = 4096
    force("var_mean", strategy="single_pass", BLOCK_M=1, BLOCK_N=N, num_warps=4)
    g = torch.Generator().manual_seed(seed())
    x64 = scale * (offset + spread * torch.randn(16, N, generator=g, dtype=torch.float64))
    x = x64.float().to(device)
    mean = tr.var_mean(x, 1)[1].double().cpu()
    ref = x.double().cpu().mean(1)
    ulps = ((mean - ref).abs() / (ref.abs() * 2.0**-23)).max().item()
    assert ulps <= 0.5, f"mean error {ulps:.2f} float32 ulps"
    zero = tr.var_mean(torch.full((2, N), -0.0, device=device), 1)[1]
    assert torch.equal(zero.cpu(), torch.zeros(2)) and not torch.signbit(zero).any()


@pytest.mark.parametrize("N", [99, 256])
def test_bfloat16_rows_of_one_odd_element_keep_their_variance(N, device):
    """bfloat16 single passes take the plain two-pass (``kernels.welford.chunk_stats``, CORRECT=False): its worst row is
    all one value but a neighbour (the spread the smallest a mean allows); the variance stays within bfloat16's
    roundings of float64 torch's, and so does the mean of var_mean (two: the interpreter's float32 to bfloat16
    conversion truncates)."""
    a = torch.tensor(1000.0, dtype=torch.bfloat16)
    x = torch.full((8, N), a.item(), dtype=torch.bfloat16)
    x[torch.arange(8), torch.arange(8) * 7 % N] = torch.nextafter(a, torch.tensor(2e3, dtype=torch.bfloat16))
    x[4:] = x[4:] - 1500  # the same far below 0
    x = x.to(device)
    for name in ("var", "var_mean"):
        out, ref = getattr(tr, name)(x, 1), _ref(name, x, 1)
        out, ref = (out, ref) if name == "var_mean" else ((out,), (ref,))
        for o, r, what in zip(out, ref, ("var", "mean")):
            err = ((o.double().cpu() - r).abs() / r.abs()).max().item()
            assert err <= 2 ** -7, f"{name} {what} N={N}: relative error {err:.1e}"


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
    assert_close(out[2:], ref[2:], n=40, scale=4.0, what="the finite row beside NaN and inf rows")


def test_integer_input_raises(device):
    with pytest.raises(RuntimeError, match="var"):
        tr.var(torch.arange(6, device=device))


@pytest.mark.parametrize("cfg", CONFIGS[:3], ids=config_id)
def test_rows_off_16_byte_boundaries(cfg, force, device):
    """Odd row strides take the shifted (ALIGN) tiles (loops too: test_loops_over_shifted_rows); unaligned bases
    do not."""
    base = randn((7, 123), torch.bfloat16, device, offset=30.0)
    for name in ("var", "std_mean"):
        if cfg is not None:
            force(name, **cfg)
        for x in (base[:, :101], base[:, 3:104]):
            _cmp(getattr(tr, name)(x, 1), _ref(name, x, 1), 101, f"{name} {x.stride()}", scale=30)


@pytest.mark.parametrize("name", ["var", "std_mean"])
def test_split_slices_of_odd_rows_are_shifted(name, force, device, align_spy):
    """A split of odd-width rows shifts each slice as a row of its own (slices of 48, 48 and 5 of a 101-wide row,
    the last one shorter than a chunk): their partials merge (Chan) into torch's statistics, a large mean, NaN
    in a middle slice and +inf in the last staying in their rows."""
    force(name, strategy="split", BLOCK_M=1, BLOCK_N=16, split=3)
    base = randn((7, 123), torch.bfloat16, device, offset=300.0)
    x = base[:, :101]
    align_spy.clear()
    _cmp(getattr(tr, name)(x, 1), _ref(name, x, 1), 101, f"{name} split", scale=300)
    assert align_spy and align_spy[0] == 8, align_spy
    z = randn((5, 101), torch.float32, device, offset=2.0)  # (fp32 rows of 101: off 16-byte boundaries too)
    z[1, 60] = float("nan")
    z[3, 100] = float("inf")
    out, ref = getattr(tr, name)(z, 1), _ref(name, z, 1)
    out, ref = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    assert torch.equal(out[0].cpu().isnan(), ref[0].isnan()), (name, out, ref)
    for o, r in zip(out, ref):
        assert_close(o[[0, 2, 4]], r[[0, 2, 4]], n=101, scale=8, what=f"{name} finite rows")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("block", [(1, 8), (2, 16), (1, 32)], ids=str)
def test_loops_over_shifted_rows(dtype, block, force, device, align_spy):
    """Row loops over odd-width rows take the shifted tiles: the head chunk (the shift's lanes) and the one or two
    tail chunks masked, the chunks between as per-lane Welford with no mask. Rows shorter than a chunk, of one
    chunk plus the shift, of many; every shift (rows of odd stride start at every lane); a large mean; NaN in an
    inner chunk and +inf in a tail stay in their rows."""
    block_m, block_n = block
    for name in ("var", "std_mean"):
        force(name, strategy="multi_pass", BLOCK_M=block_m, BLOCK_N=block_n)
        for n in (3, block_n - 1, block_n + 1, 2 * block_n + 5, 7 * block_n + 3):
            x = randn((9, n), dtype, device, offset=500.0)
            align_spy.clear()
            out = getattr(tr, name)(x, 1)
            want = 16 // x.element_size() if block_m == 1 or device == "cpu" else 0  # (GPU: one row per program)
            assert align_spy and align_spy[-1] == want, (name, n, align_spy)
            _cmp(out, _ref(name, x, 1), n, f"{name} {dtype} {n}", scale=500.0)
        z = randn((5, 7 * block_n + 3), dtype, device, offset=2.0)
        z[1, 2 * block_n] = float("nan")
        z[3, -1] = float("inf")
        out = getattr(tr, name)(z, 1)
        ref = _ref(name, z, 1)
        out, ref = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
        assert torch.equal(out[0].cpu().isnan(), ref[0].isnan()), (name, out, ref)  # (a mean beside an inf: torch
        for o, r in zip(out, ref):                                                    # CUDA's NaN, see _finish)
            assert_close(o[[0, 2, 4]], r[[0, 2, 4]], n=z.shape[1], scale=8, what=f"{name} finite rows")


@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=256),
                                 dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=8, split=3)], ids=config_id)
def test_two_reduced_axes_merge_their_slices_without_a_copy(name, cfg, force, device, caplog):
    """var over (0, 2, 3) of NCHW: the batch's slices of each channel's H*W rows as split partials (Welford),
    merged once (Chan), with no gather copy; large means, NaN and inf per channel, corrections, keepdim."""
    if cfg is not None:
        force(name, **cfg)
    x = randn((6, 5, 7, 9), torch.float32, device, offset=1e4)
    x[2, 1, 3, 4] = float("nan")
    x[4, 2, 0, 0] = float("inf")
    x[0, 3, 1, 1] = float("-inf")
    x[5, 3, 2, 2] = float("inf")
    for correction, keepdim in ((1, False), (0, True), (500, False)):
        with caplog.at_level("DEBUG", logger="tritred"):
            out = getattr(tr, name)(x, (0, 2, 3), correction=correction, keepdim=keepdim)
        assert not any("gathered" in r.getMessage() for r in caplog.records)
        ref = _ref(name, x, (0, 2, 3), correction=correction, keepdim=keepdim)
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            finite = r[r.isfinite()]  # (channels 1-3 hold NaN or inf; correction 500 leaves no finite variance)
            scale = 100 * max(finite.abs().max().item() if finite.numel() else 1.0, 1.0)
            assert_close(o, r, n=6 * 63, scale=scale, what=f"{name} {correction} {keepdim}")
    x5 = randn((3, 4, 5, 6, 7), torch.bfloat16, device, offset=-20.0)
    _cmp(getattr(tr, name)(x5, (0, 2, 3, 4)), _ref(name, x5, (0, 2, 3, 4)), 630, f"{name} 5-D", scale=20 / 100)


def test_two_reduced_axes_replay_and_many_slices_gather(device, caplog):
    from tritred_ops.runtime import replay as _replay
    from tritred_ops.runtime.caches import caches

    caches().clear()
    first = tr.var(randn((4, 6, 5, 7), torch.float32, device), (0, 2, 3))
    again = tr.var(randn((4, 6, 5, 7), torch.float32, device), (0, 2, 3))
    assert sum(isinstance(v, _replay.Plan) for v in caches().plans.values()) == 1
    assert not torch.equal(first, again)
    many = randn((1100, 2, 3), torch.float32, device)  # more outer slices than one merge tile holds
    with caplog.at_level("DEBUG", logger="tritred"):
        out = tr.var(many, (0, 2))
    assert any("gathered" in r.getMessage() for r in caplog.records)
    _cmp(out, _ref("var", many, (0, 2)), 3300, "1100 slices")


@pytest.mark.parametrize("name", ["var", "std_mean"])
def test_two_reduced_axes_without_a_kept_axis(name, device, monkeypatch):
    """All dims reduced, as two strided axes (the columns of a slice): one output, its partials are the rows."""
    from tritred_ops.families.statistics import launch as st

    taken = []
    real = st._launch_two_axes
    monkeypatch.setattr(st, "_launch_two_axes", lambda *a, **k: taken.append(1) or real(*a, **k))
    x = randn((37, 40), torch.float32, device, offset=300.0)[:, 3:22]
    for correction in (0, 1):
        _cmp(getattr(tr, name)(x, (0, 1), correction=correction), _ref(name, x, (0, 1), correction=correction),
             37 * 19, f"{name} {correction}", scale=30.0)
    assert taken


@pytest.mark.parametrize("chunks", [2, 5, 8, 9])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_rows_of_a_few_whole_chunks_unroll_the_loop(chunks, dtype, force, device, unroll_spy):
    """Rows of 2-8 whole chunks take the unrolled Welford loop (9 the rolled one), far from zero (the Welford
    steps must keep the spread); odd row counts leave the last program's second row out of range."""
    from tritred_ops import runtime as C
    force("var_mean", strategy="multi_pass", BLOCK_M=2, BLOCK_N=16)
    x = randn((5, 16 * chunks), dtype, device, offset=40.0)
    var, mean = tr.var_mean(x, -1)
    assert unroll_spy == [chunks if chunks <= C.UNROLL_CHUNKS else 0]
    xd = x.double().cpu()
    assert_close(var, xd.var(-1), n=16 * chunks, scale=8, what=f"var {dtype} {chunks}")
    assert_close(mean, xd.mean(-1), n=16 * chunks, what=f"mean {dtype} {chunks}")


def test_two_reduced_axes_unroll_their_rows_loop(force, device, unroll_spy):
    """var over (0, 2, 3) whose inner rows (H*W = 80) are 5 whole chunks of 16: the rows kernel's partials come
    from the unrolled Welford loop (a spy checks it is taken), far from zero, against float64 torch."""
    force("var_mean", strategy="multi_pass", BLOCK_M=2, BLOCK_N=16)
    x = randn((3, 5, 8, 10), torch.bfloat16, device, offset=40.0)
    var, mean = tr.var_mean(x, (0, 2, 3))
    assert unroll_spy == [5]
    xd = x.double().cpu()
    assert_close(var, xd.var((0, 2, 3)), n=240, scale=8, what="var")
    assert_close(mean, xd.mean((0, 2, 3)), n=240, what="mean")


_LOOPS = [None, dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=16), dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=64),
          dict(strategy="multi_pass", BLOCK_N=16, BLOCK_K=4), dict(strategy="split", BLOCK_M=1, BLOCK_N=16, split=3)]


@pytest.mark.parametrize("cfg", _LOOPS, ids=config_id)
@pytest.mark.parametrize("offset", [1000.0, 1e4])
def test_loop_rows_far_from_zero(cfg, offset, force, device):
    """Rows at ``offset`` +- 1 through the Welford loops (rows, columns, split slices), whose lanes run on raw
    values and merge raw (``_stats_rows_block``): the mean within a few roundings of the offset, the variance
    within ~ulp(offset) / spread, the documented limitation (docs/semantics.md). Held to 16 roundings and 2e-7 x
    offset (two ulp of the offset: ulp(1e4) = 2^-10, relative to the rows' unit variance). Measured on the
    heuristic's path (Triton 3.6 interpreter): at 1e4 (60 draws) variance error median 4.7e-4, max 9.5e-4, mean
    up to 6.2 roundings; at 1000 (40 draws) 3.1e-5 and 5.8e-5 (bound 2e-4), 3.3 roundings. CI once read 1.05e-3 at
    1e4 under Triton 3.9 (above the former bound of 1e-7 x offset)."""
    if cfg is not None:
        force("var_mean", **cfg)
    x = randn((64, 300), torch.float32, device, offset=offset)
    rows = x if cfg is None or "BLOCK_K" not in cfg else x.t().contiguous()
    dim = 1 if rows is x else 0
    var, mean = tr.var_mean(rows, dim)
    ref_var, ref_mean = _ref("var_mean", rows, dim)
    assert (mean.double().cpu() - ref_mean).abs().max().item() <= 16 * offset * 2.0**-24
    err = ((var.double().cpu() - ref_var) / ref_var).abs().max().item()
    assert err <= 2e-7 * offset, f"variance: relative error {err:.1e}"


@pytest.mark.parametrize("cfg", _LOOPS, ids=config_id)
def test_loop_rows_whose_first_element_is_far_from_their_mean(cfg, force, device):
    """Rows of randn but for a first element of 1e4 through the loops: the mean within ~1e-6 of its size (found by
    a review: the first element as the shift of the lanes' merge put ulp(1e4) on every mean, 2e-3 here)."""
    if cfg is not None:
        force("var_mean", **cfg)
    x = randn((8, 1000), torch.float32, device)
    x[:, 0] = 1e4
    rows = x if cfg is None or "BLOCK_K" not in cfg else x.t().contiguous()
    dim = 1 if rows is x else 0
    var, mean = tr.var_mean(rows, dim)
    ref_var, ref_mean = _ref("var_mean", rows, dim)
    err = (mean.double().cpu() - ref_mean).abs().max().item()
    assert err <= 1e-6 * ref_mean.abs().max().item(), f"mean: absolute error {err:.1e}"
    assert ((var.double().cpu() - ref_var) / ref_var).abs().max().item() <= 1e-5


@pytest.mark.parametrize("cfg", [dict(strategy="multi_pass", BLOCK_N=32, BLOCK_K=64),
                                 dict(strategy="split", BLOCK_N=32, BLOCK_K=64, split=4)], ids=config_id)
def test_float32_columns_far_from_zero_are_shifted(cfg, force, device):
    """float32 columns at 100 sigma from zero through the columns' Welford loop and split slices: statistics of x
    less the mean of each column's first chunk (``_stats_cols_kernel``'s SHIFT). Norm-wise relative error of the
    variance within 2e-7 (interpreter, 4096x64: raw lanes 2.6-5.9e-7, shifted 0.7-1.2e-7; torch's CPU ~2.6e-8),
    the mean within 4e-8; a column whose first chunk holds one 1e4 among randn (spread wider than its mean) keeps
    raw lanes: its mean within 1e-6 relative."""
    force("var_mean", **cfg)
    x = randn((4096, 64), torch.float32, device, offset=100.0)
    x[0, 5] = 1e4
    var, mean = tr.var_mean(x, 0)
    ref_var, ref_mean = _ref("var_mean", x, 0)
    var, mean = var.double().cpu(), mean.double().cpu()
    keep = torch.arange(64) != 5
    assert ((var - ref_var)[keep].norm() / ref_var[keep].norm()).item() <= 2e-7
    assert ((mean - ref_mean)[keep].norm() / ref_mean[keep].norm()).item() <= 4e-8
    assert abs(mean[5] - ref_mean[5]).item() <= 1e-6 * abs(ref_mean[5]).item()
    assert abs(var[5] - ref_var[5]).item() <= 1e-5 * ref_var[5].item()


@pytest.mark.parametrize(("rows", "cfg", "shift"), [
    (4096, dict(strategy="multi_pass", BLOCK_N=32, BLOCK_K=64), True),  # 128 chunks
    (256, dict(strategy="multi_pass", BLOCK_N=32, BLOCK_K=64), False),  # 8 chunks
    (4096, dict(strategy="split", BLOCK_N=32, BLOCK_K=64, split=4), True),  # 32 chunks a slice
    (4096, dict(strategy="split", BLOCK_N=32, BLOCK_K=64, split=16), False)],  # 8
    ids=str)
def test_float32_columns_shift_only_long_sweeps(rows, cfg, shift, force, device, launch_spy):
    """The columns' shift where a program sweeps at least ``SHIFT_SWEEP`` chunks (``statistics.launch``: a short
    sweep rounds little and its first chunk, read twice, is a large part of it); float32 only; either way within
    the raw lanes' error of float64 at 100 sigma (2e-6 on these sizes)."""
    force("var", **cfg)
    for dtype in (torch.float32, torch.float16):
        x = randn((rows, 48), dtype, device, offset=100.0)
        launch_spy.clear()
        out = tr.var(x, 0)
        name, kwargs = launch_spy[0]
        assert name == "_stats_cols_kernel" and kwargs["SHIFT"] == (shift and dtype == torch.float32), (name, dtype)
        ref = _ref("var", x, 0)
        assert ((out.double().cpu() - ref).norm() / ref.norm()).item() <= (2e-6 if dtype == torch.float32 else 2e-3)


@pytest.mark.parametrize("n", [1024, 2048, 4096, 8192])
@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
def test_wide_float32_rows_in_the_built_in_h200_tiles(name, n, force, device):
    """The configs the built-in gives float32 rows of 1024-8192 on an H200 (``rules.wide_rows``: one row on
    N / 256 warps, or two on 16), forced here so that the interpreter and the GPU alike run them: an odd row count
    (the last two-row tile half empty), rows far from 0, a NaN, against float64 torch."""
    from tritred_core import Problem

    cfg = h200_config(Problem(op=name, dtype="float32", M=65536, N=n, K=1, stride_m=n, stride_n=1, stride_k=1))
    assert cfg.decided_by == "tritred_ops" and cfg.num_warps in (4, 8, 16), cfg
    force(name, **cfg.launch_fields())
    x = randn((5, n), torch.float32, device, scale=3.0)
    x[1] += 1e3
    x[3, n // 2] = float("nan")
    out = getattr(tr, name)(x, -1)
    ref = getattr(torch, name)(x.double().cpu(), -1)
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        assert o.dtype == torch.float32 and o.shape == (5,)
        assert torch.equal(o.isnan().cpu(), r.isnan()), (n, o)
        for i in range(5):  # each row against its own scale (the row at 1e3: its mean's)
            scale = 2 * max(abs(r[i].item()) if r[i] == r[i] else 1.0, 1.0) + (1e3 if i == 1 else 0.0)
            assert_close(o[i : i + 1], r[i : i + 1], n=n, scale=scale, what=f"{name} {n} row {i} {cfg}")
