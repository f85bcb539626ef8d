"""Softmax and LogSoftmax: torch's modules whose forward runs tritred's ops."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..families.softmax import log_softmax, softmax
from .common import log_fallback, refusal


def _dim(name: str, module: torch.nn.Softmax | torch.nn.LogSoftmax, input: Tensor) -> int:
    """The module's dim; ``dim=None`` is torch's legacy choice (0 for 0-, 1- and 3-D inputs, else 1) with torch's
    deprecation warning, attributed to the same frame as torch's (``stacklevel=5``: this function stands where
    torch's module has ``F.softmax``, between ``_get_softmax_dim`` and ``forward``)."""
    if module.dim is not None:
        return module.dim
    return F._get_softmax_dim(name, input.dim(), 5)  # type: ignore[attr-defined]


class Softmax(torch.nn.Softmax):
    """:class:`torch.nn.Softmax` (same constructor, ``dim=None`` legacy behaviour and warning) whose forward is
    :func:`tritred_ops.softmax`. torch's forward runs instead (logged) for non-floating inputs (torch's error), under
    ``torch.autocast`` (torch's autocast recasts softmax) and for the devices and tensor types of
    :func:`.common.refusal`."""

    _tritred_original = torch.nn.Softmax

    def forward(self, input: Tensor) -> Tensor:
        why = refusal(input)
        if why is not None:
            log_fallback(self, why)
            return super().forward(input)
        return softmax(input, _dim("softmax", self, input))


class LogSoftmax(torch.nn.LogSoftmax):
    """:class:`torch.nn.LogSoftmax` whose forward is :func:`tritred_ops.log_softmax`; as :class:`Softmax`."""

    _tritred_original = torch.nn.LogSoftmax

    def forward(self, input: Tensor) -> Tensor:
        why = refusal(input)
        if why is not None:
            log_fallback(self, why)
            return super().forward(input)
        return log_softmax(input, _dim("log_softmax", self, input))
