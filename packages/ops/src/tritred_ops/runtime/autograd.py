"""Applying an autograd Function on the eager path without torch's per-call signature binding.

``torch.autograd.Function.apply`` of a Function with a separate ``setup_context`` (the style that
``torch.library.register_autograd`` and torch.func share) binds the call's arguments to ``forward``'s signature with
``inspect`` on every call, to fill in defaults: ~20 us of host time a call (measured on a 2-core CI machine: 29 us
against 6 us, the rest of ``apply`` being torch's C++). tritred's ops pass every argument positionally, so there
is nothing to fill in, and :func:`apply_function` calls torch's C++ ``apply`` (which runs ``forward`` and then
``setup_context``) directly. Under a torch.func transform (vmap, grad, jvp) it takes the documented path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._functorch.utils import unwrap_dead_wrappers


def apply_function(function: type[torch.autograd.Function], *args: Any) -> Any:
    """``function.apply(*args)``, every argument of ``function.forward`` given positionally (no defaults filled
    in: a missing one is a TypeError from ``forward``)."""
    if torch._C._are_functorch_transforms_active():
        return function.apply(*args)
    return super(torch.autograd.Function, function).apply(*unwrap_dead_wrappers(args))  # type: ignore[misc]
