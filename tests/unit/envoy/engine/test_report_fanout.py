"""The engine's reporter talks to every controller replica at once, over real gRPC: a replica
that is down or hangs never delays the live one, a replica that comes up gets the full view,
a DNS name fans out to each address it resolves to (checked by TLS against the name), and a
replica gone from the answer loses its stream. Loopback only; servers, sockets and reporter
tasks are stopped in teardown, also on failure."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from podway.base.backoff import Backoff
from podway.engines.member_health import Health, HostState, MemberHealthReports, Message
from podway.envoy.engine.health_report import Reporter, ReportOptions
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import ServerTLS, XdsServer
from tests.waiting import eventually

A = ("pool/default/web/80", "10.0.0.7:8080")
OK = HostState(Health.HEALTHY)
FAST = Backoff(base=0.05, cap=0.2, jitter=0)
NAME = "xds.podway.test"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))  # unix socket paths are short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Admin:
    """A fake Envoy admin: ``/clusters`` in Envoy's text form for ``flags`` (changeable)."""

    def __init__(self) -> None:
        self.flags: dict[tuple[str, str], str] = {A: "healthy"}

    async def clusters(self, _: web.Request) -> web.Response:
        return web.Response(text="".join(f"{c}::{h}::health_flags::{f}\n"
                                         for (c, h), f in self.flags.items()))


@pytest.fixture
async def admin(short_dir: Path) -> AsyncIterator[tuple[Admin, str]]:
    fake = Admin()
    app = web.Application()
    app.router.add_get("/clusters", fake.clusters)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(short_dir / "admin.sock")).start()
    try:
        yield fake, f"unix:{short_dir / 'admin.sock'}"
    finally:
        await runner.cleanup()


class Replicas:
    """Controller stand-ins: an xDS server each, serving member health into its own reports."""

    def __init__(self) -> None:
        self.servers: list[XdsServer] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self, address: str, tls: ServerTLS | None = None
                    ) -> tuple[XdsServer, MemberHealthReports]:
        reports = MemberHealthReports()
        server = XdsServer(Cache(), address, tls=tls)
        server.handlers.append(reports.handler(server))
        await server.start()
        self.servers.append(server)
        return server, reports

    def report(self, reporter: Reporter) -> None:
        self.tasks.append(asyncio.create_task(reporter.run(), name="reporter"))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for server in self.servers:
            await server.stop(grace=0)


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    made = Replicas()
    try:
        yield made
    finally:
        await made.close()




def health(reports: MemberHealthReports, node: str = "edge-1") -> dict[object, Health] | None:
    view = reports.view(node)
    return None if view is None else {k: v.health for k, v in view.items()}


async def test_a_replica_that_is_down_or_hangs_does_not_delay_the_live_one(
        admin: tuple[Admin, str], replicas: Replicas, short_dir: Path) -> None:
    """--xds names a dead socket, a socket that accepts and never answers, and a live replica:
    the live one gets the full view and each change while the others fail; the dead one,
    once it comes up, is retried and gets the full view too."""
    fake, admin_address = admin
    dead = short_dir / "dead.sock"
    hung = socket.socket(socket.AF_UNIX)  # connections queue in its backlog, never served
    hung.bind(str(short_dir / "hung.sock"))
    hung.listen(8)
    try:
        _, live = await replicas.start(f"unix:{short_dir / 'live.sock'}")
        reporter = Reporter(ReportOptions(
            node_id="edge-1", xds=(f"unix:{dead}", f"unix:{short_dir / 'hung.sock'}",
                                   f"unix:{short_dir / 'live.sock'}"),
            interval_s=0.02, backoff=FAST), lambda: admin_address)
        replicas.report(reporter)
        await eventually(lambda: health(live) == {A: Health.HEALTHY})
        fake.flags = {A: "/failed_active_hc"}
        await eventually(lambda: health(live) == {A: Health.UNHEALTHY})
        assert len(reporter.streams) == 3
        _, revived = await replicas.start(f"unix:{dead}")
        await eventually(lambda: health(revived) == {A: Health.UNHEALTHY})
        fake.flags = {A: "healthy"}
        await eventually(lambda: health(live) == health(revived) == {A: Health.HEALTHY})
    finally:
        hung.close()


def _tls(ca: trustme.CA, name: str) -> ServerTLS:
    cert = ca.issue_cert(name)
    return ServerTLS(cert_pem=cert.cert_chain_pems[0].bytes(),
                     key_pem=cert.private_key_pem.bytes(), client_ca_pem=ca.cert_pem.bytes())


def _client(ca: trustme.CA, address: str, *, sni: str = "") -> ReportOptions:
    engine = ca.issue_cert("edge-1")
    return ReportOptions(node_id="edge-1", xds=address, ca_pem=ca.cert_pem.bytes().decode(),
                         client_cert_pem=engine.cert_chain_pems[0].bytes().decode(),
                         client_key_pem=engine.private_key_pem.bytes().decode(),
                         sni=sni, interval_s=0.02, resolve_s=0.05, backoff=FAST)


async def test_a_dns_name_reaches_every_replica_it_resolves_to_and_follows_the_answer(
        admin: tuple[Admin, str], replicas: Replicas) -> None:
    """One name resolving to two replicas (127.0.0.1 and 127.0.0.2, mutual TLS, certificates
    for the name only): both hear the engine; a replica dropped from the answer loses the
    stream (the engine stops counting there); back in the answer, it gets the full view."""
    _, admin_address = admin
    ca = trustme.CA()
    first, one = await replicas.start("127.0.0.1:0", _tls(ca, NAME))
    _, two = await replicas.start(f"127.0.0.2:{first.port}", _tls(ca, NAME))
    answer = ["127.0.0.1", "127.0.0.2"]

    async def resolver(host: str, port: int) -> tuple[str, ...]:
        assert (host, port) == (NAME, first.port)
        return tuple(answer)

    reporter = Reporter(_client(ca, f"{NAME}:{first.port}"), lambda: admin_address,
                        resolver=resolver)
    replicas.report(reporter)
    await eventually(lambda: health(one) == health(two) == {A: Health.HEALTHY})
    answer.remove("127.0.0.2")
    await eventually(lambda: two.view("edge-1") is None)
    assert health(one) == {A: Health.HEALTHY}
    answer.append("127.0.0.2")
    await eventually(lambda: health(two) == {A: Health.HEALTHY})


async def test_the_tls_name_checked_is_the_dns_name_or_sni_never_the_ip(
        admin: tuple[Admin, str], replicas: Replicas,
        caplog: pytest.LogCaptureFixture) -> None:
    """A replica whose certificate is for another name is not reported to (the handshake
    fails, one warning); with --xds-sni naming its certificate it is."""
    _, admin_address = admin
    ca = trustme.CA()
    server, reports = await replicas.start("127.0.0.1:0", _tls(ca, "other.podway.test"))

    async def resolver(host: str, port: int) -> tuple[str, ...]:
        return ("127.0.0.1",)

    with caplog.at_level(logging.WARNING):
        replicas.report(Reporter(_client(ca, f"{NAME}:{server.port}"), lambda: admin_address,
                                 resolver=resolver))
        await eventually(lambda: any("failed: UNAVAILABLE" in r.getMessage()
                                and "ipv4:127.0.0.1" in r.getMessage()
                                for r in caplog.records))
    assert reports.nodes == frozenset()
    replicas.report(Reporter(_client(ca, f"{NAME}:{server.port}", sni="other.podway.test"),
                             lambda: admin_address, resolver=resolver))
    await eventually(lambda: health(reports) == {A: Health.HEALTHY})


class Freezer:
    """A unix-socket relay to a replica whose open connections can be frozen: bytes stop
    flowing both ways but the connections stay open, as with a paused or cut-off replica.
    Connections made after ``freeze`` flow."""

    def __init__(self, upstream: Path) -> None:
        self.upstream = upstream
        self.open: list[list[bool]] = []  # per connection: [frozen]
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    def freeze(self) -> None:
        for flag in self.open:
            flag[0] = True

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.upstream))
        self.writers += [writer, up_writer]
        flag = [False]
        self.open.append(flag)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink, flag), name="freezer-pump")
            self.tasks.add(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                    frozen: list[bool]) -> None:
        while data := await source.read(65536):
            if frozen[0]:
                await asyncio.Event().wait()  # hold the connection, pass nothing
            sink.write(data)
            await sink.drain()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()


async def test_a_replica_that_stops_answering_is_found_by_keepalive_and_reopened(
        admin: tuple[Admin, str], replicas: Replicas, short_dir: Path) -> None:
    """The replica's connection goes silent without closing: keepalive pings go unanswered,
    the reporter gives the stream up and opens a new one, which starts with the full view
    (the replica hears a second stream's full report)."""
    _, admin_address = admin
    _, live = await replicas.start(f"unix:{short_dir / 'live.sock'}")
    fulls: list[int] = []
    apply = live.apply

    def counting(stream: object, message: Message) -> None:
        fulls.extend([1] if message.full else [])
        apply(stream, message)

    live.apply = counting  # type: ignore[method-assign]
    freezer = Freezer(short_dir / "live.sock")
    relay = await asyncio.start_unix_server(freezer.accept, str(short_dir / "relay.sock"))
    try:
        replicas.report(Reporter(ReportOptions(
            node_id="edge-1", xds=f"unix:{short_dir / 'relay.sock'}", interval_s=0.02,
            backoff=FAST, keepalive_s=0.3, keepalive_timeout_s=0.3), lambda: admin_address))
        await eventually(lambda: len(fulls) == 1)
        freezer.freeze()
        await eventually(lambda: len(fulls) == 2)
        assert len(freezer.open) == 2
    finally:
        relay.close()
        await freezer.close()
        await relay.wait_closed()
