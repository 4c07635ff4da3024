"""A minimal client for Envoy's admin interface: readiness, stats, drain.

Podway's engines serve admin on a unix socket (mode 0600) in their private state folder, never
on TCP: admin can dump every private key and stop the process. ``address`` is ``unix:/path``
(or ``host:port`` for an Envoy someone else configured). A few plain HTTP/1.1 requests
(``Connection: close``) are all Podway needs, so this avoids an HTTP client dependency.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

from podway.base.netaddr import parse_host_port


async def request(address: str, path: str, *, method: str = "GET", limit_s: float = 2.0
                  ) -> tuple[int, str]:
    """``(status, body)`` of one admin request to ``unix:/path`` or ``host:port``; an answer
    that cannot be read raises ``ConnectionError`` (an ``OSError``, as a refused connection)."""
    async with asyncio.timeout(limit_s):
        if address.startswith("unix:"):
            reader, writer = await asyncio.open_unix_connection(address.removeprefix("unix:"))
        else:
            target = parse_host_port(address, what="admin address")
            reader, writer = await asyncio.open_connection(target.host, target.port)
        try:
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n"
                         "Content-Length: 0\r\n\r\n".encode())
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    try:  # an answer cut off or garbled (Envoy stopping mid-answer): what callers catch
        status = int(status_line[1]) if len(status_line) > 1 else 0
        if b"transfer-encoding: chunked" in head.lower():
            body = _dechunk(body)
    except ValueError as exc:
        raise ConnectionError(f"Envoy admin at {address}: malformed answer ({exc})") from None
    return status, body.decode("utf-8", "replace")


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2:]
    return bytes(out)


async def is_ready(address: str) -> bool:
    """True when Envoy reports LIVE (initial configuration fetched and applied)."""
    try:
        status, _ = await request(address, "/ready", limit_s=1.0)
    except (OSError, TimeoutError):
        return False
    return status == 200


async def stats(address: str, filter_regex: str = "") -> dict[str, int]:
    """Counters and gauges (``name: value``), optionally filtered by a regex."""
    path = "/stats" + (f"?filter={quote(filter_regex, safe='')}" if filter_regex else "")
    _, body = await request(address, path)
    out: dict[str, int] = {}
    for line in body.splitlines():
        name, sep, value = line.partition(": ")
        if sep and value.strip().lstrip("-").isdigit():
            out[name] = int(value)
    return out


async def drain_listeners(address: str) -> None:
    """Stop accepting now, and discourage what is open: the drain sequence closes each HTTP
    connection after its current request (``Connection: close``, HTTP/2 GOAWAY); TCP ones run
    on. New connections go to a successor bound beside this Envoy (SO_REUSEPORT; with
    ``net.ipv4.tcp_migrate_req`` the ones still queued here too), or are refused when there is
    none. (``graceful`` alone keeps accepting until the drain period ends, and a stop at its
    end cut the connections taken last: tests/e2e/test_engine_handover.py.)"""
    await request(address, "/drain_listeners?graceful&skip_exit", method="POST")
    await request(address, "/drain_listeners", method="POST")


async def open_connections(address: str) -> int:
    """Client connections Envoy's listeners hold (the admin's own aside)."""
    found = await stats(address, r"^listener\..*\.downstream_cx_active$")
    return sum(value for name, value in found.items()
               if ".worker_" not in name and not name.startswith("listener.admin."))


async def listeners(address: str, *, limit_s: float = 2.0) -> dict[str, tuple[str, int]]:
    """The listeners Envoy has bound and serves (``/listeners``): name → (address, port). A
    listener Envoy refused (its port taken, say) is not there."""
    status, body = await request(address, "/listeners?format=json", limit_s=limit_s)
    if status != 200:
        raise ConnectionError(f"Envoy admin at {address}: /listeners answered {status}")
    try:
        found = json.loads(body).get("listener_statuses") or []
    except (ValueError, AttributeError) as exc:
        raise ConnectionError(f"Envoy admin at {address}: /listeners: {exc}") from None
    out: dict[str, tuple[str, int]] = {}
    for entry in found:
        socket = ((entry or {}).get("local_address") or {}).get("socket_address") or {}
        if entry.get("name") and "port_value" in socket:
            out[str(entry["name"])] = (str(socket.get("address", "")),
                                       int(socket["port_value"]))
    return out


async def draining_only(address: str) -> frozenset[str]:
    """Names of the dynamic listeners Envoy holds only as draining (no active or warming
    version): one it removed, or one it accepted and then failed to create
    (``config_dump``, dynamic listeners only, without their bodies' secrets: none there)."""
    status, body = await request(address, "/config_dump?resource=dynamic_listeners",
                                 limit_s=5.0)
    if status != 200:
        raise ConnectionError(f"Envoy admin at {address}: /config_dump answered {status}")
    try:
        configs = json.loads(body).get("configs") or []
    except (ValueError, AttributeError) as exc:
        raise ConnectionError(f"Envoy admin at {address}: /config_dump: {exc}") from None
    return frozenset(str(c.get("name")) for c in configs if isinstance(c, dict)
                     and "draining_state" in c and "active_state" not in c
                     and "warming_state" not in c and c.get("name"))
