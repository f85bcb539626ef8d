"""tritred-core: the specs, hooks and registry of tritred. Imports neither torch nor triton.

Plugin authors need :data:`hookimpl`, :class:`Reduction`, :class:`ReductionSpec`, :class:`LaunchConfig`
(and read :class:`Problem`, :class:`DeviceInfo`); see ``docs/plugins.md``.
"""

from .hookspecs import hookimpl, hookspec
from .models import (
    ANNOTATIONS,
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    KNOBS,
    STRATEGIES,
    DeviceInfo,
    Knob,
    LaunchConfig,
    Problem,
    Reduction,
    ReductionSpec,
    Strategy,
)
from .registry import (
    DuplicateReductionError,
    InvalidLaunchConfigError,
    PluginInfo,
    Registry,
    RegistryError,
    UnknownReductionError,
    get_registry,
    set_registry,
)

__version__ = "0.1.0"

__all__ = [
    "ANNOTATIONS",
    "FLOAT_DTYPES",
    "INTEGER_DTYPES",
    "KNOBS",
    "STRATEGIES",
    "DeviceInfo",
    "DuplicateReductionError",
    "InvalidLaunchConfigError",
    "Knob",
    "LaunchConfig",
    "PluginInfo",
    "Problem",
    "Reduction",
    "ReductionSpec",
    "Registry",
    "RegistryError",
    "Strategy",
    "UnknownReductionError",
    "get_registry",
    "hookimpl",
    "hookspec",
    "set_registry",
]
