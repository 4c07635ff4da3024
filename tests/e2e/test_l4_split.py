"""Split clusters through a real Envoy: a UDPRoute's weighted backends as one synthetic cluster
whose member weights give each backend its share of datagram sessions, and client-IP affinity
holding across a TCPRoute's weighted backends (loopback only)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve

from .gateway_helpers import CLASS, gateway, route
from .harness import Stack, endpoints, free_port, free_port_both

pytestmark = pytest.mark.e2e

SESSIONS = 400
# Service heavy: three members; Service light: one. Weights 3:1 between the Services.
MEMBERS = {"heavy": ("127.0.0.2", "127.0.0.3", "127.0.0.4"), "light": ("127.0.0.5",)}


@contextlib.asynccontextmanager
async def udp_backends(stack: Stack, *, affinity: bool) -> AsyncIterator[int]:
    """The echo members of both Services (named after Service and address), their Services
    and EndpointSlices; yields the Gateway's UDP port."""
    port = free_port_both()
    tasks: list[asyncio.Task[None]] = []
    try:
        for name, addresses in MEMBERS.items():
            for address in addresses:
                started = asyncio.Event()
                tasks.append(asyncio.create_task(serve(
                    EchoOptions(address=address, port=port, udp=True,
                                identity=Identity(name=f"{name}@{address}")),
                    started=started), name=f"echo-{name}-{address}"))
                await started.wait()
            sticky = "  sessionAffinity: ClientIP\n" if affinity else ""
            stack.write(f"svc-{name}.yaml", f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  selector: {{app: {name}}}
{sticky}  ports: [{{name: p-udp, port: 80, targetPort: {port}, protocol: UDP}}]
---
""" + endpoints(name, {"UDP": port}, addresses))
        stack.write("gw.yaml", CLASS + "---\n" + gateway(
            f"  - {{name: udp, protocol: UDP, port: {port}}}\n"))
        stack.write("route.yaml", route("dns", """  parentRefs: [{name: gw, sectionName: udp}]
  rules:
  - backendRefs: [{name: heavy, port: 80, weight: 3}, {name: light, port: 80, weight: 1}]
""", kind="UDPRoute", version="v1alpha2"))
        await stack.start()
        yield port
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def whoami(port: int) -> str:
    """The member answering ``whoami`` on a new socket (a new session of the UDP proxy); a
    datagram sent before the listener is in place is lost, so ask again (bounded)."""
    loop = asyncio.get_running_loop()
    answers: asyncio.Queue[bytes] = asyncio.Queue()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            answers.put_nowait(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", port))
    try:
        for _ in range(20):
            transport.sendto(b"whoami")
            try:
                async with asyncio.timeout(1):
                    return str(json.loads(await answers.get())["name"])
            except TimeoutError:
                continue
        raise AssertionError(f"no answer over UDP from 127.0.0.1:{port}")
    finally:
        transport.close()


async def test_udp_route_splits_sessions_by_backend_weight(stack: Stack) -> None:
    """Weights 3:1, the heavy Service with three members: 400 sessions give the light Service
    100 within 4 standard deviations (member weights not normalised per backend would give it
    1 in 10), and every member is used."""
    async with udp_backends(stack, affinity=False) as port:
        seen = Counter([await whoami(port) for _ in range(SESSIONS)])
    by_service = Counter({name: sum(n for who, n in seen.items() if who.startswith(name))
                          for name in MEMBERS})
    assert len(seen) == 4, seen
    sd = (SESSIONS * 0.25 * 0.75) ** 0.5
    assert abs(by_service["light"] - SESSIONS / 4) <= 4 * sd, seen
    assert by_service["heavy"] + by_service["light"] == SESSIONS


async def test_client_ip_affinity_holds_across_the_split(stack: Stack) -> None:
    """sessionAffinity ClientIP on the Services: the split cluster hashes on the client
    address, so every session from one address lands on the same member of one backend."""
    async with udp_backends(stack, affinity=True) as port:
        seen = Counter([await whoami(port) for _ in range(40)])
    assert len(seen) == 1, seen


async def tcp_whoami(port: int) -> str:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"whoami\n")
            return str(json.loads(await reader.readline())["name"])
        finally:
            writer.close()


async def test_tcp_client_ip_affinity_holds_across_a_weighted_split(engine_stack: Stack) -> None:
    """A TCPRoute splitting 1:1 between two Services with sessionAffinity ClientIP: every
    connection from one address reaches the same member (the engine's native split would pick
    the Service anew per connection: both would answer)."""
    tasks: list[asyncio.Task[None]] = []
    port = free_port_both()
    try:
        for name, address in (("left", "127.0.0.2"), ("right", "127.0.0.3")):
            started = asyncio.Event()
            tasks.append(asyncio.create_task(serve(
                EchoOptions(address=address, port=port, tcp=True, identity=Identity(name=name)),
                started=started), name=f"echo-{name}"))
            await started.wait()
            engine_stack.write(f"svc-{name}.yaml", f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  selector: {{app: {name}}}
  sessionAffinity: ClientIP
  ports: [{{name: p-tcp, port: 80, targetPort: {port}, protocol: TCP}}]
---
""" + endpoints(name, {"TCP": port}, (address,)))
        listen = free_port()
        engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
            f"  - {{name: tcp, protocol: TCP, port: {listen}}}\n"))
        engine_stack.write("route.yaml", route("db", """  parentRefs: [{name: gw, sectionName: tcp}]
  rules:
  - backendRefs: [{name: left, port: 80, weight: 1}, {name: right, port: 80, weight: 1}]
""", kind="TCPRoute", version="v1alpha2"))
        await engine_stack.start()
        seen = Counter([await tcp_whoami(listen) for _ in range(30)])
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert len(seen) == 1, seen
