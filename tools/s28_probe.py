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

Part C (``cfg``): launch configs against the built-in one on shapes outside the suite where a peer was ahead
(layer_norm bf16 rows of 300, 768 and 12288 against torch.compile; batch_norm training 128x512x14x14 bf16), and
their neighbours: ``tools/sweep.py``'s forced-config A/B (checked against torch, best of two rounds).

Part D (``lnw``): 2-byte layer_norm rows of 1025-4096 under single passes on 1-8 warps, two rows a program, and
loops of 256- and 512-wide chunks. Part E (``rule``): the layer_norm rule taken from part D, on shapes it was not
chosen on. Part F (``cols``): split softmax columns with fewer slices than the built-in count.

Usage on a CUDA machine: python tools/s28_probe.py [dep|depbn] [first] [cfg] [lnw] [rule] [cols] [colsx]
(``cfgwarm k/n [cfg|lnw]``: compile shard k of n of part C's or D's configs first, in parallel processes)
"""

from __future__ import annotations

import sys

import torch
import triton
import tritred_ops as tr
from tritred_core import LaunchConfig, get_registry
from tritred_ops import _common as C
from tritred_ops import _replay
from tritred_ops import reduce as R

COPY = 4263e9
F32, BF16 = torch.float32, torch.bfloat16


_PARAMS: dict = {}


def _bn(x: torch.Tensor) -> torch.Tensor:
    """Training batch_norm of x with weight, bias and running statistics made once per channel count (no other
    kernel inside the timed call; y does not depend on the running statistics that each call updates)."""
    c = x.shape[1]
    if c not in _PARAMS:
        g = torch.Generator(device=x.device).manual_seed(c)
        _PARAMS[c] = (torch.zeros(c, device=x.device), torch.ones(c, device=x.device),
                      torch.randn(c, device=x.device, generator=g), torch.randn(c, device=x.device, generator=g))
    return tr.batch_norm(x, *_PARAMS[c], True, 0.1, 1e-5)


DEP_CASES = [  # (the batch_norm cases first: a second pass with the bitwise check)
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


def dep(only: str = "") -> None:
    builtin = C.dependent_launch

    def use(f):
        def setup():
            C.dependent_launch = f
            return lambda: setattr(C, "dependent_launch", builtin)
        return setup

    for name, fn, shape in DEP_CASES:
        if not name.startswith(only):
            continue
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


def _ln(strategy: str, m: int, n: int, w: int, **kw) -> tuple[str, LaunchConfig]:
    return f"{strategy[:5]} M{m} N{n} w{w}" + "".join(f" {k}{v}" for k, v in kw.items()), LaunchConfig(
        strategy=strategy, BLOCK_M=m, BLOCK_N=n, num_warps=w, **kw)


def _bnc(m: int, n: int, w: int, split: int, stages: int = 1) -> tuple[str, LaunchConfig]:
    return f"M{m} N{n} w{w} sp{split} s{stages}", LaunchConfig(strategy="split", BLOCK_M=m, BLOCK_N=n, num_warps=w,
                                                                 split=split, num_stages=stages)


CFG_CASES = [
    ("layer_norm", (65536, 768), [_ln("multi_pass", 1, 256, 1), _ln("multi_pass", 1, 256, 2),
                                  _ln("multi_pass", 2, 256, 2), _ln("single_pass", 2, 1024, 2),
                                  _ln("single_pass", 4, 1024, 4), _ln("single_pass", 1, 1024, 2)]),
    ("layer_norm", (32768, 1536), [_ln("multi_pass", 1, 512, 2), _ln("multi_pass", 1, 512, 1),
                                   _ln("multi_pass", 1, 256, 1), _ln("single_pass", 1, 2048, 2)]),
    ("layer_norm", (16384, 3072), [_ln("multi_pass", 1, 1024, 4), _ln("multi_pass", 1, 512, 2),
                                   _ln("multi_pass", 1, 1024, 2), _ln("single_pass", 1, 4096, 4)]),
    ("layer_norm", (16384, 2560), [_ln("multi_pass", 1, 512, 2), _ln("multi_pass", 1, 512, 1),
                                   _ln("single_pass", 1, 4096, 4)]),
    ("layer_norm", (200000, 300), [_ln("single_pass", 1, 512, 1), _ln("single_pass", 4, 512, 2),
                                   _ln("single_pass", 2, 512, 2), _ln("single_pass", 8, 512, 4),
                                   _ln("single_pass", 4, 512, 1)]),
    ("layer_norm", (8192, 12288), [_ln("multi_pass", 1, 4096, 16), _ln("multi_pass", 1, 2048, 4),
                                   _ln("multi_pass", 1, 1024, 4), _ln("multi_pass", 1, 4096, 8),
                                   _ln("single_pass", 1, 16384, 32)]),
    ("batch_norm", (128, 512, 14, 14), [_bnc(8, 256, 2, 2), _bnc(8, 256, 2, 4), _bnc(4, 256, 1, 4),
                                        _bnc(16, 256, 4, 2), _bnc(16, 128, 2, 4), _bnc(32, 256, 8, 1),
                                        _bnc(16, 256, 2, 2)]),
]


def _ln_widths() -> list:
    """Part D (``lnw``): 2-byte layer_norm rows of 1025-4096 (the built-in: one single-pass tile on 4 warps) against
    single passes on 1, 2 and 8 warps, two rows per program, and loops over 256- and 512-wide chunks (unrolled
    where the row is 2-8 of them), 134 MB of input each."""
    cases = []
    for dtype, widths in ((BF16, (1280, 1536, 1792, 2000, 2048, 2304, 2560, 3072, 3584, 4096)),
                          (torch.float16, (1536, 2560))):
        for n in widths:
            tile = triton.next_power_of_2(n)
            v = [_ln("single_pass", 1, tile, w) for w in (1, 2, 8)] + [_ln("single_pass", 2, tile, 4)]
            v += [_ln("multi_pass", 1, c, w) for c, w in ((256, 1), (512, 2), (512, 1)) if n % c == 0 and n > c]
            cases.append(("layer_norm", (2**26 // n, n), v, dtype))
    return cases


RULE_CASES = [  # part E (``rule``): the rule taken from part D, on shapes it was not chosen on
    ((4096, 1536), BF16), ((100000, 1280), BF16), ((8192, 2560), BF16), ((65536, 1792), torch.float16),
    ((16384, 1280), torch.float16), ((50000, 2560), torch.float16), ((20000, 1536), BF16),
]


def rule() -> None:
    """The built-in config (the 2-byte short-row loop) against the single pass on 4 warps it replaced."""
    sys.path.insert(0, "tools")
    from sweep import alternate

    for shape, dtype in RULE_CASES:
        old = LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=triton.next_power_of_2(shape[1]), num_warps=4)
        res = alternate("layer_norm", shape, dtype, -1, [("rule", None), ("single pass w4", old)], rounds=3)
        print(f"layer_norm {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
              + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


COLS_CASES = [  # part F (``cols``): split softmax columns, the built-in slice count against fewer slices
    ("log_softmax", (16384, 256), (64, 32, 16)), ("softmax", (32768, 512), (64, 32, 16)),
    ("softmax", (32768, 1024), (32, 16)), ("softmax", (4096, 4096), (8,)), ("softmax", (8192, 8192), (4,)),
]


COLSX_CASES = [  # the cases the cap left out: logsumexp (one merge per column) and blocks narrower than 128
    ("logsumexp", (16384, 256), 128, (64,)), ("log_softmax", (65536, 64), 64, (64,)),
    ("softmax", (16384, 256), 128, ()),
]


def colsx() -> None:
    """Part F's complement: the built-in slice count against 64 where the cap does not apply."""
    sys.path.insert(0, "tools")
    from sweep import alternate

    for op, shape, bk, splits in COLSX_CASES:
        for dtype in (BF16, F32):
            variants = [(f"split {sp}", LaunchConfig(strategy="split", BLOCK_N=16 if bk == 128 else 32, BLOCK_K=bk,
                                                     num_warps=4, split=sp)) for sp in splits]
            res = alternate(op, shape, dtype, 0, [("builtin", None), *variants], rounds=2)
            print(f"{op} dim=0 {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
                  + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def cols() -> None:
    """Each emit program of the split columns merges all ``split`` partials of its 128 columns: K x split^2 partial
    reads in all, against N x K elements of input. Fewer slices, forced, against the built-in count."""
    sys.path.insert(0, "tools")
    from sweep import alternate

    for op, shape, splits in COLS_CASES:
        for dtype in (BF16, F32):
            variants = [(f"split {sp}", LaunchConfig(strategy="split", BLOCK_N=16, BLOCK_K=128, num_warps=4, split=sp))
                        for sp in splits]
            res = alternate(op, shape, dtype, 0, [("builtin", None), *variants], rounds=2)
            print(f"{op} dim=0 {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
                  + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def cfgwarm(shard: str, which: str = "cfg") -> None:
    """Compile part C's configs (shard k/n of them), so that a serial timing run finds them in Triton's cache."""
    sys.path.insert(0, "tools")
    from sweep import Force, make_call

    k, n = map(int, shard.split("/"))
    reg = get_registry()
    cases = CFG_CASES if which == "cfg" else _ln_widths()
    jobs = [(op, shape, c, (rest or [BF16])[0]) for op, shape, variants, *rest in cases
            for _, c in [("builtin", None), *variants]]
    for j, (op, shape, c, dtype) in enumerate(jobs):
        if j % n != k:
            continue
        name = reg.register(Force(op, c), name=f"warm-{j}") if c is not None else None
        try:
            reg.cache.clear()
            make_call(op, shape, dtype, None if op == "batch_norm" else -1)[0]()
        finally:
            if name:
                reg.unregister(name)
    torch.cuda.synchronize()


def cfg(which: str = "cfg") -> None:
    sys.path.insert(0, "tools")
    from sweep import alternate

    for op, shape, variants, *rest in CFG_CASES if which == "cfg" else _ln_widths():
        dtype = (rest or [BF16])[0]
        dim = None if op == "batch_norm" else -1
        res = alternate(op, shape, dtype, dim, [("builtin", None), *variants], rounds=2)
        print(f"{op} {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
              + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    parts = sys.argv[1:] or ["dep", "first"]
    if parts[0] == "cfgwarm":
        cfgwarm(parts[1], *parts[2:])
        sys.exit(0)
    for p in parts:
        print(f"== {p}", flush=True)
        {"dep": dep, "depbn": lambda: dep("batch_norm"), "first": first, "cfg": cfg, "lnw": lambda: cfg("lnw"),
         "rule": rule, "cols": cols, "colsx": colsx}[p]()
