"""compare against a real nginx configured as ingress-nginx would be: the same Ingresses served
by Podway give an empty diff for the supported set, and a backend that differs is reported on
exactly the routes that reach it, as a backend difference and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.translate.core.nginx_config import parse
from tests.certs import tls_secret
from tests.e2e.harness import endpoints, service
from tests.e2e.migrate_bed import bed, explain, probes_of, start_backends

pytestmark = pytest.mark.e2e


def ingress(name: str, body: str, annotations: str = "") -> str:
    notes = f"\n  annotations:\n{annotations}" if annotations else ""
    return f"""apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: default{notes}
spec:
  ingressClassName: nginx
{body}---
"""


BASIC = ingress("shop", """  tls: [{hosts: [secure.test], secretName: shop-tls}]
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
      - {path: /api/v1/status, pathType: Exact,
         backend: {service: {name: web, port: {number: 80}}}}
  - host: secure.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
  - host: "*.wild.test"
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
  - host: docs.test
    http:
      paths:
      - {path: /guide, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""")


def backends(ports: dict[str, int], **point: str) -> str:
    """Services named after ``ports``; ``point`` sends a Service to another echo's port."""
    return "---\n".join(service(name, 80, 8080) + "---\n"
                        + endpoints(name, {"TCP": ports[point.get(name, name)]})
                        for name in ports if name in ("web", "api")) + "---\n" + tls_secret(
                            "shop-tls", "default")


async def test_podway_answers_the_basic_set_as_ingress_nginx_does(tmp_path: Path) -> None:
    """Hosts, wildcard, Prefix/Exact precedence, the TLS host's 308 and HTTPS: no difference."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = BASIC + backends(ports)
        async with bed(tmp_path, text) as b:
            probes = probes_of(text, methods=("GET", "POST"))
            assert {p.scheme for p in probes} == {"http", "https"}
            report = await b.compare(probes)
            assert not report.differs, explain(report)
            assert report.unanswered == 0, explain(report)
            statuses = {r.old.status for route in report.routes for r in route.results}
            # the redirect and the no-route answer were really exercised
            assert statuses == {200, 308, 404}, explain(report)
    finally:
        for task in tasks:
            task.cancel()


async def test_a_backend_that_differs_is_reported_where_it_serves(tmp_path: Path) -> None:
    """Podway's api Service points at another echo: only routes reaching api differ, and only
    by their backend."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api", "api-next"), tasks)
        old = BASIC + backends(ports)
        new = BASIC + backends(ports, api="api-next")
        async with bed(tmp_path, old, new) as b:
            report = await b.compare(probes_of(old))
        differing = {r.route for r in report.routes if r.differing}
        assert differing == {"Ingress default/shop shop.test Prefix /api",
                             "Ingress default/shop *.wild.test Prefix /",
                             "*.wild.test (no rule)"}, explain(report)
        for route in report.routes:
            for result in route.differing:
                assert [(d.field, d.old, d.new) for d in result.diffs] == [
                    ("backend", "api", "api-next")], explain(report)
        api = next(r for r in report.routes if r.route.endswith("Prefix /api"))
        assert len(api.differing) == len(api.results) == 3  # /api, /api/, /api/compare
    finally:
        for task in tasks:
            task.cancel()


@pytest.mark.parametrize(("settings", "value"), [
    ((), "max-age=31536000; includeSubDomains"),
    (("hsts-max-age=600", "hsts-include-subdomains=false", "hsts-preload=true"),
     "max-age=600; preload"),
    (("hsts=false",), None)])
async def test_hsts_as_ingress_nginx_sets_it(tmp_path: Path, settings: tuple[str, ...],
                                             value: str | None) -> None:
    """ingress-nginx's HSTS (its ConfigMap keys, default on): on every HTTPS answer of the
    host with a certificate (the 404 of a path nobody serves too), never on plain HTTP nor on
    hosts without one; Podway with the same settings answers the same."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = BASIC.replace("hosts: [secure.test]", "hosts: [secure.test, docs.test]"
                             ) + backends(ports)
        async with bed(tmp_path, text, nginx_config=parse(settings)) as b:
            # not the 308 of /guide/ (ingress-nginx drops its trailing slash: a known difference)
            probes = [p for p in probes_of(text) if p.path == "/" or not p.path.endswith("/")]
            report = await b.compare(probes)
        assert not report.differs, explain(report)
        results = [r for route in report.routes for r in route.results]
        for result in results:
            found = dict(result.old.headers).get("strict-transport-security")
            https = result.probe.scheme == "https" and result.probe.host in ("secure.test",
                                                                             "docs.test")
            assert found == (value if https else None), explain(report)
        assert {r.old.status for r in results if r.probe.scheme == "https"} == {200, 404}
    finally:
        for task in tasks:
            task.cancel()


HOSTS = ingress("site", """  tls:
  - {hosts: [site.test, www.site.test, alias.test], secretName: shop-tls}
  rules:
  - host: site.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""", "    nginx.ingress.kubernetes.io/server-alias: alias.test, taken.test\n"
     '    nginx.ingress.kubernetes.io/from-to-www-redirect: "true"\n') + ingress("www", """  rules:
  - host: www.shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""", '    nginx.ingress.kubernetes.io/from-to-www-redirect: "true"\n'
     '    nginx.ingress.kubernetes.io/ssl-redirect: "false"\n') + ingress("taken", """  rules:
  - host: taken.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
""")


async def test_server_alias_and_www_redirect_as_ingress_nginx(tmp_path: Path) -> None:
    """server-alias serves the host's routes (its 308 to HTTPS, its certificate, HSTS) under
    the alias, except a name another Ingress serves (that host wins); from-to-www-redirect
    answers 308 from the other name (www. added or removed) to the rule host, keeping the
    scheme and the request URI, on HTTP and HTTPS (no HSTS on that redirect)."""
    from podway.tools.migrate.probes import Probe

    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = HOSTS + backends(ports)
        probes = tuple(Probe(route=f"{scheme} {host}", scheme=scheme, host=host, path=path)
                       for scheme in ("http", "https")
                       for host in ("alias.test", "taken.test", "www.site.test", "shop.test")
                       for path in ("/", "/a/b?q=1"))
        async with bed(tmp_path, text) as b:
            report = await b.compare(probes + probes_of(text))
        assert not report.differs, explain(report)
        seen = {(r.probe.scheme, r.probe.host, r.probe.path): (
            r.old.status, r.old.backend, r.old.location,
            dict(r.old.headers).get("strict-transport-security"))
            for route in report.routes for r in route.results}
        hsts = "max-age=31536000; includeSubDomains"
        assert seen[("http", "alias.test", "/a/b?q=1")] == (
            308, "", "https://alias.test/a/b?q=1", None), explain(report)
        assert seen[("https", "alias.test", "/")] == (200, "web", "", hsts)
        assert seen[("https", "taken.test", "/")][:2] == (404, "")  # no TLS: the default
        assert seen[("http", "taken.test", "/")][:2] == (200, "api")  # the host wins
        assert seen[("http", "www.site.test", "/a/b?q=1")] == (
            308, "", "http://site.test/a/b?q=1", None), explain(report)
        assert seen[("https", "www.site.test", "/")] == (308, "", "https://site.test/", None)
        assert seen[("http", "shop.test", "/a/b?q=1")] == (
            308, "", "http://www.shop.test/a/b?q=1", None)
    finally:
        for task in tasks:
            task.cancel()
