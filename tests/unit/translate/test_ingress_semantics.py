"""Ingress semantics, checked by walking requests through the translated IR.

The cases come from the Kubernetes Ingress documentation's path-matching examples; the manifests
are the golden case ``ingress-paths``, so the golden IR and these behaviours cannot disagree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.ir import IR, DirectResponse, Forward, Listener
from podway.ir.evaluate import Request, select_route
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.sources.files import load_paths
from podway.translate import TranslateOptions, translate

GOLDEN = Path(__file__).parents[2] / "golden" / "translate"


def translated(case: str) -> IR:
    loaded = load_paths([GOLDEN / f"{case}.in.yaml"])
    assert not loaded.errors
    return translate(Snapshot.of_objects(loaded.objects), TranslateOptions()).ir


def http(ir: IR) -> Listener:
    return next(lst for lst in ir.listeners if lst.name == "ingress/http")


def answer(listener: Listener, host: str, path: str) -> str | None:
    """The Service that would answer (its pool's service name), or None for a 404."""
    route = select_route(listener, Request(host=host, path=path))
    if route is None:
        return None
    if isinstance(route.action, DirectResponse):
        return f"status {route.action.status}"
    assert isinstance(route.action, Forward)
    pool = route.action.backends[0].pool
    assert pool is not None
    return pool.split("/")[2]


# (host prefix, request path, expected service or None) — the Kubernetes examples table.
K8S_EXAMPLES = [
    ("prefix-root", "/anything/at/all", "prefix-root"),
    ("exact-foo", "/foo", "exact-foo"),
    ("exact-foo", "/bar", None),
    ("exact-foo", "/foo/", None),
    ("exact-foo-slash", "/foo", None),
    ("prefix-foo", "/foo", "prefix-foo"),
    ("prefix-foo", "/foo/", "prefix-foo"),
    ("prefix-foo-slash", "/foo", "prefix-foo-slash"),
    ("prefix-foo-slash", "/foo/", "prefix-foo-slash"),
    ("prefix-aaa-bb", "/aaa/bbb", None),
    ("prefix-aaa-bbb", "/aaa/bbb", "prefix-aaa-bbb"),
    ("prefix-aaa-bbb-slash", "/aaa/bbb", "prefix-aaa-bbb-slash"),
    ("prefix-aaa-bbb", "/aaa/bbb/", "prefix-aaa-bbb"),
    ("prefix-aaa-bbb", "/aaa/bbb/ccc", "prefix-aaa-bbb"),
    ("prefix-aaa-bbb", "/aaa/bbbxyz", None),
    ("multi", "/aaa/ccc", "multi-aaa"),
    ("multi", "/aaa/bbb", "multi-aaa-bbb"),
    ("multi", "/ccc", "multi-root"),
    ("prefix-aaa", "/ccc", None),
    ("mixed", "/foo", "mixed-exact"),
    ("mixed", "/foo/x", "mixed-prefix"),
    ("implementation", "/impl/x", "impl"),
    ("implementation", "/implx", None),
]


@pytest.mark.parametrize(("host", "path", "expected"), K8S_EXAMPLES)
def test_kubernetes_path_examples(host: str, path: str, expected: str | None) -> None:
    """Each request of the Kubernetes path-matching table reaches the documented backend."""
    listener = http(translated("ingress-paths"))
    assert answer(listener, f"{host}.example.com", path) == expected


def test_query_string_is_not_part_of_the_path() -> None:
    """An Exact path still matches when the request carries a query string."""
    listener = http(translated("ingress-paths"))
    assert answer(listener, "exact-foo.example.com", "/foo?x=1") == "exact-foo"


@pytest.mark.parametrize(("host", "expected_route"), [
    ("a.example.com", "rule/3"),  # exact beats the wildcard
    ("z.example.com", "rule/1"),  # *.example.com covers one label
    ("x.b.example.com", "rule/2"),  # the longer wildcard wins
    ("y.x.b.example.com", "rule/0"),  # two labels: no wildcard, the host-less rule
    ("example.com", "rule/0"),  # a wildcard never covers its own suffix
    ("A.EXAMPLE.COM:8080", "rule/3"),  # case and port are ignored
])
def test_host_precedence(host: str, expected_route: str) -> None:
    """Exact hosts before wildcards (one label, longest first) before host-less rules."""
    route = select_route(http(translated("ingress-hosts")), Request(host=host, path="/"))
    assert route is not None
    assert f"/{expected_route}/" in route.name


def test_default_backend_catches_unmatched_paths_and_hosts() -> None:
    """defaultBackend answers unmatched paths of the Ingress's hosts and unnamed hosts."""
    listener = http(translated("ingress-default-backend"))
    assert answer(listener, "shop.example.com", "/api/x") == "web"
    assert answer(listener, "shop.example.com", "/other") == "fallback"
    assert answer(listener, "unknown.example.com", "/") == "fallback"


def test_missing_backends_answer_503_and_others_keep_serving() -> None:
    """Routes to unresolvable backends respond 503; the valid route still forwards."""
    listener = http(translated("ingress-missing-backends"))
    assert answer(listener, "shop.example.com", "/no-service") == "status 503"
    assert answer(listener, "shop.example.com", "/no-port-name/x") == "status 503"
    assert answer(listener, "shop.example.com", "/ok") == "web"


def test_https_listener_serves_only_hosts_with_a_usable_certificate() -> None:
    """TLS hosts with a valid Secret are on HTTPS; missing/broken Secrets leave theirs out."""
    ir = translated("ingress-tls")
    https = next(lst for lst in ir.listeners if lst.name == "ingress/https")
    hosts = {v.hostname for v in https.virtual_hosts}
    assert hosts == {"secure.example.com", "a.wild.example.com"}
    [cert] = https.certificates
    assert cert.hostnames == ("secure.example.com", "*.wild.example.com")
    assert "PRIVATE KEY" in cert.key_pem
    assert "key_pem" not in repr(cert)


def test_oldest_ingress_wins_a_conflict() -> None:
    """Of two Ingresses claiming one host+path, the older one serves it."""
    text = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: new, namespace: ns, creationTimestamp: "2026-05-01T00:00:00Z"}
spec:
  ingressClassName: podway
  rules: [{host: h.example.com, http: {paths: [{path: /, pathType: Prefix,
          backend: {service: {name: new, port: {number: 80}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: old, namespace: ns, creationTimestamp: "2026-04-01T00:00:00Z"}
spec:
  ingressClassName: podway
  rules: [{host: h.example.com, http: {paths: [{path: /, pathType: Prefix,
          backend: {service: {name: old, port: {number: 80}}}}]}}]
"""
    objects = load_text(text).objects
    result = translate(Snapshot.of_objects(objects))
    assert answer(http(result.ir), "h.example.com", "/") == "status 503"  # old's Service missing
    route = select_route(http(result.ir), Request(host="h.example.com", path="/"))
    assert route is not None
    assert route.origin.name == "old"
    assert {p.reason for p in result.problems if p.ref.name == "new"} == {
        "BackendNotFound", "HostConflict"}
