"""The tritred hook specifications (pluggy project name ``"tritred"``).

A plugin is any module or object with functions decorated by :data:`hookimpl`, exposed through the entry point
group ``tritred``. tritred's own ops register through exactly these hooks.
"""

from __future__ import annotations

import pluggy

from .models import DeviceInfo, LaunchConfig, Problem, Reduction, ReductionSpec

PROJECT = "tritred"

hookspec = pluggy.HookspecMarker(PROJECT)
#: Decorator for plugin hook implementations (re-exported as ``tritred_core.hookimpl``).
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def tritred_register_reductions() -> list[Reduction]:  # type: ignore[empty-body]
    """Return the reductions this plugin provides (all plugins are collected)."""


@hookspec(firstresult=True)
def tritred_launch_config(  # type: ignore[empty-body]
    spec: ReductionSpec, problem: Problem, device: DeviceInfo
) -> LaunchConfig | None:
    """Return the launch config for ``problem`` on ``device``, or None to let the next plugin decide.

    The first non-None result wins. tritred's built-in launch rules are registered with ``trylast=True``, so any
    plugin's implementation is asked first. The registry validates the winner against the problem and records
    which plugin returned it in :attr:`LaunchConfig.decided_by`.
    """
