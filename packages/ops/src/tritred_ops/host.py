"""Host-side helpers for plugin authors: what tritred's own ops use around their kernels.

A third-party reduction (see ``examples/tritred-rmsnorm``) needs the same few things around its Triton kernel
as tritred's ops: refuse tensors Triton cannot run on, describe the device to the launch heuristics, and ask the
``tritred_launch_config`` hook once per problem. They are public here so that plugins do not copy them::

    from tritred_ops.host import check_runnable, device_info, launch_config

    check_runnable("rms_norm", x)
    cfg = launch_config(SPEC, problem, x.device)      # cached per (reduction, problem, device)

:class:`Recorder` and :func:`find_plan` are the call plans of ``docs/architecture.md`` (a repeated call
replays the first call's allocations and launches); they apply when the kernels take the call's own tensors.
"""

from __future__ import annotations

import torch
from tritred_core import LaunchConfig, Problem, ReductionSpec, get_registry

from ._common import _cached, check_runnable, device_info, dtype_name
from ._replay import Plan, Recorder, find_plan

__all__ = ["Plan", "Recorder", "check_runnable", "device_info", "dtype_name", "find_plan", "launch_config"]


def launch_config(spec: ReductionSpec, problem: Problem, device: torch.device) -> LaunchConfig:
    """The launch config of ``problem`` on ``device``: asked from the ``tritred_launch_config`` hook (plugins
    first, tritred's built-in heuristic last) once, then cached in the registry's cache (cleared whenever a
    plugin is registered or unregistered).

    Raises:
        tritred_core.InvalidLaunchConfigError: no plugin answered for ``spec``, or the winner cannot compute
            ``problem``.
    """
    key = ("launch_config", spec.name, problem, str(device))
    return _cached(key, lambda: get_registry().launch_config(spec, problem, device_info(device)))  # type: ignore[no-any-return]
