"""Authentication at the edge through a real Envoy: what a client sees (401, 403, 200).

ingress-nginx basic authentication (``auth-type: basic`` + ``auth-secret``) on a taken-over
class: without credentials, or with wrong ones, 401 naming the realm and the backend sees
nothing; a user of the htpasswd Secret gets through; an Ingress on another host of the same
listener pays nothing and asks nothing; an unusable Secret refuses (403), never serves open.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import Stack, endpoints, make_stack, service
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
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, takeover_classes=("nginx",))
    try:
        yield made
    finally:
        await made.stop()


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
