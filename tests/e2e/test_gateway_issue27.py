"""Gateway API cases the upstream conformance suite expects and Podway once got wrong (issue 27),
through a real Envoy in standalone mode: retries without codes, filters on one backendRef, two
TCPRoutes on one TCP listener. Loopback only, ephemeral ports, one stack per test.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections import Counter

import pytest
import trustme
import yaml

from tests.waiting import eventually

from .gateway_helpers import CLASS, backend, gateway, request, route
from .harness import Stack, endpoints, free_port, service

pytestmark = pytest.mark.e2e


async def _flaky(fail: str, answered: list[str]) -> tuple[int, asyncio.Server]:
    """A backend whose first attempt of each request fails (``fail``: "reset" closes the
    connection with a TCP reset once the request arrived, "slow" answers after 2 s) and whose
    next attempt answers 200; ``answered`` gets one entry per attempt it saw (health checks
    are answered and not counted)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.split(b" ")[1].startswith(f"/{fail}".encode()):  # not a health check
                answered.append(fail)
            if len(answered) % 2 == 1:
                if fail == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                await asyncio.sleep(2)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    port = free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    return port, server


async def test_retry_without_codes_retries_resets_and_per_try_timeouts(stack: Stack) -> None:
    """``retry: {attempts: 2}`` with no codes: a reset and a per-try timeout are retried (the
    API's "SHOULD retry on connection errors if a retry stanza is configured")."""
    seen: dict[str, list[str]] = {"reset": [], "slow": []}
    servers = []
    for name, attempts in seen.items():
        target, server = await _flaky(name, attempts)
        servers.append(server)
        stack.write(f"svc-{name}.yaml", service(name, 80, target) + "---\n"
                    + endpoints(name, {"TCP": target}))
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: web, protocol: HTTP, port: {port}}}\n"))
    stack.write("route.yaml", route("retries", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /reset}}]
    retry: {attempts: 2}
    backendRefs: [{name: reset, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /slow}}]
    retry: {attempts: 2}
    timeouts: {request: 10s, backendRequest: 500ms}
    backendRefs: [{name: slow, port: 80}]
"""))
    try:
        await stack.start()
        for name, attempts in seen.items():
            status, _, _ = await request(port, "app.example", f"/{name}")
            assert (name, status, len(attempts)) == (name, 200, 2)
    finally:
        for server in servers:
            server.close()


async def test_two_tcp_routes_on_one_listener_both_accepted_oldest_serves(stack: Stack) -> None:
    """Two TCPRoutes on one TCP listener: both Accepted, ``attachedRoutes: 2``, and every
    connection reaches the older route's backend (the conformance suite's
    TCPRouteMultipleRoutesAttachment)."""
    older_port = await stack.start_echo("default/older", tcp=True)

    async def newer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"newer\n")
        await writer.drain()
        writer.close()

    newer_port = free_port()
    server = await asyncio.start_server(newer, "127.0.0.1", newer_port)
    for name, target in (("older", older_port), ("newer", newer_port)):
        stack.write(f"svc-{name}.yaml", service(name, 80, target) + "---\n"
                    + endpoints(name, {"TCP": target}))
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: tcp, protocol: TCP, port: {port}}}\n"))
    stack.write("routes.yaml", "---\n".join(
        route(name, f"""  parentRefs: [{{name: gw, sectionName: tcp}}]
  rules: [{{backendRefs: [{{name: {name}, port: 80}}]}}]
""", kind="TCPRoute", version="v1alpha2", created=created)
        for name, created in (("newer", "2024-01-02T00:00:00Z"),
                              ("older", "2024-01-01T00:00:00Z"))))
    try:
        await stack.start()
        for _ in range(20):
            async with asyncio.timeout(5):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                try:
                    writer.write(b"older\n")
                    assert await reader.readline() == b"older\n"
                finally:
                    writer.close()
    finally:
        server.close()
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    listener = objects["Gateway/default/gw"]["status"]["listeners"][0]
    assert listener["attachedRoutes"] == 2
    for name in ("older", "newer"):
        parent = objects[f"TCPRoute/default/{name}"]["status"]["parents"][0]
        conditions = {c["type"]: (c["status"], c["reason"]) for c in parent["conditions"]}
        assert conditions["Accepted"] == ("True", "Accepted")


async def test_gateway_address_that_cannot_be_bound_is_not_moved(stack: Stack) -> None:
    """Standalone without --manifest-addresses: a Gateway asking for 127.0.0.2 is
    Programmed=False/AddressNotUsable and binds nothing, so a younger Gateway without addresses
    keeps the same port on the configured address."""
    await backend(stack, "web")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: web, protocol: HTTP, port: {port}}}\n", name="elsewhere").replace(
        "  gatewayClassName: podway\n",
        '  gatewayClassName: podway\n  addresses: [{type: IPAddress, value: 127.0.0.2}]\n')
        .replace("namespace: default}", 'namespace: default, creationTimestamp: '
                 '"2024-01-01T00:00:00Z"}') + "---\n" + gateway(
        f"  - {{name: web, protocol: HTTP, port: {port}}}\n", name="here").replace(
        "namespace: default}", 'namespace: default, creationTimestamp: "2024-01-02T00:00:00Z"}'))
    stack.write("route.yaml", route("web", """  parentRefs: [{name: here}, {name: elsewhere}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
"""))
    await stack.start()
    status, _, body = await request(port, "app.example", "/")
    assert (status, body.get("name")) == (200, "default/web")
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in
                  objects["Gateway/default/elsewhere"]["status"]["conditions"]}
    assert conditions == {"Accepted": ("True", "Accepted"),
                          "Programmed": ("False", "AddressNotUsable")}
    assert not objects["Gateway/default/elsewhere"]["status"].get("addresses")
    here = {c["type"]: c["status"] for c in objects["Gateway/default/here"]["status"]["conditions"]}
    assert here["Programmed"] == "True"


async def test_redirect_and_rewrite_on_one_backend_ref(engine_stack: Stack) -> None:
    """Filters on a backendRef apply to the requests sent to that backendRef only: of three
    equal shares one is redirected, one rewritten on its way to ``one``, one forwarded to
    ``two`` as is — each about a third (one draw per request decides the share)."""
    for name in ("one", "two"):
        await backend(engine_stack, name)
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: web, protocol: HTTP, port: {port}}}\n"))
    engine_stack.write("route.yaml", route("split", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /app}}]
    backendRefs:
    - name: one
      port: 80
      filters: [{type: RequestRedirect, requestRedirect: {hostname: moved.example,
                                                          statusCode: 301}}]
    - name: one
      port: 80
      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch,
                                                       replacePrefixMatch: /v2}}}]
    - name: two
      port: 80
"""))
    await engine_stack.start()
    seen: Counter[str] = Counter()
    n = 300
    for _ in range(n):
        status, headers, body = await request(port, "app.example", "/app/x")
        if status == 301:
            assert headers["location"] == f"http://moved.example:{port}/app/x"
            seen["redirected"] += 1
        else:
            assert status == 200
            seen[f"{body.get('name')} {body.get('path')}"] += 1
    assert set(seen) == {"redirected", "default/one /v2/x", "default/two /app/x"}, seen
    # Binomial(300, 1/3): outside 70..130 has probability below 1e-3 per share.
    assert all(70 <= c <= 130 for c in seen.values()), seen


async def _recording(delay_s: float, seen: list[str]) -> tuple[int, asyncio.Server]:
    """A backend that records each request's path (health checks excluded) and answers 200
    after ``delay_s``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            if path.startswith("/app"):
                seen.append(path)
                await asyncio.sleep(delay_s)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    port = free_port()
    return port, await asyncio.start_server(serve, "127.0.0.1", port)


async def test_mirror_percentage_request_timeout_and_supported_features(stack: Stack) -> None:
    """RequestMirror copies every request (and about half with ``percent: 50``) to its
    backend; ``timeouts.request`` answers 504 when the backend is slower; the GatewayClass
    lists the features Podway claims, sorted."""
    mirrored: list[str] = []
    slow_seen: list[str] = []
    mirror_port, mirror = await _recording(0, mirrored)
    slow_port, slow = await _recording(3, slow_seen)
    await backend(stack, "web")
    for name, target in (("mirror", mirror_port), ("slow", slow_port)):
        stack.write(f"svc-{name}.yaml", service(name, 80, target) + "---\n"
                    + endpoints(name, {"TCP": target}))
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: web, protocol: HTTP, port: {port}}}\n"))
    stack.write("route.yaml", route("features", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /app/all}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: mirror, port: 80}}}]
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /app/half}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: mirror, port: 80},
                                                    percent: 50}}]
    backendRefs: [{name: web, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /app/slow}}]
    timeouts: {request: 300ms}
    backendRefs: [{name: slow, port: 80}]
"""))
    try:
        await stack.start()
        for _ in range(10):
            status, _, body = await request(port, "app.example", "/app/all")
            assert (status, body.get("name")) == (200, "default/web")
        n = 200
        for _ in range(n):
            status, _, _ = await request(port, "app.example", "/app/half")
            assert status == 200
        loop = asyncio.get_running_loop()
        started = loop.time()
        status, _, _ = await request(port, "app.example", "/app/slow")
        assert status == 504
        assert loop.time() - started < 2.5  # cut at the timeout, not the backend's 3 s
        assert slow_seen == ["/app/slow"]

        # Mirrors are sent beside the answer: wait for them.
        await eventually(lambda: mirrored.count("/app/all") == 10)
        half = mirrored.count("/app/half")
        # Binomial(200, 1/2): outside 65..135 has probability below 1e-5.
        assert 65 <= half <= 135, half
    finally:
        mirror.close()
        slow.close()
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    features = [f["name"] for f in objects["GatewayClass/podway"]["status"]["supportedFeatures"]]
    assert features == sorted(features)
    assert {"Gateway", "HTTPRoute", "HTTPRouteRequestMirror", "HTTPRouteRequestTimeout",
            "HTTPRouteRetryConnectionError"} <= set(features)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


async def _https(port: int, context: ssl.SSLContext) -> int:
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                       server_hostname="shop.test")
        try:
            writer.write(b"GET / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
            raw = await reader.read()
        finally:
            writer.close()
    return int(raw.split(b" ", 2)[1])


async def test_frontend_client_certificate_validation_per_port(stack: Stack) -> None:
    """Gateway spec.tls.frontend: the default (AllowValidOnly, a ConfigMap's ca.crt) serves a
    client whose certificate the CA issued and refuses one without a certificate or with
    another CA's in the handshake; a perPort AllowInsecureFallback lets both through, and the
    Gateway says so (InsecureFrontendValidationMode)."""
    server_ca, client_ca, other_ca = trustme.CA(), trustme.CA(), trustme.CA()
    cert = server_ca.issue_cert("shop.test")
    await backend(stack, "web")
    strict, loose = free_port(), free_port()
    stack.write("tls.yaml", f"""apiVersion: v1
kind: Secret
metadata: {{name: shop-tls, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{_indent(cert.cert_chain_pems[0].bytes().decode())}
  tls.key: |
{_indent(cert.private_key_pem.bytes().decode())}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: client-ca, namespace: default}}
data:
  ca.crt: |
{_indent(client_ca.cert_pem.bytes().decode())}
""")
    listeners = "".join(f"""
  - name: {name}
    protocol: HTTPS
    port: {port}
    tls: {{certificateRefs: [{{name: shop-tls}}]}}""" for name, port in (("strict", strict),
                                                                        ("loose", loose)))
    frontend = f"""  tls:
    frontend:
      default:
        validation: {{caCertificateRefs: [{{group: "", kind: ConfigMap, name: client-ca}}]}}
      perPort:
      - port: {loose}
        tls:
          validation:
            caCertificateRefs: [{{group: "", kind: ConfigMap, name: client-ca}}]
            mode: AllowInsecureFallback
"""
    stack.write("gw.yaml", CLASS + "---\n" + gateway(listeners + "\n").replace(
        "  listeners:\n", frontend + "  listeners:\n"))
    stack.write("route.yaml", route("web", """  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
"""))
    await stack.start()

    def context(ca: trustme.CA | None) -> ssl.SSLContext:
        out = ssl.create_default_context()
        server_ca.configure_trust(out)
        if ca is not None:
            ca.issue_cert("client@shop.test").configure_cert(out)
        return out

    assert await _https(strict, context(client_ca)) == 200
    for ca in (None, other_ca):
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await _https(strict, context(ca))
    for ca in (client_ca, None, other_ca):
        assert await _https(loose, context(ca)) == 200
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    conditions = {c["type"]: (c["status"], c["reason"])
                  for c in objects["Gateway/default/gw"]["status"]["conditions"]}
    assert conditions["InsecureFrontendValidationMode"] == ("True", "ConfigurationChanged")
    assert conditions["Programmed"] == ("True", "Programmed")


async def test_http_route_to_an_h2c_service_port_speaks_http2(engine_stack: Stack) -> None:
    """A backendRef to a Service port with appProtocol kubernetes.io/h2c is reached over
    HTTP/2 without TLS (HTTPRouteBackendProtocolH2C); the same pod behind a plain port gets
    HTTP/1.1."""
    target = await engine_stack.start_echo("default/web")
    engine_stack.write("svc.yaml", service("web", 80, target).replace(
        "protocol: TCP}", "protocol: TCP, appProtocol: kubernetes.io/h2c}") + "---\n"
        + endpoints("web", {"TCP": target}) + "---\n"
        + service("plain", 80, target) + "---\n"
        + endpoints("plain", {"TCP": target}))
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: web, protocol: HTTP, port: {port}}}\n"))
    engine_stack.write("route.yaml", route("h2c", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /h2}}]
    backendRefs: [{name: web, port: 80}]
  - backendRefs: [{name: plain, port: 80}]
"""))
    await engine_stack.start()
    for path, protocol in (("/h2", "HTTP/2"), ("/h1", "HTTP/1.1")):
        status, _, body = await request(port, "app.example", path)
        assert (path, status, body.get("protocol")) == (path, 200, protocol)


async def test_parent_ref_port_and_named_rules(engine_stack: Stack) -> None:
    """A parentRef with ``port`` attaches to the listeners of that port only
    (HTTPRouteParentRefPort); rules with a ``name`` are served like any
    (HTTPRouteNamedRouteRule)."""
    await backend(engine_stack, "web")
    first, second = free_port(), free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: one, protocol: HTTP, port: {first}}}\n"
        f"  - {{name: two, protocol: HTTP, port: {second}}}\n"))
    engine_stack.write("route.yaml", route("named", f"""  parentRefs: [{{name: gw, port: {first}}}]
  rules:
  - name: api
    matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    backendRefs: [{{name: web, port: 80}}]
"""))
    await engine_stack.start()
    status, _, body = await request(first, "app.example", "/api/x")
    assert (status, body.get("name")) == (200, "default/web")
    status, _, _ = await request(second, "app.example", "/api/x")
    assert status == 404
    objects = yaml.safe_load((engine_stack.root.parent / "status.yaml").read_text())["objects"]
    listeners = {ls["name"]: ls["attachedRoutes"]
                 for ls in objects["Gateway/default/gw"]["status"]["listeners"]}
    assert listeners == {"one": 1, "two": 0}
