"""Launch configs of long softmax rows with the per-group online loop (``softmax._rows_block``, GROUP lanes per
(max, sum) pair): the single pass, and loops of 4096-16384-wide chunks on 4-32 warps, forced through a plugin,
beside the built-in choice, on the suite's long rows and shapes outside it. Each config is checked against torch
once, then timed twice in alternation (do_bench median, the better of the two), % of copy bandwidth (4263 GB/s;
input read once, output written once).

Usage on a CUDA machine: python tools/softmax_rows_ab.py [--masked]
"""

from __future__ import annotations

import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig, Problem, get_registry
from tritred_ops import heuristics as H
from tritred_ops._common import device_info

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # (op, shape, dtype)
    ("softmax", (4096, 32768), BF), ("softmax", (1024, 131072), BF), ("softmax", (2048, 65536), BF),
    ("softmax", (8192, 16384), BF), ("softmax", (2048, 50257), BF), ("softmax", (4096, 40000), BF),
    ("softmax", (1024, 60000), BF), ("softmax", (256, 131072), BF), ("softmax", (16384, 20000), BF),
    ("softmax", (8192, 24576), BF), ("softmax", (512, 32768), BF), ("log_softmax", (2048, 50257), BF),
    ("log_softmax", (4096, 32768), BF), ("log_softmax", (1024, 131072), BF), ("logsumexp", (2048, 50257), BF),
    ("logsumexp", (1024, 131072), BF), ("softmax", (4096, 32768), F16), ("softmax", (1024, 131072), F32),
    ("softmax", (4096, 40000), F32), ("softmax", (16384, 20000), F32),
]
MASKED = [  # --masked: rows whose power-of-two single-pass tile is partly masked
    ("softmax", (16384, 12000), BF), ("softmax", (16384, 10240), BF), ("softmax", (8192, 14336), BF),
    ("log_softmax", (16384, 12000), BF), ("softmax", (16384, 20000), F32), ("softmax", (8192, 24576), F32),
    ("softmax", (16384, 12000), F32), ("softmax", (4096, 28000), F32), ("log_softmax", (8192, 24576), F32),
]
LOOPS = [(4096, 4), (4096, 8), (8192, 16), (16384, 32)]


def main() -> None:
    reg = get_registry()
    for op, shape, dtype in MASKED if "--masked" in sys.argv else CASES:
        N = shape[-1]
        variants: list[tuple[str, LaunchConfig | None]] = [("builtin", None)]
        if N <= 32768:
            variants.append(("single", LaunchConfig(strategy="single_pass", BLOCK_M=1,
                                                    BLOCK_N=1 << (N - 1).bit_length(), num_warps=32)))
        variants += [(f"{bn}w{w}", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=bn, num_warps=w))
                     for bn, w in LOOPS]
        p = Problem(op=op, dtype=str(dtype)[6:], M=shape[0], N=N, K=1, stride_m=N, stride_n=1, stride_k=1)
        c = H.tritred_launch_config(reg.get(op).spec, p, device_info(torch.device("cuda")))
        chosen = f"{c.strategy} N{c.BLOCK_N} w{c.num_warps} s{c.split}"
        res = alternate(op, shape, dtype, -1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"{op} {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()) + (f" ({chosen})" if chosen else ""), flush=True)


if __name__ == "__main__":
    main()
