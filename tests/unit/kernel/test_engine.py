"""``podway.kernel.engine``: one transaction per change, newest state wins, failures retried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from podway.base.errors import PodwayError
from podway.ir import (
    IR,
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

ORIGIN = ObjectRef(kind="Service", namespace="shop", name="web")


def ir_of(*addresses: str) -> IR:
    pool = Pool(name="p", settings=PoolSettings(protocol=PoolProtocol.TCP),
                members=tuple(Member(address=a, port=8080) for a in addresses))
    listener = Listener(name="service/shop/web/80/tcp", address="198.18.0.10", port=80,
                        protocol=ListenerProtocol.TCP, l4_routes=(L4Route(
                            name="r", backends=(WeightedPool(pool="p"),), origin=ORIGIN),))
    return IR(listeners=(listener,), pools={"p": pool})


async def feed(queue: asyncio.Queue[IR]) -> AsyncIterator[IR]:
    while True:
        yield await queue.get()


async def test_each_change_is_one_whole_table_transaction() -> None:
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
        assert len(written) == 2
        assert all(t.startswith("table ip podway_l4 {}\ndelete table ip podway_l4\n")
                   for t in written)
        assert "numgen inc mod 2" in written[1]
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


def test_counters_are_read_from_nft_json() -> None:
    from podway.programs.kernel import MemberCounter, parse_counters

    text = ('{"nftables": [{"metainfo": {}}, {"counter": {"name": "m_tcp_198_18_1_2_8080", '
            '"packets": 10, "bytes": 628}}, {"counter": {"name": "other", "packets": 1}}]}')
    assert parse_counters(text) == (MemberCounter("tcp", "198.18.1.2", 8080, 10, 628),)


@pytest.mark.parametrize("bad", ["", "[]"])
def test_counters_of_junk_fail_loudly(bad: str) -> None:
    from podway.programs.kernel import parse_counters

    with pytest.raises((ValueError, AttributeError)):
        parse_counters(bad)


def test_member_counters_become_prometheus_counters() -> None:
    from podway.programs.kernel import MemberCounter, exposition

    text = exposition((MemberCounter("tcp", "198.18.1.2", 8080, 10, 628),)).decode()
    assert 'podway_kernel_member_packets_total{protocol="tcp",member="198.18.1.2:8080"} 10' \
        in text
    assert 'podway_kernel_member_bytes_total{protocol="tcp",member="198.18.1.2:8080"} 628' in text
    assert "# TYPE podway_kernel_member_bytes_total counter" in text
    assert exposition(()) == b""


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
