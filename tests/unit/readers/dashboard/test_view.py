"""The dashboard's document: the tree of a state, each route's verdict, each member's health."""

from __future__ import annotations

from types import MappingProxyType

from podway.model import Snapshot
from podway.model.loader import load_text
from podway.pipeline import Pipeline, State
from podway.readers.dashboard.engine_view import HostHealth, Sample
from podway.readers.dashboard.view import ViewOptions, build
from podway.sources.base import Source, SourceUpdate
from podway.translate import TranslateOptions

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
ports: [{name: http, port: 8080}]
endpoints:
- {addresses: [10.1.0.1], conditions: {ready: READY_A}}
- {addresses: [10.1.0.2], conditions: {ready: true}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  ingressClassName: podway
  rules:
  - host: shop.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /gone, pathType: Prefix, backend: {service: {name: nothing, port: {number: 80}}}}
"""
OPTIONS = ViewOptions(mode="clusterip", explain_args=("--manifests", "/srv/lb"))


class _NoSource:
    async def watch(self):  # type: ignore[no-untyped-def]  # never iterated here
        yield


def state(*, a_ready: bool = True, all_down: bool = False) -> State:
    text = SERVICE.replace("READY_A", "true" if a_ready else "false")
    if all_down:
        text = text.replace("{ready: true}", "{ready: false}")
    source: Source = _NoSource()  # type: ignore[assignment]
    pipeline = Pipeline(source, translate=TranslateOptions(address="127.0.0.1", http_port=8080))
    return pipeline.apply(SourceUpdate(Snapshot.of_objects(load_text(text).objects), ()))


def routes(document: dict[str, object]) -> dict[str, dict[str, object]]:
    listener, = document["listeners"]  # type: ignore[misc]
    return {r["match"]: r for vh in listener["virtual_hosts"] for r in vh["routes"]}


def members(document: dict[str, object]) -> dict[str, dict[str, object]]:
    pool, = document["pools"]  # type: ignore[misc]
    return {m["address"]: m for m in pool["members"]}


def test_the_tree_of_a_state() -> None:
    """Listener → virtual host → routes with pools, and pools → members with mode and health."""
    document = build(state(), options=OPTIONS)
    listener, = document["listeners"]
    assert (listener["address"], listener["port"], listener["protocol"]) == (
        "127.0.0.1", 8080, "HTTP")
    assert routes(document)["prefix /"]["pools"] == [{"name": "pool/shop/web/80", "weight": 1}]
    assert routes(document)["prefix /"]["verdict"] == "ok"
    assert {m["health"] for m in members(document).values()} == {"healthy"}
    assert {m["mode"] for m in members(document).values()} == {"clusterip"}


def test_a_not_ready_member_is_unhealthy_with_why() -> None:
    """EndpointSlice ready: false → unhealthy, and the page says it is Kubernetes saying so."""
    member = members(build(state(a_ready=False), options=OPTIONS))["10.1.0.1"]
    assert member["health"] == "unhealthy"
    assert "not ready" in str(member["why"])


def test_envoy_health_overrides_kubernetes_ready() -> None:
    """A member Kubernetes calls ready but Envoy's checks fail is unhealthy, with Envoy's
    reason; if it was the last one, its route's verdict becomes 503."""
    sample = Sample(taken_at=1.0, hosts=MappingProxyType({
        ("pool/shop/web/80", "10.1.0.2:8080"): HostHealth(healthy=False,
                                                          reason="failed active health check")}))
    document = build(state(a_ready=False), options=OPTIONS, now=sample)
    assert members(document)["10.1.0.2"]["why"] == "failed active health check"
    assert routes(document)["prefix /"]["verdict"] == "503"


def test_error_rows_carry_their_explain_command() -> None:
    """A route with no ready member is 503, so is one whose Service does not exist (the
    translator made it answer 503); both carry the `podway explain` command for a request
    they match, and a link to /explain; a healthy route carries none."""
    document = build(state(all_down=True), options=OPTIONS)
    down, gone = routes(document)["prefix /"], routes(document)["prefix /gone"]
    assert down["verdict"] == "503"
    assert gone["verdict"] == "503"
    assert "itself" in gone["why"]
    assert "no pool" in down["why"]
    assert down["explain"]["command"] == (
        "podway explain --manifests /srv/lb http://shop.test:8080/")
    assert gone["explain"]["href"] == "/explain?url=http%3A%2F%2Fshop.test%3A8080%2Fgone"
    healthy = build(state(), options=OPTIONS)
    assert "explain" not in routes(healthy)["prefix /"]


def test_no_state_yet_is_an_empty_page() -> None:
    document = build(None, options=OPTIONS)
    assert document["ready"] is False
    assert document["listeners"] == []


def test_an_unresolved_backend_answers_its_status() -> None:
    """A weighted backend that resolves to no pool answers its status (500 by default)."""
    from podway.ir import Forward, Route, RouteMatch, WeightedPool
    from podway.model.base import ObjectRef
    from podway.readers.dashboard.view import verdict

    route = Route(name="r", match=RouteMatch(), origin=ObjectRef("HTTPRoute", "a", "r"),
                  action=Forward(backends=(WeightedPool(pool=None, weight=1),)))
    assert verdict(route, {}, None) == ("500", "a backend of this route does not resolve")
