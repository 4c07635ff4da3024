"""The configuration stream for HAProxy and kernel engines: wire form, who is served, what is
sent when, and the engine's side following it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import MappingProxyType

import grpc
import pytest

from podway.engines import config_feed
from podway.engines.config_feed import (
    ConfigFeed,
    FeedError,
    Request,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
    refusal,
)
from podway.engines.reporter import ReportOptions
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import XdsServer
from podway.ir import (
    IR,
    L4Route,
    Listener,
    ListenerProtocol,
    Member,
    ObjectRef,
    Pool,
    TLSCertificate,
)
from podway.ir import WeightedPool as Share
from tests.waiting import eventually

ORIGIN = ObjectRef("Service", "shop", "db")


def _ir(port: int = 80, members: int = 1) -> IR:
    pool = Pool(name="pool/shop/db/5432/tcp",
                members=tuple(Member(address=f"198.18.1.{i + 2}", port=5432)
                              for i in range(members)))
    listener = Listener(name="service/shop/db/5432/tcp", address="198.18.0.10", port=port,
                        protocol=ListenerProtocol.TCP,
                        l4_routes=(L4Route(name="r", backends=(Share(pool=pool.name),),
                                                origin=ORIGIN),))
    return IR(listeners=(listener,), pools=MappingProxyType({pool.name: pool}))


def test_answers_carry_the_whole_ir_with_its_secrets() -> None:
    """The engine renders TLS itself: certificates and keys travel (unlike in dumps)."""
    cert = TLSCertificate(name="secret/shop/tls", hostnames=(), cert_pem="CERT", key_pem="KEY")
    ir = _ir()
    tls = Listener(name="l/tls", address="198.18.0.10", port=443, protocol=ListenerProtocol.TLS,
                   l4_routes=(L4Route(name="t", backends=(Share(pool="pool/shop/db/5432/tcp"),),
                                      certificate=cert, origin=ORIGIN),))
    ir = IR(listeners=(*ir.listeners, tls), pools=ir.pools)
    generation, back = decode_answer(encode_answer(7, ir))
    assert generation == 7
    assert back == ir


@pytest.mark.parametrize(("data", "why"), [
    (b"{", "not JSON"),
    (b'{"v":2,"node":"n"}', "not a version 1"),
    (b'{"v":1,"node":"","engine":"haproxy"}', "needs a node name"),
    (b'{"v":1,"node":"n","engine":"envoy"}', "takes no IR here"),
    (b'{"v":1,"node":"' + b"n" * 300 + b'","engine":"kernel"}', "longer than"),
    (b" " * 5000, "longer than 4096 bytes"),
])
def test_bad_requests_are_one_line(data: bytes, why: str) -> None:
    with pytest.raises(FeedError, match=why):
        decode_request(data)


def test_a_group_configured_for_a_kind_takes_that_kind_only() -> None:
    assert refusal({}, "edge", "haproxy") is None
    assert refusal({"edge": "haproxy"}, "edge", "haproxy") is None
    assert refusal({"edge": "haproxy"}, "db", "kernel") is None
    assert "configured for haproxy engines" in str(refusal({"edge": "haproxy"}, "edge", "envoy"))


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def served(short_dir: Path) -> AsyncIterator[tuple[XdsServer, ConfigFeed]]:
    feed = ConfigFeed(kinds=lambda: {"db": "kernel"})
    server = XdsServer(Cache(), "127.0.0.1:0", unauthenticated=True)
    server.handlers.append(feed.handler(server))
    await server.start(local=short_dir / "xds.sock")
    try:
        yield server, feed
    finally:
        await server.stop(grace=0)


async def test_an_unauthenticated_engine_gets_nothing(
        served: tuple[XdsServer, ConfigFeed]) -> None:
    """Clear-text loopback TCP (--xds-unauthenticated) is refused: the IR holds keys."""
    server, feed = served
    feed.publish(1, lambda group: _ir())
    async with grpc.aio.insecure_channel(server.target) as chan:
        call = chan.unary_stream(config_feed.PATH)(encode_request(Request(node="e")))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in call:
                pass
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED


async def test_the_engine_follows_its_groups_part_and_is_counted_while_connected(
        served: tuple[XdsServer, ConfigFeed]) -> None:
    """Over the unix socket: the first IR at once, a new generation that leaves the group's
    part alone sends nothing, a change sends the new IR; the engine is listed (with its group)
    while its stream is open; a group configured for another kind is refused."""
    server, feed = served
    assert server.local_target is not None
    parts = {"db": _ir(members=1)}
    feed.publish(1, lambda group: parts.get(group, IR()))
    got: list[tuple[int, IR]] = []
    told: list[int] = []
    feed.on_engines.append(lambda: told.append(len(feed.engine_groups)))

    async def run() -> None:
        opts = ReportOptions(node_id="k-1", xds=server.local_target or "", engine_group="db")
        async for item in config_feed.follow(opts, "kernel"):
            got.append(item)

    task = asyncio.create_task(run())
    try:
        await eventually(lambda: len(got) == 1)
        assert got[0] == (1, parts["db"])
        assert dict(feed.engine_groups) == {"k-1": "db"}
        feed.publish(2, lambda group: parts.get(group, IR()))  # same part: nothing sent
        parts = {"db": _ir(members=2)}
        feed.publish(3, lambda group: parts.get(group, IR()))
        await eventually(lambda: len(got) == 2)
        assert got[1] == (3, parts["db"])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await eventually(lambda: dict(feed.engine_groups) == {})
    assert told[0] == 1
    assert told[-1] == 0
    async with grpc.aio.insecure_channel(server.local_target) as chan:
        call = chan.unary_stream(config_feed.PATH)(
            encode_request(Request(node="h-1", group="db", engine="haproxy")))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in call:
                pass
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_a_groups_ir_is_made_once_per_generation_for_all_its_engines(
        served: tuple[XdsServer, ConfigFeed]) -> None:
    """Two engines of one group: the group's part is cut (and encoded) once per generation."""
    server, feed = served
    assert server.local_target is not None
    calls: list[str] = []

    def part(group: str) -> IR:
        calls.append(group)
        return _ir()

    feed.publish(1, part)
    got: list[int] = []

    async def run(node: str) -> None:
        opts = ReportOptions(node_id=node, xds=server.local_target or "", engine_group="db")
        async for generation, _ in config_feed.follow(opts, "kernel"):
            got.append(generation)

    tasks = [asyncio.create_task(run(node)) for node in ("k-1", "k-2")]
    try:
        await eventually(lambda: got == [1, 1])
        assert calls == ["db"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
