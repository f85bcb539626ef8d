"""Every kernel variant the ops launch on a list of calls (``sm90_compile.py``) compiles for an H200 (sm_90).

The interpreter runs a kernel's Python, so it cannot see what only compiling shows: a variable typed int32 in one
branch and int64 in another (the statistics loop's unrolled branch once had one), an operation the compiler does not
support in a branch. Triton compiles for sm_90 without a GPU; the script does it in a process of its own, without
``TRITON_INTERPRET``, with the H200's launch configs.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def test_every_launched_kernel_variant_compiles_for_sm90():
    pytest.importorskip("triton.backends.nvidia.compiler", reason="this Triton has no NVIDIA backend")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("sm90_compile.py")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    report = done.stdout + done.stderr[-4000:]
    assert done.returncode == 0, report
    assert report.count("ok ") >= 51, report  # every call of the list ran (and compiled)
    # The native launcher packs the parameters of the common launches (each pack checked against the PTX in the
    # script): a refusal means ~8 us more per small call, through Triton's launcher.
    for call in ("softmax rows single", "sum rows single", "layer_norm single", "var_mean rows single",
                 "batch_norm training", "rms_norm single", "layer_norm backward single, two accumulators"):
        line = re.search(rf"^ok +{re.escape(call)} \(.* native=(\[.*?\])", report, re.M)
        assert line and all(ast.literal_eval(line.group(1))), (call, line and line.group(0))
    # Occupancy by registers. The channels-fast batch_norm statistics and backward sums (4 warps a program): per-lane
    # state with the partial tiles in the same loop once held one program of 8 warps per SM (150-176 registers), too
    # few loads in flight for HBM; four of 4 warps keep 16-32 KB in flight, as var_mean's column loop. The norms'
    # backward on bf16 4096-wide rows (16 warps): 16 elements a thread once took 84 registers, 16 warps per SM, 72 %
    # of copy in the backward alone on an H100 (82 % at 8). (call, launch, warps a program, programs per SM)
    for call, launch, warps, programs in (("batch_norm 2-D statistics bfloat16", 0, 4, 4),
                                          ("batch_norm 2-D statistics float32", 0, 4, 4),
                                          ("batch_norm 2-D backward sums bfloat16", 3, 4, 4),
                                          ("layer_norm backward single, two accumulators", 0, 16, 2),
                                          ("rms_norm backward single", 0, 16, 2)):
        line = re.search(rf"^ok +{re.escape(call)} \(.*registers=(\[.*\])$", report, re.M)
        assert line, report
        regs = ast.literal_eval(line.group(1))[launch]
        assert regs is not None and _programs_per_sm(regs, warps) >= programs, (call, regs)


def _programs_per_sm(regs: int, warps: int) -> int:
    """Programs of ``warps`` warps that an H200 SM holds by registers: 65536, allocated per warp in steps of 256."""
    per_warp = -(-regs * 32 // 256) * 256
    return 65536 // (per_warp * warps)
