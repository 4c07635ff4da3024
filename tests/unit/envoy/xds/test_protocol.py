"""ADS state machines as transcripts: request or cache change in, responses out."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from envoy.service.discovery.v3 import discovery_pb2 as d
from google.rpc import status_pb2

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import Ack, Nack
from podway.envoy.xds.sotw import SotwStream
from podway.ir import IR, Member

from .helpers import http_listener, ir, pool, route, vhost


def _setup() -> tuple[Cache, Builder, IR]:
    listener = http_listener(vhost("a.com", route("r1", "/", "pool/a")))
    first = ir((listener,), pool("pool/a", 9001), pool("pool/b", 9002))
    cache, builder = Cache(), Builder()
    cache.set(builder.build(first))
    return cache, builder, first


def _move_pool_a(first: IR, port: int) -> IR:
    moved = replace(first.pools["pool/a"], members=(Member(address="127.0.0.1", port=port),))
    return IR(listeners=first.listeners,
              pools=MappingProxyType({**first.pools, "pool/a": moved}))


def _sotw(type_url: str, names: tuple[str, ...] = (), nonce: str = "", version: str = "",
          error: str | None = None) -> d.DiscoveryRequest:
    request = d.DiscoveryRequest(type_url=type_url, resource_names=names, response_nonce=nonce,
                                 version_info=version)
    request.node.id = "envoy-1"
    if error is not None:
        request.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
    return request


def test_sotw_initial_ack_and_endpoint_only_push() -> None:
    """First requests are answered; after an endpoint change only EDS is pushed, one pool."""
    cache, builder, first = _setup()
    stream = SotwStream(cache)
    (cds,), _ = stream.on_request(_sotw(types.CLUSTER))
    assert len(cds.resources) == 2
    (eds,), _ = stream.on_request(_sotw(types.ENDPOINT, ("pool/a", "pool/b")))
    assert len(eds.resources) == 2
    out, events = stream.on_request(_sotw(types.CLUSTER, nonce=cds.nonce,
                                          version=cds.version_info))
    assert out == []
    assert events == [Ack("envoy-1", types.CLUSTER, cds.version_info, cds.nonce,
                          resources=("pool/a", "pool/b"))]
    stream.on_request(_sotw(types.ENDPOINT, ("pool/a", "pool/b"), nonce=eds.nonce,
                            version=eds.version_info))
    cache.set(builder.build(_move_pool_a(first, 9009)))
    (push,) = stream.on_change()
    assert push.type_url == types.ENDPOINT
    assert len(push.resources) == 1  # only the changed load assignment


def test_sotw_refused_listener_is_named_and_left_out() -> None:
    """A NACK yields a Nack naming the refused listener; the set goes out again without it,
    and once that is acknowledged nothing more is sent until the retry is due."""
    cache, _, _ = _setup()
    stream = SotwStream(cache)
    (lds,), _ = stream.on_request(_sotw(types.LISTENER))
    out, events = stream.on_request(_sotw(types.LISTENER, nonce=lds.nonce, version="",
                                          error="bad listener"))
    assert events == [Nack("envoy-1", types.LISTENER, lds.version_info, lds.nonce,
                           "bad listener", resources=("listener/http",))]
    (again,) = out
    assert list(again.resources) == []  # Envoy had no accepted version: left out
    out, events = stream.on_request(_sotw(types.LISTENER, nonce=again.nonce,
                                          version=again.version_info))
    assert out == []
    assert stream.on_change() == []


def test_sotw_stale_nonce_is_ignored() -> None:
    """A request answering an older nonce changes nothing."""
    cache, _, _ = _setup()
    stream = SotwStream(cache)
    stream.on_request(_sotw(types.CLUSTER))
    out, events = stream.on_request(_sotw(types.CLUSTER, nonce="not-ours", error="x"))
    assert (out, events) == ([], [])


def test_sotw_waits_for_first_snapshot() -> None:
    """Before the cache has content nothing is sent; the first set then pushes."""
    cache = Cache()
    stream = SotwStream(cache)
    assert stream.on_request(_sotw(types.LISTENER))[0] == []
    listener = http_listener(vhost("a.com", route("r1", "/", "pool/a")))
    cache.set(Builder().build(ir((listener,), pool("pool/a", 1))))
    (push,) = stream.on_change()
    assert push.type_url == types.LISTENER


def test_sotw_cluster_change_resends_its_endpoints() -> None:
    """A changed cluster is re-created by Envoy, so its (unchanged) endpoints are sent again."""
    cache, builder, first = _setup()
    stream = SotwStream(cache)
    (_cds,), _ = stream.on_request(_sotw(types.CLUSTER))
    (_eds,), _ = stream.on_request(_sotw(types.ENDPOINT, ("pool/a", "pool/b")))
    settings = replace(first.pools["pool/a"].settings, connect_timeout_ms=1234)
    changed = replace(first.pools["pool/a"], settings=settings)
    cache.set(builder.build(IR(listeners=first.listeners,
                               pools=MappingProxyType({**first.pools, "pool/a": changed}))))
    cds2, eds2 = stream.on_change()
    assert (cds2.type_url, eds2.type_url) == (types.CLUSTER, types.ENDPOINT)
    assert len(eds2.resources) == 1


def _delta(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = "",
           error: str | None = None, initial: dict[str, str] | None = None
           ) -> d.DeltaDiscoveryRequest:
    request = d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                      response_nonce=nonce,
                                      initial_resource_versions=initial or {})
    request.node.id = "envoy-1"
    if error is not None:
        request.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
    return request


def test_delta_sends_only_changes_and_removals() -> None:
    """Delta: initial wildcard gets everything; later only changed names and removals (no
    listeners, so no route can still point at a removed cluster)."""
    cache, builder, first = _setup()
    first = IR(listeners=(), pools=first.pools)
    cache.set(builder.build(first))
    stream = DeltaStream(cache)
    (cds,), _ = stream.on_request(_delta(types.CLUSTER))
    assert sorted(r.name for r in cds.resources) == ["pool/a", "pool/b"]
    (eds,), _ = stream.on_request(_delta(types.ENDPOINT, ("pool/a", "pool/b")))
    assert len(eds.resources) == 2
    cache.set(builder.build(_move_pool_a(first, 9010)))
    (push,) = stream.on_change()
    assert (push.type_url, [r.name for r in push.resources]) == (types.ENDPOINT, ["pool/a"])
    only_a = IR(listeners=first.listeners,
                pools=MappingProxyType({"pool/a": first.pools["pool/a"]}))
    cache.set(builder.build(only_a))
    pushes = {p.type_url: p for p in stream.on_change()}
    assert list(pushes[types.CLUSTER].removed_resources) == ["pool/b"]
    assert list(pushes[types.ENDPOINT].removed_resources) == ["pool/b"]


def test_delta_initial_versions_skip_known_resources() -> None:
    """A reconnecting Envoy that already has a resource's version is not sent it again."""
    cache, _, _ = _setup()
    known = {n: r.digest for n, r in cache.get(types.CLUSTER).resources.items()}
    (cds,), _ = DeltaStream(cache).on_request(_delta(types.CLUSTER, initial=known))
    assert list(cds.resources) == []


def test_delta_nack_is_reported() -> None:
    """A delta NACK names the rejected nonce's version and carries Envoy's message."""
    cache, _, _ = _setup()
    stream = DeltaStream(cache)
    (lds,), _ = stream.on_request(_delta(types.LISTENER))
    out, events = stream.on_request(_delta(types.LISTENER, nonce=lds.nonce, error="nope"))
    assert out == []
    assert events == [Nack("envoy-1", types.LISTENER, lds.system_version_info, lds.nonce,
                           "nope", resources=("listener/http",))]


def test_delta_unnamed_refusal_is_isolated_then_offered_again_only_on_change() -> None:
    """A NACK that names nothing: the response's resources go out again in halves; the half
    Envoy refuses alone is the refused resource; it is sent again when it changes."""
    cache, builder, first = _setup()
    stream = DeltaStream(cache)
    (cds,), _ = stream.on_request(_delta(types.CLUSTER))
    halves, events = stream.on_request(_delta(types.CLUSTER, nonce=cds.nonce, error="rejected"))
    assert events[0].resources == ()
    assert sorted([r.name for r in h.resources] for h in halves) == [["pool/a"], ["pool/b"]]
    by_name = {h.resources[0].name: h for h in halves}
    stream.on_request(_delta(types.CLUSTER, nonce=by_name["pool/a"].nonce))
    out, events = stream.on_request(_delta(types.CLUSTER, nonce=by_name["pool/b"].nonce,
                                           error="rejected"))
    assert out == []
    assert [e.resources for e in events] == [("pool/b",)]
    assert stream.on_change() == []
    settings = replace(first.pools["pool/b"].settings, connect_timeout_ms=999)
    changed = replace(first.pools["pool/b"], settings=settings)
    cache.set(builder.build(IR(listeners=first.listeners,
                               pools=MappingProxyType({**first.pools, "pool/b": changed}))))
    pushes = [p for p in stream.on_change() if p.type_url == types.CLUSTER]
    assert [[r.name for r in p.resources] for p in pushes] == [["pool/b"]]
