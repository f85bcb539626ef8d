"""Bitwise determinism: the same inputs give the same bits on repeated calls and in separate processes.

No kernel uses float atomics; split reductions combine their partials in a fixed order. Two fresh Python
processes (new compilation caches in memory, new allocations, new plans) must print the same digests as this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

_SCRIPT = r"""
import hashlib, json, sys
import torch
import tritred_ops as tr

def digests(device, big):
    g = torch.Generator().manual_seed(20261129)
    n = 70000 if big else 3000
    x = torch.randn((3, n), generator=g).to(device)            # few long rows: split / online strategies
    t = torch.randn((n // 10, 33), generator=g).to(device)     # tall: column kernels, dim=0
    b = torch.randn((4, 3, 7, 9), generator=g).to(device)
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    outs = {
        "sum": tr.sum(x, 1), "sum_all": tr.sum(x), "mean0": tr.mean(t, 0), "var": tr.var(x, 1),
        "std_mean0": tr.std_mean(t, 0)[0], "softmax": tr.softmax(x, -1), "logsumexp": tr.logsumexp(x, 1),
        "max": tr.max(x, 1).indices, "layer_norm": tr.layer_norm(x, (n,)),
        "batch_norm": tr.batch_norm(b, rm, rv, None, None, True, 0.1, 1e-5), "running_var": rv,
    }
    return {k: hashlib.sha256(v.detach().cpu().contiguous().numpy().tobytes()).hexdigest() for k, v in outs.items()}

print(json.dumps(digests(sys.argv[1], sys.argv[2] == "1")))
"""


def _digests_in_process(device: str, big: bool) -> dict[str, str]:
    scope: dict = {}
    exec(compile(_SCRIPT.split("print(json.dumps")[0], "determinism", "exec"), scope)  # noqa: S102
    return scope["digests"](device, big)


def test_repeated_calls_and_processes_agree(device):
    big = device == "cuda"
    here = _digests_in_process(device, big)
    assert here == _digests_in_process(device, big), "two calls in one process differ"
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    # (one other process: its compilation caches, allocations and plans are all new)
    run = subprocess.run([sys.executable, "-c", _SCRIPT, device, "1" if big else "0"], env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    other = json.loads(run.stdout.strip().splitlines()[-1])
    differ = sorted(k for k in here if here[k] != other.get(k))
    assert not differ, f"another process gives different bits for {differ}"
