"""A stand-in for FlagGems: use_gems() routes nothing (torch's own kernels run)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def use_gems() -> Iterator[None]:
    yield
