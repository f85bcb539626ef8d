"""Shared test helpers: fp64 references, tolerances, input layouts, output gradients and the compile check."""

from __future__ import annotations

import math

import torch

# (rtol, atol) of one rounding of the output dtype, scaled per check.
EPS = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 2e-6, torch.float64: 1e-13}

LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")


def h200_config(problem):
    """The launch config the registry gives ``problem`` on a fake H200 (``tritred_core.testing.FAKE_H200``): the
    GPU's decision on any machine, for heuristics tests and for tests that force the GPU's configs."""
    from tritred_core import get_registry
    from tritred_core.testing import FAKE_H200

    reg = get_registry()
    return reg.launch_config(reg.get(problem.op).spec, problem, FAKE_H200)


def h200_config_of(op: str, M: int, N: int, K: int = 1, dtype: str = "bfloat16", stride: int | None = None):
    """:func:`h200_config` of ``op`` over an (M, N, K) view, N the reduced dim (K its stride: the kept inner dim),
    rows ``stride`` apart (default: dense)."""
    from tritred_core import Problem

    stride_m, stride_n = (N * K if stride is None else stride), K
    return h200_config(Problem(op=op, dtype=dtype, M=M, N=N, K=K, stride_m=stride_m, stride_n=stride_n,
                               stride_k=1))


def noncontiguous(shape, device):
    """Random float64 values of ``shape`` in a non-contiguous layout (transposed, or every other element of a
    1-d buffer; a 0-d tensor as is): the output gradients of the tests."""
    shape = tuple(shape)
    if len(shape) >= 2:
        return torch.randn(tuple(reversed(shape)), dtype=torch.float64, device=device).permute(
            *reversed(range(len(shape))))
    if len(shape) == 1:
        return torch.randn(2 * shape[0], dtype=torch.float64, device=device)[::2]
    return torch.randn((), dtype=torch.float64, device=device)


def seed() -> int:
    """A fresh seed per call (tests draw new inputs every run), printed on failure by the assert messages."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def randn(shape, dtype, device, layout="contiguous", gen_seed=None, offset=0.0, scale=1.0):
    """Random values of ``shape`` in a given memory layout (the logical values do not depend on the layout)."""
    g = torch.Generator().manual_seed(seed() if gen_seed is None else gen_seed)
    shape = tuple(shape)
    if dtype.is_floating_point:
        base = torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset
    elif dtype == torch.bool:
        base = (torch.rand(shape, generator=g) > 0.5).to(torch.float64)
    else:
        base = torch.randint(-20, 20, shape, generator=g).to(torch.float64)
    base = base.to(dtype)
    if layout == "contiguous" or len(shape) == 0:
        return base.to(device)
    if layout == "transposed":  # same values, reversed memory order of dims
        return base.permute(*reversed(range(len(shape)))).contiguous().to(device).permute(
            *reversed(range(len(shape))))
    if layout == "sliced":  # every other element of a wider last dim, and an offset start
        wide = torch.zeros(shape[:-1] + (2 * shape[-1] + 1,), dtype=dtype)
        wide[..., 1::2] = base
        return wide.to(device)[..., 1::2]
    if layout == "expanded":  # a stride-0 dim: the first dim broadcast from size 1
        return base[:1].to(device).expand(shape)
    raise ValueError(layout)


def assert_close(out, ref, *, n: int = 1, scale: float = 1.0, what: str = "") -> None:
    """``out`` (any float dtype) vs an fp64 reference: NaN/inf positions equal, values within four roundings of the
    output dtype plus an accumulation error of ~sqrt(n) roundings of ``scale`` in the accumulation dtype: float32
    for float16/bfloat16 outputs (tritred accumulates them in float32), the output's own dtype otherwise. (With
    the output's precision for the accumulation term, a bf16 sum of 1000 values missing one of them passed.)"""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o, r = out.detach().cpu().double(), ref.detach().cpu().double()
    assert torch.equal(o.isnan(), r.isnan()), f"{what}: NaN positions differ\n{o}\n{r}"
    fin = r.isfinite()
    assert torch.equal(o[~fin & ~r.isnan()], r[~fin & ~r.isnan()]), f"{what}: inf values differ"
    eps = EPS.get(out.dtype, 0.0)
    acc_eps = EPS[torch.float32] if out.dtype in (torch.float16, torch.bfloat16) else eps
    tol = acc_eps * (1 + math.sqrt(max(n, 1))) * max(scale, 1e-30)
    err = (o[fin] - r[fin]).abs()
    bound = tol + eps * 4 * r[fin].abs()
    if err.numel():
        worst = (err - bound).argmax()
        at, got, want = worst.item(), o[fin][worst].item(), r[fin][worst].item()
        assert bool((err <= bound).all()), (f"{what}: max error {err.max().item():.3e} > tolerance "
                                            f"(at {at}: out {got} ref {want})")


def config_id(c: dict | None) -> str:
    """pytest id of a forced launch config (None: the built-in heuristic)."""
    if c is None:
        return "heuristic"
    persist = f"-persist{c['num_programs']}" if c.get("num_programs") else ""
    stages = f"-stages{c['num_stages']}" if c.get("num_stages", 1) > 1 else ""
    return f"{c['strategy']}-K{c.get('BLOCK_K', 1)}-split{c.get('split', 1)}{persist}{stages}"


def assert_compiled_matches_eager(model, inputs, dynamic):
    """``torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=dynamic)`` on each input of ``inputs``
    (floating tensors that require grad): the output and the input's gradient equal eager's, and the whole run
    compiles one frame (dynamic: later shapes without recompiling)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, backend=counter, fullgraph=True, dynamic=dynamic)
    for x in inputs:
        y = compiled(x)
        (g,) = torch.autograd.grad(y, x)
        x_eager = x.detach().requires_grad_()
        y_eager = model(x_eager)
        (g_eager,) = torch.autograd.grad(y_eager, x_eager)
        torch.testing.assert_close(y, y_eager)
        torch.testing.assert_close(g, g_eager)
    assert counter.frame_count == 1
