"""ingress-nginx ``auth-url`` / ``auth-signin`` through a real Envoy, as nginx's auth_request.

An auth service started by the test decides by the request's cookie: ``session=good`` is
allowed (200 with ``X-User``), ``forbidden`` 403, ``broken`` 500, anything else 401. What the
client sees: the backend's answer with ``X-User`` from the auth service (a client's own
``X-User`` dropped), 302 to the sign-in URL with ``rd=`` as ingress-nginx builds it, 403, 500;
what the auth service sees: exactly the URL given (oauth2-proxy's ``/oauth2/auth``, query
kept), the request's method and cookie, ``X-Original-URL``, ``X-Original-Method``,
``X-Auth-Request-Redirect``, no body. An auth service that is down is 500; an auth-url naming
no Service, or an unserved ``auth-snippet``, refuses (403).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import Stack, endpoints, free_port, make_stack, service
from .test_nginx_annotations import ingress, path, request

pytestmark = pytest.mark.e2e
OAUTH = "http://oauth2.default.svc.cluster.local/oauth2/auth?from=podway"


async def _auth_server(stack: Stack, seen: list[dict[str, str]]) -> int:
    from aiohttp import web

    async def check(request: web.Request) -> web.Response:
        body = await request.read()
        if "X-Original-URL" not in request.headers:
            return web.Response(status=200)  # the engine's health check of the pool
        seen.append({"method": request.method, "target": request.path_qs,
                     "host": request.host, "body": body.decode(),
                     **{k.lower(): v for k, v in request.headers.items()}})
        cookie = request.headers.get("Cookie", "")
        if cookie == "session=good":
            return web.Response(status=202, headers={"X-User": "alice", "X-Other": "no"})
        if cookie == "session=forbidden":
            return web.Response(status=403, text="forbidden")
        if cookie == "session=broken":
            return web.Response(status=500, text="oops")
        return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="sso"'})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", check)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    stack.tasks.append(asyncio.create_task(close(), name="auth-url"))
    return port


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    root = tmp_path / "manifests"
    root.mkdir()
    made = await make_stack(root, takeover_classes=("nginx",))
    try:
        yield made
    finally:
        await made.stop()


async def test_auth_url_asks_the_url_as_written_and_signs_in(stack: Stack) -> None:
    web = await stack.start_echo("web")
    seen: list[dict[str, str]] = []
    auth = await _auth_server(stack, seen)
    down = free_port()
    stack.write("svc.yaml", "---\n".join([
        service("web", 80, web), endpoints("web", {"TCP": web}),
        service("oauth2", 80, auth), endpoints("oauth2", {"TCP": auth}),
        service("down", 80, down), endpoints("down", {"TCP": down})]))
    shop = {"auth-url": OAUTH, "auth-signin": "https://login.test/oauth2/start",
            "auth-response-headers": "X-User"}
    blog = {"auth-url": "http://oauth2/oauth2/auth", "auth-method": "POST",
            "auth-signin": "https://$host/oauth2/start?rd=$escaped_request_uri"}
    stack.write("ingress.yaml", "---\n".join([
        ingress("shop", shop, path("/"), host="shop.test"),
        ingress("blog", blog, path("/"), host="blog.test"),
        ingress("down", {"auth-url": "http://down.default/auth"}, path("/"), host="down.test"),
        ingress("nowhere", {"auth-url": "https://auth.example.com/check"}, path("/"),
                host="nowhere.test"),
        ingress("snippet", {"auth-url": OAUTH, "auth-snippet": "proxy_set_header X-A 1;"},
                path("/"), host="snippet.test"),
        ingress("open", {}, path("/"), host="open.test")]))
    await stack.start()
    port = stack.http_port
    good = {"Cookie": "session=good", "X-User": "mallory"}
    status, _, body = await request(port, "shop.test", "/admin?q=1", method="POST",
                                    headers=good, body=b"payload")
    assert (status, body.get("path")) == (200, "/admin?q=1"), (body, seen)
    echoed = {k.lower(): v for k, v in dict(body.get("headers") or {}).items()}
    assert echoed.get("x-user") == "alice", echoed  # the auth service's, not the client's
    assert "x-other" not in echoed
    asked = seen[-1]
    assert (asked["method"], asked["target"], asked["host"], asked["body"]) == (
        "POST", "/oauth2/auth?from=podway", "oauth2.default.svc.cluster.local", "")
    assert asked["x-original-url"] == "http://shop.test/admin?q=1"
    assert asked["x-original-method"] == "POST"
    assert asked["x-auth-request-redirect"] == "/admin?q=1"
    assert asked["cookie"] == "session=good"
    status, got, body = await request(port, "shop.test", "/admin?q=1")
    assert (status, got.get("location"), body) == (
        302, "https://login.test/oauth2/start?rd=http://shop.test%2Fadmin%3Fq%3D1", {})
    for cookie, want in (("forbidden", 403), ("broken", 500)):
        status, _, body = await request(port, "shop.test", "/", headers={
            "Cookie": f"session={cookie}"})
        assert (cookie, status, body) == (cookie, want, {})
    # auth-method, a Service named by its short name, nginx variables in auth-signin.
    status, got, _ = await request(port, "blog.test", "/p/1?x=y")
    assert (status, got.get("location")) == (
        302, "https://blog.test/oauth2/start?rd=%2Fp%2F1%3Fx%3Dy")
    assert (seen[-1]["method"], seen[-1]["target"]) == ("POST", "/oauth2/auth")
    asked_so_far = len(seen)
    for host, want in (("down.test", 500), ("nowhere.test", 403), ("snippet.test", 403)):
        for headers in (None, good):
            status, _, body = await request(port, host, "/", headers=headers)
            assert (host, status, body) == (host, want, {})
    status, _, body = await request(port, "open.test", "/o")
    assert (status, body.get("path"), len(seen)) == (200, "/o", asked_so_far)


async def test_auth_url_without_sign_in_answers_401_with_the_challenge(stack: Stack) -> None:
    web = await stack.start_echo("web")
    seen: list[dict[str, str]] = []
    auth = await _auth_server(stack, seen)
    stack.write("svc.yaml", "---\n".join([
        service("web", 80, web), endpoints("web", {"TCP": web}),
        service("oauth2", 80, auth), endpoints("oauth2", {"TCP": auth})]))
    stack.write("ingress.yaml", ingress("shop", {"auth-url": OAUTH}, path("/"),
                                        host="shop.test"))
    await stack.start()
    status, got, body = await request(stack.http_port, "shop.test", "/x")
    assert (status, got.get("www-authenticate"), body) == (401, 'Basic realm="sso"', {})
    status, got, body = await request(stack.http_port, "shop.test", "/x",
                                      headers={"Cookie": "session=good"})
    assert (status, body.get("path")) == (200, "/x")
