"""A/B of the plain reductions' short column tiles (``heuristics._cols_config(short_tiles=True)``: 8-row tiles,
two per iteration, where no split is needed) against the 32-row tiles they replace, on shapes they were not
tuned on (and the three they were). Built-in (new) against the old config forced through a plugin, alternated
twice, do_bench median, % of copy bandwidth (4263 GB/s; input read once, output written once).

Usage on a CUDA machine: python tools/cols_ab.py
"""

from __future__ import annotations

import math

import torch
from sweep import alternate
from tritred_core import LaunchConfig, Problem, get_registry
from tritred_ops import heuristics as H
from tritred_ops._common import device_info

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # (op, shape, dtype, dim); the first three were tuned on
    ("sum", (256, 262144), BF, 0), ("sum", (256, 262144), F32, 0), ("mean", (1000, 50000), F32, 0),
    ("sum", (512, 100000), BF, 0), ("amax", (2048, 30000), BF, 0), ("sum", (32, 512, 4096), BF, 1),
    ("mean", (8, 1000, 8192), F32, 1), ("prod", (300, 65536), F32, 0), ("sum", (128, 1000000), BF, 0),
    ("sum", (128, 200, 4096), F32, 1), ("amin", (100, 4000, 1000), F16, 1), ("mean", (4096, 16384), BF, 0),
    ("sum", (2000, 3000), F32, 0),
]


def old_config(op: str, shape, dtype, dim: int):
    """The config before the rule: the same branch with 32-row tiles, four loaded per iteration."""
    d = dim % len(shape)
    p = Problem(op=op, dtype=str(dtype)[6:], M=math.prod(shape[:d]), N=shape[d], K=math.prod(shape[d + 1:]),
                stride_m=shape[d] * math.prod(shape[d + 1:]), stride_n=math.prod(shape[d + 1:]), stride_k=1)
    caps = H._Caps(device_info(torch.device("cuda")))
    return H._cols_config(p, caps, True, caps.row_single, 4, caps.col_programs, 32, 4), p


def main() -> None:
    reg = get_registry()
    for op, shape, dtype, dim in CASES:
        old, p = old_config(op, shape, dtype, dim)
        new = H.tritred_launch_config(reg.get(op).spec, p, device_info(torch.device("cuda")))
        variants = [("new", None), ("old", old)]
        if new.strategy == "split":  # would the short tiles, unsplit, beat the split too?
            variants.append(("short", LaunchConfig(strategy="multi_pass", BLOCK_N=8, BLOCK_K=64, num_warps=4,
                                                   num_stages=2)))
        res = alternate(op, shape, dtype, dim, variants)
        tag = lambda c: f"{c.strategy} N{c.BLOCK_N} K{c.BLOCK_K} w{c.num_warps} st{c.num_stages} s{c.split}"  # noqa: E731
        print(f"{op} dim={dim} {shape} {str(dtype)[6:]}: new {res['new']:5.1f} ({tag(new)})  old {res['old']:5.1f} "
              f"({tag(old)})" + (f"  short unsplit {res['short']:5.1f}" if "short" in res else ""), flush=True)


if __name__ == "__main__":
    main()
