"""``podway.kernel.health``: the pure judge of check results, and the checker's tasks."""

from __future__ import annotations

import asyncio
import random

import pytest

from podway.engines.member_health import Health, HostState, Message, decode, encode
from podway.ir import (
    IR,
    HealthCheck,
    HealthCheckKind,
    Member,
    MemberState,
    Pool,
    PoolProtocol,
    PoolSettings,
)
from podway.kernel import health
from podway.kernel.health import Checker, Judge, next_wait_s, tcp_connect

CHECK = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=20, timeout_ms=10,
                    healthy_threshold=2, unhealthy_threshold=3)


def test_a_new_member_is_pending_then_in_after_its_first_good_check() -> None:
    judge = Judge(CHECK)
    assert judge.health is Health.PENDING
    assert judge.result(True)
    assert judge.health is Health.HEALTHY


def test_thresholds_count_results_in_a_row() -> None:
    """Out after unhealthy_threshold failures in a row, back after healthy_threshold passes."""
    judge = Judge(CHECK)
    judge.result(True)
    assert not judge.result(False)
    assert not judge.result(False)
    assert not judge.result(True)  # the run of failures starts over
    assert [judge.result(False) for _ in range(3)] == [False, False, True]
    assert judge.state == HostState(Health.UNHEALTHY, "failed active health check")
    assert not judge.result(True)
    assert judge.result(True)
    assert judge.health is Health.HEALTHY


def test_a_new_member_failing_its_first_check_is_out_at_once() -> None:
    judge = Judge(CHECK)
    assert judge.result(False, "Connection refused")
    assert judge.state == HostState(Health.UNHEALTHY,
                                    "failed active health check (Connection refused)")


def ir_of(*members: Member, check: HealthCheck | None = CHECK,
          protocol: PoolProtocol = PoolProtocol.TCP) -> IR:
    pool = Pool(name="pool/shop/web/80/tcp", members=members,
                settings=PoolSettings(protocol=protocol, health_check=check))
    return IR(pools={pool.name: pool})


UP = Member(address="198.18.1.2", port=80)
DOWN = Member(address="198.18.2.2", port=80)
GONE = Member(address="198.18.3.2", port=80, state=MemberState.DRAINING)


async def test_checker_follows_the_ir_and_reports_in_the_controllers_format() -> None:
    """Each ready member is probed on the pool's schedule; a failing one is unusable; the
    view uses member_health's keys and states (the Envoy engine's wire format)."""
    changes = asyncio.Event()
    probed: list[str] = []

    async def probe(address: str, port: int, timeout_s: float) -> str:
        probed.append(address)
        return "" if address == UP.address else "Connection refused"

    checker = Checker(changes.set, probe=probe, rng=random.Random(1))
    ir = ir_of(UP, DOWN, GONE)
    checker.follow(ir)
    assert checker.view(ir)[("pool/shop/web/80/tcp", "198.18.1.2:80")].health is Health.PENDING
    try:
        async with asyncio.timeout(2):
            while not (checker.usable("pool/shop/web/80/tcp", UP) and checker.view(ir)[
                    ("pool/shop/web/80/tcp", "198.18.2.2:80")].health is Health.UNHEALTHY):
                await changes.wait()
                changes.clear()
        assert not checker.usable("pool/shop/web/80/tcp", DOWN)
        assert GONE.address not in probed  # draining: not checked, not reported
        view = checker.view(ir)
        assert set(view) == {("pool/shop/web/80/tcp", "198.18.1.2:80"),
                             ("pool/shop/web/80/tcp", "198.18.2.2:80")}
        wire = decode(encode(Message(node="edge", full=True, hosts=view)))
        assert wire.hosts == view
        checker.follow(ir_of(UP))  # DOWN removed: its task stops
        count = probed.count(DOWN.address)
        await asyncio.sleep(0.1)
        assert probed.count(DOWN.address) == count
    finally:
        await checker.close()


async def test_pools_without_checks_and_udp_pools_are_healthy_unprobed() -> None:
    async def probe(address: str, port: int, timeout_s: float) -> str:
        raise AssertionError("no probe expected")

    checker = Checker(lambda: None, probe=probe)
    for ir in (ir_of(UP, check=None), ir_of(UP, protocol=PoolProtocol.UDP)):
        checker.follow(ir)
        await asyncio.sleep(0.05)
        assert checker.usable("pool/shop/web/80/tcp", UP)
        assert checker.view(ir)[("pool/shop/web/80/tcp", "198.18.1.2:80")].health \
            is Health.HEALTHY
    await checker.close()


async def test_tcp_connect_says_why_it_failed() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    assert await tcp_connect("127.0.0.1", port, 1.0) == ""
    server.close()
    await server.wait_closed()
    assert "refused" in (await tcp_connect("127.0.0.1", port, 1.0)).lower()


async def test_a_not_ready_member_is_checked_and_reported_so_a_gated_pod_can_turn_ready(
        ) -> None:
    """A pod held back by the readiness gate is listed not ready until the engines found it
    healthy: the kernel engine checks and reports it (it still takes no flows: plan), and a
    member turning ready keeps its check history."""
    held = Member(address="198.18.4.2", port=80, state=MemberState.NOT_READY)
    changes = asyncio.Event()

    async def probe(address: str, port: int, timeout_s: float) -> str:
        return ""

    checker = Checker(changes.set, probe=probe, rng=random.Random(1))
    ir = ir_of(held)
    checker.follow(ir)
    key = ("pool/shop/web/80/tcp", "198.18.4.2:80")
    try:
        async with asyncio.timeout(2):
            while checker.view(ir).get(key) != HostState(Health.HEALTHY):
                await changes.wait()
                changes.clear()
        ready = Member(address="198.18.4.2", port=80)
        checker.follow(ir_of(ready))
        assert checker.usable("pool/shop/web/80/tcp", ready)  # no pending restart
    finally:
        await checker.close()


def test_a_failing_or_down_member_is_checked_again_after_the_short_interval() -> None:
    """As Envoy and HAProxy wait: ``quick_interval_ms`` after a failed check or while down,
    the pool's interval otherwise (a 5 s pool: 1 s and 5 s)."""
    check = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=5000)
    assert check.quick_interval_ms == 1000
    assert next_wait_s(check, failed=False, health=Health.HEALTHY) == 5.0
    assert next_wait_s(check, failed=True, health=Health.HEALTHY) == 1.0  # failing, still in
    assert next_wait_s(check, failed=True, health=Health.UNHEALTHY) == 1.0
    assert next_wait_s(check, failed=False, health=Health.UNHEALTHY) == 1.0  # recovering
    assert next_wait_s(check, failed=False, health=Health.PENDING) == 5.0
    short = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=300)
    assert next_wait_s(short, failed=True, health=Health.UNHEALTHY) == 0.3


async def test_the_checker_waits_the_short_interval_after_a_failed_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker's task sleeps what ``next_wait_s`` says (the first sleep is its spread)."""
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(health.asyncio, "sleep", sleep)
    results = iter(["Connection refused", "", ""])

    async def probe(address: str, port: int, timeout_s: float) -> str:
        return next(results, "")

    checker = Checker(lambda: None, probe=probe, rng=random.Random(1))
    checker.follow(ir_of(UP, check=HealthCheck(kind=HealthCheckKind.TCP, interval_ms=5000,
                                                healthy_threshold=2)))
    try:
        while len(waits) < 4:
            await real_sleep(0)
    finally:
        await checker.close()
    # after: the failure (1 s), the first good check while still down (1 s), the second (up
    # again: 5 s); each lengthened by up to 10 % jitter
    assert all(low <= wait <= low * 1.1
               for low, wait in zip((1.0, 1.0, 5.0), waits[1:4], strict=True)), waits
