"""batch_norm training (NCHW): the built-in tiles (2048 elements, 32 images x 64 spatial, 4 warps, ~8 statistics
programs per SM) against tiles of more elements per thread (more loads in flight per program) and other program
counts, forced through a plugin, alternated twice (do_bench median, the better of the two), checked against torch
(WRONG on a mismatch), % of copy bandwidth (4263 GB/s; input read once, output written once).

A variant is BLOCK_M x BLOCK_N, warps and statistics programs per SM (``split`` = programs / channels).

Usage on a CUDA machine: python tools/bn_tiles_ab.py
"""

from __future__ import annotations

import math

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # (shape, dtype): the suite's two large shapes, then shapes outside it
    ((64, 256, 56, 56), BF), ((64, 256, 56, 56), F32), ((256, 64, 56, 56), BF), ((256, 64, 56, 56), F32),
    ((128, 256, 28, 28), BF), ((32, 128, 112, 112), F16), ((16, 64, 224, 224), F32), ((64, 96, 55, 55), BF),
    ((128, 128, 28, 28), F32), ((8, 32, 64, 64, 64), BF),
]
VARIANTS = [  # (BLOCK_M, BLOCK_N, warps, statistics programs per SM)
    (32, 64, 2, 8), (32, 64, 4, 16), (64, 64, 4, 8), (32, 128, 4, 8), (32, 128, 8, 8), (64, 64, 4, 4),
    (16, 128, 2, 8), (64, 64, 8, 16),
]


def main() -> None:
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for shape, dtype in CASES:
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        variants = [("builtin", None)]
        for bm, bn, w, per_sm in VARIANTS:
            bm_, bn_ = min(bm, 1 << (B - 1).bit_length()), min(bn, 1 << (S - 1).bit_length())
            tiles = math.ceil(B / bm_) * math.ceil(S / bn_)
            split = max(1, min(tiles, per_sm * sm // Ch))
            variants.append((f"{bm_}x{bn_}w{w}p{per_sm}s{split}",
                             LaunchConfig(strategy="split", BLOCK_M=bm_, BLOCK_N=bn_, num_warps=w, split=split)))
        res = alternate("batch_norm", shape, dtype, 1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"batch_norm {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
