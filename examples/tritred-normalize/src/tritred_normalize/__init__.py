"""tritred-normalize: an example third-party tritred plugin adding ``normalize`` (mirrors
torch.nn.functional.normalize with p=2: ``x / max(||x||_2, eps)`` along ``dim``).

Installing the package is enough: its entry point (group ``tritred``) makes ``tritred list``, ``tritred explain``
and ``tritred check`` see ``normalize``. Call it directly like torch::

    from tritred_normalize import normalize
    y = normalize(x, dim=-1)                        # p=2.0, eps=1e-12: torch's defaults

Tensors must be on CUDA, or on CPU with ``TRITON_INTERPRET=1`` set before this import (Triton's interpreter).
"""

from .normalize import SPEC, normalize, problem

__version__ = "0.1.0"

__all__ = ["SPEC", "normalize", "problem"]
