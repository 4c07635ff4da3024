"""Zero failed requests when a pod stops accepting connections as its endpoint turns
terminating (Kubernetes sends SIGTERM and updates the EndpointSlice in parallel).

The member that goes away refuses new connections before the engine hears that it is
terminating; every route retries what never reached a member (connect failure, reset before the
request, refused stream) on another member, so no request fails. The backends answer with
``Connection: close``, so Envoy opens a new connection for every request and each request sent
to the stopped member is a connect failure (a pooled connection would hide the window).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from .harness import SHOP_INGRESS, Stack, free_port, get, service

pytestmark = pytest.mark.e2e


async def _closing_backend(name: str) -> tuple[int, asyncio.Server]:
    """An HTTP backend answering ``{"name": name}`` and closing every connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps({"name": name}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            await writer.drain()
        writer.close()

    port = free_port()
    return port, await asyncio.start_server(handle, "127.0.0.1", port)


def _slice(name: str, port: int, *, terminating: bool = False) -> str:
    conditions = ("{ready: false, serving: true, terminating: true}" if terminating
                  else "{ready: true}")
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: p-tcp, port: {port}, protocol: TCP}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {conditions}
"""


@pytest.mark.parametrize("stack", ["delta", "sotw"], indirect=True)
async def test_member_stopping_as_it_turns_terminating_fails_no_request(stack: Stack) -> None:
    """Requests before, during and after a member stops accepting and turns terminating:
    every one answers 200."""
    port_a, server_a = await _closing_backend("a")
    port_b, server_b = await _closing_backend("b")
    try:
        stack.write("web.yaml", "---\n".join((
            service("web", 80, 80), _slice("web-a", port_a), _slice("web-b", port_b),
            SHOP_INGRESS)))
        await stack.start()
        seen: set[str] = set()
        async with asyncio.timeout(20):
            while seen != {"a", "b"}:  # both members serve
                _, body = await get(stack.http_port, "shop.test")
                seen.add(str(body.get("name")))
        statuses: list[int] = []
        generation = stack.state.generation
        server_b.close()  # SIGTERM: b stops accepting ...
        stack.write("web.yaml", "---\n".join((  # ... as its endpoint turns terminating
            service("web", 80, 80), _slice("web-a", port_a),
            _slice("web-b", port_b, terminating=True), SHOP_INGRESS)))
        for _ in range(40):  # before the engine hears of it: half go to b
            statuses.append((await get(stack.http_port, "shop.test"))[0])
        await stack.applied(generation + 1)
        for _ in range(40):
            statuses.append((await get(stack.http_port, "shop.test"))[0])
        assert [s for s in statuses if s != 200] == []
    finally:
        server_a.close()
        server_b.close()
