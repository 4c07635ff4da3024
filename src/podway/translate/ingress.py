"""Ingress → the shared HTTP and HTTPS listeners.

Precedence follows Kubernetes, not manifest order: exact hosts before wildcards (``*.foo.com``
covers exactly one label) before host-less rules; within a host the longest path wins and, on
equal length, Exact beats Prefix. Prefixes match whole path elements and ignore a trailing slash.
The same host+path in two Ingresses: the oldest wins, the other gets ``HostConflict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import (
    DirectResponse,
    Forward,
    Listener,
    PathKind,
    PathMatch,
    Protocol,
    Route,
    RouteMatch,
    TLSCertificate,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir.route import Action
from podway.model import Ingress, IngressClass, Service
from podway.model.networking import IngressBackend
from podway.model.snapshot import Snapshot
from podway.translate.backends import PoolSpec, find_port, http_pool, mode_problem
from podway.translate.hosts import covers, host_order, valid_hostname
from podway.translate.options import TranslateOptions
from podway.translate.problems import Problem, Reason, Severity
from podway.translate.tls import certificate_from_secret

LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"


def is_ours(ingress: Ingress, snapshot: Snapshot, opts: TranslateOptions) -> bool | Problem:
    """Whether an Ingress belongs to Podway; a Problem when it names our class but it is gone."""
    classes = snapshot.kind(IngressClass)
    name = ingress.spec.ingress_class_name or ingress.metadata.annotations.get(
        LEGACY_CLASS_ANNOTATION)
    if name is None:
        return any(c.spec.controller == opts.ingress_controller and c.is_default
                   for c in classes.values())
    if not classes:
        return name == opts.ingress_class
    cls = classes.get(("", name))
    if cls is not None:
        return cls.spec.controller == opts.ingress_controller
    if name == opts.ingress_class:
        return Problem(ref=ingress.ref, reason=Reason.CLASS_NOT_FOUND,
                       message=f"IngressClass {name!r} not found", field="spec.ingressClassName")
    return False


@dataclass(slots=True)
class _Entry:
    order: tuple[int, int, str]
    route: Route
    owner: str  # "ns/name" of the Ingress that won this slot


@dataclass(slots=True)
class IngressTranslation:
    """Accumulates every Ingress into host → routes, certificates and pools."""

    snapshot: Snapshot
    opts: TranslateOptions
    hosts: dict[str, dict[tuple[object, ...], _Entry]] = field(default_factory=dict)
    certificates: dict[str, TLSCertificate] = field(default_factory=dict)  # by SNI hostname
    default_certificate: TLSCertificate | None = None
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def add(self, ingress: Ingress) -> None:
        ns, name = ingress.key
        owner = f"{ns}/{name}"
        base = f"ingress/{ns}/{name}"
        rule_hosts: list[str] = []
        if not ingress.spec.rules and ingress.spec.default_backend is None:
            self._problem(ingress, Reason.NO_RULES,
                          "Ingress has neither rules nor a defaultBackend", "spec",
                          Severity.WARNING)
        for i, rule in enumerate(ingress.spec.rules):
            host = rule.host or "*"
            if rule.host is not None and not valid_hostname(rule.host):
                self._problem(ingress, Reason.INVALID_HOST,
                              f"host {rule.host!r} is not a DNS name (a leading '*.' is allowed)",
                              f"spec.rules[{i}].host")
                continue
            rule_hosts.append(host)
            for j, path in enumerate(rule.http.paths if rule.http else ()):
                where = f"spec.rules[{i}].http.paths[{j}]"
                if not path.path.startswith("/"):
                    self._problem(ingress, Reason.INVALID_PATH,
                                  f"path {path.path!r} must start with '/'", f"{where}.path")
                    continue
                kind = PathKind.EXACT if path.path_type == "Exact" else PathKind.PREFIX
                value = path.path if kind is PathKind.EXACT else (path.path.rstrip("/") or "/")
                action = self._action(ingress, path.backend, f"{where}.backend")
                route = Route(name=f"{base}/rule/{i}/path/{j}",
                              match=RouteMatch(path=PathMatch(kind=kind, value=value)),
                              action=action, origin=ingress.ref)
                order = (-len(value), 0 if kind is PathKind.EXACT else 1, value)
                self._claim(ingress, host, (kind, value), _Entry(order, route, owner), where)
        if ingress.spec.default_backend is not None:
            action = self._action(ingress, ingress.spec.default_backend,
                                  "spec.defaultBackend")
            route = Route(name=f"{base}/default-backend", match=RouteMatch(), action=action,
                          origin=ingress.ref)
            # Lowest precedence in every host of this Ingress, and for hosts nobody names.
            for host in dict.fromkeys([*rule_hosts, "*"]):
                self._claim(ingress, host, ("default",), _Entry((1, 2, ""), route, owner),
                            "spec.defaultBackend")
        for k, tls in enumerate(ingress.spec.tls):
            self._add_tls(ingress, k, tls.secret_name, tls.hosts)

    def _claim(self, ingress: Ingress, host: str, key: tuple[object, ...], entry: _Entry,
               where: str) -> None:
        slots = self.hosts.setdefault(host, {})
        held = slots.get(key)
        if held is None:
            slots[key] = entry
            return
        what = "defaultBackend" if key == ("default",) else f"path {key[1]!r} ({key[0]})"
        if held.owner == entry.owner:
            self._problem(ingress, Reason.HOST_CONFLICT,
                          f"host {host!r} {what} is defined twice; the first one is used", where,
                          Severity.WARNING)
        else:
            self._problem(ingress, Reason.HOST_CONFLICT,
                          f"host {host!r} {what} is already served by older Ingress "
                          f"{held.owner}", where)

    def _action(self, ingress: Ingress, backend: IngressBackend, where: str) -> Action:
        ns = ingress.metadata.namespace
        if backend.service is None:
            res = backend.resource
            group = f"{res.api_group}/" if res and res.api_group else ""
            kind = f"{group}{res.kind if res else ''}"
            self._problem(ingress, Reason.UNSUPPORTED_BACKEND,
                          f"resource backends ({kind}) are not supported", f"{where}.resource")
            return DirectResponse(status=503)
        ref = backend.service
        service = self.snapshot.get(Service, ns, ref.name)
        if service is None:
            self._problem(ingress, Reason.BACKEND_NOT_FOUND, f"Service {ns}/{ref.name} not found",
                          f"{where}.service.name")
            return DirectResponse(status=503)
        if service.spec.type == "ExternalName":
            self._problem(ingress, Reason.UNSUPPORTED_BACKEND,
                          f"Service {ns}/{ref.name} is of type ExternalName",
                          f"{where}.service.name")
            return DirectResponse(status=503)
        port = find_port(service, number=ref.port.number, name=ref.port.name)
        if port is None:
            wanted = (f"port {ref.port.number}" if ref.port.number is not None
                      else f"port named {ref.port.name!r}")
            self._problem(ingress, Reason.BACKEND_NOT_FOUND,
                          f"Service {ns}/{ref.name} has no {wanted}", f"{where}.service.port")
            return DirectResponse(status=503)
        if port.protocol != "TCP":
            self._problem(ingress, Reason.UNSUPPORTED_PROTOCOL,
                          f"Service {ns}/{ref.name} port {port.port} is {port.protocol}, not TCP",
                          f"{where}.service.port")
            return DirectResponse(status=503)
        unusable = mode_problem(service, port, self.opts)
        if unusable is not None:
            self._problem(ingress, Reason.BACKEND_NOT_FOUND, unusable, f"{where}.service.port")
            return DirectResponse(status=503)
        spec = http_pool(service, port)
        self.pools.setdefault(spec.name, spec)
        return Forward(backends=(WeightedPool(pool=spec.name),))

    def _add_tls(self, ingress: Ingress, k: int, secret_name: str | None,
                 hosts: tuple[str, ...]) -> None:
        where = f"spec.tls[{k}]"
        if not secret_name:
            self._problem(ingress, Reason.SECRET_NOT_FOUND,
                          "no secretName; these hosts are left out of the HTTPS listener",
                          f"{where}.secretName", Severity.WARNING)
            return
        valid = tuple(h for h in dict.fromkeys(hosts) if valid_hostname(h))
        for h in hosts:
            if h not in valid:
                self._problem(ingress, Reason.INVALID_HOST, f"TLS host {h!r} is not a DNS name",
                              f"{where}.hosts")
        cert = certificate_from_secret(self.snapshot, ingress.metadata.namespace, secret_name,
                                       valid)
        if isinstance(cert, str):
            reason = Reason.SECRET_NOT_FOUND if "not found" in cert else Reason.INVALID_SECRET
            self._problem(ingress, reason,
                          f"{cert}; hosts {', '.join(valid) or '(all)'} are left out of the "
                          "HTTPS listener", f"{where}.secretName")
            return
        if not valid:
            if self.default_certificate is None:
                self.default_certificate = cert
            elif self.default_certificate.name != cert.name:
                self._problem(ingress, Reason.CERTIFICATE_CONFLICT,
                              "the default certificate is already "
                              f"{self.default_certificate.name}",
                              f"{where}.secretName", Severity.WARNING)
            return
        for host in valid:
            held = self.certificates.get(host)
            if held is None:
                self.certificates[host] = cert
            elif held.name != cert.name:
                self._problem(ingress, Reason.CERTIFICATE_CONFLICT,
                              f"host {host!r} already uses {held.name}", f"{where}.hosts",
                              Severity.WARNING)

    def _problem(self, ingress: Ingress, reason: Reason, message: str, where: str,
                 severity: Severity = Severity.ERROR) -> None:
        self.problems.append(Problem(ref=ingress.ref, reason=reason, message=message,
                                     field=where, severity=severity))

    def listeners(self) -> list[Listener]:
        """The HTTP listener (every host) and, when any certificate is usable, HTTPS."""
        if not self.hosts:
            return []
        vhosts: list[VirtualHost] = []
        for host in sorted(self.hosts, key=host_order):
            entries = sorted(self.hosts[host].values(), key=lambda e: e.order)
            vhosts.append(VirtualHost(name=host, hostname=host, wildcard=WildcardMode.ONE_LABEL,
                                      routes=tuple(e.route for e in entries)))
        origins = tuple(sorted({r.origin for v in vhosts for r in v.routes}))
        out = [Listener(name="ingress/http", address=self.opts.address, port=self.opts.http_port,
                        protocol=Protocol.HTTP, virtual_hosts=tuple(vhosts), origins=origins)]
        certs = self._certificates()
        if certs:
            secure = tuple(v for v in vhosts if self._has_certificate(v.hostname))
            if secure:
                out.append(Listener(
                    name="ingress/https", address=self.opts.address, port=self.opts.https_port,
                    protocol=Protocol.HTTPS, virtual_hosts=secure, certificates=certs,
                    origins=tuple(sorted({r.origin for v in secure for r in v.routes}))))
        return out

    def _has_certificate(self, host: str) -> bool:
        if self.default_certificate is not None:
            return True
        return any(covers(pattern, host) for pattern in self.certificates) if host != "*" else False

    def _certificates(self) -> tuple[TLSCertificate, ...]:
        """One entry per certificate, with every SNI name it serves, sorted by name."""
        names: dict[str, list[str]] = {}
        by_name: dict[str, TLSCertificate] = {}
        for host, cert in self.certificates.items():
            names.setdefault(cert.name, []).append(host)
            by_name[cert.name] = cert
        out = [TLSCertificate(name=c.name, hostnames=tuple(sorted(names[n], key=host_order)),
                              cert_pem=c.cert_pem, key_pem=c.key_pem, origin=c.origin)
               for n, c in sorted(by_name.items())]
        if self.default_certificate is not None:
            d = self.default_certificate
            out.append(TLSCertificate(name=f"{d.name}/default", hostnames=(), cert_pem=d.cert_pem,
                                      key_pem=d.key_pem, origin=d.origin))
        return tuple(out)
