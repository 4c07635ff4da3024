"""Authorization by JWT claim (TrafficPolicy ``security.authorization`` rules with
``principal.jwt``) through a real Envoy: the JWT filter keeps a valid token's payload in the
request's metadata, the policy's RBAC reads the claim there. A token with the claim gets 200,
a valid token without it 403, no token 401; a rule naming a provider the policy does not have
refuses the routes (403) instead of serving them open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .gateway_helpers import CLASS, backend, gateway, route
from .harness import Stack, free_port
from .local_servers import stack_in
from .test_auth_jwt import Signer
from .test_nginx_annotations import request

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack_in(tmp_path) as made:
        yield made


def _policy(name: str, signer: Signer, rules: list[dict[str, object]]) -> str:
    security = {
        "jwt": {"providers": [{"name": "shop", "issuer": "https://issuer.test",
                               "localJWKS": {"type": "Inline", "inline": signer.jwks()}}]},
        "authorization": {"defaultAction": "Deny", "rules": rules}}
    return (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {{name: {name}, "
            "namespace: default}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, "
            f"kind: HTTPRoute, name: {name}}}]\n  security: {json.dumps(security)}\n")


async def test_authorization_by_jwt_claim(stack: Stack) -> None:
    await backend(stack, "web")
    signer = Signer("shop-1")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    admins = {"name": "admins", "action": "Allow", "principal": {"jwt": {
        "provider": "shop", "claims": [
            {"name": "groups", "valueType": "StringArray", "values": ["admin", "ops"]},
            {"name": "org.tier", "values": ["gold"]}]}}}
    wrong = {"name": "x", "action": "Allow", "principal": {"jwt": {
        "provider": "elsewhere", "claims": [{"name": "sub", "values": ["alice"]}]}}}
    stack.write("routes.yaml", "---\n".join([
        *(route(n, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{n}.test]\n"
                   "  rules: [{backendRefs: [{name: web, port: 80}]}]\n")
          for n in ("admin", "broken")),
        _policy("admin", signer, [admins]), _policy("broken", signer, [wrong])]))
    await stack.start()

    def bearer(**claims: object) -> dict[str, str]:
        token = signer.token(iss="https://issuer.test", sub="alice", **claims)
        return {"Authorization": f"Bearer {token}"}

    gold = {"tier": "gold"}
    for headers, want in (
            (bearer(groups=["staff", "admin"], org=gold), 200),
            (bearer(groups=["ops"], org=gold), 200),
            (bearer(groups=["staff"], org=gold), 403),  # no group of the rule's
            (bearer(groups=["admin"], org={"tier": "silver"}), 403),  # the other claim differs
            (bearer(groups=["admin"]), 403),  # the nested claim is missing
            (bearer(groups="admin", org=gold), 403),  # not a list
            (bearer(), 403),
            (None, 401)):
        status, _, body = await request(port, "admin.test", "/a", headers=headers)
        assert (headers, status) == (headers, want), body
    for headers in (None, bearer(groups=["admin"], org=gold)):
        status, _, body = await request(port, "broken.test", "/", headers=headers)
        assert (status, body) == (403, {})
