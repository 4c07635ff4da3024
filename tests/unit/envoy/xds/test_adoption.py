"""A restarted Podway under a running Envoy (adoption): the reconnecting Envoy is sent nothing
until the new Podway's first snapshot is in the cache (it keeps serving its last config), and
then, with delta xDS, only what differs from what it already has."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.sotw import SotwStream

from .helpers import http_listener, ir, pool, route, vhost

FIRST = ir((http_listener(vhost("a.com", route("r1", "/", "pool/a"))),), pool("pool/a", 9001))


def _reconnect(type_url: str, initial: dict[str, str]) -> d.DeltaDiscoveryRequest:
    request = d.DeltaDiscoveryRequest(type_url=type_url, initial_resource_versions=initial)
    request.node.id = "adopted"
    return request


def test_a_reconnecting_engine_gets_nothing_before_the_first_snapshot_then_only_changes(
        ) -> None:
    """Delta: before the cache's first set, requests get no response (no empty config, no
    removals); after it, resources the engine already has are not sent again."""
    built = Builder().build(FIRST)
    has = {t: {n: r.digest for n, r in built[t].items()} for t in types.WILDCARD_TYPES}
    cache = Cache()  # the new Podway: its first snapshot is not ready yet
    stream = DeltaStream(cache)
    for type_url in (types.CLUSTER, types.LISTENER):
        out, _ = stream.on_request(_reconnect(type_url, has[type_url]))
        assert out == []
    assert stream.on_change() == []
    cache.set(built)
    pushes = stream.on_change()
    assert all(not p.resources and not p.removed_resources for p in pushes)


def test_sotw_reconnect_gets_nothing_before_the_first_snapshot() -> None:
    """State of the world: nothing (so no empty wildcard list) until the first set."""
    cache = Cache()
    stream = SotwStream(cache)
    out, _ = stream.on_request(d.DiscoveryRequest(type_url=types.LISTENER))
    assert out == []
    cache.set(Builder().build(FIRST))
    (lds,) = stream.on_change()
    assert len(lds.resources) == 1
