"""IncrementalTranslator: endpoint changes touch only their pools and equal a full translation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from podway.ir import MemberState
from podway.model import EndpointSlice, Ingress, K8sObject, Node, Pod, Service, Snapshot
from podway.model.loader import load_text
from podway.model.snapshot import Key
from podway.translate import (
    BackendMode,
    IncrementalTranslator,
    Result,
    TranslateOptions,
    translate,
)
from tests import builders
from tests.certs import tls_secret

BASE = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  ingressClassName: podway
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec: {ports: [{port: 80}]}
"""

OPTS = TranslateOptions(address="198.18.0.1")


def slice_for(service: str, name: str, addresses: list[str], ready: bool = True) -> EndpointSlice:
    return EndpointSlice.model_validate(builders.endpoint_slice(
        service, name=name, namespace="shop", port_name=None,
        endpoints=[builders.endpoint(a, ready=ready, node=None) for a in addresses]))


def base_snapshot() -> Snapshot:
    objects = [*load_text(BASE).objects, slice_for("web", "web-1", ["198.18.1.1"]),
               slice_for("api", "api-1", ["198.18.2.1"])]
    return Snapshot.of_objects(objects)


def test_endpoint_change_replaces_only_its_pool() -> None:
    """A changed EndpointSlice keeps listeners and other pools identity-equal."""
    inc = IncrementalTranslator(OPTS)
    s0 = base_snapshot()
    r0 = inc.update(s0)
    new = slice_for("web", "web-1", ["198.18.1.1", "198.18.1.2"])
    s1 = s0.replace(EndpointSlice.KIND, {new.key: new})
    r1 = inc.update(s1, changed=[(EndpointSlice.KIND, new.key)])
    assert r1.ir.listeners is r0.ir.listeners
    assert r1.ir.pools["pool/shop/api/80"] is r0.ir.pools["pool/shop/api/80"]
    assert [m.address for m in r1.ir.pools["pool/shop/web/80"].members] == [
        "198.18.1.1", "198.18.1.2"]
    assert r1 == translate(s1, OPTS)


def test_endpoint_change_found_by_diff_when_not_named() -> None:
    """Without an explicit change list, the snapshot diff finds the changed slice."""
    inc = IncrementalTranslator(OPTS)
    s0 = base_snapshot()
    r0 = inc.update(s0)
    gone = ("shop", "api-1")
    s1 = s0.replace(EndpointSlice.KIND, {gone: None})
    r1 = inc.update(s1)
    assert r1.ir.listeners is r0.ir.listeners
    assert r1.ir.pools["pool/shop/api/80"].members == ()
    assert r1 == translate(s1, OPTS)


def test_unrelated_slice_change_returns_the_same_result() -> None:
    """A slice of a Service no route uses changes nothing at all."""
    inc = IncrementalTranslator(OPTS)
    s0 = base_snapshot()
    r0 = inc.update(s0)
    other = slice_for("unused", "unused-1", ["198.18.9.9"])
    assert inc.update(s0.replace(EndpointSlice.KIND, {other.key: other})) is r0


def test_structural_change_retranslates() -> None:
    """A changed Service re-runs structure and still equals a full translation."""
    inc = IncrementalTranslator(OPTS)
    s0 = base_snapshot()
    inc.update(s0)
    objects = load_text(BASE.replace("name: api, port: {number: 80}", "name: gone, port: "
                                     "{number: 80}")).objects
    s1 = Snapshot.of_objects([*objects, *s0.kind(EndpointSlice).values()])
    assert inc.update(s1) == translate(s1, OPTS)


edits = st.lists(st.tuples(
    st.sampled_from(["web", "api", "unused"]),  # service label
    st.sampled_from(["s1", "s2", "s3"]),  # slice name
    st.lists(st.sampled_from(["198.18.1.1", "198.18.1.2", "198.18.1.3"]), max_size=3),
    st.booleans(),  # ready
    st.booleans()),  # delete instead
    max_size=12)


@settings(max_examples=150, deadline=None)
@given(edits)
def test_incremental_equals_full_after_any_edit_sequence(steps: list[tuple[
        str, str, list[str], bool, bool]]) -> None:
    """After every endpoint edit, the incremental result equals translating from scratch."""
    inc = IncrementalTranslator(OPTS)
    snapshot = base_snapshot()
    inc.update(snapshot)
    for service, name, addresses, ready, delete in steps:
        key = ("shop", name)
        change = None if delete else slice_for(service, name, addresses, ready)
        snapshot = snapshot.replace(EndpointSlice.KIND, {key: change})
        result = inc.update(snapshot, changed=[(EndpointSlice.KIND, key)])
        assert result == translate(snapshot, OPTS)


def node(name: str, address: str, ready: bool = True) -> Node:
    return Node.model_validate({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": address}],
                   "conditions": [{"type": "Ready", "status": str(ready)}]}})


def test_nodeport_mode_node_change_moves_members_only() -> None:
    """In nodeport mode a Node change re-resolves pools without re-translating routes."""
    opts = TranslateOptions(address="198.18.0.1", mode=BackendMode.NODEPORT)
    text = BASE.replace("spec: {ports: [{port: 80}]}",
                        "spec: {type: NodePort, ports: [{port: 80, nodePort: 30080}]}")
    s0 = Snapshot.of_objects([*load_text(text).objects, node("n1", "198.18.10.1")])
    inc = IncrementalTranslator(opts)
    r0 = inc.update(s0)
    added = node("n2", "198.18.10.2", ready=False)
    s1 = s0.replace(Node.KIND, {added.key: added})
    r1 = inc.update(s1, changed=[(Node.KIND, added.key)])
    assert r1.ir.listeners is r0.ir.listeners
    assert [(m.address, m.port, m.state) for m in r1.ir.pools["pool/shop/web/80"].members] == [
        ("198.18.10.1", 30080, MemberState.READY), ("198.18.10.2", 30080, MemberState.NOT_READY)]
    assert r1 == translate(s1, opts)


def test_node_change_is_structural_in_clusterip_mode() -> None:
    """Outside nodeport mode a Node is not an endpoint kind: the result still equals full."""
    inc = IncrementalTranslator(OPTS)
    s0 = base_snapshot()
    inc.update(s0)
    added = node("n1", "198.18.10.1")
    s1 = s0.replace(Node.KIND, {added.key: added})
    assert inc.update(s1, changed=[(Node.KIND, added.key)]) == translate(s1, OPTS)


def npl_pod(name: str, node_port: int | None) -> Pod:
    annotations = {} if node_port is None else {"nodeportlocal.antrea.io": (
        f'[{{"podPort":8080,"nodeIP":"198.18.20.1","nodePort":{node_port},'
        '"protocol":"tcp","ipFamily":"IPv4"}]')}
    return Pod.model_validate({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "shop", "annotations": annotations}})


def pod_slice(service: str, name: str, pods: list[str]) -> EndpointSlice:
    return EndpointSlice.model_validate(builders.endpoint_slice(
        service, name=name, namespace="shop", port_name=None,
        endpoints=[builders.endpoint(f"198.18.5.{i + 1}", node=None, pod=pod, namespace="shop")
                   for i, pod in enumerate(pods)]))


NPL_OPTS = TranslateOptions(address="198.18.0.1", mode=BackendMode.NODEPORTLOCAL)
npl_edits = st.lists(st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(["p1", "p2", "p3"]),
              st.one_of(st.none(), st.integers(61000, 61003))),
    st.tuples(st.just("slice"), st.sampled_from(["web", "api"]),
              st.lists(st.sampled_from(["p1", "p2", "p3"]), max_size=3, unique=True))),
    max_size=10)


@settings(max_examples=100, deadline=None)
@given(npl_edits)
def test_nodeportlocal_incremental_equals_full(steps: list[tuple[str, str, object]]) -> None:
    """In nodeportlocal mode, pod annotation and slice edits give the full translation's result."""
    inc = IncrementalTranslator(NPL_OPTS)
    snapshot = Snapshot.of_objects([*load_text(BASE).objects, npl_pod("p1", 61000)])
    r0 = inc.update(snapshot)
    for what, name, value in steps:
        if what == "pod":
            assert value is None or isinstance(value, int)
            pod = npl_pod(name, value)
            snapshot = snapshot.replace(Pod.KIND, {pod.key: pod})
            result = inc.update(snapshot, changed=[(Pod.KIND, pod.key)])
        else:
            assert isinstance(value, list)
            item = pod_slice(name, f"{name}-1", value)
            snapshot = snapshot.replace(EndpointSlice.KIND, {item.key: item})
            result = inc.update(snapshot, changed=[(EndpointSlice.KIND, item.key)])
        assert result.ir.listeners is r0.ir.listeners
        assert result == translate(snapshot, NPL_OPTS)


def service_obj(name: str, port: int, node_port: int) -> K8sObject:
    return Service.model_validate(builders.service(
        name, port, 8080, type_="NodePort", namespace="shop", node_port=node_port,
        port_name=None, annotations={"nodeportlocal.antrea.io/enabled": "true"}))


def ingress_obj(backend: str) -> K8sObject:
    return Ingress.model_validate(builders.ingress(
        "shop", namespace="shop", class_name="podway", rules=[{"host": "shop.example.com",
            "http": {"paths": [builders.ingress_path("/", backend),
                               builders.ingress_path("/api", "api")]}}]))


mixed_steps = st.lists(st.one_of(
    st.tuples(st.just("slice"), st.sampled_from(["web", "api"]),
              st.lists(st.sampled_from(["p1", "p2", "p3"]), max_size=3, unique=True)),
    st.tuples(st.just("service"), st.sampled_from(["web", "api"]), st.sampled_from([80, 81]),
              st.sampled_from([30080, 30081])),
    st.tuples(st.just("ingress"), st.sampled_from(["web", "api", "ghost"])),
    st.tuples(st.just("node"), st.sampled_from(["n1", "n2"]), st.booleans()),
    st.tuples(st.just("pod"), st.sampled_from(["p1", "p2", "p3"]),
              st.one_of(st.none(), st.integers(61000, 61002)))),
    max_size=10)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list(BackendMode)), mixed_steps)
def test_mixed_structural_and_endpoint_edits_equal_full(
        mode: BackendMode, steps: list[tuple[Any, ...]]) -> None:
    """Any mix of structural and endpoint edits, batched or not, equals a full translation."""
    opts = TranslateOptions(address="198.18.0.1", mode=mode)
    objects: list[K8sObject] = [ingress_obj("web"), service_obj("web", 80, 30080),
                                service_obj("api", 80, 30081), node("n1", "198.18.10.1")]
    snapshot = Snapshot.of_objects(objects)
    inc = IncrementalTranslator(opts)
    inc.update(snapshot)
    batch: list[tuple[str, Key]] = []
    for i, step in enumerate(steps):
        obj: K8sObject
        if step[0] == "slice":
            obj = pod_slice(step[1], f"{step[1]}-1", step[2])
        elif step[0] == "service":
            obj = service_obj(step[1], step[2], step[3])
        elif step[0] == "ingress":
            obj = ingress_obj(step[1])
        elif step[0] == "node":
            obj = node(step[1], f"198.18.10.{step[1][1]}", ready=step[2])
        else:
            obj = npl_pod(step[1], step[2])
        snapshot = snapshot.replace(obj.KIND, {obj.key: obj})
        batch.append((obj.KIND, obj.key))
        if i % 2:  # every other step: apply the batch of two changes together
            assert inc.update(snapshot, changed=batch) == translate(snapshot, opts)
            batch = []
    assert inc.update(snapshot, changed=batch) == translate(snapshot, opts)


TLS_INGRESS = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: secure, namespace: shop}
spec:
  ingressClassName: podway
  tls: [{hosts: [secure.example.com], secretName: cert}]
  rules:
  - host: secure.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}]
"""
SECRET = tls_secret("cert", "shop")


def test_unchanged_ingress_keeps_its_route_objects() -> None:
    """Editing one Ingress rebuilds its routes only; another Ingress's routes stay identical."""
    inc = IncrementalTranslator(OPTS)
    objects = [*load_text(BASE + "---" + TLS_INGRESS).objects]
    s0 = Snapshot.of_objects(objects)
    r0 = inc.update(s0)
    shop = s0.get(Ingress, "shop", "shop")
    assert shop is not None
    edited = shop.model_copy(update={"metadata": shop.metadata.model_copy(
        update={"labels": {"edited": "yes"}})})
    s1 = s0.replace(Ingress.KIND, {edited.key: edited})
    r1 = inc.update(s1, changed=[(Ingress.KIND, edited.key)])

    def routes(result: Result, origin: str) -> list[object]:
        return [r for lst in result.ir.listeners for v in lst.virtual_hosts for r in v.routes
                if r.origin.name == origin]

    assert all(a is b for a, b in zip(routes(r0, "secure"), routes(r1, "secure"), strict=True))
    assert not any(a is b for a, b in zip(routes(r0, "shop"), routes(r1, "shop"), strict=True))
    assert r1 == translate(s1, OPTS)


def test_secret_arriving_later_invalidates_the_ingress_part() -> None:
    """A TLS Secret created after its Ingress brings the HTTPS listener, as a full run would."""
    inc = IncrementalTranslator(OPTS)
    s0 = Snapshot.of_objects(load_text(BASE + "---" + TLS_INGRESS).objects)
    assert [lst.name for lst in inc.update(s0).ir.listeners] == ["ingress/http"]
    [secret] = load_text(SECRET).objects
    s1 = s0.replace(secret.KIND, {secret.key: secret})
    r1 = inc.update(s1, changed=[(secret.KIND, secret.key)])
    assert [lst.name for lst in r1.ir.listeners] == ["ingress/http", "ingress/https"]
    assert r1 == translate(s1, OPTS)
