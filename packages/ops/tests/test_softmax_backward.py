"""softmax, log_softmax and logsumexp gradients against torch's in float64: dims, strides, dtypes, every backward
branch forced, inf/NaN, poisoned and replayed outputs, determinism, and the backward launch rules on an H200."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import tritred_ops as tr
from ops_helpers import EPS, h200_config, randn
from ops_helpers import seed as ops_seed
from tritred_core import Problem
from tritred_ops.families.softmax import backward as bwd
from tritred_ops.runtime import replay

SOFTMAXES = ("softmax", "log_softmax")


def _launches(monkeypatch):
    """From now on: (kernel name, SINGLE, PERSIST) of each kernel launch of the full path, in order."""
    seen = []
    real = replay.Recorder.launch

    def spy(self, kernel, grid, *args, **kwargs):
        seen.append((kernel.fn.__name__, kwargs.get("SINGLE"), kwargs.get("PERSIST")))
        return real(self, kernel, grid, *args, **kwargs)

    monkeypatch.setattr(replay.Recorder, "launch", spy)
    return seen


def _grad(name, x, dim, dy, dtype=None, **kwargs):
    """d(name(x, dim, dtype) . dy)/dx through the public function (the eager autograd Function)."""
    leaf = x.detach().requires_grad_()  # (the caller's layout, as a leaf)
    args = (dim, kwargs.get("keepdim", False)) if name == "logsumexp" else (dim, dtype)
    y = getattr(tr, name)(leaf, *args)
    assert y.grad_fn is not None
    y.backward(dy)
    assert leaf.grad.dtype == x.dtype and leaf.grad.shape == x.shape
    return leaf.grad


def _check(name, dx, x, dim, dy, cast=None, what=""):
    """``dx`` against torch's float64 gradient of ``name(x.to(cast), dim)`` for ``dy`` (softmax(x, dtype=c) is
    softmax(x.to(c)): the reference starts from the same rounded input), within a bound per element: the forward
    output's rounding in ``cast`` (y, or log y) carried through the formula, the row sum's accumulation (fp32, fp64
    for fp64) over N terms, and the rounding of dx to its dtype. NaN positions must be equal."""
    cast = cast or x.dtype
    x64 = x.detach().to(cast).double().requires_grad_()
    y64 = getattr(torch, name)(x64, dim)
    y64.backward(dy.double())
    ref, y64 = x64.grad, y64.detach()
    got = dx.detach().double()
    assert torch.equal(got.isnan(), ref.isnan()), f"{what}: NaN positions differ\n{got}\n{ref}"
    fin = ref.isfinite()
    n = x.shape[dim] if x.dim() else 1
    e_c, e_d = 4 * EPS[cast], 4 * max(EPS[cast], EPS[dx.dtype])  # (dx is rounded to cast, then to its dtype)
    e_acc = 4 * EPS[torch.float64 if cast == torch.float64 else torch.float32] * (1 + math.sqrt(n))
    g = dy.double().abs()
    row_max = g.amax(dim, keepdim=True) if x.dim() else g
    if name == "softmax":  # y_i (dy_i - sum_j y_j dy_j)
        bound = y64 * (e_c + e_acc) * (g + 2 * row_max)
    else:  # dy_i - p_i sum_j dy_j, p_i = exp(log p_i) from a rounded log p_i
        p, row_sum = y64.exp(), (g.sum(dim, keepdim=True) if x.dim() else g)
        bound = torch.where(p == 0, 0.0, p * row_sum * (e_c * (1 + y64.abs()) + e_acc))  # (y = -inf: dx = dy)
    floor = max(4 * torch.finfo(t).tiny * torch.finfo(t).eps for t in (cast, dx.dtype))  # (subnormal spacing)
    bound = (bound + e_d * ref.abs() + floor)[fin]
    err = (got - ref).abs()[fin]
    if err.numel():
        worst = (err - bound).argmax()
        assert bool((err <= bound).all()), (f"{what}: error {err[worst].item():.3e} > bound {bound[worst].item():.3e} "
                                            f"(out {got[fin][worst].item()} ref {ref[fin][worst].item()})")


@pytest.mark.parametrize("name", SOFTMAXES)
def test_dims_and_strides(name, device):
    """Last, middle and first dims of a 3-d input, contiguous, transposed and sliced inputs; dy contiguous,
    transposed, sliced and expanded (stride 0: the gradient of a sum)."""
    base = randn((3, 5, 17), torch.float32, device, scale=2)
    inputs = [("contiguous", base), ("transposed", base.permute(2, 1, 0).contiguous().permute(2, 1, 0)),
              ("sliced", randn((3, 5, 35), torch.float32, device, scale=2)[:, :, 1::2])]
    for dim in (-1, 1, 0):
        dys = {"contiguous": randn(base.shape, torch.float32, device),
               "transposed": randn(base.shape[::-1], torch.float32, device).permute(2, 1, 0),
               "sliced": randn((3, 5, 34), torch.float32, device)[:, :, ::2],
               "expanded": randn((1, 5, 1), torch.float32, device).expand(base.shape)}
        for i, (how, dy) in enumerate(dys.items()):
            what, x = inputs[(i + dim) % 3]
            _check(name, _grad(name, x, dim, dy), x, dim, dy, what=f"{name} {what} dim={dim} dy {how}")


#: (input dtype, dtype=): the gradient comes back in the input's dtype, rounded to ``dtype`` first (as torch).
DTYPES = [(torch.float32, None), (torch.bfloat16, None), (torch.float64, None), (torch.float16, None),
          (torch.float32, torch.float64), (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16),
          (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float64), (torch.float64, torch.float16)]


@pytest.mark.parametrize("name", SOFTMAXES)
@pytest.mark.parametrize("dtype,cast", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_dtypes(name, dtype, cast, device):
    """Inputs that ``dtype=`` converts exactly (the forward's conversion is the forward tests'; the Triton
    interpreter truncates float32 -> bfloat16 where a GPU and torch round to nearest)."""
    x = randn((5, 40), cast or dtype, device, scale=3).to(dtype)
    for dim in (1, 0):
        dy = randn(x.shape, cast or dtype, device)
        _check(name, _grad(name, x, dim, dy, cast), x, dim, dy, cast, what=f"{name} {dtype} dtype={cast} {dim}")


def test_backward_rounds_twice_as_torch(device):
    """softmax(x, dtype=bfloat16) of a float32 x: dx rounded to bfloat16, then widened (bit for bit torch's
    rounding of a gradient computed in float64: bf16 values, as float32)."""
    x = randn((4, 30), torch.float32, device)
    dy = randn(x.shape, torch.bfloat16, device)
    dx = _grad("softmax", x, 1, dy, torch.bfloat16)
    assert torch.equal(dx, dx.bfloat16().float())


#: Every backward branch: rows in one tile (several rows a program, one warp, a persistent grid), the two sweeps
#: (several chunks with a partial last one, whole chunks, a row in one partial chunk), columns in one tile and in
#: two sweeps. Each runs on rows (dim=-1) and columns (dim=0 of a 2-d, dim=1 of a 3-d input).
BRANCHES = {
    "single": dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128),
    "single-one-warp": dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128, num_warps=1),
    "single-persistent": dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128, num_programs=3),
    "loop": dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
    "loop-persistent": dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=32, num_programs=2),
    "cols-single": dict(strategy="single_pass", BLOCK_N=128, BLOCK_K=4),
    "cols-loop": dict(strategy="multi_pass", BLOCK_N=8, BLOCK_K=4),
}


@pytest.mark.triton_compat
@pytest.mark.parametrize("name", SOFTMAXES)
@pytest.mark.parametrize("branch", list(BRANCHES))
def test_every_branch(name, branch, force, device, monkeypatch):
    """Odd and even widths (70: four whole 16-wide chunks and a partial one; 48: whole chunks only; 5: one
    partial chunk), 5 rows (a last row block half empty), each forced branch seen launching. The backward
    launcher on torch's forward output (the public path: the other tests)."""
    force(name, direction="backward", **BRANCHES[branch])
    cfg = BRANCHES[branch]
    for width in (70, 48, 5):
        cases = [(randn((5, width), torch.float32, device, scale=3), -1),
                 (randn((width, 6), torch.float32, device, scale=3), 0),
                 (randn((2, width, 3), torch.bfloat16, device, scale=3), 1)]
        for x, dim in cases:
            dy = randn(x.shape, x.dtype, device)
            seen = _launches(monkeypatch)
            y = getattr(torch, name)(x, dim)
            dx = bwd.softmax_backward_call(tr.families.softmax.SPECS[name], SOFTMAXES.index(name), dy, y, dim, x.dtype)
            kernel, single, persist = seen[-1]
            rows = dim == -1
            assert kernel == ("_bwd_rows_kernel" if rows else "_bwd_cols_kernel"), seen
            assert single == (cfg["strategy"] == "single_pass")
            if rows and cfg.get("num_programs"):
                assert persist == min(cfg["num_programs"], -(-5 // cfg["BLOCK_M"]))
            _check(name, dx, x, dim, dy, what=f"{name} {branch} {tuple(x.shape)} dim={dim}")


def test_branches_the_rules_take(device, monkeypatch):
    """The built-in rules (the interpreter's small sizes, a GPU's larger ones): short rows in one tile, rows past it
    in two sweeps, columns in one tile or two sweeps."""
    seen = _launches(monkeypatch)
    long_row, long_col = ((2, 20000), (2000, 12)) if device == "cuda" else ((2, 200), (20, 12))
    for shape, dim, expect in [((3, 100), -1, ("_bwd_rows_kernel", True)), (long_row, -1, ("_bwd_rows_kernel", False)),
                               ((5, 12), 0, ("_bwd_cols_kernel", True)), (long_col, 0, ("_bwd_cols_kernel", False))]:
        x = randn(shape, torch.float32, device)
        dy = randn(shape, torch.float32, device)
        dx = _grad("softmax", x, dim, dy)
        assert seen[-1][:2] == expect, (shape, dim, seen)
        _check("softmax", dx, x, dim, dy, what=f"rules {shape} {dim}")


@pytest.mark.parametrize("name", SOFTMAXES)
@pytest.mark.parametrize("branch", ["single", "loop", "cols-loop"])
def test_inf_and_nan_rows(name, branch, force, device):
    """-inf logits (masked attention: y = 0 there), a row of -inf only (NaN output), +inf and NaN logits: the
    gradient's NaN positions and values are torch's."""
    force(name, direction="backward", **BRANCHES[branch])
    inf = float("inf")
    x = randn((6, 20), torch.float32, device, scale=2)
    x[0, 3:9] = -inf
    x[1, :] = -inf
    x[2, 4] = inf
    x[3, 7] = float("nan")
    x[4, ::2] = -inf
    dim = -1 if branch != "cols-loop" else 0
    x = x if dim == -1 else x.t().contiguous()
    dy = randn(x.shape, torch.float32, device)
    _check(name, _grad(name, x, dim, dy), x, dim, dy, what=f"{name} {branch} inf/nan")


@pytest.mark.parametrize("branch", ["single", "loop", "cols-single"])
def test_poisoned_outputs_replayed_plans_and_determinism(branch, force, device):
    """dx over a freed NaN buffer, on the full path and on the replayed plan: every element written, the same
    bits each time (one fixed summation order per row)."""
    force("softmax", direction="backward", **BRANCHES[branch])
    force("log_softmax", direction="backward", **BRANCHES[branch])
    dim = 0 if branch.startswith("cols") else -1
    for name, mode in (("softmax", 0), ("log_softmax", 1)):
        x = randn((9, 37), torch.float32, device, scale=2)
        y = getattr(tr, name)(x, dim)
        dy = randn(x.shape, torch.float32, device)
        runs = []
        for _ in range(3):
            torch.empty(4 * x.numel(), device=device).fill_(float("nan"))
            runs.append(bwd.softmax_backward_call(tr.families.softmax.SPECS[name], mode, dy, y, dim, torch.float32))
        assert not runs[0].isnan().any()
        assert all(torch.equal(runs[0], r) for r in runs[1:])
        saved, _ = replay.replay_plan(f"{name}_backward", (dim, torch.float32), y, dy)
        assert saved is not None  # (the second and third runs replayed it)
        _check(name, runs[0], x, dim, dy, what=f"{name} {branch} poisoned")


def test_backward_op_on_any_layout(device):
    """The registered backward ops on outputs and gradients of random, different memory orders of a 4-d shape with
    a size-1 dim, over random dims: torch's backward in float64 (the rows or columns view of each, or a gather)."""
    import random

    rng = random.Random(ops_seed())
    shape = (3, 1, 4, 5)
    perms = list(itertools.permutations(range(4)))
    for _ in range(8):
        py, pg, dim, name = rng.choice(perms), rng.choice(perms), rng.randrange(-4, 4), rng.choice(SOFTMAXES)
        y = getattr(torch, name)(randn(shape, torch.float64, device), dim)
        y = y.permute(*py).contiguous().permute(*[py.index(i) for i in range(4)])
        g = randn([shape[i] for i in pg], torch.float64, device).permute(*[pg.index(i) for i in range(4)])
        dx = getattr(torch.ops.tritred, f"{name}_backward")(g, y, dim, torch.float64)
        ref = getattr(torch, f"_{name}_backward_data")(g.contiguous(), y.contiguous(), dim, torch.float64)
        assert dx.is_contiguous() and torch.allclose(dx, ref, rtol=1e-12, atol=1e-14), (name, py, pg, dim)


def test_gathered_when_no_common_view(device):
    """dy whose kept dims do not merge as the output's: y and dy gathered (one copy each), same gradient."""
    x = randn((3, 4, 5, 6), torch.float32, device)
    dy = randn((6, 3, 5, 4), torch.float32, device).permute(1, 3, 2, 0)
    _check("softmax", _grad("softmax", x, 1, dy), x, 1, dy, what="gathered")


def test_zero_dim_and_empty(device):
    x = torch.tensor(1.5, device=device)
    for name in SOFTMAXES:
        dx = _grad(name, x, 0, torch.tensor(2.0, device=device))
        _check(name, dx, x, 0, torch.tensor(2.0, device=device), what=f"{name} 0-d")
        e = torch.empty(0, 4, device=device)
        assert _grad(name, e, 1, torch.empty(0, 4, device=device)).shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_logsumexp(dtype, device):
    """Dims int, negative, tuples, all (``()``), keepdim; a 0-d input; +inf and all -inf rows (NaN as torch)."""
    x = randn((4, 6, 5), dtype, device, scale=2)
    x[0, 1, :] = float("-inf")
    x[1, 2, 3] = float("inf")
    for dim in (1, -1, (0, 2), ()):
        for keepdim in (False, True):
            out_shape = tr.logsumexp(x, dim, keepdim).shape
            dy = randn(out_shape, dtype, device)
            dx = _grad("logsumexp", x, dim, dy, keepdim=keepdim)
            x64 = x.detach().double().requires_grad_()
            torch.logsumexp(x64, dim if dim != () else (0, 1, 2), keepdim).backward(dy.double())
            ref = x64.grad
            assert torch.equal(dx.isnan(), ref.isnan()), (dim, keepdim)
            fin = ref.isfinite()
            tol = 4 * EPS[dtype] * (1 + ref.abs()) * (1 + x.double().abs())  # (exp of a rounded difference)
            assert bool(((dx.double() - ref).abs() <= tol)[fin].all()), (dim, keepdim, dtype)
    s = torch.tensor(0.7, dtype=dtype, device=device)
    assert _grad("logsumexp", s, 0, torch.tensor(3.0, dtype=dtype, device=device)).item() == 3.0


def test_logsumexp_backward_op_is_pointwise_torch(device):
    """The backward of logsumexp is torch's formula, computed in fp32 for bf16 and rounded once."""
    x = randn((3, 8), torch.bfloat16, device)
    r = torch.logsumexp(x.float(), 1).bfloat16()
    g = randn((3,), torch.bfloat16, device)
    dx = bwd.logsumexp_backward(g, x, r, [1], False)
    ref = (g.float()[:, None] * (x.float() - r.float()[:, None]).exp()).bfloat16()
    assert torch.equal(dx, ref)


# -- the backward launch rules (fake H200: the GPU's decisions on any machine) ----------------------------------

def _h200_backward(op, dtype, M, N, K=1, dim_last=True):
    p = Problem(op=op, dtype=dtype, direction="backward", M=M, N=N, K=K, stride_m=N * K,
                stride_n=1 if dim_last else K, stride_k=1 if K > 1 else 0)
    return h200_config(p)


@pytest.mark.parametrize("op", SOFTMAXES)
def test_backward_rules_on_h200(op):
    """The issue's training shapes: bf16 4096-wide rows in one tile on 8 warps (y and dy: 16 values of each per
    thread), 32768-wide bf16 rows in two sweeps of 8192-wide chunks on 32 warps (264 rows in flight fit the L2),
    fp32 1024-wide rows one per warp; 16384-wide rows still in registers on 32 warps; columns in 64-wide blocks,
    narrower when too few."""
    c = _h200_backward(op, "bfloat16", 16384, 4096)
    assert (c.strategy, c.BLOCK_M, c.BLOCK_N, c.num_warps) == ("single_pass", 1, 4096, 8)
    c = _h200_backward(op, "bfloat16", 4096, 32768)
    assert (c.strategy, c.BLOCK_N, c.num_warps) == ("multi_pass", 8192, 32)
    c = _h200_backward(op, "float32", 65536, 1024)
    assert (c.strategy, c.BLOCK_M, c.BLOCK_N, c.num_warps) == ("single_pass", 1, 1024, 1)
    c = _h200_backward(op, "float32", 4096, 16384)
    assert (c.strategy, c.BLOCK_N, c.num_warps) == ("single_pass", 16384, 32)
    c = _h200_backward(op, "bfloat16", 600, 20000)
    assert (c.strategy, c.BLOCK_N, c.num_warps) == ("multi_pass", 2048, 8)
    c = _h200_backward(op, "float32", 64, 512, K=4096, dim_last=False)
    assert (c.strategy, c.BLOCK_N, c.BLOCK_K) == ("multi_pass", 16, 64)
    c = _h200_backward(op, "float32", 1, 512, K=8192, dim_last=False)  # (128 blocks of 64: narrowed to 512 of 16)
    assert (c.strategy, c.BLOCK_N, c.BLOCK_K) == ("multi_pass", 64, 16)
    c = _h200_backward(op, "bfloat16", 64, 20, K=4096, dim_last=False)
    assert (c.strategy, c.BLOCK_N, c.BLOCK_K) == ("single_pass", 32, 64)
    # the forward keeps its own decisions
    fwd = h200_config(Problem(op=op, dtype="bfloat16", M=16384, N=4096, K=1, stride_m=4096, stride_n=1))
    assert fwd.num_warps != 8 or fwd.BLOCK_M != 1


def test_backward_configs_fit_every_problem():
    """Every backward problem of a grid (rows and columns, tiny to huge) gets a config its kernels take."""
    from tritred_core import get_registry
    from tritred_core.testing import FAKE_H200, FAKE_INTERPRETER, problem_grid

    reg = get_registry()
    for op in SOFTMAXES:
        for dev in (FAKE_H200, FAKE_INTERPRETER):
            for dtype in ("bfloat16", "float32", "float64"):
                for p in problem_grid(op, dtype):
                    cfg = reg.launch_config(reg.get(op).spec, p.model_copy(update={"direction": "backward"}), dev)
                    assert cfg.strategy in ("single_pass", "multi_pass") and not cfg.BLOCK_TAIL, (p, cfg)
                    assert cfg.BLOCK_M * cfg.BLOCK_N * cfg.BLOCK_K <= 16384, (p, cfg)
