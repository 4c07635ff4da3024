"""The request set ``podway migrate compare`` replays: probes from manifests and from access logs.

A ``Probe`` is one request (method, scheme, Host, path with query, extra headers) plus the label
of the route it exercises, which is how the diff is grouped. Probes come from two places:

- **Routes** (``from_objects``): every host x path x method of every Ingress (any class: the
  old controller's Ingresses are the point) and HTTPRoute. A Prefix path ``/api`` gives
  ``/api``, ``/api/`` and ``/api/compare``; an Exact path itself; a regular-expression path
  (``use-regex``/``rewrite-target``) its literal start, that start plus ``/compare`` and
  paths built from the pattern to match it (``regex_sample``). Each
  host also gets ``/podway-compare-no-route`` (what answers when no rule matches). Hosts with a
  TLS entry are probed over HTTPS as well as HTTP (the HTTP side shows the ssl-redirect).
  A wildcard host ``*.example.com`` is probed as ``compare.example.com``; a rule without host
  with ``Host: compare.invalid``. Canary Ingresses add the header or cookie that selects or
  refuses the canary (``always``/``never``, or the ``canary-by-header-value``).
- **Access logs** (``parse_log``): nginx ``combined`` lines (ingress-nginx's default
  ``upstreaminfo`` format starts the same way; fields after the user agent are ignored) and
  JSON lines ``{"method", "host", "path", "scheme", "headers"}`` (``host`` and ``path``
  required; ``uri`` or ``request_uri`` may stand for ``path``). A combined line has no Host
  unless its request target is an absolute URL: the caller's ``default_host`` is used, else
  the line is refused. ``sample`` picks a seeded, repeatable subset of the distinct requests.

Invariants: everything here is pure (no I/O); probes are deduplicated (same request, first label
wins) and keep their order, so two runs over the same input replay the same requests.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from podway.ir import WildcardMode
from podway.ir.hosts import covers
from podway.model import Ingress
from podway.model.base import K8sObject
from podway.model.gateway import Gateway
from podway.model.gateway_routes import HTTPRoute, HTTPRouteMatch
from podway.translate.ingress.nginx.annotations import Canary
from podway.translate.ingress.nginx.annotations import read as read_nginx

Scheme = Literal["http", "https"]
NO_ROUTE_PATH = "/podway-compare-no-route"
PROBE_SUFFIX = "compare"
WILDCARD_LABEL = "compare"
DEFAULT_HOST = "compare.invalid"
DEFAULT_METHODS = ("GET", "POST")
_REGEX_META = re.compile(r"[\\^$.|?*+()\[\]{}]")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_PRINTABLE = re.compile(r"^[\x21-\x7e]+$")
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]{1,1024}$")  # what a probe can send as written


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """One request of the set, and the route (label) it was made for."""

    route: str
    method: str = "GET"
    scheme: Scheme = "http"
    host: str
    path: str = "/"
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str, tuple[tuple[str, str], ...]]:
        return (self.method, self.scheme, self.host.lower(), self.path, self.headers)

    def describe(self) -> str:
        extra = "".join(f" [{k}: {v}]" for k, v in self.headers)
        return f"{self.method} {self.scheme}://{self.host}{self.path}{extra}"


@dataclass(frozen=True, slots=True)
class LogParse:
    """Probes read from an access log, and why lines could not be used: the first
    ``MAX_SKIPPED`` messages, and how many lines were skipped in all."""

    probes: tuple[Probe, ...]
    skipped: tuple[str, ...] = field(default=())
    skipped_count: int = 0


def unique(probes: Iterable[Probe]) -> tuple[Probe, ...]:
    """``probes`` without repeats (same request): the first one, with its label, stays."""
    seen: dict[tuple[str, str, str, str, tuple[tuple[str, str], ...]], Probe] = {}
    for probe in probes:
        seen.setdefault(probe.key, probe)
    return tuple(seen.values())


# --- from routes --------------------------------------------------------------------------------

def probe_host(host: str | None) -> str:
    """The Host a probe of a rule host sends: wildcards get one label, no host a reserved name."""
    if not host:
        return DEFAULT_HOST
    if host.startswith("*."):
        return f"{WILDCARD_LABEL}.{host[2:]}"
    return host


def path_samples(path: str, kind: str, *, regex: bool = False) -> tuple[str, ...]:
    """Request paths that exercise one rule path: the edges a migration is most likely to
    change (the bare prefix, its trailing slash, something below it)."""
    if kind == "Exact" and not regex:
        return (path,)
    if regex or kind == "RegularExpression":
        match = _REGEX_META.search(path)
        literal = path[:match.start()] if match else path
        literal = literal if literal.startswith("/") else "/" + literal
        built = (regex_sample(path, more=False), regex_sample(path, more=True))
        return tuple(dict.fromkeys((literal, _below(literal),
                                    *(b for b in built if b and b.startswith("/")))))
    bare = path.rstrip("/") or "/"
    if bare == "/":
        return ("/", _below("/"))
    return (bare, bare + "/", _below(bare))


def regex_sample(pattern: str, *, more: bool) -> str | None:
    """A path ``pattern`` matches from its start (case-insensitively, as ingress-nginx's
    ``~*`` locations do), built from its parse tree: the first branch and the first member of
    each set, each repeat at its minimum (``more``: at least once). None when it cannot tell
    (back-references, negated sets) or the result does not match after all."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        text = _emit(_parser.parse(pattern), more)
        if re.match(pattern, text, re.IGNORECASE) is None:
            return None
    except (re.error, ValueError, TypeError, IndexError, KeyError, AttributeError,
            RecursionError, OverflowError):
        return None
    return text


_CATEGORY = {"CATEGORY_DIGIT": "0", "CATEGORY_WORD": "a", "CATEGORY_NOT_DIGIT": "a",
             "CATEGORY_NOT_SPACE": "a", "CATEGORY_NOT_WORD": "-", "CATEGORY_SPACE": " "}
_MAX_SAMPLE = 200


def _emit(items: Iterable[tuple[Any, Any]], more: bool) -> str:
    out: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("b" if chr(arg) == "a" else "a")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_first_of(arg))
        elif name == "CATEGORY":
            out.append(_CATEGORY[str(arg)])
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _, sub = arg
            out.append(_emit(sub, more) * max(low, 1 if more else 0))
        elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
            out.append(_emit(arg[-1], more))
        elif name == "BRANCH":
            out.append(_emit(arg[1][0], more))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        else:  # back-references and the like: no sample
            raise ValueError(name)
        if sum(map(len, out)) > _MAX_SAMPLE:
            raise ValueError("sample too long")
    return "".join(out)


def _first_of(items: Sequence[tuple[Any, Any]]) -> str:
    op, arg = items[0]
    name = str(op)
    if name == "LITERAL":
        return chr(arg)
    if name == "RANGE":
        return chr(arg[0])
    if name == "CATEGORY":
        return _CATEGORY[str(arg)]
    raise ValueError(name)  # a negated set: no sample


def _below(path: str) -> str:
    return (path if path.endswith("/") else path + "/") + PROBE_SUFFIX


def from_objects(objects: Sequence[K8sObject], *, methods: Sequence[str] = DEFAULT_METHODS
                 ) -> tuple[Probe, ...]:
    """Every host x path x method of the Ingresses and HTTPRoutes in ``objects``."""
    out: list[Probe] = []
    tls_hosts = _ingress_tls_hosts(objects)
    https_hosts = _gateway_https_hostnames(objects)
    for obj in objects:
        if isinstance(obj, Ingress):
            out.extend(_ingress_probes(obj, tls_hosts, methods))
        elif isinstance(obj, HTTPRoute):
            out.extend(_httproute_probes(obj, https_hosts, methods))
    # a host or path no request line can carry as written (Podway reports those objects)
    return unique(p for p in out if _PRINTABLE.match(p.host) and _PRINTABLE.match(p.path))


def _ingress_tls_hosts(objects: Sequence[K8sObject]) -> set[str]:
    hosts: set[str] = set()
    for obj in objects:
        if isinstance(obj, Ingress):
            for tls in obj.spec.tls:
                hosts.update(h.lower() for h in tls.hosts or ("",))
    return hosts


def _schemes(host: str | None, tls_hosts: set[str],
             mode: WildcardMode = WildcardMode.ONE_LABEL) -> tuple[Scheme, ...]:
    """HTTP, and HTTPS when a TLS host covers ``host`` ("": every host) — an Ingress wildcard
    one label deep, a Gateway listener's at any depth (``mode``)."""
    covered = any(not name or covers(name, (host or "").lower(), mode) for name in tls_hosts)
    return ("http", "https") if covered else ("http",)


def _ingress_probes(ingress: Ingress, tls_hosts: set[str], methods: Sequence[str]
                    ) -> Iterable[Probe]:
    nginx = read_nginx(ingress.metadata.annotations, namespace=ingress.metadata.namespace)
    regex = nginx.rewrite is not None and nginx.rewrite.regex_paths
    variants = _canary_headers(nginx.canary)
    name = f"Ingress {ingress.metadata.namespace}/{ingress.metadata.name}"
    for rule in ingress.spec.rules:
        host = probe_host(rule.host)
        schemes = _schemes(rule.host, tls_hosts)
        for p in rule.http.paths if rule.http else ():
            label = f"{name} {rule.host or '*'} {p.path_type} {p.path}"
            for sample in path_samples(p.path, p.path_type, regex=regex):
                for scheme in schemes:
                    for method in methods:
                        for headers in variants:
                            yield Probe(route=label, method=method, scheme=scheme, host=host,
                                        path=sample, headers=headers)
        for scheme in schemes:
            yield Probe(route=f"{rule.host or '*'} (no rule)", scheme=scheme, host=host,
                        path=NO_ROUTE_PATH)
    if ingress.spec.default_backend is not None and not ingress.spec.rules:
        for scheme in _schemes(None, tls_hosts):
            yield Probe(route=f"{name} defaultBackend", scheme=scheme, host=DEFAULT_HOST,
                        path=NO_ROUTE_PATH)


def _canary_headers(canary: Canary | None) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Header sets to send to a canary Ingress's paths: none, plus what selects and refuses it
    (as the nginx annotation reader reads the canary: the same flags, names and precedence)."""
    if canary is None:
        return ((),)
    out: list[tuple[tuple[str, str], ...]] = [()]
    if canary.by_header is not None:
        if canary.header_value is not None:
            chosen: str | None = canary.header_value
        elif canary.header_pattern is not None:
            chosen = regex_sample(canary.header_pattern, more=True)
        else:
            chosen = "always"
        values = (chosen, "never") if chosen and _HEADER_VALUE.match(chosen) else ("never",)
        out.extend(((canary.by_header, v),) for v in values)
    if canary.by_cookie is not None:
        out.extend((("cookie", f"{canary.by_cookie}={v}"),) for v in ("always", "never"))
    return tuple(out)


def _gateway_https_hostnames(objects: Sequence[K8sObject]) -> set[str]:
    names: set[str] = set()
    for obj in objects:
        if isinstance(obj, Gateway):
            for listener in obj.spec.listeners:
                if listener.protocol == "HTTPS":
                    names.add((listener.hostname or "").lower())
    return names


def _httproute_probes(route: HTTPRoute, https_hosts: set[str], methods: Sequence[str]
                      ) -> Iterable[Probe]:
    name = f"HTTPRoute {route.metadata.namespace}/{route.metadata.name}"
    hosts = route.spec.hostnames or ("",)
    for hostname in hosts:
        host = probe_host(hostname)
        schemes = _schemes(hostname, https_hosts, WildcardMode.SUFFIX)
        for index, rule in enumerate(route.spec.rules):
            for match in rule.matches or (HTTPRouteMatch(),):
                label = (f"{name} {hostname or '*'} rule {index} {match.path.type} "
                         f"{match.path.value}")
                headers = tuple((h.name, h.value) for h in match.headers if h.type == "Exact")
                wanted = (match.method,) if match.method else tuple(methods)
                for sample in path_samples(match.path.value, match.path.type):
                    for scheme in schemes:
                        for method in wanted:
                            yield Probe(route=label, method=method, scheme=scheme, host=host,
                                        path=sample, headers=headers)
        for scheme in schemes:
            yield Probe(route=f"{hostname or '*'} (no rule)", scheme=scheme, host=host,
                        path=NO_ROUTE_PATH)


# --- from access logs ---------------------------------------------------------------------------

_COMBINED = re.compile(r'^\S+ \S+ \S+ \[[^\]]*\] "(?P<method>[A-Z]+) (?P<target>\S+)'
                       r'(?: HTTP/[0-9.]+)?" \d{3} ')


MAX_SKIPPED = 100  # messages kept: a log of millions of bad lines must not fill the memory


def parse_log(lines: str | Iterable[str], *, default_host: str = "", source: str = "log"
              ) -> LogParse:
    """Probes from an access log (its text, or its lines as an open file yields them;
    combined or JSON lines, mixed freely), in line order. Lines are read one at a time and
    repeats dropped as they come, so a large log is never held whole."""
    probes: dict[tuple[str, str, str, str, tuple[tuple[str, str], ...]], Probe] = {}
    skipped: list[str] = []
    count = 0
    for number, raw in enumerate(lines.splitlines() if isinstance(lines, str) else lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            probe = _json_line(line, where) if line.startswith("{") else _combined_line(
                line, where, default_host)
        except ValueError as error:
            count += 1
            if len(skipped) < MAX_SKIPPED:
                skipped.append(f"{where}: {error}")
            continue
        probes.setdefault(probe.key, probe)
    return LogParse(probes=tuple(probes.values()), skipped=tuple(skipped), skipped_count=count)


def _json_line(line: str, where: str) -> Probe:
    try:
        data = json.loads(line)
    except ValueError:
        raise ValueError("not valid JSON") from None
    if not isinstance(data, dict):
        raise ValueError("a JSON line must be an object")
    host = data.get("host")
    path = data.get("path", data.get("uri", data.get("request_uri")))
    method = data.get("method", "GET")
    scheme = data.get("scheme", "http")
    headers = data.get("headers", {})
    if not isinstance(host, str) or not host:
        raise ValueError('"host" (a string) is required')
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError('"path" must be a string starting with /')
    if not isinstance(method, str) or not _TOKEN.match(method):
        raise ValueError('"method" must be an HTTP method')
    if scheme not in ("http", "https"):
        raise ValueError('"scheme" must be "http" or "https"')
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and _TOKEN.match(k) and isinstance(v, str) and _clean(v)
            for k, v in headers.items()):
        raise ValueError('"headers" must map header names to single-line strings')
    if any(k.lower() == "host" for k in headers):
        raise ValueError('give the host as "host", not as a header')
    _check_request(host, path)
    return Probe(route=f"{where} {method.upper()} {host}{path}", method=method.upper(),
                 scheme=scheme, host=host, path=path,
                 headers=tuple(sorted((k.lower(), v) for k, v in headers.items())))


def _combined_line(line: str, where: str, default_host: str) -> Probe:
    match = _COMBINED.match(line)
    if match is None:
        raise ValueError("neither a JSON object nor an nginx combined log line")
    method, target = match.group("method"), match.group("target")
    scheme: Scheme = "http"
    host = default_host
    if target.startswith(("http://", "https://")):
        url = urlsplit(target)
        scheme = "https" if url.scheme == "https" else "http"
        host = url.hostname or ""
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    if not host:
        raise ValueError("the line names no host (give --log-host, or log JSON lines with "
                         '"host")')
    if not target.startswith("/"):
        raise ValueError(f"request target {target[:80]!r} is not a path")
    _check_request(host, target)
    return Probe(route=f"{where} {method} {host}{target}", method=method, scheme=scheme,
                 host=host, path=target)


def _clean(value: str) -> bool:
    return not any(c in value for c in "\r\n\0")


def _check_request(host: str, path: str) -> None:
    """What a request line can carry as it is: printable ASCII, no spaces (a log holds the
    target percent-encoded already; anything else would be re-encoded into another request)."""
    if not _PRINTABLE.match(host) or "/" in host:
        raise ValueError(f"host {host[:80]!r} is not a host name")
    if not _PRINTABLE.match(path):
        raise ValueError("the path holds spaces, control or non-ASCII characters")


def sample(probes: Sequence[Probe], count: int, *, seed: int = 0) -> tuple[Probe, ...]:
    """At most ``count`` of ``probes``, chosen by ``seed`` (repeatable), in their first order."""
    if count >= len(probes):
        return tuple(probes)
    chosen = set(random.Random(seed).sample(range(len(probes)), count))
    return tuple(p for i, p in enumerate(probes) if i in chosen)
