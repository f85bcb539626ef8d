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

import re
import struct
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


def registers(cubin: bytes) -> int | None:
    """The registers per thread of the kernel in ``cubin`` (``compiled.asm["cubin"]``, the ELF that Triton's ptxas
    wrote), as ``ptxas -v`` prints them; None when the cubin records none. Read from the ``EIATTR_REGCOUNT``
    attribute of its ``.nv.info`` section: occupancy on the H200 without a GPU (65536 registers per SM, allocated
    per warp in steps of 256)."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def section(k: int) -> tuple[int, int, int]:  # (name offset, file offset, size)
        name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", cubin, shoff + k * shentsize)
        return name, off, size

    names = section(shstrndx)[1]
    for k in range(shnum):
        name, off, size = section(k)
        if not cubin[names + name:].startswith(b".nv.info"):
            continue
        p = off
        while p + 4 <= off + size:
            fmt, attr, n = cubin[p], cubin[p + 1], struct.unpack_from("<H", cubin, p + 2)[0]
            if fmt == 0x04:  # EIFMT_SVAL: a u16 size, then the value
                if attr == 0x2F and n >= 8:  # EIATTR_REGCOUNT: (function symbol index, registers)
                    return int(struct.unpack_from("<I", cubin, p + 8)[0])
                p += 4 + n
            else:  # EIFMT_NVAL / BVAL / HVAL: four bytes in all
                p += 4
    return None


def ptx_param_sizes(ptx: str) -> list[int]:
    """The byte size of each parameter of the (first) kernel entry in ``ptx`` (``compiled.asm["ptx"]``), as the
    driver lays them out: ``.param .u32 name`` is 4 bytes, ``.param .b8 name[16]`` 16. What the native launcher's
    packing (``runtime/native.py``) must match, checked without a GPU."""
    start = ptx.index(".entry")
    head = ptx[ptx.index("(", start) + 1: ptx.index(")", start)]
    sizes = []
    for decl in filter(None, (d.strip() for d in head.split(","))):
        array = re.search(r"\.b8\s+\w+\[(\d+)\]", decl)
        scalar = re.search(r"\.param\s+(?:\.align\s+\d+\s+)?\.[a-z]+(\d+)", decl)
        if array is None and scalar is None:
            raise ValueError(f"an unknown PTX parameter declaration: {decl!r}")
        sizes.append(int(array.group(1)) if array else int(scalar.group(1)) // 8)  # type: ignore[union-attr]
    return sizes
