"""Twentieth session's A/B on the H200: three questions, one device call.

1. ``--vocab``: softmax/log_softmax rows of odd vocabularies (50257: rows not whole 16-byte vectors), bf16/fp16:
   the built-in loop (4096-wide chunks on 4 warps, chosen before the per-group online loop existed) against wider
   programs, whose rows in flight fit the L2 (16384 on 32 warps: 2 programs per SM, 264 rows of 100 KB = 26 MB).
2. ``--bn``: batch_norm training of 28x28 planes (S = 784 = 6 x 128 + 16: one tile in seven of the built-in
   16 x 128 tiles is a 16-wide edge tile) against tiles whose width divides 784 (16) or leaves a smaller share.
3. ``--reads``: where the batch_norm statistics launch's read rate (2.5 TB/s on 64x256x56x56 bf16) stands among
   plain reads of the same 103 MB: a row sum over (B*C, S), torch's, a flat sum, tritred's var over (0, 2, 3).

Each config is forced through a plugin, checked against torch once, timed twice in alternation (do_bench median,
the better of the two), % of copy bandwidth (4263 GB/s; inputs read once, outputs written once).

Usage on a CUDA machine: python tools/s20_ab.py [--vocab] [--bn] [--reads]
"""

from __future__ import annotations

import math
import sys

import torch
from sweep import alternate
from tritred_core import LaunchConfig

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16

VOCAB_CASES = [
    ("log_softmax", (2048, 50257), BF), ("softmax", (2048, 50257), BF), ("log_softmax", (4096, 50257), BF),
    ("log_softmax", (1024, 50257), BF), ("log_softmax", (8192, 50257), BF), ("log_softmax", (2048, 50257), F16),
    ("softmax", (4096, 32001), BF), ("log_softmax", (4096, 49999), BF), ("log_softmax", (2048, 65535), BF),
]
EVEN_CASES = [  # --even: the same rows one element shorter or longer, whole 16-byte vectors (no shifted tiles)
    ("log_softmax", (4096, 50256), BF), ("log_softmax", (4096, 50264), BF), ("log_softmax", (2048, 50256), BF),
    ("softmax", (4096, 32000), BF),
]
VOCAB_LOOPS = [(4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 16), (16384, 32)]

BN_CASES = [((64, 256, 28, 28), F16), ((64, 256, 28, 28), BF), ((128, 256, 28, 28), BF), ((64, 128, 28, 28), F32),
            ((32, 96, 55, 55), BF), ((64, 256, 56, 56), BF)]
BN_TILES = [  # (BLOCK_M, BLOCK_N, warps, statistics programs per SM)
    (16, 128, 2, 8), (64, 16, 2, 8), (64, 16, 1, 8), (128, 16, 2, 8), (32, 32, 1, 8), (32, 32, 2, 8),
    (16, 64, 1, 8), (32, 64, 2, 8), (64, 16, 2, 16),
]


def vocab(cases=VOCAB_CASES) -> None:
    for op, shape, dtype in cases:
        variants = [("builtin", None)] + [
            (f"{bn}w{w}", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=bn, num_warps=w))
            for bn, w in VOCAB_LOOPS]
        res = alternate(op, shape, dtype, -1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"{op} {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def bn() -> None:
    from bn_tiles_ab import tile_variant

    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for shape, dtype in BN_CASES:
        variants = [("builtin", None)]
        for v in BN_TILES:
            for stages in (1, 2) if dtype != F32 else (1,):
                label, cfg = tile_variant(shape, v, sm, stages)
                variants.append((f"{label}st{stages}", cfg))
        res = alternate("batch_norm", shape, dtype, 1, variants)
        best = max((v, k) for k, v in res.items())
        print(f"batch_norm {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def reads() -> None:
    import tritred_ops as T
    from triton.testing import do_bench

    for shape, dtype in (((64, 256, 56, 56), BF), ((64, 256, 56, 56), F32), ((64, 256, 28, 28), F16)):
        _reads_of(T, do_bench, shape, dtype)


def _reads_of(T, do_bench, shape, dtype) -> None:  # noqa: ANN001
    B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
    x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
    rows = x.view(B * Ch, S)
    flat = x.view(-1)
    w, b = torch.randn(Ch, device="cuda").to(dtype), torch.randn(Ch, device="cuda").to(dtype)
    nbytes = x.numel() * x.element_size()
    calls = {
        "tritred sum rows (B*C, S)": lambda: T.sum(rows, -1),
        "torch sum rows (B*C, S)": lambda: rows.sum(-1),
        "tritred var rows (B*C, S)": lambda: T.var(rows, -1),
        "tritred sum flat": lambda: T.sum(flat),
        "torch sum flat": lambda: flat.sum(),
        "tritred sum (0,2,3)": lambda: T.sum(x, (0, 2, 3)),
        "tritred var (0,2,3)": lambda: T.var(x, (0, 2, 3)),
        "torch var (0,2,3)": lambda: torch.var(x, (0, 2, 3)),
        "tritred batch_norm train (read 2x + write)": lambda: T.batch_norm(x, None, None, w, b, True, 0.1, 1e-5),
    }
    for name, fn in calls.items():
        fn()
        ms = do_bench(fn, return_mode="median")
        mult = 3 if "batch_norm" in name else 1
        print(f"{shape} {str(dtype)[6:]} {name}: {ms * 1e3:.1f} us, read {nbytes / (ms * 1e-3) / 1e9:.0f} GB/s "
              f"({100 * mult * nbytes / (ms * 1e-3) / 1e9 / 4263:.1f} % of copy for {mult}x the input)", flush=True)


def main() -> None:
    args = sys.argv[1:] or ["--reads", "--vocab", "--bn"]
    if "--reads" in args:
        reads()
    if "--vocab" in args:
        vocab()
    if "--even" in args:
        vocab(EVEN_CASES)
    if "--bn" in args:
        bn()


if __name__ == "__main__":
    main()
