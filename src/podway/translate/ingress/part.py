"""What one Ingress contributes on its own: routes by host+path, TLS certificates, pools and
the problems found in it — before it meets any other Ingress.

A part depends only on its Ingress and the objects it looked up (Services, Secrets; recorded):
while none of them changes it is reused, so a change of one Ingress costs the merge (O(change)).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TypedDict, TypeVar

from podway.ir import (
    DirectResponse,
    Forward,
    L4Route,
    PathKind,
    PathMatch,
    Route,
    RouteMatch,
    TLSCertificate,
    TLSOptions,
    UpstreamTLS,
    WeightedPool,
)
from podway.ir.route import Action, Filter
from podway.model import Ingress, K8sObject, Secret, Service
from podway.model.core import ServicePort
from podway.model.networking import HTTPIngressPath, IngressBackend, IngressRule
from podway.model.snapshot import Snapshot
from podway.translate import annotations as ann
from podway.translate.core.hosts import valid_hostname
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem, Reason, Severity, Verdict, listing, quote
from podway.translate.core.regex import re2_problem
from podway.translate.core.tls import ca_bundle, certificate_from_secret
from podway.translate.core.tls_options import OPTION_KEYS, TLSOptionError, from_listener_options
from podway.translate.ingress.foreign import foreign_annotations
from podway.translate.ingress.nginx import basic_auth, error_pages, ext_auth
from podway.translate.ingress.nginx import serve as nginx
from podway.translate.ingress.nginx.annotations import PREFIX as NGINX_PREFIX
from podway.translate.ingress.nginx.annotations import Canary, NginxAnnotations, VerifyClient
from podway.translate.ingress.nginx.annotations import read as read_nginx
from podway.translate.ingress.tls import IngressTLSSettings
from podway.translate.ingress.tls import parse as parse_tls_settings
from podway.translate.pools.backends import PoolSpec, find_port, http_pool, l4_pool, mode_problem

T = TypeVar("T", bound=K8sObject)
LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
SlotKey = tuple[object, ...]  # (PathKind, path) or ("default",)


@dataclass(frozen=True, slots=True)
class Claim:
    """A route that wants the slot ``key`` of ``host``; ``order`` sorts routes in the host."""

    host: str
    key: SlotKey
    order: tuple[int, int, str]
    route: Route
    where: str
    # Refuses every request (an unserved access restriction): no canary joins it either.
    refused: bool = False


@dataclass(frozen=True, slots=True)
class TLSPart:
    hosts: tuple[str, ...]  # valid SNI names; empty: the listener's default certificate
    cert: TLSCertificate
    where: str


@dataclass(frozen=True, slots=True)
class PassthroughPart:
    """A host whose TLS connections go, undecrypted, to ``route``'s backend (by SNI)."""

    host: str
    route: L4Route
    where: str


@dataclass(frozen=True, slots=True)
class IngressPart:
    source: Ingress
    claims: tuple[Claim, ...]
    tls: tuple[TLSPart, ...]
    passthrough: tuple[PassthroughPart, ...]
    pools: tuple[PoolSpec, ...]
    problems: tuple[Problem, ...]
    # Every lookup the part made: (kind, namespace, name, what was found).
    deps: tuple[tuple[type[K8sObject], str, str, K8sObject | None], ...]
    ssl_redirect: bool = True  # podway.io/ssl-redirect: plain HTTP of its TLS hosts redirects
    # nginx force-ssl-redirect: plain HTTP redirects even for hosts without a TLS entry
    force_ssl_redirect: bool = False
    canary: Canary | None = None  # nginx canary: its claims join the main Ingress's routes
    regex_paths: bool = False  # nginx use-regex / rewrite-target: its hosts' paths are regexes
    rule_hosts: tuple[str, ...] = ()  # the valid hosts of its rules ("*": none named)
    aliases: tuple[str, ...] = ()  # nginx server-alias: more names of its rule hosts
    www_redirect: bool = False  # nginx from-to-www-redirect

    @property
    def owner(self) -> str:
        return "/".join(self.source.key)

    def still_valid(self, ingress: Ingress, snapshot: Snapshot) -> bool:
        return self.source is ingress and all(
            snapshot.get(cls, ns, name) is found for cls, ns, name, found in self.deps)


class _NginxFields(TypedDict):
    force_ssl_redirect: bool
    canary: Canary | None
    regex_paths: bool
    rule_hosts: tuple[str, ...]
    aliases: tuple[str, ...]
    www_redirect: bool


def build_part(ingress: Ingress, snapshot: Snapshot, opts: TranslateOptions) -> IngressPart:
    return _Builder(ingress, snapshot, opts).build()


@dataclass(slots=True)
class _Builder:
    ingress: Ingress
    snapshot: Snapshot
    opts: TranslateOptions
    claims: list[Claim] = field(default_factory=list)
    tls: list[TLSPart] = field(default_factory=list)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    deps: dict[tuple[type[K8sObject], str, str], K8sObject | None] = field(default_factory=dict)
    settings: IngressTLSSettings = field(default_factory=IngressTLSSettings)
    passthrough: list[PassthroughPart] = field(default_factory=list)
    tls_options: TLSOptions | None = None
    nginx: NginxAnnotations = field(default_factory=NginxAnnotations)
    filters: tuple[Filter, ...] = ()  # every route's (nginx annotations)

    def lookup(self, cls: type[T], namespace: str, name: str) -> T | None:
        found = self.snapshot.get(cls, namespace, name)
        self.deps[(cls, namespace, name)] = found
        return found

    def build(self) -> IngressPart:
        ingress = self.ingress
        base = "ingress/{}/{}".format(*ingress.key)
        self.read_nginx()
        answer = nginx.refusal(self.nginx) or nginx.redirect(self.nginx)
        for name, verdict in self.settings.problems:
            self.problem(verdict.reason, f"annotation {name}: {verdict.message}",
                         f"metadata.annotations[{name}]")
        if self.settings.passthrough and ingress.spec.default_backend is not None:
            self.problem(Reason.UNSUPPORTED_FIELD, "a defaultBackend cannot be reached by SNI "
                         "(TLS passthrough); it is not used", "spec.defaultBackend")
        if not ingress.spec.rules and ingress.spec.default_backend is None:
            self.problem(Reason.NO_RULES, "Ingress has neither rules nor a defaultBackend",
                         "spec", Severity.WARNING)
        rule_hosts: list[str] = []
        for i, rule in enumerate(ingress.spec.rules):
            if self.settings.passthrough:
                if not self.nginx.closed:  # refused: TLS passthrough cannot answer 403
                    self.passthrough_rule(i, rule, base)
                continue
            if rule.host and not valid_hostname(rule.host):
                self.problem(Reason.INVALID_HOST,
                             f"host {quote(rule.host)} is not a DNS name "
                             "(a leading '*.' is allowed)",
                             f"spec.rules[{i}].host")
                continue
            host = rule.host or "*"
            rule_hosts.append(host)
            for j, path in enumerate(rule.http.paths if rule.http else ()):
                self.path_claim(host, f"{base}/rule/{i}/path/{j}", path,
                                f"spec.rules[{i}].http.paths[{j}]", answer)
        self.app_root(base, rule_hosts)
        if ingress.spec.default_backend is not None and not self.settings.passthrough:
            route = Route(name=f"{base}/default-backend", match=RouteMatch(),
                          action=answer or self.action(ingress.spec.default_backend,
                                                       "spec.defaultBackend"),
                          filters=error_pages.for_backend((*self.filters, *nginx.host_rewrite(
                              self.nginx)), ingress.spec.default_backend),
                          origin=ingress.ref)
            # Lowest precedence in every host of this Ingress, and for hosts nobody names.
            for host in dict.fromkeys([*rule_hosts, "*"]):
                self.claims.append(Claim(host, ("default",), (1, 2, ""), route,
                                         "spec.defaultBackend", bool(self.nginx.closed)))
        if ingress.spec.tls and not self.settings.passthrough:
            self.tls_options = self.handshake_options()
        if self.settings.passthrough and ingress.spec.tls:
            self.problem(Reason.UNSUPPORTED_FIELD, "TLS passthrough: the pods present their own "
                         "certificates; spec.tls is not used", "spec.tls", Severity.WARNING)
        for k, tls in enumerate(() if self.settings.passthrough else ingress.spec.tls):
            self.add_tls(k, tls.secret_name, tls.hosts)
        return IngressPart(source=ingress, claims=tuple(self.claims), tls=tuple(self.tls),
                           passthrough=tuple(self.passthrough),
                           pools=tuple(self.pools.values()), problems=tuple(self.problems),
                           deps=tuple((*k, v) for k, v in self.deps.items()),
                           ssl_redirect=self.settings.ssl_redirect,
                           **self.nginx_fields(rule_hosts))

    def nginx_fields(self, rule_hosts: list[str]) -> _NginxFields:
        """What the merge needs of the Ingress's nginx annotations."""
        n = self.nginx
        return _NginxFields(force_ssl_redirect=n.ssl is not None and n.ssl.force,
                            canary=n.canary,
                            regex_paths=n.rewrite is not None and n.rewrite.regex_paths,
                            rule_hosts=tuple(dict.fromkeys(rule_hosts)),
                            aliases=n.server_alias, www_redirect=n.from_to_www)

    def read_nginx(self) -> None:
        """The ingress-nginx annotations: read once, reported, turned into filters."""
        annotations = self.ingress.metadata.annotations
        self.nginx = read_nginx(annotations, namespace=self.ingress.metadata.namespace)
        self.settings = parse_tls_settings(_with_nginx(annotations, self.nginx))
        self.annotations()
        for note in nginx.notes(self.nginx):
            self.problem(Reason(note.reason.value), f"annotation {note.key}: {note.message}",
                         f"metadata.annotations[{note.key}]",
                         Severity.ERROR if note.error else Severity.WARNING)
        self.filters = nginx.route_filters(self.nginx)
        for auth in (basic_auth.serve(self.ingress, lambda ns, n: self.lookup(Secret, ns, n)),
                     ext_auth.serve(self.ingress, lambda ns, n: self.lookup(Service, ns, n)),
                     error_pages.serve(self.ingress, lambda ns, n: self.lookup(Service, ns, n))):
            self.problems += auth.problems()
            if auth.filter is not None and not self.nginx.closed:  # refused: nobody to ask
                self.filters += (auth.filter,)
                self.pools.update((p.name, p) for p in auth.pools)
            self.nginx = auth.closing(self.nginx)  # unusable: refused as unserved
        canary = self.nginx.canary
        pattern = canary.header_pattern if canary is not None else None
        why = re2_problem(f".*(?:{pattern}).*") if pattern is not None else None
        if canary is not None and why is not None:
            key = f"{NGINX_PREFIX}canary-by-header-pattern"
            self.problem(Reason.INVALID_ANNOTATION, f"annotation {key}: {why}; not used",
                         f"metadata.annotations[{key}]")
            self.nginx = replace(self.nginx, canary=replace(canary, header_pattern=None))

    def path_claim(self, host: str, name: str, path: HTTPIngressPath, where: str,
                   answer: Action | None) -> None:
        """One rule path → a claim on ``host`` (or a problem)."""
        if not path.path.startswith("/"):
            self.problem(Reason.INVALID_PATH, f"path {quote(path.path)} must start with '/'",
                         f"{where}.path")
            return
        kind = PathKind.EXACT if path.path_type == "Exact" else PathKind.PREFIX
        value = path.path if kind is PathKind.EXACT else (path.path.rstrip("/") or "/")
        match = PathMatch(kind=kind, value=value)
        exact = kind is PathKind.EXACT
        regex = nginx.path_match(self.nginx, exact=exact, path=path.path)
        rewrite = nginx.rewrite(self.nginx, exact=exact, path=path.path)
        patterns = (regex.value if regex else None, rewrite.pattern if rewrite else None)
        why = next((w for w in (re2_problem(p) for p in patterns if p is not None)
                    if w is not None), None)
        if why is not None:
            self.problem(Reason.INVALID_PATH, f"path {quote(path.path)} is a regular expression "
                         f"here (nginx use-regex/rewrite-target) and {why}", f"{where}.path")
            return
        if regex is not None:
            match, value = regex, path.path
        route = Route(name=name, match=RouteMatch(path=match),
                      action=answer or self.action(path.backend, f"{where}.backend"),
                      filters=error_pages.for_backend(
                          (*self.filters, *([rewrite] if rewrite else [])), path.backend),
                      origin=self.ingress.ref)
        order = (-len(value), 0 if exact else 1, value)
        self.claims.append(Claim(host, (match.kind, value), order, route, where,
                                 bool(self.nginx.closed)))

    def app_root(self, base: str, hosts: list[str]) -> None:
        """nginx ``app-root``: ``/`` of each host of the Ingress redirects to it."""
        root = nginx.app_root(self.nginx)
        if root is None or self.nginx.closed:
            return
        route = Route(name=f"{base}/app-root", action=root, filters=self.filters,
                      match=RouteMatch(path=PathMatch(kind=PathKind.EXACT, value="/")),
                      origin=self.ingress.ref)
        where = f"metadata.annotations[{NGINX_PREFIX}app-root]"
        for host in dict.fromkeys(hosts):
            self.claims.append(Claim(host, (PathKind.EXACT, "/"), (-1, 0, "/"), route, where))

    def annotations(self) -> None:
        """Settings meant for other controllers, and a class annotation that is overridden."""
        annotations = self.ingress.metadata.annotations
        for name, message in foreign_annotations(annotations):
            if name.startswith(NGINX_PREFIX):
                continue  # served, or reported with advice (translate.ingress.nginx.serve.notes)
            self.problem(Reason.UNSUPPORTED_ANNOTATION, message,
                         f"metadata.annotations[{name}]", Severity.WARNING)
        legacy = annotations.get(LEGACY_CLASS_ANNOTATION)
        named = self.ingress.spec.ingress_class_name
        if legacy is not None and named is not None and legacy != named:
            self.problem(Reason.UNSUPPORTED_ANNOTATION, f"annotation {LEGACY_CLASS_ANNOTATION} "
                         f"({quote(legacy)}) is ignored: "
                         f"spec.ingressClassName ({quote(named)}) takes precedence",
                         f"metadata.annotations[{LEGACY_CLASS_ANNOTATION}]", Severity.WARNING)

    def handshake_options(self) -> TLSOptions | None:
        """``podway.io/tls-*-version``, ``-ciphers`` over the flags' options for this Ingress;
        None (and an error) when the engine would refuse a value: TLS entries not served."""
        annotations = self.ingress.metadata.annotations
        try:
            options = from_listener_options(annotations, self.opts.tls)
        except TLSOptionError as error:
            name = next((k for k in OPTION_KEYS if k in annotations), OPTION_KEYS[0])
            self.problem(Reason.INVALID_ANNOTATION, f"{error}; the TLS entries of this Ingress "
                         "are not served (the engine would refuse the value)",
                         f"metadata.annotations[{name}]")
            return None
        return self.client_certificates(options)

    def client_certificates(self, options: TLSOptions) -> TLSOptions | None:
        """nginx ``auth-tls-*``: the CA that verifies client certificates on its TLS hosts. None
        (an error) when it cannot be enforced as asked: then not served over HTTPS at all."""
        auth = self.nginx.auth_tls
        if auth is None or auth.verify in (VerifyClient.OFF, VerifyClient.OPTIONAL_NO_CA):
            return options
        key = f"metadata.annotations[{NGINX_PREFIX}auth-tls-secret]"
        if not auth.name:
            return None  # unreadable reference: reported by the reader, fail closed
        if auth.match_cn is not None:
            key = f"metadata.annotations[{NGINX_PREFIX}auth-tls-match-cn]"
            self.problem(Reason.UNSUPPORTED_ANNOTATION, f"annotation {NGINX_PREFIX}"
                         "auth-tls-match-cn cannot be enforced (the engine checks subject "
                         "alternative names, not the CN); the TLS entries of this Ingress are "
                         "not served until it is removed", key)
            return None
        self.lookup(Secret, auth.namespace, auth.name)
        found = ca_bundle(self.snapshot, auth.namespace, "", "Secret", auth.name)
        if isinstance(found, Verdict):
            self.problem(found.reason, f"annotation {NGINX_PREFIX}auth-tls-secret: "
                         f"{found.message}; the TLS entries of this Ingress are not served "
                         "(clients could not be verified)", key)
            return None
        return replace(options, client_ca_pem=found,
                       client_ca=f"secret/{auth.namespace}/{auth.name}",
                       client_required=auth.verify is VerifyClient.ON,
                       client_verify_depth=auth.depth)

    def service_port(self, backend: IngressBackend,
                     where: str) -> tuple[Service, ServicePort] | None:
        """The Service port a backend names, or None with a problem saying why not."""
        ns = self.ingress.metadata.namespace
        if backend.service is None:
            res = backend.resource
            group = f"{res.api_group}/" if res and res.api_group else ""
            kind = f"{group}{res.kind if res else ''}"
            self.problem(Reason.UNSUPPORTED_BACKEND,
                         f"resource backends ({kind}) are not supported", f"{where}.resource")
            return None
        ref = backend.service
        service = self.lookup(Service, ns, ref.name)
        if service is None:
            self.problem(Reason.BACKEND_NOT_FOUND, f"Service {ns}/{ref.name} not found",
                         f"{where}.service.name")
            return None
        if service.spec.type == "ExternalName":
            self.problem(Reason.UNSUPPORTED_BACKEND,
                         f"Service {ns}/{ref.name} is of type ExternalName",
                         f"{where}.service.name")
            return None
        port = find_port(service, number=ref.port.number, name=ref.port.name, protocol="TCP")
        if port is None:
            wanted = (f"port {ref.port.number}" if ref.port.number is not None
                      else f"port named {quote(ref.port.name or '')}")
            self.problem(Reason.BACKEND_NOT_FOUND,
                         f"Service {ns}/{ref.name} has no {wanted}", f"{where}.service.port")
            return None
        if port.protocol != "TCP":
            self.problem(Reason.UNSUPPORTED_PROTOCOL,
                         f"Service {ns}/{ref.name} port {port.port} is {port.protocol}, not TCP",
                         f"{where}.service.port")
            return None
        unusable = mode_problem(service, port, self.opts, self.snapshot.backend_modes)
        if unusable is not None:
            self.problem(Reason.BACKEND_NOT_FOUND, unusable, f"{where}.service.port")
            return None
        return service, port

    def action(self, backend: IngressBackend, where: str) -> Action:
        found = self.service_port(backend, where)
        if found is None:
            return DirectResponse(status=503)
        service, port = found
        spec = self.with_backend_settings(http_pool(service, port), service, where)
        if spec is None:
            return DirectResponse(status=503)
        self.pools.setdefault(spec.name, spec)
        return Forward(backends=(WeightedPool(pool=spec.name),))

    def passthrough_rule(self, i: int, rule: IngressRule, base: str) -> None:
        """``podway.io/tls-passthrough``: the rule's host is routed by SNI to the backend of
        its first path, whose pods terminate TLS themselves; paths cannot apply (the engine
        never sees the HTTP request)."""
        where = f"spec.rules[{i}]"
        paths = rule.http.paths if rule.http else ()
        if not rule.host or rule.host.startswith("*") or not valid_hostname(rule.host):
            self.problem(Reason.INVALID_HOST, "TLS passthrough routes by SNI and needs an exact "
                         "host; this rule is not served", f"{where}.host")
            return
        if not paths:
            self.problem(Reason.NO_RULES, "TLS passthrough needs a path with a backend",
                         f"{where}.http")
            return
        if len(paths) > 1:
            self.problem(Reason.UNSUPPORTED_FIELD, f"TLS passthrough forwards every connection "
                         f"for {quote(rule.host)} to the first path's backend; the other paths "
                         "are not used (the engine never sees the request)", f"{where}.http.paths",
                         Severity.WARNING)
        found = self.service_port(paths[0].backend, f"{where}.http.paths[0].backend")
        if found is None:
            return
        spec = l4_pool(*found)
        self.pools.setdefault(spec.name, spec)
        self.passthrough.append(PassthroughPart(
            host=rule.host, where=where,
            route=L4Route(name=f"{base}/rule/{i}/passthrough", hostnames=(rule.host,),
                          backends=(WeightedPool(pool=spec.name),), origin=self.ingress.ref)))

    def with_backend_settings(self, spec: PoolSpec, service: Service,
                              where: str) -> PoolSpec | None:
        """The pool as the backend annotations ask (protocol, TLS); None: fail closed.

        A pool whose settings differ from the port's plain pool gets its own name — the
        protocol, and for TLS a digest of SNI and CA — so an Ingress that re-encrypts never
        changes the pool another Ingress or a route uses for the same Service port.
        """
        backend = self.settings.backend
        settings = spec.settings
        if backend.protocol is not None and backend.protocol is not settings.protocol:
            settings = replace(settings, protocol=backend.protocol)
            spec = replace(spec, name=f"{spec.name}/{backend.protocol.value}")
        if backend.tls:
            ns, name = service.key
            ca_pem = ""
            if backend.ca_secret is not None:
                self.lookup(Secret, ns, backend.ca_secret)
                found = ca_bundle(self.snapshot, ns, "", "Secret", backend.ca_secret)
                if isinstance(found, Verdict):
                    self.problem(found.reason, f"annotation {ann.BACKEND_CA_SECRET.name}: "
                                 f"{found.message}; the backend answers 503 rather than "
                                 "skip verification", where)
                    return None
                ca_pem = found
            sni = backend.sni or f"{name}.{ns}.svc"
            digest = hashlib.sha256(f"{sni}\n{ca_pem}".encode()).hexdigest()[:8]
            settings = replace(settings, upstream_tls=UpstreamTLS(sni=sni, ca_pem=ca_pem,
                                                                  origin=self.ingress.ref))
            spec = replace(spec, name=f"{spec.name}/tls-{digest}")
        return replace(spec, settings=settings) if settings is not spec.settings else spec

    def add_tls(self, k: int, secret_name: str | None, hosts: tuple[str, ...]) -> None:
        where = f"spec.tls[{k}]"
        if not secret_name:
            self.problem(Reason.SECRET_NOT_FOUND,
                         "no secretName; these hosts are left out of the HTTPS listener",
                         f"{where}.secretName", Severity.WARNING)
            return
        valid = tuple(h for h in dict.fromkeys(hosts) if valid_hostname(h))
        for h in dict.fromkeys(hosts):
            if h not in valid:
                self.problem(Reason.INVALID_HOST, f"TLS host {quote(h)} is not a DNS name",
                             f"{where}.hosts")
        if hosts and not valid:
            # Never let an entry that named hosts become the default certificate of every host.
            self.problem(Reason.INVALID_HOST, "no valid host left in this TLS entry; it is not "
                         "used", f"{where}.hosts")
            return
        ns = self.ingress.metadata.namespace
        self.lookup(Secret, ns, secret_name)
        found = certificate_from_secret(self.snapshot, ns, secret_name, valid)
        if found.error is not None or found.certificate is None:
            error = found.error or Verdict(False, Reason.INVALID_SECRET, "no certificate")
            self.problem(error.reason, f"{error.message}; hosts {listing(valid) or '(all)'} "
                         "are left out of the HTTPS listener", f"{where}.secretName")
            return
        if found.warning is not None:
            self.problem(found.warning.reason, found.warning.message, f"{where}.secretName",
                         Severity.WARNING)
        if self.tls_options is None:
            return  # an unusable podway.io/tls-* annotation: fail closed (reported once)
        self.tls.append(TLSPart(valid, replace(found.certificate, options=self.tls_options),
                                f"{where}.hosts" if valid else f"{where}.secretName"))

    def problem(self, reason: Reason, message: str, where: str,
                severity: Severity = Severity.ERROR) -> None:
        self.problems.append(Problem(ref=self.ingress.ref, reason=reason, message=message,
                                     field=where, severity=severity))


def _with_nginx(annotations: dict[str, str], found: NginxAnnotations) -> dict[str, str]:
    """With nginx's ssl-redirect, backend-protocol, ssl-passthrough for unset podway.io ones."""
    extra: dict[str, str] = {}
    if found.ssl is not None and ann.SSL_REDIRECT.name not in annotations:
        extra[ann.SSL_REDIRECT.name] = str(found.ssl.redirect).lower()
    if found.backend_protocol is not None and ann.BACKEND_PROTOCOL.name not in annotations:
        extra[ann.BACKEND_PROTOCOL.name] = found.backend_protocol.value
    if found.ssl_passthrough and ann.TLS_PASSTHROUGH.name not in annotations:
        extra[ann.TLS_PASSTHROUGH.name] = "true"
    return {**annotations, **extra} if extra else annotations
