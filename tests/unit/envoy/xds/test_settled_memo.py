"""The "clusters settled" memo: a route-only push does not look at every cluster again, and
the kept answer always equals a fresh look (any transcript of requests, answers and changes)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.protocol import SettledMemo
from podway.envoy.xds.refusals import Refusals
from podway.envoy.xds.sotw import SotwStream
from podway.ir import IR

from .helpers import http_listener, ir, pool, route, vhost


def _config(path: str, target: str = "blue", *, ports: tuple[int, int] = (9000, 9001),
            pools: tuple[str, ...] = ("blue", "green")) -> IR:
    listener = http_listener(vhost("a.com", route("r", path, target)))
    return ir((listener,), *(pool(name, port) for name, port in zip(
        ("blue", "green"), ports, strict=True) if name in pools))


class _Counted:
    """Wraps a stream's full look at the clusters, counting the looks."""

    def __init__(self, stream: DeltaStream | SotwStream) -> None:
        self.looks = 0
        self.look = stream._look_at_clusters
        stream._look_at_clusters = self  # type: ignore[method-assign]

    def __call__(self) -> bool:
        self.looks += 1
        return self.look()


def _delta(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = "",
           unsubscribe: tuple[str, ...] = ()) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                   response_nonce=nonce, resource_names_unsubscribe=unsubscribe)


def _connected_delta(cache: Cache) -> DeltaStream:
    stream = DeltaStream(cache)
    for type_url, names in ((types.CLUSTER, ()), (types.ENDPOINT, ("blue", "green")),
                            (types.LISTENER, ()), (types.ROUTE, ("listener/http",))):
        out, _ = stream.on_request(_delta(type_url, names))
        for response in out:
            stream.on_request(_delta(response.type_url, nonce=response.nonce))
    return stream


def test_delta_route_only_changes_do_not_look_at_the_clusters_again() -> None:
    """Three route-only changes after the first config: each is pushed, and the clusters are
    not looked at again (before the memo, every push looked at every cluster: O(pools) per
    route change)."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config("/a")))
    stream = _connected_delta(cache)
    counted = _Counted(stream)
    assert stream._clusters_settled()
    looks = counted.looks
    for path in ("/b", "/c", "/d"):
        cache.set(builder.build(_config(path)))
        (rds,) = stream.on_change()
        assert rds.type_url == types.ROUTE
        stream.on_request(_delta(types.ROUTE, nonce=rds.nonce))
    assert counted.looks == looks


def test_delta_unsubscribed_assignment_holds_routes_again() -> None:
    """Envoy dropping a cluster's load assignment (no cache change) makes the next route push
    wait again: a request of an endpoint type invalidates the kept answer."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config("/a")))
    stream = _connected_delta(cache)
    cache.set(builder.build(_config("/b")))
    (rds,) = stream.on_change()
    stream.on_request(_delta(types.ROUTE, nonce=rds.nonce))
    stream.on_request(_delta(types.ENDPOINT, unsubscribe=("green",)))
    cache.set(builder.build(_config("/c")))
    assert [r.type_url for r in stream.on_change()] == []


def test_sotw_route_only_changes_do_not_look_at_the_clusters_again() -> None:
    """The same for state of the world."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config("/a")))
    stream = SotwStream(cache)
    nonces: dict[str, str] = {}
    names = {types.ENDPOINT: ("blue", "green"), types.ROUTE: ("listener/http",)}
    for type_url in (types.CLUSTER, types.ENDPOINT, types.LISTENER, types.ROUTE):
        out, _ = stream.on_request(d.DiscoveryRequest(
            type_url=type_url, resource_names=names.get(type_url, ())))
        for response in out:
            stream.on_request(d.DiscoveryRequest(
                type_url=response.type_url, resource_names=names.get(response.type_url, ()),
                response_nonce=response.nonce, version_info=response.version_info))
            nonces[response.type_url] = response.nonce
    counted = _Counted(stream)
    assert stream._clusters_settled()
    looks = counted.looks
    for path in ("/b", "/c", "/d"):
        cache.set(builder.build(_config(path)))
        (rds,) = stream.on_change()
        assert rds.type_url == types.ROUTE
        stream.on_request(d.DiscoveryRequest(
            type_url=types.ROUTE, resource_names=names[types.ROUTE], response_nonce=rds.nonce,
            version_info=rds.version_info))
    assert counted.looks == looks


def test_memo_keeps_its_answer_only_while_its_inputs_hold() -> None:
    """A cluster or endpoint touch, a cache version or a refusal change means a fresh look;
    a route or listener touch does not."""
    memo, looks = SettledMemo(), []

    def look() -> bool:
        looks.append(1)
        return True

    def ask(versions: tuple[str, str] = ("c1", "e1"), refusals: int = 0) -> None:
        assert memo.answer(versions, refusals, look)

    ask()
    memo.touch(types.ROUTE)
    memo.touch(types.LISTENER)
    ask()
    assert len(looks) == 1
    memo.touch(types.CLUSTER)
    ask()
    memo.touch(types.ENDPOINT)
    ask()
    ask(("c2", "e1"))
    ask(("c2", "e2"))
    ask(("c2", "e2"), refusals=1)
    assert len(looks) == 6


def test_refusals_count_changes_of_the_refused_names() -> None:
    """A stream's memo key sees refusals change even when another stream of the same engine
    (sharing its ``Refusals``) made the change: adding and clearing a name count, a repeated
    refusal or a clear of an unknown name do not."""
    refusals = Refusals()
    refusals.refuse("green", "d1", now=0.0, message="bad")
    refusals.refuse("green", "d1", now=1.0, message="bad")
    refusals.clear("blue")
    assert refusals.changes == 1
    refusals.clear("green")
    assert refusals.changes == 2


# ---- any transcript: the kept answer equals a fresh look -------------------------------
_CONFIGS = [_config("/a"), _config("/b"), _config("/a", "green"),
            _config("/a", ports=(9002, 9001)), _config("/a", "green", pools=("green",)),
            _config("/c", "blue", pools=("blue",))]


def _walk(stream: Any, cache: Cache, rng: random.Random, *, delta: bool) -> None:
    builder = Builder()
    cache.set(builder.build(_CONFIGS[0]))
    pending: list[Any] = []  # responses Envoy has not answered
    newest: dict[str, Any] = {}  # state of the world: only the newest answer counts
    subscribed: dict[str, set[str]] = {types.ENDPOINT: {"blue", "green"},
                                       types.ROUTE: {"listener/http"}}

    def request(type_url: str, nonce: str = "", nack: bool = False,
                version: str = "") -> Any:
        names = tuple(sorted(subscribed.get(type_url, ())))
        if delta:
            out = _delta(type_url, names if not nonce else (), nonce)
        else:
            out = d.DiscoveryRequest(type_url=type_url, resource_names=names,
                                     response_nonce=nonce, version_info=version)
        if nack:
            out.error_detail.message = "rejected"
        return out

    def take(responses: list[Any]) -> None:
        for response in responses:
            pending.append(response)
            newest[response.type_url] = response

    for type_url in (types.CLUSTER, types.ENDPOINT, types.LISTENER, types.ROUTE):
        take(stream.on_request(request(type_url))[0])
    for _ in range(150):
        step = rng.random()
        if step < 0.3:
            cache.set(builder.build(rng.choice(_CONFIGS)))
            take(stream.on_change())
        elif step < 0.8 and pending:
            response = pending.pop(rng.randrange(len(pending)))
            if not delta and newest.get(response.type_url) is not response:
                continue  # a stale answer in state of the world: Envoy never sends one
            take(stream.on_request(request(
                response.type_url, response.nonce, nack=rng.random() < 0.15,
                version="" if delta else response.version_info))[0])
        elif step < 0.9:
            names = subscribed[types.ENDPOINT]
            name = rng.choice(("blue", "green"))
            names.symmetric_difference_update({name})
            if delta:
                stream.on_request(_delta(types.ENDPOINT, (name,) if name in names else (),
                                         unsubscribe=() if name in names else (name,)))
            else:
                last = newest.get(types.ENDPOINT)
                take(stream.on_request(request(types.ENDPOINT, last.nonce if last else "",
                                               version=last.version_info if last else ""))[0])
        else:
            take(stream.on_change())
        assert stream._clusters_settled() == stream._look_at_clusters()


@pytest.mark.parametrize("seed", range(12))
def test_delta_kept_answer_equals_a_fresh_look(seed: int) -> None:
    """Random transcripts (changes, ACKs, NACKs, re-subscriptions): never a stale answer."""
    cache = Cache()
    _walk(DeltaStream(cache), cache, random.Random(seed), delta=True)


@pytest.mark.parametrize("seed", range(12))
def test_sotw_kept_answer_equals_a_fresh_look(seed: int) -> None:
    """The same for state of the world."""
    cache = Cache()
    _walk(SotwStream(cache), cache, random.Random(seed), delta=False)
