"""Compiling kernels for an H200 (sm_90) without a GPU: a stand-in for Triton's active driver.

``JITFunction.warmup`` asks the active driver for the current device, stream and target; :class:`Sm90Driver`
answers for an sm_90 target, so that ``kernel.warmup(*args, grid=grid, **constexprs)`` compiles for the H200 on any
machine (the tensor arguments may be CPU tensors: only their dtypes and alignment matter). The compile shows what
the interpreter cannot: a variable typed differently in two branches, an operation the compiler does not take.
Use it in a process without ``TRITON_INTERPRET`` (the interpreter replaces the JIT functions)::

    from triton.runtime import driver
    from tritred_ops.testing import Sm90Driver

    driver.set_active(Sm90Driver())
    compiled = my_kernel.warmup(x, y, n, grid=(1,), BLOCK=1024)   # compiled.asm["ptx"]: the sm_90 PTX
"""

from __future__ import annotations

from typing import Any

import torch


class Sm90Driver:
    """The few calls ``JITFunction.warmup`` makes of the active driver, answered for device 0, an sm_90 target
    (32-thread warps) and CPU tensors."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def is_active(self) -> bool:
        return True
