# ruff: noqa: B023, B007, E501
"""H200 experiments outside the product kernels (a developer's tool): stand-alone variants of the column sum and
of the long-row online softmax, timed like the bench (do_bench median, bytes read + written once, % of the
4263 GB/s copy bandwidth), to decide what the product kernels should do before changing them.

Usage: python tools/exp_h200.py cols|softmax|ctas   (CUDA only)

- cols: the column sum (reduce over a non-contiguous dim) with LOADS tiles loaded per loop iteration (a manual
  pipeline: independent loads in flight per thread) and an L2 eviction hint on the streamed loads.
- softmax: the two-sweep online softmax of 131072-wide rows with eviction hints (keep the first sweep's lines in
  L2 for the second) and persistent grids (fewer rows in flight: a smaller L2 working set).
- ctas: whether a 131072-wide row fits on chip across a thread-block cluster (``num_ctas``).
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

COPY_GBS = 4263.0


def pct(ms: float, nbytes: int) -> float:
    return nbytes / (ms * 1e-3) / 1e9 / COPY_GBS * 100


def timed(call, ok, nbytes: int, label: str, rows: list) -> None:
    """Run ``call`` once, check it with ``ok()``, time it; append (% copy, label, ok) to ``rows`` (or print why
    the variant failed to compile or run)."""
    try:
        call()
        good = ok()
        ms = do_bench(call, warmup=10, rep=50)
    except Exception as e:  # noqa: BLE001
        print(f"  {label}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return
    rows.append((pct(ms, nbytes), label, good))


@triton.jit
def col_sum(x_ptr, out_ptr, N, K, s_xm, s_xn, n_per_split, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr,
            BLOCK_K: tl.constexpr, LOADS: tl.constexpr, EVICT: tl.constexpr):
    k_blocks = tl.cdiv(K, BLOCK_K)
    m = tl.program_id(0) // k_blocks
    ks = (tl.program_id(0) % k_blocks).to(tl.int64) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_ok = ks < K
    x_col = x_ptr + m.to(tl.int64) * s_xm + ks
    n_lo = tl.program_id(1).to(tl.int64) * n_per_split
    n_hi = tl.minimum(N, n_lo + n_per_split)
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for n0 in range(n_lo, n_hi, BLOCK_N * LOADS):
        for u in tl.static_range(LOADS):
            ns = n0 + u * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = (ns < n_hi)[:, None] & k_ok[None, :]
            x = tl.load(x_col[None, :] + ns[:, None].to(tl.int64) * s_xn, mask=mask, other=0, eviction_policy=EVICT)
            acc += x.to(tl.float32)
    r = tl.sum(acc, 0)
    if SPLIT > 1:
        tl.store(out_ptr + (m.to(tl.int64) * K + ks) * SPLIT + tl.program_id(1), r, mask=k_ok)
    else:
        tl.store(out_ptr + m.to(tl.int64) * K + ks, r.to(out_ptr.dtype.element_ty), mask=k_ok)


@triton.jit
def split_sum(p_ptr, out_ptr, R, SPLIT: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    s = tl.arange(0, BLOCK_S)
    p = tl.load(p_ptr + rows[:, None].to(tl.int64) * SPLIT + s[None, :], mask=(rows < R)[:, None] & (s < SPLIT)[None, :],
                other=0)
    tl.store(out_ptr + rows, tl.sum(p, 1).to(out_ptr.dtype.element_ty), mask=rows < R)


def run_cols() -> None:
    cases = [((16384, 4096), 0, torch.bfloat16), ((256, 262144), 0, torch.bfloat16),
             ((64, 4096, 256), 1, torch.bfloat16), ((64, 4096, 256), 1, torch.float32)]
    for shape, dim, dtype in cases:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        M = 1 if dim == 0 else shape[0]
        N, K = shape[dim], x.stride(dim)
        s_xm = 0 if dim == 0 else x.stride(0)
        ref = x.float().sum(dim).to(dtype)
        nbytes = x.numel() * x.element_size() + ref.numel() * ref.element_size()
        base = {"eager": do_bench(lambda: x.sum(dim), warmup=10, rep=50)}
        cx = torch.compile(lambda t: t.sum(dim))
        cx(x)
        base["compile"] = do_bench(lambda: cx(x), warmup=10, rep=50)
        print(f"== cols sum {shape} dim={dim} {dtype}: " + ", ".join(f"{k} {pct(v, nbytes):.0f}%"
                                                                   for k, v in base.items()), flush=True)
        rows = []
        for (bn, bk), w, loads, evict, ksplit in itertools.product(
                [(32, 64), (16, 128), (32, 128), (8, 256)], [4, 8], [1, 2, 4], ["", "evict_first"],
                ["rule", "x2"]):
            programs = M * triton.cdiv(K, bk)
            split = 1
            if programs < 8 * 132 and N > 4 * bn * loads:
                split = max(1, min(8 * 132 // programs, triton.cdiv(N, 4 * bn * loads)))
                if ksplit == "x2":
                    split = min(2 * split, triton.cdiv(N, bn * loads))
            elif ksplit == "x2":
                continue
            nps = triton.cdiv(triton.cdiv(N, split), bn * loads) * bn * loads
            split = triton.cdiv(N, nps)
            out = torch.empty(ref.shape, device="cuda", dtype=dtype)
            part = torch.empty((M * K, split), device="cuda", dtype=torch.float32)

            def call():
                if split > 1:
                    col_sum[(M * triton.cdiv(K, bk), split)](x, part, N, K, s_xm, x.stride(dim), nps, SPLIT=split,
                                                             BLOCK_N=bn, BLOCK_K=bk, LOADS=loads, EVICT=evict,
                                                             num_warps=w)
                    split_sum[(triton.cdiv(M * K, 128),)](part, out, M * K, SPLIT=split,
                                                          BLOCK_S=triton.next_power_of_2(split), BLOCK_R=128)
                else:
                    col_sum[(M * triton.cdiv(K, bk), 1)](x, out, N, K, s_xm, x.stride(dim), N, SPLIT=1, BLOCK_N=bn,
                                                         BLOCK_K=bk, LOADS=loads, EVICT=evict, num_warps=w)
            timed(call, lambda: torch.allclose(out.float(), ref.float(), rtol=2e-2, atol=2e-1), nbytes,
                  f"N{bn} K{bk} w{w} L{loads} {evict or '-'} split{split}", rows)
        rows.sort(reverse=True)
        for p, name, ok in rows[:12]:
            print(f"  {p:5.1f}% {name}{'' if ok else '  WRONG'}", flush=True)
        by = {}
        for p, name, ok in rows:
            key = " ".join(t for t in name.split() if t.startswith(("L", "evict", "-")))
            by[key] = max(by.get(key, 0), p)
        print("  best by (loads, evict): " + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(by.items())), flush=True)


@triton.jit
def sm_loop(x_ptr, y_ptr, R, N, BLOCK_N: tl.constexpr, EV1: tl.constexpr, EV2: tl.constexpr, EVS: tl.constexpr):
    for row in tl.range(tl.program_id(0), R, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * N
        y_row = y_ptr + tl.cast(row, tl.int64) * N
        m = tl.full([1], float("-inf"), tl.float32)
        s = tl.zeros([1], tl.float32)
        for n0 in range(0, N, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            x = tl.load(x_row + cols, mask=cols < N, other=float("-inf"), eviction_policy=EV1).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m = m_new
        inv = 1.0 / s
        last = tl.cdiv(N, BLOCK_N) * BLOCK_N - BLOCK_N
        for n0 in range(0, N, BLOCK_N):
            cols = (last - n0) + tl.arange(0, BLOCK_N)
            x = tl.load(x_row + cols, mask=cols < N, other=0, eviction_policy=EV2).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m) * inv).to(y_ptr.dtype.element_ty), mask=cols < N,
                     eviction_policy=EVS)


def run_softmax() -> None:
    for R, N, dtype in [(1024, 131072, torch.bfloat16), (1024, 131072, torch.float32)]:
        x = torch.randn(R, N, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        nbytes = 2 * x.numel() * x.element_size()
        print(f"== softmax {R}x{N} {dtype}: eager {pct(do_bench(lambda: torch.softmax(x, -1), warmup=10, rep=50), nbytes):.0f}%",
              flush=True)
        rows = []
        for (bn, w), ev, grid in itertools.product(
                [(4096, 8), (8192, 16), (16384, 32), (8192, 8)],
                [("", "", ""), ("evict_last", "evict_first", "evict_first"), ("evict_last", "evict_first", ""),
                 ("", "", "evict_first")],
                [R, 132, 264, 528]):
            def call():
                sm_loop[(grid,)](x, y, R, N, BLOCK_N=bn, EV1=ev[0], EV2=ev[1], EVS=ev[2], num_warps=w)
            timed(call, lambda: torch.allclose(y.float(), ref, rtol=2e-2, atol=1e-6), nbytes,
                  f"N{bn} w{w} ev={'/'.join(e or '-' for e in ev)} grid{grid}", rows)
        rows.sort(reverse=True)
        for p, name, ok in rows[:15]:
            print(f"  {p:5.1f}% {name}{'' if ok else '  WRONG'}", flush=True)
        for p, name, ok in rows:
            if "ev=-/-/-" in name and f"grid{R}" in name:
                print(f"  (plain) {p:5.1f}% {name}", flush=True)


@triton.jit
def sm_single(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * N + cols, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=cols < N)


def run_ctas() -> None:
    for R, N, ctas, w in [(2048, 65536, 2, 32), (1024, 131072, 4, 32), (2048, 65536, 1, 32)]:
        x = torch.randn(R, N, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        try:
            sm_single[(R,)](x, y, N, BLOCK_N=N, num_warps=w, num_ctas=ctas)
            ok = torch.allclose(y.float(), torch.softmax(x.float(), -1), rtol=2e-2, atol=1e-6)
            ms = do_bench(lambda: sm_single[(R,)](x, y, N, BLOCK_N=N, num_warps=w, num_ctas=ctas), warmup=5, rep=30)
            print(f"ctas {R}x{N} num_ctas={ctas} w{w}: {pct(ms, 2 * x.numel() * 2):.0f}% ok={ok}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"ctas {R}x{N} num_ctas={ctas}: {type(e).__name__}: {str(e)[:300]}", flush=True)


def run_inductor() -> None:
    """torch.compile's generated kernels and chosen configs for the column sums where it leads."""
    import gc

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    from torch._inductor.utils import run_and_get_code

    for shape, dim in [((256, 262144), 0), ((64, 4096, 256), 1), ((16384, 4096), 0)]:
        torch._dynamo.reset()
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        fn = torch.compile(lambda t, d=dim: t.sum(d))
        _, code = run_and_get_code(fn, x)
        fn(x)
        print(f"== inductor sum {shape} dim={dim}", flush=True)
        for c in code:
            start = c.find("@triton_heuristics")
            print(c[start:c.find("def get_args", start)] if start >= 0 else c[:3000], flush=True)
        for o in gc.get_objects():
            if isinstance(o, CachingAutotuner) and getattr(o, "launchers", None):
                print("chosen:", o.fn.__name__ if hasattr(o, "fn") else o,
                      [str(getattr(la, "config", la)) for la in o.launchers], flush=True)


if __name__ == "__main__":
    for what in sys.argv[1:]:
        {"cols": run_cols, "softmax": run_softmax, "ctas": run_ctas, "inductor": run_inductor}[what]()
