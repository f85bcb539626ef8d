"""tritred-cli tests: the typer app in-process (CliRunner) and, for entry points, as a subprocess.

TRITON_INTERPRET must be set before tritred_ops (and its @triton.jit kernels) is imported, so it is decided here.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.dirname(__file__))  # cli_helpers (pytest runs in importlib mode)
# Never read (or write) the user's tuning cache from tests.
os.environ.setdefault("TRITRED_TUNE_CACHE", os.path.join(tempfile.mkdtemp(prefix="tritred-tune-"), "tuning.json"))

from cli_helpers import ReductionsPlugin
from tritred_core import Reduction, Registry, set_registry
from typer.testing import CliRunner


@pytest.fixture
def cli() -> Callable[..., Any]:
    """cli("list", "--json") -> click Result (wide terminal so tables do not wrap names)."""
    from tritred_cli.main import app

    runner = CliRunner()

    def invoke(*args: str) -> Any:
        return runner.invoke(app, list(args), env={"COLUMNS": "200", "TERM": "dumb"}, catch_exceptions=False)

    return invoke


@pytest.fixture
def use_registry() -> Iterator[Callable[[Registry], Registry]]:
    """use_registry(reg) makes ``reg`` the process-wide registry for the test; the previous one comes back."""
    previous: list[Registry | None] = []

    def use(reg: Registry) -> Registry:
        previous.append(set_registry(reg))
        return reg

    yield use
    if previous:
        set_registry(previous[0])


@pytest.fixture
def fake_registry(use_registry: Callable[[Registry], Registry]) -> Callable[..., Registry]:
    """fake_registry(*records): a registry without entry points holding only ``records``, made current."""

    def make(*records: Reduction) -> Registry:
        reg = Registry(autoload=False)
        reg.register(ReductionsPlugin(*records), name="fake-plugin", version="1.2.3")
        return use_registry(reg)

    return make


@pytest.fixture(scope="session")
def device() -> str:
    """Where tritred's kernels run: CUDA when present, else the CPU interpreter."""
    return "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
