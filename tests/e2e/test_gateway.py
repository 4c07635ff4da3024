"""Gateway API through a real Envoy, after the conformance suite's behaviour.

Matching and precedence, hostname intersection and listener isolation, redirects, rewrites,
header modifiers, weights (within statistical bounds), cross-namespace backends with and without
a ReferenceGrant, invalid backends answered with 500, TLS passthrough by SNI, gRPC routing, and
TCP and UDP routes. Loopback only, ephemeral ports, one stack per test, torn down always.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections import Counter

import h2.config
import h2.connection
import h2.events
import pytest
import trustme
import yaml

from .harness import Stack, endpoints, free_port, free_port_both, service

pytestmark = pytest.mark.e2e

CLASS = """apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: podway}
spec: {controllerName: podway.io/gateway-controller}
"""


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


async def test_http_matching_precedence_hostnames_and_filters(stack: Stack) -> None:
    """HTTPRoute semantics end to end: the request reaches the backend the spec says."""
    for name in ("exact", "prefix", "longer", "method", "headers", "query", "wild", "other",
                 "fallback"):
        await backend(stack, name)
    await backend(stack, "shared", namespace="granted")
    await backend(stack, "shared", namespace="closed")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(f"""
  - {{name: wild, protocol: HTTP, port: {port}, hostname: "*.example.com",
     allowedRoutes: {{namespaces: {{from: All}}}}}}
  - {{name: foo, protocol: HTTP, port: {port}, hostname: foo.example.com}}
  - {{name: any, protocol: HTTP, port: {port}}}
"""))
    stack.write("routes.yaml", "---\n".join([
        route("main", """  parentRefs: [{name: gw, sectionName: wild}]
  hostnames: [app.example.com]
  rules:
  - matches: [{path: {type: Exact, value: /v1}}]
    backendRefs: [{name: exact, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v1}}]
    backendRefs: [{name: prefix, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v1/items}}]
    backendRefs: [{name: longer, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v1}, method: POST}]
    backendRefs: [{name: method, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v1}, headers: [{name: X-Tier, value: gold}]}]
    backendRefs: [{name: headers, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /v1}, queryParams: [{name: q, value: "1"}]}]
    backendRefs: [{name: query, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /gone}}]
    backendRefs: [{name: missing, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /kind}}]
    backendRefs: [{group: example.com, kind: Bucket, name: b}]
  - matches: [{path: {type: PathPrefix, value: /granted}}]
    backendRefs: [{name: shared, namespace: granted, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /closed}}]
    backendRefs: [{name: shared, namespace: closed, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /headers}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Set, value: "1"}], add: [{name: X-Add, value: "2"}],
                              remove: [X-Remove]}
    - type: ResponseHeaderModifier
      responseHeaderModifier: {set: [{name: X-Served-By, value: podway}]}
    backendRefs: [{name: other, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /rewrite}}]
    filters:
    - type: URLRewrite
      urlRewrite: {hostname: internal.example, path: {type: ReplacePrefixMatch,
                                                       replacePrefixMatch: /new}}
    backendRefs: [{name: other, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /redirect}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: secure.example.com, statusCode: 301}
  - matches: [{path: {type: PathPrefix, value: /to-https}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /moved}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {hostname: new.example.com, path: {type: ReplacePrefixMatch,
                                                          replacePrefixMatch: /fresh}}
"""),
        route("wildcard", """  parentRefs: [{name: gw, sectionName: wild}]
  rules: [{backendRefs: [{name: wild, port: 80}]}]
""", created="2024-01-02T00:00:00Z"),
        route("foo", """  parentRefs: [{name: gw, sectionName: foo}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /only}}]
    backendRefs: [{name: other, port: 80}]
"""),
        route("fallback", """  parentRefs: [{name: gw, sectionName: any}]
  rules: [{backendRefs: [{name: fallback, port: 80}]}]
"""),
        """apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: routes-from-default, namespace: granted}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service}]
"""]))
    await stack.start()
    cases = [
        ("app.example.com", "/v1", "GET", {}, 200, "default/exact"),
        ("app.example.com", "/v1/x", "GET", {}, 200, "default/prefix"),
        ("app.example.com", "/v1x", "GET", {}, 200, "default/wild"),  # element-wise prefix
        ("app.example.com", "/v1/items/3", "GET", {}, 200, "default/longer"),
        ("app.example.com", "/v1/x", "POST", {"X-Tier": "gold"}, 200, "default/method"),
        ("app.example.com", "/v1/x?q=1", "GET", {"X-Tier": "gold"}, 200, "default/headers"),
        ("app.example.com", "/v1/x?q=1", "GET", {}, 200, "default/query"),
        ("app.example.com", "/gone", "GET", {}, 500, None),
        ("app.example.com", "/kind", "GET", {}, 500, None),
        ("app.example.com", "/granted", "GET", {}, 200, "granted/shared"),
        ("app.example.com", "/closed", "GET", {}, 500, None),
        ("a.b.example.com", "/", "GET", {}, 200, "default/wild"),  # any label depth
        ("foo.example.com", "/only", "GET", {}, 200, "default/other"),
        ("foo.example.com", "/", "GET", {}, 404, None),  # listener isolation: not *.example.com
        ("example.com", "/", "GET", {}, 200, "default/fallback"),  # *.example.com: not the apex
        ("elsewhere.test", "/", "GET", {}, 200, "default/fallback"),
    ]
    for host, path, method, headers, status, name in cases:
        got, _, body = await request(port, host, path, method=method, headers=headers)
        assert (host, path, got, body.get("name")) == (host, path, status, name)

    status, response_headers, body = await request(
        port, "app.example.com", "/headers", headers={"X-Remove": "x", "X-Add": "0"})
    seen = body["headers"]
    assert isinstance(seen, dict)
    assert seen.get("x-set") == "1"
    assert "x-remove" not in seen
    assert "2" in str(seen.get("x-add"))
    assert response_headers.get("x-served-by") == "podway"

    status, _, body = await request(port, "app.example.com", "/rewrite/a?b=c")
    assert (status, body.get("path"), body.get("host")) == (200, "/new/a?b=c", "internal.example")

    # The redirect port follows the spec: well-known ports are left out of Location, otherwise
    # the listener's port is kept when only the host or path changes.
    for host in ("app.example.com", f"app.example.com:{port}"):
        status, response_headers, _ = await request(port, host, "/redirect/x")
        assert (status, response_headers["location"]) == (
            301, "https://secure.example.com/redirect/x")
        status, response_headers, _ = await request(port, host, "/to-https/y?z=1")
        assert (status, response_headers["location"]) == (
            302, "https://app.example.com/to-https/y?z=1")
        status, response_headers, _ = await request(port, host, "/moved/a")
        assert (status, response_headers["location"]) == (
            302, f"http://new.example.com:{port}/fresh/a")


async def test_weights_split_traffic_within_statistical_bounds(stack: Stack) -> None:
    """3:1 weights give about 75% / 25%; a weight-0 backend gets nothing; a bad share gets 500."""
    for name in ("heavy", "light", "never"):
        await backend(stack, name)
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("route.yaml", route("split", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /split}}]
    backendRefs:
    - {name: heavy, port: 80, weight: 3}
    - {name: light, port: 80, weight: 1}
    - {name: never, port: 80, weight: 0}
  - matches: [{path: {value: /half}}]
    backendRefs: [{name: heavy, port: 80}, {name: missing, port: 80}]
"""))
    await stack.start()
    n = 200
    seen: Counter[object] = Counter()
    for _ in range(n):
        _, _, body = await request(port, "x.test", "/split")
        seen[body.get("name")] += 1
    # Binomial(200, 0.75): mean 150, sd ~6.1; +-5 sd keeps a false failure below 1e-6.
    assert 120 <= seen["default/heavy"] <= 180, seen
    assert seen["default/heavy"] + seen["default/light"] == n, seen
    statuses: Counter[int] = Counter()
    for _ in range(n):
        status, _, _ = await request(port, "x.test", "/half")
        statuses[status] += 1
    # Binomial(200, 0.5): mean 100, sd ~7.1.
    assert 65 <= statuses[500] <= 135, statuses
    assert statuses[200] + statuses[500] == n, statuses

    # Standalone mode writes the Gateway API statuses to the status file.
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]
    listener = objects["Gateway/default/gw"]["status"]["listeners"][0]
    assert listener["attachedRoutes"] == 1
    assert {c["type"]: c["status"] for c in listener["conditions"]}["Programmed"] == "True"
    parent = objects["HTTPRoute/default/split"]["status"]["parents"][0]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in parent["conditions"]}
    assert conditions == {"Accepted": ("True", "Accepted"),
                          "ResolvedRefs": ("False", "BackendNotFound")}


async def test_https_listeners_pick_certificates_by_sni(stack: Stack) -> None:
    """HTTPS listeners sharing a port terminate TLS with their own certificate (by SNI)."""
    await backend(stack, "shop")
    await backend(stack, "blog")
    ca = trustme.CA()
    secrets = []
    for name in ("shop", "blog"):
        cert = ca.issue_cert(f"{name}.example.com")
        crt = cert.cert_chain_pems[0].bytes().decode()
        key = cert.private_key_pem.bytes().decode()
        secrets.append(f"""apiVersion: v1
kind: Secret
metadata: {{name: {name}-tls, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{_indent(crt)}
  tls.key: |
{_indent(key)}
""")
    stack.write("secrets.yaml", "---\n".join(secrets))
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway("".join(f"""
  - name: {name}
    protocol: HTTPS
    port: {port}
    hostname: {name}.example.com
    tls: {{certificateRefs: [{{name: {name}-tls}}]}}""" for name in ("shop", "blog")) + "\n"))
    stack.write("route.yaml", "---\n".join(route(name, f"""
  parentRefs: [{{name: gw, sectionName: {name}}}]
  rules: [{{backendRefs: [{{name: {name}, port: 80}}]}}]
""") for name in ("shop", "blog")))
    await stack.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    for name in ("shop", "blog"):
        host = f"{name}.example.com"
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                           server_hostname=host)
            try:
                writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                             .encode())
                raw = await reader.read()
            finally:
                writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert json.loads(body)["name"] == f"default/{name}"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


async def _tls_backend(stack: Stack, ca: trustme.CA, host: str) -> int:
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


async def test_tls_passthrough_tcp_and_udp_routes(stack: Stack) -> None:
    """TLSRoute picks the backend by SNI without decrypting; TCPRoute and UDPRoute forward."""
    ca = trustme.CA()
    await _tls_backend(stack, ca, "alpha.tls.test")
    await _tls_backend(stack, ca, "beta.tls.test")
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


async def _https_backend(stack: Stack, ca: trustme.CA, name: str, cert_host: str) -> None:
    """An HTTPS server (certificate for ``cert_host``) behind Service ``name``, answering JSON."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(cert_host).configure_cert(context)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            body = json.dumps({"name": name, "tls": True}).encode()
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

    stack.tasks.append(asyncio.create_task(serve(), name=f"https-{name}"))
    stack.write(f"svc-{name}.yaml", service(name, 443, port) + "---\n"
                + endpoints(name, {"TCP": port}))


async def test_backend_tls_policy_re_encrypts_and_verifies(stack: Stack) -> None:
    """BackendTLSPolicy: TLS to the pod with the policy's CA and hostname; a certificate for
    another name is refused (503), and a policy whose CA is missing fails closed (500)."""
    ca = trustme.CA()
    await _https_backend(stack, ca, "secure", "secure.internal")
    await _https_backend(stack, ca, "impostor", "someone-else.internal")
    await _https_backend(stack, ca, "no-ca", "no-ca.internal")
    ca_pem = ca.cert_pem.bytes().decode()
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
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
    stack.write("tls.yaml", "---\n".join([*policies, f"""apiVersion: v1
kind: ConfigMap
metadata: {{name: ca, namespace: default}}
data:
  ca.crt: |
{_indent(ca_pem)}
"""]))
    stack.write("route.yaml", route("tls", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /secure}}]
    backendRefs: [{name: secure, port: 443}]
  - matches: [{path: {value: /impostor}}]
    backendRefs: [{name: impostor, port: 443}]
  - matches: [{path: {value: /no-ca}}]
    backendRefs: [{name: no-ca, port: 443}]
"""))
    await stack.start()
    status, _, body = await request(port, "x.test", "/secure")
    assert (status, body.get("name"), body.get("tls")) == (200, "secure", True)
    status, _, body = await request(port, "x.test", "/impostor")
    assert status == 503, body
    status, _, _ = await request(port, "x.test", "/no-ca")
    assert status == 500


@pytest.mark.xfail(strict=True, reason="engine gap: UpstreamTLS.ca_pem '' (system trust store) "
                   "is sent without any validation context, so any certificate is accepted")
async def test_backend_tls_policy_with_system_trust_refuses_unknown_ca(stack: Stack) -> None:
    """wellKnownCACertificates: System must not trust a private CA's certificate (503)."""
    ca = trustme.CA()
    await _https_backend(stack, ca, "private", "private.internal")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("tls.yaml", """apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: private, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: private}]
  validation: {wellKnownCACertificates: System, hostname: private.internal}
""")
    stack.write("route.yaml", route("r", """  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: private, port: 443}]}]
"""))
    await stack.start()
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
    """GRPCRoute matches /service/method and headers; the backend is reached over HTTP/2."""
    for name in ("say", "echo-any", "tenant", "rest"):
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
  - backendRefs: [{name: rest, port: 80}]
""", kind="GRPCRoute"))
    await stack.start()
    cases = [("/echo.Echo/Say", {}, "default/say"),
             ("/echo.Echo/Other", {}, "default/echo-any"),
             ("/echo.Echo/Other", {"x-tenant": "blue"}, "default/tenant"),
             ("/other.Svc/Say", {}, "default/rest")]
    for path, headers, name in cases:
        status, body = await asyncio.to_thread(_grpc_call, port, path, headers)
        data = json.loads(body)
        assert (path, status, data.get("name"), data.get("protocol")) == (
            path, "200", name, "HTTP/2")
