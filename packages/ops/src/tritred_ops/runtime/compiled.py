"""What torch.compile traces in place of a public op: its compiled form (:func:`compiles_to`).

On every call of compiled code (CUDA graph replays included) dynamo checks one guard per global, attribute,
default and function code that tracing read. Traced through its own body, a public op read its code, its
defaults, the ``is_compiling`` test and each helper on the way to its ``torch.ops.tritred`` op: ``var(x, -1)``
held 23 guards on globals against ``torch.var``'s 3 (CPU, ``guard_filter_fn``), and a tritred CUDA graph replayed
1-7 % slower than torch's (H100). Registered with ``torch.compiler.substitute_in_graph``, the compiled form
replaces the op wherever dynamo meets it: one guard on the op's identity, then what the compiled form reads
(``var``: 10 in all).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def compiles_to(compiled: Callable[..., Any]) -> Callable[[F], F]:
    """Decorator: torch.compile traces ``compiled`` (same signature and defaults, calling the op's
    ``torch.ops.tritred`` op) wherever it meets the decorated public op. The op itself still calls ``compiled``
    under ``torch.compiler.is_compiling()`` (traced as a whole, ``torch.export``), so the two paths are one code.
    Registration only (at import, as the ops' ``torch.library`` registrations); a torch without
    ``substitute_in_graph`` traces the op's own body."""

    def register(public: F) -> F:
        substitute = getattr(torch.compiler, "substitute_in_graph", None)
        if substitute is not None:
            substitute(public)(compiled)  # (its return value is public's eager wrapper: not used)
        return public

    return register
