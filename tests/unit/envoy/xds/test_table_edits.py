"""Route tables edited per change (``TableEncoder`` via ``Builder.build(ir, change)``): what
an edit keeps must not grow with the number of changes."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podway.envoy.config import Builder, scoped
from podway.envoy.config.routes import TableEncoder, route_configuration
from podway.envoy.config.scoped import HostCount
from podway.envoy.xds.cache import HISTORY, Cache
from podway.ir import IR, IRChange, Pool, VirtualHost

from .helpers import http_listener, pool, route, vhost


def _digests(resources: Any) -> dict[str, dict[str, str]]:
    return {t: {n: r.digest for n, r in by_name.items()} for t, by_name in resources.items()}


def test_edited_tables_keep_one_encoding_per_virtual_host_however_many_changes() -> None:
    """A thousand edits of one virtual host: the encoder holds the encodings of the three
    virtual hosts the table has, not of every replaced one (nor keeps those alive), and the
    table still equals a whole build's."""
    pools = MappingProxyType({"p": pool("p", 8081)})
    hosts = [vhost(h, route(f"r-{h}", "/", "p")) for h in ("a.example", "b.example",
                                                             "c.example")]
    ir = IR(listeners=(http_listener(*hosts),), pools=pools)
    builder = Builder()
    builder.build(ir)
    for n in range(1000):
        old = hosts[1]
        hosts[1] = vhost("b.example", route(f"r-{n}", "/", "p"))
        after = IR(listeners=(http_listener(*hosts),), pools=pools)
        built = builder.build(after, IRChange(
            base=ir, vhosts=MappingProxyType({"listener/http": ((old, hosts[1]),)})))
        ir = after
    kept = builder._tables._parts["listener/http"]
    assert len(kept) == len(hosts)
    assert {part[0].name for part in kept.values()} == {h.name for h in hosts}
    assert all(any(part[0] is h for part in kept.values()) for h in hosts)
    whole = Builder().build(ir)
    assert {n: r.digest for n, r in built["type.googleapis.com/envoy.config.route.v3."
                                          "RouteConfiguration"].items()} == {
        n: r.digest for n, r in whole["type.googleapis.com/envoy.config.route.v3."
                                      "RouteConfiguration"].items()}


ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
SCOPE = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"


def _scoped_world(count: int) -> tuple[list[VirtualHost], MappingProxyType[str, Pool]]:
    pools = MappingProxyType({"p": pool("p", 8081)})
    return [vhost(f"h{i:03}.example", route(f"r{i}", "/", "p")) for i in range(count)], pools


def _walks(*_: object) -> None:
    raise AssertionError("walked every virtual host on a patched change")


def test_a_patched_change_of_a_scoped_listener_touches_only_its_hosts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding, replacing and removing hosts of a listener served as scopes edits the scopes
    of those hosts and the shared tables they are in only: no walk of the hosts (neither the
    host count, nor the scoped tables, nor the table's entries), every other resource the
    very same object, the hint names only the touched ones, and the result equals a whole
    build."""
    monkeypatch.setattr(scoped, "TABLES", 8)  # five hosts to a table
    hosts, pools = _scoped_world(40)
    ir = IR(listeners=(http_listener(*hosts),), pools=pools)
    builder, hinted, plain = Builder(scoped_min_hosts=8), Cache(), Cache()
    before = builder.build(ir)
    hinted.set(before, hint=builder.hint)
    plain.set(before)
    steps: list[tuple[VirtualHost | None, VirtualHost | None]] = [
        (None, vhost("h050.example", route("new", "/", "p"))),             # added
        (hosts[3], vhost("h003.example", route("changed", "/x", "p"))),   # replaced
        (hosts[7], None),                                                  # removed
    ]
    for old, new in steps:
        hosts = sorted([h for h in hosts if h is not old] + ([new] if new is not None else []),
                       key=lambda v: v.hostname)
        after = IR(listeners=(http_listener(*hosts),), pools=pools)
        with monkeypatch.context() as patched:
            patched.setattr(HostCount, "of", _walks)
            patched.setattr(TableEncoder, "entries", property(_walks))
            built = builder.build(after, IRChange(base=ir, vhosts=MappingProxyType(
                {"listener/http": ((old, new),)})))
        either = new if new is not None else old
        assert either is not None
        table = scoped.table_name("listener/http", either.hostname)
        touched = {scoped.scope_name("listener/http", either.hostname), table}
        for kind in (ROUTE, SCOPE):
            same = {n for n, r in built[kind].items() if before[kind].get(n) is r}
            assert set(built[kind]) - same <= {*touched, "listener/http"}
            assert builder.hint[kind][0] is before[kind]
            assert builder.hint[kind][1] <= {*touched, "listener/http"}
        assert built[ROUTE].get(table) is not before[ROUTE].get(table)  # re-encoded
        assert _digests(built) == _digests(Builder(scoped_min_hosts=8).build(after))
        assert hinted.set(built, hint=builder.hint).keys() == plain.set(built).keys()
        scope = scoped.scope_name("listener/http", either.hostname)
        assert (scope in built[SCOPE]) == (new is not None)
        ir, before = after, built


def test_the_one_table_of_a_scoped_listener_is_joined_only_when_read() -> None:
    """The one-table form of a listener served as scopes (only state-of-the-world streams read
    it) is not joined by a build; its digest differs when its content does, is the same for
    the same content however it was reached, and reading it gives the table's encoding."""
    hosts, pools = _scoped_world(20)
    ir = IR(listeners=(http_listener(*hosts),), pools=pools)
    builder = Builder(scoped_min_hosts=8)
    first = builder.build(ir)
    table = first[ROUTE]["listener/http"]
    assert table.held is None  # not joined
    changed = vhost("h004.example", route("changed", "/x", "p"))
    hosts2 = [changed if h is hosts[4] else h for h in hosts]
    after = IR(listeners=(http_listener(*hosts2),), pools=pools)
    second = builder.build(after, IRChange(base=ir, vhosts=MappingProxyType(
        {"listener/http": ((hosts[4], changed),)})))
    edited = second[ROUTE]["listener/http"]
    assert edited.held is None
    assert edited.digest != table.digest
    back = builder.build(ir, IRChange(base=after, vhosts=MappingProxyType(
        {"listener/http": ((changed, hosts[4]),)})))
    assert back[ROUTE]["listener/http"].digest == table.digest
    whole = route_configuration(http_listener(*hosts2), persistence={})
    assert edited.packed.value == whole.SerializeToString(deterministic=True)
    assert edited.message == whole


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a.com", "B.com", "b.com", "*.c.com", "*"]),
                          st.booleans()), max_size=8),
       st.lists(st.tuples(st.integers(0, 7), st.sampled_from(
           ["a.com", "d.com", "*.c.com", "*", None]), st.booleans()), max_size=8))
def test_a_host_count_edited_equals_one_counted_afresh(
        start: list[tuple[str, bool]], steps: list[tuple[int, str | None, bool]]) -> None:
    """``HostCount.edit`` by (old, new) pairs gives the count of the edited listener."""
    def make(name: str, busy: bool) -> VirtualHost:
        return vhost(name, *([route(f"r-{name}", "/", "p")] if busy else []))

    hosts = [make(n, b) for n, b in start]
    count = HostCount.of(http_listener(*hosts))
    assert count is not None
    for at, name, busy in steps:
        old = hosts[at] if at < len(hosts) else None
        new = make(name, busy) if name is not None else None
        hosts = [h for h in hosts if h is not old] + ([new] if new is not None else [])
        count.edit([(old, new)])
        assert count.count == scoped.host_count(http_listener(*hosts))


def test_an_endpoint_change_hands_over_the_routes_and_scopes_as_they_were() -> None:
    """A change of one pool's members leaves a scoped listener's tables and scopes as they
    were: the builder hands over the previous mappings themselves (the cache sees at once
    that they did not move; no copy of every host's names)."""
    hosts, pools = _scoped_world(20)
    ir = IR(listeners=(http_listener(*hosts),), pools=pools)
    builder = Builder(scoped_min_hosts=8)
    first = builder.build(ir)
    moved = IR(listeners=ir.listeners, pools=MappingProxyType({"p": pool("p", 8082)}))
    built = builder.build(moved, IRChange(base=ir, pools=frozenset({"p"})))
    assert built[ROUTE] is first[ROUTE]
    assert built[SCOPE] is first[SCOPE]
    assert built["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"][
        "p"].digest != first["type.googleapis.com/envoy.config.endpoint.v3."
                             "ClusterLoadAssignment"]["p"].digest
    assert _digests(built) == _digests(Builder(scoped_min_hosts=8).build(moved))


def test_a_stream_a_few_changes_behind_still_gets_only_what_moved() -> None:
    """``Cache.names_changed`` from a version up to ``HISTORY`` changes back is the union of
    the names those changes moved; from further back (or an unknown version) it is None (the
    stream compares everything)."""
    hosts, pools = _scoped_world(30)
    ir = IR(listeners=(http_listener(*hosts),), pools=pools)
    builder, cache = Builder(scoped_min_hosts=8), Cache()
    cache.set(builder.build(ir), hint=builder.hint)
    versions = [cache.get(ROUTE).version]
    touched: list[str] = []
    for n in range(HISTORY + 2):
        old = hosts[n]
        hosts[n] = vhost(old.hostname, route(f"again-{n}", "/", "p"))
        after = IR(listeners=(http_listener(*hosts),), pools=pools)
        cache.set(builder.build(after, IRChange(base=ir, vhosts=MappingProxyType(
            {"listener/http": ((old, hosts[n]),)}))), hint=builder.hint)
        ir = after
        versions.append(cache.get(ROUTE).version)
        touched.append(scoped.table_name("listener/http", old.hostname))
    for back in range(1, HISTORY + 1):
        assert cache.names_changed(ROUTE, versions[-1 - back]) == {
            "listener/http", *touched[-back:]}
    assert cache.names_changed(ROUTE, versions[-2 - HISTORY]) is None
    assert cache.names_changed(ROUTE, "no such version") is None
