"""Twenty-second session's A/B on the H200: rows just past a power of two (2049, 1025: odd widths up to 4096).

Such rows fill half of their power-of-two tile (2049 + shift in 4096 lanes): each program streams half the bytes
of a full tile for the same fixed cost (launch, cross-warp reduction, store, exit). Which config wins: fewer warps
on the half-empty tile, a persistent grid that pipelines the next row's loads (``num_programs``, ``num_stages``),
or loops over narrow chunks (the shifted loops of the twenty-first session)?

Each config is forced through a plugin, checked against torch once, timed twice in alternation (do_bench median,
the better of the two), % of copy bandwidth (4263 GB/s; inputs read once, outputs written once).

Usage on a CUDA machine: python tools/s22_ab.py [first] [op ...]   (default: every case of the second call;
"first", "third": the first or third call's cases)
"""

from __future__ import annotations

import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F32 = torch.bfloat16, torch.float32
SMS = 132

# First device call: the plain reductions and softmax (the built-in then: the rules before the tail).
CASES_1 = [
    ("sum", (32768, 2049), BF), ("softmax", (32768, 2049), BF), ("sum", (65536, 1025), BF),
    ("softmax", (65536, 1025), BF), ("sum", (16384, 4097), BF), ("softmax", (16384, 4097), BF),
    ("sum", (16384, 3000), BF), ("softmax", (16384, 3000), BF), ("sum", (32768, 2049), F32),
    ("softmax", (32768, 2049), F32), ("sum", (16384, 4097), F32), ("softmax", (16384, 4097), F32),
    ("sum", (32768, 2048), BF), ("softmax", (32768, 2048), BF),  # (whole-vector rows: the rate to aim at)
]
# Second: var, layer_norm, logsumexp, float32 1025 (the built-in now: ``heuristics._tail_rows``); the configs
# before it are "single <tile>/4" up to 4096 and the 1024-wide loops past (``_odd_rows_loop``).
CASES = [
    ("var", (32768, 2049), BF), ("layer_norm", (32768, 2049), BF), ("var", (65536, 1025), BF),
    ("layer_norm", (65536, 1025), BF), ("var", (16384, 4097), BF), ("layer_norm", (16384, 4097), BF),
    ("var", (32768, 2049), F32), ("layer_norm", (32768, 2049), F32), ("var", (16384, 4097), F32),
    ("layer_norm", (16384, 4097), F32), ("logsumexp", (32768, 2049), BF), ("log_softmax", (16384, 4097), BF),
    ("softmax", (65536, 1025), F32), ("layer_norm", (65536, 1025), F32), ("std", (16384, 4097), BF),
    ("var_mean", (32768, 2049), BF), ("layer_norm", (16384, 4104), BF), ("softmax", (32768, 2056), BF),
]

# Third: widths the rule does not reach, past 8192 and just past 512 (does the tail generalize?).
CASES_3 = [
    ("softmax", (8192, 8193), BF), ("softmax", (8192, 8193), F32), ("layer_norm", (8192, 8193), BF),
    ("layer_norm", (8192, 8193), F32), ("var", (8192, 8193), BF), ("var", (8192, 8193), F32),
    ("sum", (8192, 8193), BF), ("softmax", (131072, 513), BF), ("softmax", (131072, 513), F32),
    ("layer_norm", (131072, 513), BF), ("var", (131072, 513), BF), ("var", (131072, 513), F32),
    ("sum", (131072, 513), BF),
]


def variants(op: str, shape: tuple[int, ...], dtype: torch.dtype) -> list[tuple[str, LaunchConfig | None]]:
    N = shape[-1]
    vec = 16 // dtype.itemsize
    out: list[tuple[str, LaunchConfig | None]] = [("built-in", None)]
    if N & (N - 1) == 0:
        return out
    tile = 1 << (N + vec - 2).bit_length()  # (the one tile holding the row plus the shift)
    bn = tile // 2
    tail = max(16, 1 << (N + vec - 2 - bn).bit_length())  # (a second tile for the rest)
    for w in (1, 2, 4, 8, 16):
        if 4 <= bn // (32 * w) <= 64:
            out.append((f"tail {bn}+{tail}/{w}",
                        LaunchConfig(strategy="single_pass", BLOCK_N=bn, BLOCK_TAIL=tail, num_warps=w)))
    for w in (2, 4, 8):
        if 4 <= tile // (32 * w) <= 64:
            out.append((f"single {tile}/{w}", LaunchConfig(strategy="single_pass", BLOCK_N=tile, num_warps=w)))
    for bn_l, w in ((512, 1), (1024, 2), (1024, 4)):
        if bn_l < N:
            out.append((f"loop {bn_l}/{w}", LaunchConfig(strategy="multi_pass", BLOCK_N=bn_l, num_warps=w)))
    return out


def main() -> None:
    ops = sys.argv[1:]
    cases = {"first": CASES_1, "third": CASES_3}.get(ops[0] if ops else "", CASES)
    ops = [o for o in ops if o not in ("first", "third")]
    for op, shape, dtype in cases:
        if ops and op not in ops:
            continue
        res = alternate(op, shape, dtype, -1, variants(op, shape, dtype))
        best = max(res, key=res.get)
        cells = "  ".join(f"{k} {v:.1f}" for k, v in res.items())
        print(f"{op} {'x'.join(map(str, shape))} {str(dtype)[6:]}: {cells}  | best {best}", flush=True)


if __name__ == "__main__":
    main()
