"""layer_norm's backward: gradients of input, weight and bias against torch's (float64 references on fresh random
inputs), gradcheck, every backward dispatch branch, strided inputs and gradients, determinism, what is skipped
when not needed, and the three entry points (inference, the autograd.Function, the registered torch.library ops).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import assert_close, randn
from tritred_ops.families.layer_norm import autograd as ln_autograd
from tritred_ops.runtime import replay

SINGLE = dict(strategy="single_pass", BLOCK_N=64)
LOOP = dict(strategy="multi_pass", BLOCK_N=16)
#: Every branch of the backward kernel: single pass (one row, several rows, persistent pipelined loop, more
#: programs than row blocks), loop (one row, two rows, one program for every block).
BRANCHES = [dict(SINGLE, BLOCK_M=1), dict(SINGLE, BLOCK_M=4, num_programs=2),
            dict(SINGLE, BLOCK_M=2, num_programs=3, num_stages=2), dict(SINGLE, BLOCK_M=1, num_programs=64),
            dict(LOOP, BLOCK_M=1), dict(LOOP, BLOCK_M=2, num_programs=3), dict(LOOP, BLOCK_M=1, num_programs=1)]


def _leaf(t: torch.Tensor | None, grad: bool = True) -> torch.Tensor | None:
    return None if t is None else t.detach().clone().requires_grad_(grad)


def grads(fn, dy, *inputs):
    """(output, gradients of ``inputs`` (None where an input is None or does not require grad)) of ``fn``."""
    out = fn(*inputs)
    out.backward(dy)
    return out, [None if t is None else t.grad for t in inputs]


def reference(x, ns, w, b, dy, eps=1e-5):
    """torch's gradients in float64 of the same (rounded) values; inputs that do not require grad get none."""
    d = [None if t is None else t.detach().double().cpu().requires_grad_(t.requires_grad) for t in (x, w, b)]
    return grads(lambda *a: F.layer_norm(a[0], ns, a[1], a[2], eps), dy.detach().double().cpu(), *d)


def check(x, ns, w, b, dy, what, eps=1e-5):
    out, got = grads(lambda *a: tr.layer_norm(a[0], ns, a[1], a[2], eps), dy, x, w, b)
    ref_out, want = reference(x, ns, w, b, dy, eps)
    assert_close(out, ref_out, n=16, scale=8, what=f"out {what}")
    rows = x.numel() // max(1, torch.Size(ns).numel())
    for name, g, r, t in zip(("dx", "dw", "db"), got, want, (x, w, b)):
        if r is None:
            assert g is None, f"{name} {what}: a gradient where torch has none"
            continue
        assert g.dtype == t.dtype and g.shape == t.shape, f"{name} {what}: {g.dtype} {tuple(g.shape)}"
        assert_close(g, r, n=rows if name != "dx" else 64, scale=16, what=f"{name} {what}")


@pytest.mark.parametrize("op", ["public", "registered"])
def test_gradcheck(op, device):
    """torch.autograd.gradcheck in float64: the eager Function (public function) and the registered op's
    autograd; every Jacobian entry on a tiny call, a random projection (fast mode) over two normalized dims and
    without weight and bias."""
    fn = {"public": lambda x, ns, w, b: tr.layer_norm(x, ns, w, b),
          "registered": lambda x, ns, w, b: torch.ops.tritred.layer_norm(x, list(ns), w, b, 1e-5)[0]}[op]
    for shape, ns, fast in (((2, 4), (4,), False), ((2, 3, 4), (3, 4), True)):
        x = randn(shape, torch.float64, device, offset=1.0).requires_grad_()
        w = randn(ns, torch.float64, device).requires_grad_()
        b = randn(ns, torch.float64, device).requires_grad_()
        assert torch.autograd.gradcheck(lambda x, w, b, ns=ns: fn(x, ns, w, b), (x, w, b), fast_mode=fast)
    x = randn((3, 7), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: fn(x, (7,), None, None), (x,), fast_mode=True)


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_gradients_match_torch(dtype, D, device):
    """Normalized shapes of 1-3 dims (N = 9, 63, 315: the interpreter's single pass and its loop), rows far from
    zero, non-power-of-two sizes; dx, dw, db in the input's and parameters' dtypes."""
    shape = (4, 5, 7, 9)
    ns = shape[4 - D:]
    x = randn(shape, dtype, device, offset=3.0).requires_grad_()
    w, b = randn(ns, dtype, device).requires_grad_(), randn(ns, dtype, device).requires_grad_()
    check(x, ns, w, b, randn(shape, dtype, device), f"{dtype} D={D}")


@pytest.mark.triton_compat
@pytest.mark.parametrize("cfg", BRANCHES, ids=str)
def test_every_backward_branch(cfg, force, device):
    """Each branch forced (``direction="backward"``): 37-wide rows (not a power of two, not a whole number of loop
    chunks), 11 rows (a partial last row block); weight and bias, each alone and neither on the plain single pass
    and loop."""
    force("layer_norm", direction="backward", **cfg)
    x = randn((11, 37), torch.float32, device, offset=-2.0)
    w, b = randn((37,), torch.float32, device), randn((37,), torch.float32, device)
    dy = randn((11, 37), torch.float32, device)
    combos = ((w, b), (w, None), (None, b), (None, None)) if cfg in (BRANCHES[0], BRANCHES[4]) else ((w, b),)
    for args in combos:
        check(_leaf(x), (37,), _leaf(args[0]), _leaf(args[1]), dy, f"{cfg} {[a is None for a in args]}")


@pytest.mark.parametrize("x_layout", ["contiguous", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("dy_layout", ["contiguous", "transposed", "expanded"])
def test_strided_inputs_and_output_gradients(x_layout, dy_layout, device):
    """The input and dy read in place through their strides (a transposed input's rows are columns in memory: the
    kernel's K axis), dy expanded (``y.sum().backward()`` gives stride-0 gradients), one and two normalized dims."""
    for ns in ((6,), (5, 6)):
        x = randn((4, 5, 6), torch.float32, device, x_layout).requires_grad_()
        dy = randn((4, 5, 6), torch.float32, device, dy_layout)
        w, b = randn(ns, torch.float32, device).requires_grad_(), randn(ns, torch.float32, device).requires_grad_()
        check(x, ns, w, b, dy, f"x {x_layout} dy {dy_layout} {ns}")


def test_dy_expanded_from_a_sum(device):
    """``layer_norm(x).sum().backward()``: dy is a 0-d one expanded (all strides 0); dx of a sum is ~0."""
    x = randn((6, 40), torch.float32, device, offset=2.0).requires_grad_()
    w = randn((40,), torch.float32, device).requires_grad_()
    (tr.layer_norm(x, (40,), w, None) * 1.0).sum().backward()
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    F.layer_norm(xr, (40,), wr, None).sum().backward()
    assert_close(x.grad, xr.grad, n=40, scale=4, what="dx")
    assert_close(w.grad, wr.grad, n=6, scale=4, what="dw")


@contextmanager
def launches(clear: bool = True):
    """The (kernel name, kwargs) of each launch inside the block; ``clear``: saved plans dropped first (the calls
    take the full path, which is where launches are decided)."""
    from tritred_ops.runtime.caches import caches

    if clear:
        caches().clear()
    seen: list[tuple[str, dict]] = []
    real = replay.Recorder.launch

    def spy(self, kernel, grid, *args, **kwargs):
        seen.append((kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel), kwargs))
        return real(self, kernel, grid, *args, **kwargs)
    replay.Recorder.launch = spy
    try:
        yield seen
    finally:
        replay.Recorder.launch = real


def test_gradients_not_needed_are_not_computed(device):
    """needs_input_grad: a frozen input gets no dx (NEED_DX off: no row sums, no dx written), a frozen weight/bias
    no partials, and parameters alone no summing launch when they are frozen; as torch, those grads stay None."""
    x = randn((5, 24), torch.float32, device)
    w, b = randn((24,), torch.float32, device), randn((24,), torch.float32, device)
    dy = randn((5, 24), torch.float32, device)
    cases = {(True, False, False): ["_norm_backward_kernel"], (False, True, False): None,
             (False, False, True): None, (True, True, True): None}
    for (gx, gw, gb), kernels in cases.items():
        xs, ws, bs = _leaf(x, gx), _leaf(w, gw), _leaf(b, gb)
        y = tr.layer_norm(xs, (24,), ws, bs)
        with launches() as seen:
            y.backward(dy)
        names = [n for n, _ in seen]
        flags = seen[0][1]
        assert (flags["NEED_DX"], flags["NEED_DW"], flags["NEED_DB"]) == (gx, gw, gb), (gx, gw, gb, flags)
        assert names == (kernels or ["_norm_backward_kernel", "_partials_sum_kernel"]), names
        assert (xs.grad is None) != gx and (ws.grad is None) != gw and (bs.grad is None) != gb
        _, want = reference(xs, (24,), ws, bs, dy)
        for g, r in zip((xs.grad, ws.grad, bs.grad), want):
            if r is not None:
                assert_close(g, r, n=5, scale=8, what=f"{(gx, gw, gb)}")


@pytest.mark.parametrize("cfg", [None, dict(LOOP, BLOCK_M=2, num_programs=3)], ids=["builtin", "loop"])
def test_gradients_are_deterministic(cfg, force, device):
    """The same gradients bit for bit on a second run: dx, and dw/db summed from per-program partials in a fixed
    order (no atomics); the second backward replays the first's plan (no launch through the recorder)."""
    if cfg is not None:
        force("layer_norm", direction="backward", **cfg)
    x = randn((17, 80), torch.bfloat16, device, offset=1.0)
    w, b = randn((80,), torch.bfloat16, device), randn((80,), torch.bfloat16, device)
    dy = randn((17, 80), torch.bfloat16, device)
    runs = []
    for _ in range(2):
        leaves = [_leaf(t) for t in (x, w, b)]
        y = tr.layer_norm(leaves[0], (80,), leaves[1], leaves[2])
        with launches(clear=not runs) as seen:
            y.backward(dy)
        runs.append([t.grad for t in leaves])
        assert bool(seen) == (len(runs) == 1), "the second backward replays the first one's plan"
    for name, g0, g1 in zip(("dx", "dw", "db"), *runs):
        assert torch.equal(g0.view(torch.int16), g1.view(torch.int16)), name


def test_empty_inputs(device):
    """No rows: dw and db are zeros (sums of nothing), dx empty; rows of no elements: dx empty; as torch."""
    for shape, ns in (((0, 5), (5,)), ((3, 0), (0,))):
        x = torch.zeros(shape, device=device).requires_grad_()
        w, b = torch.ones(ns, device=device).requires_grad_(), torch.ones(ns, device=device).requires_grad_()
        tr.layer_norm(x, ns, w, b).sum().backward()
        assert x.grad.shape == shape and torch.equal(w.grad.cpu(), torch.zeros(ns))
        assert torch.equal(b.grad.cpu(), torch.zeros(ns))


def test_with_stats_and_non_differentiable_statistics(device):
    """layer_norm_with_stats: out carries the gradient; mean and rstd (float32, float64 for float64 inputs) do
    not require grad."""
    for dtype in (torch.float32, torch.float64):
        x = randn((4, 10), dtype, device).requires_grad_()
        y, mean, rstd = tr.layer_norm_with_stats(x, (10,))
        assert not mean.requires_grad and not rstd.requires_grad
        assert mean.dtype == rstd.dtype == dtype and y.grad_fn is not None
        dy = randn((4, 10), dtype, device)
        y.backward(dy)
        _, want = reference(x, (10,), None, None, dy)
        assert_close(x.grad, want[0], n=10, scale=4, what=f"{dtype}")


def test_backward_refuses_forward_only_configs(force, device):
    """A backward config the kernel cannot run: ValueError naming the op and who decided."""
    x = randn((4, 8), torch.float32, device).requires_grad_()
    for cfg in (dict(strategy="split_rows", BLOCK_N=4, split=2), dict(strategy="single_pass", BLOCK_N=8,
                                                                      BLOCK_TAIL=8)):
        force("layer_norm", direction="backward", **cfg)
        with pytest.raises(ValueError, match="layer_norm backward.*test-force-layer_norm"):
            tr.layer_norm(x, (8,)).sum().backward()


def test_double_backward_is_torchs(device):
    """A second-order gradient through layer_norm equals torch's (more in test_autograd_modes.py)."""
    x0 = randn((3, 8), torch.float64, device)
    got = []
    for f in (tr.layer_norm, torch.nn.functional.layer_norm):
        x = x0.clone().requires_grad_()
        (g,) = torch.autograd.grad(f(x, (8,)).square().sum(), x, create_graph=True)
        got.append(torch.autograd.grad(g.sum(), x)[0])
    torch.testing.assert_close(got[0], got[1])


def test_inference_takes_no_autograd_path(device, monkeypatch):
    """Under no_grad (and for tensors that do not require grad) neither the Function nor the registered op runs:
    the inference path, unchanged; with grad, the Function (not the op) in eager."""
    def refuse(*a, **k):
        raise AssertionError("autograd path taken")
    x = randn((4, 16), torch.float32, device)
    w = randn((16,), torch.float32, device).requires_grad_()
    monkeypatch.setattr(ln_autograd.LayerNormFunction, "forward", staticmethod(refuse))
    monkeypatch.setattr(ln_autograd, "forward", refuse)
    with torch.no_grad():
        tr.layer_norm(x, (16,), w)
        tr.layer_norm_with_stats(x, (16,), w)
    tr.layer_norm(x, (16,))
    with pytest.raises(AssertionError, match="autograd path"):
        tr.layer_norm(x, (16,), w)


def test_opcheck(device):
    """torch.library.opcheck on the forward and backward ops (schema, fake tensors, autograd registration, AOT
    dispatch), with and without weight and bias, and a backward with part of its output mask."""
    x = randn((3, 5), torch.float64, device, offset=1.0)
    w, b = randn((5,), torch.float64, device), randn((5,), torch.float64, device)
    for args in ((w, b), (None, None)):
        torch.library.opcheck(torch.ops.tritred.layer_norm.default,
                              (x.clone().requires_grad_(), [5], *[None if a is None else a.clone().requires_grad_()
                                                                 for a in args], 1e-5))
    y, mean, rstd = torch.ops.tritred.layer_norm(x, [5], w, b, 1e-5)
    dy = randn((3, 5), torch.float64, device)
    for mask, args in (([True, True, True], (w, b)), ([False, True, False], (w, b)), ([True, False, False],
                                                                                      (None, None))):
        torch.library.opcheck(torch.ops.tritred.layer_norm_backward.default, (dy, x, [5], mean, rstd, *args, mask))


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_forward_and_backward(dynamic, device):
    """torch.compile(fullgraph=True, backend="aot_eager") of a function using layer_norm and backpropagating,
    static and dynamic shapes (two row counts and two normalized widths): outputs and gradients equal eager's."""
    def f(x, w, b):
        return (tr.layer_norm(x, (x.shape[-1],), w, b) * x).sum()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=dynamic)
    for shape in ((3, 8), (5, 8), (4, 12)):
        x = randn(shape, torch.float32, device, offset=1.0)
        w, b = randn(shape[-1:], torch.float32, device), randn(shape[-1:], torch.float32, device)
        got = grads(compiled, None, *(_leaf(t) for t in (x, w, b)))
        want = grads(f, None, *(_leaf(t) for t in (x, w, b)))
        assert torch.equal(got[0], want[0]), shape
        for g, r in zip(got[1], want[1]):
            assert torch.equal(g, r), shape


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_backward_launch_rules_on_an_h200(op):
    """The GPU's backward decisions (``layer_norm.rules.backward_config``): a single pass for rows of up to 32 KB,
    8 elements of x and of dy a thread (float64: 4; several rows a program below 4 warps' worth, at most 16 warps),
    the loop past that; the grid's size left to the device's occupancy (0) except where the partials (programs x N)
    would pass 2^24 elements."""
    from ops_helpers import h200_config
    from tritred_core import Problem

    def decide(M, N, dtype):
        p = Problem(op=op, dtype=dtype, direction="backward", M=M, N=N, K=1, stride_m=N, stride_n=1, stride_k=0)
        c = h200_config(p)
        return c.strategy, c.BLOCK_M, c.BLOCK_N, c.num_warps, c.num_programs

    assert decide(16384, 4096, "bfloat16") == ("single_pass", 1, 4096, 16, 0)
    assert decide(4096, 16384, "bfloat16") == ("single_pass", 1, 16384, 16, 1024)
    assert decide(65536, 1024, "float32") == ("single_pass", 1, 1024, 4, 0)
    assert decide(65536, 1024, "bfloat16") == ("single_pass", 1, 1024, 4, 0)
    assert decide(262144, 256, "bfloat16") == ("single_pass", 4, 256, 4, 0)
    assert decide(65536, 2048, "bfloat16") == ("single_pass", 1, 2048, 8, 0)
    assert decide(4096, 16384, "float32") == ("multi_pass", 2, 2048, 16, 1024)
    assert decide(4096, 32768, "bfloat16") == ("multi_pass", 2, 4096, 32, 512)
    assert decide(1024, 131072, "float32") == ("multi_pass", 2, 2048, 16, 132)
    assert decide(4096, 4096, "float64") == ("single_pass", 1, 4096, 16, 0)
