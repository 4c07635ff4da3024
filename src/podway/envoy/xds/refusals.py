"""Resources Envoy refused: which ones, what to send instead, and when to offer them again.

A NACK must never block unrelated resources (docs/design/xds-ordering.md). Envoy refuses a
whole response, but what it keeps differs by type: listeners and clusters are applied one by
one and the error names the refused ones ("Error adding/updating listener(s) NAME: ..."), while
one bad load assignment aborts the rest of its response and its error names no resource
("malformed IP address: 999.1.1.1"). So a stream:

* finds the refused resources: those Envoy's error detail names; else the only resource of the
  response; else it *isolates* them — the response's resources are offered again in two halves,
  each its own response, until a refused response holds one resource (``split``);
* holds a refused resource back while its content is unchanged: Envoy keeps the version it last
  accepted; where it has none, a load assignment or route table goes out as an empty
  *placeholder* (``placeholder``), so the cluster or listener that waits for it warms at once
  instead of after Envoy's 15 s initial fetch timeout — which held every listener of a starting
  Envoy, so unrelated Services answered 503;
* offers a refused resource again when its content changes, and otherwise with backoff
  (``BACKOFF_FIRST_S`` doubling up to ``BACKOFF_MAX_S``): a listener whose port was busy comes
  back once the port is free. A resource offered again after a refusal always travels alone.

A ``RefusalMemory`` keeps each engine's (node id's) refusals across its reconnects, so a
restarted Envoy is not sent what its predecessor refused: it gets the stand-in at once and
needs no isolation round trips before it serves.

Invariant: ``Refusals`` is a pure record (a clock value in, decisions out); the streams own it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.route.v3 import route_pb2

from podway.envoy import types
from podway.envoy.config import Resource

#: First wait before a refused resource with unchanged content is offered again; it doubles
#: with each refusal up to ``BACKOFF_MAX_S``.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


@dataclass(slots=True)
class Refusal:
    digest: str  # the content Envoy refused
    since: float  # clock() at the first refusal of this content
    attempts: int  # refusals of this content in a row
    retry_at: float  # clock() when it may be offered again
    message: str


class Refusals:
    """The refused resources of one type on one stream."""

    def __init__(self) -> None:
        self._by_name: dict[str, Refusal] = {}
        # Bumped whenever the set of refused names changes: part of the streams' memo key for
        # "clusters settled" (a stream shares its engine's Refusals with its reconnects).
        self.changes = 0

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, name: str) -> Refusal | None:
        return self._by_name.get(name)

    def refuse(self, name: str, digest: str, *, now: float, message: str) -> Refusal:
        """Record a refusal; the same content refused again waits twice as long."""
        old = self._by_name.get(name)
        attempts = old.attempts + 1 if old is not None and old.digest == digest else 1
        since = old.since if old is not None and old.digest == digest else now
        refusal = Refusal(digest, since, attempts, now + _wait(attempts), message)
        self._by_name[name] = refusal
        if old is None:
            self.changes += 1
        return refusal

    def offer(self, name: str, *, now: float) -> None:
        """The refused content goes out again now: not again before the next backoff step,
        even if Envoy has not answered yet."""
        refusal = self._by_name.get(name)
        if refusal is not None:
            refusal.retry_at = now + _wait(refusal.attempts)

    def clear(self, name: str) -> None:
        """Accepted or gone: nothing to hold any more."""
        if self._by_name.pop(name, None) is not None:
            self.changes += 1

    def held(self, name: str, digest: str, now: float) -> bool:
        """Refused with exactly this content, and not yet due to be offered again."""
        refusal = self._by_name.get(name)
        return refusal is not None and refusal.digest == digest and now < refusal.retry_at

    def due(self, now: float) -> list[str]:
        """Names whose backoff has run out (offer them again)."""
        return [n for n, r in self._by_name.items() if now >= r.retry_at]

    def next_retry_at(self) -> float | None:
        return min((r.retry_at for r in self._by_name.values()), default=None)

    def held_long(self, name: str, now: float, hold_s: float) -> bool:
        """Refused (whatever the content) for at least ``hold_s``."""
        refusal = self._by_name.get(name)
        return refusal is not None and now - refusal.since >= hold_s


class RefusalMemory:
    """Refusals per engine (node id) and type, shared by that engine's successive streams."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], Refusals] = {}

    def of(self, node: str, type_url: str) -> Refusals:
        if not node:  # an engine that did not say who it is shares nothing
            return Refusals()
        return self._by_key.setdefault((node, type_url), Refusals())


def _wait(attempts: int) -> float:
    return float(min(BACKOFF_FIRST_S * 2 ** (attempts - 1), BACKOFF_MAX_S))


def named_in(message: str, names: Iterable[str]) -> tuple[str, ...]:
    """The names Envoy's error detail mentions as whole names (``a/80`` is not in ``a/8080``)."""
    out = []
    for name in names:
        if re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w./-])", message):
            out.append(name)
    return tuple(sorted(out))


def refused_of(message: str, sent: Iterable[str]) -> tuple[str, ...]:
    """The resources of a refused response that are known refused: named, or the only one."""
    names = list(sent)
    named = named_in(message, names)
    if named:
        return named
    return tuple(names) if len(names) == 1 else ()


def split(names: Iterable[str]) -> list[frozenset[str]]:
    """Two halves of a refused response's resources, to be offered separately."""
    ordered = sorted(names)
    half = len(ordered) // 2
    return [frozenset(part) for part in (ordered[:half], ordered[half:]) if part]


def placeholder(type_url: str, name: str) -> Resource | None:
    """What Envoy gets instead of a refused resource it has no accepted version of: an empty
    load assignment (the cluster warms with no members) or an empty route table (the listener
    warms and answers 404); None for types where nothing stands in (leave the resource out)."""
    if type_url == types.ENDPOINT:
        return Resource.of(name, endpoint_pb2.ClusterLoadAssignment(cluster_name=name))
    if type_url == types.ROUTE:
        return Resource.of(name, route_pb2.RouteConfiguration(name=name))
    return None
