"""Edge cases of the arguments and of empty inputs, found by adversarial testing against torch (CPU): the order of
torch's checks, the dtypes torch accepts for an empty input, and the scalar types its argument parser reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tritred_ops as tr
from ops_helpers import seed


def _outcome(fn, *args, **kwargs):
    """("ok", dtype, shape) of ``fn(*args, **kwargs)``'s tensor result, or ("raise", exception type)."""
    try:
        out = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return ("raise", type(e))
    return ("ok", out.dtype, tuple(out.shape))


@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin_of_an_empty_input_check_each_given_dim_before_repeats(name, device):
    """torch checks each given dim of an empty input for a zero size (IndexError), in order, before it looks for
    repeated dims (RuntimeError): ``amax(x, (1, -2))`` of a (2, 0, 3) input raises IndexError (tritred raised the
    RuntimeError of a repeated dim); a repeat of non-empty dims before the empty one is still a RuntimeError."""
    g = torch.Generator().manual_seed(seed())
    a, c = (int(v) for v in torch.randint(1, 6, (2,), generator=g))
    x = torch.empty(a, 0, c, device=device)
    for dims in [(1, -2), (1, 1), [-2, 1, 0], (0, 1, 1), (2, -1, 1), (0, 0), (2, 5), (1, 5)]:
        for keepdim in (False, True):
            want = _outcome(getattr(torch, name), x.cpu(), dims, keepdim)
            got = _outcome(getattr(tr, name), x, dims, keepdim)
            assert got == want, (dims, keepdim)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("src", [torch.int64, torch.int8, torch.uint8, torch.bool, torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 5)])
def test_softmax_of_an_empty_input_takes_any_dtype(name, src, shape, device):
    """torch's softmax kernels check the dtype only for a non-empty input: an empty integer or bool input, or
    ``dtype=torch.int64`` on an empty one, gives an empty output of that dtype (tritred raised
    NotImplementedError). A non-empty integer input still raises NotImplementedError, as torch's."""
    x = torch.empty(shape, dtype=src, device=device)
    for dim in range(-len(shape), len(shape)):
        for dtype in (None, torch.int64, torch.float64):
            want = _outcome(getattr(torch, name), x.cpu(), dim, dtype=dtype)
            got = _outcome(getattr(tr, name), x, dim, dtype=dtype)
            assert got == want, (dim, dtype)
    g = torch.Generator().manual_seed(seed())
    full = torch.randint(1, 50, (3, 4), generator=g).to(src).to(device)
    if not src.is_floating_point:
        with pytest.raises(NotImplementedError):
            getattr(tr, name)(full, 1)


@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
def test_correction_that_is_a_numpy_scalar(name, device):
    """torch's argument parser reads a numpy scalar as the Number it holds: ``var(x, 1, correction=np.int64(2))``
    (tritred raised TypeError 'must be Number, not int64'); a numpy array is still a TypeError."""
    g = torch.Generator().manual_seed(seed())
    x = (torch.randn(4, 9, generator=g, dtype=torch.float64) * 3 + 1).to(device)
    for c in (np.int64(2), np.int32(0), np.float32(1.5), np.float64(0.25), np.bool_(True), np.uint8(3)):
        out, ref = getattr(tr, name)(x, 1, correction=c), getattr(torch, name)(x.cpu(), 1, correction=c)
        for o, r in zip(*((out, ref) if isinstance(ref, tuple) else ((out,), (ref,)))):
            torch.testing.assert_close(o.cpu(), r, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError):
        getattr(tr, name)(x, 1, correction=np.array([1]))


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "softmax", "log_softmax"])
@pytest.mark.parametrize("py_type", [float, int, bool])
@pytest.mark.parametrize("grad", [False, True])
def test_dtype_that_is_a_python_type(name, py_type, grad, device):
    """torch's argument parser reads a Python scalar type as a dtype: ``sum(x, dtype=float)`` is a float64 sum
    (int: int64, bool: bool); tritred raised TypeError 'must be torch.dtype, not type'. What torch then does with
    that dtype (a value, or its error for an integer softmax or mean) tritred does too."""
    g = torch.Generator().manual_seed(seed())
    x = torch.randn(5, 7, generator=g).to(device).requires_grad_(grad)
    want = _outcome(getattr(torch, name), x.detach().cpu().requires_grad_(grad), 1, dtype=py_type)
    assert _outcome(getattr(tr, name), x, 1, dtype=py_type) == want
    if want[0] == "ok":
        out = getattr(tr, name)(x, 1, dtype=py_type)
        ref = getattr(torch, name)(x.detach().cpu(), 1, dtype=py_type)
        assert out.requires_grad == (grad and ref.dtype.is_floating_point)
        torch.testing.assert_close(out.detach().cpu(), ref, rtol=1e-6, atol=1e-6)
