"""A NACK never blocks unrelated resources: the refused one is found, held back, stood in for,
reported by name and offered again with backoff (delta and state of the world)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import Ack, Nack
from podway.envoy.xds.refusals import BACKOFF_FIRST_S, RefusalMemory, named_in
from podway.envoy.xds.sotw import SotwStream
from podway.ir import IR, Member, Pool

from .helpers import http_listener, ir, pool, route, vhost

BAD = "malformed IP address: 999.1.1.1"  # what Envoy says: no resource named
POOLS = ("pool/a", "pool/bad", "pool/c", "pool/d")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _config(port: int = 9001) -> IR:
    listener = http_listener(vhost("a.com", route("r1", "/", "pool/a")))
    bad = Pool(name="pool/bad", members=(Member(address="999.1.1.1", port=80),))
    return ir((listener,), pool("pool/a", port), bad, pool("pool/c", 9003), pool("pool/d", 9004))


def _with_a_on(config: IR, port: int) -> IR:
    moved = replace(config.pools["pool/a"], members=(Member(address="127.0.0.1", port=port),))
    return IR(listeners=config.listeners, pools=MappingProxyType({**config.pools,
                                                                   "pool/a": moved}))


def _delta(type_url: str, names: tuple[str, ...] = (), nonce: str = "",
           error: str | None = None) -> d.DeltaDiscoveryRequest:
    request = d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=names,
                                      response_nonce=nonce)
    if error is not None:
        request.error_detail.message = error
    return request


def _sotw(type_url: str, names: tuple[str, ...] = (), nonce: str = "",
          error: str | None = None) -> d.DiscoveryRequest:
    request = d.DiscoveryRequest(type_url=type_url, resource_names=names, response_nonce=nonce)
    if error is not None:
        request.error_detail.message = error
    return request


def _has_bad(response: d.DeltaDiscoveryResponse | d.DiscoveryResponse) -> bool:
    for item in response.resources:
        packed = item.resource if isinstance(item, d.Resource) else item
        assignment = endpoint_pb2.ClusterLoadAssignment()
        packed.Unpack(assignment)
        if "999.1.1.1" in str(assignment):
            return True
    return False


def _answer_delta(stream: DeltaStream, responses: list[d.DeltaDiscoveryResponse]
                  ) -> list[Nack]:
    """Envoy's answers: NACK every response holding the bad address, ACK the rest, until
    nothing more is sent; the Nacks seen."""
    nacks: list[Nack] = []
    while responses:
        response = responses.pop(0)
        more, events = stream.on_request(_delta(
            response.type_url, nonce=response.nonce, error=BAD if _has_bad(response) else None))
        nacks.extend(e for e in events if isinstance(e, Nack))
        responses.extend(more)
    return nacks


def test_delta_bad_load_assignment_is_isolated_and_others_flow() -> None:
    """Delta: an unnamed EDS refusal is isolated to the one bad assignment; the good ones are
    accepted, a placeholder stands in for the bad one, and a later change of a good pool goes
    out without it."""
    cache, builder = Cache(), Builder()
    config = _config()
    cache.set(builder.build(config))
    stream = DeltaStream(cache, clock=Clock())
    (eds,), _ = stream.on_request(_delta(types.ENDPOINT, POOLS))
    nacks = _answer_delta(stream, [eds])
    assert nacks[-1].resources == ("pool/bad",)
    assert all(n.resources in ((), ("pool/bad",)) for n in nacks)
    cache.set(builder.build(_with_a_on(config, 9100)))
    (push,) = stream.on_change()
    assert [r.name for r in push.resources] == ["pool/a"]
    acks = stream.on_request(_delta(types.ENDPOINT, nonce=push.nonce))[1]
    assert acks == [Ack("", types.ENDPOINT, push.system_version_info, push.nonce,
                        resources=("pool/a",))]


def test_delta_placeholder_stands_in_for_a_never_accepted_assignment() -> None:
    """The bad pool's cluster gets an empty assignment so it warms instead of waiting 15 s."""
    cache = Cache()
    cache.set(Builder().build(_config()))
    stream = DeltaStream(cache, clock=Clock())
    sent: list[d.DeltaDiscoveryResponse] = []
    (eds,), _ = stream.on_request(_delta(types.ENDPOINT, POOLS))
    responses = [eds]
    while responses:
        response = responses.pop(0)
        sent.append(response)
        more, _ = stream.on_request(_delta(
            response.type_url, nonce=response.nonce, error=BAD if _has_bad(response) else None))
        responses.extend(more)
    last_bad = [r for r in sent if any(x.name == "pool/bad" for x in r.resources)][-1]
    assert not _has_bad(last_bad)  # the placeholder: cluster name, no members
    assert stream.on_change() == []  # held: nothing more until due


def test_delta_refused_resource_is_offered_again_alone_with_backoff() -> None:
    """Unchanged refused content goes out again only after the backoff, alone, and waits
    twice as long after a second refusal."""
    cache, clock = Cache(), Clock()
    cache.set(Builder().build(_config()))
    stream = DeltaStream(cache, clock=clock)
    (eds,), _ = stream.on_request(_delta(types.ENDPOINT, POOLS))
    _answer_delta(stream, [eds])
    assert stream.next_retry_at() == clock.now + BACKOFF_FIRST_S
    clock.now += BACKOFF_FIRST_S
    (retry,) = stream.on_change()
    assert [r.name for r in retry.resources] == ["pool/bad"]
    assert _has_bad(retry)
    (nack,) = stream.on_request(_delta(types.ENDPOINT, nonce=retry.nonce, error=BAD))[1]
    assert (nack.resources, nack.attempt) == (("pool/bad",), 2)
    clock.now += BACKOFF_FIRST_S
    assert stream.on_change() == []
    clock.now += BACKOFF_FIRST_S
    assert len(stream.on_change()) == 1


def test_sotw_bad_load_assignment_is_isolated_one_group_at_a_time() -> None:
    """State of the world: groups go out one per answered response (an older answer would be
    stale); the bad assignment is found, and later changes of good pools flow."""
    cache, builder = Cache(), Builder()
    config = _config()
    cache.set(builder.build(config))
    stream = SotwStream(cache, clock=Clock())
    (eds,), _ = stream.on_request(_sotw(types.ENDPOINT, POOLS))
    responses, nacks = [eds], []
    while responses:
        assert len(responses) == 1  # never two in flight
        response = responses.pop(0)
        more, events = stream.on_request(_sotw(
            types.ENDPOINT, POOLS, response.nonce, BAD if _has_bad(response) else None))
        nacks.extend(e for e in events if isinstance(e, Nack))
        responses.extend(more)
    assert nacks[-1].resources == ("pool/bad",)
    cache.set(builder.build(_with_a_on(config, 9100)))
    (push,) = stream.on_change()
    assert not _has_bad(push)
    assert len(push.resources) == 1


def test_sotw_refused_listener_keeps_the_accepted_version() -> None:
    """A listener Envoy accepted before and refuses now (its new port is busy) goes out in
    its accepted form in the next set; the rest of the set is current."""
    cache, builder = Cache(), Builder()
    first = ir((http_listener(vhost("a.com", route("r1", "/", "pool/a")), port=8080),),
               pool("pool/a", 9001))
    cache.set(builder.build(first))
    stream = SotwStream(cache, clock=Clock())
    (lds,), _ = stream.on_request(_sotw(types.LISTENER))
    stream.on_request(_sotw(types.LISTENER, nonce=lds.nonce))
    moved = IR(listeners=(replace(first.listeners[0], port=8081),), pools=first.pools)
    cache.set(builder.build(moved))
    (push,) = stream.on_change()
    out, (nack,) = stream.on_request(_sotw(
        types.LISTENER, nonce=push.nonce,
        error="Error adding/updating listener(s) listener/http: cannot bind: in use"))
    assert nack.resources == ("listener/http",)
    (again,) = out
    assert list(again.resources) == list(lds.resources)  # the accepted version


def test_names_are_matched_whole() -> None:
    """``pool/a/80`` is not named by a message about ``pool/a/8080``."""
    assert named_in("pool/a/8080: bad", ["pool/a/80", "pool/a/8080"]) == ("pool/a/8080",)


def test_a_reconnecting_engine_is_not_sent_what_it_refused() -> None:
    """The same engine (node id) on a new stream gets the placeholder for a refused assignment
    straight away: no refused response, no isolation round trips."""
    cache, memory = Cache(), RefusalMemory()
    cache.set(Builder().build(_config()))
    first = DeltaStream(cache, clock=Clock(), memory=memory)
    request = _delta(types.ENDPOINT, POOLS)
    request.node.id = "envoy-1"
    (eds,), _ = first.on_request(request)
    _answer_delta(first, [eds])
    again = DeltaStream(cache, clock=Clock(), memory=memory)
    (fresh,), _ = again.on_request(request)
    assert sorted(r.name for r in fresh.resources) == sorted(POOLS)
    assert not _has_bad(fresh)


def test_sotw_reconnecting_engine_gets_the_placeholder_in_its_first_response() -> None:
    """State of the world: the first response of a new stream of the same engine already
    holds the placeholder, not the refused assignment."""
    cache, memory = Cache(), RefusalMemory()
    cache.set(Builder().build(_config()))
    request = _sotw(types.ENDPOINT, POOLS)
    request.node.id = "envoy-1"
    first = SotwStream(cache, clock=Clock(), memory=memory)
    (eds,), _ = first.on_request(request)
    responses = [eds]
    while responses:
        response = responses.pop(0)
        responses.extend(first.on_request(_sotw(
            types.ENDPOINT, POOLS, response.nonce, BAD if _has_bad(response) else None))[0])
    (fresh,), _ = SotwStream(cache, clock=Clock(), memory=memory).on_request(request)
    assert len(fresh.resources) == len(POOLS)
    assert not _has_bad(fresh)
