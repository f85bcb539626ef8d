"""Column reductions (the reduced axis strided, the kept one contiguous): square tiles on many warps without a split.

torch.compile reduces sum dim=1 of 64x4096x256 (bf16 76 %, fp32 85 % of the copy bandwidth) in one launch of 256
programs, each a [64 outputs x 64 rows] tile on 16 warps looping over all 4096 rows (``tools/inductor_dump.py``);
tritred's built-in splits the rows over 1024 programs of 32x64 tiles on 4 warps, four tiles per iteration, and
merges the partials in a second launch (bf16 66 %, fp32 80 %). This times both, and the tiles between them,
forced through a plugin, alternated twice (``sweep.alternate``: do_bench median, % of the copy bandwidth).

A variant is rows x columns (BLOCK_N x BLOCK_K), warps, tiles loaded per iteration (num_stages) and split.

Usage on a CUDA machine: python tools/cols_tiles_ab.py [--around]
"""

from __future__ import annotations

import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F32 = torch.bfloat16, torch.float32
SQUARE = [(64, 64, 16, 1, 1), (64, 64, 8, 1, 1), (128, 64, 16, 1, 1), (32, 64, 8, 2, 1), (32, 64, 16, 2, 1),
          (64, 64, 16, 1, 2), (32, 64, 4, 4, 1)]
NARROW = [(64, 64, 16, 1, 2), (64, 64, 16, 1, 4), (128, 32, 16, 1, 1), (256, 16, 16, 1, 1), (128, 32, 8, 1, 2),
          (64, 32, 8, 1, 4)]
CASES = [  # (op, shape, dtype, dim, variants)
    ("sum", (64, 4096, 256), BF, 1, SQUARE), ("sum", (64, 4096, 256), F32, 1, SQUARE),
    ("amin", (64, 4096, 256), F32, 1, SQUARE), ("mean", (16, 4096, 1000), BF, 1, SQUARE),
    ("sum", (128, 2048, 512), BF, 1, SQUARE),
    ("sum", (16384, 4096), BF, 0, NARROW), ("sum", (16384, 4096), F32, 0, NARROW),
    ("var", (16384, 4096), BF, 0, [(64, 64, 16, 1, 2), (64, 64, 16, 1, 4), (128, 32, 16, 1, 1), (64, 32, 8, 1, 4)]),
]


AROUND = [  # (second run: around the rule's configs, tools/src_ab.py --cases cols)
    ("sum", (64, 4096, 256), BF, 1, [(128, 64, 16, 1, 1), (256, 64, 16, 1, 1), (128, 64, 16, 2, 1),
                                     (64, 64, 16, 1, 1), (64, 64, 16, 4, 1), (128, 64, 32, 1, 1)]),
    ("mean", (1000, 50000), BF, 0, [(32, 64, 8, 2, 1), (8, 64, 4, 2, 1), (64, 64, 16, 1, 1), (32, 64, 4, 2, 1),
                                    (16, 64, 4, 2, 1), (64, 64, 8, 1, 1)]),
    ("mean", (1000, 50000), F32, 0, [(16, 64, 8, 2, 1), (8, 64, 4, 2, 1), (32, 64, 16, 2, 1), (16, 64, 4, 2, 1)]),
]


def main() -> None:
    for op, shape, dtype, dim, grid in AROUND if "--around" in sys.argv else CASES:
        variants: list = [("builtin", None)]
        for bn, bk, w, loads, split in grid:
            strategy = "split" if split > 1 else "multi_pass"
            variants.append((f"{bn}x{bk}w{w}l{loads}s{split}",
                             LaunchConfig(strategy=strategy, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=loads,
                                          split=split)))
        res = alternate(op, shape, dtype, dim, variants)
        best = max((v, k) for k, v in res.items())
        print(f"{op} dim={dim} {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
