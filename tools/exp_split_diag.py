# ruff: noqa: E501
"""Split rows (softmax, layer_norm): each (op, dtype, config, prefetch) in its own process with a time limit, so
that a hang (a barrier never met) is reported as such and the next case still runs. A developer's tool (CUDA).

Usage: python tools/exp_split_diag.py [seconds per case]
"""

from __future__ import annotations

import itertools
import subprocess
import sys

CASE = r'''
import sys, torch, tritred_ops as T
sys.path.insert(0, "tools")
import tritred_ops._common as C
from exp_rotate import copy_gbps, rotating, COPIES
from sweep import Force, close
from tritred_core import LaunchConfig, get_registry
op, dt, n, w, pre = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
real_groups, real_launch = C._coop_groups, C.launch_split_rows
info = {}
def groups(*a, **k):
    g = real_groups(*a, **k)
    info["groups"] = g
    return g
def launch(rec, kernel, x, rows, split, num_programs, args, kwargs):
    real_launch(rec, kernel, x, rows, split, num_programs, args, {**kwargs, "PREFETCH": pre})
C._coop_groups, C.launch_split_rows = groups, launch
fns = {"softmax": (lambda x: T.softmax(x, -1), lambda x: torch.softmax(x.double(), -1).to(x.dtype)),
       "layer_norm": (lambda x: T.layer_norm(x, x.shape[-1:]), lambda x: torch.nn.functional.layer_norm(x.double(), x.shape[-1:]).to(x.dtype))}
fn, ref = fns[op]
get_registry().register(Force(op, LaunchConfig(strategy="split", BLOCK_N=n, split=131072 // n, num_warps=w)), name="f")
x = torch.randn(300, 100000, device="cuda", dtype=dt) * 3
x[1, :500] = float("-inf") if op == "softmax" else 1e4
ok = close(fn(x), ref(x)) and torch.equal(fn(x), fn(x))
torch.cuda.synchronize()
print(f"groups {info.get('groups')} check {'ok' if ok else 'WRONG'}", end=" ", flush=True)
gbps = copy_gbps()
xs = [torch.randn(1024, 131072, device="cuda", dtype=dt) for _ in range(COPIES)]
ms = rotating(fn, xs)
print(f"1024x131072 {2 * xs[0].numel() * xs[0].element_size() / (ms * 1e-3) / 1e9 / gbps * 100:.1f} %", flush=True)
'''


def main() -> None:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    for op, dt, (n, w), pre in itertools.product(("softmax", "layer_norm"), ("float32", "bfloat16"),
                                                  ((8192, 8), (32768, 16)), ("1", "0")):
        print(f"{op} {dt} N{n} w{w} prefetch={pre}:", end=" ", flush=True)
        try:
            r = subprocess.run([sys.executable, "-c", CASE, op, dt, str(n), str(w), pre], capture_output=True,
                               text=True, timeout=limit)
            print(r.stdout.strip() or r.stderr.strip().splitlines()[-1], flush=True)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            print(f"{out.strip()} HANG (no result in {limit} s)", flush=True)


if __name__ == "__main__":
    main()
