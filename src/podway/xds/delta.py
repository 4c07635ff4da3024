"""Incremental (delta) ADS: only added, changed and removed resources cross the wire.

The rules shared with state of the world (stale nonces, NACKs, make before break) are described
in ``podway.xds.protocol``.

After a NACK Envoy keeps, per resource, the version it last accepted; so does this stream
(``accepted``), and ``known`` goes back to it. That keeps removals flowing (a rejected update of
a resource later deleted is still removed) and the readiness checks honest. A rejected endpoint
assignment counts as settled: Envoy will get nothing better until the config changes, and holding
every route push behind it would freeze the stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.xds import types
from podway.xds.cache import Cache
from podway.xds.protocol import (
    DEPENDENT,
    HELD_FOR_CLUSTERS,
    Ack,
    Event,
    Nack,
    new_nonce,
    refused_for_long,
)


@dataclass(slots=True)
class _DeltaType:
    wildcard: bool
    names: set[str] = field(default_factory=set)
    known: dict[str, str] = field(default_factory=dict)  # name → version Envoy has (or was sent)
    accepted: dict[str, str] = field(default_factory=dict)  # name → version Envoy ACKed
    nonces: dict[str, tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]] = field(
        default_factory=dict)
    # ^ nonce → (system version, (name, version) sent, names removed), for responses Envoy has
    #   not answered yet
    retry: set[str] = field(default_factory=set)  # NACKed: sent again with the next change
    rejected: bool = False  # the newest answer was a NACK
    rejected_at: float = 0.0  # clock() when that NACK came
    seen: str = ""  # cache version last compared against
    dirty: set[str] = field(default_factory=set)  # names to look at again regardless
    held: set[str] = field(default_factory=set)  # removals deferred until routes are current


class DeltaStream:
    """One incremental (delta) ADS stream (one Envoy)."""

    def __init__(self, cache: Cache, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.cache = cache
        self.node = ""
        self._types: dict[str, _DeltaType] = {}

    def on_request(self, request: d.DeltaDiscoveryRequest
                   ) -> tuple[list[d.DeltaDiscoveryResponse], list[Event]]:
        if request.node.id:
            self.node = request.node.id
        type_url = request.type_url
        events: list[Event] = []
        state = self._types.get(type_url)
        subscribe = set(request.resource_names_subscribe)
        first = state is None
        if state is None:
            wildcard = type_url in types.WILDCARD_TYPES and (not subscribe or "*" in subscribe)
            state = self._types[type_url] = _DeltaType(wildcard=wildcard)
            state.known.update(request.initial_resource_versions)
            state.accepted.update(request.initial_resource_versions)
        if request.response_nonce:
            answered = state.nonces.pop(request.response_nonce, None)
            if answered is not None:
                version, sent, removed = answered
                state.rejected = request.HasField("error_detail")
                if state.rejected:
                    state.rejected_at = self.clock()
                    events.append(Nack(self.node, type_url, version, request.response_nonce,
                                       request.error_detail.message))
                    # Envoy kept its previous versions: so do we, and we offer what it rejected
                    # again with the next real change of this type (never in a blind loop).
                    for name in (*(n for n, _ in sent), *removed):
                        if name in state.accepted:
                            state.known[name] = state.accepted[name]
                        else:
                            state.known.pop(name, None)
                        state.retry.add(name)
                else:
                    events.append(Ack(self.node, type_url, version, request.response_nonce))
                    state.accepted.update(sent)
                    for name in removed:
                        state.accepted.pop(name, None)
        if "*" in subscribe:
            state.wildcard = True
        if "*" in request.resource_names_unsubscribe:
            state.wildcard = False
        new_names = subscribe - {"*"} - state.names
        state.names |= subscribe - {"*"}
        for name in request.resource_names_unsubscribe:
            state.names.discard(name)
            state.known.pop(name, None)
            state.accepted.pop(name, None)
        out: list[d.DeltaDiscoveryResponse] = []
        if first or new_names:
            out = self._respond(type_url, state, force=first, asked=new_names,
                                defer=self._defer(type_url))
        return out + self.on_change(), events

    def on_change(self) -> list[d.DeltaDiscoveryResponse]:
        """Everything that should be sent now (held-back types go out once unblocked)."""
        out: list[d.DeltaDiscoveryResponse] = []
        for type_url in types.PUSH_ORDER:
            state = self._types.get(type_url)
            if state is None:
                continue
            idle = (self.cache.get(type_url).version == state.seen and not state.dirty
                    and not state.held)
            if idle:
                continue  # nothing new for this type: skip the (possibly large) comparison
            if type_url in HELD_FOR_CLUSTERS and not self._clusters_settled():
                continue
            out.extend(self._respond(type_url, state, force=False, asked=set(),
                                     defer=self._defer(type_url)))
        return out

    def _defer(self, type_url: str) -> bool:
        return type_url in (types.CLUSTER, types.ENDPOINT) and not self._routes_current()

    def _clusters_settled(self) -> bool:
        cds = self._types.get(types.CLUSTER)
        if cds is None or cds.rejected:
            return True
        if cds.nonces:
            return False
        eds = self._types.get(types.ENDPOINT)
        assignments = self.cache.get(types.ENDPOINT).resources
        for name in cds.known:
            resource = assignments.get(name)
            if resource is None:
                continue
            if eds is None or name not in eds.names:
                return False
            if eds.known.get(name) != resource.digest and name not in eds.retry:
                return False  # sent and not yet answered; a NACKed one (in retry) is settled
        return True

    def _routes_current(self) -> bool:
        for type_url in HELD_FOR_CLUSTERS:
            state = self._types.get(type_url)
            if state is None:
                continue
            if state.nonces:
                return False
            if refused_for_long(rejected=state.rejected, rejected_at=state.rejected_at,
                                now=self.clock()):
                continue  # refused for long: stop holding removals for it
            resources = self.cache.get(type_url).resources
            scope = resources.keys() if state.wildcard else state.names
            if any(n in resources and state.known.get(n) != resources[n].digest for n in scope):
                return False
            if any(n not in resources for n in state.known):
                return False
        return True

    def _respond(self, type_url: str, state: _DeltaType, *, force: bool, asked: set[str],
                 defer: bool) -> list[d.DeltaDiscoveryResponse]:
        if not self.cache.ready:
            return []
        snapshot = self.cache.get(type_url)
        resources = snapshot.resources
        changed = (None if force or not state.seen else frozenset()
                   if snapshot.version == state.seen
                   else self.cache.names_changed(type_url, state.seen))
        if changed is None:  # compare everything
            candidates = set(resources.keys() if state.wildcard else state.names)
            candidates.update(state.known)
        else:  # only what changed since we last looked
            candidates = set(changed) | state.dirty | state.held
        if changed is None or snapshot.version != state.seen:
            candidates |= state.retry
            state.retry.clear()
        candidates |= asked
        response = d.DeltaDiscoveryResponse(type_url=type_url,
                                            system_version_info=snapshot.version)
        for name in sorted(candidates):
            resource = resources.get(name)
            if resource is None:
                if name in state.known:
                    if defer:  # removals wait until no route points at the removed cluster
                        state.held.add(name)
                        continue
                    response.removed_resources.append(name)
                    del state.known[name]
                    state.held.discard(name)
                elif name in asked:
                    response.removed_resources.append(name)  # "does not exist"
                continue
            if not (state.wildcard or name in state.names):
                continue
            if state.known.get(name) == resource.digest:
                continue
            if state.known.get(name) is not None:
                self._invalidate(type_url, name)
            response.resources.append(d.Resource(name=name, version=resource.digest,
                                                 resource=resource.packed))
            state.known[name] = resource.digest
        state.seen = snapshot.version
        state.dirty.clear()
        if not response.resources and not response.removed_resources and not force:
            return []
        response.nonce = new_nonce()
        state.nonces[response.nonce] = (snapshot.version,
                                        tuple((r.name, r.version) for r in response.resources),
                                        tuple(response.removed_resources))
        return [response]

    def _invalidate(self, type_url: str, name: str) -> None:
        dependent = self._types.get(DEPENDENT.get(type_url, ""))
        if dependent is not None:
            dependent.known.pop(name, None)
            dependent.dirty.add(name)
