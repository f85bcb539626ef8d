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


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var", "std", "var_mean", "std_mean", "logsumexp"])
def test_dim_list_starting_with_a_bool(name, device):
    """torch's parser tells an int list by its first element, which must not be a bool; a bool after it counts as
    an int (``mean(x, [0, True])`` reduces dims 0 and 1)."""
    x = torch.randn(3, 4, device=device)
    for dim in ((True,), [False, 1]):
        with pytest.raises(TypeError, match=rf"{name}\(\): argument 'dim' must be tuple of ints, but found element "
                                            "of type bool at pos 0"):
            getattr(tr, name)(x, dim)
    out, ref = getattr(tr, name)(x, [0, True]), getattr(torch, name)(x.cpu(), [0, 1])
    for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
        torch.testing.assert_close(o.cpu(), r)


@pytest.mark.parametrize("name", ["var", "std", "var_mean", "std_mean"])
def test_unbiased_none_and_tensor_correction(name, device):
    """An explicit ``unbiased=None`` matches none of torch's overloads; a 0-d tensor ``correction`` that does not
    require grad is read as its number, any other tensor is a TypeError."""
    x = torch.randn(3, 5, device=device)
    fn = getattr(tr, name)
    for call in (lambda: fn(x, None, None), lambda: fn(x, 1, None, True), lambda: fn(x, 1, unbiased=None)):
        with pytest.raises(TypeError, match=rf"{name}\(\).*'unbiased' must be bool, not NoneType"):
            call()
    for c in (torch.tensor(0), torch.tensor(2.5)):
        out, ref = fn(x, 1, correction=c), getattr(torch, name)(x.cpu(), 1, correction=c)
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            torch.testing.assert_close(o.cpu(), r)
    for c in (torch.tensor([1]), torch.tensor(1.0, requires_grad=True)):
        with pytest.raises(TypeError, match=rf"{name}\(\): argument 'correction' must be Number, not Tensor"):
            fn(x, 1, correction=c)


def test_layer_norm_shape_that_is_a_tensor(device):
    x = torch.randn(3, 4, device=device)
    with pytest.raises(TypeError, match=r"layer_norm\(\): argument 'normalized_shape' \(position 2\) must be "
                                        "tuple of ints, not Tensor"):
        tr.layer_norm(x, torch.tensor([4]))


def test_batch_norm_running_stats_that_require_grad(device):
    """torch's autograd refuses them while grad mode is on (in eval too); nothing is updated. Under no_grad the
    call runs. A 0-d tensor momentum is read as its number, as torch's parser does."""
    x = torch.randn(3, 4, device=device)
    for training in (False, True):
        for name in ("running_mean", "running_var"):
            stats = {"running_mean": torch.zeros(4, device=device), "running_var": torch.ones(4, device=device)}
            stats[name].requires_grad_()
            before = {k: v.detach().clone() for k, v in stats.items()}
            with pytest.raises(RuntimeError, match=f"not differentiable with respect to argument '{name}'"):
                tr.batch_norm(x, stats["running_mean"], stats["running_var"], training=training)
            assert all(torch.equal(stats[k].detach(), before[k]) for k in stats)
    rm = torch.zeros(4, device=device, requires_grad=True)
    with torch.no_grad():
        tr.batch_norm(x, rm, torch.ones(4, device=device), training=True)
        ref_rm = torch.zeros(4, requires_grad=True)
        torch.nn.functional.batch_norm(x.cpu(), ref_rm, torch.ones(4), training=True)
    torch.testing.assert_close(rm.detach().cpu(), ref_rm.detach())
    rm, rv = torch.zeros(4, device=device), torch.ones(4, device=device)
    y = tr.batch_norm(x, rm, rv, training=True, momentum=torch.tensor(0.3))
    ref_rm, ref_rv = torch.zeros(4), torch.ones(4)
    ref = torch.nn.functional.batch_norm(x.cpu(), ref_rm, ref_rv, training=True, momentum=torch.tensor(0.3))
    torch.testing.assert_close(y.cpu(), ref)
    torch.testing.assert_close(rm.cpu(), ref_rm)
    torch.testing.assert_close(rv.cpu(), ref_rv)


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
