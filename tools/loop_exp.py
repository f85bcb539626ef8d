"""Why torch.compile's looped layer_norm reaches 88 % of copy bandwidth on 8192x12288 bf16 rows where tritred's
loop kernel, with the same tile (2048-wide chunks on 16 warps), gets 48 %: a standalone two-sweep kernel, timed
with the row width as a compile-time constant (as Inductor bakes it) or a runtime argument, and with the first
sweep's chunk loads unrolled by UNROLL (independent loads in flight before the Welford steps use them).

A developer's measurement script. Usage on a CUDA machine: python tools/loop_exp.py
Prints % of copy bandwidth (4263 GB/s; input read once, output written once), do_bench median.
"""

# ruff: noqa: B023 (each closure runs before its loop variables move on)

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
import tritred_ops as tr
from sweep import Force
from triton.testing import do_bench
from tritred_core import LaunchConfig, get_registry
from tritred_ops._kernels import chan_fn, welford_step

COPY_GBS = 4263.0


@triton.jit
def _ln_loop(x_ptr, w_ptr, b_ptr, y_ptr, N_rt, eps, NC: tl.constexpr, UNROLL: tl.constexpr, BLOCK: tl.constexpr,
             UNROLL2: tl.constexpr):
    """One row per program; NC > 0: the width as a constant. Rows must be multiples of BLOCK * UNROLL(2)."""
    if NC > 0:
        N = NC
    else:
        N = N_rt
    base = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    steps = N // (BLOCK * UNROLL)
    for i in range(0, steps):
        at = x_ptr + base + i * (UNROLL * BLOCK) + cols
        x0 = tl.load(at, eviction_policy="evict_last").to(tl.float32)  # loads first, all of them
        if UNROLL > 1:
            x1 = tl.load(at + BLOCK, eviction_policy="evict_last").to(tl.float32)
        if UNROLL > 2:
            x2 = tl.load(at + 2 * BLOCK, eviction_policy="evict_last").to(tl.float32)
        if UNROLL > 3:
            x3 = tl.load(at + 3 * BLOCK, eviction_policy="evict_last").to(tl.float32)
        k = i * UNROLL
        mean, m2 = welford_step(mean, m2, x0, tl.div_rn(1.0, (k + 1).to(tl.float32)))
        if UNROLL > 1:
            mean, m2 = welford_step(mean, m2, x1, tl.div_rn(1.0, (k + 2).to(tl.float32)))
        if UNROLL > 2:
            mean, m2 = welford_step(mean, m2, x2, tl.div_rn(1.0, (k + 3).to(tl.float32)))
        if UNROLL > 3:
            mean, m2 = welford_step(mean, m2, x3, tl.div_rn(1.0, (k + 4).to(tl.float32)))
    mean, m2, _ = tl.reduce((mean, m2, tl.zeros([BLOCK], tl.float32) + steps * UNROLL), 0, chan_fn)
    rstd = 1.0 / tl.sqrt_rn(m2 / N + eps)
    for n0 in range(0, N, BLOCK * UNROLL2):
        c = n0 + cols
        x0 = tl.load(x_ptr + base + c, eviction_policy="evict_first").to(tl.float32)
        if UNROLL2 > 1:
            x1 = tl.load(x_ptr + base + c + BLOCK, eviction_policy="evict_first").to(tl.float32)
        y = (x0 - mean) * rstd * tl.load(w_ptr + c, eviction_policy="evict_last").to(tl.float32) \
            + tl.load(b_ptr + c, eviction_policy="evict_last").to(tl.float32)
        tl.store(y_ptr + base + c, y)
        if UNROLL2 > 1:
            y = (x1 - mean) * rstd * tl.load(w_ptr + c + BLOCK, eviction_policy="evict_last").to(tl.float32) \
                + tl.load(b_ptr + c + BLOCK, eviction_policy="evict_last").to(tl.float32)
            tl.store(y_ptr + base + c + BLOCK, y)


def main() -> None:
    reg = get_registry()
    for R, N in ((8192, 12288), (4096, 32768), (1024, 131072), (16384, 8192), (16384, 4096)):
        x = torch.randn(R, N, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        ref = F.layer_norm(x.float(), (N,), w.float(), b.float())
        nbytes = 2 * x.numel() * x.element_size()
        cells = {}
        for label, const, unroll, block, warps, unroll2 in (
                ("const u1", N, 1, 2048, 16, 1), ("rt u1", 0, 1, 2048, 16, 1), ("rt u2", 0, 2, 2048, 16, 1),
                ("rt u3", 0, 3, 2048, 16, 1) if N % 6144 == 0 else ("rt u4", 0, 4, 2048, 16, 1),
                ("rt u2/2", 0, 2, 2048, 16, 2), ("rt u2 4096w16", 0, 2, 4096, 16, 1),
                ("rt u4 1024w8", 0, 4, 1024, 8, 1), ("rt u2 2048w8", 0, 2, 2048, 8, 1)):
            if N % (block * unroll) or N % (block * unroll2):
                continue

            def run(const=const, unroll=unroll, block=block, warps=warps, unroll2=unroll2):
                _ln_loop[(R,)](x, w, b, y, N, 1e-5, NC=const, UNROLL=unroll, BLOCK=block, UNROLL2=unroll2,
                               num_warps=warps)
            run()
            err = (y.float() - ref).abs().max().item()
            cells[label] = (nbytes / (do_bench(run, return_mode="median") * 1e-3) / 1e9 / COPY_GBS * 100, err)
        for label, cfg in (("tritred builtin", None),
                           ("tritred N2048 w16", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=2048,
                                                               num_warps=16))):
            name = None if cfg is None else reg.register(Force("layer_norm", cfg), name="candidate")
            reg.cache.clear()
            cells[label] = (nbytes / (do_bench(lambda: tr.layer_norm(x, (N,), w, b), return_mode="median") * 1e-3)
                            / 1e9 / COPY_GBS * 100, 0.0)
            if name:
                reg.unregister(name)
        cp = torch.compile(lambda: F.layer_norm(x, (N,), w, b), dynamic=False)
        cp()
        cells["compile"] = (nbytes / (do_bench(cp, return_mode="median") * 1e-3) / 1e9 / COPY_GBS * 100, 0.0)
        print(f"{R}x{N} bf16: " + "  ".join(f"{k} {v:5.1f}" + (f" (err {e:.2g})" if e else "")
                                           for k, (v, e) in cells.items()), flush=True)


if __name__ == "__main__":
    main()
