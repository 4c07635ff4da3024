"""Ingress through a real Envoy: rules, precedence, 404, 503, TLS by SNI, L4 TCP/UDP."""

from __future__ import annotations

import asyncio
import ssl

import pytest
import trustme

from .harness import Stack, endpoints, get, service

pytestmark = pytest.mark.e2e


def ingress(rules: str, tls: str = "") -> str:
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: web, namespace: default}}
spec:
  ingressClassName: podway
{tls}  rules:
{rules}"""


RULES = """  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
      - {path: /api/health, pathType: Exact, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /gone, pathType: Prefix, backend: {service: {name: missing, port: {number: 80}}}}
  - host: "*.wild.test"
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
"""


async def _backends(stack: Stack) -> None:
    for name in ("web", "api"):
        port = await stack.start_echo(name)
        stack.write(f"{name}.yaml", service(name, 80, port) + "---\n"
                    + endpoints(name, {"TCP": port}))


async def test_ingress_rules_reach_the_right_backend(engine_stack: Stack) -> None:
    """Each rule reaches its backend; prefixes are element-wise; 404 and 503 where due."""
    await _backends(engine_stack)
    engine_stack.write("ingress.yaml", ingress(RULES.replace(
        "  - http:", "  - host: other.test\n    http:")))
    await engine_stack.start()
    port = engine_stack.http_port
    cases = [
        ("shop.test", "/", 200, "web"),
        ("shop.test", "/api", 200, "api"),
        ("shop.test", "/api/v1", 200, "api"),
        ("shop.test", "/apiv1", 200, "web"),  # /api does not match /apiv1
        ("shop.test", "/api/health", 200, "web"),  # Exact beats the /api prefix
        ("shop.test", "/gone/x", 503, None),  # backend Service does not exist
        ("a.wild.test", "/", 200, "api"),
        (f"a.wild.test:{port}", "/", 200, "api"),  # a port in Host does not matter
        ("SHOP.test", "/api", 200, "api"),  # host names are case-insensitive
        (f"shop.test.:{port}", "/api", 200, "api"),  # the absolute form, with a port
        ("other.test", "/", 200, "web"),
        ("nobody.test", "/", 404, None),
        ("a.b.wild.test", "/", 404, None),  # *.wild.test covers exactly one label
        # Paths are normalised before matching: dot-dot segments resolved, slashes merged.
        ("shop.test", "/x/../api/v1", 200, "api"),
        ("shop.test", "/api/..", 200, "web"),
        ("shop.test", "//api//v1", 200, "api"),
        ("shop.test", "/x/..//api", 200, "api"),
        # Single-dot segments too (RFC 3986 remove_dot_segments, as Envoy's normalize_path).
        ("shop.test", "/./api/v1", 200, "api"),
        ("shop.test", "/api/./health", 200, "web"),
        ("shop.test", "/x/./../api/.", 200, "api"),
    ]
    for host, path, status, backend in cases:
        got_status, body = await get(port, host, path)
        assert (host, path, got_status, body.get("name")) == (host, path, status, backend)


async def test_exact_hosts_only_route_every_spelling_of_the_host_alike(
        engine_stack: Stack) -> None:
    """Exact hosts only (HAProxy looks a Host written as its name up with its path in one
    step, any other spelling through the host map): every spelling reaches the same route,
    and a Host carrying a path never picks the route of that path."""
    await _backends(engine_stack)
    exact = RULES.split("  - host: \"*.wild.test\"", maxsplit=1)[0]
    rules = "".join(line + "\n" for line in exact.splitlines()
                    if "/gone" not in line)  # plain forwards only
    engine_stack.write("ingress.yaml", ingress(rules + rules.replace("shop.test", "two.test")))
    await engine_stack.start()
    port = engine_stack.http_port
    cases = [
        ("shop.test", "/api", 200, "api"),
        ("shop.test", "/api/v1", 200, "api"),
        ("shop.test", "/apiv1", 200, "web"),
        ("shop.test", "/api/health", 200, "web"),
        ("shop.test", "/api/health/x", 200, "api"),
        ("shop.test", "/x/../api", 200, "api"),
        ("shop.test.", "/api", 200, "api"),
        ("SHOP.Test", "/api", 200, "api"),
        (f"shop.test:{port}", "/api", 200, "api"),
        (f"Shop.Test.:{port}", "/api/health", 200, "web"),
        ("two.test", "/api", 200, "api"),
        ("two.test", "/apiv1", 200, "web"),
        ("nobody.test", "/api", 404, None),
    ]
    for host, path, status, backend in cases:
        got_status, body = await get(port, host, path)
        assert (host, path, got_status, body.get("name")) == (host, path, status, backend)
    for host in ("shop.test/api", "shop.test/api/"):  # a Host is no path: never the api route
        got_status, body = await get(port, host, "/v1")
        assert got_status in (400, 404), (host, got_status, body)
        assert body.get("name") is None, (host, got_status, body)


async def test_a_rule_without_host_takes_every_other_host(engine_stack: Stack) -> None:
    """Exact hosts and a rule without host (HAProxy: the host map's default is the catch-all's
    key): any spelling of a named host reaches its routes, any other Host the catch-all's."""
    await _backends(engine_stack)
    rules = "".join(line + "\n" for line in RULES.splitlines()[:6]) + """  - http:
      paths:
      - {path: /only, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
"""
    engine_stack.write("ingress.yaml", ingress(rules))
    await engine_stack.start()
    port = engine_stack.http_port
    cases = [
        ("shop.test", "/api", 200, "api"),
        (f"SHOP.test:{port}", "/apiv1", 200, "web"),
        ("shop.test", "/only", 200, "web"),  # the named host's own "/" route
        ("nobody.test", "/only/x", 200, "api"),
        (f"Nobody.Test:{port}", "/only", 200, "api"),
        ("nobody.test", "/api", 404, None),
    ]
    for host, path, status, backend in cases:
        got_status, body = await get(port, host, path)
        assert (host, path, got_status, body.get("name")) == (host, path, status, backend)


async def test_a_rule_without_host_alone_routes_every_host_by_path(engine_stack: Stack) -> None:
    """Only a rule without host on the listener (HAProxy: the path alone is looked up, no
    host key): every Host, in any spelling, gets the same routes, paths normalised first."""
    await _backends(engine_stack)
    api = "{service: {name: api, port: {number: 80}}}"
    web = "{service: {name: web, port: {number: 80}}}"
    more = (f"      - {{path: /api, pathType: Prefix, backend: {api}}}\n"
            f"      - {{path: /api/health, pathType: Exact, backend: {web}}}\n")
    rules = RULES.split("  - http:", maxsplit=1)[1].replace(
        "      - {path: /, pathType: Prefix", more + "      - {path: /, pathType: Prefix")
    engine_stack.write("ingress.yaml", ingress("  - http:" + rules))
    await engine_stack.start()
    port = engine_stack.http_port
    for host in ("shop.test", f"Any.Test.:{port}", "127.0.0.1", "[::1]:80"):
        cases = [
            ("/", 200, "web"),
            ("/api", 200, "api"),
            ("/api/v1", 200, "api"),
            ("/apiv1", 200, "web"),
            ("/api/health", 200, "web"),
            ("/api/health/x", 200, "api"),
            ("/x/../api/v1", 200, "api"),
            ("//api//v1", 200, "api"),
            ("/./api/./health", 200, "web"),
        ]
        for path, status, backend in cases:
            got_status, body = await get(port, host, path)
            assert (host, path, got_status, body.get("name")) == (host, path, status, backend)


async def test_a_fragment_in_the_request_target_is_refused(engine_stack: Stack) -> None:
    """A request-target has no fragment (RFC 9112 3.2, RFC 3986 3.5: a client never sends
    "#..."): both engines answer 400 and reach no backend, rather than one of them guessing
    where the path ends (a path with "#" could match one route here and another behind)."""
    await _backends(engine_stack)
    engine_stack.write("ingress.yaml", ingress(RULES))
    await engine_stack.start()
    port = engine_stack.http_port
    for path in ("/api#x", "/#/api", "/api/health#", "/api?q=1#x"):
        got_status, body = await get(port, "shop.test", path)
        assert (path, got_status, body.get("name")) == (path, 400, None)
    for path, backend in (("/api", "api"), ("/api?q=%23x", "api")):  # an escaped "#" is data
        got_status, body = await get(port, "shop.test", path)
        assert (path, got_status, body.get("name")) == (path, 200, backend)
    # The absolute form (HTTP/1.1) and HTTP/2's :path alike.
    got_status, body = await get(port, "shop.test", "http://shop.test/api#x")
    assert (got_status, body.get("name")) == (400, None)
    assert await _h2c_status(port, "shop.test", "/api") == 200
    assert await _h2c_status(port, "shop.test", "/api#x") == 400


async def _h2c_status(port: int, host: str, path: str) -> int:
    """The status of one HTTP/2 (prior knowledge, cleartext) GET whose :path is sent as
    given; a stream the engine resets, or a connection it ends, counts as 400."""
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":path", path), (":scheme", "http"),
                          (":authority", host)], end_stream=True)
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(conn.data_to_send())
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived) and event.stream_id == 1:
                        return int(dict(event.headers)[b":status"])
                    if isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                        return 400
                writer.write(conn.data_to_send())
        finally:
            writer.close()
    return 400


async def test_one_label_wildcard_falls_back_to_catch_all(engine_stack: Stack) -> None:
    """a.b.wild.test is not *.wild.test (Ingress), so a rule without host answers it."""
    await _backends(engine_stack)
    engine_stack.write("ingress.yaml", ingress(RULES))
    await engine_stack.start()
    status, body = await get(engine_stack.http_port, "a.b.wild.test", "/")
    assert (status, body.get("name")) == (200, "web")
    status, body = await get(engine_stack.http_port, "a.wild.test", "/")
    assert (status, body.get("name")) == (200, "api")


async def test_tls_sni_selects_the_certificate(engine_stack: Stack) -> None:
    """Each TLS host gets its own certificate (verified against the test CA) and backend."""
    await _backends(engine_stack)
    ca = trustme.CA()
    secrets = []
    for host in ("a.test", "b.test"):
        cert = ca.issue_cert(host)
        crt = cert.cert_chain_pems[0].bytes().decode()
        key = cert.private_key_pem.bytes().decode()
        secrets.append(f"""apiVersion: v1
kind: Secret
metadata: {{name: {host.split('.')[0]}-tls, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{_indent(crt)}
  tls.key: |
{_indent(key)}
""")
    engine_stack.write("secrets.yaml", "---\n".join(secrets))
    rules = "".join(f"""  - host: {h}
    http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: {b}, port: {{number: 80}}}}}}}}
""" for h, b in (("a.test", "web"), ("b.test", "api")))
    tls = ("  tls:\n  - {hosts: [a.test], secretName: a-tls}\n"
           "  - {hosts: [b.test], secretName: b-tls}\n")
    engine_stack.write("ingress.yaml", ingress(rules, tls))
    await engine_stack.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    for host, backend in (("a.test", "web"), ("b.test", "api")):
        status, body = await get(engine_stack.https_port, host, "/", tls=context)
        assert (host, status, body.get("name")) == (host, 200, backend)
    # A certificate for the wrong name fails verification: SNI really chose the certificate.
    wrong = ssl.create_default_context()
    ca.configure_trust(wrong)
    with pytest.raises(ssl.SSLCertVerificationError):
        await get(engine_stack.https_port, "c.test", "/", tls=wrong, sni="a.test.invalid")


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


async def test_l4_tcp_and_udp_through_a_load_balancer_service(stack: Stack) -> None:
    """A LoadBalancer Service with TCP and UDP ports echoes through Envoy on both."""
    from .harness import free_port_both

    backend = await stack.start_echo("l4", tcp=True, udp=True)
    lb_port = free_port_both()
    stack.write("l4.yaml", service("l4", lb_port, backend, lb=True, protocols=("TCP", "UDP"))
                + "---\n" + endpoints("l4", {"TCP": backend, "UDP": backend}))
    await stack.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", lb_port)
    try:
        writer.write(b"hello over tcp\n")
        assert await asyncio.wait_for(reader.readline(), 5) == b"hello over tcp\n"
    finally:
        writer.close()
    loop = asyncio.get_running_loop()
    got: asyncio.Future[bytes] = loop.create_future()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: object) -> None:
            if not got.done():
                got.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", lb_port))
    try:
        for _ in range(20):  # UDP may be dropped before the listener is up: retry, bounded
            transport.sendto(b"hello over udp")
            done, _ = await asyncio.wait({got}, timeout=0.25)
            if done:
                break
        assert got.result() == b"hello over udp"
    finally:
        transport.close()


async def test_h2c_clients_are_served_through_envoy(stack: Stack) -> None:
    """HTTP/2 cleartext (prior knowledge) from the client reaches the HTTP/1.1 backend."""
    import httpx

    await _backends(stack)
    stack.write("ingress.yaml", ingress(RULES))
    await stack.start()
    async with httpx.AsyncClient(http1=False, http2=True, trust_env=False) as client:
        reply = await client.get(f"http://127.0.0.1:{stack.http_port}/api/x",
                                 headers={"host": "shop.test"})
    assert reply.http_version == "HTTP/2"
    assert (reply.status_code, reply.json()["name"]) == (200, "api")
    assert reply.json()["headers"]["x-envoy-external-address"] == "127.0.0.1"  # the client
