"""Twenty-first session's A/B on the H200: row loops over odd widths (rows that are not whole 16-byte vectors).

layer_norm and var/std loops now take the shifted tiles (head and tail chunks masked, inner chunks not;
layer_norm's weight and bias from shifted copies). Which configs should odd rows get? For each case: the
built-in config and loops of 1024-8192-wide chunks on several warp counts, single passes where the row fits.

Each config is forced through a plugin, checked against torch once, timed twice in alternation (do_bench median,
the better of the two), % of copy bandwidth (4263 GB/s; inputs read once, outputs written once).

Usage on a CUDA machine: python tools/s21_ab.py [op ...]   (default: every case)
"""

from __future__ import annotations

import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F32 = torch.bfloat16, torch.float32

CASES = [
    ("layer_norm", (16384, 4097), BF), ("layer_norm", (8192, 12289), BF), ("layer_norm", (4096, 50257), BF),
    ("layer_norm", (1024, 131071), BF), ("layer_norm", (16384, 4097), F32), ("layer_norm", (4096, 50257), F32),
    ("layer_norm", (32768, 2049), BF), ("layer_norm", (65536, 999), BF),
    ("var", (16384, 4097), BF), ("var", (8192, 12289), BF), ("var", (4096, 50257), BF), ("var", (16384, 4097), F32),
    ("softmax", (16384, 4097), BF), ("softmax", (8192, 12289), BF),
    ("max", (4096, 50257), BF), ("max", (8192, 32001), BF), ("min", (2048, 100001), F32),
    ("sum", (3000, 4097), F32), ("sum", (16384, 4097), BF), ("sum", (8192, 12289), BF), ("sum", (16384, 5001), F32),
    ("softmax", (16384, 4097), F32), ("softmax", (8192, 12289), F32),
]
LOOPS = [(1024, 2), (1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16), (8192, 16), (16384, 32)]


def variants(op: str, shape: tuple[int, ...]) -> list[tuple[str, LaunchConfig | None]]:
    N = shape[-1]
    out: list[tuple[str, LaunchConfig | None]] = [("built-in", None)]
    for bn, w in LOOPS:
        if bn < N and not (op == "var" and w > 8 and bn < 8192) and not (op in ("max", "min", "sum") and bn > 4096):
            out.append((f"loop {bn}/{w}", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=bn, num_warps=w)))
            if op in ("max", "min", "sum"):
                out.append((f"loop {bn}/{w} x2", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=bn,
                                                               num_warps=w, num_stages=2)))
    return out


def main() -> None:
    ops = sys.argv[1:]
    for op, shape, dtype in CASES:
        if ops and op not in ops:
            continue
        res = alternate(op, shape, dtype, -1, variants(op, shape))
        best = max(res, key=res.get)
        cells = "  ".join(f"{k} {v:.1f}" for k, v in res.items())
        print(f"{op} {'x'.join(map(str, shape))} {str(dtype)[6:]}: {cells}  | best {best}", flush=True)


if __name__ == "__main__":
    main()
