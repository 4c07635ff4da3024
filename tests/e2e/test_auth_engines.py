"""Basic authentication and authorization rules on each engine (Envoy and a real HAProxy):
the same 401/403/200 for the same requests.

ingress-nginx basic auth (``auth-type: basic``): 401 without or with wrong credentials (HAProxy
names the realm asked; Envoy cannot), 200 for a ``{SHA}`` user and a ``{PLAIN}`` one. A
TrafficPolicy's ``security.authorization`` on an Ingress: a Deny rule on a header first, then
Allow for GET from 127.0.0.1, default Deny — the first matching rule decides.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import Stack
from .local_servers import stack_in
from .test_nginx_annotations import ingress, path, request, start

pytestmark = pytest.mark.e2e


def _sha(password: str) -> str:
    return "{SHA}" + base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(params=["envoy", "haproxy"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    async with stack_in(tmp_path, takeover_classes=("nginx",), engine_kind=request.param) as made:
        yield made


async def test_basic_auth_and_authorization_rules(stack: Stack) -> None:
    htpasswd = f"alice:{_sha('wonderland')}\nbob:{{PLAIN}}builder\n"
    secret = ("apiVersion: v1\nkind: Secret\nmetadata: {name: users, namespace: default}\n"
              f"data: {{auth: {base64.b64encode(htpasswd.encode()).decode()}}}\n")
    policy = ("apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: p, "
              "namespace: default}\nspec:\n  targetRefs: [{group: networking.k8s.io, kind: "
              "Ingress, name: ops}]\n  security:\n    authorization:\n      defaultAction: Deny\n"
              "      rules:\n      - {action: Deny, principal: {headers: [{name: x-block, "
              "values: ['yes']}]}}\n      - {action: Allow, principal: {clientCIDRs: "
              "[127.0.0.1/32]}, methods: [GET]}\n")
    port = await start(stack, "---\n".join([
        secret, ingress("shop", {"auth-type": "basic", "auth-secret": "users",
                                 "auth-realm": "Shop staff"}, path("/"), host="shop.test"),
        ingress("ops", {}, path("/"), host="ops.test"), policy,
        ingress("open", {}, path("/"), host="open.test")]))
    if stack.haproxy:
        await stack.served(stack.state.generation)
    for headers in (None, _basic("alice", "wrong"), _basic("mallory", "wonderland"),
                    {"Authorization": "Bearer x"}):
        status, got, body = await request(port, "shop.test", "/a", headers=headers)
        assert (headers, status, body) == (headers, 401, {}), got
        realm = got.get("www-authenticate", "")
        assert realm.startswith("Basic realm="), got
        if stack.haproxy:
            assert realm == 'Basic realm="Shop staff"'
    for user, password in (("alice", "wonderland"), ("bob", "builder")):
        status, _, body = await request(port, "shop.test", "/a", headers=_basic(user, password))
        assert (user, status, body.get("path")) == (user, 200, "/a")
    for method, headers, source, want in (
            ("GET", None, "127.0.0.1", 200), ("POST", None, "127.0.0.1", 403),
            ("GET", {"x-block": "yes"}, "127.0.0.1", 403), ("GET", {"x-block": "no"},
                                                            "127.0.0.1", 200),
            ("GET", None, "127.0.0.2", 403)):
        status, _, body = await request(port, "ops.test", "/o", method=method, headers=headers,
                                        source=source)
        assert (method, headers, source, status) == (method, headers, source, want), body
    status, _, body = await request(port, "open.test", "/x", method="POST")
    assert (status, body.get("path")) == (200, "/x")
