"""Patched builds of listeners served as scopes equal builds from scratch over random IR
change sequences: hosts added, replaced and removed (capitals, wildcards, catch-alls with and
without routes), the scoped listener switching, pool persistence and members changing,
listeners made anew, whole builds in between. The hinted cache sees what an unhinted one sees,
and ``Cache.names_changed`` from any recent version covers every name that differs since."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.ir import IR, IRChange, Listener, Persistence, PersistenceKind, Pool, PoolSettings
from podway.ir import ListenerProtocol as Protocol
from podway.ir.hosts import host_order

from .helpers import pool, route, vhost

HOSTS = ["a.ex", "b.ex", "c.ex", "d.ex", "B.ex", "*.w.ex", "*"]
LISTENERS = ["listener/l0", "listener/l1"]
PERSIST = [None, Persistence(kind=PersistenceKind.HEADER, name="x-user"),
           Persistence(kind=PersistenceKind.SOURCE_IP)]


def _digests(resources: Any) -> dict[str, dict[str, str]]:
    return {t: {n: r.digest for n, r in by_name.items()} for t, by_name in resources.items()}


def _bytes(resources: Any) -> dict[str, bytes]:
    return {n: r.packed.value for n, r in resources[types.ROUTE].items()}


class _World:
    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Any]] = {name: {} for name in LISTENERS}
        self.objects: dict[str, Listener] = {}
        self.pools: dict[str, Pool] = {p: pool(p, 8081) for p in ("p0", "p1")}
        self.serial = 0

    def make_host(self, hostname: str, variant: int) -> Any:
        self.serial += 1
        routes = {0: (route(f"r{self.serial}", "/", "p0"),),
                  1: (route(f"r{self.serial}", f"/v{self.serial % 3}", "p1"),),
                  2: ()}[variant]
        return vhost(hostname, *routes)

    def listener(self, name: str) -> Listener:
        hosts = sorted(self.hosts[name].values(), key=lambda v: host_order(v.hostname))
        return Listener(name=name, address="127.0.0.1", port=8080 + LISTENERS.index(name),
                        protocol=Protocol.HTTP, virtual_hosts=tuple(hosts))

    def ir(self) -> IR:
        return IR(listeners=tuple(self.objects[n] for n in LISTENERS),
                  pools=MappingProxyType(dict(self.pools)))


host_op = st.tuples(st.just("host"), st.sampled_from(LISTENERS), st.sampled_from(HOSTS),
                    st.sampled_from([None, 0, 1, 2]))
pool_op = st.tuples(st.just("pool"), st.sampled_from(["p0", "p1"]),
                    st.sampled_from(["persist0", "persist1", "persist2", "members"]), st.none())
touch_op = st.tuples(st.just("touch"), st.sampled_from(LISTENERS), st.none(), st.none())
#: Back to an earlier IR's very objects (listeners and virtual hosts reused), as a patch.
revert_op = st.tuples(st.just("revert"), st.integers(0, 20), st.none(), st.none())
step = st.tuples(st.lists(st.one_of(host_op, host_op, host_op, pool_op, touch_op, revert_op),
                          min_size=1, max_size=3),
                 st.sampled_from(["patch", "patch", "patch", "whole", "stale"]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(LISTENERS), st.sampled_from(HOSTS),
                          st.sampled_from([0, 1, 2])), max_size=8),
       st.lists(step, min_size=1, max_size=10), st.sampled_from([1, 2, 3]))
def test_scoped_patched_builds_equal_whole_builds(
        start: list[tuple[str, str, int]], steps: list[Any], scoped_min: int) -> None:
    world = _World()
    for name, hostname, variant in start:
        world.hosts[name][hostname] = world.make_host(hostname, variant)
    for name in LISTENERS:
        world.objects[name] = world.listener(name)
    ir = world.ir()
    builder, hinted, plain = Builder(scoped_min_hosts=scoped_min), Cache(), Cache()
    first = builder.build(ir)
    hinted.set(first, hint=builder.hint)
    plain.set(first)
    seen: list[tuple[dict[str, str], dict[str, dict[str, str]]]] = [
        ({t: hinted.get(t).version for t in types.PUSH_ORDER}, _digests(first))]
    history: list[tuple[dict[str, dict[str, Any]], dict[str, Listener], dict[str, Pool], IR]] = []
    for ops, how in steps:
        history.append(({n: dict(h) for n, h in world.hosts.items()}, dict(world.objects),
                        dict(world.pools), ir))
        if ops[0][0] == "revert":  # alone in its step: the earlier IR as it was
            hosts, objects, pools_then, then = history[ops[0][1] % len(history)]
            change = IRChange(base=ir, pools=frozenset(
                n for n in world.pools if world.pools[n] is not pools_then[n]),
                vhosts=MappingProxyType({n: p for n in LISTENERS if (p := tuple(
                    (world.hosts[n].get(h), hosts[n].get(h))
                    for h in {*world.hosts[n], *hosts[n]}
                    if world.hosts[n].get(h) is not hosts[n].get(h)))}))
            world.hosts = {n: dict(h) for n, h in hosts.items()}
            world.objects, world.pools = dict(objects), dict(pools_then)
            ir = _check(builder, then, change, how, scoped_min=scoped_min, hinted=hinted,
                        plain=plain, seen=seen)
            continue
        pairs: dict[str, dict[str, tuple[Any, Any]]] = {n: {} for n in LISTENERS}
        pools: set[str] = set()
        touched: set[str] = set()
        for kind, a, b, c in ops:
            if kind == "revert":
                continue
            if kind == "host":
                old = world.hosts[a].get(b)
                new = world.make_host(b, c) if c is not None else None
                if old is None and new is None:
                    continue
                first_old = pairs[a][b][0] if b in pairs[a] else old
                pairs[a][b] = (first_old, new)
                if new is None:
                    del world.hosts[a][b]
                else:
                    world.hosts[a][b] = new
            elif kind == "pool":
                current = world.pools[a]
                if b == "members":
                    ports = tuple(m.port for m in current.members)
                    world.pools[a] = Pool(name=a, settings=current.settings, members=pool(
                        a, *(ports[1:] if len(ports) > 1 else (*ports, ports[-1] + 1))).members)
                else:
                    world.pools[a] = Pool(name=a, members=current.members, settings=PoolSettings(
                        persistence=PERSIST[int(b[-1])]))
                pools.add(a)
            else:
                touched.add(a)
        vhosts = {n: tuple(p for p in by_host.values() if p[0] is not p[1])
                  for n, by_host in pairs.items()}
        vhosts = {n: p for n, p in vhosts.items() if p}
        for name in LISTENERS:
            if name in vhosts or name in touched or pairs[name]:
                world.objects[name] = world.listener(name)
        after = world.ir()
        change = IRChange(base=ir, pools=frozenset(pools), vhosts=MappingProxyType(vhosts))
        ir = _check(builder, after, change, how, scoped_min=scoped_min, hinted=hinted,
                    plain=plain, seen=seen)


def _check(builder: Builder, after: IR, change: IRChange, how: str, *, scoped_min: int,
           hinted: Cache, plain: Cache,
           seen: list[tuple[dict[str, str], dict[str, dict[str, str]]]]) -> IR:
    """Build ``after`` (patched, whole, or with a change on a stale base) and check it."""
    if how == "stale":  # a change whose base is not the IR the builder saw last
        change = IRChange(base=IR(listeners=(), pools=MappingProxyType({})),
                          pools=change.pools, vhosts=change.vhosts)
    built = builder.build(after, change if how in ("patch", "stale") else None)
    whole = Builder(scoped_min_hosts=scoped_min).build(after)
    assert _digests(built) == _digests(whole)
    assert _bytes(built) == _bytes(whole)
    got = hinted.set(built, hint=builder.hint)
    want = plain.set(built)
    assert {t: (c.updated, c.removed) for t, c in got.items()} == {
        t: (c.updated, c.removed) for t, c in want.items()}
    assert all(_digests({t: hinted.get(t).resources}) == _digests({t: plain.get(t).resources})
               for t in types.PUSH_ORDER)
    now = _digests(built)
    for versions, then in seen:
        for t in types.PUSH_ORDER:
            if versions[t] == hinted.get(t).version:
                continue
            since = hinted.names_changed(t, versions[t])
            if since is None:
                continue
            moved = {n for n in {*then[t], *now[t]}
                     if then[t].get(n) != now[t].get(n)}
            assert moved <= since, (t, moved - since)
    seen.append(({t: hinted.get(t).version for t in types.PUSH_ORDER}, now))
    event(f"scopes: {bool(built[types.SCOPE])} {how}, "
          f"edited: {builder._tables.edits is not None}")
    return after
