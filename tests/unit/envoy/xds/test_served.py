"""``served``: an engine holds everything its cache has — each type with resources asked for,
sent and answered, nothing past the bound (issue 24: a controller's first status pass waits for
it, ``podway.programs.controller.first_pass``)."""

from __future__ import annotations

from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import MAX_RESOURCES_PER_RESPONSE
from podway.envoy.xds.sotw import SotwStream

from .test_batches import Envoy, _delta, _ir

BIG = MAX_RESOURCES_PER_RESPONSE + 10  # load assignments and tables in two parts


def test_a_delta_engine_is_served_only_once_every_part_is_answered() -> None:
    cache = Cache()
    builder = Builder(scoped_min_hosts=3)
    envoy = Envoy(DeltaStream(cache))
    assert not envoy.stream.served()  # nothing set yet
    cache.set(builder.build(_ir(BIG)))
    envoy.ask(_delta(types.CLUSTER))
    assert not envoy.stream.served()  # clusters sent, not answered
    envoy.settle()  # clusters and both parts of the load assignments answered
    assert not envoy.stream.served()  # listeners not asked for yet (Envoy: clusters warming)
    for type_url in (types.LISTENER, types.SCOPE):
        envoy.ask(_delta(type_url))
    envoy.settle()
    assert not envoy.stream.served()  # the listener's filter config not asked for yet
    envoy.ask(_delta(types.EXTENSION))
    assert not envoy.stream.served()
    envoy.settle()
    assert envoy.stream.served()
    cache.set(builder.build(_ir(BIG, moved=1)))  # a change not pushed yet
    assert not envoy.stream.served()
    envoy.pushed()
    assert not envoy.stream.served()  # pushed, not answered
    envoy.settle()
    assert envoy.stream.served()


def test_a_delta_engine_is_not_served_while_parts_wait_past_the_bound() -> None:
    cache = Cache()
    cache.set(Builder(scoped_min_hosts=3).build(_ir(BIG)))
    stream = DeltaStream(cache)
    (clusters,), _ = stream.on_request(_delta(types.CLUSTER))
    stream.on_request(_delta(types.CLUSTER, nonce=clusters.nonce))
    (part,), _ = stream.on_request(_delta(types.ENDPOINT, tuple(cache.get(types.ENDPOINT)
                                                                .resources)))
    assert len(part.resources) == MAX_RESOURCES_PER_RESPONSE
    for type_url in (types.LISTENER, types.EXTENSION, types.SCOPE):
        for response in stream.on_request(_delta(type_url))[0]:
            stream.on_request(_delta(response.type_url, nonce=response.nonce))
    # every response sent so far answered but the first part; the rest waits behind it
    assert not stream.served()


def _sotw_settle(stream: SotwStream, cache: Cache, *, leave: str = "") -> None:
    """Ask every type the cache has, in order, and answer each response (but ``leave``'s)."""
    for type_url in types.PUSH_ORDER:
        names = () if type_url in types.WILDCARD_TYPES else tuple(
            sorted(cache.get(type_url).resources))
        if not cache.get(type_url).resources:
            continue
        out, _ = stream.on_request(d.DiscoveryRequest(type_url=type_url, resource_names=names))
        for response in out:
            if response.type_url != leave:
                stream.on_request(d.DiscoveryRequest(
                    type_url=response.type_url, resource_names=names,
                    response_nonce=response.nonce, version_info=response.version_info))


def test_a_sotw_engine_is_served_once_it_answered_every_type() -> None:
    cache = Cache()
    cache.set(Builder().build(_ir(3)))
    stream = SotwStream(cache)
    assert not stream.served()
    _sotw_settle(stream, cache)
    assert stream.served()


def test_a_sotw_engine_with_a_response_unanswered_is_not_served() -> None:
    cache = Cache()
    cache.set(Builder().build(_ir(3)))
    stream = SotwStream(cache)
    _sotw_settle(stream, cache, leave=types.ROUTE)
    assert not stream.served()
