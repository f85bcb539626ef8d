"""Short rows that one warp spans: one-warp tiles against tiles of several warps, one row block per warp.

Why: rows of up to 512 elements of ops with several reductions per row (var/std, layer_norm, max/min with
indices, softmax) take 1024-element tiles of one warp (heuristics._rows_config, ``one_warp_rows``), because a
float32 row of 256 elements spans two warps in Triton's blocked layout (4-element vectors, 64 threads): a tile of
several warps then reduces across warps through shared memory and a barrier. A 2-byte row of 256 (8-element
vectors) or a float32 row of 128 is exactly one warp wide: in a tile of several warps every warp holds whole rows,
so the row reduction stays in shuffles, and a program moves 4-16 KB instead of 2 KB (bf16 262144x256 var: 65536
programs of 2 KB, ~70 % of the copy bandwidth, where sum's 16-row tiles on 8 warps reach ~86 %).

Variants: BLOCK_M x warps (BLOCK_N = the row's power of two), forced through a plugin, alternated twice
(``sweep.alternate``: do_bench median, the better round, checked against torch), % of copy bandwidth.

Usage on a CUDA machine: python tools/rows_warps_ab.py
"""

from __future__ import annotations

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F16, F32 = torch.bfloat16, torch.float16, torch.float32
CASES = [  # (op, shape, dtype): the suite's 262144x256 bf16 rows first, then shapes outside it
    ("var", (262144, 256), BF), ("std", (262144, 256), BF), ("max", (262144, 256), BF),
    ("layer_norm", (262144, 256), BF), ("softmax", (262144, 256), BF),
    ("var", (100000, 256), F16), ("var", (524288, 128), BF), ("var", (131072, 200), BF),
    ("max", (131072, 200), BF), ("layer_norm", (100000, 256), F16), ("log_softmax", (131072, 250), BF),
    ("var", (524288, 128), F32), ("layer_norm", (524288, 128), F32), ("max", (524288, 128), F32),
    ("var", (262144, 256), F32),  # (control: a float32 row of 256 spans two warps)
]
VARIANTS = [(8, 2), (16, 2), (16, 4), (16, 8), (32, 8)]  # (BLOCK_M, num_warps)


def row_tiles(op: str, shape: tuple[int, ...], dtype: torch.dtype, grid: list[tuple[int, int]]) -> None:
    """Print the built-in config against whole-row single-pass tiles of (BLOCK_M, num_warps) in ``grid``."""
    block_n = 1 << (shape[-1] - 1).bit_length()
    variants: list = [("builtin", None)]
    for m, w in grid:
        variants.append((f"M{m}w{w}", LaunchConfig(strategy="single_pass", BLOCK_M=m, BLOCK_N=block_n,
                                                   num_warps=w)))
    res = alternate(op, shape, dtype, -1, variants)
    best = max((v, k) for k, v in res.items())
    print(f"{op} {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
          + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def main() -> None:
    for op, shape, dtype in CASES:
        row_tiles(op, shape, dtype, VARIANTS)


if __name__ == "__main__":
    main()
