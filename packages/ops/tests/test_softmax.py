"""softmax, log_softmax, logsumexp: fp64 references, inf/NaN rows, huge logits, every branch."""

from __future__ import annotations

import logging

import pytest
import torch
import tritred_ops as tr
from ops_helpers import LAYOUTS, assert_close, config_id, randn

INF = float("inf")
CONFIGS = [
    None,
    dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128),
    dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
    dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128, num_programs=2, num_stages=2),  # persistent rows
    dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=32, num_programs=3),
    dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=64, num_warps=32),  # 1024-thread loop: registers capped at 32
    dict(strategy="single_pass", BLOCK_N=128, BLOCK_K=4),
    dict(strategy="multi_pass", BLOCK_N=8, BLOCK_K=4),
    dict(strategy="split", BLOCK_N=32, split=4),  # split rows: 4 programs of 32 per row (a short 4th)
    dict(strategy="split", BLOCK_N=16, split=7),  # 7 programs (partials padded to 8); 5-wide rows: one program
]


def _ref(name, x, *args, **kwargs):
    return getattr(torch, name)(x.double().cpu(), *args, **kwargs)


@pytest.mark.triton_compat
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_branches(name, cfg, force, device):
    if cfg is not None:
        force(name, **cfg)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = randn((5, 100), dtype, device, scale=3)
        for dim in (1, 0):
            xx = x if dim == 1 else x.t().contiguous()
            out = getattr(tr, name)(xx, dim)
            assert out.dtype == dtype
            assert_close(out, _ref(name, xx, dim), n=8, scale=4, what=f"{name} {dtype} {dim}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_and_dims(name, layout, device):
    x = randn((4, 6, 33), torch.float32, device, layout)
    for dim in (0, 1, 2, -1):
        assert_close(getattr(tr, name)(x, dim), _ref(name, x, dim), n=8, scale=4, what=f"{name} {layout} {dim}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_output_is_contiguous_as_torch(name, device):
    """torch returns a contiguous output whatever the input's layout (H200, torch 2.11: a transposed 4x21 input
    gives strides (21, 1)); outputs poisoned with NaN first, so that an element left unwritten shows."""
    base = randn((3, 4, 5, 6), torch.float32, device)  # (small: every dim of four layouts under the interpreter)
    inputs = {"transposed": base[0].transpose(0, 2), "permuted": base.permute(2, 0, 3, 1),
              "channels_last": base.contiguous(memory_format=torch.channels_last),
              "sliced_transposed": base[:, :, 1:6].transpose(-1, -2)}
    for what, x in inputs.items():
        for dim in range(-x.dim(), x.dim()):
            torch.empty(x.numel() * 2, device=device).fill_(float("nan"))  # (a freed NaN buffer, reused)
            y = getattr(tr, name)(x, dim)
            ref = getattr(torch, name)(x, dim)
            assert y.stride() == ref.stride() and y.is_contiguous(), f"{what} dim={dim}: {y.stride()}"
            assert_close(y, _ref(name, x, dim), n=8, scale=4, what=f"{name} {what} {dim}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_shapes_of_the_vocabulary_and_column_rules(name, device):
    """On a GPU: 50257-wide bf16 rows take the online loop (rows off 16-byte boundaries); dim=0 of a
    matrix of 8192 columns takes 16-column blocks. (Smaller under the interpreter, whose rules differ.)"""
    gpu = device == "cuda"
    x = randn((3, 50257 if gpu else 1001), torch.bfloat16, device, scale=4.0)
    assert_close(getattr(tr, name)(x, -1), _ref(name, x, -1), n=64, scale=8, what=f"{name} {tuple(x.shape)}")
    c = randn((33, 8192 if gpu else 300), torch.float32, device, scale=4.0)
    assert_close(getattr(tr, name)(c, 0), _ref(name, c, 0), n=8, scale=8, what=f"{name} dim=0 {tuple(c.shape)}")


def test_input_without_a_common_view_with_its_output_is_gathered_and_logged(device, caplog):
    x = randn((5, 6, 7, 8), torch.float32, device).permute(2, 0, 3, 1)  # no strided view shared with a contiguous y
    with caplog.at_level(logging.DEBUG, logger="tritred"):
        y = tr.softmax(x, 2)
    assert any("gathered" in r.getMessage() for r in caplog.records)
    assert y.is_contiguous()
    assert_close(y, _ref("softmax", x, 2), n=8, scale=4, what="permuted")


def test_logsumexp_dims(device):
    x = randn((4, 6, 33), torch.float32, device)
    for dim in (0, 2, (0, 2), (1,), (0, 1, 2)):
        for keepdim in (False, True):
            out = tr.logsumexp(x, dim, keepdim)
            assert_close(out, _ref("logsumexp", x, dim, keepdim), n=8, scale=8, what=f"lse {dim} {keepdim}")
    # dim=() reduces every dim, like sum/amax (torch 2.13's logsumexp raises there: a documented difference)
    assert_close(tr.logsumexp(x, ()), _ref("logsumexp", x.flatten(), 0), n=8, scale=8, what="lse ()")


@pytest.mark.parametrize("cfg", [None, dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4),
                                 dict(strategy="split", BLOCK_N=2, split=3)], ids=["single", "online", "split"])
def test_inf_nan_rows(cfg, force, device):
    for name in ("softmax", "log_softmax", "logsumexp"):
        if cfg is not None:
            force(name, **cfg)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0],
                      [-INF, -INF, -INF, -INF, -INF],     # all -inf: NaN softmax, -inf logsumexp
                      [INF, 1.0, 2.0, -INF, 0.0],          # +inf: NaN softmax, +inf logsumexp
                      [1.0, float("nan"), 2.0, 3.0, 4.0],  # NaN propagates
                      [-INF, 0.0, -INF, 1.0, -INF],        # some -inf: zeros there
                      [INF, -INF, -INF, -INF, -INF],
                      [-INF, -INF, -INF, -INF, 2.0]], device=device)  # a first chunk (the loop's) all -inf
    for name in ("softmax", "log_softmax", "logsumexp"):
        out = getattr(tr, name)(x, 1).cpu().double()
        ref = getattr(torch, name)(x.cpu(), 1).double()
        assert torch.equal(out.isnan(), ref.isnan()), (name, out, ref)
        fin = ref.isfinite()
        assert torch.equal(out[~fin & ~ref.isnan()], ref[~fin & ~ref.isnan()]), (name, out, ref)
        assert torch.allclose(out[fin], ref[fin], atol=1e-6), name


@pytest.mark.parametrize("cfg", [dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=8),
                                 dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
                                 dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4)], ids=config_id)
@pytest.mark.parametrize("width", [64, 67, 5])
def test_loop_inner_chunks(width, cfg, force, device):
    """The online loop's chunks inside every row take no element mask (``softmax._chunk_in``): head, inner and
    tail chunks, with and without the shifted tiles of odd widths, rows past the end of the last program's block
    (7 rows on BLOCK_M=2), inf, -inf and NaN in inner chunks, a row whose inner chunks are all -inf, and
    poisoned outputs (every element written)."""
    for name in ("softmax", "log_softmax", "logsumexp"):
        force(name, **cfg)
    x = randn((7, width), torch.float32, device, scale=4)
    if width > 40:
        x[1, 20] = INF
        x[2, 33] = float("nan")
        x[3, 16:48] = -INF           # every inner chunk of the row -inf: its head and tail carry the row
        x[4, :] = -INF
        x[4, 30] = 2.0               # the row's one finite value inside an inner chunk
        x[5, 17] = -INF
    for name in ("softmax", "log_softmax", "logsumexp"):
        for _ in range(2):  # the replayed plan too, on a freed NaN buffer
            torch.empty(8 * x.numel(), device=device).fill_(float("nan"))
            out = getattr(tr, name)(x, 1).cpu().double()
            ref = _ref(name, x, 1)
            assert torch.equal(out.isnan(), ref.isnan()), (name, width)
            fin = ref.isfinite()
            assert torch.equal(out[~fin & ~ref.isnan()], ref[~fin & ~ref.isnan()]), (name, width)
            assert torch.allclose(out[fin], ref[fin], atol=1e-5, rtol=1e-5), (name, width)


def test_huge_logits(device):
    x = randn((3, 300), torch.float32, device) * 1e6
    for name in ("softmax", "log_softmax", "logsumexp"):
        out = getattr(tr, name)(x, -1)
        assert not out.isnan().any(), name
        ref = _ref(name, x, -1)
        assert_close(out, ref, n=8, scale=ref.abs().max().item(), what=name)


def test_dtype_argument(device):
    x = randn((4, 50), torch.float16, device)
    out = tr.softmax(x, -1, dtype=torch.float32)
    assert out.dtype == torch.float32
    assert_close(out, torch.softmax(x.cpu().float().double(), -1), n=4, what="softmax dtype")
    xi = torch.randint(-3, 3, (4, 9), device=device)
    assert_close(tr.log_softmax(xi, 1, dtype=torch.float64), _ref("log_softmax", xi, 1), n=4, what="int dtype")
    assert tr.logsumexp(xi, 1).dtype == torch.float32
    with pytest.raises(NotImplementedError, match="softmax"):
        tr.softmax(xi, 1)


def test_empty_and_scalar(device):
    assert tr.softmax(torch.empty(0, 5, device=device), 1).shape == (0, 5)
    assert torch.equal(tr.logsumexp(torch.empty(3, 0, device=device), 1).cpu(), torch.full((3,), -INF))
    s = torch.tensor(3.0, device=device)
    assert tr.softmax(s, 0).item() == 1.0 and tr.log_softmax(s, -1).item() == 0.0


def test_rows_sum_to_one(device):
    x = randn((7, 257), torch.float32, device, scale=5)
    assert torch.allclose(tr.softmax(x, 1).sum(1).cpu(), torch.ones(7), atol=1e-5)


@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128),
                                 dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
                                 dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=32, num_programs=3)],
                         ids=config_id)
def test_rows_off_16_byte_boundaries(cfg, force, device):
    """Odd row strides take the shifted (ALIGN) tiles; unaligned bases and a dtype= output do not share them."""
    from tritred_core import LaunchConfig
    from tritred_ops import runtime as C
    if cfg is not None:
        force("softmax", **cfg)
        force("log_softmax", **cfg)
        force("logsumexp", **cfg)
    base = randn((7, 123), torch.bfloat16, device, scale=3)
    cases = [(base[:, :101], True),           # row stride 123: every row starts at another shift
             (base[:, 3:104], False),         # data pointer off a 16-byte boundary: no shift
             (randn((6, 77), torch.float32, device), True),
             (randn((6, 77), torch.float64, device), True)]
    for x, shifted in cases:
        view = C.map_view(x, torch.empty_like(x), (1,))[2]
        one_row = LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=128)
        assert bool(C.row_align(x, view, one_row, False)) == shifted
        for name in ("softmax", "log_softmax", "logsumexp"):
            assert_close(getattr(tr, name)(x, 1), _ref(name, x, 1), n=8, scale=4, what=f"{name} {x.shape}")
        out = tr.softmax(x, 1, dtype=torch.float32)  # another element size: the output keeps its own offsets
        assert_close(out, _ref("softmax", x, 1), n=8, scale=4, what="softmax dtype=float32")


@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=1, BLOCK_N=128, num_warps=1),
                                 dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128),
                                 dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=32)], ids=config_id)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_unit_stride_rows_of_a_strided_output_are_not_shifted(name, cfg, force, device):
    """A transposed input reduced over its unit-stride dim has rows off 16-byte boundaries, but its (contiguous,
    as torch's) output stores those rows with stride != 1: the tiles must not take the shifted (ALIGN) stores,
    which assume unit-stride output rows (a regression: wrong values and writes past the output). Poisoned
    outputs, three calls (the replayed plan too). (The first case was 101 x 100: 41 x 20 rows are as odd, and
    a fifth of the interpreter's time.)"""
    from tritred_core import LaunchConfig
    from tritred_ops import runtime as C
    if cfg is not None:
        force(name, **cfg)
    cases = [randn((20, 41), torch.float32, device).t(),                     # (41, 20), strides (1, 41)
             randn((7, 5), torch.float32, device).t(),
             randn((1, 5, 4, 4), torch.float32, device).contiguous(memory_format=torch.channels_last),
             randn((9, 77), torch.bfloat16, device, scale=3).t()]
    for x in cases:
        view = C.map_view(x, torch.empty(x.shape, device="meta"), (0 if x.dim() == 2 else 1,))[2]
        assert C.row_align(x, view, LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=128), False) == 0
        for _ in range(3):
            torch.empty(4 * x.numel(), device=device).fill_(float("nan"))  # (a freed NaN buffer, reused)
            dim = 0 if x.dim() == 2 else 1
            y = getattr(tr, name)(x, dim)
            assert y.is_contiguous()
            assert_close(y, _ref(name, x, dim), n=8, scale=4, what=f"{name} {tuple(x.shape)} {x.stride()}")


@pytest.mark.parametrize("cfg", [None, dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16)], ids=config_id)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_shifted_rows_write_every_element(cfg, dtype, force, device):
    """Shifted tiles store whole 16-byte chunks and then the rows' partial edge chunks: rows shorter than a
    chunk, rows starting on and off a boundary, ends on and off one. Freed NaN buffers first, so that an
    element left unwritten shows."""
    if cfg is not None:
        force("softmax", **cfg)
        force("log_softmax", **cfg)
    for shape in ((9, 3), (9, 13), (11, 37), (5, 100)):
        x = randn(shape, dtype, device, scale=3)
        for name in ("softmax", "log_softmax"):
            for _ in range(3):  # recycle NaN-filled blocks of the output's size
                torch.full(shape, float("nan"), dtype=dtype, device=device)
            out = getattr(tr, name)(x, 1)
            assert not out.isnan().any(), f"{name} {shape}: unwritten elements"
            assert_close(out, _ref(name, x, 1), n=8, scale=4, what=f"{name} {shape} {dtype}")


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_split_rows_of_every_layout_and_dtype(name, force, device, monkeypatch):
    """Split rows (programs sharing a row, meeting at a barrier on a GPU, two launches under the interpreter):
    strided, sliced, expanded and transposed inputs whose reduced axis is the rows' (each checked to take the split
    rows), rows whose last program holds one element, integer inputs with ``dtype``, chunks that are all -inf (an
    empty partial), and rows past the first group of programs. The same config on a reduced axis that is not
    the fastest (dim=1; a transposed input's last dim) takes the column kernels: checked for values only."""
    from tritred_ops import runtime as C
    launches = []
    real = C.launch_split_rows
    monkeypatch.setattr(C, "launch_split_rows", lambda *a, **k: launches.append(1) or real(*a, **k))
    force(name, strategy="split", BLOCK_N=32, split=3)
    # (2 x 3 rows of 97: every program of a row, 4 chunks of 32 over 3 programs, the last one short. The column
    # kernels take one program per kept column under this config: one dim=1 case, 9 columns wide, is theirs.)
    cases = [((2, 3, 97), layout, 2) for layout in LAYOUTS]
    cases += [((2, 3, 97), "contiguous", -1), ((2, 3, 9), "contiguous", 1), ((2, 3, 9), "sliced", 1)]
    cases.append(((97, 3, 2), "transposed", 0))  # a transposed input reduced along its unit-stride axis
    for shape, layout, dim in cases:
        x = randn(shape, torch.float32, device, layout, scale=4)
        launches.clear()
        assert_close(getattr(tr, name)(x, dim), _ref(name, x, dim), n=8, scale=4, what=f"{name} {layout} {dim}")
        rows = (dim in (2, -1) and layout != "transposed") or shape == (97, 3, 2)
        assert bool(launches) == rows, f"{name} {layout} dim={dim}: split rows launched {len(launches)}"
    x = randn((3, 65), torch.float32, device, scale=4)
    x[1, :64] = -INF  # two all -inf chunks, then one element
    assert_close(getattr(tr, name)(x, 1), _ref(name, x, 1), n=8, scale=4, what="-inf chunks")
    xi = torch.randint(-5, 5, (3, 70), device=device)
    assert_close(getattr(tr, name)(xi, 1, dtype=torch.float32), _ref(name, xi, 1), n=8, what="int dtype")
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        x = randn((2, 90), dtype, device, scale=3)
        launches.clear()
        assert_close(getattr(tr, name)(x, 1), _ref(name, x, 1), n=8, scale=4, what=f"{dtype}")
        assert launches, f"{dtype}: split rows not launched"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the cooperative launch is compiled only")
def test_split_rows_take_one_cooperative_launch_unless_no_group_fits(force, device, caplog):
    """A group of split programs must be co-resident (one cooperative launch with a barrier per row); a split of
    more programs than the device holds at once takes the two launches instead, and says so."""
    if device != "cuda":
        pytest.skip("GPU test")
    x = randn((300, 5000), torch.float32, device, scale=4)
    force("softmax", strategy="split", BLOCK_N=1024, split=5)
    with caplog.at_level("INFO", logger="tritred"):
        assert_close(tr.softmax(x, 1), _ref("softmax", x, 1), n=8, scale=4, what="cooperative")
    assert "two launches" not in caplog.text
    force("softmax", strategy="split", BLOCK_N=1, split=5000, num_warps=32)  # 5000 programs of 1024 threads
    with caplog.at_level("INFO", logger="tritred"):
        assert_close(tr.softmax(x, 1), _ref("softmax", x, 1), n=8, scale=4, what="two launches")
    assert "two launches" in caplog.text


def test_resident_programs_take_the_drivers_count_where_lower(monkeypatch, force, device):
    """A cooperative grid is sized by the registers, threads and shared memory per SM, lowered to the CUDA driver's
    occupancy where that is smaller (registers are allocated per quarter SM: the division overestimated 2-warp
    programs of 108 registers, and the launch was refused); without a function handle (the interpreter) the driver
    is not asked."""
    from types import SimpleNamespace

    import tritred_ops.runtime.device as C
    from tritred_ops.runtime.caches import caches

    assert C._driver_occupancy(SimpleNamespace(function=0), 64, 0) is None
    if device != "cuda":
        pytest.skip("resident programs are counted for compiled kernels only")
    monkeypatch.setattr(C, "_driver_occupancy", lambda *a: 1)  # a driver that holds one program per SM
    caches().clear()
    counts: list[int] = []
    real = C.resident_programs
    monkeypatch.setattr(C, "resident_programs", lambda *a, **k: counts.append(real(*a, **k)) or counts[-1])
    x = randn((300, 5000), torch.float32, device, scale=4)
    force("softmax", strategy="split", BLOCK_N=1024, split=5)
    assert_close(tr.softmax(x, 1), _ref("softmax", x, 1), n=8, scale=4, what="one program per SM")
    assert counts == [torch.cuda.get_device_properties(x.device).multi_processor_count]


def test_split_rows_never_widen_a_program_past_the_largest_tile():
    """A forced split of too few programs widens them to cover the row, up to Triton's 2**20 elements per tile;
    past that it adds programs (found by the adversarial check: split=1 on a 2**20 + 1 row failed to compile)."""
    from tritred_core import LaunchConfig
    from tritred_ops.runtime import split_row_chunks

    assert split_row_chunks(LaunchConfig(strategy="split", BLOCK_N=1024, split=1), 2**20 + 1) == (2**20, 2)
    assert split_row_chunks(LaunchConfig(strategy="split", BLOCK_N=1024, split=1), 5000) == (8192, 1)
    assert split_row_chunks(LaunchConfig(strategy="split", BLOCK_N=16, split=7), 100) == (16, 7)
    assert split_row_chunks(LaunchConfig(strategy="split", BLOCK_N=8192, split=16), 131072) == (8192, 16)


SPLIT_COLS = [
    dict(strategy="split", BLOCK_N=16, BLOCK_K=8, split=2),
    dict(strategy="split", BLOCK_N=16, BLOCK_K=32, split=5),  # 5 slices, partials padded to 8
    dict(strategy="split", BLOCK_N=8, BLOCK_K=8, split=13, num_warps=1),  # 9 slices, a short last one
]


@pytest.mark.parametrize(("name", "cfg"), [("softmax", c) for c in SPLIT_COLS]
                         + [("log_softmax", SPLIT_COLS[1]), ("logsumexp", SPLIT_COLS[2])],
                         ids=lambda v: v if isinstance(v, str) else config_id(v))
def test_split_columns(name, cfg, force, device, launch_spy):
    """Columns split along N (a partial (max, sum of exp) per slice, then a launch that merges them and writes
    its slice in reverse launch order): every slice, column block edge and non-finite column against float64.
    Each call is checked to launch the split column kernels (and the merge launch past ``MERGE_INLINE`` slices:
    the 9 of split=13). Every slice count with softmax; log_softmax and logsumexp (the same kernels, another
    output) on one each: test_split_columns_merge_launch and test_split_columns_write_in_a_dependent_launch run
    all three names on the others. (The same config on a unit-stride reduced axis takes the split rows:
    test_split_rows_of_every_layout_and_dtype.)"""
    force(name, **cfg)
    merge = cfg["split"] > 9  # (9 slices of 16 rows: more than MERGE_INLINE's 8)
    for dtype in (torch.float32, torch.bfloat16):
        x = randn((3, 130, 21), dtype, device, scale=4)
        x[0, :, 1] = -INF  # an all -inf column: NaN (softmax), -inf (logsumexp)
        x[1, 100, 2] = float("nan")  # NaN in a late slice
        x[2, 7, 3] = INF  # +inf in the first slice
        x[2, 110:, 4] = -INF  # the last slices all -inf: their partials merge as empty
        x[1, 120, 5] = 1e4  # a maximum in the last slice far above the others
        for dim, xx in ((1, x), (0, x[1])):
            torch.empty(x.numel() * 2, device=device).fill_(float("nan"))  # (a freed NaN buffer, reused)
            launch_spy.clear()
            out = getattr(tr, name)(xx, dim)
            kernels = [k for k, _ in launch_spy]
            assert kernels == ["_cols_part_kernel", *(["_cols_merge_kernel"] if merge else []), "_cols_emit_kernel"]
            assert_close(out, _ref(name, xx, dim), n=130, scale=8, what=f"{name} {dtype} dim={dim} {cfg}")


@pytest.mark.parametrize("cfg", [dict(strategy="split", BLOCK_N=16, BLOCK_K=1, split=5),  # partials merged inline
                                 dict(strategy="split", BLOCK_N=8, BLOCK_K=1, split=13, num_warps=1)],  # merge launch
                         ids=config_id)
def test_logsumexp_few_long_rows_split(cfg, force, device, launch_spy):
    """logsumexp's few long rows (``softmax.rules.few_rows_split``) take the split columns' kernels, a row as a
    column of K = 1: partial (max, sum of exp) per slice, merged by the writing launch (or a merge launch past
    ``MERGE_INLINE`` slices). Every slice, an all -inf row, +inf, NaN, a maximum in the last slice, a strided row, and
    the 1-row call the rule gives under the interpreter, against float64."""
    force("logsumexp", **cfg)
    merge = cfg["split"] > 9
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = randn((6, 301), dtype, device, scale=4)
        x[0] = -INF  # -inf, as torch
        x[1, 250] = INF
        x[2, 290] = float("nan")  # NaN in the last slice
        x[3, 299] = 1e4  # a maximum far above the rest, in the last slice
        x[4, :200] = -INF  # the first slices all -inf: their partials merge as empty
        for xx in (x, x[:, ::2], x[1:2]):
            launch_spy.clear()
            out = tr.logsumexp(xx, 1)
            kernels = [k for k, _ in launch_spy]
            assert kernels == ["_cols_part_kernel", *(["_cols_merge_kernel"] if merge else []), "_cols_emit_kernel"]
            assert_close(out, _ref("logsumexp", xx, 1), n=301, scale=8, what=f"{dtype} {tuple(xx.stride())}")


def test_logsumexp_one_long_row_takes_the_split_unforced(device, launch_spy):
    """One row past the single pass (256 elements under the interpreter, 32768 on a GPU) is fewer rows than the SMs:
    the built-in rule splits it."""
    n = 40000 if device == "cuda" else 5000
    x = randn((1, n), torch.float32, device, scale=3)
    out = tr.logsumexp(x, -1)
    assert launch_spy[0][0] == "_cols_part_kernel", launch_spy
    assert_close(out, _ref("logsumexp", x, -1), n=n, scale=4, what="one row")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_split_columns_merge_launch(name, force, wait_spy, device, monkeypatch):
    """Past ``MERGE_INLINE`` slices each column's partials are merged once, by a launch of their own between the
    two (a dependent launch, as the writing one), which then read one pair per column; up to it, the writing
    programs merge them. Both give torch's result, on columns whose maxima sit in different slices."""
    from tritred_ops.families.softmax import launch as S
    x = randn((130, 21), torch.float32, device, scale=4)
    x[:, 1] = -INF  # an all -inf column: NaN (softmax), -inf (logsumexp), as torch
    x[100, 2] = 1e3  # the maximum in a late slice
    x[:40, 3] = -INF  # the first slices of a column all -inf: their partials merge as empty
    x[5, 4] = float("nan")
    force(name, **SPLIT_COLS[2])  # 9 slices
    ref = _ref(name, x, 0)
    outs = {}
    for inline, launches in ((9, [None, False]), (8, [None, False, False])):
        monkeypatch.setattr(S, "MERGE_INLINE", inline)
        seen = wait_spy()
        outs[inline] = getattr(tr, name)(x, 0)
        assert seen == launches, (inline, seen)
        assert_close(outs[inline], ref, n=130, scale=8, what=f"{name} MERGE_INLINE={inline}")
    torch.testing.assert_close(outs[8], outs[9], rtol=1e-6, atol=1e-6, equal_nan=True)  # the same partials merged


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_split_columns_write_in_a_dependent_launch(name, force, wait_spy, device):
    """The split columns' second launch reads the partials the first one wrote: it, and only it, is a dependent
    launch (``runtime.dependent_launch``); the unsplit column launch is plain."""
    x = randn((130, 21), torch.float32, device)
    force(name, **SPLIT_COLS[0])
    seen = wait_spy()
    assert_close(getattr(tr, name)(x, 0), _ref(name, x, 0), n=130, scale=8, what=name)
    assert seen == [None, False], seen
    force(name, **{**SPLIT_COLS[0], "split": 1})
    seen = wait_spy()
    getattr(tr, name)(x, 0)
    assert seen == [None], seen
