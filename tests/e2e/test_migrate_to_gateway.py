"""to-gateway, proven with compare: the Gateway API objects it writes, served by Podway, answer
every generated request as the original Ingresses do — served by Podway, and served by a real
nginx configured as ingress-nginx would be (annotations included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.model import Ingress
from podway.tools.migrate.to_gateway import ConvertOptions, convert, dump
from tests.e2e.harness import free_port
from tests.e2e.migrate_bed import bed, entry, explain, objects_of, probes_of, start_backends
from tests.e2e.test_migrate_compare import BASIC, backends, ingress

pytestmark = pytest.mark.e2e

ANNOTATED = (
    ingress("main", """  rules:
  - host: ann.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""") + ingress("rewrite", """  rules:
  - host: ann.test
    http:
      paths:
      - {path: "/api(/|$)(.*)", pathType: ImplementationSpecific,
         backend: {service: {name: api, port: {number: 80}}}}
""", "    nginx.ingress.kubernetes.io/rewrite-target: /$2\n")
    + ingress("gone", """  rules:
  - host: gone.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""", "    nginx.ingress.kubernetes.io/permanent-redirect: https://new.example.com/landing\n")
    + ingress("approot", """  rules:
  - host: approot.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""", "    nginx.ingress.kubernetes.io/app-root: /app\n")
    + ingress("vhost", """  rules:
  - host: vhost.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""", "    nginx.ingress.kubernetes.io/upstream-vhost: internal.svc\n"
     "    nginx.ingress.kubernetes.io/x-forwarded-prefix: /public\n")
    + ingress("site", """  rules:
  - host: canary.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
""") + ingress("site-canary", """  rules:
  - host: canary.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
""", '    nginx.ingress.kubernetes.io/canary: "true"\n'
     "    nginx.ingress.kubernetes.io/canary-by-header: X-Canary\n"
     "    nginx.ingress.kubernetes.io/canary-by-cookie: beta\n"))


def converted(text: str, http_port: int, https_port: int) -> str:
    """The conversion of ``text``'s Ingresses, its listeners on the given ports."""
    result = convert(objects_of(text), ConvertOptions(
        gateway_namespace="default", http_port=http_port, https_port=https_port))
    return dump(result.objects)


def gateway_world(text: str, http_port: int, https_port: int) -> str:
    """``text`` without its Ingresses, plus their conversion."""
    rest = "\n---\n".join(doc for doc in text.split("---\n")
                          if doc.strip() and "kind: Ingress" not in doc)
    return rest + "\n---\n" + converted(text, http_port, https_port)


async def test_converted_basic_set_answers_as_the_ingresses(tmp_path: Path) -> None:
    """Hosts, wildcard, path types, TLS and its 308: the Gateway answers as Podway's Ingress
    listeners and as nginx do."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = BASIC + backends(ports)
        gw_http, gw_https = free_port(), free_port()
        both = text + "\n---\n" + converted(text, gw_http, gw_https)  # one Podway, both
        async with bed(tmp_path, text, both) as b:
            gateway = entry("new", gw_http, gw_https)
            probes = probes_of(text, methods=("GET", "POST"))
            report = await b.compare(probes, old=b.new, new=gateway)  # Ingress vs Gateway
            assert not report.differs, explain(report)
            assert report.unanswered == 0, explain(report)
            report = await b.compare(probes, new=gateway)  # nginx vs Gateway (HSTS too)
            assert not report.differs, explain(report)
    finally:
        for task in tasks:
            task.cancel()


async def test_converted_annotations_answer_as_ingress_nginx(tmp_path: Path) -> None:
    """rewrite-target, permanent-redirect, app-root, upstream-vhost, x-forwarded-prefix and a
    canary by header and cookie: the converted Gateway answers as nginx does."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = ANNOTATED + backends(ports)
        gw_http, gw_https = free_port(), free_port()
        gateway_text = gateway_world(text, gw_http, gw_https)
        assert not any(isinstance(o, Ingress) for o in objects_of(gateway_text))
        async with bed(tmp_path, text, gateway_text) as b:
            probes = probes_of(text)
            report = await b.compare(probes, new=entry("new", gw_http, gw_https))
            assert not report.differs, explain(report)
            assert report.unanswered == 0, explain(report)
            seen = {(r.probe.host, r.old.status, r.old.backend, r.old.upstream_path,
                     r.old.upstream_host) for route in report.routes for r in route.results}
            # the cases really ran: a rewrite, both redirects, the vhost and the canary
            assert ("ann.test", 200, "api", "/compare", "ann.test") in seen, explain(report)
            assert any(s[0] == "gone.test" and s[1] == 301 for s in seen)
            assert any(s[0] == "approot.test" and s[1] == 302 for s in seen)
            assert ("vhost.test", 200, "web", "/", "internal.svc") in seen
            canary = {r.probe.headers: r.old.backend for route in report.routes
                      for r in route.results if r.probe.host == "canary.test"
                      and r.probe.path == "/"}
            assert canary == {(): "web", (("X-Canary", "always"),): "api",
                              (("X-Canary", "never"),): "web",
                              (("cookie", "beta=always"),): "api",
                              (("cookie", "beta=never"),): "web"}, explain(report)
    finally:
        for task in tasks:
            task.cancel()


async def test_podway_serves_the_annotated_ingresses_as_ingress_nginx(tmp_path: Path) -> None:
    """The same annotated Ingresses, taken over by Podway (``--ingress-class nginx``), answer
    as nginx does and as their conversion does."""
    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = ANNOTATED + backends(ports)
        gw_http, gw_https = free_port(), free_port()
        both = text + "\n---\n" + converted(text, gw_http, gw_https)
        async with bed(tmp_path, text, both) as b:
            probes = probes_of(text)
            report = await b.compare(probes)  # nginx vs Podway's Ingress listeners
            assert not report.differs, explain(report)
            report = await b.compare(probes, old=b.new, new=entry("new", gw_http, gw_https))
            assert not report.differs, explain(report)
            assert report.unanswered == 0, explain(report)
    finally:
        for task in tasks:
            task.cancel()


REGEX_SIBLINGS = ingress("app", """  rules:
  - host: regex.test
    http:
      paths:
      - {path: /app, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: "/v[0-9]+/items", pathType: ImplementationSpecific,
         backend: {service: {name: web, port: {number: 80}}}}
""", '    nginx.ingress.kubernetes.io/use-regex: "true"\n') + ingress("api", """  rules:
  - host: regex.test
    http:
      paths:
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
      - {path: /Docs, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
""")


async def test_use_regex_and_its_siblings_convert_without_changing_meaning(
        tmp_path: Path) -> None:
    """Issue 28's case: with use-regex on one Ingress of a host, nginx matches every prefix
    path of the host as a case-insensitive regex anchored at the start (a sibling's /api also
    takes /apix; /APP/x is /app's). The conversion answers as nginx and as Podway's Ingress
    listeners do, those requests included."""
    from podway.tools.migrate.probes import Probe

    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = REGEX_SIBLINGS + backends(ports)
        gw_http, gw_https = free_port(), free_port()
        both = text + "\n---\n" + converted(text, gw_http, gw_https)
        extra = tuple(Probe(route=f"issue {p}", host="regex.test", path=p)
                      for p in ("/APP/x", "/apix", "/API", "/appendix", "/V2/items/9",
                                "/docs/x", "/DOCSx", "/none"))
        async with bed(tmp_path, text, both) as b:
            probes = probes_of(text) + extra
            gateway = entry("new", gw_http, gw_https)
            for old, new in ((b.old, gateway), (b.old, b.new), (b.new, gateway)):
                report = await b.compare(probes, old=old, new=new)
                assert not report.differs, explain(report)
                assert report.unanswered == 0, explain(report)
            seen = {r.probe.path: (r.old.status, r.old.backend) for route in report.routes
                    for r in route.results if r.probe.route.startswith("issue")}
            assert seen == {"/APP/x": (200, "web"), "/apix": (200, "api"),
                            "/API": (200, "api"), "/appendix": (200, "web"),
                            "/V2/items/9": (200, "web"), "/docs/x": (200, "api"),
                            "/DOCSx": (200, "api"), "/none": (404, "")}, explain(report)
    finally:
        for task in tasks:
            task.cancel()


async def test_server_alias_and_www_redirect_convert_as_nginx_answers(tmp_path: Path) -> None:
    """server-alias (a copy of the host's routes and HTTPS listener, not over a host another
    Ingress serves) and from-to-www-redirect (308 to the rule host, scheme kept): the Gateway
    answers as nginx does."""
    from podway.tools.migrate.probes import Probe
    from tests.e2e.test_migrate_compare import HOSTS

    tasks: list = []  # type: ignore[type-arg]
    try:
        ports = await start_backends(("web", "api"), tasks)
        text = HOSTS + backends(ports)
        gw_http, gw_https = free_port(), free_port()
        probes = tuple(Probe(route=f"{scheme} {host}", scheme=scheme, host=host, path=path)
                       for scheme in ("http", "https")
                       for host in ("alias.test", "taken.test", "www.site.test", "shop.test")
                       for path in ("/", "/a/b?q=1")) + probes_of(text)
        async with bed(tmp_path, text, gateway_world(text, gw_http, gw_https)) as b:
            report = await b.compare(probes, new=entry("new", gw_http, gw_https))
        assert not report.differs, explain(report)
        statuses = {(r.probe.scheme, r.probe.host, r.old.status) for route in report.routes
                    for r in route.results if r.probe.path == "/"}
        assert {("https", "alias.test", 200), ("http", "www.site.test", 308),
                ("https", "www.site.test", 308), ("http", "shop.test", 308)} <= statuses
        notes = convert(objects_of(text), ConvertOptions()).notes
        assert [n.key for n in notes] == ["nginx.ingress.kubernetes.io/server-alias"], notes
    finally:
        for task in tasks:
            task.cancel()
