"""The demo's HTTP probe: a port that answers with something other than HTTP is a row of the
table ("not HTTP"), never a traceback (an echo backend once sat on a listener's port)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from podway.ir import ListenerProtocol as Protocol
from podway.programs.demo import Outcome, Probe, send

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def probe_against(handler: Handler) -> Outcome:
    """The HTTP probe's outcome against a loopback server answering with ``handler``."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await send(Probe(label="http://a.test/", protocol=Protocol.HTTP, port=port,
                                host="a.test", path="/"))
    finally:
        server.close()
        await server.wait_closed()


async def test_a_port_that_echoes_instead_of_answering_http_is_not_http() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readuntil(b"\r\n\r\n"))  # the request itself comes back
        await writer.drain()
        writer.close()

    outcome = await probe_against(echo)
    assert (outcome.status, outcome.backend) == ("not HTTP", "-")


async def test_a_real_http_answer_is_read() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope")
        await writer.drain()
        writer.close()

    assert (await probe_against(answer)).status == "404"
