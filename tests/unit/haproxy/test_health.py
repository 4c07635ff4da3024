"""HAProxy's ``show stat`` → the engine-neutral member health view."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from podway.engines.member_health import Health, HostState
from podway.haproxy.backends import weighed_zero
from podway.haproxy.health import classify, parse_stat, unproven, view
from podway.haproxy.render import RenderOptions, render
from podway.haproxy.slots import proving
from podway.ir import IR, HealthCheck, HealthCheckKind, Member, MemberState, Pool

STAT = """# pxname,svname,status,weight,check_status,addr
be:pool:default:web:80,s1,UP,1,L7OK,10.0.0.1:80
be:pool:default:web:80,s2,DOWN,1,L4TOUT,10.0.0.2:80
be:pool:default:web:80,s3,UP,1,INI,10.0.0.3:80
be:pool:default:web:80,s4,MAINT,1,,0.0.0.0:0
be:pool:default:web:80,BACKEND,UP,2,,
"""


def test_statuses_map_to_the_envoy_engines_words() -> None:
    """Up is healthy, down unhealthy (with why), never checked pending, maintenance absent."""
    assert classify("UP 2/3", "L7STS") == HostState(Health.HEALTHY)
    assert classify("DOWN", "L7STS") == HostState(Health.UNHEALTHY, "failed active health check")
    assert classify("DOWN 1/2", "L4TOUT") == HostState(
        Health.UNHEALTHY, "failed active health check (timeout)")
    assert classify("UP", "INI") == HostState(Health.PENDING, "waiting for its first health check")
    assert classify("no check", "") == HostState(Health.HEALTHY)
    assert classify("MAINT", "") is None


def test_view_is_keyed_by_pool_and_member_through_the_slots() -> None:
    """Slots are mapped back to the members they hold; empty slots are not members."""
    members = tuple(Member(address=f"10.0.0.{i}", port=80) for i in (1, 2, 3))
    pool = Pool(name="pool/default/web/80", members=members)
    rendered = render(IR(pools=MappingProxyType({pool.name: pool})),
                      RenderOptions(folder="/s", runtime_socket="/s/runtime.sock"))
    got = {k: s.health for k, s in view(rendered, parse_stat(STAT)).items()}
    assert got == {("pool/default/web/80", "10.0.0.1:80"): Health.HEALTHY,
                   ("pool/default/web/80", "10.0.0.2:80"): Health.UNHEALTHY,
                   ("pool/default/web/80", "10.0.0.3:80"): Health.PENDING}


def test_fallback_members_in_backup_slots_are_reported_too() -> None:
    """A draining member that still serves sits in backup slot b1 and is in the view."""
    members = (Member(address="10.0.0.1", port=80),
               Member(address="10.0.0.2", port=80, state=MemberState.DRAINING, serving=True))
    pool = Pool(name="pool/default/web/80", members=members)
    rendered = render(IR(pools=MappingProxyType({pool.name: pool})),
                      RenderOptions(folder="/s", runtime_socket="/s/runtime.sock"))
    stat = STAT + "be:pool:default:web:80,b1,DOWN,1,L4CON,10.0.0.2:80\n"
    got = {k: s.health for k, s in view(rendered, parse_stat(stat)).items()}
    assert got == {("pool/default/web/80", "10.0.0.1:80"): Health.HEALTHY,
                   ("pool/default/web/80", "10.0.0.2:80"): Health.UNHEALTHY}


def test_a_view_of_some_pools_holds_their_members_alone() -> None:
    """``only`` (a hold's question): the members of those pools, none of the others, and a
    backup slot of one of them too; a pool HAProxy has not been given is left out."""
    web = Pool(name="pool/default/web/80", members=(
        Member(address="10.0.0.1", port=80),
        Member(address="10.0.0.2", port=80, state=MemberState.DRAINING, serving=True)))
    api = Pool(name="pool/default/api/80", members=(Member(address="10.0.0.9", port=80),))
    rendered = render(IR(pools=MappingProxyType({web.name: web, api.name: api})),
                      RenderOptions(folder="/s", runtime_socket="/s/runtime.sock"))
    stat = (STAT + "be:pool:default:web:80,b1,UP,1,L7OK,10.0.0.2:80\n"
            + "be:pool:default:api:80,s1,UP,1,L7OK,10.0.0.9:80\n")
    got = {k: s.health for k, s in view(rendered, parse_stat(stat),
                                        only=("pool/default/web/80", "pool/x/gone/80")).items()}
    assert got == {("pool/default/web/80", "10.0.0.1:80"): Health.HEALTHY,
                   ("pool/default/web/80", "10.0.0.2:80"): Health.HEALTHY}
    assert ("pool/default/api/80", "10.0.0.9:80") in view(rendered, parse_stat(stat))


def _checked(pool: Pool) -> Pool:
    return dataclasses.replace(pool, settings=dataclasses.replace(
        pool.settings, health_check=HealthCheck(kind=HealthCheckKind.TCP)))


def test_a_reload_weighs_nothing_the_running_haproxy_does_not_count_up() -> None:
    """``unproven``: in a pool that keeps a member up, every other checked member (new,
    pending, down) is written at weight 0 for a reload, then marked down and weighed
    (``slots.proving``); a pool with none up, or without checks, is left to HAProxy."""
    up, down = HostState(Health.HEALTHY), HostState(Health.UNHEALTHY, "failed")
    web = _checked(Pool(name="pool/default/web/80", members=tuple(
        Member(address=f"10.0.0.{i}", port=80, weight=2) for i in (1, 2, 3))))
    fresh = _checked(Pool(name="pool/default/new/80", members=(
        Member(address="10.0.0.9", port=80),)))
    plain = Pool(name="pool/default/plain/80", members=(Member(address="10.0.0.7", port=80),))
    rendered = render(IR(pools=MappingProxyType({p.name: p for p in (web, fresh, plain)})),
                      RenderOptions(folder="/s", runtime_socket="/s/runtime.sock"))
    seen = {("pool/default/web/80", "10.0.0.1:80"): up,
            ("pool/default/web/80", "10.0.0.2:80"): down}  # 10.0.0.3: new
    got = unproven(rendered, seen)
    assert got == {"be:pool:default:web:80": frozenset({"s2", "s3"})}
    assert unproven(rendered, {}) == {}  # nothing up anywhere: HAProxy's own start
    text = weighed_zero(rendered.config, got)
    changed = [(a, b) for a, b in zip(rendered.config.splitlines(), text.splitlines(),
                                      strict=True) if a != b]
    assert [before.split()[:3] for before, _ in changed] == [
        ["server", "s2", "10.0.0.2:80"], ["server", "s3", "10.0.0.3:80"]]
    assert all(after == before.replace(" weight 2 ", " weight 0 ", 1)
               for before, after in changed)
    assert weighed_zero(rendered.config, {}) == rendered.config
    backend = "be:pool:default:web:80"
    assert proving(backend, rendered.servers[backend], got[backend]) == [
        f"set server {backend}/s2 health down", f"set server {backend}/s2 weight 2",
        f"set server {backend}/s3 health down", f"set server {backend}/s3 weight 2"]

