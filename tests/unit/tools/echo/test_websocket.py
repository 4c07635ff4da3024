"""The echo server's WebSocket codec: RFC 6455 handshake key, framing, and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podway.tools.echo import websocket as ws

MASK = b"\x01\x02\x03\x04"


def test_accept_key_is_the_rfc_example() -> None:
    """RFC 6455 section 1.3: the sample nonce gives the sample accept value."""
    assert ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@given(st.binary(max_size=70000), st.sampled_from([ws.TEXT, ws.BINARY]), st.booleans())
def test_masked_frames_round_trip(payload: bytes, opcode: int, fin: bool) -> None:
    """Any payload size (7-bit, 16-bit and 64-bit lengths) decodes to what was encoded."""
    data = ws.encode(opcode, payload, fin=fin, mask=MASK)
    frame, used = ws.decode(data + b"extra")
    assert frame == ws.Frame(fin, opcode, payload)
    assert used == len(data)
    assert ws.decode(data[:-1] if payload else data[:1]) == (None, 0)  # incomplete: wait


def test_unmasked_client_frame_and_reserved_opcode_are_protocol_errors() -> None:
    """The server refuses what the RFC forbids, with close code 1002."""
    with pytest.raises(ws.ProtocolError) as unmasked:
        ws.decode(ws.encode(ws.TEXT, b"hi"))
    assert unmasked.value.code == 1002
    with pytest.raises(ws.ProtocolError):
        ws.decode(bytes([0x83, 0x80]) + MASK)


def test_replies_echo_data_answer_pings_and_close() -> None:
    """Text is echoed unmasked, a ping gets a pong with its payload, a close ends."""
    assert ws.reply(ws.Frame(True, ws.TEXT, b"hi")) == (ws.encode(ws.TEXT, b"hi"), False)
    assert ws.reply(ws.Frame(True, ws.PING, b"p")) == (ws.encode(ws.PONG, b"p"), False)
    assert ws.reply(ws.Frame(True, ws.CLOSE, b"\x03\xe8bye")) == (
        ws.encode(ws.CLOSE, b"\x03\xe8"), True)
