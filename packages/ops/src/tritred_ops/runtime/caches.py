"""Ops state kept in the registry: computed once per key, cleared whenever a plugin is (un)registered."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tritred_core import get_registry

_CACHE_LIMIT = 1 << 14  # entries in the registry's launch cache before it is cleared (unbounded shape streams)


def cached(key: Hashable, make: Any) -> Any:
    """registry.cache[key], computed by ``make()`` once (the hot path of a repeated call is dict lookups)."""
    cache = get_registry().cache
    try:
        return cache[key]
    except KeyError:
        value = make()
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value
        return value
