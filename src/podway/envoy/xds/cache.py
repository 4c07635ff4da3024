"""A versioned snapshot of every resource, per xDS type, shared by all ADS streams.

Invariants:

* A resource's version is the digest of its content (``envoy_config.Resource``: of its bytes,
  or of a route table's parts), so an unchanged resource keeps its version
  across any number of updates (and across controller restarts, which matters for delta xDS:
  a reconnecting Envoy's ``initial_resource_versions`` still match).
* A type's version changes only when one of its resources is added, changed or removed; a type
  whose version did not change is never pushed. An endpoint-only change therefore moves only the
  endpoint type.
* ``set`` with a hint (``envoy_config.Builder.hint``) compares only the names it gives, when the
  mapping it names is the one held; that is the builder's promise, not checked.
* Readers get immutable ``TypeSnapshot`` objects; ``changed()`` hands out an event that fires on
  the next update, so a stream never polls and a slow stream never builds a backlog (it just sees
  the newest snapshot when it wakes).
* Make before break (``podway.envoy.xds.handover``): a load assignment that would replace every
  serving member of an actively checked pool is served as an interim (the departing members at
  priority 1) for a bounded hold, then the final one is set. A newer assignment for that pool
  that only adds to the final (``handover.carries``) keeps the hold's own departing members
  held, to the same end; any other ends the hold at once (it is compared with the interim).
  Holds need a running event loop (without one, the final is served).
  Cost: only pools whose assignment changed are compared.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2 as ec
from envoy.config.endpoint.v3 import endpoint_pb2

from podway.envoy import types
from podway.envoy.config import Resource, Resources
from podway.envoy.config.endpoints import assignment_resource
from podway.envoy.xds import handover

_EMPTY: Mapping[str, Resource] = MappingProxyType({})
#: How many changes of a type ``names_changed`` can go back (older: compare everything).
HISTORY = 16

#: Per type URL: (the mapping resources were derived from, the only names that may differ).
Hint = Mapping[str, tuple[Mapping[str, Resource], frozenset[str]]]


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


@dataclass(slots=True)
class _Hold:
    final: Resource
    interim: Resource
    timer: asyncio.TimerHandle
    held: list[ec.LbEndpoint]  # the departing members the hold began with: checked ones


class Cache:
    def __init__(self) -> None:
        # A boot prefix keeps state-of-the-world versions unique across controller restarts.
        self._boot = os.urandom(3).hex()
        self._counter = itertools.count(1)
        self._types: dict[str, TypeSnapshot] = {
            t: TypeSnapshot(version="") for t in types.PUSH_ORDER}
        self._event = asyncio.Event()
        self._ready = False
        # type → its last changes, oldest first: (version before, the change)
        self._last: dict[str, deque[tuple[str, Change]]] = {}
        self._holds: dict[str, _Hold] = {}  # pool → its interim assignment, until settled

    @property
    def ready(self) -> bool:
        """False until the first ``set``: streams wait instead of sending an empty config."""
        return self._ready

    def is_set(self, type_url: str) -> bool:
        """Whether ``type_url`` was ever set: streams answer no type before (a type left
        out of ``set_early`` waits for the first ``set``)."""
        return bool(self._types[type_url].version)

    def set_early(self, resources: Resources) -> dict[str, Change]:
        """Set only the types in ``resources``, before the first ``set``: a first start's
        clusters and load assignments go ahead of its listeners and routes, so Envoy warms
        them while those are still being built (``podway.pipeline``). Every other type stays
        unset (``is_set``) until ``set``; ``ready`` stays False until then."""
        return self._set(self._handover(resources), only=frozenset(resources))

    def get(self, type_url: str) -> TypeSnapshot:
        return self._types.get(type_url, TypeSnapshot(version=""))

    def names_changed(self, type_url: str, since: str) -> frozenset[str] | None:
        """Names updated or removed since version ``since`` if that is one of the last
        ``HISTORY`` versions of the type (a stream a few changes behind still compares only
        what moved), else None: the caller must compare everything."""
        steps = self._last.get(type_url, ())
        names: set[str] = set()
        for before, change in reversed(steps):
            names |= change.updated
            names |= change.removed
            if before == since:
                return frozenset(names)
        return None

    def changed(self) -> asyncio.Event:
        """An event set at the next ``set`` that changes anything."""
        return self._event

    def set(self, resources: Resources, *, hint: Hint | None = None) -> dict[str, Change]:
        """Replace every type's resources; returns only the types that changed.

        ``hint`` (``envoy_config.Builder.hint``): per type, the mapping the resources were made
        from and the only names that may differ from it. When that mapping is the one this
        cache holds, only those names are compared (O(change)); otherwise every one is."""
        if hint:
            held = set(self._holds)
            handed = self._handover(resources, hint)
            names = hint.get(types.ENDPOINT)
            if names is not None:  # pools held or released by the handover differ too
                hint = {**hint, types.ENDPOINT: (names[0], names[1] | held | set(self._holds))}
            return self._set(handed, hint)
        return self._set(self._handover(resources))

    @property
    def holding(self) -> frozenset[str]:
        """Pools served an interim assignment right now."""
        return frozenset(self._holds)

    def _handover(self, resources: Resources, hint: Hint | None = None) -> Resources:
        """``resources`` with an interim assignment for each pool whose serving members would
        all be replaced (and the one still held for a pool whose final did not change)."""
        new = resources.get(types.ENDPOINT, _EMPTY)
        served = self._types[types.ENDPOINT].resources
        for name in [n for n in self._holds if n not in new]:
            self._holds.pop(name).timer.cancel()
        replaced: dict[str, Resource] = {}
        known = hint.get(types.ENDPOINT) if hint else None
        names: Iterable[str] = (new if known is None or known[0] is not served
                                else [n for n in {*known[1], *self._holds} if n in new])
        for name in names:
            resource = new[name]
            before = served.get(name)
            if before is None or before is resource:
                continue
            hold = self._holds.get(name)
            if hold is not None and hold.final.digest == resource.digest:
                replaced[name] = hold.interim
                continue
            if hold is not None:
                carried = self._carry(name, hold, resource, resources)
                if carried is not None:
                    replaced[name] = carried
                    continue
                hold.timer.cancel()
                del self._holds[name]
            if before.digest == resource.digest:
                continue
            interim = self._interim(name, before, resource, resources)
            if interim is not None:
                replaced[name] = interim
        if not replaced:
            return resources
        out = dict(resources)
        out[types.ENDPOINT] = MappingProxyType({**new, **replaced})
        return out

    def _interim(self, name: str, before: Resource, after: Resource,
                 resources: Resources) -> Resource | None:
        cluster = resources.get(types.CLUSTER, _EMPTY).get(name)
        hold_s = handover.hold_s(cluster.message if cluster is not None and isinstance(
            cluster.message, cluster_pb2.Cluster) else None)
        if hold_s is None or not isinstance(before.message, endpoint_pb2.ClusterLoadAssignment) \
                or not isinstance(after.message, endpoint_pb2.ClusterLoadAssignment):
            return None
        held = handover.departing(before.message, after.message)
        if not held:
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None  # no loop to end the hold on: serve the final assignment
        interim = assignment_resource(name, handover.interim(after.message, held),
                                      held=handover.keys(held))
        timer = loop.call_later(hold_s, self._settle, name)
        self._holds[name] = _Hold(final=after, interim=interim, timer=timer, held=held)
        return interim

    def _carry(self, name: str, hold: _Hold, newer: Resource,
               resources: Resources) -> Resource | None:
        """The interim for ``newer`` inside ``hold`` when it only adds to the hold's final:
        the hold's own departing members stay held, to the hold's end (never extended); None
        otherwise (the hold ends)."""
        final, new = hold.final.message, newer.message
        cluster = resources.get(types.CLUSTER, _EMPTY).get(name)
        if cluster is None or not isinstance(cluster.message, cluster_pb2.Cluster) \
                or handover.hold_s(cluster.message) is None \
                or not isinstance(final, endpoint_pb2.ClusterLoadAssignment) \
                or not isinstance(new, endpoint_pb2.ClusterLoadAssignment) \
                or not handover.carries(final, new):
            return None
        held = handover.departing(handover.members(hold.held), new)
        if not held:
            return None  # a held member serves again, or the pool was emptied
        interim = assignment_resource(name, handover.interim(new, held),
                                      held=handover.keys(held))
        self._holds[name] = _Hold(final=newer, interim=interim, timer=hold.timer, held=held)
        return interim

    def _settle(self, name: str) -> None:
        """The hold of ``name`` ended: serve its final assignment."""
        hold = self._holds.pop(name, None)
        if hold is None:
            return
        current = {t: self._types[t].resources for t in types.PUSH_ORDER}
        current[types.ENDPOINT] = MappingProxyType(
            {**current[types.ENDPOINT], name: hold.final})
        self._set(current)

    def _set(self, resources: Resources, hint: Hint | None = None,
             only: frozenset[str] | None = None) -> dict[str, Change]:
        changes: dict[str, Change] = {}
        for type_url in types.PUSH_ORDER:
            if only is not None and type_url not in only:
                continue
            new = resources.get(type_url, _EMPTY)
            old = self._types[type_url]
            if new is old.resources and old.version:
                continue
            known = hint.get(type_url) if hint else None
            hinted = known is not None and known[0] is old.resources and bool(old.version)
            if known is not None and hinted:
                updated = frozenset(n for n in known[1] if n in new
                                    and (prev := old.resources.get(n)) is not new[n]
                                    and (prev is None or prev.digest != new[n].digest))
                removed = frozenset(n for n in known[1]
                                    if n not in new and n in old.resources)
            else:
                updated = frozenset(n for n, r in new.items()
                                    if (prev := old.resources.get(n)) is not r
                                    and (prev is None or prev.digest != r.digest))
                removed = frozenset(n for n in old.resources if n not in new)
            # Builders hand over fresh read-only mappings, so no copy is needed.
            kept = new if isinstance(new, MappingProxyType) else MappingProxyType(dict(new))
            if not updated and not removed and old.version:
                # Equal content: hold the new mapping (same version), so the builder's next
                # hint, which names it as its base, applies again (after an interim, too).
                self._types[type_url] = TypeSnapshot(old.version, kept)
                continue
            version = f"{self._boot}-{next(self._counter)}"
            self._types[type_url] = TypeSnapshot(version, kept)
            changes[type_url] = Change(version, updated, removed)
            self._last.setdefault(type_url, deque(maxlen=HISTORY)).append(
                (old.version, changes[type_url]))
        self._ready = self._ready or only is None
        if changes:
            event, self._event = self._event, asyncio.Event()
            event.set()
        return changes
