"""to-gateway on any parsed Ingress: never raises, and what it writes always loads as Gateway API
objects Podway reads (Hypothesis over paths, hosts and annotation values)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podway.model import Ingress
from podway.model.loader import load_text, parse_object
from podway.tools.migrate.probes import from_objects
from podway.tools.migrate.to_gateway import convert, dump

KEYS = ("rewrite-target", "use-regex", "ssl-redirect", "force-ssl-redirect",
        "permanent-redirect", "temporal-redirect", "temporal-redirect-code", "app-root",
        "upstream-vhost", "x-forwarded-prefix", "enable-cors", "cors-allow-origin", "canary",
        "canary-by-header", "canary-by-header-value", "canary-by-cookie", "canary-weight",
        "configuration-snippet", "proxy-read-timeout", "limit-rps")
VALUES = st.sampled_from(["true", "false", "/", "/$2", "/x/$1", "10", "https://a.test/b",
                          "X-Canary", "gold", "", "??", "http://[bad", "/app",
                          "\u00b2"])  # a digit int() refuses
PATHS = st.sampled_from(["/", "/api", "/api/", "/api(/|$)(.*)", "/(a|b)/(.*)", "/x/[0-9]+",
                         "/v1", "/api/status"])
HOSTS = st.sampled_from([None, "a.test", "*.b.test", "c.test"])


@st.composite
def ingresses(draw: st.DrawFn) -> Ingress:
    notes = draw(st.dictionaries(st.sampled_from(KEYS).map(
        lambda k: "nginx.ingress.kubernetes.io/" + k), VALUES, max_size=5))
    rules = [{"host": h, "http": {"paths": [
        {"path": p, "pathType": draw(st.sampled_from(["Prefix", "Exact",
                                                      "ImplementationSpecific"])),
         "backend": {"service": {"name": "web", "port": draw(st.sampled_from(
             [{"number": 80}, {"name": "http"}]))}}} for p in draw(st.lists(PATHS, min_size=1,
                                                                           max_size=3))]}}
             for h in draw(st.lists(HOSTS, min_size=1, max_size=2))]
    spec: dict[str, object] = {"rules": [{k: v for k, v in r.items() if v is not None}
                                         for r in rules]}
    if draw(st.booleans()):
        spec["tls"] = [{"hosts": [h for h in (r["host"] for r in rules) if h],
                        "secretName": "cert"}]
    if draw(st.booleans()):
        spec["defaultBackend"] = {"service": {"name": "web", "port": {"number": 80}}}
    raw = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": draw(st.sampled_from(["a", "b", "c"])),
                        "namespace": draw(st.sampled_from(["x", "y"])), "annotations": notes},
           "spec": spec}
    obj, error = parse_object(raw)
    assert error is None
    assert isinstance(obj, Ingress)
    return obj


@settings(max_examples=60, deadline=None)
@given(st.lists(ingresses(), min_size=1, max_size=4))
def test_convert_never_raises_and_its_output_loads(objects: list[Ingress]) -> None:
    """Also: compare's request generation never raises on the same Ingresses."""
    assert all(p.path.startswith("/") for p in from_objects(objects))
    result = convert(objects)
    loaded = load_text(dump(result.objects))
    assert loaded.errors == []
    assert {o.KIND for o in loaded.objects} <= {"GatewayClass", "Gateway", "ReferenceGrant",
                                                "HTTPRoute"}
    assert sum(o.KIND == "Gateway" for o in loaded.objects) == 1


def test_a_family_to_gateway_does_not_know_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader may learn a family before to-gateway converts it: that is a note, never a
    silent drop (as ssl-passthrough once was)."""
    from podway.tools.migrate import not_carried

    obj, _ = parse_object({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "a", "namespace": "x",
                     "annotations": {"nginx.ingress.kubernetes.io/app-root": "/app"}},
        "spec": {"rules": [{"host": "a.test", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    assert isinstance(obj, Ingress)
    assert convert([obj]).notes == ()
    monkeypatch.setattr(not_carried, "CARRIED", not_carried.CARRIED - {"app_root"})
    (note,) = convert([obj]).notes
    assert note.key == "nginx.ingress.kubernetes.io/(app-root)"
    assert "not carried over" in note.message


def test_an_ingress_with_an_unserved_access_restriction_is_not_converted_open() -> None:
    """auth-url cannot be carried: the Ingress gets no route (a note says why), never an open
    one; its open neighbour is converted, and no spurious "(closed)" family note appears."""
    text = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: private
  namespace: shop
  annotations: {nginx.ingress.kubernetes.io/auth-url: "http://auth.shop.svc/check"}
spec:
  rules:
  - host: private.test
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: public, namespace: shop}
spec:
  rules:
  - host: public.test
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
"""
    loaded = load_text(text)
    result = convert(loaded.objects)
    hosts = [h for o in result.objects if o["kind"] == "HTTPRoute"
             for h in o["spec"].get("hostnames", [])]
    assert hosts == ["public.test"]
    messages = [n.message for n in result.notes]
    assert any("not converted" in m and "auth-url" in m for m in messages), messages
    assert not [n for n in result.notes if "(closed)" in n.key]



@pytest.mark.parametrize("annotations", [
    {"nginx.ingress.kubernetes.io/whitelist-source-range": "10.0.0.0/8"},
    {"nginx.ingress.kubernetes.io/auth-tls-secret": "shop/ca"},
    {"nginx.ingress.kubernetes.io/satisfy": "any"},
    {"nginx.ingress.kubernetes.io/auth-type": "basic",
     "nginx.ingress.kubernetes.io/auth-secret": "htpasswd"},
])
def test_restrictions_served_on_ingresses_but_not_converted_are_not_dropped(
        annotations: dict[str, str]) -> None:
    """Source ranges and client certificates (served by Podway on the Ingress, not carried
    by to-gateway) would be dropped by the conversion: the Ingress is not converted either."""
    raw = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
           "metadata": {"name": "p", "namespace": "shop", "annotations": annotations},
           "spec": {"rules": [{"host": "p.test", "http": {"paths": [
               {"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}
    obj, error = parse_object(raw)
    assert error is None
    assert obj is not None
    result = convert([obj])
    assert not [o for o in result.objects if o["kind"] == "HTTPRoute"]
    assert any("not converted" in n.message for n in result.notes)


HSTS_TEXT = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: shop
  annotations: {nginx.ingress.kubernetes.io/ssl-redirect: "false"}
spec:
  tls: [{hosts: [shop.test], secretName: shop-tls}]
  rules:
  - host: shop.test
    http:
      paths: [{path: /app, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
"""


def test_hsts_is_carried_on_https_only() -> None:
    """ingress-nginx's HSTS (default on): the HTTPS route's rules set it, plain HTTP gets a
    route of its own without it, and the 404 of unserved paths (no header in Gateway API) is a
    note; hsts=false gives one route for both listeners and no note."""
    from podway.tools.migrate.to_gateway import ConvertOptions
    from podway.translate.core.nginx_config import parse

    result = convert(load_text(HSTS_TEXT).objects)
    routes = {o["metadata"]["name"]: o["spec"] for o in result.objects
              if o["kind"] == "HTTPRoute"}
    assert [p["sectionName"] for p in routes["shop"]["parentRefs"]] == ["https-shop-test"]
    assert routes["shop"]["rules"][0]["filters"] == [{
        "type": "ResponseHeaderModifier", "responseHeaderModifier": {"set": [{
            "name": "Strict-Transport-Security",
            "value": "max-age=31536000; includeSubDomains"}]}}]
    assert [p["sectionName"] for p in routes["shop-http"]["parentRefs"]] == ["http"]
    assert "filters" not in routes["shop-http"]["rules"][0]
    assert [n.key for n in result.notes] == ["(ConfigMap) hsts"]
    off = convert(load_text(HSTS_TEXT).objects, ConvertOptions(nginx=parse(["hsts=false"])))
    routes = {o["metadata"]["name"]: o["spec"] for o in off.objects if o["kind"] == "HTTPRoute"}
    assert list(routes) == ["shop"]
    assert [p["sectionName"] for p in routes["shop"]["parentRefs"]] == ["https-shop-test",
                                                                       "http"]
    assert not off.notes


REGEX_HOST = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: shop
  creationTimestamp: "2026-01-0{day}T00:00:00Z"
  annotations: {annotations}
spec:
  rules:
  - host: r.test
    http:
      paths:
      - path: "{path}"
        pathType: {kind}
        backend: {{service: {{name: web, port: {{number: 80}}}}}}
"""


def _regex_world(*ingresses: tuple[str, str, str, str]) -> str:
    return "---\n".join(REGEX_HOST.format(name=n, day=i + 1, annotations=a, path=p, kind=k)
                         for i, (n, a, p, k) in enumerate(ingresses))


def _paths(text: str) -> dict[str, list[dict[str, str]]]:
    result = convert(load_text(text).objects)
    return {o["metadata"]["name"]: [m["path"] for r in o["spec"]["rules"]
                                    for m in r["matches"]]
            for o in result.objects if o["kind"] == "HTTPRoute"}


def test_use_regex_paths_stay_case_insensitive_and_siblings_become_regexes() -> None:
    """use-regex: the Ingress's literal path is a case-insensitive regex anchored at the start
    (not a case-sensitive PathPrefix); a sibling Ingress's Prefix path on the same host
    becomes one too (/api takes /apix in nginx); "/" stays PathPrefix / (the same), and a
    host without use-regex keeps PathPrefix."""
    regex = '{nginx.ingress.kubernetes.io/use-regex: "true"}'
    text = _regex_world(("app", regex, "/app", "Prefix"), ("api", "{}", "/api/", "Prefix"),
                        ("root", "{}", "/", "Prefix"))
    assert _paths(text) == {
        "app": [{"type": "RegularExpression", "value": "(?i)(?:/app).*"}],
        "api": [{"type": "RegularExpression", "value": "(?i)(?:/api).*"}],
        "root": [{"type": "PathPrefix", "value": "/"}]}
    plain = _regex_world(("api", "{}", "/api", "Prefix"))
    assert _paths(plain) == {"api": [{"type": "PathPrefix", "value": "/api"}]}
    notes = [n.message for n in convert(load_text(text).objects).notes]
    assert any("matched /api/ as case-insensitive regexes" in m for m in notes), notes


def test_what_cannot_be_carried_exactly_is_a_note() -> None:
    """The rewrite idiom needs a (case-sensitive) PathPrefix; a shorter sibling regex then
    ranks before it in Gateway API; an ImplementationSpecific path was a string prefix in
    nginx: each is a note."""
    idiom = '{nginx.ingress.kubernetes.io/rewrite-target: "/$2"}'
    text = _regex_world(("rw", idiom, "/api(/|$)(.*)", "ImplementationSpecific"),
                        ("a", "{}", "/a", "Prefix"))
    notes = [n.message for n in convert(load_text(text).objects).notes]
    assert any("case-sensitive: /API no longer matches" in m for m in notes), notes
    assert any("rank before PathPrefix (/api)" in m for m in notes), notes
    exact = _regex_world(("rw", '{nginx.ingress.kubernetes.io/use-regex: "true"}', "/a",
                          "Prefix"), ("e", "{}", "/status", "Exact"))
    notes = [n.message for n in convert(load_text(exact).objects).notes]
    assert any("Exact path '/status' on a host with regex paths" in m for m in notes), notes
    loose = _regex_world(("x", "{}", "/app", "ImplementationSpecific"))
    notes = [n.message for n in convert(load_text(loose).objects).notes]
    assert any("plain string prefix (/appx matched too)" in m for m in notes), notes


def test_error_pages_are_noted_not_dropped_silently() -> None:
    """custom-http-errors with default-backend is served on Ingresses; Gateway API has no error
    pages, so the conversion says it leaves them out."""
    text = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: shop
  annotations: {nginx.ingress.kubernetes.io/custom-http-errors: "404,503",
                nginx.ingress.kubernetes.io/default-backend: errors}
spec:
  rules:
  - host: shop.test
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
"""
    result = convert(load_text(text).objects)
    assert any(n.key.endswith("custom-http-errors") and "error pages" in n.message
               for n in result.notes), result.notes
