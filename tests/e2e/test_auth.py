"""Authentication at the edge through a real Envoy: what a client sees (401, 403, 200).

ingress-nginx basic authentication (``auth-type: basic`` + ``auth-secret``) on a taken-over
class: without credentials, or with wrong ones, 401 naming the realm and the backend sees
nothing; a user of the htpasswd Secret gets through; an Ingress on another host of the same
listener pays nothing and asks nothing; an unusable Secret refuses (403), never serves open.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import Stack, endpoints, service
from .local_servers import serve, stack_in
from .test_nginx_annotations import ingress, path, request

pytestmark = pytest.mark.e2e


def _sha(password: str) -> str:
    return "{SHA}" + base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _secret(name: str, htpasswd: str) -> str:
    return f"""apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: default}}
data: {{auth: {base64.b64encode(htpasswd.encode()).decode()}}}
"""


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack_in(tmp_path, takeover_classes=("nginx",)) as made:
        yield made


async def test_nginx_basic_auth_asks_for_credentials_and_lets_users_in(stack: Stack) -> None:
    web = await stack.start_echo("web")
    stack.write("web.yaml", service("web", 80, web) + "---\n" + endpoints("web", {"TCP": web}))
    basic = {"auth-type": "basic", "auth-secret": "htpasswd", "auth-realm": "Shop staff"}
    broken = {"auth-type": "basic", "auth-secret": "missing"}
    stack.write("ingress.yaml", "---\n".join([
        _secret("htpasswd", f"alice:{_sha('wonderland')}\nbob:{{PLAIN}}builder\n"
                "carol:$apr1$abcdefgh$0123456789abcdefghijkl\n"),
        ingress("shop", basic, path("/"), host="shop.test"),
        ingress("open", {}, path("/"), host="open.test"),
        ingress("broken", broken, path("/"), host="broken.test")]))
    await stack.start()
    port = stack.http_port
    for headers in (None, _basic("alice", "wrong"), _basic("carol", "anything"),
                    _basic("mallory", "wonderland"), {"Authorization": "Bearer x"}):
        status, got, body = await request(port, "shop.test", "/admin", headers=headers)
        assert (status, body) == (401, {}), (headers, status, body)
        assert got.get("www-authenticate", "").startswith("Basic realm="), got
    for user, password in (("alice", "wonderland"), ("bob", "builder")):
        status, _, body = await request(port, "shop.test", "/admin",
                                        headers=_basic(user, password))
        assert (status, body.get("path")) == (200, "/admin"), (user, status, body)
    status, _, body = await request(port, "open.test", "/x")
    assert (status, body.get("path")) == (200, "/x")
    for headers in (None, _basic("alice", "wonderland")):
        status, _, body = await request(port, "broken.test", "/", headers=headers)
        assert (status, body) == (403, {})


async def test_traffic_policy_basic_auth_on_a_gateway_and_a_route(stack: Stack) -> None:
    """TrafficPolicy security on a Gateway (bob) and on one of its HTTPRoutes (alice, which
    wins there): 401 without a user of the policy that applies, 200 with one; a policy whose
    Secret is missing refuses its route (403)."""
    from .gateway_helpers import CLASS, backend, gateway, route
    from .harness import free_port

    await backend(stack, "web")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    routes = [route(name, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{name}.test]\n"
                    "  rules: [{backendRefs: [{name: web, port: 80}]}]\n")
              for name in ("admin", "shop", "billing")]

    def policy(name: str, kind: str, target: str, secret: str) -> str:
        return (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {{name: "
                f"{name}, namespace: default}}\nspec:\n  targetRefs: [{{group: "
                f"gateway.networking.k8s.io, kind: {kind}, name: {target}}}]\n"
                f"  security: {{basicAuth: {{users: {{name: {secret}}}}}}}\n")

    secrets = [_secret("staff", f"alice:{_sha('wonderland')}\n").replace("{auth:", "{.htpasswd:"),
               _secret("everyone", "bob:{PLAIN}builder\n")]
    stack.write("routes.yaml", "---\n".join([
        *routes, *secrets, policy("gw", "Gateway", "gw", "everyone"),
        policy("admin", "HTTPRoute", "admin", "staff"),
        policy("billing", "HTTPRoute", "billing", "missing")]))
    await stack.start()
    alice, bob = _basic("alice", "wonderland"), _basic("bob", "builder")
    for host, headers, want in (("admin", None, 401), ("admin", bob, 401), ("admin", alice, 200),
                                ("shop", None, 401), ("shop", alice, 401), ("shop", bob, 200),
                                ("billing", bob, 403), ("billing", None, 403)):
        status, _, body = await request(port, f"{host}.test", "/x", headers=headers)
        assert (host, headers, status) == (host, headers, want), body
        assert bool(body) == (want == 200)


async def _http_auth_server(stack: Stack, seen: list[str]) -> int:
    """An HTTP auth service: ``Bearer good`` is allowed (200, ``x-user: alice``), anything
    else 401 with a body; it records the paths it is asked about."""
    from aiohttp import web

    async def check(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        if request.headers.get("Authorization") == "Bearer good":
            return web.Response(status=200, headers={"x-user": "alice", "x-other": "1"})
        return web.Response(status=401, text="who are you", headers={"x-denied": "yes"})

    return await serve(stack, "http-auth", check)


async def _grpc_auth_server(stack: Stack) -> int:
    """A gRPC ext_authz service (envoy.service.auth.v3.Authorization): ``Bearer good`` is OK,
    anything else PERMISSION_DENIED with a 403."""
    import grpc
    from envoy.service.auth.v3 import external_auth_pb2 as ea
    from envoy.service.auth.v3 import external_auth_pb2_grpc as ea_grpc
    from envoy.type.v3 import http_status_pb2
    from google.rpc import code_pb2, status_pb2

    class Check(ea_grpc.AuthorizationServicer):  # type: ignore[misc]
        async def Check(self, request: ea.CheckRequest, context: object) -> ea.CheckResponse:
            headers = request.attributes.request.http.headers
            if headers.get("authorization") == "Bearer good":
                return ea.CheckResponse(status=status_pb2.Status(code=code_pb2.OK))
            return ea.CheckResponse(
                status=status_pb2.Status(code=code_pb2.PERMISSION_DENIED),
                denied_response=ea.DeniedHttpResponse(
                    status=http_status_pb2.HttpStatus(code=http_status_pb2.Forbidden),
                    body="grpc says no"))

    server = grpc.aio.server()
    ea_grpc.add_AuthorizationServicer_to_server(Check(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def close() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop(None)

    stack.tasks.append(asyncio.create_task(close(), name="grpc-auth"))
    return port


async def test_gateway_external_auth_http_and_grpc(stack: Stack) -> None:
    """HTTPRoute ExternalAuth filters (experimental channel) through a real Envoy: the HTTP
    auth service's refusal is the answer (401, its body), its allowance forwards with its
    x-user header (only the allowed response header) and the path prefixed; the gRPC one
    answers 403 or forwards (and so does a TrafficPolicy security.extAuth using it); an auth
    service that is down is 403 (fail closed); a route without the filter asks nobody."""
    from .gateway_helpers import CLASS, backend, gateway, route
    from .harness import free_port

    await backend(stack, "web")
    seen: list[str] = []
    http_port = await _http_auth_server(stack, seen)
    grpc_port = await _grpc_auth_server(stack)
    down = free_port()
    for name, target in (("authz", http_port), ("grpcauthz", grpc_port), ("down", down)):
        stack.write(f"{name}.yaml", service(name, 80, target) + "---\n"
                    + endpoints(name, {"TCP": target}))
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))

    def guarded(name: str, auth: str) -> str:
        rules = ("  rules:\n  - backendRefs: [{name: web, port: 80}]\n"
                 f"    filters:\n    - type: ExternalAuth\n      externalAuth: {auth}\n")
        return route(name, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{name}.test]\n{rules}")

    stack.write("routes.yaml", "---\n".join([
        guarded("http", "{protocol: HTTP, backendRef: {name: authz, port: 80}, http: "
                "{path: /check, allowedResponseHeaders: [x-user]}}"),
        guarded("grpc", "{protocol: GRPC, backendRef: {name: grpcauthz, port: 80}, grpc: {}}"),
        guarded("down", "{protocol: HTTP, backendRef: {name: down, port: 80}}"),
        route("policy", "  parentRefs: [{name: gw}]\n  hostnames: [policy.test]\n"
              "  rules: [{backendRefs: [{name: web, port: 80}]}]\n"),
        "apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: p, namespace: "
        "default}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, "
        "name: policy}]\n  security: {extAuth: {protocol: GRPC, backendRef: {name: grpcauthz, "
        "port: 80}}}\n",
        route("open", "  parentRefs: [{name: gw}]\n  hostnames: [open.test]\n"
              "  rules: [{backendRefs: [{name: web, port: 80}]}]\n")]))
    await stack.start()
    good = {"Authorization": "Bearer good"}
    status, got, body = await request(port, "http.test", "/app?x=1")
    assert (status, got.get("x-denied")) == (401, "yes"), (status, got, body)
    status, _, body = await request(port, "http.test", "/app?x=1", headers=good)
    assert (status, body.get("path")) == (200, "/app?x=1"), body
    echoed = {k.lower(): v for k, v in dict(body.get("headers") or {}).items()}
    assert echoed.get("x-user") == "alice"
    assert "x-other" not in echoed
    assert seen[-1] == "/check/app?x=1"
    for headers, want in ((None, 403), ({"Authorization": "Bearer bad"}, 403), (good, 200)):
        status, _, body = await request(port, "grpc.test", "/g", headers=headers)
        assert (headers, status) == (headers, want), body
    for headers, want in ((None, 403), (good, 200)):  # TrafficPolicy security.extAuth
        status, _, body = await request(port, "policy.test", "/p", headers=headers)
        assert (headers, status) == (headers, want), body
    for headers in (None, good):
        status, _, _ = await request(port, "down.test", "/", headers=headers)
        assert status == 403
    asked = len(seen)
    status, _, body = await request(port, "open.test", "/o")
    assert (status, body.get("path"), len(seen)) == (200, "/o", asked)


async def test_traffic_policy_authorization_rules(stack: Stack) -> None:
    """security.authorization through a real Envoy: a Deny rule on a header comes first, then
    Allow for GET from 127.0.0.1, default Deny: the first matching rule decides (403 or 200)."""
    from .gateway_helpers import CLASS, backend, gateway, route
    from .harness import free_port

    await backend(stack, "web")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("routes.yaml", "---\n".join([
        route("app", "  parentRefs: [{name: gw}]\n  hostnames: [app.test]\n"
              "  rules: [{backendRefs: [{name: web, port: 80}]}]\n"),
        "apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: p, namespace: "
        "default}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, "
        "name: app}]\n  security:\n    authorization:\n      defaultAction: Deny\n"
        "      rules:\n      - {action: Deny, principal: {headers: [{name: x-block, values: "
        "['yes']}]}}\n      - {action: Allow, principal: {clientCIDRs: [127.0.0.1/32]}, "
        "methods: [GET]}\n"]))
    await stack.start()
    for method, headers, source, want in (
            ("GET", None, "127.0.0.1", 200), ("POST", None, "127.0.0.1", 403),
            ("GET", {"x-block": "yes"}, "127.0.0.1", 403), ("GET", None, "127.0.0.2", 403)):
        status, _, body = await request(port, "app.test", "/a", method=method, headers=headers,
                                        source=source)
        assert (method, headers, source, status) == (method, headers, source, want), body
