"""Test setup for tritred-normalize: Triton's CPU interpreter unless a GPU is there, a fresh registry per test.

``TRITON_INTERPRET`` must be set before any module with ``@triton.jit`` kernels is imported, so it is decided here.
When the package is not installed (a plain checkout), ``src/`` is put on ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

DEVICE = os.environ.get("TRITRED_TEST_DEVICE") or (
    "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
)
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
if importlib.util.find_spec("tritred_normalize") is None:
    sys.path.insert(0, str(PACKAGE_ROOT / "src"))

import tritred_core  # noqa: E402
import tritred_normalize.plugin  # noqa: E402
import tritred_ops.plugin  # noqa: E402


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE


@pytest.fixture
def registry() -> Iterator[tritred_core.Registry]:
    """A fresh registry with tritred's built-ins and this plugin, installed as the process-wide one."""
    reg = tritred_core.Registry(autoload=False)
    reg.register(tritred_ops.plugin, name="tritred_ops", version=tritred_ops.__version__)
    reg.register(tritred_normalize.plugin, name="tritred_normalize", version=tritred_normalize.__version__)
    previous = tritred_core.set_registry(reg)
    try:
        yield reg
    finally:
        tritred_core.set_registry(previous)


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs start as NaN: an element the kernel forgets to write stays visible."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def fill(t: torch.Tensor) -> torch.Tensor:
        if t.numel() and t.device.type != "meta" and t.dtype.is_floating_point:
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: fill(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: fill(real_empty_like(*a, **k)))
