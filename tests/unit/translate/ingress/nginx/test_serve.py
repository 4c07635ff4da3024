"""ingress-nginx annotations → IR pieces, and their precedence against podway.io/ annotations."""

from __future__ import annotations

from podway.ir import ClientAccess, PathKind, RateLimit, Redirect
from podway.model import Ingress, Snapshot
from podway.model.loader import load_text
from podway.translate import TranslateOptions, translate
from podway.translate.ingress.nginx import serve
from podway.translate.ingress.nginx.annotations import PREFIX, read


def nginx(**values: str) -> dict[str, str]:
    return {PREFIX + k.replace("_", "-"): v for k, v in values.items()}


def test_rewrite_groups_the_path_lacks_are_empty() -> None:
    """$n of a group the path does not have becomes empty (nginx), never an engine error."""
    found = read(nginx(rewrite_target="/x/$1/$3"), namespace="a")
    regex = serve.rewrite(found, exact=False, path="/api/(.*)")
    assert regex is not None
    assert (regex.pattern, regex.substitution) == ("(?i)^(?:/api/(.*)).*$", "/x/\\1/")
    exact = serve.rewrite(found, exact=True, path="/a.b")
    assert exact is not None
    assert (exact.pattern, exact.substitution) == ("(?i)^/a\\.b$", "/x//")


def test_regex_paths_only_with_use_regex_or_a_target() -> None:
    """Plain Ingresses keep Kubernetes path matching; Exact stays exact under use-regex."""
    assert serve.path_match(read({}, namespace="a"), exact=False, path="/a") is None
    regex = read(nginx(use_regex="true"), namespace="a")
    found = serve.path_match(regex, exact=False, path="/a+")
    assert found is not None
    assert (found.kind, found.value) == (PathKind.REGEX, "(?i)(?:/a+).*")
    assert serve.path_match(regex, exact=True, path="/a") is None


def test_redirect_url_splits_and_drops_the_request_query() -> None:
    """The redirect target keeps its own query and drops the request's."""
    found = serve.redirect(read(nginx(temporal_redirect="http://x.test:8080/p?q=1"),
                                namespace="a"))
    assert found == Redirect(scheme="http", hostname="x.test", port=8080, path="/p?q=1",
                             status_code=302, strip_query=True)


def test_unreadable_allowlist_refuses_everyone() -> None:
    """An allowlist with an unreadable entry becomes a deny-all filter, never an open one."""
    filters = serve.route_filters(read(nginx(whitelist_source_range="10.0.0.0/8,x"),
                                       namespace="a"))
    assert filters == (ClientAccess(deny=("0.0.0.0/0", "::/0")),)


def test_rate_limits_use_the_burst_multiplier_and_503() -> None:
    """limit-rps 4 with the default multiplier: a bucket of 20, refused with 503."""
    filters = serve.route_filters(read(nginx(limit_rps="4"), namespace="a"))
    assert filters == (RateLimit(requests=4, burst=20, status=503),)


INGRESS = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  namespace: shop
  annotations:
    podway.io/connect-timeout: 2s
    nginx.ingress.kubernetes.io/proxy-connect-timeout: "9"
    nginx.ingress.kubernetes.io/affinity: cookie
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}]}
"""


def test_podway_annotations_win_over_nginx_ones() -> None:
    """podway.io/connect-timeout beats proxy-connect-timeout; nginx affinity still applies."""
    loaded = load_text(INGRESS, source="t")
    result = translate(Snapshot.of_objects(loaded.objects), TranslateOptions())
    pool = result.ir.pools["pool/shop/web/80"]
    assert pool.settings.connect_timeout_ms == 2000
    assert pool.settings.persistence is not None
    assert pool.settings.persistence.name == "INGRESSCOOKIE"
    assert not [p for p in result.problems if p.ref.kind == Ingress.__name__]
