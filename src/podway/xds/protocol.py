"""The ADS protocol as sans-I/O state machines: requests and cache changes in, responses out.

``SotwStream`` speaks state-of-the-world, ``DeltaStream`` incremental xDS; ``podway.xds.server``
is the thin asyncio shell that feeds them. Keeping the decisions here makes them testable as
transcripts (request → expected responses) without gRPC or Envoy.

Rules both follow (from the xDS protocol):

* A request whose ``response_nonce`` is not the newest nonce we sent for its type is stale and
  only its subscription part counts (delta) or it is ignored (state of the world).
* A NACK (``error_detail`` set) is recorded and reported, never answered by re-sending the same
  resources: Envoy keeps its last good config, and we wait for the next real change.
* Responses of one push come out in ``types.PUSH_ORDER`` so dependencies arrive first.
* State of the world sends every resource of wildcard types (listeners, clusters), but only
  new or changed ones of named types (routes, endpoints, secrets): Envoy does not treat a named
  resource missing from a response as removed, so an endpoint change sends one load assignment.
* Make before break (the xDS ordering rules), so no request fails during a change:
  listeners and routes are held back until every cluster Envoy has is *settled* — its CDS
  response answered and its load assignment sent — because a route to a warming cluster
  answers 503; and clusters (with their load assignments) are removed only once listeners and
  routes are current and acknowledged, because a route to a removed cluster answers 503 too.
  (docs/design/xds-ordering.md)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.xds import types
from podway.xds.cache import Cache

_nonces = itertools.count(1)

# A changed cluster (listener) is re-created by Envoy and waits for its load assignment (route
# table) again; re-send those even though they did not change, or the new one stays warming.
_DEPENDENT = {types.CLUSTER: types.ENDPOINT, types.LISTENER: types.ROUTE}
# Listeners and routes wait for clusters to be settled (see the module docstring).
_HELD_FOR_CLUSTERS = (types.LISTENER, types.ROUTE)


@dataclass(frozen=True, slots=True)
class Nack:
    """Envoy rejected a response: which type, which version, and Envoy's reason."""

    node: str
    type_url: str
    version: str
    nonce: str
    message: str


@dataclass(frozen=True, slots=True)
class Ack:
    node: str
    type_url: str
    version: str
    nonce: str


Event = Ack | Nack


def _nonce() -> str:
    return str(next(_nonces))


@dataclass(slots=True)
class _SotwType:
    wildcard: bool
    names: frozenset[str] = frozenset()
    nonce: str = ""
    answered: bool = True  # Envoy answered (ACK or NACK) our newest response of this type
    rejected: bool = False  # ... with a NACK
    sent_version: str = ""
    sent: dict[str, str] = field(default_factory=dict)  # name → digest Envoy was sent
    packed: dict[str, Any] = field(default_factory=dict)  # wildcard types: what Envoy holds
    deferred: bool = False  # removals held back until routes are current
    seen: str = ""  # cache version last compared against (named types)
    dirty: set[str] = field(default_factory=set)  # names to re-send regardless of digest


class SotwStream:
    """One state-of-the-world ADS stream (one Envoy)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.node = ""
        self._types: dict[str, _SotwType] = {}

    def on_request(self, request: d.DiscoveryRequest
                   ) -> tuple[list[d.DiscoveryResponse], list[Event]]:
        if request.node.id:
            self.node = request.node.id
        type_url = request.type_url
        events: list[Event] = []
        state = self._types.get(type_url)
        if state is not None and request.response_nonce != state.nonce:
            return [], events  # stale: Envoy has not seen our newest response yet
        if state is not None and request.response_nonce:
            state.answered = True
            state.rejected = request.HasField("error_detail")
            if state.rejected:
                events.append(Nack(self.node, type_url, state.sent_version, state.nonce,
                                   request.error_detail.message))
            else:
                events.append(Ack(self.node, type_url, request.version_info, state.nonce))
        names = frozenset(request.resource_names) - {"*"}
        wildcard = type_url in types.WILDCARD_TYPES and not names
        out: list[d.DiscoveryResponse] = []
        if state is None:
            state = self._types[type_url] = _SotwType(wildcard=wildcard, names=names)
            out = self._respond(type_url, state, force=True)
        elif names != state.names or wildcard != state.wildcard:
            added = names - state.names
            state.names, state.wildcard = names, wildcard
            for name in list(state.sent):
                if name not in names and not wildcard:
                    del state.sent[name]
            if added or wildcard:
                out = self._respond(type_url, state, force=True)
        return out + self.on_change(), events

    def on_change(self) -> list[d.DiscoveryResponse]:
        """Everything that should be sent now (held-back types go out once unblocked)."""
        out: list[d.DiscoveryResponse] = []
        for type_url in types.PUSH_ORDER:
            state = self._types.get(type_url)
            if state is None or self.cache.get(type_url).version == state.sent_version:
                continue
            if type_url in _HELD_FOR_CLUSTERS and not self._clusters_settled():
                continue
            if state.deferred and not self._routes_current():
                continue
            out.extend(self._respond(type_url, state, force=False))
        return out

    def _clusters_settled(self) -> bool:
        cds = self._types.get(types.CLUSTER)
        if cds is None or cds.rejected:
            return True
        if not cds.answered:
            return False
        eds = self._types.get(types.ENDPOINT)
        assignments = self.cache.get(types.ENDPOINT).resources
        for name in cds.sent:
            resource = assignments.get(name)
            if resource is not None and (eds is None or name not in eds.names
                                         or eds.sent.get(name) != resource.digest):
                return False
        return True

    def _routes_current(self) -> bool:
        for type_url in _HELD_FOR_CLUSTERS:
            state = self._types.get(type_url)
            if state is not None and (not state.answered or state.sent_version
                                      != self.cache.get(type_url).version):
                return False
        return True

    def _respond(self, type_url: str, state: _SotwType, *, force: bool
                 ) -> list[d.DiscoveryResponse]:
        if not self.cache.ready:
            return []
        snapshot = self.cache.get(type_url)
        version = snapshot.version
        response = d.DiscoveryResponse(type_url=type_url)
        if state.wildcard:
            current = snapshot.resources
            packed = {n: r.packed for n, r in current.items()}
            digests = {n: r.digest for n, r in current.items()}
            gone = [n for n in state.packed if n not in current]
            state.deferred = bool(gone) and type_url == types.CLUSTER and not (
                self._routes_current())
            if state.deferred:  # keep removed clusters until no route points at them
                for name in gone:
                    packed[name] = state.packed[name]
                    digests[name] = state.sent[name]
                version += "+held"
            self._invalidate(type_url, [n for n, dg in digests.items()
                                        if state.sent.get(n) != dg])
            response.resources.extend(packed[n] for n in sorted(packed))
            state.sent, state.packed = digests, packed
        else:
            changed = (None if force or not state.seen
                       else self.cache.names_changed(type_url, state.seen))
            candidates = (state.names if changed is None
                          else (changed | state.dirty) & state.names)
            for name in sorted(candidates):
                resource = snapshot.resources.get(name)
                if resource is None or (not force and state.sent.get(name) == resource.digest):
                    continue
                response.resources.append(resource.packed)
                state.sent[name] = resource.digest
            state.seen = version
            state.dirty.clear()
            if not response.resources and not force:
                state.sent_version = version
                return []
        response.version_info = version
        response.nonce = state.nonce = _nonce()
        state.sent_version = "" if state.deferred else version
        state.answered = False
        return [response]

    def _invalidate(self, type_url: str, names: list[str]) -> None:
        dependent = self._types.get(_DEPENDENT.get(type_url, ""))
        if dependent is None:
            return
        for name in names:
            if dependent.sent.pop(name, None) is not None:
                dependent.dirty.add(name)
                dependent.sent_version = ""  # forces a look at this type in the same push


@dataclass(slots=True)
class _DeltaType:
    wildcard: bool
    names: set[str] = field(default_factory=set)
    known: dict[str, str] = field(default_factory=dict)  # name → version Envoy has (or was sent)
    nonces: dict[str, str] = field(default_factory=dict)  # nonce → system version, unanswered
    rejected: bool = False  # the newest answer was a NACK
    seen: str = ""  # cache version last compared against
    dirty: set[str] = field(default_factory=set)  # names to look at again regardless
    held: set[str] = field(default_factory=set)  # removals deferred until routes are current


class DeltaStream:
    """One incremental (delta) ADS stream (one Envoy)."""

    def __init__(self, cache: Cache) -> None:
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
        if request.response_nonce:
            version = state.nonces.pop(request.response_nonce, None)
            if version is not None:
                state.rejected = request.HasField("error_detail")
                if state.rejected:
                    events.append(Nack(self.node, type_url, version, request.response_nonce,
                                       request.error_detail.message))
                else:
                    events.append(Ack(self.node, type_url, version, request.response_nonce))
        if "*" in subscribe:
            state.wildcard = True
        if "*" in request.resource_names_unsubscribe:
            state.wildcard = False
        new_names = subscribe - {"*"} - state.names
        state.names |= subscribe - {"*"}
        for name in request.resource_names_unsubscribe:
            state.names.discard(name)
            state.known.pop(name, None)
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
            if type_url in _HELD_FOR_CLUSTERS and not self._clusters_settled():
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
            if resource is not None and (eds is None or name not in eds.names
                                         or eds.known.get(name) != resource.digest):
                return False
        return True

    def _routes_current(self) -> bool:
        for type_url in _HELD_FOR_CLUSTERS:
            state = self._types.get(type_url)
            if state is None:
                continue
            if state.nonces:
                return False
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
        response.nonce = _nonce()
        state.nonces[response.nonce] = snapshot.version
        return [response]

    def _invalidate(self, type_url: str, name: str) -> None:
        dependent = self._types.get(_DEPENDENT.get(type_url, ""))
        if dependent is not None:
            dependent.known.pop(name, None)
            dependent.dirty.add(name)
