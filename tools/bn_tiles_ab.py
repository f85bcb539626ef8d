"""batch_norm training (NCHW): the built-in tiles (2048 elements, 32 images x 64 spatial, 4 warps, ~8 statistics
programs per SM) against tiles of more elements per thread (more loads in flight per program) and other program
counts, forced through a plugin, alternated twice (do_bench median, the better of the two), checked against torch
(WRONG on a mismatch), % of copy bandwidth (4263 GB/s; input read once, output written once).

A variant is BLOCK_M x BLOCK_N, warps and statistics programs per SM (``split`` = programs / channels).

``--rule``: the built-in config (the rule adopted from the first run: up to 128 spatial x 16 images on 2 warps)
against the config before it (up to 64 spatial x 32 images on 4 warps), in training and eval, on the suite's
shapes and the offsuite's.

``--programs``: the built-in tiles with more statistics programs, up to one per tile (seventeenth session).

Usage on a CUDA machine: python tools/bn_tiles_ab.py [--rule | --programs]
"""

from __future__ import annotations

import math
import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig, get_registry

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


RULE_CASES = [  # (shape, dtype, training)
    ((64, 256, 56, 56), BF, True), ((64, 256, 56, 56), F32, True), ((256, 64, 56, 56), BF, True),
    ((256, 64, 56, 56), F32, True), ((16, 64, 16, 32, 32), BF, True), ((16, 64, 16, 32, 32), F32, True),
    ((128, 512, 14, 14), BF, True), ((32, 96, 55, 55), BF, True), ((64, 128, 28, 28), F32, True),
    ((64, 256, 28, 28), F16, True), ((8, 32, 64, 64, 64), BF, True), ((32, 2048, 7, 7), BF, True),
    ((64, 256, 56, 56), BF, False), ((64, 256, 56, 56), F32, False), ((128, 512, 14, 14), BF, False),
    ((32, 96, 55, 55), BF, False),
]


def old_config(B: int, Ch: int, S: int) -> LaunchConfig:
    """The NCHW config before the two-warp rule (heuristics._batch_norm_config as it was)."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    p2 = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
    bn = min(p2(S), 64)
    bm = max(1, min(p2(B), 2048 // bn))
    bn = max(1, min(p2(S), 2048 // bm))
    tiles = math.ceil(B / bm) * math.ceil(S / bn)
    return LaunchConfig(strategy="split", BLOCK_M=bm, BLOCK_N=bn, num_warps=4,
                        split=max(1, min(tiles, 8 * sm // Ch)))


def rule() -> None:
    import tritred_ops as T
    from tritred_ops._common import device_info

    reg = get_registry()
    for shape, dtype, training in RULE_CASES:
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype, generator=g) * 2 + 0.5
        w, b = torch.randn(Ch, device="cuda").to(dtype), torch.randn(Ch, device="cuda").to(dtype)
        rm, rv = torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda")
        nbytes = 2 * x.numel() * x.element_size() + (4 if training else 2) * Ch * 4 + 2 * Ch * x.element_size()
        ref = torch.nn.functional.batch_norm(x.double(), rm.double().clone(), rv.double().clone(), w.double(),
                                             b.double(), training, 0.1, 1e-5)

        def call(x=x, rm=rm, rv=rv, w=w, b=b, training=training, ref=ref, nbytes=nbytes):  # noqa: ANN001, ANN202
            return (lambda: T.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)), (lambda: ref), nbytes
        old = old_config(B, Ch, S) if B * S > 4096 else None
        res = alternate("batch_norm", shape, dtype, 1, [("new", None), ("old", old)], call=call)
        cfg = reg.launch_config(reg.get("batch_norm").spec, sys.modules["tritred_ops.batch_norm"].problem(x),
                                device_info(x.device))
        print(f"batch_norm {'train' if training else 'eval'} {shape} {str(dtype)[6:]}: new {res['new']:.1f} "
              f"({cfg.BLOCK_M}x{cfg.BLOCK_N} w{cfg.num_warps} s{cfg.split})  old {res['old']:.1f}", flush=True)


PROGRAM_CASES = [  # (shape, dtype): training, the suite's large shapes and shapes outside it
    ((64, 256, 56, 56), BF), ((64, 256, 56, 56), F32), ((256, 64, 56, 56), BF), ((128, 512, 14, 14), BF),
    ((32, 96, 55, 55), BF), ((16, 64, 224, 224), F32), ((16, 64, 16, 32, 32), BF),
]
PROGRAM_VARIANTS = [  # (statistics programs per SM, normalize programs per SM: 0 for one tile each)
    (8, 0), (16, 0), (32, 0), (64, 0), (100000, 0), (32, 16), (100000, 16),
]


def programs() -> None:
    """The built-in tiles (16 x 128, 2 warps) with more statistics programs (up to one per tile: more loads in
    flight; the normalize launch merges as many partials per program), and normalize programs looping over
    tiles (their partials merged once)."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    p2 = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
    for shape, dtype in PROGRAM_CASES:
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        bn = min(128, p2(S))
        bm = max(1, min(p2(B), 2048 // bn))
        tiles = math.ceil(B / bm) * math.ceil(S / bn)
        variants = [("builtin", None)]
        for per_sm, apply_sm in PROGRAM_VARIANTS:
            split = max(1, min(tiles, per_sm * sm // Ch))
            variants.append((f"s{split}n{apply_sm}", LaunchConfig(strategy="split", BLOCK_M=bm, BLOCK_N=bn,
                                                                  num_warps=2, split=split,
                                                                  num_programs=apply_sm * sm)))
        res = alternate("batch_norm", shape, dtype, 1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"batch_norm {shape} {str(dtype)[6:]} ({bm}x{bn}, {tiles} tiles): best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def tile_variant(shape, variant: tuple[int, int, int, int], sm: int, num_stages: int = 1) -> tuple[str, LaunchConfig]:
    """(label, config) of a (BLOCK_M, BLOCK_N, warps, statistics programs per SM) variant on an NCHW ``shape``:
    the tile clipped to the next powers of two of B and S, ``split`` = programs / channels (at most the tiles)."""
    (bm, bn, w, per_sm), (B, Ch, S) = variant, (shape[0], shape[1], math.prod(shape[2:]))
    bm, bn = min(bm, 1 << (B - 1).bit_length()), min(bn, 1 << (S - 1).bit_length())
    split = max(1, min(math.ceil(B / bm) * math.ceil(S / bn), per_sm * sm // Ch))
    return (f"{bm}x{bn}w{w}p{per_sm}s{split}",
            LaunchConfig(strategy="split", BLOCK_M=bm, BLOCK_N=bn, num_warps=w, split=split, num_stages=num_stages))


def main() -> None:
    if "--rule" in sys.argv:
        rule()
        return
    if "--programs" in sys.argv:
        programs()
        return
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for shape, dtype in CASES:
        variants = [("builtin", None)] + [tile_variant(shape, v, sm) for v in VARIANTS]
        res = alternate("batch_norm", shape, dtype, 1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"batch_norm {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
