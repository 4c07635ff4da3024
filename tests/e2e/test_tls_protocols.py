"""TLS modes and protocols proven from the client side through a real Envoy.

Which certificate the client was shown, whether the backend saw TLS, HTTP→HTTPS redirects
(Ingress default and opt-out, every Gateway redirect code), minimum/maximum TLS versions,
certificate rotation without dropping an open connection, WebSocket upgrades, HTTP/2 by ALPN
and gRPC calls (grpcio) through a GRPCRoute over h2c and over TLS. Loopback only, ephemeral
ports, one stack per test, torn down always.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl

import grpc
import pytest
import trustme

from podway.tools.echo import websocket as ws

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
from .harness import Stack, endpoints, eventually, free_port, service

pytestmark = pytest.mark.e2e


def tls_secret(name: str, cert: trustme.LeafCert) -> str:
    crt = "".join(b.bytes().decode() for b in cert.cert_chain_pems)
    return f"""apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{indent(crt)}
  tls.key: |
{indent(cert.private_key_pem.bytes().decode())}
"""


def ingress(name: str, rules: str, *, tls: str = "", annotations: str = "") -> str:
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: default
  annotations: {{{annotations}}}
spec:
  ingressClassName: podway
{tls}  rules:
{rules}"""


def rule(host: str, service: str, port: int = 80, path: str = "/",
         kind: str = "Prefix") -> str:
    backend = f"{{service: {{name: {service}, port: {{number: {port}}}}}}}"
    return f"""  - host: {host}
    http:
      paths:
      - {{path: {path}, pathType: {kind}, backend: {backend}}}
"""


def client_context(ca: trustme.CA, **kw: object) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    for key, value in kw.items():
        setattr(context, key, value)
    return context


async def handshake(port: int, context: ssl.SSLContext, sni: str
                    ) -> tuple[bytes, str | None, str | None]:
    """(DER certificate shown, TLS version, ALPN protocol) of one handshake."""
    async with asyncio.timeout(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                  server_hostname=sni)
        try:
            tls = writer.get_extra_info("ssl_object")
            assert isinstance(tls, ssl.SSLObject)
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            return der, tls.version(), tls.selected_alpn_protocol()
        finally:
            writer.close()


async def https_get(port: int, context: ssl.SSLContext, host: str, path: str = "/"
                    ) -> tuple[int, dict[str, object]]:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                       server_hostname=host)
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
            raw = await reader.read()
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, {}


async def test_ingress_redirects_plain_http_of_tls_hosts_unless_opted_out(
        engine_stack: Stack) -> None:
    """A TLS host answers plain HTTP with 308 to https:// on the HTTPS port (path and query
    kept); ACME challenges and an Ingress with ssl-redirect "false" are served over HTTP; the
    HTTPS side serves both with the wildcard certificate."""
    await backend(engine_stack, "web")
    ca = trustme.CA()
    engine_stack.write("secret.yaml", tls_secret("wild", ca.issue_cert("*.shop.test")))
    tls = "  tls:\n  - {hosts: [\"*.shop.test\"], secretName: wild}\n"
    engine_stack.write("a.yaml", ingress("secure", rule("www.shop.test", "web")
                                  + rule("www.shop.test", "web",
                                         path="/.well-known/acme-challenge", kind="Prefix"),
                                  tls=tls))
    engine_stack.write("b.yaml", ingress("plain", rule("api.shop.test", "web"), tls=tls,
                                  annotations='podway.io/ssl-redirect: "false"'))
    await engine_stack.start()
    status, headers, _ = await request(engine_stack.http_port, "www.shop.test", "/cart?id=7")
    assert status == 308
    assert headers["location"] == f"https://www.shop.test:{engine_stack.https_port}/cart?id=7"
    status, _, body = await request(engine_stack.http_port, "www.shop.test",
                                    "/.well-known/acme-challenge/token")
    assert (status, body.get("name")) == (200, "default/web")
    status, _, body = await request(engine_stack.http_port, "api.shop.test", "/")
    assert (status, body.get("name")) == (200, "default/web")
    context = client_context(ca)
    for host in ("www.shop.test", "api.shop.test"):
        status, body = await https_get(engine_stack.https_port, context, host, "/cart")
        assert (host, status, body.get("name")) == (host, 200, "default/web")


async def test_ingress_re_encrypts_with_the_annotated_ca_and_sni(engine_stack: Stack) -> None:
    """backend-protocol HTTPS + backend-ca-secret + backend-sni: the pod is reached over TLS and
    verified; a pod whose certificate has another name is refused (503), and a CA Secret that
    does not exist fails closed (503) instead of skipping verification."""
    ca = trustme.CA()
    await https_backend(engine_stack, ca, "secure", "secure.internal")
    await https_backend(engine_stack, ca, "impostor", "other.internal")
    engine_stack.write("ca.yaml", f"""apiVersion: v1
kind: Secret
metadata: {{name: backend-ca, namespace: default}}
type: Opaque
stringData:
  ca.crt: |
{indent(ca.cert_pem.bytes().decode())}
""")
    annotations = ("podway.io/backend-protocol: HTTPS, podway.io/backend-ca-secret: {ca}, "
                   "podway.io/backend-sni: secure.internal")
    engine_stack.write("ok.yaml", ingress("ok", rule("ok.test", "secure", 443),
                                   annotations=annotations.format(ca="backend-ca")))
    engine_stack.write("bad.yaml", ingress("bad", rule("bad.test", "impostor", 443),
                                    annotations=annotations.format(ca="backend-ca")))
    engine_stack.write("none.yaml", ingress("none", rule("none.test", "secure", 443),
                                     annotations=annotations.format(ca="missing")))
    await engine_stack.start()
    status, _, body = await request(engine_stack.http_port, "ok.test")
    assert (status, body.get("name"), body.get("tls")) == (200, "secure", True)
    status, _, _ = await request(engine_stack.http_port, "bad.test")
    assert status == 503
    status, _, _ = await request(engine_stack.http_port, "none.test")
    assert status == 503


async def test_gateway_redirects_with_every_allowed_status_code(engine_stack: Stack) -> None:
    """RequestRedirect answers 301, 302, 303, 307 and 308 as written, with the Location the
    filter asks for."""
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    rules = "".join(f"""  - matches: [{{path: {{value: /{code}}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{hostname: to.test, statusCode: {code}}}}}]
""" for code in (301, 302, 303, 307, 308))
    engine_stack.write("route.yaml",
                       route("codes", "  parentRefs: [{name: gw}]\n  rules:\n" + rules))
    await engine_stack.start()
    for code in (301, 302, 303, 307, 308):
        status, headers, _ = await request(port, "from.test", f"/{code}/x")
        assert (status, headers.get("location")) == (code, f"http://to.test:{port}/{code}/x")


async def test_tls_versions_follow_listener_options(engine_stack: Stack) -> None:
    """tls.options podway.io/tls-min-version 1.3 refuses a TLS 1.2-only client and serves 1.3;
    podway.io/tls-max-version 1.2 makes a modern client settle on TLS 1.2."""
    await backend(engine_stack, "web")
    ca = trustme.CA()
    engine_stack.write("secret.yaml", tls_secret("cert", ca.issue_cert("tls.test")))
    strict, old = free_port(), free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway("".join(f"""
  - name: l{port}
    protocol: HTTPS
    port: {port}
    tls:
      certificateRefs: [{{name: cert}}]
      options: {{{option}}}""" for port, option in (
        (strict, 'podway.io/tls-min-version: "1.3"'),
        (old, 'podway.io/tls-max-version: "1.2"'))) + "\n"))
    engine_stack.write("route.yaml", route("web", """  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
"""))
    await engine_stack.start()
    _, version, _ = await handshake(strict, client_context(ca), "tls.test")
    assert version == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        await handshake(strict, client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2),
                        "tls.test")
    _, version, _ = await handshake(old, client_context(ca), "tls.test")
    assert version == "TLSv1.2"


async def test_rotated_certificate_serves_new_handshakes_and_keeps_open_ones(
        stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    """A Secret rewritten with a new certificate: new handshakes get it, while a connection
    opened before the rotation keeps serving requests (the listener was not replaced). No
    private key reaches the logs, even at debug level."""
    caplog.set_level(logging.DEBUG)
    await backend(stack, "web")
    ca = trustme.CA()
    first, second = ca.issue_cert("rot.test"), ca.issue_cert("rot.test")
    stack.write("secret.yaml", tls_secret("rot", first))
    stack.write("ingress.yaml", ingress("rot", rule("rot.test", "web"),
                                        tls="  tls:\n  - {hosts: [rot.test], secretName: rot}\n"))
    await stack.start()
    context = client_context(ca)
    shown, _, _ = await handshake(stack.https_port, context, "rot.test")
    assert shown == ssl.PEM_cert_to_DER_cert(first.cert_chain_pems[0].bytes().decode())
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.https_port, ssl=context,
                                                   server_hostname="rot.test")
    try:
        async def ask() -> int:
            writer.write(b"GET / HTTP/1.1\r\nHost: rot.test\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            return int(head.split(b" ", 2)[1])

        async with asyncio.timeout(5):
            assert await ask() == 200
        stack.write("secret.yaml", tls_secret("rot", second))
        new = ssl.PEM_cert_to_DER_cert(second.cert_chain_pems[0].bytes().decode())

        async def rotated() -> bool:
            return (await handshake(stack.https_port, context, "rot.test"))[0] == new

        await eventually(rotated, within=15)
        async with asyncio.timeout(5):
            assert await ask() == 200  # the connection from before the rotation still serves
    finally:
        writer.close()
    assert caplog.records  # debug logging was on and captured
    assert "PRIVATE KEY" not in caplog.text


@pytest.mark.parametrize("front", ["ingress", "httproute"])
async def test_websocket_upgrade_echoes_through_the_engine(engine_stack: Stack,
                                                           front: str) -> None:
    """Upgrade: websocket through an Ingress route or an HTTPRoute (Gateway API
    HTTPRouteBackendProtocolWebSocket): 101, the backend's identity message, then each message
    echoed on the same connection."""
    await backend(engine_stack, "ws")
    port = engine_stack.http_port
    if front == "ingress":
        engine_stack.write("ingress.yaml", ingress("ws", rule("ws.test", "ws")))
    else:
        port = free_port()
        engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
            f"  - {{name: web, protocol: HTTP, port: {port}}}\n") + "---\n" + route(
            "ws", """  parentRefs: [{name: gw}]
  hostnames: [ws.test]
  rules: [{backendRefs: [{name: ws, port: 80}]}]
"""))
    await engine_stack.start()
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"GET /chat HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\n"
                         f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                         "Sec-WebSocket-Version: 13\r\n\r\n".encode())
            head = (await reader.readuntil(b"\r\n\r\n")).decode().lower()
            assert head.startswith("http/1.1 101"), head
            assert f"sec-websocket-accept: {ws.accept_key(key)}".lower() in head
            buffer = b""

            async def frame() -> ws.Frame:
                nonlocal buffer
                while True:
                    got, used = ws.decode(buffer, masked=False)
                    if got is not None:
                        buffer = buffer[used:]
                        return got
                    buffer += await reader.read(65536)

            hello = await frame()
            assert json.loads(hello.payload)["name"] == "default/ws"
            for message in (b"hello", os.urandom(70000)):
                opcode = ws.TEXT if message == b"hello" else ws.BINARY
                writer.write(ws.encode(opcode, message, mask=os.urandom(4)))
                assert await frame() == ws.Frame(True, opcode, message)
        finally:
            writer.close()


async def test_https_listener_negotiates_http2_by_alpn(engine_stack: Stack) -> None:
    """A client offering h2 and http/1.1 gets h2 from an HTTPS listener; one offering only
    http/1.1 gets it (the engine serves both on one port)."""
    await backend(engine_stack, "web")
    ca = trustme.CA()
    engine_stack.write("secret.yaml", tls_secret("alpn", ca.issue_cert("alpn.test")))
    engine_stack.write("ingress.yaml", ingress("alpn", rule("alpn.test", "web"),
                                        tls="  tls:\n  - {hosts: [alpn.test], secretName: alpn}\n"))
    await engine_stack.start()
    both = client_context(ca)
    both.set_alpn_protocols(["h2", "http/1.1"])
    assert (await handshake(engine_stack.https_port, both, "alpn.test"))[2] == "h2"
    old = client_context(ca)
    old.set_alpn_protocols(["http/1.1"])
    assert (await handshake(engine_stack.https_port, old, "alpn.test"))[2] == "http/1.1"


async def test_grpc_calls_through_a_grpc_route_over_h2c_and_tls(engine_stack: Stack) -> None:
    """A real gRPC client (grpcio) calls a real gRPC server through a GRPCRoute: over plain
    HTTP/2 on an HTTP listener and over TLS (ALPN h2) on an HTTPS listener; an unmatched
    method gets UNIMPLEMENTED from the engine, not from the server."""
    server = grpc.aio.server()

    async def say(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return b"said:" + request

    handler = grpc.method_handlers_generic_handler("echo.Echo", {
        "Say": grpc.unary_unary_rpc_method_handler(say)})
    server.add_generic_rpc_handlers((handler,))
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        engine_stack.write("svc.yaml", f"""apiVersion: v1
kind: Service
metadata: {{name: grpc, namespace: default}}
spec:
  selector: {{app: grpc}}
  ports: [{{name: grpc, port: 50051, targetPort: {grpc_port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: grpc-1
  namespace: default
  labels: {{kubernetes.io/service-name: grpc}}
addressType: IPv4
ports: [{{name: grpc, port: {grpc_port}, protocol: TCP}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
""")
        ca = trustme.CA()
        engine_stack.write("secret.yaml", tls_secret("grpc-tls", ca.issue_cert("grpc.test")))
        plain, secure = free_port(), free_port()
        engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(f"""
  - {{name: http, protocol: HTTP, port: {plain}}}
  - name: https
    protocol: HTTPS
    port: {secure}
    tls: {{certificateRefs: [{{name: grpc-tls}}]}}
"""))
        engine_stack.write("route.yaml", route("grpc", """  parentRefs: [{name: gw}]
  hostnames: [grpc.test]
  rules:
  - matches: [{method: {service: echo.Echo, method: Say}}]
    backendRefs: [{name: grpc, port: 50051}]
""", kind="GRPCRoute"))
        await engine_stack.start()
        options = (("grpc.default_authority", "grpc.test"),)
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
        channels = [
            grpc.aio.insecure_channel(f"127.0.0.1:{plain}", options=options),
            grpc.aio.secure_channel(f"127.0.0.1:{secure}", credentials, options=(
                *options, ("grpc.ssl_target_name_override", "grpc.test"))),
        ]
        try:
            for channel in channels:
                say_rpc = channel.unary_unary("/echo.Echo/Say")
                assert await say_rpc(b"hi", timeout=5) == b"said:hi"
                other = channel.unary_unary("/echo.Echo/Other")
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await other(b"x", timeout=5)
                assert failed.value.code() is grpc.StatusCode.UNIMPLEMENTED
        finally:
            for channel in channels:
                await channel.close()
    finally:
        await server.stop(None)


async def test_https_and_tls_passthrough_share_a_port_and_tls_terminate(stack: Stack) -> None:
    """One port, SNI decides: shop.test is terminated by the engine (its certificate, HTTP
    routed), db.test passes through undecrypted (the backend's own certificate from another CA
    answers). A TLS listener in Terminate mode decrypts and hands plain bytes to a TCP echo:
    the TLSRoute's for its SNI, a TCPRoute's for any other."""
    await backend(stack, "shop")
    await backend(stack, "mq", tcp=True)
    await backend(stack, "raw", tcp=True)
    edge_ca, backend_ca = trustme.CA(), trustme.CA()
    await tls_backend(stack, backend_ca, "db.test")
    stack.write("secrets.yaml", tls_secret("shop-tls", edge_ca.issue_cert("shop.test"))
                + "---\n" + tls_secret("mq-tls", edge_ca.issue_cert("mq.test")))
    shared, terminate = free_port(), free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(f"""
  - name: https
    protocol: HTTPS
    port: {shared}
    hostname: shop.test
    tls: {{certificateRefs: [{{name: shop-tls}}]}}
  - {{name: tls, protocol: TLS, port: {shared}, hostname: db.test, tls: {{mode: Passthrough}}}}
  - name: terminate
    protocol: TLS
    port: {terminate}
    tls: {{mode: Terminate, certificateRefs: [{{name: mq-tls}}]}}
"""))
    stack.write("routes.yaml", "---\n".join([
        route("shop", """  parentRefs: [{name: gw, sectionName: https}]
  rules: [{backendRefs: [{name: shop, port: 80}]}]
"""),
        route("db", """  parentRefs: [{name: gw, sectionName: tls}]
  rules: [{backendRefs: [{name: db, port: 443}]}]
""", kind="TLSRoute", version="v1alpha2"),
        route("mq", """  parentRefs: [{name: gw, sectionName: terminate}]
  hostnames: [mq.test]
  rules: [{backendRefs: [{name: mq, port: 80}]}]
""", kind="TLSRoute", version="v1alpha2"),
        route("raw", """  parentRefs: [{name: gw, sectionName: terminate}]
  rules: [{backendRefs: [{name: raw, port: 80}]}]
""", kind="TCPRoute", version="v1alpha2")]))
    await stack.start()
    edge = client_context(edge_ca)
    status, body = await https_get(shared, edge, "shop.test")
    assert (status, body.get("name")) == (200, "default/shop")
    passthrough = client_context(backend_ca)
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", shared, ssl=passthrough,
                                                       server_hostname="db.test")
        try:
            writer.write(b"hello\n")
            assert await reader.readline() == b"db.test\n"  # the backend terminated TLS
        finally:
            writer.close()
    with pytest.raises(ssl.SSLCertVerificationError):  # db.test is not the edge's certificate
        await handshake(shared, edge, "db.test")
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", terminate, ssl=edge,
                                                       server_hostname="mq.test")
        try:
            writer.write(b"whoami\n")
            who = json.loads(await reader.readline())
            assert who["name"] == "default/mq"  # plain bytes reached the TCP echo
        finally:
            writer.close()
    # Any other SNI on the Terminate listener: decrypted and handed to the TCPRoute.
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", terminate, ssl=client_context(edge_ca, check_hostname=False),
            server_hostname="other.test")
        try:
            writer.write(b"whoami\n")
            assert json.loads(await reader.readline())["name"] == "default/raw"
        finally:
            writer.close()


async def test_ingress_tls_passthrough_beside_termination(stack: Stack) -> None:
    """podway.io/tls-passthrough: db.test reaches its pod undecrypted on the shared HTTPS port
    (the pod's own certificate, another CA), while shop.test is terminated there by the engine."""
    await backend(stack, "shop")
    edge_ca, backend_ca = trustme.CA(), trustme.CA()
    await tls_backend(stack, backend_ca, "db.test")
    stack.write("secret.yaml", tls_secret("shop-tls", edge_ca.issue_cert("shop.test")))
    tls = "  tls:\n  - {hosts: [shop.test], secretName: shop-tls}\n"
    stack.write("shop.yaml", ingress("shop", rule("shop.test", "shop"), tls=tls))
    stack.write("db.yaml", ingress("db", rule("db.test", "db", 443),
                                   annotations='podway.io/tls-passthrough: "true"'))
    await stack.start()
    status, body = await https_get(stack.https_port, client_context(edge_ca), "shop.test")
    assert (status, body.get("name")) == (200, "default/shop")
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", stack.https_port, ssl=client_context(backend_ca),
            server_hostname="db.test")
        try:
            writer.write(b"hello\n")
            assert await reader.readline() == b"db.test\n"
        finally:
            writer.close()


async def test_tcp_route_rules_form_one_weighted_split(engine_stack: Stack) -> None:
    """A TCPRoute with two rules (weights 3 and 1): connections reach both backends, in
    proportion within statistical bounds."""
    await backend(engine_stack, "heavy", tcp=True)
    await backend(engine_stack, "light", tcp=True)
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: tcp, protocol: TCP, port: {port}}}\n"))
    engine_stack.write("route.yaml", route("split", """  parentRefs: [{name: gw, sectionName: tcp}]
  rules:
  - backendRefs: [{name: heavy, port: 80, weight: 3}]
  - backendRefs: [{name: light, port: 80, weight: 1}]
""", kind="TCPRoute", version="v1alpha2"))
    await engine_stack.start()
    seen = {"default/heavy": 0, "default/light": 0}
    for _ in range(80):
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"whoami\n")
                seen[json.loads(await reader.readline())["name"]] += 1
            finally:
                writer.close()
    # Binomial(80, 1/4) for light: outside 6..34 has probability below 1e-3; 0 = first rule only.
    assert 6 <= seen["default/light"] <= 34, seen


async def test_backend_ref_header_filters_apply_to_their_share_only(engine_stack: Stack) -> None:
    """backendRef filters: requests to the filtered share carry its request header and answer
    with its response header; the unfiltered share of the same Service carries neither."""
    await backend(engine_stack, "web")
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    engine_stack.write("route.yaml", route("split", """  parentRefs: [{name: gw}]
  rules:
  - backendRefs:
    - name: web
      port: 80
      filters:
      - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Share, value: a}]}}
      - {type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: X-Was, value: a}]}}
    - {name: web, port: 80}
"""))
    await engine_stack.start()
    seen: dict[str, int] = {"a": 0, "none": 0}
    for _ in range(40):
        status, headers, body = await request(port, "x.test")
        assert status == 200
        sent = body.get("headers")
        assert isinstance(sent, dict)
        share = sent.get("x-share", "none")
        assert headers.get("x-was", "none") == share  # request and response edits go together
        seen[share] += 1
    # Binomial(40, 1/2): outside 8..32 has probability below 1e-4.
    assert 8 <= seen["a"] <= 32, seen


async def test_cors_filter_answers_preflights_for_allowed_origins(stack: Stack) -> None:
    """HTTPRoute CORS filter: a preflight from an allowed origin (exact, or a subdomain of a
    wildcard) is answered with the allowed methods and max age; another origin gets no
    Access-Control-Allow-Origin; a simple request echoes the origin and exposes headers."""
    await backend(stack, "web")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("route.yaml", route("cors", """  parentRefs: [{name: gw}]
  rules:
  - filters:
    - type: CORS
      cors:
        allowOrigins: ["https://app.test", "https://*.apps.test"]
        allowMethods: [GET, PUT]
        allowHeaders: [X-Token]
        exposeHeaders: [X-Trace]
        maxAge: 600
    backendRefs: [{name: web, port: 80}]
"""))
    await stack.start()
    preflight = {"Origin": "", "Access-Control-Request-Method": "PUT"}
    for origin in ("https://app.test", "https://a.b.apps.test"):
        status, headers, _ = await request(port, "x.test", "/item", method="OPTIONS",
                                           headers={**preflight, "Origin": origin})
        assert (origin, status, headers.get("access-control-allow-origin")) == (
            origin, 200, origin)
        assert headers.get("access-control-allow-methods") == "GET,PUT"
        assert headers.get("access-control-max-age") == "600"
    _, headers, _ = await request(port, "x.test", "/item", method="OPTIONS",
                                  headers={**preflight, "Origin": "https://evil.test"})
    assert "access-control-allow-origin" not in headers
    status, headers, body = await request(port, "x.test", "/item",
                                          headers={"Origin": "https://app.test"})
    assert (status, body.get("name")) == (200, "default/web")
    assert headers.get("access-control-allow-origin") == "https://app.test"
    assert headers.get("access-control-expose-headers") == "X-Trace"


async def test_ingress_backend_protocol_h2c_reaches_the_pod_over_http2(engine_stack: Stack) -> None:
    """podway.io/backend-protocol: H2C: an HTTP/1.1 client's request reaches the pod over
    HTTP/2 (the echo says which protocol it was asked in); without it, HTTP/1.1."""
    await backend(engine_stack, "web")
    engine_stack.write("h2.yaml", ingress("h2", rule("h2.test", "web"),
                                   annotations="podway.io/backend-protocol: H2C"))
    engine_stack.write("h1.yaml", ingress("h1", rule("h1.test", "web")))
    await engine_stack.start()
    for host, protocol in (("h2.test", "HTTP/2"), ("h1.test", "HTTP/1.1")):
        status, _, body = await request(engine_stack.http_port, host)
        assert (host, status, body.get("protocol")) == (host, 200, protocol)


async def test_ingress_tls_min_version_annotation(engine_stack: Stack) -> None:
    """podway.io/tls-min-version "1.3" on one Ingress: its host refuses a TLS 1.2-only client,
    while another Ingress's host on the same HTTPS port still accepts TLS 1.2."""
    await backend(engine_stack, "web")
    ca = trustme.CA()
    engine_stack.write("secrets.yaml", tls_secret("new", ca.issue_cert("new.test")) + "---\n"
                + tls_secret("old", ca.issue_cert("old.test")))
    engine_stack.write("new.yaml", ingress("new", rule("new.test", "web"),
                                    tls="  tls:\n  - {hosts: [new.test], secretName: new}\n",
                                    annotations='podway.io/tls-min-version: "1.3"'))
    engine_stack.write("old.yaml", ingress("old", rule("old.test", "web"),
                                    tls="  tls:\n  - {hosts: [old.test], secretName: old}\n"))
    await engine_stack.start()
    tls12 = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    with pytest.raises(ssl.SSLError):
        await handshake(engine_stack.https_port, tls12, "new.test")
    assert (await handshake(engine_stack.https_port, tls12, "old.test"))[1] == "TLSv1.2"
    newest = await handshake(engine_stack.https_port, client_context(ca), "new.test")
    assert newest[1] == "TLSv1.3"


async def test_ingress_default_certificate_for_unknown_or_missing_sni(engine_stack: Stack) -> None:
    """SNI picks a host's own certificate; an unknown SNI, or none, gets the default one (a
    TLS entry without hosts)."""
    await backend(engine_stack, "web")
    ca = trustme.CA()
    own, default = ca.issue_cert("a.test"), ca.issue_cert("default.test")
    engine_stack.write("secrets.yaml", tls_secret("a", own) + "---\n" + tls_secret("dflt", default))
    engine_stack.write("ingress.yaml", ingress("sni", rule("a.test", "web") + rule("b.test", "web"),
                                        tls="  tls:\n  - {hosts: [a.test], secretName: a}\n"
                                            "  - {secretName: dflt}\n"))
    await engine_stack.start()

    def der(cert: trustme.LeafCert) -> bytes:
        return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())

    loose = client_context(ca, check_hostname=False)
    assert (await handshake(engine_stack.https_port, loose, "a.test"))[0] == der(own)
    assert (await handshake(engine_stack.https_port, loose, "b.test"))[0] == der(default)
    async with asyncio.timeout(5):
        _, writer = await asyncio.open_connection("127.0.0.1", engine_stack.https_port, ssl=loose)
        try:
            shown = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        finally:
            writer.close()
    assert shown == der(default)


async def test_grpc_through_an_ingress_over_h2c_and_re_encrypted(engine_stack: Stack) -> None:
    """podway.io/backend-protocol GRPC (plain HTTP/2 to the pod) and GRPCS (TLS with ALPN h2,
    verified with backend-ca-secret and backend-sni): a grpcio client's call succeeds through
    the Ingress HTTP listener to both."""
    ca = trustme.CA()
    servers = []

    async def say(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return b"said:" + request

    handler = grpc.method_handlers_generic_handler("echo.Echo", {
        "Say": grpc.unary_unary_rpc_method_handler(say)})
    leaf = ca.issue_cert("grpc.internal")
    ports: dict[str, int] = {}
    for name, secure in (("plain", False), ("secure", True)):
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        if secure:
            credentials = grpc.ssl_server_credentials([(leaf.private_key_pem.bytes(),
                                                        leaf.cert_chain_pems[0].bytes())])
            ports[name] = server.add_secure_port("127.0.0.1:0", credentials)
        else:
            ports[name] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
    try:
        for name, port in ports.items():
            engine_stack.write(f"svc-{name}.yaml", service(name, 80, port) + "---\n"
                        + endpoints(name, {"TCP": port}))
        engine_stack.write("ca.yaml", f"""apiVersion: v1
kind: Secret
metadata: {{name: grpc-ca, namespace: default}}
type: Opaque
stringData:
  ca.crt: |
{indent(ca.cert_pem.bytes().decode())}
""")
        engine_stack.write("plain.yaml", ingress("plain", rule("plain.test", "plain"),
                                          annotations="podway.io/backend-protocol: GRPC"))
        engine_stack.write("secure.yaml", ingress("secure", rule("secure.test", "secure"),
                                                  annotations=(
            "podway.io/backend-protocol: GRPCS, podway.io/backend-ca-secret: grpc-ca, "
            "podway.io/backend-sni: grpc.internal")))
        await engine_stack.start()
        for host in ("plain.test", "secure.test"):
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{engine_stack.http_port}",
                                                options=(("grpc.default_authority", host),))
            try:
                call = channel.unary_unary("/echo.Echo/Say")
                assert (host, await call(b"hi", timeout=5)) == (host, b"said:hi")
            finally:
                await channel.close()
    finally:
        for server in servers:
            await server.stop(None)


async def test_backend_tls_policy_subject_alt_names_verify_the_pod(stack: Stack) -> None:
    """BackendTLSPolicy subjectAltNames: a pod whose certificate carries the listed SAN (not
    the hostname sent as SNI) is accepted; one without it is refused (503)."""
    ca = trustme.CA()
    await https_backend(stack, ca, "good", "api.internal")
    await https_backend(stack, ca, "wrong", "other.internal")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("ca.yaml", f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: ca, namespace: default}}
data:
  ca.crt: |
{indent(ca.cert_pem.bytes().decode())}
""")
    stack.write("policies.yaml", "---\n".join(f"""apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: "", kind: Service, name: {name}}}]
  validation:
    caCertificateRefs: [{{group: "", kind: ConfigMap, name: ca}}]
    hostname: sni.internal
    subjectAltNames: [{{type: Hostname, hostname: api.internal}}]
""" for name in ("good", "wrong")))
    stack.write("route.yaml", route("r", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /good}}]
    backendRefs: [{name: good, port: 443}]
  - matches: [{path: {value: /wrong}}]
    backendRefs: [{name: wrong, port: 443}]
"""))
    await stack.start()
    status, _, body = await request(port, "x.test", "/good")
    assert (status, body.get("name"), body.get("tls")) == (200, "good", True)
    status, _, _ = await request(port, "x.test", "/wrong")
    assert status == 503
