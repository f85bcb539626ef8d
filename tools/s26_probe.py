"""Twenty-sixth session's probe on the H200: launch configs of the suite cases just under 90 % of copy bandwidth.

The median of the suite sits at 88 %: the cases between 85 and 90 decide it. Their configs were set by sweeps of
other ops (the plain reductions' "two 16-byte loads a thread" warps were measured on sum/amax only; var/std and
max/min keep ~32 elements a thread), so this probe forces the neighbours through the launch-config hook, checks
each against torch, and times them in alternation with the built-in (``sweep.alternate``: do_bench median, the
better of two rounds, % of 4263 GB/s).

Usage on a CUDA machine: python tools/s26_probe.py [GROUP ...]  (groups: stats, max, loops, cols, off, grid32,
grid16, rule, rulemax, planes, short32, more; none: all of them)
"""

from __future__ import annotations

import sys

import torch
from tritred_core import LaunchConfig

sys.path.insert(0, "tools")
from sweep import alternate  # noqa: E402

SP, MP = "single_pass", "multi_pass"


def cfg(strategy: str = SP, **kw) -> LaunchConfig:
    return LaunchConfig(strategy=strategy, **kw)


F32, BF16 = torch.float32, torch.bfloat16


def row_warps(bm: int, bn: int, warps: tuple[int, ...]) -> list[tuple[str, LaunchConfig]]:
    return [(f"M{bm} w{w}", cfg(BLOCK_M=bm, BLOCK_N=bn, num_warps=w)) for w in warps]


GROUPS: dict[str, list] = {
    # var/std rows kept in registers: ~32 elements a thread now; the plain reductions' warps (two 16-byte loads a
    # thread) gained 5 points on sum fp32 16384x4096
    "stats": [
        ("var", (16384, 4096), F32, -1, row_warps(1, 4096, (8, 16)) + row_warps(2, 4096, (16,))),
        ("std", (16384, 4096), F32, -1, row_warps(1, 4096, (8, 16))),
        ("var", (16384, 4096), BF16, -1, row_warps(1, 4096, (8, 16))),
        ("var", (262144, 256), F32, -1, row_warps(16, 256, (4, 8, 16)) + row_warps(8, 256, (2, 4))
         + [("M16 w4 t8", cfg(BLOCK_M=16, BLOCK_N=256, num_warps=4, threads_per_row=8))]),
        ("std", (262144, 256), F32, -1, row_warps(16, 256, (8, 16)) + row_warps(8, 256, (4,))),
    ],
    "max": [
        ("max", (16384, 4096), F32, -1, row_warps(1, 4096, (8, 16))),
        ("max", (16384, 4096), BF16, -1, row_warps(1, 4096, (8, 16))),
        ("max", (262144, 256), F32, -1, row_warps(16, 256, (8, 16)) + row_warps(8, 256, (2, 4))),
        ("max", (262144, 256), BF16, -1, row_warps(16, 256, (4, 8)) + row_warps(8, 256, (2, 4))),
    ],
    "loops": [
        ("sum", (1024, 131072), BF16, -1, [
            ("N8192 w16", cfg(MP, BLOCK_N=8192, num_warps=16)),
            ("N8192 w32", cfg(MP, BLOCK_N=8192, num_warps=32)),
            ("N4096 w8", cfg(MP, BLOCK_N=4096, num_warps=8)),
            ("N4096 w16 st2", cfg(MP, BLOCK_N=4096, num_warps=16, num_stages=2)),
            ("split2 N4096 w16", cfg("split", BLOCK_N=4096, num_warps=16, split=2)),
        ]),
        ("layer_norm", (4096, 32768), F32, -1, [
            ("loop N16384 w32", cfg(MP, BLOCK_N=16384, num_warps=32)),
            ("loop N8192 w16", cfg(MP, BLOCK_N=8192, num_warps=16)),
            ("split_rows 4x8192 w8", cfg("split_rows", BLOCK_N=8192, split=4, num_warps=8)),
        ]),
    ],
    "cols": [
        ("sum", (256, 262144), F32, 0, [
            ("N8 K128 w4", cfg(MP, BLOCK_N=8, BLOCK_K=128, num_warps=4)),
            ("N16 K64 w4", cfg(MP, BLOCK_N=16, BLOCK_K=64, num_warps=4)),
            ("N8 K256 w8", cfg(MP, BLOCK_N=8, BLOCK_K=256, num_warps=8)),
            ("N8 K64 w4 st2", cfg(MP, BLOCK_N=8, BLOCK_K=64, num_warps=4, num_stages=2)),
        ]),
    ],
    # shapes outside the suite, for whatever rule the groups above suggest
    "off": [
        ("var", (8192, 8192), F32, -1, row_warps(1, 8192, (16, 32))),
        ("var", (32768, 2048), F32, -1, row_warps(2, 2048, (8, 16)) + row_warps(1, 2048, (4, 8))),
        ("var", (65536, 1024), F32, -1, row_warps(4, 1024, (8, 16)) + row_warps(8, 1024, (16,))),
        ("std", (131072, 512), F32, -1, row_warps(8, 512, (8, 16)) + row_warps(4, 512, (4,))),
        ("var", (16384, 4096), torch.float16, -1, row_warps(1, 4096, (8, 16))),
        ("max", (65536, 1024), F32, -1, row_warps(4, 1024, (8, 16))),
        ("max", (8192, 8192), F32, -1, row_warps(1, 8192, (16, 32))),
    ],
}


def _grid(op: str, dtype: torch.dtype) -> list:
    """Row tiles of M rows x N (whole rows) on w warps, 8-32 elements a thread, for widths 1024-16384."""
    out = []
    for n, rows in ((1024, 65536), (2048, 32768), (4096, 16384), (8192, 8192), (16384, 4096)):
        variants = []
        for m in (1, 2, 4, 8, 16):
            for w in (2, 4, 8, 16, 32):
                if m * n <= 32768 and 8 <= m * n // (32 * w) <= 32:
                    variants.append((f"M{m} w{w}", cfg(BLOCK_M=m, BLOCK_N=n, num_warps=w)))
        out.append((op, (rows, n), dtype, -1, variants))
    return out


def _old(n: int) -> list:
    """The generic tile that the float32 statistics rows of ``n`` took before the rule (``heuristics._wide_rows``)."""
    m, w = {1024: (4, 4), 2048: (2, 4), 4096: (1, 4), 8192: (1, 8)}[n]
    return [(f"old M{m} w{w}", cfg(BLOCK_M=m, BLOCK_N=n, num_warps=w))]


# the adopted rule (built-in) against the configs it replaced, on and off the suite
GROUPS["rule"] = [(op, shape, F32, -1, _old(shape[-1])) for op, shape in (
    ("var", (16384, 4096)), ("std", (16384, 4096)), ("var_mean", (16384, 4096)), ("std_mean", (32768, 2048)),
    ("var", (65536, 1024)), ("std", (65536, 1024)), ("var", (100000, 1024)), ("var", (32768, 2048)),
    ("var", (8192, 8192)), ("std", (8192, 8192)), ("var", (3000, 4096)), ("var_mean", (40000, 2048)))]
GROUPS["rulemax"] = [(op, shape, F32, -1, [(f"old M{m} w4", cfg(BLOCK_M=m, BLOCK_N=shape[1], num_warps=4))])
                     for op, shape, m in (("max", (65536, 1024), 2), ("min", (100000, 1024), 2),
                                          ("max", (32768, 2048), 1), ("max", (16384, 4096), 1),
                                          ("min", (16384, 4096), 1), ("max", (20000, 4096), 1))]
# float32 short rows over a few threads each (threads_per_row: the bf16 rule's layout; t8 was level on 256)
GROUPS["short32"] = [
    ("var", (262144, 256), F32, -1, [(f"M{128 // t * w // 4} w{w} t{t}", cfg(BLOCK_M=32 * w // t, BLOCK_N=256,
                                      num_warps=w, threads_per_row=t)) for t, w in ((4, 4), (16, 4), (16, 8), (4, 2))]),
    ("std", (262144, 256), F32, -1, [("M8 w4 t16", cfg(BLOCK_M=8, BLOCK_N=256, num_warps=4, threads_per_row=16))]),
    ("var", (131072, 512), F32, -1, [(f"M{32 * w // t} w{w} t{t}", cfg(BLOCK_M=32 * w // t, BLOCK_N=512,
                                      num_warps=w, threads_per_row=t)) for t, w in ((16, 4), (32, 4), (8, 4))]),
]
# var over two axes (per-plane rows, merged per channel): the rule meets power-of-two planes; old = the generic tile
GROUPS["planes"] = [
    ("var", (64, 256, 32, 32), F32, (0, 2, 3), [("old M4 w4", cfg(BLOCK_M=4, BLOCK_N=1024, num_warps=4))]),
    ("var", (64, 128, 32, 64), F32, (0, 2, 3), [("old M2 w4", cfg(BLOCK_M=2, BLOCK_N=2048, num_warps=4))]),
    ("var", (256, 64, 64, 64), F32, (0, 2, 3), [("old M1 w4", cfg(BLOCK_M=1, BLOCK_N=4096, num_warps=4))]),
]
GROUPS["more"] = [
    ("max", (16384, 4096), F32, -1, row_warps(2, 4096, (8, 16))),
    ("max", (65536, 1024), F32, -1, row_warps(1, 1024, (2, 4))),
    ("max", (32768, 2048), F32, -1, row_warps(1, 2048, (4, 8))),
    ("max", (262144, 256), F32, -1, row_warps(1, 256, (1,)) + row_warps(2, 256, (1,))),
    ("var", (131072, 512), F32, -1, row_warps(1, 512, (1, 2)) + row_warps(2, 512, (2, 4))),
    ("var", (262144, 256), F32, -1, row_warps(1, 256, (1,)) + row_warps(2, 256, (1, 2))),
]
GROUPS["grid32"] = _grid("var", F32)
GROUPS["grid16"] = _grid("var", BF16)


def main() -> None:
    groups = sys.argv[1:] or list(GROUPS)
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    for g in groups:
        for op, shape, dtype, dim, variants in GROUPS[g]:
            res = alternate(op, shape, dtype, dim, [("builtin", None), *variants])
            base = res["builtin"]
            line = "  ".join(f"{k} {v:.1f}" + ("" if k == "builtin" else f" ({v - base:+.1f})") for k, v in res.items())
            print(f"[{g}] {op} {'x'.join(map(str, shape))} {str(dtype)[6:]} dim={dim}: {line}", flush=True)


if __name__ == "__main__":
    main()
