"""Gateway API beyond plain HTTP through a real Envoy: TLS passthrough by SNI, TCP and UDP
routes, BackendTLSPolicy re-encryption, and gRPC routing over h2c. Loopback only, ephemeral
ports, one stack per test, torn down always.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl

import h2.config
import h2.connection
import h2.events
import pytest
import trustme

from .gateway_helpers import (
    CLASS,
    backend,
    gateway,
    https_backend,
    indent,
    request,
    route,
    tls_backend,
)
from .harness import Stack, free_port, free_port_both

pytestmark = pytest.mark.e2e


async def test_tls_passthrough_tcp_and_udp_routes(stack: Stack) -> None:
    """TLSRoute picks the backend by SNI without decrypting; TCPRoute and UDPRoute forward."""
    ca = trustme.CA()
    await tls_backend(stack, ca, "alpha.tls.test")
    await tls_backend(stack, ca, "beta.tls.test")
    await backend(stack, "l4", tcp=True, udp=True)
    tls_port, tcp_port, udp_port = free_port(), free_port(), free_port_both()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(f"""
  - {{name: tls, protocol: TLS, port: {tls_port}, tls: {{mode: Passthrough}}}}
  - {{name: tcp, protocol: TCP, port: {tcp_port}}}
  - {{name: udp, protocol: UDP, port: {udp_port}}}
"""))
    stack.write("routes.yaml", "---\n".join([
        route(name, f"""  parentRefs: [{{name: gw, sectionName: tls}}]
  hostnames: [{name}.tls.test]
  rules: [{{backendRefs: [{{name: {name}, port: 443}}]}}]
""", kind="TLSRoute", version="v1alpha2") for name in ("alpha", "beta")] + [
        route("tcp", """  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: l4, port: 80}]}]
""", kind="TCPRoute", version="v1alpha2"),
        route("udp", """  parentRefs: [{name: gw, sectionName: udp}]
  rules: [{backendRefs: [{name: l4, port: 80}]}]
""", kind="UDPRoute", version="v1alpha2")]))
    await stack.start()
    for host in ("alpha.tls.test", "beta.tls.test"):
        context = ssl.create_default_context()
        ca.configure_trust(context)
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", tls_port, ssl=context,
                                                           server_hostname=host)
            try:
                writer.write(b"hello\n")
                assert await reader.readline() == f"{host}\n".encode()
                # The certificate is the backend's own: Envoy did not terminate TLS.
                peer = writer.get_extra_info("peercert")
                assert any(v == host for _, v in peer["subjectAltName"])
            finally:
                writer.close()

    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", tcp_port)
        try:
            writer.write(b"over tcp\n")
            assert await reader.readline() == b"over tcp\n"
        finally:
            writer.close()

    loop = asyncio.get_running_loop()
    got: asyncio.Future[bytes] = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            if not got.done():
                got.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1",
                                                                             udp_port))
    try:
        transport.sendto(b"over udp")
        async with asyncio.timeout(5):
            assert await got == b"over udp"
    finally:
        transport.close()


async def test_backend_tls_policy_re_encrypts_and_verifies(engine_stack: Stack) -> None:
    """BackendTLSPolicy: TLS to the pod with the policy's CA and hostname; a certificate for
    another name is refused (503), and a policy whose CA is missing fails closed (500)."""
    ca = trustme.CA()
    await https_backend(engine_stack, ca, "secure", "secure.internal")
    await https_backend(engine_stack, ca, "impostor", "someone-else.internal")
    await https_backend(engine_stack, ca, "no-ca", "no-ca.internal")
    ca_pem = ca.cert_pem.bytes().decode()
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    policies = [f"""apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: "", kind: Service, name: {name}}}]
  validation:
    caCertificateRefs: [{{group: "", kind: ConfigMap, name: {ca_name}}}]
    hostname: {hostname}
""" for name, hostname, ca_name in (("secure", "secure.internal", "ca"),
                                    ("impostor", "impostor.internal", "ca"),
                                    ("no-ca", "no-ca.internal", "missing"))]
    engine_stack.write("tls.yaml", "---\n".join([*policies, f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: ca, namespace: default}}
data:
  ca.crt: |
{indent(ca_pem)}
"""]))
    engine_stack.write("route.yaml", route("tls", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /secure}}]
    backendRefs: [{name: secure, port: 443}]
  - matches: [{path: {value: /impostor}}]
    backendRefs: [{name: impostor, port: 443}]
  - matches: [{path: {value: /no-ca}}]
    backendRefs: [{name: no-ca, port: 443}]
"""))
    await engine_stack.start()
    status, _, body = await request(port, "x.test", "/secure")
    assert (status, body.get("name"), body.get("tls")) == (200, "secure", True)
    status, _, body = await request(port, "x.test", "/impostor")
    assert status == 503, body
    status, _, _ = await request(port, "x.test", "/no-ca")
    assert status == 500


async def test_backend_tls_policy_with_system_trust_refuses_unknown_ca(engine_stack: Stack) -> None:
    """wellKnownCACertificates: System must not trust a private CA's certificate (503)."""
    ca = trustme.CA()
    await https_backend(engine_stack, ca, "private", "private.internal")
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    engine_stack.write("tls.yaml", """apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: private, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: private}]
  validation: {wellKnownCACertificates: System, hostname: private.internal}
""")
    engine_stack.write("route.yaml", route("r", """  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: private, port: 443}]}]
"""))
    await engine_stack.start()
    status, _, _ = await request(port, "x.test", "/")
    assert status == 503


def _grpc_call(port: int, path: str, headers: dict[str, str]) -> tuple[str, bytes]:
    """One HTTP/2 (prior knowledge) gRPC-shaped POST: the :status and the response body."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", path),
                              (":authority", "grpc.example.com"),
                              ("content-type", "application/grpc"), ("te", "trailers"),
                              *headers.items()])
        conn.send_data(1, b"\x00\x00\x00\x00\x00", end_stream=True)
        sock.sendall(conn.data_to_send())
        status, body, done = "", b"", False
        while not done:
            data = sock.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers).get(b":status", b"").decode()
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length,
                                                   event.stream_id)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    done = True
            sock.sendall(conn.data_to_send())
    return status, body


async def test_grpc_routes_by_service_method_and_header(stack: Stack) -> None:
    """GRPCRoute matches /service/method (regex alternatives stay within their part) and
    headers; the backend is reached over HTTP/2."""
    for name in ("say", "echo-any", "tenant", "rest", "regex"):
        await backend(stack, name)
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("route.yaml", route("grpc", """  parentRefs: [{name: gw}]
  hostnames: [grpc.example.com]
  rules:
  - matches: [{method: {service: echo.Echo, method: Say}}]
    backendRefs: [{name: say, port: 80}]
  - matches: [{method: {service: echo.Echo}, headers: [{name: x-tenant, value: blue}]}]
    backendRefs: [{name: tenant, port: 80}]
  - matches: [{method: {service: echo.Echo}}]
    backendRefs: [{name: echo-any, port: 80}]
  - matches: [{method: {type: RegularExpression, service: 'alt\\.A|alt\\.B', method: Get|Put}}]
    backendRefs: [{name: regex, port: 80}]
  - backendRefs: [{name: rest, port: 80}]
""", kind="GRPCRoute"))
    await stack.start()
    cases = [("/echo.Echo/Say", {}, "default/say"),
             ("/echo.Echo/Other", {}, "default/echo-any"),
             ("/echo.Echo/Other", {"x-tenant": "blue"}, "default/tenant"),
             ("/other.Svc/Say", {}, "default/rest"),
             ("/alt.A/Put", {}, "default/regex"),
             ("/alt.B/Get", {}, "default/regex"),
             ("/alt.C/Get", {}, "default/rest"),
             ("/alt.A/Delete", {}, "default/rest")]
    for path, headers, name in cases:
        status, body = await asyncio.to_thread(_grpc_call, port, path, headers)
        data = json.loads(body)
        assert (path, status, data.get("name"), data.get("protocol")) == (
            path, "200", name, "HTTP/2")


async def test_tcp_route_share_with_unusable_backend_is_refused(engine_stack: Stack) -> None:
    """A TCPRoute share whose Service is missing closes its part of connections (~half of 40)."""
    await backend(engine_stack, "l4", tcp=True)
    tcp_port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: tcp, protocol: TCP, port: {tcp_port}}}\n"))
    engine_stack.write("routes.yaml", route("split", """  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: l4, port: 80, weight: 1}, {name: ghost, port: 80, weight: 1}]}]
""", kind="TCPRoute", version="v1alpha2"))
    await engine_stack.start()
    echoed = closed = 0
    for _ in range(40):
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", tcp_port)
            try:
                writer.write(b"ping\n")
                line = await reader.readline()
            except ConnectionError:
                line = b""
            finally:
                writer.close()
        if line == b"ping\n":
            echoed += 1
        else:
            assert line == b""
            closed += 1
    # Binomial(40, 1/2): outside 8..32 has probability below 1e-4.
    assert 8 <= echoed <= 32, (echoed, closed)
    assert echoed + closed == 40
