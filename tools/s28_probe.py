"""Twenty-eighth session's probe on the H200: more launches as programmatic dependent launches.

Part A (``dep``): the launches that read what the launch before them wrote, beyond the split merges of the
twenty-seventh session: batch_norm training's normalize launch (after its statistics launch) and the split
softmax columns' second launch. Built-in ops (dependent) against the same ops with ``_common.dependent_launch``
patched to give no option (plain), alternated, best of three rounds, do_bench median, % of 4263 GB/s of the op's
bytes (input read once, output written once); and the two results compared bit for bit.

Part B (``first``): the FIRST launch of an op as a dependent launch of whatever kernel ran before it (the
kernel waits in ``griddepcontrol.wait`` before its first load, so it stays correct whatever that kernel wrote):
does it hide the gap after the previous kernel? Only ``reduce._rows_kernel`` has the WAIT switch, so the plain
row reductions are timed; each with do_bench (an L2-clearing fill and an event between calls) and as 200 calls
back to back between two events (a pipeline of kernels, as in a model).

Usage on a CUDA machine: python tools/s28_probe.py [dep] [first]
"""

from __future__ import annotations

import sys

import torch
import triton
import tritred_ops as tr
from tritred_core import get_registry
from tritred_ops import _common as C
from tritred_ops import _replay
from tritred_ops import reduce as R

COPY = 4263e9
F32, BF16 = torch.float32, torch.bfloat16


def _bn(x: torch.Tensor) -> torch.Tensor:
    c = x.shape[1]
    rm, rv = torch.zeros(c, device=x.device), torch.ones(c, device=x.device)
    w, b = torch.randn(c, device=x.device), torch.randn(c, device=x.device)
    return tr.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)


DEP_CASES = [
    ("batch_norm train 64x256x56x56", _bn, (64, 256, 56, 56)),
    ("batch_norm train 256x64x56x56", _bn, (256, 64, 56, 56)),
    ("batch_norm train 16x64x16x32x32", _bn, (16, 64, 16, 32, 32)),
    ("batch_norm train 128x512x14x14", _bn, (128, 512, 14, 14)),
    ("batch_norm train 32x96x55x55", _bn, (32, 96, 55, 55)),
    ("batch_norm train 64x128x28x28", _bn, (64, 128, 28, 28)),
    ("batch_norm train 32x2048x7x7 (one launch: control)", _bn, (32, 2048, 7, 7)),
    ("softmax dim=0 8192x8192", lambda x: tr.softmax(x, 0), (8192, 8192)),
    ("softmax dim=0 32768x512", lambda x: tr.softmax(x, 0), (32768, 512)),
    ("log_softmax dim=0 16384x256", lambda x: tr.log_softmax(x, 0), (16384, 256)),
    ("logsumexp dim=0 65536x1024", lambda x: tr.logsumexp(x, 0), (65536, 1024)),
]

FIRST_CASES = [
    ("sum dim=-1 16384x4096", lambda x: tr.sum(x, -1), (16384, 4096)),
    ("mean dim=-1 262144x256", lambda x: tr.mean(x, -1), (262144, 256)),
    ("amax dim=-1 1024x131072", lambda x: tr.amax(x, -1), (1024, 131072)),
    ("prod dim=-1 16384x4096", lambda x: tr.prod(x, -1), (16384, 4096)),
    ("sum dim=-1 8x1024 (tiny)", lambda x: tr.sum(x, -1), (8, 1024)),
    ("sum dim=-1 4096x4096", lambda x: tr.sum(x, -1), (4096, 4096)),
]


def _ab(name, fn, x, variants) -> None:
    """Time fn(x) under each variant (a context setter), alternated, best of three; print the comparison."""
    reg = get_registry()
    caches, outs = {}, {}
    for v, setup in variants.items():
        undo = setup()
        reg.cache.clear()
        outs[v] = fn(x)
        fn(x)
        caches[v] = dict(reg.cache)
        undo()
    out = outs[next(iter(outs))]
    nbytes = x.numel() * x.element_size() + out.numel() * out.element_size()
    best, loop = {}, {}
    for _ in range(3):
        for v in variants:
            reg.cache.clear()
            reg.cache.update(caches[v])
            t = triton.testing.do_bench(lambda: fn(x), warmup=10, rep=40, return_mode="median")
            best[v] = min(best.get(v, 1e9), t)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(200):
                fn(x)
            end.record()
            end.synchronize()
            loop[v] = min(loop.get(v, 1e9), start.elapsed_time(end) / 200)
    reg.cache.clear()
    parts = []
    for v in variants:
        pct = nbytes / (best[v] * 1e-3) / COPY * 100
        parts.append(f"{v} {best[v] * 1e3:.1f} us ({pct:.1f} %), back to back {loop[v] * 1e3:.1f} us")
    same = all(torch.equal(outs[v], out) for v in outs)
    print(f"{name} {str(x.dtype)[6:]}: " + " | ".join(parts) + f" | bitwise equal {same}", flush=True)


def dep() -> None:
    builtin = C.dependent_launch

    def use(f):
        def setup():
            C.dependent_launch = f
            return lambda: setattr(C, "dependent_launch", builtin)
        return setup

    for name, fn, shape in DEP_CASES:
        for dtype in (BF16, F32):
            _ab(name, fn, torch.randn(shape, device="cuda", dtype=dtype),
                {"dependent": use(builtin), "plain": use(lambda device: {})})


def first() -> None:
    real = _replay.Recorder.launch

    def first_dependent(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        if kernel is R._rows_kernel and "WAIT" not in kwargs:
            kwargs = {**kwargs, **C.dependent_launch(args[0].device)}
        return real(self, kernel, grid, *args, **kwargs)

    def setup_first():
        _replay.Recorder.launch = first_dependent
        return lambda: setattr(_replay.Recorder, "launch", real)

    for name, fn, shape in FIRST_CASES:
        for dtype in (BF16, F32):
            _ab(name, fn, torch.randn(shape, device="cuda", dtype=dtype),
                {"first dependent": setup_first, "plain": lambda: (lambda: None)})


if __name__ == "__main__":
    parts = sys.argv[1:] or ["dep", "first"]
    for p in parts:
        print(f"== {p}", flush=True)
        {"dep": dep, "first": first}[p]()
