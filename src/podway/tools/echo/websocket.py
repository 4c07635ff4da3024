"""WebSocket (RFC 6455) for the echo server: the handshake answer and a frame codec, pure.

A request with ``Upgrade: websocket`` and a ``Sec-WebSocket-Key`` is answered ``101`` and the
connection becomes a WebSocket: the first message the server sends is the identity JSON (which
backend the client reached, as for HTTP), then every text or binary message is echoed back,
pings get pongs and a close frame is answered with a close. Client frames must be masked (the
RFC); an unmasked frame, a reserved opcode or a frame above ``MAX_PAYLOAD`` closes with 1002 /
1009. Fragmented messages are echoed frame by frame with their own opcodes, which keeps the
message boundaries the client sent.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_PAYLOAD = 1 << 20
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_OPCODES = frozenset({CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG})


def wants_websocket(headers: dict[str, str]) -> bool:
    return ("websocket" in headers.get("upgrade", "").lower()
            and "upgrade" in headers.get("connection", "").lower()
            and bool(headers.get("sec-websocket-key")))


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    return base64.b64encode(hashlib.sha1((key.strip() + GUID).encode()).digest()).decode()


def handshake(key: str) -> bytes:
    return (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            b"sec-websocket-accept: " + accept_key(key).encode() + b"\r\n\r\n")


@dataclass(frozen=True, slots=True)
class Frame:
    fin: bool
    opcode: int
    payload: bytes


class ProtocolError(ValueError):
    """A frame the RFC forbids; ``code`` is the close status to send."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None) -> bytes:
    """One frame; ``mask`` (4 bytes) for the client side, servers send unmasked."""
    head = bytes([(0x80 if fin else 0) | opcode])
    size = len(payload)
    bit = 0x80 if mask else 0
    if size < 126:
        head += bytes([bit | size])
    elif size < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", size)
    if mask:
        return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + payload


def decode(buffer: bytes, *, masked: bool = True) -> tuple[Frame | None, int]:
    """The first frame of ``buffer`` and the bytes it took; (None, 0) when incomplete.

    ``masked``: frames must be masked (a server reading a client), else must not be.
    """
    if len(buffer) < 2:
        return None, 0
    first, second = buffer[0], buffer[1]
    opcode = first & 0x0F
    if first & 0x70 or opcode not in _OPCODES:
        raise ProtocolError(1002, "reserved bits or opcode")
    if bool(second & 0x80) != masked:
        raise ProtocolError(1002, "client frames must be masked" if masked
                            else "server frames must not be masked")
    size, pos = second & 0x7F, 2
    if size == 126:
        if len(buffer) < 4:
            return None, 0
        size, pos = struct.unpack("!H", buffer[2:4])[0], 4
    elif size == 127:
        if len(buffer) < 10:
            return None, 0
        size, pos = struct.unpack("!Q", buffer[2:10])[0], 10
    if size > MAX_PAYLOAD:
        raise ProtocolError(1009, f"frame of {size} bytes")
    if opcode >= CLOSE and (size > 125 or not first & 0x80):
        raise ProtocolError(1002, "control frames are short and never fragmented")
    key = b""
    if masked:
        if len(buffer) < pos + 4:
            return None, 0
        key, pos = buffer[pos:pos + 4], pos + 4
    if len(buffer) < pos + size:
        return None, 0
    payload = buffer[pos:pos + size]
    if masked:
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return Frame(bool(first & 0x80), opcode, payload), pos + size


def reply(frame: Frame) -> tuple[bytes, bool]:
    """What the echo sends for one client frame, and whether the connection closes after."""
    if frame.opcode == PING:
        return encode(PONG, frame.payload), False
    if frame.opcode == PONG:
        return b"", False
    if frame.opcode == CLOSE:
        return encode(CLOSE, frame.payload[:2]), True
    return encode(frame.opcode, frame.payload, fin=frame.fin), False
