"""batch_norm training as one persistent launch (strategy ``persistent``: statistics of a group of channel slices,
a barrier one group late, normalization re-reading the group from L2) against the built-in two launches (the
second read from HBM), forced through a plugin, alternated twice (do_bench median, the better of the two), % of
copy bandwidth (4263 GB/s; input read once, output written once, per-channel vectors counted).

A variant is (tile BLOCK_M x BLOCK_N, warps, programs per SM, group bytes, lag): the slices per channel are chosen
so that one group (programs x slice bytes) holds about ``group bytes`` of input; lag 1 (``num_stages=2``) waits
at the previous group's barrier after the next group's statistics, lag 0 at the group's own.

Usage on a CUDA machine: python tools/bn_persistent_ab.py [--quick]
"""

from __future__ import annotations

import math
import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig, Problem, get_registry
from tritred_ops import heuristics as H
from tritred_ops._common import device_info

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # (shape, dtype): the suite's two large shapes, then shapes outside it
    ((64, 256, 56, 56), BF), ((64, 256, 56, 56), F32), ((256, 64, 56, 56), BF), ((256, 64, 56, 56), F32),
    ((128, 256, 28, 28), BF), ((32, 128, 112, 112), F16), ((64, 512, 14, 14), BF), ((16, 64, 224, 224), F32),
    ((64, 96, 55, 55), BF), ((8, 32, 64, 64, 64), BF),
]
MB = 1 << 20


def persistent(shape, dtype, bm: int, bn: int, warps: int, per_sm: int, group_bytes: int, lag: int = 1) -> LaunchConfig:
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
    programs = per_sm * sm
    tiles = math.ceil(B / bm) * math.ceil(S / bn)
    channel = B * S * dtype.itemsize
    blocks = max(1, min(Ch, group_bytes // channel))  # channels per group
    split = max(1, min(tiles, programs // blocks))
    return LaunchConfig(strategy="persistent", BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, split=split,
                        num_programs=programs, num_stages=1 + lag)


def main() -> None:
    reg = get_registry()
    quick = "--quick" in sys.argv
    for shape, dtype in CASES[:4] if quick else CASES:
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        p = Problem(op="batch_norm", dtype=str(dtype)[6:], M=B, N=S, K=Ch, stride_m=Ch * S, stride_n=1, stride_k=S)
        base = H.tritred_launch_config(reg.get("batch_norm").spec, p, device_info(torch.device("cuda")))
        variants = [("builtin", None)]
        bm, bn = base.BLOCK_M, base.BLOCK_N
        for tile, warps, per_sm, gb, lag in (((bm, bn), 4, 8, 24 * MB, 1), ((bm, bn), 4, 4, 16 * MB, 1),
                                             ((bm, bn), 4, 4, 24 * MB, 1), ((bm, bn), 4, 4, 12 * MB, 0),
                                             ((bm, bn), 4, 4, 24 * MB, 0), ((bm, bn), 4, 8, 12 * MB, 1),
                                             ((bm, bn), 4, 8, 16 * MB, 0), ((bm, bn), 8, 2, 16 * MB, 0)):
            cfg = persistent(shape, dtype, *tile, warps, per_sm, gb, lag)
            variants.append((f"{tile[0]}x{tile[1]}w{warps}p{per_sm}g{gb // MB}s{cfg.split}L{lag}", cfg))
        res = alternate("batch_norm", shape, dtype, 1, variants)
        best = max((v, k) for k, v in res.items())
        tag = f"{base.strategy} {bm}x{bn} w{base.num_warps} s{base.split}"
        print(f"batch_norm {shape} {str(dtype)[6:]} ({tag}): best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
