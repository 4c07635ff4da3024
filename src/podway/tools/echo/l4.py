"""TCP and UDP echo: bytes come back unchanged; ``whoami`` answers the identity JSON instead.

With ``proxy_protocol`` every TCP connection must start with a PROXY protocol v2 header
(``podway.tools.echo.proxy_protocol``): its source is the ``client`` that ``whoami`` reports (the
socket's own peer is ``peer``); a ``LOCAL`` header leaves the peer as the client. A connection
that does not start with a valid header is closed, as a server that expects one must do.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import cast

from podway.tools.echo import Identity
from podway.tools.echo.proxy_protocol import ProxyProtocolError, parse

log = logging.getLogger(__name__)
WHOAMI = b"whoami"
_MAX_HEADER = 16 + 65535


def whoami(identity: Identity, client: str, **extra: str) -> bytes:
    return (json.dumps({**identity.as_dict(), "client": client, **extra}) + "\n").encode()


class EchoTCP(asyncio.Protocol):
    def __init__(self, identity: Identity, *, proxy_protocol: bool = False) -> None:
        self.identity = identity
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.peer = ""
        self.header: str | None = "" if proxy_protocol else None  # "", then PROXY or LOCAL
        self.pending = b""  # bytes of an incomplete PROXY header

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = self.peer = f"{peer[0]}:{peer[1]}" if peer else ""

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.header == "":
            data = self._proxy_header(data)
            if not data:
                return
        if data.strip() == WHOAMI:
            extra = {} if self.header is None else {"peer": self.peer,
                                                    "proxy_protocol": self.header}
            self.transport.write(whoami(self.identity, self.client, **extra))
        else:
            self.transport.write(data)

    def _proxy_header(self, data: bytes) -> bytes:
        """Consume the PROXY header; the bytes after it (b"" while it is incomplete)."""
        assert self.transport is not None
        self.pending += data
        try:
            header = parse(self.pending)
        except ProxyProtocolError as exc:
            log.warning("echo: closing %s: %s", self.peer, exc)
            self.transport.close()
            self.pending = b""
            return b""
        if header is None:
            if len(self.pending) > _MAX_HEADER:
                self.transport.close()
            return b""
        self.header = "PROXY" if header.source else "LOCAL"
        if header.source is not None:
            address, port = header.source
            self.client = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        rest, self.pending = self.pending[header.length:], b""
        return rest


class EchoUDP(asyncio.DatagramProtocol):
    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # The selector loop's datagram transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        assert self.transport is not None
        client = f"{addr[0]}:{addr[1]}"
        self.transport.sendto(whoami(self.identity, client) if data.strip() == WHOAMI
                              else data, addr)
