"""``to_gateway``'s output (``_Converter`` mixes this in): the HTTPRoutes of each host (HTTPS,
plain HTTP, the 308 to HTTPS, ingress-nginx's HSTS) and the Gateway. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podway.model import Ingress
from podway.model.base import K8sObject
from podway.tools.migrate.convert_model import ConvertOptions, HostRoutes, ref_of
from podway.tools.migrate.gateway_api import (
    GATEWAY_API,
    PODWAY_CONTROLLER,
    REFERENCE_GRANT_API,
    covers,
    nginx_regex,
    redirect_filter,
    wildcard_of,
    with_hsts,
)
from podway.translate.ingress.nginx.annotations import PREFIX


class RouteOutput:
    """The methods; ``_Converter`` holds the state."""

    __slots__ = ()
    objects: Sequence[K8sObject]
    opts: ConvertOptions
    namespace: str
    listeners: dict[str, dict[str, Any]]
    hosts: list[HostRoutes]
    grants: dict[str, set[str]]
    passthrough: list[dict[str, Any]]

    def note(self, ingress: Ingress, key: str, message: str) -> None:
        raise NotImplementedError

    # --- output -------------------------------------------------------------------------------
    def routes(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        per_ingress: dict[str, int] = {}
        for host in self.hosts:
            per_ingress[ref_of(host.ingress)] = per_ingress.get(ref_of(host.ingress), 0) + 1
        seen: dict[str, int] = {}
        for host in self.hosts:
            key = ref_of(host.ingress)
            seen[key] = seen.get(key, 0) + 1
            name = host.ingress.metadata.name
            if host.catch_all:
                name = f"{name}-default-backend"
            elif per_ingress[key] > 1:
                name = f"{name}-{seen[key]}"
            out.extend(self.route_objects(host, name))
        return out

    def route_objects(self, host: HostRoutes, name: str) -> list[dict[str, Any]]:
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
            out.append(self.http_route(meta, host, parents[:1], with_hsts(host.rules, hsts)))
            if len(parents) > 1:
                out.append(self.http_route({**meta, "name": f"{name}-http"}, host, parents[1:],
                                           host.rules))
            if not any(m.get("path") in ({"type": "PathPrefix", "value": "/"},
                                         {"type": "RegularExpression",
                                          "value": nginx_regex("/")})
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

    def http_route(self, meta: dict[str, Any], host: HostRoutes, parents: list[dict[str, Any]],
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
