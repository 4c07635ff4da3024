"""``podway.kernel.engine``: one transaction per change, newest state wins, failures retried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from podway.base.errors import PodwayError
from podway.ir import (
    IR,
    HealthCheck,
    HealthCheckKind,
    L4Route,
    Listener,
    ListenerProtocol,
    Member,
    ObjectRef,
    Pool,
    PoolProtocol,
    PoolSettings,
    WeightedPool,
)
from podway.kernel.engine import KernelEngine
from podway.kernel.health import Checker
from tests.waiting import eventually

ORIGIN = ObjectRef(kind="Service", namespace="shop", name="web")


def ir_of(*addresses: str, check: HealthCheck | None = None, affinity: bool = False) -> IR:
    pool = Pool(name="p", settings=PoolSettings(protocol=PoolProtocol.TCP, health_check=check),
                members=tuple(Member(address=a, port=8080) for a in addresses))
    listener = Listener(name="service/shop/web/80/tcp", address="198.18.0.10", port=80,
                        protocol=ListenerProtocol.TCP, l4_routes=(L4Route(
                            name="r", backends=(WeightedPool(pool="p"),), origin=ORIGIN,
                            client_ip_affinity=affinity),))
    return IR(listeners=(listener,), pools={"p": pool})


async def feed(queue: asyncio.Queue[IR]) -> AsyncIterator[IR]:
    while True:
        yield await queue.get()


async def test_the_first_write_makes_the_table_and_later_ones_change_it_in_place() -> None:
    """Only the first write replaces the table. A later change keeps the table and its hooks
    and takes three transactions: the new generation's chains, the switch of the maps to them,
    the old generation's deletion (ruleset.update says why: a packet crossing a commit met an
    empty new chain or a map emptied under it, ~1 SYN in 200-8,000 changes, refused by the
    host)."""
    written: list[str] = []

    async def write(text: str) -> None:
        written.append(text)

    engine = KernelEngine(write)
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    try:
        queue.put_nowait(ir_of("198.18.1.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 1)
        queue.put_nowait(ir_of("198.18.1.2"))  # equal: nothing to write
        queue.put_nowait(ir_of("198.18.1.2", "198.18.2.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: "198.18.2.2" in (e.installed or ""))
        assert len(written) == 4
        assert written[0].startswith("table ip podway_l4 {}\ndelete table ip podway_l4\n")
        prepare, switch, sweep = written[1:]
        assert "delete" not in prepare + switch  # generation 0 serves until the switch
        assert "hook" not in prepare + switch + sweep
        assert "dnat ip to numgen inc mod 2 map @b0_g1" in prepare
        assert "flush" not in prepare
        assert switch.startswith("flush map ip podway_l4 vips\n")
        assert "goto s0_g1" in switch
        assert sweep == "delete chain ip podway_l4 s0\n"  # one member: it had no map
        assert "chain s0_g1 {" in (engine.installed or "")
        queue.put_nowait(ir_of("198.18.2.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 3)
        assert "goto s0_g2" in written[5]
        assert written[6] == ("delete chain ip podway_l4 s0_g1\ndelete map ip podway_l4 b0_g1\n"
                              "delete counter ip podway_l4 c_tcp_198_18_1_2_8080\n")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failed_write_is_retried_with_the_newest_state() -> None:
    attempts: list[str] = []

    async def write(text: str) -> None:
        attempts.append(text)
        if len(attempts) == 1:
            raise PodwayError("nft: Operation not permitted")

    engine = KernelEngine(write, retry_s=0.01)
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    try:
        queue.put_nowait(ir_of("198.18.1.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 1)
        assert len(attempts) == 2
        assert engine.installed == attempts[1]
        assert attempts[1].startswith("table ip podway_l4 {}\ndelete table")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_after_a_failed_change_the_table_is_made_anew() -> None:
    """An in-place change assumes the table is as the engine left it; when one fails (say
    ``podway kernel cleanup`` removed the table) the retry makes the whole table again."""
    attempts: list[str] = []

    async def write(text: str) -> None:
        attempts.append(text)
        if len(attempts) == 2:
            raise PodwayError("nft: No such file or directory")

    engine = KernelEngine(write, retry_s=0.01)
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    try:
        queue.put_nowait(ir_of("198.18.1.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 1)
        queue.put_nowait(ir_of("198.18.1.2", "198.18.2.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 2)
        assert [a.startswith("table ip podway_l4 {}\ndelete table") for a in attempts] == [
            True, False, True]
        assert engine.installed == attempts[2]
        queue.put_nowait(ir_of("198.18.2.2"))  # and then in place again, from generation 0
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 3)
        assert "chain s0_g1 {" in attempts[3]
        assert "goto s0_g1" in attempts[4]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_health_change_rewrites_the_table() -> None:
    """The checker's news (a member turning unhealthy) reaches the kernel without a new IR."""
    healthy = {"198.18.1.2": True, "198.18.2.2": True}

    class Fake(Checker):
        def usable(self, pool: str, member: Member) -> bool:
            return healthy[member.address]

    async def write(text: str) -> None:
        pass

    engine = KernelEngine(write, checker=Fake)
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    try:
        queue.put_nowait(ir_of("198.18.1.2", "198.18.2.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 1)
        healthy["198.18.2.2"] = False
        engine.checker.on_change()
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes == 2)
        assert "198.18.2.2" not in (engine.installed or "")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_first_round_of_checks_never_narrows_the_table_to_one_member() -> None:
    """At the start every member is pending and served (panic); their first checks end one by
    one. The table must not shrink to the first member checked and grow back: with ClientIP
    affinity that moves clients twice (CI saw a table with one member and no jhash right after
    it had listed both). Later, a member joining a healthy pool still waits for its check."""
    check = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=50, timeout_ms=1000)
    first = asyncio.Event()  # 198.18.1.2's first check is held until the test lets it answer
    late = asyncio.Event()

    async def probe(address: str, port: int, timeout_s: float) -> str:
        if address == "198.18.1.2":
            await first.wait()
        if address == "198.18.3.2":
            await late.wait()
        return ""

    written: list[str] = []

    async def write(text: str) -> None:
        written.append(text)

    engine = KernelEngine(write, checker=lambda changed: Checker(changed, probe=probe))
    seen: list[dict[str, str]] = []  # member health each time the engine planned the table
    render = engine.render

    def counted() -> str:
        seen.append({key[1]: state.health.value for key, state in engine.view().items()})
        return render()

    engine.render = counted  # type: ignore[method-assign]
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    both = ("198.18.1.2", "198.18.2.2")

    async def planned(member: str, health: str) -> None:
        await eventually(lambda: any(s.get(f"{member}:8080") == health for s in seen), within=2)

    try:
        queue.put_nowait(ir_of(*both, check=check, affinity=True))
        await planned("198.18.2.2", "healthy")
        assert not any(s.get("198.18.1.2:8080") == "healthy" for s in seen)
        first.set()
        queue.put_nowait(ir_of(*both, "198.18.3.2", check=check, affinity=True))
        await planned("198.18.3.2", "pending")
        assert written, "nothing installed"
        assert all("jhash ip saddr mod 2" in t and all(a in t for a in both)
                   for t in written), written
        assert "198.18.3.2" not in (engine.installed or "")  # joined a healthy pool: waits
        late.set()
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: "198.18.3.2" in (e.installed or ""))
    finally:
        first.set()
        late.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_counters_are_read_from_nft_json() -> None:
    """Connection counters (``c_``: one packet a flow) and traffic counters (``m_``) of one
    member become one entry; a member with only connections has no packets or bytes."""
    from podway.programs.kernel import MemberCounter, parse_counters

    text = ('{"nftables": [{"metainfo": {}}, {"counter": {"name": "m_tcp_198_18_1_2_8080", '
            '"packets": 10, "bytes": 628}}, {"counter": {"name": "c_tcp_198_18_1_2_8080", '
            '"packets": 2, "bytes": 120}}, {"counter": {"name": "c_udp_198_18_2_2_53", '
            '"packets": 3, "bytes": 99}}, {"counter": {"name": "other", "packets": 1}}]}')
    assert parse_counters(text) == (
        MemberCounter("tcp", "198.18.1.2", 8080, connections=2, packets=10, bytes=628),
        MemberCounter("udp", "198.18.2.2", 53, connections=3))


@pytest.mark.parametrize("bad", ["", "[]"])
def test_counters_of_junk_fail_loudly(bad: str) -> None:
    from podway.programs.kernel import parse_counters

    with pytest.raises((ValueError, AttributeError)):
        parse_counters(bad)


def test_member_counters_become_prometheus_counters() -> None:
    from podway.programs.kernel import MemberCounter, exposition

    text = exposition((MemberCounter("tcp", "198.18.1.2", 8080, 2, 10, 628),)).decode()
    assert 'podway_kernel_member_connections_total{protocol="tcp",member="198.18.1.2:8080"} 2' \
        in text
    assert 'podway_kernel_member_packets_total{protocol="tcp",member="198.18.1.2:8080"} 10' \
        in text
    assert 'podway_kernel_member_bytes_total{protocol="tcp",member="198.18.1.2:8080"} 628' in text
    assert "# TYPE podway_kernel_member_bytes_total counter" in text
    assert exposition(()) == b""


def test_without_traffic_counters_the_packet_and_byte_series_are_absent() -> None:
    """The default engine counts connections only: no packets/bytes series at all (not 0)."""
    from podway.programs.kernel import MemberCounter, exposition

    text = exposition((MemberCounter("tcp", "198.18.1.2", 8080, 7),)).decode()
    assert 'podway_kernel_member_connections_total{protocol="tcp",member="198.18.1.2:8080"} 7' \
        in text
    assert "packets" not in text, text
    assert "bytes" not in text, text


def test_conntrack_fill_warns_once_per_episode(tmp_path: Path) -> None:
    """Above 90 % of nf_conntrack_max: one warning; below 80 %: one all-clear; nothing between."""
    from podway.programs.kernel import conntrack_fill, fill_news

    (tmp_path / "nf_conntrack_count").write_text("950\n")
    (tmp_path / "nf_conntrack_max").write_text("1000\n")
    said, warned = fill_news(conntrack_fill(tmp_path), False)
    assert said is not None
    assert "95% full" in said
    assert warned
    assert fill_news((850, 1000), warned) == (None, True)  # between: still warned, quiet
    said, warned = fill_news((790, 1000), warned)
    assert said == "the conntrack table is back to 79% full"
    assert not warned
    assert fill_news(conntrack_fill(tmp_path / "missing"), False) == (None, False)


@pytest.mark.parametrize("local", [False, True])
async def test_the_agent_is_looked_at_again_only_while_a_member_is_local(local: bool) -> None:
    """The periodic look at the host's NodePortLocal ports re-plans the whole IR: it runs only
    while the last plan had a member on one of them (a pod behind such a port can change with
    no new IR), not every few seconds on every engine."""
    calls = 0

    async def resolve(services: tuple[Any, ...]) -> tuple[Any, ...]:
        nonlocal calls
        calls += 1
        return services[1:] if local else services  # "local": the resolved plan differs

    async def write(text: str) -> None:
        pass

    engine = KernelEngine(write, resolve=resolve, refresh_s=0.01)
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    try:
        queue.put_nowait(ir_of("198.18.1.2"))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: e.writes >= 1)
        await asyncio.sleep(0.2)  # 20 refresh periods
        assert (calls > 5) if local else (calls == 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_members_replaced_by_unhealthy_ones_stay_until_the_holds_bound() -> None:
    """All members replaced by one whose checks fail: the old one stays in the table (the
    hold, ``podway.engines.handover``) until the hold's bound, then the pool is the new one
    (panic: no healthy member). A timer ends the hold: no IR or health change is needed."""
    check = HealthCheck(kind=HealthCheckKind.TCP, interval_ms=50, timeout_ms=100)

    async def probe(address: str, port: int, timeout_s: float) -> str:
        return "refused" if address == "198.18.2.2" else ""

    async def write(text: str) -> None:
        pass

    engine = KernelEngine(write, checker=lambda changed: Checker(changed, probe=probe))
    queue: asyncio.Queue[IR] = asyncio.Queue()
    task = asyncio.create_task(engine.run(feed(queue)))
    try:
        queue.put_nowait(ir_of("198.18.1.2", check=check))
        async with asyncio.timeout(2):
            await engine.wait_installed(lambda e: "198.18.1.2" in (e.installed or ""))
            await eventually(lambda: engine.view().get(("p", "198.18.1.2:8080")) is not None
                             and engine.view()[("p", "198.18.1.2:8080")].health.value
                             == "healthy", within=2)
        queue.put_nowait(ir_of("198.18.2.2", check=check))
        began = asyncio.get_running_loop().time()
        await eventually(lambda: engine.view().get(("p", "198.18.2.2:8080")) is not None
                         and engine.view()[("p", "198.18.2.2:8080")].health.value
                         == "unhealthy", within=2)  # checked, and the engine re-planned
        for _ in range(5):
            await asyncio.sleep(0)
        assert "198.18.1.2" in (engine.installed or "")  # held
        assert "198.18.2.2" not in (engine.installed or "")
        async with asyncio.timeout(3):
            await engine.wait_installed(lambda e: "198.18.1.2" not in (e.installed or ""))
        assert "198.18.2.2" in (engine.installed or "")
        assert asyncio.get_running_loop().time() - began >= 0.2  # not before the bound (0.3 s)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
