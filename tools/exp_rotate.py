# ruff: noqa: B023, E501
"""H200 A/B experiments with rotating inputs (a developer's tool; the sixth session's numbers in
docs/data/h200-exp-2026-11-30-b.txt come from these).

Each timed call reads a different copy of its input (3 copies, cycled), so that no L2 residue of the previous
call can serve a read: an L2 hint such as evict-last could otherwise flatter a variant by surviving do_bench's
cache flush. Timing as the bench: ``triton.testing.do_bench`` median, bytes read + written once, % of the
device-to-device copy bandwidth measured in the same process.

Usage (CUDA only): python tools/exp_rotate.py [minimal] [hint] [warps] [ln-cap] [ln-preload] [tiles] [stats]
                   [split] [split-shapes] [split-bn] [split-ln] [split-bf16] [bn-one-tile]
                   [bn-chunks]

- minimal: stand-alone kernels beside the built-in ones, same input vs rotating inputs: a whole-row softmax with
  each load hint, and a row sum on 4/8/16 warps with each load hint (where the built-in kernels had headroom).
- hint: softmax and layer_norm single pass with each load hint (none / evict_first / evict_last), the built-in
  kernels (``single_load_evict`` replaced in their modules).
- warps: the plain reductions' whole-row tiles with ~32 elements per thread vs two 16-byte loads per thread.
- ln-cap: layer_norm's 16-warp single pass with and without its 64-register cap.
- ln-preload: layer_norm's single pass with weight and bias loaded after the statistics or with the row, on the
  built-in config and forced 4/8/16 warps (the seventh session's numbers: docs/data/h200-exp-2026-11-30-c.txt).
- tiles: short rows (256-1024) of var, max and sum: the built-in config beside forced tiles (rows x warps).
- stats: var/std rows past 8192 (loops of 8 or 16 warps, a single pass of 16 or 32 warps) and the plain
  reductions' and max's loops on 8/16/32 warps over 4096-16384-wide chunks.
- split: softmax split rows (programs meeting at a per-row barrier) with several chunk widths and warps, checked
  against torch and for determinism, beside the built-in config (docs/data/h200-exp-2026-11-30-d.txt).
- split-shapes: float32 softmax rows off the suite: the built-in config against the online loop.
- split-bn: batch_norm training with a channel's tiles held by programs together (``split_rows``: one read)
  against the built-in two launches, several tiles and warps; checked against torch (output and running
  statistics), for determinism, and with a channel holding inf and one holding NaN.
- split-bf16: bfloat16 softmax split rows with the bytes per program of float32's 8192 elements (16384 elements
  on 8 or 16 warps; ptxas: 110 and 64 registers) and 32768 on 16, against the built-in online loop.
- bn-one-tile: batch_norm whose channel fits one tile (one launch): the built-in warps (~64 elements per
  thread) against 1, 2, 4 and the earlier rule's 4+, training and eval, 7x7 and other small spatial sizes.
- bn-chunks: batch_norm training over channel chunks of 6-48 MB of input (statistics and normalize per chunk,
  the second read from L2) against one call over every channel; each variant captured in CUDA graphs.
- split-ln: layer_norm rows held by several programs (``split_rows``) against the built-in loop or single pass,
  checked against torch and for determinism first.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys

import torch
import triton
import triton.language as tl
import tritred_ops as T
import tritred_ops.heuristics  # noqa: F401  (the modules, not the functions the package exports)
import tritred_ops.layer_norm  # noqa: F401
import tritred_ops.softmax  # noqa: F401
from sweep import Force, close  # (tools/: forced configs, tolerant comparison with torch)
from triton.testing import do_bench
from tritred_core import LaunchConfig, get_registry

S, L, H = (sys.modules[f"tritred_ops.{m}"] for m in ("softmax", "layer_norm", "heuristics"))
COPIES = 3


def copy_gbps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def rotating(fn, xs: list) -> float:
    """Median ms of fn(xs[i]) with i cycling over the copies."""
    i = [0]

    def call():
        k = i[0] % len(xs)
        i[0] += 1
        fn(xs[k])
    return do_bench(call, warmup=10, rep=30, return_mode="median")


def fresh(shape, dtype) -> list:
    get_registry().cache.clear()  # (launch plans are cached per problem: re-decide after a replaced rule)
    return [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]


@triton.jit
def sm_single(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr, EVL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf"), eviction_policy=EVL).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * N + cols, (e * (1.0 / tl.sum(e, 0))).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def row_sum(x_ptr, y_ptr, R, N, BLOCK_N: tl.constexpr, EV: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0, eviction_policy=EV)
    tl.store(y_ptr + row, tl.sum(x.to(tl.float32), 0).to(y_ptr.dtype.element_ty))


def run_minimal(pct) -> None:
    for (R, N), dtype in itertools.product([(4096, 32768), (16384, 4096)], (torch.float32, torch.bfloat16)):
        xs = fresh((R, N), dtype)
        y = torch.empty_like(xs[0])
        nb = 2 * xs[0].numel() * xs[0].element_size()
        line = [f"built-in {pct(rotating(lambda x: T.softmax(x, -1), xs), nb):.1f}"]
        for w, ev in itertools.product((32,) if N == 32768 else (4, 8), ("", "evict_first", "evict_last")):
            same = do_bench(lambda: sm_single[(R,)](xs[0], y, N, BLOCK_N=N, EVL=ev, num_warps=w), warmup=10, rep=30,
                            return_mode="median")
            rot = rotating(lambda x: sm_single[(R,)](x, y, N, BLOCK_N=N, EVL=ev, num_warps=w), xs)
            line.append(f"w{w} {ev or 'none'} {pct(same, nb):.1f}/{pct(rot, nb):.1f}")
        print(f"softmax {R}x{N} {str(dtype)[6:]} (same/rotating): " + " | ".join(line), flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        R, N = 16384, 4096
        xs = fresh((R, N), dtype)
        y = torch.empty(R, device="cuda", dtype=dtype)
        nb = xs[0].numel() * xs[0].element_size() + R * xs[0].element_size()
        line = [f"built-in {pct(rotating(lambda x: T.sum(x, -1), xs), nb):.1f}"]
        for w, ev in itertools.product((4, 8, 16), ("", "evict_first", "evict_last")):
            line.append(f"w{w} {ev or 'none'} "
                        f"{pct(rotating(lambda x: row_sum[(R,)](x, y, R, N, BLOCK_N=N, EV=ev, num_warps=w), xs), nb):.1f}")
        print(f"row sum {R}x{N} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


SHAPES = [(16384, 4096), (4096, 32768), (65536, 1024), (8192, 8192), (2048, 16384), (262144, 256)]


def run_hint(pct) -> None:
    real = S.single_load_evict
    for shape, dtype in itertools.product(SHAPES, (torch.float32, torch.bfloat16)):
        N = shape[-1]
        w = torch.randn(N, device="cuda", dtype=dtype)
        b = torch.randn(N, device="cuda", dtype=dtype)
        line = []
        for op, fn in (("softmax", lambda x: T.softmax(x, -1)), ("layer_norm", lambda x: T.layer_norm(x, (N,), w, b))):
            res = []
            for hint in ("", "evict_first", "evict_last"):
                S.single_load_evict = L.single_load_evict = lambda op, num_warps, h=hint: h
                xs = fresh(shape, dtype)
                nb = 2 * xs[0].numel() * xs[0].element_size()
                res.append(f"{pct(rotating(fn, xs), nb):.1f}")
            line.append(f"{op} none/first/last {' / '.join(res)}")
        S.single_load_evict = L.single_load_evict = real
        print(f"{shape} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


def run_warps(pct) -> None:
    real = H._vector_warps
    for shape, dtype in itertools.product([(16384, 4096), (8192, 8192), (4096, 4096), (65536, 3000)],
                                          (torch.float32, torch.bfloat16)):
        line = []
        for op in ("sum", "amax", "mean"):
            res = []
            for rule in (lambda problem, elements, caps: H._warps(elements, caps), real):
                H._vector_warps = rule
                xs = fresh(shape, dtype)
                nb = xs[0].numel() * xs[0].element_size() + shape[0] * xs[0].element_size()
                res.append(pct(rotating(lambda x: getattr(T, op)(x, -1), xs), nb))
            line.append(f"{op} {res[0]:.1f} -> {res[1]:.1f}")
        H._vector_warps = real
        print(f"{shape} {str(dtype)[6:]} (~32 elements -> two vectors per thread): " + " | ".join(line), flush=True)


def run_ln_cap(pct) -> None:
    real = L._register_cap
    for shape, dtype in itertools.product([(2048, 16384), (4096, 16384)], (torch.float32, torch.bfloat16)):
        N = shape[-1]
        w = torch.randn(N, device="cuda", dtype=dtype)
        b = torch.randn(N, device="cuda", dtype=dtype)
        res = []
        for cap in (lambda single, num_warps: {}, real):
            L._register_cap = cap
            xs = fresh(shape, dtype)
            nb = 2 * xs[0].numel() * xs[0].element_size() + 2 * N * xs[0].element_size()
            res.append(pct(rotating(lambda x: T.layer_norm(x, (N,), w, b), xs), nb))
        L._register_cap = real
        print(f"layer_norm {shape} {str(dtype)[6:]}: uncapped {res[0]:.1f}, capped {res[1]:.1f}", flush=True)


def forced(pct, op: str, fn, ref, xs: list, nbytes: int, cfg: LaunchConfig | None) -> str:
    """% of copy bandwidth of fn with ``cfg`` forced (None: the built-in heuristic); checked against ref once."""
    reg = get_registry()
    reg.cache.clear()
    name = reg.register(Force(op, cfg), name="exp-force") if cfg is not None else None
    try:
        if not close(fn(xs[0]), ref(xs[0])):
            return "WRONG"
        return f"{pct(rotating(fn, xs), nbytes):.1f}"
    finally:
        if name:
            reg.unregister(name)
        reg.cache.clear()


def cfg_name(c: LaunchConfig | None) -> str:
    return "built-in" if c is None else f"{c.strategy} M{c.BLOCK_M} N{c.BLOCK_N} w{c.num_warps}"


def run_ln_preload(pct) -> None:
    real = L._preload_affine
    for shape, dtype in itertools.product([(16384, 4096), (8192, 8192), (32768, 2048), (65536, 1024),
                                           (100000, 768), (262144, 256), (4096, 16384)],
                                          (torch.float32, torch.bfloat16)):
        N = shape[-1]
        xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]
        w = torch.randn(N, device="cuda", dtype=dtype)
        b = torch.randn(N, device="cuda", dtype=dtype)
        nb = 2 * xs[0].numel() * xs[0].element_size() + 2 * N * xs[0].element_size()
        cfgs = [None] + [LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=N, num_warps=wp)
                         for wp in (4, 8, 16) if N in (2048, 4096, 8192) and N // (32 * wp) >= 4]
        line = []
        for cfg in cfgs:
            res = []
            for pre in (False, True):
                L._preload_affine = lambda dtype, single, align, num_warps, pre=pre: pre and single and not align
                res.append(forced(pct, "layer_norm", lambda x: T.layer_norm(x, (N,), w, b),
                                  lambda x: torch.nn.functional.layer_norm(x, (N,), w, b), xs, nb, cfg))
            line.append(f"{cfg_name(cfg)} after/with the row {res[0]} / {res[1]}")
        L._preload_affine = real
        print(f"layer_norm {shape} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


OPS = {  # name: (tritred, torch, extra output bytes per row besides the value)
    "sum": (lambda x: T.sum(x, -1), lambda x: torch.sum(x, -1), 0),
    "amax": (lambda x: T.amax(x, -1), lambda x: torch.amax(x, -1), 0),
    "var": (lambda x: T.var(x, -1), lambda x: torch.var(x.float(), -1).to(x.dtype), 0),
    "max": (lambda x: T.max(x, -1), lambda x: torch.max(x, -1), 8),
}


def case(pct, op: str, shape, dtype, cfgs) -> None:
    fn, ref, extra = OPS[op]
    R, N = shape
    xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]
    isz = xs[0].element_size()
    nb = R * N * isz + R * (isz + extra)
    print(f"{op} {shape} {str(dtype)[6:]}: " + " | ".join(f"{cfg_name(c)} {forced(pct, op, fn, ref, xs, nb, c)}"
                                                         for c in cfgs), flush=True)


def run_tiles(pct) -> None:
    def sp(m, n, w):
        return LaunchConfig(strategy="single_pass", BLOCK_M=m, BLOCK_N=n, num_warps=w)
    for (R, N), dtype in itertools.product([(262144, 256), (65536, 1024), (131072, 512)],
                                           (torch.bfloat16, torch.float32)):
        m1, m4 = max(1, 1024 // N), max(1, 4096 // N)
        for op in ("var", "max"):
            case(pct, op, (R, N), dtype, [None, sp(m1, N, 1), sp(2 * m1, N, 1), sp(2 * m1, N, 2), sp(4 * m1, N, 4),
                                          sp(2 * m1, N, 4)])
        case(pct, "sum", (R, N), dtype, [None, sp(m4, N, 4), sp(m4, N, 8), sp(2 * m4, N, 8), sp(m4, N, 16)])


def run_stats(pct) -> None:
    def mp(n, w):
        return LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=n, num_warps=w)

    def sp(n, w):
        return LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=n, num_warps=w)
    for (R, N), dtype in itertools.product([(4096, 16384), (2048, 16384), (4096, 32768), (2048, 32768)],
                                           (torch.bfloat16, torch.float32)):
        case(pct, "var", (R, N), dtype, [None, mp(4096, 8), mp(4096, 16), sp(N, 16), sp(N, 32)])
    for (R, N), op in itertools.product([(1024, 131072), (2048, 65536)], ("sum", "var", "max")):
        for dtype in (torch.bfloat16, torch.float32):
            case(pct, op, (R, N), dtype, [None, mp(4096, 8), mp(4096, 16), mp(8192, 16), mp(8192, 32)])


def run_split(pct) -> None:
    """softmax rows held by several programs (split rows, one cooperative launch) against the built-in loop."""
    def sr(n, w, split):
        return LaunchConfig(strategy="split", BLOCK_M=1, BLOCK_N=n, split=split, num_warps=w)
    for shape, dtype in itertools.product([(300, 100000), (7, 65537)], (torch.bfloat16, torch.float32)):
        x = torch.randn(shape, device="cuda", dtype=dtype) * 4
        x[1, : shape[1] // 2] = float("-inf")
        x[2] = float("-inf")
        x[3, 5] = float("nan")
        res = []
        for c in (sr(triton.next_power_of_2(shape[1] // 4), 16, 4), sr(8192, 8, 2)):
            for fn, ref in ((T.softmax, torch.softmax), (T.log_softmax, torch.log_softmax)):
                reg = get_registry()
                reg.cache.clear()
                name = reg.register(Force(fn.__name__, c), name="exp-force")
                try:
                    a, b = fn(x, -1), fn(x, -1)
                    res.append(f"{fn.__name__} {cfg_name(c)} s{c.split}: "
                               f"{'ok' if close(a, ref(x.double(), -1).to(dtype)) else 'WRONG'}"
                               f"{'' if torch.equal(a.nan_to_num(), b.nan_to_num()) else ' NONDETERMINISTIC'}")
                finally:
                    reg.unregister(name)
                    reg.cache.clear()
        print(f"check {shape} {str(dtype)[6:]}: " + "; ".join(res), flush=True)
    for (R, N), dtype in [((1024, 131072), torch.bfloat16), ((1024, 131072), torch.float32),
                          ((4096, 32768), torch.bfloat16), ((2048, 65536), torch.bfloat16),
                          ((2048, 65536), torch.float32)]:
        xs = [torch.randn((R, N), device="cuda", dtype=dtype) for _ in range(COPIES)]
        nb = 2 * xs[0].numel() * xs[0].element_size()
        tiles = ((4096, 4), (4096, 8), (8192, 8), (8192, 16), (16384, 32))
        cfgs = [None] + [sr(n, wp, N // n) for n, wp in tiles if n < N]
        for op, fn, ref in (("softmax", lambda x: T.softmax(x, -1), lambda x: torch.softmax(x, -1)),
                            ("log_softmax", lambda x: T.log_softmax(x, -1), lambda x: torch.log_softmax(x, -1))):
            line = [f"{cfg_name(c)}{'' if c is None else f' s{c.split}'} "
                    f"{forced(pct, op, fn, ref, xs, nb, c)}"
                    for c in cfgs]
            print(f"{op} {(R, N)} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


def run_split_shapes(pct) -> None:
    """float32 softmax rows past 32768 off the suite: the built-in split rows against the online loop it replaced."""
    loop = LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=16384, num_warps=32)
    for R, N in ((4096, 40000), (300, 100000), (2048, 50257), (64, 1 << 20), (8, 262144), (1, 1 << 22)):
        xs = [torch.randn((R, N), device="cuda") for _ in range(COPIES)]
        nb = 2 * xs[0].numel() * 4
        line = [f"{cfg_name(c)} {forced(pct, 'softmax', lambda x: T.softmax(x, -1), lambda x: torch.softmax(x, -1), xs, nb, c)}"
                for c in (None, loop)]
        print(f"softmax {(R, N)} float32: " + " | ".join(line), flush=True)


def run_split_bn(pct) -> None:
    """batch_norm training: split_rows (one read, a barrier per channel) against the built-in two launches."""
    def sr(m, n, w):
        return LaunchConfig(strategy="split_rows", BLOCK_M=m, BLOCK_N=n, num_warps=w)

    def bn(x, rm, rv, w, b, lib):
        return lib(x, rm, rv, w, b, True, 0.1, 1e-5)
    for shape, dtype in itertools.product([(6, 5, 33, 35), (64, 16, 56, 56)], (torch.bfloat16, torch.float32)):
        x = torch.randn(shape, device="cuda", dtype=dtype) * 3 + 1
        x[1, 1, 2, 3] = float("inf")
        x[2, 2, 0, 0] = float("nan")
        Ch = shape[1]
        res = []
        for c in (sr(2, 64, 4), sr(8, 128, 4), sr(64, 128, 8)):
            reg = get_registry()
            reg.cache.clear()
            name = reg.register(Force("batch_norm", c), name="exp-force")
            try:
                params = [torch.randn(Ch, device="cuda"), torch.rand(Ch, device="cuda") + 0.5,
                          torch.randn(Ch, device="cuda"), torch.randn(Ch, device="cuda")]
                ref_p = [p.double().clone() for p in params]
                ref = bn(x.double(), *ref_p, torch.nn.functional.batch_norm)
                mine = [p.clone() for p in params]
                a = bn(x, *mine, T.batch_norm)
                again = bn(x, *[p.clone() for p in params], T.batch_norm)
                ok = close(a, ref.to(dtype)) and all(close(m, r.float()) for m, r in zip(mine[:2], ref_p[:2]))
                res.append(f"{cfg_name(c)}: {'ok' if ok else 'WRONG'}"
                           f"{'' if torch.equal(a.nan_to_num(), again.nan_to_num()) else ' NONDETERMINISTIC'}")
            finally:
                reg.unregister(name)
                reg.cache.clear()
        print(f"check batch_norm {shape} {str(dtype)[6:]}: " + "; ".join(res), flush=True)
    for shape, dtype in itertools.product([(64, 256, 56, 56), (256, 64, 56, 56), (32, 128, 112, 112),
                                           (128, 512, 14, 14), (8, 64, 32, 64, 64)], (torch.bfloat16, torch.float32)):
        Ch = shape[1]
        xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]
        params = [torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda"), torch.randn(Ch, device="cuda"),
                  torch.randn(Ch, device="cuda")]
        nb = 2 * xs[0].numel() * xs[0].element_size()
        B = shape[0]
        cfgs = [None] + [sr(min(m, B), n, w) for m, n, w in ((32, 256, 8), (16, 256, 4), (64, 128, 8), (8, 512, 4))]
        line = [f"{cfg_name(c)} {forced(pct, 'batch_norm', lambda x: bn(x, *params, T.batch_norm), lambda x: bn(x, *[p.clone() for p in params], torch.nn.functional.batch_norm), xs, nb, c)}"
                for c in cfgs]
        print(f"batch_norm train {shape} {str(dtype)[6:]}: " + " | ".join(line), flush=True)
    # Small channels (a channel is one tile): one program per channel block, of 1-8 channels (NCHW: a block of K
    # channels is one contiguous run of K * 49 elements per image)
    for shape, dtype in itertools.product([(32, 2048, 7, 7), (64, 1024, 7, 7)], (torch.bfloat16, torch.float32)):
        Ch = shape[1]
        xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]
        params = [torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda"), torch.randn(Ch, device="cuda"),
                  torch.randn(Ch, device="cuda")]
        nb = 2 * xs[0].numel() * xs[0].element_size()
        m = triton.next_power_of_2(shape[0])
        cfgs = [None] + [LaunchConfig(strategy="split", BLOCK_M=m, BLOCK_N=64, BLOCK_K=k, num_warps=w)
                         for k, w in ((1, 1), (1, 2), (2, 4), (4, 4), (4, 8), (8, 8))]
        # (split_rows with one tile per channel: one program each, no barrier, a 1-D tile)
        cfgs += [LaunchConfig(strategy="split_rows", BLOCK_M=m, BLOCK_N=64, num_warps=w) for w in (2, 4)]
        line = [f"{cfg_name(c)}{'' if c is None else f' K{c.BLOCK_K}'} {forced(pct, 'batch_norm', lambda x: bn(x, *params, T.batch_norm), lambda x: bn(x, *[p.clone() for p in params], torch.nn.functional.batch_norm), xs, nb, c)}"
                for c in cfgs]
        print(f"batch_norm train {shape} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


def run_bn_one_tile(pct) -> None:
    """batch_norm whose channel is one tile (one launch from registers): warps of the built-in rule (~64 elements
    per thread) against 4+ warps (~32 per thread, the rule before) and others, training and eval, on and off the
    suite."""
    for shape, dtype in itertools.product([(32, 2048, 7, 7), (64, 1024, 7, 7), (16, 512, 7, 7), (128, 256, 7, 7),
                                           (32, 1024, 14, 14), (8, 256, 16, 16), (64, 64, 8, 8), (16, 128, 3, 3, 3)],
                                          (torch.bfloat16, torch.float32)):
        B, Ch, S = shape[0], shape[1], math.prod(shape[2:])
        whole = triton.next_power_of_2(B) * triton.next_power_of_2(S)
        ws = sorted({1, 2, 4, max(4, min(32, triton.next_power_of_2(whole // 1024)))})
        cfgs = [None] + [LaunchConfig(strategy="split", BLOCK_M=triton.next_power_of_2(B),
                                      BLOCK_N=triton.next_power_of_2(S), BLOCK_K=1, split=1, num_warps=w) for w in ws]
        xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]
        nb = 2 * xs[0].numel() * xs[0].element_size()
        for training in (True, False):
            params = [torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda"), torch.randn(Ch, device="cuda"),
                      torch.randn(Ch, device="cuda")]

            def mine(x):
                return T.batch_norm(x, *params, training, 0.1, 1e-5)

            def ref(x):
                return torch.nn.functional.batch_norm(x, *[p.clone() for p in params], training, 0.1, 1e-5)
            line = [f"{cfg_name(c)} {forced(pct, 'batch_norm', mine, ref, xs, nb, c)}" for c in cfgs]
            print(f"batch_norm {'train' if training else 'eval'} {shape} {str(dtype)[6:]}: " + " | ".join(line),
                  flush=True)


def run_bn_chunks(pct) -> None:
    """batch_norm training over channel chunks whose input fits in L2 (statistics then normalize per chunk, so
    that the normalize read can hit L2) against one call over every channel. Each variant is captured in a CUDA
    graph per input copy, so that the chunked variant's extra host calls do not count: the GPU time is measured."""
    for shape, dtype in itertools.product([(64, 256, 56, 56), (256, 64, 56, 56), (32, 128, 112, 112),
                                           (8, 64, 32, 64, 64)], (torch.bfloat16, torch.float32)):
        Ch = shape[1]
        xs = [torch.randn(shape, device="cuda", dtype=dtype) for _ in range(COPIES)]
        per_channel = xs[0].numel() // Ch * xs[0].element_size()
        params = [torch.zeros(Ch, device="cuda"), torch.ones(Ch, device="cuda"), torch.randn(Ch, device="cuda"),
                  torch.randn(Ch, device="cuda")]
        nb = 2 * xs[0].numel() * xs[0].element_size()
        whole = T.batch_norm(xs[0], *[p.clone() for p in params], True, 0.1, 1e-5)
        line = []
        for mb in (None, 6, 12, 24, 48):
            cc = Ch if mb is None else max(1, 1 << ((mb << 20) // per_channel).bit_length() - 1)
            if mb is not None and cc >= Ch:
                continue

            def run(x, cc=cc):
                return [T.batch_norm(x[:, c:c + cc], *[p[c:c + cc] for p in params], True, 0.1, 1e-5)
                        for c in range(0, Ch, cc)]
            try:
                ok = close(torch.cat(run(xs[0]), 1), whole)
                graphs = []
                for x in xs:
                    run(x)  # (plans recorded before the capture)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        run(x)
                    graphs.append(g)
                ms = rotating(lambda g: g.replay(), graphs)
            except Exception as e:  # noqa: BLE001  (a developer's experiment: report and go on)
                line.append(f"{cc} ch failed: {type(e).__name__}: {str(e)[:120]}")
                continue
            line.append(f"{'whole' if mb is None else f'{cc} ch ({cc * per_channel / 2**20:.0f} MB)'} "
                        f"{pct(ms, nb):.1f}{'' if ok else ' WRONG'}")
        print(f"batch_norm train chunks {shape} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


def run_split_ln(pct) -> None:
    """layer_norm split rows (programs meeting at a per-row barrier: one read) against the built-in config."""
    def sr(n, w, split):
        return LaunchConfig(strategy="split_rows", BLOCK_M=1, BLOCK_N=n, split=split, num_warps=w)
    for shape, dtype in itertools.product([(300, 100000), (7, 65537)], (torch.bfloat16, torch.float32)):
        N = shape[1]
        x = torch.randn(shape, device="cuda", dtype=dtype) * 4 + 100
        x[2] = 5.0
        x[3, 5] = float("nan")
        w = torch.randn(N, device="cuda", dtype=dtype)
        b = torch.randn(N, device="cuda", dtype=dtype)
        res = []
        for c in (sr(triton.next_power_of_2(N // 4), 16, 4), sr(8192, 8, 2)):
            reg = get_registry()
            reg.cache.clear()
            name = reg.register(Force("layer_norm", c), name="exp-force")
            try:
                a, again = T.layer_norm(x, (N,), w, b), T.layer_norm(x, (N,), w, b)
                ref = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double()).to(dtype)
                res.append(f"{cfg_name(c)} s{c.split}: {'ok' if close(a, ref) else 'WRONG'}"
                           f"{'' if torch.equal(a.nan_to_num(), again.nan_to_num()) else ' NONDETERMINISTIC'}")
            finally:
                reg.unregister(name)
                reg.cache.clear()
        print(f"check layer_norm {shape} {str(dtype)[6:]}: " + "; ".join(res), flush=True)
    for (R, N), dtype in itertools.product([(1024, 131072), (2048, 65536), (4096, 32768), (64, 1 << 20)],
                                           (torch.bfloat16, torch.float32)):
        xs = [torch.randn((R, N), device="cuda", dtype=dtype) for _ in range(COPIES)]
        w = torch.randn(N, device="cuda", dtype=dtype)
        b = torch.randn(N, device="cuda", dtype=dtype)
        nb = 2 * xs[0].numel() * xs[0].element_size() + 2 * N * xs[0].element_size()
        cfgs = [None] + [sr(n, wp, N // n) for n, wp in ((4096, 4), (8192, 8), (16384, 16)) if n < N]
        line = [f"{cfg_name(c)}{'' if c is None else f' s{c.split}'} "
                f"{forced(pct, 'layer_norm', lambda x: T.layer_norm(x, (N,), w, b), lambda x: torch.nn.functional.layer_norm(x, (N,), w, b), xs, nb, c)}"
                for c in cfgs]
        print(f"layer_norm {(R, N)} {str(dtype)[6:]}: " + " | ".join(line), flush=True)


def run_split_bf16(pct) -> None:
    """bfloat16 softmax split rows of 16-32K elements per program (8192 per program lost: 63% -> 58%)."""
    for (R, N) in ((1024, 131072), (2048, 65536), (4096, 32768)):
        xs = [torch.randn((R, N), device="cuda", dtype=torch.bfloat16) for _ in range(COPIES)]
        nb = 2 * xs[0].numel() * 2
        cfgs = [None] + [LaunchConfig(strategy="split_rows", BLOCK_M=1, BLOCK_N=n, split=N // n, num_warps=w)
                         for n, w in ((8192, 8), (16384, 8), (16384, 16), (32768, 16)) if n < N]
        line = [f"{cfg_name(c)}{'' if c is None else f' s{c.split}'} "
                f"{forced(pct, 'softmax', lambda x: T.softmax(x, -1), lambda x: torch.softmax(x, -1), xs, nb, c)}"
                for c in cfgs]
        print(f"softmax {(R, N)} bfloat16: " + " | ".join(line), flush=True)


def main() -> None:
    # (split rows that fall back to two launches say so at INFO: shown, so that a figure is not mistaken for
    # the one-read path's)
    logging.basicConfig(format="%(name)s: %(message)s")
    logging.getLogger("tritred").setLevel(logging.INFO)
    gbps = copy_gbps()
    print(f"copy {gbps:.0f} GB/s", flush=True)

    def pct(ms: float, nbytes: int) -> float:
        return nbytes / (ms * 1e-3) / 1e9 / gbps * 100
    steps = {"minimal": run_minimal, "hint": run_hint, "warps": run_warps, "ln-cap": run_ln_cap,
             "ln-preload": run_ln_preload, "tiles": run_tiles, "stats": run_stats, "split": run_split,
             "split-shapes": run_split_shapes, "split-bn": run_split_bn,
             "split-ln": run_split_ln, "split-bf16": run_split_bf16,
             "bn-one-tile": run_bn_one_tile, "bn-chunks": run_bn_chunks}
    for name in sys.argv[1:] or list(steps):
        steps[name](pct)


if __name__ == "__main__":
    main()
