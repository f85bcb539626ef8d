"""A/B of the row loops' unrolled first sweep (``_common.unrolled_chunks``) across row widths.

A developer's measurement script. For each width: the built-in config, multi-pass configs whose chunks divide
the row 2-8 times (unrolled) and the same configs with the unroll off (``unrolled_chunks`` patched to 0), and
torch.compile, alternated twice, do_bench median, % of copy bandwidth (4263 GB/s; input read once, output
written once).

Usage on a CUDA machine: python tools/unroll_ab.py [stats | general | onoff]
(stats: var and sum instead of layer_norm; general: the rule against the single pass on widths it was not
chosen on; onoff: built-in loops that the unroll reaches without a rule, with it and without)
"""

# ruff: noqa: B023 (each closure runs before its loop variables move on)

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import tritred_ops as tr
from sweep import Force
from triton.testing import do_bench
from tritred_core import LaunchConfig, get_registry
from tritred_ops import _common as C

COPY_GBS = 4263.0
CASES = [("layer_norm", n, torch.bfloat16) for n in (12288, 5120, 6144, 10240, 20480, 24576, 8192, 16384, 3072)] + \
        [("layer_norm", n, torch.float32) for n in (12288, 5120, 20480)]
STATS = [(op, n, torch.bfloat16) for op in ("var", "sum") for n in (5120, 6144, 12288, 20480, 24576)] + \
        [(op, n, torch.float32) for op in ("var", "sum") for n in (5120, 12288)]


GENERAL = [("layer_norm", n, torch.bfloat16) for n in (7168, 14336, 28672, 32768)] + \
    [("layer_norm", 12288, torch.float16)] + [("var", n, torch.bfloat16) for n in (7168, 10240, 14336)]


ONOFF = [("layer_norm", 65536, torch.bfloat16), ("layer_norm", 65536, torch.float32), ("sum", 16384, torch.bfloat16),
         ("sum", 16384, torch.float32), ("layer_norm", 49152, torch.bfloat16), ("mean", 12288, torch.float32)]


def single(n: int) -> LaunchConfig:
    """The single pass these widths took before the rule (a power-of-two tile, ~32 elements per thread)."""
    p2 = 1 << (n - 1).bit_length()
    return LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=p2, num_warps=min(32, max(4, p2 // 1024)))


def configs(n: int) -> list[LaunchConfig]:
    out = []
    for chunk, warps in ((1024, 4), (1024, 8), (2048, 8), (2048, 16), (4096, 16), (4096, 8)):
        if n % chunk == 0 and 2 <= n // chunk <= C.UNROLL_CHUNKS:
            out.append(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=chunk, num_warps=warps))
    return out


def main() -> None:
    reg = get_registry()
    real = C.unrolled_chunks
    general, onoff = "general" in sys.argv[1:], "onoff" in sys.argv[1:]
    for op, n, dtype in (ONOFF if onoff else GENERAL if general else STATS if "stats" in sys.argv[1:] else CASES):
        rows = max(1024, (256 << 20) // (n * 2))
        x = torch.randn(rows, n, device="cuda", dtype=dtype)
        w = torch.randn(n, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        if op == "layer_norm":
            ref = F.layer_norm(x.float(), (n,), w.float(), b.float())
            nbytes = 2 * x.numel() * x.element_size()
            fn = lambda: tr.layer_norm(x, (n,), w, b)  # noqa: E731
            eager = lambda: F.layer_norm(x, (n,), w, b)  # noqa: E731
        else:
            ref = getattr(torch, op)(x.float(), -1)
            nbytes = x.numel() * x.element_size() + rows * x.element_size()
            fn = lambda: getattr(tr, op)(x, -1)  # noqa: E731
            eager = lambda: getattr(torch, op)(x, -1)  # noqa: E731
        res: dict[str, float] = {}
        tags = (("", True), (" rolled", False)) if op == "layer_norm" and not general else (("", True),)
        variants = [("builtin", None, True)] + [(f"{c.BLOCK_N}w{c.num_warps}{tag}", c, on)
                                               for c in configs(n) for tag, on in tags]
        if onoff:  # built-in configs that the unroll reaches without a rule: on and off
            variants = [("builtin", None, True), ("builtin rolled", None, False)]
        if general:  # the new rule against the single pass it replaced
            variants = [("builtin", None, True), ("single", single(n), True)] + (
                [("4096w16", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=4096, num_warps=16), True)]
                if n == 32768 else [])
        for _ in range(2):
            for label, cfg, unroll in variants:
                name = None if cfg is None else reg.register(Force(op, cfg), name="candidate")
                C.unrolled_chunks = real if unroll else (lambda *a: 0)
                try:
                    reg.cache.clear()
                    if label not in res:
                        err = (fn().float() - ref).abs().max().item()
                        if err > 0.1 * (1 if op != "sum" else n ** 0.5):
                            print(f"   WRONG {label}: {err}", flush=True)
                    pct = 100 * nbytes / (do_bench(fn, return_mode="median") * 1e-3) / 1e9 / COPY_GBS
                    res[label] = max(res.get(label, 0.0), pct)
                finally:
                    C.unrolled_chunks = real
                    if name:
                        reg.unregister(name)
        if op == "layer_norm" and not (general or onoff):
            cp = torch.compile(eager, dynamic=False)
            cp()
            res["compile"] = 100 * nbytes / (do_bench(cp, return_mode="median") * 1e-3) / 1e9 / COPY_GBS
        else:
            res["eager"] = 100 * nbytes / (do_bench(eager, return_mode="median") * 1e-3) / 1e9 / COPY_GBS
        best = max((k for k in res if k not in ("compile", "eager")), key=res.get)
        print(f"{op} {rows}x{n} {str(dtype)[6:]}: " + "  ".join(f"{k} {v:5.1f}" for k, v in res.items())
              + f"  | best {best}", flush=True)
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
