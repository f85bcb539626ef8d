"""rms_norm against torch.nn.functional.rms_norm: shapes, dtypes, strides, both strategies, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_core
from tritred_ops.runtime.caches import caches
from tritred_rmsnorm import rms_norm
from tritred_rmsnorm.plugin import rms_norm_config

pytestmark = pytest.mark.usefixtures("registry", "poison")

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def randn(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float32) * scale).to(dtype).to(device)


def assert_matches_torch(y: torch.Tensor, x: torch.Tensor, normalized_shape: list[int],
                         weight: torch.Tensor | None = None, eps: float | None = None) -> None:
    expected = F.rms_norm(x.cpu(), normalized_shape, weight.cpu() if weight is not None else None, eps)
    assert y.dtype == expected.dtype and y.shape == expected.shape
    assert y.is_contiguous()
    torch.testing.assert_close(y.cpu(), expected)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (4, 128), (3, 1000), (2, 3, 77), (6, 300), (5, 3000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_matches_torch(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> None:
    """Power-of-two and odd N, several rows per program, and N=3000 which takes the multi-pass branch on CPU."""
    x = randn(shape, dtype, device)
    w = randn(shape[-1:], dtype, device, seed=1)
    assert_matches_torch(rms_norm(x, [shape[-1]], w), x, [shape[-1]], w)


@pytest.mark.parametrize("eps", [None, 1e-5, 0.5])
def test_eps_and_no_weight(eps: float | None, device: str) -> None:
    x = randn((7, 33), torch.float32, device, scale=1e-3)  # tiny values: eps matters
    assert_matches_torch(rms_norm(x, [33], eps=eps), x, [33], eps=eps)


def test_default_eps_is_the_opmath_epsilon(device: str) -> None:
    """torch's eps=None for float16 is finfo(float32).eps (the computation dtype), not finfo(float16).eps."""
    x = torch.full((2, 16), 1e-3, dtype=torch.float16, device=device)
    y = rms_norm(x, [16])
    assert_matches_torch(y, x, [16])
    # 1e-3 / sqrt(1e-6 + 1.2e-7) = 0.945; with finfo(float16).eps = 9.8e-4 it would be 0.032
    assert 0.94 < y.float().mean().item() < 0.95


def test_several_normalized_dims(device: str) -> None:
    x = randn((3, 4, 5, 6), torch.float32, device)
    w = randn((5, 6), torch.float32, device, seed=2)
    assert_matches_torch(rms_norm(x, (5, 6), w), x, [5, 6], w)
    assert_matches_torch(rms_norm(x, [4, 5, 6]), x, [4, 5, 6])


def test_fp16_large_values_accumulate_in_fp32(device: str) -> None:
    x = randn((4, 200), torch.float16, device, scale=1000.0)  # x**2 overflows fp16, not the fp32 accumulator
    y = rms_norm(x, [200])
    assert torch.isfinite(y).all()
    assert_matches_torch(y, x, [200])


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(torch.float16, torch.float32), (torch.float32, torch.float64),
                                                  (torch.bfloat16, torch.float16), (torch.float64, torch.float32)])
def test_mixed_weight_dtype(x_dtype: torch.dtype, w_dtype: torch.dtype, device: str) -> None:
    """Output keeps the input's dtype; the weight multiplies in promote(opmath dtype, weight dtype), as torch."""
    x = randn((5, 50), x_dtype, device)
    w = randn((50,), w_dtype, device, seed=3)
    assert_matches_torch(rms_norm(x, [50], w), x, [50], w)


def test_strided_inputs_are_read_in_place(device: str) -> None:
    base = randn((40, 30), torch.float32, device)
    xt = base.t()  # 30 x 40 with stride (1, 30): the normalized axis is strided
    assert_matches_torch(rms_norm(xt, [40]), xt, [40])
    xs = base[::3, 1:29]  # sliced rows and columns
    assert_matches_torch(rms_norm(xs, [28]), xs, [28])
    xe = randn((1, 64), torch.float32, device).expand(5, 64)  # stride 0 rows
    assert_matches_torch(rms_norm(xe, [64]), xe, [64])


def test_not_viewable_input_is_gathered(device: str, registry: tritred_core.Registry) -> None:
    from tritred_rmsnorm import problem

    x = randn((4, 6, 10), torch.float32, device).transpose(0, 1)  # leading dims cannot merge
    assert problem(x, [10]).layout == "gathered"
    assert_matches_torch(rms_norm(x, [10]), x, [10])


def test_empty_inputs(device: str) -> None:
    for shape, ns in [((0, 8), [8]), ((3, 0), [0]), ((0, 4, 6), [4, 6])]:
        x = torch.empty(shape, device=device)
        y = rms_norm(x, ns)
        assert y.shape == x.shape and y.dtype == x.dtype


def test_forced_multi_pass_with_several_rows(device: str, registry: tritred_core.Registry) -> None:
    """A plugin registered with tryfirst wins over this one: multi_pass with BLOCK_M=4 and a ragged last chunk."""

    class Forcing:
        @tritred_core.hookimpl(tryfirst=True)
        def tritred_launch_config(self, spec: tritred_core.ReductionSpec, problem: tritred_core.Problem,
                                  device: tritred_core.DeviceInfo) -> tritred_core.LaunchConfig | None:
            if spec.name != "rms_norm":
                return None
            return tritred_core.LaunchConfig(strategy="multi_pass", BLOCK_M=4, BLOCK_N=16, num_warps=1)

    registry.register(Forcing(), name="forcing")
    x = randn((10, 45), torch.float32, device)
    w = randn((45,), torch.float32, device, seed=4)
    assert_matches_torch(rms_norm(x, [45], w), x, [45], w)
    cached = list(caches().launch_configs.values())
    assert [c.decided_by for c in cached] == ["forcing"]


def test_heuristic_branches() -> None:
    from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER

    def prob(M: int, N: int) -> tritred_core.Problem:
        return tritred_core.Problem(op="rms_norm", dtype="float32", M=M, N=N, K=1, stride_m=N)

    assert rms_norm_config(prob(8, 1000), FAKE_INTERPRETER).strategy == "single_pass"
    assert rms_norm_config(prob(8, 3000), FAKE_INTERPRETER).BLOCK_N == 256
    big = rms_norm_config(prob(4096, 4096), FAKE_H200)
    assert (big.strategy, big.BLOCK_M, big.BLOCK_N, big.num_warps) == ("single_pass", 2, 4096, 8)
    huge = rms_norm_config(prob(4, 100_000), FAKE_H200)
    assert (huge.strategy, huge.BLOCK_N, huge.num_warps) == ("multi_pass", 2048, 8)


def test_errors_match_torch(device: str) -> None:
    x = randn((3, 8), torch.float32, device)
    cases = [
        ((x, [4]), RuntimeError, "expected input with shape"),
        ((x, []), RuntimeError, "at least 1-dimensional"),
        ((x, [8], randn((4,), torch.float32, device)), RuntimeError, "Expected weight to be of same shape"),
        ((torch.arange(8, device=device).view(1, 8), [8]), NotImplementedError, "not implemented for 'int64'"),
        (("not a tensor", [8]), TypeError, "must be Tensor"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            rms_norm(*args)
        if not isinstance(args[0], str):
            with pytest.raises(exc):
                F.rms_norm(*args)


def test_needs_the_plugin_registered(device: str) -> None:
    """Without the plugin in the registry nobody decides rms_norm launches: a clear error, not a crash."""
    import tritred_ops.plugin

    reg = tritred_core.Registry(autoload=False)
    reg.register(tritred_ops.plugin, name="tritred_ops")
    previous = tritred_core.set_registry(reg)
    try:
        with pytest.raises(tritred_core.InvalidLaunchConfigError, match="no plugin returned a launch config"):
            rms_norm(randn((2, 8), torch.float32, device), [8])
    finally:
        tritred_core.set_registry(previous)
