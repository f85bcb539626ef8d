"""Twenty-third session's A/B on the H200: softmax over a non-last dim with few column blocks, split along N.

Before: such columns (softmax dim=0 of 8192x8192: 128 blocks of 64 columns) took narrower blocks down to 16
columns (32 contiguous bytes a row) to fill the GPU, each looping over all of N twice. Now: 64-column blocks
split along N (``split``: a launch of partial (max, sum of exp) per slice, then one that merges them and writes
its slice, slices in reverse launch order). Which tile, warps and split count win, and does the rule
(``heuristics._cols_config`` ``split_cols``) pick well?

Each config is forced through a plugin, checked against torch once, timed twice in alternation (do_bench median,
the better of the two), % of copy bandwidth (4263 GB/s; inputs read once, outputs written once).

Usage on a CUDA machine: python tools/s23_ab.py [op ...]
"""

from __future__ import annotations

import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig, hookimpl
from tritred_ops import heuristics as H

BF, F32 = torch.bfloat16, torch.float32

CASES = [  # (op, shape, dtype, dim)
    ("softmax", (8192, 8192), BF, 0), ("softmax", (8192, 8192), F32, 0), ("log_softmax", (8192, 8192), BF, 0),
    ("logsumexp", (8192, 8192), BF, 0), ("softmax", (32768, 1024), BF, 0), ("softmax", (16, 4096, 1000), BF, 1),
    ("softmax", (64, 4096, 256), BF, 1), ("softmax", (8192, 64), BF, 0),
]


class _Before:
    """The rule before this session: narrower column blocks, no split (``_cols_config`` without split_cols)."""

    @hookimpl
    def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
        caps = H._Caps(device)
        return H._cols_config(problem, caps, False, caps.softmax_resident, 4, caps.programs, narrow=True)


def variants(op, shape, dtype, dim):
    out = [("built-in", None), ("before", _Before())]
    for bn, bk, w, splits in ((32, 64, 4, (2, 4, 8, 16)), (64, 64, 4, (4, 8)), (16, 128, 4, (4, 8)),
                              (32, 128, 8, (4, 8))):
        for s in splits:
            out.append((f"s{s} {bn}x{bk}/{w}",
                        LaunchConfig(strategy="split", BLOCK_N=bn, BLOCK_K=bk, split=s, num_warps=w)))
    return out


def main() -> None:
    ops = sys.argv[1:]
    for op, shape, dtype, dim in CASES:
        if ops and op not in ops:
            continue
        res = alternate(op, shape, dtype, dim, variants(op, shape, dtype, dim))
        top = sorted(res.items(), key=lambda kv: -kv[1])[:6]
        cells = "  ".join(f"{k} {v:.1f}" for k, v in top)
        print(f"{op} {'x'.join(map(str, shape))} {str(dtype)[6:]} dim={dim}: before {res['before']:.1f}  "
              f"built-in {res['built-in']:.1f}  | top: {cells}", flush=True)
        print("   all: " + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
