"""batch_norm: training/eval, running stats, 2-D to 5-D, channels-last, errors; vs torch in fp64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn


def _params(c, device, dtype=torch.float32):
    rm = randn((c,), dtype, device)
    rv = randn((c,), dtype, device).abs() + 0.5
    return rm, rv, randn((c,), dtype, device), randn((c,), dtype, device)


def _run(x, training, momentum=0.1, affine=True, running=True, eps=1e-5, y_scale=8.0):
    c = x.shape[1]
    # torch's dtype rule: parameters in the input's dtype, or float32 beside a half/bfloat16 input
    rm, rv, w, b = _params(c, x.device, x.dtype if x.dtype == torch.float64 else torch.float32)
    if not affine:
        w = b = None
    if not running:
        rm = rv = None
    d = lambda t: None if t is None else t.double().cpu().clone()  # noqa: E731
    rm_ref, rv_ref = d(rm), d(rv)
    ref = F.batch_norm(x.double().cpu(), rm_ref, rv_ref, d(w), d(b), training, momentum, eps)
    before = x.clone()
    out = tr.batch_norm(x, rm, rv, w, b, training, momentum, eps)
    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True, msg="input mutated")
    assert out.dtype == x.dtype and out.shape == x.shape
    n = x.numel() // c
    assert_close(out, ref, n=16, scale=y_scale, what=f"y {tuple(x.shape)} training={training}")
    if running:
        assert_close(rm, rm_ref, n=n, scale=2, what="running_mean")
        assert_close(rv, rv_ref, n=n, scale=4, what="running_var")
    return out


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 17), (2, 5, 6, 7), (2, 3, 2, 3, 4), (1, 4, 9, 9)])
@pytest.mark.parametrize("training", [True, False])
def test_shapes(shape, training, device):
    _run(randn(shape, torch.float32, device, offset=3.0), training)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_dtypes(dtype, device):
    _run(randn((4, 3, 5, 5), dtype, device), True)


def test_channels_last(device):
    x = randn((3, 8, 5, 6), torch.float32, device).to(memory_format=torch.channels_last)
    out = _run(x, True)
    assert out.is_contiguous(memory_format=torch.channels_last)
    x3 = randn((2, 8, 3, 4, 5), torch.float32, device).to(memory_format=torch.channels_last_3d)
    _run(x3, True)


def test_strided_input(device):
    x = randn((4, 6, 10, 10), torch.float32, device)[:, ::2, 1:9, ::3]
    _run(x, True)
    _run(x, False)


@pytest.mark.triton_compat
@pytest.mark.parametrize("cfg", [dict(strategy="split", BLOCK_N=8, BLOCK_K=1, split=5),
                                 dict(strategy="split", BLOCK_N=4, BLOCK_K=4, split=1),
                                 dict(strategy="split", BLOCK_N=2, BLOCK_K=2, split=200),
                                 # one tile per channel block: statistics from the tile (resident, one launch)
                                 dict(strategy="split", BLOCK_M=4, BLOCK_N=32, BLOCK_K=1, split=1),
                                 # full and partial tiles in both B and S, split ranges of unequal length
                                 dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=4),
                                 # normalize programs looping over several tiles (2 and 3 per channel block of
                                 # 6 and 4 tiles, the last program's range cut short), edges in B and S
                                 dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3,
                                      num_programs=10),
                                 dict(strategy="split", BLOCK_M=2, BLOCK_N=4, BLOCK_K=2, split=2,
                                      num_programs=9),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=16, BLOCK_K=1, split=1,
                                      num_programs=5),
                                 # statistics groups wider than the tile's lanes allow: a group of 2 lanes
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=2, BLOCK_K=1, split=3),
                                 # statistics tiles loaded one ahead (num_stages=2): edges in B and S, ranges of
                                 # unequal length (the last load of a range masked off), one tile per range,
                                 # blocks of 2 channels
                                 dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=4, num_stages=2),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=4, BLOCK_K=1, split=200, num_stages=2),
                                 dict(strategy="split", BLOCK_M=2, BLOCK_N=4, BLOCK_K=2, split=3, num_stages=2)],
                         ids=str)
def test_forced_configs(cfg, force, device):
    force("batch_norm", **cfg)
    _run(randn((3, 5, 7, 3), torch.float32, device), True)
    _run(randn((3, 5, 7, 3), torch.float32, device).to(memory_format=torch.channels_last), True)
    _run(randn((3, 5, 7, 3), torch.float32, device), False)


@pytest.mark.parametrize("cfg", [dict(strategy="split_rows", BLOCK_M=2, BLOCK_N=8),
                                 dict(strategy="multi_pass", BLOCK_N=8)], ids=["split_rows", "multi_pass"])
def test_strategies_it_does_not_declare_are_refused(cfg, force, device):
    """batch_norm's kernels implement ``split`` only (a split of 1: one slice of statistics per channel block): a
    plugin's config of another strategy is refused before any launch, naming the plugin."""
    from tritred_core import InvalidLaunchConfigError

    force("batch_norm", **cfg)
    with pytest.raises(InvalidLaunchConfigError, match=f"strategy '{cfg['strategy']}' \\(config from test-force"):
        tr.batch_norm(randn((3, 5, 7), torch.float32, device), None, None, training=True)


@pytest.mark.parametrize(("cfg", "training", "waits"), [
    (dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3), True, [None, False]),
    (dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3, num_programs=10), True, [None, False]),
    (dict(strategy="split", BLOCK_M=4, BLOCK_N=32, BLOCK_K=1, split=1), True, [None]),  # resident: one launch
    (dict(strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=3), False, [None]),  # eval: one launch
], ids=str)
def test_normalize_after_statistics_is_the_dependent_launch(cfg, training, waits, force, wait_spy, device):
    """Training's normalize launch reads the partials the statistics launch wrote: it, and only it, is a dependent
    launch (``runtime.dependent_launch``); the one-launch paths (one tile per channel, eval) have none."""
    force("batch_norm", **cfg)
    seen = wait_spy()
    _run(randn((3, 5, 7, 3), torch.float32, device), training)
    assert seen == waits, seen


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_statistics_far_from_zero_over_many_full_tiles(dtype, split, force, device):
    """Values at 1000 +- 1 over 32 full tiles per channel: the statistics are of x less the channel's first
    element, so the group means and their Chan merges keep the small variance and the mean to about one float32
    rounding of 1000 (3e-5: y within 32 roundings); without the shift the group means of raw values rounded
    every update (y off by ~1000 roundings; an adversarial run: 8x torch's float32 error at mean 1e4, spread
    0.1). bf16 outputs round far coarser than that."""
    force("batch_norm", strategy="split", BLOCK_M=2, BLOCK_N=8, BLOCK_K=1, split=split)
    _run(randn((8, 3, 64), dtype, device, offset=1000.0), True, y_scale=32.0 if dtype == torch.float32 else 8.0)
    _run(randn((8, 3, 64), dtype, device, offset=-1000.0), True, affine=False, y_scale=32.0)


@pytest.mark.parametrize("cfg", [dict(BLOCK_M=16, BLOCK_N=128, num_warps=2, split=1),
                                 dict(BLOCK_M=16, BLOCK_N=128, num_warps=2, split=3),
                                 dict(BLOCK_M=2, BLOCK_N=32, BLOCK_K=4, split=2)], ids=["16x128", "16x128-split", "cl"])
def test_channels_far_from_zero_keep_their_spread(cfg, force, device):
    """Mean 1e4, spread 0.1 (the adversarial run's case): y within a few float32 roundings of the mean (5e-4 /
    0.1), the running statistics too; full tiles (the H200's 16 x 128), edge tiles and channels-last blocks."""
    force("batch_norm", strategy="split", **cfg)
    for shape in ((32, 2, 16, 16), (20, 3, 11, 13)):
        x = (randn(shape, torch.float64, device) * 0.1 + 1e4).float()
        if cfg.get("BLOCK_K", 1) > 1:
            x = x.to(memory_format=torch.channels_last)
        rm, rv = torch.zeros(shape[1], device=device), torch.ones(shape[1], device=device)
        rm_ref, rv_ref = rm.double().cpu(), rv.double().cpu()
        y = tr.batch_norm(x, rm, rv, None, None, True, 1.0, 1e-5)
        ref = F.batch_norm(x.double().cpu(), rm_ref, rv_ref, None, None, True, 1.0, 1e-5)
        assert (y.double().cpu() - ref).abs().max().item() <= 0.012, f"y {shape}"  # (raw group means: 0.017-0.048)
        assert (rm.double().cpu() - rm_ref).abs().max().item() <= 1.2e-3, f"running_mean {shape}"
        assert ((rv.double().cpu() - rv_ref) / rv_ref).abs().max().item() <= 1e-4, f"running_var {shape}"


@pytest.mark.parametrize("dtype, value", [(torch.float32, 1e38), (torch.float32, -3e38), (torch.bfloat16, 5e37)])
def test_group_means_of_values_near_the_float_maximum(dtype, value, force, device):
    """A constant channel above FLT_MAX / GROUP over full tiles: the group mean stays finite (a sum of GROUP such
    values would overflow: NaN output and running stats), so y is 0 and the running statistics are torch's."""
    force("batch_norm", strategy="split", BLOCK_M=1, BLOCK_N=8, BLOCK_K=1, split=1)
    x = torch.full((2, 1, 8), value, dtype=dtype, device=device)
    rm, rv = torch.zeros(1, device=device), torch.ones(1, device=device)
    y = tr.batch_norm(x, rm, rv, None, None, True, 0.1, 1e-5)
    assert torch.equal(y, torch.zeros_like(y))
    torch.testing.assert_close(rm.cpu(), torch.tensor([0.1 * x[0, 0, 0].item()]), rtol=1e-6, atol=0)
    torch.testing.assert_close(rv.cpu(), torch.tensor([0.9]), rtol=1e-6, atol=0)


LAYOUTS_AS_TORCH = {
    "permuted-hw": lambda d: torch.randn(2, 3, 7, 10, device=d).permute(0, 1, 3, 2),
    "permuted-bc": lambda d: torch.randn(3, 2, 7, 10, device=d).permute(1, 0, 2, 3),
    "transposed-2d": lambda d: torch.randn(5, 7, device=d).t(),
    "sliced-cl3d": lambda d: torch.randn(2, 3, 6, 5, 4, device=d).to(memory_format=torch.channels_last_3d)[:, :, ::2],
    "cl-size-1": lambda d: torch.randn(2, 3, 1, 1, device=d).to(memory_format=torch.channels_last),
    "sliced-cl": lambda d: torch.randn(2, 6, 5, 6, device=d).to(memory_format=torch.channels_last)[:, ::2],
    "expanded": lambda d: torch.randn(1, 3, 1, 5, device=d).expand(2, 3, 4, 5),
}


@pytest.mark.parametrize("layout", list(LAYOUTS_AS_TORCH))
def test_output_memory_format_as_torch(layout, device):
    """The output's strides are those of torch on the same device, in training and eval, whatever layout the
    kernels read: on the CPU contiguous, or channels-last where the input's strides suggest it (an adversarial run
    found permuted inputs keeping their permutation there, a sliced channels-last-3d one coming out contiguous); on
    CUDA, without a weight (no cuDNN), the input's own strides where it is dense (torch's ``empty_like``). The
    values against torch on the CPU."""
    x = LAYOUTS_AS_TORCH[layout](device)
    for training in (True, False):
        rm, rv = torch.zeros(x.shape[1], device=device), torch.ones(x.shape[1], device=device)
        ref = F.batch_norm(x.cpu(), rm.cpu().clone(), rv.cpu().clone(), None, None, training)
        want = F.batch_norm(x, rm.clone(), rv.clone(), None, None, training).stride()
        out = tr.batch_norm(x, rm, rv, None, None, training)
        assert out.stride() == want, f"{layout} training={training}: {out.stride()} != {want}"
        assert_close(out, ref.double(), n=16, scale=8, what=f"{layout} training={training}")


def test_without_affine_or_running(device):
    x = randn((4, 3, 6), torch.float32, device)
    _run(x, True, affine=False)
    _run(x, True, running=False)


def test_momentum_values(device):
    x = randn((4, 3, 6), torch.float32, device)
    for m in (0.0, 1.0, 0.37):
        _run(x, True, momentum=m)


def test_errors(device):
    x = randn((1, 3), torch.float32, device)
    rm, rv, w, b = _params(3, device)
    snapshot = (rm.clone(), rv.clone())
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        tr.batch_norm(x, rm, rv, w, b, True)
    assert torch.equal(rm, snapshot[0]) and torch.equal(rv, snapshot[1])
    x = randn((4, 3, 2), torch.float32, device)
    with pytest.raises(RuntimeError, match="running_mean"):
        tr.batch_norm(x, None, None, training=False)
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        tr.batch_norm(x, torch.zeros(4, device=device), torch.ones(4, device=device), training=True)
    with pytest.raises(RuntimeError, match="weight"):
        tr.batch_norm(x, rm, rv, torch.ones(2, device=device), None, True)
    with pytest.raises(TypeError, match="momentum"):
        tr.batch_norm(x, rm, rv, training=True, momentum=None)
    assert torch.equal(rm, snapshot[0]) and torch.equal(rv, snapshot[1])



# PyTorch's own OpInfo samples of nn.functional.batch_norm (torch/testing/_internal/common_methods_invocations.py,
# sample_inputs_batch_norm): input shape, keyword arguments; parameters of ``shape[1]`` elements, 0 for 1-D inputs.
OPINFO_SAMPLES = [((5, 5, 5), {"training": True, "momentum": 0.5, "eps": 0.6}), ((3, 2, 4), {"training": False,
                  "momentum": -1.2}), ((3, 1), {"training": True, "momentum": 0.0}), ((0,), {"training": True}),
                  ((0,), {"training": False}), ((3, 2, 3, 4), {"training": True, "momentum": -1.0, "eps": 0.5}),
                  ((3, 2, 3, 4), {"training": False, "momentum": -1.0, "eps": 0.5}), ((2, 1), {})]


@pytest.mark.parametrize(("shape", "kwargs"), OPINFO_SAMPLES, ids=str)
def test_torch_opinfo_samples(shape, kwargs, device):
    """The same output and running statistics as torch (float64, CPU) on torch's OpInfo samples, an empty 1-D
    input among them (torch: an empty output, 0 channels)."""
    c = shape[1] if len(shape) > 1 else 0
    x = randn(shape, torch.float32, device)
    rm, rv = randn((c,), torch.float32, device).abs(), randn((c,), torch.float32, device).abs()
    w, b = (randn((c,), torch.float32, device), randn((c,), torch.float32, device)) if c else (None, None)
    d = lambda t: None if t is None else t.double().cpu().clone()  # noqa: E731
    rm_ref, rv_ref = d(rm), d(rv)
    ref = F.batch_norm(x.double().cpu(), rm_ref, rv_ref, d(w), d(b), **kwargs)
    out = tr.batch_norm(x, rm, rv, w, b, **kwargs)
    assert out.shape == ref.shape and out.dtype == x.dtype
    assert_close(out, ref, n=16, scale=8, what=f"{shape} {kwargs}")
    assert_close(rm, rm_ref, n=16, scale=4, what="running_mean")
    assert_close(rv, rv_ref, n=16, scale=4, what="running_var")


def test_one_dim_inputs(device):
    """torch's errors for inputs without a channel dim: 0-d, non-empty 1-D (IndexError), 1-D beside statistics
    of some channels (RuntimeError naming the argument)."""
    with pytest.raises(IndexError):
        tr.batch_norm(randn((), torch.float32, device), None, None, training=True)
    with pytest.raises(IndexError, match="Dimension out of range"):
        tr.batch_norm(randn((5,), torch.float32, device), None, None, training=True)
    with pytest.raises(RuntimeError, match="weight should contain 0 elements not 5"):
        tr.batch_norm(randn((5,), torch.float32, device), None, None, randn((5,), torch.float32, device),
                      training=True)


def test_finish_block_spreads_the_forward_finish_over_the_sms():
    """``rules.finish_block``: ~2048 partials of each statistic a program, halved down to ``min_programs``
    programs (the forward's finish: one per SM) while a program keeps a channel."""
    from tritred_ops.families.batch_norm.rules import finish_block

    assert finish_block(1024, 47) == (32, 4)  # 2048 // 64 slices
    assert finish_block(1024, 47, 132) == (4, 4)  # 256 programs, not 128
    assert finish_block(512, 64, 132) == (2, 4) and finish_block(256, 264, 132) == (1, 4)
    assert finish_block(3, 5, 132) == (1, 4)  # one channel a program at least


@pytest.mark.parametrize("layout", ["nchw", "cl"])
def test_many_partials_merge_once_per_channel(layout, force, monkeypatch, device):
    """Channel blocks of many slices (``rules.merge_inline``: 8 channels x 64 slices): a finish launch merges the
    partials once per channel (mean, rstd, the running statistics), then the normalize launch reads them; the same
    output and running statistics as torch, in place and through the registered op (new running statistics)."""
    from tritred_ops.runtime import replay
    from tritred_ops.runtime.caches import caches

    force("batch_norm", strategy="split", BLOCK_M=1, BLOCK_N=1, BLOCK_K=8, split=100)
    seen: list[tuple] = []
    real = replay.Recorder.launch
    monkeypatch.setattr(replay.Recorder, "launch", lambda self, k, grid, *a, **kw: seen.append(
        (k.fn.__name__, kw.get("COEFS", False))) or real(self, k, grid, *a, **kw))
    x = randn((3, 5, 7, 3), torch.float32, device)
    if layout == "cl":
        x = x.to(memory_format=torch.channels_last)
    caches().clear()
    _run(x, True)
    assert seen == [("_stats_kernel", False), ("_apply_kernel", False), ("_apply_kernel", True)], seen
    rm, rv = torch.zeros(5, device=device), torch.ones(5, device=device)
    y, mean, invstd, new_rm, new_rv = torch.ops.tritred.batch_norm(x, rm, rv, None, None, True, 0.3, 1e-5)
    rm_ref, rv_ref = rm.double().cpu(), rv.double().cpu()
    ref = F.batch_norm(x.double().cpu(), rm_ref, rv_ref, None, None, True, 0.3, 1e-5)
    assert torch.equal(rm, torch.zeros_like(rm)) and torch.equal(rv, torch.ones_like(rv))  # (the op mutates none)
    assert_close(y, ref, n=16, scale=8, what="y")
    assert_close(new_rm, rm_ref, n=63, scale=2, what="new running_mean")
    assert_close(new_rv, rv_ref, n=63, scale=4, what="new running_var")
    xd = x.double().cpu()
    assert_close(mean, xd.mean((0, 2, 3)), n=63, scale=2, what="save_mean")
    assert_close(invstd, (xd.var((0, 2, 3), unbiased=False) + 1e-5).rsqrt(), n=63, scale=2, what="save_invstd")
