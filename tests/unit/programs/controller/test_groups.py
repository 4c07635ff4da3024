"""Engine groups, pure: a group's part of the IR holds its Services' and Gateways' listeners and
exactly the pools they route to; a pool shared across groups goes to each; what names no
group (an Ingress, an unannotated Service) is the default group's."""

from __future__ import annotations

from podway.model import Snapshot
from podway.model.gateway import Gateway
from podway.model.loader import load_text
from podway.programs.controller.groups import DEFAULT_GROUP, group_of, subset
from podway.programs.ipam.claims import claims_of
from podway.translate import TranslateOptions, translate
from tests.unit.translate.gateway_strategies import OUR_CLASS_YAML

MANIFESTS = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop, annotations: {podway.io/engine-group: edge-a}}
spec: {type: LoadBalancer, selector: {app: web}, ports: [{name: http, port: 8001}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec: {type: LoadBalancer, selector: {app: api}, ports: [{name: http, port: 8002}]}
---
""" + OUR_CLASS_YAML + """---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: shop, annotations: {podway.io/engine-group: edge-b}}
spec:
  gatewayClassName: podway
  listeners: [{name: http, protocol: HTTP, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: shop}
spec:
  parentRefs: [{name: edge}]
  hostnames: [shop.test]
  rules: [{backendRefs: [{name: web, port: 8001}]}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: legacy, namespace: shop}
spec:
  ingressClassName: podway
  rules:
  - host: legacy.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 8002}}}}
      - {path: /web, pathType: Prefix, backend: {service: {name: web, port: {number: 8001}}}}
"""


def names(ir: object) -> tuple[set[str], set[str]]:
    return ({item.name for item in ir.listeners},  # type: ignore[attr-defined]
            set(ir.pools))  # type: ignore[attr-defined]


def test_each_group_gets_its_listeners_and_the_pools_they_use() -> None:
    """edge-a: the web Service's listener and pool; edge-b: the Gateway's listener and the
    web pool its route uses; default: the api Service and the Ingress listener with their api
    pools; an unknown group: nothing. Together they cover every listener once."""
    snapshot = Snapshot.of_objects(load_text(MANIFESTS).objects)
    ir = translate(snapshot, TranslateOptions(address="198.18.0.1", http_port=8081)).ir
    groups = group_of(snapshot)
    a_listeners, a_pools = names(subset(ir, "edge-a", groups))
    b_listeners, b_pools = names(subset(ir, "edge-b", groups))
    d_listeners, d_pools = names(subset(ir, DEFAULT_GROUP, groups))
    assert a_pools == {"pool/shop/web/8001/tcp"}  # the Service's own L4 listener
    assert b_pools == {"pool/shop/web/8001"}  # the Gateway's route forwards to web over HTTP
    # the api Service's L4 pool and the Ingress's HTTP pools, web's shared with edge-b
    assert d_pools == {"pool/shop/api/8002/tcp", "pool/shop/api/8002", "pool/shop/web/8001"}
    assert a_listeners.isdisjoint(b_listeners)
    assert a_listeners.isdisjoint(d_listeners)
    assert b_listeners.isdisjoint(d_listeners)
    assert a_listeners | b_listeners | d_listeners == {item.name for item in ir.listeners}
    assert names(subset(ir, "nobody", groups)) == (set(), set())


def test_gateway_infrastructure_label_chooses_the_group_for_engines_and_vip_pools() -> None:
    """A Gateway without the annotation but with ``spec.infrastructure.labels`` naming a
    group is that group's, for its engines and for the IPAM's pool choice alike; the
    annotation wins over the label."""
    text = MANIFESTS.replace(
        "metadata: {name: edge, namespace: shop, annotations: {podway.io/engine-group: edge-b}}\n"
        "spec:\n  gatewayClassName: podway\n",
        "metadata: {name: edge, namespace: shop}\nspec:\n  gatewayClassName: podway\n"
        "  infrastructure: {labels: {podway.io/engine-group: edge-c}}\n")
    snapshot = Snapshot.of_objects(load_text(text).objects)
    gateway = snapshot.get(Gateway, "shop", "edge")
    assert gateway is not None
    assert gateway.engine_group() == "edge-c"
    ir = translate(snapshot, TranslateOptions(address="198.18.0.1", http_port=8081)).ir
    listeners, pools = names(subset(ir, "edge-c", group_of(snapshot)))
    assert pools == {"pool/shop/web/8001"}
    assert listeners
    claim = next(c for c in claims_of(snapshot, TranslateOptions()) if c.ref.kind == "Gateway")
    assert claim.engine_group == "edge-c"
    both = gateway.model_copy(update={"metadata": gateway.metadata.model_copy(update={
        "annotations": {"podway.io/engine-group": "edge-b"}})})
    assert both.engine_group() == "edge-b"


def test_gateway_class_parameters_choose_the_group_of_gateways_without_their_own() -> None:
    """A GatewayClass whose parametersRef names engineGroup puts its Gateways that choose no
    group themselves in that group, for engines and VIP pools alike; invalid parameters name
    no group (and the Gateways are not served: golden gateway-parameters)."""
    text = MANIFESTS.replace(
        "metadata: {name: edge, namespace: shop, annotations: {podway.io/engine-group: edge-b}}\n",
        "metadata: {name: edge, namespace: shop}\n").replace(
        "  controllerName: podway.io/gateway-controller\n",
        "  controllerName: podway.io/gateway-controller\n"
        "  parametersRef: {group: '', kind: ConfigMap, name: params, namespace: shop}\n") + """
---
apiVersion: v1
kind: ConfigMap
metadata: {name: params, namespace: shop}
data: {engineGroup: edge-p}
"""
    snapshot = Snapshot.of_objects(load_text(text).objects)
    ir = translate(snapshot, TranslateOptions(address="198.18.0.1", http_port=8081)).ir
    listeners, pools = names(subset(ir, "edge-p", group_of(snapshot)))
    assert listeners
    assert pools == {"pool/shop/web/8001"}
    claim = next(c for c in claims_of(snapshot, TranslateOptions()) if c.ref.kind == "Gateway")
    assert claim.engine_group == "edge-p"
    broken = Snapshot.of_objects(load_text(text.replace("engineGroup: edge-p",
                                                        "engineGroup: edge-p, x: y")).objects)
    gateway_ref = next(ls.origins[0] for ls in ir.listeners if ls.origins[0].kind == "Gateway")
    assert group_of(broken)(gateway_ref) == DEFAULT_GROUP


def test_a_gateway_class_config_chooses_the_group_as_a_config_map_does() -> None:
    """parametersRef to Podway's GatewayClassConfig: the same placement as the ConfigMap."""
    text = MANIFESTS.replace(
        "metadata: {name: edge, namespace: shop, annotations: {podway.io/engine-group: edge-b}}\n",
        "metadata: {name: edge, namespace: shop}\n").replace(
        "  controllerName: podway.io/gateway-controller\n",
        "  controllerName: podway.io/gateway-controller\n"
        "  parametersRef: {group: podway.io, kind: GatewayClassConfig, name: params}\n") + """
---
apiVersion: podway.io/v1alpha1
kind: GatewayClassConfig
metadata: {name: params}
spec: {engineGroup: edge-g}
"""
    snapshot = Snapshot.of_objects(load_text(text).objects)
    ir = translate(snapshot, TranslateOptions(address="198.18.0.1", http_port=8081)).ir
    listeners, pools = names(subset(ir, "edge-g", group_of(snapshot)))
    assert listeners
    assert pools == {"pool/shop/web/8001"}
    claim = next(c for c in claims_of(snapshot, TranslateOptions()) if c.ref.kind == "Gateway")
    assert claim.engine_group == "edge-g"
