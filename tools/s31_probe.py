"""Thirty-first session's probe on the H200: batch_norm training's statistics over *flat* tiles.

Why: the statistics launch reads the 103 MB of a 64x256x56x56 bf16 input in ~38-40 us (2.6 TB/s), where a row sum
over its (B*C, S) view reads them in 29.8 us (tools/s20_ab.py --reads). The built-in launch's programs walk
[BLOCK_M images, BLOCK_N spatial] tiles of their channel: 16 streams of 256 bytes at a time per program, ~17 000
streams over the device (8x256 tiles, 8 streams of 512 bytes, measured the same: segment length alone is not it).
A row sum has one stream per program: a whole plane, 6 KB in a row. Here each program of the statistics launch
walks its channel's (batch, spatial) elements as one flat sequence (image after image, each plane contiguous) in
tiles of TILE elements: one or two streams per program, 4 KB runs. A 16-byte vector never straddles two planes
when S is a multiple of the vector (GROUP); each vector's image and position are stepped along without a
division. Statistics per vector group as the built-in kernel (two-pass in registers, Chan merge), partials
``[C, SPLIT]`` laid out as the built-in launch's, so the built-in normalize launch reads them unchanged.

Prediction: the statistics launch toward the row sum's 30 us (64x256x56x56 bf16 training 52 -> ~58 %); float32
(3.6 TB/s already) +1-2 points.

Parts: ``flat`` (the statistics launch alone, built-in against flat variants, and the row sum for reference,
each do_bench median after its L2 flush; then whole training calls, the built-in against flat statistics + the
built-in normalize launch, checked against torch in float64).

Part ``evict``: the L2 eviction policy of batch_norm training's statistics and normalize loads (see
:func:`part_evict`). It needs the ``STATS_EVICT``/``APPLY_EVICT`` knobs of ``tritred_ops.batch_norm`` at commit
f9fcf55 (reverted in c1a881d: no policy gained); on later trees setting them does nothing.

Usage on a CUDA machine: python tools/s31_probe.py [flat] [evict]
"""

from __future__ import annotations

import functools
import math
import sys

import torch
import triton
import triton.language as tl
import tritred_ops as tr
from tritred_ops import _common as C
from tritred_ops._kernels import chan_fn, div_exact, stats_shift

sys.path.insert(0, "tools")
from bn_launch_times import launch_times  # noqa: E402 (each launch's own time after an L2 fill)

BN = sys.modules["tritred_ops.batch_norm"]
COPY = 4263e9
BF16, F32, F16 = torch.bfloat16, torch.float32, torch.float16


@triton.jit
def _flat_stats_kernel(x_ptr, pmean_ptr, pm2_ptr, pcnt_ptr, psum_ptr, S, s_b, s_c, groups, groups_per_split,
                       ACC: tl.constexpr, SPLIT: tl.constexpr, GROUP: tl.constexpr, TILE: tl.constexpr,
                       PREFETCH: tl.constexpr):
    """Partial (mean, M2, count, sum) of channel ``program_id(0)`` over groups [g_lo, g_hi) of its flat (batch,
    spatial) sequence, GROUP elements a group (S a multiple of GROUP), TILE elements a tile."""
    S = S // GROUP * GROUP  # (restated: the compiler sees the divisibility, vector loads)
    s_b = s_b // GROUP * GROUP
    s_c = s_c // GROUP * GROUP
    G: tl.constexpr = TILE // GROUP
    c = tl.program_id(0).to(tl.int64)
    s_g = S // GROUP  # groups per plane
    g_lo = tl.program_id(1) * groups_per_split
    g_hi = tl.minimum(groups, g_lo + groups_per_split)
    gi = g_lo + tl.arange(0, G)
    img = gi // s_g  # one division per group, once: later tiles step on
    pos = gi - img * s_g
    q = G // s_g  # a tile is q whole planes and r groups
    r = G - q * s_g
    inner = tl.arange(0, GROUP)
    xc = x_ptr + c * s_c
    shift = stats_shift(tl.load(xc).to(ACC))
    mean_g = tl.zeros([G], ACC)
    m2_g = tl.zeros([G], ACC)
    tot_g = tl.zeros([G], ACC)
    n_full = (g_hi - g_lo) // G
    if PREFETCH:
        x_next = tl.load(xc + (img.to(tl.int64) * s_b + pos * GROUP)[:, None] + inner[None, :],
                         mask=(n_full > 0), other=0)
    for t in range(n_full):
        if PREFETCH:
            x_raw = x_next
        else:
            x_raw = tl.load(xc + (img.to(tl.int64) * s_b + pos * GROUP)[:, None] + inner[None, :])
        pos += r
        img += q
        wrap = pos >= s_g
        pos = tl.where(wrap, pos - s_g, pos)
        img += wrap.to(tl.int32)
        if PREFETCH:
            x_next = tl.load(xc + (img.to(tl.int64) * s_b + pos * GROUP)[:, None] + inner[None, :],
                             mask=(t + 1 < n_full), other=0)
        xg = x_raw.to(ACC) - shift
        mean_x = tl.sum(xg * (1.0 / GROUP), 1)
        d = xg - mean_x[:, None]
        inv = div_exact(1.0, t + 1, ACC)
        delta = mean_x - mean_g
        mean_g += delta * inv
        m2_g += tl.sum(d * d, 1) + delta * (delta * (GROUP * t * inv))
        tot_g += mean_x * GROUP
    mean, m2, cnt = tl.reduce((mean_g, m2_g, tl.zeros([G], ACC) + GROUP * n_full), 0, chan_fn)
    rem = g_hi - g_lo - n_full * G  # groups in a last, partial tile
    if rem > 0:
        ok = tl.arange(0, G) < rem
        x_raw = tl.load(xc + (img.to(tl.int64) * s_b + pos * GROUP)[:, None] + inner[None, :],
                        mask=ok[:, None], other=0)
        xg = tl.where(ok[:, None], x_raw.to(ACC) - shift, 0.0)
        n_t = (rem * GROUP).to(ACC)
        m_t = div_exact(tl.sum(tl.sum(xg, 1), 0), n_t, ACC)
        d = tl.where(ok[:, None], xg - m_t, 0.0)
        corr = div_exact(tl.sum(tl.sum(d, 1), 0), n_t, ACC)
        m2_t = tl.sum(tl.sum(d * d, 1), 0) - corr * corr * n_t
        tot_g += tl.sum(xg, 1)
        mean, m2, cnt = chan_fn(mean, m2, cnt, m_t + corr, m2_t, n_t)
    at = c * SPLIT + tl.program_id(1)
    tl.store(pmean_ptr + at, mean)
    tl.store(pm2_ptr + at, m2)
    tl.store(pcnt_ptr + at, cnt)
    tl.store(psum_ptr + at, tl.sum(tot_g, 0))


def _params(x: torch.Tensor):
    c = x.shape[1]
    g = torch.Generator(device=x.device).manual_seed(c)
    return (torch.zeros(c, device=x.device), torch.ones(c, device=x.device),
            torch.randn(c, device=x.device, generator=g), torch.randn(c, device=x.device, generator=g))


def builtin_parts(x: torch.Tensor):
    """The built-in config and a function launching its statistics launch alone (as batch_norm() does)."""
    B, Ch, S = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    xb, xs, xc = Ch * S, 1, S
    cfg = C.decide(BN.SPEC, x, C.View(B, S, Ch, ((xb, xs, xc),)), make_problem=lambda: BN.problem(x))
    tiles = C.cdiv(B, cfg.BLOCK_M) * C.cdiv(S, cfg.BLOCK_N)
    split, tps = C.slices(tiles, cfg.split)
    bufs = [torch.empty((Ch, split), dtype=torch.float32, device=x.device) for _ in range(4)]
    group = min(16 // x.element_size(), cfg.BLOCK_M * cfg.BLOCK_N)

    def run():
        BN._stats_kernel[(Ch, split)](x, *bufs, B, S, Ch, xb, xs, xc, tps, ACC=tl.float32, SPLIT=split, GROUP=group,
                                      BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, BLOCK_K=1,
                                      DIV_S=BN._nchw_hint(S, (xb, xs, xc)), PREFETCH=cfg.num_stages > 1,
                                      num_warps=cfg.num_warps, num_stages=1)
    return cfg, run, bufs, split


def flat_parts(x: torch.Tensor, tile: int, warps: int, per_sm: int, prefetch: bool):
    B, Ch, S = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    group = 16 // x.element_size()
    while S % group:
        group //= 2
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    groups = B * S // group
    g_tile = tile // group
    want = max(1, per_sm * sm // Ch)
    split, gps = C.slices(groups, want, g_tile)
    bufs = [torch.empty((Ch, split), dtype=torch.float32, device=x.device) for _ in range(4)]

    def run():
        _flat_stats_kernel[(Ch, split)](x, *bufs, S, Ch * S, S, groups, gps, ACC=tl.float32, SPLIT=split,
                                        GROUP=group, TILE=tile, PREFETCH=prefetch, num_warps=warps)
    return run, bufs, split


def train_with(x, stats_run, bufs, split, cfg, params):
    """Training batch_norm: the given statistics launch, then the built-in normalize launch on its partials."""
    B, Ch, S = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    rm, rv, w, b = params
    y = torch.empty_like(x)
    tiles = C.cdiv(B, cfg.BLOCK_M) * C.cdiv(S, cfg.BLOCK_N)
    tps = C.cdiv(tiles, split)
    stats_run()
    pm, pm2, pn, psum = bufs
    BN._apply_kernel[(Ch * split * tps,)](
        x, y, pm, pm2, pn, psum, rm, rv, w, b, B, S, Ch, Ch * S, 1, S, Ch * S, 1, S, tps, 1,
        *BN.f32_split(1e-5), *BN.f32_split(0.1), FROM_RUNNING=False, RESIDENT=False, HAS_RUNNING=True, HAS_W=True,
        HAS_B=True, ACC=tl.float32, SPLIT=split, BLOCK_S=C.next_pow2(split), BLOCK_M=cfg.BLOCK_M,
        BLOCK_N=cfg.BLOCK_N, BLOCK_K=1, DIV_S=BN._nchw_hint(S, (Ch * S, 1, S), (Ch * S, 1, S)),
        num_warps=cfg.num_warps, **C.dependent_launch(x.device))
    return y


def pct(nbytes: int, ms: float) -> float:
    return 100 * nbytes / (ms * 1e-3) / COPY


CASES = [((64, 256, 56, 56), BF16), ((256, 64, 56, 56), BF16), ((64, 256, 56, 56), F32),
         ((32, 128, 112, 112), F16), ((64, 256, 28, 28), F16), ((128, 512, 14, 14), BF16), ((16, 64, 16, 32, 32), BF16)]
FLAT = [(2048, 2, 8, False), (2048, 2, 8, True), (2048, 4, 8, True), (4096, 4, 8, False), (4096, 4, 8, True),
        (4096, 8, 4, True), (2048, 2, 16, False), (1024, 1, 16, True)]
FLAT_LABELS = {f"flat{t}w{w}p{p}{'pf' if pf else ''}": (t, w, p, pf) for t, w, p, pf in FLAT}


def part_flat() -> None:
    from triton.testing import do_bench
    for shape, dtype in CASES:
        torch.manual_seed(0)
        x = (torch.randn(shape, device="cuda") * 2 + 0.5).to(dtype)
        nread = x.numel() * x.element_size()
        params = _params(x)
        ref = torch.nn.functional.batch_norm(x.double(), params[0].double().clone(), params[1].double().clone(),
                                             params[2].double(), params[3].double(), True, 0.1, 1e-5)
        ref_mean = x.double().transpose(0, 1).reshape(shape[1], -1).mean(1)
        ref_var = x.double().transpose(0, 1).reshape(shape[1], -1).var(1, correction=0)
        cfg, brun, _, bsplit = builtin_parts(x)
        rowsum = functools.partial(tr.sum, x.view(shape[0] * shape[1], -1), 1)
        line = {}
        for _ in range(2):  # two rounds, best kept
            line["rowsum"] = max(line.get("rowsum", 0), pct(nread, do_bench(rowsum, return_mode="median")))
            line["builtin"] = max(line.get("builtin", 0), pct(nread, do_bench(brun, return_mode="median")))
            for label, variant in FLAT_LABELS.items():
                run, bufs, _ = flat_parts(x, *variant)
                if label not in line:
                    for b_ in bufs:
                        b_.fill_(float("nan"))
                    run()
                    mean = bufs[0].double()  # shifted partials: merge them as the normalize launch does
                    shift = x.transpose(0, 1).reshape(shape[1], -1)[:, 0].double()
                    n = bufs[2].double()
                    tot_n = n.sum(1)
                    m = (mean * n).sum(1) / tot_n
                    m2 = (bufs[1].double() + n * (mean - m[:, None]) ** 2).sum(1)
                    err_m = ((m + shift - ref_mean).abs().max() / ref_var.sqrt().max()).item()
                    err_v = ((m2 / tot_n - ref_var).abs().max() / ref_var.max()).item()
                    if not (err_m < 1e-4 and err_v < 1e-4) or tot_n.min().item() != x.numel() // shape[1]:
                        print(f"   WRONG {shape} {label} err mean {err_m:.2e} var {err_v:.2e}", flush=True)
                line[label] = max(line.get(label, 0), pct(nread, do_bench(run, return_mode="median")))
        best = max(FLAT_LABELS, key=line.get)
        print(f"stats {shape} {str(dtype)[6:]} (builtin {cfg.BLOCK_M}x{cfg.BLOCK_N} w{cfg.num_warps} s{bsplit}"
              f" st{cfg.num_stages}), % copy of the read: " + "  ".join(f"{k} {v:.1f}" for k, v in line.items()),
              flush=True)
        # whole training calls: built-in op; flat statistics (the best variant) + the built-in normalize launch
        frun, fbufs, fsplit = flat_parts(x, *FLAT_LABELS[best])
        y = train_with(x, frun, fbufs, fsplit, cfg, _params(x))
        err = ((y.double() - ref).abs().max()).item()
        if not err < 3e-2:
            print(f"   WRONG training {shape} flat err {err:.2e}", flush=True)
        nb = 2 * nread
        res = {}
        for _ in range(3):
            p = _params(x)
            builtin = functools.partial(tr.batch_norm, x, *p, True, 0.1, 1e-5)
            res["builtin"] = max(res.get("builtin", 0), pct(nb, do_bench(builtin, return_mode="median")))
            flat = functools.partial(train_with, x, frun, fbufs, fsplit, cfg, p)
            res[best] = max(res.get(best, 0), pct(nb, do_bench(flat, return_mode="median")))
        print(f"train {shape} {str(dtype)[6:]}, % copy: " + "  ".join(f"{k} {v:.1f}" for k, v in res.items()),
              flush=True)


EVICT_CASES = [((64, 256, 56, 56), BF16), ((256, 64, 56, 56), BF16), ((64, 256, 56, 56), F32),
               ((256, 64, 56, 56), F32), ((32, 128, 112, 112), F16), ((16, 64, 16, 32, 32), BF16),
               ((128, 512, 14, 14), BF16), ((64, 128, 28, 28), F32)]
EVICT_VARIANTS = [("", ""), ("evict_first", ""), ("evict_first", "evict_first"), ("", "evict_first"),
                  ("evict_last", "")]


def part_evict() -> None:
    """The L2 eviction policy of batch_norm training's loads (statistics launch, normalize launch), A/B.

    Hypothesis: do_bench's L2 flush (a 256 MB fill before each call) leaves up to the L2's 60 MB dirty; a launch
    whose loads take the default policy evicts those lines and pays their write-back. A row sum with evict-first
    loads reads the same 103 MB at 80 % of copy, the statistics launch (default policy) at ~59 %. If so,
    evict-first statistics loads move the write-back into the normalize launch (no gain) unless its loads are
    evict-first too (then it may never happen in the call). Measured (docs/data/h200-s31-probe-evict.txt): the
    write-back moved (~4.5 us of 64x256x56x56 bf16's statistics launch), no policy gained."""
    from triton.testing import do_bench
    from tritred_core import get_registry
    reg = get_registry()
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for shape, dtype in EVICT_CASES:
        torch.manual_seed(0)
        x = (torch.randn(shape, device="cuda") * 2 + 0.5).to(dtype)
        nb = 2 * x.numel() * x.element_size()
        res: dict[str, float] = {}
        first = None
        for rnd in range(3):
            for st, ap in EVICT_VARIANTS:
                label = f"{st or 'none'}/{ap or 'none'}"
                BN.STATS_EVICT, BN.APPLY_EVICT = st, ap
                reg.cache.clear()
                run = functools.partial(tr.batch_norm, x, *_params(x), True, 0.1, 1e-5)
                y = run()
                if first is None:
                    first = y
                elif rnd == 0 and not torch.equal(y, first):
                    print(f"   DIFFERENT {shape} {label}", flush=True)
                res[label] = max(res.get(label, 0.0), pct(nb, do_bench(run, return_mode="median")))
                if rnd == 2 and st in ("", "evict_first") and ap == "":
                    lt = launch_times(run, flush)
                    res[label + " us"] = " + ".join(f"{t:.1f}" for t in lt)  # type: ignore[assignment]
        BN.STATS_EVICT, BN.APPLY_EVICT = "", ""
        print(f"evict {shape} {str(dtype)[6:]} (stats/normalize), % copy: "
              + "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} [{v}]" for k, v in res.items()),
              flush=True)


def main() -> None:
    parts = sys.argv[1:] or ["flat"]
    torch.cuda.init()
    if "flat" in parts:
        part_flat()
    if "evict" in parts:
        part_evict()


if __name__ == "__main__":
    main()
