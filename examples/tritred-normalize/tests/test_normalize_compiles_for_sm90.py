"""Every variant of the normalize kernel compiles for an H200 (sm_90), without a GPU.

The interpreter runs a kernel's Python, so it cannot see what only compiling shows (a branch's types, an operation
the compiler does not take). Triton compiles for sm_90 without a GPU: this file, run as a script in a process
without ``TRITON_INTERPRET``, names an sm_90 target, lets CPU tensors through, decides with the H200's heuristic
(``FAKE_H200``) and compiles each launch (``JITFunction.warmup``) instead of running it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def test_every_kernel_variant_compiles_for_sm90() -> None:
    pytest.importorskip("triton.backends.nvidia.compiler", reason="this Triton has no NVIDIA backend")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    report = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, report
    assert report.count("ok ") == len(CALLS), report


# (label, shape, dim, dtype name): rows and columns, each strategy, each accumulator
CALLS = [
    ("rows single_pass float32", (4096, 1000), -1, "float32"),
    ("rows multi_pass bfloat16", (64, 20000), -1, "bfloat16"),
    ("rows single_pass float64", (64, 4096), -1, "float64"),
    ("rows multi_pass float64", (64, 10000), -1, "float64"),
    ("columns single_pass float16 (NCHW dim=1)", (8, 64, 14, 14), 1, "float16"),
    ("columns multi_pass float32", (4096, 256), 0, "float32"),
]


def main() -> int:
    assert not os.environ.get("TRITON_INTERPRET"), "run without TRITON_INTERPRET"
    import importlib

    import torch
    import tritred_core
    import tritred_normalize.plugin
    import tritred_ops.plugin
    from triton.runtime import driver
    from tritred_core.testing import FAKE_H200
    from tritred_ops.testing import Sm90Driver

    class CompileOnly:
        def __init__(self, kernel) -> None:  # noqa: ANN001
            self.kernel = kernel

        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *args, **kwargs: self.kernel.warmup(*args, grid=grid, **kwargs)

    mod = importlib.import_module("tritred_normalize.normalize")  # (the package's `normalize` is the function)
    reg = tritred_core.Registry(autoload=False)
    reg.register(tritred_ops.plugin, name="tritred_ops")
    reg.register(tritred_normalize.plugin, name="tritred_normalize")
    driver.set_active(Sm90Driver())
    mod.check_runnable = lambda op, x: None
    mod.launch_config = lambda spec, problem, device: reg.launch_config(spec, problem, FAKE_H200)
    mod._normalize_kernel = CompileOnly(mod._normalize_kernel)
    failed = 0
    for label, shape, dim, dtype in CALLS:
        try:
            mod.normalize(torch.empty(shape, dtype=getattr(torch, dtype)), dim=dim)
            print(f"ok     {label}", flush=True)
        except Exception as e:  # report every failing call, then fail
            failed += 1
            print(f"FAILED {label}: {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
