"""What the launch rules know about a device, and what the driver says about a compiled kernel's occupancy."""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any

import torch
from tritred_core import DeviceInfo

from .caches import caches
from .checks import interpreting

log = logging.getLogger("tritred")


def device_info(device: torch.device) -> DeviceInfo:
    """What the launch rules need to know about ``device`` (the interpreter's DeviceInfo for a device other than
    CUDA); read once per device (``caches().devices``)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())

    def read() -> DeviceInfo:
        if device.type != "cuda":
            return DeviceInfo(name="cpu (TRITON_INTERPRET=1)", backend="interpreter")
        p = torch.cuda.get_device_properties(device)
        return DeviceInfo(
            name=p.name, backend="cuda", compute_capability=(p.major, p.minor),
            sm_count=p.multi_processor_count,
            max_shared_mem=int(getattr(p, "shared_memory_per_block_optin", 48 * 1024)),
            regs_per_sm=int(getattr(p, "regs_per_multiprocessor", 65536)),
            l2_bytes=int(getattr(p, "L2_cache_size", 0)),
        )
    return caches().devices.get_or_make(str(device), read)


def dependent_launch(device: torch.device) -> dict[str, bool]:
    """Launch options of a kernel that reads what the launch just before it wrote (the merge of a split's
    partials, batch_norm training's normalize launch after its statistics, the split softmax columns' merge and
    writing launches): programmatic dependent launch on Hopper and later GPUs (``launch_pdl``), the kernel waiting in
    ``griddepcontrol.wait`` (``WAIT``, :func:`kernels.rows.wait_for_previous_launch`) until the previous launch has
    finished and its writes are visible; nothing on older GPUs, on ROCm (whose devices torch also names
    ``cuda``: no ``griddepcontrol``) and under the interpreter, whatever the tensors' device (it has no inline
    assembly): there a plain launch, which starts after the previous one in stream order.

    Why: the merge launch starts while the previous launch's last programs finish instead of after it, which
    hides most of the gap between two launches (H200: 1-2 us of a 44-136 us split reduction, e.g. sum dim=0 of
    16384x4096 bf16 44.1 -> 43.6 us, var 48.8 -> 47.3, sum of 2^28 bf16 136.4 -> 134.5; 1.3-1.6 us of batch_norm
    training, 64x256x56x56 bf16 94.0 -> 92.5 us, against 0.5-0.7 us of noise on its one-launch control; 1.4-3.5 us
    of split softmax columns, except log_softmax dim=0 of 16384x256 bf16, 158.4 -> 159.0 us at 256 slices, a call
    dominated by its merge). The result is the plain launch's, bit for bit.
    """
    info = device_info(device)
    hopper = info.backend == "cuda" and info.compute_capability >= (9, 0) and torch.version.hip is None
    if hopper and not interpreting():
        return {"WAIT": True, "launch_pdl": True}
    return {}


def resident_programs(kernel: Any, x: torch.Tensor, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """Programs of the compiled ``kernel`` (``args``, ``kwargs``: every argument of the launch) that are resident
    on ``x``'s device at once: the largest grid of a cooperative launch."""
    compiled = kernel.warmup(*args, grid=(1,), **kwargs, launch_cooperative_grid=True)
    key = (compiled, str(x.device))  # (the compiled kernel itself: its id could be reused once it is freed)

    def fit() -> int:
        init = getattr(compiled, "_init_handles", None)
        if init is not None:
            init()
        regs = int(getattr(compiled, "n_regs", 0) or 255)
        meta = compiled.metadata
        warps, shared = int(meta.num_warps), int(getattr(meta, "shared", 0))
        props = torch.cuda.get_device_properties(x.device)
        per_sm = programs_per_sm(regs, warps, shared, int(getattr(props, "regs_per_multiprocessor", 65536)),
                                 int(getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)),
                                 int(getattr(props, "max_threads_per_multi_processor", 2048)))
        # The driver's count is the one a cooperative launch is checked against (H200: "too many blocks in
        # cooperative launch" when the estimate divided the registers as one pool). Never more than the estimate:
        # the grids measured so far.
        driver = _driver_occupancy(compiled, 32 * warps, shared)
        if driver is not None and driver < per_sm:
            log.debug("resident programs per SM: %d by the driver, %d estimated (%d registers)", driver, per_sm, regs)
            per_sm = driver
        return max(0, per_sm) * props.multi_processor_count
    return caches().occupancy.get_or_make(key, fit)


def programs_per_sm(regs: int, num_warps: int, shared: int = 0, regs_per_sm: int = 65536,
                    smem_per_sm: int = 228 * 1024, threads_per_sm: int = 2048) -> int:
    """Resident programs per SM of a kernel of ``regs`` registers per thread, ``num_warps`` warps and ``shared``
    bytes of shared memory (defaults: an H100/H200). Registers are allocated per warp in units of 256 and per
    quarter SM (a warp lives in one quarter): 2-warp programs of 108 registers fit 8 per SM, not the 9 that
    65536 / (112 * 64) gives (the driver's count on the H200). The driver reserves 1 KB of shared memory per
    program; at most 32 programs per SM."""
    per_warp = -(-regs * 32 // 256) * 256
    warps = 4 * (regs_per_sm // 4 // per_warp)
    return min(warps // num_warps, threads_per_sm // (32 * num_warps), smem_per_sm // (shared + 1024), 32)


def _driver_occupancy(compiled: Any, threads: int, shared: int) -> int | None:
    """Programs per SM of a compiled kernel by the CUDA driver's occupancy calculator (the count a cooperative
    launch is checked against), or None where it cannot be asked (no libcuda, no function handle)."""
    handle = getattr(compiled, "function", None)
    if not handle:
        return None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    n = ctypes.c_int(0)
    rc = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), ctypes.c_void_p(handle),
                                                          ctypes.c_int(threads), ctypes.c_size_t(shared))
    return n.value if rc == 0 else None
