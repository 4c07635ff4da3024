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
from urllib.parse import unquote

import pytest

from .harness import Stack, endpoints, free_port, service
from .local_servers import nginx, serve, stack_in
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
        if "session=good" in cookie.split("; "):
            return web.Response(status=202, headers={"X-User": "alice", "X-Other": "no"})
        if cookie == "session=forbidden":
            return web.Response(status=403, text="forbidden")
        if cookie == "session=broken":
            return web.Response(status=500, text="oops")
        return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="sso"'})

    return await serve(stack, "auth-url", check)


async def _web_and_auth(stack: Stack, seen: list[dict[str, str]], *more: str
                        ) -> tuple[int, int]:
    """An echo backend (Service web) and the auth service (Service oauth2), with ``more``
    manifests in the same file; their ports."""
    web = await stack.start_echo("web")
    auth = await _auth_server(stack, seen)
    stack.write("svc.yaml", "---\n".join([
        service("web", 80, web), endpoints("web", {"TCP": web}),
        service("oauth2", 80, auth), endpoints("oauth2", {"TCP": auth}), *more]))
    return web, auth


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack_in(tmp_path, takeover_classes=("nginx",)) as made:
        yield made


async def test_auth_url_asks_the_url_as_written_and_signs_in(stack: Stack) -> None:
    seen: list[dict[str, str]] = []
    down = free_port()
    await _web_and_auth(stack, seen, service("down", 80, down),
                        endpoints("down", {"TCP": down}))
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
        "GET", "/oauth2/auth?from=podway", "oauth2.default.svc.cluster.local", "")
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
    seen: list[dict[str, str]] = []
    await _web_and_auth(stack, seen)
    stack.write("ingress.yaml", ingress("shop", {"auth-url": OAUTH}, path("/"),
                                        host="shop.test"))
    await stack.start()
    status, got, body = await request(stack.http_port, "shop.test", "/x")
    assert (status, got.get("www-authenticate"), body) == (401, 'Basic realm="sso"', {})
    status, got, body = await request(stack.http_port, "shop.test", "/x",
                                      headers={"Cookie": "session=good"})
    assert (status, body.get("path")) == (200, "/x")
    # Two Cookie headers (as an HTTP/2 client sends them) reach the auth service as one,
    # joined with "; " as cookies are.
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.http_port)
    try:
        writer.write(b"GET /y HTTP/1.1\r\nHost: shop.test\r\nCookie: theme=dark\r\n"
                     b"Cookie: session=good\r\nConnection: close\r\n\r\n")
        head = await reader.readuntil(b"\r\n")
    finally:
        writer.close()
    assert head.split()[1] == b"200", head
    assert seen[-1]["cookie"] == "theme=dark; session=good"


def _ingress_nginx_server(web: int, auth: int, *, signin: bool) -> str:
    """What ingress-nginx's template gives for auth-url (with ``signin``: + auth-signin and
    auth-response-headers X-User) on host shop.test: an internal auth location proxied
    without the body, and an ``error_page 401`` to a location that redirects
    (``$escaped_request_uri`` needs a module plain nginx lacks: ``$request_uri`` here,
    compared unescaped)."""
    redirect = "error_page 401 = @signin;" if signin else ""
    copy = ("auth_request_set $auth_0 $upstream_http_x_user;\n    proxy_set_header X-User $auth_0;"
            if signin else "")
    return f"""server {{ listen 127.0.0.1:PORT; server_name shop.test;
  location = /_external-auth {{
    internal;
    proxy_pass_request_body off;
    proxy_set_header Content-Length "";
    proxy_set_header X-Forwarded-Proto "";
    proxy_set_header Host oauth2.default.svc.cluster.local;
    proxy_set_header X-Original-URL $scheme://$http_host$request_uri;
    proxy_set_header X-Original-Method $request_method;
    proxy_set_header X-Sent-From "nginx-ingress-controller";
    proxy_set_header X-Real-IP $remote_addr;
    proxy_set_header X-Auth-Request-Redirect $request_uri;
    proxy_http_version 1.1;
    proxy_pass http://127.0.0.1:{auth}/oauth2/auth?from=podway;
  }}
  location @signin {{
    return 302 https://login.test/oauth2/start?rd=$scheme://$http_host$request_uri;
  }}
  location / {{
    auth_request /_external-auth;
    {copy}
    {redirect}
    proxy_pass http://127.0.0.1:{web};
  }}
}}"""


async def test_auth_url_answers_as_a_real_nginx_does(stack: Stack, tmp_path: Path) -> None:
    """The same requests through Podway and through a real nginx configured as ingress-nginx
    would be: the same status, sign-in Location (rd unescaped), answer challenge, header to the
    backend, and the same subrequest (method, target, body, X-Original-*, cookie)."""
    seen: list[dict[str, str]] = []
    web, auth = await _web_and_auth(stack, seen)
    stack.write("ingress.yaml", "---\n".join([
        ingress("shop", {"auth-url": OAUTH, "auth-signin": "https://login.test/oauth2/start",
                         "auth-response-headers": "X-User"}, path("/"), host="shop.test"),
        ingress("plain", {"auth-url": OAUTH}, path("/"), host="plain.test")]))
    await stack.start()
    cases = [("POST", "/a/b?q=1%202", {"Cookie": "session=good", "X-User": "mallory"}, b"body"),
             ("GET", "/x", {"Cookie": "session=forbidden"}, b""),
             ("GET", "/x", {"Cookie": "session=broken"}, b""),
             ("PUT", "/deep/path?z=%2F", None, b"")]
    for signin, host in ((True, "shop.test"), (False, "plain.test")):
        port = free_port()
        async with nginx(tmp_path / f"nginx-{signin}", port,
                         _ingress_nginx_server(web, auth, signin=signin)):
            for method, target, headers, body in cases:
                answers = []
                for to, name in ((stack.http_port, host), (port, "shop.test")):
                    seen.clear()
                    status, got, echoed = await request(to, name, target, method=method,
                                                        headers=headers, body=body)
                    assert len(seen) == 1, (to, seen)
                    asked = {k: seen[-1].get(k) for k in (
                        "method", "target", "body", "x-original-method", "cookie",
                        "x-auth-request-redirect", "x-sent-from")}
                    original = (seen[-1].get("x-original-url") or "").replace(name, "HOST")
                    location = got.get("location", "")  # Podway's rd is escaped, nginx's not
                    location = (unquote(location) if to != port else location).replace(
                        name, "HOST")
                    user = {k.lower(): v for k, v in dict(echoed.get("headers") or {}).items()
                            }.get("x-user")
                    answers.append((status, location, got.get("www-authenticate"), user,
                                    asked, original))
                assert answers[0] == answers[1], (signin, method, target, answers)
