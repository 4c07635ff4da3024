"""An Ingress asking for an access restriction Podway does not serve (ingress-nginx auth,
satisfy, a WAF, access directives in a snippet) is refused (403 with an error), never served
open; settings that restrict nothing are still served."""

from __future__ import annotations

import pytest

from podway.ir import DirectResponse, Forward
from podway.ir.evaluate import Request, select_route
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import Result, TranslateOptions, translate
from podway.translate.core.problems import Reason, Severity
from podway.translate.ingress.nginx.annotations import PREFIX, read

INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: shop
  creationTimestamp: "2024-01-0{day}T00:00:00Z"
  annotations: {annotations}
spec:
  ingressClassName: nginx
  {extra}
  rules:
  - host: shop.test
    http:
      paths:
      - path: /api
        pathType: Prefix
        backend: {{service: {{name: {name}, port: {{number: 80}}}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: shop}}
spec: {{ports: [{{port: 80}}]}}
"""
CLASS = """apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
"""

# Each: annotations (without PREFIX) that restrict who may reach the app in ingress-nginx.
RESTRICTING: list[dict[str, str]] = [
    {"auth-type": "digest", "auth-secret": "htpasswd"},
    {"auth-type": "Basic", "auth-secret": "htpasswd"},  # ingress-nginx: basic|digest only
    {"auth-url": "http://web.shop.svc/check", "auth-snippet": "proxy_set_header X 1;"},
    {"auth-signin": "https://auth.example/start"},
    {"auth-secret": "shop/htpasswd"},  # without auth-type
    {"auth-realm": "private"},
    {"auth-secret-type": "auth-map"},
    {"auth-method": "GET"},
    {"auth-cache-key": "$remote_user"},
    {"auth-cache-duration": "200 202 401 5m"},
    {"auth-keepalive": "10"},
    {"auth-proxy-set-headers": "shop/auth-headers"},
    {"auth-request-redirect": "http://x/"},
    {"auth-always-set-cookie": "true"},
    {"auth-signin-redirect-param": "rd"},
    {"auth-snippet": "proxy_set_header X-Auth 1;"},
    {"auth-tls-unknown-setting": "on"},  # an auth-tls-* key Podway does not read
    {"satisfy": "any"},
    {"enable-modsecurity": "true"},
    {"enable-owasp-core-rules": "true"},
    {"configuration-snippet": "allow 10.0.0.0/8;\ndeny all;"},
    {"configuration-snippet": "more_set_headers \"X: y\"; deny all;"},
    {"server-snippet": "auth_basic \"closed\"; auth_basic_user_file /etc/htpasswd;"},
    {"configuration-snippet": "auth_request /check;"},
]
# Unserved but restricting nothing: still served (with a warning).
HARMLESS: list[dict[str, str]] = [
    {"configuration-snippet": "more_set_headers \"Access-Control-Allow-Origin: *\";"},
    {"enable-modsecurity": "false"},
    {"server-alias": "www.shop.test"},
]


def annotations(values: dict[str, str]) -> str:
    return "{" + ", ".join(f"{PREFIX}{k}: {v!r}" for k, v in values.items()) + "}"


def run(*ingresses: str) -> Result:
    loaded = load_text(CLASS + "".join("---\n" + i for i in ingresses))
    assert not loaded.errors, loaded.errors
    return translate(Snapshot.of_objects(loaded.objects),
                     TranslateOptions(takeover_classes=("nginx",)))


def ingress(name: str, values: dict[str, str], *, day: int = 1, extra: str = "") -> str:
    return INGRESS.format(name=name, day=day, annotations=annotations(values), extra=extra)


def answer(result: Result, headers: dict[str, str] | None = None) -> object:
    listener = next(lst for lst in result.ir.listeners if lst.name == "ingress/http")
    route = select_route(listener, Request(host="shop.test", path="/api/x", headers=headers))
    assert route is not None
    return route.action


@pytest.mark.parametrize("values", RESTRICTING, ids=",".join)
def test_an_unserved_access_restriction_refuses_every_request(values: dict[str, str]) -> None:
    """The route answers 403 (no pool behind it) and the Ingress has an error naming the key."""
    result = run(ingress("web", values))
    assert answer(result) == DirectResponse(status=403)
    assert not result.ir.pools
    errors = [p for p in result.problems
              if p.severity is Severity.ERROR and p.reason is Reason.UNSUPPORTED_ANNOTATION]
    assert errors, result.problems
    assert "refused (403)" in errors[0].message
    assert errors[0].field.startswith(f"metadata.annotations[{PREFIX}")


@pytest.mark.parametrize("values", [
    {"auth-url": "http://auth.shop.svc/check"},
    {"auth-url": "https://auth.example/oauth2/auth",
     "auth-signin": "https://auth.example/oauth2/start", "auth-response-headers": "X-User"},
    {"auth-url": "http://web.shop.svc/check?host=$host"},
    {"auth-url": "http://web.shop.svc/check", "auth-signin": "https://$server_name/start"},
], ids=",".join)
def test_an_auth_url_that_cannot_be_served_refuses_every_request(values: dict[str, str]) -> None:
    """auth-url naming no Service of the cluster (Podway resolves no outside names), nginx
    variables in it or an unknown one in auth-signin: 403, an error naming the key."""
    result = run(ingress("web", values))
    assert answer(result) == DirectResponse(status=403)
    errors = [p for p in result.problems
              if p.severity is Severity.ERROR and p.reason is Reason.INVALID_ANNOTATION]
    assert errors, result.problems
    assert "refused (403)" in errors[0].message


@pytest.mark.parametrize("values", HARMLESS, ids=",".join)
def test_an_unserved_setting_that_restricts_nothing_is_still_served(
        values: dict[str, str]) -> None:
    result = run(ingress("web", values))
    assert isinstance(answer(result), Forward)
    assert not read({PREFIX + k: v for k, v in values.items()}, namespace="shop").closed


def test_the_default_backend_is_refused_too() -> None:
    """A closed Ingress's defaultBackend answers 403 for every host, not the backend."""
    extra = "defaultBackend: {service: {name: web, port: {number: 80}}}"
    result = run(ingress("web", {"auth-url": "http://a/check"}, extra=extra))
    listener = next(lst for lst in result.ir.listeners if lst.name == "ingress/http")
    for host in ("shop.test", "other.test"):
        route = select_route(listener, Request(host=host, path="/elsewhere"))
        assert route is not None
        assert route.action == DirectResponse(status=403)


def test_a_canary_does_not_bypass_its_closed_main() -> None:
    """ingress-nginx applies the main Ingress's auth to canary traffic: with the main refused,
    the canary header must not reach the canary's backends."""
    canary = {"canary": "true", "canary-by-header": "x-next"}
    result = run(ingress("web", {"auth-url": "http://a/check"}),
                 ingress("next", canary, day=2))
    for headers in ({"x-next": "always"}, None):
        assert answer(result, headers) == DirectResponse(status=403)


def test_a_closed_canary_is_refused_not_forwarded() -> None:
    """A canary asking for auth: requests it would take answer 403; the open main serves."""
    canary = {"canary": "true", "canary-by-header": "x-next", "auth-type": "basic",
              "auth-secret": "s"}
    result = run(ingress("web", {}), ingress("next", canary, day=2))
    assert answer(result, {"x-next": "always"}) == DirectResponse(status=403)
    main = answer(result)
    assert isinstance(main, Forward)
    assert main.backends[0].pool is not None
    assert main.backends[0].pool.split("/")[2] == "web"


def test_a_closed_ssl_passthrough_ingress_is_not_served() -> None:
    """TLS passthrough cannot answer 403: the Ingress gets no passthrough route at all."""
    values = {"ssl-passthrough": "true", "auth-url": "http://a/check"}
    result = run(ingress("web", values))
    assert not [r for lst in result.ir.listeners for r in lst.l4_routes]
    assert not result.ir.pools
