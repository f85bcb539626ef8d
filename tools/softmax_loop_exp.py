"""Can softmax's long-row loop keep several chunks in flight? A standalone online softmax whose first sweep keeps a
(max, sum of exp) pair per GROUP of neighbouring lanes (the elements one thread loads as one 16-byte vector: the
chunk's max is a per-thread reduction, no barrier inside the loop), with U chunks per loop iteration unrolled
(their loads independent, all issued before the first use), and a second sweep of U2 chunks per iteration.
Timed beside the product's softmax (rolled loop, a cross-program max per chunk) and torch.compile.

A developer's measurement script. Usage on a CUDA machine: python tools/softmax_loop_exp.py [--ln]
Prints % of copy bandwidth (4263 GB/s; input read once, output written once), do_bench median, and the max
error against float64 torch.
"""

# ruff: noqa: B023 (each closure runs before its loop variables move on)

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
import tritred_ops as tr
from triton.testing import do_bench
from tritred_ops._kernels import max_fn
from tritred_ops.softmax import _online_fn

COPY_GBS = 4263.0


@triton.jit
def _sm_group(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr, GROUP: tl.constexpr, U: tl.constexpr, U2: tl.constexpr):
    """Softmax of one row per program (unit stride, rows N apart)."""
    base = tl.program_id(0).to(tl.int64) * N
    G: tl.constexpr = BLOCK_N // GROUP
    lanes = tl.arange(0, BLOCK_N)
    m_g = tl.full([G], float("-inf"), tl.float32)
    s_g = tl.zeros([G], tl.float32)
    STEP: tl.constexpr = BLOCK_N * U
    for n0 in range(0, N, STEP):
        for u in tl.static_range(U):
            cols = n0 + u * BLOCK_N + lanes
            x = tl.load(x_ptr + base + cols, mask=cols < N, other=float("-inf"), eviction_policy="evict_last")
            xg = tl.reshape(x.to(tl.float32), [G, GROUP])
            m_new = max_fn(m_g, tl.reduce(xg, 1, max_fn))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # an all -inf group adds exp(-inf) = 0
            s_g = s_g * tl.exp(m_g - m_safe) + tl.sum(tl.exp(xg - m_safe[:, None]), 1)
            m_g = m_new
    m, s = tl.reduce((m_g, s_g), 0, _online_fn)
    inv = 1.0 / s
    STEP2: tl.constexpr = BLOCK_N * U2
    last = tl.cdiv(N, STEP2) * STEP2 - STEP2
    for n0 in range(0, N, STEP2):
        for u in tl.static_range(U2):
            cols = (last - n0) + (U2 - 1 - u) * BLOCK_N + lanes
            ok = cols < N
            x = tl.load(x_ptr + base + cols, mask=ok, other=0, eviction_policy="evict_first").to(tl.float32)
            tl.store(y_ptr + base + cols, tl.exp(x - m) * inv, mask=ok, eviction_policy="evict_first")


def pct(nbytes: int, fn) -> float:
    return nbytes / (do_bench(fn, return_mode="median") * 1e-3) / 1e9 / COPY_GBS * 100


def softmax_cases() -> None:
    shapes = [(1024, 131072, torch.bfloat16), (4096, 32768, torch.bfloat16), (2048, 65536, torch.bfloat16),
              (2048, 50257, torch.bfloat16), (8192, 16384, torch.bfloat16), (1024, 131072, torch.float32),
              (2048, 65536, torch.float32)]
    # (BLOCK_N, warps, U, U2)
    variants = [(16384, 32, 1, 1), (8192, 16, 1, 1), (8192, 16, 2, 1), (8192, 16, 2, 2), (8192, 16, 4, 2),
                (4096, 16, 2, 2), (4096, 16, 4, 2), (4096, 8, 2, 2), (4096, 8, 4, 2), (4096, 8, 4, 4),
                (2048, 8, 4, 2), (2048, 8, 8, 4), (4096, 4, 2, 1), (4096, 4, 4, 2), (8192, 32, 2, 2),
                (8192, 32, 4, 2), (16384, 32, 2, 1)]
    for R, N, dt in shapes:
        torch.manual_seed(0)
        x = torch.randn(R, N, device="cuda", dtype=dt) * 3
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), -1)
        nbytes = 2 * x.numel() * x.element_size()
        group = 16 // x.element_size()
        cells = {"tritred": pct(nbytes, lambda: tr.softmax(x, -1))}
        for bn, w, u, u2 in variants:
            def run(bn=bn, w=w, u=u, u2=u2):
                _sm_group[(R,)](x, y, N, BLOCK_N=bn, GROUP=group, U=u, U2=u2, num_warps=w)
            try:
                run()
            except Exception as e:  # (out of resources)
                print(f"  {bn}w{w}u{u}/{u2}: {type(e).__name__}", flush=True)
                continue
            err = (y.double() - ref).abs().max().item()
            cells[f"{bn}w{w}u{u}/{u2}"] = pct(nbytes, run)
            if err > 1e-2:
                cells[f"{bn}w{w}u{u}/{u2}"] = -err
        cp = torch.compile(lambda: torch.softmax(x, -1), dynamic=False)
        cp()
        cells["compile"] = pct(nbytes, cp)
        best = max((v, k) for k, v in cells.items() if k not in ("tritred", "compile"))
        print(f"softmax {R}x{N} {str(dt)[6:]}: best {best[1]} {best[0]:.1f} | " +
              "  ".join(f"{k} {v:.1f}" for k, v in cells.items()), flush=True)


def ln_cases() -> None:
    from loop_exp import _ln_loop
    for R, N, dt in ((1024, 131072, torch.bfloat16), (1024, 131072, torch.float32), (2048, 65536, torch.bfloat16)):
        x = torch.randn(R, N, device="cuda", dtype=dt)
        w = torch.randn(N, device="cuda", dtype=dt)
        b = torch.randn(N, device="cuda", dtype=dt)
        y = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        cells = {"tritred": pct(nbytes, lambda: tr.layer_norm(x, (N,), w, b))}
        for block, warps, unroll, unroll2 in ((16384, 32, 1, 1), (8192, 16, 2, 1), (8192, 16, 4, 2),
                                              (4096, 16, 4, 2), (4096, 8, 4, 2), (8192, 32, 2, 2),
                                              (4096, 8, 2, 2), (2048, 8, 4, 2)):
            def run(block=block, warps=warps, unroll=unroll, unroll2=unroll2):
                _ln_loop[(R,)](x, w, b, y, N, 1e-5, NC=0, UNROLL=unroll, BLOCK=block, UNROLL2=unroll2,
                               num_warps=warps)
            run()
            cells[f"{block}w{warps}u{unroll}/{unroll2}"] = pct(nbytes, run)
        cp = torch.compile(lambda: F.layer_norm(x, (N,), w, b), dynamic=False)
        cp()
        cells["compile"] = pct(nbytes, cp)
        print(f"layer_norm {R}x{N} {str(dt)[6:]}: " + "  ".join(f"{k} {v:.1f}" for k, v in cells.items()),
              flush=True)


if __name__ == "__main__":
    softmax_cases()
    if "--ln" in sys.argv:
        ln_cases()
