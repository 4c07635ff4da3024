"""Hypothesis strategies for manifests: plausible objects whose fields are sometimes junk."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.certs import EXPIRED_CERT, EXPIRED_KEY, GOOD_CERT, GOOD_KEY, OTHER_KEY

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.text(max_size=8))
junk = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)

names = st.sampled_from(["web", "api", "ghost", "a", "podway", "edge"])
namespaces = st.sampled_from(["default", "shop", "other"])
hosts = st.one_of(st.none(), st.sampled_from(
    ["a.example.com", "*.example.com", "b.a.example.com", "BAD_host", "198.18.0.1", ""]))
paths = st.sampled_from(["/", "/a", "/a/", "/a/b", "a", "", "/a//b"])
ports = st.one_of(st.integers(1, 65535), st.integers(-1, 70000), names)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the plausible value, sometimes junk, sometimes absent."""
    return st.one_of(strategy, strategy, strategy, junk)


def meta() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"name": maybe(names), "namespace": maybe(namespaces)},
        optional={"creationTimestamp": maybe(st.sampled_from(
            ["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"])),
            "labels": maybe(st.fixed_dictionaries({"kubernetes.io/service-name": names})),
            "annotations": maybe(st.fixed_dictionaries(
                {"ingressclass.kubernetes.io/is-default-class": st.sampled_from(["true", "no"])},
                optional={"nginx.ingress.kubernetes.io/rewrite-target": st.just("/"),
                          "kubernetes.io/ingress.class": names,
                          "podway.io/ssl-redirect": st.sampled_from(["true", "false", "x"]),
                          "podway.io/tls-passthrough": st.sampled_from(["true", "false", "1"]),
                          "podway.io/backend-protocol": st.sampled_from(
                              ["HTTPS", "grpc", "H2C", "SPDY"]),
                          "podway.io/backend-ca-secret": st.sampled_from(["ca", "a/b", ""]),
                          "podway.io/backend-sni": st.sampled_from(["x.test", "*.x", ""]),
                          "nodeportlocal.antrea.io": st.sampled_from([
                              '[{"podPort":8080,"nodeIP":"198.18.20.1","nodePort":61000,'
                              '"protocol":"tcp"}]', '[{"podPort":8080,"nodeIP":"1.2.3.999",'
                              '"nodePort":61000,"protocol":"tcp"}]', "[{"])}))})


def backend() -> st.SearchStrategy[Any]:
    port = st.one_of(st.fixed_dictionaries({"number": ports}),
                     st.fixed_dictionaries({"name": names}))
    return maybe(st.fixed_dictionaries({"service": maybe(st.fixed_dictionaries(
        {"name": maybe(names), "port": maybe(port)}))}))


def ingress() -> st.SearchStrategy[dict[str, Any]]:
    path = st.fixed_dictionaries({"path": maybe(paths), "pathType": maybe(st.sampled_from(
        ["Exact", "Prefix", "ImplementationSpecific"])), "backend": backend()})
    rule = st.fixed_dictionaries({"host": maybe(hosts), "http": maybe(
        st.fixed_dictionaries({"paths": st.lists(path, max_size=3)}))})
    tls = st.fixed_dictionaries({"hosts": maybe(st.lists(hosts, max_size=2)),
                                 "secretName": maybe(names)})
    spec = st.fixed_dictionaries({}, optional={
        "ingressClassName": maybe(names), "rules": maybe(st.lists(rule, max_size=3)),
        "defaultBackend": backend(), "tls": maybe(st.lists(tls, max_size=2))})
    return st.fixed_dictionaries({"apiVersion": st.just("networking.k8s.io/v1"),
                                  "kind": st.just("Ingress"), "metadata": meta(),
                                  "spec": maybe(spec)})


def service() -> st.SearchStrategy[dict[str, Any]]:
    port = st.fixed_dictionaries({"port": ports}, optional={
        "name": maybe(names), "protocol": maybe(st.sampled_from(["TCP", "UDP", "SCTP"])),
        "targetPort": maybe(ports), "appProtocol": maybe(st.sampled_from(["grpc", "h2c"]))})
    spec = st.fixed_dictionaries({}, optional={
        "type": maybe(st.sampled_from(["ClusterIP", "LoadBalancer", "ExternalName"])),
        "ports": maybe(st.lists(port, max_size=3)),
        "loadBalancerIP": maybe(st.sampled_from(["198.18.0.1", "198.18.0.2", "0.0.0.0",
                                                 "999.1.1.1"])),
        "sessionAffinity": maybe(st.sampled_from(["None", "ClientIP"])),
        "loadBalancerClass": maybe(st.sampled_from(["podway.io/lb", "x"]))})
    return st.fixed_dictionaries({"apiVersion": st.just("v1"), "kind": st.just("Service"),
                                  "metadata": meta(), "spec": maybe(spec)})


def endpoint_slice() -> st.SearchStrategy[dict[str, Any]]:
    endpoint = st.fixed_dictionaries({"addresses": maybe(st.lists(
        st.sampled_from(["198.18.1.1", "198.18.1.2", "2001:db8::1", "999.1.1.1", "x"]),
        max_size=2))}, optional={
        "conditions": maybe(st.fixed_dictionaries({}, optional={
            "ready": st.booleans(), "terminating": st.booleans()}))})
    port = st.fixed_dictionaries({"port": maybe(st.integers(1, 65535))}, optional={
        "name": maybe(names), "protocol": maybe(st.sampled_from(["TCP", "UDP"]))})
    return st.fixed_dictionaries({
        "apiVersion": st.just("discovery.k8s.io/v1"), "kind": st.just("EndpointSlice"),
        "metadata": meta(), "addressType": maybe(st.sampled_from(["IPv4", "IPv6", "FQDN"])),
        "endpoints": maybe(st.lists(endpoint, max_size=3)),
        "ports": maybe(st.lists(port, max_size=2))})


def other() -> st.SearchStrategy[dict[str, Any]]:
    ingress_class = st.fixed_dictionaries({
        "apiVersion": st.just("networking.k8s.io/v1"), "kind": st.just("IngressClass"),
        "metadata": meta(), "spec": maybe(st.fixed_dictionaries({"controller": maybe(
            st.sampled_from(["podway.io/ingress-controller", "other"]))}))})
    secret = st.fixed_dictionaries({
        "apiVersion": st.just("v1"), "kind": st.just("Secret"), "metadata": meta(),
        "type": maybe(st.sampled_from(["kubernetes.io/tls", "Opaque"])),
        "stringData": maybe(st.fixed_dictionaries({
            "tls.crt": st.sampled_from(["-----BEGIN CERTIFICATE-----\nx\n", "junk", GOOD_CERT,
                                        EXPIRED_CERT]),
            "tls.key": st.sampled_from(["-----BEGIN PRIVATE KEY-----\nx\n", "", GOOD_KEY,
                                        OTHER_KEY, EXPIRED_KEY])}))})
    return st.one_of(ingress_class, secret, junk)


manifests = st.lists(st.one_of(ingress(), service(), endpoint_slice(), other()), max_size=8)
