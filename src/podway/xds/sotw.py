"""State-of-the-world ADS: the whole wildcard type on every change, named types by name.

The rules shared with delta xDS (stale nonces, NACKs, make before break) are described in
``podway.xds.protocol``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
class _SotwType:
    wildcard: bool
    names: frozenset[str] = frozenset()
    nonce: str = ""
    answered: bool = True  # Envoy answered (ACK or NACK) our newest response of this type
    rejected: bool = False  # ... with a NACK
    rejected_at: float = 0.0  # clock() when that NACK came
    sent_version: str = ""
    sent: dict[str, str] = field(default_factory=dict)  # name → digest Envoy was sent
    packed: dict[str, Any] = field(default_factory=dict)  # wildcard types: what Envoy holds
    deferred: bool = False  # removals held back until routes are current
    seen: str = ""  # cache version last compared against (named types)
    dirty: set[str] = field(default_factory=set)  # names to re-send regardless of digest


class SotwStream:
    """One state-of-the-world ADS stream (one Envoy)."""

    def __init__(self, cache: Cache, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
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
                state.rejected_at = self.clock()
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
            if type_url in HELD_FOR_CLUSTERS and not self._clusters_settled():
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
        for type_url in HELD_FOR_CLUSTERS:
            state = self._types.get(type_url)
            if state is None:
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
        response.nonce = state.nonce = new_nonce()
        state.sent_version = "" if state.deferred else version
        state.answered = False
        return [response]

    def _invalidate(self, type_url: str, names: list[str]) -> None:
        dependent = self._types.get(DEPENDENT.get(type_url, ""))
        if dependent is None:
            return
        for name in names:
            if dependent.sent.pop(name, None) is not None:
                dependent.dirty.add(name)
                dependent.sent_version = ""  # forces a look at this type in the same push
