"""tritred-bench tests: the quick suite on the CPU under the Triton interpreter (CUDA when present).

TRITON_INTERPRET must be set before tritred_ops (and its @triton.jit kernels) is imported, so it is decided here.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="session")
def quick_report(device: str):  # type: ignore[no-untyped-def]
    """The quick suite with tritred and eager, run once per session (a few seconds on the interpreter)."""
    from tritred_bench import load_suite, run

    cases, _ = load_suite("quick")
    return run(cases, providers=["eager"], device=device, quick=True, progress=False)
