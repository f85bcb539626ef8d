"""tritred-rmsnorm: an example third-party tritred plugin adding ``rms_norm`` (mirrors torch.nn.functional.rms_norm).

Installing the package is enough: its entry point (group ``tritred``) makes ``tritred list``, ``tritred explain``
and ``tritred check`` see ``rms_norm``. Call it directly like torch::

    from tritred_rmsnorm import rms_norm
    y = rms_norm(x, [x.shape[-1]], weight)          # eps=None: torch's default

Tensors must be on CUDA, or on CPU with ``TRITON_INTERPRET=1`` set before this import (Triton's interpreter).
"""

from .rms_norm import SPEC, problem, rms_norm

__version__ = "0.1.0"

__all__ = ["SPEC", "problem", "rms_norm"]
