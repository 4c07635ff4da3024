"""The default health checks never fail a server that serves its route's protocol correctly
(issue 23), through a real Envoy, each pool checked several times with no failure and serving:

- grpcio (no health service) behind an ``appProtocol: kubernetes.io/h2c`` Service, reached by a
  GRPCRoute (a gRPC pool) and by an HTTPRoute (an h2c pool): grpcio resets ``GET /``;
- a Go-style h2c server that answers only gRPC ``POST``s and refuses every other stream;
- nginx (HTTP/1.1, a 1 s keep-alive: it closes idle connections between checks);
- a server that answers 404 on ``/`` (its routes live elsewhere);
- a server that closes every connection after 0.2 s idle, without saying so.

Loopback only, ephemeral ports, every server stopped at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from podway.envoy.engine import admin

from .gateway_helpers import CLASS, gateway, request, route
from .harness import Stack, free_port
from .local_servers import nginx

pytestmark = pytest.mark.e2e
CHECKS = 3  # every pool must pass this many checks in a row (the unhealthy threshold)


def h2c_service(name: str, port: int, app_protocol: str = "kubernetes.io/h2c") -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: p, port: 80, targetPort: {port}, appProtocol: {app_protocol}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: p, port: {port}, protocol: TCP}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"""


def http_service(name: str, port: int) -> str:
    return h2c_service(name, port).replace(", appProtocol: kubernetes.io/h2c", "")


@contextlib.asynccontextmanager
async def grpcio_server(port: int) -> AsyncIterator[None]:
    """grpcio with one method, echo.Echo/Say, and no health service."""
    async def say(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b"grpcio:" + request

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "echo.Echo", {"Say": grpc.unary_unary_rpc_method_handler(
            say, request_deserializer=bytes, response_serializer=bytes)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(grace=None)


async def go_style(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/2 with prior knowledge that answers only ``POST`` with a gRPC content type (one
    message, grpc-status 0, as grpc-go's server does) and refuses every other stream."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    writer.write(conn.data_to_send())
    asked: dict[int, dict[bytes, bytes]] = {}
    with contextlib.suppress(OSError, h2.exceptions.ProtocolError):
        while data := await reader.read(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    asked[event.stream_id] = dict(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length,
                                                   event.stream_id)
                if isinstance(event, h2.events.StreamEnded | h2.events.RequestReceived) and (
                        event.stream_id in asked and (
                            isinstance(event, h2.events.StreamEnded)
                            or event.stream_ended is not None)):
                    _answer_go_style(conn, event.stream_id, asked.pop(event.stream_id))
            writer.write(conn.data_to_send())
            await writer.drain()
    writer.close()


def _answer_go_style(conn: h2.connection.H2Connection, stream: int,
                     headers: dict[bytes, bytes]) -> None:
    if headers.get(b":method") != b"POST" or not headers.get(
            b"content-type", b"").startswith(b"application/grpc"):
        conn.reset_stream(stream, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
        return
    message = b"go"
    conn.send_headers(stream, [(":status", "200"), ("content-type", "application/grpc")])
    conn.send_data(stream, b"\x00" + struct.pack(">I", len(message)) + message)
    conn.send_headers(stream, [("grpc-status", "0")], end_stream=True)


async def root_404(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 keep-alive: 404 on ``/``, 200 elsewhere."""
    await _http1(reader, writer, lambda path: 404 if path == "/" else 200, idle_s=None)


async def idle_closer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """HTTP/1.1 keep-alive (no ``Connection: close``) that drops a connection idle 0.2 s."""
    await _http1(reader, writer, lambda path: 200, idle_s=0.2)


async def _http1(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 status_of: object, *, idle_s: float | None) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError, TimeoutError):
        while True:
            async with asyncio.timeout(idle_s):
                head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            status = status_of(path)  # type: ignore[operator]
            body = f"{status} {path}".encode()
            writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                         + body)
            await writer.drain()
    writer.close()


# A real nginx answering every path, with a 1 s keep-alive timeout.
NGINX_SERVER = "server { listen 127.0.0.1:PORT; location / { return 200 'nginx'; } }"
NGINX_HTTP = ("keepalive_timeout 1s;",)


async def _grpc_say(port: int, authority: str, method: str) -> bytes:
    async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.default_authority", authority)]) as channel:
        call = channel.unary_unary(method, request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        answer: bytes = await call(b"hi", timeout=5)
        return answer


async def _checks(stack: Stack) -> dict[str, tuple[str, int, int]]:
    """pool → (health flags of its member, checks made, checks failed)."""
    address = await (await stack.engine()).wait_started()
    _, body = await admin.request(address, "/clusters")
    flags = {m.group(1): m.group(2) for m in re.finditer(
        r"^(pool/[^:]+)::[0-9.]+:\d+::health_flags::(.*)$", body, re.MULTILINE)}
    counts = await admin.stats(address, r"^cluster\.pool/.*\.health_check\.(attempt|failure)$")
    return {pool: (flag, counts.get(f"cluster.{pool}.health_check.attempt", 0),
                   counts.get(f"cluster.{pool}.health_check.failure", 0))
            for pool, flag in flags.items()}


async def test_default_checks_pass_every_server_that_speaks_the_protocol(
        stack: Stack, tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("grpcio", "go", "nginx", "root404", "idle")}
    servers = [await asyncio.start_server(go_style, "127.0.0.1", ports["go"]),
               await asyncio.start_server(root_404, "127.0.0.1", ports["root404"]),
               await asyncio.start_server(idle_closer, "127.0.0.1", ports["idle"])]
    listener = free_port()
    try:
        async with grpcio_server(ports["grpcio"]), nginx(
                tmp_path / "nginx", ports["nginx"], NGINX_SERVER, http=NGINX_HTTP):
            stack.write("services.yaml", "---\n".join([
                h2c_service("grpcio", ports["grpcio"]), h2c_service("go", ports["go"]),
                http_service("nginx", ports["nginx"]),
                http_service("root404", ports["root404"]),
                http_service("idle", ports["idle"])]))
            stack.write("gw.yaml", CLASS + "---\n" + gateway(
                f"  - {{name: http, protocol: HTTP, port: {listener}}}\n"))
            stack.write("routes.yaml", "---\n".join([
                route("grpc", """  parentRefs: [{name: gw}]
  hostnames: [grpc.test]
  rules:
  - matches: [{method: {service: echo.Echo}}]
    backendRefs: [{name: grpcio, port: 80}]
  - matches: [{method: {service: go.Echo}}]
    backendRefs: [{name: go, port: 80}]
""", kind="GRPCRoute"),
                *(route(name, f"""  parentRefs: [{{name: gw}}]
  hostnames: [{name}.test]
  rules: [{{backendRefs: [{{name: {name}, port: 80}}]}}]
""") for name in ("grpcio", "nginx", "root404", "idle"))]))
            await stack.start()
            pools = {"pool/default/grpcio/80/grpc", "pool/default/go/80/grpc",
                     "pool/default/grpcio/80", "pool/default/nginx/80",
                     "pool/default/root404/80", "pool/default/idle/80"}

            async def checked_enough() -> bool:
                seen = await _checks(stack)
                assert set(seen) == pools, seen
                assert all(failed == 0 for _, _, failed in seen.values()), seen
                return all(flag == "healthy" and made >= CHECKS
                           for flag, made, _ in seen.values())

            for _ in range(120):  # the checks run every 5 s: about 15 s
                if await checked_enough():
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError(f"not checked {CHECKS} times: {await _checks(stack)}")
            assert await _grpc_say(listener, "grpc.test", "/echo.Echo/Say") == b"grpcio:hi"
            assert await _grpc_say(listener, "grpc.test", "/go.Echo/Say") == b"go"
            assert await _grpc_say(listener, "grpcio.test", "/echo.Echo/Say") == b"grpcio:hi"
            for host, path, body in (("nginx.test", "/", "nginx"),
                                     ("root404.test", "/app", "200 /app"),
                                     ("idle.test", "/", "200 /")):
                status, _, _ = await request(listener, host, path)
                assert status == 200, (host, status, body)
    finally:
        for server in servers:
            server.close()
