"""PROXY protocol v2: the header parser, and the echo backend that reports its source."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from podway.tools.echo import Identity
from podway.tools.echo.proxy_protocol import SIGNATURE, ProxyProtocolError, encode, parse
from podway.tools.echo.server import EchoOptions, serve
from tests.e2e.harness import free_port


@pytest.mark.parametrize(("source", "destination"), [
    (("198.18.0.5", 40000), ("198.18.0.1", 443)),
    (("2001:db8::5", 1), ("2001:db8::1", 65535))])
def test_a_header_reads_back_as_written(source: tuple[str, int],
                                        destination: tuple[str, int]) -> None:
    data = encode(source, destination)
    header = parse(data + b"payload")
    assert header is not None
    assert (header.source, header.destination, header.length) == (source, destination,
                                                                  len(data))


def test_an_incomplete_header_asks_for_more_at_every_length() -> None:
    data = encode(("198.18.0.5", 40000), ("198.18.0.1", 443))
    for cut in range(len(data)):
        assert parse(data[:cut]) is None
    assert parse(data) is not None


def test_local_names_no_client_and_tlvs_are_skipped() -> None:
    local = parse(encode(None))
    assert local is not None
    assert local.source is None
    assert local.length == 16
    data = encode(("198.18.0.5", 1), ("198.18.0.1", 2))
    tlv = b"\x04\x00\x02ab"  # a NOOP TLV after the address block
    longer = data[:14] + (int.from_bytes(data[14:16]) + len(tlv)).to_bytes(2) + data[16:] + tlv
    header = parse(longer)
    assert header is not None
    assert header.source == ("198.18.0.5", 1)
    assert header.length == len(longer)


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n", SIGNATURE + b"\x11\x11\x00\x00",
                                  SIGNATURE + b"\x21\x11\x00\x04abcd"])
def test_what_is_not_a_v2_header_is_refused(data: bytes) -> None:
    with pytest.raises(ProxyProtocolError):
        parse(data)


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    port, up = free_port(), asyncio.Event()
    task = asyncio.create_task(serve(EchoOptions(port=port, tcp=True, proxy_protocol=True,
                                                 identity=Identity(name="pp")), started=up))
    await up.wait()
    yield port
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _whoami(port: int, *chunks: bytes) -> dict[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for chunk in chunks:  # separate writes: the header may arrive in pieces
            writer.write(chunk)
            await writer.drain()
        answer = json.loads(await asyncio.wait_for(reader.readline(), 5))
        assert isinstance(answer, dict)
        return answer
    finally:
        writer.close()


async def test_the_echo_reports_the_header_source_as_the_client(echo: int) -> None:
    header = encode(("198.18.0.5", 40000), ("198.18.0.1", 443))
    answer = await _whoami(echo, header[:7], header[7:], b"whoami\n")
    assert answer["client"] == "198.18.0.5:40000"
    assert answer["proxy_protocol"] == "PROXY"
    assert answer["peer"].startswith("127.0.0.1:")
    local = await _whoami(echo, encode(None) + b"whoami\n")
    assert local["proxy_protocol"] == "LOCAL"
    assert local["client"] == local["peer"]


async def test_the_echo_closes_a_connection_without_a_header(echo: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", echo)
    try:
        writer.write(b"whoami\n")
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing echoed
    finally:
        writer.close()
