"""State-of-the-world ADS: the whole wildcard type on every change, named types by name.

The rules shared with delta xDS (stale nonces, NACKs, make before break) are described in
``podway.envoy.xds.protocol``.

Refused resources (``podway.envoy.xds.refusals``): Envoy answers only the newest response of a type
that counts, so isolating the refused resources of a named type (load assignments, route
tables, secrets) offers one group at a time, each once the previous one is answered. Listeners
and clusters are applied one by one and Envoy's error names the refused ones; every response
of those types carries the whole set, with a refused resource replaced by the version Envoy
last accepted (or left out when it has none).

A reconnecting Envoy (a restarted Podway) still routes with what it holds. Its first requests
come as a burst, clusters first; the first listener and route answers wait for clusters to be
settled like any later push, and a cluster removal waits for listeners and route tables it has
not subscribed to yet (when the cache has any). A cluster set left out of a response is removed,
so the stream starts from the set Envoy last accepted, recalled by the version Envoy names
(``podway.envoy.xds.held``: every set is on record before it is sent), and keeps the clusters gone
from the cache until the routes have moved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.held import HeldClusters
from podway.envoy.xds.protocol import (
    DEPENDENT,
    HELD_FOR_CLUSTERS,
    REMOVALS_WAIT_FOR,
    Ack,
    Event,
    Nack,
    SettledMemo,
    copy_any,
    new_nonce,
    refused_for_long,
)
from podway.envoy.xds.refusals import RefusalMemory, Refusals, placeholder, refused_of, split
from podway.envoy.xds.served import served, sotw_busy


@dataclass(slots=True)
class _SotwType:
    wildcard: bool
    names: frozenset[str] = frozenset()
    nonce: str = ""
    answered: bool = True  # Envoy answered (ACK or NACK) our newest response of this type
    rejected: bool = False  # ... with a NACK
    rejected_at: float = 0.0  # clock() when that NACK came
    sent_version: str = ""
    last_version: str = ""  # version_info of the newest response
    sent: dict[str, str] = field(default_factory=dict)  # name → digest Envoy was sent
    packed: dict[str, Any] = field(default_factory=dict)  # wildcard types: what Envoy holds
    deferred: bool = False  # removals held back until routes are current
    seen: str = ""  # cache version last compared against (named types)
    dirty: set[str] = field(default_factory=set)  # names to re-send regardless of digest
    last: tuple[tuple[str, str], ...] = ()  # (name, digest) in the newest response
    stand_ins: frozenset[str] = frozenset()  # ... of which placeholders, accepted or left out
    accepted: dict[str, str] = field(default_factory=dict)  # name → digest Envoy ACKed
    accepted_packed: dict[str, Any] = field(default_factory=dict)  # wildcard types
    refusals: Refusals = field(default_factory=Refusals)
    groups: list[frozenset[str]] = field(default_factory=list)  # isolating, one at a time
    pending: bool = False  # a full answer is owed (first request, or a wildcard now)


class SotwStream:
    """One state-of-the-world ADS stream (one Envoy)."""

    def __init__(self, cache: Cache, clock: Callable[[], float] = time.monotonic, *,
                 memory: RefusalMemory | None = None, held: HeldClusters | None = None
                 ) -> None:
        self.clock = clock
        self.memory = memory or RefusalMemory()
        self.held = held or HeldClusters()
        self.cache = cache
        self.node = ""
        self._types: dict[str, _SotwType] = {}
        self._settled = SettledMemo()

    def on_request(self, request: d.DiscoveryRequest
                   ) -> tuple[list[d.DiscoveryResponse], list[Event]]:
        if request.node.id:
            self.node = request.node.id
        type_url = request.type_url
        self._settled.touch(type_url)
        events: list[Event] = []
        state = self._types.get(type_url)
        if state is not None and request.response_nonce != state.nonce:
            return [], events  # stale: Envoy has not seen our newest response yet
        if state is not None and request.response_nonce and not state.answered:
            state.answered = True
            rejected = request.HasField("error_detail")
            if rejected and not state.rejected:
                state.rejected_at = self.clock()  # refused since (a retry refused again counts on)
            state.rejected = rejected
            if rejected:
                events.append(self._rejected(type_url, state, request.error_detail.message))
            else:
                events.append(self._accepted(type_url, state, request.version_info))
        names = frozenset(request.resource_names) - {"*"}
        wildcard = type_url in types.WILDCARD_TYPES and not names
        if state is None:
            refusals = self.memory.of(self.node, type_url)
            state = self._types[type_url] = _SotwType(wildcard=wildcard, names=names,
                                                      refusals=refusals, pending=True)
            if type_url == types.CLUSTER:
                self._recall(state, request.version_info)
        elif names != state.names or wildcard != state.wildcard:
            added = names - state.names
            state.names, state.wildcard = names, wildcard
            for name in list(state.sent):
                if name not in names and not wildcard:
                    del state.sent[name]
            # Newly asked names are sent, not every name again: Envoy may ask for one more
            # name per request (each carrying all so far), which answered in full is O(n²).
            state.dirty |= added
            state.pending |= wildcard
        return self.on_change(), events  # answers go out in push order, with their holds

    def _recall(self, state: _SotwType, version: str) -> None:
        """A reconnecting engine (``version`` set) holds the clusters it last acknowledged: if
        they are on record (``podway.envoy.xds.held``), start from them, so those gone from the
        cache are kept until no route points at them."""
        held = self.held.recall(self.node, version)
        if held is None:
            return
        for name, (digest, packed) in held.clusters.items():
            state.sent[name] = state.accepted[name] = digest
            state.packed[name] = state.accepted_packed[name] = packed

    def on_change(self) -> list[d.DiscoveryResponse]:
        """Everything that should be sent now (held-back types go out once unblocked)."""
        out: list[d.DiscoveryResponse] = []
        for type_url in types.PUSH_ORDER:
            state = self._types.get(type_url)
            if state is None or (self.cache.get(type_url).version == state.sent_version
                                 and not state.groups and not state.dirty and not state.pending
                                 and not state.refusals.due(self.clock())):
                continue
            if type_url in HELD_FOR_CLUSTERS and not self._clusters_settled():
                continue  # also a first request: a reconnecting Envoy routes with what it has
            if state.deferred and not self._routes_current():
                continue
            if not self.cache.is_set(type_url):
                continue  # a reconnecting Envoy keeps its config until the first snapshot
            force, state.pending = state.pending, False
            self._settled.touch(type_url)
            out.extend(self._respond(type_url, state, force=force))
        return out

    def served(self) -> bool:  # Envoy holds all the cache has (``podway.envoy.xds.served``)
        return served(self.cache, self._types, sotw_busy)

    def next_retry_at(self) -> float | None:
        """clock() value at which a refused resource is due to be offered again, if any."""
        return min((t for state in self._types.values()
                    if (t := state.refusals.next_retry_at()) is not None), default=None)

    def _accepted(self, type_url: str, state: _SotwType, version: str) -> Ack:
        real = tuple(n for n, _ in state.last if n not in state.stand_ins)
        if state.wildcard:  # the response was the whole set
            state.accepted = dict(state.sent)
            state.accepted_packed = dict(state.packed)
            if type_url == types.CLUSTER:
                self.held.remember(self.node, state.last_version, state.accepted,
                                   state.accepted_packed)
        else:
            state.accepted.update(state.last)
        for name in real:
            state.refusals.clear(name)
        return Ack(self.node, type_url, version, state.nonce, resources=tuple(sorted(real)))

    def _rejected(self, type_url: str, state: _SotwType, message: str) -> Nack:
        """Envoy refused our newest response: find the refused resources and hold them back.

        Listeners and clusters: Envoy applied the others, names the refused ones, and gets the
        set again without them (so the type is acknowledged and stops holding removals). Named
        types: the others are offered again, isolated in halves when Envoy did not say which.
        """
        now = self.clock()
        sent = {n: dg for n, dg in state.last if n not in state.stand_ins}
        if state.wildcard:
            changed = {n: dg for n, dg in sent.items() if state.accepted.get(n) != dg}
            refused = refused_of(message, changed)
            if refused:
                for name, digest in sent.items():
                    if name not in refused:
                        state.accepted[name] = digest
                        state.accepted_packed[name] = state.packed[name]
                state.sent_version = ""  # send the set again, refused ones held back
        else:
            refused = refused_of(message, sent)
            for name in sent:  # Envoy may have applied some, or none: offer them again
                if name in state.accepted:
                    state.sent[name] = state.accepted[name]
                else:
                    state.sent.pop(name, None)
            rest = [n for n in sent if n not in refused]
            if refused and rest:
                state.groups.append(frozenset(rest))
            elif rest:
                state.groups.extend(split(rest))
            state.dirty.update(refused)  # a placeholder may stand in for them
        attempt = 1
        for name in refused:
            refusal = state.refusals.refuse(name, sent[name], now=now, message=message)
            attempt = max(attempt, refusal.attempts)
        return Nack(self.node, type_url, state.last_version, state.nonce, message,
                    resources=refused, attempt=attempt)

    def _clusters_settled(self) -> bool:
        """Every cluster sent is answered and has its load assignment (or it was refused);
        the last answer is kept while its inputs are unchanged (``SettledMemo``)."""
        return self._settled.settled(self.cache, self._types.get(types.ENDPOINT),
                                     self._look_at_clusters)

    def _look_at_clusters(self) -> bool:
        cds = self._types.get(types.CLUSTER)
        if cds is None or cds.rejected:
            return True
        if not cds.answered:
            return False
        eds = self._types.get(types.ENDPOINT)
        assignments = self.cache.get(types.ENDPOINT).resources
        for name in cds.sent:
            resource = assignments.get(name)
            if resource is not None and name not in (eds.refusals if eds else ()) and (
                    eds is None or name not in eds.names
                    or eds.sent.get(name) != resource.digest):
                return False
        return True

    def _routes_current(self) -> bool:
        for type_url in REMOVALS_WAIT_FOR:
            state = self._types.get(type_url)
            if state is None:
                # Not subscribed yet: a reconnecting Envoy may hold old ones; and before the
                # type's first set (``Cache.set_early``) nobody knows what it will name.
                if not self.cache.is_set(type_url) or self.cache.get(type_url).resources:
                    return False
                continue
            if refused_for_long(rejected=state.rejected, rejected_at=state.rejected_at,
                                now=self.clock()):
                continue  # refused for long: stop holding removals for it
            if state.rejected:
                return False  # a NACKed table: Envoy still routes to the old clusters
            if not state.answered or state.sent_version != self.cache.get(type_url).version:
                return False
        return True

    def _respond(self, type_url: str, state: _SotwType, *, force: bool
                 ) -> list[d.DiscoveryResponse]:
        if state.groups and not force:
            return self._next_group(type_url, state)
        snapshot = self.cache.get(type_url)
        version = snapshot.version
        response = d.DiscoveryResponse(type_url=type_url)
        now = self.clock()
        stand_ins: set[str] = set()
        if state.wildcard:
            version = self._whole_set(type_url, state, response, stand_ins, now)
            if type_url == types.CLUSTER:  # on record before Envoy can apply it (held.py)
                self.held.sent(self.node, version, state.sent, state.packed)
        else:
            changed = (None if force or not state.seen else frozenset()
                       if version == state.seen
                       else self.cache.names_changed(type_url, state.seen))
            candidates = (state.names if changed is None
                          else (changed | state.dirty) & state.names)
            candidates = candidates | (set(state.refusals.due(now)) & state.names)
            last: list[tuple[str, str]] = []
            for name in sorted(candidates):
                resource = snapshot.resources.get(name)
                if resource is None or (not force and state.sent.get(name) == resource.digest):
                    continue
                if name in state.refusals:
                    if not state.refusals.held(name, resource.digest, now):
                        state.groups.append(frozenset({name}))  # offered again on its own
                        state.refusals.offer(name, now=now)
                        continue
                    resource = (None if name in state.accepted
                                else placeholder(type_url, name))
                    if resource is None or (not force
                                            and state.sent.get(name) == resource.digest):
                        continue
                    stand_ins.add(name)
                copy_any(response.resources.add(), resource.packed)
                state.sent[name] = resource.digest
                last.append((name, resource.digest))
            state.seen = version
            state.dirty.clear()
            if not response.resources and not force:
                state.sent_version = version
                return self._next_group(type_url, state) if state.groups else []
            state.last = tuple(last)
        state.stand_ins = frozenset(stand_ins)
        return [self._sent(type_url, state, response, version)]

    def _sent(self, type_url: str, state: _SotwType, response: d.DiscoveryResponse,
              version: str) -> d.DiscoveryResponse:
        response.version_info = state.last_version = version
        response.nonce = state.nonce = new_nonce()
        state.sent_version = "" if state.deferred else self.cache.get(type_url).version
        state.answered = False
        return response

    def _next_group(self, type_url: str, state: _SotwType) -> list[d.DiscoveryResponse]:
        """Isolating refused resources of a named type: one group per answered response."""
        if not state.answered:
            return []  # the group's answer must be the newest one, or it would be stale
        snapshot = self.cache.get(type_url)
        while state.groups:
            group = state.groups.pop(0)
            response = d.DiscoveryResponse(type_url=type_url)
            state.last, state.stand_ins = (), frozenset()
            for name in sorted(group & state.names):
                resource = snapshot.resources.get(name)
                if resource is not None:
                    copy_any(response.resources.add(), resource.packed)
                    state.sent[name] = resource.digest
                    state.last = (*state.last, (name, resource.digest))
            if response.resources:
                return [self._sent(type_url, state, response, snapshot.version)]
        return []

    def _whole_set(self, type_url: str, state: _SotwType, response: d.DiscoveryResponse,
                   stand_ins: set[str], now: float) -> str:
        """Fill a wildcard type's response with the whole set; returns its version."""
        snapshot = self.cache.get(type_url)
        current = snapshot.resources
        for name in state.refusals.names():
            if name not in current:
                state.refusals.clear(name)
        packed: dict[str, Any] = {}
        digests: dict[str, str] = {}
        for name, resource in current.items():
            if state.refusals.held(name, resource.digest, now):
                stand_ins.add(name)  # Envoy keeps what it accepted; a new one stays out
                if name in state.accepted_packed:
                    packed[name] = state.accepted_packed[name]
                    digests[name] = state.accepted[name]
                continue
            state.refusals.offer(name, now=now)  # due again (or changed): offered in the set
            packed[name], digests[name] = resource.packed, resource.digest
        version = snapshot.version
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
        state.last = tuple(sorted(digests.items()))
        return version

    def _invalidate(self, type_url: str, names: list[str]) -> None:
        dependent = self._types.get(DEPENDENT.get(type_url, ""))
        if dependent is None:
            return
        for name in names:
            if dependent.sent.pop(name, None) is not None:
                dependent.dirty.add(name)
                dependent.sent_version = ""  # forces a look at this type in the same push
