"""Twenty-seventh session's probe on the H200: the merge launch of a split reduction as a dependent launch.

A split reduction (dim=0 of 16384x4096, the sum of all elements) launches its partials kernel, then a merge
kernel over the partials (a few hundred KB): the gap between the two launches is a few microseconds of a 40-140
us call. The first form of this probe (same session, ``docs/data/h200-s27-probe.txt``) timed the two launches
alone and in sequence, a merge by the last program of each block in the first launch (counters zeroed per call:
44.1 -> 44.8 us on sum dim=0 16384x4096 bf16; counters left at zero by the kernel: 43.0; dropped, code not
kept), and the merge as a programmatic dependent launch (43.6, bitwise the same result: adopted,
``_common.dependent_launch``).

This form times the built-in ops (dependent merge launches) against the same ops with plain merge launches
(``_common.dependent_launch`` patched to give no option), alternated, best of three rounds, do_bench median, % of
4263 GB/s of the op's bytes; and checks the two agree bit for bit.

Usage on a CUDA machine: python tools/s27_probe.py
"""

from __future__ import annotations

import torch
import triton
import tritred_ops as tr
from tritred_core import get_registry
from tritred_ops import _common as C

COPY = 4263e9
F32, BF16 = torch.float32, torch.bfloat16
CASES = [
    ("sum dim=0 16384x4096", lambda x: tr.sum(x, 0), (16384, 4096)),
    ("var dim=0 16384x4096", lambda x: tr.var(x, 0), (16384, 4096)),
    ("sum (all) 268435456", lambda x: tr.sum(x), (268435456,)),
    ("mean dim=0 1000x50000", lambda x: tr.mean(x, 0), (1000, 50000)),
    ("amax dim=0 65536x1024", lambda x: tr.amax(x, 0), (65536, 1024)),
    ("max dim=0 16384x4096", lambda x: tr.max(x, 0).values, (16384, 4096)),
    ("var (0,2,3) 64x256x56x56", lambda x: tr.var(x, (0, 2, 3)), (64, 256, 56, 56)),
    ("std dim=-1 64x1048576", lambda x: tr.std(x, -1), (64, 1048576)),
]


def main() -> None:
    reg = get_registry()
    builtin = C.dependent_launch
    for name, fn, shape in CASES:
        for dtype in (BF16, F32):
            x = torch.randn(shape, device="cuda", dtype=dtype)
            caches, outs = {}, {}
            for pdl in (True, False):
                C.dependent_launch = builtin if pdl else (lambda device: {})
                reg.cache.clear()
                outs[pdl] = fn(x)
                fn(x)
                caches[pdl] = dict(reg.cache)
            C.dependent_launch = builtin
            nbytes = x.numel() * x.element_size() + outs[True].numel() * outs[True].element_size()
            best = {}
            for _ in range(3):
                for pdl in (True, False):
                    reg.cache.clear()
                    reg.cache.update(caches[pdl])
                    t = triton.testing.do_bench(lambda fn=fn, x=x: fn(x), warmup=10, rep=40, return_mode="median")
                    best[pdl] = min(best.get(pdl, 1e9), t)
            reg.cache.clear()
            pct = {k: nbytes / (v * 1e-3) / COPY * 100 for k, v in best.items()}
            print(f"{name} {str(dtype)[6:]}: dependent {best[True] * 1e3:.1f} us ({pct[True]:.1f} %)  plain "
                  f"{best[False] * 1e3:.1f} us ({pct[False]:.1f} %)  {pct[True] - pct[False]:+.1f}  "
                  f"bitwise equal {torch.equal(outs[True], outs[False])}", flush=True)


if __name__ == "__main__":
    main()
