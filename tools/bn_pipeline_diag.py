"""batch_norm training, 64x256x56x56 bf16/fp32: the two launches against the pipelined ones, timed with the
host taken out (``triton.testing.do_bench_cudagraph``: the call replayed from a CUDA graph) beside
``do_bench``, and each kernel's own time from torch.profiler (statistics vs normalize launches: whether the
normalize launch of a group read from L2 runs faster than the normalize launch over all channels).

Usage on a CUDA machine: python tools/bn_pipeline_diag.py
"""

from __future__ import annotations

import math
import sys
import torch
import tritred_ops as T
from sweep import Force
from triton.testing import do_bench, do_bench_cudagraph
from tritred_core import get_registry
from tritred_ops._common import device_info

bn = sys.modules["tritred_ops.batch_norm"]


def main() -> None:
    reg = get_registry()
    for shape, dtype in (((64, 256, 56, 56), torch.bfloat16), ((64, 256, 56, 56), torch.float32)):
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
        w, b = torch.randn(Ch, device="cuda").to(dtype), torch.randn(Ch, device="cuda").to(dtype)
        rm, rv = torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda")
        nbytes = 2 * x.numel() * x.element_size()
        builtin = reg.launch_config(reg.get("batch_norm").spec, bn.problem(x), device_info(x.device))
        tiles = math.ceil(B / builtin.BLOCK_M) * math.ceil(S / builtin.BLOCK_N)
        two = builtin.model_copy(update=dict(channel_group=0, split=max(1, min(tiles, 8 * 132 // Ch))))
        variants = [("two", two, 0, False)]
        for group in (Ch // 7 + 1, Ch // 4, Ch // 2):
            cfg = builtin.model_copy(update=dict(channel_group=group, split=max(1, min(tiles, 8 * 132 // group))))
            variants += [(f"g{group}-fused", cfg, 0, False), (f"g{group}-serial", cfg, 0, True)]
        for label, cfg, mix, serial in variants:
            name = reg.register(Force("batch_norm", cfg), name="ab")
            bn._PIPELINE_MIX, bn._PIPELINE_SERIAL = mix, serial
            try:
                reg.cache.clear()
                run = lambda: T.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)  # noqa: E731
                run()
                run()
                plain = do_bench(run, return_mode="median")
                graph = do_bench_cudagraph(run, return_mode="median")
                cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        cache.zero_()
                        run()
                    torch.cuda.synchronize()
                times = [e.device_time for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("_")]
                n = len(times) // 5
                seq = [sum(times[i + k * n] for k in range(5)) / 5 for i in range(n)]  # mean over the 5 calls
                print(f"{shape} {str(dtype)[6:]} {label}: do_bench {plain * 1e3:.1f} us "
                      f"({100 * nbytes / (plain * 1e-3) / 1e9 / 4250:.1f} %), cudagraph {graph * 1e3:.1f} us "
                      f"({100 * nbytes / (graph * 1e-3) / 1e9 / 4250:.1f} %), kernels {sum(seq):.1f} us in {n} "
                      f"launches: " + " ".join(f"{t:.1f}" for t in seq), flush=True)
            finally:
                reg.unregister(name)
                bn._PIPELINE_MIX, bn._PIPELINE_SERIAL = 0, False


if __name__ == "__main__":
    main()
