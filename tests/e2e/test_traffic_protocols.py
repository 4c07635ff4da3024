"""Health checks that prove the backend's protocol, through a real Envoy.

The seeds' gRPC pitfall: a TCP check stays green while every HTTP/2 request fails. Podway's
default check of an HTTP/2 pool speaks HTTP/2, so a member that only speaks HTTP/1.1 is taken out;
a ``GRPC`` check asks the standard ``grpc.health.v1.Health/Check`` and takes out a member that
answers NOT_SERVING.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve

from .harness import SHOP_INGRESS, Stack, eventually, free_port
from .test_traffic import host_flags, names, slice_of

pytestmark = pytest.mark.e2e
SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"  # HealthCheckResponse{status: 1 | 2}


def h2c_service(port: int, app_protocol: str) -> str:
    return f"""apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  selector: {{app: web}}
  ports: [{{name: p-tcp, port: 80, targetPort: {port}, appProtocol: {app_protocol}}}]
"""


@contextlib.asynccontextmanager
async def grpc_health_server(address: str, port: int, answer: bytes) -> AsyncIterator[None]:
    """A gRPC server whose only service is grpc.health.v1.Health, answering ``answer``."""
    async def check(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return answer

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=bytes, response_serializer=bytes)}),))
    server.add_insecure_port(f"{address}:{port}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(grace=None)


async def http1_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers 200 to whatever arrives, in HTTP/1.1: a TCP check would call it healthy."""
    with contextlib.suppress(OSError):
        await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
    writer.close()


async def test_grpc_check_takes_out_a_member_that_is_not_serving(stack: Stack) -> None:
    """type: GRPC asks grpc.health.v1 over HTTP/2: SERVING stays in, NOT_SERVING goes out."""
    port = free_port()
    async with grpc_health_server("127.0.0.1", port, SERVING), \
            grpc_health_server("127.0.0.2", port, NOT_SERVING):
        stack.write("web.yaml", h2c_service(port, "kubernetes.io/grpc") + "---\n"
                    + slice_of(port, ("127.0.0.1", "127.0.0.2")) + "---\n" + SHOP_INGRESS
                    + "---\n" + """apiVersion: podway.io/v1alpha1
kind: TrafficPolicy
metadata: {name: web, namespace: default}
spec:
  targetRefs: [{group: '', kind: Service, name: web}]
  healthCheck: {type: GRPC, interval: 1s, unhealthyThreshold: 1}
""")
        await stack.start()
        await eventually(lambda: _flags_are(stack, {"127.0.0.1": "healthy",
                                                     "127.0.0.2": "/failed_active_hc"}),
                         within=20)


async def test_default_check_of_an_http2_pool_speaks_http2(stack: Stack) -> None:
    """With no check configured, an h2c pool is checked over HTTP/2: the echo (h2c) is in, a
    backend that only speaks HTTP/1.1 (green for a TCP check) is out and gets no request."""
    port = free_port()
    echo_started = asyncio.Event()
    echo = asyncio.create_task(serve(EchoOptions(address="127.0.0.1", port=port,
                                                 identity=Identity(name="h2c")),
                                     started=echo_started))
    await echo_started.wait()
    old = await asyncio.start_server(http1_only, "127.0.0.2", port)
    try:
        stack.write("web.yaml", h2c_service(port, "kubernetes.io/h2c") + "---\n"
                    + slice_of(port, ("127.0.0.1", "127.0.0.2")) + "---\n" + SHOP_INGRESS)
        await stack.start()
        await eventually(lambda: _flags_are(stack, {"127.0.0.1": "healthy",
                                                     "127.0.0.2": "/failed_active_hc"}),
                         within=20)
        assert await names(stack.http_port, 20) == {"h2c": 20}
    finally:
        old.close()
        echo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await echo


async def _flags_are(stack: Stack, wanted: dict[str, str]) -> bool:
    return await host_flags(stack) == wanted
