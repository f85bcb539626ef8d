"""tritred-ops: Triton reduction kernels that mirror torch's ops.

Call them exactly like torch::

    import tritred_ops as tr
    tr.softmax(x, -1); tr.layer_norm(x, (4096,), w, b); tr.var(x, 1, correction=1); tr.max(x, 0)
    tr.rms_norm(x, (4096,), w)

Tensors must be on CUDA, or on CPU with ``TRITON_INTERPRET=1`` set before this import (Triton's interpreter,
used by the tests). Launch decisions come from the ``tritred_launch_config`` hook (see ``tritred_core``), asked
once per problem and cached.

``tr.enable()`` (a scope, or a global switch with ``tr.disable()``) routes torch's own aten ops on CUDA tensors
to these kernels: :mod:`tritred_ops.aten`.
"""

from . import distributed as distributed  # (a subpackage; not in __all__: no op)
from . import nn
from .aten import disable, enable, enabled_stats
from .families.batch_norm import batch_norm
from .families.cross_entropy import cross_entropy
from .families.layer_norm import layer_norm, layer_norm_with_stats
from .families.reduce import amax, amin, max, mean, min, prod, sum
from .families.rms_norm import rms_norm
from .families.softmax import log_softmax, logsumexp, softmax
from .families.statistics import std, std_mean, var, var_mean
from .patching import patch, unpatch

__version__ = "0.1.0"

__all__ = [
    "amax",
    "amin",
    "batch_norm",
    "cross_entropy",
    "disable",
    "enable",
    "enabled_stats",
    "layer_norm",
    "layer_norm_with_stats",
    "log_softmax",
    "logsumexp",
    "max",
    "mean",
    "min",
    "nn",
    "patch",
    "prod",
    "rms_norm",
    "softmax",
    "std",
    "std_mean",
    "sum",
    "unpatch",
    "var",
    "var_mean",
]
