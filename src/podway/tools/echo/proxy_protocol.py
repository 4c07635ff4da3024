"""PROXY protocol v2 headers (the binary form, haproxy's proxy-protocol.txt section 2.2).

A proxy that forwards a TCP connection may start it with this header, naming the client's
address and port, so the backend knows who connected. ``parse`` reads one from the start of a
byte stream; ``encode`` builds one (tests, and clients that speak it). Only the address block is
read: TLVs after it are skipped. A ``LOCAL`` header (health checks, the proxy's own connections)
names no client.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
_FIXED = 16  # signature, version/command, family/protocol, length
_LOCAL, _PROXY = 0x20, 0x21
_TCP4, _TCP6 = 0x11, 0x21


class ProxyProtocolError(ValueError):
    """The bytes are not a PROXY v2 header (or one this parser does not read)."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """A parsed header: ``source`` is None for ``LOCAL`` (no client named)."""

    source: tuple[str, int] | None
    destination: tuple[str, int] | None
    length: int  # bytes the header took, TLVs included


def parse(data: bytes) -> ProxyHeader | None:
    """The header at the start of ``data``; None while more bytes are needed."""
    if data[:len(SIGNATURE)] != SIGNATURE[:len(data)]:
        raise ProxyProtocolError("no PROXY protocol v2 signature")
    if len(data) < _FIXED:
        return None
    command, family = data[12], data[13]
    (size,) = struct.unpack("!H", data[14:16])
    if command not in (_LOCAL, _PROXY):
        raise ProxyProtocolError(f"version/command byte {command:#04x} is not v2 LOCAL/PROXY")
    if len(data) < _FIXED + size:
        return None
    body = data[_FIXED:_FIXED + size]
    if command == _LOCAL or family not in (_TCP4, _TCP6):
        return ProxyHeader(source=None, destination=None, length=_FIXED + size)
    width = 4 if family == _TCP4 else 16
    if size < 2 * width + 4:
        raise ProxyProtocolError(f"address block of {size} bytes is too short")
    src = str(ipaddress.ip_address(body[:width]))
    dst = str(ipaddress.ip_address(body[width:2 * width]))
    sport, dport = struct.unpack("!HH", body[2 * width:2 * width + 4])
    return ProxyHeader(source=(src, sport), destination=(dst, dport), length=_FIXED + size)


def encode(source: tuple[str, int] | None, destination: tuple[str, int] | None = None) -> bytes:
    """A v2 header naming ``source`` (TCP over IPv4 or IPv6), or ``LOCAL`` for None."""
    if source is None:
        return SIGNATURE + bytes([_LOCAL, 0]) + struct.pack("!H", 0)
    src = ipaddress.ip_address(source[0])
    dst = ipaddress.ip_address(destination[0]) if destination else (
        ipaddress.IPv4Address(0) if src.version == 4 else ipaddress.IPv6Address(0))
    if src.version != dst.version:
        raise ValueError("source and destination must both be IPv4 or both IPv6")
    body = src.packed + dst.packed + struct.pack("!HH", source[1],
                                                 destination[1] if destination else 0)
    family = _TCP4 if src.version == 4 else _TCP6
    return SIGNATURE + bytes([_PROXY, family]) + struct.pack("!H", len(body)) + body
