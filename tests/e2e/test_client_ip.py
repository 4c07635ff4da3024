"""The client's address reaches the backends, through a real Envoy, and cannot be spoofed.

L7: X-Real-IP (``--x-real-ip``) is the connection's peer at 0 trusted hops (a client-sent
X-Forwarded-For or X-Real-IP decides nothing), the address the trusted proxy appended with 1 hop;
without the flag no X-Real-IP reaches the pods, not even the client's own. X-Forwarded-Proto
is the connection's scheme unless a trusted proxy sent it. L4: a Service annotated
``podway.io/proxy-protocol: v2`` gets a PROXY v2 header on each connection, naming the client's
address and port, which the echo backend reports.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from podway.programs.demo import read_response
from podway.tools.echo import Identity
from podway.tools.echo.server import EchoOptions, serve
from tests.certs import GOOD_CERT, GOOD_KEY, tls_secret

from .harness import Stack, endpoints, free_port, make_stack, service

pytestmark = pytest.mark.e2e

SPOOFED = {"X-Forwarded-For": "198.18.0.66", "X-Real-IP": "198.18.0.66",
           "X-Forwarded-Proto": "https"}


def shop(port: int) -> str:
    """Service web → the echo at ``port``, and an Ingress for example.com on HTTP and HTTPS."""
    return (service("web", 80, port) + "---\n" + endpoints("web", {"TCP": port}) + "---\n"
            + tls_secret("cert", "default", GOOD_CERT, GOOD_KEY) + "---\n" + """\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: default
  annotations: {podway.io/ssl-redirect: "false"}
spec:
  ingressClassName: podway
  tls: [{hosts: [example.com], secretName: cert}]
  rules:
  - host: example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""")


async def ask(port: int, headers: dict[str, str], *, tls: bool = False) -> dict[str, str]:
    """One GET to example.com with ``headers``; the request headers the echo saw."""
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the certificate is not what this test is about
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="example.com" if tls else None)
        try:
            extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            writer.write(f"GET / HTTP/1.1\r\nHost: example.com\r\n{extra}"
                         "Connection: close\r\n\r\n".encode())
            status, body = await read_response(reader)
        finally:
            writer.close()
    assert status == 200, body
    seen = json.loads(body)["headers"]
    assert isinstance(seen, dict)
    return seen


def entries(xff: str) -> list[str]:
    return [e.strip() for e in xff.split(",")]


async def started(stack: Stack) -> Stack:
    port = await stack.start_echo("web")
    stack.write("web.yaml", shop(port))
    await stack.start()
    return stack


@pytest.fixture
async def trusting(tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack behind one trusted proxy (``--xff-trusted-hops 1 --x-real-ip``)."""
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, xff_trusted_hops=1, real_ip_header=True)
    try:
        yield made
    finally:
        await made.stop()


@pytest.fixture(params=["envoy", "haproxy"])
async def asking(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """A stack at the edge that sets X-Real-IP (``--x-real-ip``), on each engine in turn."""
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, real_ip_header=True, engine_kind=request.param)
    try:
        yield made
    finally:
        await made.stop()


async def test_without_the_flag_no_real_ip_reaches_the_pods(engine_stack: Stack) -> None:
    """X-Real-IP costs every request a formatter, so it is off unless asked; a client's own
    X-Real-IP is dropped then (a pod trusting it would otherwise believe a forged one)."""
    stack = await started(engine_stack)
    seen = await ask(stack.http_port, SPOOFED)
    assert "x-real-ip" not in seen
    assert entries(seen["x-forwarded-for"])[:-1] == ["198.18.0.66"]  # kept, appended to
    assert "x-real-ip" not in await ask(stack.https_port, {}, tls=True)


async def test_a_spoofed_forwarded_for_does_not_become_the_client(asking: Stack) -> None:
    stack = await started(asking)
    seen = await ask(stack.http_port, SPOOFED)
    assert seen["x-real-ip"] == "127.0.0.1"  # the peer, not the header the client sent
    # The client's header is kept (appended to), never trusted: Envoy appends the peer (for a
    # loopback peer, like this one, the engine host's own address: Envoy's rule).
    assert entries(seen["x-forwarded-for"])[:-1] == ["198.18.0.66"]
    assert seen["x-forwarded-proto"] == "http"  # the connection's scheme, not the client's
    plain = await ask(stack.http_port, {})
    assert plain["x-real-ip"] == "127.0.0.1"
    assert len(entries(plain["x-forwarded-for"])) == 1


async def test_forwarded_proto_is_https_on_tls_connections(asking: Stack) -> None:
    stack = await started(asking)
    seen = await ask(stack.https_port, {"X-Forwarded-Proto": "http"}, tls=True)
    assert seen["x-forwarded-proto"] == "https"
    assert seen["x-real-ip"] == "127.0.0.1"


async def test_one_trusted_hop_takes_the_address_the_proxy_appended(trusting: Stack) -> None:
    await started(trusting)
    # The proxy in front appended 198.18.0.7 (its client); what came before is the client's
    # own claim and stays untrusted.
    seen = await ask(trusting.http_port, {"X-Forwarded-For": "198.18.0.66, 198.18.0.7",
                                          "X-Real-IP": "198.18.0.66",
                                          "X-Forwarded-Proto": "https"})
    assert seen["x-real-ip"] == "198.18.0.7"
    assert entries(seen["x-forwarded-for"])[:-1] == ["198.18.0.66", "198.18.0.7"]
    assert seen["x-forwarded-proto"] == "https"  # the trusted proxy's word on the scheme
    alone = await ask(trusting.http_port, {})
    assert alone["x-real-ip"] == "127.0.0.1"  # no header: the peer is the client
    assert alone["x-forwarded-proto"] == "http"


async def test_proxy_protocol_v2_names_the_client_to_a_tcp_backend(engine_stack: Stack) -> None:
    backend = free_port()
    up = asyncio.Event()
    engine_stack.tasks.append(asyncio.create_task(serve(EchoOptions(
        port=backend, tcp=True, proxy_protocol=True, identity=Identity(name="pp")), started=up)))
    await up.wait()
    lb_port = free_port()
    annotated = service("pp", lb_port, backend, lb=True).replace(
        "metadata: {name: pp, namespace: default}",
        "metadata: {name: pp, namespace: default, "
        "annotations: {podway.io/proxy-protocol: v2}}")
    engine_stack.write("pp.yaml", annotated + "---\n" + endpoints("pp", {"TCP": backend}))
    await engine_stack.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", lb_port)
    try:
        ours = writer.get_extra_info("sockname")
        writer.write(b"whoami\n")
        answer = json.loads(await asyncio.wait_for(reader.readline(), 5))
        writer.write(b"still echoing\n")  # bytes after the header are the client's, unchanged
        assert await asyncio.wait_for(reader.readline(), 5) == b"still echoing\n"
    finally:
        writer.close()
    assert answer["proxy_protocol"] == "PROXY"
    assert answer["client"] == f"{ours[0]}:{ours[1]}"  # the client's own address and port
    assert answer["peer"] != answer["client"]  # the socket's peer is Envoy's connection
