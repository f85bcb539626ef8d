"""Twenty-fifth session's probes on the H200: fewer instructions per element where the SASS says they dominate.

1. ``var``: short rows (256-1024 elements) as a [BLOCK_M rows, BLOCK_N // C, C] tile: a row's C columns across
   C / vector threads, its other columns in the same threads' registers. The product's [BLOCK_M, BLOCK_N] tile puts
   a whole warp across each row: every row's sums take five shuffle levels per thread for 8 elements each
   (offline SASS, sm_90a, var 262144x256 bf16: 528 instructions for 32 elements per thread; the [4, 4, 64] tile on
   one warp 384, [8, 8, 32] 544 for 64 elements: 16.5 -> 8.5 instructions per element).
2. ``batch_norm`` statistics: each thread's whole share of a full tile ([T threads, R, V], 32 elements) as one
   group, instead of one group per 16-byte vector (fewer Chan merges; bf16 full-tile path 274 -> 245 instructions,
   float32 272 -> 217, registers 96 -> 80 and 128 -> 101).

Every variant is checked against float64 torch first, then timed twice in alternation with the product
(``triton.testing.do_bench`` median, the better round kept), in % of the copy bandwidth measured in this process.

3. The adopted rule (``heuristics._short_stats_rows``) against the configs it replaced (``rule``), and layer_norm's
   short rows as such a tile (``ln``; a probe kernel, ``_short_ln_kernel``, against the product).

Usage on a CUDA machine: python tools/s25_probe.py [var] [bn] [rule] [ln] [lnrule]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl
import tritred_ops as tr
from triton.testing import do_bench
from tritred_core import get_registry
from tritred_ops import _kernels  # noqa: F401
from tritred_ops._kernels import add_pair, chan_fn, chunk_stats, div_exact

BN = sys.modules["tritred_ops.batch_norm"]  # (the package's attribute of that name is the op)


@triton.jit
def _short_var_kernel(x_ptr, out_ptr, R, N, s_xm, divisor, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, C: tl.constexpr, CORRECT: tl.constexpr, EVEN: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < R
    cols = tl.arange(0, BLOCK_N // C)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    if EVEN:
        mask = row_ok[:, None, None]
    else:
        mask = row_ok[:, None, None] & (cols < N)
    x = tl.load(x_ptr + rows[:, None, None] * s_xm + cols, mask=mask, other=0,
                eviction_policy="evict_first").to(ACC)
    n = tl.full([BLOCK_M], N, ACC)
    mean = div_exact(tl.sum(tl.sum(x, 2), 1), n, ACC)
    d = x - mean[:, None, None]
    if not EVEN:
        d = tl.where(mask, d, 0.0)
    if CORRECT:
        c0, s0 = tl.reduce((d, d * d), 2, add_pair)
        cc, ss = tl.reduce((c0, s0), 1, add_pair)
        corr = div_exact(cc, n, ACC)
        m2 = ss - cc * corr
    else:
        m2 = tl.sum(tl.sum(d * d, 2), 1)
    tl.store(out_ptr + rows, div_exact(m2, divisor, ACC), mask=row_ok)


def short_var(x: torch.Tensor, block_m: int, c: int, warps: int) -> torch.Tensor:
    R, N = x.shape
    out = torch.empty(R, dtype=x.dtype, device=x.device)
    bn = triton.next_power_of_2(N)
    _short_var_kernel[(triton.cdiv(R, block_m),)](x, out, R, N, x.stride(0), float(N - 1), ACC=tl.float32,
                                                 BLOCK_M=block_m, BLOCK_N=bn, C=c,
                                                 CORRECT=x.dtype != torch.bfloat16, EVEN=bn == N, num_warps=warps)
    return out


@triton.jit
def _short_ln_kernel(x_ptr, w_ptr, b_ptr, y_ptr, R, N, s_xm, eps, ACC: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, C: tl.constexpr, PRELOAD: tl.constexpr):
    """layer_norm of whole power-of-two rows (N == BLOCK_N) as a [BLOCK_M, BLOCK_N // C, C] tile (as
    _short_var_kernel), the corrected two-pass of the product's single pass, weight and bias as [1, R, C]."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < R
    cols = tl.arange(0, BLOCK_N // C)[None, :, None] * C + tl.arange(0, C)[None, None, :]
    mask = row_ok[:, None, None]
    x = tl.load(x_ptr + rows[:, None, None] * s_xm + cols, mask=mask, other=0, eviction_policy="evict_last").to(ACC)
    if PRELOAD:
        w = tl.load(w_ptr + cols)
        b = tl.load(b_ptr + cols)
    n = tl.full([BLOCK_M], N, ACC)
    mean0 = div_exact(tl.sum(tl.sum(x, 1), 1), n, ACC)
    d = x - mean0[:, None, None]
    c1, s1 = tl.reduce((d, d * d), 1, add_pair)
    c, ss = tl.reduce((c1, s1), 1, add_pair)
    corr = div_exact(c, n, ACC)
    m2 = ss - c * corr
    rstd = div_exact(1.0, tl.sqrt_rn(div_exact(m2, n, ACC) + eps), ACC)
    if not PRELOAD:
        w = tl.load(w_ptr + cols)
        b = tl.load(b_ptr + cols)
    y = (d - corr[:, None, None]) * rstd[:, None, None] * w.to(ACC) + b.to(ACC)
    tl.store(y_ptr + rows[:, None, None] * s_xm + cols, y, mask=mask)


def short_ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, block_m: int, c: int, warps: int,
             preload: bool = False) -> torch.Tensor:
    R, N = x.shape
    y = torch.empty_like(x)
    _short_ln_kernel[(triton.cdiv(R, block_m),)](x, w, b, y, R, N, x.stride(0), 1e-5, ACC=tl.float32,
                                                BLOCK_M=block_m, BLOCK_N=N, C=c, PRELOAD=preload, num_warps=warps)
    return y


@triton.jit
def _thread_lanes(ptr, s_b, s_s, T: tl.constexpr, R: tl.constexpr, V: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.arange(0, T)[:, None, None]
    r = tl.arange(0, R)[None, :, None]
    v = tl.arange(0, V)[None, None, :]
    i = (r * T + t) * V + v
    return ptr + (i // BLOCK_N).to(tl.int64) * s_b + (i % BLOCK_N) * s_s


@triton.jit
def _stats_kernel_tg(x_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, psum_ptr, B, S, C, s_b, s_s, s_c, tiles_per_split,
                     ACC: tl.constexpr, SPLIT: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DIV_S: tl.constexpr = 1,
                     PREFETCH: tl.constexpr = False, THREADS: tl.constexpr = 64):
    """BN._stats_kernel for NCHW (BLOCK_K = 1) with one group per thread per full tile (PREFETCH ignored)."""
    if DIV_S > 1:
        S = S // DIV_S * DIV_S
        s_b = s_b // DIV_S * DIV_S
        s_c = s_c // DIV_S * DIV_S
    V: tl.constexpr = GROUP
    T: tl.constexpr = THREADS
    R: tl.constexpr = BLOCK_M * BLOCK_N // (T * V)
    G: tl.constexpr = R * V
    c = tl.program_id(0).to(tl.int64)
    cs = c * BLOCK_K + tl.arange(0, BLOCK_K)
    c_ok = cs < C
    s_chunks = tl.cdiv(S, BLOCK_N)
    t_lo = tl.program_id(1) * tiles_per_split
    t_hi = tl.minimum(tl.cdiv(B, BLOCK_M) * s_chunks, t_lo + tiles_per_split)
    lanes = BN._lanes(x_ptr, cs, s_b, s_s, s_c, BLOCK_M, BLOCK_N)
    tlanes = _thread_lanes(x_ptr + c * s_c, s_b, s_s, T, R, V, BLOCK_N)
    shift = BN._channel_shift(x_ptr, cs, c_ok, s_c, ACC)
    shift1 = tl.sum(shift, 0)
    bi = t_lo // s_chunks
    si = t_lo % s_chunks
    mean_g = tl.zeros([T], ACC)
    m2_g = tl.zeros([T], ACC)
    tot_g = tl.zeros([T], ACC)
    full = 0
    mean_p = tl.zeros([BLOCK_K], ACC)
    m2_p = tl.zeros([BLOCK_K], ACC)
    cnt_p = tl.zeros([BLOCK_K], ACC)
    tot_p = tl.zeros([BLOCK_K], ACC)
    for _ in range(t_lo, t_hi):
        b0 = bi * BLOCK_M
        s0 = si * BLOCK_N
        corner = b0.to(tl.int64) * s_b + s0.to(tl.int64) * s_s
        if (b0 + BLOCK_M <= B) & (s0 + BLOCK_N <= S):
            xg = tl.load(tlanes + corner).to(ACC) - shift1
            mean_x = tl.sum(tl.sum(xg * (1.0 / G), 2), 1)
            d = xg - mean_x[:, None, None]
            full += 1
            inv = div_exact(1.0, full, ACC)
            delta = mean_x - mean_g
            mean_g += delta * inv
            m2_g += tl.sum(tl.sum(d * d, 2), 1) + delta * (delta * (G * (full - 1) * inv))
            tot_g += mean_x * G
        else:
            mask = BN._edge_mask(b0, s0, B, S, c_ok, BLOCK_M, BLOCK_N)
            x_raw = BN._edge_tile(lanes, b0, s0, B, S, s_b, s_s, c_ok, BLOCK_M, BLOCK_N)
            x = tl.where(mask, x_raw.to(ACC) - shift[None, :], 0.0)
            tot_p += tl.sum(x, 0)
            n_c = tl.zeros([BLOCK_K], ACC) + tl.minimum(B - b0, BLOCK_M) * tl.minimum(S - s0, BLOCK_N)
            mean_t, corr_t, m2_t = chunk_stats(x, mask, 0, n_c)
            mean_p, m2_p, cnt_p = chan_fn(mean_p, m2_p, cnt_p, mean_t + corr_t, m2_t, n_c)
        si += 1
        wrap = si == s_chunks
        bi += wrap.to(tl.int32)
        si = tl.where(wrap, 0, si)
    mean, m2, cnt = tl.reduce((mean_g, m2_g, tl.zeros([T], ACC) + G * full), 0, chan_fn)
    mean, m2, cnt = chan_fn(mean, m2, cnt, tl.sum(mean_p, 0), tl.sum(m2_p, 0), tl.sum(cnt_p, 0))
    offs = c * SPLIT + tl.program_id(1)
    tl.store(pmean_ptr + offs, mean, mask=c < C)
    tl.store(pm2_ptr + offs, m2, mask=c < C)
    tl.store(pcnt_ptr + offs, cnt, mask=c < C)
    tl.store(psum_ptr + offs, tl.sum(tot_g, 0) + tl.sum(tot_p, 0), mask=c < C)


def copy_gbps() -> float:
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    return 2 * a.numel() * 4 / (do_bench(lambda: b.copy_(a), return_mode="median") * 1e-3) / 1e9


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def alternate(fns: dict, nbytes: int, copy: float, rounds: int = 2) -> dict[str, float]:
    res: dict[str, float] = {}
    for _ in range(rounds):
        for label, fn in fns.items():
            pct = 100 * nbytes / (do_bench(fn, return_mode="median") * 1e-3) / 1e9 / copy
            res[label] = max(res.get(label, 0.0), pct)
    return res


def probe_var(copy: float) -> None:
    for dtype in (torch.bfloat16, torch.float32):
        vec = 16 // torch.empty((), dtype=dtype).element_size()
        for R, N in ((262144, 256), (524288, 128), (131072, 512), (65536, 1024), (100000, 768), (200000, 300)):
            x = torch.randn(R, N, device="cuda", dtype=dtype) * 3 + 1
            ref = torch.var(x.double(), -1)
            fns = {"product": lambda x=x: tr.var(x, -1)}
            bad = []
            for c_threads in (4, 8, 16):
                for per_thread in (32, 64):
                    for warps in (1, 2, 4):
                        c = c_threads * vec
                        bn = triton.next_power_of_2(N)
                        if c > bn:
                            continue
                        block_m = per_thread * 32 * warps // bn
                        if block_m < 32 * warps // c_threads:  # (rows spread over every thread at least once)
                            continue
                        label = f"M{block_m} C{c} w{warps}"

                        def fn(x=x, block_m=block_m, c=c, warps=warps):
                            return short_var(x, block_m, c, warps)
                        err = rel_err(fn(), ref)
                        if not err < (1e-2 if dtype == torch.bfloat16 else 1e-5):
                            bad.append(f"{label} err {err:.1e}")
                            continue
                        fns[label] = fn
            err = rel_err(tr.var(x, -1), ref)
            res = alternate(fns, x.numel() * x.element_size() + R * x.element_size(), copy)
            top = sorted(res.items(), key=lambda kv: -kv[1])[:5]
            print(f"var {R}x{N} {str(dtype)[6:]}: product {res['product']:.1f} (err {err:.1e})  best "
                  + "  ".join(f"{k} {v:.1f}" for k, v in top) + (f"  WRONG {bad}" if bad else ""), flush=True)


def probe_bn(copy: float) -> None:
    reg = get_registry()
    base = BN._stats_kernel
    for shape, dtype in (((64, 256, 56, 56), torch.bfloat16), ((256, 64, 56, 56), torch.bfloat16),
                         ((64, 256, 56, 56), torch.float32), ((256, 64, 56, 56), torch.float32),
                         ((16, 64, 16, 32, 32), torch.bfloat16), ((64, 256, 28, 28), torch.float16),
                         ((32, 128, 112, 112), torch.float16)):
        x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
        Ch = shape[1]
        w = torch.randn(Ch, device="cuda")
        b = torch.randn(Ch, device="cuda")
        dims = [0] + list(range(2, x.dim()))
        xd = x.double()
        ref = (xd - xd.mean(dims, keepdim=True)) / torch.sqrt(xd.var(dims, unbiased=False, keepdim=True) + 1e-5)
        ref = ref * w.double().view(1, Ch, *[1] * (x.dim() - 2)) + b.double().view(1, Ch, *[1] * (x.dim() - 2))
        fns = {}
        for label, kernel in (("product", base), ("thread groups", _stats_kernel_tg)):
            BN._stats_kernel = kernel
            reg.cache.clear()
            rm, rv = torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda")

            def fn(rm=rm, rv=rv, x=x, w=w, b=b):
                return tr.batch_norm(x, rm, rv, w, b, training=True)
            err = rel_err(fn(), ref)
            fns[label] = fn
            print(f"  {label} err {err:.1e}", flush=True)
        BN._stats_kernel = base
        # the plans hold their kernels: alternate without clearing the cache
        nbytes = 2 * x.numel() * x.element_size()
        res = {}
        for _ in range(2):
            for label in ("product", "thread groups"):
                BN._stats_kernel = base if label == "product" else _stats_kernel_tg
                reg.cache.clear()
                fns[label]()  # records the plan with this kernel
                pct = 100 * nbytes / (do_bench(fns[label], return_mode="median") * 1e-3) / 1e9 / copy
                res[label] = max(res.get(label, 0.0), pct)
        BN._stats_kernel = base
        reg.cache.clear()
        print(f"batch_norm train {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def probe_rule() -> None:
    """The product's rule (threads_per_row) against the configs it replaced, and float32 with it forced."""
    from sweep import alternate as alternate_cfg
    from tritred_core import LaunchConfig

    def few(n: int, warps: int = 4) -> LaunchConfig:
        return LaunchConfig(strategy="single_pass", BLOCK_M=32 * 32 * warps // n, BLOCK_N=n, num_warps=warps,
                            threads_per_row=max(1, n // 32))
    old = {128: LaunchConfig(strategy="single_pass", BLOCK_M=8, BLOCK_N=128, num_warps=1),
           256: LaunchConfig(strategy="single_pass", BLOCK_M=4, BLOCK_N=256, num_warps=1),
           512: LaunchConfig(strategy="single_pass", BLOCK_M=4, BLOCK_N=512, num_warps=1)}
    bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    for op, shape, dtype, dim in (("var", (262144, 256), bf, -1), ("std", (262144, 256), bf, -1),
                                  ("var", (524288, 128), bf, -1), ("var", (131072, 512), bf, -1),
                                  ("var", (262144, 256), f16, -1), ("var", (64, 256, 16, 16), bf, (0, 2, 3)),
                                  ("var", (262144, 256), f32, -1), ("var", (524288, 128), f32, -1),
                                  ("var", (131072, 512), f32, -1)):
        n = shape[-1] if dim == -1 else shape[2] * shape[3]
        variants = [("built-in", None), ("before", old[n])]
        if dtype == f32:
            variants += [("t/row w4", few(n)), ("t/row w2", few(n, 2)), ("t/row w1", few(n, 1))]
        res = alternate_cfg(op, shape, dtype, dim, variants)
        print(f"rule {op} {'x'.join(map(str, shape))} {str(dtype)[6:]} dim={dim}: "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def probe_ln_rule() -> None:
    """layer_norm's rule (threads_per_row, weight and bias with the row) against the one-warp tiles it replaced."""
    from sweep import alternate as alternate_cfg
    from tritred_core import LaunchConfig

    bf, f32 = torch.bfloat16, torch.float32
    for shape, dtype in (((262144, 256), bf), ((65536, 1024), bf), ((524288, 128), bf), ((131072, 512), bf),
                         ((262144, 256), f32), ((65536, 1024), f32), ((524288, 128), f32)):
        n = shape[-1]
        before = LaunchConfig(strategy="single_pass", BLOCK_M=1024 // n, BLOCK_N=n, num_warps=1)
        res = alternate_cfg("layer_norm", shape, dtype, -1, [("built-in", None), ("before", before)])
        print(f"lnrule layer_norm {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
              + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def probe_ln(copy: float) -> None:
    for dtype in (torch.bfloat16, torch.float32):
        vec = 16 // torch.empty((), dtype=dtype).element_size()
        for R, N in ((262144, 256), (131072, 512), (65536, 1024), (524288, 128)):
            x = torch.randn(R, N, device="cuda", dtype=dtype)
            w = torch.randn(N, device="cuda", dtype=dtype)
            b = torch.randn(N, device="cuda", dtype=dtype)
            ref = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double())
            fns = {"product": lambda x=x, w=w, b=b, N=N: tr.layer_norm(x, (N,), w, b)}
            for per_thread in (16, 32):
                for warps in (2, 4, 8):
                    c = N * vec // per_thread
                    if c > N or c < vec:
                        continue
                    block_m = per_thread * 32 * warps // N
                    if block_m < 1:
                        continue
                    for pre in (False, True):
                        label = f"M{block_m} C{c} w{warps}{' pre' if pre else ''}"

                        def fn(x=x, w=w, b=b, block_m=block_m, c=c, warps=warps, pre=pre):
                            return short_ln(x, w, b, block_m, c, warps, pre)
                        err = rel_err(fn(), ref)
                        if err < (1e-2 if dtype == torch.bfloat16 else 1e-5):
                            fns[label] = fn
                        else:
                            print(f"   WRONG {label} {err:.1e}")
            err = rel_err(fns["product"](), ref)
            res = alternate(fns, 2 * x.numel() * x.element_size() + 2 * N * x.element_size(), copy)
            top = sorted(res.items(), key=lambda kv: -kv[1])[:5]
            print(f"layer_norm {R}x{N} {str(dtype)[6:]}: product {res['product']:.1f} (err {err:.1e})  best "
                  + "  ".join(f"{k} {v:.1f}" for k, v in top), flush=True)


def main() -> None:
    steps = sys.argv[1:] or ["var", "bn"]
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s, {torch.cuda.get_device_name()}, triton {triton.__version__}", flush=True)
    if "var" in steps:
        probe_var(copy)
    if "bn" in steps:
        probe_bn(copy)
    if "rule" in steps:
        probe_rule()
    if "ln" in steps:
        probe_ln(copy)
    if "lnrule" in steps:
        probe_ln_rule()


if __name__ == "__main__":
    main()
