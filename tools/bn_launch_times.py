"""batch_norm training (NCHW): each launch's own time (torch.profiler, after a 256 MB L2 flush, mean of 5 calls)
for tile and program-count variants forced through a plugin, so that the statistics launch (a read of the
input) and the normalize launch (a read and a write) can be tuned apart: which tiles, warps and programs per SM
make each half fastest. GB/s of each launch: its bytes (statistics: the input; normalize: input + output) over
its time. Every variant is checked against torch (WRONG on a mismatch).

``--prefetch``: the statistics kernel with and without its tile loads issued one iteration ahead
(``num_stages`` 2 and 1), on more shapes, timed in alternation by do_bench too (median, % of the copy
bandwidth: input read once, output written once).

Usage on a CUDA machine: python tools/bn_launch_times.py [--prefetch]
"""

from __future__ import annotations

import math
import sys

import torch
import tritred_ops as T
from sweep import Force
from tritred_core import LaunchConfig, get_registry

BF, F32 = torch.bfloat16, torch.float32
CASES = [((64, 256, 56, 56), BF), ((256, 64, 56, 56), BF), ((64, 256, 56, 56), F32), ((128, 512, 14, 14), BF)]
VARIANTS = [  # (BLOCK_M, BLOCK_N, num_warps, statistics programs per SM)
    (16, 128, 2, 8), (16, 128, 2, 16), (32, 128, 2, 8), (32, 128, 4, 8), (32, 128, 4, 16), (16, 256, 4, 8),
    (64, 128, 8, 8), (64, 64, 4, 8), (8, 128, 1, 16), (8, 256, 2, 8), (32, 256, 8, 8),
]


def launch_times(run, flush: torch.Tensor) -> list[float]:  # noqa: ANN001
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            flush.zero_()
            run()
        torch.cuda.synchronize()
    times = [e.device_time for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("_")]
    n = len(times) // 5
    return [sum(times[i + k * n] for k in range(5)) / 5 for i in range(n)]


PF_CASES = CASES + [((32, 96, 55, 55), BF), ((16, 64, 16, 32, 32), BF), ((16, 64, 224, 224), F32),
                    ((32, 128, 112, 112), torch.float16), ((64, 128, 28, 28), F32), ((256, 64, 56, 56), F32)]
PF_VARIANTS = [(16, 128, 2, 8), (16, 128, 2, 6), (8, 256, 2, 8)]


def main() -> None:
    prefetch = "--prefetch" in sys.argv
    from triton.testing import do_bench
    reg = get_registry()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for shape, dtype in PF_CASES if prefetch else CASES:
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
        w, b = torch.randn(Ch, device="cuda").to(dtype), torch.randn(Ch, device="cuda").to(dtype)
        rm, rv = torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda")
        ref = torch.nn.functional.batch_norm(x.double(), rm.double().clone(), rv.double().clone(), w.double(),
                                             b.double(), True, 0.1, 1e-5)
        nbytes = x.numel() * x.element_size()
        variants = [(v, pf) for v in (PF_VARIANTS if prefetch else VARIANTS) for pf in ((False, True) if prefetch
                                                                                        else (False,))]
        pct: dict[str, float] = {}
        for (bm, bn_, warps, per_sm), pf in variants * (2 if prefetch else 1):
            bm, bn_ = min(bm, 1 << (B - 1).bit_length()), min(bn_, 1 << (S - 1).bit_length())
            tiles = math.ceil(B / bm) * math.ceil(S / bn_)
            cfg = LaunchConfig(strategy="split", BLOCK_M=bm, BLOCK_N=bn_, num_warps=warps,
                               split=max(1, min(tiles, per_sm * sm // Ch)), num_stages=2 if pf else 1)
            label = f"{bm}x{bn_} w{warps} s{cfg.split}{' prefetch' if pf else ''}"
            name = reg.register(Force("batch_norm", cfg), name="ab")
            try:
                reg.cache.clear()
                run = lambda x=x, rm=rm, rv=rv, w=w, b=b: T.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)  # noqa: E731
                y = run()
                if not torch.allclose(y.float(), ref.float(), rtol=3e-2, atol=3e-2):
                    print(f"   WRONG {shape} {cfg}", flush=True)
                run()
                seq = launch_times(run, flush)
                gbps = [nbytes / t / 1e3 for t in seq[:1]] + [2 * nbytes / t / 1e3 for t in seq[1:]]
                ms = do_bench(run, return_mode="median") if prefetch else 0.0
                pct[label] = max(pct.get(label, 0.0), 100 * 2 * nbytes / (ms * 1e-3) / 1e9 / 4250 if ms else 0.0)
                print(f"train {shape} {str(dtype)[6:]} {label}: do_bench {pct[label]:.1f} %  "
                      + "  ".join(f"{t:.1f} us ({g:.0f} GB/s)" for t, g in zip(seq, gbps))
                      + f"  total {sum(seq):.1f} us ({100 * 2 * nbytes / sum(seq) / 1e3 / 4250:.1f} %)", flush=True)
            finally:
                reg.unregister(name)


if __name__ == "__main__":
    main()
