"""Column kernels (a reduced dim that is not the last) with fewer, fuller threads: the built-in config against the
same on 2 warps (32 or more elements per thread per tile), on 2 warps with twice the split, and on 8 warps,
forced through a plugin, alternated twice (do_bench median, the better of the two), checked against torch (WRONG
on a mismatch), % of copy bandwidth (4263 GB/s; input read once, output written once). batch_norm's tiles gained
1-9 points on 2 warps (fifteenth session); the column sweeps of earlier sessions tried 4 and 8 only.

Usage on a CUDA machine: python tools/cols_warps_ab.py
"""

from __future__ import annotations

import math

import torch
from sweep import alternate
from tritred_core import Problem, get_registry
from tritred_ops import heuristics as H
from tritred_ops._common import device_info

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # (op, shape, dtype, dim)
    ("sum", (64, 4096, 256), BF, 1), ("sum", (64, 4096, 256), F32, 1), ("sum", (16384, 4096), BF, 0),
    ("var", (16384, 4096), BF, 0), ("amin", (64, 4096, 256), F32, 1), ("mean", (16, 4096, 1000), BF, 1),
    ("sum", (256, 262144), BF, 0), ("var", (16384, 4096), F32, 0), ("sum", (16384, 4096), F32, 0),
]


def main() -> None:
    reg = get_registry()
    for op, shape, dtype, dim in CASES:
        d = dim % len(shape)
        p = Problem(op=op, dtype=str(dtype)[6:], M=math.prod(shape[:d]), N=shape[d], K=math.prod(shape[d + 1:]),
                    stride_m=shape[d] * math.prod(shape[d + 1:]), stride_n=math.prod(shape[d + 1:]), stride_k=1)
        base = H.tritred_launch_config(reg.get(op).spec, p, device_info(torch.device("cuda")))
        variants = [("builtin", None), ("w2", base.model_copy(update={"num_warps": 2})),
                    ("w8", base.model_copy(update={"num_warps": 8}))]
        if base.strategy == "split":
            variants.append(("w2 split x2", base.model_copy(update={"num_warps": 2, "split": 2 * base.split})))
        res = alternate(op, shape, dtype, dim, variants)
        tag = f"{base.strategy} N{base.BLOCK_N} K{base.BLOCK_K} w{base.num_warps} st{base.num_stages} s{base.split}"
        print(f"{op} dim={dim} {shape} {str(dtype)[6:]} ({tag}): "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
