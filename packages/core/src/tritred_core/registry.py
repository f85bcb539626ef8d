"""The plugin registry: loads ``tritred`` entry points lazily and answers the two hooks.

Nothing happens at import. The first call that needs plugins (``reductions()``, ``get()``, ``launch_config()``,
``plugins()``) loads every entry point of the group ``tritred`` once, unless ``TRITRED_DISABLE_PLUGIN_AUTOLOAD=1``.
A plugin that fails to import or whose hook raises is reported in :meth:`Registry.plugins` and skipped; two
reductions with the same name raise :class:`DuplicateReductionError` naming both plugins.
Set ``TRITRED_TRACE=1`` to print every hook call.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar, cast

import pluggy
from pydantic import BaseModel, ConfigDict, ValidationError

from . import hookspecs
from .models import DeviceInfo, LaunchConfig, Problem, Reduction, ReductionSpec

log = logging.getLogger("tritred")

ENTRY_POINT_GROUP = "tritred"
DISABLE_AUTOLOAD_ENV = "TRITRED_DISABLE_PLUGIN_AUTOLOAD"
TRACE_ENV = "TRITRED_TRACE"

T = TypeVar("T")


class RegistryError(Exception):
    """Base class of registry errors."""


class DuplicateReductionError(RegistryError):
    """Two plugins registered a reduction under the same name."""


class UnknownReductionError(RegistryError, KeyError):
    """No registered reduction has the requested name."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class InvalidLaunchConfigError(RegistryError, ValueError):
    """A plugin's launch-config hook returned something that cannot compute the problem."""


class PluginInfo(BaseModel):
    """One plugin as the registry sees it (``tritred plugins``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str | None = None
    hooks: tuple[str, ...] = ()
    error: str | None = None


class _Core:
    """The core's entry in the plugin listing (``tritred_core``, the name its module would have as an entry point):
    it implements no hook. The winning launch config is validated by :meth:`Registry.launch_config` after the hook
    returns, outside every hook wrapper (a wrapper registered later runs outside earlier ones and could otherwise
    change the config after it was checked)."""


def _validated(spec: ReductionSpec, problem: Problem, config: Any) -> LaunchConfig:
    """``config`` as the hook returned it, checked (a valid LaunchConfig, of a strategy and knobs the spec
    declares, that fits the problem) and re-validated field by field; raises InvalidLaunchConfigError."""
    if config is None:
        raise InvalidLaunchConfigError(f"no plugin returned a launch config for {spec.name} on {problem!r}")
    if not isinstance(config, LaunchConfig):
        raise InvalidLaunchConfigError(
            f"plugin {getattr(config, 'decided_by', None) or '?'} returned {type(config).__name__} "
            f"instead of a LaunchConfig for {spec.name}"
        )
    try:
        # validated again, and the validated copy used: ``model_copy(update=...)`` and ``model_construct`` skip the
        # model's validators (a float BLOCK_N, a combination they forbid: threads_per_row with a tail tile)
        checked = LaunchConfig.model_validate(config.model_dump(warnings=False))
        spec.check_takes(checked)  # a strategy or knob the op's kernels do not have
        checked.check_fits(problem)
    except ValueError as e:
        raise InvalidLaunchConfigError(
            f"plugin {config.decided_by!r} (or a wrapper of the launch-config hook) returned an invalid config for "
            f"{spec.name}: {e}"
        ) from e
    return checked


def _tag_launch_config_results(pm: pluggy.PluginManager, plugin_name: str) -> None:
    """Make ``plugin_name``'s launch-config hook stamp its results with ``decided_by=plugin_name``.

    pluggy's firstresult calls do not say which implementation answered; wrapping each implementation once at
    registration records it at no cost per call.
    """
    for impl in pm.hook.tritred_launch_config.get_hookimpls():
        if impl.plugin_name != plugin_name or impl.wrapper or impl.hookwrapper:
            continue
        inner = impl.function

        @functools.wraps(inner)
        def tagged(*args: Any, __inner: Callable[..., Any] = inner, **kwargs: Any) -> Any:
            try:
                result = __inner(*args, **kwargs)
            except ValidationError as e:  # the plugin built an invalid LaunchConfig: say which plugin
                raise InvalidLaunchConfigError(
                    f"plugin {plugin_name!r} built an invalid LaunchConfig: {e}"
                ) from e
            except Exception as e:  # a bug in the plugin: its own exception, noted with the plugin's name
                if hasattr(e, "add_note"):  # (Python 3.11+)
                    spec = kwargs.get("spec", args[0] if args else None)
                    e.add_note(f"raised by plugin {plugin_name!r}'s tritred_launch_config for "
                               f"{getattr(spec, 'name', '?')}")
                raise
            if isinstance(result, LaunchConfig):
                if result.decided_by is None:
                    result = result.model_copy(update={"decided_by": plugin_name})
            elif result is not None:
                raise InvalidLaunchConfigError(
                    f"plugin {plugin_name!r} returned {type(result).__name__} instead of a LaunchConfig"
                )
            return result

        impl.function = tagged  # type: ignore[misc]  # pluggy marks it Final; wrapping it once is deliberate


class Registry:
    """Holds the plugin manager, the loaded reductions and the state of the layers above (:meth:`state`).

    ``autoload=None`` follows ``TRITRED_DISABLE_PLUGIN_AUTOLOAD``; tests pass ``autoload=False`` and register
    plugins by hand with :meth:`register`.
    """

    def __init__(self, autoload: bool | None = None) -> None:
        if autoload is None:
            autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "") in ("", "0")
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.pm.register(_Core(), name="tritred_core")  # (module names, as the entry points)
        if os.environ.get(TRACE_ENV, "") not in ("", "0"):
            self.pm.trace.root.setwriter(lambda msg: print(msg, end="", file=sys.stderr))
            self.pm.enable_tracing()
        self._autoload = autoload
        self._loaded = False
        self._lock = threading.RLock()
        self._versions: dict[str, str | None] = {"tritred_core": _dist_version("tritred-core")}
        self._errors: dict[str, str] = {}
        self._entry_values: dict[str, str] = {}  # entry point name -> its object reference, as first loaded
        self._reductions: dict[str, Reduction] | None = None
        self._duplicates: list[str] = []
        self._states: dict[str, Any] = {}  # owner -> the object of :meth:`state`

    # -- plugins ---------------------------------------------------------------------------------------------
    def register(self, plugin: object, name: str | None = None, version: str | None = None) -> str:
        """Register ``plugin`` (a module or object with hookimpls) and return its name."""
        with self._lock:
            registered = self.pm.register(plugin, name=name)
            if registered is None:  # pluggy returns None for a blocked name
                raise RegistryError(f"plugin {name!r} is blocked")
            try:  # a hookimpl of no hookspec (a misspelt hook name) would never be called
                self.pm.check_pending()
            except pluggy.PluginValidationError as e:
                self.pm.unregister(name=registered)
                raise RegistryError(f"plugin {registered!r}: {e}") from e
            self._versions[registered] = version
            _tag_launch_config_results(self.pm, registered)
            self._invalidate()
            return registered

    def unregister(self, name: str) -> None:
        with self._lock:
            self.pm.unregister(name=name)
            self._versions.pop(name, None)
            self._invalidate()

    def _invalidate(self) -> None:
        self._reductions = None
        self._states = {}

    # -- state of the layers above ---------------------------------------------------------------------------
    def state(self, owner: str, factory: Callable[[], T]) -> T:
        """The object that ``owner`` (a layer above core: ``"tritred_ops"``) keeps in this registry: ``factory()``
        on first use, then the same object until a plugin is registered or unregistered, which drops every
        owner's state (what it holds, launch configs above all, may depend on the plugins).

        Core never looks inside it. A repeated call reads it on its hot path: one dict lookup when it exists.
        """
        try:
            return self._states[owner]  # type: ignore[no-any-return]  # (no cast: a call less on the hot path)
        except KeyError:
            with self._lock:
                return cast(T, self._states.setdefault(owner, factory()))

    def load_entrypoints(self) -> None:
        """Load every ``tritred`` entry point once (a no-op when autoload is off or already done)."""
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            if not self._autoload:
                return
            # An entry point's name is its plugin's name, by convention the top-level module that holds it
            # (``tritred_ops = "tritred_ops.plugin"``). Where two distributions declare one name, the entry point
            # whose object lives in that module is loaded first; the other is not loaded, and is reported.
            eps = sorted(entry_points(group=ENTRY_POINT_GROUP),
                         key=lambda ep: ep.value.split(":")[0].split(".")[0] != ep.name)
            for ep in eps:
                version = ep.dist.version if ep.dist is not None else None
                if self.pm.has_plugin(ep.name) or ep.name in self._errors:
                    if self._entry_values.get(ep.name, ep.value) != ep.value:  # two distributions, one name
                        dist = getattr(ep.dist, "name", None) or "?"
                        log.warning("tritred: plugin name %r of %s (%s) is taken by %s: not loaded", ep.name, dist,
                                    ep.value, self._entry_values[ep.name])
                        self._errors.setdefault(f"{ep.name} ({dist})", f"entry point {ep.name!r} = {ep.value!r}: "
                                                f"the name is taken by {self._entry_values[ep.name]!r}")
                    continue
                self._entry_values[ep.name] = ep.value
                try:
                    plugin = ep.load()
                    self.register(plugin, name=ep.name, version=version)
                except Exception as e:  # a broken plugin must not take tritred down
                    log.warning("tritred: plugin %r failed to load: %s", ep.name, e)
                    self._errors[ep.name] = f"{type(e).__name__}: {e}"
                    self._versions[ep.name] = version

    def plugins(self) -> list[PluginInfo]:
        """Every plugin seen: registered ones with their hooks, and those that failed with their error."""
        self.load_entrypoints()
        self.reductions(strict=False)  # surfaces errors raised by register hooks
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
            infos.append(PluginInfo(name=name, version=self._versions.get(name), hooks=hooks,
                                    error=self._errors.get(name)))
        for name, err in self._errors.items():
            if not self.pm.has_plugin(name):
                infos.append(PluginInfo(name=name, version=self._versions.get(name), error=err))
        return infos

    # -- reductions ------------------------------------------------------------------------------------------
    def reductions(self, strict: bool = True) -> dict[str, Reduction]:
        """All registered reductions by name, each spec stamped with its plugin and version.

        Each plugin's hook is called on its own so that one raising is reported (``plugins()``) without hiding
        the others. Duplicate names raise :class:`DuplicateReductionError` (with ``strict=False`` the first wins).
        """
        self.load_entrypoints()
        with self._lock:
            if self._reductions is not None:
                if strict and self._duplicates:  # a non-strict call cached the listing; still refuse it
                    raise DuplicateReductionError("; ".join(self._duplicates))
                return self._reductions
            found: dict[str, Reduction] = {}
            duplicates: list[str] = []
            for impl in reversed(self.pm.hook.tritred_register_reductions.get_hookimpls()):
                try:
                    returned: Any = impl.function()
                    records = list(returned or ())
                    for rec in records:
                        if not isinstance(rec, Reduction):
                            raise TypeError(f"tritred_register_reductions returned {type(rec).__name__}, "
                                            "expected tritred_core.Reduction")
                except Exception as e:
                    log.warning("tritred: plugin %r failed to register reductions: %s", impl.plugin_name, e)
                    self._errors[impl.plugin_name] = f"{type(e).__name__}: {e}"
                    continue
                for rec in records:
                    spec = rec.spec.model_copy(
                        update={"plugin": impl.plugin_name, "version": self._versions.get(impl.plugin_name)}
                    )
                    if spec.name in found:
                        duplicates.append(
                            f"reduction {spec.name!r} is registered by both plugin {found[spec.name].spec.plugin!r} "
                            f"and plugin {impl.plugin_name!r}"
                        )
                        continue
                    found[spec.name] = rec.model_copy(update={"spec": spec})
            self._duplicates = duplicates
            if duplicates and strict:
                raise DuplicateReductionError("; ".join(duplicates))
            self._reductions = dict(sorted(found.items()))
            return self._reductions

    def get(self, name: str) -> Reduction:
        """The reduction called ``name``; raises :class:`UnknownReductionError` listing the known ones."""
        reds = self.reductions()
        if name not in reds:
            raise UnknownReductionError(f"unknown reduction {name!r}; registered: {', '.join(reds) or 'none'}")
        return reds[name]

    # -- launch configs --------------------------------------------------------------------------------------
    def launch_config(self, spec: ReductionSpec, problem: Problem, device: DeviceInfo) -> LaunchConfig:
        """Ask the ``tritred_launch_config`` hook; the winner is validated and carries ``decided_by``.

        Not cached here: the ops layer caches per problem key in its :meth:`state`, so pydantic and pluggy stay off
        the hot path. The hooks get the registered reduction's spec, stamped with its plugin and version (as
        :meth:`reductions` lists it), when the caller passes the unstamped one its module defines.
        """
        self.load_entrypoints()
        if spec.plugin is None:
            registered = self.reductions(strict=False).get(spec.name)
            if registered is not None and registered.spec.model_copy(update={"plugin": None, "version": None}) == spec:
                spec = registered.spec
        try:
            config = self.pm.hook.tritred_launch_config(spec=spec, problem=problem, device=device)
        except ValidationError as e:  # a plugin built an invalid LaunchConfig
            raise InvalidLaunchConfigError(f"a launch-config hook failed validation for {spec.name}: {e}") from e
        return _validated(spec, problem, config)


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry (created on first use; the only global state tritred keeps)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Registry()
    return _default


def set_registry(registry: Registry | None) -> Registry | None:
    """Replace the process-wide registry (tests); returns the previous one."""
    global _default
    with _default_lock:
        previous, _default = _default, registry
    return previous
