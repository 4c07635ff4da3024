"""The ADS protocol as sans-I/O state machines: requests and cache changes in, responses out.

``SotwStream`` (``podway.envoy.xds.sotw``) speaks state-of-the-world, ``DeltaStream``
(``podway.envoy.xds.delta``) incremental xDS; ``podway.envoy.xds.server`` is the thin asyncio shell
that feeds them. This module holds what both share: events, nonces and the ordering rules. Keeping
the decisions out of the I/O shell makes them testable as transcripts (request → expected
responses) without gRPC or Envoy.

Rules both follow (from the xDS protocol):

* A request whose ``response_nonce`` is not the newest nonce we sent for its type is stale and
  only its subscription part counts (delta) or it is ignored (state of the world).
* A NACK (``error_detail`` set) never blocks unrelated resources: the refused resources are
  found (named by Envoy, or isolated), reported by name, held back while unchanged and offered
  again with backoff; the rest keeps flowing (``podway.envoy.xds.refusals``). A NACK is never
  answered by re-sending the same response in a loop.
* Responses of one push come out in ``types.PUSH_ORDER`` so dependencies arrive first.
* State of the world sends every resource of wildcard types (listeners, clusters), but only
  new or changed ones of named types (routes, endpoints, secrets): Envoy does not treat a named
  resource missing from a response as removed, so an endpoint change sends one load assignment.
* Make before break (the xDS ordering rules), so no request fails during a change:
  listeners and routes are held back until every cluster Envoy has is *settled* — its CDS
  response answered and its load assignment sent — because a route to a warming cluster
  answers 503; and clusters (with their load assignments) are removed only once listeners and
  routes are current and acknowledged, because a route to a removed cluster answers 503 too.
  The same holds on a stream's first requests: a reconnecting Envoy (a restarted Podway) still
  routes with what it holds, so first listener/route answers wait for clusters, a removal waits
  for listener and route types not subscribed yet (when the cache has any), and the stream
  starts from what Envoy says it holds (delta: ``initial_resource_versions``; state of the
  world: the cluster set recorded under the version it names, ``podway.envoy.xds.held``).
  (docs/design/xds-ordering.md)
* A push costs O(change): a stream compares only the names the cache reports changed since the
  version it last looked at (``Cache.names_changed``, up to ``cache.HISTORY`` changes back),
  falling back to a full comparison when it is further behind. Whether clusters are settled is
  a look at every cluster, so a stream keeps its last answer (``SettledMemo``) until a cluster
  or endpoint request comes, it responds with clusters or endpoints, their cache versions
  move, or the endpoint refusals change: a route-only change does not look at 10,000 clusters
  again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from google.protobuf import any_pb2

from podway.envoy import types

_nonces = itertools.count(1)

# A changed cluster (listener) is re-created by Envoy and waits for its load assignment (route
# table) again; re-send those even though they did not change, or the new one stays warming.
DEPENDENT = {types.CLUSTER: types.ENDPOINT, types.LISTENER: types.ROUTE}
# Listeners and routes wait for clusters to be settled (see the module docstring); so do
# filter configs (a JWT provider's key set is fetched through a cluster).
HELD_FOR_CLUSTERS = (types.EXTENSION, types.LISTENER, types.ROUTE)
# Cluster removals wait for these to be current. Not for filter configs: a key set is cached,
# and the config naming a removed cluster is replaced right after (a refetch may fail once).
REMOVALS_WAIT_FOR = (types.LISTENER, types.ROUTE)

#: The most resources (added, changed or removed) one delta response carries; the rest of a
#: big update follows once Envoy has answered (docs/design/xds-ordering.md, "Big updates in
#: parts"). Envoy applies a response in one go on its main thread, which also runs the active
#: health checks: 10,000 load assignments in one response kept it busy past the 1 s timeout of
#: the first checks it had just started, and the failed members' re-checks (every second, all
#: together) kept it so. A part of 500 is a few tens of milliseconds of Envoy's time.
MAX_RESOURCES_PER_RESPONSE = 500
#: Types whose first response goes whole, because Envoy takes it as a set: its init, and so its
#: LIVE (an engine's readiness), waits for exactly what the stream's first clusters and listeners
#: name; and a scoped connection manager that is new (at a start, or after its listener changed)
#: waits for the scopes of its first update only, so scopes in parts would let its listener
#: serve with hosts missing. Later scopes (hosts added to a serving listener) go in parts.
WHOLE_FIRST_TYPES = frozenset({types.CLUSTER, types.LISTENER, types.SCOPE})

#: The types whose stream state and cache contents decide whether clusters are settled.
SETTLE_INPUTS = frozenset({types.CLUSTER, types.ENDPOINT})

#: How long cluster removals wait for a NACKed listener or route table to be fixed. Envoy keeps
#: routing with its last accepted tables, which may still name the removed clusters; but a table
#: Envoy keeps refusing (a port it cannot bind) must not hold every later removal forever.
HOLD_AFTER_NACK_S = 30.0


def refused_for_long(*, rejected: bool, rejected_at: float, now: float) -> bool:
    """A NACKed listener/route type has stayed refused past the hold: stop holding for it."""
    return rejected and now - rejected_at >= HOLD_AFTER_NACK_S


@dataclass(frozen=True, slots=True)
class Nack:
    """Envoy rejected a response: which type, which version, and Envoy's reason.

    ``resources`` names the resources found refused (from Envoy's error detail, or by isolating
    them); empty when they are not known yet — while a refused response is being isolated, a
    later Nack names them. The pipeline maps these names back to the objects they came from, so
    a rejection lands on its object and clears when the resource is accepted (``Ack.resources``)
    or gone.
    """

    node: str
    type_url: str
    version: str
    nonce: str
    message: str
    resources: tuple[str, ...] = ()
    attempt: int = 1
    """How many times in a row this content of ``resources`` was refused (retries back off)."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Envoy accepted a response; ``resources`` names the resources it carried (a refused one
    that is accepted now, or removed, no longer stands refused)."""

    node: str
    type_url: str
    version: str
    nonce: str
    resources: tuple[str, ...] = ()


Event = Ack | Nack


def new_nonce() -> str:
    return str(next(_nonces))


def copy_any(target: any_pb2.Any, source: any_pb2.Any) -> None:
    """``target`` becomes ``source`` (a resource going into a response) field by field:
    upb's ``append``/``CopyFrom`` of a message costs several times more for a large one
    (a 3.5 MB route table: ~6 ms against ~1.5 ms with serialising, bench/envoy_route_apply.py
    measures the push)."""
    target.type_url = source.type_url
    target.value = source.value


class _Versioned(Protocol):
    @property
    def version(self) -> str: ...


class VersionedCache(Protocol):
    """What ``SettledMemo.settled`` reads of the cache: each type's version."""

    def get(self, type_url: str) -> _Versioned: ...


class _Counted(Protocol):
    @property
    def changes(self) -> int: ...


class HasRefusals(Protocol):
    """A stream's per-type state: its refusals (``podway.envoy.xds.refusals.Refusals``)."""

    @property
    def refusals(self) -> _Counted: ...


class SettledMemo:
    """A stream's last "clusters settled" answer and what it was computed from.

    The stream calls ``touch`` before anything that may change its cluster or endpoint state
    (a request of those types, a response of those types); the answer is reused while that has
    not happened and the cache versions of both types and the endpoint refusals are unchanged.
    """

    __slots__ = ("_answer", "_epoch", "_key")

    def __init__(self) -> None:
        self._epoch = 0
        self._key: tuple[object, ...] | None = None
        self._answer = False

    def touch(self, type_url: str) -> None:
        if type_url in SETTLE_INPUTS:
            self._epoch += 1

    def answer(self, versions: tuple[str, str], refusals: int,
               compute: Callable[[], bool]) -> bool:
        key = (self._epoch, versions, refusals)
        if key != self._key:
            self._answer, self._key = compute(), key
        return self._answer

    def settled(self, cache: VersionedCache, endpoints: HasRefusals | None,
                compute: Callable[[], bool]) -> bool:
        """``answer`` keyed on ``cache``'s cluster and endpoint versions and the refusals of
        the stream's endpoint state (``endpoints``; None before any was sent)."""
        return self.answer(
            (cache.get(types.CLUSTER).version, cache.get(types.ENDPOINT).version),
            endpoints.refusals.changes if endpoints is not None else -1, compute)
