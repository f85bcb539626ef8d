"""normalize against torch.nn.functional.normalize (float64 reference): dims, dtypes, layouts, both strategies,
eps, non-finite values, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import tritred_core
from tritred_normalize import normalize
from tritred_normalize.plugin import normalize_config
from tritred_ops.runtime.caches import caches

pytestmark = pytest.mark.usefixtures("registry", "poison")

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# (rtol, atol) of two roundings in the dtype (the denominator's and the quotient's); |y| <= 1.
TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2), torch.float32: (2e-6, 2e-6),
       torch.float64: (1e-13, 1e-13)}


def randn(shape: tuple[int, ...], dtype: torch.dtype, device: str, scale: float = 1.0) -> torch.Tensor:
    """Fresh random values every run (the seed is in the failure message through the values themselves)."""
    return (torch.randn(shape, dtype=torch.float64) * scale).to(dtype).to(device)


def assert_matches_torch(y: torch.Tensor, x: torch.Tensor, dim: int, eps: float = 1e-12) -> None:
    """Values against torch in float64 (on the same input values), dtype, shape and strides against torch's call."""
    native = F.normalize(x.cpu(), dim=dim, eps=eps)
    assert y.dtype == native.dtype and y.shape == native.shape and y.stride() == native.stride()
    expected = F.normalize(x.cpu().double(), dim=dim, eps=eps)
    rtol, atol = TOL[x.dtype]
    torch.testing.assert_close(y.cpu().double(), expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize(("shape", "dim"), [
    ((1, 1), 1), ((4, 128), 1), ((3, 1000), -1), ((2, 3, 77), -1),  # rows in registers, several a program
    ((6, 3000), 1),  # rows past the interpreter's 1024: multi_pass
    ((3, 5, 7), 1), ((2, 4, 6, 2), 1),  # columns in registers (dim=1 of NCHW)
    ((300, 40), 0), ((2, 600, 3), 1),  # long columns: multi_pass
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else f"dim{v}")
def test_matches_torch(shape: tuple[int, ...], dim: int, dtype: torch.dtype, device: str) -> None:
    x = randn(shape, dtype, device)
    assert_matches_torch(normalize(x, dim=dim), x, dim)


def test_default_arguments_are_torchs(device: str) -> None:
    x = randn((4, 5, 6), torch.float32, device)
    assert_matches_torch(normalize(x), x, 1)  # dim=1, p=2, eps=1e-12
    assert_matches_torch(normalize(x, 2, -1, 1e-12), x, -1)


def test_layouts_are_read_in_place_and_kept(device: str) -> None:
    """Transposed, sliced, expanded and channels-last inputs: torch's values and torch's output strides."""
    base = randn((40, 30), torch.float32, device)
    for x, dim in [(base.t(), 1), (base.t(), 0), (base[::3, 1:29], 1), (base[::2].t(), 1),
                   (randn((1, 64), torch.float32, device).expand(5, 64), 1),
                   (randn((2, 3, 4, 5), torch.float32, device).to(memory_format=torch.channels_last), 1)]:
        assert_matches_torch(normalize(x, dim=dim), x, dim)


def test_input_without_a_view_is_gathered(device: str, registry: tritred_core.Registry) -> None:
    from tritred_normalize import problem

    x = randn((4, 6, 10), torch.float32, device).transpose(0, 1)  # dims 0 and 1 cannot merge
    assert problem(x, dim=2).layout == "gathered"
    assert problem(x, dim=1).layout == "strided"
    assert_matches_torch(normalize(x, dim=2), x, 2)


@pytest.mark.parametrize("eps", [0.5, 1e-3, 0.0])
def test_eps_clamps_small_norms(eps: float, device: str) -> None:
    x = randn((7, 33), torch.float32, device, scale=1e-3)  # norms ~6e-3: eps=0.5 and 1e-3 decide some rows
    x[2] = 0  # a zero row: 0 / eps = 0 (eps=0: 0/0 = NaN, as torch)
    assert_matches_torch(normalize(x, dim=1, eps=eps), x, 1, eps)


def test_float64_eps_keeps_float64_precision(device: str) -> None:
    """eps reaches float64 kernels in two float32 parts: y = x / eps to float64 precision, not float32's."""
    x = randn((3, 20), torch.float64, device, scale=1e-20)
    y = normalize(x, dim=1, eps=1e-12)
    torch.testing.assert_close(y.cpu(), x.cpu() / 1e-12, rtol=1e-14, atol=0)


def test_half_precision_denominator_as_torch(device: str) -> None:
    """torch's norm is in the input's dtype: eps=1e-12 is 0 in float16 (a zero row gives NaN) and a norm past
    65504 is inf (the row gives zeros); bfloat16 keeps eps (a zero row gives zeros)."""
    x = torch.zeros(2, 8, dtype=torch.float16, device=device)
    x[1] = 3000.0  # norm 8485 in fp32 and in fp16
    x16 = torch.cat([x, torch.full((1, 8), 30000.0, dtype=torch.float16, device=device)])  # norm 84853: inf
    y = normalize(x16, dim=1)
    expected = F.normalize(x16.cpu(), dim=1)
    assert y[0].isnan().all() and (y[2] == 0).all()
    torch.testing.assert_close(y.cpu(), expected, equal_nan=True)
    zb = torch.zeros(2, 8, dtype=torch.bfloat16, device=device)
    assert (normalize(zb, dim=1) == 0).all() and (F.normalize(zb.cpu(), dim=1) == 0).all()


def test_non_finite_values(device: str) -> None:
    x = randn((4, 9), torch.float32, device)
    x[0, 3] = float("nan")  # the whole row is NaN
    x[1, 2] = float("inf")  # inf / inf = NaN there, 0 elsewhere
    x[2, 5] = float("-inf")
    y = normalize(x, dim=1)
    assert y[0].isnan().all()
    assert_matches_torch(y, x, 1)


def test_empty_and_zero_dim_inputs(device: str) -> None:
    for shape, dim in [((0, 8), 1), ((3, 0), 1), ((0, 4, 6), -1), ((2, 0, 3), 1)]:
        x = torch.empty(shape, device=device)
        y = normalize(x, dim=dim)
        assert y.shape == x.shape and y.dtype == x.dtype
    s = torch.tensor(-3.0, device=device)
    for dim in (0, -1):
        assert normalize(s, dim=dim).item() == F.normalize(s.cpu(), dim=dim).item() == -1.0


@pytest.mark.triton_compat
def test_forced_configs_with_several_lines_and_ragged_chunks(device: str, registry: tritred_core.Registry) -> None:
    """A plugin registered tryfirst wins over this one: multi_pass with 4 rows / 4 columns a program and a last
    chunk of N that is partly masked, and single_pass with lines past the end of the input."""
    forced: list[tritred_core.LaunchConfig] = []

    class Forcing:
        @tritred_core.hookimpl(tryfirst=True)
        def tritred_launch_config(self, spec: tritred_core.ReductionSpec, problem: tritred_core.Problem,
                                  device: tritred_core.DeviceInfo) -> tritred_core.LaunchConfig | None:
            return forced[-1] if spec.name == "normalize" else None

    registry.register(Forcing(), name="forcing")
    for cfg in (dict(strategy="multi_pass", BLOCK_M=4, BLOCK_K=4, BLOCK_N=16, num_warps=1),
                dict(strategy="single_pass", BLOCK_M=8, BLOCK_K=8, BLOCK_N=64, num_warps=2)):
        forced.append(tritred_core.LaunchConfig(**cfg))  # type: ignore[arg-type]
        caches().launch_configs.clear()
        for shape, dim in [((10, 45), 1), ((3, 45, 10), 1)]:
            x = randn(shape, torch.float32, device)
            assert_matches_torch(normalize(x, dim=dim), x, dim)
        assert {c.decided_by for c in caches().launch_configs.values()} == {"forcing"}


@pytest.mark.triton_compat
def test_heuristic_branches() -> None:
    from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER

    def cfg(M: int, N: int, K: int = 1, dtype: str = "float32", device: tritred_core.DeviceInfo = FAKE_H200,
            ) -> tuple[object, ...]:
        p = tritred_core.Problem(op="normalize", dtype=dtype, M=M, N=N, K=K, stride_m=N * K, stride_n=K)
        c = normalize_config(p, device)
        return c.strategy, c.BLOCK_M, c.BLOCK_K, c.BLOCK_N, c.num_warps

    assert cfg(4096, 1000) == ("single_pass", 8, 1, 1024, 8)  # rows in registers, 8192-element tiles
    assert cfg(4096, 16384) == ("single_pass", 1, 1, 16384, 16)
    assert cfg(4096, 16384, dtype="float64") == ("multi_pass", 1, 1, 2048, 8)  # 8-byte accumulators: half
    assert cfg(4, 100_000) == ("multi_pass", 1, 1, 2048, 8)
    assert cfg(64, 128, K=196) == ("single_pass", 1, 64, 128, 8)  # NCHW dim=1: 64 columns a program
    assert cfg(64, 512, K=196) == ("multi_pass", 1, 64, 128, 8)  # 128 elements of each column a step
    assert cfg(8, 1000, device=FAKE_INTERPRETER) == ("single_pass", 1, 1, 1024, 1)
    assert cfg(8, 3000, device=FAKE_INTERPRETER)[::3] == ("multi_pass", 256)


def test_errors_match_torch(device: str) -> None:
    x = randn((3, 8), torch.float32, device)
    as_torch = [  # torch raises the same exception type
        ((x,), {"dim": 2}, IndexError, r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
        ((torch.arange(8, device=device).view(1, 8),), {}, RuntimeError, "Expected a floating point"),
    ]
    for args, kwargs, exc, msg in as_torch:
        with pytest.raises(exc, match=msg):
            normalize(*args, **kwargs)
        with pytest.raises(exc):
            F.normalize(*(a.cpu() for a in args), **kwargs)
    not_here = [  # torch computes these; this plugin names what it does not implement
        ((x,), {"p": 1.0}, "p=1.0 is not implemented"),
        ((x,), {"p": float("inf")}, "p=inf is not implemented"),
        ((x.to(torch.complex64),), {}, "dtype complex64 is not supported"),
        ((x,), {"out": torch.empty_like(x)}, "out= is not supported"),
    ]
    for args, kwargs, msg in not_here:
        with pytest.raises(NotImplementedError, match=f"normalize\\(\\): {msg}"):
            normalize(*args, **kwargs)
    with pytest.raises(TypeError, match="must be Tensor"):
        normalize("not a tensor")  # type: ignore[arg-type]


def test_needs_the_plugin_registered(device: str) -> None:
    """Without the plugin in the registry nobody decides normalize launches: a clear error, not a crash."""
    import tritred_ops.plugin

    reg = tritred_core.Registry(autoload=False)
    reg.register(tritred_ops.plugin, name="tritred_ops")
    previous = tritred_core.set_registry(reg)
    try:
        with pytest.raises(tritred_core.InvalidLaunchConfigError, match="no plugin returned a launch config"):
            normalize(randn((2, 8), torch.float32, device))
    finally:
        tritred_core.set_registry(previous)
