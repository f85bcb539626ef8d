"""float32 softmax element by element: its exp and 1 / s within a few ulp in every branch (``kernels._exp``,
``kernels._row_scale``: the EXACT constexpr).

On a GPU ``tl.exp`` is ex2.approx(fl(x log2 e)): the product's rounding makes exp(-80) off by up to ~2.6e-6
relative (22 ulp), and ``1 / s`` is the approximate division; EXACT keeps each output within 8 ulp (the sum's
rounding included: exact exps give up to ~5 ulp). Under the interpreter exp is numpy's (exact either way): there
the launch test below is what fails without EXACT.
"""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import config_id, seed

# (config, dim): every branch that writes float32 softmax with EXACT: single-pass rows, the online loop (its
# groups' rescales), single and looping columns, split columns merged inline and by the merge launch. (Split rows
# keep the plain exp: test_split_rows_take_the_plain_exp.)
BRANCHES = [
    (None, -1),
    (None, 0),
    (dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=512), -1),
    (dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=64), -1),
    (dict(strategy="single_pass", BLOCK_N=512, BLOCK_K=4), 0),
    (dict(strategy="multi_pass", BLOCK_N=16, BLOCK_K=4), 0),
    (dict(strategy="split", BLOCK_N=16, BLOCK_K=8, split=5), 0),
    (dict(strategy="split", BLOCK_N=8, BLOCK_K=8, split=40, num_warps=1), 0),  # 38 slices: the merge launch
]


def _spread_rows(device: str) -> torch.Tensor:
    """6 rows of 300 values uniform in [-80, 0], each row's maximum 0 at a random place: outputs from 1 / s down
    to e^-80 (normal float32), where exp's argument rounding is largest."""
    g = torch.Generator().manual_seed(seed())
    x = torch.rand((6, 300), generator=g, dtype=torch.float64) * -80
    x[torch.arange(6), torch.randint(0, 300, (6,), generator=g)] = 0.0
    return x.to(torch.float32).to(device)


@pytest.mark.parametrize(("cfg", "dim"), BRANCHES, ids=lambda v: str(v) if isinstance(v, int) else config_id(v))
def test_float32_softmax_within_a_few_ulp_of_each_element(cfg, dim, force, device):
    if cfg is not None:
        force("softmax", **cfg)
    x = _spread_rows(device)
    x = x if dim == -1 else x.t().contiguous()
    out = tr.softmax(x, dim)
    ref = torch.softmax(x.double().cpu(), dim)
    rel = ((out.double().cpu() - ref).abs() / ref).max().item()
    assert rel <= 8 * 2.0**-23, f"max relative error {rel:.3g} ({cfg}, dim={dim})"


@pytest.mark.parametrize(("name", "dtype", "exact"), [("softmax", torch.float32, True),
                                                      ("softmax", torch.bfloat16, False),
                                                      ("softmax", torch.float64, False),
                                                      ("log_softmax", torch.float32, False),
                                                      ("logsumexp", torch.float32, False)])
@pytest.mark.parametrize("dim", [-1, 0])
def test_exact_exp_is_float32_softmax_only(name, dtype, exact, dim, device, launch_spy):
    """EXACT costs ~5 instructions an element: float32 softmax only (bfloat16 and float16 outputs round far above
    exp's error; log_softmax and logsumexp take the sum only through log(s); float64 is exact already). On a GPU
    a single pass under 32 warps takes libdevice's expf (EXACT == 2); the interpreter (no libdevice) the split form."""
    x = _spread_rows(device)[:, :200].to(dtype)  # (200: under the split rows' length on the interpreter too)
    getattr(tr, name)(x if dim == -1 else x.t(), dim)
    want = ((True, 2) if device == "cuda" else (True,)) if exact else (False,)
    assert launch_spy and all(any(opts.get("EXACT") is w for w in want) for _, opts in launch_spy), launch_spy


def test_split_rows_take_the_plain_exp(force, device, launch_spy):
    """Split rows (float32 rows of 64K+ elements) keep ``tl.exp`` and ``e * (1 / s)``: with EXACT their 32-warp
    programs spilled and lost 90 -> 78 % of copy bandwidth (H100, 1024x131072), for an error still 1.16x eager's."""
    force("softmax", strategy="split", BLOCK_N=64, split=5)
    x = _spread_rows(device)
    out = tr.softmax(x, -1)
    # (one cooperative launch on a GPU; its two phases as two launches under the interpreter)
    assert launch_spy and {(k, o.get("EXACT")) for k, o in launch_spy} == {("_split_rows_kernel", False)}
    ref = torch.softmax(x.double().cpu(), -1)
    assert ((out.double().cpu() - ref).abs() / ref).max().item() <= 32 * 2.0**-23
