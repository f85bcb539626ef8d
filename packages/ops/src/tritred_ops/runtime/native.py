"""The native replay of compiled call plans: a plan's allocations and launches in one C++ call.

Why: a replayed call of a tiny reduction is host-bound, and from Python two of its steps each cost about what
torch's whole call costs: the outputs' allocation (``torch.empty_strided``, ~4 us) and Triton's launcher (parsing
~30 argument objects, ~6 us; docs/performance.md, "Latency"), and the call's key another 1-3 us.
``native_launcher.cpp`` does all three behind one Python call: the key (a bytes object of the tensors' facts), the
plan's lookup, the outputs and the workspace from torch's CUDA allocator, ``cuLaunchKernel`` with the recorded
parameters and the call's pointers, on the current stream of the plan's device (``replay``; ``replay_inference`` at
an op's entry, after the checks of ``grad_needed``; replay.py's ``replay_plan`` and ``replayed``).

How: the extension is built once per torch, Python and source version with ``torch.utils.cpp_extension.load``
(a C++ compiler and ninja; ~15 s, kept in torch's extensions cache, ``TORCH_EXTENSIONS_DIR``) the first time a
compiled plan is saved. A build lock older than any build (a process killed while building) is removed first:
torch waits on it with no timeout.
:func:`native_plan` packs each launch's non-constexpr parameters as Triton's launcher would (its ``ty_to_cpp``
types: pointers 8 bytes, integers by width, float32 and float64 by their bits), then two null scratch pointers,
and accepts the plan only where the driver's own parameter layout of the loaded kernel (``cuFuncGetParamInfo``)
has exactly those sizes (the extension checks the count and bounds again). Anything else (scratch memory,
clusters, cooperative or PDL launches, temporaries that start at zero, more than 228 KiB of shared memory, an empty
grid, tuple or descriptor arguments, half-precision scalars, a plan recorded while another device was current)
replays through Triton's launcher as before. Before launching, the extension makes the plan device's primary
context current where a thread has none (as Triton's launcher does: torch binds none to a new thread whose device
is already the current one).

Off with ``TRITRED_NATIVE=0`` (plans are then not made native; the extension itself can still be built). Where it
cannot be built (no compiler, no ninja, ROCm), tritred says so once in a warning and replays through Triton's
launcher: the same results, 3-5 us more per small call (measured on an H100).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import struct
import time
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("tritred")

SOURCE = Path(__file__).with_name("native_launcher.cpp")
_ALIGN = 8  # each parameter's offset in the packed buffer (cuLaunchKernel reads each through its own pointer)

# Triton's scalar parameter types (its ``ty_to_cpp``) as struct formats; pointers are "*<dtype>".
_FORMATS = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u1": "B", "u8": "B", "u16": "H",
            "u32": "I", "u64": "Q", "fp32": "f", "f32": "f", "fp64": "d"}


def wanted() -> bool:
    """Whether the native path is asked for: not turned off with ``TRITRED_NATIVE=0``, and a CUDA (not ROCm)
    build of torch."""
    return os.environ.get("TRITRED_NATIVE", "1") != "0" and torch.version.hip is None


@functools.cache
def extension() -> Any:
    """The built extension module, or None (logged once) where it cannot be built."""
    try:
        from torch.utils import cpp_extension

        # One build per torch version (torch's default directory is per Python and CUDA version only: two
        # environments would rebuild each other's, or load one built against the other's torch).
        name = "tritred_native_" + re.sub(r"\W", "_", torch.__version__)
        directory = getattr(cpp_extension, "_get_build_directory", None)  # (torch's own choice of directory)
        build = directory(name, verbose=False) if directory is not None else None
        if build is not None:
            _clear_stale_lock(Path(build) / "lock")
        log.info("tritred: loading the native launcher (building it from %s if this torch has none yet, ~15 s)",
                 SOURCE)
        return cpp_extension.load(name, [str(SOURCE)], extra_cflags=["-O2"], build_directory=build, verbose=False)
    except Exception as e:  # noqa: BLE001 - any build failure (compiler, ninja, headers) means the Python path
        lines = [line.strip()[:240] for line in str(e).strip().splitlines() if line.strip()]
        causes = [line for line in lines[1:] if any(w in line.lower() for w in ("error", "failed", "not found"))]
        log.warning("tritred: the native launcher could not be built, replaying through Triton's launcher "
                    "(3-5 us more per small call): %s: %s", type(e).__name__,
                    " | ".join(dict.fromkeys(lines[:1] + causes[:4] + lines[-1:])))
        return None


def loaded_replays(plans: dict[Any, Any], plain: frozenset[Any]) -> tuple[Any, Any]:
    """(the extension's ``replay``, its ``replay_inference``), both bound to ``plans`` and what they read on every
    call, when the extension is wanted and already loaded (this never builds it), else (None, None). ``plain``: the
    argument types a key holds as they are (replay.py)."""
    if not wanted() or extension.cache_info().currsize == 0:
        return None, None
    ext = extension()
    replay, inference = getattr(ext, "replay", None), getattr(ext, "replay_inference", None)
    if replay is None or inference is None:
        return None, None
    from torch.autograd import forward_ad
    from triton import knobs

    context = (plans, knobs.runtime, plain, forward_ad, torch._C._are_functorch_transforms_active)
    return functools.partial(replay, context), functools.partial(inference, context)


STALE_LOCK_SECONDS = 600  # a build takes 10-60 s; a lock this old was left by a process killed while building


def _clear_stale_lock(lock: Path) -> None:
    """Remove the build directory's lock file when it is older than any build: torch's ``FileBaton`` waits on it
    with no timeout, so a process killed while building (the first CUDA call interrupted) would leave every later
    process of this torch version waiting forever."""
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return  # no lock: no build in progress
    if age > STALE_LOCK_SECONDS:
        log.warning("tritred: removing the native launcher's stale build lock %s (%.0f s old)", lock, age)
        lock.unlink(missing_ok=True)


def pack(signature: dict[str, Any], template: list[Any], slots: dict[int, int]) -> tuple[bytes, list[int],
                                                                                         list[tuple[int, int]],
                                                                                         list[int]] | None:
    """A launch's parameters as the kernel receives them: (packed bytes, each parameter's offset, the (offset,
    pointer slot) pairs filled per call, each parameter's size), or None for a parameter this path does not
    pack. ``signature``: the compiled kernel's Triton types by parameter (``"constexpr"`` ones are not passed),
    ``template``: every parameter's recorded value, ``slots``: the call tensors' positions."""
    if len(signature) != len(template):
        return None
    buf, offsets, patches, sizes = bytearray(), [], [], []

    def put(data: bytes) -> int:
        buf.extend(b"\0" * (-len(buf) % _ALIGN))
        offsets.append(len(buf))
        sizes.append(len(data))
        buf.extend(data)
        return offsets[-1]

    for pos, (ty, value) in enumerate(zip(signature.values(), template)):
        if not isinstance(ty, str):
            return None  # a tuple argument
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            if pos in slots:
                patches.append((put(bytes(8)), slots[pos]))
            elif value is None or type(value) is int:
                put(struct.pack("<Q", value or 0))
            else:
                return None
        elif ty in _FORMATS and pos not in slots and type(value) in ((float,) if ty.startswith("f") else (bool, int)):
            put(struct.pack("<" + _FORMATS[ty], value))
        else:
            return None
    put(bytes(8))  # Triton's global scratch pointer (a plan's kernels need none: checked by the caller)
    put(bytes(8))  # and its profile scratch pointer
    return bytes(buf), offsets, patches, sizes


SHARED_LIMIT = 228 * 1024  # past this, Triton 3.9's launcher adds a launch attribute (beyond an H100's 227 KiB)


def native_plan(plan: Any) -> Any:
    """The extension's plan object for a compiled :class:`~.replay.Plan`, or None where the plan must replay
    through Triton's launcher (the reasons in this module's docstring; any failure here is one of them, logged at
    debug level)."""
    if not wanted() or plan.device is None or plan.device.type != "cuda" or plan.zero_bytes:
        return None  # (temporaries that start at zero: the barrier counters of cooperative plans)
    # The kernels were loaded in the context of the device current while recording: the native launcher runs them
    # in its plan device's context, so the two must be one.
    if plan.device.index is None or plan.device.index != torch.cuda.current_device():
        return None
    ext = extension()
    if ext is None:
        return None
    try:
        launches = [_launch(ext, launch) for launch in plan.launches]
        if any(launch is None for launch in launches):
            return None
        outputs = [(shape, stride, dtype) for shape, stride, dtype, _ in plan.outputs]
        return ext.make_plan(plan.device.index, plan.n_inputs, outputs, plan.ws_bytes,
                             [offset for _, offset in plan.temps], launches)
    except Exception as e:  # noqa: BLE001 - a plan the native launcher refuses replays through Triton's launcher
        log.debug("tritred: the native launcher refused a plan (%s: %s)", type(e).__name__, e)
        return None


def _launch(ext: Any, launch: Any) -> tuple[Any, ...] | None:
    """One launch as the extension's ``make_plan`` takes it, or None where this path does not take it."""
    c = launch.compiled
    md = getattr(c, "metadata", None)
    if (md is None or getattr(md, "num_ctas", 1) != 1 or getattr(md, "launch_cooperative_grid", False)
            or getattr(md, "launch_pdl", False) or getattr(md, "global_scratch_size", 0)
            or getattr(md, "profile_scratch_size", 0) or getattr(md, "tensordesc_meta", None)
            or md.shared > SHARED_LIMIT or min(launch.grid) < 1):
        return None
    signature = getattr(getattr(c, "src", None), "signature", None)
    if not isinstance(signature, dict):
        return None
    try:
        packed = pack(signature, launch.template, dict(launch.slots))
    except (struct.error, OverflowError):  # a value out of its parameter type's range
        return None
    if packed is None:
        return None
    data, offsets, patches, sizes = packed
    if list(ext.param_sizes(c.function)) != sizes:
        log.debug("tritred: %s's parameters are not laid out as packed; Triton's launcher runs it",
                  getattr(launch.kernel, "__name__", launch.kernel))
        return None
    return (c.function, launch.grid, 32 * md.num_warps, md.shared, data, offsets, patches)
