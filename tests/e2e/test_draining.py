"""Draining tied to pod termination, with a real Envoy: a pod whose endpoint turns terminating
(``serving: true, terminating: true``) and is then removed gets no new requests, and the slow
requests it holds when it turns terminating all complete with 200 — the engine neither resets
them at the terminating mark nor when the endpoint leaves the slice. The pod's grace period is
modelled by its backend: it answers its held requests only when the test releases them (after
both changes are applied), and is stopped only after that, so every request that completed did
so inside the grace period. Also when SIGTERM (the backend stops accepting) and the terminating
mark coincide: new requests go elsewhere (retried connect failures), held ones still finish.

The backends answer with ``Connection: close``: each request is its own connection, so the
member that stopped accepting is seen as refused connections, not hidden by a pooled one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from podway.envoy.engine import admin
from podway.programs.demo import read_response

from .harness import SHOP_INGRESS, Stack, free_port, get, service

pytestmark = pytest.mark.e2e

SLOW = 6  # slow requests in flight when a pod turns terminating


class HoldingBackend:
    """An HTTP backend answering ``{"name": …}``; ``/slow`` is held until ``release``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = free_port()
        self.release = asyncio.Event()
        self.held = 0  # /slow requests waiting now
        self.fast = 0  # other requests answered
        self.arrived = asyncio.Event()  # set at each /slow arrival
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    def stop_accepting(self) -> None:
        """What SIGTERM does to a well-behaved server: no new connections, held ones go on."""
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            if path == "/slow":
                self.held += 1
                self.arrived.set()
                try:
                    await self.release.wait()
                finally:
                    self.held -= 1
            else:
                self.fast += 1
            body = json.dumps({"name": self.name, "path": path}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            await writer.drain()
        writer.close()


def _slice(name: str, port: int | None, *, terminating: bool = False) -> str:
    """The pod's slice: ready, terminating (still serving), or (``port`` None) emptied."""
    conditions = ("{ready: false, serving: true, terminating: true}" if terminating
                  else "{ready: true}")
    endpoints = "[]" if port is None else f"""
- addresses: [127.0.0.1]
  conditions: {conditions}"""
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}
  namespace: default
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: p-tcp, port: {port or 1}, protocol: TCP}}]
endpoints: {endpoints}
"""


def _manifests(a: HoldingBackend, b: HoldingBackend, *, a_state: str) -> str:
    a_slice = {"ready": _slice("web-a", a.port), "terminating": _slice(
        "web-a", a.port, terminating=True), "removed": _slice("web-a", None)}[a_state]
    return "---\n".join((service("web", 80, 80), a_slice, _slice("web-b", b.port),
                         SHOP_INGRESS))


async def _slow(port: int) -> tuple[int, str]:
    """One held request through Envoy: its status and which backend answered."""
    async with asyncio.timeout(60):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /slow HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
            status, body = await read_response(reader)
        finally:
            writer.close()
    try:
        name = str(json.loads(body).get("name"))
    except ValueError:
        name = body[:80].decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    return status, name


Slow = list[asyncio.Task[tuple[int, str]]]


@contextlib.asynccontextmanager
async def _pods() -> AsyncIterator[tuple[HoldingBackend, HoldingBackend, Slow]]:
    """Pods a and b and the list of slow requests ``_serving`` fills; afterwards (also after a
    failure, and for requests started before it) every request ends and both servers close."""
    a, b = HoldingBackend("a"), HoldingBackend("b")
    slow: Slow = []
    try:
        yield a, b, slow
    finally:
        a.release.set()
        b.release.set()
        for task in slow:
            task.cancel()
        await asyncio.gather(*slow, return_exceptions=True)
        for backend in (a, b):
            if backend.server is not None:
                backend.server.close()


async def _serving(stack: Stack, a: HoldingBackend, b: HoldingBackend, slow: Slow) -> None:
    """Both members serve; then ``SLOW`` slow requests are in flight (in ``slow``, so they are
    ended even when waiting for them fails), some held by ``a``."""
    for backend in (a, b):
        await backend.start()
    stack.write("web.yaml", _manifests(a, b, a_state="ready"))
    await stack.start()
    seen: set[str] = set()
    async with asyncio.timeout(20):
        while seen != {"a", "b"}:
            _, body = await get(stack.http_port, "shop.test")
            seen.add(str(body.get("name")))
    slow.extend(asyncio.create_task(_slow(stack.http_port)) for _ in range(SLOW))
    async with asyncio.timeout(20):
        while a.held + b.held < SLOW:  # each arrival wakes this
            for backend in (a, b):
                backend.arrived.clear()
            waits = [asyncio.ensure_future(x.arrived.wait()) for x in (a, b)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
    assert a.held >= 1, "round robin gave the terminating pod no slow request"


async def _engine_sees(stack: Stack, port: int, eds: str | None, priority: int = 0) -> None:
    """Until the engine's Envoy holds the member on ``port`` with EDS status ``eds`` at
    ``priority`` (``eds`` None: the member is gone from every pool)."""
    address = await (await stack.engine()).wait_started()
    async with asyncio.timeout(20):
        while True:
            _, body = await admin.request(address, "/clusters?format=json")
            found = [(host.get("health_status", {}).get("eds_health_status"),
                      host.get("priority", 0))
                     for cluster in json.loads(body).get("cluster_statuses", [])
                     for host in cluster.get("host_statuses", [])
                     if host.get("address", {}).get("socket_address", {}).get(
                         "port_value") == port]
            if (eds is None and not found) or (eds is not None and (eds, priority) in found):
                return
            await asyncio.sleep(0.02)


async def _fast_from(stack: Stack, count: int) -> list[tuple[int, str]]:
    out = []
    for _ in range(count):
        status, body = await get(stack.http_port, "shop.test")
        out.append((status, str(body.get("name"))))
    return out


async def _finish(slow: Slow, a: HoldingBackend,
                  b: HoldingBackend) -> list[tuple[int, str]]:
    """The grace period ends: the pods answer what they hold; every slow request's result."""
    held_by_a = a.held
    a.release.set()
    b.release.set()
    results = await asyncio.gather(*slow)
    assert sum(1 for _, name in results if name == "a") == held_by_a
    return results


@pytest.mark.parametrize("stack", ["delta", "sotw"], indirect=True)
async def test_terminating_then_removed_pod_finishes_in_flight_and_gets_nothing_new(
        stack: Stack) -> None:
    """Slow requests held by pod a when it turns terminating, and still held when it leaves the
    slice, complete with 200 from a; every new request after each change goes to b."""
    async with _pods() as (a, b, slow):
        await _serving(stack, a, b, slow)
        generation = stack.state.generation
        stack.write("web.yaml", _manifests(a, b, a_state="terminating"))
        await stack.applied(generation + 1)
        # Still serving: the pool's fallback (priority 1), unused while b passes its checks.
        await _engine_sees(stack, a.port, "HEALTHY", priority=1)
        fast_a = a.fast
        assert set(await _fast_from(stack, 20)) == {(200, "b")}
        generation = stack.state.generation
        stack.write("web.yaml", _manifests(a, b, a_state="removed"))
        await stack.applied(generation + 1)
        await _engine_sees(stack, a.port, None)  # Envoy dropped the member
        assert set(await _fast_from(stack, 10)) == {(200, "b")}
        assert a.fast == fast_a  # a got no new request after it turned terminating
        assert a.held >= 1  # its in-flight requests are still open: nothing reset them
        results = await _finish(slow, a, b)
        assert {status for status, _ in results} == {200}


async def test_sigterm_and_terminating_mark_together_drop_nothing(stack: Stack) -> None:
    """Pod a stops accepting (SIGTERM) as its endpoint turns terminating: new requests before
    and after the engine hears of it all answer 200 (from b), and a's held requests, still open
    when its endpoint is removed, complete with 200."""
    async with _pods() as (a, b, slow):
        await _serving(stack, a, b, slow)
        generation = stack.state.generation
        a.stop_accepting()  # SIGTERM ...
        stack.write("web.yaml", _manifests(a, b, a_state="terminating"))  # ... and the mark
        early = await _fast_from(stack, 20)  # some before the engine hears of it
        await stack.applied(generation + 1)
        late = await _fast_from(stack, 20)
        assert set(early + late) == {(200, "b")}
        generation = stack.state.generation
        stack.write("web.yaml", _manifests(a, b, a_state="removed"))
        await stack.applied(generation + 1)
        await _engine_sees(stack, a.port, None)
        assert a.held >= 1
        results = await _finish(slow, a, b)
        assert {status for status, _ in results} == {200}
