"""Resources sent per cold start grow with the resources, not with their square (issue 24).

Envoy may subscribe named resources a few at a time: a state-of-the-world request then
carries every name so far, and a delta request the new ones. Answering each request with
every subscribed resource again would send N²/2 resources for N names; each one is sent
once (delta: a scope's table pushed ahead of Envoy's request is sent once more when asked)."""

from __future__ import annotations

from collections import Counter

import pytest
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder, scoped
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.envoy.xds.sotw import SotwStream
from podway.ir import IR

from .helpers import http_listener, ir, pool, route, vhost

N = 60


def _ir(hosts: int) -> IR:
    return ir((http_listener(*(vhost(f"h{i}.ex", route(f"r{i}", "/", f"pool/p{i}"))
                               for i in range(hosts))),),
              *(pool(f"pool/p{i}", 9000 + i) for i in range(hosts)))


def test_sotw_names_asked_one_at_a_time_are_each_sent_once() -> None:
    cache = Cache()
    cache.set(Builder().build(_ir(N)))
    stream = SotwStream(cache)
    sent: Counter[str] = Counter()
    (cds,), _ = stream.on_request(d.DiscoveryRequest(type_url=types.CLUSTER))
    stream.on_request(d.DiscoveryRequest(type_url=types.CLUSTER, response_nonce=cds.nonce,
                                         version_info=cds.version_info))
    names = sorted(cache.get(types.ENDPOINT).resources)
    nonce = ""
    for k in range(1, len(names) + 1):  # each request: every name so far, one more
        out, _ = stream.on_request(d.DiscoveryRequest(
            type_url=types.ENDPOINT, resource_names=names[:k], response_nonce=nonce))
        for response in out:
            sent.update(r.type_url for r in response.resources)
            nonce = response.nonce
            stream.on_request(d.DiscoveryRequest(
                type_url=types.ENDPOINT, resource_names=names[:k], response_nonce=nonce,
                version_info=response.version_info))
    assert sum(sent.values()) == len(names) == N


def _delta(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = ""
           ) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                   response_nonce=nonce)


def test_delta_scopes_and_tables_asked_one_at_a_time_are_sent_at_most_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoped, "TABLES", 16)  # about four scopes to a table
    cache = Cache()
    cache.set(Builder(scoped_min_hosts=3).build(_ir(N)))
    stream = DeltaStream(cache)
    sent: Counter[str] = Counter()

    def ask(request: d.DeltaDiscoveryRequest) -> None:
        out, _ = stream.on_request(request)
        for response in out:
            sent.update(r.name for r in response.resources if response.type_url in (
                types.SCOPE, types.ROUTE))
            ask(_delta(response.type_url, nonce=response.nonce))

    ask(_delta(types.CLUSTER))
    ask(_delta(types.ENDPOINT, tuple(cache.get(types.ENDPOINT).resources)))
    ask(_delta(types.LISTENER))
    ask(_delta(types.SCOPE))
    scopes = sorted(cache.get(types.SCOPE).resources)
    tables = sorted({scoped.table_of(name) for name in scopes})
    assert len(scopes) == N
    assert len(tables) == 16
    for name in tables:  # one table per request, as each table's subscription starts
        ask(_delta(types.ROUTE, (name,)))
    # each scope once, each table at most twice (pushed behind its scopes, then asked)
    assert sent.keys() == {*scopes, *tables}
    assert all(sent[name] == 1 for name in scopes)
    assert all(sent[name] <= 2 for name in tables)
