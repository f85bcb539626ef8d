"""Helpers of the tritred_ops.nn and patch tests: call counters on tritred's ops, random module state."""

from __future__ import annotations

import torch
from tritred_ops.nn import activation, loss, normalization, transformers_norms

#: Where tritred's modules and patched classes call tritred's ops (module, name).
OPS = [(normalization, "layer_norm"), (normalization, "rms_norm"), (normalization, "batch_norm"),
       (activation, "softmax"), (activation, "log_softmax"), (loss, "cross_entropy"),
       (transformers_norms, "rms_norm"), (transformers_norms, "layer_norm")]


def spy_ops(monkeypatch) -> dict[str, int]:
    """Count the calls of tritred's ops from the modules, by op name (a module that always fell back to torch
    would otherwise pass every comparison with torch)."""
    counts: dict[str, int] = {}
    for mod, name in OPS:
        real = getattr(mod, name)

        def spy(*a, _real=real, _name=name, **k):
            counts[_name] = counts.get(_name, 0) + 1
            return _real(*a, **k)
        monkeypatch.setattr(mod, name, spy)
    return counts


def randomize(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random floating parameters and buffers (running variances positive), in place."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            for name, t in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
                if t is not None and t.dtype.is_floating_point:
                    r = torch.rand(t.shape, generator=g) + 0.5 if name == "running_var" else \
                        torch.randn(t.shape, generator=g)
                    t.copy_(r)
    return module
