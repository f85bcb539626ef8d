"""Config sweep on a GPU: time many launch configs per representative case, to design the heuristics.

Not a product feature (``tritred tune`` is): a measurement script for developers. Usage on a CUDA machine:

    for i in $(seq 0 7); do python tools/sweep.py --shard $i/8 --compile-only & done; wait   # fill the cache
    python tools/sweep.py --out sweep.json                                                  # time, serially

Each config is forced through a plugin (first non-None launch config wins), checked against torch once,
and timed with triton.testing.do_bench (median). Prints the best config per case next to the built-in one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math

import torch
import triton
from tritred_core import LaunchConfig, get_registry, hookimpl
from tritred_ops.tuning import PERSISTENT_ROWS

CASES = [
    # (op, shape, dtype, dim): the suite's cases furthest from the copy bandwidth, and neighbours
    ("sum", (16384, 4096), torch.bfloat16, -1),
    ("sum", (262144, 256), torch.bfloat16, -1),
    ("var", (262144, 256), torch.float32, -1),
    ("max", (16384, 4096), torch.bfloat16, -1),
    ("max", (262144, 256), torch.float32, -1),
    ("max", (1024, 131072), torch.bfloat16, -1),
    ("max", (16384, 4096), torch.float32, -1),
    ("softmax", (4096, 32768), torch.bfloat16, -1),
    ("softmax", (4096, 32768), torch.float32, -1),
    ("softmax", (1024, 131072), torch.bfloat16, -1),
    ("softmax", (65536, 1024), torch.bfloat16, -1),
    ("softmax", (262144, 256), torch.bfloat16, -1),
    ("layer_norm", (16384, 4096), torch.bfloat16, -1),
    ("layer_norm", (4096, 32768), torch.bfloat16, -1),
    ("layer_norm", (1024, 131072), torch.bfloat16, -1),
    ("layer_norm", (262144, 256), torch.bfloat16, -1),
    ("sum", (16384, 4096), torch.bfloat16, 0),
    ("sum", (16384, 4096), torch.float32, 0),
    ("var", (16384, 4096), torch.bfloat16, 0),
    ("sum", (64, 4096, 256), torch.bfloat16, 1),
    ("sum", (256, 262144), torch.bfloat16, 0),
    ("sum", (64, 4096, 256), torch.float32, 1),
    ("softmax", (1024, 131072), torch.float32, -1),
    ("softmax", (100000, 300), torch.bfloat16, -1),  # off the suite: odd widths (the rules, not the table)
    ("layer_norm", (50000, 768), torch.bfloat16, -1),
    ("var", (65536, 100), torch.float32, -1),
    ("softmax", (2048, 50257), torch.bfloat16, -1),
    ("batch_norm", (64, 256, 56, 56), torch.bfloat16, None),
    ("batch_norm", (256, 64, 56, 56), torch.bfloat16, None),
    ("batch_norm", (32, 2048, 7, 7), torch.bfloat16, None),
]


def _p2(lo: int, hi: int) -> list[int]:
    return [1 << i for i in range(int(math.log2(lo)), int(math.log2(hi)) + 1)]


def configs_for(op: str, shape: tuple[int, ...], dtype: torch.dtype, dim: int | None) -> list[LaunchConfig]:
    """A compact grid around what should be good: tile sizes x warps (x stages for loops)."""
    out: list[LaunchConfig] = []
    if op == "batch_norm":
        B, C, S = shape[0], shape[1], math.prod(shape[2:])
        for bn, bm, w, per_sm in itertools.product([64, 512, 2048], [1, 4, 32], [2, 4, 8], [2, 4, 8, 16]):
            if bn > 2 * triton.next_power_of_2(S) or bm * bn > 8192 or bm * bn < 512 or bm > B:
                continue
            if (bn, bm) not in ((64, 32), (512, 4)) and (w != 4 or per_sm not in (4, 8)):
                continue
            out.append(LaunchConfig(strategy="split", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=1,
                                    split=max(1, per_sm * 132 // C), num_warps=w))
        return out
    inner = dim in (-1, len(shape) - 1)
    N = shape[dim]
    if inner:
        R = math.prod(shape) // N
        full = triton.next_power_of_2(N)
        # (1024: loops over chunks that divide rows such as 5120 or 12288 with no masked lanes)
        widths = ({full} if full <= 32768 else set()) | {c for c in (1024, 2048, 4096, 8192, 16384) if c < full}
        for bn in sorted(widths):
            single = bn >= N
            for bm in (1, 2, 4, 8, 16, 32):
                if bm * bn > 32768 or bm * bn < (512 if full <= 1024 or bn < full else 2048) or bm > R:
                    continue
                for w in (1, 2, 4, 8, 16, 32):
                    if not 8 <= bm * bn // (32 * w) <= 64:
                        continue
                    strategy = "single_pass" if single else "multi_pass"
                    out.append(LaunchConfig(strategy=strategy, BLOCK_M=bm, BLOCK_N=bn, num_warps=w))
                    if not single and bm == 1 and w >= 8:  # software-pipelined loop loads
                        for st in (2, 3):
                            out.append(LaunchConfig(strategy=strategy, BLOCK_M=bm, BLOCK_N=bn, num_warps=w,
                                                    num_stages=st))
                    if op in PERSISTENT_ROWS and bm * bn <= 8192:  # persistent grids, 4 programs per SM
                        out.append(LaunchConfig(strategy=strategy, BLOCK_M=bm, BLOCK_N=bn, num_warps=w,
                                                num_programs=4 * 132, num_stages=2))
    else:
        # num_stages of the plain reductions' column kernel: tiles loaded per loop iteration
        tiles = [(32, 64), (64, 32), (64, 64), (128, 16), (128, 32), (256, 16)]
        splits = [1, 4, 8, 16]
        if op in ("softmax", "log_softmax", "layer_norm"):  # (no split; narrower column blocks: more programs)
            tiles, splits = [*tiles, (16, 64), (16, 128), (8, 128), (32, 32), (16, 32)], [1]
        for (bk, bn), w, sp in itertools.product(tiles, [4, 8], splits):
            strat = "split" if sp > 1 else "multi_pass"
            for st in (1, 2, 4) if (bk, bn) in ((64, 32), (128, 16), (256, 16)) else (1,):
                out.append(LaunchConfig(strategy=strat, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, split=sp, num_stages=st))
    return out


_INPUTS: dict = {}


def make_call(op: str, shape, dtype, dim):
    rec = get_registry().get(op)
    key = (op, shape, dtype, dim)
    if key not in _INPUTS:  # random inputs are made on the CPU: once per case, not once per config
        _INPUTS.clear()
        _INPUTS[key] = rec.make_inputs(shape, dtype, device="cuda", dim=dim, seed=0)
    args, kwargs = _INPUTS[key]
    if op in ("softmax", "sum", "var"):
        args, kwargs = (args[0], dim), {}
    if op == "max":
        args, kwargs = (args[0], dim), {}
    if op == "batch_norm" and dim == "eval":  # (the inputs' running statistics instead of the batch's)
        kwargs = {**kwargs, "training": False}
    nbytes = rec.byte_count(*args, **kwargs)

    def run():
        return rec.impl(*args, **kwargs)

    def ref():
        return rec.reference(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    return run, ref, nbytes


class Force:
    def __init__(self, op: str, config: LaunchConfig) -> None:
        self.op, self.config = op, config

    @hookimpl
    def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
        return self.config if spec.name == self.op else None


def alternate(op: str, shape, dtype, dim: int, variants, rounds: int = 2, call=None) -> dict[str, float]:
    """% of copy bandwidth (4263 GB/s) of each (label, config) variant of one call (config None: the built-in
    heuristic; a plugin object: its own hook), forced through a plugin, checked against torch once (WRONG printed
    on a mismatch), and timed ``rounds`` times in alternation (do_bench median, the best round kept). ``call``: a
    function giving (run, ref, bytes) for calls ``make_call`` does not build (default: ``make_call(op, shape,
    dtype, dim)``)."""
    from triton.testing import do_bench

    reg = get_registry()
    res: dict[str, float] = {}
    for _ in range(rounds):
        for label, cfg in variants:
            plugin = cfg if hasattr(cfg, "tritred_launch_config") else Force(op, cfg)  # (a plugin object)
            name = None if cfg is None else reg.register(plugin, name="ab")
            try:
                reg.cache.clear()
                run, ref, nbytes = call() if call is not None else make_call(op, shape, dtype, dim)
                if label not in res and not close(run(), ref()):
                    print(f"   WRONG {op} {shape} {label}", flush=True)
                pct = 100 * nbytes / (do_bench(run, return_mode="median") * 1e-3) / 1e9 / 4263.0
                res[label] = max(res.get(label, 0.0), pct)
            finally:
                if name:
                    reg.unregister(name)
    return res


def close(a, b) -> bool:
    if isinstance(a, tuple):
        return all(close(x, y) for x, y in zip(a, b))
    if not a.dtype.is_floating_point:
        return torch.equal(a, b)
    return torch.allclose(a.float(), b.float(), rtol=3e-2, atol=3e-2, equal_nan=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="comma-separated ops")
    ap.add_argument("--builtin", action="store_true", help="time the built-in config only")
    ap.add_argument("--no-align", action="store_true", help="without the shifted tiles of odd-width rows (A/B)")
    ap.add_argument("--case", action="append", default=[],
                    help="op:shape:dtype:dim instead of the built-in cases, e.g. sum:16384x4096:float32:-1")
    ap.add_argument("--seconds", type=float, default=1e9, help="stop timing after this long (results so far kept)")
    a = ap.parse_args()
    k, n = map(int, a.shard.split("/"))
    if a.no_align:
        import tritred_ops._common as common
        common.row_align = lambda *args, **kwargs: 0
    reg = get_registry()
    copy_gbps = 1.0
    if not a.compile_only:
        copy_src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        copy_dst = torch.empty_like(copy_src)
        copy_gbps = 2 * copy_src.numel() / triton.testing.do_bench(lambda: copy_dst.copy_(copy_src),
                                                                   return_mode="median") / 1e6
        del copy_src, copy_dst
    results = []
    cases = CASES
    if a.case:
        cases = [(op, tuple(int(d) for d in shape.split("x")), getattr(torch, dtype),
                  None if dim == "None" else int(dim)) for op, shape, dtype, dim in (c.split(":") for c in a.case)]
    jobs = [(c, cfg) for c in cases if not a.only or c[0] in a.only.split(",")
            for cfg in [None, *([] if a.builtin else configs_for(*c))]]
    import time
    t_end = time.time() + a.seconds
    last_case = None
    for j, ((op, shape, dtype, dim), cfg) in enumerate(jobs):
        if j % n != k:
            continue
        if time.time() > t_end:
            break
        if not a.compile_only and last_case is not None and last_case != (op, shape, dtype, dim):
            summarize([last_case], results, copy_gbps, a.out)
        last_case = (op, shape, dtype, dim)
        name = None
        if cfg is not None:
            name = reg.register(Force(op, cfg), name=f"sweep-{j}")
        try:
            run, ref, nbytes = make_call(op, shape, dtype, dim)
            out = run()
            ok = True if a.compile_only else close(out, ref())
            ms = float("nan") if a.compile_only or not ok else triton.testing.do_bench(run, warmup=10, rep=40,
                                                                                        return_mode="median")
        except Exception as e:  # a config that does not compile or run: record and go on
            ok, ms, nbytes = False, float("nan"), 0
            print(f"FAIL {op} {shape} {cfg}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        finally:
            if name:
                reg.unregister(name)
        pct = 100 * nbytes / ms / 1e6 / copy_gbps if ms == ms else float("nan")
        results.append(dict(op=op, shape=list(shape), dtype=str(dtype), dim=dim, ok=ok, ms=ms, pct=pct,
                            config=None if cfg is None else cfg.model_dump(exclude={"decided_by", "tuned"})))
        del run, ref
    if not a.compile_only and last_case is not None:
        summarize([last_case], results, copy_gbps, a.out)


def summarize(cases, results, copy_gbps, out) -> None:
    """Print built-in vs the best configs for ``cases``; rewrite the JSON with everything so far."""
    for case in cases:
        rows = [r for r in results if (r["op"], tuple(r["shape"]), r["dtype"], r["dim"]) ==
                (case[0], case[1], str(case[2]), case[3]) and r["ok"]]
        if not rows:
            continue
        base = next((r for r in rows if r["config"] is None), None)
        best = sorted((r for r in rows if r["config"] is not None), key=lambda r: r["ms"])[:3]
        base_pct = base["pct"] if base else float("nan")
        line = f"{case[0]} {case[1]} {str(case[2])[6:]} dim={case[3]}: builtin {base_pct:.0f}%"
        for b in best:
            c = b["config"]
            line += (f" | {b['pct']:.0f}% {c['strategy'][:5]} M{c['BLOCK_M']} N{c['BLOCK_N']} K{c['BLOCK_K']} "
                     f"w{c['num_warps']} s{c['num_stages']} sp{c['split']}")
        print(line, flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(dict(copy_gbps=copy_gbps, results=results), f)


if __name__ == "__main__":
    main()
