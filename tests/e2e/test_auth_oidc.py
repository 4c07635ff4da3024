"""OIDC login (TrafficPolicy ``security.oidc``) through a real Envoy, against an OpenID provider
stub the test starts that speaks the protocol (authorization code flow, RFC 6749 4.1, with
PKCE): ``/authorize`` checks the client and its redirect URI and sends the browser back with a
code; ``/token`` checks the client's credentials (HTTP basic), the code, the redirect URI and
the PKCE verifier, and answers an access token and a signed id_token.

What a browser sees: a 302 to the provider's authorize URL with client_id, redirect_uri, state;
after the login, the session cookies and then 200 from the backend; a forged or expired session
is sent to log in again, never served; logout clears the cookies. A route without the policy
asks for nothing; a policy whose client Secret is missing refuses (403) with a condition. The
client secret never appears in Envoy's config dump.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import yaml

from podway.envoy.engine import admin

from .gateway_helpers import CLASS, backend, gateway, route
from .harness import Stack, endpoints, free_port, service
from .local_servers import serve_app, stack_in
from .test_auth_jwt import Signer

pytestmark = pytest.mark.e2e

CLIENT_ID, CLIENT_SECRET = "shop-web", "s3cret-of-the-client"


class Provider:
    """The OpenID provider stub: codes it gave, what it was asked, tokens' lifetime."""

    def __init__(self) -> None:
        self.signer = Signer("idp-1")
        self.codes: dict[str, tuple[str, str]] = {}  # code → (redirect_uri, code_challenge)
        self.token_calls: list[dict[str, str]] = []
        self.refused: list[str] = []
        self.expires_in = 600
        self.groups = ["staff"]  # the access token's (a JWT's) groups claim

    async def serve(self, stack: Stack) -> int:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/authorize", self.authorize)
        app.router.add_post("/token", self.token)
        return await serve_app(stack, "idp", app)

    async def authorize(self, request: object) -> object:
        from aiohttp import web

        assert isinstance(request, web.Request)
        q = request.query
        if q.get("client_id") != CLIENT_ID or q.get("response_type") != "code" \
                or "openid" not in q.get("scope", "").split():
            self.refused.append(f"authorize {dict(q)}")
            return web.Response(status=400)
        code = secrets.token_urlsafe(16)
        self.codes[code] = (q["redirect_uri"], q.get("code_challenge", ""))
        back = f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}"
        raise web.HTTPFound(back)

    async def token(self, request: object) -> object:
        from aiohttp import web

        assert isinstance(request, web.Request)
        form = dict(await request.post())
        self.token_calls.append({k: str(v) for k, v in form.items()})
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        code = str(form.get("code", ""))
        redirect, challenge = self.codes.pop(code, ("", ""))
        verifier = str(form.get("code_verifier", ""))
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()
                                          ).rstrip(b"=").decode()
        if (scheme != "Basic" or given != expected or not redirect
                or form.get("grant_type") != "authorization_code"
                or form.get("redirect_uri") != redirect or (challenge and digest != challenge)):
            self.refused.append(f"token {form} {scheme}")
            return web.json_response({"error": "invalid_grant"}, status=400)
        id_token = self.signer.token(iss="https://idp.test", aud=CLIENT_ID, sub="alice")
        access = self.signer.token(iss="https://idp.test", sub="alice", groups=self.groups,
                                   jti=secrets.token_urlsafe(8))
        return web.json_response({"access_token": access,
                                  "id_token": id_token, "token_type": "Bearer",
                                  "expires_in": self.expires_in})


async def _get(port: int, host: str, target: str, cookies: dict[str, str] | None = None
               ) -> tuple[int, dict[str, str], list[str], dict[str, object]]:
    """One request: status, headers (last of each), every Set-Cookie, the echo's JSON."""
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            cookie = "; ".join(f"{k}={v}" for k, v in (cookies or {}).items())
            writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: text/html\r\n"
                         f"{'Cookie: ' + cookie + chr(13) + chr(10) if cookie else ''}"
                         "Connection: close\r\n\r\n".encode())
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            data = await reader.read()
        finally:
            writer.close()
    pairs = [(k.strip().lower(), v.strip()) for k, _, v in
             (line.partition(":") for line in head[1:] if line)]
    try:
        body = json.loads(data)
    except ValueError:
        body = {}
    return (int(head[0].split(" ")[1]), dict(pairs),
            [v for k, v in pairs if k == "set-cookie"], body if isinstance(body, dict) else {})


def _jar(set_cookies: list[str]) -> dict[str, str]:
    """The cookies a browser keeps from these Set-Cookie headers (deleted ones dropped)."""
    out: dict[str, str] = {}
    for line in set_cookies:
        parsed: SimpleCookie = SimpleCookie()
        parsed.load(line)
        for name, morsel in parsed.items():
            expires = morsel["expires"]
            gone = morsel.value in ("", "deleted") or (expires and "1970" in expires) \
                or morsel["max-age"] == "0"
            if gone:
                out[name] = ""
            else:
                out[name] = morsel.value
    return out


def _policy(name: str, target: str, idp_port: int, secret: str = "client",
            **more: object) -> str:
    oidc = {"provider": {"issuer": "https://idp.test",
                         "authorizationEndpoint": f"http://127.0.0.1:{idp_port}/authorize",
                         "tokenEndpoint": "http://idp.test/token",
                         "backendRef": {"name": "idp", "port": 80}},
            "clientID": CLIENT_ID, "clientSecret": {"name": secret},
            "scopes": ["email"], "forwardAccessToken": True}
    return yaml.safe_dump({
        "apiVersion": "podway.io/v1alpha1", "kind": "TrafficPolicy",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "name": target}],
                 "security": {"oidc": oidc, **more}}})


_SECRET = yaml.safe_dump({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                          "metadata": {"name": "client", "namespace": "default"},
                          "stringData": {"client-secret": CLIENT_SECRET}})


async def _login(port: int, provider: Provider, host: str, page: str
                 ) -> tuple[dict[str, str], str]:
    """The whole flow from an unauthenticated request: the session cookies, and where the
    callback sent the browser."""
    status, got, set_cookies, _ = await _get(port, host, page)
    assert status == 302, (status, got)
    login = urlsplit(got["location"])
    query = parse_qs(login.query)
    assert login.path == "/authorize", got["location"]
    assert query["client_id"] == [CLIENT_ID]
    assert query["redirect_uri"] == [f"http://{host}/oauth2/callback"]
    assert query["state"]
    assert query["response_type"] == ["code"]
    assert set(query["scope"][0].split()) == {"openid", "email"}
    jar = _jar(set_cookies)
    # The browser logs in at the provider, which sends it back with a code.
    status, back, _, _ = await _get(login.port or 80, "127.0.0.1", f"{login.path}?{login.query}")
    assert status == 302, (status, back, provider.refused)
    callback = urlsplit(back["location"])
    assert (callback.hostname, callback.path) == (host, "/oauth2/callback")
    status, got, set_cookies, _ = await _get(port, host, f"{callback.path}?{callback.query}",
                                             cookies=jar)
    assert status == 302, (status, got, provider.refused)
    jar.update(_jar(set_cookies))
    return {k: v for k, v in jar.items() if v}, got["location"]


@pytest.fixture
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> object:
    """Delta xDS unless a test asks for both flavours (the filter's config comes by ECDS and
    its secrets by SDS in each)."""
    async with stack_in(tmp_path, delta=getattr(request, "param", True)) as made:
        yield made


@pytest.mark.parametrize("stack", [True, False], ids=["delta", "sotw"], indirect=True)
async def test_oidc_login_flow(stack: Stack) -> None:
    await backend(stack, "web")
    provider = Provider()
    idp_port = await provider.serve(stack)
    stack.write("idp.yaml", service("idp", 80, idp_port) + "---\n"
                + endpoints("idp", {"TCP": idp_port}) + "---\n" + _SECRET)
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    routes = [route(n, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{n}.test]\n"
                    "  rules: [{backendRefs: [{name: web, port: 80}]}]\n")
              for n in ("shop", "open", "broken")]
    stack.write("routes.yaml", "---\n".join([
        *routes, _policy("shop", "shop", idp_port),
        _policy("broken", "broken", idp_port, secret="missing")]))
    await stack.start()

    jar, back = await _login(port, provider, "shop.test", "/cart?x=1")
    assert back == "http://shop.test/cart?x=1", back  # back to the page first asked for
    assert provider.token_calls
    assert not provider.refused, provider.refused
    assert {"BearerToken", "OauthHMAC", "OauthExpires", "IdToken"} <= set(jar), jar
    status, _, _, body = await _get(port, "shop.test", "/cart?x=1", cookies=jar)
    assert (status, body.get("path")) == (200, "/cart?x=1"), body
    echoed = {k.lower(): str(v) for k, v in dict(body.get("headers") or {}).items()}
    forwarded = echoed.get("authorization", "").removeprefix("Bearer ")
    assert forwarded.count(".") == 2, echoed  # the access token, forwarded
    assert json.loads(base64.urlsafe_b64decode(forwarded.split(".")[1] + "=="))["sub"] == "alice"

    # A forged session (another signature, or a longer life with the old signature) is sent
    # to log in again: never served.
    forged = dict(jar, OauthHMAC=base64.b64encode(b"x" * 32).decode())
    longer = dict(jar, OauthExpires=str(int(time.time()) + 86400))
    for cookies in (forged, longer, dict(jar, BearerToken="at-guessed"), {}):
        status, got, _, body = await _get(port, "shop.test", "/cart", cookies=cookies)
        assert (status, urlsplit(got.get("location", "")).path) == (302, "/authorize"), body

    # Logout clears the session cookies.
    status, got, set_cookies, _ = await _get(port, "shop.test", "/logout", cookies=jar)
    assert status == 302, got
    cleared = _jar(set_cookies)
    assert (cleared.get("BearerToken"), cleared.get("OauthHMAC")) == ("", ""), set_cookies

    # A route without the policy asks for nothing; a policy without its Secret refuses.
    status, _, _, body = await _get(port, "open.test", "/o")
    assert (status, body.get("path")) == (200, "/o")
    status, _, _, body = await _get(port, "broken.test", "/b")
    assert (status, body) == (403, {})
    objects = yaml.safe_load((stack.root.parent / "status.yaml").read_text())["objects"]

    def conditions(name: str) -> dict[str, tuple[str, str]]:
        (ancestor,) = objects[f"TrafficPolicy/default/{name}"]["status"]["ancestors"]
        return {c["type"]: (c["status"], c["reason"]) for c in ancestor["conditions"]}

    assert conditions("broken")["ResolvedRefs"] == ("False", "SecretNotFound")
    assert conditions("shop") == {"Accepted": ("True", "Accepted"),
                                  "ResolvedRefs": ("True", "ResolvedRefs")}

    # The secrets travel by SDS: Envoy's config dump holds neither.
    engine = await stack.engine()
    status, dump = await admin.request(await engine.wait_started(),
                                       "/config_dump?include_eds", limit_s=10)
    assert status == 200
    assert "podway.oauth2/default/shop" in dump
    assert CLIENT_SECRET not in dump


async def test_the_login_with_authorization_by_the_access_tokens_claims(stack: Stack) -> None:
    """The session's access token (a JWT of the provider), forwarded as a bearer token, is
    checked by the policy's JWT provider, and its groups claim decides: admin 200, else 403."""
    await backend(stack, "web")
    provider = Provider()
    idp_port = await provider.serve(stack)
    stack.write("idp.yaml", service("idp", 80, idp_port) + "---\n"
                + endpoints("idp", {"TCP": idp_port}) + "---\n" + _SECRET)
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    jwt = {"providers": [{"name": "idp", "issuer": "https://idp.test",
                          "localJWKS": {"type": "Inline", "inline": provider.signer.jwks()}}]}
    authorization = {"rules": [{"action": "Allow", "principal": {"jwt": {
        "provider": "idp", "claims": [{"name": "groups", "valueType": "StringArray",
                                       "values": ["admin"]}]}}}]}
    stack.write("routes.yaml", "---\n".join([
        route("staff", "  parentRefs: [{name: gw}]\n  hostnames: [staff.test]\n"
              "  rules: [{backendRefs: [{name: web, port: 80}]}]\n"),
        _policy("staff", "staff", idp_port, jwt=jwt, authorization=authorization)]))
    await stack.start()
    provider.groups = ["staff"]
    jar, _ = await _login(port, provider, "staff.test", "/s")
    status, _, _, body = await _get(port, "staff.test", "/s", cookies=jar)
    assert (status, body) == (403, {})
    provider.groups = ["staff", "admin"]
    jar, _ = await _login(port, provider, "staff.test", "/s")
    status, _, _, body = await _get(port, "staff.test", "/s", cookies=jar)
    assert (status, body.get("path")) == (200, "/s"), body


async def _idle_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        host: str) -> tuple[int, str | None]:
    """One keep-alive request on an open connection: status and its Connection header."""
    writer.write(f"GET /k HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    got = {k.strip().lower(): v.strip() for k, _, v in
           (line.partition(":") for line in head[1:] if line)}
    await reader.readexactly(int(got.get("content-length", "0")))
    return int(head[0].split(" ")[1]), got.get("connection")


async def test_a_policy_change_keeps_the_listeners_connections(stack: Stack) -> None:
    """Changing the policy (its scopes, its Secret) updates its filter's config (ECDS) and
    secrets only: a keep-alive connection opened before, idle across the change, serves the
    next request (a replaced listener closes it at once with a drain time of 0). Removing the
    policy serves the route without a login, and replaces the listener (the idle connection
    is closed: the documented cost); adding it back asks for a login again."""
    await backend(stack, "web")
    provider = Provider()
    idp_port = await provider.serve(stack)
    stack.write("idp.yaml", service("idp", 80, idp_port) + "---\n"
                + endpoints("idp", {"TCP": idp_port}) + "---\n" + _SECRET)
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    routes = [route(n, f"  parentRefs: [{{name: gw}}]\n  hostnames: [{n}.test]\n"
                    "  rules: [{backendRefs: [{name: web, port: 80}]}]\n")
              for n in ("shop", "open")]
    stack.write("routes.yaml", "---\n".join([*routes, _policy("shop", "shop", idp_port)]))
    await stack.start()

    async def scopes() -> set[str]:
        status, got, _, _ = await _get(port, "shop.test", "/")
        if status != 302:
            return set()
        return set(parse_qs(urlsplit(got["location"]).query)["scope"][0].split())

    assert await scopes() == {"openid", "email"}
    async with asyncio.timeout(30):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert await _idle_request(reader, writer, "open.test") == (200, None)
            changed = _policy("shop", "shop", idp_port).replace("- email", "- profile")
            stack.write("routes.yaml", "---\n".join([*routes, changed]))
            stack.write("idp.yaml", service("idp", 80, idp_port) + "---\n" + endpoints(
                "idp", {"TCP": idp_port}) + "---\n" + _SECRET.replace(CLIENT_SECRET, "new"))
            while await scopes() != {"openid", "profile"}:  # noqa: ASYNC110 (until Envoy has it)
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # a replaced listener would have closed it by now
            assert await _idle_request(reader, writer, "shop.test") == (302, None)
            assert await _idle_request(reader, writer, "open.test") == (200, None)
        finally:
            writer.close()
    # The policy goes: no login. That replaces the listener (its filter goes), the cost
    # docs/reference.md names: the idle connection is closed.
    async with asyncio.timeout(30):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert await _idle_request(reader, writer, "open.test") == (200, None)
            stack.write("routes.yaml", "---\n".join(routes))
            while (await _get(port, "shop.test", "/"))[0] != 200:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
                await _idle_request(reader, writer, "open.test")
        finally:
            writer.close()
    stack.write("routes.yaml", "---\n".join([*routes, _policy("shop", "shop", idp_port)]))
    async with asyncio.timeout(20):
        while await scopes() != {"openid", "email"}:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_an_expired_session_logs_in_again(stack: Stack) -> None:
    await backend(stack, "web")
    provider = Provider()
    provider.expires_in = 1
    idp_port = await provider.serve(stack)
    stack.write("idp.yaml", service("idp", 80, idp_port) + "---\n"
                + endpoints("idp", {"TCP": idp_port}) + "---\n" + _SECRET)
    port = free_port()
    stack.write("gw.yaml", CLASS + "---\n" + gateway(
        f"  - {{name: http, protocol: HTTP, port: {port}}}\n"))
    stack.write("routes.yaml", "---\n".join([
        route("shop", "  parentRefs: [{name: gw}]\n  hostnames: [shop.test]\n"
              "  rules: [{backendRefs: [{name: web, port: 80}]}]\n"),
        _policy("shop", "shop", idp_port)]))
    await stack.start()
    jar, _ = await _login(port, provider, "shop.test", "/a")
    status, _, _, _ = await _get(port, "shop.test", "/a", cookies=jar)
    assert status == 200
    await asyncio.sleep(2.2)  # the token's 1 s life is over
    status, got, _, _ = await _get(port, "shop.test", "/a", cookies=jar)
    assert (status, urlsplit(got.get("location", "")).path) == (302, "/authorize"), got
