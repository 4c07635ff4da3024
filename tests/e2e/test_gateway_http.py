"""Gateway API over HTTP(S) through a real Envoy, after the conformance suite's behaviour.

Matching and precedence, hostname intersection and listener isolation, redirects (port rules),
rewrites, header modifiers, cross-namespace backends with and without a ReferenceGrant, invalid
backends answered with 500, weights within statistical bounds, HTTPS certificates by SNI, and
the standalone status file. Loopback only, ephemeral ports, one stack per test, torn down always.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import Counter

import pytest
import trustme
import yaml

from .gateway_helpers import CLASS, backend, gateway, indent, request, route
from .harness import Stack, free_port

pytestmark = pytest.mark.e2e


async def test_http_matching_precedence_hostnames_and_filters(engine_stack: Stack) -> None:
    """HTTPRoute semantics end to end: the request reaches the backend the spec says."""
    for name in ("exact", "prefix", "longer", "method", "headers", "query", "wild", "other",
                 "fallback"):
        await backend(engine_stack, name)
    await backend(engine_stack, "shared", namespace="granted")
    await backend(engine_stack, "shared", namespace="closed")
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(f"""
  - {{name: wild, protocol: HTTP, port: {port}, hostname: "*.example.com",
     allowedRoutes: {{namespaces: {{from: All}}}}}}
  - {{name: foo, protocol: HTTP, port: {port}, hostname: foo.example.com}}
  - {{name: any, protocol: HTTP, port: {port}}}
"""))
    engine_stack.write("routes.yaml", "---\n".join([
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
                              remove: [X-Remove, X-Forwarded-For]}
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
    await engine_stack.start()
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
        port, "app.example.com", "/headers", headers={"X-Remove": "x", "X-Add": "0",
                                                      "X-Forwarded-For": "6.6.6.6"})
    seen = body["headers"]
    assert isinstance(seen, dict)
    assert seen.get("x-set") == "1"
    assert "x-remove" not in seen
    # The route's word is the last: the peer the engine appends goes with the header.
    assert "x-forwarded-for" not in seen
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


async def test_weights_split_traffic_within_statistical_bounds(engine_stack: Stack) -> None:
    """3:1 weights give about 75% / 25%; a weight-0 backend gets nothing; a bad share gets 500."""
    for name in ("heavy", "light", "never"):
        await backend(engine_stack, name)
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    engine_stack.write("route.yaml", route("split", """  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /split}}]
    backendRefs:
    - {name: heavy, port: 80, weight: 3}
    - {name: light, port: 80, weight: 1}
    - {name: never, port: 80, weight: 0}
  - matches: [{path: {value: /half}}]
    backendRefs: [{name: heavy, port: 80}, {name: missing, port: 80}]
"""))
    await engine_stack.start()
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
    objects = yaml.safe_load((engine_stack.root.parent / "status.yaml").read_text())["objects"]
    listener = objects["Gateway/default/gw"]["status"]["listeners"][0]
    assert listener["attachedRoutes"] == 1
    assert {c["type"]: c["status"] for c in listener["conditions"]}["Programmed"] == "True"
    parent = objects["HTTPRoute/default/split"]["status"]["parents"][0]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in parent["conditions"]}
    assert conditions == {"Accepted": ("True", "Accepted"),
                          "ResolvedRefs": ("False", "BackendNotFound")}


async def test_https_listeners_pick_certificates_by_sni(engine_stack: Stack) -> None:
    """HTTPS listeners sharing a port terminate TLS with their own certificate (by SNI), and a
    request whose Host belongs to the other listener than its SNI gets 421."""
    await backend(engine_stack, "shop")
    await backend(engine_stack, "blog")
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
{indent(crt)}
  tls.key: |
{indent(key)}
""")
    engine_stack.write("secrets.yaml", "---\n".join(secrets))
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway("".join(f"""
  - name: {name}
    protocol: HTTPS
    port: {port}
    hostname: {name}.example.com
    tls: {{certificateRefs: [{{name: {name}-tls}}]}}""" for name in ("shop", "blog")) + "\n"))
    engine_stack.write("route.yaml", "---\n".join(route(name, f"""
  parentRefs: [{{name: gw, sectionName: {name}}}]
  rules: [{{backendRefs: [{{name: {name}, port: 80}}]}}]
""") for name in ("shop", "blog")))
    await engine_stack.start()
    context = ssl.create_default_context()
    ca.configure_trust(context)

    async def call(sni: str, host: str) -> tuple[bytes, bytes]:
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                           server_hostname=sni)
            try:
                writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                             .encode())
                raw = await reader.read()
            finally:
                writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        return head, body

    for name in ("shop", "blog"):
        head, body = await call(f"{name}.example.com", f"{name}.example.com")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert json.loads(body)["name"] == f"default/{name}"
    head, _ = await call("shop.example.com", "blog.example.com")
    assert head.startswith(b"HTTP/1.1 421"), head

    # No SNI is not a mismatch: the client is served the hosts of the certificate it was shown.
    no_sni = ssl.create_default_context()
    no_sni.check_hostname = False
    ca.configure_trust(no_sni)
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=no_sni)
        try:
            shown = next(v for _, v in writer.get_extra_info("peercert")["subjectAltName"])
            writer.write(f"GET / HTTP/1.1\r\nHost: {shown}\r\nConnection: close\r\n\r\n"
                         .encode())
            raw = await reader.read()
        finally:
            writer.close()
    assert raw.startswith(b"HTTP/1.1 200"), raw[:80]


async def test_replace_prefix_match_rewrites_and_redirects_by_path_element(
        engine_stack: Stack) -> None:
    """ReplacePrefixMatch (rewrite and redirect) gives the spec table's paths through each
    engine."""
    await backend(engine_stack, "app")
    port = free_port()
    engine_stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))

    def rewrite(value: str) -> str:
        return ("{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, "
                f'replacePrefixMatch: "{value}"}}}}}}')

    def redirect(value: str) -> str:
        return ("{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, "
                f'replacePrefixMatch: "{value}"}}}}}}')

    engine_stack.write("routes.yaml", "---\n".join([
        route("paths", f"""  parentRefs: [{{name: gw}}]
  hostnames: [rw.test]
  rules:
  - matches: [{{path: {{value: /foo}}}}]
    filters: [{rewrite("/xyz/")}]
    backendRefs: [{{name: app, port: 80}}]
  - matches: [{{path: {{value: /empty/}}}}]
    filters: [{rewrite("")}]
    backendRefs: [{{name: app, port: 80}}]
  - matches: [{{path: {{value: /go}}}}]
    filters: [{redirect("")}]
  - matches: [{{path: {{value: /to}}}}]
    filters: [{redirect("/xyz/")}]
"""),
        route("root", f"""  parentRefs: [{{name: gw}}]
  hostnames: [root.test]
  rules:
  - filters: [{rewrite("/xyz")}]
    backendRefs: [{{name: app, port: 80}}]
"""),
    ]))
    await engine_stack.start()
    for host, path, expected in [
        ("rw.test", "/foo/bar?q=1", "/xyz/bar?q=1"),
        ("rw.test", "/foo", "/xyz"),
        ("rw.test", "/empty/bar", "/bar"),
        ("rw.test", "/empty/", "/"),
        ("rw.test", "/empty", "/"),
        ("root.test", "/bar", "/xyz/bar"),
    ]:
        status, _, body = await request(port, host, path)
        assert (path, status, body.get("path")) == (path, 200, expected)
    for path, expected in [("/go/bar?q=1", "/bar?q=1"), ("/go", "/"), ("/to/bar", "/xyz/bar"),
                           ("/to", "/xyz")]:
        status, headers, _ = await request(port, "rw.test", path)
        assert (path, status, headers.get("location")) == (
            path, 302, f"http://rw.test:{port}{expected}")
