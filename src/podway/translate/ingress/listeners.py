"""Ingress → the shared HTTP and HTTPS listeners.

Precedence follows Kubernetes, not manifest order: exact hosts before wildcards (``*.foo.com``
covers exactly one label) before host-less rules; within a host the longest path wins and, on
equal length, Exact beats Prefix. Prefixes match whole path elements and ignore a trailing slash.
The same host+path in two Ingresses: the oldest wins, the other gets ``HostConflict`` — unless
the other is an ingress-nginx canary (``nginx.ingress.kubernetes.io/canary``), which joins the
main route instead (``podway.translate.ingress.canary``; one canary per host+path). As in
ingress-nginx, one Ingress asking for regex paths (``use-regex``/``rewrite-target``) makes the
prefix paths of every Ingress of that host case-insensitive regexes anchored at the start.

Host ownership: the oldest Ingress naming a host (in a rule or a TLS entry) owns it. An Ingress
of another namespace that adds paths or a certificate to it is always reported, on both sides
(``HostShared`` warnings), so the owner learns that someone else now serves part of its host;
with ``TranslateOptions.strict_host_ownership`` those rules and TLS entries are refused instead
(``HostConflict``). Same-namespace Ingresses share hosts freely (one trust domain).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from podway.ir import (
    L4Route,
    Listener,
    ListenerProtocol,
    PathKind,
    PathMatch,
    Redirect,
    Route,
    TLSCertificate,
    TLSOptions,
    VirtualHost,
    WildcardMode,
)
from podway.ir.hosts import covers, host_order
from podway.model import Ingress, IngressClass
from podway.model.snapshot import Key, Snapshot
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem, Reason, Severity, quote
from podway.translate.core.regex import re2_problem
from podway.translate.ingress.canary import canary_routes
from podway.translate.ingress.nginx_hosts import NginxHosts
from podway.translate.ingress.part import (
    LEGACY_CLASS_ANNOTATION,
    Claim,
    IngressPart,
    PassthroughPart,
    SlotKey,
    TLSPart,
    build_part,
)
from podway.translate.ingress.tls import ACME_CHALLENGE, REDIRECT_STATUS
from podway.translate.pools.backends import PoolSpec


def is_ours(ingress: Ingress, snapshot: Snapshot, opts: TranslateOptions) -> bool | Problem:
    """Whether an Ingress belongs to Podway. A Problem says why not: an error when it names our
    class but the class is gone, else ``NotOwned`` (``Severity.INFO``)."""
    classes = snapshot.kind(IngressClass)
    name = ingress.spec.ingress_class_name or ingress.metadata.annotations.get(
        LEGACY_CLASS_ANNOTATION)
    where = ("spec.ingressClassName" if ingress.spec.ingress_class_name
             else f"metadata.annotations[{LEGACY_CLASS_ANNOTATION}]")
    if name is None:
        if any(c.is_default and (c.spec.controller == opts.ingress_controller
                                 or c.metadata.name in opts.takeover_classes)
               for c in classes.values()):
            return True
        return _not_owned(ingress, "spec.ingressClassName",
                          "no ingressClassName and no default IngressClass of "
                          f"{opts.ingress_controller}; set spec.ingressClassName to take it")
    if name in opts.takeover_classes:
        return True  # --ingress-class: taken over, whichever controller its class names
    if not classes:
        if name == opts.ingress_class:
            return True
        return _not_owned(ingress, where, f"class {quote(name)} is not Podway's "
                          f"({quote(opts.ingress_class)}, no IngressClass objects loaded)")
    cls = classes.get(("", name))
    if cls is not None:
        if cls.spec.controller == opts.ingress_controller:
            return True
        return _not_owned(ingress, where, f"IngressClass {quote(name)} belongs to controller "
                          f"{quote(cls.spec.controller)}, not {opts.ingress_controller}")
    if name == opts.ingress_class:
        return Problem(ref=ingress.ref, reason=Reason.CLASS_NOT_FOUND,
                       message=f"IngressClass {quote(name)} not found", field=where)
    return _not_owned(ingress, where, f"IngressClass {quote(name)} not found, and the name is "
                      f"not Podway's ({quote(opts.ingress_class)})")


def _not_owned(ingress: Ingress, where: str, why: str) -> Problem:
    return Problem(ref=ingress.ref, reason=Reason.NOT_OWNED, severity=Severity.INFO,
                   message=f"not served by Podway: {why}", field=where)


@dataclass(slots=True)
class IngressTranslation(NginxHosts):
    """Merges every Ingress's part into host → routes, certificates and pools.

    Ingresses must be added oldest first: the first claim of a host+path slot wins. ``memo``
    (kept by the incremental translator) maps Ingress keys to the parts built last time;
    ``parts`` is what this run used, the memo for the next one.
    """

    snapshot: Snapshot
    opts: TranslateOptions
    memo: Mapping[Key, IngressPart] = field(default_factory=dict)
    parts: dict[Key, IngressPart] = field(default_factory=dict)
    hosts: dict[str, dict[SlotKey, tuple[Claim, str]]] = field(default_factory=dict)
    certificates: dict[str, TLSCertificate] = field(default_factory=dict)  # by SNI hostname
    default_certificate: TLSCertificate | None = None
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    owners: dict[str, IngressPart] = field(default_factory=dict)  # host → oldest to name it
    passthrough: dict[str, tuple[PassthroughPart, IngressPart]] = field(default_factory=dict)
    # nginx canary Ingresses: (host, slot) → the canary's claim; joined to the main route
    canaries: dict[tuple[str, SlotKey], tuple[Claim, IngressPart]] = field(default_factory=dict)
    _shared: set[tuple[str, str]] = field(default_factory=set)  # (host, guest) reported
    # nginx server-alias: alias → the host whose routes it serves
    _alias_of: dict[str, str] = field(default_factory=dict)
    _www: set[str] = field(default_factory=set)  # nginx from-to-www-redirect: redirecting hosts
    _joined: set[tuple[str, SlotKey]] = field(default_factory=set)  # canaries with a main

    def add(self, ingress: Ingress) -> None:
        part = self.memo.get(ingress.key)
        if part is None or not part.still_valid(ingress, self.snapshot):
            part = build_part(ingress, self.snapshot, self.opts)
        self.parts[ingress.key] = part
        for claim in part.claims:
            if part.canary is not None:
                self._claim_canary(part, claim)
            else:
                self._claim(part, claim)
        for tls in part.tls:
            self._add_tls(part, tls)
        for passthrough in part.passthrough:
            self._add_passthrough(part, passthrough)
        for spec in part.pools:
            self.pools.setdefault(spec.name, spec)
        self.problems.extend(part.problems)

    def _admitted(self, part: IngressPart, host: str, what: str, where: str) -> bool:
        """Whether ``part`` may add ``what`` to ``host``, reporting a shared host."""
        if host == "*":
            return True  # the catch-all belongs to nobody; its slots settle conflicts
        owner = self.owners.setdefault(host, part)
        if owner is part or owner.source.metadata.namespace == part.source.metadata.namespace:
            return True
        if self.opts.strict_host_ownership:
            self._problem(part, Reason.HOST_CONFLICT,
                          f"host {quote(host)} is owned by older Ingress {owner.owner} of another "
                          f"namespace; strict host ownership refuses {what} for it", where)
            return False
        if (host, part.owner) not in self._shared:
            self._shared.add((host, part.owner))
            self._problem(part, Reason.HOST_SHARED,
                          f"host {quote(host)} is owned by older Ingress {owner.owner} of another "
                          f"namespace; this Ingress adds {what} to it", where, Severity.WARNING)
            self.problems.append(Problem(
                ref=owner.source.ref, reason=Reason.HOST_SHARED, severity=Severity.WARNING,
                field="spec", message=f"Ingress {part.owner} of another namespace adds {what} "
                                      f"to host {quote(host)}, which this Ingress owns"))
        return True

    def _claim(self, part: IngressPart, claim: Claim) -> None:
        if not self._admitted(part, claim.host, "paths", claim.where):
            return
        slots = self.hosts.setdefault(claim.host, {})
        held = slots.get(claim.key)
        if held is None:
            slots[claim.key] = (claim, part.owner)
            return
        key, owner = claim.key, held[1]
        what = "defaultBackend" if key == ("default",) else f"path {quote(str(key[1]))} ({key[0]})"
        if owner == part.owner:
            self._problem(part, Reason.HOST_CONFLICT,
                          f"host {quote(claim.host)} {what} is defined twice; the first one "
                          "is used",
                          claim.where, Severity.WARNING)
        else:
            self._problem(part, Reason.HOST_CONFLICT,
                          f"host {quote(claim.host)} {what} is already served by older Ingress "
                          f"{owner}", claim.where)

    def _claim_canary(self, part: IngressPart, claim: Claim) -> None:
        """A canary takes no slot: it joins the main route of the same host and path."""
        if not self._admitted(part, claim.host, "canary paths", claim.where):
            return
        held = self.canaries.setdefault((claim.host, _canary_slot(claim.key)), (claim, part))
        if held[1] is not part:
            self._problem(part, Reason.HOST_CONFLICT,
                          f"host {quote(claim.host)} {_slot_words(claim.key)} already has "
                          f"canary Ingress {held[1].owner}; one canary per host and path is "
                          "served",
                          claim.where)

    def _routes(self, claim: Claim) -> list[Route]:
        """The main route of a slot, preceded by its canary's routes (ingress-nginx order:
        header, then cookie, then weight)."""
        slot = (claim.host, _canary_slot(claim.key))
        held = self.canaries.get(slot)
        if held is None or claim.refused:
            return [claim.route]
        self._joined.add(slot)
        return canary_routes(claim.route, held[0].route.action, held[1])

    def _unjoined_canaries(self) -> None:
        for (host, key), (claim, part) in self.canaries.items():
            if (host, key) not in self._joined:
                self._problem(part, Reason.CANARY_WITHOUT_MAIN,
                              f"no main Ingress serves host {quote(host)} {_slot_words(key)}; "
                              "this canary is not served (as in ingress-nginx)", claim.where,
                              Severity.WARNING)

    def _add_tls(self, part: IngressPart, tls: TLSPart) -> None:
        cert = tls.cert
        if not tls.hosts:
            if self.default_certificate is None:
                self.default_certificate = cert
            elif self.default_certificate.name != cert.name:
                self._problem(part, Reason.CERTIFICATE_CONFLICT,
                              "the default certificate is already "
                              f"{self.default_certificate.name}", tls.where, Severity.WARNING)
            return
        for host in tls.hosts:
            if not self._admitted(part, host, "a certificate", tls.where):
                continue
            held = self.certificates.get(host)
            if held is None:
                self.certificates[host] = cert
            elif held.name == cert.name and held.options != cert.options:
                self._problem(part, Reason.CERTIFICATE_CONFLICT,
                              f"host {quote(host)} already uses {held.name} with other TLS "
                              "options (podway.io/tls-*); the older Ingress's apply",
                              tls.where, Severity.WARNING)
            elif held.name != cert.name:
                self._problem(part, Reason.CERTIFICATE_CONFLICT,
                              f"host {quote(host)} already uses {held.name}", tls.where,
                              Severity.WARNING)

    def _add_passthrough(self, part: IngressPart, item: PassthroughPart) -> None:
        if not self._admitted(part, item.host, "TLS passthrough", item.where):
            return
        held = self.passthrough.get(item.host)
        if held is None:
            self.passthrough[item.host] = (item, part)
        elif held[1] is not part:
            self._problem(part, Reason.HOST_CONFLICT,
                          f"host {quote(item.host)} is already passed through by older Ingress "
                          f"{held[1].owner}", item.where)

    def _passthrough_routes(self) -> tuple[L4Route, ...]:
        """Passthrough routes in age order; a host with a certificate stays terminating (the
        engine picks one filter chain per SNI name), and its passthrough Ingress is told."""
        out: list[L4Route] = []
        for host, (item, part) in self.passthrough.items():
            holder = self.certificates.get(host)
            if holder is not None:
                self._problem(part, Reason.CERTIFICATE_CONFLICT,
                              f"host {quote(host)} has certificate {holder.name} from another "
                              "Ingress, which terminates its TLS; TLS passthrough is not used",
                              item.where)
                continue
            out.append(item.route)
        return tuple(out)

    def _problem(self, part: IngressPart, reason: Reason, message: str, where: str,
                 severity: Severity = Severity.ERROR) -> None:
        self.problems.append(Problem(ref=part.source.ref, reason=reason, message=message,
                                     field=where, severity=severity))

    def listeners(self) -> list[Listener]:
        """The HTTP listener (every host) and, when any certificate is usable or a host is
        passed through, HTTPS (terminating and passthrough chains chosen by SNI)."""
        passthrough = self._passthrough_routes()
        if not self.hosts:
            self._unjoined_canaries()
            return [self._https((), (), passthrough)] if passthrough else []
        vhosts: list[VirtualHost] = []
        regex_owners = {p.owner for p in self.parts.values() if p.regex_paths}
        www = self._extra_hosts()
        for host in sorted([*self.hosts, *www], key=host_order):
            if host in www:
                vhosts.append(www[host])
                continue
            held = self.hosts[host].values()
            claims = sorted((c for c, _ in held), key=lambda c: c.order)
            routes = [r for c in claims for r in self._routes(c)]
            if any(owner in regex_owners for _, owner in held):
                routes = [_as_regex(r) for r in routes]
            vhosts.append(VirtualHost(name=host, hostname=host, wildcard=WildcardMode.ONE_LABEL,
                                      routes=tuple(routes)))
        self._unjoined_canaries()
        canaries = {self.canaries[k][1].source.ref for k in self._joined}
        origins = tuple(sorted({r.origin for v in vhosts for r in v.routes} | canaries))
        certs = self._certificates()
        secure = tuple(v for v in vhosts if self._has_certificate(v.hostname)) if certs else ()
        plain = self._redirected(vhosts, {v.hostname for v in secure})
        secure = self._hsts(secure)
        out = [Listener(name="ingress/http", address=self.opts.address, port=self.opts.http_port,
                        protocol=ListenerProtocol.HTTP, virtual_hosts=plain, origins=origins)]
        if (certs and secure) or passthrough:
            out.append(self._https(secure if certs else (), certs, passthrough))
        return out

    def _https(self, secure: tuple[VirtualHost, ...], certs: tuple[TLSCertificate, ...],
               passthrough: tuple[L4Route, ...]) -> Listener:
        origins = {r.origin for v in secure for r in v.routes} | {r.origin for r in passthrough}
        return Listener(name="ingress/https", address=self.opts.address,
                        port=self.opts.https_port, protocol=ListenerProtocol.HTTPS,
                        virtual_hosts=secure, certificates=certs, l4_routes=passthrough,
                        origins=tuple(sorted(origins)))

    def _redirected(self, vhosts: list[VirtualHost], secure: set[str]
                    ) -> tuple[VirtualHost, ...]:
        """The plain-HTTP virtual hosts: a route of a host served over HTTPS answers a
        redirect to ``https://`` when its Ingress has a TLS entry covering the host and does
        not opt out (``podway.io/ssl-redirect`` or nginx ``ssl-redirect: "false"``), and
        every route of an Ingress with nginx ``force-ssl-redirect`` does (HTTPS may end in
        front of Podway); ACME HTTP-01 paths are never redirected (a certificate authority
        validates them over plain HTTP)."""
        by_ref = {part.source.ref: part for part in self.parts.values()}
        port = None if self.opts.https_port == 443 else self.opts.https_port
        redirect = Redirect(scheme="https", port=port, status_code=REDIRECT_STATUS)
        out: list[VirtualHost] = []
        for vhost in vhosts:
            host = vhost.hostname
            served = host != "*" and host in secure
            if host in self._www:  # nginx's www redirect keeps the scheme: no 308 to HTTPS
                out.append(vhost)
                continue
            if not served and not any(by_ref[r.origin].force_ssl_redirect for r in vhost.routes
                                      if r.origin in by_ref):
                out.append(vhost)
                continue
            routes = []
            for route in vhost.routes:
                part = by_ref.get(route.origin)
                if part is None or _acme(route):
                    routes.append(route)
                elif part.force_ssl_redirect or (served and part.ssl_redirect and _tls_covers(
                        part, self._alias_of.get(host, host))):
                    routes.append(Route(name=route.name, match=route.match, action=redirect,
                                        origin=route.origin))
                else:
                    routes.append(route)
            out.append(VirtualHost(name=vhost.name, hostname=host, wildcard=vhost.wildcard,
                                   routes=tuple(routes)))
        return tuple(out)

    def _has_certificate(self, host: str) -> bool:
        if self.default_certificate is not None:
            return True
        return any(covers(pattern, host) for pattern in self.certificates) if host != "*" else False

    def _certificates(self) -> tuple[TLSCertificate, ...]:
        """One entry per certificate, with every SNI name it serves, sorted by name."""
        names: dict[str, list[str]] = {}
        by_name: dict[str, TLSCertificate] = {}
        first: dict[str, TLSOptions] = {}  # secret → the options of its oldest use
        for host, cert in self.certificates.items():
            # One filter chain per certificate *and* handshake options: hosts whose Ingresses
            # ask for other options (TLS versions, client certificates) get a chain of their
            # own instead of silently taking another Ingress's.
            base = first.setdefault(cert.name, cert.options)
            name = cert.name if cert.options == base else f"{cert.name}/{_digest(cert.options)}"
            names.setdefault(name, []).append(host)
            by_name.setdefault(name, cert)
        out = [TLSCertificate(name=n, hostnames=tuple(sorted(names[n], key=host_order)),
                              cert_pem=c.cert_pem, key_pem=c.key_pem, origin=c.origin,
                              options=c.options)
               for n, c in sorted(by_name.items())]
        if self.default_certificate is not None:
            d = self.default_certificate
            out.append(TLSCertificate(name=f"{d.name}/default", hostnames=(), cert_pem=d.cert_pem,
                                      key_pem=d.key_pem, origin=d.origin, options=d.options))
        return tuple(out)


def _as_regex(route: Route) -> Route:
    """ingress-nginx makes every path of a host regex (case-insensitive, anchored at the start
    only) once one Ingress of the host asks for regexes (``use-regex``/``rewrite-target``): a
    prefix route of another Ingress there matches as nginx's ``~* ^path`` too (its trailing
    slash dropped). A path RE2 cannot read, and ACME HTTP-01 paths, keep their prefix match."""
    path = route.match.path
    if path.kind is not PathKind.PREFIX or _acme(route):
        return route
    pattern = f"(?i)(?:{path.value}).*"
    if re2_problem(pattern) is not None:
        return route
    match = replace(route.match, path=PathMatch(kind=PathKind.REGEX, value=pattern))
    return replace(route, match=match)


def _digest(options: TLSOptions) -> str:
    return hashlib.sha256(repr((options, options.client_ca_pem)).encode()).hexdigest()[:8]


def _tls_covers(part: IngressPart, host: str) -> bool:
    """Whether one of the Ingress's usable TLS entries covers ``host`` (no hosts: every host)."""
    return any(not tls.hosts or any(covers(h, host) for h in tls.hosts) for tls in part.tls)


def _acme(route: Route) -> bool:
    """Whether the route serves ACME HTTP-01 challenges (or a path below them)."""
    path = route.match.path
    return path.kind is not PathKind.REGEX and (
        path.value.rstrip("/") + "/").startswith(ACME_CHALLENGE + "/")


def _canary_slot(key: SlotKey) -> SlotKey:
    """The slot a canary joins: ingress-nginx pairs a canary with the main Ingress by path,
    whether or not ``use-regex``/``rewrite-target`` on one of them made that path a regex here
    (a regex slot is keyed by the path as written, a prefix slot without its trailing slash)."""
    if len(key) == 2 and key[0] is PathKind.REGEX:
        return (PathKind.PREFIX, str(key[1]).rstrip("/") or "/")
    return key


def _slot_words(key: SlotKey) -> str:
    return "defaultBackend" if key == ("default",) else f"path {quote(str(key[1]))} ({key[0]})"
