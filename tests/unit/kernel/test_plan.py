"""``podway.kernel.plan``: which listeners the kernel serves and the weights it gives members."""

from __future__ import annotations

from podway.ir import (
    IR,
    HealthCheck,
    HealthCheckKind,
    L4Route,
    Listener,
    ListenerProtocol,
    Member,
    MemberState,
    ObjectRef,
    Pool,
    PoolProtocol,
    PoolSettings,
    UpstreamTLS,
    WeightedPool,
)
from podway.kernel.plan import MAX_SLOTS, Backend, Service, flatten, plan, through_local_ports

ORIGIN = ObjectRef(kind="Service", namespace="shop", name="web")
TCP = PoolSettings(protocol=PoolProtocol.TCP, health_check=HealthCheck(kind=HealthCheckKind.TCP))


def pool(name: str, *members: Member, settings: PoolSettings = TCP) -> Pool:
    return Pool(name=name, settings=settings, members=members)


def m(address: str, weight: int = 1, state: MemberState = MemberState.READY) -> Member:
    return Member(address=address, port=8080, weight=weight, state=state)


def ir_of(*pools: Pool, shares: tuple[tuple[str, int], ...] | None = None,
          protocol: ListenerProtocol = ListenerProtocol.TCP, address: str = "198.18.0.10",
          **route: object) -> IR:
    backends = tuple(WeightedPool(pool=n, weight=w)
                     for n, w in (shares or tuple((p.name, 1) for p in pools)))
    listener = Listener(name="service/shop/web/80/tcp", address=address, port=80,
                        protocol=protocol, l4_routes=(L4Route(
                            name="r", backends=backends, origin=ORIGIN, **route),))  # type: ignore[arg-type]
    return IR(listeners=(listener,), pools={p.name: p for p in pools})


def everyone(pool: str, member: Member) -> bool:
    return True


def test_weights_of_pools_and_members_multiply_exactly() -> None:
    """Pool shares 3:1, members 1:2 in the first pool → slots 1:2:1 (exact, reduced)."""
    a = pool("a", m("198.18.1.2"), m("198.18.2.2", weight=2))
    b = pool("b", m("198.18.5.2"))
    services, skipped = plan(ir_of(a, b, shares=(("a", 3), ("b", 1))), everyone)
    assert skipped == ()
    assert services[0].backends == (Backend("198.18.1.2", 8080, 1), Backend("198.18.2.2", 8080, 2),
                                    Backend("198.18.5.2", 8080, 1))


def test_draining_not_ready_and_unhealthy_members_get_no_new_flows() -> None:
    """Only ready members the checker accepts are listed; draining and not-ready never."""
    p = pool("a", m("198.18.1.2"), m("198.18.2.2"), m("198.18.3.2", state=MemberState.DRAINING),
             m("198.18.4.2", state=MemberState.NOT_READY))
    services, _ = plan(ir_of(p), lambda _, member: member.address != "198.18.2.2")
    assert [b.address for b in services[0].backends] == ["198.18.1.2"]


def test_no_healthy_member_means_every_ready_member_panic() -> None:
    """When no member passes its check, every ready member takes flows (as Envoy's panic)."""
    p = pool("a", m("198.18.1.2"), m("198.18.2.2"), m("198.18.3.2", state=MemberState.DRAINING))
    services, _ = plan(ir_of(p), lambda _, __: False)
    assert [b.address for b in services[0].backends] == ["198.18.1.2", "198.18.2.2"]


def test_a_pool_with_only_draining_members_is_not_dnated() -> None:
    p = pool("a", m("198.18.1.2", state=MemberState.DRAINING))
    services, _ = plan(ir_of(p), everyone)
    assert services[0].backends == ()


def test_what_needs_a_proxy_is_skipped_with_the_reason() -> None:
    """TLS to members, PROXY protocol, HTTP, IPv6 listeners: left out, never approximated."""
    tls = pool("a", m("198.18.1.2"), settings=PoolSettings(
        protocol=PoolProtocol.TCP, upstream_tls=UpstreamTLS(sni="x")))
    pp = pool("a", m("198.18.1.2"), settings=PoolSettings(protocol=PoolProtocol.TCP,
                                                           proxy_protocol=True))
    ok = pool("a", m("198.18.1.2"))
    cases = {"TLS to the members": ir_of(tls), "PROXY protocol": ir_of(pp),
             "protocol HTTP": ir_of(ok, protocol=ListenerProtocol.HTTP),
             "IPv6": ir_of(ok, address="2001:db8::1"),
             "TLS needs": ir_of(ok, hostnames=("a.example",))}
    for words, ir in cases.items():
        services, skipped = plan(ir, everyone)
        assert services == ()
        assert len(skipped) == 1
        assert words in skipped[0].reason, skipped


def test_ipv6_members_are_left_out_and_said() -> None:
    p = pool("a", m("198.18.1.2"), m("2001:db8::7"))
    services, skipped = plan(ir_of(p), everyone)
    assert [b.address for b in services[0].backends] == ["198.18.1.2"]
    assert skipped[0].served
    assert "2001:db8::7" in skipped[0].reason


def test_affinity_and_transparent_come_from_the_ir() -> None:
    services, _ = plan(ir_of(pool("a", m("198.18.1.2")), client_ip_affinity=True), everyone)
    assert services[0].affinity
    assert not services[0].transparent


def test_huge_weights_are_scaled_to_the_slot_limit() -> None:
    """Weights summing past MAX_SLOTS keep their proportions within one slot, none drops."""
    p = pool("a", m("198.18.1.2", weight=10_000), m("198.18.2.2", weight=1),
             m("198.18.3.2", weight=5_000))
    out = flatten([(1, p)], everyone)
    assert sum(b.weight for b in out) == MAX_SLOTS
    weights = {b.address: b.weight for b in out}
    assert weights["198.18.2.2"] == 1
    assert abs(weights["198.18.1.2"] - 2 * weights["198.18.3.2"]) <= 2


def test_udp_members_no_longer_chosen_are_stale_tcp_never() -> None:
    """A UDP member that left (or failed) is reported for its conntrack entries to go; TCP
    members are not (their established connections finish)."""
    from podway.kernel.plan import Service, StaleFlows, stale_udp

    def svc(protocol: str, *members: str) -> Service:
        return Service(name=f"s/{protocol}", address="198.18.0.10", port=53, protocol=protocol,
                       affinity=False, transparent=False, pools=("p",),
                       backends=tuple(Backend(m, 5353) for m in members))

    before = (svc("udp", "198.18.1.2", "198.18.2.2"), svc("tcp", "198.18.1.2", "198.18.2.2"))
    after = (svc("udp", "198.18.2.2"), svc("tcp", "198.18.2.2"))
    assert stale_udp(before, after) == (StaleFlows("198.18.0.10", 53, "198.18.1.2", 5353),)
    assert stale_udp(after, before) == ()


def test_members_on_this_hosts_own_nodeportlocal_ports_become_their_pods() -> None:
    """A flow is DNATed once: the engine DNATs straight to the pod behind a port of its own
    node (the agent's DNAT would never run); other members, weights and order are kept."""
    web = Service(name="web", address="198.18.0.10", port=80, protocol="tcp", affinity=False,
                  transparent=False, pools=("p",), backends=(
                      Backend("198.18.0.1", 61001, 2), Backend("198.18.9.9", 61001, 1)))
    local = {("tcp", "198.18.0.1", 61001): ("10.1.0.5", 8080),
             ("udp", "198.18.9.9", 61001): ("10.1.0.6", 8080)}  # another protocol: not this
    (out,) = through_local_ports((web,), local)
    assert out.backends == (Backend("10.1.0.5", 8080, 2), Backend("198.18.9.9", 61001, 1))
    assert out.pools == web.pools
    assert through_local_ports((web,), {}) == (web,)
