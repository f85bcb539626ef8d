"""Inputs that require grad: every op refuses them while grad mode is on (no backward yet), rather than return a
result cut from the autograd graph; under ``torch.no_grad()`` or ``torch.inference_mode()`` the call runs."""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import randn

#: Every public op: a call on a small float input ``x`` (its other tensors, when it has some, built from ``x``).
CALLS = {
    "layer_norm": lambda x: tr.layer_norm(x, (x.shape[-1],)),
    "layer_norm_with_stats": lambda x: tr.layer_norm_with_stats(x, (x.shape[-1],)),
}


#: The ops that have autograd (their gradients are tested against torch's in their families' tests).
TRAINED = {"softmax", "log_softmax", "logsumexp", "sum", "mean", "prod", "amax", "amin", "max", "min", "var", "std",
           "var_mean", "std_mean", "batch_norm"}


def test_every_public_op_is_covered():
    assert set(CALLS) | TRAINED >= set(tr.__all__) - {"nn", "patch", "enable", "disable"}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_requires_grad_raises_naming_the_op(name, device):
    """NotImplementedError naming the op, also when the same call has a replay plan (its key does not see
    requires_grad); no_grad, inference_mode and a detached input run."""
    x = randn((4, 6), torch.float32, device)
    with torch.no_grad():
        CALLS[name](x)
    CALLS[name](x)  # (a saved plan, where the call saves one)
    leaf = x.clone().requires_grad_()
    with pytest.raises(NotImplementedError, match=f"tritred\\.{name}\\(\\): backward is not implemented yet; call "
                                                  "it under torch.no_grad\\(\\) or on a detached input"):
        CALLS[name](leaf)
    with pytest.raises(NotImplementedError, match=f"tritred\\.{name}\\(\\)"):
        CALLS[name](leaf * 2)  # (not a leaf: any tensor that requires grad)
    with torch.no_grad():
        CALLS[name](leaf)
    with torch.inference_mode():
        CALLS[name](leaf)
    CALLS[name](leaf.detach())


def test_parameters_that_require_grad(device):
    """layer_norm's and batch_norm's weight and bias (an nn module's parameters) count too."""
    x = randn((4, 6), torch.float32, device)
    w = torch.ones(6, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="tritred.layer_norm\\(\\)"):
        tr.layer_norm(x, (6,), w, None)
    with torch.no_grad():
        tr.layer_norm(x, (6,), w, w)
