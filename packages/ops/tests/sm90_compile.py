"""Compile, for an H200 (sm_90), the kernels that tritred's ops launch on a list of calls: no GPU needed.

Run as a script in a process WITHOUT ``TRITON_INTERPRET`` (the interpreter replaces the JIT functions). Triton's
active driver is replaced by one that names an sm_90 target, the ops see an H200 (``FAKE_H200``: the GPU
heuristics decide), CPU tensors are let through, and each launch compiles (``JITFunction.warmup``) instead of
running. Catches what only compiling shows: a variable typed differently in two branches, an unsupported op in
a branch the interpreter takes in Python. Prints one line per call; exits 1 if any failed.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

assert not os.environ.get("TRITON_INTERPRET"), "run without TRITON_INTERPRET"

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402


class _Sm90Driver:
    """The few calls JITFunction.warmup makes of the active driver."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


def _patch() -> None:
    import tritred_ops._common as C
    import tritred_ops._replay as R
    from tritred_core.testing import FAKE_H200

    driver.set_active(_Sm90Driver())
    C.check_runnable = lambda op, x: None
    C.device_info = lambda device: FAKE_H200

    def compile_only(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        kernel.warmup(*args, grid=grid, **kwargs)
    R.Recorder.launch = compile_only
    for name in ("reduce", "statistics", "softmax", "layer_norm", "batch_norm"):
        mod = sys.modules[f"tritred_ops.{name}"]
        mod.find_plan = lambda *a, **k: (None, None)  # (no replay plans: nothing is ever launched)


def calls():
    import tritred_ops as tr
    bf, f32 = torch.bfloat16, torch.float32
    r = lambda *s, dtype=f32: torch.randn(*s, dtype=dtype)  # noqa: E731
    yield "sum rows single", lambda: tr.sum(r(64, 300, dtype=bf), -1)
    yield "sum rows unrolled loop", lambda: tr.sum(r(16, 16384, dtype=bf), -1)
    yield "sum rows split", lambda: tr.sum(r(4, 100000), -1)
    yield "sum columns short tiles", lambda: tr.sum(r(256, 2048, dtype=bf), 0)
    yield "amax columns split", lambda: tr.amax(r(16384, 64), 0)
    yield "prod staged dims", lambda: tr.prod(r(4, 6, 9), 1)
    yield "mean two dims", lambda: tr.mean(r(4, 8, 6, 6), (0, 2, 3))
    yield "max rows", lambda: tr.max(r(64, 1000, dtype=bf), -1)
    yield "min columns", lambda: tr.min(r(512, 256), 0)
    yield "var rows unrolled", lambda: tr.var(r(16, 12288, dtype=bf), -1)
    yield "var_mean rows single", lambda: tr.var_mean(r(64, 1000), -1)
    yield "std rows split", lambda: tr.std(r(4, 200000), -1)
    yield "var columns", lambda: tr.var(r(4096, 512, dtype=bf), 0)
    yield "var two axes unrolled", lambda: tr.var(r(2, 4, 5120, dtype=bf).view(2, 4, 64, 80), (0, 2, 3))
    yield "softmax rows single", lambda: tr.softmax(r(64, 1000, dtype=bf), -1)
    yield "log_softmax rows loop", lambda: tr.log_softmax(r(8, 50257, dtype=bf), -1)
    yield "softmax split rows", lambda: tr.softmax(r(4, 131072), -1)
    yield "logsumexp columns", lambda: tr.logsumexp(r(4096, 128), 0)
    yield "layer_norm single", lambda: tr.layer_norm(r(64, 1024, dtype=bf), (1024,), r(1024, dtype=bf),
                                                     r(1024, dtype=bf))
    yield "layer_norm unrolled", lambda: tr.layer_norm(r(16, 12288, dtype=bf), (12288,), r(12288, dtype=bf))
    yield "layer_norm loop", lambda: tr.layer_norm(r(4, 65536), (65536,))
    yield "layer_norm odd width", lambda: tr.layer_norm(r(64, 300, dtype=bf), (300,))
    yield "batch_norm training", lambda: tr.batch_norm(r(8, 16, 14, 14, dtype=bf), torch.zeros(16, dtype=bf),
                                                       torch.ones(16, dtype=bf), None, None, True, 0.1, 1e-5)
    yield "batch_norm eval", lambda: tr.batch_norm(r(8, 16, 56, 56), torch.zeros(16), torch.ones(16), r(16), r(16),
                                                   False, 0.1, 1e-5)


def main() -> int:
    import tritred_ops  # noqa: F401 (the op modules, before the patch)
    _patch()
    failed = 0
    for name, call in calls():
        t0 = time.time()
        try:
            call()
            print(f"ok     {name} ({time.time() - t0:.1f} s)", flush=True)
        except Exception:  # noqa: BLE001 (report every failing call, then fail)
            failed += 1
            print(f"FAILED {name}:\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
