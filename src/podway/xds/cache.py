"""A versioned snapshot of every resource, per xDS type, shared by all ADS streams.

Invariants:

* A resource's version is the digest of its bytes, so an unchanged resource keeps its version
  across any number of updates (and across controller restarts, which matters for delta xDS:
  a reconnecting Envoy's ``initial_resource_versions`` still match).
* A type's version changes only when one of its resources is added, changed or removed; a type
  whose version did not change is never pushed. An endpoint-only change therefore moves only the
  endpoint type.
* Readers get immutable ``TypeSnapshot`` objects; ``changed()`` hands out an event that fires on
  the next update, so a stream never polls and a slow stream never builds a backlog (it just sees
  the newest snapshot when it wakes).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podway.envoy_config import Resource, Resources
from podway.xds import types

_EMPTY: Mapping[str, Resource] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TypeSnapshot:
    version: str
    resources: Mapping[str, Resource] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Change:
    """What one ``Cache.set`` changed in one type."""

    version: str
    updated: frozenset[str]
    removed: frozenset[str]


class Cache:
    def __init__(self) -> None:
        # A boot prefix keeps state-of-the-world versions unique across controller restarts.
        self._boot = os.urandom(3).hex()
        self._counter = itertools.count(1)
        self._types: dict[str, TypeSnapshot] = {
            t: TypeSnapshot(version="") for t in types.PUSH_ORDER}
        self._event = asyncio.Event()
        self._ready = False
        self._last: dict[str, tuple[str, Change]] = {}  # type → (version before, change)

    @property
    def ready(self) -> bool:
        """False until the first ``set``: streams wait instead of sending an empty config."""
        return self._ready

    def get(self, type_url: str) -> TypeSnapshot:
        return self._types.get(type_url, TypeSnapshot(version=""))

    def names_changed(self, type_url: str, since: str) -> frozenset[str] | None:
        """Names updated or removed since version ``since`` if that was the previous version
        (one step back), else None: the caller must compare everything."""
        last = self._last.get(type_url)
        if last is None or last[0] != since:
            return None
        return last[1].updated | last[1].removed

    def changed(self) -> asyncio.Event:
        """An event set at the next ``set`` that changes anything."""
        return self._event

    def set(self, resources: Resources) -> dict[str, Change]:
        """Replace every type's resources; returns only the types that changed."""
        changes: dict[str, Change] = {}
        for type_url in types.PUSH_ORDER:
            new = resources.get(type_url, _EMPTY)
            old = self._types[type_url]
            if new is old.resources and old.version:
                continue
            updated = frozenset(n for n, r in new.items()
                                if (prev := old.resources.get(n)) is not r
                                and (prev is None or prev.digest != r.digest))
            removed = frozenset(n for n in old.resources if n not in new)
            if not updated and not removed and old.version:
                continue
            version = f"{self._boot}-{next(self._counter)}"
            # Builders hand over fresh read-only mappings, so no copy is needed.
            kept = new if isinstance(new, MappingProxyType) else MappingProxyType(dict(new))
            self._types[type_url] = TypeSnapshot(version, kept)
            changes[type_url] = Change(version, updated, removed)
            self._last[type_url] = (old.version, changes[type_url])
        self._ready = True
        if changes:
            event, self._event = self._event, asyncio.Event()
            event.set()
        return changes
