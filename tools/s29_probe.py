"""Twenty-ninth session's probe on the H200.

Part A (``cols3``): split softmax columns with a merge launch between the two (``softmax._cols_merge_kernel``:
each column's partials merged once, the writing programs reading one pair per column) against the writing
programs merging all partials themselves, at the built-in slice count and at more slices, which the inline merge
made too costly (K x split^2 partial reads). ``softmax.MERGE_INLINE`` is set by each variant's plugin when the
launch is decided (the decision is recorded in the call's replay plan). Also 32-row tiles. ``tools/sweep.py``'s
``alternate``: checked against torch, best of two rounds, do_bench median, % of 4263 GB/s.

Part B (``ln2``): 2-byte layer_norm rows of 1920-2048: two rows a program (the twenty-eighth session's lead:
+3-5 points in one round) against the built-in single pass of one row on 4 warps.

Part C (``val``): both rules taken from A and B (built-in now) against the configs they replaced, on shapes
they were not chosen on, and logsumexp's columns, whose slices the rule also raised (not in part A).

Part D (``val2``): logsumexp's columns again after they too took the merge launch (part C: 32768x512 fp32 lost
26.2 -> 12.9 %, one program per column block holding all partials); layer_norm's two-row rule near its
row-count bound; and where the time of std over (0, 2, 3) of a small NCHW input goes (the whole call, its rows
launch alone as a dim=-1 std of the (B*C, H*W) view, and batch_norm training of the same input).

Part E (``narrow``): split columns over blocks narrower than 128 (K < 128): the built-in slice count (now with
the merge launch) against the same count merged inline (before this session) and half and twice as many.

Usage on a CUDA machine: python tools/s29_probe.py [cols3] [ln2] [val] [val2] [narrow]
"""

from __future__ import annotations

import importlib
import sys

import torch
from tritred_core import LaunchConfig, hookimpl

sys.path.insert(0, "tools")
from sweep import alternate  # noqa: E402

S = importlib.import_module("tritred_ops.softmax")
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


class Merge:
    """Forces ``config`` (None: the built-in one) and sets ``softmax.MERGE_INLINE`` when the launch is decided."""

    def __init__(self, op: str, config: LaunchConfig | None, inline: int) -> None:
        self.op, self.config, self.inline = op, config, inline

    @hookimpl(tryfirst=True)
    def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
        if spec.name != self.op:
            return None
        S.MERGE_INLINE = self.inline
        return self.config


COLS3_CASES = [  # (op, shape, dim, forced slice counts)
    ("softmax", (8192, 8192), 0, (16, 32, 64)),
    ("log_softmax", (8192, 8192), 0, (16, 32)),
    ("softmax", (4096, 4096), 0, (16, 32, 64)),
    ("softmax", (32768, 1024), 0, (64, 128)),
    ("softmax", (32768, 512), 0, (64, 128, 256)),
    ("log_softmax", (16384, 256), 0, (64, 128, 256)),
    ("softmax", (16, 4096, 1000), 1, (16, 32, 64)),
]


def cols3() -> None:
    never, always = 1 << 30, 1
    for op, shape, dim, splits in COLS3_CASES:
        for dtype in (BF16, F32):
            def cfg(sp: int, rows: int = 16) -> LaunchConfig:
                return LaunchConfig(strategy="split", BLOCK_N=rows, BLOCK_K=128, num_warps=4, split=sp)
            variants = [("builtin", Merge(op, None, never)), ("builtin merged", Merge(op, None, always))]
            variants += [(f"s{sp} merged", Merge(op, cfg(sp), always)) for sp in splits]
            variants += [(f"s{splits[0]} inline", Merge(op, cfg(splits[0]), never))]
            variants += [(f"s{splits[0]} 32-row merged", Merge(op, cfg(splits[0], 32), always))]
            res = alternate(op, shape, dtype, dim, variants, rounds=2)
            print(f"{op} dim={dim} {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
                  + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    S.MERGE_INLINE = 8


def ln2() -> None:
    for n, dtype in ((2048, BF16), (2000, BF16), (1920, BF16), (2048, F16), (2000, F16)):
        variants = [("builtin", None)] + [
            (f"M{m} w{w}", LaunchConfig(strategy="single_pass", BLOCK_M=m, BLOCK_N=2048, num_warps=w))
            for m, w in ((2, 4), (2, 8), (4, 8), (1, 2))]
        for rows in (2**26 // n, 8192):
            res = alternate("layer_norm", (rows, n), dtype, -1, variants, rounds=2)
            print(f"layer_norm {rows}x{n} {str(dtype)[6:]}: " + " | ".join(f"{k} {v:.1f}" for k, v in res.items()),
                  flush=True)


def _old_cols(op: str, shape, dim: int) -> LaunchConfig:
    """The split columns' config before this session: slices up to 4 programs per SM, softmax's at most 64."""
    m = 1 if dim == 0 else shape[0]
    n, k = shape[dim], (shape[-1] if dim != len(shape) - 1 else 1)
    blocks = m * -(-k // 128)
    split = min(max(8, 528 // blocks), -(-n // 64), 1 << 30 if op == "logsumexp" else 64)
    return LaunchConfig(strategy="split", BLOCK_N=16, BLOCK_K=128, num_warps=4, split=split)


VAL_COLS = [
    ("softmax", (8192, 8192), 0, BF16), ("log_softmax", (16384, 256), 0, BF16), ("softmax", (12000, 3000), 0, BF16),
    ("log_softmax", (50000, 768), 0, F32), ("softmax", (32, 2048, 512), 1, BF16), ("softmax", (2048, 2048), 0, F32),
    ("softmax", (100000, 384), 0, F16), ("logsumexp", (65536, 1024), 0, BF16), ("logsumexp", (32768, 512), 0, F32),
    ("logsumexp", (8192, 8192), 0, BF16),
]

VAL_LN = [((1024, 2048), BF16), ((65536, 1800), BF16), ((40000, 2047), BF16), ((16384, 1984), F16),
          ((50000, 1600), BF16), ((30000, 1700), F16), ((4096, 2000), BF16), ((100000, 2048), BF16)]


def _cols_rule_vs_old(op: str, shape, dim: int, dtype) -> None:
    """The built-in split columns (merge launch past 8 slices) against the config they replaced, merged inline."""
    old = _old_cols(op, shape, dim)
    res = alternate(op, shape, dtype, dim, [("rule", Merge(op, None, 8)), ("old", Merge(op, old, 1 << 30))],
                    rounds=3)
    print(f"{op} dim={dim} {'x'.join(map(str, shape))} {str(dtype)[6:]} (old split {old.split}): "
          + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def val() -> None:
    for op, shape, dim, dtype in VAL_COLS:
        _cols_rule_vs_old(op, shape, dim, dtype)
    S.MERGE_INLINE = 8
    for shape, dtype in VAL_LN:
        old = LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=2048, num_warps=4)
        res = alternate("layer_norm", shape, dtype, -1, [("rule", None), ("old M1 w4", old)], rounds=3)
        print(f"layer_norm {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
              + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


def val2() -> None:
    for op, shape, dim, dtype in [("logsumexp", (32768, 512), 0, F32), ("logsumexp", (65536, 1024), 0, BF16),
                                  ("logsumexp", (16384, 256), 0, F32), ("logsumexp", (8192, 8192), 0, BF16)]:
        _cols_rule_vs_old(op, shape, dim, dtype)
    S.MERGE_INLINE = 8
    for shape, dtype in [((1024, 2048), BF16), ((1056, 2048), BF16), ((2048, 2048), BF16), ((2048, 1920), F16)]:
        old = LaunchConfig(strategy="single_pass", BLOCK_M=1, BLOCK_N=2048, num_warps=4)
        two = LaunchConfig(strategy="single_pass", BLOCK_M=2, BLOCK_N=2048, num_warps=4)
        res = alternate("layer_norm", shape, dtype, -1, [("rule", None), ("M1 w4", old), ("M2 w4", two)], rounds=3)
        print(f"layer_norm {'x'.join(map(str, shape))} {str(dtype)[6:]}: "
              + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    for shape, dtype in [((64, 128, 28, 28), F32), ((128, 512, 14, 14), BF16), ((64, 256, 56, 56), BF16)]:
        _std_times(shape, dtype)


def _std_times(shape, dtype) -> None:
    """do_bench medians of std over (0, 2, 3) and its neighbours on one NCHW input."""
    import tritred_ops as tr
    from triton.testing import do_bench

    x = torch.randn(shape, device="cuda", dtype=dtype)
    b, c = shape[:2]
    rows = x.view(b * c, -1)
    w, bias = torch.ones(c, device="cuda"), torch.zeros(c, device="cuda")
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    calls = {"std (0,2,3)": lambda: tr.std(x, (0, 2, 3)), "std rows (B*C, H*W)": lambda: tr.std(rows, -1),
             "sum (0,2,3)": lambda: tr.sum(x, (0, 2, 3)),
             "batch_norm train": lambda: tr.batch_norm(x, rm, rv, w, bias, True, 0.1, 1e-5),
             "torch std (0,2,3)": lambda: torch.std(x, (0, 2, 3))}
    parts = []
    for k, f in calls.items():
        f()
        parts.append(f"{k} {do_bench(f, return_mode='median') * 1e3:.1f} us")
    mb = x.numel() * x.element_size() / 1e6
    print(f"{'x'.join(map(str, shape))} {str(dtype)[6:]} ({mb:.0f} MB, read at 4263 GB/s: "
          f"{mb / 4263e3 * 1e6:.1f} us): " + " | ".join(parts), flush=True)


NARROW_CASES = [("log_softmax", (65536, 64), 64), ("softmax", (100000, 100), 64), ("softmax", (262144, 32), 32),
                ("logsumexp", (65536, 64), 64), ("softmax", (8, 8192, 64), 64)]


def narrow() -> None:
    never = 1 << 30
    for op, shape, bk in NARROW_CASES:
        dim = len(shape) - 2
        m = 1 if dim == 0 else shape[0]
        blocks = m * -(-shape[-1] // bk)
        split = min(max(1, 528 // blocks), -(-shape[dim] // 128))
        cfgs = {sp: LaunchConfig(strategy="split", BLOCK_N=32, BLOCK_K=bk, num_warps=4, split=sp)
                for sp in (split // 2, split, split * 2)}
        for dtype in (BF16, F32):
            variants = [("builtin", Merge(op, None, 8)), (f"s{split} inline", Merge(op, cfgs[split], never))]
            variants += [(f"s{sp}", Merge(op, cfgs[sp], 8)) for sp in (split // 2, split * 2)]
            res = alternate(op, shape, dtype, dim, variants, rounds=2)
            print(f"{op} dim={dim} {'x'.join(map(str, shape))} {str(dtype)[6:]} (built-in split {split}): "
                  + " | ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    S.MERGE_INLINE = 8


if __name__ == "__main__":
    for p in sys.argv[1:] or ["cols3", "ln2"]:
        print(f"== {p}", flush=True)
        {"cols3": cols3, "ln2": ln2, "val": val, "val2": val2, "narrow": narrow}[p]()
