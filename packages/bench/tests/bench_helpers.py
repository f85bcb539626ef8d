"""Helpers shared by the tritred-bench tests."""

from __future__ import annotations

import os

import pytest

#: Runs on the CPU (the Triton interpreter) only: on a CUDA machine tritred_ops is imported compiled, and the bench's
#: CPU device needs the interpreter set first (timing.select_device refuses it then).
CPU_ONLY = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"),
                              reason="the bench on the CPU needs the Triton interpreter (TRITON_INTERPRET=1)")
