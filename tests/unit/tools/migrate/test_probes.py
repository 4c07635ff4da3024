"""The compare request set: generated from routes, parsed from access logs, sampled repeatably."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podway.model.loader import load_text
from podway.tools.migrate.probes import (
    DEFAULT_HOST,
    NO_ROUTE_PATH,
    Probe,
    from_objects,
    parse_log,
    path_samples,
    regex_sample,
    sample,
)

INGRESSES = """apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  ingressClassName: nginx
  tls: [{hosts: [shop.test], secretName: cert}]
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /api/, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
      - {path: /exact, pathType: Exact, backend: {service: {name: api, port: {number: 80}}}}
  - host: "*.wild.test"
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: rewrite
  namespace: shop
  annotations: {nginx.ingress.kubernetes.io/rewrite-target: /$2}
spec:
  rules:
  - http:
      paths:
      - {path: "/app(/|$)(.*)", pathType: ImplementationSpecific,
         backend: {service: {name: app, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: canary
  namespace: shop
  annotations:
    nginx.ingress.kubernetes.io/canary: "true"
    nginx.ingress.kubernetes.io/canary-by-header: X-Canary
    nginx.ingress.kubernetes.io/canary-by-cookie: beta
spec:
  rules:
  - host: canary.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: next, port: {number: 80}}}}
"""


def _objects(text: str) -> list:  # type: ignore[type-arg]
    loaded = load_text(text)
    assert not loaded.errors, loaded.errors
    return list(loaded.objects)


def _requests(probes: tuple[Probe, ...]) -> set[tuple[str, str, str, str]]:
    return {(p.method, p.scheme, p.host, p.path) for p in probes if not p.headers}


def test_ingress_rules_give_every_host_path_method_and_scheme() -> None:
    probes = from_objects(_objects(INGRESSES), methods=("GET",))
    got = _requests(probes)
    for scheme in ("http", "https"):  # shop.test has a TLS entry: probed both ways
        for path in ("/api", "/api/", "/api/compare", "/exact", NO_ROUTE_PATH):
            assert ("GET", scheme, "shop.test", path) in got
    assert ("GET", "http", "compare.wild.test", "/compare") in got  # one label for the wildcard
    assert ("GET", "https", "compare.wild.test", "/") not in got  # no TLS entry covers it
    assert ("GET", "http", DEFAULT_HOST, "/app") in got  # regex: its literal start
    assert ("GET", "http", DEFAULT_HOST, "/app/compare") in got


def test_canary_ingress_probes_carry_what_selects_and_refuses_it() -> None:
    probes = [p for p in from_objects(_objects(INGRESSES), methods=("GET",))
              if p.host == "canary.test" and p.path == "/"]
    headers = {p.headers for p in probes}
    assert headers == {(), (("X-Canary", "always"),), (("X-Canary", "never"),),
                       (("cookie", "beta=always"),), (("cookie", "beta=never"),)}


def _ingress(annotations: str, path: str = "/") -> str:
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: one
  namespace: shop
  annotations: {{{annotations}}}
spec:
  rules:
  - host: one.test
    http:
      paths:
      - {{path: "{path}", pathType: ImplementationSpecific,
         backend: {{service: {{name: app, port: {{number: 80}}}}}}}}
"""


def test_annotations_are_read_as_ingress_nginx_reads_them() -> None:
    # "1" is true to ingress-nginx (and to Podway's reader): the paths are regexes
    probes = from_objects(_objects(_ingress('nginx.ingress.kubernetes.io/use-regex: "1"',
                                            "/v[0-9]+/items")), methods=("GET",))
    assert "/v0/items" in {p.path for p in probes}
    # a canary value selects the canary; with a pattern, a value the pattern matches does
    for notes, chosen in (("canary-by-header-value: blue", "blue"),
                          ("canary-by-header-pattern: '^gre+n$'", "gren")):
        text = _ingress("nginx.ingress.kubernetes.io/canary: \"1\", "
                        "nginx.ingress.kubernetes.io/canary-by-header: X-Try, "
                        f"nginx.ingress.kubernetes.io/{notes}")
        probes = from_objects(_objects(text), methods=("GET",))
        assert {p.headers for p in probes if p.path == "/"} == {
            (), (("X-Try", chosen),), (("X-Try", "never"),)}


def test_each_probe_is_labelled_with_its_route_and_methods_multiply() -> None:
    probes = from_objects(_objects(INGRESSES), methods=("GET", "POST"))
    exact = [p for p in probes if p.path == "/exact" and p.scheme == "http"]
    assert {p.method for p in exact} == {"GET", "POST"}
    assert {p.route for p in exact} == {"Ingress shop/web shop.test Exact /exact"}


def test_httproute_matches_give_probes_with_their_method_and_headers() -> None:
    route = """apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  hostnames: [api.test]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /v1}
      method: PUT
      headers: [{name: x-tier, value: gold}]
    backendRefs: [{name: api, port: 80}]
"""
    probes = from_objects(_objects(route))
    assert Probe(route="HTTPRoute shop/r api.test rule 0 PathPrefix /v1", method="PUT",
                 host="api.test", path="/v1/compare", headers=(("x-tier", "gold"),)) in probes
    assert all(p.method == "PUT" for p in probes if p.path.startswith("/v1"))


def test_a_gateway_wildcard_listener_covers_hosts_at_any_depth() -> None:
    objects = """apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: podway
  listeners:
  - {name: https, protocol: HTTPS, port: 443, hostname: "*.example.test",
     tls: {certificateRefs: [{name: cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  hostnames: [a.b.example.test, other.test]
  rules:
  - backendRefs: [{name: api, port: 80}]
"""
    probes = from_objects(_objects(objects))
    schemes = {(p.host, p.scheme) for p in probes}
    assert ("a.b.example.test", "https") in schemes  # Gateway API: any number of labels
    assert ("other.test", "https") not in schemes


def test_path_samples_cover_the_edges_of_each_kind() -> None:
    assert path_samples("/a/", "Prefix") == ("/a", "/a/", "/a/compare")
    assert path_samples("/", "Prefix") == ("/", "/compare")
    assert path_samples("/a", "Exact") == ("/a",)
    assert path_samples("/x/(.*)", "Prefix", regex=True) == ("/x/", "/x/compare", "/x/a")


@pytest.mark.parametrize(("pattern", "built"), [
    ("/api(/|$)(.*)", {"/api/", "/api/a"}),  # the rewrite-target idiom: first branch
    ("/items/[0-9]+", {"/items/0"}),  # a set: its first member, at least once
    ("/v[12]/(users|groups)/?", {"/v1/users", "/v1/users/"}),
    ("/[^/]+/edit", {"/a/edit"}),
])
def test_regex_paths_are_probed_with_paths_they_match(pattern: str, built: set[str]) -> None:
    """The literal start alone would miss /items/[0-9]+ entirely."""
    samples = path_samples(pattern, "ImplementationSpecific", regex=True)
    assert built <= set(samples)
    assert all(s.startswith("/") for s in samples)


def test_regex_without_a_sample_falls_back_to_its_literal_start() -> None:
    assert path_samples(r"/(\d+)/\1", "Prefix", regex=True) == ("/", "/compare")


COMBINED = ('203.0.113.7 - - [01/Dec/2026:10:00:00 +0000] "GET /api/items?page=2 HTTP/1.1" 200 '
            '512 "-" "curl/8.0" 120 0.002 [shop-api-80] [] 10.0.0.5:8080 512 0.002 200 abc\n')


def test_combined_lines_take_the_log_host_and_keep_the_query() -> None:
    parsed = parse_log(COMBINED, default_host="shop.test")
    assert parsed.skipped == ()
    assert [(p.method, p.host, p.path) for p in parsed.probes] == [
        ("GET", "shop.test", "/api/items?page=2")]


def test_combined_line_without_host_is_skipped_with_a_reason() -> None:
    parsed = parse_log(COMBINED)
    assert parsed.probes == ()
    assert "names no host" in parsed.skipped[0]
    assert parsed.skipped[0].startswith("log:1")


def test_absolute_request_targets_name_their_host_and_scheme() -> None:
    line = '1.2.3.4 - - [x] "GET https://a.test/p HTTP/1.1" 301 0 "-" "-"\n'
    (probe,) = parse_log(line).probes
    assert (probe.scheme, probe.host, probe.path) == ("https", "a.test", "/p")


def test_json_lines_and_their_errors() -> None:
    lines = [json.dumps({"method": "post", "host": "a.test", "path": "/x", "scheme": "https",
                         "headers": {"X-Canary": "always"}}),
             json.dumps({"host": "a.test", "uri": "/y"}),
             json.dumps({"path": "/nohost"}),
             json.dumps({"host": "a.test", "path": "/z", "headers": {"bad": "a\r\nb"}}),
             json.dumps({"host": "a.test", "path": "/z", "headers": {"Host": "b.test"}}),
             json.dumps({"host": "a.test", "path": "/caf\u00e9"}),
             "{not json", "garbage", "", "# comment"]
    parsed = parse_log("\n".join(lines), source="f")
    assert [(p.method, p.scheme, p.path, p.headers) for p in parsed.probes] == [
        ("POST", "https", "/x", (("x-canary", "always"),)), ("GET", "http", "/y", ())]
    assert [s.split(":")[1] for s in parsed.skipped] == ["3", "4", "5", "6", "7", "8"]


def test_a_log_is_read_line_by_line_and_keeps_few_skip_messages() -> None:
    import io

    from podway.tools.migrate.probes import MAX_SKIPPED

    bad = "garbage\n" * (MAX_SKIPPED + 50)
    parsed = parse_log(io.StringIO(COMBINED + bad + COMBINED), default_host="shop.test")
    assert parsed == parse_log(COMBINED + bad + COMBINED, default_host="shop.test")
    assert len(parsed.probes) == 1
    assert len(parsed.skipped) == MAX_SKIPPED
    assert parsed.skipped_count == MAX_SKIPPED + 50
    assert parsed.skipped[0].startswith("log:2:")


def test_repeated_log_requests_are_replayed_once() -> None:
    parsed = parse_log(COMBINED * 3, default_host="shop.test")
    assert len(parsed.probes) == 1


def test_sample_is_repeatable_keeps_order_and_size() -> None:
    probes = tuple(Probe(route="r", host="h", path=f"/{i}") for i in range(50))
    first, again = sample(probes, 10, seed=3), sample(probes, 10, seed=3)
    assert first == again
    assert len(first) == 10
    assert list(first) == sorted(first, key=lambda p: int(p.path[1:]))
    assert sample(probes, 10, seed=4) != first
    assert sample(probes, 99) == probes


@given(st.text(max_size=300))
def test_parse_log_never_raises(text: str) -> None:
    parse_log(text, default_host="h.test")


@given(st.text(max_size=60))
def test_regex_samples_never_raise_and_always_match(pattern: str) -> None:
    import re

    for more in (False, True):
        sample_path = regex_sample(pattern, more=more)
        if sample_path is not None:
            assert re.match(pattern, sample_path, re.IGNORECASE)


def test_rule_paths_no_request_line_can_carry_give_no_probe() -> None:
    text = INGRESSES.replace("/exact", "/caf\u00e9")
    paths = {p.path for p in from_objects(_objects(text))}
    assert "/api" in paths
    assert not any("caf" in p for p in paths)
