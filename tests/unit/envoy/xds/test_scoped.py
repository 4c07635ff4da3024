"""Scoped route tables (``podway.envoy.config.scoped``): which listener is served as scopes,
what is built, the one-table form state-of-the-world streams get, and the delta stream rules
(every scope again after a scoped listener; no removal while none is served)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2, scoped_route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from envoy.service.discovery.v3 import discovery_pb2 as d

from podway.envoy import types
from podway.envoy.config import Builder, Resources, build
from podway.envoy.config import scoped as scoping
from podway.envoy.config.routes import route_configuration
from podway.envoy.config.scoped import (
    LOWER_HOST_FILTER,
    bucket,
    pick,
    rds_form,
    scope_name,
    table_name,
    table_of,
)
from podway.envoy.xds.access import TableForm
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.delta import DeltaStream
from podway.ir import IR, Listener, ListenerProtocol, VirtualHost, WildcardMode

from .helpers import http_listener, ir, pool, route, vhost


def _hosts(*names: str) -> tuple[VirtualHost, ...]:
    return tuple(vhost(n, route(f"r-{n}", "/", "blue")) for n in names)


def _config(*hosts: VirtualHost, listener: Listener | None = None) -> IR:
    return ir((listener or http_listener(*hosts),), pool("blue", 9000))


def _manager(resources: Resources, name: str = "listener/http") -> hcm.HttpConnectionManager:
    message = resources[types.LISTENER][name].message
    assert isinstance(message, listener_pb2.Listener)
    manager = hcm.HttpConnectionManager()
    message.filter_chains[0].filters[0].typed_config.Unpack(manager)
    return manager


THREE = _hosts("a.com", "B.com", "c.com")


def test_scopes_and_their_tables_are_waited_for_as_the_engine_waits_for_listeners() -> None:
    """Envoy's 15 s initial fetch timeout ran out for each of 10,000 scope tables when Envoy
    was busy longer (a warning each, and a host without routes until its table came): the
    scopes and each scope's table are waited for, as ``podway engine`` and ``podway run``
    wait for their clusters and listeners."""
    from podway.envoy.config.common import WAIT_FOR_FIRST_S
    from podway.envoy.engine.bootstrap import ENGINE_FETCH_TIMEOUT_S

    scoped = _manager(build(_config(*THREE), scoped_min_hosts=3)).scoped_routes
    assert ENGINE_FETCH_TIMEOUT_S == WAIT_FOR_FIRST_S == 0
    for source in (scoped.rds_config_source, scoped.scoped_rds.scoped_rds_config_source):
        assert source.HasField("ads")
        assert source.HasField("initial_fetch_timeout")  # set: not Envoy's default 15 s
        assert source.initial_fetch_timeout.ToTimedelta().total_seconds() == WAIT_FOR_FIRST_S


def test_a_listener_with_enough_exact_hosts_is_served_as_scopes() -> None:
    built = build(_config(*THREE), scoped_min_hosts=3)
    manager = _manager(built)
    assert manager.WhichOneof("route_specifier") == "scoped_routes"
    assert manager.scoped_routes.name == "listener/http"
    extractor = manager.scoped_routes.scope_key_builder.fragments[0].header_value_extractor
    assert (extractor.name, extractor.element_separator, extractor.index) == (
        ":authority", ":", 0)
    assert manager.http_filters[0].name == LOWER_HOST_FILTER
    scopes = built[types.SCOPE]
    assert sorted(scopes) == [scope_name("listener/http", h) for h in ("a.com", "b.com",
                                                                        "c.com")]
    scope = scopes["listener/http/host/b.com"].message
    assert isinstance(scope, scoped_route_pb2.ScopedRouteConfiguration)
    assert scope.route_configuration_name == table_name("listener/http", "b.com")
    assert scope.route_configuration_name == f"listener/http/hosts/{bucket('b.com')}"
    assert [f.string_key for f in scope.key.fragments] == ["b.com"]  # keys are lower case
    table = built[types.ROUTE][scope.route_configuration_name].message
    assert isinstance(table, route_pb2.RouteConfiguration)
    assert ["b.com"] in [list(v.domains) for v in table.virtual_hosts]
    # The one table is built too (state-of-the-world streams are served it).
    assert "listener/http" in built[types.ROUTE]


@pytest.mark.parametrize("tables", [1, 2, scoping.TABLES])
def test_a_shared_table_is_the_table_head_with_its_hosts_sorted_by_name(
        monkeypatch: pytest.MonkeyPatch, tables: int) -> None:
    monkeypatch.setattr(scoping, "TABLES", tables)
    hosts = _hosts(*(f"h{i}.com" for i in reversed(range(12))))
    listener = http_listener(*hosts)
    built = build(_config(listener=listener), scoped_min_hosts=3)
    whole = route_configuration(listener, persistence={})
    by_table: dict[str, list[Any]] = {}
    for vhost_message in whole.virtual_hosts:
        by_table.setdefault(table_name("listener/http", vhost_message.domains[0]),
                            []).append(vhost_message)
    assert len(by_table) == min(tables, len(hosts))
    assert sorted(n for n in built[types.ROUTE] if n != "listener/http") == sorted(by_table)
    for name, members in by_table.items():
        expected = route_pb2.RouteConfiguration()
        expected.CopyFrom(whole)
        expected.name = name
        del expected.virtual_hosts[:]
        expected.virtual_hosts.extend(sorted(members, key=lambda v: v.domains[0]))
        resource = built[types.ROUTE][name]
        assert resource.packed.value == expected.SerializeToString(deterministic=True)
    for name, resource in built[types.SCOPE].items():  # each scope names its host's table
        assert resource.message.route_configuration_name == table_of(name)


def test_what_scopes_cannot_match_keeps_the_one_table() -> None:
    small = build(_config(*THREE))  # below the threshold (256)
    assert _manager(small).WhichOneof("route_specifier") == "rds"
    assert not small[types.SCOPE]
    wildcard = vhost("*.d.com", route("r-d", "/", "blue"), wildcard=WildcardMode.SUFFIX)
    catch_all_with_routes = vhost("*", route("r-any", "/", "blue"))
    for extra in (wildcard, catch_all_with_routes):
        built = build(_config(*THREE, extra), scoped_min_hosts=3)
        assert _manager(built).WhichOneof("route_specifier") == "rds"
        assert not built[types.SCOPE]
    empty_catch_all = vhost("*")  # serves nothing: Envoy's own 404 either way
    built = build(_config(*THREE, empty_catch_all), scoped_min_hosts=3)
    assert _manager(built).WhichOneof("route_specifier") == "scoped_routes"
    https = replace(http_listener(*THREE), protocol=ListenerProtocol.HTTPS)
    assert pick([https], 3) is None  # SNI tables and 421s stay RDS


def test_only_the_listener_with_most_hosts_is_served_as_scopes() -> None:
    first = http_listener(*THREE)
    second = replace(http_listener(*_hosts("a.com", "b.com", "c.com", "d.com"), port=8081),
                     name="listener/second")
    built = Builder(scoped_min_hosts=3).build(ir((first, second), pool("blue", 9000)))
    assert _manager(built).WhichOneof("route_specifier") == "rds"
    assert _manager(built, "listener/second").WhichOneof("route_specifier") == "scoped_routes"
    assert all(n.startswith("listener/second/") for n in built[types.SCOPE])


def test_the_one_table_form_equals_the_listener_built_without_scopes() -> None:
    scoped = build(_config(*THREE), scoped_min_hosts=3)[types.LISTENER]["listener/http"]
    plain = build(_config(*THREE))[types.LISTENER]["listener/http"]
    assert scoped.digest != plain.digest
    assert isinstance(scoped.message, listener_pb2.Listener)
    converted = rds_form(scoped.message)
    assert converted is not None
    assert converted.SerializeToString(deterministic=True) == plain.packed.value
    assert isinstance(plain.message, listener_pb2.Listener)
    assert rds_form(plain.message) is None


def test_an_unchanged_host_keeps_its_resources_across_builds() -> None:
    builder = Builder(scoped_min_hosts=3)
    before = builder.build(_config(*THREE))
    after = builder.build(_config(*THREE, *_hosts("d.com")))  # new listener object
    d_table = table_name("listener/http", "d.com")
    for name in before[types.SCOPE]:
        assert after[types.SCOPE][name] is before[types.SCOPE][name]
        if table_of(name) != d_table:  # (a table d.com joined is new)
            assert after[types.ROUTE][table_of(name)] is before[types.ROUTE][table_of(name)]
    assert "listener/http/host/d.com" in after[types.SCOPE]
    changed = builder.build(_config(THREE[0], vhost("B.com", route("r-b", "/x", "blue")),
                                    THREE[2], *_hosts("d.com")))
    b, b_table = "listener/http/host/b.com", table_name("listener/http", "b.com")
    assert changed[types.ROUTE][b_table].digest != after[types.ROUTE][b_table].digest
    assert changed[types.SCOPE][b].digest == after[types.SCOPE][b].digest  # unchanged


def test_state_of_the_world_streams_see_the_one_table_form() -> None:
    cache = Cache()
    cache.set(build(_config(*THREE), scoped_min_hosts=3))
    view = TableForm(cache)
    plain = build(_config(*THREE))
    assert view.get(types.LISTENER).resources["listener/http"].digest == (
        plain[types.LISTENER]["listener/http"].digest)
    assert view.get(types.LISTENER) is view.get(types.LISTENER)  # converted once per version
    assert not view.get(types.SCOPE).resources
    assert view.names_changed(types.SCOPE, "") == frozenset()
    assert view.get(types.ROUTE) is cache.get(types.ROUTE)


def _req(type_url: str, subscribe: tuple[str, ...] = (), nonce: str = ""
         ) -> d.DeltaDiscoveryRequest:
    return d.DeltaDiscoveryRequest(type_url=type_url, resource_names_subscribe=subscribe,
                                   response_nonce=nonce)


def _connected(cache: Cache) -> DeltaStream:
    """A delta stream that has received and acknowledged the whole first config."""
    stream = DeltaStream(cache)
    tables = tuple(n for n in cache.get(types.ROUTE).resources if "/hosts/" in n)
    for type_url, names in ((types.CLUSTER, ()), (types.ENDPOINT, ("blue",)),
                            (types.LISTENER, ()), (types.SCOPE, ()), (types.ROUTE, tables)):
        out, _ = stream.on_request(_req(type_url, names))
        for response in out:
            stream.on_request(_req(response.type_url, nonce=response.nonce))
    return stream


def _ack_all(stream: DeltaStream, out: list[d.DeltaDiscoveryResponse]) -> None:
    for response in out:
        stream.on_request(_req(response.type_url, nonce=response.nonce))


def test_delta_scopes_are_a_wildcard_and_an_added_host_is_its_scope_and_table() -> None:
    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(_config(*THREE)))
    stream = DeltaStream(cache)
    for type_url in (types.CLUSTER, types.ENDPOINT, types.LISTENER):
        out, _ = stream.on_request(_req(type_url, ("blue",) if type_url == types.ENDPOINT
                                        else ()))
        _ack_all(stream, out)
    out, _ = stream.on_request(_req(types.SCOPE))
    assert [len(r.resources) for r in out if r.type_url == types.SCOPE] == [3]
    _ack_all(stream, out)
    tables = tuple(sorted(n for n in cache.get(types.ROUTE).resources if "/hosts/" in n))
    out, _ = stream.on_request(_req(types.ROUTE, tables))
    assert [sorted(x.name for x in r.resources) for r in out] == [list(tables)]
    _ack_all(stream, out)
    cache.set(builder.build(_config(*THREE, *_hosts("d.com"))))
    out = stream.on_change()
    d_table, e_table = (table_name("listener/http", h) for h in ("d.com", "e.com"))
    assert d_table not in tables  # (new tables)
    assert e_table not in (*tables, d_table)
    # The scope, and its table right behind it: Envoy need not ask first.
    assert [(r.type_url, [x.name for x in r.resources]) for r in out] == [
        (types.SCOPE, ["listener/http/host/d.com"]), (types.ROUTE, [d_table])]
    # Envoy asks for the table while handling the scope: sent once more (a safety net), and
    # only once.
    more, _ = stream.on_request(_req(types.ROUTE, (d_table,)))
    assert [(r.type_url, [x.name for x in r.resources]) for r in more] == [
        (types.ROUTE, [d_table])]
    _ack_all(stream, out + more)
    assert stream.on_request(_req(types.ROUTE, (d_table,)))[0] == []
    # A refused scope: its table went nowhere, so it is sent again when Envoy asks for it.
    cache.set(builder.build(_config(*THREE, *_hosts("d.com", "e.com"))))
    out = stream.on_change()
    assert [r.type_url for r in out] == [types.SCOPE, types.ROUTE]
    nack = _req(types.SCOPE, nonce=out[0].nonce)
    nack.error_detail.message = "refused"
    stream.on_request(nack)
    stream.on_request(_req(types.ROUTE, nonce=out[1].nonce))
    later, _ = stream.on_request(_req(types.ROUTE, (e_table,)))
    assert [(r.type_url, [x.name for x in r.resources]) for r in later] == [
        (types.ROUTE, [e_table])]


def test_delta_scopes_stay_while_none_is_served_and_all_follow_a_scoped_listener() -> None:
    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(_config(*THREE)))
    stream = _connected(cache)
    wildcard = vhost("*.d.com", route("r-d", "/", "blue"), wildcard=WildcardMode.SUFFIX)
    cache.set(builder.build(_config(*THREE, wildcard)))  # the one-table form
    out = stream.on_change()
    # No scope removed (Envoy ignores the removal of the one-host tables).
    assert [r.type_url for r in out] == [types.LISTENER, types.ROUTE]
    _ack_all(stream, out)
    out, _ = stream.on_request(_req(types.ROUTE, ("listener/http",)))
    _ack_all(stream, out)
    cache.set(builder.build(_config(THREE[0], THREE[1])))  # c.com gone: below 3, one table
    _ack_all(stream, stream.on_change())
    cache.set(builder.build(_config(*THREE[:2], *_hosts("d.com"))))  # scopes again
    out = stream.on_change()
    assert [r.type_url for r in out][:2] == [types.LISTENER, types.SCOPE]
    (scopes,) = [r for r in out if r.type_url == types.SCOPE]
    # Every scope again (the new connection manager's subscription has none), and the one
    # gone meanwhile removed.
    assert sorted(r.name for r in scopes.resources) == [
        "listener/http/host/a.com", "listener/http/host/b.com", "listener/http/host/d.com"]
    assert list(scopes.removed_resources) == ["listener/http/host/c.com"]


def test_a_refused_scope_leaves_the_shared_table_envoy_holds_as_it_is(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused scope's table is forgotten (sent again when Envoy asks) only if Envoy never
    asked for it. A shared table Envoy holds for other hosts stays as Envoy has it: forgotten,
    it was never sent again (Envoy does not ask twice), its known version stayed behind the
    cache's, and every cluster removal waited for it forever; with no accepted version left, a
    later refusal of the table would have put an empty stand-in in its place."""
    monkeypatch.setattr(scoping, "TABLES", 1)  # every host in one table
    now = [1e6]

    def world(*hosts: VirtualHost, green: bool = True) -> IR:
        return ir((http_listener(*hosts),), pool("blue", 9000),
                  *((pool("green", 9001),) if green else ()))

    cache, builder = Cache(), Builder(scoped_min_hosts=3)
    cache.set(builder.build(world(*THREE)))
    stream = DeltaStream(cache, clock=lambda: now[0])
    (table,) = (n for n in cache.get(types.ROUTE).resources if "/hosts/" in n)
    for type_url, names in ((types.CLUSTER, ()), (types.ENDPOINT, ("blue", "green")),
                            (types.LISTENER, ()), (types.SCOPE, ()), (types.ROUTE, (table,))):
        out, _ = stream.on_request(_req(type_url, names))
        _ack_all(stream, out)
    cache.set(builder.build(world(*THREE, *_hosts("d.com"))))
    out = stream.on_change()
    assert [(r.type_url, [x.name for x in r.resources]) for r in out] == [
        (types.SCOPE, ["listener/http/host/d.com"]), (types.ROUTE, [table])]
    nack = _req(types.SCOPE, nonce=out[0].nonce)
    nack.error_detail.message = "refused"
    _ack_all(stream, stream.on_request(nack)[0])
    _ack_all(stream, stream.on_request(_req(types.ROUTE, nonce=out[1].nonce))[0])
    now[0] += 600  # the scope is offered again, alone (its table went), and refused again
    (retry,) = stream.on_change()
    assert [x.name for x in retry.resources] == ["listener/http/host/d.com"]
    nack = _req(types.SCOPE, nonce=retry.nonce)
    nack.error_detail.message = "refused"
    _ack_all(stream, stream.on_request(nack)[0])
    cache.set(builder.build(world(*THREE, *_hosts("d.com"), green=False)))  # green goes
    removed: list[str] = []
    for _ in range(3):
        now[0] += 600  # past every hold
        out = stream.on_change()
        removed += [n for r in out if r.type_url == types.CLUSTER for n in r.removed_resources]
        _ack_all(stream, out)
    assert removed == ["green"]
    # Envoy refuses the next change of the table: it keeps what it holds, no empty stand-in.
    cache.set(builder.build(world(vhost("a.com", route("r-a2", "/z", "blue")), *THREE[1:],
                                  *_hosts("d.com"), green=False)))
    out = stream.on_change()
    (routes,) = (r for r in out if r.type_url == types.ROUTE)
    refusal = _req(types.ROUTE, nonce=routes.nonce)
    refusal.error_detail.message = f"Error adding/updating route {table}: refused"
    again, _ = stream.on_request(refusal)
    _ack_all(stream, [r for r in out if r is not routes])
    now[0] += 600
    again += stream.on_change()
    sent = [x for r in again if r.type_url == types.ROUTE for x in r.resources]
    assert all(len(x.resource.value) > 100 for x in sent), "an empty table stood in"
