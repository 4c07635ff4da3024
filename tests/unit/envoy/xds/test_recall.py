"""Make before break across a Podway restart: an engine that reconnects names the versions it
holds; a load assignment's version names its serving members, so a restarted Podway bridges a
member swap made while it was down (the recalled members at priority 1 for the hold)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import MappingProxyType

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.config.common import pack
from podway.envoy.config.endpoints import (
    SERVING_IN_VERSION,
    assignment_resource,
    held_in_version,
    load_assignment,
    serving_in_version,
)
from podway.envoy.xds import handover
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.server import AdsServicer
from podway.ir import IR, HealthCheck, HealthCheckKind, Member, MemberState, Pool, PoolSettings

from .helpers import http_listener, route, vhost

CHECKED = PoolSettings(health_check=HealthCheck(kind=HealthCheckKind.TCP, interval_ms=100,
                                                timeout_ms=10))


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def _config(*ports: int, path: str = "/", settings: PoolSettings = CHECKED) -> IR:
    members = tuple(Member(address="127.0.0.1", port=p) for p in ports)
    listener = http_listener(vhost("a.com", route("r", path, "p")))
    return IR(listeners=(listener,),
              pools=MappingProxyType({"p": Pool(name="p", settings=settings, members=members)}))


def _held(config: IR) -> dict[str, dict[str, str]]:
    """What an engine holds after the first Podway served ``config``: type → name → version."""
    built = Builder().build(config)
    return {t: {n: r.digest for n, r in built[t].items()} for t in built}


def _reconnect(type_url: str, held: dict[str, dict[str, str]], names: tuple[str, ...] = ()
               ) -> d.DeltaDiscoveryRequest:
    request = d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=names,
                                      initial_resource_versions=held.get(type_url, {}))
    request.node.id = "engine-1"
    return request


def _ack(type_url: str, nonce: str) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, response_nonce=nonce)


def _by_priority(response: d.DeltaDiscoveryResponse) -> dict[int, list[int]]:
    (resource,) = response.resources
    message = endpoint_pb2.ClusterLoadAssignment()
    resource.resource.Unpack(message)
    out: dict[int, list[int]] = {}
    for group in message.endpoints:
        out.setdefault(group.priority, []).extend(
            e.endpoint.address.socket_address.port_value for e in group.lb_endpoints)
    return out


def _answered(stream: DeltaStream, requests: list[d.DeltaDiscoveryRequest]
              ) -> list[d.DeltaDiscoveryResponse]:
    """Each request, and an ACK of every response as Envoy sends it: the non-empty responses,
    in order."""
    out: list[d.DeltaDiscoveryResponse] = []
    queue = list(requests)
    while queue:
        for response in stream.on_request(queue.pop(0))[0]:
            if response.resources or response.removed_resources:
                out.append(response)
            queue.append(_ack(response.type_url, response.nonce))
    return out


def _restarted(held: dict[str, dict[str, str]], now: IR
               ) -> tuple[DeltaStream, Clock, list[d.DeltaDiscoveryResponse]]:
    """A new Podway serving ``now``, and the engine's reconnect burst (CDS first), each
    response acknowledged: the stream, its clock and every non-empty response."""
    cache = Cache()
    cache.set(Builder().build(now))
    clock = Clock()
    stream = DeltaStream(cache, clock)
    burst = [_reconnect(types.CLUSTER, held), _reconnect(types.ENDPOINT, held, ("p",)),
             _reconnect(types.LISTENER, held), _reconnect(types.ROUTE, held, ("listener/http",))]
    return stream, clock, _answered(stream, burst)


def test_a_load_assignment_s_version_names_its_serving_members() -> None:
    members = (Member(address="10.0.0.9", port=80),
               Member(address="10.0.0.1", port=80, state=MemberState.NOT_READY),
               Member(address="fd00::1", port=8080),
               Member(address="10.0.0.2", port=80, state=MemberState.DRAINING))
    resource = assignment_resource("p", load_assignment("p", members))
    assert serving_in_version(resource.digest) == (("10.0.0.9", 80), ("fd00::1", 8080))
    many = tuple(Member(address=f"10.0.1.{i}", port=80) for i in range(9, 0, -1))
    named = serving_in_version(assignment_resource("p", load_assignment("p", many)).digest)
    assert named == tuple((f"10.0.1.{i}", 80) for i in range(1, SERVING_IN_VERSION + 1))
    empty = assignment_resource("p", load_assignment("p", ()))
    assert serving_in_version(empty.digest) == ()
    assert "~" not in empty.digest


def test_the_version_read_from_members_equals_the_one_read_from_the_message() -> None:
    """The builder names the members from the IR (cheaper); an interim is read from its
    message: both name the same ones (ready, and draining members that still serve)."""
    members = (Member(address="10.0.0.3", port=80, state=MemberState.DRAINING, serving=True),
               Member(address="10.0.0.1", port=80, state=MemberState.NOT_READY),
               Member(address="10.0.0.2", port=80, weight=0),
               Member(address="10.0.0.4", port=80, state=MemberState.DRAINING),
               Member(address="fd00::2", port=81), Member(address="10.0.0.9", port=80))
    for chosen in (members, members[:1], members[1:4], ()):
        message = load_assignment("p", chosen)
        assert (assignment_resource("p", message, chosen).digest
                == assignment_resource("p", message).digest)


def test_a_version_from_the_engine_that_does_not_read_names_nothing() -> None:
    for version in ("", "abc", "abc~", "abc~x.y:80", "abc~10.0.0.1:0", "abc~10.0.0.1:+80",
                    "abc~10.0.0.1:70000", "abc~10.0.0.1", "abc~10.0.0.1:80,bad:1",
                    "abc~" + ",".join(["10.0.0.1:80"] * 100) + "9" * 300):
        assert serving_in_version(version) == (), version
        assert held_in_version(version) == (), version
    for version in ("abc~10.0.0.1:80~", "abc~10.0.0.1:80~bad:1", "abc~10.0.0.1:80~1.2.3.4:80~"):
        assert serving_in_version(version) == held_in_version(version) == (), version


def test_two_independent_builds_give_the_same_versions() -> None:
    """A restarted Podway builds the same resources with the same versions (digests), the
    members in them included: a reconnecting engine is sent nothing it already has."""
    assert _held(_config(9001, 9002)) == _held(_config(9001, 9002))


def test_a_packed_config_s_bytes_do_not_depend_on_the_order_its_maps_were_filled() -> None:
    """A map inside an ``Any`` (a JWT filter's providers) filled in another order, as a set in
    another process gives it, packs to the same bytes: the same version after a restart."""
    def providers(order: list[str]) -> bytes:
        config = jwt_pb2.JwtAuthentication()
        for name in order:
            config.providers[name].issuer = f"https://{name}"
        return pack(config).value

    assert providers(["a/x", "b/y", "c/z"]) == providers(["c/z", "b/y", "a/x"])


def test_a_member_swap_made_while_podway_was_down_is_bridged() -> None:
    """The engine holds p = [9001]; the restarted Podway has p = [9002]. The first load
    assignment sent is the interim ([9002] at priority 0, the recalled 9001 at priority 1);
    routes are not held for it; when the hold ends the final one follows, with no cache
    change to wake the stream (its retry deadline says when)."""
    held = _held(_config(9001))
    stream, clock, out = _restarted(held, _config(9002, path="/moved"))
    assert [r.type_url for r in out] == [types.ENDPOINT, types.ROUTE]  # routes not held
    assert _by_priority(out[0]) == {0: [9002], 1: [9001]}
    cluster = Builder().build(_config(9002))[types.CLUSTER]["p"].message
    assert isinstance(cluster, cluster_pb2.Cluster)
    hold = handover.hold_s(cluster)
    assert hold is not None
    assert stream.next_retry_at() == clock.now + hold
    assert stream.on_change() == []  # the hold is not over
    clock.now += hold
    (final,) = stream.on_change()
    assert _by_priority(final) == {0: [9002]}
    assert _answered(stream, [_ack(types.ENDPOINT, final.nonce)]) == []
    assert stream.next_retry_at() is None
    assert stream.on_change() == []


def test_a_member_added_during_the_hold_keeps_the_recalled_members_held() -> None:
    """A newer assignment inside the hold that only adds (a third new pod turns ready, normal
    in a rollout) keeps the recalled (checked) members at priority 1, to the same end: the
    interim's new members may be unchecked (the bug: 9080 "stayed serving", the bridge ended
    and every member left was unchecked: Envoy reset new connections)."""
    held = _held(_config(8080, 8081))
    stream, clock, out = _restarted(held, _config(9080, 9081))
    assert [_by_priority(r) for r in out if r.type_url == types.ENDPOINT] == [
        {0: [9080, 9081], 1: [8080, 8081]}]
    end = stream.next_retry_at()
    assert end is not None
    clock.now += 0.1
    stream.cache.set(Builder().build(_config(9080, 9081, 9082)))
    (newer,) = stream.on_change()
    assert _by_priority(newer) == {0: [9080, 9081, 9082], 1: [8080, 8081]}
    assert _answered(stream, [_ack(types.ENDPOINT, newer.nonce)]) == []
    assert stream.next_retry_at() == end  # the same end: never extended
    assert stream.on_change() == []
    clock.now = end
    (final,) = stream.on_change()
    assert _by_priority(final) == {0: [9080, 9081, 9082]}
    assert _answered(stream, [_ack(types.ENDPOINT, final.nonce)]) == []
    assert stream.next_retry_at() is None


def test_a_change_during_the_hold_that_is_no_mere_addition_ends_it() -> None:
    """A member of the bridged assignment leaves (its pod may be the one behind a recalled
    member): the recalled members are not carried on; bridged from the interim as before."""
    held = _held(_config(9001))
    stream, _, out = _restarted(held, _config(9002, 9003))
    assert [_by_priority(r) for r in out if r.type_url == types.ENDPOINT] == [
        {0: [9002, 9003], 1: [9001]}]
    stream.cache.set(Builder().build(_config(9003, 9004)))
    (newer,) = stream.on_change()
    assert _by_priority(newer) == {0: [9003, 9004]}  # 9003 stays serving: nothing to bridge
    assert _answered(stream, [_ack(types.ENDPOINT, newer.nonce)]) == []
    assert stream.next_retry_at() is None


def test_a_recalled_member_serving_again_during_the_hold_ends_it() -> None:
    held = _held(_config(9001))
    stream, _, _ = _restarted(held, _config(9002))
    stream.cache.set(Builder().build(_config(9001, 9002)))
    (newer,) = stream.on_change()
    assert _by_priority(newer) == {0: [9001, 9002]}  # 9001 (checked) serves: nothing to bridge
    assert _answered(stream, [_ack(types.ENDPOINT, newer.nonce)]) == []
    assert stream.next_retry_at() is None


def test_an_engine_reconnecting_inside_the_hold_is_known_to_hold_the_departing_members() -> None:
    """The interim's version names its held members apart from its new ones: an engine that
    reconnects holding the interim gets no final before a hold has passed (the bug: the
    version named 8080, 8081, 9080, 9081 alike, 9080 "stayed" and the final went at once)."""
    held = _held(_config(8080, 8081))
    stream, clock, out = _restarted(held, _config(9080, 9081))
    (interim,) = [r for r in out if r.type_url == types.ENDPOINT]
    (version,) = [r.version for r in interim.resources]
    assert serving_in_version(version) == (("127.0.0.1", 9080), ("127.0.0.1", 9081))
    assert held_in_version(version) == (("127.0.0.1", 8080), ("127.0.0.1", 8081))
    now = {t: dict(v) for t, v in held.items()}
    now[types.ENDPOINT] = {"p": version}
    again = DeltaStream(stream.cache, clock)
    clock.now += 0.1
    out = _answered(again, [_reconnect(types.CLUSTER, now),
                            _reconnect(types.ENDPOINT, now, ("p",))])
    assert [r for r in out if r.type_url == types.ENDPOINT] == []  # it holds the interim
    cluster = Builder().build(_config(9080))[types.CLUSTER]["p"].message
    assert isinstance(cluster, cluster_pb2.Cluster)
    end = again.next_retry_at()
    assert end == clock.now + (handover.hold_s(cluster) or 0) > clock.now
    clock.now = end
    (final,) = again.on_change()
    assert _by_priority(final) == {0: [9080, 9081]}


async def test_a_cache_interim_s_version_names_its_held_members_apart() -> None:
    """A Podway restarted inside its own hold recalls the departing members, not the
    interim's new ones."""
    cache = Cache()
    cache.set(Builder().build(_config(8080)))
    cache.set(Builder().build(_config(9080)))
    version = cache.get(types.ENDPOINT).resources["p"].digest
    assert held_in_version(version) == (("127.0.0.1", 8080),)
    assert serving_in_version(version) == (("127.0.0.1", 9080),)
    cache.set(Builder().build(_config(9080, 9081)))  # carried on: still named apart
    version = cache.get(types.ENDPOINT).resources["p"].digest
    assert held_in_version(version) == (("127.0.0.1", 8080),)


def test_nothing_is_held_when_nothing_needs_a_bridge() -> None:
    """A recalled member that stays, an unchanged assignment, a pool without checks, or a
    version that names no member (an older Podway's): the cache's assignment at once."""
    cases = [(_config(9001), _config(9001, 9002), {0: [9001, 9002]}),
             (_config(9001, settings=PoolSettings()), _config(9002, settings=PoolSettings()),
              {0: [9002]})]
    for before, now, expected in cases:
        stream, _, out = _restarted(_held(before), now)
        (eds,) = [r for r in out if r.type_url == types.ENDPOINT]
        assert _by_priority(eds) == expected
        assert stream.next_retry_at() is None
    _, _, out = _restarted(_held(_config(9001)), _config(9001))
    assert out == []  # the engine has it all
    older = _held(_config(9001))
    older[types.ENDPOINT] = {n: v.partition("~")[0] for n, v in older[types.ENDPOINT].items()}
    stream, _, out = _restarted(older, _config(9002))
    (eds,) = [r for r in out if r.type_url == types.ENDPOINT]
    assert _by_priority(eds) == {0: [9002]}


async def test_a_hold_begun_by_an_engine_s_request_ends_without_a_cache_change() -> None:
    """Through the server: the engine's endpoint request (after the pusher went to wait for a
    cache change) begins a hold; the final assignment still follows when it ends."""
    cache = Cache()
    cache.set(Builder().build(_config(9002)))
    held = _held(_config(9001))
    queue: asyncio.Queue[d.DeltaDiscoveryRequest] = asyncio.Queue()
    final = asyncio.Event()

    async def requests() -> AsyncIterator[d.DeltaDiscoveryRequest]:
        while True:
            yield await queue.get()

    class Context:
        def peer(self) -> str:
            return "unix:test"

        async def write(self, response: d.DeltaDiscoveryResponse) -> None:
            queue.put_nowait(_ack(response.type_url, response.nonce))
            if response.type_url == types.ENDPOINT and response.resources \
                    and _by_priority(response) == {0: [9002]}:
                final.set()

    queue.put_nowait(_reconnect(types.CLUSTER, held))
    serving = asyncio.create_task(AdsServicer(cache).DeltaAggregatedResources(requests(),
                                                                                Context()))
    try:
        await asyncio.sleep(0.2)  # the pusher waits for a cache change by now
        queue.put_nowait(_reconnect(types.ENDPOINT, held, ("p",)))
        await asyncio.wait_for(final.wait(), 5)
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


def _nack(type_url: str, nonce: str, error: str = "refused") -> d.DeltaDiscoveryRequest:
    request = _ack(type_url, nonce)
    request.error_detail.message = error
    return request


SLOW = PoolSettings(health_check=HealthCheck(kind=HealthCheckKind.TCP, interval_ms=5000,
                                             timeout_ms=1000))  # a hold of seconds, as default


def test_an_interim_refused_and_offered_again_inside_the_hold_is_still_the_interim() -> None:
    """Envoy refuses the interim (a NACK); it is offered again after the refusal's backoff
    (1 s), inside the hold. The bug: the offer again was the cache's final assignment, so the
    recalled members left before the new ones had their first check."""
    held = _held(_config(9001, settings=SLOW))
    cache, clock = Cache(), Clock()
    cache.set(Builder().build(_config(9002, settings=SLOW)))
    stream = DeltaStream(cache, clock)
    (interim,) = stream.on_request(_reconnect(types.ENDPOINT, held, ("p",)))[0]
    assert _by_priority(interim) == {0: [9002], 1: [9001]}
    end = stream.next_retry_at()
    assert end is not None
    assert end - clock.now > 1.5
    assert stream.on_request(_nack(types.ENDPOINT, interim.nonce))[0] == []
    clock.now += 1.0  # the refusal is due again; the hold is not over
    (again,) = stream.on_change()
    assert _by_priority(again) == {0: [9002], 1: [9001]}


def _two(p: int, q: int) -> IR:
    listener = http_listener(vhost("a.com", route("r", "/", "p"), route("s", "/q", "q")))
    return IR(listeners=(listener,), pools=MappingProxyType({
        name: Pool(name=name, settings=SLOW, members=(Member(address="127.0.0.1", port=port),))
        for name, port in (("p", p), ("q", q))}))


def test_interims_refused_together_are_offered_again_in_halves_as_interims() -> None:
    """A refusal that names nothing in a response of two: each is offered again on its own
    (the halves) at once, inside the hold: still the interims."""
    held = _held(_two(9001, 8001))
    cache, clock = Cache(), Clock()
    cache.set(Builder().build(_two(9002, 8002)))
    stream = DeltaStream(cache, clock)
    (both,) = stream.on_request(_reconnect(types.ENDPOINT, held, ("p", "q")))[0]
    assert len(both.resources) == 2
    halves = stream.on_request(_nack(types.ENDPOINT, both.nonce))[0]
    assert [_by_priority(r) for r in halves] == [{0: [9002], 1: [9001]},
                                                 {0: [8002], 1: [8001]}]
