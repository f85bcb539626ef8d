"""A/B of the configs torch.compile keeps (``tools/inductor_dump.py``) in tritred's kernels, against the built-in.

A developer's measurement script. Inductor's looped reductions keep small tiles on many warps: layer_norm rows of
8192-32768 bf16 elements in 2048-wide chunks on 16 warps (4 elements per thread; 88 % of copy bandwidth on
8192x12288 where tritred's single pass gets 69 %), column sums in 64-output x 8-row tiles on 4 warps. The grid
of ``tools/sweep.py`` never held those (its row loops keep 8-64 elements per thread, its column tiles 16+ rows).

Usage on a CUDA machine: python tools/inductor_cfgs.py [rows|cols ...]
Each case: the built-in config and each candidate forced through a plugin (``tools/sweep.py``'s Force), checked
against torch once, timed alternately twice (do_bench median, the better of the two), % of copy bandwidth
(4263 GB/s; inputs read once, outputs written once).
"""

from __future__ import annotations

import sys

import torch
from sweep import Force, close, make_call
from triton.testing import do_bench
from tritred_core import LaunchConfig, get_registry

COPY_GBS = 4263.0
BF, F32 = torch.bfloat16, torch.float32


def _rows(n: int) -> list[LaunchConfig]:
    out = []
    for bn, w in ((1024, 8), (2048, 8), (2048, 16), (4096, 16), (4096, 32)):
        if bn < n:
            out.append(LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=bn, num_warps=w))
    return out


def _cols() -> list[LaunchConfig]:
    out = []
    for bk, bn, w, st in ((64, 8, 4, 1), (64, 8, 4, 2), (64, 8, 4, 4), (64, 4, 8, 1), (64, 4, 8, 4), (128, 8, 4, 2),
                          (128, 8, 8, 4), (64, 16, 4, 2), (32, 8, 4, 4)):
        out.append(LaunchConfig(strategy="multi_pass", BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=st))
    return out


ROWS = [("layer_norm", (8192, 12288), BF), ("layer_norm", (4096, 32768), BF), ("layer_norm", (1024, 131072), BF),
        ("layer_norm", (16384, 5120), BF), ("layer_norm", (8192, 12288), F32), ("layer_norm", (4096, 32768), F32),
        ("layer_norm", (16384, 8192), BF), ("softmax", (4096, 32768), BF), ("softmax", (1024, 131072), BF),
        ("log_softmax", (2048, 50257), BF), ("softmax", (8192, 16384), BF), ("var", (4096, 32768), BF)]
COLS = [("sum", (256, 262144), BF, 0), ("sum", (256, 262144), F32, 0), ("sum", (64, 4096, 256), BF, 1),
        ("sum", (64, 4096, 256), F32, 1), ("mean", (16, 4096, 1000), BF, 1), ("sum", (16384, 4096), BF, 0),
        ("mean", (1000, 50000), F32, 0), ("amin", (64, 4096, 256), F32, 1)]


def one(op, shape, dtype, dim, configs) -> None:
    reg = get_registry()
    cells: dict[str, float] = {}
    for _ in range(2):
        for cfg in [None, *configs]:
            name = None if cfg is None else reg.register(Force(op, cfg), name="candidate")
            try:
                reg.cache.clear()
                run, ref, nbytes = make_call(op, shape, dtype, dim)
                label = "builtin" if cfg is None else f"{cfg.BLOCK_N}x{cfg.BLOCK_K} w{cfg.num_warps} s{cfg.num_stages}"
                if label not in cells and not close(run(), ref()):
                    print(f"   WRONG {label}", flush=True)
                    continue
                pct = 100 * nbytes / (do_bench(run, return_mode="median") * 1e-3) / 1e9 / COPY_GBS
                cells[label] = max(cells.get(label, 0.0), pct)
            except Exception as e:  # noqa: BLE001 (a config that does not compile: say so, go on)
                print(f"   FAIL {cfg}: {type(e).__name__}: {str(e)[:160]}", flush=True)
            finally:
                if name:
                    reg.unregister(name)
    best = max(cells, key=cells.get)
    row = "  ".join(f"{k} {v:5.1f}" for k, v in cells.items())
    print(f"{op} {shape} {str(dtype)[6:]} dim={dim}: {row}  | best {best}", flush=True)


def main() -> None:
    parts = sys.argv[1:] or ["rows", "cols"]
    if "rows" in parts:
        for op, shape, dtype in ROWS:
            one(op, shape, dtype, -1, _rows(shape[-1]))
    if "cols" in parts:
        for op, shape, dtype, dim in COLS:
            one(op, shape, dtype, dim, _cols())


if __name__ == "__main__":
    main()
