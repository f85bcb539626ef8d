"""Thirtieth session's probe on the H200: the layer_norm shapes outside the suite where tritred trails a peer
(twenty-eighth session's off-suite run: bf16 65536x768 0.89x torch.compile, 8192x12288 0.90x, 200000x300 0.86x,
fp32 16384x5120 0.96x), each config against the built-in one and torch.compile timed in the same process.

Part ``ln``: a grid of configs per shape (``tools/sweep.py``'s ``alternate``: checked against torch, best of two
rounds, do_bench median, % of 4263 GB/s); torch.compile's figure after them (``compile``).
Part ``unroll``: layer_norm row loops whose first sweep is unrolled (``_common.unrolled_chunks``), with the
second sweep unrolled too (``layer_norm.UNROLL_SECOND``, set by each variant's plugin when the launch is decided)
against the rolled second sweep, at the built-in config and at torch.compile's (2048-wide chunks on 16 warps).
Part ``pre``: 2-byte layer_norm rows of one-warp tiles (rows of 257-1024 that are not powers of two) with weight
and bias loaded beside the row (``PRELOAD_WB``, as torch.compile's persistent kernels load them; float32 rows
only so far: ``layer_norm._preload_affine`` patched by each variant's plugin when the launch is decided), and
two rows a one-warp program (2048-element tiles, as var's ``half_rows``).
Part ``pre2``: the one shape where preloading gained (200000x300 bf16) beside other 2-byte rows of 257-511 whose
built-in is two rows of a 512 tile on one warp: the built-in against the same with weight and bias preloaded
(written for the next session: not run in the thirtieth, whose device time was spent).
Part ``val``: both changes taken (built-in now) against what they replaced, on shapes they were not chosen on:
the unrolled second sweep (``Unroll``) and two rows a one-warp program for 2-byte rows of 513-896 (against one).

Usage on a CUDA machine: python tools/s30_probe.py [ln] [unroll] [pre] [pre2] [val]
"""

from __future__ import annotations

import importlib
import sys

import torch
from tritred_core import LaunchConfig, get_registry, hookimpl

sys.path.insert(0, "tools")
from sweep import alternate, make_call  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
LN = importlib.import_module("tritred_ops.layer_norm")


class Knob:
    """Forces ``config`` (None: the built-in one) for layer_norm and calls ``setting()`` when the launch is
    decided (the decision and the module settings it read are recorded in the call's replay plan)."""

    def __init__(self, config: LaunchConfig | None, setting) -> None:  # noqa: ANN001
        self.config, self.setting = config, setting

    @hookimpl(tryfirst=True)
    def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
        if spec.name != "layer_norm":
            return None
        self.setting()
        return self.config


def Unroll(config: LaunchConfig | None, second: bool) -> Knob:  # noqa: N802 (a plugin factory)
    """``config`` with ``layer_norm.UNROLL_SECOND`` 8 (every unrolled loop; the built-in bound came later) or 0."""
    return Knob(config, lambda: setattr(LN, "UNROLL_SECOND", 8 if second else 0))


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


def _line(shape, dtype, variants, rounds: int = 2, peer: bool = True) -> None:
    """One printed line: the layer_norm variants of one shape (``alternate``), then torch.compile's figure
    (``peer``); an error is printed and the probe goes on."""
    label = f"layer_norm {'x'.join(map(str, shape))} {str(dtype)[6:]}"
    try:
        res = alternate("layer_norm", shape, dtype, -1, variants, rounds=rounds)
        comp = f" || compile {compile_pct('layer_norm', shape, dtype, -1):.1f}" if peer else ""
        print(f"{label}: " + " | ".join(f"{k} {v:.1f}" for k, v in res.items()) + comp, flush=True)
    except Exception as e:  # noqa: BLE001 (a probe: report and go on)
        print(f"{label}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)


LN_CASES = [  # (shape, dtype, variants)
    ((65536, 768), BF16, [("M2 w1", _single(2, 1024, 1)), ("M4 w2", _single(4, 1024, 2)),
                          ("M4 t32 w4", _single(4, 1024, 4, 32)), ("M2 w2", _single(2, 1024, 2)),
                          ("M1 w2", _single(1, 1024, 2)), ("M8 t32 w8", _single(8, 1024, 8, 32)),
                          ("loop 3x256 w1", _loop(256, 1)), ("M2 t16 w1", _single(2, 1024, 1, 16))]),
    ((65536, 768), F16, [("M2 w1", _single(2, 1024, 1)), ("M4 w2", _single(4, 1024, 2)),
                         ("M4 t32 w4", _single(4, 1024, 4, 32)), ("M2 w2", _single(2, 1024, 2)),
                         ("loop 3x256 w1", _loop(256, 1))]),
    ((200000, 300), BF16, [("M1 w1", _single(1, 512, 1)), ("M4 w4", _single(4, 512, 4)),
                           ("M2 w2", _single(2, 512, 2)), ("M4 t16 w2", _single(4, 512, 2, 16)),
                           ("M8 t8 w2", _single(8, 512, 2, 8)), ("M4 w1", _single(4, 512, 1))]),
    ((16384, 5120), F32, [("loop 5x1024 w8", _loop(1024, 8)), ("loop 5x1024 w16", _loop(1024, 16)),
                          ("loop 10x512 w4", _loop(512, 4))]),
]


def ln() -> None:
    for shape, dtype, variants in LN_CASES:
        _line(shape, dtype, [("builtin", None), *variants])


UNROLL_CASES = [  # (shape, dtype, extra forced configs)
    ((8192, 12288), BF16, [("6x2048 w16", _loop(2048, 16)), ("3x4096 w16", _loop(4096, 16))]),
    ((8192, 12288), F16, [("6x2048 w16", _loop(2048, 16))]),
    ((16384, 5120), BF16, [("5x1024 w8", _loop(1024, 8))]),
    ((8192, 6144), BF16, [("3x2048 w16", _loop(2048, 16))]),
    ((4096, 24576), BF16, [("6x4096 w32", _loop(4096, 32))]),
    ((2048, 20480), BF16, []),
    ((16384, 5120), F32, [("5x1024 w8", _loop(1024, 8))]),
]


def unroll() -> None:
    for shape, dtype, extra in UNROLL_CASES:
        variants = [("builtin unrolled2", Unroll(None, True)), ("builtin rolled2", Unroll(None, False))]
        for label, cfg in extra:
            variants += [(f"{label} unrolled2", Unroll(cfg, True)), (f"{label} rolled2", Unroll(cfg, False))]
        _line(shape, dtype, variants)
    LN.UNROLL_SECOND = 6


_PRELOAD = LN._preload_affine


def Preload(config: LaunchConfig | None, on: bool) -> Knob:  # noqa: N802 (a plugin factory)
    """``config`` with weight and bias loaded with the row (``on``: in every unshifted single pass of at most 8
    warps, whatever the dtype; else the built-in rule, float32 only)."""
    rule = (lambda dtype, single, align, warps: single and align == 0 and warps <= 8) if on else _PRELOAD
    return Knob(config, lambda: setattr(LN, "_preload_affine", rule))


PRE_CASES = [((65536, 768), BF16), ((65536, 768), F16), ((100000, 768), BF16), ((32768, 768), BF16),
             ((65536, 640), BF16), ((50000, 1000), BF16), ((131072, 384), BF16), ((200000, 300), BF16),
             ((65536, 768), F32)]


def pre() -> None:
    for shape, dtype in PRE_CASES:
        n = shape[1]
        tile = 1 << (n - 1).bit_length()
        two = _single(2048 // tile, tile, 1)
        variants = [("builtin", Preload(None, False)), ("builtin pre", Preload(None, True)),
                    (f"M{two.BLOCK_M} w1", Preload(two, False)), (f"M{two.BLOCK_M} w1 pre", Preload(two, True))]
        _line(shape, dtype, variants)
    LN._preload_affine = _PRELOAD


PRE2_CASES = [((200000, 300), BF16), ((150000, 400), BF16), ((200000, 320), F16), ((120000, 480), BF16),
              ((250000, 272), BF16), ((100000, 500), BF16)]


def pre2() -> None:
    for shape, dtype in PRE2_CASES:
        _line(shape, dtype, [("builtin", Preload(None, False)), ("builtin pre", Preload(None, True))], rounds=3,
              peer=False)
    LN._preload_affine = _PRELOAD


VAL_UNROLL = [((8192, 10240), BF16), ((8192, 14336), BF16), ((8192, 7168), BF16), ((2048, 28672), BF16),
              ((4096, 32768), BF16), ((16384, 5120), F16), ((4096, 12288), BF16), ((32768, 1536), BF16),
              ((16384, 2560), BF16)]
VAL_HALF = [((65536, 576), BF16), ((65536, 720), BF16), ((65536, 832), F16), ((65536, 896), BF16),
            ((65536, 640), F16), ((100000, 768), F16), ((16384, 768), BF16)]


def val() -> None:
    for shape, dtype in VAL_UNROLL:
        _line(shape, dtype, [("unrolled2", Unroll(None, True)), ("rolled2", Unroll(None, False))], rounds=3,
              peer=False)
    LN.UNROLL_SECOND = 6
    for shape, dtype in VAL_HALF:
        _line(shape, dtype, [("rule", None), ("M1 w1", _single(1, 1024, 1))], rounds=3, peer=False)


if __name__ == "__main__":
    for p in sys.argv[1:] or ["ln"]:
        print(f"== {p}", flush=True)
        {"ln": ln, "unroll": unroll, "pre": pre, "pre2": pre2, "val": val}[p]()
