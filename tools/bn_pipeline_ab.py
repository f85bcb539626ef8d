"""batch_norm training (NCHW): the two launches over all channels against the pipelined launches over channel
groups (``LaunchConfig.channel_group``: launch k takes the statistics of group k beside the normalization of group
k - 1, whose input is still in L2), for several group sizes (MB of input per group) and the two kernel variants
(``_PIPELINE_MIX``: statistics and normalize programs interleaved along the grid, else normalize first;
``_PIPELINE_HINTS``: statistics loads evict_last, normalize loads evict_first). Each variant is checked against
torch (WRONG on a mismatch) and timed in alternation, twice (do_bench median, the better round), in % of the copy
bandwidth measured in the same process (input read once, output written once).

Usage on a CUDA machine: python tools/bn_pipeline_ab.py [--quick]
"""

from __future__ import annotations

import math
import sys

import torch
import tritred_ops as T
from sweep import Force
from triton.testing import do_bench
from tritred_core import get_registry
from tritred_ops._common import device_info

bn = sys.modules["tritred_ops.batch_norm"]  # (tritred_ops.batch_norm is the function)

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = [  # the suite's two large training shapes, then shapes outside it
    ((64, 256, 56, 56), BF), ((64, 256, 56, 56), F32), ((256, 64, 56, 56), BF), ((256, 64, 56, 56), F32),
    ((128, 512, 14, 14), BF), ((32, 128, 112, 112), F16), ((16, 64, 224, 224), F32), ((64, 96, 55, 55), BF),
    ((16, 64, 16, 32, 32), BF), ((64, 128, 28, 28), F32),
]
GROUP_MB = [10, 15, 22]  # input bytes per channel group (the built-in rule: a quarter of the L2)


def copy_gbps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def main() -> None:
    quick = "--quick" in sys.argv
    reg = get_registry()
    gbps = copy_gbps()
    print(f"copy {gbps:.0f} GB/s; L2 {torch.cuda.get_device_properties(0).L2_cache_size / 2**20:.0f} MB", flush=True)
    for shape, dtype in CASES[:4] if quick else CASES:
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype, generator=g) * 2 + 0.5
        w, b = torch.randn(Ch, device="cuda").to(dtype), torch.randn(Ch, device="cuda").to(dtype)
        rm, rv = torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda")
        ref = torch.nn.functional.batch_norm(x.double(), rm.double().clone(), rv.double().clone(), w.double(),
                                             b.double(), True, 0.1, 1e-5)
        nbytes = 2 * x.numel() * x.element_size() + 4 * Ch * 4 + 2 * Ch * x.element_size()
        builtin = reg.launch_config(reg.get("batch_norm").spec, bn.problem(x), device_info(x.device))
        two = builtin.model_copy(update=dict(channel_group=0, split=max(1, min(
            math.ceil(B / builtin.BLOCK_M) * math.ceil(S / builtin.BLOCK_N), 8 * 132 // Ch))))
        variants = [("builtin", builtin, None, None), ("two", two, None, None)]
        tiles = math.ceil(B / builtin.BLOCK_M) * math.ceil(S / builtin.BLOCK_N)
        channel_bytes = B * S * x.element_size()
        small = two.split  # (the two launches' split: statistics programs for all channels, ~8 per SM)
        for mb in GROUP_MB:
            group = max(1, min(Ch, mb * 2**20 // channel_bytes))
            groups = math.ceil(Ch / group)
            group = math.ceil(Ch / groups)
            if group >= Ch:
                continue
            cfg = builtin.model_copy(update=dict(channel_group=group, split=max(1, min(tiles, 8 * 132 // group))))
            lo = cfg.model_copy(update=dict(split=small))
            loop = lo.model_copy(update=dict(num_programs=16 * 132))
            if mb == 15:  # the two launches with the pipelined launches' split (the normalize merges more partials)
                variants.append((f"two-s{cfg.split}", two.model_copy(update=dict(split=cfg.split)), None, None))
            variants += [(f"g{group}({mb}MB)", cfg, False, True), (f"g{group}({mb}MB)-s{small}", lo, False, True),
                         (f"g{group}({mb}MB)-s{small}-sfirst", lo, 2, True),
                         (f"g{group}({mb}MB)-s{small}-mix", lo, 1, True),
                         (f"g{group}({mb}MB)-s{small}-sfirst-loop", loop, 2, True)]
        res: dict[str, float] = {}
        regs: dict[str, str] = {}
        for _ in range(2):
            for label, cfg, mix, hints in variants:
                name = reg.register(Force("batch_norm", cfg), name="ab")
                bn._PIPELINE_MIX = 0 if mix is None else mix
                bn._PIPELINE_HINTS = True if hints is None else hints
                try:
                    reg.cache.clear()
                    run = lambda: T.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)  # noqa: E731
                    if label not in res:
                        y = run()
                        if not torch.allclose(y.float(), ref.float(), rtol=3e-2, atol=3e-2):
                            print(f"   WRONG {shape} {label}", flush=True)
                        run()  # (replayed: the plan's kernels and their registers)
                        plan = next((p for p in reg.cache.values() if hasattr(p, "launches")), None)
                        if plan is not None:
                            regs[label] = "/".join(sorted({str(getattr(launch.compiled, "n_regs", "?"))
                                                           for launch in plan.launches}))
                    ms = do_bench(run, return_mode="median")
                    res[label] = max(res.get(label, 0.0), 100 * nbytes / (ms * 1e-3) / 1e9 / gbps)
                finally:
                    reg.unregister(name)
        bn._PIPELINE_MIX, bn._PIPELINE_HINTS, bn._PIPELINE_SERIAL = False, True, False
        best = max((v, k) for k, v in res.items())
        print(f"train {shape} {str(dtype)[6:]} ({builtin.BLOCK_M}x{builtin.BLOCK_N} w{builtin.num_warps} s{builtin.split}"
              f" g{builtin.channel_group}): best {best[1]} {best[0]:.1f} | "
              + "  ".join(f"{k} {v:.1f} [{regs.get(k, '?')}]" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
