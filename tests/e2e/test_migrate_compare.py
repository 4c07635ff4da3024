"""compare against a real nginx configured as ingress-nginx would be: the same Ingresses served
by Podway give an empty diff for the supported set, and a backend that differs is reported on
exactly the routes that reach it, as a backend difference and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

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


async def test_a_header_only_the_old_side_adds_is_reported_on_https(tmp_path: Path) -> None:
    """ingress-nginx's default HSTS header (on HTTPS answers only) is a difference Podway's
    Ingress listeners show: reported per HTTPS request as that header, nothing else."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = BASIC + backends(ports)
        async with bed(tmp_path, text, hsts=True) as b:
            report = await b.compare(probes_of(text))
        results = [r for route in report.routes for r in route.results]
        for result in results:
            expected = [("header strict-transport-security",
                         "max-age=31536000; includeSubDomains", "")] if (
                result.probe.scheme == "https") else []
            assert [(d.field, d.old, d.new) for d in result.diffs] == expected, explain(report)
        assert any(r.probe.scheme == "https" for r in results)
    finally:
        for task in tasks:
            task.cancel()
