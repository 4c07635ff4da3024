"""IR features the Ingress translator does not emit yet, served straight from IR by real Envoy:
status shares (500), redirects, header filters, prefix rewrites, suffix wildcards, TLS
passthrough."""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from types import MappingProxyType

import pytest
import trustme

from podway.envoy.config import Builder
from podway.envoy.engine import admin
from podway.envoy.xds.cache import Cache
from podway.ir import (
    IR,
    DirectResponse,
    Forward,
    HeaderModifier,
    L4Route,
    Listener,
    Member,
    ObjectRef,
    PathKind,
    PathMatch,
    Pool,
    PoolProtocol,
    PoolSettings,
    Redirect,
    Route,
    RouteMatch,
    URLRewrite,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve

from .harness import eventually, free_port, get, private_engine

pytestmark = pytest.mark.e2e
REF = ObjectRef("HTTPRoute", "default", "r")


def _route(name: str, path: str, action: Forward | Redirect | DirectResponse,
           filters: tuple[HeaderModifier | URLRewrite, ...] = ()) -> Route:
    return Route(name=name, match=RouteMatch(path=PathMatch(kind=PathKind.PREFIX, value=path)),
                 action=action, filters=filters, origin=REF)


@contextlib.asynccontextmanager
async def serving(ir: IR) -> AsyncIterator[None]:
    """Serve ``ir`` with a real Envoy until the block ends."""
    cache = Cache()
    cache.set(Builder().build(ir))
    async with private_engine(cache, node_id="ir") as engine:
        await engine.wait_ready(limit_s=20)
        address = await engine.wait_started()

        async def bound() -> bool:  # listeners bind right after LIVE
            found = await admin.stats(address, r"listener_manager\.total_listeners_active$")
            return found.get("listener_manager.total_listeners_active", 0) >= len(ir.listeners)

        await eventually(bound)
        yield


@contextlib.asynccontextmanager
async def echo(name: str, **kwargs: object) -> AsyncIterator[int]:
    port = free_port()
    started = asyncio.Event()
    task = asyncio.create_task(serve(EchoOptions(port=port, identity=Identity(name=name),
                                                 **kwargs), started=started))  # type: ignore[arg-type]
    await started.wait()
    try:
        yield port
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _pool(name: str, port: int, protocol: PoolProtocol = PoolProtocol.HTTP1) -> Pool:
    return Pool(name=name, settings=PoolSettings(protocol=protocol),
                members=(Member(address="127.0.0.1", port=port),))


async def test_status_shares_split_traffic_in_their_weights() -> None:
    """Shares 1:1:2 of pool, 500 and 503 answer about 25 % / 25 % / 50 % (cumulative fractions:
    Envoy tests every route against one random value per request)."""
    async with echo("web") as port:
        shares = (WeightedPool(pool="p", weight=1), WeightedPool(pool=None, weight=1, status=500),
                  WeightedPool(pool=None, weight=2, status=503))
        http = free_port()
        listener = Listener(name="l", address="127.0.0.1", port=http, protocol=Protocol.HTTP,
                            virtual_hosts=(VirtualHost(name="v", hostname="*", routes=(
                                _route("split", "/", Forward(backends=shares)),)),))
        async with serving(IR(listeners=(listener,), pools=MappingProxyType(
                {"p": _pool("p", port)}))):
            counts = Counter([(await get(http, "a.test", "/"))[0] for _ in range(1200)])
    # Within 6 standard deviations of a binomial count (a CI run saw 4.2 with a fixed ±5 %);
    # 1:1:1 instead of 1:1:2 would still be 11 deviations off for the 503 share.
    for status, expected in ((200, 0.25), (500, 0.25), (503, 0.50)):
        spread = 6 * math.sqrt(1200 * expected * (1 - expected))
        assert abs(counts[status] - 1200 * expected) < spread, counts


async def test_redirect_headers_rewrite_and_suffix_wildcard() -> None:
    """Redirects answer 301 + Location; header filters and prefix rewrites reach the backend;
    a Gateway-style wildcard covers any number of labels."""
    async with echo("web") as port:
        http = free_port()
        routes = (
            _route("redirect", "/old", Redirect(scheme="https", hostname="new.test",
                                                status_code=301)),
            _route("rewrite", "/api", Forward(backends=(WeightedPool(pool="p"),)),
                   (URLRewrite(prefix="/"),
                    HeaderModifier(set=(("x-set", "1"),), remove=("x-drop",)),
                    HeaderModifier(response=True, add=(("x-served-by", "podway"),)))),
            _route("gone", "/gone", DirectResponse(status=410, body="gone\n")),
            _route("all", "/", Forward(backends=(WeightedPool(pool="p"),))),
        )
        listener = Listener(name="l", address="127.0.0.1", port=http, protocol=Protocol.HTTP,
                            virtual_hosts=(VirtualHost(name="v", hostname="*.suffix.test",
                                                       wildcard=WildcardMode.SUFFIX,
                                                       routes=routes),))
        async with serving(IR(listeners=(listener,), pools=MappingProxyType(
                {"p": _pool("p", port)}))):
            reader, writer = await asyncio.open_connection("127.0.0.1", http)
            writer.write(b"GET /old/x HTTP/1.1\r\nHost: a.b.suffix.test\r\n\r\n")
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            writer.close()
            assert head.startswith("HTTP/1.1 301")
            assert "location: https://new.test/old/x" in head.lower()
            status, body = await get(http, "deep.a.b.suffix.test", "/api/v1")
            assert (status, body.get("path")) == (200, "/v1")
            headers = body.get("headers")
            assert isinstance(headers, dict)
            assert headers.get("x-set") == "1"
            status, _ = await get(http, "a.suffix.test", "/gone")
            assert status == 410
            status, _ = await get(http, "suffix.test", "/")
            assert status == 404  # *.suffix.test does not cover suffix.test itself


async def test_tls_passthrough_routes_by_sni_without_terminating() -> None:
    """A TLS listener forwards bytes by SNI: the client sees the backend's own certificate."""
    ca = trustme.CA()
    backends: dict[str, int] = {}
    servers = []
    for host in ("a.pass.test", "b.pass.test"):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(host).configure_cert(context)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         host: str = host) -> None:
            await reader.readline()
            writer.write(f"{host}\n".encode())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        servers.append(server)
        backends[host] = server.sockets[0].getsockname()[1]
    tls_port = free_port()
    pools = {h: _pool(h, p, PoolProtocol.TCP) for h, p in backends.items()}
    listener = Listener(name="pass", address="127.0.0.1", port=tls_port, protocol=Protocol.TLS,
                        l4_routes=tuple(L4Route(name=h, hostnames=(h,), origin=REF,
                                                backends=(WeightedPool(pool=h),))
                                        for h in backends))
    try:
        async with serving(IR(listeners=(listener,), pools=MappingProxyType(pools))):
            client = ssl.create_default_context()
            ca.configure_trust(client)
            for host in backends:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", tls_port, ssl=client, server_hostname=host)
                writer.write(b"hi\n")
                assert await asyncio.wait_for(reader.readline(), 5) == f"{host}\n".encode()
                writer.close()
    finally:
        for server in servers:
            server.close()
