"""The launch configs that the rules for grids that cannot fill the device give on an H200 (one-warp row tiles
shrunk to fill the grid, odd-width rows fewer than the SMs in one pass, column slices one tile long), forced on
the device under test and compared with float64 references: the interpreter's own (tiny) rules never reach
them, and a fake H200's decision is otherwise only checked for fitting the problem."""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import assert_close, seed
from tritred_core import get_registry
from tritred_core.testing import FAKE_H200


def _near_one(shape, dtype, device, g):
    """Values 1 +- 0.01: products of thousands of them stay finite."""
    return (1 + 0.01 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype).to(device)


CASES = {
    # (op, build(device, g) -> args, kwargs, torch reference over float64 args, expected H200 strategy / knob)
    "log_softmax 600x21 fp32": ("log_softmax", lambda d, g: ((torch.randn(600, 21, generator=g).to(d), -1), {}),
                                 lambda x, dim: torch.log_softmax(x, dim), ("single_pass", "BLOCK_M", 4)),
    "var_mean 69x21 fp32": ("var_mean", lambda d, g: ((torch.randn(69, 21, generator=g).to(d) + 3, -1), {}),
                            lambda x, dim: torch.var_mean(x, dim), ("single_pass", "BLOCK_M", 4)),
    "layer_norm 8x5233 fp16": (
        "layer_norm", lambda d, g: ((torch.randn(8, 5233, generator=g).half().to(d), (5233,),
                                     torch.randn(5233, generator=g).half().to(d),
                                     torch.randn(5233, generator=g).half().to(d)), {}),
        lambda x, s, w, b: torch.nn.functional.layer_norm(x, s, w, b), ("single_pass", "BLOCK_N", 8192)),
    "amax dim=1 2x1024x64 fp32": ("amax", lambda d, g: ((torch.randn(2, 1024, 64, generator=g).to(d), 1), {}),
                                  lambda x, dim: torch.amax(x, dim), ("split", "split", 32)),
    "sum dim=0 5200x512 fp32": ("sum", lambda d, g: ((torch.randn(5200, 512, generator=g).to(d), 0), {}),
                                lambda x, dim: torch.sum(x, dim), ("split", "num_stages", 2)),
    "prod dim=-1 transposed 116x700 bf16": (
        "prod", lambda d, g: ((_near_one((700, 116), torch.bfloat16, d, g).t(), -1), {}),
        lambda x, dim: torch.prod(x, dim), ("split", "split", 22)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_small_grid_configs_compute_the_op(case, force, device):
    op, build, reference, (strategy, knob, value) = CASES[case]
    g = torch.Generator().manual_seed(seed())
    args, kwargs = build(device, g)
    rec = get_registry().get(op)
    config = get_registry().launch_config(rec.spec, rec.problem(*args, **kwargs), FAKE_H200)
    assert (config.strategy, getattr(config, knob)) == (strategy, value), config  # (the rule under test)
    force(op, **config.launch_fields())
    out = getattr(tr, op)(*args, **kwargs)
    ref = reference(*[a.double() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    n = args[0].shape[-1] if op != "sum" else args[0].shape[0]
    for o, r in zip(outs, refs):
        assert_close(o, r, n=max(n, 1), scale=4, what=case)
