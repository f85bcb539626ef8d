"""CUDA graphs: every op captures in ``torch.cuda.graph`` and replays on new data, with no host
synchronization on the hot path. GPU only (skipped under the interpreter: there is nothing to capture).

For each case: static inputs on the GPU, three warm-up calls on a side stream (the launch decisions made and the
plans saved, as torch's docs prescribe before a capture), then a capture of the forward call, and, where the op
has autograd, of forward + ``torch.autograd.grad`` (a static upstream gradient ``dy`` among the inputs). Each
replay first copies new data (made on the GPU beforehand) into the static inputs, all inside
``torch.cuda.set_sync_debug_mode("error")`` (a host synchronization there raises); the outputs, the gradients and
the tensors the op mutates (batch_norm's running statistics) then equal an eager call's on the same data. The
eager call that follows the warm-up (the replayed fast path) runs in the same mode.

prod's backward is captured for the forward only: its gradient branches on whether the input holds a zero, which
torch's ``prod_backward`` reads on the host too (one ``.item()``), so neither torch's nor tritred's is capturable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import tritred_ops as tr


@pytest.fixture(autouse=True)
def _cuda_only(device: str) -> None:
    if device != "cuda":
        pytest.skip("CUDA graphs need compiled kernels on a CUDA device")


DEV = "cuda"  # where the cases' inputs are made


@dataclass(frozen=True)
class Case:
    """``call(*inputs)`` on inputs made by ``make(generator)`` (the same shapes every time); gradients for the
    inputs at ``grad`` (empty: forward only); the inputs at ``mutated`` are compared after the call too."""

    id: str
    make: Callable[[torch.Generator], list[torch.Tensor]]
    call: Callable[..., Any]
    grad: tuple[int, ...] = (0,)
    mutated: tuple[int, ...] = field(default=())


def _x(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Callable[[torch.Generator], list[torch.Tensor]]:
    return lambda g: [torch.randn(shape, generator=g, device=DEV).to(dtype)]


def _norm(rows: int, n: int, bias: bool = True) -> Callable[[torch.Generator], list[torch.Tensor]]:
    def make(g: torch.Generator) -> list[torch.Tensor]:
        x = torch.randn(rows, n, generator=g, device=DEV)
        w = 1 + 0.1 * torch.randn(n, generator=g, device=DEV)
        b = 0.1 * torch.randn(n, generator=g, device=DEV)
        return [x, w, b] if bias else [x, w]
    return make


def _bn(g: torch.Generator) -> list[torch.Tensor]:
    x = torch.randn(8, 16, 10, 10, generator=g, device=DEV)
    rm, rv = torch.randn(16, generator=g, device=DEV), 1 + torch.rand(16, generator=g, device=DEV)
    w, b = 1 + 0.1 * torch.randn(16, generator=g, device=DEV), 0.1 * torch.randn(16, generator=g, device=DEV)
    return [x, rm, rv, w, b]


def _logits(rows: int, classes: int, probs: bool = False) -> Callable[[torch.Generator], list[torch.Tensor]]:
    def make(g: torch.Generator) -> list[torch.Tensor]:
        x = torch.randn(rows, classes, generator=g, device=DEV)
        if probs:
            t = torch.softmax(torch.randn(rows, classes, generator=g, device=DEV), -1)
        else:
            t = torch.randint(classes, (rows,), generator=g, device=DEV)
            t[::7] = -100  # ignore_index
        return [x, t]
    return make


X = (64, 300)
CASES = [
    Case("sum_dim", _x(X), lambda x: tr.sum(x, 1)),
    Case("sum_all", _x((300, 1000)), lambda x: tr.sum(x)),
    Case("mean", _x(X), lambda x: tr.mean(x, 0)),
    Case("prod", _x(X), lambda x: tr.prod(x, 1), grad=()),
    Case("amax", _x(X), lambda x: tr.amax(x, 1)),
    Case("amin", _x(X), lambda x: tr.amin(x, (0, 1))),
    Case("max_dim", _x(X), lambda x: tr.max(x, 1)),
    Case("max_all", _x(X), lambda x: tr.max(x)),
    Case("min_dim", _x(X), lambda x: tr.min(x, 0)),
    Case("var", _x(X), lambda x: tr.var(x, 1, correction=1)),
    Case("std", _x(X), lambda x: tr.std(x, 0)),
    Case("var_mean", _x(X), lambda x: tr.var_mean(x, 1)),
    Case("std_mean", _x(X), lambda x: tr.std_mean(x, 1, correction=0)),
    Case("logsumexp", _x(X), lambda x: tr.logsumexp(x, 1)),
    Case("softmax", _x(X), lambda x: tr.softmax(x, -1)),
    Case("softmax_bf16", _x((64, 4096), torch.bfloat16), lambda x: tr.softmax(x, -1)),
    Case("log_softmax", _x(X), lambda x: tr.log_softmax(x, 0)),
    Case("layer_norm", _norm(64, 300), lambda x, w, b: tr.layer_norm(x, (300,), w, b), grad=(0, 1, 2)),
    Case("layer_norm_with_stats", _norm(64, 300), lambda x, w, b: tr.layer_norm_with_stats(x, (300,), w, b),
         grad=(0, 1, 2)),
    Case("rms_norm", _norm(64, 300, bias=False), lambda x, w: tr.rms_norm(x, (300,), w), grad=(0, 1)),
    Case("batch_norm_train", _bn, lambda x, rm, rv, w, b: tr.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5),
         grad=(0, 3, 4), mutated=(1, 2)),
    Case("batch_norm_eval", _bn, lambda x, rm, rv, w, b: tr.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5),
         grad=(0, 3, 4)),
    Case("cross_entropy", _logits(64, 1000), lambda x, t: tr.cross_entropy(x, t, label_smoothing=0.1)),
    Case("cross_entropy_probs", _logits(64, 1000, probs=True),
         lambda x, t: tr.cross_entropy(x, t, reduction="sum")),
    Case("cross_entropy_none", _logits(64, 1000), lambda x, t: tr.cross_entropy(x, t, reduction="none")),
]


def _leaves(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple) else [out]


@contextlib.contextmanager
def _no_sync() -> Iterator[None]:
    """A host synchronization inside raises (``torch.cuda.set_sync_debug_mode("error")``)."""
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


def _warm_up(fn: Callable[[], Any], calls: int = 3) -> None:
    """``calls`` calls of ``fn`` on a side stream, as torch's docs prescribe before a capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)


def _capture(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``(graph, outputs)``: ``fn()`` captured in a new CUDA graph."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def _synchronize() -> None:
    torch.cuda.synchronize()


def _data(case: Case, seed: int) -> list[torch.Tensor]:
    return case.make(torch.Generator(device=DEV).manual_seed(seed))


def _forward_backward(case: Case, inputs: list[torch.Tensor], dys: list[torch.Tensor]) -> list[torch.Tensor]:
    """The outputs (all of them), then the gradients of the differentiable ones w.r.t. ``inputs[case.grad]``."""
    outs = _leaves(case.call(*inputs))
    diff = [o for o in outs if o.requires_grad]
    return [*outs, *torch.autograd.grad(diff, [inputs[i] for i in case.grad], dys)]


def _prepare(inputs: list[torch.Tensor], grad: tuple[int, ...]) -> list[torch.Tensor]:
    return [t.requires_grad_(True) if i in grad else t for i, t in enumerate(inputs)]


def _check(got: list[torch.Tensor], want: list[torch.Tensor], what: str) -> None:
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        if b.dtype.is_floating_point:
            torch.testing.assert_close(a, b, msg=lambda m, i=i: f"{what}[{i}]: {m}")
        else:
            assert torch.equal(a, b), f"{what}[{i}]"


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward_backward"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_capture_and_replay(case: Case, backward: bool) -> None:
    if backward and not case.grad:
        pytest.skip(f"{case.id}: forward only (see the module docstring)")
    grad = case.grad if backward else ()
    static = _prepare(_data(case, 0), grad)
    # the upstream gradients (static too): one per differentiable output
    static_dy = [torch.randn_like(o) for o in _leaves(case.call(*static)) if o.requires_grad] if backward else []
    fresh = [(_data(case, seed), [torch.randn_like(d) for d in static_dy]) for seed in (1, 2)]

    def call(inputs: list[torch.Tensor], dys: list[torch.Tensor]) -> list[torch.Tensor]:
        if backward:
            return _forward_backward(case, inputs, dys)
        with torch.no_grad():
            return _leaves(case.call(*inputs))

    def run() -> list[torch.Tensor]:
        return call(static, static_dy)

    _warm_up(run)
    with _no_sync():  # the warmed eager call: the replayed plan, no host synchronization
        run()
    _synchronize()
    graph, out = _capture(run)

    for data, dys in fresh:
        with torch.no_grad():
            before = [data[i].clone() for i in case.mutated]
        with _no_sync(), torch.no_grad():
            for dst, src in zip([*static, *static_dy], [*data, *dys]):
                dst.copy_(src)
            graph.replay()
        _synchronize()
        eager_in = _prepare([t.clone() for t in data], grad)
        for i, b in zip(case.mutated, before):
            assert torch.equal(eager_in[i], b)
        want = call(eager_in, dys)
        _check(out, want, f"{case.id} replay")
        _check([static[i] for i in case.mutated], [eager_in[i] for i in case.mutated], f"{case.id} mutated inputs")
