"""tritred-ops: Triton reduction kernels that mirror torch's ops.

Call them exactly like torch::

    import tritred_ops as tr
    tr.softmax(x, -1); tr.layer_norm(x, (4096,), w, b); tr.var(x, 1, correction=1); tr.max(x, 0)

Tensors must be on CUDA, or on CPU with ``TRITON_INTERPRET=1`` set before this import (Triton's interpreter,
used by the tests). Launch decisions come from the ``tritred_launch_config`` hook (see ``tritred_core``), asked
once per problem and cached.
"""

from . import distributed as distributed  # (a subpackage; not in __all__: no op)
from . import nn
from .families.batch_norm import batch_norm
from .families.layer_norm import layer_norm, layer_norm_with_stats
from .families.reduce import amax, amin, max, mean, min, prod, sum
from .families.softmax import log_softmax, logsumexp, softmax
from .families.statistics import std, std_mean, var, var_mean

__version__ = "0.1.0"

__all__ = [
    "amax",
    "amin",
    "batch_norm",
    "layer_norm",
    "layer_norm_with_stats",
    "log_softmax",
    "logsumexp",
    "max",
    "mean",
    "min",
    "nn",
    "prod",
    "softmax",
    "std",
    "std_mean",
    "sum",
    "var",
    "var_mean",
]
