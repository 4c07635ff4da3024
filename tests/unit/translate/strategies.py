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
durations = st.sampled_from(["1s", "250ms", "1h2m", "0s", "soon", "9999999h", ""])
lb_names = st.sampled_from(["RoundRobin", "least-request", "Random", "RingHash", "maglev", "x"])
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
                optional={"nginx.ingress.kubernetes.io/rewrite-target": st.sampled_from(
                              ["/", "/$1", "/$0", "", "/a b"]),
                          "nginx.ingress.kubernetes.io/use-regex": st.sampled_from(
                              ["true", "x"]),
                          "nginx.ingress.kubernetes.io/canary": st.sampled_from(["true", "1"]),
                          "nginx.ingress.kubernetes.io/canary-weight": st.sampled_from(
                              ["0", "50", "100", "101", "x"]),
                          "nginx.ingress.kubernetes.io/canary-by-header": st.sampled_from(
                              ["X-Canary", "a b"]),
                          "nginx.ingress.kubernetes.io/canary-by-header-pattern": st.sampled_from(
                              ["v[0-9]", "(?!x)", "("]),
                          "nginx.ingress.kubernetes.io/whitelist-source-range": st.sampled_from(
                              ["198.18.0.0/15", "x", " , ", "::1"]),
                          "nginx.ingress.kubernetes.io/limit-rps": st.sampled_from(
                              ["5", "0", "x"]),
                          "nginx.ingress.kubernetes.io/auth-tls-secret": st.sampled_from(
                              ["ns/ca", "ca", "A B", "/"]),
                          "nginx.ingress.kubernetes.io/permanent-redirect": st.sampled_from(
                              ["https://x.test/a?b", "/p", "ftp:x", ""]),
                          "nginx.ingress.kubernetes.io/app-root": st.sampled_from(
                              ["/app", "/", "x"]),
                          "nginx.ingress.kubernetes.io/proxy-body-size": st.sampled_from(
                              ["0", "8m", "9g", "x"]),
                          "nginx.ingress.kubernetes.io/enable-cors": st.sampled_from(
                              ["true", "false"]),
                          "nginx.ingress.kubernetes.io/force-ssl-redirect": st.sampled_from(
                              ["true", "no"]),
                          "nginx.ingress.kubernetes.io/server-snippet": st.just("x"),
                          "kubernetes.io/ingress.class": names,
                          "podway.io/ssl-redirect": st.sampled_from(["true", "false", "x"]),
                          "podway.io/tls-passthrough": st.sampled_from(["true", "false", "1"]),
                          "podway.io/backend-protocol": st.sampled_from(
                              ["HTTPS", "grpc", "H2C", "SPDY"]),
                          "podway.io/backend-ca-secret": st.sampled_from(["ca", "a/b", ""]),
                          "podway.io/backend-sni": st.sampled_from(["x.test", "*.x", ""]),
                          "podway.io/lb-algorithm": maybe(lb_names),
                          "podway.io/hash-on": st.sampled_from(
                              ["source-ip", "header:x-user", "cookie:", "cookie:a b", "x"]),
                          "podway.io/affinity": st.sampled_from(["cookie", "client-ip", "no"]),
                          "podway.io/affinity-ttl": durations,
                          "podway.io/health-check": st.sampled_from(["tcp", "http", "grpc",
                                                                     "none", "icmp"]),
                          "podway.io/health-check-path": st.sampled_from(["/healthz", "x", ""]),
                          "podway.io/health-check-statuses": st.sampled_from(
                              ["200", "200-399,404", "600", "x-y", ","]),
                          "podway.io/health-check-interval": durations,
                          "podway.io/unhealthy-threshold": st.sampled_from(["2", "0", "-1", "x"]),
                          "podway.io/outlier-detection": st.sampled_from(["off", "3", "x", ""]),
                          "podway.io/request-timeout": durations,
                          "podway.io/retries": st.sampled_from(["2", "99", "x"]),
                          "podway.io/retry-on": st.sampled_from(["5xx,reset", "always", ""]),
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
        "sessionAffinityConfig": maybe(st.fixed_dictionaries({"clientIP": maybe(
            st.fixed_dictionaries({"timeoutSeconds": maybe(st.integers(-1, 90000))}))})),
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


def traffic_policy() -> st.SearchStrategy[dict[str, Any]]:
    """TrafficPolicy and BackendLBPolicy with plausible, odd and junk values."""
    target = st.fixed_dictionaries({"name": maybe(names)}, optional={
        "group": st.sampled_from(["", "gateway.networking.k8s.io", "networking.k8s.io", "x"]),
        "kind": st.sampled_from(["Service", "HTTPRoute", "Ingress", "Gateway", "Pod"]),
        "sectionName": maybe(names)})
    persistence = st.fixed_dictionaries({}, optional={
        "type": maybe(st.sampled_from(["Cookie", "Header", "SourceIP", "x"])),
        "name": maybe(st.sampled_from(["s", "x-user", "a b", ""])), "ttl": maybe(durations)})
    spec = st.fixed_dictionaries({"targetRefs": maybe(st.lists(target, max_size=2))}, optional={
        "healthCheck": maybe(st.fixed_dictionaries({}, optional={
            "type": maybe(st.sampled_from(["TCP", "HTTP", "GRPC", "UDP"])),
            "path": maybe(st.sampled_from(["/healthz", "", "x"])),
            "interval": maybe(durations), "timeout": maybe(durations),
            "unhealthyThreshold": maybe(st.integers(-1, 200)),
            "expectedStatuses": maybe(st.lists(st.sampled_from([200, "200-399", 99, "x"]),
                                               max_size=2)),
            "enabled": maybe(st.booleans())})),
        "outlierDetection": maybe(st.fixed_dictionaries({}, optional={
            "consecutiveErrors": maybe(st.integers(-1, 2000)),
            "baseEjectionTime": maybe(durations),
            "maxEjectionPercent": maybe(st.integers(-1, 101))})),
        "loadBalancer": maybe(st.fixed_dictionaries({"type": maybe(lb_names)}, optional={
            "hashOn": maybe(persistence)})),
        "persistence": maybe(persistence),
        "timeouts": maybe(st.fixed_dictionaries({}, optional={
            "connect": maybe(durations), "request": maybe(durations),
            "idle": maybe(durations)})),
        "retry": maybe(st.fixed_dictionaries({}, optional={
            "attempts": maybe(st.integers(-1, 20)),
            "retryOn": maybe(st.lists(st.sampled_from(["5xx", "reset", "x"]), max_size=2)),
            "statusCodes": maybe(st.lists(st.integers(100, 700), max_size=2)),
            "perTryTimeout": maybe(durations)}))})
    lb = st.fixed_dictionaries({"targetRefs": maybe(st.lists(target, max_size=2))}, optional={
        "sessionPersistence": maybe(st.fixed_dictionaries({}, optional={
            "type": maybe(st.sampled_from(["Cookie", "Header", "x"])),
            "sessionName": maybe(st.sampled_from(["s", "a b"])),
            "absoluteTimeout": maybe(durations), "idleTimeout": maybe(durations),
            "cookieConfig": maybe(st.fixed_dictionaries({"lifetimeType": st.sampled_from(
                ["Permanent", "Session", "x"])}))}))})
    return st.one_of(
        st.fixed_dictionaries({"apiVersion": st.just("podway.io/v1alpha1"),
                               "kind": st.just("TrafficPolicy"), "metadata": meta(),
                               "spec": maybe(spec)}),
        st.fixed_dictionaries({"apiVersion": st.just("gateway.networking.k8s.io/v1alpha2"),
                               "kind": st.just("BackendLBPolicy"), "metadata": meta(),
                               "spec": maybe(lb)}))


manifests = st.lists(st.one_of(ingress(), service(), endpoint_slice(), other(),
                               traffic_policy()), max_size=8)
