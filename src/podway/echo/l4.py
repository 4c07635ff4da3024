"""TCP and UDP echo: bytes come back unchanged; ``whoami`` answers the identity JSON instead."""

from __future__ import annotations

import asyncio
import json
from typing import cast

from podway.echo import Identity

WHOAMI = b"whoami"


def whoami(identity: Identity, client: str) -> bytes:
    return (json.dumps({**identity.as_dict(), "client": client}) + "\n").encode()


class EchoTCP(asyncio.Protocol):
    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.transport: asyncio.Transport | None = None
        self.client = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if peer else ""

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if data.strip() == WHOAMI:
            self.transport.write(whoami(self.identity, self.client))
        else:
            self.transport.write(data)


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
