"""Whole chunks per loop iteration (``num_stages`` of a row loop's config: ``PART`` in ``reduce._rows_block``) for
the plain reductions' long rows: the built-in config against the same with 2, 4 and 8 chunks per iteration, and
narrower chunks with more of them, forced through a plugin, alternated twice (do_bench median, the better of the
two), % of copy bandwidth (4263 GB/s; input read once, output written once).

Usage on a CUDA machine: python tools/part_ab.py [--stats | --arg]
"""

from __future__ import annotations

import math
import sys

import torch
from sweep import alternate
from tritred_core import Problem, get_registry
from tritred_ops import heuristics as H
from tritred_ops._common import device_info

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # (op, shape, dtype)
    ("sum", (1024, 131072), BF), ("sum", (1024, 131072), F32), ("amax", (1024, 131072), BF),
    ("mean", (512, 262144), BF), ("sum", (2048, 65536), F32), ("sum", (4096, 50000), BF),
    ("sum", (8192, 12000), BF), ("prod", (1024, 131072), BF), ("sum", (64, 1000000), BF),
    ("sum", (4096, 32768), BF), ("amin", (2048, 100000), F32),
]
STATS = [  # --stats: var/std's Welford loops, with the same PART (measured on a variant of statistics._stats_rows_block
    # that took it, 2026-11-30: every case lower, var 1024x131072 bf16 79 -> 74 %, 4096x50000 74 -> 68; not kept:
    # this list now times num_stages, which those loops ignore)
    ("var", (1024, 131072), BF), ("std", (1024, 131072), BF), ("var", (4096, 50000), BF), ("var", (8192, 12000), BF),
    ("var", (64, 1000000), BF), ("var_mean", (512, 262144), BF), ("var", (1024, 131072), F32),
    ("std", (2048, 65536), F32), ("var", (4096, 50000), F16),
]


ARG = [  # --arg: max/min with indices (reduce._arg_rows_kernel's loop)
    ("max", (1024, 131072), BF), ("min", (8192, 32000), BF), ("max", (64, 1000000), BF), ("max", (4096, 50000), F16),
    ("max", (1024, 131072), F32), ("min", (2048, 100000), F32),
]


def main() -> None:
    reg = get_registry()
    cases = STATS if "--stats" in sys.argv else ARG if "--arg" in sys.argv else CASES
    for op, shape, dtype in cases:
        N = shape[-1]
        p = Problem(op=op, dtype=str(dtype)[6:], M=math.prod(shape[:-1]), N=N, K=1, stride_m=N, stride_n=1,
                    stride_k=1)
        base = H.tritred_launch_config(reg.get(op).spec, p, device_info(torch.device("cuda")))
        variants = [("builtin", None)]
        for part in (2, 4, 8):
            variants.append((f"x{part}", base.model_copy(update={"num_stages": part})))
        for bn, w, part in ((2048, 8, 4), (2048, 8, 8), (4096, 8, 4), (8192, 16, 2), (1024, 4, 8)):
            variants.append((f"{bn}w{w}x{part}", base.model_copy(update={"BLOCK_N": bn, "num_warps": w,
                                                                          "num_stages": part})))
        res = alternate(op, shape, dtype, -1, variants)
        best = max((v, k) for k, v in res.items())
        tag = f"{base.strategy} N{base.BLOCK_N} w{base.num_warps} s{base.split}"
        print(f"{op} {shape} {str(dtype)[6:]} ({tag}): best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
