"""Thirtieth session's probe on the H200: the layer_norm shapes outside the suite where tritred trails a peer
(twenty-eighth session's off-suite run: bf16 65536x768 0.89x torch.compile, 8192x12288 0.90x, 200000x300 0.86x,
fp32 16384x5120 0.96x), each config against the built-in one and torch.compile timed in the same process.

Part ``ln``: a grid of configs per shape (``tools/sweep.py``'s ``alternate``: checked against torch, best of two
rounds, do_bench median, % of 4263 GB/s); torch.compile's figure after them (``compile``).
Part ``val``: reserved for the rule taken from ``ln``, on shapes it was not chosen on.

Usage on a CUDA machine: python tools/s30_probe.py [ln] [val]
"""

from __future__ import annotations

import sys

import torch
from tritred_core import LaunchConfig, get_registry

sys.path.insert(0, "tools")
from sweep import alternate, make_call  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


def _single(m: int, n: int, w: int, t: int = 0) -> LaunchConfig:
    return LaunchConfig(strategy="single_pass", BLOCK_M=m, BLOCK_N=n, num_warps=w, threads_per_row=t)


def _loop(n: int, w: int, stages: int = 1) -> LaunchConfig:
    return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=n, num_warps=w, num_stages=stages)


def compile_pct(op: str, shape, dtype, dim: int) -> float:
    """torch.compile(torch op) on make_call's inputs, % of 4263 GB/s (do_bench median, best of two)."""
    from triton.testing import do_bench
    from tritred_bench.providers import torch_op

    rec = get_registry().get(op)
    _, _, nbytes = make_call(op, shape, dtype, dim)
    from sweep import _INPUTS

    args, kwargs = next(iter(_INPUTS.values()))
    torch._dynamo.reset()
    fn = torch.compile(torch_op(rec), dynamic=False)
    fn(*args, **kwargs)
    best = min(do_bench(lambda: fn(*args, **kwargs), return_mode="median") for _ in range(2))
    return 100 * nbytes / (best * 1e-3) / 1e9 / 4263.0


LN_CASES = [  # (shape, dtype, variants)
    ((65536, 768), BF16, [("M4 t32 w4", _single(4, 1024, 4, 32)), ("M2 w2", _single(2, 1024, 2)),
                          ("M1 w2", _single(1, 1024, 2)), ("M8 t32 w8", _single(8, 1024, 8, 32)),
                          ("loop 3x256 w1", _loop(256, 1)), ("M2 t16 w1", _single(2, 1024, 1, 16))]),
    ((65536, 768), F16, [("M4 t32 w4", _single(4, 1024, 4, 32)), ("M2 w2", _single(2, 1024, 2)),
                         ("loop 3x256 w1", _loop(256, 1))]),
    ((8192, 12288), BF16, [("loop 3x4096 w16", _loop(4096, 16)), ("loop 4096 w8", _loop(4096, 8)),
                           ("loop 2048 w4", _loop(2048, 4)), ("loop 6x2048 w8 s2", _loop(2048, 8, 2)),
                           ("single 16384 w16", _single(1, 16384, 16)), ("single 16384 w32", _single(1, 16384, 32)),
                           ("loop 1024 w4", _loop(1024, 4))]),
    ((200000, 300), BF16, [("M1 w1", _single(1, 512, 1)), ("M4 w4", _single(4, 512, 4)),
                           ("M2 w2", _single(2, 512, 2)), ("M4 t16 w2", _single(4, 512, 2, 16)),
                           ("M8 t8 w2", _single(8, 512, 2, 8)), ("M4 w1", _single(4, 512, 1))]),
    ((16384, 5120), F32, [("M1 w8", _single(1, 8192, 8)), ("M1 w16", _single(1, 8192, 16)),
                          ("loop 5x1024 w4", _loop(1024, 4)), ("loop 5x1024 w8", _loop(1024, 8)),
                          ("M2 w8", _single(2, 8192, 8)), ("loop 2048 w8", _loop(2048, 8))]),
]


def ln() -> None:
    for shape, dtype, variants in LN_CASES:
        label = f"layer_norm {'x'.join(map(str, shape))} {str(dtype)[6:]}"
        try:
            res = alternate("layer_norm", shape, dtype, -1, [("builtin", None), *variants], rounds=2)
            comp = compile_pct("layer_norm", shape, dtype, -1)
            print(f"{label}: " + " | ".join(f"{k} {v:.1f}" for k, v in res.items()) + f" || compile {comp:.1f}",
                  flush=True)
        except Exception as e:  # noqa: BLE001 (a probe: report and go on)
            print(f"{label}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)


def val() -> None:
    pass


if __name__ == "__main__":
    for p in sys.argv[1:] or ["ln"]:
        print(f"== {p}", flush=True)
        {"ln": ln, "val": val}[p]()
