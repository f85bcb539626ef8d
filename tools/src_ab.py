"""A kernel change A/B: the same cases timed with two source trees of tritred_ops, in alternating processes.

A change inside a kernel (not a launch config) cannot be forced through the heuristic hook; this runs each tree in
its own process (``--child``), alternating A, B, A, B, and keeps each case's better round (do_bench median,
% of the copy bandwidth, 4263 GB/s; bytes as the registry counts them, checked against torch once per process).

Usage on a CUDA machine: python tools/src_ab.py A_SRC B_SRC [C_SRC ...] [--cases NAME]   (directories holding a
``tritred_ops`` package, e.g. an exported base commit's packages/ops/src and this tree's; each timed against A)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

BF, F16, F32 = "bfloat16", "float16", "float32"
CASES = {  # name -> [(op, shape, dtype, dim)]
    "stats": [
        ("var", (262144, 256), BF, -1), ("std", (262144, 256), BF, -1), ("var_mean", (262144, 256), BF, -1),
        ("var", (16384, 4096), BF, -1), ("std", (65536, 1024), BF, -1), ("var", (100000, 384), BF, -1),
        ("layer_norm", (262144, 256), BF, -1), ("layer_norm", (65536, 1024), BF, -1),
        ("layer_norm", (16384, 4096), BF, -1), ("layer_norm", (100000, 768), BF, -1),
        ("layer_norm", (8192, 8192), BF, -1),
        ("var", (262144, 256), F16, -1), ("layer_norm", (16384, 4096), F32, -1),  # (controls: unchanged kernels)
    ],
    "stats2": [  # (the bfloat16 two-pass with its per-row correction against the corrected two-pass)
        ("var", (262144, 256), BF, -1), ("std", (262144, 256), BF, -1), ("var", (100000, 384), BF, -1),
        ("layer_norm", (262144, 256), BF, -1), ("layer_norm", (100000, 768), BF, -1),
        ("layer_norm", (8192, 8192), BF, -1), ("layer_norm", (65536, 1024), BF, -1),
        ("var", (262144, 256), F16, -1),  # (control: unchanged)
    ],
    "resid": [  # (layer_norm's bfloat16 single pass: the exact residual of the mean against the corrected two-pass)
        ("layer_norm", (262144, 256), BF, -1), ("layer_norm", (65536, 1024), BF, -1),
        ("layer_norm", (100000, 768), BF, -1), ("layer_norm", (16384, 4096), BF, -1),
        ("layer_norm", (8192, 8192), BF, -1), ("layer_norm", (200000, 300), BF, -1),
        ("layer_norm", (65536, 768), BF, -1), ("layer_norm", (4096, 32768), BF, -1),
        ("layer_norm", (65536, 1024), F32, -1), ("var", (262144, 256), BF, -1),  # (controls: unchanged)
    ],
    "loops": [  # (the row loops' lanes merged less a shift, _kernels.merge_lanes: layer_norm, var/std, columns)
        ("layer_norm", (1024, 131072), BF, -1), ("layer_norm", (1024, 131072), F32, -1),
        ("layer_norm", (4096, 32768), BF, -1), ("layer_norm", (2048, 65536), BF, -1),
        ("layer_norm", (16384, 5120), BF, -1), ("layer_norm", (16384, 5120), F32, -1),
        ("var", (1024, 131072), BF, -1), ("var_mean", (1024, 131072), F32, -1), ("std", (4096, 32768), BF, -1),
        ("var", (16384, 4096), BF, 0), ("var", (1000, 50000), F32, 0),
        ("var", (262144, 256), BF, -1),  # (control: the single pass, unchanged)
    ],
    "lnloop": [  # (layer_norm's loop: where its merge's shift is loaded)
        ("layer_norm", (1024, 131072), BF, -1), ("layer_norm", (1024, 131072), F32, -1),
        ("layer_norm", (4096, 32768), BF, -1), ("layer_norm", (4096, 32768), F32, -1),
        ("layer_norm", (2048, 65536), BF, -1), ("layer_norm", (16384, 5120), BF, -1),
        ("layer_norm", (2048, 16384), F32, -1), ("layer_norm", (8192, 12288), BF, -1),
        ("layer_norm", (16384, 4096), BF, -1),  # (control: the single pass)
    ],
    "cols": [  # (the column rule of heuristics._cols_config: a launch config, run from two trees all the same)
        ("sum", (64, 4096, 256), BF, 1), ("sum", (64, 4096, 256), F32, 1), ("amin", (64, 4096, 256), F32, 1),
        ("prod", (64, 4096, 256), BF, 1), ("mean", (16, 4096, 1000), BF, 1), ("mean", (16, 4096, 1000), F32, 1),
        ("sum", (128, 2048, 512), BF, 1), ("sum", (128, 2048, 512), F32, 1), ("mean", (1000, 50000), F32, 0),
        ("mean", (1000, 50000), BF, 0), ("mean", (32, 1000, 777), BF, 1), ("amax", (48, 3000, 640), F32, 1),
        ("sum", (16384, 4096), BF, 0),  # (control: unchanged)
    ],
    "lnrot": [  # (layer_norm loops: each program's sweeps rotated to start at its own chunk)
        ("layer_norm", (1024, 131072), BF, -1), ("layer_norm", (1024, 131072), F32, -1),
        ("layer_norm", (2048, 65536), BF, -1), ("layer_norm", (4096, 32768), BF, -1),
        ("layer_norm", (4096, 32768), F32, -1), ("layer_norm", (16384, 5120), BF, -1),
        ("layer_norm", (8192, 12288), BF, -1), ("layer_norm", (512, 151936), BF, -1),
        ("layer_norm", (16384, 4096), BF, -1),  # (control: single pass, unchanged)
    ],
    "bnhints": [  # (batch_norm training: L2 hints, statistics evict-last, normalize evict-first)
        ("batch_norm", (64, 256, 56, 56), BF, None), ("batch_norm", (64, 256, 56, 56), F32, None),
        ("batch_norm", (256, 64, 56, 56), BF, None), ("batch_norm", (256, 64, 56, 56), F32, None),
        ("batch_norm", (32, 96, 55, 55), BF, None), ("batch_norm", (128, 512, 14, 14), BF, None),
        ("batch_norm", (16, 64, 16, 32, 32), BF, None), ("batch_norm", (64, 128, 28, 28), F32, None),
        ("batch_norm", (32, 128, 112, 112), F16, None),
        ("batch_norm", (64, 256, 56, 56), BF, "eval"), ("batch_norm", (64, 256, 56, 56), F32, "eval"),
        ("batch_norm", (32, 2048, 7, 7), BF, None),  # (control: one launch, unchanged)
    ],
}


def child(src: str, cases: str) -> None:
    sys.path.insert(0, src)
    import torch
    import tritred_ops
    from sweep import close, make_call
    from triton.testing import do_bench

    assert tritred_ops.__file__.startswith(src), tritred_ops.__file__
    out = {}
    for op, shape, dtype, dim in CASES[cases]:
        run, ref, nbytes = make_call(op, tuple(shape), getattr(torch, dtype), dim)
        ok = close(run(), ref())
        ms = do_bench(run, return_mode="median")
        name = f"{op} {'x'.join(map(str, shape))} {dtype}{' eval' if dim == 'eval' else ''}"
        out[name] = (100 * nbytes / (ms * 1e-3) / 1e9 / 4263.0, ok)
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    args = sys.argv[1:]
    cases = "stats"
    if "--cases" in args:
        cases = args[args.index("--cases") + 1]
        del args[args.index("--cases"):args.index("--cases") + 2]
    srcs = [os.path.abspath(p) for p in args]
    labels = "ABCDEFGH"[:len(srcs)]  # (the child checks the path it imports)
    best: dict[str, dict[str, float]] = {label: {} for label in labels}
    for _ in range(2):
        for label, src in zip(labels, srcs):
            res = subprocess.run([sys.executable, __file__, "--child", src, cases], capture_output=True, text=True)
            if res.returncode:
                print(res.stderr[-3000:], flush=True)
                continue
            for name, (pct, ok) in json.loads(res.stdout.strip().splitlines()[-1]).items():
                if not ok:
                    print(f"   WRONG {label} {name}", flush=True)
                best[label][name] = max(best[label].get(name, 0.0), pct)
    print("  ".join(f"{label}: {src}" for label, src in zip(labels, srcs)))
    for name in best["A"]:
        pa = best["A"][name]
        got = {label: best[label].get(name, float("nan")) for label in labels[1:]}
        others = "  ".join(f"{label} {p:.1f} ({p - pa:+.1f})" for label, p in got.items())
        print(f"{name}: A {pa:.1f}  {others}", flush=True)


if __name__ == "__main__":
    main()
