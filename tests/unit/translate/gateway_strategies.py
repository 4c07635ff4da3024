"""Hypothesis strategies for Gateway API manifests: plausible objects, sometimes junk fields."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import strategies as st

from .strategies import hosts, junk, names, namespaces, other, paths, service


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nearly always the plausible value (Gateway objects have many fields; each may be junk)."""
    return st.integers(0, 19).flatmap(lambda i: junk if i == 7 else strategy)


def meta() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"name": names}, optional={
        "namespace": maybe(namespaces), "generation": st.integers(0, 3),
        "creationTimestamp": st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"])})

GROUP = "gateway.networking.k8s.io"
gw_hosts = st.one_of(hosts.filter(lambda h: h is not None),
                     st.sampled_from(["*.a.example.com", "*", "a.example.com"]))
weights = st.one_of(st.integers(0, 3), st.integers(-1, 2_000_000))


def _obj(kind: str, spec: st.SearchStrategy[Any], version: str = "v1") -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"apiVersion": st.just(f"{GROUP}/{version}"),
                                  "kind": st.just(kind), "metadata": meta(), "spec": maybe(spec)})


def backend_ref() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"name": maybe(names)}, optional={
        "port": maybe(st.sampled_from([80, 443, 53, 8080])), "weight": maybe(weights),
        "namespace": maybe(namespaces), "kind": maybe(st.sampled_from(["Service", "Bucket"])),
        "group": maybe(st.sampled_from(["", "example.com"]))})


GATEWAY_NAMES = st.sampled_from(["gw", "gw", "gw2"])


def parent_ref() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"name": GATEWAY_NAMES, "namespace": maybe(st.sampled_from(
        ["default", "default", "shop"]))}, optional={"sectionName": maybe(names),
        "port": maybe(st.sampled_from([80, 443, 8080])),
        "kind": maybe(st.sampled_from(["Gateway", "Gateway", "ListenerSet"]))})


def route_filter() -> st.SearchStrategy[Any]:
    header = st.fixed_dictionaries({"name": maybe(names), "value": maybe(names)})
    modifier = st.fixed_dictionaries({}, optional={"set": maybe(st.lists(header, max_size=2)),
                                                   "remove": maybe(st.lists(names, max_size=2))})
    path = st.fixed_dictionaries({"type": maybe(st.sampled_from(
        ["ReplaceFullPath", "ReplacePrefixMatch"]))}, optional={
        "replaceFullPath": maybe(paths), "replacePrefixMatch": maybe(paths)})
    return st.one_of(
        st.fixed_dictionaries({"type": st.just("RequestHeaderModifier"),
                               "requestHeaderModifier": maybe(modifier)}),
        st.fixed_dictionaries({"type": st.just("RequestRedirect"), "requestRedirect": maybe(
            st.fixed_dictionaries({}, optional={
                "scheme": maybe(st.sampled_from(["http", "https", "ftp"])),
                "statusCode": maybe(st.sampled_from([301, 302, 303, 305, 307, 308])),
                "hostname": maybe(gw_hosts), "path": maybe(path)}))}),
        st.fixed_dictionaries({"type": st.just("URLRewrite"), "urlRewrite": maybe(
            st.fixed_dictionaries({}, optional={"hostname": maybe(gw_hosts),
                                                "path": maybe(path)}))}),
        st.fixed_dictionaries({"type": st.just("RequestMirror"), "requestMirror": maybe(
            st.fixed_dictionaries({"backendRef": backend_ref()}, optional={
                "percent": maybe(st.integers(0, 100)),
                "fraction": maybe(st.fixed_dictionaries({
                    "numerator": st.integers(0, 5), "denominator": st.integers(1, 3)}))}))}),
        st.fixed_dictionaries({"type": st.just("CORS"), "cors": maybe(
            st.fixed_dictionaries({}, optional={
                "allowOrigins": maybe(st.lists(st.sampled_from(
                    ["*", "https://a.test", "https://*.b.test", "a.test/x", ""]), max_size=2)),
                "allowCredentials": maybe(st.booleans()),
                "allowMethods": maybe(st.lists(st.sampled_from(["GET", "P UT"]), max_size=2)),
                "maxAge": maybe(st.integers(-1, 100))}))}),
        st.fixed_dictionaries({"type": maybe(st.sampled_from(["ExtensionRef", "CORS"]))}))


def http_backend_ref() -> st.SearchStrategy[Any]:
    """A backendRef of an HTTP rule, sometimes with filters of its own."""
    return st.one_of(backend_ref(), backend_ref().flatmap(lambda ref: st.fixed_dictionaries(
        {"filters": st.lists(route_filter(), max_size=2)}).map(lambda f: {**ref, **f})))


def http_route(kind: str = "HTTPRoute") -> st.SearchStrategy[Any]:
    string_match = st.fixed_dictionaries({"name": maybe(names), "value": maybe(
        st.sampled_from(["a", "(", ".*"]))}, optional={"type": maybe(st.sampled_from(
            ["Exact", "RegularExpression"]))})
    if kind == "HTTPRoute":
        match = st.fixed_dictionaries({}, optional={
            "path": maybe(st.fixed_dictionaries({"value": maybe(paths)}, optional={
                "type": maybe(st.sampled_from(["Exact", "PathPrefix", "RegularExpression"]))})),
            "headers": maybe(st.lists(string_match, max_size=2)),
            "queryParams": maybe(st.lists(string_match, max_size=2)),
            "method": maybe(st.sampled_from(["GET", "POST", "FETCH"]))})
    else:
        match = st.fixed_dictionaries({}, optional={
            "method": maybe(st.fixed_dictionaries({}, optional={
                "type": maybe(st.sampled_from(["Exact", "RegularExpression"])),
                "service": maybe(st.sampled_from(["echo.Echo", "bad name", "("])),
                "method": maybe(st.sampled_from(["Say", ""]))})),
            "headers": maybe(st.lists(string_match, max_size=2))})
    rule = st.fixed_dictionaries({}, optional={
        "matches": maybe(st.lists(match, max_size=2)),
        "filters": maybe(st.lists(route_filter(), max_size=2)),
        "backendRefs": maybe(st.lists(http_backend_ref(), max_size=2)),
        "timeouts": maybe(st.fixed_dictionaries({}, optional={
            "request": maybe(st.sampled_from(["1s", "0s", "10x"])),
            "backendRequest": maybe(st.sampled_from(["2s", "500ms"]))}))})
    spec = st.fixed_dictionaries({"parentRefs": maybe(st.lists(parent_ref(), min_size=1,
                                                               max_size=2))},
                                 optional={"hostnames": maybe(st.lists(gw_hosts, max_size=2)),
                                           "rules": maybe(st.lists(rule, max_size=3))})
    return _obj(kind, spec)


def l4_route() -> st.SearchStrategy[Any]:
    rule = st.fixed_dictionaries({"backendRefs": maybe(st.lists(backend_ref(), max_size=2))})
    spec = st.fixed_dictionaries({"parentRefs": maybe(st.lists(parent_ref(), max_size=2))},
                                 optional={"hostnames": maybe(st.lists(gw_hosts, max_size=2)),
                                           "rules": maybe(st.lists(rule, max_size=2))})
    return st.one_of(*(_obj(kind, spec, "v1alpha2") for kind in
                       ("TLSRoute", "TCPRoute", "UDPRoute")))


def _listener() -> st.SearchStrategy[Any]:
    tls = st.fixed_dictionaries({}, optional={
        "mode": maybe(st.sampled_from(["Terminate", "Passthrough"])),
        "options": maybe(st.dictionaries(st.sampled_from(
            ["podway.io/tls-min-version", "podway.io/tls-max-version", "podway.io/tls-ciphers",
             "other/key"]), st.sampled_from(["1.3", "1.1", "TLSv1.2", "9", "AES128-SHA", ""]),
            max_size=2)),
        "certificateRefs": maybe(st.lists(st.fixed_dictionaries(
            {"name": maybe(names)}, optional={"namespace": maybe(namespaces)}), max_size=2))})
    return st.fixed_dictionaries({
        "name": names, "port": st.sampled_from([80, 443, 8080]),
        "protocol": st.sampled_from(["HTTP", "HTTP", "HTTPS", "TLS", "TCP", "UDP", "SCTP"])},
        optional={"hostname": maybe(gw_hosts), "tls": maybe(tls), "allowedRoutes": maybe(
            st.fixed_dictionaries({}, optional={
                "namespaces": maybe(st.fixed_dictionaries({"from": maybe(st.sampled_from(
                    ["All", "All", "Same", "Selector", "None"]))}, optional={
                    "selector": maybe(st.fixed_dictionaries({"matchLabels": maybe(
                        st.fixed_dictionaries({"team": names}))}))})),
                "kinds": maybe(st.lists(st.fixed_dictionaries({"kind": maybe(st.sampled_from(
                    ["HTTPRoute", "TLSRoute", "Foo"]))}), max_size=2))}))})


ALLOWED_LISTENERS = st.fixed_dictionaries({"namespaces": maybe(st.fixed_dictionaries(
    {"from": maybe(st.sampled_from(["All", "Same", "Selector", "None"]))},
    optional={"selector": maybe(st.fixed_dictionaries({"matchLabels": maybe(
        st.fixed_dictionaries({"team": names}))}))}))})


def listener_set() -> st.SearchStrategy[Any]:
    """ListenerSets of the Gateways the other strategies make (or of none)."""
    spec = st.fixed_dictionaries({
        "parentRef": st.fixed_dictionaries({"name": GATEWAY_NAMES}, optional={
            "namespace": maybe(st.sampled_from(["default", "shop"]))}),
        "listeners": st.lists(_listener(), min_size=1, max_size=2)})
    set_meta = st.fixed_dictionaries({"name": GATEWAY_NAMES}, optional={
        "namespace": st.sampled_from(["default", "shop"]),
        "creationTimestamp": st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"])})
    return st.fixed_dictionaries({"apiVersion": st.just(f"{GROUP}/v1"),
                                  "kind": st.just("ListenerSet"), "metadata": set_meta,
                                  "spec": spec})


def gateway() -> st.SearchStrategy[Any]:
    listener = _listener()
    spec = st.fixed_dictionaries({
        "gatewayClassName": st.one_of(st.just("podway"), st.just("podway"), maybe(names)),
        "listeners": st.lists(listener, min_size=1, max_size=3)},
        optional={"allowedListeners": maybe(ALLOWED_LISTENERS),
                  "addresses": maybe(st.lists(st.fixed_dictionaries({"value": maybe(
            st.sampled_from(["198.18.0.1", "nope"]))}, optional={"type": maybe(
                st.sampled_from(["IPAddress", "Hostname"]))}), max_size=2))})
    gateway_meta = st.fixed_dictionaries({"name": GATEWAY_NAMES}, optional={
        "namespace": st.sampled_from(["default", "default", "shop"]),
        "creationTimestamp": st.sampled_from(["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"])})
    return st.fixed_dictionaries({"apiVersion": st.just(f"{GROUP}/v1"), "kind": st.just("Gateway"),
                                  "metadata": gateway_meta, "spec": spec})


def policy_and_grant() -> st.SearchStrategy[Any]:
    grant = _obj("ReferenceGrant", st.fixed_dictionaries({
        "from": maybe(st.lists(st.fixed_dictionaries({
            "group": st.just(GROUP), "kind": maybe(st.sampled_from(["HTTPRoute", "Gateway"])),
            "namespace": maybe(namespaces)}), max_size=2)),
        "to": maybe(st.lists(st.fixed_dictionaries({
            "group": st.just(""), "kind": maybe(st.sampled_from(["Service", "Secret"]))},
            optional={"name": maybe(names)}), max_size=2))}), "v1beta1")
    policy = _obj("BackendTLSPolicy", st.fixed_dictionaries({
        "targetRefs": maybe(st.lists(st.fixed_dictionaries({
            "group": st.just(""), "kind": st.just("Service"), "name": maybe(names)}),
            max_size=2)),
        "validation": maybe(st.fixed_dictionaries({"hostname": maybe(gw_hosts)}, optional={
            "wellKnownCACertificates": maybe(st.just("System")),
            "caCertificateRefs": maybe(st.lists(st.fixed_dictionaries({
                "group": st.just(""), "kind": st.just("ConfigMap"), "name": maybe(names)}),
                max_size=1))}))}))
    gateway_class = st.fixed_dictionaries({
        "apiVersion": st.just(f"{GROUP}/v1"), "kind": st.just("GatewayClass"),
        "metadata": meta(), "spec": maybe(st.fixed_dictionaries({"controllerName": maybe(
            st.sampled_from(["podway.io/gateway-controller", "other"]))}))})
    return st.one_of(grant, policy, gateway_class, gateway_class, junk)


OUR_CLASS = {"apiVersion": f"{GROUP}/v1", "kind": "GatewayClass", "metadata": {"name": "podway"},
             "spec": {"controllerName": "podway.io/gateway-controller"}}
OUR_CLASS_YAML = yaml.safe_dump(OUR_CLASS, sort_keys=False)  # for tests written as manifests



def route_to(name: str, service: str, host: str | None = None) -> dict[str, Any]:
    """HTTPRoute ``name`` on Gateway ``gw`` for ``host`` (default ``<name>.example.com``),
    every request to Service ``service`` port 80."""
    return {"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host or f"{name}.example.com"],
                     "rules": [{"backendRefs": [{"name": service, "port": 80}]}]}}


def one_listener_world(count: int) -> list[dict[str, Any]]:
    """Our class, Gateway ``gw`` with one HTTP listener on port 80, and ``count`` Services
    ``s<i>`` (port 80), each with its route ``r<i>`` (``route_to``)."""
    docs: list[dict[str, Any]] = [OUR_CLASS, {
        "apiVersion": f"{GROUP}/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {"gatewayClassName": "podway",
                 "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}]
    for i in range(count):
        docs += [{"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": f"s{i}", "namespace": "default"},
                  "spec": {"ports": [{"port": 80}]}}, route_to(f"r{i}", f"s{i}")]
    return docs


gateway_manifests = st.tuples(gateway(), st.lists(st.one_of(
    gateway(), http_route(), http_route("GRPCRoute"), l4_route(), policy_and_grant(), service(),
    listener_set(), other()), min_size=1, max_size=12)).map(lambda t: [OUR_CLASS, t[0], *t[1]])
