"""Make before break: routes wait for new clusters to be warm; removals wait for routes."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy_config import Builder
from podway.xds import types
from podway.xds.cache import Cache
from podway.xds.delta import DeltaStream
from podway.xds.protocol import HOLD_AFTER_NACK_S
from podway.xds.sotw import SotwStream

from .helpers import http_listener, ir, pool, route, vhost


def _config(target: str):  # type: ignore[no-untyped-def]
    """One route to ``target``; only the used pool exists (like the translator's output)."""
    listener = http_listener(vhost("a.com", route("r", "/", target)))
    return ir((listener,), pool(target, 9000 if target == "blue" else 9001))


def _delta_req(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = ""
               ) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                   response_nonce=nonce)


def _connected_delta(cache: Cache, pools: tuple[str, ...] = ("blue",)) -> DeltaStream:
    """A delta stream that has received and acknowledged the whole first config."""
    stream = DeltaStream(cache)
    acks = [(types.CLUSTER, ()), (types.ENDPOINT, pools), (types.LISTENER, ()),
            (types.ROUTE, ("listener/http",))]
    for type_url, names in acks:
        out, _ = stream.on_request(_delta_req(type_url, names))
        for response in out:
            stream.on_request(_delta_req(response.type_url, nonce=response.nonce))
    return stream


def test_delta_route_to_new_cluster_waits_until_the_cluster_is_warm() -> None:
    """New cluster: CDS first; RDS only after CDS is ACKed and its endpoints were sent."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config("blue")))
    stream = _connected_delta(cache)
    cache.set(builder.build(_config("green")))
    (cds,) = stream.on_change()
    assert cds.type_url == types.CLUSTER
    assert [r.name for r in cds.resources] == ["green"]
    assert list(cds.removed_resources) == []  # blue stays until the route has moved
    out, _ = stream.on_request(_delta_req(types.ENDPOINT, ("green",)))
    assert [r.type_url for r in out] == [types.ENDPOINT]  # still no route: CDS not ACKed
    out, _ = stream.on_request(_delta_req(types.CLUSTER, nonce=cds.nonce))
    (rds,) = [r for r in out if r.type_url == types.ROUTE]
    out, _ = stream.on_request(_delta_req(types.ROUTE, nonce=rds.nonce))
    removed = {r.type_url: list(r.removed_resources) for r in out}
    assert removed == {types.CLUSTER: ["blue"], types.ENDPOINT: ["blue"]}


def _sotw_req(type_url: str, names: tuple[str, ...] = (), nonce: str = ""
              ) -> d.DiscoveryRequest:
    return d.DiscoveryRequest(type_url=type_url, resource_names=names, response_nonce=nonce)


def _connect_sotw(stream: SotwStream) -> dict[str, str]:
    """Subscribe to everything and ACK the first config; the newest nonce per type."""
    nonces: dict[str, str] = {}
    for type_url, names in ((types.CLUSTER, ()), (types.ENDPOINT, ("blue",)),
                            (types.LISTENER, ()), (types.ROUTE, ("listener/http",))):
        out, _ = stream.on_request(_sotw_req(type_url, names, nonces.get(type_url, "")))
        for response in out:
            nonces[response.type_url] = response.nonce
            stream.on_request(_sotw_req(response.type_url, names, response.nonce))
    return nonces


def test_sotw_keeps_removed_cluster_until_routes_are_acknowledged() -> None:
    """State of the world: the old cluster stays in CDS until the new routes are ACKed."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config("blue")))
    stream = SotwStream(cache)
    nonces = _connect_sotw(stream)
    cache.set(builder.build(_config("green")))
    (cds,) = stream.on_change()
    assert cds.type_url == types.CLUSTER
    assert len(cds.resources) == 2  # green added, blue held
    out, _ = stream.on_request(_sotw_req(types.CLUSTER, nonce=cds.nonce))
    assert out == []  # green's endpoints not subscribed yet: routes wait
    out, _ = stream.on_request(_sotw_req(types.ENDPOINT, ("blue", "green"), nonces[types.ENDPOINT]))
    (eds, rds) = out
    assert (eds.type_url, rds.type_url) == (types.ENDPOINT, types.ROUTE)
    out, _ = stream.on_request(_sotw_req(types.ROUTE, ("listener/http",), rds.nonce))
    (final,) = out
    assert (final.type_url, len(final.resources)) == (types.CLUSTER, 1)


def _two_pools(target: str, blue_port: int, *, keep_blue: bool = True):  # type: ignore[no-untyped-def]
    """A route to ``target``; pools green and (unless dropped) blue on ``blue_port``."""
    listener = http_listener(vhost("a.com", route("r", "/", target)))
    pools = [pool("green", 9001)] + ([pool("blue", blue_port)] if keep_blue else [])
    return ir((listener,), *pools)


def _nack(type_url: str, nonce: str) -> d.DeltaDiscoveryRequest:
    request = _delta_req(type_url, nonce=nonce)
    request.error_detail.message = "rejected"
    return request


def test_delta_nacked_endpoints_do_not_freeze_route_pushes() -> None:
    """After an EDS NACK, a route change to an existing, warm cluster is still pushed."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_two_pools("blue", 9000)))
    stream = _connected_delta(cache, ("blue", "green"))
    cache.set(builder.build(_two_pools("blue", 9002)))
    (eds,) = stream.on_change()
    assert eds.type_url == types.ENDPOINT
    out, events = stream.on_request(_nack(types.ENDPOINT, eds.nonce))
    assert (out, [type(e).__name__ for e in events]) == ([], ["Nack"])
    cache.set(builder.build(_two_pools("green", 9002)))
    (rds,) = stream.on_change()
    assert rds.type_url == types.ROUTE


def test_delta_resource_removed_after_its_update_was_nacked_is_still_removed() -> None:
    """Envoy keeps the last accepted version after a NACK, so a later removal is still sent."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_two_pools("blue", 9000)))
    stream = _connected_delta(cache, ("blue", "green"))
    cache.set(builder.build(_two_pools("blue", 9002)))
    (eds,) = stream.on_change()
    stream.on_request(_nack(types.ENDPOINT, eds.nonce))
    cache.set(builder.build(_two_pools("green", 9002, keep_blue=False)))
    (rds,) = stream.on_change()
    assert rds.type_url == types.ROUTE
    out, _ = stream.on_request(_delta_req(types.ROUTE, nonce=rds.nonce))
    removed = {r.type_url: list(r.removed_resources) for r in out}
    assert removed == {types.CLUSTER: ["blue"], types.ENDPOINT: ["blue"]}


def test_sotw_nacked_routes_keep_the_old_cluster() -> None:
    """State of the world: if Envoy NACKs the new routes, the cluster its old routes use stays."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config("blue")))
    stream = SotwStream(cache)
    nonces = _connect_sotw(stream)
    cache.set(builder.build(_config("green")))
    (cds,) = stream.on_change()
    stream.on_request(_sotw_req(types.CLUSTER, nonce=cds.nonce))
    out, _ = stream.on_request(_sotw_req(types.ENDPOINT, ("blue", "green"), nonces[types.ENDPOINT]))
    (rds,) = [r for r in out if r.type_url == types.ROUTE]
    nack = _sotw_req(types.ROUTE, ("listener/http",), rds.nonce)
    nack.error_detail.message = "rejected"
    out, _ = stream.on_request(nack)
    assert [r for r in out if r.type_url == types.CLUSTER] == []  # blue not removed
    assert stream.on_change() == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sotw_refused_routes_hold_removals_only_for_a_while() -> None:
    """A route table Envoy keeps refusing stops holding cluster removals after the hold time."""
    cache, builder, clock = Cache(), Builder(), FakeClock()
    cache.set(builder.build(_config("blue")))
    stream = SotwStream(cache, clock=clock)
    nonces = _connect_sotw(stream)
    cache.set(builder.build(_config("green")))
    (cds,) = stream.on_change()
    stream.on_request(_sotw_req(types.CLUSTER, nonce=cds.nonce))
    out, _ = stream.on_request(_sotw_req(types.ENDPOINT, ("blue", "green"), nonces[types.ENDPOINT]))
    (rds,) = [r for r in out if r.type_url == types.ROUTE]
    nack = _sotw_req(types.ROUTE, ("listener/http",), rds.nonce)
    nack.error_detail.message = "rejected"
    stream.on_request(nack)
    clock.now += HOLD_AFTER_NACK_S - 1
    out = stream.on_change()  # the refused table is offered again (backoff), and refused
    assert [r for r in out if r.type_url == types.CLUSTER] == []  # within the hold: blue stays
    (retry,) = out
    nack = _sotw_req(types.ROUTE, ("listener/http",), retry.nonce)
    nack.error_detail.message = "rejected"
    stream.on_request(nack)
    clock.now += 2
    (cds,) = [r for r in stream.on_change() if r.type_url == types.CLUSTER]
    assert len(cds.resources) == 1  # blue finally removed


def test_delta_refused_routes_hold_removals_only_for_a_while() -> None:
    """Delta: after a route NACK, removals wait the hold time, then go out anyway."""
    cache, builder, clock = Cache(), Builder(), FakeClock()
    cache.set(builder.build(_two_pools("blue", 9000)))
    stream = _connected_delta(cache, ("blue", "green"))
    stream.clock = clock
    cache.set(builder.build(_two_pools("green", 9000, keep_blue=False)))
    (rds,) = stream.on_change()
    assert rds.type_url == types.ROUTE
    out, _ = stream.on_request(_nack(types.ROUTE, rds.nonce))
    assert [r for r in out if r.removed_resources] == []  # held: old routes may use blue
    clock.now += HOLD_AFTER_NACK_S + 1
    removed = {r.type_url: list(r.removed_resources) for r in stream.on_change()}
    assert removed == {types.CLUSTER: ["blue"], types.ENDPOINT: ["blue"]}
