"""ingress-nginx annotations through a real Envoy: what a client of the old controller sees.

Each test serves Ingresses of class ``nginx`` taken over with ``--ingress-class nginx`` (the
stack's translate options) and checks behaviour by traffic on loopback: rewritten paths, canary
splits, redirects, client allowlists, per-client rate limits and body limits.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme

from podway.envoy.types import LISTENER

from .harness import Stack, endpoints, get, service
from .local_servers import stack_in

pytestmark = pytest.mark.e2e


def ingress(name: str, annotations: dict[str, str], paths: str, *, host: str = "shop.test",
            ts: str = "2026-01-01T00:00:00Z") -> str:
    notes = "".join(f"\n    nginx.ingress.kubernetes.io/{k}: {json.dumps(v)}"
                    for k, v in annotations.items())
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: default
  creationTimestamp: "{ts}"
  annotations:{notes or " {}"}
spec:
  ingressClassName: nginx
  rules:
  - host: {host}
    http:
      paths:
{paths}"""


def path(p: str, backend: str = "web", kind: str = "Prefix") -> str:
    return (f"      - {{path: {json.dumps(p)}, pathType: {kind}, "
            f"backend: {{service: {{name: {backend}, port: {{number: 80}}}}}}}}\n")


async def request(port: int, host: str, target: str = "/", *, method: str = "GET",
                  headers: dict[str, str] | None = None, body: bytes = b"",
                  source: str = "127.0.0.1") -> tuple[int, dict[str, str], dict[str, object]]:
    """One HTTP/1.1 request from ``source``: status, response headers, the echo's JSON."""
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        try:
            extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
            length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
            writer.write(f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{extra}{length}"
                         "Connection: close\r\n\r\n".encode() + body)
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            got = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in head[1:] if line)}
            data = await reader.read()
        finally:
            writer.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = {}
    return int(head[0].split(" ")[1]), got, parsed if isinstance(parsed, dict) else {}


async def start(stack: Stack, manifests: str, backends: tuple[str, ...] = ("web",)) -> int:
    """Echo backends, the manifests, Podway taking class nginx over; the HTTP port."""
    for name in backends:
        port = await stack.start_echo(name)
        stack.write(f"{name}.yaml", service(name, 80, port) + "---\n"
                    + endpoints(name, {"TCP": port}))
    stack.write("ingress.yaml", manifests)
    await stack.start()
    return stack.http_port


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """A stack that takes Ingress class nginx over (``--ingress-class nginx``)."""
    async with stack_in(tmp_path, takeover_classes=("nginx",)) as made:
        yield made


@pytest.fixture(params=["envoy", "haproxy"])
async def engine_stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """The same, on each engine in turn (the annotations both engines serve)."""
    async with stack_in(tmp_path, takeover_classes=("nginx",), engine_kind=request.param) as made:
        yield made


async def test_rewrite_target_with_captures(engine_stack: Stack) -> None:
    """rewrite-target /$2 on /api(/|$)(.*): the backend sees the rest of the path and the
    query; the match is case-insensitive and anchored at the start only, as in nginx, and so
    is another Ingress's prefix path on the same host."""
    port = await start(engine_stack, ingress("api", {"rewrite-target": "/$2", "use-regex": "true"},
                                      path("/api(/|$)(.*)", kind="ImplementationSpecific"))
                       + "---\n" + ingress("plain", {}, path("/plain"),
                                            ts="2026-02-01T00:00:00Z"))
    for target, seen in (("/api/items/7?x=1", "/items/7?x=1"), ("/api", "/"),
                         ("/API/Items", "/Items")):
        status, _, body = await request(port, "shop.test", target)
        assert (target, status, body.get("path")) == (target, 200, seen)
    for target in ("/other", "/apiv2"):  # /api must be followed by / or the end
        status, _, _ = await request(port, "shop.test", target)
        assert (target, status) == (target, 404)
    # Another Ingress's prefix path on the host is a regex too: /plain matches /PLAINly.
    status, _, body = await request(port, "shop.test", "/PLAINly")
    assert (status, body.get("path")) == (200, "/PLAINly")


async def test_canary_by_header_cookie_and_weight(engine_stack: Stack) -> None:
    """A canary Ingress on the main one's host and path: header always/never, cookie always,
    then a weight split — no HostConflict, both backends serve."""
    manifests = (ingress("main", {}, path("/")) + "---\n"
                 + ingress("canary", {"canary": "true", "canary-by-header": "X-Canary",
                                      "canary-by-cookie": "beta", "canary-weight": "30"},
                           path("/", "web-v2"), ts="2026-02-01T00:00:00Z"))
    port = await start(engine_stack, manifests, ("web", "web-v2"))
    cases = [({"X-Canary": "always"}, "web-v2"), ({"X-Canary": "never", "Cookie": "beta=always"},
                                                  "web"),
             ({"Cookie": "a=1; beta=always"}, "web-v2"), ({"Cookie": "beta=never"}, "web")]
    for headers, backend in cases:
        for _ in range(5):  # never the weight split: the same answer every time
            status, _, body = await request(port, "shop.test", "/", headers=headers)
            assert (status, body.get("name")) == (200, backend), headers
    seen: dict[object, int] = {}
    for _ in range(100):
        status, _, body = await request(port, "shop.test", "/")
        assert status == 200
        seen[body.get("name")] = seen.get(body.get("name"), 0) + 1
    assert set(seen) == {"web", "web-v2"}  # 30 % canary: both in 100 tries (p of not ~1e-15)


async def test_canary_by_header_value(engine_stack: Stack) -> None:
    """canary-by-header-value: only that value goes to the canary; others to the main."""
    manifests = (ingress("main", {}, path("/")) + "---\n"
                 + ingress("canary", {"canary": "true", "canary-by-header": "X-Version",
                                      "canary-by-header-value": "v2"},
                           path("/", "web-v2"), ts="2026-02-01T00:00:00Z"))
    port = await start(engine_stack, manifests, ("web", "web-v2"))
    for value, backend in (("v2", "web-v2"), ("v1", "web"), ("always", "web")):
        _, _, body = await request(port, "shop.test", "/", headers={"X-Version": value})
        assert (value, body.get("name")) == (value, backend)


async def test_redirects_and_app_root(engine_stack: Stack) -> None:
    """permanent-redirect answers every path with its URL (query dropped); app-root sends /
    to the application root with 302 and leaves other paths alone."""
    manifests = (ingress("moved", {"permanent-redirect": "https://new.test/shop"}, path("/"),
                         host="old.test") + "---\n"
                 + ingress("app", {"app-root": "/app"}, path("/")))
    port = await start(engine_stack, manifests)
    status, headers, _ = await request(port, "old.test", "/anything?q=1")
    assert (status, headers.get("location")) == (301, "https://new.test/shop")
    status, headers, _ = await request(port, "shop.test", "/")
    assert status == 302
    assert headers.get("location", "").endswith("shop.test/app")
    status, _, body = await request(port, "shop.test", "/app/x")
    assert (status, body.get("path")) == (200, "/app/x")


async def test_source_allowlist_and_denylist(engine_stack: Stack) -> None:
    """whitelist-source-range admits only its clients; denylist-source-range takes some out
    again; everyone else gets 403 (clients are loopback addresses)."""
    manifests = ingress("office", {"whitelist-source-range": "127.0.0.0/30",
                                   "denylist-source-range": "127.0.0.2"}, path("/"))
    port = await start(engine_stack, manifests)
    for source, status in (("127.0.0.1", 200), ("127.0.0.2", 403), ("127.0.0.3", 200),
                           ("127.0.0.9", 403)):
        got, _, _ = await request(port, "shop.test", "/", source=source)
        assert (source, got) == (source, status)


async def test_rate_limit_per_client(stack: Stack) -> None:
    """limit-rpm 1 with a burst multiplier of 2: two requests pass, the third is refused with
    503; another client address has its own bucket."""
    manifests = ingress("limited", {"limit-rpm": "1", "limit-burst-multiplier": "2"}, path("/"))
    port = await start(stack, manifests)
    statuses = [(await request(port, "shop.test", "/"))[0] for _ in range(4)]
    assert statuses == [200, 200, 503, 503]
    status, _, _ = await request(port, "shop.test", "/", source="127.0.0.5")
    assert status == 200


async def test_body_size_limit(stack: Stack) -> None:
    """proxy-body-size 1k: a larger body is answered 413, a smaller one reaches the backend."""
    port = await start(stack, ingress("upload", {"proxy-body-size": "1k"}, path("/")))
    status, _, _ = await request(port, "shop.test", "/", method="POST", body=b"x" * 2048)
    assert status == 413
    status, _, body = await request(port, "shop.test", "/", method="POST", body=b"x" * 512)
    assert (status, body.get("name")) == (200, "web")


async def test_upstream_vhost_and_forwarded_prefix(engine_stack: Stack) -> None:
    """upstream-vhost sets the Host the backend sees; x-forwarded-prefix adds its header."""
    port = await start(engine_stack, ingress("vhost", {"upstream-vhost": "internal.test",
                                                "x-forwarded-prefix": "/shop"}, path("/")))
    status, _, body = await request(port, "shop.test", "/")
    headers = body.get("headers")
    assert isinstance(headers, dict)
    assert (status, body.get("host"), headers.get("x-forwarded-prefix")) == (
        200, "internal.test", "/shop")


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


async def test_client_certificates(engine_stack: Stack) -> None:
    """auth-tls-secret: a client with a certificate of the CA is served over HTTPS, one
    without a certificate or with another CA's is refused in the handshake."""
    server_ca, client_ca, other_ca = trustme.CA(), trustme.CA(), trustme.CA()
    cert = server_ca.issue_cert("shop.test")
    engine_stack.write("secrets.yaml", f"""apiVersion: v1
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
kind: Secret
metadata: {{name: client-ca, namespace: default}}
stringData:
  ca.crt: |
{_indent(client_ca.cert_pem.bytes().decode())}
""")
    manifests = ingress("mtls", {"auth-tls-secret": "default/client-ca"}, path("/")).replace(
        "  rules:\n", "  tls: [{hosts: [shop.test], secretName: shop-tls}]\n  rules:\n")
    await start(engine_stack, manifests)

    def context(ca: trustme.CA | None) -> ssl.SSLContext:
        out = ssl.create_default_context()
        server_ca.configure_trust(out)
        if ca is not None:
            ca.issue_cert("client@shop.test").configure_cert(out)
        return out

    status, body = await get(engine_stack.https_port, "shop.test", "/", tls=context(client_ca))
    assert (status, body.get("name")) == (200, "web")
    for ca in (None, other_ca):
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await get(engine_stack.https_port, "shop.test", "/", tls=context(ca))


async def test_cors_preflight_and_headers(stack: Stack) -> None:
    """enable-cors with an origin list: the engine answers an allowed origin's preflight and
    adds the allow-origin header to its requests; another origin gets neither."""
    port = await start(stack, ingress("cors", {"enable-cors": "true",
                                               "cors-allow-origin": "https://app.test"},
                                      path("/")))
    preflight = {"Origin": "https://app.test", "Access-Control-Request-Method": "POST"}
    status, headers, body = await request(port, "shop.test", "/", method="OPTIONS",
                                          headers=preflight)
    assert status == 200
    assert not body  # answered by the engine, not the backend
    assert headers.get("access-control-allow-origin") == "https://app.test"
    assert "POST" in headers.get("access-control-allow-methods", "")
    status, headers, _ = await request(port, "shop.test", "/",
                                       headers={"Origin": "https://app.test"})
    assert (status, headers.get("access-control-allow-origin")) == (200, "https://app.test")
    status, headers, _ = await request(port, "shop.test", "/",
                                       headers={"Origin": "https://evil.test"})
    assert (status, headers.get("access-control-allow-origin")) == (200, None)


async def test_features_apply_only_on_the_routes_that_ask_for_them(stack: Stack) -> None:
    """The optional filters are switched off on the listener and on per route: on one host,
    the route with CORS, an allowlist and a rate limit gets all three, the plain route beside it
    none of them (no CORS header, any client, no limit)."""
    guarded = ingress("guarded", {"enable-cors": "true", "cors-allow-origin": "https://app.test",
                                  "whitelist-source-range": "127.0.0.1/32", "limit-rpm": "1",
                                  "limit-burst-multiplier": "2"}, path("/guarded"))
    plain = ingress("plain", {}, path("/plain"), ts="2026-01-01T00:00:01Z")
    port = await start(stack, guarded + "---\n" + plain)
    origin = {"Origin": "https://app.test"}
    status, headers, _ = await request(port, "shop.test", "/guarded", headers=origin)
    assert (status, headers.get("access-control-allow-origin")) == (200, "https://app.test")
    assert (await request(port, "shop.test", "/guarded", source="127.0.0.9"))[0] == 403
    statuses = [(await request(port, "shop.test", "/guarded"))[0] for _ in range(2)]
    assert statuses == [200, 503]  # the bucket of 2 was spent by the first and this one
    for source in ("127.0.0.1", "127.0.0.9", "127.0.0.1", "127.0.0.1", "127.0.0.1"):
        status, headers, body = await request(port, "shop.test", "/plain", headers=origin,
                                              source=source)
        assert (status, body.get("name")) == (200, "web")
        assert "access-control-allow-origin" not in headers


async def test_access_rules_hold_on_a_scoped_listener_whatever_the_host_case(
        stack: Stack) -> None:
    """A listener with enough exact hosts is served as scopes (one table per host), whose
    scope key is the lower-case Host: a request naming its host in upper case is still
    refused by the route's allowlist (filters are chosen from the first route Envoy finds)."""
    from podway.envoy.config import build
    from podway.envoy.config.scoped import SCOPED_MIN_HOSTS, has_scopes

    rules = "".join(f"""  - host: h{i}.test
    http:
      paths:
{path("/")}""" for i in range(SCOPED_MIN_HOSTS))
    many = f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: many, namespace: default, creationTimestamp: "2026-01-01T00:00:01Z"}}
spec:
  ingressClassName: nginx
  rules:
{rules}"""
    office = ingress("office", {"whitelist-source-range": "127.0.0.1/32"}, path("/"))
    port = await start(stack, office + "---\n" + many)
    built = build(stack.state.ir)  # the listener really is served as scopes
    assert any(has_scopes(r.message) for r in built[LISTENER].values())
    for host in ("shop.test", "SHOP.test", "Shop.Test"):
        assert (await request(port, host, "/", source="127.0.0.9"))[0] == 403, host
        assert (await request(port, host, "/", source="127.0.0.1"))[0] == 200, host
    assert (await request(port, "H1.test", "/", source="127.0.0.9"))[0] == 200


async def test_taken_over_ingress_listeners_set_real_ip(stack: Stack) -> None:
    """ingress-nginx always sets X-Real-IP, so the Ingress listeners of a stack taking its class
    over do (without ``--x-real-ip``), replacing a client's own value."""
    port = await start(stack, ingress("web", {}, path("/")))
    _, _, body = await request(port, "shop.test", "/", headers={"X-Real-IP": "198.18.0.66"})
    headers = body.get("headers")
    assert isinstance(headers, dict)
    assert headers.get("x-real-ip") == "127.0.0.1"


async def _raw(port: int, head: str, body: bytes = b"", *, limit_s: float = 20) -> int:
    """Send a request head and body as given; the response status (0: the connection was
    closed without one)."""
    async with asyncio.timeout(limit_s):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(head.encode())
            for at in range(0, len(body), 1 << 20):
                writer.write(body[at:at + (1 << 20)])
                await writer.drain()
            line = await reader.readline()
        finally:
            writer.close()
    return int(line.split()[1]) if line else 0


def _chunked(data: bytes, size: int = 1 << 16) -> bytes:
    parts = [f"{len(data[i:i + size]):x}\r\n".encode() + data[i:i + size] + b"\r\n"
             for i in range(0, len(data), size)]
    return b"".join(parts) + b"0\r\n\r\n"


async def test_a_body_limit_too_large_to_buffer_streams_and_still_holds(stack: Stack) -> None:
    """proxy-body-size 20m (over what an engine buffers): a declared 1 GiB body is 413 at once,
    without sending it; a declared 12 MiB body streams to the backend (before: buffered whole,
    up to the limit, in memory); a chunked body is held at most 8 MiB: 2 MiB passes, 10 MiB
    is 413."""
    port = await start(stack, ingress("upload", {"proxy-body-size": "20m"}, path("/")))
    head = "POST / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n"
    assert await _raw(port, head + f"Content-Length: {1 << 30}\r\n\r\n", limit_s=5) == 413
    assert await _raw(port, head + f"Content-Length: {12 << 20}\r\n\r\n",
                      b"x" * (12 << 20)) == 200
    chunked = head + "Transfer-Encoding: chunked\r\n\r\n"
    assert await _raw(port, chunked, _chunked(b"x" * (2 << 20))) == 200
    assert await _raw(port, chunked, _chunked(b"x" * (10 << 20))) == 413
    assert await _raw(port, "GET / HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n") \
        == 200


async def test_unserved_auth_fails_closed(stack: Stack) -> None:
    """An Ingress asking for basic auth, external auth or satisfy (none served yet) never
    answers 200 without credentials: every path is 403 and the backend sees nothing, while an
    Ingress without them on another host still serves."""
    web = await stack.start_echo("web")
    stack.write("web.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    closed = {"basic.test": {"auth-type": "basic", "auth-secret": "htpasswd"},
              "external.test": {"auth-url": "http://auth.default.svc/check",
                                "auth-signin": "https://auth.test/start"},
              "snippet.test": {"configuration-snippet": "deny all;"}}
    manifests = [ingress(host.split(".")[0], values, path("/"), host=host)
                 for host, values in closed.items()]
    manifests.append(ingress("open", {}, path("/"), host="open.test"))
    stack.write("ingress.yaml", "---\n".join(manifests))
    await stack.start()
    for host in closed:
        for target in ("/", "/admin", "/x?y=1"):
            status, _, body = await request(stack.http_port, host, target)
            assert (host, target, status, body) == (host, target, 403, {})
        status, _, _ = await request(stack.http_port, host, "/",
                                     headers={"Authorization": "Basic dXNlcjpwYXNz"})
        assert (host, status) == (host, 403)
    status, _, body = await request(stack.http_port, "open.test", "/x")
    assert (status, body.get("path")) == (200, "/x")
