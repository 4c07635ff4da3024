"""Requests from the lab's client namespace (outside the cluster): one new TCP connection per
request, so every request meets the kernel's NAT decisions and the load balancer's choice anew.

``request`` is blocking and runs in a thread that joined the client namespace
(``podway.programs.agent.netns.single_thread``); it measures from connect to the last byte.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from podway.base.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    ok: bool
    status: int
    body: str
    seconds: float
    error: str = ""

    def echo(self) -> dict[str, Any]:
        """The echo workload's JSON (pod, node, client …), or {}."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    path: str


def parse_url(url: str) -> Target:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"URL must be http://HOST[:PORT]/PATH, not {url!r}")
    try:
        port = parts.port or 80
    except ValueError:
        raise ConfigError(f"URL has a bad port: {url!r}") from None
    return Target(parts.hostname, port, (parts.path or "/") + (f"?{parts.query}"
                                                                if parts.query else ""))


def request(target: Target, *, host_header: str = "", timeout: float = 3.0) -> Reply:
    start = time.perf_counter()
    head = (f"GET {target.path} HTTP/1.1\r\nHost: {host_header or target.host}\r\n"
            "User-Agent: podway-lab\r\nConnection: close\r\n\r\n").encode()
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout) as sock:
            sock.sendall(head)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        return Reply(ok=False, status=0, body="", seconds=time.perf_counter() - start,
                     error=exc.strerror or str(exc))
    seconds = time.perf_counter() - start
    raw = b"".join(chunks)
    header, _, body = raw.partition(b"\r\n\r\n")
    try:
        status = int(header.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return Reply(ok=False, status=0, body="", seconds=seconds, error="not HTTP")
    return Reply(ok=200 <= status < 400, status=status, body=body.decode(errors="replace"),
                 seconds=seconds)
