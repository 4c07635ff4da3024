"""ingress-nginx's host names in ``to_gateway`` (``_Converter`` mixes this in): ``server-alias``
and ``from-to-www-redirect`` become routes and listeners; a regex host's ranking that Gateway API
cannot keep is a note. Pure."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from podway.model import Ingress
from podway.model.base import K8sObject
from podway.tools.migrate.convert_model import ConvertOptions, HostRoutes
from podway.tools.migrate.gateway_api import GATEWAY_API, listener_name, nginx_regex, wildcard_of
from podway.translate.ingress.nginx.annotations import PREFIX, NginxAnnotations


class HostNames:
    """The methods; ``_Converter`` holds the state."""

    __slots__ = ()
    objects: Sequence[K8sObject]
    opts: ConvertOptions
    namespace: str
    listeners: dict[str, dict[str, Any]]
    hosts: list[HostRoutes]
    www_routes: list[dict[str, Any]]

    def note(self, ingress: Ingress, key: str, message: str) -> None:
        raise NotImplementedError

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
            self.hosts.append(HostRoutes(ingress=each.ingress, notes=each.notes, host=alias,
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

    def check_regex_order(self, hosts: list[HostRoutes]) -> None:
        """nginx tries a regex host's paths longest first; Gateway API ranks every
        RegularExpression before every PathPrefix. A shorter regex ahead of a longer prefix
        (a rewrite idiom kept as PathPrefix) may take its requests: say so."""
        kinds = [m["path"] for host in hosts for rule in host.rules
                 for m in rule.get("matches", ()) if "path" in m and "headers" not in m]
        prefixes = [p["value"] for p in kinds if p["type"] == "PathPrefix" and p["value"] != "/"]
        regexes = [p["value"] for p in kinds if p["type"] == "RegularExpression"]
        if hosts and any(len(r) - len(nginx_regex("")) < len(p)
                         for r in regexes for p in prefixes):
            self.note(hosts[0].ingress, PREFIX + "use-regex", f"host {hosts[0].host or '*'}: "
                      f"RegularExpression paths ({', '.join(regexes)}) rank before PathPrefix "
                      f"({', '.join(prefixes)}) in Gateway API, while nginx tried the longest "
                      "path first: a request both match may reach another backend")
