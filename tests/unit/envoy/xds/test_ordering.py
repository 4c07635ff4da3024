"""Make before break: routes wait for new clusters to be warm; removals wait for routes."""

from __future__ import annotations

from pathlib import Path

from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.held import KEPT, HeldClusters
from podway.envoy.xds.protocol import HOLD_AFTER_NACK_S
from podway.envoy.xds.sotw import SotwStream

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


def _reconnect_delta(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = "",
                     initial: dict[str, str] | None = None) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                   response_nonce=nonce, initial_resource_versions=initial)


def test_delta_reconnect_moves_routes_before_removing_what_envoy_still_routes_to() -> None:
    """A new Podway under an Envoy that still holds the old config (routes → blue) while the
    new one routes to green: Envoy's first requests (its burst, CDS first) say through
    ``initial_resource_versions`` what it holds. Blue is removed only once the routes to green
    are acknowledged, and those wait until green is warm — also on the stream's first route
    and listener requests, which a fresh stream used to answer at once."""
    builder = Builder()
    old = builder.build(_config("blue"))
    has = {t: {n: r.digest for n, r in old[t].items()} for t in old}
    cache = Cache()
    cache.set(builder.build(_config("green")))
    stream = DeltaStream(cache)
    burst = [_reconnect_delta(types.CLUSTER, initial=has[types.CLUSTER]),
             _reconnect_delta(types.ENDPOINT, ("blue",), initial=has[types.ENDPOINT]),
             _reconnect_delta(types.LISTENER, initial=has[types.LISTENER]),
             _reconnect_delta(types.ROUTE, ("listener/http",), initial=has[types.ROUTE])]
    out = [r for request in burst for r in stream.on_request(request)[0]
           if r.resources or r.removed_resources]  # not the empty first EDS answer
    assert [r.type_url for r in out] == [types.CLUSTER]  # green; routes wait for it
    (cds,) = out
    assert [r.name for r in cds.resources] == ["green"]
    assert list(cds.removed_resources) == []  # Envoy's routes still point at blue
    (eds,), _ = stream.on_request(_delta_req(types.ENDPOINT, ("green",)))
    assert [r.name for r in eds.resources] == ["green"]
    out, _ = stream.on_request(_delta_req(types.CLUSTER, nonce=cds.nonce))
    stream.on_request(_delta_req(types.ENDPOINT, nonce=eds.nonce))
    pending = {r.type_url: r for r in out}
    assert set(pending) == {types.LISTENER, types.ROUTE}  # green is warm: routes move
    assert [r.name for r in pending[types.ROUTE].resources] == ["listener/http"]
    assert all(not r.removed_resources for r in out)
    removed: dict[str, list[str]] = {}
    for response in pending.values():
        more, _ = stream.on_request(_delta_req(response.type_url, nonce=response.nonce))
        removed |= {r.type_url: list(r.removed_resources) for r in more}
    assert removed == {types.CLUSTER: ["blue"], types.ENDPOINT: ["blue"]}


def test_delta_removal_waits_for_route_tables_envoy_has_not_asked_for_yet() -> None:
    """Only clusters subscribed yet (a reconnect's CDS request came first): a removal is held,
    because the route tables Envoy will ask for may still name the cluster."""
    builder = Builder()
    old = builder.build(_config("blue"))
    cache = Cache()
    cache.set(builder.build(_config("green")))
    stream = DeltaStream(cache)
    initial = {n: r.digest for n, r in old[types.CLUSTER].items()}
    (cds,), _ = stream.on_request(_reconnect_delta(types.CLUSTER, initial=initial))
    assert list(cds.removed_resources) == []
    assert stream.on_request(_delta_req(types.CLUSTER, nonce=cds.nonce))[0] == []


def _node_req(type_url: str, names: tuple[str, ...] = (), nonce: str = "", version: str = ""
              ) -> d.DiscoveryRequest:
    request = d.DiscoveryRequest(type_url=type_url, resource_names=names,
                                 response_nonce=nonce, version_info=version)
    request.node.id = "envoy-1"
    return request


def test_sotw_reconnect_keeps_the_clusters_envoy_holds_until_routes_move(
        tmp_path: Path) -> None:
    """State of the world: a new Podway (new cache and stream, the record read from the state
    folder) under an Envoy holding the old config (routes → blue), the new one routing to
    green. Envoy's first cluster request names the version it holds; the first cluster set
    keeps blue (a set without it removes it), routes move once green is warm, then blue goes."""
    builder = Builder()
    old_cache = Cache()
    old_cache.set(builder.build(_config("blue")))
    old = SotwStream(old_cache, held=HeldClusters(tmp_path))
    (cds,), _ = old.on_request(_node_req(types.CLUSTER))
    old.on_request(_node_req(types.CLUSTER, nonce=cds.nonce, version=cds.version_info))
    assert list(tmp_path.iterdir()) != []  # what Envoy holds is on record
    cache = Cache()
    cache.set(builder.build(_config("green")))
    stream = SotwStream(cache, held=HeldClusters(tmp_path))  # the restarted Podway
    burst = [_node_req(types.CLUSTER, version=cds.version_info),
             _node_req(types.ENDPOINT, ("blue",), version="v-old"),
             _node_req(types.LISTENER, version="v-old"),
             _node_req(types.ROUTE, ("listener/http",), version="v-old")]
    out = [r for request in burst for r in stream.on_request(request)[0]]
    first = {r.type_url: r for r in out}
    assert set(first) == {types.CLUSTER, types.ENDPOINT}  # routes wait: green is not warm
    clusters = sorted(cluster_pb2.Cluster.FromString(r.value).name
                      for r in first[types.CLUSTER].resources)
    assert clusters == ["blue", "green"]  # blue kept: Envoy's routes still point at it
    stream.on_request(_node_req(types.ENDPOINT, ("blue",), first[types.ENDPOINT].nonce))
    out, _ = stream.on_request(_node_req(types.CLUSTER, nonce=first[types.CLUSTER].nonce))
    assert out == []  # green's endpoints not asked for yet
    out, _ = stream.on_request(_node_req(types.ENDPOINT, ("blue", "green"),
                                         first[types.ENDPOINT].nonce))
    pending = {r.type_url: r for r in out}
    assert {types.LISTENER, types.ROUTE} <= set(pending)
    assert types.CLUSTER not in pending  # blue still held
    done: list[d.DiscoveryResponse] = []
    for type_url in (types.LISTENER, types.ROUTE):
        names = ("listener/http",) if type_url == types.ROUTE else ()
        done += stream.on_request(_node_req(type_url, names, pending[type_url].nonce))[0]
    (final,) = [r for r in done if r.type_url == types.CLUSTER]
    assert [cluster_pb2.Cluster.FromString(r.value).name for r in final.resources] == ["green"]


def test_sotw_reconnect_knows_a_set_whose_acknowledgement_was_never_read(
        tmp_path: Path) -> None:
    """Podway dies after Envoy applied a cluster set but before Podway read Envoy's ACK
    (kill -9 on a loaded machine): Envoy names a version no ACK reached. The set was on record
    before it was sent, so the new Podway's first set keeps the cluster Envoy routes to."""
    builder = Builder()
    old_cache = Cache()
    old_cache.set(builder.build(_config("green")))
    old = SotwStream(old_cache, held=HeldClusters(tmp_path))
    (cds,), _ = old.on_request(_node_req(types.CLUSTER))  # sent; its ACK is never read
    cache = Cache()
    cache.set(builder.build(_config("blue")))
    stream = SotwStream(cache, held=HeldClusters(tmp_path))  # the restarted Podway
    out, _ = stream.on_request(_node_req(types.CLUSTER, version=cds.version_info))
    (first,) = [r for r in out if r.type_url == types.CLUSTER]
    assert sorted(cluster_pb2.Cluster.FromString(r.value).name
                  for r in first.resources) == ["blue", "green"]


def test_sotw_record_keeps_the_acknowledged_set_and_those_sent_since(tmp_path: Path) -> None:
    """Sets sent before the acknowledged one are dropped; the acknowledged one and later ones
    stay (at most ``KEPT``); a record of the earlier one-set form is still read."""
    cache = Cache()
    cache.set(Builder().build(_config("blue")))
    packed = {"blue": cache.get(types.CLUSTER).resources["blue"].packed}
    held = HeldClusters(tmp_path)
    for version in ("v1", "v2", "v3"):
        held.sent("envoy-1", version, {"blue": version}, packed)
    held.remember("envoy-1", "v2", {"blue": "v2"}, packed)
    again = HeldClusters(tmp_path)
    assert [again.recall("envoy-1", v) is not None for v in ("v1", "v2", "v3")] == [
        False, True, True]
    for n in range(4, 4 + KEPT):
        held.sent("envoy-1", f"v{n}", {"blue": str(n)}, packed)
    again = HeldClusters(tmp_path)
    kept = [v for v in (f"v{n}" for n in range(1, 4 + KEPT)) if again.recall("envoy-1", v)]
    assert len(kept) == KEPT
    assert kept[0] == "v2"  # the acknowledged set is never the one dropped
    held.discard_files()
    old_form = d.DiscoveryResponse(version_info="v9", type_url="envoy-1")
    old_form.resources.append(packed["blue"])
    held.remember("envoy-1", "v9", {"blue": "d"}, packed)  # for the file name
    (path,) = tmp_path.iterdir()
    path.write_bytes(old_form.SerializeToString())
    recalled = HeldClusters(tmp_path).recall("envoy-1", "v9")
    assert recalled is not None
    assert list(recalled.clusters) == ["blue"]


def test_sotw_record_of_another_version_is_not_used(tmp_path: Path) -> None:
    """A version that is not the recorded one says nothing about what Envoy holds."""
    held = HeldClusters(tmp_path)
    cache = Cache()
    cache.set(Builder().build(_config("blue")))
    held.remember("envoy-1", "v1", {"blue": "d"}, {"blue": cache.get(types.CLUSTER)
                                                  .resources["blue"].packed})
    assert HeldClusters(tmp_path).recall("envoy-1", "v1") is not None
    assert HeldClusters(tmp_path).recall("envoy-1", "v2") is None
    assert HeldClusters(tmp_path).recall("envoy-2", "v1") is None
    (tmp_path / next(tmp_path.iterdir()).name).write_bytes(b"\xff garbage")
    assert HeldClusters(tmp_path).recall("envoy-1", "v1") is None  # logged, not raised
    held.discard_files()
    assert list(tmp_path.iterdir()) == []


def test_sotw_record_is_private(tmp_path: Path) -> None:
    """The record is 0600 (in the 0700 state folder); read back by a new Podway, each cluster
    has the digest the cache gives it, so what Envoy holds unchanged is not sent again."""
    cache = Cache()
    cache.set(Builder().build(_config("blue")))
    resource = cache.get(types.CLUSTER).resources["blue"]
    HeldClusters(tmp_path).remember("envoy-1", "v1", {"blue": resource.digest},
                                    {"blue": resource.packed})
    (record,) = tmp_path.iterdir()
    assert record.stat().st_mode & 0o777 == 0o600
    held = HeldClusters(tmp_path).recall("envoy-1", "v1")
    assert held is not None
    assert held.clusters["blue"] == (resource.digest, resource.packed)
