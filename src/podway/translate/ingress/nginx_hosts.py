"""ingress-nginx's host-level settings in the Ingress merge (``IngressTranslation`` mixes
this in): HSTS on the HTTPS answers of taken-over TLS hosts (``TranslateOptions.nginx``),
``server-alias`` and ``from-to-www-redirect``. Pure: no I/O."""

from __future__ import annotations

from dataclasses import replace

from podway.ir import (
    DirectResponse,
    HeaderModifier,
    Redirect,
    Route,
    RouteMatch,
    TLSCertificate,
    VirtualHost,
    WildcardMode,
)
from podway.ir.hosts import covers
from podway.model import Ingress, IngressClass
from podway.model.snapshot import Key, Snapshot
from podway.translate.core.nginx_config import HSTS_HEADER
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Reason, Severity, quote
from podway.translate.ingress.nginx.annotations import PREFIX as NGINX_PREFIX
from podway.translate.ingress.part import LEGACY_CLASS_ANNOTATION, Claim, IngressPart, SlotKey
from podway.translate.ingress.tls import REDIRECT_STATUS

NGINX_ALIAS = NGINX_PREFIX + "server-alias"


_EVERY_PATH = RouteMatch()  # a prefix match on "/"


def taken_over(ingress: Ingress, snapshot: Snapshot, opts: TranslateOptions) -> bool:
    """Whether an Ingress is of a class taken over from ingress-nginx (``--ingress-class``):
    it then gets ingress-nginx's controller-wide settings (``TranslateOptions.nginx``)."""
    if not opts.takeover_classes:
        return False
    name = ingress.spec.ingress_class_name or ingress.metadata.annotations.get(
        LEGACY_CLASS_ANNOTATION)
    if name is None:
        return any(c.is_default and c.metadata.name in opts.takeover_classes
                   for c in snapshot.kind(IngressClass).values())
    return name in opts.takeover_classes


class NginxHosts:
    """The methods; ``IngressTranslation`` holds the state they use."""

    __slots__ = ()
    snapshot: Snapshot
    opts: TranslateOptions
    parts: dict[Key, IngressPart]
    hosts: dict[str, dict[SlotKey, tuple[Claim, str]]]
    certificates: dict[str, TLSCertificate]
    _alias_of: dict[str, str]
    _www: set[str]

    def _problem(self, part: IngressPart, reason: Reason, message: str, where: str,
                 severity: Severity = Severity.ERROR) -> None:
        raise NotImplementedError

    def _hsts(self, secure: tuple[VirtualHost, ...]) -> tuple[VirtualHost, ...]:
        """ingress-nginx's HSTS (``TranslateOptions.nginx``): on every HTTPS answer of a host
        with a certificate of its own, for the routes of Ingresses of a taken-over class."""
        value = self.opts.nginx.hsts_value
        if value is None or not self.opts.takeover_classes:
            return secure
        header = HeaderModifier(response=True, set=((HSTS_HEADER, value),))
        nginx = {p.source.ref for p in self.parts.values()
                 if taken_over(p.source, self.snapshot, self.opts)}
        out: list[VirtualHost] = []
        for vhost in secure:
            own = vhost.hostname not in ("*", *self._www) and any(
                covers(pattern, vhost.hostname) for pattern in self.certificates)
            if not own or not any(r.origin in nginx for r in vhost.routes):
                out.append(vhost)
                continue
            routes = [replace(r, filters=(*r.filters, header)) if r.origin in nginx else r
                      for r in vhost.routes]
            if not any(r.match == _EVERY_PATH for r in routes):
                # a path nobody serves: ingress-nginx's 404 carries the header too
                first = next(r for r in routes if r.origin in nginx)
                routes.append(Route(name=f"ingress/hsts/{vhost.hostname}/not-found",
                                    match=_EVERY_PATH, action=DirectResponse(status=404),
                                    filters=(header,), origin=first.origin))
            out.append(replace(vhost, routes=tuple(routes)))
        return tuple(out)

    def _extra_hosts(self) -> dict[str, VirtualHost]:
        """nginx ``server-alias`` and ``from-to-www-redirect``, oldest Ingress first, never over
        a host an Ingress names (that host wins, as in ingress-nginx). An alias serves its
        host's routes (``self.hosts`` shares the slots) and certificate; the other name of a
        ``from-to-www-redirect`` host answers 308 to it, keeping scheme and request URI, on
        HTTP and — with the host's certificate — HTTPS. Returns the redirecting hosts."""
        named = set(self.hosts)
        www: dict[str, VirtualHost] = {}
        for part in self.parts.values():
            hosts = [h for h in part.rule_hosts if h != "*"]
            for alias in part.aliases:
                target = next((h for h in hosts if h in named), None)
                if alias in named or alias in self._alias_of or target is None:
                    if alias in named:
                        self._problem(part, Reason.HOST_CONFLICT, f"server-alias "
                                      f"{quote(alias)} is a host of an Ingress; that host "
                                      "is served, not the alias (as in ingress-nginx)",
                                      f"metadata.annotations[{NGINX_ALIAS}]", Severity.WARNING)
                    continue
                self._alias_of[alias] = target
                self.hosts[alias] = self.hosts[target]
                self._share_certificate(target, alias)
            if not part.www_redirect:
                continue
            for host in hosts:
                if host.startswith("*."):
                    continue
                other = host[4:] if host.startswith("www.") else f"www.{host}"
                if other in named or other in self._alias_of or other in www:
                    continue
                route = Route(name="ingress/{}/{}/www-redirect/{}".format(*part.source.key,
                                                                         other),
                              match=RouteMatch(), origin=part.source.ref,
                              action=Redirect(hostname=host, status_code=REDIRECT_STATUS))
                www[other] = VirtualHost(name=other, hostname=other,
                                         wildcard=WildcardMode.ONE_LABEL, routes=(route,))
                self._share_certificate(host, other)
        self._www.clear()
        self._www.update(www)
        return www

    def _share_certificate(self, host: str, other: str) -> None:
        """``other`` answers HTTPS with ``host``'s certificate (when it has one and ``other``
        none of its own)."""
        if any(covers(pattern, other) for pattern in self.certificates):
            return
        cert = self.certificates.get(host) or next(
            (c for pattern, c in self.certificates.items() if covers(pattern, host)), None)
        if cert is not None:
            self.certificates[other] = cert

