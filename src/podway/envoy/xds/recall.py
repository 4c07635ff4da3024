"""Make before break across a Podway restart: what a reconnecting engine holds, recalled from
the versions it names.

The cache bridges a wholesale member swap (``podway.envoy.xds.handover``) by comparing a new
load assignment with the one it served before. A restarted Podway served nothing before: a
member swap made while it was down (a Service switched to ``nodeportlocal``, a selector
changed, pods replaced) reached the engine as one final assignment, and Envoy treats each new
member of an actively checked pool as failed until its first check passes, while the members
it replaced left at once. Until that check, the pool had no member: Envoy closed TCP
connections it had just accepted (a reset for a client whose request was unread) and answered
HTTP with 503s (``tests/integration/controller/test_traffic.py`` saw one reset in CI).

An engine that reconnects over delta xDS names the version it holds of each load assignment
(``initial_resource_versions``), and a load assignment's version names up to
``SERVING_IN_VERSION`` of its serving members (``podway.envoy.config.endpoints``). So a stream
recalls those members, and when the cache's assignment would replace every one of them, the
engine first gets an interim: the new assignment plus the recalled members at priority 1,
exactly as the cache's own handover, for the same bounded hold (``handover.hold_s``); the cache's
assignment follows when the hold ends. A change inside the hold that only adds to the bridged
assignment (``handover.carries``: one more pod ready) keeps the recalled members held, to the
same end; any other is bridged from the interim, as the engine holds it.

Invariants: only a version the engine named on connect, and still holds, is recalled (a
resource sent since is known to the stream); nothing is held for a pool without active checks,
for an assignment without serving members, or when one recalled member stays; an interim
counts as settled for its pool (listeners and routes do not wait for the hold); a malformed
version recalls nothing; an interim Envoy refused is offered again as an interim while the hold
lasts (on its own after the refusal's backoff, or in the halves that isolate a refusal).
Pure: the stream's clock drives the holds (``next_at``, ``due``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2 as ec
from envoy.config.endpoint.v3 import endpoint_pb2

from podway.envoy.config import Resource
from podway.envoy.config.endpoints import (
    assignment_resource,
    held_in_version,
    serving_in_version,
)
from podway.envoy.xds import handover


@dataclass(frozen=True, slots=True)
class _Bridge:
    final: str  # digest of the cache's assignment the interim stands in for
    interim: Resource
    until: float  # clock() value at which the final is sent
    bridged: endpoint_pb2.ClusterLoadAssignment  # that assignment
    held: list[ec.LbEndpoint]  # the recalled members held: the checked ones


class Recall:
    """One delta stream's recalled load assignments and the interims sent in their place."""

    def __init__(self) -> None:
        self._named: dict[str, str] = {}  # pool → version the engine named when it connected
        self._bridges: dict[str, _Bridge] = {}

    def adopt(self, versions: Mapping[str, str]) -> None:
        """The engine's first endpoint request names what it holds."""
        self._named.update(versions)

    def serve(self, name: str, resource: Resource, *, held: str | None,
              clusters: Mapping[str, Resource], now: float) -> Resource:
        """What to send for pool ``name`` now that the cache has ``resource`` and the engine
        holds version ``held``: ``resource`` itself, or an interim in its place."""
        named = self._named.pop(name, None)
        bridge = self._bridges.pop(name, None)
        if bridge is not None:
            if bridge.final == resource.digest:
                if now < bridge.until:
                    self._bridges[name] = bridge
                    return bridge.interim
                return resource  # the hold is over
            carried = self._carry(name, resource, bridge, clusters.get(name), now)
            if carried is not None:
                return carried
            # Changed again: bridge from the interim as the engine holds it, every part.
            version = bridge.interim.digest
            recalled = serving_in_version(version) + held_in_version(version)
        elif named is None or named != held or held == resource.digest:
            return resource  # not recalled, something was sent since, or nothing changes
        else:  # an interim's version names its held members apart: only those are checked
            recalled = held_in_version(named) or serving_in_version(named)
        cluster = clusters.get(name)
        hold_s = handover.hold_s(cluster.message if cluster is not None and isinstance(
            cluster.message, cluster_pb2.Cluster) else None)
        new = resource.message
        if not recalled or hold_s is None or not isinstance(
                new, endpoint_pb2.ClusterLoadAssignment):
            return resource
        departing = handover.departing(handover.members(recalled), new)
        if not departing:
            return resource
        interim = assignment_resource(name, handover.interim(new, departing),
                                      held=handover.keys(departing))
        self._bridges[name] = _Bridge(resource.digest, interim, now + hold_s, new, departing)
        return interim

    def _carry(self, name: str, resource: Resource, bridge: _Bridge,
               cluster: Resource | None, now: float) -> Resource | None:
        """The interim for a change inside ``bridge``'s hold that only adds to what it
        bridged: the recalled members stay held, to the same end; None otherwise."""
        new = resource.message
        if now >= bridge.until or cluster is None \
                or not isinstance(cluster.message, cluster_pb2.Cluster) \
                or handover.hold_s(cluster.message) is None \
                or not isinstance(new, endpoint_pb2.ClusterLoadAssignment) \
                or not handover.carries(bridge.bridged, new):
            return None
        held = handover.departing(handover.members(bridge.held), new)
        if not held:
            return None
        interim = assignment_resource(name, handover.interim(new, held),
                                      held=handover.keys(held))
        self._bridges[name] = _Bridge(resource.digest, interim, bridge.until, new, held)
        return interim

    def settled(self, name: str, known: str | None, digest: str) -> bool:
        """The engine was sent the interim standing in for the cache's ``digest``."""
        bridge = self._bridges.get(name)
        return bridge is not None and bridge.final == digest and known == bridge.interim.digest

    def forget(self, name: str) -> None:
        """The pool left the engine (removed, unsubscribed)."""
        self._named.pop(name, None)
        self._bridges.pop(name, None)

    def next_at(self) -> float | None:
        """clock() value at which the first hold ends, if any."""
        return min((b.until for b in self._bridges.values()), default=None)

    def due(self, now: float) -> set[str]:
        """Pools whose hold has ended: their final assignment is owed."""
        return {name for name, b in self._bridges.items() if b.until <= now}
