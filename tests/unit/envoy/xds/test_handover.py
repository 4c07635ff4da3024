"""Make before break: a wholesale member swap is served as an interim assignment (the departing
members at priority 1) for a bounded hold, then the final one; nothing is held otherwise."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest
from envoy.config.core.v3 import health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2

from podway.envoy import types
from podway.envoy.config import Resource, Resources
from podway.envoy.config.clusters import CHECK_JITTER_PERCENT, cluster
from podway.envoy.config.endpoints import load_assignment
from podway.envoy.xds import handover
from podway.envoy.xds.cache import Cache
from podway.ir import HealthCheck, HealthCheckKind, Member, MemberState, PoolSettings

FAST = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=100, timeout_ms=10)


def _members(*ports: int, state: MemberState = MemberState.READY) -> tuple[Member, ...]:
    return tuple(Member(address="127.0.0.1", port=p, state=state) for p in ports)


def _resources(members: tuple[Member, ...], *, check: HealthCheck | None = FAST) -> Resources:
    return {
        types.CLUSTER: MappingProxyType({"p": Resource.of(
            "p", cluster("p", PoolSettings(health_check=check)))}),
        types.ENDPOINT: MappingProxyType({"p": Resource.of("p", load_assignment("p", members))}),
    }


def _served(cache: Cache) -> dict[int, list[int]]:
    """priority → member ports of the served assignment of pool "p"."""
    message = cache.get(types.ENDPOINT).resources["p"].message
    assert isinstance(message, endpoint_pb2.ClusterLoadAssignment)
    out: dict[int, list[int]] = {}
    for group in message.endpoints:
        out.setdefault(group.priority, []).extend(
            e.endpoint.address.socket_address.port_value for e in group.lb_endpoints)
    return out


def test_departing_only_when_every_serving_member_goes() -> None:
    old = load_assignment("p", _members(1, 2))
    assert [e.endpoint.address.socket_address.port_value
            for e in handover.departing(old, load_assignment("p", _members(3)))] == [1, 2]
    assert handover.departing(old, load_assignment("p", _members(2, 3))) == []  # one stays
    assert handover.departing(old, load_assignment("p", ())) == []  # emptied: the truth
    gone_not_ready = load_assignment("p", _members(1, state=MemberState.NOT_READY)
                                     + _members(3))
    assert [e.endpoint.address.socket_address.port_value
            for e in handover.departing(old, gone_not_ready)] == [2]  # 1 is listed: not held


def test_hold_follows_the_check_timing_and_needs_a_check() -> None:
    """Two checks, each its timeout plus the retry interval at its longest (the jitter added)."""
    assert handover.hold_s(cluster("p", PoolSettings(health_check=None))) is None
    retry_s = 0.1 * (100 + CHECK_JITTER_PERCENT) / 100
    assert handover.hold_s(cluster("p", PoolSettings(health_check=FAST))) == pytest.approx(
        2 * (0.01 + retry_s))
    slow = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=3_600_000, timeout_ms=600_000)
    assert handover.hold_s(cluster("p", PoolSettings(health_check=slow))) == handover.HOLD_CAP_S


async def test_a_wholesale_swap_is_served_make_before_break_then_settles() -> None:
    cache = Cache()
    cache.set(_resources(_members(1)))
    cache.set(_resources(_members(2)))
    assert _served(cache) == {0: [2], 1: [1]}
    assert cache.holding == {"p"}
    changed = cache.changed()
    cache.set(_resources(_members(2)))  # the same final again: still held
    assert _served(cache) == {0: [2], 1: [1]}
    await asyncio.wait_for(changed.wait(), 10)  # the hold ends by itself
    assert _served(cache) == {0: [2]}
    assert cache.holding == frozenset()


async def test_a_member_added_inside_the_hold_keeps_the_departing_members_held() -> None:
    """Inside the hold the interim's new members may be unchecked: one more new member (a
    third pod turning ready) keeps the departing, checked members held beside them, to the
    same end (the bug: 2 "stayed serving", the hold ended and every member left was
    unchecked: Envoy reset new connections until a first check passed)."""
    cache = Cache()
    cache.set(_resources(_members(8080, 8081)))
    cache.set(_resources(_members(9080, 9081)))
    assert _served(cache) == {0: [9080, 9081], 1: [8080, 8081]}
    timer = cache._holds["p"].timer
    cache.set(_resources(_members(9080, 9081)
                         + _members(9082, state=MemberState.NOT_READY)))
    assert _served(cache) == {0: [9080, 9081, 9082], 1: [8080, 8081]}
    cache.set(_resources(_members(9080, 9081, 9082)))  # turned ready
    assert _served(cache) == {0: [9080, 9081, 9082], 1: [8080, 8081]}
    assert cache.holding == {"p"}
    assert cache._holds["p"].timer is timer  # the same end: never extended
    cache.set(_resources(_members(8080, 9080, 9081, 9082)))  # a checked member serves again
    assert _served(cache) == {0: [8080, 9080, 9081, 9082]}
    assert cache.holding == frozenset()


async def test_a_new_member_turning_not_ready_inside_the_hold_keeps_the_hold() -> None:
    """A readiness flip of one of the interim's new members (its pod still there, not
    terminating) carries the hold on: ending it would leave 9080, unchecked, as the only
    serving member (review finding: Envoy reset new connections until its first check)."""
    cache = Cache()
    cache.set(_resources(_members(8080, 8081)))
    cache.set(_resources(_members(9080, 9081)))
    timer = cache._holds["p"].timer
    cache.set(_resources(_members(9080) + _members(9081, state=MemberState.NOT_READY)))
    assert _served(cache) == {0: [9080, 9081], 1: [8080, 8081]}
    assert cache._holds["p"].timer is timer  # the same end: never extended
    draining = Member(address="127.0.0.1", port=9081, state=MemberState.DRAINING,
                      serving=True)
    cache.set(_resources((*_members(9080), draining)))  # terminating: no longer carried
    assert all(8080 not in ports for ports in _served(cache).values())


async def test_a_change_inside_the_hold_that_is_no_mere_addition_ends_it() -> None:
    """A member of the final leaves or starts draining (its pod may be the one behind a held
    member, gone or terminating): the hold's departing members are not carried on; the change
    is compared with the interim as served."""
    draining = Member(address="127.0.0.1", port=3, state=MemberState.DRAINING, serving=True)
    for newer in (_members(2, 4), (*_members(2), draining), _members(3)):
        cache = Cache()
        cache.set(_resources(_members(1)))
        cache.set(_resources(_members(2, 3)))
        assert _served(cache) == {0: [2, 3], 1: [1]}
        cache.set(_resources(newer))
        served = _served(cache)
        assert all(1 not in ports for ports in served.values()), (newer, served)
    cache.set(_resources(_members(4)))  # swaps 3 out: held, the older interim is gone
    assert _served(cache) == {0: [4], 1: [3]}
    cache.set({types.CLUSTER: MappingProxyType({}), types.ENDPOINT: MappingProxyType({})})
    assert cache.holding == frozenset()


async def test_a_carried_hold_still_ends_on_time() -> None:
    cache = Cache()
    cache.set(_resources(_members(1)))
    cache.set(_resources(_members(2)))
    changed = cache.changed()
    cache.set(_resources(_members(2, 3)))
    assert _served(cache) == {0: [2, 3], 1: [1]}
    await asyncio.wait_for(changed.wait(), 1)
    changed = cache.changed()
    await asyncio.wait_for(changed.wait(), 10)  # the hold ends by itself
    assert _served(cache) == {0: [2, 3]}
    assert cache.holding == frozenset()


def test_the_held_members_get_traffic_only_while_priority_0_has_no_healthy_one() -> None:
    """The interim's overprovisioning factor is 100 x its priority-0 members: with Envoy's
    default (1.4) priority 1 took 30 % of the traffic when 3 of 6 were healthy (a rollout's
    step: new pods not ready yet), though the held members may belong to pods on their way
    out."""
    new = load_assignment("p", _members(1, 2, 3) + _members(4, 5, 6,
                                                             state=MemberState.NOT_READY))
    held = handover.departing(load_assignment("p", _members(7)), new)
    out = handover.interim(new, held)
    assert {(g.priority, len(g.lb_endpoints)) for g in out.endpoints} == {(0, 6), (1, 1)}
    assert out.policy.overprovisioning_factor.value == 600  # one healthy of 6 takes it all
    assert out.policy.overprovisioning_factor.value * 1 // 6 >= 100


async def test_nothing_is_held_without_active_checks() -> None:
    cache = Cache()
    cache.set(_resources(_members(1), check=None))
    cache.set(_resources(_members(2), check=None))
    assert _served(cache) == {0: [2]}
    assert cache.holding == frozenset()


def test_a_serving_draining_member_is_the_fallback_at_priority_1() -> None:
    """A rollout's old pods (draining, still serving) go to priority 1 as HEALTHY: Envoy sends
    them new requests only while priority 0 has no healthy member in its own view (a new ready
    pod not yet checked once); one healthy member at priority 0 takes all of it (the
    overprovisioning factor). A draining member that no longer serves stays at priority 0."""
    members = (_members(1) + _members(2, state=MemberState.NOT_READY)
               + (Member(address="127.0.0.1", port=3, state=MemberState.DRAINING, serving=True),
                  Member(address="127.0.0.1", port=4, state=MemberState.DRAINING)))
    assignment = load_assignment("p", members)
    by_priority = {(g.priority, e.endpoint.address.socket_address.port_value): e.health_status
                   for g in assignment.endpoints for e in g.lb_endpoints}
    assert by_priority == {(0, 1): health_check_pb2.HEALTHY, (0, 2): health_check_pb2.UNHEALTHY,
                           (0, 4): health_check_pb2.DRAINING, (1, 3): health_check_pb2.HEALTHY}
    # Envoy: share of priority 0 = min(100, factor x healthy / members): 1 healthy of 3 → 100.
    assert assignment.policy.overprovisioning_factor.value * 1 // 3 >= 100
    plain = load_assignment("p", _members(1, 2))
    assert not plain.HasField("policy")  # nothing changes for a pool without fallback


def test_checks_of_failing_members_stay_short_when_envoy_sees_no_traffic() -> None:
    """With the default bounded stats Envoy believes a pool never had traffic and checks with
    the "no traffic" intervals: a failing (or brand-new) member must still be re-checked after
    the short interval, not after ``interval``."""
    check = cluster("p", PoolSettings(health_check=HealthCheck(kind=HealthCheckKind.TCP))
                    ).health_checks[0]
    assert check.no_traffic_interval == check.unhealthy_interval
    assert check.unhealthy_interval.ToMilliseconds() == 1000
    assert check.no_traffic_healthy_interval == check.interval
    assert check.interval.ToMilliseconds() == 5000


def test_a_rollout_needs_no_hold_when_the_old_members_are_the_fallback() -> None:
    """Terminating pods beside a new ready one are listed (fallback): nothing is held back,
    and their removal later is no wholesale swap either."""
    old = _members(1, 2)
    fallback = tuple(Member(address="127.0.0.1", port=p, state=MemberState.DRAINING,
                            serving=True) for p in (1, 2))
    rollout = load_assignment("p", _members(3) + fallback)
    assert handover.departing(load_assignment("p", old), rollout) == []
    assert handover.departing(rollout, load_assignment("p", _members(3))) == []
