"""normalize's gradient (the Triton forward, a torch-ops backward) against torch's: gradcheck in float64, dims,
layouts, dtypes, norms below eps and zero norms."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tritred_normalize import normalize

pytestmark = pytest.mark.usefixtures("registry", "poison")

TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (3e-2, 3e-2), torch.float64: (1e-12, 1e-12)}


def grads(fn, x: torch.Tensor, g: torch.Tensor, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    x = x.detach().requires_grad_()
    y = fn(x, **kwargs)
    y.backward(g)
    assert x.grad is not None
    return y.detach(), x.grad


@pytest.mark.parametrize(("shape", "dim"), [((3, 7), 1), ((4, 3, 2), 1), ((5, 4), 0)], ids=str)
def test_gradcheck(shape: tuple[int, ...], dim: int, device: str) -> None:
    x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: normalize(t, dim=dim), (x,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize(("shape", "dim", "layout"), [
    ((6, 40), -1, "contiguous"), ((6, 40), 0, "transposed"), ((3, 5, 8), 1, "contiguous"), ((4, 30), 1, "sliced"),
], ids=str)
def test_gradient_matches_torch_float64(shape: tuple[int, ...], dim: int, layout: str, dtype: torch.dtype,
                                        device: str) -> None:
    """The gradient of fresh random inputs (and a non-contiguous grad_output) against torch's in float64."""
    base = torch.randn(shape, dtype=torch.float64)
    if layout == "transposed":
        base = base.t().contiguous().t()
    elif layout == "sliced":
        base = torch.randn(shape[0], 2 * shape[1], dtype=torch.float64)[:, ::2]
    x = base.to(dtype).to(device)
    g = torch.randn(shape[::-1], dtype=torch.float64).t() if len(shape) == 2 else torch.randn(shape)
    _, dx = grads(normalize, x, g.to(dtype).to(device), dim=dim)
    _, ref = grads(F.normalize, x.cpu().double(), g.double(), dim=dim)
    assert dx.dtype == dtype and dx.shape == x.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(dx.cpu().double(), ref, rtol=rtol, atol=atol)


def test_gradient_below_eps_and_at_zero_norm(device: str) -> None:
    """Rows whose norm is under eps take no gradient through the norm (clamp_min), a zero row none at all
    through it (norm's gradient is 0 there), and eps=0 with a zero row gives what torch gives."""
    x = torch.randn(5, 6, dtype=torch.float64) * 1e-3
    x[1] = 0
    x[3] *= 1e3
    g = torch.randn(5, 6, dtype=torch.float64)
    for eps in (1e-12, 1e-2, 0.0):
        y, dx = grads(normalize, x.to(device), g.to(device), dim=1, eps=eps)
        y_ref, ref = grads(F.normalize, x, g, dim=1, eps=eps)
        torch.testing.assert_close(y.cpu(), y_ref, equal_nan=True)
        torch.testing.assert_close(dx.cpu(), ref, equal_nan=True)


def test_no_graph_without_grad(device: str) -> None:
    x = torch.randn(3, 4, device=device, requires_grad=True)
    assert normalize(x).grad_fn is not None
    with torch.no_grad():
        assert normalize(x).grad_fn is None
    assert normalize(x.detach()).grad_fn is None
