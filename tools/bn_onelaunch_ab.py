"""batch_norm training (NCHW): the built-in two launches (statistics, then normalize: the second read from HBM)
against strategy ``persistent`` (one cooperative launch; each program takes the statistics of one tile and
normalizes the tile it read ~one round earlier, from L2), forced through a plugin, alternated twice (do_bench
median, the better of the two), checked against torch (WRONG on a mismatch), % of copy bandwidth (4263 GB/s;
input read once, output written once).

A variant is BLOCK_M x BLOCK_N, warps, a cap on programs per SM (0: every program the device holds at once) and
the tiles per item (num_stages: one release and one acquire per item), the lag beyond a channel's items in
eighths of a round (split). The resident grids are printed.

The strategy was measured slower and reverted: the tool runs at commit ebc1ead (the last variant; 375ebc2 and
e1d385d the earlier ones), data in docs/data/h200-s17-bn-persistent-ab.txt.

Usage on a CUDA machine, at that commit: python tools/bn_onelaunch_ab.py [--quick]
"""

from __future__ import annotations

import logging
import math
import sys

import torch
import tritred_ops._common as C
from sweep import alternate
from tritred_core import LaunchConfig

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # the suite's large training shapes, its 7x7 one, then shapes outside it (--quick: 5 of them)
    ((64, 256, 56, 56), BF), ((64, 256, 56, 56), F32), ((256, 64, 56, 56), BF), ((256, 64, 56, 56), F32),
    ((32, 2048, 7, 7), BF), ((128, 512, 14, 14), BF), ((32, 96, 55, 55), BF), ((16, 64, 16, 32, 32), BF),
    ((64, 256, 28, 28), F16), ((16, 64, 224, 224), F32),
]
VARIANTS = [  # (tile elements, BLOCK_N at most, warps, programs per SM cap, tiles per item, lag in 1/8 rounds)
    (2048, 128, 2, 0, 4, 8), (2048, 128, 2, 0, 4, 4), (2048, 128, 2, 0, 4, 1), (2048, 128, 2, 0, 8, 4),
    (2048, 128, 2, 0, 8, 1), (4096, 128, 4, 0, 4, 2), (8192, 128, 8, 0, 4, 2), (2048, 128, 2, 4, 8, 8),
]


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format='   %(message)s')
    logging.getLogger('tritred').setLevel(logging.DEBUG)  # (the occupancy: driver against estimate)
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    grids: list[int] = []
    real = C.resident_programs

    def spy(*a, **k):  # noqa: ANN002, ANN003, ANN202
        n = real(*a, **k)
        grids.append(n)
        return n
    C.resident_programs = spy
    p2 = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
    quick = "--quick" in sys.argv
    for shape, dtype in ([CASES[i] for i in (0, 1, 2, 5, 9)] if quick else CASES):
        B, S = shape[0], math.prod(shape[2:])
        variants: list[tuple[str, LaunchConfig | None]] = [("builtin", None)]
        for elems, bn_max, w, per_sm, unit, lag in VARIANTS:
            bn = min(bn_max, p2(S))
            bm = max(1, min(p2(B), elems // bn))
            variants.append((f"{bm}x{bn}w{w}p{per_sm}u{unit}L{lag}",
                             LaunchConfig(strategy="persistent", BLOCK_M=bm, BLOCK_N=bn, num_warps=w,
                                          num_programs=per_sm * sm, num_stages=unit, split=lag)))
        grids.clear()
        res = alternate("batch_norm", shape, dtype, 1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"batch_norm {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()) + f"  (resident grids {sorted(set(grids))})",
              flush=True)


if __name__ == "__main__":
    main()
