"""Run echo listeners until cancelled: HTTP, or TCP and/or UDP, on one address and port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from podway.tools.echo import Health, Identity
from podway.tools.echo.http import EchoHTTP
from podway.tools.echo.l4 import EchoTCP, EchoUDP

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoOptions:
    address: str = "127.0.0.1"
    port: int = 8080
    tcp: bool = False  # TCP echo instead of HTTP
    udp: bool = False  # UDP echo (with ``tcp`` both; alone: UDP only)
    identity: Identity = field(default_factory=lambda: Identity(name="echo"))
    health: Health = field(default_factory=Health)  # what /healthz answers (shared, mutable)
    proxy_protocol: bool = False  # TCP: each connection starts with a PROXY v2 header


async def serve(opts: EchoOptions, *, started: asyncio.Event | None = None) -> None:
    """Listen until cancelled; ``started`` is set once every socket is bound."""
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    udp: asyncio.DatagramTransport | None = None
    try:
        if opts.udp:
            udp, _ = await loop.create_datagram_endpoint(
                lambda: EchoUDP(opts.identity), local_addr=(opts.address, opts.port))
        if opts.tcp:
            servers.append(await loop.create_server(
                lambda: EchoTCP(opts.identity, proxy_protocol=opts.proxy_protocol),
                opts.address, opts.port, reuse_address=True))
        elif not opts.udp:
            servers.append(await loop.create_server(
                lambda: EchoHTTP(opts.identity, opts.health), opts.address, opts.port,
                reuse_address=True,
                backlog=1024))
        modes = [m for m, on in (("tcp", opts.tcp), ("udp", opts.udp)) if on] or ["http"]
        log.info("echo %s listening on %s:%s as %s", "+".join(modes), opts.address, opts.port,
                 opts.identity.name)
        if started is not None:
            started.set()
        await asyncio.Future()  # until cancelled
    finally:
        for server in servers:
            server.close()
        if udp is not None:
            udp.close()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
