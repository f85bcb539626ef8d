"""Plain reductions of 2-byte rows: bytes per program. float32 rows reach 93 % of the copy bandwidth where bfloat16
rows of the same shapes reach 85-87 % with the same elements per program (half the bytes): this times bfloat16
whole-row tiles of twice and four times the rows (and warps), forced through a plugin, alternated twice
(``sweep.alternate``).

Usage on a CUDA machine: python tools/rows_bytes_ab.py
"""

from __future__ import annotations

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F16 = torch.bfloat16, torch.float16
CASES = [  # (op, shape, dtype, variants as (BLOCK_M, num_warps)): the suite's shapes, then others
    ("sum", (16384, 4096), BF, [(2, 16), (2, 8), (4, 16), (1, 16), (1, 4)]),
    ("amax", (16384, 4096), BF, [(2, 16), (2, 8), (4, 16), (1, 16)]),
    ("sum", (262144, 256), BF, [(32, 16), (32, 8), (64, 16), (16, 16), (16, 4)]),
    ("mean", (262144, 256), BF, [(32, 16), (32, 8), (64, 16)]),
    ("sum", (32768, 2048), BF, [(2, 8), (4, 16), (2, 16), (8, 16)]),
    ("sum", (65536, 1024), F16, [(8, 16), (4, 8), (8, 8), (16, 16)]),
]


def main() -> None:
    for op, shape, dtype, grid in CASES:
        block_n = 1 << (shape[-1] - 1).bit_length()
        variants: list = [("builtin", None)]
        for m, w in grid:
            variants.append((f"M{m}w{w}", LaunchConfig(strategy="single_pass", BLOCK_M=m, BLOCK_N=block_n,
                                                       num_warps=w)))
        res = alternate(op, shape, dtype, -1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"{op} {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
