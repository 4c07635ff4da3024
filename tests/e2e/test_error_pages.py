"""ingress-nginx ``custom-http-errors`` + ``default-backend`` through a real Envoy, compared with
a real nginx configured as ingress-nginx's template would be.

The app answers 404 on /missing (its own body and X-App header), 418 on /teapot, 200 elsewhere;
the error backend answers with the status of ``X-Code`` and a JSON body of what it was asked.
Both proxies must give the client the same: for a listed code the error backend's status, body
and headers (none of the app's), the error backend asked ``/`` (the query kept) with X-Code,
X-Format, X-Original-URI, X-Namespace, X-Ingress-Name, X-Service-Name, X-Service-Port; an
unlisted code and a 200 pass untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import Stack, endpoints, free_port, service
from .local_servers import nginx, serve, stack_in
from .test_nginx_annotations import ingress, path, request

pytestmark = pytest.mark.e2e
_ASKED = ("x-code", "x-format", "x-original-uri", "x-namespace", "x-ingress-name",
          "x-service-name", "x-service-port")


async def _app(request: object) -> object:
    from aiohttp import web

    assert isinstance(request, web.Request)
    if request.path == "/missing":
        return web.Response(status=404, text="app says 404", headers={"X-App": "1"})
    if request.path == "/teapot":
        return web.Response(status=418, text="app teapot", headers={"X-App": "1"})
    if "X-Original-URI" in request.headers or request.path != "/":
        return web.Response(status=200, text="app ok", headers={"X-App": "1"})
    return web.Response(status=200)  # the engine's health check


async def _errors(request: object) -> object:
    from aiohttp import web

    assert isinstance(request, web.Request)
    code = request.headers.get("X-Code")
    if code is None:
        return web.Response(status=200)  # the engine's health check
    seen = {k.lower(): v for k, v in request.headers.items() if k.lower() in _ASKED}
    seen.update(method=request.method, target=request.path_qs)
    return web.json_response(seen, status=int(code), headers={"X-Error-Page": "yes"})


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with stack_in(tmp_path, takeover_classes=("nginx",)) as made:
        yield made


def _nginx_server(app: int, errors: int) -> str:
    """ingress-nginx's template for the Ingress below, its error locations per code."""
    pages = "".join(f"""
  location @custom_{code} {{
    internal;
    proxy_intercept_errors off;
    proxy_set_header X-Code {code};
    proxy_set_header X-Format $http_accept;
    proxy_set_header X-Original-URI $request_uri;
    proxy_set_header X-Namespace default;
    proxy_set_header X-Ingress-Name shop;
    proxy_set_header X-Service-Name app;
    proxy_set_header X-Service-Port 80;
    proxy_set_header X-Request-ID $request_id;
    proxy_set_header Host $host;
    rewrite (.*) / break;
    proxy_pass http://127.0.0.1:{errors};
  }}""" for code in (404, 503))
    return f"""server {{ listen 127.0.0.1:PORT; server_name shop.test;{pages}
  location / {{
    proxy_intercept_errors on;
    error_page 404 = @custom_404;
    error_page 503 = @custom_503;
    proxy_pass http://127.0.0.1:{app};
  }}
}}"""


async def test_custom_http_errors_answer_as_nginx_does(stack: Stack, tmp_path: Path) -> None:
    app = await serve(stack, "app", _app)
    errors = await serve(stack, "errors", _errors)
    stack.write("svc.yaml", "---\n".join([
        service("app", 80, app), endpoints("app", {"TCP": app}),
        service("errors", 80, errors), endpoints("errors", {"TCP": errors})]))
    stack.write("ingress.yaml", ingress("shop", {
        "custom-http-errors": "404,503", "default-backend": "errors"}, path("/", "app"),
        host="shop.test"))
    await stack.start()
    port = free_port()
    async with nginx(tmp_path / "nginx", port, _nginx_server(app, errors)):
        for target, headers in (("/missing?x=1", {"Accept": "application/json"}),
                                ("/missing", None), ("/teapot", None), ("/fine", None)):
            answers = []
            for to in (stack.http_port, port):
                status, got, body = await request(to, "shop.test", target, headers=headers)
                answers.append((status, got.get("x-app"), got.get("x-error-page"),
                                got.get("content-type", "").split(";")[0], body))
            assert answers[0] == answers[1], (target, answers)
            if target.startswith("/missing"):
                assert answers[0][0] == 404
                assert answers[0][4]["x-original-uri"] == target
                query = "".join(target.partition("?")[1:])
                assert answers[0][4]["target"] == "/" + query  # nginx keeps the query
                assert answers[0][2] == "yes"
