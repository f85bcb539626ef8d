"""Every kernel variant the ops launch on a list of calls (``sm90_compile.py``) compiles for an H200 (sm_90).

The interpreter runs a kernel's Python, so it cannot see what only compiling shows: a variable typed int32 in one
branch and int64 in another (the statistics loop's unrolled branch once had one), an operation the compiler does not
support in a branch. Triton compiles for sm_90 without a GPU; the script does it in a process of its own, without
``TRITON_INTERPRET``, with the H200's launch configs.
"""

from __future__ import annotations

import os
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
