"""The echo server's HTTP handling never raises, whatever bytes arrive (Hypothesis)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from podway.tools.echo import Identity
from podway.tools.echo.http import EchoHTTP


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default


REQUESTS = st.sampled_from([
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /p HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
    b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nHTTP2-Settings: !!\r\n\r\n",
])


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.one_of(st.binary(max_size=64), REQUESTS), max_size=8),
       split=st.integers(min_value=1, max_value=17))
def test_any_byte_stream_is_answered_or_closed_never_raises(chunks: list[bytes],
                                                            split: int) -> None:
    """Random and valid requests, cut at arbitrary points, never make the protocol raise."""
    protocol = EchoHTTP(Identity(name="fuzz"))
    transport = FakeTransport()
    protocol.connection_made(transport)
    data = b"".join(chunks)
    for i in range(0, len(data), split):
        if transport.closed:
            break
        protocol.data_received(data[i:i + split])


def test_pipelined_requests_all_get_answers() -> None:
    """Two pipelined HTTP/1.1 requests in one segment get two responses, in order."""
    protocol = EchoHTTP(Identity(name="p"))
    transport = FakeTransport()
    protocol.connection_made(transport)
    protocol.data_received(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n")
    text = bytes(transport.out)
    assert text.count(b"HTTP/1.1 200") == 2
    assert text.index(b'"path": "/1"') < text.index(b'"path": "/2"')
