"""Make before break: a wholesale member swap is served as an interim assignment (the departing
members at priority 1) for a bounded hold, then the final one; nothing is held otherwise."""

from __future__ import annotations

import asyncio
from types import MappingProxyType

import pytest
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


async def test_a_newer_assignment_ends_the_hold() -> None:
    cache = Cache()
    cache.set(_resources(_members(1)))
    cache.set(_resources(_members(2)))
    cache.set(_resources(_members(2, 3)))  # keeps a serving member: no hold any more
    assert _served(cache) == {0: [2, 3]}
    assert cache.holding == frozenset()
    cache.set(_resources(_members(4)))  # swaps 2 and 3 out: held, the older interim is gone
    assert _served(cache) == {0: [4], 1: [2, 3]}
    cache.set({types.CLUSTER: MappingProxyType({}), types.ENDPOINT: MappingProxyType({})})
    assert cache.holding == frozenset()


async def test_nothing_is_held_without_active_checks() -> None:
    cache = Cache()
    cache.set(_resources(_members(1), check=None))
    cache.set(_resources(_members(2), check=None))
    assert _served(cache) == {0: [2]}
    assert cache.holding == frozenset()
