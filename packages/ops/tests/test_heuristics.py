"""The built-in heuristic on a (fake) H200: valid configs for every op and the H200 sweep's rules of rows (reductions
over the last dim); columns and batch_norm tiles: ``test_heuristics_columns.py``."""

from __future__ import annotations

import pytest
from ops_helpers import h200_config
from ops_helpers import h200_config_of as _config
from tritred_core import LaunchConfig, Problem, get_registry
from tritred_core.testing import FAKE_H200, assert_valid_launch_configs, problem_grid

OPS = ["sum", "mean", "prod", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "softmax",
       "log_softmax", "logsumexp", "layer_norm"]


@pytest.mark.parametrize("op", OPS)
def test_every_problem_gets_a_fitting_config(op):
    reg = get_registry()
    for dtype in ("bfloat16", "float32"):
        assert_valid_launch_configs(reg, reg.get(op).spec, FAKE_H200,
                                    problem_grid(op, dtype))


@pytest.mark.parametrize("op", ["var", "softmax", "layer_norm", "logsumexp", "max", "min"])
@pytest.mark.parametrize("N", [7, 100, 256, 512])
def test_short_rows_take_one_warp_per_1024_elements(op, N):
    if op == "layer_norm" and N in (256, 512):
        return  # (whole power-of-two rows over a few threads each: below)
    if op in ("softmax", "logsumexp") and N <= 8:
        return  # (a row a thread: the next test)
    cfg = _config(op, 262144, N, dtype="float32")
    assert (cfg.strategy, cfg.num_warps) == ("single_pass", 1)
    assert cfg.BLOCK_M * cfg.BLOCK_N == 1024
    plain = _config("sum", 262144, N)  # one reduction per row: wider tiles of 4 warps win
    assert plain.num_warps >= 4


def test_logsumexp_few_long_rows_are_split():
    """Fewer rows than SMs, past the single pass: logsumexp's rows split over about 4 programs a SM (2x3145735 bf16
    ran on 2 programs: 1 % of copy on an H100); enough rows keep the loop."""
    for M, N in ((2, 3145735), (64, 131072), (1, 40000)):
        cfg = _config("logsumexp", M, N)
        slices = -(-N // cfg.BLOCK_N)  # (no more slices than chunks of the row)
        assert (cfg.strategy, cfg.BLOCK_K) == ("split", 1) and cfg.split == min(slices, -(-4 * 132 // M)), (M, N, cfg)
    assert _config("logsumexp", 1024, 131072).strategy == "multi_pass"
    assert _config("logsumexp", 2, 16384).strategy == "single_pass"


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_softmax_rows_of_up_to_8_take_a_row_a_thread(op):
    """H100, forced configs: log_softmax 3464772x7 bf16 19.5 % of copy on one-warp tiles of 128 rows, 41.8 % on
    64 rows over 2 warps (8 elements a thread); rows of 9 or more keep the one-warp tiles."""
    for N in (2, 3, 7, 8):
        for dtype in ("bfloat16", "float32"):
            cfg = _config(op, 3464772, N, dtype=dtype)
            assert (cfg.strategy, cfg.num_warps, cfg.BLOCK_M * cfg.BLOCK_N) == ("single_pass", 2, 512), (N, cfg)
    assert _config(op, 16, 7).BLOCK_M == 16  # (no more rows a tile than the rows)
    assert _config(op, 262144, 9, dtype="float32").num_warps == 1


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean", "max", "min"])
def test_two_byte_rows_of_512_to_1024_take_one_warp_per_2048_elements(op):
    """H200, rotating inputs: var 65536x1024 bf16 64% -> 85%, 131072x512 69% -> 82%; max 59% -> 76%."""
    for N in (512, 600, 1024):
        for dtype in ("bfloat16", "float16"):
            if N == 512 and op in ("var", "std", "var_mean", "std_mean"):
                continue  # (rows over a few threads: the next test)
            cfg = _config(op, 65536, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_M * cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 2048, 1)
    if op in ("max", "min"):
        assert _config(op, 262144, 256).BLOCK_M * 256 == 1024  # 256-wide rows lost: unchanged
    assert _config(op, 65536, 1024, dtype="float32").num_warps > 1  # float32 did not gain: unchanged
    assert _config("softmax", 131072, 512).BLOCK_M * 512 == 1024  # not measured for softmax: unchanged


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
def test_two_byte_statistics_rows_of_128_to_512_spread_over_a_few_threads(op):
    """H200: var 262144x256 bf16 70 -> 85 %, 524288x128 71 -> 86, 131072x512 83 -> 85 with
    each row over N / 32 threads of 32 elements on 4 warps; float32, masked tiles (300) and 1024-wide rows keep
    the kernel's own layout."""
    for N in (128, 256, 512):
        for dtype in ("bfloat16", "float16"):
            cfg = _config(op, 262144, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_N, cfg.num_warps, cfg.threads_per_row) == ("single_pass", N, 4, N // 32)
            assert cfg.BLOCK_M * N == 32 * 32 * 4  # 32 elements a thread
    for N, dtype in ((256, "float32"), (300, "bfloat16"), (1024, "bfloat16"), (64, "bfloat16"), (2048, "float16")):
        assert _config(op, 262144, N, dtype=dtype).threads_per_row == 0, (N, dtype)
    assert _config(op, 256, 4096, K=256).threads_per_row == 0  # (columns: no such layout)
    for other in ("sum", "softmax", "max"):
        assert _config(other, 262144, 256).threads_per_row == 0


def test_layer_norm_rows_of_128_to_1024_spread_over_a_few_threads():
    """H200 (weight and bias loaded with the row): 262144x256 bf16 91 -> 94 %,
    65536x1024 91 -> 94, 524288x128 81 -> 94, fp32 96-97 -> 97-98.5; 32 elements a thread (16 for float32 rows of
    up to 512), 4 warps; masked tiles (768, 300) and float64 keep the one-warp tiles."""
    for N in (128, 256, 512, 1024):
        for dtype, per_thread in (("bfloat16", 32), ("float16", 32), ("float32", 16 if N <= 512 else 32)):
            cfg = _config("layer_norm", 65536, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", N, 4), (N, dtype)
            assert cfg.threads_per_row == N // per_thread and cfg.BLOCK_M * cfg.threads_per_row == 128, (N, dtype)
    for N, dtype in ((768, "bfloat16"), (300, "float32"), (256, "float64"), (64, "bfloat16"), (2048, "bfloat16")):
        assert _config("layer_norm", 65536, N, dtype=dtype).threads_per_row == 0, (N, dtype)


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean", "max", "min"])
def test_float32_statistics_and_arg_rows_of_1024_to_8192_take_more_warps(op):
    """H200: var 65536x1024 fp32 88 -> 92-93.5 % (one row on 4 warps), 32768x2048 88 -> 92
    (one on 8), 16384x4096 88 -> 91-92 (two on 16), 8192x8192 88 -> 89.5 (two on 16); max 88 -> 90-91. Fewer than
    ~4 waves of two-row programs (3000x4096: 65 -> 60 %), bfloat16, masked tiles, float64, 16384-wide rows (and
    max/min's 8192) keep the generic tile."""
    widths = ((1024, 1, 4), (2048, 1, 8), (4096, 2, 16)) + (((8192, 2, 16),) if op not in ("max", "min") else ())
    for N, rows, warps in widths:
        cfg = _config(op, 65536, N, dtype="float32")
        assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", rows, N, warps), N
    assert _config(op, 3000, 4096, dtype="float32").num_warps <= 8  # (under ~4 waves: the generic tile)
    assert _config(op, 4224, 4096, dtype="float32").BLOCK_M == 2  # 32 rows an SM of the fake H200's 132
    if op not in ("max", "min"):  # rows of two reduced axes (var over (0, 2, 3) of 256x64x64x64: 85 -> 82 %)
        planes = Problem(op=op, dtype="float32", M=256, N=4096, K=64, stride_m=64 * 4096, stride_n=1, stride_k=4096)
        cfg = h200_config(planes)
        assert (cfg.strategy, cfg.BLOCK_M) == ("single_pass", 1), cfg
        planes = planes.model_copy(update={"N": 1024, "stride_k": 1024, "stride_m": 64 * 1024})
        assert h200_config(planes).num_warps == 4  # (1024-wide: one row, 4 warps)
    for N, dtype in ((4096, "bfloat16"), (3000, "float32"), (4096, "float64"), (16384, "float32"), (512, "float32")):
        generic = _config(op, 65536, N, dtype=dtype)
        assert (generic.BLOCK_M, generic.num_warps) not in ((1, 8), (2, 16)) or N == 16384, (N, dtype)
    assert _config(op, 256, 4096, K=256, dtype="float32").strategy != "single_pass"  # (columns: unchanged)
    assert _config("sum", 16384, 4096, dtype="float32").BLOCK_M == 1  # the plain reductions: unchanged
    short = _config(op, 131072, 512, dtype="float32")
    assert (short.BLOCK_M, short.num_warps) == (2, 1)  # 512-wide rows: the one-warp tiles
    if op in ("max", "min"):  # 8192 with two rows: not measured for max/min; integers: not measured
        wide = _config(op, 8192, 8192, dtype="float32")
        assert (wide.BLOCK_M, wide.num_warps) == (1, 8), wide
        assert (_config(op, 65536, 1024, dtype="int32").BLOCK_M, _config(op, 16384, 4096, dtype="int32").num_warps) \
            == (2, 4)
    # strided rows (a slice of every other element): not measured, the generic tile
    strided = Problem(op=op, dtype="float32", M=16384, N=4096, K=1, stride_m=8192, stride_n=2, stride_k=0)
    assert h200_config(strided).num_warps == 4


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
def test_statistics_keep_rows_up_to_16384_in_registers_and_loop_on_8_warps(op):
    """H200, rotating inputs: var 4096x16384 bf16 43% -> 76% in registers; loops of 8 warps, 1024x131072 bf16
    70% -> 79%."""
    cfg = _config(op, 4096, 16384)
    assert (cfg.strategy, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 16384, 16)
    loop = _config(op, 4096, 16392)  # (whole 16-byte vectors: odd widths loop over 1024-wide chunks)
    assert (loop.strategy, loop.BLOCK_N, loop.num_warps) == ("multi_pass", 4096, 8)
    assert _config("sum", 1024, 131072).num_warps == 16  # the plain reductions' loops: unchanged


@pytest.mark.parametrize("N", [768, 1000, 1024])
def test_layer_norm_and_softmax_rows_up_to_1024_take_one_warp(N):
    """H200 sweep, layer_norm 65536x1024: one warp per row, bf16 83% -> 90%, fp32 94% -> 96%; softmax the same."""
    for dtype in ("bfloat16", "float32"):
        cfg = _config("layer_norm", 65536, N, dtype=dtype)
        if N == 1024:  # (a whole power-of-two row: over a few threads, below)
            assert cfg.threads_per_row == 32
        elif N == 768 and dtype == "bfloat16":  # (two rows a program: below)
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 2, 1024, 1)
        else:
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 1, 1024, 1)
        # softmax too (100000x768 bf16 87% -> 95%)
        for op in ("softmax", "log_softmax", "logsumexp"):
            assert (_config(op, 65536, N, dtype=dtype).BLOCK_M, _config(op, 65536, N, dtype=dtype).num_warps) == (1, 1)
    assert _config("layer_norm", 65536, 2048).num_warps >= 4
    assert _config("softmax", 65536, 2048).num_warps >= 4


def test_wide_rows_stay_in_registers_up_to_32768():
    cfg = _config("softmax", 4096, 32768, dtype="float32")
    assert (cfg.strategy, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 32768, 32)
    assert _config("softmax", 4096, 32769, dtype="float32").strategy == "multi_pass"
    assert _config("logsumexp", 4096, 32768).strategy == "single_pass"  # (2-byte softmax rows: 16384, below)
    assert _config("layer_norm", 1024, 131072).BLOCK_N == 16384
    long_softmax = _config("softmax", 1024, 131072)  # (bfloat16) two-sweep loop: 16384-wide chunks of 32 warps
    assert (long_softmax.strategy, long_softmax.BLOCK_N, long_softmax.num_warps) == ("multi_pass", 16384, 32)


def _loop(cfg: LaunchConfig) -> tuple[str, int, int]:
    return cfg.strategy, cfg.BLOCK_N, cfg.num_warps


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_two_byte_softmax_rows_loop_in_the_narrowest_programs_whose_rows_fit_l2(op, dtype):
    """H200 (bf16): 4096x32768 single pass 72 -> 81 % (8192 on 16 warps), 16384x20000
    55 -> 85 and 8192x24576 62 -> 83 (4096 on 8), 4096x40000 63 -> 80 (8192/16), 512x32768 54 -> 61 (8192/16);
    1024x131072 and 256x131072 keep 16384 on 32 warps, 16384-wide rows the single pass."""
    assert _config(op, 8192, 16384, dtype=dtype).strategy == "single_pass"
    assert _loop(_config(op, 4096, 32768, dtype=dtype)) == ("multi_pass", 8192, 16)  # 528 rows x 64 KB in flight
    assert _loop(_config(op, 16384, 20000, dtype=dtype)) == ("multi_pass", 4096, 8)  # 1056 rows x 40 KB
    assert _loop(_config(op, 8192, 24576, dtype=dtype)) == ("multi_pass", 4096, 8)  # 1056 x 48 KB: 52 MB < 60 MiB
    assert _loop(_config(op, 4096, 40000, dtype=dtype)) == ("multi_pass", 8192, 16)
    assert _loop(_config(op, 512, 32768, dtype=dtype)) == ("multi_pass", 8192, 16)  # 512 rows fill half of 528
    assert _loop(_config(op, 1024, 60000, dtype=dtype)) == ("multi_pass", 16384, 32)  # 528 x 120 KB > 60 MiB
    for rows in (256, 1024):
        assert _loop(_config(op, rows, 131072, dtype=dtype)) == ("multi_pass", 16384, 32)
    # float32 keeps its single pass to 32768 and, past it, rows too long for narrower programs' L2 share
    assert _config(op, 4096, 20000, dtype="float32").strategy == "single_pass"
    assert _loop(_config(op, 4096, 40000, dtype="float32")) == ("multi_pass", 16384, 32)
    # a device whose L2 size is unknown: the widest programs, as before the rule
    reg = get_registry()
    unknown = FAKE_H200.model_copy(update={"l2_bytes": 0})
    problem = Problem(op=op, dtype=dtype, M=4096, N=32768, K=1, stride_m=32768, stride_n=1, stride_k=1)
    assert _loop(reg.launch_config(reg.get(op).spec, problem, unknown)) == ("multi_pass", 16384, 32)


@pytest.mark.parametrize("N", [65536, 100000, 131072, 1 << 22])
def test_float32_softmax_rows_of_64k_or_more_are_split_over_programs_of_8192(N):
    """H200, rotating inputs: 1024x131072 fp32 68% -> 80%, 2048x65536
    77% -> 81%; shorter rows (4096x40000 80% -> 76%) and bfloat16 (63% -> 58%) lost and keep the online loop;
    logsumexp reads a row once in any strategy."""
    for op in ("softmax", "log_softmax"):
        cfg = _config(op, 1024, N, dtype="float32")
        assert (cfg.strategy, cfg.BLOCK_N, cfg.split, cfg.num_warps) == ("split", 8192, -(-N // 8192), 8)
        assert _config(op, 1024, N, dtype="bfloat16").strategy == "multi_pass"
        assert _config(op, 1024, N, dtype="float64").strategy == "multi_pass"
    assert _config("logsumexp", 1024, N, dtype="float32").strategy == "multi_pass"
    assert _config("softmax", 1024, 32768, dtype="float32").strategy == "single_pass"
    assert _config("softmax", 1024, 65535, dtype="float32").strategy == "multi_pass"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_long_rows_fewer_than_the_sms_are_split_rows_in_every_dtype(dtype):
    """Fewer rows than SMs (132 on an H200): one program a row would stream on R of the SMs, so softmax,
    log_softmax, layer_norm and rms_norm rows past the single pass take the split (``rules.few_rows``); 132 rows
    keep their rule, and so do rows that fit one program. logsumexp's take its own split (partials, no barrier)."""
    for op, strategy in (("softmax", "split"), ("log_softmax", "split"), ("layer_norm", "split_rows"),
                         ("rms_norm", "split_rows")):
        for M, N in ((8, 1 << 21), (16, 999983), (131, 65536)):
            cfg = _config(op, M, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_N, cfg.split) == (strategy, 8192, -(-N // 8192)), (op, M, N)
        assert _config(op, 8, 32768, dtype="float32").strategy == "single_pass"
        if dtype != "float32" or op in ("layer_norm", "rms_norm"):
            assert _config(op, 132, 1 << 21, dtype=dtype).strategy == "multi_pass", op
    cfg = _config("logsumexp", 8, 1 << 21, dtype=dtype)
    assert (cfg.strategy, cfg.BLOCK_K) == ("split", 1), cfg


def test_shifted_rows_only_for_one_row_per_program_on_a_gpu(monkeypatch):
    """The ALIGN rule measured on the H200: one row per program takes the shifted tiles, several do not."""
    import torch
    from tritred_core import LaunchConfig
    from tritred_ops import runtime as C
    x = torch.empty((6, 300), dtype=torch.bfloat16)
    view = C.map_view(x, torch.empty_like(x), (1,))[2]
    one = LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=512)
    two = LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=512)
    assert C.row_align(x, view, one, True) == 8 and C.row_align(x, view, two, True) == 8  # interpreter: both
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: cuda))
    assert C.row_align(x, view, one, True) == 8 and C.row_align(x, view, two, True) == 0


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "amax", "amin"])
def test_plain_reductions_of_whole_row_tiles_give_each_thread_two_vectors(op):
    """H200, rotating inputs: sum of 16384x4096 rows fp32 88% -> 93-94% on 16 warps, bf16 83% -> 87% on 8."""
    assert _config(op, 16384, 4096, dtype="float32").num_warps == 16
    assert _config(op, 16384, 4096, dtype="bfloat16").num_warps == 8
    assert _config(op, 8192, 8192, dtype="float32").num_warps == 16  # (32 vectors' worth: capped)
    assert _config(op, 65536, 3000, dtype="float32").num_warps == 4  # partial tile: the ~32 elements rule
    # several rows per tile too (sum of 65536x1024 fp32 90% -> 95% on 16 warps, bf16 80% -> 85% on 8)
    for dtype, warps in (("bfloat16", 8), ("float32", 16)):
        for N in (256, 1024):
            cfg = _config(op, 65536, N, dtype=dtype)
            assert cfg.BLOCK_M > 1 and cfg.num_warps == warps
    assert _config(op, 65536, 1000, dtype="float32").num_warps == 4  # partial tiles: unchanged
    assert _config("var", 16384, 4096, dtype="bfloat16").num_warps == 4  # var's own rule (above), fp32 only


def test_single_pass_load_hint_rule():
    """H200 A/B (rotating inputs): evict-last wins for softmax single passes, and for layer_norm's with 4-8 warps
    only (one warp: 65536x1024 bf16 90.7 -> 84.2 %; 16 warps: 2048x16384 fp32 83.3 -> 80.6 %)."""
    from tritred_ops.kernels.rows import single_load_evict

    assert {single_load_evict("softmax", w) for w in (1, 4, 8, 16, 32)} == {"evict_last"}
    assert [single_load_evict("layer_norm", w) for w in (1, 2, 4, 8, 16, 32)] == ["", "", "evict_last", "evict_last",
                                                                                   "", ""]


def test_an_unknown_dtype_name_still_gets_a_config():
    """Problem.dtype is a free string (a plugin may build its own problems): the element size rule must not raise."""
    cfg = _config("sum", 16384, 4096, dtype="fp32")
    assert cfg.strategy == "single_pass" and cfg.num_warps == 16  # counted as 4 bytes


def test_layer_norm_preloads_weight_and_bias_for_float32_on_up_to_8_warps():
    """H200, rotating inputs: 16384x4096 fp32 91% -> 98%; bf16 lost (90% -> 73%), 16-32 warps spill."""
    import torch
    from tritred_ops.families.layer_norm.launch import _preload_affine

    assert [_preload_affine(torch.float32, True, 0, w) for w in (1, 2, 4, 8, 16, 32)] == [True] * 4 + [False] * 2
    assert not _preload_affine(torch.bfloat16, True, 0, 4) and not _preload_affine(torch.float16, True, 0, 4)
    assert not _preload_affine(torch.float32, False, 0, 4)  # the loop reads weight and bias per chunk
    assert not _preload_affine(torch.float32, True, 4, 4)  # shifted tiles index them per row


def test_two_byte_layer_norm_rows_of_513_to_896_take_two_rows_a_one_warp_program():
    """H200: bf16 65536x768 80 -> 84 %, 100000x768 83 -> 88, 65536x640 71 -> 76; lost on
    1000 (85.7 -> 84.5), float32 768 and four 384-wide rows a warp: those keep one row a program."""
    for N in (520, 576, 640, 720, 768, 832, 896):
        for dtype in ("bfloat16", "float16"):
            cfg = _config("layer_norm", 65536, N, dtype=dtype)
            if cfg.BLOCK_TAIL:  # (rows just past 512 take the tail tile: test_rows_just_past_a_power_of_two...)
                continue
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 2, 1024, 1), N
    for N, dtype, stride in ((1000, "bfloat16", None), (768, "float32", None), (384, "bfloat16", None),
                             (897, "bfloat16", None), (768, "bfloat16", 776), (700, "bfloat16", None)):
        cfg = _config("layer_norm", 65536, N, dtype=dtype, stride=stride)
        assert cfg.BLOCK_M * cfg.BLOCK_N <= 1024 and cfg.num_warps == 1, (N, dtype, stride)
    assert _config("layer_norm", 16384, 768).BLOCK_M == 1  # (fewer than 64 two-row programs per SM: lost)
    assert _config("layer_norm", 32768, 768).BLOCK_M == 2
    assert _config("softmax", 65536, 768).BLOCK_M == 1  # layer_norm only
    assert _config("var", 65536, 768).BLOCK_M == 2  # (var's own half_rows)


def test_layer_norm_rows_that_leave_many_lanes_of_their_tile_masked():
    """H200: float32 5120/6144 in two-row 8192 tiles on 16 warps (79 -> 94,
    86 -> 92); 2-byte rows over 4096 with 3/8+ of the tile masked loop over unmasked chunks (5120: 61 -> 71,
    20480: 50 -> 67); 2-byte rows of 1280-2560 loop over 256 or 512. Everywhere the same
    changes lost, the config stays as it was."""
    for N in (5120, 6144):
        cfg = _config("layer_norm", 8192, N, dtype="float32")
        assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 2, 8192, 16)
    # 2-8 chunks of 1024-4096 elements, 8 per thread: the unrolled loop (12288 71 -> 82 %)
    for N, chunk, warps in ((5120, 1024, 4), (6144, 1024, 4), (7168, 1024, 4), (10240, 2048, 8), (12288, 2048, 8),
                            (20480, 4096, 16), (24576, 4096, 16), (28672, 4096, 16), (32768, 4096, 16),
                            (4608, 512, 1), (9216, 1024, 1)):
        for dtype in ("bfloat16", "float16"):
            cfg = _config("layer_norm", 2048, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("multi_pass", 1, chunk, warps), N
    # ... unless the rows such one-warp programs hold at once (32 a SM) overflow the L2, which their second sweep
    # reads: then 4096-wide chunks on 8 warps (fp16 8192x18944 67.7 -> 88.7 %, H100); 4096x9216: 75 MB in flight
    for M, N in ((8192, 18944), (4096, 9216), (4096, 18944)):
        cfg = _config("layer_norm", M, N, dtype="float16")
        assert (cfg.strategy, cfg.BLOCK_N, cfg.num_warps) == ("multi_pass", 4096, 8), (M, N)
        assert "fit the L2" in cfg.why
    assert _config("layer_norm", 1024, 18944, dtype="float16").BLOCK_N == 512  # (19 MB in flight: the L2 holds it)
    # 1025-4095 of 5-7 chunks of 256 (one warp) or 512 (two, at most 5/8 of a 4096 tile): the unrolled loop too
    # (bf16 1536 71 -> 90 %, 2560 72 -> 78); rows whose stride is not a multiple of 16
    # elements (shifted tiles, whose loop is rolled) keep the single pass
    for N, chunk, warps in ((1280, 256, 1), (1536, 256, 1), (1792, 256, 1), (2560, 512, 2)):
        for dtype in ("bfloat16", "float16"):
            cfg = _config("layer_norm", 8192, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("multi_pass", 1, chunk, warps), N
        assert _config("layer_norm", 8192, N, stride=N + 8).strategy == "single_pass"
    # lost in the A/B, or not masked enough: one row per program in one tile, as before
    for N, dtype in ((2560, "float32"), (12288, "float32"), (20480, "float32"), (24576, "float32"),
                     (1536, "float32"), (3072, "float16"), (3072, "bfloat16"), (3584, "bfloat16"),
                     (2304, "bfloat16"), (8192, "bfloat16"),
                     (16384, "bfloat16"), (4096, "bfloat16"), (7000, "float32"),
                     (16384, "float32"), (12296, "bfloat16")):  # (whole 16-byte vectors: odd ones loop)
        cfg = _config("layer_norm", 8192, N, dtype=dtype)
        assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N) == ("single_pass", 1, 1 << (N - 1).bit_length()), (N, dtype)
    assert _config("softmax", 8192, 5120).strategy == "single_pass"  # layer_norm only
    # other 2-byte rows in a 2048 tile: two rows a program on 4 warps, unless too
    # few rows give a device's worth of programs of two (1024x2048: 512 programs, lost)
    for N, stride in ((1800, None), (2000, None), (2047, None), (2048, None), (1536, 1540), (1700, 1704)):
        for dtype in ("bfloat16", "float16"):
            cfg = _config("layer_norm", 8192, N, dtype=dtype, stride=stride)
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 2, 2048, 4), N
    assert _config("layer_norm", 1024, 2048).BLOCK_M == 1
    assert _config("layer_norm", 1056, 2048).BLOCK_M == 1  # (lost at 1056 rows)
    assert _config("layer_norm", 2048, 2048).BLOCK_M == 2
    assert _config("layer_norm", 8192, 2048, dtype="float32").BLOCK_M == 1


def test_two_byte_logsumexp_rows_of_32k_to_64k_loop_over_4096_wide_chunks():
    """Rows that are not whole 16-byte vectors, 8+ per SM. H200: logsumexp 2048x50257 bf16 30% -> 40% against
    16384-wide chunks on 32 warps; 1024 rows lost: not taken there. logsumexp's other 2-byte loops take 4096 on 8
    warps (1024x131072 69% -> 73%). softmax and log_softmax rows of that kind follow the L2 rule since their loop's
    inner chunks are unmasked (H200: log_softmax 2048x50257 bf16 60% -> 70% on 8192/16)."""
    assert _loop(_config("logsumexp", 2048, 50257)) == ("multi_pass", 4096, 4)
    assert _loop(_config("logsumexp", 1024, 50257)) != ("multi_pass", 4096, 4)  # fewer than 8 rows per SM
    for op in ("softmax", "log_softmax"):
        assert _loop(_config(op, 2048, 50257)) == ("multi_pass", 8192, 16)  # 528 rows of 100 KB in flight: 53 MB
        assert _loop(_config(op, 2048, 50257)) == _loop(_config(op, 2048, 50256))  # odd or even: one rule
    for op in ("softmax", "log_softmax", "logsumexp"):
        assert _config(op, 2048, 50257, dtype="float32").BLOCK_N == 16384  # float32: not measured, unchanged
    for N in (50257, 60000, 131072):
        assert _loop(_config("logsumexp", 1024, N)) == ("multi_pass", 4096, 8)
    assert _config("logsumexp", 1024, 131072, dtype="float32").BLOCK_N == 16384


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
def test_two_byte_statistics_rows_of_a_few_whole_chunks_take_the_unrolled_loop(op):
    """H200: var bf16 5120 66 -> 78 %, 6144 77 -> 79, 12288 65 -> 78 against the single
    pass; float32 rows, powers of two, widths of no whole chunk and 8192-element tiles less than a quarter
    masked (7168: 85 -> 81 lost) keep it."""
    for N, chunk, warps in ((5120, 1024, 4), (6144, 1024, 4), (10240, 2048, 8), (12288, 2048, 8), (14336, 2048, 8)):
        for dtype in ("bfloat16", "float16"):
            cfg = _config(op, 16384, N, dtype=dtype)
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("multi_pass", 1, chunk, warps), N
    for N, dtype in ((5120, "float32"), (12288, "float32"), (8192, "bfloat16"), (16384, "bfloat16"),
                     (5000, "bfloat16"), (4096, "bfloat16"), (7168, "bfloat16")):
        assert _config(op, 16384, N, dtype=dtype).strategy == "single_pass", (N, dtype)
    assert _config("sum", 16384, 5120).strategy == "single_pass"  # the plain reductions lost


def test_unrolled_loops_keep_at_most_8_elements_per_thread_per_chunk_and_64_in_all():
    """H200: layer_norm 2048x65536 fp32 in 16384-wide chunks on 32 warps (16 elements
    per thread per chunk) lost unrolled, 75 -> 65 %; sum of 8192x16384 bf16 (4096 on 16 warps) gained, 83 -> 88."""
    from tritred_ops.runtime import unrolled_chunks
    loop = lambda n, w, m=1: LaunchConfig(strategy="multi_pass", BLOCK_M=m, BLOCK_N=n, num_warps=w)  # noqa: E731
    assert unrolled_chunks(12288, loop(2048, 8)) == 6 and unrolled_chunks(24576, loop(4096, 16)) == 6
    assert unrolled_chunks(32768, loop(4096, 16)) == 8 and unrolled_chunks(16384, loop(4096, 16)) == 4
    assert unrolled_chunks(65536, loop(16384, 32)) == 0 and unrolled_chunks(131072, loop(16384, 32)) == 0
    assert unrolled_chunks(32768, loop(4096, 8)) == 0 and unrolled_chunks(16384, loop(4096, 8)) == 0
    assert unrolled_chunks(4096, loop(4096, 8)) == 0 and unrolled_chunks(12289, loop(2048, 8)) == 0
    assert unrolled_chunks(9 * 1024, loop(1024, 4)) == 0 and unrolled_chunks(4096, loop(1024, 8, 2)) == 4


def test_plain_reductions_two_byte_row_loops_take_two_chunks_per_iteration():
    """H200: sum 1024x131072 bf16 85 -> 88 %, 4096x50000 88 -> 93, 64x1000000 (split) 58 -> 62;
    float32 lost with two (97 -> 91): unchanged, as single passes and the other ops' loops. prod's split keeps one
    (its loops note 0s and infs: 384x28672 fp16 20.0 -> 17.5 us with one, H100)."""
    for op in ("sum", "mean", "prod", "amax", "amin"):
        for M, N in ((1024, 131072), (4096, 50000), (64, 1000000)):
            cfg = _config(op, M, N)
            stages = 1 if op == "prod" and cfg.strategy == "split" else 2
            assert cfg.strategy in ("multi_pass", "split") and cfg.num_stages == stages, (op, M, N, cfg)
            assert _config(op, M, N, dtype="float16").num_stages == stages
            assert _config(op, M, N, dtype="float32").num_stages == 1
        assert _config(op, 4096, 4096).num_stages == 1  # single pass
    for op in ("var", "softmax", "layer_norm"):
        assert _config(op, 1024, 131072).num_stages == 1


def test_max_min_row_loops_take_two_chunks_per_iteration():
    """H200: max 1024x131072 bf16 70 -> 79 %, min 8192x32000 bf16 61 -> 72, min
    2048x100000 fp32 92 -> 97; single passes and column kernels unchanged."""
    for op in ("max", "min"):
        for dtype in ("bfloat16", "float16", "float32"):
            for M, N in ((1024, 131072), (8192, 32000), (64, 1000000)):
                cfg = _config(op, M, N, dtype=dtype)
                assert cfg.strategy in ("multi_pass", "split") and cfg.num_stages == 2, (op, M, N, dtype, cfg)
        assert _config(op, 16384, 4096).num_stages == 1  # single pass
        assert _config(op, 16384, 4096, K=64).num_stages == 1  # columns


def test_odd_width_rows_past_4096_loop_over_1024_wide_chunks():
    """Rows that are not whole 16-byte vectors take the shifted loops (inner chunks unmasked) over 1024-wide chunks
    (H200: layer_norm 16384x4097 bf16 24 -> 42 %, var 8192x12289 32 -> 63, softmax 16384x4097
    38 -> 62, max 8192x32001 65 -> 83); whole-vector rows, rows up to 4096, few rows and long softmax rows keep
    their rules, and so do rows just past 4096 (two tiles: the test below)."""
    loop = lambda cfg: (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps, cfg.num_stages)  # noqa: E731
    assert loop(_config("layer_norm", 16384, 5001)) == ("multi_pass", 1, 1024, 2, 1)
    assert loop(_config("layer_norm", 8192, 12289)) == ("multi_pass", 1, 1024, 4, 1)
    assert loop(_config("layer_norm", 16384, 5001, dtype="float32")) == ("multi_pass", 1, 1024, 4, 1)
    assert loop(_config("layer_norm", 16384, 5002, dtype="float32")) == ("multi_pass", 1, 1024, 4, 1)
    for dtype in ("bfloat16", "float32"):
        assert loop(_config("layer_norm", 4096, 50257, dtype=dtype)) == ("multi_pass", 1, 2048, 8, 1)
    assert _config("layer_norm", 16384, 4100, dtype="float32").BLOCK_N != 1024  # whole vectors: unchanged
    for op in ("var", "std", "var_mean", "std_mean"):
        assert loop(_config(op, 8192, 12289)) == ("multi_pass", 1, 1024, 2, 1)
        assert _config(op, 64, 50257).strategy == "split"  # few rows
    assert loop(_config("softmax", 16384, 5001)) == ("multi_pass", 1, 1024, 2, 1)
    assert loop(_config("log_softmax", 8192, 12289)) == ("multi_pass", 1, 1024, 4, 1)
    assert _config("softmax", 2048, 50257).BLOCK_N == 8192  # the L2 rule
    assert loop(_config("softmax", 16384, 5001, dtype="float32")) == ("multi_pass", 1, 1024, 4, 1)
    assert _config("softmax", 8192, 12289, dtype="float32").strategy == "single_pass"  # (98 % in one tile)
    for op in ("sum", "mean", "prod", "amax", "amin"):
        assert loop(_config(op, 8192, 12289)) == ("multi_pass", 1, 1024, 4, 1)
        assert loop(_config(op, 3000, 4097, dtype="float32")) == ("multi_pass", 1, 1024, 4, 1)
        assert _config(op, 4096, 50257).BLOCK_N == 4096  # longer rows: unchanged
    assert loop(_config("max", 8192, 32001)) == ("multi_pass", 1, 1024, 4, 2)
    assert _config("max", 16384, 4097).strategy == "single_pass"  # loops only
    for op, N in (("layer_norm", 2049), ("var", 4095), ("softmax", 4096), ("sum", 4095)):
        assert _config(op, 32768, N).BLOCK_N != 1024, (op, N)
    assert _config("layer_norm", 16384, 4104).BLOCK_N != 1024  # whole vectors
    padded = Problem(op="layer_norm", dtype="bfloat16", M=16384, N=4097, K=1, stride_m=4112, stride_n=1, stride_k=1)
    assert h200_config(padded).BLOCK_N != 1024  # aligned starts


def test_rows_just_past_a_power_of_two_take_a_tail_tile():
    """Rows of up to 1/8 more than a power of two of 512-8192 (with the largest 16-byte shift) are single passes
    over that power of two plus a tail tile, on warps for 128 bytes of the first tile per thread (H200,
    softmax 32768x2049 bf16 45 -> 86 %, sum 48 -> 71); the plain reductions only for 2-byte rows
    to 2048+; odd-width 2-byte layer_norm rows past 4096 loop instead; rows further past, 1024 and shorter, and
    max/min keep their rules."""
    tail = lambda cfg: (cfg.strategy, cfg.BLOCK_N, cfg.BLOCK_TAIL, cfg.num_warps)  # noqa: E731
    for op in ("softmax", "log_softmax", "logsumexp", "var", "std", "var_mean", "std_mean", "layer_norm"):
        assert tail(_config(op, 32768, 2049)) == ("single_pass", 2048, 16, 1), op
        assert tail(_config(op, 32768, 2049, dtype="float32")) == ("single_pass", 2048, 16, 2), op
        assert tail(_config(op, 65536, 1025)) == ("single_pass", 1024, 16, 1), op
        if op != "layer_norm":
            assert tail(_config(op, 16384, 4097)) == ("single_pass", 4096, 16, 2), op
            assert tail(_config(op, 16384, 4600)) == ("single_pass", 4096, 512, 2), op  # (4600 + 7 - 4096 = 511)
        assert tail(_config(op, 16384, 4097, dtype="float32")) == ("single_pass", 4096, 16, 4), op
        assert tail(_config(op, 16384, 4104)) == ("single_pass", 4096, 16, 2), op  # (whole vectors too)
        for n in (1024, 1000, 2048, 3000, 4610, 9300, 512, 500, 600):
            assert _config(op, 16384, n).BLOCK_TAIL == 0, (op, n)
        assert _config(op, 16384, 2049, K=8).BLOCK_TAIL == 0, op  # (a non-last dim: columns)
    # past 8192 and just past 512: at most 4 warps; not 2-byte var/std rows
    for op in ("softmax", "log_softmax", "logsumexp", "layer_norm"):
        for dtype in ("bfloat16", "float32"):
            assert tail(_config(op, 8192, 8193, dtype=dtype)) == ("single_pass", 8192, 16, 4), (op, dtype)
            assert tail(_config(op, 131072, 513, dtype=dtype)) == ("single_pass", 512, 16, 1), (op, dtype)
    for op in ("var", "std", "var_mean", "std_mean"):
        assert tail(_config(op, 8192, 8193, dtype="float32")) == ("single_pass", 8192, 16, 4), op
        assert tail(_config(op, 131072, 513, dtype="float32")) == ("single_pass", 512, 16, 1), op
        assert _config(op, 8192, 8193).BLOCK_TAIL == 0 and _config(op, 131072, 513).BLOCK_TAIL == 0, op
    for op in ("sum", "mean", "prod", "amax", "amin"):
        assert _config(op, 8192, 8193).BLOCK_TAIL == 0 and _config(op, 131072, 513).BLOCK_TAIL == 0, op
        assert tail(_config(op, 32768, 2049)) == ("single_pass", 2048, 16, 1), op
        assert tail(_config(op, 65536, 1025, dtype="float16")) == ("single_pass", 1024, 16, 1), op
        for n, dtype in ((4097, "bfloat16"), (2049, "float32"), (4097, "float32")):
            assert _config(op, 16384, n, dtype=dtype).BLOCK_TAIL == 0, (op, n, dtype)
    # odd-width 2-byte layer_norm rows past 4096: 512-wide chunks on one warp (16384x4097 bf16: 58 %, the tail 50)
    for n in (4097, 4599):
        cfg = _config("layer_norm", 16384, n)
        assert (cfg.strategy, cfg.BLOCK_N, cfg.num_warps) == ("multi_pass", 512, 1), n
    for op in ("max", "min"):
        assert _config(op, 32768, 2049).BLOCK_TAIL == 0


@pytest.mark.parametrize(("op", "R", "N", "block_m"), [("log_softmax", 2794, 21, 4), ("var_mean", 69, 21, 4),
                                                       ("softmax", 16384, 21, 16), ("max", 221, 31, 4),
                                                       ("log_softmax", 9, 91, 1)])
def test_one_warp_row_tiles_shrink_until_the_grid_fills_the_device(op, R, N, block_m):
    """Fewer programs than 4 per SM: nothing hides one program's serial chain (a 32x32 float32 tile ran ~1500
    instructions on one warp: log_softmax 2794x21 18.5 us against eager's 4.5 on an H100, 5.3 with 4-row tiles).
    Tiles halve down to 4 elements a thread; many rows keep the 1024-element tile (the test above)."""
    cfg = _config(op, R, N, dtype="float32")
    assert (cfg.strategy, cfg.num_warps, cfg.BLOCK_M) == ("single_pass", 1, block_m)
    assert -(-R // cfg.BLOCK_M) >= 4 * FAKE_H200.sm_count or cfg.BLOCK_M * cfg.BLOCK_N <= 128


def test_odd_width_rows_fewer_than_the_sms_take_the_single_pass():
    """The 1024-wide loop of odd-width rows (two sweeps of ~6 chunks, one round trip each) is latency when no SM runs
    two programs: layer_norm 81x5233 fp16 13.8 -> 9.9 us as a single pass on an H100. Many rows keep the loop."""
    few = _config("layer_norm", 81, 5233, dtype="float16")
    assert (few.strategy, few.BLOCK_N) == ("single_pass", 8192)
    many = _config("layer_norm", 16384, 5233, dtype="float16")
    assert (many.strategy, many.BLOCK_N) == ("multi_pass", 1024)


def test_statistics_of_millions_of_float32_rows_of_up_to_4_take_64_rows_a_warp():
    """H100 (forced configs): std of 506640x3 float32 26.0 us in the one-warp tile of 256 rows, 15.4 in one of 64
    (eager 16.5-17.1). Only float32 rows of up to 4, and only grids of 4 such tiles a SM: fewer rows keep the
    small grids' tiles, 2-byte rows and rows of 5 the shared rules."""
    for op in ("var", "std", "var_mean", "std_mean"):
        for N in (2, 3, 4):
            cfg = _config(op, 506640, N, dtype="float32")
            assert (cfg.strategy, cfg.BLOCK_M, cfg.BLOCK_N, cfg.num_warps) == ("single_pass", 64, 4, 1), (op, N)
            assert "tiny_rows" in cfg.rule
    assert "tiny_rows" not in _config("std", 506640, 5, dtype="float32").rule
    assert "tiny_rows" not in _config("std", 506640, 3, dtype="bfloat16").rule
    assert "tiny_rows" not in _config("std", 1000, 3, dtype="float32").rule
    assert "tiny_rows" not in _config("sum", 506640, 3, dtype="float32").rule
