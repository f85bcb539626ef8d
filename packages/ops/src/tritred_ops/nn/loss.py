"""CrossEntropyLoss: torch's module whose forward runs tritred's cross_entropy."""

from __future__ import annotations

import torch
from torch import Tensor

from ..families.cross_entropy import cross_entropy
from .common import log_fallback, refusal


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """:class:`torch.nn.CrossEntropyLoss` (same constructor: ``weight`` as a buffer, the deprecated ``size_average``
    and ``reduce`` folded into ``reduction`` by torch, ``ignore_index``, ``label_smoothing``) whose forward is
    :func:`tritred_ops.cross_entropy` (class indices or class probabilities; ``(C,)``, ``(N, C)``,
    ``(N, C, d1, ...)``). Argument errors are torch's types (tritred's checks mirror torch's). torch's forward runs
    instead (logged) under ``torch.autocast`` (torch's autocast recasts the loss) and for the devices and tensor
    types of :func:`.common.refusal` (the target and weight included)."""

    _tritred_original = torch.nn.CrossEntropyLoss

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        why = refusal(input, target, self.weight)
        if why is not None:
            log_fallback(self, why)
            return super().forward(input, target)
        return cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                             reduction=self.reduction, label_smoothing=self.label_smoothing)
