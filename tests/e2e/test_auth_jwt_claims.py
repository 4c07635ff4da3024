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


async def test_tokens_from_a_cookie_a_header_or_a_parameter_and_recompute_route(
        stack: Stack) -> None:
    """``extractFrom``: the token is taken from where the provider says (and not from
    ``Authorization`` then); ``recomputeRoute``: the route is chosen again once the claim is
    a header, so a rule matching that header takes the request."""
    await backend(stack, "web")
    await backend(stack, "gold")
    signer = Signer("shop-1")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    provider = {"name": "shop", "issuer": "https://issuer.test",
                "localJWKS": {"type": "Inline", "inline": signer.jwks()},
                "claimToHeaders": [{"header": "x-tier", "claim": "tier"}],
                "extractFrom": {"headers": [{"name": "x-token", "valuePrefix": "Token "}],
                                "cookies": ["session"], "params": ["jwt"]}}
    rules = ("  rules:\n  - matches: [{headers: [{name: x-tier, value: gold}]}]\n"
             "    backendRefs: [{name: gold, port: 80}]\n"
             "  - backendRefs: [{name: web, port: 80}]\n")
    docs = []
    for name, recompute in (("again", True), ("once", False)):
        docs.append(route(name, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{name}.test]\n"
                          + rules))
        security = {"jwt": {"providers": [{**provider, "recomputeRoute": recompute}]}}
        docs.append(
            f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {{name: {name}, "
            "namespace: default}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, "
            f"kind: HTTPRoute, name: {name}}}]\n  security: {json.dumps(security)}\n")
    stack.write("routes.yaml", "---\n".join(docs))
    await stack.start()
    token = signer.token(iss="https://issuer.test", sub="alice", tier="gold")
    for target, headers, want in (
            ("/a", {"X-Token": f"Token {token}"}, 200),
            ("/a", {"Cookie": f"other=1; session={token}"}, 200),
            (f"/a?jwt={token}", None, 200),
            ("/a", {"Authorization": f"Bearer {token}"}, 401),  # not where it is looked for
            ("/a", {"X-Token": token}, 401),  # without the prefix
            ("/a", None, 401)):
        status, _, body = await request(port, "again.test", target, headers=headers)
        assert (headers, status) == (headers, want), body
        if want == 200:
            assert str(body.get("name")).endswith("gold"), body
    status, _, body = await request(port, "once.test", "/a",
                                    headers={"X-Token": f"Token {token}"})
    assert status == 200
    assert str(body.get("name")).endswith("web"), body  # chosen before the claim's header
