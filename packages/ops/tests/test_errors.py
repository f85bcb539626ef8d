"""Bad input: the exception type torch raises, a message naming the op and argument, nothing mutated."""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var", "std", "var_mean", "std_mean", "logsumexp"])
def test_dim_out_of_range(name, device):
    x = torch.randn(3, 4, device=device)
    expected = r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"
    with pytest.raises(IndexError, match=rf"{name}.*{expected}"):
        getattr(tr, name)(x, 2)
    with pytest.raises(RuntimeError, match=rf"{name}.*dim 1 appears multiple times"):
        getattr(tr, name)(x, (1, -1))


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "max", "min", "prod"])
def test_single_dim_out_of_range(name, device):
    x = torch.randn(3, 4, device=device)
    with pytest.raises(IndexError, match=rf"{name}.*out of range"):
        getattr(tr, name)(x, -3)


@pytest.mark.parametrize("name", ["sum", "amax", "max", "softmax", "var", "logsumexp", "prod"])
def test_complex_not_implemented(name, device):
    x = torch.randn(3, 4, dtype=torch.complex64, device=device)
    with pytest.raises(NotImplementedError, match=name):
        getattr(tr, name)(x, 1)


def test_non_tensor_input():
    with pytest.raises(TypeError, match=r"sum\(\): argument 'input' must be Tensor"):
        tr.sum([1.0, 2.0])


def test_bad_dim_type(device):
    with pytest.raises(TypeError, match="dim"):
        tr.sum(torch.randn(3, device=device), "0")


def test_mean_of_integers(device):
    with pytest.raises(RuntimeError, match="mean.*Got: Long"):
        tr.mean(torch.arange(4, device=device))
    with pytest.raises(TypeError, match=r"mean\(\): argument 'dim'"):  # (torch's argument parser comes first)
        tr.mean(torch.arange(4, device=device), 1.0)


@pytest.mark.parametrize(("name", "position"), [("layer_norm", 5), ("rms_norm", 4)])
def test_eps_that_is_not_a_number(name, position, device):
    """A string eps: torch's argument parser's TypeError, naming the argument and its position."""
    x = torch.randn(2, 4, device=device)
    args = (None, None) if name == "layer_norm" else (None,)
    with pytest.raises(TypeError, match=rf"{name}\(\): argument 'eps' \(position {position}\) must be float, not str"):
        getattr(tr, name)(x, (4,), *args, "a")


def test_cpu_without_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match=r"tritred\.softmax\(\).*TRITON_INTERPRET"):
        tr.softmax(torch.randn(2, 3), -1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA and CPU tensors together")
def test_device_mix():
    x = torch.randn(4, 8, device="cuda")
    w = torch.ones(8)
    with pytest.raises(RuntimeError, match="layer_norm.*weight.*cpu"):
        tr.layer_norm(x, (8,), w)
    rm, rv = torch.zeros(8), torch.ones(8)
    with pytest.raises(RuntimeError, match="batch_norm.*running_mean"):
        tr.batch_norm(torch.randn(4, 8, device="cuda"), rm, rv, training=True)
    assert torch.equal(rm, torch.zeros(8))
