"""batch_norm training statistics over whole (image, channel) planes, in memory order: a prototype beside the
built-in statistics launch, timed on the H200.

Why: a row sum over the (B*C, S) view of a 64x256x56x56 bf16 input reads its 103 MB in 29.8 us (tritred sum, one
plane per row), where the batch_norm statistics launch (per-channel programs over 16 x 128 tiles) takes ~38 us
(tools/s20_ab.py --reads). Here each program takes BLOCK_P consecutive planes (one [BLOCK_P, BLOCK_N >= S] tile,
the programs in memory order), computes each plane's corrected two-pass statistics of x less its channel's first
element (as the built-in launch), and stores them as partial (n, c): B partials per channel. The normalize
launch is the built-in one, merging B partials per channel (``SPLIT = B``), either one tile per program, or
looping programs (their partials merged once), or after a small launch that merges each channel's partials
into one.

Usage on a CUDA machine: python tools/bn_planes_ab.py
"""

from __future__ import annotations

import math
import sys

import torch
import triton
import triton.language as tl
import tritred_ops as T
from tritred_ops._kernels import chan_fn, chunk_stats, stats_shift

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
M = sys.modules["tritred_ops.batch_norm"]


@triton.jit
def _plane_stats_kernel(x_ptr, pm_ptr, pm2_ptr, pn_ptr, ps_ptr, R, B, S, C, s_b, s_c,
                        BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    r_ok = rows < R
    n_i = rows // C
    c_i = rows % C
    cols = tl.arange(0, BLOCK_N)
    mask = r_ok[:, None] & (cols < S)[None, :]
    shift = stats_shift(tl.load(x_ptr + c_i.to(tl.int64) * s_c, mask=r_ok, other=0).to(tl.float32))
    x = tl.load(x_ptr + (n_i.to(tl.int64) * s_b + c_i.to(tl.int64) * s_c)[:, None] + cols[None, :], mask=mask,
                other=0)
    x = tl.where(mask, x.to(tl.float32) - shift[:, None], 0.0)
    n = tl.zeros([BLOCK_P], tl.float32) + S
    mean, corr, m2 = chunk_stats(x, mask, 1, n)
    at = c_i * B + n_i
    tl.store(pm_ptr + at, mean + corr, mask=r_ok)
    tl.store(pm2_ptr + at, m2, mask=r_ok)
    tl.store(pn_ptr + at, n, mask=r_ok)
    tl.store(ps_ptr + at, tl.sum(x, 1), mask=r_ok)


@triton.jit
def _merge_kernel(pm_ptr, pm2_ptr, pn_ptr, ps_ptr, om_ptr, om2_ptr, on_ptr, os_ptr, C, B,
                  BLOCK_C: tl.constexpr, BLOCK_B: tl.constexpr):
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    bs = tl.arange(0, BLOCK_B)
    m = c_ok[:, None] & (bs < B)[None, :]
    at = cs[:, None] * B + bs[None, :]
    mean, m2, n = tl.reduce((tl.load(pm_ptr + at, mask=m, other=0), tl.load(pm2_ptr + at, mask=m, other=0),
                             tl.load(pn_ptr + at, mask=m, other=0)), 1, chan_fn)
    tl.store(om_ptr + cs, mean, mask=c_ok)
    tl.store(om2_ptr + cs, m2, mask=c_ok)
    tl.store(on_ptr + cs, n, mask=c_ok)
    tl.store(os_ptr + cs, tl.sum(tl.load(ps_ptr + at, mask=m, other=0), 1), mask=c_ok)


def planes_bn(x, rm, rv, w, b, eps=1e-5, momentum=0.1, mode="split", block_p=1, warps=4, apply_programs=0,
              bm=16, bn=128, aw=2):
    B, Ch = x.shape[:2]
    S = math.prod(x.shape[2:])
    R = B * Ch
    y = torch.empty_like(x)
    parts = [torch.empty((Ch, B), device=x.device, dtype=torch.float32) for _ in range(4)]
    block_n = triton.next_power_of_2(S)
    _plane_stats_kernel[(triton.cdiv(R, block_p),)](x, *parts, R, B, S, Ch, x.stride(0), x.stride(1),
                                                    BLOCK_P=block_p, BLOCK_N=block_n, num_warps=warps)
    split = B
    if mode == "merge":
        merged = [torch.empty((Ch, 1), device=x.device, dtype=torch.float32) for _ in range(4)]
        _merge_kernel[(triton.cdiv(Ch, 4),)](*parts, *merged, Ch, B, BLOCK_C=4, BLOCK_B=triton.next_power_of_2(B),
                                             num_warps=4)
        parts, split = merged, 1
    bm, bn = min(bm, triton.next_power_of_2(B)), min(bn, triton.next_power_of_2(S))
    tiles = triton.cdiv(B, bm) * triton.cdiv(S, bn)
    tiles_per_split = triton.cdiv(tiles, split)
    units = split * tiles_per_split
    per_block = max(1, apply_programs // Ch) if apply_programs > 0 else units
    tpp = triton.cdiv(units, min(per_block, units))
    grid = (Ch * triton.cdiv(units, tpp),)
    M._apply_kernel[grid](x, y, *parts, rm, rv, w, b, B, S, Ch, x.stride(0), 1, x.stride(1), y.stride(0), 1,
                          y.stride(1), tiles_per_split, tpp, eps, 0.0, momentum, 0.0, FROM_RUNNING=False,
                          RESIDENT=False, HAS_RUNNING=True, HAS_W=True, HAS_B=True, ACC=tl.float32, SPLIT=split,
                          BLOCK_S=triton.next_power_of_2(split), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=1,
                          DIV_S=M._nchw_hint(S, (x.stride(0), 1, x.stride(1)), (y.stride(0), 1, y.stride(1))),
                          num_warps=aw)
    return y


CASES = [((64, 256, 56, 56), BF), ((256, 64, 56, 56), BF), ((64, 256, 56, 56), F32), ((64, 256, 28, 28), F16),
         ((128, 512, 14, 14), BF), ((32, 128, 112, 112), F16), ((32, 96, 55, 55), BF), ((16, 64, 224, 224), F32)]


def variants(S: int, sm: int):
    bn = triton.next_power_of_2(S)
    out = []
    for bp, w in ((1, max(1, min(8, bn // 1024))), (1, max(1, min(16, bn // 512))), (max(1, 2048 // bn), 4),
                  (max(1, 4096 // bn), 8)):
        if bp * bn > 32768:
            continue
        out.append((f"p{bp}w{w} split", dict(mode="split", block_p=bp, warps=w)))
        out.append((f"p{bp}w{w} loop8", dict(mode="split", block_p=bp, warps=w, apply_programs=8 * sm)))
        out.append((f"p{bp}w{w} merge", dict(mode="merge", block_p=bp, warps=w)))
    return list(dict(out).items())


def main() -> None:
    from triton.testing import do_bench
    sm = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 4
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cases = CASES if dev == "cuda" else [((4, 6, 28, 28), F32), ((3, 5, 7, 9), F32)]
    for shape, dtype in cases:
        _case(do_bench, dev, sm, shape, dtype)


def _case(do_bench, dev: str, sm: int, shape, dtype) -> None:  # noqa: ANN001
    Ch, S = shape[1], math.prod(shape[2:])
    x = torch.randn(shape, device=dev, dtype=dtype) * 2 + 0.5
    w, b = torch.randn(Ch, device=dev).to(dtype), torch.randn(Ch, device=dev).to(dtype)
    rm0, rv0 = torch.zeros(Ch, device=dev), torch.ones(Ch, device=dev)
    rmr, rvr = rm0.double().clone(), rv0.double().clone()
    ref = torch.nn.functional.batch_norm(x.double(), rmr, rvr, w.double(), b.double(), True, 0.1, 1e-5)
    nbytes = 2 * x.numel() * x.element_size()
    res: dict[str, float] = {}
    kws = dict(variants(S, sm))
    fns = [("builtin", lambda: T.batch_norm(x, rm0, rv0, w, b, True, 0.1, 1e-5))]
    fns += [(label, lambda kw=kw: planes_bn(x, rm0, rv0, w, b, **kw)) for label, kw in kws.items()]
    err = 0.0
    for label, _ in fns:  # check once (bf16/fp16: 3e-2 of a float64 reference is tighter than their rounding)
        rm, rv = rm0.clone(), rv0.clone()
        y = T.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5) if label == "builtin" else planes_bn(x, rm, rv, w, b,
                                                                                                  **kws[label])
        err = (y.double() - ref).abs().max().item()
        bad = err > (3e-2 if dtype != F32 else 1e-4)
        if label != "builtin":
            bad |= (rm.double() - rmr).abs().max().item() > 1e-4 or (rv.double() - rvr).abs().max().item() > 1e-3
        if bad:
            print(f"   WRONG {shape} {label} err {err:.2e}", flush=True)
    if dev != "cuda":
        print(shape, "checked, last err", err, flush=True)
        return
    for _ in range(2):
        for label, fn in fns:
            ms = do_bench(fn, return_mode="median")
            res[label] = max(res.get(label, 0.0), 100 * nbytes / (ms * 1e-3) / 1e9 / 4263)
    best = max((v, k) for k, v in res.items())
    print(f"batch_norm {shape} {str(dtype)[6:]}: best {best[1]} {best[0]:.1f} | "
          + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
