"""L4 client address: transparent listeners (``podway.io/client-ip``) and the reporting of
``sessionAffinityConfig.clientIP.timeoutSeconds``, which hashing cannot honour."""

from __future__ import annotations

from typing import Any

from podway.ir import ListenerProtocol
from podway.model import Snapshot
from podway.model.loader import load_text
from podway.translate import Result, TranslateOptions, translate
from podway.translate.core.problems import Severity
from tests import builders
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

GATEWAY = OUR_CLASS_YAML + """---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: podway
  listeners: [{name: tcp, protocol: TCP, port: 5432}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: db, namespace: shop}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: %s}]
"""


def service(name: str, *, annotation: str | None = None, type_: str = "LoadBalancer",
            protocol: str = "TCP", port: int = 5432, **spec: Any) -> str:
    """Service shop/<name> with one port named p; ``annotation``: its podway.io/client-ip."""
    notes = {"podway.io/client-ip": annotation} if annotation is not None else {}
    return builders.manifest(builders.service(
        name, port, None, type_=type_, namespace="shop", annotations=notes, port_name="p",
        protocol=protocol, **spec))


def run(*docs: str) -> Result:
    loaded = load_text("---\n".join(docs))
    assert not loaded.errors, loaded.errors
    return translate(Snapshot.of_objects(loaded.objects),
                     TranslateOptions(address="198.18.0.1"))


def reasons(result: Result, name: str) -> list[tuple[str, str]]:
    return [(p.reason, p.message) for p in result.problems if p.ref.name == name]


def test_a_transparent_load_balancer_port_binds_a_transparent_listener() -> None:
    """The Service's TCP listener is transparent; no warning; another Service's is not."""
    result = run(service("db", annotation="Transparent"), service("plain", port=5433))
    by_origin = {listener.origins[0].name: listener for listener in result.ir.listeners}
    assert by_origin["db"].transparent
    assert not by_origin["plain"].transparent
    assert reasons(result, "db") == []


def test_a_bad_value_warns_and_leaves_the_engine_address() -> None:
    """An unknown value is one InvalidAnnotation warning; "none" is accepted silently."""
    result = run(service("db", annotation="yes please"), service("other", annotation="none",
                                                                      port=5433))
    assert not any(listener.transparent for listener in result.ir.listeners)
    assert [r for r, _ in reasons(result, "db")] == ["InvalidAnnotation"]
    assert reasons(result, "other") == []


def test_a_listener_shared_with_a_service_that_did_not_opt_in_stays_as_it_is() -> None:
    """A TCPRoute splitting between a transparent and a plain Service: the listener keeps the
    engine's address (the engine sets it per listener) and the opted-in Service is told why."""
    split = "[{name: db, port: 5432}, {name: plain, port: 5432}]"
    result = run(GATEWAY % split, service("db", annotation="transparent", type_="ClusterIP"),
                 service("plain", type_="ClusterIP"))
    (listener,) = result.ir.listeners
    assert not listener.transparent
    ((reason, message),) = reasons(result, "db")
    assert reason == "TransparentNotApplied"
    assert "shop/plain" in message


def test_a_route_to_transparent_services_only_is_transparent() -> None:
    """Every pool of the TCPRoute opted in: its Gateway listener is transparent."""
    result = run(GATEWAY % "[{name: db, port: 5432}]",
                 service("db", annotation="transparent", type_="ClusterIP"))
    (listener,) = result.ir.listeners
    assert listener.protocol is ListenerProtocol.TCP
    assert listener.transparent
    assert reasons(result, "db") == []


def test_a_udp_port_is_transparent_and_an_http_only_service_is_told_it_is_not() -> None:
    """A UDP LoadBalancer port is served transparently; a Service only served over HTTP (an
    Ingress backend) gets a warning and the HTTP listener stays as it is."""
    ingress = ("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, "
               "namespace: shop}\nspec:\n  ingressClassName: podway\n  defaultBackend: "
               "{service: {name: web, port: {number: 5432}}}\n")
    result = run(service("dns", annotation="transparent", protocol="UDP"),
                 service("web", annotation="transparent", type_="ClusterIP"), ingress)
    by_protocol = {listener.protocol: listener for listener in result.ir.listeners}
    assert by_protocol[ListenerProtocol.UDP].transparent
    assert not by_protocol[ListenerProtocol.HTTP].transparent
    assert reasons(result, "dns") == []
    ((reason, message),) = reasons(result, "web")
    assert reason == "TransparentNotApplied"
    assert "HTTP" in message


def test_an_affinity_timeout_other_than_the_default_is_reported() -> None:
    """ClientIP affinity hashes without idle expiry: a timeoutSeconds the user chose is one
    AffinityTimeoutNotApplied warning; the default the API server fills in (10800) and no
    timeout at all are not."""
    def affinity(timeout: int | None) -> dict[str, Any]:
        config = {} if timeout is None else {
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": timeout}}}
        return {"sessionAffinity": "ClientIP", **config}

    result = run(service("short", **affinity(60)), service("default", **affinity(10800), port=1),
                 service("unset", **affinity(None), port=2))
    ((reason, message),) = reasons(result, "short")
    assert reason == "AffinityTimeoutNotApplied"
    assert "60" in message
    assert reasons(result, "default") == reasons(result, "unset") == []
    problem = next(p for p in result.problems if p.ref.name == "short")
    assert problem.field == "spec.sessionAffinityConfig.clientIP.timeoutSeconds"
    assert problem.severity is Severity.WARNING
