"""JWT authentication (TrafficPolicy ``security.jwt``) through a real Envoy.

Tokens are RS256, signed by the test with its own keys; one provider's key set is inline in
the policy, another's is fetched from a JWKS server the test starts (through a Service). What
a client sees: 200 with a valid token (the backend gets the claim as a header, not the token),
401 without one, expired, badly signed or of another issuer, 403 for another audience; a route
without the policy asks for nothing; a policy whose key set is missing refuses (403). And a
provider change reaches Envoy without touching its listeners: an idle keep-alive connection
opened before the change serves the next request under the new provider.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from .gateway_helpers import CLASS, backend, gateway, route
from .harness import Stack, endpoints, free_port, service
from .local_servers import serve_app, stack_in
from .test_nginx_annotations import request

pytestmark = pytest.mark.e2e


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Signer:
    """An RSA key: its JWKS and RS256 tokens signed with it."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> str:
        numbers = self.key.public_key().public_numbers()
        n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        return json.dumps({"keys": [{"kty": "RSA", "alg": "RS256", "use": "sig",
                                     "kid": self.kid, "n": _b64(n),
                                     "e": _b64(numbers.e.to_bytes(3, "big"))}]})

    def token(self, **claims: object) -> str:
        now = int(time.time())
        body = {"iat": now, "exp": now + 600, **claims}
        head = _b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": self.kid}).encode())
        payload = _b64(json.dumps(body).encode())
        signature = self.key.sign(f"{head}.{payload}".encode(), padding.PKCS1v15(),
                                  hashes.SHA256())
        return f"{head}.{payload}.{_b64(signature)}"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _policy(name: str, target: str, jwt: str) -> str:
    return (f"apiVersion: podway.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {{name: {name}, "
            "namespace: default}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, "
            f"kind: HTTPRoute, name: {target}}}]\n  security:\n    jwt: {jwt}\n")


def _inline(signer: Signer, audience: str) -> str:
    return json.dumps({"providers": [{
        "name": "shop", "issuer": "https://issuer.test", "audiences": [audience],
        "localJWKS": {"type": "Inline", "inline": signer.jwks()},
        "claimToHeaders": [{"header": "x-user", "claim": "sub"}]}]})


async def _jwks_server(stack: Stack, signer: Signer, asked: list[str]) -> int:
    from aiohttp import web

    async def keys(request: web.Request) -> web.Response:
        asked.append(f"{request.host}{request.path}")
        return web.Response(text=signer.jwks(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/keys", keys)
    return await serve_app(stack, "jwks", app)


@pytest.fixture(params=[True, False], ids=["delta", "sotw"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """Both xDS flavours: the filter config comes over ADS in each."""
    async with stack_in(tmp_path, delta=request.param) as made:
        yield made


def _routes(*names: str) -> list[str]:
    return [route(n, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{n}.test]\n"
                  "  rules: [{backendRefs: [{name: web, port: 80}]}]\n") for n in names]


async def test_jwt_inline_and_remote_key_sets(stack: Stack) -> None:
    await backend(stack, "web")
    shop, idp, stranger = Signer("shop-1"), Signer("idp-1"), Signer("shop-1")
    asked: list[str] = []
    jwks_port = await _jwks_server(stack, idp, asked)
    stack.write("jwks.yaml", service("jwks", 80, jwks_port) + "---\n"
                + endpoints("jwks", {"TCP": jwks_port}))
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    remote = json.dumps({"optional": True, "providers": [{
        "name": "idp", "issuer": "https://idp.test",
        "remoteJWKS": {"uri": "http://idp.test/keys", "backendRef": {"name": "jwks",
                                                                     "port": 80}}}]})
    broken = json.dumps({"providers": [{"name": "x", "localJWKS": {
        "type": "ValueRef", "valueRef": {"kind": "ConfigMap", "name": "missing"}}}]})
    stack.write("routes.yaml", "---\n".join([
        *_routes("local", "remote", "broken", "open"),
        _policy("local", "local", _inline(shop, "shop")),
        _policy("remote", "remote", remote), _policy("broken", "broken", broken)]))
    await stack.start()
    good = shop.token(iss="https://issuer.test", aud="shop", sub="alice")
    status, got, body = await request(port, "local.test", "/a", headers=_bearer(good))
    assert status == 200, (status, got, body)
    echoed = {k.lower(): v for k, v in dict(body.get("headers") or {}).items()}
    assert echoed.get("x-user") == "alice", echoed
    assert "authorization" not in echoed  # the token is not forwarded
    for headers, want in (
            (None, 401),
            (_bearer(shop.token(iss="https://issuer.test", aud="shop", exp=int(time.time()) - 60)),
             401),
            (_bearer(stranger.token(iss="https://issuer.test", aud="shop")), 401),  # bad sig
            (_bearer(shop.token(iss="https://other.test", aud="shop")), 401),
            (_bearer(good[:-4] + "AAAA"), 401),
            (_bearer(shop.token(iss="https://issuer.test", aud="billing")), 403),
            (_bearer(idp.token(iss="https://idp.test")), 401)):  # another provider's token
        status, got, body = await request(port, "local.test", "/a", headers=headers)
        assert (headers, status, body) == (headers, want, {}), got
        if want == 401:
            assert got.get("www-authenticate", "").startswith("Bearer"), got
    # Without extractFrom the token counts only in Authorization (Envoy's own default also
    # reads an access_token query parameter: a token in a URL ends up in logs).
    status, _, body = await request(port, "local.test", f"/a?access_token={good}")
    assert (status, body) == (401, {})
    # The remote key set, fetched through the Service with the URI's host and path; optional:
    # no token passes, a bad one does not.
    for headers, want in ((_bearer(idp.token(iss="https://idp.test")), 200), (None, 200),
                          (_bearer(good), 401)):
        status, _, body = await request(port, "remote.test", "/r", headers=headers)
        assert (headers, status) == (headers, want), body
    assert asked, "the key set was never fetched"
    assert set(asked) == {"idp.test/keys"}, asked
    for headers in (None, _bearer(good)):
        status, _, body = await request(port, "broken.test", "/", headers=headers)
        assert (status, body) == (403, {})
    status, _, body = await request(port, "open.test", "/o")
    assert (status, body.get("path")) == (200, "/o")


async def _send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str,
                token: str) -> tuple[int, dict[str, str]]:
    """One keep-alive request on an open connection: status and headers (body read)."""
    writer.write(f"GET /k HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n"
                 .encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    got = {k.strip().lower(): v.strip() for k, _, v in
           (line.partition(":") for line in head[1:] if line)}
    await reader.readexactly(int(got.get("content-length", "0")))
    return int(head[0].split(" ")[1]), got


async def test_a_provider_change_keeps_idle_connections(stack: Stack) -> None:
    """Changing the provider (another audience) changes only the JWT filter's config (ECDS):
    a keep-alive connection opened before, idle across the change, serves the next request
    under the new provider; the listener was not replaced (with a drain time of 0 a replaced
    listener closes it at once)."""
    await backend(stack, "web")
    shop = Signer("shop-1")
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("routes.yaml", "---\n".join([*_routes("local"),
                                            _policy("local", "local", _inline(shop, "shop"))]))
    await stack.start()
    old = shop.token(iss="https://issuer.test", aud="shop", sub="alice")
    new = shop.token(iss="https://issuer.test", aud="billing", sub="alice")
    async with asyncio.timeout(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert (await _send(reader, writer, "local.test", old))[0] == 200
            assert (await _send(reader, writer, "local.test", new))[0] == 403
            generation = stack.state.generation
            stack.write("routes.yaml", "---\n".join([
                *_routes("local"), _policy("local", "local", _inline(shop, "billing"))]))
            await stack.applied(generation + 1)
            while (await request(  # noqa: ASYNC110 (until Envoy has the new provider)
                    port, "local.test", "/", headers=_bearer(new)))[0] != 200:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # a replaced listener would have closed it by now
            status, got = await _send(reader, writer, "local.test", new)
            assert (status, got.get("connection")) == (200, None), got
            assert (await _send(reader, writer, "local.test", old))[0] == 403
        finally:
            writer.close()
