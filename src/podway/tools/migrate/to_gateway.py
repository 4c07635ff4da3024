"""Ingresses with ingress-nginx annotations → Gateway API objects Podway serves the same way.

``convert(objects, opts)`` returns the objects to apply (a GatewayClass, one Gateway, the
ReferenceGrants its certificates need, one HTTPRoute per Ingress and host) as plain mappings in
manifest order, and a ``Note`` for everything that could not be carried over. Pure: no I/O, the
same input gives the same output (the goldens rely on it), and it never raises on a parsed
Ingress.

How an Ingress maps (each Ingress keeps its namespace; the Gateway's listeners allow routes from
every namespace):

- Listener ``http`` (``opts.http_port``), and one HTTPS listener per TLS host (``https-<host>``,
  the Ingress's Secret; a Secret in another namespace than the Gateway gets a ReferenceGrant).
- Each rule host → an HTTPRoute ``<ingress>`` (``<ingress>-<n>`` when the Ingress has several
  hosts) for that hostname. ``Exact`` → ``Exact``; ``Prefix`` and ``ImplementationSpecific`` →
  ``PathPrefix`` (Podway's reading of both). ``defaultBackend`` → a last ``/`` rule on each host,
  and a route without hostname for the oldest Ingress that has one (the catch-all).
- A host with a TLS entry: its rules attach to its HTTPS listener, and the HTTP listener answers
  a 308 to ``https://`` (``ssl-redirect: "false"``: the rules serve plain HTTP too;
  ``force-ssl-redirect``: the 308 without a certificate).
- ``use-regex`` / ``rewrite-target``: ingress-nginx matches the paths as ``~* "^P"``
  (case-insensitive, anchored at the start only), and so every prefix path of *every* Ingress of
  that host. Carried exactly as ``RegularExpression (?i)(?:P).*`` (a sibling's trailing slash
  dropped; ``/`` stays ``PathPrefix /``, the same), the form Podway serves the Ingress with.
  The idiom ``P(/|$)(.*)`` → ``T$2`` becomes ``PathPrefix P`` with ``ReplacePrefixMatch T``
  (case-sensitive: a note); a literal path with a target without captures, the regex with
  ``ReplaceFullPath``; other rewrites are reported (Gateway API rewrites take no capture
  groups). A shorter regex that Gateway API would rank before such a PathPrefix is a note, and
  so is an ``ImplementationSpecific`` path (a plain string prefix in nginx).
- ingress-nginx's HSTS (``opts.nginx``, its ConfigMap): a ``ResponseHeaderModifier`` on the
  rules of a TLS host's HTTPS route; its plain-HTTP rules get a route of their own.
- ``server-alias``: each alias a copy of its host's routes and HTTPS listener (not a name an
  Ingress serves); ``from-to-www-redirect``: an HTTPRoute for the other name answering 308 to
  the host (scheme and request URI kept).
- ``permanent-redirect`` / ``temporal-redirect`` → ``RequestRedirect`` (scheme, host, port, full
  path; the code); ``app-root`` → an ``Exact /`` rule redirecting (302) there; ``upstream-vhost``
  → ``URLRewrite.hostname``; ``x-forwarded-prefix`` → a ``RequestHeaderModifier``;
  ``enable-cors`` → the ``CORS`` filter.
- ``ssl-passthrough``: a ``TLS`` listener in ``Passthrough`` mode per rule host and a TLSRoute
  to the first path's backend (SNI routing, the pods' own certificates).
- A canary Ingress joins the route of the Ingress it shadows: header rules (``always``/``never``
  or the header value), cookie rules (a ``Cookie`` header regex), and its weight split on the
  main rule's backends. Header beats cookie beats weight, as in ingress-nginx.

Everything else under ``nginx.ingress.kubernetes.io/`` (timeouts, body size, affinity, source
ranges, rate limits, client certificates, backend protocol, snippets...) is a ``Note`` naming the
key and what to do instead: nothing is dropped in silence — also a family the annotation reader
learns later, before this module learns to convert it (``_report``'s guard).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from podway.model import Ingress, Service
from podway.model.base import K8sObject
from podway.model.networking import HTTPIngressPath, IngressBackend
from podway.tools.migrate.gateway_api import (
    GATEWAY_API,
    PODWAY_CONTROLLER,
    REFERENCE_GRANT_API,
    TLS_ROUTE_API,
    cors_filter,
    covers,
    dump,
    listener_name,
    redirect_filter,
    url_redirect,
    wildcard_of,
)
from podway.tools.migrate.not_carried import not_carried, restrictions
from podway.translate.core.nginx_config import HSTS_HEADER, NginxConfig
from podway.translate.core.regex import re2_problem
from podway.translate.ingress.nginx.annotations import (
    PREFIX,
    Canary,
    NginxAnnotations,
    read,
)

__all__ = ["Conversion", "ConvertOptions", "Note", "convert", "dump"]

_IDIOM = re.compile(r"^(?P<prefix>/[^\\^$.|?*+()\[\]{}]*?)/?\(/\|\$\)\(\.\*\)$")
_IDIOM_TARGET = re.compile(r"^(?P<target>/[^$]*)\$2$")  # T/$2 (T may be empty)
_CAPTURE = re.compile(r"\$(\d)")
_META = re.compile(r"[\\^$.|?*+()\[\]{}]")

@dataclass(frozen=True, slots=True, kw_only=True)
class ConvertOptions:
    gateway_name: str = "ingress-nginx"
    gateway_namespace: str = ""  # "": the Ingresses' namespace when they share one, else default
    gateway_class: str = "podway"
    http_port: int = 80
    https_port: int = 443
    # ingress-nginx's ConfigMap (HSTS) the Ingresses were served with
    nginx: NginxConfig = field(default_factory=NginxConfig)


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    """Something of ``ingress`` (namespace/name) that was not carried over, and why."""

    ingress: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"Ingress {self.ingress}: {self.key}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversion:
    objects: tuple[dict[str, Any], ...]
    notes: tuple[Note, ...]


@dataclass(slots=True)
class _Host:
    """One HTTPRoute in the making: an Ingress's rules for one hostname."""

    ingress: Ingress
    notes: NginxAnnotations
    host: str
    catch_all: bool = False  # the route without hostname serving the defaultBackend
    alias_of: str = ""  # nginx server-alias: the host whose rules this alias serves
    rules: list[dict[str, Any]] = field(default_factory=list)
    # (match type, value) → rule index, so one path is served once
    by_path: dict[tuple[str, str], int] = field(default_factory=dict)
    # (Ingress pathType, path as written) → rule index, so a canary joins the rule it shadows
    by_source: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class _Converter:
    objects: Sequence[K8sObject]
    opts: ConvertOptions
    namespace: str = ""
    notes: list[Note] = field(default_factory=list)
    listeners: dict[str, dict[str, Any]] = field(default_factory=dict)  # by hostname
    grants: dict[str, set[str]] = field(default_factory=dict)  # secret namespace → names
    hosts: list[_Host] = field(default_factory=list)
    catch_all: bool = False  # the oldest Ingress with a defaultBackend took the catch-all
    passthrough: list[dict[str, Any]] = field(default_factory=list)  # TLS listeners
    tls_routes: list[dict[str, Any]] = field(default_factory=list)
    # hosts where an Ingress asks for regex paths (use-regex / rewrite-target): ingress-nginx
    # makes every prefix path of the host a regex
    regex_hosts: set[str] = field(default_factory=set)
    regex_siblings: dict[str, list[str]] = field(default_factory=dict)  # Ingress → such paths
    www_routes: list[dict[str, Any]] = field(default_factory=list)  # from-to-www-redirect

    def note(self, ingress: Ingress, key: str, message: str) -> None:
        self.notes.append(Note(ingress=_ref(ingress), key=key, message=message))

    # --- listeners ----------------------------------------------------------------------------
    def add_tls(self, ingress: Ingress) -> None:
        for tls in ingress.spec.tls:
            if not tls.secret_name:
                self.note(ingress, "spec.tls", "an entry without secretName is not converted")
                continue
            for host in tls.hosts or ("",):
                if host in self.listeners:
                    continue
                ref: dict[str, Any] = {"kind": "Secret", "name": tls.secret_name}
                if ingress.metadata.namespace != self.namespace:
                    ref["namespace"] = ingress.metadata.namespace
                    self.grants.setdefault(ingress.metadata.namespace, set()).add(
                        tls.secret_name)
                listener: dict[str, Any] = {
                    "name": listener_name(host), "port": self.opts.https_port,
                    "protocol": "HTTPS", "tls": {"mode": "Terminate", "certificateRefs": [ref]},
                    "allowedRoutes": {"namespaces": {"from": "All"}}}
                if host:
                    listener["hostname"] = host
                self.listeners[host] = listener

    def add_passthrough(self, ingress: Ingress) -> None:
        """``ssl-passthrough``: each exact rule host → a TLS listener in Passthrough mode and a
        TLSRoute to its first path's backend (SNI routing, undecrypted; no HTTP routes)."""
        for rule in ingress.spec.rules:
            paths = rule.http.paths if rule.http else ()
            if not rule.host or rule.host.startswith("*.") or not paths:
                self.note(ingress, PREFIX + "ssl-passthrough", f"rule host {rule.host or '*'}: "
                          "passthrough needs an exact host and a path; left out")
                continue
            ref = self.backend_ref(ingress, paths[0].backend)
            if ref is None:
                continue
            name = listener_name(rule.host).replace("https-", "tls-", 1)
            self.passthrough.append({
                "name": name, "port": self.opts.https_port, "protocol": "TLS",
                "hostname": rule.host, "tls": {"mode": "Passthrough"},
                "allowedRoutes": {"namespaces": {"from": "All"}}})
            parent: dict[str, Any] = {"name": self.opts.gateway_name, "sectionName": name}
            if ingress.metadata.namespace != self.namespace:
                parent["namespace"] = self.namespace
            self.tls_routes.append({
                "apiVersion": TLS_ROUTE_API, "kind": "TLSRoute",
                "metadata": {"name": f"{ingress.metadata.name}-{name}",
                             "namespace": ingress.metadata.namespace},
                "spec": {"parentRefs": [parent], "hostnames": [rule.host],
                         "rules": [{"backendRefs": [ref]}]}})

    # --- routes -------------------------------------------------------------------------------
    def add_ingress(self, ingress: Ingress, notes: NginxAnnotations) -> None:
        for rule in ingress.spec.rules:
            host = _Host(ingress=ingress, notes=notes, host=rule.host or "")
            for path in rule.http.paths if rule.http else ():
                self.add_path(host, path)
            if ingress.spec.default_backend is not None:
                self.add_rule(host, "PathPrefix", "/", ingress.spec.default_backend, notes,
                              rewrite_full=None, rewrite_prefix=None)
            if notes.app_root:
                host.rules.insert(0, {"matches": [{"path": {"type": "Exact", "value": "/"}}],
                                      "filters": [redirect_filter(path=notes.app_root,
                                                                   code=302)]})
                host.by_path = {k: v + 1 for k, v in host.by_path.items()}
                host.by_source = {k: v + 1 for k, v in host.by_source.items()}
            self.hosts.append(host)
        if ingress.spec.default_backend is not None and not self.catch_all:
            host = _Host(ingress=ingress, notes=notes, host="", catch_all=True)
            self.add_rule(host, "PathPrefix", "/", ingress.spec.default_backend, notes,
                          rewrite_full=None, rewrite_prefix=None)
            self.catch_all = True
            self.hosts.append(host)

    def add_path(self, host: _Host, path: HTTPIngressPath) -> None:
        notes, ingress = host.notes, host.ingress
        rewrite = notes.rewrite
        kind = "Exact" if path.path_type == "Exact" else "PathPrefix"
        value = path.path
        full: str | None = None
        prefix: str | None = None
        if rewrite is not None and rewrite.regex_paths and kind != "Exact":
            # ingress-nginx: ``~* "^P"``, a case-insensitive regex anchored at the start only
            idiom = _IDIOM.match(path.path)
            target = _IDIOM_TARGET.match(rewrite.target or "")
            literal = _META.search(path.path) is None
            if idiom is not None and target is not None:
                kind, value = "PathPrefix", idiom.group("prefix") or "/"
                prefix = target.group("target") or "/"
                self.note(ingress, PREFIX + "rewrite-target", f"path {path.path!r}: "
                          "ingress-nginx matched it case-insensitively; ReplacePrefixMatch "
                          f"needs a PathPrefix, which is case-sensitive: {_upper(value)} no "
                          "longer matches")
            elif rewrite.target is not None and literal and not _CAPTURE.search(rewrite.target):
                kind, value, full = "RegularExpression", _nginx_regex(path.path), rewrite.target
            elif rewrite.target is None and path.path != "/":
                kind, value = "RegularExpression", _nginx_regex(path.path)
            elif rewrite.target is None:
                pass  # "^/" takes any path: PathPrefix / is the same, and ranks last as in nginx
            else:
                self.note(ingress, PREFIX + "rewrite-target",
                          f"path {path.path!r} with target {rewrite.target!r}: Gateway API "
                          "rewrites take no capture groups; only P(/|$)(.*) with T/$2 "
                          "converts; this path is left out")
                return
            if kind == "RegularExpression" and re2_problem(value) is not None:
                self.note(ingress, PREFIX + "use-regex", f"path {path.path!r} is not a regular "
                          "expression the engine reads (RE2); this path is left out")
                return
        elif kind == "PathPrefix" and host.host in self.regex_hosts and not host.catch_all:
            # a sibling Ingress of the host asks for regexes: ingress-nginx makes this prefix a
            # case-insensitive regex anchored at the start too (/api also matches /apix)
            bare = path.path.rstrip("/") or "/"
            if bare != "/" and re2_problem(_nginx_regex(bare)) is None:  # "/": any path
                kind, value = "RegularExpression", _nginx_regex(bare)
                self.regex_siblings.setdefault(_ref(ingress), []).append(path.path)
        elif path.path_type == "ImplementationSpecific" and not path.path.endswith("/"):
            self.note(ingress, "spec.rules.http.paths", f"ImplementationSpecific path "
                      f"{path.path!r}: ingress-nginx matched it as a plain string prefix "
                      f"({path.path}x matched too); as PathPrefix it matches whole segments, "
                      "as Podway serves the Ingress")
        if kind == "PathPrefix" and value != "/":
            value = value.rstrip("/") or "/"
        self.add_rule(host, kind, value, path.backend, notes, rewrite_full=full,
                      rewrite_prefix=prefix)
        if (kind, value) in host.by_path:
            host.by_source.setdefault((path.path_type, path.path), host.by_path[(kind, value)])

    def add_rule(self, host: _Host, kind: str, value: str, backend: IngressBackend,
                 notes: NginxAnnotations, *, rewrite_full: str | None,
                 rewrite_prefix: str | None) -> None:
        if (kind, value) in host.by_path:
            return
        match: dict[str, Any] = {"path": {"type": kind, "value": value}}
        rule: dict[str, Any] = {"matches": [match]}
        filters: list[dict[str, Any]] = []
        if notes.redirect is not None:
            redirect = url_redirect(notes.redirect.url, notes.redirect.code)
            if redirect is None:
                key = "permanent-redirect" if notes.redirect.permanent else "temporal-redirect"
                self.note(host.ingress, PREFIX + key, f"{notes.redirect.url!r} is not a URL a "
                          "redirect can name; the path is left out")
                return
            filters.append(redirect)
        else:
            rewrite: dict[str, Any] = {}
            if notes.upstream_vhost:
                rewrite["hostname"] = notes.upstream_vhost.split(":")[0]
            if rewrite_full is not None:
                rewrite["path"] = {"type": "ReplaceFullPath", "replaceFullPath": rewrite_full}
            elif rewrite_prefix is not None:
                rewrite["path"] = {"type": "ReplacePrefixMatch",
                                   "replacePrefixMatch": rewrite_prefix}
            if rewrite:
                filters.append({"type": "URLRewrite", "urlRewrite": rewrite})
            if notes.x_forwarded_prefix:
                filters.append({"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "X-Forwarded-Prefix", "value": notes.x_forwarded_prefix}]}})
            if notes.cors is not None:
                filters.append(cors_filter(notes.cors))
        if filters:
            rule["filters"] = filters
        if notes.redirect is None:
            ref = self.backend_ref(host.ingress, backend)
            if ref is None:
                return
            rule["backendRefs"] = [ref]
        host.by_path[(kind, value)] = len(host.rules)
        host.rules.append(rule)

    def backend_ref(self, ingress: Ingress, backend: IngressBackend) -> dict[str, Any] | None:
        if backend.service is None:
            self.note(ingress, "backend.resource", "resource backends have no Gateway API "
                      "form; that path is left out")
            return None
        port = backend.service.port.number
        if port is None:
            svc = next((o for o in self.objects if isinstance(o, Service)
                        and o.metadata.namespace == ingress.metadata.namespace
                        and o.metadata.name == backend.service.name), None)
            named = next((p.port for p in svc.spec.ports
                          if p.name == backend.service.port.name), None) if svc else None
            if named is None:
                self.note(ingress, "backend.service.port.name",
                          f"port {backend.service.port.name!r} of Service "
                          f"{backend.service.name}: give the Service in the input (a "
                          "backendRef needs the number); that path is left out")
                return None
            port = named
        return {"name": backend.service.name, "port": port}

    def add_canary(self, ingress: Ingress, policy: Canary, notes: NginxAnnotations) -> None:
        for rule in ingress.spec.rules:
            for path in rule.http.paths if rule.http else ():
                self.join_canary(ingress, rule.host or "", path, policy, notes)

    def join_canary(self, ingress: Ingress, hostname: str, path: HTTPIngressPath,
                    policy: Canary, notes: NginxAnnotations) -> None:
        key = (path.path_type, path.path)
        main = next(((h, h.by_source[key]) for h in self.hosts
                     if h.host == hostname and key in h.by_source), None)
        canary = self.backend_ref(ingress, path.backend)
        if main is None or canary is None:
            self.note(ingress, PREFIX + "canary", f"no Ingress serves {hostname or '*'} "
                      f"{path.path} for this canary to shadow; left out")
            return
        host, index = main
        base = host.rules[index]
        if "backendRefs" not in base:
            return  # the main rule redirects: ingress-nginx never reaches a backend either
        main_refs = base["backendRefs"]
        extra: list[dict[str, Any]] = []
        match = base["matches"][0]
        variants: list[tuple[dict[str, Any], bool]] = []
        if policy.by_header:
            if policy.header_pattern is not None and policy.header_value is None:
                self.note(ingress, PREFIX + "canary-by-header-pattern",
                          "converted as a RegularExpression header match (RE2, not PCRE)")
                variants.append(({"type": "RegularExpression", "name": policy.by_header,
                                  "value": policy.header_pattern}, True))
            elif policy.header_value is not None:
                variants.append(({"name": policy.by_header, "value": policy.header_value},
                                 True))
            else:
                variants += [({"name": policy.by_header, "value": "always"}, True),
                             ({"name": policy.by_header, "value": "never"}, False)]
        if policy.by_cookie:
            for word, to_canary in (("always", True), ("never", False)):
                variants.append(({"type": "RegularExpression", "name": "Cookie",
                                  "value": f"(^|.*;\\s*){re.escape(policy.by_cookie)}={word}"
                                           "(;.*|$)"}, to_canary))
        for header, to_canary in variants:
            rule = {**copy.deepcopy(base), "matches": [{**match, "headers": [header]}],
                    "backendRefs": [dict(canary)] if to_canary else copy.deepcopy(main_refs)}
            extra.append(rule)
        if policy.weight:
            total = max(policy.weight_total, 1)
            share = min(policy.weight, total)
            base["backendRefs"] = [{**r, "weight": total - share} for r in main_refs] + [
                {**canary, "weight": share}]
        host.rules[index + 1:index + 1] = extra
        host.by_path = {k: (v + len(extra) if v > index else v)
                        for k, v in host.by_path.items()}
        host.by_source = {k: (v + len(extra) if v > index else v)
                          for k, v in host.by_source.items()}
        if notes.rewrite is not None or notes.upstream_vhost or notes.x_forwarded_prefix:
            self.note(ingress, PREFIX + "canary", "a canary uses its main Ingress's rewrite "
                      "and headers (as in ingress-nginx); its own are ignored")

    def add_names(self, converted: list[tuple[Ingress, NginxAnnotations]]) -> None:
        """nginx ``server-alias``: each alias a copy of its host's routes (every Ingress's, as
        the alias is a name of nginx's server) and of its HTTPS listener; never a name an
        Ingress serves as a host (that host wins), the oldest Ingress's alias first.
        ``from-to-www-redirect``: the other name answers 308 to the host, keeping scheme and
        request URI (RequestRedirect with the hostname only), on HTTP and — with the host's
        certificate — HTTPS."""
        taken = {rule.host or "" for o in self.objects if isinstance(o, Ingress)
                 for rule in o.spec.rules}
        for ingress, notes in converted:
            hosts = [r.host for r in ingress.spec.rules if r.host and not r.host.startswith("*")]
            for alias in notes.server_alias:
                if alias in taken or not hosts:
                    if alias in taken:
                        self.note(ingress, PREFIX + "server-alias", f"{alias} is a host of an "
                                  "Ingress, which serves it (as in ingress-nginx); not an alias")
                    continue
                taken.add(alias)
                self.add_alias(hosts[0], alias)
            for host in hosts if notes.from_to_www else ():
                other = host[4:] if host.startswith("www.") else f"www.{host}"
                if other in taken:
                    continue
                taken.add(other)
                self.add_www(ingress, host, other)

    def add_alias(self, host: str, alias: str) -> None:
        for each in [h for h in self.hosts if h.host == host and not h.alias_of]:
            self.hosts.append(_Host(ingress=each.ingress, notes=each.notes, host=alias,
                                    alias_of=host, rules=each.rules))
        self.share_listener(host, alias)

    def share_listener(self, host: str, other: str) -> dict[str, Any] | None:
        """An HTTPS listener for ``other`` with ``host``'s certificate (None: ``host`` has
        none; ``other``'s own listener when it has one)."""
        if other in self.listeners or wildcard_of(other) in self.listeners:
            return self.listeners.get(other) or self.listeners[wildcard_of(other) or ""]
        source = self.listeners.get(host) or self.listeners.get(wildcard_of(host) or "-")
        if source is None:
            return None
        self.listeners[other] = {**copy.deepcopy(source), "name": listener_name(other),
                                 "hostname": other}
        return self.listeners[other]

    def add_www(self, ingress: Ingress, host: str, other: str) -> None:
        gw: dict[str, Any] = {"name": self.opts.gateway_name}
        if ingress.metadata.namespace != self.namespace:
            gw["namespace"] = self.namespace
        listener = self.share_listener(host, other)
        parents = [{**gw, "sectionName": "http"}]
        if listener is not None:
            parents.append({**gw, "sectionName": listener["name"]})
        self.www_routes.append({
            "apiVersion": GATEWAY_API, "kind": "HTTPRoute",
            "metadata": {"name": f"{ingress.metadata.name}-{listener_name(other)[6:]}",
                         "namespace": ingress.metadata.namespace},
            "spec": {"parentRefs": parents, "hostnames": [other], "rules": [{"filters": [{
                "type": "RequestRedirect",
                "requestRedirect": {"hostname": host, "statusCode": 308}}]}]}})

    def check_regex_order(self, hosts: list[_Host]) -> None:
        """nginx tries a regex host's paths longest first; Gateway API ranks every
        RegularExpression before every PathPrefix. A shorter regex ahead of a longer prefix
        (a rewrite idiom kept as PathPrefix) may take its requests: say so."""
        kinds = [m["path"] for host in hosts for rule in host.rules
                 for m in rule.get("matches", ()) if "path" in m and "headers" not in m]
        prefixes = [p["value"] for p in kinds if p["type"] == "PathPrefix" and p["value"] != "/"]
        regexes = [p["value"] for p in kinds if p["type"] == "RegularExpression"]
        if hosts and any(len(r) - len(_nginx_regex("")) < len(p)
                         for r in regexes for p in prefixes):
            self.note(hosts[0].ingress, PREFIX + "use-regex", f"host {hosts[0].host or '*'}: "
                      f"RegularExpression paths ({', '.join(regexes)}) rank before PathPrefix "
                      f"({', '.join(prefixes)}) in Gateway API, while nginx tried the longest "
                      "path first: a request both match may reach another backend")

    # --- output -------------------------------------------------------------------------------
    def routes(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        per_ingress: dict[str, int] = {}
        for host in self.hosts:
            per_ingress[_ref(host.ingress)] = per_ingress.get(_ref(host.ingress), 0) + 1
        seen: dict[str, int] = {}
        for host in self.hosts:
            key = _ref(host.ingress)
            seen[key] = seen.get(key, 0) + 1
            name = host.ingress.metadata.name
            if host.catch_all:
                name = f"{name}-default-backend"
            elif per_ingress[key] > 1:
                name = f"{name}-{seen[key]}"
            out.extend(self.route_objects(host, name))
        return out

    def route_objects(self, host: _Host, name: str) -> list[dict[str, Any]]:
        if not host.rules:
            return []
        gw = {"name": self.opts.gateway_name}
        if host.ingress.metadata.namespace != self.namespace:
            gw["namespace"] = self.namespace
        ssl = host.notes.ssl
        key = next((h for h in (host.host, wildcard_of(host.host), "")
                    if h is not None and h in self.listeners), None)
        listener = self.listeners[key] if key is not None else None
        tls = listener is not None
        # ingress-nginx's HSTS: HTTPS answers of a host with a certificate of its own
        hsts = self.opts.nginx.hsts_value if key and not host.catch_all else None
        # As Podway serves Ingresses: the 308 is for the routes of an Ingress whose own TLS
        # entry covers the host (or that forces it); every route of the host is on HTTPS.
        own = any(covers(h, host.alias_of or host.host) for t in host.ingress.spec.tls
                  for h in t.hosts or ("",))
        redirect = (own and (ssl is None or ssl.redirect) and tls) or (
            ssl is not None and ssl.force)
        parents: list[dict[str, Any]] = []
        if tls and listener is not None:
            parents.append({**gw, "sectionName": listener["name"]})
        if not redirect:
            parents.append({**gw, "sectionName": "http"})
        meta = {"name": name, "namespace": host.ingress.metadata.namespace}
        out: list[dict[str, Any]] = []
        if parents and hsts is not None and listener is not None:
            # the header on HTTPS only: the HTTPS rules get it, plain HTTP a route of its own
            out.append(self.http_route(meta, host, parents[:1], _with_hsts(host.rules, hsts)))
            if len(parents) > 1:
                out.append(self.http_route({**meta, "name": f"{name}-http"}, host, parents[1:],
                                           host.rules))
            if not any(m.get("path") in ({"type": "PathPrefix", "value": "/"},
                                         {"type": "RegularExpression",
                                          "value": _nginx_regex("/")})
                       for rule in host.rules for m in rule.get("matches", ())):
                self.note(host.ingress, "(ConfigMap) hsts", f"https://{host.host}: a path no "
                          "rule serves answers 404 without Strict-Transport-Security (Gateway "
                          "API has no 404 answer with headers); ingress-nginx's 404 had it")
        elif parents:
            out.append(self.http_route(meta, host, parents, host.rules))
        else:
            self.note(host.ingress, PREFIX + "force-ssl-redirect",
                      f"{host.host or '*'} has no certificate: HTTP answers the redirect only "
                      "and no HTTPS listener serves its rules (as with ingress-nginx, whose "
                      "default server then answers)")
        if redirect:
            port = None if self.opts.https_port == 443 else self.opts.https_port
            rspec: dict[str, Any] = {"parentRefs": [{**gw, "sectionName": "http"}]}
            if host.host:
                rspec["hostnames"] = [host.host]
            rspec["rules"] = [{"filters": [redirect_filter(scheme="https", port=port,
                                                            code=308)]}]
            out.append({"apiVersion": GATEWAY_API, "kind": "HTTPRoute",
                        "metadata": {**meta, "name": f"{name}-to-https"}, "spec": rspec})
        return out

    def http_route(self, meta: dict[str, Any], host: _Host, parents: list[dict[str, Any]],
                   rules: list[dict[str, Any]]) -> dict[str, Any]:
        spec: dict[str, Any] = {"parentRefs": parents}
        if host.host:
            spec["hostnames"] = [host.host]
        spec["rules"] = rules
        return {"apiVersion": GATEWAY_API, "kind": "HTTPRoute", "metadata": meta, "spec": spec}

    def gateway(self) -> list[dict[str, Any]]:
        listeners = [{"name": "http", "port": self.opts.http_port, "protocol": "HTTP",
                      "allowedRoutes": {"namespaces": {"from": "All"}}},
                     *self.listeners.values(), *self.passthrough]
        out: list[dict[str, Any]] = [
            {"apiVersion": GATEWAY_API, "kind": "GatewayClass",
             "metadata": {"name": self.opts.gateway_class},
             "spec": {"controllerName": PODWAY_CONTROLLER}},
            {"apiVersion": GATEWAY_API, "kind": "Gateway",
             "metadata": {"name": self.opts.gateway_name, "namespace": self.namespace},
             "spec": {"gatewayClassName": self.opts.gateway_class, "listeners": listeners}}]
        for ns, names in sorted(self.grants.items()):
            out.append({"apiVersion": REFERENCE_GRANT_API, "kind": "ReferenceGrant",
                        "metadata": {"name": f"{self.opts.gateway_name}-certificates",
                                     "namespace": ns},
                        "spec": {"from": [{"group": "gateway.networking.k8s.io",
                                           "kind": "Gateway", "namespace": self.namespace}],
                                 "to": [{"group": "", "kind": "Secret", "name": n}
                                        for n in sorted(names)]}})
        return out


def convert(objects: Sequence[K8sObject], opts: ConvertOptions = ConvertOptions()
            ) -> Conversion:
    """Gateway API objects serving what the Ingresses in ``objects`` serve, and the notes."""
    ingresses = sorted((o for o in objects if isinstance(o, Ingress)), key=_age)
    namespaces = {i.metadata.namespace for i in ingresses}
    ns = opts.gateway_namespace or (next(iter(namespaces)) if len(namespaces) == 1
                                    else "default")
    conv = _Converter(objects, opts, ns)
    read_notes = {i.metadata.uid or _ref(i): read(i.metadata.annotations,
                                                  namespace=i.metadata.namespace)
                  for i in ingresses}
    converted: list[tuple[Ingress, NginxAnnotations]] = []
    for ingress in ingresses:
        notes = read_notes[ingress.metadata.uid or _ref(ingress)]
        for key, message in not_carried(notes):
            conv.note(ingress, key, message)
        restricting = restrictions(notes)
        if restricting:
            # Fail closed: a route without the restriction would serve the app to everyone.
            conv.note(ingress, restricting[0], "this Ingress is not converted: it restricts "
                      f"access ({', '.join(restricting)}) in a way the converted routes "
                      "cannot carry, so they would serve it open; keep the Ingress (Podway "
                      "serves what it can, refuses the rest) or protect the backend itself")
            continue
        converted.append((ingress, notes))
        if notes.ssl_passthrough:
            conv.add_passthrough(ingress)
        elif notes.canary is None:
            conv.add_tls(ingress)
    conv.regex_hosts = {rule.host or "" for ingress, notes in converted
                        if notes.canary is None and not notes.ssl_passthrough
                        and notes.rewrite is not None and notes.rewrite.regex_paths
                        for rule in ingress.spec.rules}
    for ingress, notes in converted:
        if notes.canary is None and not notes.ssl_passthrough:
            conv.add_ingress(ingress, notes)
    conv.add_names(converted)
    for name in conv.regex_hosts:
        conv.check_regex_order([h for h in conv.hosts if h.host == name and not h.catch_all])
    for ingress, notes in converted:
        paths = conv.regex_siblings.get(_ref(ingress))
        if paths and not (notes.rewrite is not None and notes.rewrite.regex_paths):
            conv.note(ingress, PREFIX + "use-regex", "another Ingress of the same host asks "
                      f"for regex paths, so ingress-nginx matched {', '.join(paths)} as "
                      "case-insensitive regexes anchored at the start; carried as "
                      "RegularExpression (?i)(?:PATH).*")
    for ingress, notes in converted:
        if notes.canary is not None and not notes.ssl_passthrough:
            conv.add_canary(ingress, notes.canary, notes)
    routes = conv.routes()  # first: a listener an alias needs is made with its routes
    result = conv.gateway() + routes + conv.www_routes + conv.tls_routes if ingresses else []
    return Conversion(objects=tuple(result), notes=tuple(conv.notes))


def _nginx_regex(path: str) -> str:
    """ingress-nginx's ``location ~* "^PATH"`` as a Gateway API RegularExpression (a whole-path
    match in Podway, as in Envoy): case-insensitive, anything may follow — the form Podway
    serves the Ingress with, so both order the same."""
    return f"(?i)(?:{path}).*"


def _upper(path: str) -> str:
    return path.upper() if path != "/" else "/X (upper case)"


def _with_hsts(rules: list[dict[str, Any]], value: str) -> list[dict[str, Any]]:
    """The rules, each also setting ``Strict-Transport-Security`` on its answers."""
    header = {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
        "set": [{"name": HSTS_HEADER, "value": value}]}}
    out: list[dict[str, Any]] = []
    for rule in rules:  # filters after matches, before backendRefs (the documented order)
        head = {k: v for k, v in rule.items() if k == "matches"}
        out.append({**head, "filters": [*rule.get("filters", ()), header], **rule})
        out[-1]["filters"] = [*rule.get("filters", ()), header]
    return out


def _age(ingress: Ingress) -> tuple[bool, Any, str, str]:
    stamp = ingress.metadata.creation_timestamp
    return (stamp is None, stamp or 0, ingress.metadata.namespace, ingress.metadata.name)


def _ref(ingress: Ingress) -> str:
    return f"{ingress.metadata.namespace}/{ingress.metadata.name}"
