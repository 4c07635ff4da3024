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
from podway.tools.migrate.convert_model import (
    DEFAULTS,
    Conversion,
    ConvertOptions,
    HostRoutes,
    Note,
    ref_of,
)
from podway.tools.migrate.gateway_api import (
    TLS_ROUTE_API,
    cors_filter,
    dump,
    listener_name,
    nginx_regex,
    redirect_filter,
    upper_path,
    url_redirect,
)
from podway.tools.migrate.host_names import HostNames
from podway.tools.migrate.not_carried import not_carried, restrictions
from podway.tools.migrate.route_output import RouteOutput
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


@dataclass(slots=True)
class _Converter(HostNames, RouteOutput):
    objects: Sequence[K8sObject]
    opts: ConvertOptions
    namespace: str = ""
    notes: list[Note] = field(default_factory=list)
    listeners: dict[str, dict[str, Any]] = field(default_factory=dict)  # by hostname
    grants: dict[str, set[str]] = field(default_factory=dict)  # secret namespace → names
    hosts: list[HostRoutes] = field(default_factory=list)
    catch_all: bool = False  # the oldest Ingress with a defaultBackend took the catch-all
    passthrough: list[dict[str, Any]] = field(default_factory=list)  # TLS listeners
    tls_routes: list[dict[str, Any]] = field(default_factory=list)
    # hosts where an Ingress asks for regex paths (use-regex / rewrite-target): ingress-nginx
    # makes every prefix path of the host a regex
    regex_hosts: set[str] = field(default_factory=set)
    regex_siblings: dict[str, list[str]] = field(default_factory=dict)  # Ingress → such paths
    www_routes: list[dict[str, Any]] = field(default_factory=list)  # from-to-www-redirect

    def note(self, ingress: Ingress, key: str, message: str) -> None:
        self.notes.append(Note(ingress=ref_of(ingress), key=key, message=message))

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
            ref = self.backendref_of(ingress, paths[0].backend)
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
            host = HostRoutes(ingress=ingress, notes=notes, host=rule.host or "")
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
            host = HostRoutes(ingress=ingress, notes=notes, host="", catch_all=True)
            self.add_rule(host, "PathPrefix", "/", ingress.spec.default_backend, notes,
                          rewrite_full=None, rewrite_prefix=None)
            self.catch_all = True
            self.hosts.append(host)

    def add_path(self, host: HostRoutes, path: HTTPIngressPath) -> None:
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
                          f"needs a PathPrefix, which is case-sensitive: {upper_path(value)} no "
                          "longer matches")
            elif rewrite.target is not None and literal and not _CAPTURE.search(rewrite.target):
                kind, value, full = "RegularExpression", nginx_regex(path.path), rewrite.target
            elif rewrite.target is None and path.path != "/":
                kind, value = "RegularExpression", nginx_regex(path.path)
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
            if bare != "/" and re2_problem(nginx_regex(bare)) is None:  # "/": any path
                kind, value = "RegularExpression", nginx_regex(bare)
                self.regex_siblings.setdefault(ref_of(ingress), []).append(path.path)
        elif kind == "Exact" and host.host in self.regex_hosts and not host.catch_all:
            self.note(ingress, "spec.rules.http.paths", f"Exact path {path.path!r} on a host "
                      "with regex paths: ingress-nginx's template made it a case-insensitive "
                      f"regex anchored at the start too ({path.path}/x matched); kept Exact, "
                      "as Podway serves the Ingress")
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

    def add_rule(self, host: HostRoutes, kind: str, value: str, backend: IngressBackend,
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
            ref = self.backendref_of(host.ingress, backend)
            if ref is None:
                return
            rule["backendRefs"] = [ref]
        host.by_path[(kind, value)] = len(host.rules)
        host.rules.append(rule)

    def backendref_of(self, ingress: Ingress, backend: IngressBackend) -> dict[str, Any] | None:
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
        canary = self.backendref_of(ingress, path.backend)
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


def convert(objects: Sequence[K8sObject], opts: ConvertOptions = DEFAULTS) -> Conversion:
    """Gateway API objects serving what the Ingresses in ``objects`` serve, and the notes."""
    ingresses = sorted((o for o in objects if isinstance(o, Ingress)), key=_age)
    namespaces = {i.metadata.namespace for i in ingresses}
    ns = opts.gateway_namespace or (next(iter(namespaces)) if len(namespaces) == 1
                                    else "default")
    conv = _Converter(objects, opts, ns)
    read_notes = {i.metadata.uid or ref_of(i): read(i.metadata.annotations,
                                                  namespace=i.metadata.namespace)
                  for i in ingresses}
    converted: list[tuple[Ingress, NginxAnnotations]] = []
    for ingress in ingresses:
        notes = read_notes[ingress.metadata.uid or ref_of(ingress)]
        for key, message in not_carried(notes, ingress.metadata.annotations):
            conv.note(ingress, key, message)
        restricting = restrictions(notes, ingress.metadata.annotations)
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
        paths = conv.regex_siblings.get(ref_of(ingress))
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


def _age(ingress: Ingress) -> tuple[bool, Any, str, str]:
    stamp = ingress.metadata.creation_timestamp
    return (stamp is None, stamp or 0, ingress.metadata.namespace, ingress.metadata.name)
