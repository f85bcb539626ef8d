"""Hardware counters (Nsight Compute) of the loops that read below a reduction's rate, on the H200.

Twenty-fourth session. Each case runs its op three times (compile, warm, measured); ``tools/s24_ncu.sh`` runs this
under ``ncu`` once per case, skipping the first launches, so that one launch of each named kernel is profiled:
DRAM and L2 bytes and throughput, L2 hit rate, achieved occupancy, warp stall reasons.

Cases (the argument): bn-bf16, bn-fp32 (batch_norm training 64x256x56x56: ``_stats_kernel`` and
``_apply_kernel``), ln-bf16-wb, ln-bf16 (layer_norm 1024x131072 with and without weight and bias), sum-bf16,
sum-fp32 (sum dim=-1 of 16384x4096), lnp-1row, lnp-2rows
(the probe's two sweeps with the affine, one or two rows a program), var-rows-bf16 (var_mean of the
16384x3136 planes of batch_norm's input).

Usage on a CUDA machine: python tools/s24_ncu.py CASE   (alone it only runs the op)
"""

from __future__ import annotations

import sys

import torch
import tritred_ops as tr


def main() -> None:
    case = sys.argv[1]
    bf, f32 = torch.bfloat16, torch.float32
    if case.startswith("bn"):
        dt = bf if case == "bn-bf16" else f32
        x = torch.randn(64, 256, 56, 56, device="cuda", dtype=dt)
        rm, rv = torch.zeros(256, device="cuda"), torch.ones(256, device="cuda")
        w, b = torch.rand(256, device="cuda"), torch.rand(256, device="cuda")

        def run():
            return tr.batch_norm(x, rm, rv, w, b, training=True)
    elif case.startswith("ln-"):
        x = torch.randn(1024, 131072, device="cuda", dtype=bf)
        w = torch.rand(131072, device="cuda", dtype=bf) if case.endswith("wb") else None
        b = torch.rand(131072, device="cuda", dtype=bf) if case.endswith("wb") else None

        def run():
            return tr.layer_norm(x, (131072,), w, b)
    elif case.startswith("sum"):
        x = torch.randn(16384, 4096, device="cuda", dtype=bf if case == "sum-bf16" else f32)

        def run():
            return tr.sum(x, -1)
    elif case.startswith("lnp"):  # the probe's two sweeps with the affine (s24_pipe_probe._ln_affine), bf16
        from s24_pipe_probe import _ln_affine
        x = torch.randn(1024, 131072, device="cuda", dtype=bf)
        y = torch.empty_like(x)
        w, b = torch.rand(131072, device="cuda", dtype=bf), torch.rand(131072, device="cuda", dtype=bf)
        rows = 2 if case == "lnp-2rows" else 1

        def run():
            _ln_affine[(1024 // rows,)](x, w, b, y, 131072, BN=16384 // rows, BN2=16384 // rows, ROWS=rows,
                                        WB_LAST=False, AFFINE=True, num_warps=32)
    elif case == "var-rows-bf16":
        x = torch.randn(64 * 256, 56 * 56, device="cuda", dtype=bf)

        def run():
            return tr.var_mean(x, 1)
    else:
        raise SystemExit(f"unknown case {case}")
    for _ in range(3):
        run()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
