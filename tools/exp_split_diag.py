# ruff: noqa: E501
"""softmax split rows: each (dtype, config) in its own process with a time limit, so that a case that does not
finish (a barrier never met, or a compile that takes minutes) is reported as such and the next case still runs.
A developer's tool (CUDA). The eighth session's run (docs/data/h200-exp-2026-11-30-d.txt) also had layer_norm
split rows and a prefetch switch, both dropped since.

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
op, dt, n, w = sys.argv[1], getattr(torch, sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
real_groups = C._coop_groups
info = {}
def groups(*a, **k):
    g = real_groups(*a, **k)
    info["groups"] = g
    return g
C._coop_groups = groups
fn, ref = lambda x: T.softmax(x, -1), lambda x: torch.softmax(x.double(), -1).to(x.dtype)
get_registry().register(Force(op, LaunchConfig(strategy="split", BLOCK_N=n, split=131072 // n, num_warps=w)), name="f")
x = torch.randn(300, 100000, device="cuda", dtype=dt) * 3
x[1, :500] = float("-inf")
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
    for dt, (n, w) in itertools.product(("float32", "bfloat16"), ((8192, 8), (16384, 16), (32768, 16))):
        print(f"softmax {dt} N{n} w{w}:", end=" ", flush=True)
        try:
            r = subprocess.run([sys.executable, "-c", CASE, "softmax", dt, str(n), str(w)], capture_output=True,
                               text=True, timeout=limit)
            print(r.stdout.strip() or r.stderr.strip().splitlines()[-1], flush=True)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            print(f"{out.strip()} HANG (no result in {limit} s)", flush=True)


if __name__ == "__main__":
    main()
