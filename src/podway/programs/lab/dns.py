"""The lab's cluster DNS, what CoreDNS is on a cluster: every Service's names answered from the
lab's API at the moment of the question, on UDP port 53 of the API's address (every pod's
``/etc/resolv.conf`` names it).

- ``<svc>.<ns>.svc.<domain>`` (and the shorter forms a pod's search list makes of it) is the
  Service's ClusterIP, or for a headless one the addresses of its ready endpoints, so a name
  resolves as soon as its first endpoint is ready and stops resolving to a pod that is not;
- any other name, and a headless Service without a ready endpoint: NXDOMAIN, at once (the lab
  has no upstream resolver), with a 5 s TTL as CoreDNS's ``kubernetes`` plugin gives;
- a name that exists, asked for another type than A (AAAA: the lab is IPv4): no answer.

Before, the names were only in each container's ``/etc/hosts``: Envoy's resolver (c-ares)
re-reads that file about once a minute, so an engine started before the controllers were
ready kept "no healthy upstream" for about a minute after they were (docs/lab.md)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Mapping
from typing import Any, cast

from podway.programs.lab.plan import CLUSTER_DOMAIN
from podway.programs.lab.podenv import service_addresses

Obj = dict[str, Any]
PORT = 53
TTL_S = 5
_A, _IN = 1, 1
_NXDOMAIN, _FORMERR = 3, 1


def records(services: list[Obj], slices: list[Obj]) -> dict[str, list[str]]:
    """Every Service's fully qualified name (lower case, no trailing dot) → its addresses."""
    out: dict[str, list[str]] = {}
    for svc, addresses in service_addresses(services, slices):
        name = f"{svc['metadata']['name']}.{svc['metadata'].get('namespace', 'default')}"
        out[f"{name}.svc.{CLUSTER_DOMAIN}".lower()] = addresses
    return out


def _question(query: bytes) -> tuple[str, int, int, int] | None:
    """(name, type, class, end offset) of the one question of ``query``; None if malformed."""
    if len(query) < 12 or struct.unpack("!H", query[4:6])[0] != 1:
        return None
    labels, at = [], 12
    while at < len(query) and query[at]:
        size = query[at]
        if size & 0xC0 or at + 1 + size > len(query):
            return None  # no compression in a question; nothing past the end
        labels.append(query[at + 1:at + 1 + size].decode("ascii", "replace"))
        at += 1 + size
    if at + 5 > len(query):
        return None
    qtype, qclass = struct.unpack("!HH", query[at + 1:at + 5])
    return ".".join(labels).lower(), qtype, qclass, at + 5


def answer(query: bytes, known: Mapping[str, list[str]]) -> bytes | None:
    """The reply to one DNS query (None: not a query, no reply)."""
    if len(query) < 12 or query[2] & 0x80:
        return None
    ident, flags = query[:2], query[2] & 0x01  # keep RD
    asked = _question(query)
    if asked is None:
        return ident + bytes([0x80 | flags, _FORMERR]) + b"\0" * 8
    name, qtype, qclass, end = asked
    addresses = known.get(name.rstrip("."))
    rcode = _NXDOMAIN if not addresses else 0
    found = addresses if qtype == _A and qclass == _IN and addresses else []
    head = ident + bytes([0x84 | flags, rcode]) + struct.pack("!HHHH", 1, len(found), 0, 0)
    body = b"".join(b"\xc0\x0c" + struct.pack("!HHIH", _A, _IN, TTL_S, 4)
                    + socket.inet_aton(a) for a in found)
    return head + query[12:end] + body


class _Server(asyncio.DatagramProtocol):
    def __init__(self, known: Callable[[], Mapping[str, list[str]]]) -> None:
        self.known = known
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = answer(data, self.known())
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


async def serve(sock: socket.socket, known: Callable[[], Mapping[str, list[str]]]
                ) -> asyncio.DatagramTransport:
    """Answer on ``sock`` (a bound UDP socket) until the returned transport is closed."""
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: _Server(known), sock=sock)
    return transport
