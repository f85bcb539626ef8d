"""sum, mean, prod, amax, amin: values vs an fp64 reference on every layout and every dispatch branch."""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import LAYOUTS, assert_close, randn, seed

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

# (shape, dim): inner (dim=-1), outer (dim=0), middle, tuples, full.
CASES = [
    ((7, 33), -1), ((7, 33), 0), ((5, 300), 1), ((300, 6), 0), ((3, 37, 10), 1), ((4, 6, 9), (0, 2)),
    ((2, 3, 4, 5), (1, 3)), ((1000,), None), ((6, 70), None), ((3, 4, 5), ()), ((1, 129), 1), ((9, 1), 1),
]


def _ref(name, x, dim, keepdim=False):
    xd = x.double() if x.dtype.is_floating_point else x
    if name in ("amax", "amin"):
        return getattr(torch, name)(xd, dim=() if dim is None else dim, keepdim=keepdim)
    if dim is None:
        return getattr(torch, name)(xd)
    if name == "prod":
        return torch.prod(xd, dim, keepdim=keepdim)
    return getattr(torch, name)(xd, dim, keepdim=keepdim)


def _call(name, x, dim, keepdim=False, **kw):
    fn = getattr(tr, name)
    if name in ("amax", "amin"):
        return fn(x, () if dim is None else dim, keepdim)
    if dim is None:
        return fn(x, **kw)
    return fn(x, dim, keepdim, **kw)


def _inputs(name, shape, dtype, device, layout):
    if name == "prod":  # keep products finite: values near 1
        return randn(shape, dtype, device, layout, scale=0.05, offset=1.0)
    return randn(shape, dtype, device, layout)


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin"])
@pytest.mark.parametrize("shape,dim", CASES)
def test_float_ops_match_fp64(name, shape, dim, device):
    if name == "prod" and not isinstance(dim, (int, type(None))):
        pytest.skip("torch.prod takes one int dim")
    for dtype in FLOAT_DTYPES:
        x = _inputs(name, shape, dtype, device, "contiguous")
        out = _call(name, x, dim)
        ref = _ref(name, x, dim)
        assert out.dtype == _call_torch_dtype(name, x, dim)
        n = max(x.numel() // max(out.numel(), 1), 1)
        assert_close(out, ref, n=n, scale=2.0 if name != "sum" else n ** 0.5, what=f"{name} {shape} {dim} {dtype}")


def _call_torch_dtype(name, x, dim):
    return _ref(name, x, dim).dtype if not x.dtype.is_floating_point else x.dtype


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "prod"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1, -1, (0, 2), None])
def test_layouts(name, layout, dim, device):
    if name == "prod" and isinstance(dim, tuple):
        pytest.skip("torch.prod takes one int dim")
    x = _inputs(name, (6, 5, 40), torch.float32, device, layout)
    out = _call(name, x, dim)
    assert_close(out, _ref(name, x, dim), n=240, scale=4.0, what=f"{name} {layout} {dim}")


@pytest.mark.parametrize("keepdim", [False, True])
def test_keepdim_shapes(keepdim, device):
    x = randn((3, 4, 5), torch.float32, device)
    for dim in (0, 1, 2, -1, (0, 2), (0, 1, 2)):
        assert tr.sum(x, dim, keepdim).shape == x.sum(dim, keepdim).shape
        assert tr.amax(x, dim, keepdim).shape == x.amax(dim, keepdim).shape


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin"])
def test_integer_and_bool(name, dtype, device):
    for shape, dim in (((5, 37), 1), ((40, 3), 0), ((300,), None)):
        x = randn(shape, dtype, device)
        if name == "prod":
            x = x.clamp(-2, 2) if dtype != torch.bool else x
        ref = _ref(name, x.cpu(), dim)
        out = _call(name, x, dim)
        assert out.dtype == ref.dtype, (name, dtype)
        assert torch.equal(out.cpu(), ref), (name, dtype, shape, dim)


def test_integer_promotion_past_narrow_range(device):
    x = torch.full((1000,), 100, dtype=torch.int8, device=device)
    assert tr.sum(x).item() == 100_000 and tr.sum(x).dtype == torch.int64
    b = torch.ones(700, dtype=torch.bool, device=device)
    assert tr.sum(b).item() == 700
    assert tr.sum(x, dtype=torch.int8).item() == torch.sum(x.cpu(), dtype=torch.int8).item()


def test_half_accumulates_in_fp32(device):
    # an fp16 accumulator stalls at 2048 (2048 + 1 rounds back to 2048)
    x = torch.ones(5000, dtype=torch.float16, device=device)
    assert tr.sum(x).item() == 5000
    assert tr.sum(x.view(50, 100), 1).eq(100).all()


def test_dtype_argument(device):
    x = randn((6, 50), torch.float16, device)
    out = tr.sum(x, 1, dtype=torch.float32)
    assert out.dtype == torch.float32
    assert_close(out, x.double().sum(1), n=50, what="sum dtype=float32")
    m = tr.mean(torch.arange(12, device=device).view(3, 4), 1, dtype=torch.float64)
    assert m.dtype == torch.float64 and torch.equal(m.cpu(), torch.arange(12).view(3, 4).double().mean(1))


# -- every dispatch branch, forced through a plugin ---------------------------------------------------------------

ROW_CONFIGS = [
    dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128, num_warps=2),
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16, num_warps=1),
    dict(strategy="split", BLOCK_M=1, BLOCK_N=16, split=3),
    dict(strategy="split", BLOCK_M=2, BLOCK_N=8, split=64),  # more slices asked than chunks: 13 of one chunk each
    dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128, num_programs=2, num_stages=2),  # persistent: 3 blocks
    # num_stages of a loop: whole chunks per iteration, unrolled, then the rest one by one (rows of 160: no shift,
    # 10 chunks, not unrolled whole; 3 x 48 + 16; split: slices of 56, 56, 48 = 3 x 16 + 8, 3 x 16 + 8, 3 x 16)
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16, num_warps=1, num_stages=3),
    dict(strategy="split", BLOCK_M=1, BLOCK_N=8, split=3, num_stages=2),
]
COL_CONFIGS = [
    dict(strategy="single_pass", BLOCK_N=128, BLOCK_K=4),
    dict(strategy="multi_pass", BLOCK_N=8, BLOCK_K=8),
    dict(strategy="split", BLOCK_N=8, BLOCK_K=4, split=5),
    # num_stages: tiles loaded per iteration (the last iteration of a slice partly past its end, or past N)
    dict(strategy="multi_pass", BLOCK_N=4, BLOCK_K=8, num_stages=3),
    dict(strategy="split", BLOCK_N=4, BLOCK_K=4, split=3, num_stages=4),
]


@pytest.mark.triton_compat
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin"])
@pytest.mark.parametrize("cfg", ROW_CONFIGS,
                         ids=lambda c: f"rows-{c['strategy']}-{c.get('split', 1)}-p{c.get('num_programs', 0)}"
                                       f"-s{c.get('num_stages', 1)}")
def test_row_branches(name, cfg, force, device):
    force(name, **cfg)
    loop_part = cfg["strategy"] != "single_pass" and cfg.get("num_stages", 1) > 1
    x = _inputs(name, (5, 160 if loop_part else 100), torch.float32, device, "contiguous")
    assert_close(_call(name, x, 1), _ref(name, x, 1), n=100, scale=10, what=f"{name} {cfg}")
    # ints take the same paths with int64 accumulation; values whose answer a padded lane holding 0 (not the
    # operation's identity) would change: all-negative rows for amax, all-positive for amin, +-1 for prod
    if name != "mean":
        xi = _identity_input(name, (5, 100), torch.int32, device)
        assert torch.equal(_call(name, xi, 1).cpu(), _ref(name, xi.cpu(), 1))


def _identity_input(name, shape, dtype, device):
    """Integers of ``shape`` whose reduction by ``name`` a 0 in a padded lane would change."""
    g = torch.Generator().manual_seed(seed())
    mag = torch.randint(1, 100 if dtype != torch.int8 else 60, shape, generator=g)
    if name == "amax":
        x = -mag
    elif name == "prod" and dtype == torch.uint8:  # (no -1: mostly 1s, a few 2s, the product well in int64)
        x = torch.where(torch.rand(shape, generator=g) < 0.03, 2, 1)
    elif name == "prod":
        x = torch.where(torch.rand(shape, generator=g) < 0.5, -1, 1)
    else:  # amin (and sum): all positive
        x = mag
    return x.to(dtype).to(device)


@pytest.mark.triton_compat
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin"])
@pytest.mark.parametrize("cfg", COL_CONFIGS, ids=lambda c: f"cols-{c['strategy']}-s{c.get('num_stages', 1)}")
def test_col_branches(name, cfg, force, device):
    force(name, **cfg)
    x = _inputs(name, (100, 13), torch.float32, device, "contiguous")
    assert_close(_call(name, x, 0), _ref(name, x, 0), n=100, scale=10, what=f"{name} {cfg}")
    x3 = _inputs(name, (3, 50, 7), torch.bfloat16, device, "contiguous")
    assert_close(_call(name, x3, 1), _ref(name, x3, 1), n=50, scale=10, what=f"{name} 3d {cfg}")


def test_bfloat16_outputs_round_to_nearest_even(device):
    """A bfloat16 sum is its float32 sum rounded to nearest even, as torch rounds: sums of multiples of 1/64 are
    exact in float32 and fall between bfloat16 values, ties among them (on the CPU the harness converts as the GPU
    does: the interpreter truncates, conftest.bfloat16_rounds_to_nearest)."""
    g = torch.Generator().manual_seed(seed())
    x = (torch.randint(-256, 256, (64, 8), generator=g) / 64).to(torch.bfloat16)
    out = tr.sum(x.to(device), 1).cpu()
    ref = x.double().sum(1).to(torch.bfloat16)
    assert torch.equal(out, ref), (out - ref).nonzero()


@pytest.mark.parametrize("in_order_bytes", [0, None])
def test_gathered_layout(in_order_bytes, device, caplog, monkeypatch):
    # dims (0, 2) of a tensor sliced in two dims: no reduced dim can go first with the others' kept dims as two
    # strided axes, so the input is gathered (one copy, logged); still exact. Its own order merges nothing either:
    # the permuted copy, whatever the size
    if in_order_bytes is not None:
        from tritred_ops.runtime import view as view_module

        monkeypatch.setattr(view_module, "IN_ORDER_BYTES", in_order_bytes)
    x = randn((6, 7, 8, 9, 10), torch.float32, device)[:, ::2, :, ::3, :]
    with caplog.at_level("DEBUG", logger="tritred"):
        out = tr.sum(x, (0, 2))
    messages = [r.getMessage() for r in caplog.records if "gathered" in r.getMessage()]
    assert messages and not any("in order" in m for m in messages)
    assert_close(out, x.double().sum((0, 2)), n=48, scale=7, what="gathered")


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape,dims", [((5, 6, 7, 9), (0, 2, 3)), ((3, 4, 5, 6, 7), (0, 2, 4)),
                                        ((3, 4, 5, 6, 7), (0, 1, 3)), ((6, 33, 10), (0, 2))])
def test_reduced_dims_that_are_not_one_axis_go_in_stages(name, dtype, shape, dims, device, caplog):
    """Per-channel sums of NCHW (dims 0, 2, 3) and the like: one launch per group of dims through temporaries, no
    gather copy; NaN propagates through the stages, mean divides once by the whole count."""
    x = randn(shape, dtype, device, offset=0.5)
    x.view(-1)[7] = float("nan")
    for keepdim in (False, True):
        with caplog.at_level("DEBUG", logger="tritred"):
            out = _call(name, x, dims, keepdim)
        assert not any("gathered" in r.getMessage() for r in caplog.records)
        assert out.dtype == dtype
        n = 1
        for d in dims:
            n *= shape[d]
        assert_close(out, _ref(name, x, dims, keepdim), n=n, scale=2, what=f"{name} {shape} {dims}")


def test_staged_integer_sum_and_mean_dtype(device):
    x = torch.randint(-9, 9, (4, 5, 6, 7), dtype=torch.int32, device=device)
    out = tr.sum(x, (0, 2, 3))
    assert out.dtype == torch.int64 and torch.equal(out.cpu(), x.cpu().sum((0, 2, 3)))
    mean = tr.mean(x, (1, 3), dtype=torch.float64)
    assert mean.dtype == torch.float64 and torch.allclose(mean.cpu(), x.cpu().double().mean((1, 3)))


def test_nan_propagates(device):
    x = randn((4, 50), torch.float32, device)
    x[1, 7] = float("nan")
    x[2, 49] = float("nan")
    for name in ("sum", "mean", "prod", "amax", "amin"):
        out = _call(name, x, 1).cpu()
        assert out[1].isnan() and out[2].isnan() and not out[0].isnan() and not out[3].isnan(), name
    assert tr.amax(x).isnan() and tr.max(x).isnan()


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
@pytest.mark.parametrize("name", ["amax", "amin", "prod"])
def test_integer_masked_lanes_hold_identity(name, dtype, device):
    """Integer rows and columns of non-power-of-two lengths whose answer a padded lane holding 0 would change
    (uint8 amin: all positive; signed amax: all negative; prod: +-1, uint8 1s and 2s), over the row, column and
    flat kernels."""
    if dtype == torch.uint8 and name == "amax":
        pytest.skip("uint8 has no negative values: a padded 0 never wins amax")
    for shape, dim in (((3, 37), 1), ((37, 3), 0), ((5, 7, 9), 1), ((300,), None), ((3, 1000), 1)):
        x = _identity_input(name, shape, dtype, device)
        out, ref = _call(name, x, dim), _ref(name, x.cpu(), dim)
        assert out.dtype == ref.dtype and torch.equal(out.cpu(), ref), (name, dtype, shape, dim)
    if name == "prod":  # bool rows mostly True: some all True (prod 1), some not
        b = torch.rand((64, 23), generator=torch.Generator().manual_seed(seed())) > 0.03
        assert torch.equal(tr.prod(b.to(device), 1).cpu(), torch.prod(b, 1))


def test_masked_lanes_hold_identity(device):
    # all-negative rows of non-power-of-two length: a 0 in a padded lane would win amax
    x = -randn((3, 37), torch.float32, device).abs() - 1
    assert torch.equal(tr.amax(x, 1).cpu(), x.cpu().amax(1))
    assert torch.equal(tr.amin(-x, 1).cpu(), (-x).cpu().amin(1))
    y = torch.full((3, 37), 3.0, device=device)
    assert torch.equal(tr.prod(y[:, :5], 1).cpu(), torch.full((3,), 243.0))


def test_empty(device):
    e = torch.empty(0, 3, device=device)
    assert torch.equal(tr.sum(e, 0).cpu(), torch.zeros(3))
    assert torch.equal(tr.prod(e, 0).cpu(), torch.ones(3))
    assert tr.mean(e).isnan()
    assert tr.amax(e, 1).shape == (0,)
    with pytest.raises(IndexError, match="amax"):
        tr.amax(e, 0)
    with pytest.raises(RuntimeError, match="amax"):
        tr.amax(e)


def test_zero_dim(device):
    s = torch.tensor(2.5, device=device)
    assert tr.sum(s).item() == 2.5 and tr.sum(s, 0).item() == 2.5 and tr.amax(s, -1).item() == 2.5
    assert tr.sum(s).shape == ()


def test_does_not_mutate_input(device):
    x = randn((5, 33), torch.float32, device, "transposed")
    before = x.clone()
    tr.sum(x, 0), tr.amax(x, 1), tr.prod(x, 1)
    assert torch.equal(x, before)


def test_deterministic(device):
    x = randn((3, 5000), torch.float32, device)
    a = [tr.sum(x, 1) for _ in range(3)] + [tr.sum(x) for _ in range(3)]
    assert all(torch.equal(a[0], t) for t in a[1:3]) and all(torch.equal(a[3], t) for t in a[4:])


@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128),
                                 dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
                                 dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=16, split=3)], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin"])
def test_rows_off_16_byte_boundaries(name, cfg, force, device, launch_spy):
    """Odd row strides take the shifted (ALIGN) tiles, a split's slices each shifted as a row of their own (slices
    of 48, 48 and 5 of a 101-wide row); an unaligned base does not. Loops: the head chunk and the tail masked, the
    chunks between unmasked (4-wide chunks: fp32 ones, not bf16's 8-element shift); a NaN inside an inner chunk
    propagates."""
    if cfg is not None:
        force(name, **cfg)
    base = _inputs(name, (7, 123), torch.bfloat16, device, "contiguous")
    for x in (base[:, :101], base[:, 5:106], _inputs(name, (6, 77), torch.float32, device, "contiguous")):
        launch_spy.clear()
        assert_close(_call(name, x, 1), _ref(name, x, 1), n=101, scale=2, what=f"{name} {x.shape} {x.stride()}")
        if cfg is not None and cfg["strategy"] == "split" and x.data_ptr() % 16 == 0:
            assert launch_spy[0][1]["ALIGN"] == 16 // x.element_size(), launch_spy[0]
        z = x.clone()  # (rows of 101 or 77: still off 16-byte boundaries)
        z[3, 41] = float("nan")
        out = _call(name, z, 1).cpu().double()
        ref = _ref(name, z, 1).cpu().double()
        assert torch.equal(out.isnan(), ref.isnan()), (name, tuple(z.shape))


@pytest.mark.parametrize("chunks", [2, 5, 8, 9])
@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax"])
def test_rows_of_a_few_whole_chunks_unroll_the_loop(name, chunks, force, device, unroll_spy):
    """Rows of 2-8 whole chunks take the unrolled loop (9 the rolled one); odd row counts leave the last
    program's second row out of range."""
    from tritred_ops import runtime as C
    force(name, strategy="multi_pass", BLOCK_M=2, BLOCK_N=16)
    x = randn((5, 16 * chunks), torch.bfloat16, device)
    if name == "prod":
        x = (x.float().abs() * 0.2 + 0.9).to(torch.bfloat16)  # (a product that stays in range)
    out = getattr(tr, name)(x, -1)
    assert unroll_spy == [chunks if chunks <= C.UNROLL_CHUNKS else 0]
    assert_close(out, _ref(name, x.cpu(), -1), n=16 * chunks, what=f"{name} {chunks}")


def test_dependent_launch_only_on_hopper_and_later(monkeypatch):
    """Programmatic dependent launch (griddepcontrol) exists from sm_90: older GPUs and the interpreter get a
    plain launch (no option), an sm_90 device the kernel's wait and the launcher's flag."""
    from tritred_core.testing import FAKE_H200
    from tritred_ops.runtime import device as C

    assert C.dependent_launch(torch.device("cpu")) == {}
    monkeypatch.setattr(C, "device_info", lambda d: FAKE_H200.model_copy(update={"compute_capability": (8, 0)}))
    assert C.dependent_launch(torch.device("cuda", 0)) == {}
    monkeypatch.setattr(C, "device_info", lambda d: FAKE_H200)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # (the interpreter runs no inline assembly, even on CUDA tensors)
    assert C.dependent_launch(torch.device("cuda", 0)) == {}
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.version, "hip", "6.2")  # (ROCm names its devices cuda too: no griddepcontrol)
    assert C.dependent_launch(torch.device("cuda", 0)) == {}
    monkeypatch.setattr(torch.version, "hip", None)
    assert C.dependent_launch(torch.device("cuda", 0)) == {"WAIT": True, "launch_pdl": True}


@pytest.mark.parametrize(("op", "shape", "dim", "cfg"), [
    ("sum", (5, 3000), -1, dict(strategy="split", BLOCK_M=2, BLOCK_N=256, split=3)),
    ("amax", (700, 9), 0, dict(strategy="split", BLOCK_N=16, BLOCK_K=16, split=4)),
    ("var", (5, 3000), -1, dict(strategy="split", BLOCK_M=2, BLOCK_N=256, split=3)),
    ("std", (700, 9), 0, dict(strategy="split", BLOCK_N=16, BLOCK_K=16, split=4)),
    ("max", (5, 3000), -1, dict(strategy="split", BLOCK_M=2, BLOCK_N=256, split=3)),
    ("var", (2, 4, 8, 8), (0, 2, 3), None),  # two reduced axes: per-row partials, then the merge
])
def test_split_merge_is_the_dependent_launch(op, shape, dim, cfg, force, wait_spy, device):
    """A split's merge launch, and only it, takes the dependent-launch options (it reads the partials that the
    launch before it wrote); the result is the plain launches'."""
    if cfg is not None:
        force(op, **cfg)
    x = randn(shape, torch.float32, device)
    plain = getattr(tr, op)(x, dim)
    seen = wait_spy()
    out = getattr(tr, op)(x, dim)
    assert seen == [None, False], seen
    for a, b in zip(out if op == "max" else (out,), plain if op == "max" else (plain,), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["sum", "amax", "max", "var_mean", "logsumexp"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("in_order", [True, False])
def test_middle_dim_of_a_sliced_view_is_gathered(name, keepdim, in_order, device, caplog, monkeypatch):
    """dim=1 of NCHW rows sliced from wider ones (W 5 of 16): H and W make no single strided axis, so the input is
    copied: in its own order from ``IN_ORDER_BYTES`` (a copy at copy speed, then the column kernels), else kept
    dims first (then the row kernels); every family that gathers (plain, arg, statistics, logsumexp) gives
    torch's result either way."""
    from tritred_ops.runtime import view as view_module

    monkeypatch.setattr(view_module, "IN_ORDER_BYTES", 0 if in_order else 1 << 40)
    x = randn((3, 37, 4, 16), torch.float32, device, offset=0.25)[..., :5]
    x[1, 7, 2, 3] = float("nan")
    with caplog.at_level("DEBUG", logger="tritred"):
        out = getattr(tr, name)(x, 1, keepdim=keepdim)
    messages = [r.getMessage() for r in caplog.records if "gathered" in r.getMessage()]
    assert messages and all(("in order" in m) == in_order for m in messages), messages
    xd = x.double()
    ref = torch.max(xd, 1, keepdim) if name == "max" else getattr(torch, name)(xd, 1, keepdim=keepdim)
    outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    for o, r in zip(outs, refs):
        assert o.shape == r.shape
        if o.dtype == torch.int64:
            assert torch.equal(o.cpu(), r.cpu())
        else:
            assert_close(o, r, n=37, scale=4, what=name)


def test_gathered_in_order_from_32_mib():
    """The copy's order by size (meta tensors, nothing allocated): dim=1 of a sliced view, 32 MiB and more in the
    input's own order (the reduced axis then strides over H*W: column kernels), less kept dims first (rows)."""
    from tritred_ops.runtime.view import IN_ORDER_BYTES, gathering

    for rows, in_order in ((-(-IN_ORDER_BYTES // (2 * 256 * 28 * 28)), True), (2, False)):
        x = torch.empty((rows, 256, 28, 64), dtype=torch.bfloat16, device="meta")[..., :28]
        assert (x.numel() * 2 >= IN_ORDER_BYTES) == in_order
        out = torch.empty((rows, 28, 28), dtype=torch.bfloat16, device="meta")
        src, view, layout = gathering("amax", x, (1,), out, False)
        assert layout == "gathered" and src.is_contiguous()
        assert (view.N, view.strides[0][1]) == (256, 28 * 28 if in_order else 1), (rows, view)
