"""Split clusters (UDP weighted routes, TCP client-IP affinity over alike pools): member
weights normalised per backend, their settings, when TCP uses one, and a builder that rebuilds
them only when their listener or one of their pools changed."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import route_pb2, udp_proxy_pb2

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.config.split import split_members, split_pools
from podway.ir import (
    IR,
    HealthCheck,
    HealthCheckKind,
    IRChange,
    L4Route,
    Listener,
    ListenerProtocol,
    Member,
    MemberState,
    Persistence,
    PersistenceKind,
    Pool,
    PoolProtocol,
    PoolSettings,
    WeightedPool,
)
from podway.model.base import ObjectRef

REF = ObjectRef(kind="UDPRoute", namespace="default", name="dns")
UDP = PoolSettings(protocol=PoolProtocol.UDP)


def pool(name: str, *members: Member, settings: PoolSettings = UDP) -> Pool:
    return Pool(name=name, settings=settings, members=members)


def member(address: str, weight: int = 1, state: MemberState = MemberState.READY) -> Member:
    return Member(address=address, port=53, weight=weight, state=state)


def shares_of(members: tuple[Member, ...]) -> dict[str, Fraction]:
    ready = [m for m in members if m.state is MemberState.READY]
    total = sum(m.weight for m in ready)
    return {m.address: Fraction(m.weight, total) for m in ready}


def test_each_backend_gets_its_weight_however_many_members_it_has() -> None:
    """3:1 between a backend of three members and one of one: 1/4 each, exactly."""
    heavy = pool("a", member("198.18.0.1"), member("198.18.0.2"), member("198.18.0.3"))
    light = pool("b", member("198.18.0.9"))
    got = shares_of(split_members(((heavy, 3), (light, 1))))
    assert got == dict.fromkeys(("198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.9"),
                                Fraction(1, 4))


def test_member_weights_count_within_their_backend_and_not_ready_members_get_nothing() -> None:
    """Member weights 2:1 inside a backend; a not-ready member keeps its state (weight 1) and
    does not dilute its backend's share; a backend without ready members gets nothing."""
    a = pool("a", member("198.18.0.1", 2), member("198.18.0.2"),
             member("198.18.0.3", 5, MemberState.NOT_READY))
    b = pool("b", member("198.18.0.9"))
    dead = pool("c", member("198.18.0.7", state=MemberState.DRAINING))
    out = split_members(((a, 1), (b, 1), (dead, 2)))
    assert shares_of(out) == {"198.18.0.1": Fraction(1, 3), "198.18.0.2": Fraction(1, 6),
                              "198.18.0.9": Fraction(1, 2)}
    states = {m.address: (m.state, m.weight) for m in out}
    assert states["198.18.0.3"] == (MemberState.NOT_READY, 1)
    assert states["198.18.0.7"] == (MemberState.DRAINING, 1)


def test_weights_too_big_for_exact_integers_are_rounded_within_a_millionth() -> None:
    """Coprime member weights make the exact common multiple overflow Envoy's 32 bits: the
    rounded weights still give each backend its share to one part in a million."""
    a = pool("a", member("198.18.0.1", 1_000_003), member("198.18.0.2", 999_983))
    b = pool("b", member("198.18.0.9", 999_979))
    out = split_members(((a, 1_000_000), (b, 1)))
    assert sum(m.weight for m in out) < 1 << 32
    got = shares_of(out)
    assert abs(float(got["198.18.0.9"]) - 1 / 1_000_001) < 1e-6
    assert abs(float(got["198.18.0.1"] + got["198.18.0.2"]) - 1_000_000 / 1_000_001) < 1e-6


def test_a_member_in_two_backends_gets_both_shares() -> None:
    shared = member("198.18.0.1")
    out = split_members(((pool("a", shared), 1), (pool("b", shared, member("198.18.0.2")), 1)))
    assert shares_of(out) == {"198.18.0.1": Fraction(3, 4), "198.18.0.2": Fraction(1, 4)}


def test_an_unusable_share_or_an_unknown_pool_is_left_out() -> None:
    route = L4Route(name="r", origin=REF, backends=(
        WeightedPool(pool="a", weight=1), WeightedPool(pool=None, weight=5),
        WeightedPool(pool="gone", weight=1), WeightedPool(pool="a", weight=2)))
    a = pool("a", member("198.18.0.1"))
    assert split_pools(route, {"a": a}) == ((a, 3),)


def _ir(listener: Listener, *pools: Pool) -> IR:
    return IR(listeners=(listener,), pools={p.name: p for p in pools})


def _udp(*backends: WeightedPool, affinity: bool = False) -> Listener:
    return Listener(name="udp", address="198.18.0.1", port=53, protocol=ListenerProtocol.UDP,
                    l4_routes=(L4Route(name="r", origin=REF, backends=backends,
                                       client_ip_affinity=affinity),))


def _target(resources: object) -> str:
    built = resources[types.LISTENER]["udp"].message  # type: ignore[index]
    proxy = udp_proxy_pb2.UdpProxyConfig()
    assert built.listener_filters[0].typed_config.Unpack(proxy)
    route = route_pb2.Route()
    assert proxy.matcher.on_no_match.action.typed_config.Unpack(route)
    return route.cluster


def test_the_builder_routes_to_the_split_and_rebuilds_only_its_endpoints() -> None:
    """Two weighted pools: the listener routes to split/udp; a member change of one pool
    replaces the split's load assignment, not its cluster; an unrelated rebuild reuses both."""
    a, b = pool("a", member("198.18.0.1")), pool("b", member("198.18.0.9"))
    listener = _udp(WeightedPool(pool="a", weight=3), WeightedPool(pool="b", weight=1))
    builder = Builder()
    first = builder.build(_ir(listener, a, b))
    assert _target(first) == "split/udp"
    assignment = first[types.ENDPOINT]["split/udp"].message
    assert isinstance(assignment, endpoint_pb2.ClusterLoadAssignment)
    weights = {e.endpoint.address.socket_address.address: e.load_balancing_weight.value
               for group in assignment.endpoints for e in group.lb_endpoints}
    assert weights == {"198.18.0.1": 3, "198.18.0.9": 1}
    again = builder.build(_ir(listener, a, b))
    assert again[types.ENDPOINT]["split/udp"] is first[types.ENDPOINT]["split/udp"]
    moved = builder.build(_ir(listener, a, replace(b, members=(member("198.18.0.8"),))))
    assert moved[types.ENDPOINT]["split/udp"].digest != first[types.ENDPOINT]["split/udp"].digest
    assert moved[types.CLUSTER]["split/udp"].digest == first[types.CLUSTER]["split/udp"].digest


def test_one_usable_pool_needs_no_split_and_affinity_hashes_the_split() -> None:
    """A single usable pool is routed to directly (no split cluster); with client-IP affinity
    the split cluster balances with Maglev (the listener hashes on the source address)."""
    a, b = pool("a", member("198.18.0.1")), pool("b", member("198.18.0.9"))
    single = Builder().build(_ir(_udp(WeightedPool(pool="a"), WeightedPool(pool=None)), a))
    assert _target(single) == "a"
    assert "split/udp" not in single[types.CLUSTER]
    both = (WeightedPool(pool="a"), WeightedPool(pool="b"))
    plain = Builder().build(_ir(_udp(*both), a, b))[types.CLUSTER]["split/udp"].message
    built = Builder().build(_ir(_udp(*both, affinity=True), a, b))
    split = built[types.CLUSTER]["split/udp"].message
    assert isinstance(split, cluster_pb2.Cluster)
    assert isinstance(plain, cluster_pb2.Cluster)
    assert (plain.lb_policy, split.lb_policy) == (cluster_pb2.Cluster.ROUND_ROBIN,
                                                  cluster_pb2.Cluster.MAGLEV)


def _tcp(*backends: WeightedPool, affinity: bool = True) -> Listener:
    return Listener(name="tcp", address="198.18.0.1", port=5432, protocol=ListenerProtocol.TCP,
                    l4_routes=(L4Route(name="r", origin=REF, backends=backends,
                                       client_ip_affinity=affinity),))


def _tcp_target(resources: object) -> tuple[str, list[str]]:
    built = resources[types.LISTENER]["tcp"].message  # type: ignore[index]
    proxy = tcp_proxy_pb2.TcpProxy()
    assert built.filter_chains[0].filters[0].typed_config.Unpack(proxy)
    return proxy.cluster, [c.name for c in proxy.weighted_clusters.clusters]


def test_tcp_affinity_over_alike_pools_is_one_split_cluster() -> None:
    """A TCP route with client-IP affinity over pools with equal settings forwards to one split
    cluster (hashing a client to one member of one backend), which keeps the pools' checks;
    without affinity, with pools that differ, or with an unusable share it splits natively."""
    tcp = PoolSettings(protocol=PoolProtocol.TCP, health_check=HealthCheck(
        kind=HealthCheckKind.TCP), persistence=Persistence(kind=PersistenceKind.SOURCE_IP))
    a = pool("a", member("198.18.0.1"), settings=tcp)
    b = pool("b", member("198.18.0.9"), settings=tcp)
    both = (WeightedPool(pool="a"), WeightedPool(pool="b"))
    built = Builder().build(_ir(_tcp(*both), a, b))
    assert _tcp_target(built) == ("split/tcp", [])
    split = built[types.CLUSTER]["split/tcp"].message
    assert isinstance(split, cluster_pb2.Cluster)
    assert split.lb_policy == cluster_pb2.Cluster.MAGLEV
    assert split.health_checks[0].HasField("tcp_health_check")
    native = ("", ["a", "b"])
    assert _tcp_target(Builder().build(_ir(_tcp(*both, affinity=False), a, b))) == native
    other = replace(b, settings=replace(tcp, connect_timeout_ms=1000))
    assert _tcp_target(Builder().build(_ir(_tcp(*both), a, other))) == native
    refused = (*both, WeightedPool(pool=None))
    assert _tcp_target(Builder().build(_ir(_tcp(*refused), a, b)))[0] == ""


def test_a_pool_settings_change_rebuilds_the_tcp_listener_it_splits() -> None:
    """The listener object stays the same while a pool's settings change: the builder still
    switches it from the split cluster to the native split (the decision is part of its memo)."""
    tcp = PoolSettings(protocol=PoolProtocol.TCP,
                       persistence=Persistence(kind=PersistenceKind.SOURCE_IP))
    a = pool("a", member("198.18.0.1"), settings=tcp)
    b = pool("b", member("198.18.0.9"), settings=tcp)
    listener = _tcp(WeightedPool(pool="a"), WeightedPool(pool="b"))
    builder = Builder()
    assert _tcp_target(builder.build(_ir(listener, a, b)))[0] == "split/tcp"
    changed = replace(b, settings=replace(tcp, connect_timeout_ms=1000))
    after = builder.build(_ir(listener, a, changed))
    assert _tcp_target(after) == ("", ["a", "b"])
    assert "split/tcp" not in after[types.CLUSTER]


def test_a_split_that_comes_with_a_change_leaves_the_last_build_as_it_was() -> None:
    """An ``IRChange`` that names no pool (the listener is a new object, as its contract
    allows) but brings a split cluster: the previous build's cluster and endpoint mappings,
    which the cache still holds, stay as they were, and the result equals a whole build."""
    a, b = pool("a", member("198.18.0.1")), pool("b", member("198.18.0.9"))
    builder = Builder()
    before = _ir(_udp(WeightedPool(pool="a")), a, b)
    first = builder.build(before)
    clusters, endpoints = dict(first[types.CLUSTER]), dict(first[types.ENDPOINT])
    after = _ir(_udp(WeightedPool(pool="a", weight=3), WeightedPool(pool="b", weight=1)), a, b)
    second = builder.build(after, IRChange(base=before))
    assert dict(first[types.CLUSTER]) == clusters
    assert dict(first[types.ENDPOINT]) == endpoints
    whole = Builder().build(after)
    assert {t: {n: r.digest for n, r in second[t].items()} for t in whole} == {
        t: {n: r.digest for n, r in whole[t].items()} for t in whole}
