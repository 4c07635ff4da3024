"""Incremental (delta) ADS: only added, changed and removed resources cross the wire.

The rules shared with state of the world (stale nonces, NACKs, make before break) are described
in ``podway.envoy.xds.protocol``.

After a NACK Envoy keeps, per resource, the version it last accepted; so does this stream
(``accepted``), and ``known`` goes back to it. That keeps removals flowing (a rejected update of
a resource later deleted is still removed) and the readiness checks honest. The refused resources
are found and held back, the others of the refused response are offered again at once
(``podway.envoy.xds.refusals``); responses of one type may be in flight together, because Envoy
answers every delta response. A refused endpoint assignment counts as settled: Envoy will get
nothing better until it changes or is due again, and holding every route push behind it would
freeze the stream.

Scopes (``podway.envoy.config.scoped``): a scope's (shared) table follows it at once, before
Envoy asks (a round trip less; Envoy's interest is registered while it handles the scope; sent
once more when Envoy asks, so delivery never depends on that); all of them are
sent again after a listener served as scopes, because Envoy's new connection manager learns only
what is pushed after it; and while no listener is served as scopes, none is removed (a scoped
listener Envoy still holds, warming its one-table successor or draining, keeps serving with
them). Envoy ignores route table removals.

Big updates go in parts (``podway.envoy.xds.parts``, ``DeltaStream.most_per_response``): the
names past the bound wait in ``backlog`` and go once Envoy has answered the type's last
response (two parts ahead were measured no faster: docs/performance.md), so Envoy's main thread
(which also runs the active checks) is never busy with thousands of resources in one go.
Clusters not sent yet are not settled. Whole: a first response Envoy takes as a set (scopes
also after a scoped listener was sent), and a listener update removing a listener.

A reconnecting Envoy (a restarted Podway) still routes with what it holds, and says what that
is in each type's first request (``initial_resource_versions``); its first requests come as a
burst, clusters first. So the first listener and route requests wait for clusters to be settled
like any later push, and a cluster removal waits for listeners and route tables Envoy has not
subscribed to yet (when the cache has any), because those it holds may still name the cluster.
The load assignments it holds are recalled from their versions (``podway.envoy.xds.recall``):
one the new Podway would replace wholesale is bridged like a live member swap.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Resource
from podway.envoy.config.scoped import has_scopes, is_table, table_of
from podway.envoy.xds import parts
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta_state import DeltaType, Sent
from podway.envoy.xds.protocol import (
    DEPENDENT,
    HELD_FOR_CLUSTERS,
    HOLD_AFTER_NACK_S,
    MAX_RESOURCES_PER_RESPONSE,
    REMOVALS_WAIT_FOR,
    Ack,
    Event,
    Nack,
    SettledMemo,
    copy_any,
    new_nonce,
    refused_for_long,
)
from podway.envoy.xds.recall import Recall
from podway.envoy.xds.refusals import RefusalMemory, placeholder, refused_of, split
from podway.envoy.xds.served import delta_busy, served


class DeltaStream:
    """One incremental (delta) ADS stream (one Envoy)."""

    #: Resources per response at most (``parts.bound``); a bench compares other bounds.
    most_per_response = MAX_RESOURCES_PER_RESPONSE

    def __init__(self, cache: Cache, clock: Callable[[], float] = time.monotonic, *,
                 memory: RefusalMemory | None = None) -> None:
        self.clock = clock
        self.memory = memory or RefusalMemory()
        self.cache = cache
        self.node = ""
        self._types: dict[str, DeltaType] = {}
        self._settled = SettledMemo()
        self._recall = Recall()  # load assignments a reconnecting engine holds

    def on_request(self, request: d.DeltaDiscoveryRequest
                   ) -> tuple[list[d.DeltaDiscoveryResponse], list[Event]]:
        if request.node.id:
            self.node = request.node.id
        type_url = request.type_url
        self._settled.touch(type_url)
        events: list[Event] = []
        state = self._types.get(type_url)
        subscribe = set(request.resource_names_subscribe)
        if state is None:
            wildcard = type_url in types.WILDCARD_TYPES and (not subscribe or "*" in subscribe)
            refusals = self.memory.of(self.node, type_url)
            state = self._types[type_url] = DeltaType(wildcard=wildcard, refusals=refusals)
            state.known.update(request.initial_resource_versions)
            state.accepted.update(request.initial_resource_versions)
            if type_url == types.ENDPOINT:
                self._recall.adopt(request.initial_resource_versions)
        if request.response_nonce:
            answered = state.nonces.pop(request.response_nonce, None)
            if answered is not None:
                rejected = request.HasField("error_detail")
                if rejected and not state.rejected:
                    state.rejected_at = self.clock()  # refused since (a retry refused again too)
                state.rejected = rejected
                if rejected:
                    events.append(self._rejected(type_url, state, answered,
                                                 request.response_nonce,
                                                 request.error_detail.message))
                else:
                    state.accepted.update(answered.resources)
                    for name in answered.removed:
                        state.accepted.pop(name, None)
                    real = tuple(n for n, _ in answered.resources
                                 if n not in answered.stand_ins)
                    for name in (*real, *answered.removed):
                        state.refusals.clear(name)
                    events.append(Ack(self.node, type_url, answered.version,
                                      request.response_nonce,
                                      resources=tuple(sorted((*real, *answered.removed)))))
        if "*" in subscribe:
            state.wildcard = True
        if "*" in request.resource_names_unsubscribe:
            state.wildcard = False
        new_names = subscribe - {"*"} - state.names
        state.names |= subscribe - {"*"}
        for name in new_names & state.ahead:  # sent again once: Envoy may have had no use
            state.ahead.discard(name)         # for it then (see ``_scoped_table``)
            state.known.pop(name, None)
        for name in request.resource_names_unsubscribe:
            if type_url == types.ENDPOINT:
                self._recall.forget(name)
            state.names.discard(name)
            state.known.pop(name, None)
            state.accepted.pop(name, None)
        state.asked |= new_names  # answered by on_change, in push order and with its holds
        return self.on_change(), events

    def on_change(self) -> list[d.DeltaDiscoveryResponse]:
        """Everything that should be sent now (held-back types go out once unblocked)."""
        out: list[d.DeltaDiscoveryResponse] = []
        for type_url in types.PUSH_ORDER:
            state = self._types.get(type_url)
            if state is None:
                continue
            if type_url == types.ENDPOINT:
                state.dirty |= self._recall.due(self.clock())  # a hold ended: the final
            idle = (self.cache.get(type_url).version == state.seen and not state.dirty
                    and not state.held and not state.groups and not state.first
                    and not state.asked and not state.backlog
                    and not state.refusals.due(self.clock()))
            if idle:
                continue  # nothing new for this type: skip the (possibly large) comparison
            if state.backlog and state.nonces:
                continue  # the rest of a big update: once Envoy has answered its last part
            if type_url in HELD_FOR_CLUSTERS and not self._clusters_settled():
                continue  # also a first request: a reconnecting Envoy routes with what it has
            if not self.cache.is_set(type_url):
                continue  # a reconnecting Envoy keeps its config until the first snapshot
            first, asked = state.first, state.asked
            state.first, state.asked = False, set()
            self._settled.touch(type_url)
            out.extend(self._respond(type_url, state, force=first, asked=asked,
                                     defer=self._defer(type_url)))
        return out

    def served(self) -> bool:  # Envoy holds all the cache has (``podway.envoy.xds.served``)
        return served(self.cache, self._types, delta_busy)

    def next_retry_at(self) -> float | None:
        """clock() when a refused resource is due again or a recalled pool's hold ends."""
        return min((t for t in (self._recall.next_at(), *(
            state.refusals.next_retry_at() for state in self._types.values()))
            if t is not None), default=None)

    def _rejected(self, type_url: str, state: DeltaType, answered: Sent, nonce: str,
                  message: str) -> Nack:
        """Envoy refused a response: find the refused resources, hold them back, and offer
        the others again at once (isolating them in halves when Envoy did not say which)."""
        now = self.clock()  # Envoy kept its previous versions: so do we
        for name in (*(n for n, _ in answered.resources), *answered.removed):
            if name in state.accepted:
                state.known[name] = state.accepted[name]
            else:
                state.known.pop(name, None)
        sent = {n: dg for n, dg in answered.resources if n not in answered.stand_ins}
        refused = refused_of(message, sent)
        attempt = 1
        for name in refused:
            refusal = state.refusals.refuse(name, sent[name], now=now, message=message)
            attempt = max(attempt, refusal.attempts)
        rest = [n for n in sent if n not in refused]
        if refused and rest:
            state.groups.append(frozenset(rest))
        elif rest:
            state.groups.extend(split(rest))
        state.dirty.update(refused)  # a placeholder may stand in for them
        if type_url == types.SCOPE:  # their tables, pushed ahead, went nowhere: again later
            routes = self._types.get(types.ROUTE)  # (a table Envoy asked for went to it)
            if routes is not None:
                for name in {table_of(n) for n in sent} - routes.names:
                    routes.known.pop(name, None)
                    routes.accepted.pop(name, None)
        # Removals (and stand-ins) wait for the next change (never a blind loop).
        state.retry.update(answered.removed)
        state.retry.update(answered.stand_ins)
        return Nack(self.node, type_url, answered.version, nonce, message,
                    resources=refused, attempt=attempt)

    def _defer(self, type_url: str) -> bool:
        if type_url == types.SCOPE:
            # No listener is served as scopes now: a scoped one Envoy still holds (warming
            # its successor, draining) keeps them; they go when scopes are served again.
            return not self.cache.get(types.SCOPE).resources
        return type_url in (types.CLUSTER, types.ENDPOINT) and not self._routes_current()

    def _clusters_settled(self) -> bool:
        """Every cluster Envoy has is answered and has its load assignment (or it was refused);
        the last answer is kept while its inputs are unchanged (``SettledMemo``)."""
        return self._settled.settled(self.cache, self._types.get(types.ENDPOINT),
                                     self._look_at_clusters)

    def _look_at_clusters(self) -> bool:
        cds = self._types.get(types.CLUSTER)
        if cds is None or cds.rejected:
            return True
        if cds.nonces or cds.backlog:
            return False  # a cluster of a later part is not settled
        eds = self._types.get(types.ENDPOINT)
        assignments = self.cache.get(types.ENDPOINT).resources
        for name in cds.known:
            resource = assignments.get(name)
            if resource is None:
                continue
            if eds is None or name not in eds.names:
                return False
            known = eds.known.get(name)
            if (known != resource.digest and name not in eds.retry
                    and name not in eds.refusals
                    and not self._recall.settled(name, known, resource.digest)):
                return False  # sent and not yet answered; a refused one is settled
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
            if state.nonces:
                return False
            if refused_for_long(rejected=state.rejected, rejected_at=state.rejected_at,
                                now=self.clock()):
                continue  # refused for long: stop holding removals for it
            resources = self.cache.get(type_url).resources
            scope = resources.keys() if state.wildcard else state.names
            now = self.clock()
            if any(n in resources and state.known.get(n) != resources[n].digest
                   and not state.refusals.held_long(n, now, HOLD_AFTER_NACK_S) for n in scope):
                return False
            if any(n not in resources for n in state.known):
                return False
        return True

    def _respond(self, type_url: str, state: DeltaType, *, force: bool, asked: set[str],
                 defer: bool) -> list[d.DeltaDiscoveryResponse]:
        now = self.clock()
        snapshot = self.cache.get(type_url)
        resources = snapshot.resources
        candidates = self._candidates(type_url, state, force=force, asked=asked, now=now)
        out, grouped, left = self._group_responses(type_url, state)
        candidates |= left
        response = self._response(type_url, snapshot.version)
        stand_ins: set[str] = set()
        alone: list[tuple[str, Resource]] = []
        ordered = sorted(candidates - grouped)
        removes = parts.removes_listener(type_url, ordered, state.known, resources)
        limit = parts.bound(type_url, first=force or state.whole, most=self.most_per_response,
                            removes=removes)
        state.whole = False
        if removes:  # with the listeners refused so far (``podway.envoy.xds.parts``)
            ordered = parts.with_refused(ordered, state.refusals, resources, grouped)
        for at, name in enumerate(ordered):
            if len(response.resources) + len(response.removed_resources) >= limit:
                state.backlog.update(ordered[at:])  # the rest, once Envoy answered this part
                break
            resource = resources.get(name)
            if resource is None:
                state.refusals.clear(name)
                if name in state.known:
                    if defer:  # removals wait until no route points at the removed cluster
                        state.held.add(name)
                        continue
                    self._remove(type_url, state, response, name)
                elif name in asked:
                    response.removed_resources.append(name)  # "does not exist"
                continue
            resource = self._offered(type_url, state, name, resource, now)
            if not self._wanted(state, name) or state.known.get(name) == resource.digest:
                continue
            if removes and parts.address_taken(state.refusals, name):
                state.refusals.offer(name, now=now)  # offered again beside the removal
            elif name in state.refusals:
                if not state.refusals.held(name, resource.digest, now):
                    alone.append((name, resource))  # changed, or due again: on its own
                    state.refusals.offer(name, now=now)
                elif self._stand_in(type_url, state, response, name):
                    stand_ins.add(name)
                continue
            self._add(type_url, state, response, name, resource)
        state.seen = snapshot.version
        state.dirty.clear()
        out.extend(self._sent(state, response, snapshot.version, force=force,
                              stand_ins=frozenset(stand_ins)))
        for name, resource in alone:  # as offered: an interim stays one (``_offered``)
            response = self._response(type_url, snapshot.version)
            self._add(type_url, state, response, name, resource)
            out.extend(self._sent(state, response, snapshot.version, force=False))
        return out

    def _offered(self, type_url: str, state: DeltaType, name: str, resource: Resource,
                 now: float) -> Resource:
        """What to send for ``resource``: an interim load assignment instead while the members
        a reconnecting engine holds are bridged (``podway.envoy.xds.recall``)."""
        if type_url != types.ENDPOINT:
            return resource
        return self._recall.serve(name, resource, held=state.known.get(name),
                                  clusters=self.cache.get(types.CLUSTER).resources, now=now)

    def _remove(self, type_url: str, state: DeltaType, response: d.DeltaDiscoveryResponse,
                name: str) -> None:
        _remove(state, response, name)
        if type_url == types.ENDPOINT:
            self._recall.forget(name)

    def _candidates(self, type_url: str, state: DeltaType, *, force: bool, asked: set[str],
                    now: float) -> set[str]:
        """The names to look at: all of them (a first response, or a stream too far behind),
        else what changed since the last look; and always what waits (asked, left over from a
        part, due again)."""
        snapshot = self.cache.get(type_url)
        changed = (None if force or not state.seen else frozenset()
                   if snapshot.version == state.seen
                   else self.cache.names_changed(type_url, state.seen))
        if changed is None:  # compare everything
            candidates = set(snapshot.resources.keys() if state.wildcard else state.names)
            candidates.update(state.known)
            if type_url == types.ROUTE and (scopes := self._types.get(types.SCOPE)):
                candidates.update(map(table_of, scopes.known))  # see ``_scoped_table``
        else:  # only what changed since we last looked
            candidates = set(changed) | state.dirty | state.held
        if changed is None or snapshot.version != state.seen:
            candidates |= state.retry
            state.retry.clear()
        candidates |= asked
        candidates |= state.backlog  # the rest of a big update (``parts``)
        state.backlog.clear()
        candidates.update(state.refusals.due(now))
        return candidates

    def _group_responses(self, type_url: str, state: DeltaType
                         ) -> tuple[list[d.DeltaDiscoveryResponse], set[str], set[str]]:
        """Isolating refused resources: each pending group goes out as its own response.
        Returns the responses, the names they carry, and the names left to the usual path
        (gone or unsubscribed meanwhile)."""
        snapshot = self.cache.get(type_url)
        out: list[d.DeltaDiscoveryResponse] = []
        grouped: set[str] = set()
        groups, state.groups = state.groups, []
        now = self.clock()
        for group in groups:
            response = self._response(type_url, snapshot.version)
            for name in sorted(group):
                resource = snapshot.resources.get(name)
                if resource is not None and self._wanted(state, name):
                    grouped.add(name)
                    self._add(type_url, state, response, name,
                              self._offered(type_url, state, name, resource, now))
            out.extend(self._sent(state, response, snapshot.version, force=False))
        return out, grouped, {n for g in groups for n in g} - grouped

    def _stand_in(self, type_url: str, state: DeltaType, response: d.DeltaDiscoveryResponse,
                  name: str) -> bool:
        """A held refused resource: Envoy keeps its accepted version; with none, a placeholder
        goes out (once) so what waits for the resource warms. True if one was added."""
        stand_in = None if name in state.accepted else placeholder(type_url, name)
        if stand_in is None or state.known.get(name) == stand_in.digest:
            return False
        self._add(type_url, state, response, name, stand_in)
        return True

    def _wanted(self, state: DeltaType, name: str) -> bool:
        return state.wildcard or name in state.names or (
            state is self._types.get(types.ROUTE) and self._scoped_table(name))

    def _scoped_table(self, name: str) -> bool:
        """``name`` is a scopes' shared table and scopes were sent on this stream: pushed
        right behind its scopes, without waiting for Envoy to ask (a round trip through a
        controller busy with the change's status work). Envoy takes it: handling a scope
        registered its interest in the table before the next response is read. Sent once
        more when Envoy asks (small; Envoy finds it unchanged): delivery hangs neither on
        that nor on whether a scope naming it went yet (then the re-send is what counts)."""
        scopes = self._types.get(types.SCOPE)
        return scopes is not None and bool(scopes.known) and is_table(name)

    @staticmethod
    def _response(type_url: str, version: str) -> d.DeltaDiscoveryResponse:
        return d.DeltaDiscoveryResponse(type_url=type_url, system_version_info=version)

    def _add(self, type_url: str, state: DeltaType, response: d.DeltaDiscoveryResponse,
             name: str, resource: Resource) -> None:
        if state.known.get(name) is not None:
            self._invalidate(type_url, name)
        if type_url == types.LISTENER:
            self._rescope(resource)
        elif not state.wildcard and name not in state.names:
            state.ahead.add(name)  # a scope's table, before Envoy asked for it
        copy_any(response.resources.add(name=name, version=resource.digest).resource,
                 resource.packed)
        state.known[name] = resource.digest

    @staticmethod
    def _sent(state: DeltaType, response: d.DeltaDiscoveryResponse, version: str, *,
              force: bool, stand_ins: frozenset[str] = frozenset()
              ) -> list[d.DeltaDiscoveryResponse]:
        """Give a built response its nonce and remember it; nothing when it is empty."""
        if not response.resources and not response.removed_resources and not force:
            return []
        response.nonce = new_nonce()
        state.nonces[response.nonce] = Sent(
            version, tuple((r.name, r.version) for r in response.resources),
            tuple(response.removed_resources), stand_ins)
        return [response]

    def _rescope(self, resource: Resource) -> None:
        """A listener served as scopes is sent: every scope is sent again after it. Envoy
        gives a new scoped connection manager a scope subscription of its own, which learns
        only what is pushed after it (it asks nothing: the type is subscribed already)."""
        scopes = self._types.get(types.SCOPE)
        if scopes is None or not has_scopes(resource.message):
            return
        served = self.cache.get(types.SCOPE).resources
        scopes.dirty.update(served, scopes.known)
        scopes.whole = True  # the new connection manager's first update: all of them at once
        for name in served:
            scopes.known.pop(name, None)

    def _invalidate(self, type_url: str, name: str) -> None:
        dependent = self._types.get(DEPENDENT.get(type_url, ""))
        if dependent is not None:
            dependent.known.pop(name, None)
            dependent.dirty.add(name)


def _remove(state: DeltaType, response: d.DeltaDiscoveryResponse, name: str) -> None:
    """``name`` goes in ``response``'s removals and out of what Envoy is known to have."""
    response.removed_resources.append(name)
    del state.known[name]
    state.held.discard(name)
    state.ahead.discard(name)
