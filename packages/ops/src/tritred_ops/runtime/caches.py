"""The ops state kept per registry: one bounded map per kind, dropped whenever a plugin is (un)registered.

What a call computes once and reuses lives here: canonical views, launch configs, call plans, device info,
occupancy counts, the tuning file's entries, torch's answers to argument forms it may not accept. Each kind has
its own map and its own bound; a map that reaches its bound evicts its oldest entries (insertion order), so an
unbounded stream of shapes never grows memory and never throws away the other kinds.

The object lives in the registry (``get_registry().state("tritred_ops", Caches)``): registering or unregistering
a plugin drops it whole, since a launch config, and every plan built on one, may depend on the plugins.

A repeated call reads :attr:`Caches.plans` on its hot path: ``caches().plans.get(key)`` is one registry lookup,
one attribute and one dict get.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tritred_core import DeviceInfo, LaunchConfig, get_registry

if TYPE_CHECKING:
    from .replay import Plan
    from .view import View

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: The owner name of the ops state in the registry (:meth:`tritred_core.Registry.state`).
OWNER = "tritred_ops"


#: Entries per map. Views and configs are small, and many shapes may stream through; plans hold compiled launchers
#: and generated code; the other maps have a handful of keys per process.
LIMITS = {"views": 1 << 14, "configs": 1 << 14, "launch_configs": 1 << 14, "plans": 1 << 12, "devices": 64,
          "occupancy": 1 << 10, "tuning": 16, "accepts": 64}


class Bounded(dict[K, V], Generic[K, V]):
    """A dict of at most ``limit`` entries: :meth:`put` past the bound evicts the oldest entry first.

    A plain dict underneath, so that a lookup (``get``, ``[]``) costs what a dict lookup costs.
    """

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: K, value: V) -> V:
        """Store ``value`` under ``key`` (evicting the oldest entries past :attr:`limit`) and return it."""
        if key not in self:
            while len(self) >= self.limit:
                del self[next(iter(self))]
        self[key] = value
        return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value under ``key``, made by ``make()`` and stored on a miss."""
        try:
            return self[key]
        except KeyError:
            return self.put(key, make())


class Caches:
    """One typed, bounded map per kind of ops state (keys: plain tuples, so that no pydantic model is hashed on
    a hit).

    - ``views``: (shape, strides, reduced dims, reorder) -> the canonical :class:`~.view.View` (or None);
    - ``configs``: (op, dtype, view, layout, device) -> the :class:`~tritred_core.LaunchConfig` of :func:`decide`;
    - ``launch_configs``: (op, problem, device) -> a plugin op's config (:func:`launch_config`);
    - ``plans``: a call's key -> its :class:`~.replay.Plan`;
    - ``devices``: a torch device's name -> its :class:`~tritred_core.DeviceInfo`;
    - ``occupancy``: (compiled kernel, device) -> resident programs (the key keeps the kernel alive, so that its
      entry is never taken for another kernel's);
    - ``tuning``: the tuning file's path -> its entries;
    - ``accepts``: an argument form -> whether the installed torch accepts it (:func:`torch_accepts`).

    ``native_replay`` and ``native_inference`` are the native launcher's ``replay`` (the key, the lookup in
    ``plans`` and the replay of a repeated call in one C++ call: :func:`~.replay.replay_plan`) and its
    ``replay_inference`` (the same at a public op's entry: :func:`~.replay.replayed`), both bound to ``plans``, once
    the extension is loaded, else None.
    """

    __slots__ = ("accepts", "configs", "devices", "launch_configs", "native_inference", "native_replay", "occupancy",
                 "plans", "tuning", "views")

    def __init__(self) -> None:
        limits = LIMITS
        self.views: Bounded[tuple[Any, ...], View | None] = Bounded(limits["views"])
        self.configs: Bounded[tuple[Any, ...], LaunchConfig] = Bounded(limits["configs"])
        self.launch_configs: Bounded[tuple[Any, ...], LaunchConfig] = Bounded(limits["launch_configs"])
        self.plans: Bounded[Hashable, Plan] = Bounded(limits["plans"])
        self.devices: Bounded[str, DeviceInfo] = Bounded(limits["devices"])
        self.occupancy: Bounded[tuple[Any, str], int] = Bounded(limits["occupancy"])
        self.tuning: Bounded[str, dict[str, Any]] = Bounded(limits["tuning"])
        self.accepts: Bounded[str, bool] = Bounded(limits["accepts"])
        self.native_replay: Callable[..., Any] | None = None
        self.native_inference: Callable[..., Any] | None = None
        self.load_native()

    def load_native(self) -> None:
        """Take the native launcher's replays when the extension is loaded (at creation, and when the first
        native plan is saved)."""
        from .native import loaded_replays  # (torch and the extension: not imported with this module)
        from .replay import PLAIN

        self.native_replay, self.native_inference = loaded_replays(self.plans, PLAIN)

    def clear(self) -> None:
        """Empty every map (after ``tritred tune`` stores a config: the next decision reads it)."""
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, Bounded):  # (the native replays stay: bound to ``plans``, which is cleared)
                value.clear()


def caches() -> Caches:
    """The ops state of the process-wide registry (made on first use, dropped when the plugins change)."""
    return get_registry().state(OWNER, Caches)
