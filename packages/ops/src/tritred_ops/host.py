"""What a plugin author needs around a Triton kernel: the host helpers tritred's own ops use.

A third-party reduction (see ``examples/tritred-normalize``) needs the same few things around its kernel as
tritred's ops: refuse tensors Triton cannot run on, describe the device to the launch rules, and ask the
``tritred_launch_config`` hook once per problem. They live in :mod:`tritred_ops.runtime`; this module is the
short list::

    from tritred_ops.host import check_runnable, device_info, launch_config

    check_runnable("normalize", x)
    cfg = launch_config(SPEC, problem, x.device)      # cached per (reduction, problem, device)

:class:`Recorder`, :func:`replay_plan` and :func:`find_plan` are the call plans of ``docs/architecture.md`` (a
repeated call replays the first call's allocations and launches; ``replay_plan`` keys, finds and runs it in one C++
call once the native launcher is loaded); they apply when the kernels take the call's own tensors.
"""

from __future__ import annotations

from .runtime import Plan, Recorder, check_runnable, device_info, dtype_name, find_plan, launch_config, replay_plan

__all__ = ["Plan", "Recorder", "check_runnable", "device_info", "dtype_name", "find_plan", "launch_config",
           "replay_plan"]
