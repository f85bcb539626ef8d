"""Plain reductions of 2-byte rows: bytes per program. float32 rows reach 93 % of the copy bandwidth where bfloat16
rows of the same shapes reach 85-87 % with the same elements per program (half the bytes): this times bfloat16
whole-row tiles of twice and four times the rows (and warps), forced through a plugin, alternated twice
(``sweep.alternate``).

Usage on a CUDA machine: python tools/rows_bytes_ab.py
"""

from __future__ import annotations

import torch
from rows_warps_ab import row_tiles

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
        row_tiles(op, shape, dtype, grid)


if __name__ == "__main__":
    main()
