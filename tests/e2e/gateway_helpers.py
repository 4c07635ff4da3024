"""Helpers for the Gateway API end-to-end tests: manifests, backends and a raw HTTP client."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable

import trustme

from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

from .harness import Stack, endpoints, service

CLASS = OUR_CLASS_YAML


async def backend(stack: Stack, name: str, namespace: str = "default", **kw: bool) -> int:
    """An echo server behind Service ``name`` (port 80; TCP/UDP echo when asked)."""
    port = await stack.start_echo(f"{namespace}/{name}", **kw)
    protocols = ("TCP", "UDP") if kw.get("udp") else ("TCP",)
    ports = dict.fromkeys(protocols, port)
    stack.write(f"svc-{namespace}-{name}.yaml",
                service(name, 80, port, namespace=namespace, protocols=protocols) + "---\n"
                + endpoints(name, ports, namespace=namespace))
    return port


async def request(port: int, host: str, path: str = "/", *, method: str = "GET",
                  headers: dict[str, str] | None = None
                  ) -> tuple[int, dict[str, str], dict[str, object]]:
    """One HTTP/1.1 request: status, response headers (lower-case) and the echo's JSON."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}"
                         "Connection: close\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1])
            got = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:] if line)}
            length = got.get("content-length")
            body = await (reader.readexactly(int(length)) if length else reader.read())
        finally:
            writer.close()
    try:
        data = json.loads(body)
    except ValueError:
        data = {}
    return status, got, data if isinstance(data, dict) else {}


def gateway(listeners: str, name: str = "gw", namespace: str = "default") -> str:
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  gatewayClassName: podway
  listeners:
{listeners}"""


def route(name: str, spec: str, *, kind: str = "HTTPRoute", version: str = "v1",
          namespace: str = "default", created: str = "2024-01-01T00:00:00Z") -> str:
    return f"""apiVersion: gateway.networking.k8s.io/{version}
kind: {kind}
metadata: {{name: {name}, namespace: {namespace}, creationTimestamp: "{created}"}}
spec:
{spec}"""


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


async def tls_backend(stack: Stack, ca: trustme.CA, host: str) -> int:
    """A TLS server that answers its own hostname: proves the bytes reached it undecrypted."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(host).configure_cert(context)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readline()
            writer.write(f"{host}\n".encode())
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port: int = server.sockets[0].getsockname()[1]

    async def serve() -> None:
        async with server:
            await server.serve_forever()

    stack.tasks.append(asyncio.create_task(serve(), name=f"tls-{host}"))
    name = host.split(".", maxsplit=1)[0]
    stack.write(f"svc-{name}.yaml", service(name, 443, port) + "---\n"
                + endpoints(name, {"TCP": port}))
    return port


async def https_backend(stack: Stack, ca: trustme.CA, name: str, cert_host: str) -> None:
    """An HTTPS server (certificate for ``cert_host``) behind Service ``name``, answering JSON."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(cert_host).configure_cert(context)
    await json_tls_backend(stack, name, context, lambda _: {"name": name, "tls": True},
                           task=f"https-{name}")


async def json_tls_backend(stack: Stack, name: str, context: ssl.SSLContext,
                           answer: Callable[[asyncio.StreamWriter], object], *,
                           task: str) -> int:
    """A TLS server (``context``) behind Service ``name`` (port 443) answering each request
    with ``answer(writer)`` as JSON, one request per connection; its port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps(answer(writer)).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port: int = server.sockets[0].getsockname()[1]

    async def serve() -> None:
        async with server:
            await server.serve_forever()

    stack.tasks.append(asyncio.create_task(serve(), name=task))
    stack.write(f"svc-{name}.yaml", service(name, 443, port) + "---\n"
                + endpoints(name, {"TCP": port}))
    return port
